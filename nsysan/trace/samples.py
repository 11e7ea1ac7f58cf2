"""CPU and Python samples and CUDA-call backtraces of an export (``nsys profile -s process-tree
--python-sampling=true --cudabacktrace=... --python-backtrace=cuda``), read in aggregate.

Python samples and Python backtraces are NVTX extended-payload events (``NVTX_EVENTS`` rows of
``eventType`` 34 in the domains 'Python Periodic Sampling' and 'Python Backtrace on CUDA'); their
frames are in ``binaryData``, which nsys fills only when the export was made with
``--include-blobs=true`` (see ``../shared/NSYS-SCHEMA.md``). The blob layout is read from the
payload schema tables (``NVTX_PAYLOAD_SCHEMA_ENTRIES``: the offsets of the frame count and the
frames array, the size of a frame and the offsets of its function, file and line), never assumed.

Native CPU samples are ``COMPOSITE_EVENTS`` rows (time, thread) whose call chains are the
``SAMPLING_CALLCHAINS`` rows of the same ``id`` (one row per frame, ``stackDepth`` 0 innermost;
symbol and module are ``StringIds``). Native backtraces of CUDA calls (``--cudabacktrace``) are the
``CUDA_CALLCHAINS`` rows of the runtime row's ``callchainId``. Each call chain is read as one text
per sample, made by SQLite (a correlated ``group_concat`` over the chain's primary-key index), and
only distinct chains are parsed: no frame-per-row table is ever built in Python.

What is returned stays small: one row per sample (time, thread, state, stack id) and one row per
distinct stack (its frames as a tuple, innermost first: (function, file, line) for Python frames,
(symbol, module, unresolved) for native ones). Only the samples of the threads and the window
asked for are read. Names in ``StringIds`` are HTML-escaped by nsys in the Python payloads; they
are unescaped once here (native symbols are stored as they are).
"""

from __future__ import annotations

import html
import sqlite3
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from nsysan.trace.sqlite_file import connect as _connect

PY_SAMPLING = "Python Periodic Sampling"
PY_BACKTRACE = "Python Backtrace on CUDA"
MAX_SAMPLES = 5_000_000
MAX_NAME = 8192  # characters of a symbol, module, function or file name kept (trace.strings.MAX_STRING)
TID_MASK = (1 << 48) - 1  # globalTid without the VM bits: pid << 24 | tid

Frame = tuple[str, str, int]


@dataclass
class Samples:
    """``python``: ts_ns, pid, tid, state, stack (per Python sample); ``backtraces``: the same for the
    Python backtraces of CUDA calls; ``stacks``: stack id -> tuple of (function, file, line),
    innermost first. ``native``: ts_ns, pid, tid, state, stack (per native CPU sample) and
    ``cuda_chains``: pid, tid, start_ns, correlation_id, stack (per CUDA call with a native
    backtrace), both into ``native_stacks`` (tuples of (symbol, module, unresolved), innermost
    first). ``inputs`` says which inputs the export holds (and which were lost in export)."""

    python: pd.DataFrame
    backtraces: pd.DataFrame
    stacks: list[tuple[Frame, ...]] = field(default_factory=list)
    inputs: dict[str, object] = field(default_factory=dict)
    native: pd.DataFrame = field(default_factory=lambda: _empty())
    native_stacks: list[tuple[Frame, ...]] = field(default_factory=list)
    cuda_chains: pd.DataFrame = field(default_factory=lambda: _empty_calls())


def _empty() -> pd.DataFrame:
    return pd.DataFrame({"ts_ns": pd.Series(dtype="int64"), "pid": pd.Series(dtype="int64"),
                         "tid": pd.Series(dtype="int64"), "state": pd.Series(dtype="int64"),
                         "stack": pd.Series(dtype="int64")})


def _empty_calls() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="int64") for c in ("pid", "tid", "start_ns", "correlation_id", "stack")})


