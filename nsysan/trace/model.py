"""The typed, validated in-memory trace.

Every table is a pandas DataFrame with int64 nanosecond times and snake_case columns with unit
suffixes. A table the export lacks is an empty frame with the right columns and dtypes.

Integer widths: times, durations, byte counts and global ids are int64. ``pid`` and ``tid`` are
int32 (24-bit fields). The columns ``schema.NARROW`` names (device_id, stream_id, correlation_id of
the GPU tables and CUDA API; grid_x..block_z) take the narrowest signed type their values in this
trace allow, at least int32 for ids and int8 for grid/block; one value beyond int32 keeps the column
int64, and so does an empty table. Widen (``to_numpy(np.int64)``) before arithmetic that can leave
the type's range.

Columns of one value: in a table of at least ``CONSTANT_MIN_ROWS`` (4096) rows, a ``pid`` or
``tid`` that is the same in every row (one process, one thread: a launch loop's 4M API calls) and a
``schema.NARROW`` column of one value (one GPU, one stream, one grid size) is that value broadcast
to the table's length (``np.broadcast_to``: strides 0, read-only). It reads as the full column
(``to_numpy``, comparisons, group-bys, ``take``) and costs no memory; writing into it raises, so copy
(``np.array(col)``) before changing values in place. On the real 329 MB launch loop this is 53 MB.
A nullable column wholly missing in such a table (``graph_node_id`` outside CUDA graphs) is one
broadcast missing value the same way (its data and mask arrays). The analyses keep their own new
columns of one value so too (``analyses.frames.compact``: the GPU ops' op, kind, role, tid and
api_name codes, the launches' flags, the gaps' tid; 15 MiB on the 245 MB replica).

Common columns: ``start_ns``, ``end_ns``, ``dur_ns`` (= end - start), ``pid``, ``tid`` (decoded from
nsys' ``globalTid = vm<<48 | pid<<24 | tid`` in one place, ``frames._decode_ids``). The int64 global
ids of the event tables (``global_tid`` of cuda_api and osrt, ``global_pid`` of the GPU tables and
those two) are extra: the analyses read pid and tid, and on a 245 MB trace the ids were 57 of the
tables' 260 MiB. So are those of the side tables ``gpu_memory_usage`` and ``sched`` (millions of rows
where recorded). ``threads``, ``processes`` and ``nvtx`` keep theirs.

Tables and their own columns:

Columns marked (extra) are read only with ``open_trace(path, all_columns=True)``: no analysis needs
them, and SQLite's read cost is per value.

* ``kernels``: device_id, stream_id, correlation_id, name (demangled), grid_x..z, block_x..z,
  graph_node_id (nullable: set for kernels inside a CUDA graph traced at node level); (extra)
  context_id, short_name, registers_per_thread, static_smem_bytes, dynamic_smem_bytes, launch_type.
* ``graph_launches``: one row per CUDA Graph launch executed on the GPU (nsys' default
  ``--cuda-graph-trace=graph``: the graph's kernels are not in ``kernels``): device_id, stream_id,
  correlation_id, graph_id, graph_exec_id.
* ``memcpy``: device_id, stream_id, correlation_id, bytes, copy_kind (int), kind (``HtoD``...),
  src_kind/dst_kind (ints), host_mem ("Pageable", "Pinned", ... for the host side of HtoD/DtoH; "" else).
* ``memset``: device_id, stream_id, correlation_id, bytes, mem_kind, value.
* ``sync``: CUDA synchronization records on the GPU timeline: sync_type (1 event, 2 stream wait,
  3 stream sync, 4 context sync), event_id.
* ``cuda_api``: CUDA runtime and driver calls: name (version suffix ``_v7000`` stripped),
  api_layer ("runtime" for ``cuda*`` names, else "driver"), correlation_id; (extra) event_class,
  return_value.
* ``osrt``: OS runtime calls: name; (extra) return_value, nesting_level.
* ``nvtx``: NVTX ranges and marks: text, domain, name (``domain:text`` when in a domain, as nsys
  labels it), event_type, style ("PushPop", "StartEnd", "Mark"), range_id. ``end_ns``/``dur_ns``
  are nullable (marks and ranges left open at the end of the capture).
* ``threads``: global_tid, pid, tid, name.  ``processes``: global_pid, pid, name.
* ``gpus``: device_id (= ``TARGET_INFO_GPU.id``, the join key of activity rows), name, sm_count,
  total_memory_bytes, compute_major/minor, memory_bandwidth_bytes_per_s, clock_rate_hz.
* ``streams``: stream_id, pid, context_id, priority, flag.
* ``gpu_memory_usage``: allocation/free point events (``--cuda-memory-usage=true``): device_id,
  bytes, mem_kind, operation (0 allocation, 1 deallocation), correlation_id, address; pid. mem_kind
  and operation are as narrow as int8 (``schema.NARROW``).
* ``sched``: thread scheduling (``SCHED_EVENTS``, ``--cpuctxsw``): a row per switch on (``is_in`` 1)
  or off a CPU (int8); pid, tid.
* ``um_gpu_faults``: unified memory GPU page fault groups (``--cuda-um-gpu-page-faults=true``):
  start_ns, end_ns, pid, device_id, faults (their number), access (1 read, 2 write, 3 atomic,
  4 prefetch). ``um_cpu_faults``: CPU page faults on managed memory (``--cuda-um-cpu-page-faults=true``),
  one point event each: start_ns, pid. Migrations are ``memcpy`` rows of copy kinds 11 and 12 with
  their ``migration_cause`` (1 user prefetch, 2 page fault, 3 speculative prefetch, 4 eviction).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import pandas as pd

# a column of at least this many rows that holds one value throughout (one process, thread, device
# or stream: a launch loop's 4M calls) is kept as that value broadcast, read-only, not as a column
CONSTANT_MIN_ROWS = 4096


def constant_column(value: int, n: int, dtype: Any) -> np.ndarray:
    """``n`` rows of one value as a read-only view of it (strides 0): reads as a full column, costs
    no memory; writing to it raises (analyses never write to a trace's columns)."""
    return np.broadcast_to(np.asarray(value, dtype=dtype), (n,))


def as_column(df: pd.DataFrame, values: Any) -> pd.Series:
    """``values`` (an array nothing else writes to, or a ``constant_column``) as a column of ``df``
    that ``assign`` takes as it is: pandas copies a bare array it is given (20 MB per million-row
    column), and a broadcast one into a full array."""
    return pd.Series(values, index=df.index, copy=False)


def is_constant_column(values: Any) -> bool:
    """Whether ``values`` is such a column: one value broadcast (strides 0), at least one row."""
    return isinstance(values, np.ndarray) and values.ndim == 1 and values.strides == (0,) and len(values) > 0


def take_columns(held: list[pd.DataFrame], order: np.ndarray) -> pd.DataFrame:
    """``df.take(order).reset_index(drop=True)``, a column at a time: each column is let go as its
    reordered copy is made (``held`` is emptied), so the sort needs one column's room, not the
    frame's; a column of one value (``constant_column``) stays one (``DataFrame.take`` would make it
    a full array)."""
    df = held.pop()
    cols = {c: (df[c].array if isinstance(df[c].dtype, pd.api.extensions.ExtensionDtype) else df[c].to_numpy())
            for c in df.columns}
    del df
    for c, values in cols.items():
        cols[c] = constant_column(values[0], len(order), values.dtype) if is_constant_column(values) \
            else values.take(order)
    return pd.DataFrame(cols, copy=False)


@dataclass(frozen=True)
class TraceMeta:
    path: str
    nsys_version: str | None
    schema_version: str | None
    platform: str | None
    version_source: str  # "META_DATA_EXPORT", "EXPORT_META_DATA" or "inferred"
    start_ns: int | None  # session window (ANALYSIS_DETAILS), else first event
    end_ns: int | None
    tables: tuple[str, ...]
    capture: tuple[tuple[str, str], ...] = ()  # META_DATA_CAPTURE rows (may hold secrets)
    # add to an event time to get UTC epoch ns (session start - EXPORT_CONFIG_TIME_SHIFT): exports of
    # several ranks share one clock this way; None when the export does not say
    epoch_offset_ns: int | None = None
    warnings: tuple[str, ...] = ()

    @property
    def duration_ns(self) -> int:
        if self.start_ns is None or self.end_ns is None:
            return 0
        return max(0, self.end_ns - self.start_ns)


from nsysan.trace.schema import INTERVAL_TABLES

TIME_LIMIT = 1 << 62  # ns: an event time beyond +-2^62 (~146 years) is damage, set aside by load


@dataclass(frozen=True, slots=True)
class Trace:
    """An Nsight Systems export, loaded. Frames are never mutated after load."""

    meta: TraceMeta
    kernels: pd.DataFrame
    graph_launches: pd.DataFrame
    memcpy: pd.DataFrame
    memset: pd.DataFrame
    sync: pd.DataFrame
    cuda_api: pd.DataFrame
    osrt: pd.DataFrame
    nvtx: pd.DataFrame
    threads: pd.DataFrame
    processes: pd.DataFrame
    gpus: pd.DataFrame
    streams: pd.DataFrame
    gpu_memory_usage: pd.DataFrame
    sched: pd.DataFrame = field(default_factory=pd.DataFrame)
    um_gpu_faults: pd.DataFrame = field(default_factory=pd.DataFrame)
    um_cpu_faults: pd.DataFrame = field(default_factory=pd.DataFrame)
    # GPU metric samples (``trace.metrics.Metrics``: per source, the wanted metrics only), None when the
    # export has no GPU_METRICS table
    gpu_metrics: Any = None

    def __repr__(self) -> str:
        """One line (the dataclass default printed every frame): the file, nsys, the row counts."""
        from pathlib import Path

        from nsysan.units import clean_text

        name = clean_text(Path(self.meta.path).name if self.meta.path else "trace")[:80]
        counts = ", ".join(f"{n:,} {t}" for t, n in self.counts().items() if n and t in (
            "kernels", "graph_launches", "memcpy", "memset", "cuda_api", "osrt", "nvtx"))
        return f"<nsysan.Trace {name!r} (nsys {clean_text(self.meta.nsys_version or 'unknown')[:30]}): {counts or 'no events'}>"

    def tables(self) -> dict[str, pd.DataFrame]:
        return {f.name: getattr(self, f.name) for f in fields(self) if isinstance(getattr(self, f.name),
                                                                               pd.DataFrame)}

    def counts(self) -> dict[str, int]:
        return {name: len(df) for name, df in self.tables().items()}

    def thread_names(self) -> dict[tuple[int, int], str]:
        """(pid, tid) -> the thread's name from ThreadNames (unnamed threads left out; the last
        name of a renamed thread)."""
        th = self.threads
        return {(int(p), int(t)): str(n) for p, t, n in zip(th["pid"].tolist(), th["tid"].tolist(), list(th["name"].array))
                if _named(n)} if len(th) else {}

    def process_names(self) -> dict[int, str]:
        """pid -> the process's name (unnamed processes left out)."""
        pr = self.processes
        return {int(p): str(n) for p, n in zip(pr["pid"].tolist(), list(pr["name"].array)) if _named(n)} \
            if len(pr) else {}

    @property
    def is_empty(self) -> bool:
        """No GPU activity, no API calls and no NVTX: the capture recorded nothing to analyse."""
        return all(len(getattr(self, t)) == 0 for t in ("kernels", "graph_launches", "memcpy", "memset",
                                                           "cuda_api", "nvtx"))

    def self_check(self) -> list[str]:
        """Invariants every loaded trace must satisfy. Returns the violations (empty when sound)."""
        problems: list[str] = []
        for name in INTERVAL_TABLES:
            df = getattr(self, name)
            if len(df) == 0:
                continue
            if (df["end_ns"] < df["start_ns"]).any():
                problems.append(f"{name}: end_ns < start_ns")
            if not df["start_ns"].is_monotonic_increasing:
                problems.append(f"{name}: not sorted by start_ns")
            if not (df["dur_ns"] == df["end_ns"] - df["start_ns"]).all():
                problems.append(f"{name}: dur_ns != end_ns - start_ns")
            if df["start_ns"].dtype != "int64":
                problems.append(f"{name}: start_ns is {df['start_ns'].dtype}, not int64")
            if not (-TIME_LIMIT < int(df["start_ns"].min()) and int(df["end_ns"].max()) < TIME_LIMIT):
                problems.append(f"{name}: a time beyond +-2^62 ns (load sets such rows aside)")
        k = self.kernels
        if len(k) and k.duplicated(["pid", "correlation_id"]).any():
            # graph kernels traced at node level share the graph launch's correlation id
            plain = k.loc[k["graph_node_id"].isna()]
            if plain.duplicated(["pid", "correlation_id"]).any():
                problems.append("kernels: correlation_id not unique per process")
        nv = self.nvtx
        if len(nv):
            closed = nv.loc[nv["end_ns"].notna()]
            if (closed["end_ns"] < closed["start_ns"]).any():
                problems.append("nvtx: end_ns < start_ns")
        return problems


def _named(n: object) -> bool:
    return n is not None and n is not pd.NA and str(n) not in ("", "nan", "<NA>")
