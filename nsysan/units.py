"""Units and formatting. Times are int64 nanoseconds everywhere until a renderer formats them."""

from __future__ import annotations

import re

NS_PER_US = 1_000
NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000


def fmt_ns(ns: float | int | None) -> str:
    """A duration in the most readable unit: ``950 ns``, ``12.3 us``, ``4.56 ms``, ``1.23 s``."""
    if ns is None:
        return "-"
    v = float(ns)
    a = abs(v)
    if a < NS_PER_US:
        return f"{v:.0f} ns"
    if a < NS_PER_MS:
        return f"{v / NS_PER_US:.1f} us"
    if a < NS_PER_S:
        return f"{v / NS_PER_MS:.2f} ms"
    return f"{v / NS_PER_S:.3f} s"


def fmt_bytes(n: float | int | None) -> str:
    if n is None:
        return "-"
    v = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if abs(v) < 1000 or unit == "GB":
            return f"{v:.0f} {unit}" if unit == "B" else f"{v:.2f} {unit}"
        v /= 1000
    return f"{v:.2f} TB"  # pragma: no cover


def fmt_rate(bytes_per_s: float | None) -> str:
    if bytes_per_s is None:
        return "-"
    return f"{bytes_per_s / 1e9:.2f} GB/s"


def fmt_pct(frac: float | None) -> str:
    """A 0..1 fraction as a percentage."""
    if frac is None:
        return "-"
    return f"{100 * frac:.1f}%"


# C0 and C1 control characters (ESC starts terminal escape sequences: titles, OSC 8 links, clearing
# the screen), DEL, bidirectional overrides and marks (text that reads differently from what it is),
# the Unicode line and paragraph separators (a name that fakes a new line) and lone surrogates (bytes
# of a file name that are not UTF-8)
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")


def _escape_char(m: re.Match[str]) -> str:
    c = ord(m.group())
    if 0xDC80 <= c <= 0xDCFF:  # a byte that was not UTF-8 (surrogateescape)
        return f"\\x{c - 0xDC00:02x}"
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def clean_text(text: object) -> str:
    """Text from a trace or a file name, safe to print on a terminal: control characters, escape
    sequences, bidirectional overrides and undecodable bytes are shown escaped (``\\x1b``), never sent
    raw. (Rich markup is not interpreted either where the CLI prints through ``rich.text.Text``.)"""
    s = text if isinstance(text, str) else str(text)
    return _UNSAFE.sub(_escape_char, s) if _UNSAFE.search(s) else s
