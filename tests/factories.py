"""Hand-built traces for edge cases: frames with exactly the loader's columns and dtypes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from nsysan.trace.model import Trace, TraceMeta

PID = 100
GPID = (1 << 48) | (PID << 24)


def _times(rows: list[tuple[int, int]]) -> dict[str, Any]:
    s = np.array([r[0] for r in rows], dtype=np.int64)
    e = np.array([r[1] for r in rows], dtype=np.int64)
    return {"start_ns": s, "end_ns": e, "dur_ns": e - s}


def kernels(rows: list[tuple[int, int, int]], *, corr_start: int = 1, name: str = "k") -> pd.DataFrame:
    """rows: (start, end, stream)."""
    n = len(rows)
    return pd.DataFrame({**_times([(a, b) for a, b, _ in rows]), "device_id": np.zeros(n, np.int64),
                         "context_id": np.ones(n, np.int64), "stream_id": np.array([s for *_, s in rows], np.int64),
                         "correlation_id": np.arange(corr_start, corr_start + n, dtype=np.int64),
                         "global_pid": np.full(n, GPID, np.int64), "name": pd.Categorical([name] * n),
                         "short_name": pd.Categorical([name] * n), "grid_x": 1, "grid_y": 1, "grid_z": 1,
                         "block_x": 32, "block_y": 1, "block_z": 1, "registers_per_thread": 16,
                         "static_smem_bytes": 0, "dynamic_smem_bytes": 0,
                         "graph_node_id": pd.array([pd.NA] * n, dtype="Int64"), "launch_type": 0,
                         "pid": np.full(n, PID, np.int64)})


def memcpy(rows: list[tuple[int, int, int, str, int]], *, corr_start: int = 1000) -> pd.DataFrame:
    """rows: (start, end, stream, kind 'HtoD'/'DtoH', host mem kind 0 pageable / 1 pinned)."""
    n = len(rows)
    code = {"HtoD": 1, "DtoH": 2, "DtoD": 8}
    kinds = [r[3] for r in rows]
    return pd.DataFrame({**_times([(r[0], r[1]) for r in rows]), "device_id": np.zeros(n, np.int64),
                         "context_id": np.ones(n, np.int64), "stream_id": np.array([r[2] for r in rows], np.int64),
                         "correlation_id": np.arange(corr_start, corr_start + n, dtype=np.int64),
                         "global_pid": np.full(n, GPID, np.int64), "bytes": np.full(n, 1 << 20, np.int64),
                         "copy_kind": np.array([code[k] for k in kinds], np.int64),
                         "src_kind": np.array([r[4] if r[3] == "HtoD" else 2 for r in rows], np.int64),
                         "dst_kind": np.array([r[4] if r[3] == "DtoH" else 2 for r in rows], np.int64),
                         "graph_node_id": pd.array([pd.NA] * n, dtype="Int64"), "copy_count": 1,
                         "src_device_id": pd.array([pd.NA] * n, dtype="Int64"),
                         "dst_device_id": pd.array([pd.NA] * n, dtype="Int64"),
                         "pid": np.full(n, PID, np.int64),
                         "kind": pd.array(kinds, dtype="string"),
                         "host_mem": pd.array(["Pageable" if r[4] == 0 else "Pinned" for r in rows], dtype="string")})


def api(rows: list[tuple[int, int, str, int]], *, tid: int = PID) -> pd.DataFrame:
    """rows: (start, end, name, correlation_id)."""
    n = len(rows)
    return pd.DataFrame({**_times([(r[0], r[1]) for r in rows]), "global_tid": np.full(n, GPID | tid, np.int64),
                         "correlation_id": np.array([r[3] for r in rows], np.int64),
                         "name": pd.Categorical([r[2] for r in rows]), "event_class": np.zeros(n, np.int64),
                         "return_value": pd.array([0] * n, dtype="Int64"), "pid": np.full(n, PID, np.int64),
                         "tid": np.full(n, tid, np.int64), "global_pid": np.full(n, GPID, np.int64),
                         "api_layer": ["runtime"] * n})


def nvtx(rows: list[tuple[int, int, str]], *, tid: int = PID, domain: str | None = None) -> pd.DataFrame:
    """rows: (start, end, text); ``domain`` labels them ``domain:text`` as nsys does."""
    n = len(rows)
    df = pd.DataFrame({"start_ns": np.array([r[0] for r in rows], np.int64),
                       "end_ns": pd.array([r[1] for r in rows], dtype="Int64"),
                       "text": pd.array([r[2] for r in rows], dtype="string"),
                       "domain": pd.array([domain if domain else pd.NA] * n, dtype="string"),
                       "name": pd.array([f"{domain}:{r[2]}" if domain else r[2] for r in rows], dtype="string"),
                       "event_type": np.full(n, 59),
                       "style": ["PushPop"] * n, "range_id": pd.array([pd.NA] * n, dtype="Int64"),
                       "global_tid": np.full(n, GPID | tid, np.int64), "pid": np.full(n, PID, np.int64),
                       "tid": np.full(n, tid, np.int64)})
    df = df.assign(dur_ns=(df["end_ns"] - df["start_ns"]).astype("Int64"))
    return df.sort_values(["start_ns", "dur_ns"], ascending=[True, False]).reset_index(drop=True)


def empty_like(df: pd.DataFrame) -> pd.DataFrame:
    return df.iloc[0:0]


def make_trace(**tables: pd.DataFrame) -> Trace:
    base_k = kernels([(0, 1, 7)]).iloc[0:0]
    base_m = memcpy([(0, 1, 7, "HtoD", 0)]).iloc[0:0]
    base_a = api([(0, 1, "x", 1)]).iloc[0:0]
    base_n = nvtx([(0, 1, "x")]).iloc[0:0]
    memset = base_m[["start_ns", "end_ns", "dur_ns", "device_id", "context_id", "stream_id", "correlation_id",
                     "global_pid", "bytes", "pid"]].assign(mem_kind=0, value=0)
    gl = base_k[["start_ns", "end_ns", "dur_ns", "device_id", "context_id", "stream_id", "correlation_id",
                 "global_pid", "pid"]].assign(graph_id=pd.array([], dtype="Int64"),
                                              graph_exec_id=pd.array([], dtype="Int64"))
    frames = {"kernels": base_k, "graph_launches": gl, "memcpy": base_m, "memset": memset,
              "sync": memset, "cuda_api": base_a, "osrt": base_a, "nvtx": base_n,
              "threads": pd.DataFrame({"global_tid": [], "name": []}),
              "processes": pd.DataFrame({"global_pid": [], "pid": [], "name": []}),
              "gpus": pd.DataFrame({"device_id": [0], "name": ["Test GPU"], "sm_count": pd.array([132], dtype="Int64"),
                                    "total_memory_bytes": pd.array([1], dtype="Int64"),
                                    "compute_major": pd.array([9], dtype="Int64"),
                                    "compute_minor": pd.array([0], dtype="Int64")}),
              "streams": pd.DataFrame({"stream_id": []}), "gpu_memory_usage": pd.DataFrame({"start_ns": []})}
    frames.update(tables)
    starts = [int(f["start_ns"].min()) for k, f in frames.items() if "start_ns" in f and len(f) and k != "gpu_memory_usage"]
    ends = [int(pd.to_numeric(f["end_ns"]).max()) for k, f in frames.items() if "end_ns" in f and len(f)]
    meta = TraceMeta(path="handmade.sqlite", nsys_version="test", schema_version=None, platform=None,
                     version_source="test", start_ns=min(starts) if starts else None,
                     end_ns=max(ends) if ends else None, tables=())
    return Trace(meta=meta, **frames)


def apply_sql(path: Any, *stmts: str) -> None:
    """Run SQL statements on an export file (a test's own copy), committing them; errors raise."""
    import sqlite3

    con = sqlite3.connect(path)
    try:
        for st in stmts:
            con.execute(st)
        con.commit()
    finally:
        con.close()