# NVTX payload entry types (nvToolsExtPayload.h) -> struct format: int32/uint32, int64/uint64, and
# registered-string handles (80..), 8 bytes
_FMT = {11: "<b", 12: "<B", 13: "<h", 14: "<H", 15: "<i", 16: "<I", 17: "<q", 18: "<Q"}


def _fmt(t: int | None) -> str:
    return _FMT.get(int(t or 0), "<Q")


def _int(x: object) -> int | None:
    """An integer field of the schema tables; None for NULL or anything that is not a whole number."""
    return x if isinstance(x, int) else None


def _layout(con: sqlite3.Connection, domain: int) -> dict[str, object] | None:
    """Offsets and formats of the state, frame count and frames, the frame size and its fields' offsets
    and formats, from the payload schema of ``domain``."""
    rows = con.execute("SELECT schemaId, name, type, offset FROM NVTX_PAYLOAD_SCHEMA_ENTRIES WHERE domainId = ?",
                       (domain,)).fetchall()
    by = {str(n): (_int(sc), _int(t), _int(o)) for sc, n, t, o in rows}
    need = ("Frames count", "Frames", "Function", "File", "Line")
    if not all(k in by for k in need):
        return None
    frame_schema = by["Function"][0]
    size = con.execute("SELECT payloadSize FROM NVTX_PAYLOAD_SCHEMAS WHERE domainId = ? AND schemaId = ?",
                       (domain, frame_schema)).fetchone()

    def off(name: str, default: int) -> int:
        o = by[name][2] if name in by else None
        return default if o is None or o < 0 else o

    return {"state": off("Thread state", 8),
            "count": off("Frames count", 12), "count_fmt": _fmt(by["Frames count"][1]),
            "frames": off("Frames", 16), "frame_size": int(size[0]) if size and size[0] else 24,
            "fn": off("Function", 0), "fn_fmt": _fmt(by["Function"][1]),
            "file": off("File", 8), "file_fmt": _fmt(by["File"][1]),
            "line": off("Line", 16), "line_fmt": _fmt(by["Line"][1])}


