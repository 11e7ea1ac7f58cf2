"""The view model's tables and stacked bars, shared by the report's sections (``view``), the GPU-metrics
section (``metrics_view``) and the notebook fragment (``notebook``): a frame turned into display text
and sort keys, and an iteration's breakdown into compute, exposed communication, copies and idle."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from nsysan.analyses.breakdown import breakdown_groups
from nsysan.analyses.frames import cells
from nsysan.units import fmt_ns, fmt_pct

MAX_TABLE_ROWS = 200
SHOW_ROWS = 15  # a long table shows this many rows, the rest one click away


@dataclass
class Table:
    id: str
    title: str
    columns: list[str]
    rows: list[list[str]]  # display text
    keys: list[list[Any]]  # sort keys (numbers or text)
    note: str = ""
    bar_column: int = -1  # this column's cells get a bar of length bars[row] (0..1 of the largest)
    bars: list[float] = field(default_factory=list)
    alt: Table | None = None  # the same table over the whole capture (this one is the steady state)
    alt_label: str = ""  # what the toggle calls each: ("steady state", "whole capture")
    show: int = SHOW_ROWS  # rows shown before "show all" (the rest are in the page, folded)
    spans: list[tuple[int, int] | None] = field(default_factory=list)  # per row: its interval on the timeline (ns)


def table(tid: str, title: str, df: pd.DataFrame, cols: list[tuple[str, str, Any]], note: str = "") -> Table:
    """The first ``MAX_TABLE_ROWS`` rows of ``df`` as a ``Table``: ``cols`` is (header, column,
    formatter or None) per column shown; the sort keys are the raw values (numbers) or their text."""
    rows, keys = [], []
    by_col = cells(df, MAX_TABLE_ROWS)
    picked = [(by_col.get(col), fmt) for _, col, fmt in cols]
    for i in range(min(len(df), MAX_TABLE_ROWS)):
        r, k = [], []
        for vals, fmt in picked:
            v = None if vals is None else vals[i]
            if isinstance(v, (np.integer, np.floating)):
                v = v.item()
            r.append(fmt(v) if fmt and v is not None and v is not pd.NA else ("" if v is None else str(v)))
            k.append(v if isinstance(v, (int, float)) else str(v))
        rows.append(r)
        keys.append(k)
    if len(df) > MAX_TABLE_ROWS:
        note = (note + " " if note else "") + f"First {MAX_TABLE_ROWS} of {len(df)} rows (all rows in --json / --csv)."
    return Table(tid, title, [c[0] for c in cols], rows, keys, note)


BREAKDOWN_PARTS = (("compute", "compute", "bd-compute"), ("comm_exposed", "communication (exposed)", "bd-comm"),
                   ("copy_exposed", "copies alone", "bd-copy"), ("idle", "idle", "bd-idle"))


CAPTURE_CSS = {"start-up": "bd-startup", "before the window": "bd-outside", "GPU busy": "bd-compute",
               "after the window": "bd-outside", "tail": "bd-startup"}


def capture_parts(ph: Any) -> list[tuple[str, int, float]]:
    """Where every second of the capture went (``analyses.phases``): (part, ns, share of the capture)
    in time order, the parts without time left out; they add up to the capture."""
    if ph is None or ph.capture.dur_ns <= 0:
        return []
    cap = ph.capture.dur_ns
    return [(name, ns, ns / cap) for name, ns in ph.parts() if ns > 0]


def capture_rows(ph: Any) -> list[tuple[str, list[tuple[str, float, str, str]]]]:
    """The capture's parts as one stacked bar (the breakdown's shape): idle parts red, busy blue."""
    parts = capture_parts(ph)
    if not parts:
        return []
    bar = [(name, round(100 * share, 2), CAPTURE_CSS.get(name, "bd-idle"), f"{name} {fmt_ns(ns)} ({fmt_pct(share)})")
           for name, ns, share in parts]
    return [(f"capture: {fmt_ns(ph.capture.dur_ns)}; judged window ({ph.judged.label}): {fmt_ns(ph.judged.dur_ns)}",
             bar)]


def breakdown_rows(a: Any) -> list[tuple[str, list[tuple[str, float, str, str]]]]:
    """One stacked bar per sequence of iterations (per process when there are several): the mean
    steady iteration period split into compute, exposed communication, copies alone and idle."""
    rows = []
    for label, s in breakdown_groups(a.breakdown):
        parts = [(name, round(100 * s[k + "_frac"], 2), css, f"{name} {fmt_ns(s[k + '_mean_ns'])} "
                  f"({fmt_pct(s[k + '_frac'])})") for k, name, css in BREAKDOWN_PARTS if s[k + "_mean_ns"] > 0]
        rows.append((f"{label}: {fmt_ns(s['span_mean_ns'])}", parts))
    return rows
