"""GPU metrics of an export (``nsys profile --gpu-metrics-devices=N``), read in aggregate.

``TARGET_INFO_GPU_METRICS(typeId, sourceId, typeName, metricId, metricName)`` names the metrics of
each metric source (``typeId``: one per GPU sampled); ``GPU_METRICS(timestamp, typeId, metricId,
value)`` has one row per metric per sample (30 rows a sample on Hopper). Ids and names differ by GPU
generation and nsys version, so metrics are chosen by name (``WANTED``), never by id, per source.

**Bounded reading.** Only the wanted metrics (11 of about 30) are kept, as one sorted time axis per
source and one ``float32`` array per metric: about 50 bytes a sample against the ~450 bytes its 30
rows take in the file. The table is decoded by the direct b-tree reader (``direct``) in parts of
``PART_ROWS`` rows, each filtered and pivoted to samples before the next is decoded, so the
transient memory is one part, whatever the table's size; SQLite reads it (``WHERE metricId IN ...``, in rowid slices) when the
direct reader declines. No per-row Python objects, no wide per-sample frame. The reader takes the
export that is already open (``read(db)``, called by the loader), so the file is not opened twice.

**Which GPU.** Each source is mapped to a device of ``TARGET_INFO_GPU`` (``map_device``), never by
assuming an id: (1) a type or source name that names the GPU (its PCI bus location, or ``GPU N``);
(2) else the low byte of ``typeId``, when it is the id of a GPU of the trace (nsys 2025.3 numbers the
source of ``--gpu-metrics-devices=0`` ``0x0001000100000000``, of GPU 0; a low byte naming no GPU of
the trace is not used); (3) else the only GPU of the trace. Otherwise the source stays unmapped
(``device_id`` None) and is shown as "metric source N".
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
MAX_ROWS = 200_000_000  # rows of GPU_METRICS read at most (the wanted ones are kept): a resource guard
PART_ROWS = 400_000  # rows decoded at a time
MAX_VALUE = 1e30  # larger metric values (or infinite ones) are read as missing


@dataclass
class Source:
    type_id: int
    ts: np.ndarray  # sample times (ns, the event clock), sorted, unique
    values: dict[str, np.ndarray] = field(default_factory=dict)  # short name -> float32 value per sample (NaN: none)
    names: dict[str, str] = field(default_factory=dict)  # short name -> nsys metric name
    device_id: int | None = None  # TARGET_INFO_GPU.id of the sampled GPU, None when not identified
    device_name: str = ""
    mapped_by: str = ""  # how the device was identified ("type name", "typeId low byte", "only GPU")
    type_name: str = ""

    @property
    def period_ns(self) -> int:
        """The sampling period: the median spacing of the samples (0 with fewer than two)."""
        return int(np.median(np.diff(self.ts))) if len(self.ts) > 1 else 0

    @property
    def label(self) -> str:
        return f"GPU {self.device_id}" if self.device_id is not None else f"metric source {self.type_id}"


@dataclass
class Metrics:
    sources: list[Source] = field(default_factory=list)
    rows: int = 0  # GPU_METRICS rows scanned
    kept: int = 0  # rows of wanted metrics kept
    note: str = ""  # why nothing (or not everything) was read


def read_metrics(path: str | Path, gpus: Any = None) -> Metrics:
    """Open ``path`` and read its GPU metrics (``read``); for scripts and tests. The loader calls
    ``read`` on the export it already has open."""
    from nsysan.trace.db import Database

    with Database(Path(path)) as db:
        return read(db, gpus)


def read(db: Any, gpus: Any = None, *, max_rows: int = MAX_ROWS) -> Metrics:
    """The wanted metrics of every source of the open export ``db`` (``trace.db.Database``);
    ``gpus``: the trace's GPU table (``device_id``, ``name``, ``bus_location``) to map sources to
    devices. An export without the tables gives an empty ``Metrics``; damaged tables one with a note."""
    caps = db.caps
    if not (caps.has("GPU_METRICS") and caps.has("TARGET_INFO_GPU_METRICS")):
        return Metrics()
    need = ("timestamp", "typeId", "metricId", "value")
    if not all(caps.has("GPU_METRICS", c) for c in need) or not all(
            caps.has("TARGET_INFO_GPU_METRICS", c) for c in ("typeId", "metricId", "metricName")):
        return Metrics(note="the GPU metric tables lack the expected columns: not read")
    from nsysan.errors import NsysanError

    try:
        return _read(db, gpus, max_rows)
    except (sqlite3.Error, ValueError, KeyError, IndexError, TypeError, OverflowError, NsysanError) as e:
        # a damaged metric table (or page): the rest of the trace is still good
        return Metrics(note=f"the GPU metric tables could not be read ({type(e).__name__})")


def _choose(rows: list[tuple[Any, ...]]) -> dict[int, dict[str, tuple[int, str]]]:
    """Per typeId: short name -> (metricId, metric name), by name."""
    per: dict[int, dict[str, tuple[int, str]]] = {}
    for t, m, n in rows:
        try:
            t, m = int(t), int(m)
        except (TypeError, ValueError):
            continue
        chosen = per.setdefault(t, {})
        for short, pat in WANTED.items():
            if short not in chosen and re.search(pat, str(n)):
                chosen[short] = (m, str(n))
    return {t: c for t, c in per.items() if c}


def _type_names(db: Any) -> dict[int, str]:
    """typeId -> the names nsys gives the type and its source (often empty)."""
    out: dict[int, list[str]] = {}
    caps = db.caps
    if caps.has("TARGET_INFO_GPU_METRICS", "typeName"):
        for t, n in db.rows('SELECT DISTINCT typeId, typeName FROM "TARGET_INFO_GPU_METRICS"'):
            if n:
                out.setdefault(int(t), []).append(str(n))
    if caps.has("GENERIC_EVENT_TYPES", "nameId") and caps.has("GENERIC_EVENT_SOURCES", "nameId") and \
            caps.has("StringIds", "value"):
        sql = ('SELECT t.typeId, st.value, ss.value FROM "GENERIC_EVENT_TYPES" t '
               'LEFT JOIN "GENERIC_EVENT_SOURCES" s ON s.sourceId = t.sourceId '
               'LEFT JOIN "StringIds" st ON st.id = t.nameId LEFT JOIN "StringIds" ss ON ss.id = s.nameId '
               'WHERE t.typeId IN (SELECT DISTINCT typeId FROM "TARGET_INFO_GPU_METRICS")')
        try:
            for t, a, b in db.rows(sql):
                out.setdefault(int(t), []).extend(str(x) for x in (a, b) if x)
        except Exception:  # noqa: BLE001 - names are a nicety; the low byte still maps
            pass
    return {t: " ".join(dict.fromkeys(v)) for t, v in out.items()}


_GPU_N = re.compile(r"\bGPU\s*#?\s*(\d+)\b")
_BUS = re.compile(r"\b([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\b")


def map_device(type_id: int, type_name: str, gpus: Any) -> tuple[int | None, str]:
    """(device id, how) for one metric source; (None, "") when the trace does not say which GPU."""
    if gpus is None or len(gpus) == 0 or "device_id" not in gpus:
        return None, ""
    ids = [int(x) for x in gpus["device_id"].tolist()]
    if "bus_location" in gpus:
        bus = {str(b).lower().lstrip("0"): int(d) for d, b in zip(ids, gpus["bus_location"].tolist()) if b}
        for m in _BUS.finditer(type_name or ""):
            d = bus.get(m.group(1).lower().lstrip("0"))
            if d is not None:
                return d, "type name (PCI bus)"
    m = _GPU_N.search(type_name or "")
    if m and int(m.group(1)) in ids:
        return int(m.group(1)), "type name"
    if (type_id & 0xFF) in ids:
        return type_id & 0xFF, "typeId low byte"
    if len(set(ids)) == 1:
        return ids[0], "only GPU"
    return None, ""


def _read(db: Any, gpus: Any, max_rows: int) -> Metrics:
    chosen = _choose(db.rows('SELECT DISTINCT typeId, metricId, metricName FROM "TARGET_INFO_GPU_METRICS"'))
    if not chosen:
        return Metrics(note="none of the GPU metrics nsysan reads (GR/SM/tensor active, DRAM, PCIe, NVLink) "
                            "was recorded")
    types = np.array(sorted(chosen), dtype=np.int64)
    shorts = list(WANTED)
    # per type: sorted wanted metric ids and the slot (index in ``shorts``) of each
    wids = {t: np.array(sorted(m for m, _ in chosen[t].values()), dtype=np.int64) for t in chosen}
    wslot = {t: np.array([shorts.index(next(s for s, (m, _) in chosen[t].items() if m == mid)) for mid in wids[t]],
                         dtype=np.int8) for t in chosen}
    # per type, per part: (sample times, samples x metrics matrix): pivoted as each part is decoded
    kept: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {int(t): [] for t in types}
    out = Metrics()

    def take(ts: np.ndarray, typ: np.ndarray, mid: np.ndarray, val: np.ndarray) -> None:
        out.rows += len(ts)
        for t in kept:
            sel = typ == t
            every = bool(sel.all())  # one source: no copies of the columns
            m = mid if every else mid[sel]
            w = wids[t]
            i = np.minimum(np.searchsorted(w, m), len(w) - 1)
            ok = w[i] == m
            if not ok.any():
                continue
            tsx, vx = (ts, val) if every else (ts[sel], val[sel])
            tsx, col, vx = tsx[ok], i[ok], vx[ok]
            out.kept += len(tsx)
            # a value no counter gives (infinite, or beyond float32): no value, not an overflow to inf
            with np.errstate(invalid="ignore"):
                v32 = np.where(np.abs(vx) <= MAX_VALUE, vx, np.nan).astype(np.float32)
            kept[t].append(_pivot(tsx, col, v32, len(w)))

    n_rows = _read_direct(db, take, max_rows)
    if n_rows is None:
        out.rows = out.kept = 0
        for t in kept:
            kept[t].clear()
        n_rows = _read_sql(db, take, chosen, max_rows)
    if n_rows < 0:
        return Metrics(note=f"GPU_METRICS holds more than {max_rows:,} rows: not read (a resource guard)")
    names = _type_names(db)
    for t in (int(x) for x in types):
        parts = kept[t]
        if not parts:
            continue
        ts = np.concatenate([p[0] for p in parts])
        mat = np.concatenate([p[1] for p in parts])
        del parts[:]
        if len(ts) > 1 and not bool((ts[1:] > ts[:-1]).all()):  # a sample split between parts, or unsorted rows
            order = np.argsort(ts, kind="stable")
            ts, mat = ts[order], mat[order]
            first = np.flatnonzero(np.concatenate([[True], ts[1:] != ts[:-1]]))
            ts, mat = ts[first], np.fmax.reduceat(mat, first, axis=0)
        dev, how = map_device(t, names.get(t, ""), gpus)
        src = Source(type_id=t, ts=ts, names={s: n for s, (_, n) in chosen[t].items()}, device_id=dev, mapped_by=how,
                     type_name=names.get(t, ""))
        if dev is not None and gpus is not None and "name" in gpus:
            nm = gpus.loc[gpus["device_id"].astype("int64") == dev, "name"]
            src.device_name = str(nm.iloc[0]) if len(nm) else ""
        for k, slot in enumerate(wslot[t].tolist()):
            src.values[shorts[slot]] = np.ascontiguousarray(mat[:, k])
        del mat
        out.sources.append(src)
    out.sources.sort(key=lambda s: (s.device_id is None, s.device_id if s.device_id is not None else 0, s.type_id))
    return out


def _pivot(ts: np.ndarray, col: np.ndarray, val: np.ndarray, ncols: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows (time, metric column, value) -> (sorted unique times, a samples x ``ncols`` float32 matrix,
    NaN where a sample lacks a metric)."""
    if len(ts) > 1 and not bool((ts[1:] >= ts[:-1]).all()):
        order = np.argsort(ts, kind="stable")
        ts, col, val = ts[order], col[order], val[order]
    new = np.empty(len(ts), dtype=bool)
    new[:1] = True
    np.not_equal(ts[1:], ts[:-1], out=new[1:])
    sample = np.cumsum(new) - 1
    mat = np.full((int(new.sum()), ncols), np.nan, dtype=np.float32)
    mat[sample, col] = val
    return ts[new], mat


