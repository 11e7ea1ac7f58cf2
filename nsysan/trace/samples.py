"""CPU and Python samples and CUDA-call backtraces of an export (``nsys profile -s process-tree
--python-sampling=true --cudabacktrace=... --python-backtrace=cuda``), read in aggregate.

Python samples and Python backtraces are NVTX extended-payload events (``NVTX_EVENTS`` rows of
``eventType`` 34 in the domains 'Python Periodic Sampling' and 'Python Backtrace on CUDA'); their
frames are in ``binaryData``, which nsys fills only when the export was made with
``--include-blobs=true`` (see ``../shared/NSYS-SCHEMA.md``). The blob layout is read from the
payload schema tables (``NVTX_PAYLOAD_SCHEMA_ENTRIES``: the offsets of the frame count and the
frames array, the size of a frame and the offsets of its function, file and line), never assumed.

What is returned stays small: one row per sample (time, thread, state, stack id) and one row per
distinct stack (its frames as a tuple of (function, file, line), innermost first). Names in
``StringIds`` are HTML-escaped by nsys; they are unescaped once here.
"""

from __future__ import annotations

import html
import sqlite3
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from nsysan.trace.db import _connect

PY_SAMPLING = "Python Periodic Sampling"
PY_BACKTRACE = "Python Backtrace on CUDA"
MAX_SAMPLES = 5_000_000


@dataclass
class Samples:
    """``python``: ts_ns, pid, tid, state, stack (per Python sample); ``backtraces``: the same for the
    Python backtraces of CUDA calls; ``stacks``: stack id -> tuple of (function, file, line),
    innermost first. ``inputs`` says which inputs the export holds (and which were lost in export)."""

    python: pd.DataFrame
    backtraces: pd.DataFrame
    stacks: list[tuple[tuple[str, str, int], ...]] = field(default_factory=list)
    inputs: dict[str, object] = field(default_factory=dict)


def _empty() -> pd.DataFrame:
    return pd.DataFrame({"ts_ns": pd.Series(dtype="int64"), "pid": pd.Series(dtype="int64"),
                         "tid": pd.Series(dtype="int64"), "state": pd.Series(dtype="int64"),
                         "stack": pd.Series(dtype="int64")})


# NVTX payload entry types (nvToolsExtPayload.h) -> struct format: int32/uint32, int64/uint64, and
# registered-string handles (80..), 8 bytes
_FMT = {11: "<b", 12: "<B", 13: "<h", 14: "<H", 15: "<i", 16: "<I", 17: "<q", 18: "<Q"}


def _fmt(t: int | None) -> str:
    return _FMT.get(int(t or 0), "<Q")


def _layout(con: sqlite3.Connection, domain: int) -> dict[str, object] | None:
    """Offsets and formats of the state, frame count and frames, the frame size and its fields' offsets
    and formats, from the payload schema of ``domain``."""
    rows = con.execute("SELECT schemaId, name, type, offset FROM NVTX_PAYLOAD_SCHEMA_ENTRIES WHERE domainId = ?",
                       (domain,)).fetchall()
    by = {str(n): (int(sc), (int(t) if t is not None else None), (int(o) if o is not None else None))
          for sc, n, t, o in rows}
    need = ("Frames count", "Frames", "Function", "File", "Line")
    if not all(k in by for k in need):
        return None
    frame_schema = by["Function"][0]
    size = con.execute("SELECT payloadSize FROM NVTX_PAYLOAD_SCHEMAS WHERE domainId = ? AND schemaId = ?",
                       (domain, frame_schema)).fetchone()

    def off(name: str, default: int) -> int:
        o = by[name][2] if name in by else None
        return default if o is None else o

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


def read_samples(path: str | Path) -> Samples:
    """The Python samples and backtraces of the export at ``path`` (empty frames when it has none)."""
    con = _connect(Path(path))
    try:
        return _read(con)
    finally:
        con.close()


def _read(con: sqlite3.Connection) -> Samples:
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    inputs: dict[str, object] = {
        "cpu_samples": int(con.execute("SELECT count(*) FROM COMPOSITE_EVENTS").fetchone()[0])
        if "COMPOSITE_EVENTS" in tables else 0,
        "cuda_backtraces": int(con.execute("SELECT count(*) FROM CUDA_CALLCHAINS").fetchone()[0])
        if "CUDA_CALLCHAINS" in tables else 0,
        "gpu_metrics": int(con.execute("SELECT count(*) FROM GPU_METRICS").fetchone()[0])
        if "GPU_METRICS" in tables else 0}
    out = Samples(_empty(), _empty(), [], inputs)
    if "NVTX_EVENTS" not in tables or "NVTX_PAYLOAD_SCHEMA_ENTRIES" not in tables:
        inputs.update(python_samples=0, python_backtraces=0, python_frames_lost=False)
        return out
    domains = {str(t): int(d) for d, t in con.execute(
        "SELECT domainId, text FROM NVTX_EVENTS WHERE eventType = 75 AND text IN (?, ?)", (PY_SAMPLING, PY_BACKTRACE))}
    strings: dict[int, str] = {}
    stack_ix: dict[tuple[tuple[int, int, int], ...], int] = {}
    lost = False
    for key, name in (("python", PY_SAMPLING), ("backtraces", PY_BACKTRACE)):
        if name not in domains:
            inputs[f"python_{'samples' if key == 'python' else 'backtraces'}"] = 0
            continue
        dom = domains[name]
        lay = _layout(con, dom)
        rows = con.execute("SELECT start, globalTid, binaryData FROM NVTX_EVENTS WHERE eventType = 34 AND domainId = ? "
                           "ORDER BY start LIMIT ?", (dom, MAX_SAMPLES)).fetchall()
        inputs[f"python_{'samples' if key == 'python' else 'backtraces'}"] = len(rows)
        ts, pid, tid, state, stack = [], [], [], [], []
        for s, g, blob in rows:
            if blob is None:
                lost = True
                continue
            try:
                d = _decode(bytes(blob), lay) if lay else None
            except (struct.error, TypeError, ValueError):  # a damaged blob: that sample is skipped
                d = None
            if d is None:
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
    ids = {i for fr in stack_ix for f in fr for i in f[:2]}
    if ids:
        q = ",".join(str(int(i)) for i in ids)
        strings = {int(i): html.unescape(str(v)) for i, v in con.execute(f"SELECT id, value FROM StringIds WHERE id IN ({q})")}
    stacks: list[tuple[tuple[str, str, int], ...]] = [()] * len(stack_ix)
    for fr, ix in stack_ix.items():
        stacks[ix] = tuple((strings.get(f, "[unknown]"), strings.get(fi, ""), int(ln)) for f, fi, ln in fr)
    out.stacks = stacks
    inputs["python_frames_lost"] = lost
    return out
