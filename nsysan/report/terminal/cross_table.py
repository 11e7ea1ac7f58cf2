"""What ``nsysan analyze`` prints after several traces: the cross-trace table, one row a trace (rank)
with its p50, GPU busy, top finding, slowest kernel and straggler mark, fitted to the terminal's
width."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Any

from nsysan.report.terminal.text import short_kernel_name
from nsysan.units import clean_text


def print_cross(summary: dict[str, Any]) -> None:
    """The cross-trace table: per trace (rank) p50, GPU busy, top finding, slowest kernel, stragglers;
    fitted to the terminal's width (or ``COLUMNS``; one line a trace when piped without it)."""
    import shutil

    width = shutil.get_terminal_size().columns if (os.isatty(1) or "COLUMNS" in os.environ) else 0
    for line in cross_lines(summary, width):
        print(line)


CROSS_P50_W, CROSS_BUSY_W, CROSS_FINDING_MAX = 10, 9, 26


CROSS_KERNEL_MIN = 24  # narrower than this, the slowest kernel goes on a line of its own under its trace


CROSS_TEXT_MIN = 16  # the trace column's least width; narrower, the top finding goes under its trace too


def cross_lines(summary: dict[str, Any], width: int = 0) -> list[str]:
    """``print_cross``'s lines. ``width`` 0: one line a trace, nothing cut (for grep). Else no line
    is longer than ``width``: the columns by priority (trace, p50, GPU busy, top finding, slowest
    kernel), a name too long for its column wrapped within it (a token broken only where it alone
    is wider), and where the width runs out the slowest kernel, then the top finding, on indented
    lines of their own under the trace's row."""
    from nsysan.units import fmt_ns, fmt_pct

    rows = []
    for r in summary["traces"]:
        rows.append({"trace": clean_text(Path(r["trace"]).name) + (" STRAGGLER" if r["straggler"] else ""),
                     "p50": fmt_ns(r["p50_ns"]), "busy": fmt_pct(r["busy"][0]["busy_frac"]) if r["busy"] else "-",
                     "finding": clean_text(r["top_finding"] or "-"),
                     "kernel": clean_text(short_kernel_name(str(r["slowest_kernel"] or "-")))})
    head = {"trace": "trace", "p50": "p50", "busy": "GPU busy", "finding": "top finding", "kernel": "slowest kernel"}
    longest = {k: max([len(head[k])] + [len(r[k]) for r in rows]) for k in head}
    fixed = CROSS_P50_W + 1 + CROSS_BUSY_W + 1
    if width <= 0:
        cols = {"trace": longest["trace"], "finding": longest["finding"], "kernel": longest["kernel"]}
        below: list[str] = []
    else:
        fw = min(longest["finding"], CROSS_FINDING_MAX)
        rest = width - fixed - (fw + 1)
        below = []
        if rest < CROSS_TEXT_MIN:  # too narrow for the finding beside the trace: both under it
            below, rest, fw = ["finding", "kernel"], width - fixed, 0
        tw = min(longest["trace"], max(CROSS_TEXT_MIN, rest // 2))
        if not below and rest - tw - 1 < CROSS_KERNEL_MIN:
            below = ["kernel"]
        cols = {"trace": max(1, min(longest["trace"], rest)) if below else tw}
        if "finding" not in below:
            cols["finding"] = fw
        if not below:
            cols["kernel"] = min(longest["kernel"], rest - tw - 1)
    label = {"finding": "top finding: ", "kernel": "slowest kernel: "}

    def row(cells: dict[str, str]) -> list[str]:
        wrapped = {k: _cell(cells[k], w, width > 0) for k, w in cols.items()}
        n = max(len(v) for v in wrapped.values())
        out = []
        for i in range(n):
            def at(k: str) -> str:
                return wrapped[k][i] if i < len(wrapped[k]) else ""
            parts = [at("trace").ljust(cols["trace"]), (cells["p50"] if i == 0 else "").rjust(CROSS_P50_W),
                     (cells["busy"] if i == 0 else "").rjust(CROSS_BUSY_W)]
            if "finding" in cols:
                parts.append(at("finding").ljust(cols["finding"]))
            if "kernel" in cols:
                parts.append(at("kernel"))
            out.append(" ".join(parts).rstrip())
        return out

    lines = row(head)
    for r in rows:
        lines += row(r)
        for k in below:
            text = label[k] + r[k]
            lines += textwrap.wrap(text, width=width, initial_indent="  ", subsequent_indent="    ",
                                   break_on_hyphens=False) if width > 6 else ["  " + text]
    if "ranks" in summary:
        verdict = f"ranks: {clean_text(summary['ranks']['verdict'])}"
        lines += textwrap.wrap(verdict, width=width, subsequent_indent="  ", break_on_hyphens=False) \
            if width > 20 else [verdict]
    return lines


def _cell(text: str, width: int, wrap: bool) -> list[str]:
    """A table cell's lines: ``text`` wrapped to ``width`` (a word wider than it broken), or as it is."""
    if not wrap or len(text) <= width:
        return [text]
    return textwrap.wrap(text, width=width, break_on_hyphens=False) or [""]