def _decode(blob: bytes, lay: dict[str, object]) -> tuple[int, tuple[tuple[int, int, int], ...]] | None:
    """(state, frames as (function id, file id, line)) of one payload blob (header: count, schema id,
    size, offset as u64; then the payload at that offset)."""
    if blob is None or len(blob) < 32:
        return None
    _, _, _, base = struct.unpack_from("<QQQQ", blob, 0)
    start = base + int(lay["frames"])  # type: ignore[arg-type]
    if start > len(blob):
        return None
    state = struct.unpack_from("<I", blob, base + int(lay["state"]))[0]  # type: ignore[arg-type]
    n = struct.unpack_from(str(lay["count_fmt"]), blob, base + int(lay["count"]))[0]  # type: ignore[arg-type]
    fs = int(lay["frame_size"])  # type: ignore[arg-type]
    n = min(int(n), max(0, (len(blob) - start) // fs))
    fn, fi, ln = int(lay["fn"]), int(lay["file"]), int(lay["line"])  # type: ignore[arg-type]
    ff, fif, lf = str(lay["fn_fmt"]), str(lay["file_fmt"]), str(lay["line_fmt"])
    frames = tuple((struct.unpack_from(ff, blob, start + i * fs + fn)[0],
                    struct.unpack_from(fif, blob, start + i * fs + fi)[0],
                    struct.unpack_from(lf, blob, start + i * fs + ln)[0]) for i in range(n))
    return int(state), frames


def read_samples(path: str | Path, *, window: tuple[int, int] | None = None,
                 threads: Iterable[tuple[int, int]] | None = None) -> Samples:
    """The samples and backtraces of the export at ``path`` (empty frames when it has none): only
    those in ``window`` ([start, end) ns) and on ``threads`` ((pid, tid) pairs) when given; the
    CUDA calls' backtraces of every thread in the window."""
    con = _connect(Path(path))
    try:
        return read_from(con, window=window, threads=threads)
    finally:
        con.close()


def _filters(window: tuple[int, int] | None, threads: Iterable[tuple[int, int]] | None,
             ts: str = "start", gtid: str = "globalTid") -> tuple[str, tuple[int, ...]]:
    sql, params = "", ()
    if window is not None:
        sql += f" AND {ts} >= ? AND {ts} < ?"
        params = (int(window[0]), int(window[1]))
    if threads is not None:
        keys = sorted({(int(p) << 24) | int(t) for p, t in threads})
        sql += f" AND ({gtid} & {TID_MASK}) IN ({','.join(str(k) for k in keys) or 'NULL'})"
    return sql, params


def read_from(con: sqlite3.Connection, *, window: tuple[int, int] | None = None,
              threads: Iterable[tuple[int, int]] | None = None) -> Samples:
    """``read_samples`` on an open connection."""
    threads = None if threads is None else list(threads)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    inputs: dict[str, object] = {
        "cpu_samples": int(con.execute("SELECT count(*) FROM COMPOSITE_EVENTS").fetchone()[0])
        if "COMPOSITE_EVENTS" in tables else 0,
        "cuda_backtraces": int(con.execute("SELECT count(DISTINCT id) FROM CUDA_CALLCHAINS").fetchone()[0])
        if "CUDA_CALLCHAINS" in tables else 0,
        "gpu_metrics": int(con.execute("SELECT count(*) FROM GPU_METRICS").fetchone()[0])
        if "GPU_METRICS" in tables else 0}
    out = Samples(_empty(), _empty(), [], inputs)
    ids: set[int] = set()
    native_keys: dict[str, int] = {}
    if "COMPOSITE_EVENTS" in tables and "SAMPLING_CALLCHAINS" in tables and inputs["cpu_samples"]:
        out.native = _native(con, window, threads, native_keys)
    _python(con, tables, window, threads, out)
    if "CUDA_CALLCHAINS" in tables and "CUPTI_ACTIVITY_KIND_RUNTIME" in tables and inputs["cuda_backtraces"]:
        bt = out.backtraces  # calls with a Python backtrace need no native one (Python first)
        skip = set(zip(((bt["pid"].to_numpy() << 24) | bt["tid"].to_numpy()).tolist(), bt["ts_ns"].tolist()))
        out.cuda_chains = _cuda_chains(con, window, native_keys, skip)
    chains = [(_parse_chain(k), ix) for k, ix in native_keys.items()]
    for frames, _ in chains:
        ids.update(i for f in frames for i in f[:2])
    py_ids = {i for st in out.stacks for f in st for i in f[:2]}  # type: ignore[misc]
    strings = _strings(con, ids | py_ids)
    native_stacks: list[tuple[Frame, ...]] = [()] * len(native_keys)
    for frames, ix in chains:
        native_stacks[ix] = tuple((strings.get(s, "[unknown]"), strings.get(m, ""), u) for s, m, u in frames)
    out.native_stacks = native_stacks
    out.stacks = [tuple((html.unescape(strings.get(f, "[unknown]")), html.unescape(strings.get(fi, "")), int(ln))
                        for f, fi, ln in st) for st in out.stacks]  # type: ignore[misc]
    return out


def _strings(con: sqlite3.Connection, ids: set[int]) -> dict[int, str]:
    out: dict[int, str] = {}
    ids_l = sorted(int(i) for i in ids)
    for i in range(0, len(ids_l), 50_000):
        q = ",".join(str(x) for x in ids_l[i:i + 50_000])
        # names are cut as the loader cuts the others (a MB-long symbol must not cost a regex pass per MB)
        out.update((int(k), str(v)) for k, v in con.execute(
            f"SELECT id, substr(value, 1, {MAX_NAME}) FROM StringIds WHERE id IN ({q})"))
    return out


# one text per call chain: "depth:symbol:module:unresolved" per frame, made by SQLite from the chain's
# primary-key index (id, stackDepth); parsed once per distinct chain. Every field is cast to an integer
# (a text or real where nsys writes an id must not make the whole chain, or every chain, unreadable);
# a frame with a NULL depth, symbol or module is left out.
_CHAIN = ("(SELECT group_concat(CAST(c.stackDepth AS INTEGER) || ':' || CAST(c.symbol AS INTEGER) || ':' || "
          "CAST(c.module AS INTEGER) || ':' || coalesce(CAST(c.unresolved AS INTEGER), 0), ',') "
          "FROM {table} c WHERE c.id = {ref})")


def _parse_chain(key: str) -> tuple[tuple[int, int, int], ...]:
    rows = []
    for part in key.split(",") if key else ():
        d, s, m, u = part.split(":")
        rows.append((int(d), int(s), int(m), int(u)))
    rows.sort()
    return tuple((s, m, u) for _, s, m, u in rows)


def _native(con: sqlite3.Connection, window: tuple[int, int] | None, threads: list[tuple[int, int]] | None,
            keys: dict[str, int]) -> pd.DataFrame:
    """Native CPU samples (``COMPOSITE_EVENTS``) of the window and threads, with their chains' ids."""
    where, params = _filters(window, threads, "e.start", "e.globalTid")
    sql = (f"SELECT e.start, CAST(e.globalTid AS INTEGER), coalesce(CAST(e.threadState AS INTEGER), 0), {_CHAIN.format(table='SAMPLING_CALLCHAINS', ref='e.id')} "
           f"FROM COMPOSITE_EVENTS e WHERE 1{where} ORDER BY e.start LIMIT {MAX_SAMPLES}")
    ts, g, st, stack = [], [], [], []
    for s, gt, state, key in con.execute(sql, params):
        if gt is None or not isinstance(s, int):
            continue
        ts.append(int(s))
        g.append(int(gt))
        st.append(int(state))
        stack.append(keys.setdefault(key or "", len(keys)))
    ga = np.array(g, dtype=np.int64)
    return pd.DataFrame({"ts_ns": np.array(ts, np.int64), "pid": ga >> 24 & 0xFFFFFF, "tid": ga & 0xFFFFFF,
                         "state": np.array(st, np.int64), "stack": np.array(stack, np.int64)})


def _cuda_chains(con: sqlite3.Connection, window: tuple[int, int] | None, keys: dict[str, int],
                 skip: set[tuple[int, int]] | None = None) -> pd.DataFrame:
    """The CUDA runtime/driver calls with a native backtrace (``callchainId``) in the window, but those in
    ``skip`` ((pid << 24 | tid, start): calls a Python backtrace already explains): their chains are read
    for the remaining calls only."""
    cols = {r[1] for r in con.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_RUNTIME)")}
    if "callchainId" not in cols:
        return _empty_calls()
    where, params = _filters(window, None, "start")
    rows = [(int(s), int(g), int(c) if c is not None else -1, int(cc)) for s, g, c, cc in con.execute(
        f"SELECT start, globalTid, correlationId, callchainId FROM CUPTI_ACTIVITY_KIND_RUNTIME "
        f"WHERE callchainId IS NOT NULL AND globalTid IS NOT NULL{where} LIMIT {MAX_SAMPLES}", params)]
    if skip:
        rows = [r for r in rows if ((r[1] & TID_MASK), r[0]) not in skip]
    chain_of: dict[int, str] = {}
    ids = sorted({r[3] for r in rows})
    for i in range(0, len(ids), 50_000):
        q = ",".join(str(x) for x in ids[i:i + 50_000])
        chain_of.update((int(k), str(v)) for k, v in con.execute(
            f"SELECT i.id, {_CHAIN.format(table='CUDA_CALLCHAINS', ref='i.id')} FROM "
            f"(SELECT DISTINCT id FROM CUDA_CALLCHAINS WHERE id IN ({q})) i") if v)
    ts, g, corr, stack = [], [], [], []
    for s, gt, c, cc in rows:
        key = chain_of.get(cc)
        if not key:
            continue
        ts.append(s)
        g.append(gt)
        corr.append(c)
        stack.append(keys.setdefault(key, len(keys)))
    ga = np.array(g, dtype=np.int64)
    return pd.DataFrame({"pid": ga >> 24 & 0xFFFFFF, "tid": ga & 0xFFFFFF, "start_ns": np.array(ts, np.int64),
                         "correlation_id": np.array(corr, np.int64), "stack": np.array(stack, np.int64)})


def _python(con: sqlite3.Connection, tables: set[str], window: tuple[int, int] | None,
            threads: list[tuple[int, int]] | None, out: Samples) -> None:
    """Python samples (in the window, on the threads) and Python backtraces (in the window), decoded
    into ``out`` with their stacks as string ids (resolved by the caller)."""
    inputs = out.inputs
    inputs.update(python_samples=0, python_backtraces=0, python_frames_lost=False)
    if "NVTX_EVENTS" not in tables or "NVTX_PAYLOAD_SCHEMA_ENTRIES" not in tables:
        return
    domains = {str(t): int(d) for d, t in con.execute(
        "SELECT domainId, text FROM NVTX_EVENTS WHERE eventType = 75 AND text IN (?, ?)", (PY_SAMPLING, PY_BACKTRACE))}
    stack_ix: dict[tuple[tuple[int, int, int], ...], int] = {}
    lost, damaged = False, 0
    for key, name in (("python", PY_SAMPLING), ("backtraces", PY_BACKTRACE)):
        if name not in domains:
            continue
        dom = domains[name]
        n, with_blob = con.execute("SELECT count(*), count(binaryData) FROM NVTX_EVENTS WHERE eventType = 34 AND "
                                   "domainId = ?", (dom,)).fetchone()
        inputs[f"python_{'samples' if key == 'python' else 'backtraces'}"] = int(n)
        lost = lost or (int(n) > 0 and int(with_blob) < int(n))
        if not with_blob:
            continue
        lay = _layout(con, dom)
        where, params = _filters(window, threads if key == "python" else None)
        rows = con.execute(f"SELECT start, globalTid, binaryData FROM NVTX_EVENTS WHERE eventType = 34 AND domainId = ? "
                           f"AND binaryData IS NOT NULL{where} ORDER BY start LIMIT ?", (dom, *params, MAX_SAMPLES))
        ts, pid, tid, state, stack = [], [], [], [], []
        for s, g, blob in rows:
            try:
                d = _decode(bytes(blob), lay) if lay else None
            except (struct.error, TypeError, ValueError):  # a damaged blob: that sample is skipped
                d = None
            if d is None:
                damaged += 1
            if d is None or not isinstance(g, int) or not isinstance(s, int):
                continue
            st, frames = d
            ix = stack_ix.setdefault(frames, len(stack_ix))
            ts.append(int(s))
            pid.append(int(g) >> 24 & 0xFFFFFF)
            tid.append(int(g) & 0xFFFFFF)
            state.append(int(st))
            stack.append(ix)
        setattr(out, key, pd.DataFrame({"ts_ns": np.array(ts, np.int64), "pid": np.array(pid, np.int64),
                                        "tid": np.array(tid, np.int64), "state": np.array(state, np.int64),
                                        "stack": np.array(stack, np.int64)}))
    stacks: list[tuple[Frame, ...]] = [()] * len(stack_ix)
    for fr, ix in stack_ix.items():
        stacks[ix] = fr  # type: ignore[assignment]  # string ids, resolved by read_from
    out.stacks = stacks
    inputs["python_frames_lost"] = lost
    if damaged:  # payloads that could not be decoded: their samples are skipped (key absent when none)
        inputs["python_blobs_damaged"] = damaged
