"""Units and formatting. Times are int64 nanoseconds everywhere until a renderer formats them."""

from __future__ import annotations

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
