"""GPU metrics of an export (``nsys profile --gpu-metrics-devices=N``), read in aggregate.

``TARGET_INFO_GPU_METRICS(typeId, metricId, metricName)`` names the metrics of each metric source
(``typeId``: one per GPU sampled); ``GPU_METRICS(timestamp, typeId, metricId, value)`` has one row per
metric per sample. Ids and names differ by GPU generation and nsys version, so metrics are chosen by
name (``WANTED``), never by id. Only the wanted metrics are read, as one sorted time axis per source
and one float array per metric (no per-sample wide frame).
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


# short name -> metric name pattern (Hopper/Ampere/Ada names seen in nsys 2024-2025 exports)
WANTED = {
    "gr_active": r"^GR Active \[Throughput %\]",
    "sm_active": r"^SMs? Active \[Throughput %\]",
    "sm_issue": r"^SM Issue \[Throughput %\]",
    "tensor_active": r"^Tensor (Active|Pipe Active)",
    "warps_in_flight": r"^Compute Warps in Flight \[Throughput %\]",
    "dram_read": r"^DRAM Read Bandwidth \[Throughput %\]",
    "dram_write": r"^DRAM Write Bandwidth \[Throughput %\]",
    "pcie_rx": r"^PCIe RX Throughput \[Throughput %\]",
    "pcie_tx": r"^PCIe TX Throughput \[Throughput %\]",
    "nvlink_rx": r"^NVLink RX (Requests )?User Data \[Throughput %\]",
    "nvlink_tx": r"^NVLink TX (Requests )?User Data \[Throughput %\]",
}
MAX_ROWS = 50_000_000


@dataclass
class Source:
    type_id: int
    ts: np.ndarray  # sample times (ns, the event clock), sorted
    values: dict[str, np.ndarray] = field(default_factory=dict)  # short name -> value per sample
    names: dict[str, str] = field(default_factory=dict)  # short name -> nsys metric name


@dataclass
class Metrics:
    sources: list[Source] = field(default_factory=list)
    rows: int = 0


def read_metrics(path: str | Path) -> Metrics:
    from nsysan.trace.db import Database

    with Database(Path(path)) as db:
        return _read(db._sqlite, db)


def _read(con: sqlite3.Connection, db: Any = None) -> Metrics:
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not {"GPU_METRICS", "TARGET_INFO_GPU_METRICS"} <= tables:
        return Metrics()
    names = con.execute("SELECT DISTINCT typeId, metricId, metricName FROM TARGET_INFO_GPU_METRICS").fetchall()
    per: dict[int, dict[str, tuple[int, str]]] = {}
    for t, m, n in names:
        for short, pat in WANTED.items():
            if re.search(pat, str(n)) and short not in per.setdefault(int(t), {}):
                per[int(t)][short] = (int(m), str(n))
    out = Metrics()
    for t, chosen in sorted(per.items()):
        if not chosen:
            continue
        ids = {m: short for short, (m, _) in chosen.items()}
        q = ",".join(str(m) for m in ids)
        sql = (f"SELECT timestamp, metricId, value FROM GPU_METRICS WHERE typeId = {int(t)} AND metricId IN ({q}) "
               f"LIMIT {MAX_ROWS}")
        tab = db.arrow(sql) if db is not None else None  # ADBC: columns, no Python tuple per row
        if tab is not None:
            ts_all = tab.column(0).to_numpy(zero_copy_only=False).astype(np.int64)
            mid = tab.column(1).to_numpy(zero_copy_only=False).astype(np.int64)
            val = tab.column(2).to_numpy(zero_copy_only=False).astype(np.float64)
        else:
            arr = np.array(con.execute(sql).fetchall(), dtype=np.float64).reshape(-1, 3)
            ts_all, mid, val = arr[:, 0].astype(np.int64), arr[:, 1].astype(np.int64), arr[:, 2]
        if not len(ts_all):
            continue
        out.rows += len(ts_all)
        ts = np.unique(ts_all)
        src = Source(type_id=t, ts=ts, names={short: n for short, (_, n) in chosen.items()})
        for m, short in ids.items():
            sel = mid == m
            v = np.full(len(ts), np.nan)
            v[np.searchsorted(ts, ts_all[sel])] = val[sel]
            src.values[short] = v
        out.sources.append(src)
    return out