def _read_direct(db: Any, take: Any, max_rows: int) -> int | None:
    """Decode GPU_METRICS part by part with the direct reader; the row count, -1 over ``max_rows``,
    None when the direct reader declines (SQLite then reads it)."""
    from nsysan.trace import direct

    found = db.direct_plan("GPU_METRICS", [(c, c, None) for c in ("timestamp", "typeId", "metricId", "value")], None)
    if found is None:
        return None
    plan, leaves = found
    total = int(leaves[:, 1].sum(dtype=np.int64)) if len(leaves) else 0
    if total > max_rows:
        return -1
    col = {c: plan.slots.index(c) for c in ("timestamp", "typeId", "metricId", "value")}
    try:
        for part in direct.split(leaves, PART_ROWS):
            if not len(part):
                continue
            job = direct.start(db._direct, plan, part)
            for f in job.futures:
                f.result()
            if not all(bool(job.valid[col[c]].all()) for c in col):  # a NULL where nsys writes none: SQLite decides
                return None
            take(*(job.data[col[c]] for c in ("timestamp", "typeId", "metricId", "value")))
    except (OSError, direct.Unsupported):
        return None
    return total


def _read_sql(db: Any, take: Any, chosen: dict[int, dict[str, tuple[int, str]]], max_rows: int) -> int:
    """The same through SQLite: only the wanted metric ids, in rowid slices (one at a time)."""
    ids = sorted({m for c in chosen.values() for m, _ in c.values()})
    lo_hi = db.rows('SELECT min(rowid), max(rowid) FROM "GPU_METRICS"')
    lo, hi = lo_hi[0] if lo_hi else (None, None)
    if lo is None:
        return 0
    if int(hi) - int(lo) + 1 > max_rows and int(db.rows('SELECT count(*) FROM "GPU_METRICS"')[0][0]) > max_rows:
        return -1
    n = 0
    step = PART_ROWS
    for a in range(int(lo), int(hi) + 1, step):
        sql = (f'SELECT timestamp, typeId, metricId, value FROM "GPU_METRICS" WHERE rowid >= {a} AND rowid < {a + step} '
               f'AND metricId IN ({",".join(str(int(m)) for m in ids)}) AND timestamp IS NOT NULL '
               'AND typeId IS NOT NULL AND value IS NOT NULL')
        tab = db.table(sql)
        if tab.num_rows == 0:
            continue
        cols = [tab.column(i).values for i in range(4)]
        n += len(cols[0])
        take(cols[0].astype(np.int64), cols[1].astype(np.int64), cols[2].astype(np.int64), cols[3].astype(np.float64))
    return n
