"""nsys table and column names, and how they map to nsysan's typed tables.

This is the only module that knows nsys' names. Each ``TableSpec`` lists, per output column, the
candidate source columns in preference order (nsys renamed and inserted columns across 2020.3 ->
2026.2; see NSYS-SCHEMA.md); a column absent from a given export is filled with its default.
Times stay int64 nanoseconds; ``name`` columns are ``StringIds`` ids resolved at load time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

DType = Literal["int64", "Int64", "float64", "str", "name"]


@dataclass(frozen=True)
class Col:
    name: str
    sources: tuple[str, ...]
    dtype: DType
    default: int | None = None  # used when no source column exists (None -> NULL)
    extra: bool = False  # read only with ``open_trace(..., all_columns=True)`` (no analysis uses it)


@dataclass(frozen=True)
class TableSpec:
    name: str
    sources: tuple[str, ...]  # candidate nsys tables, first present wins
    columns: tuple[Col, ...]
    required: tuple[str, ...] = ()  # source columns without which the table is unusable
    # (source column, value): keep only rows where that column equals the value, when the column exists
    keep_only: tuple[str, int] | None = None


def C(name: str, *sources: str, dtype: DType = "int64", default: int | None = None, extra: bool = False) -> Col:
    return Col(name, sources, dtype, default, extra)


def X(name: str, *sources: str, dtype: DType = "int64", default: int | None = None) -> Col:
    """An extra column: loaded on request only. Reading costs time per value (about 0.1 us each), so
    the million-row tables load only what the analyses use."""
    return Col(name, sources, dtype, default, True)


_GPU_ACTIVITY = (
    C("start_ns", "start"), C("end_ns", "end"),
    C("device_id", "deviceId", default=0), X("context_id", "contextId", default=0),
    C("stream_id", "streamId", default=0), C("correlation_id", "correlationId", default=0),
    C("global_pid", "globalPid", default=0),
)

KERNELS = TableSpec("kernels", ("CUPTI_ACTIVITY_KIND_KERNEL",), (
    *_GPU_ACTIVITY,
    C("name", "demangledName", "shortName", dtype="name"),
    X("short_name", "shortName", "demangledName", dtype="name"),
    C("grid_x", "gridX", default=0), C("grid_y", "gridY", default=0), C("grid_z", "gridZ", default=0),
    C("block_x", "blockX", default=0), C("block_y", "blockY", default=0), C("block_z", "blockZ", default=0),
    X("registers_per_thread", "registersPerThread", default=0),
    X("static_smem_bytes", "staticSharedMemory", default=0),
    X("dynamic_smem_bytes", "dynamicSharedMemory", default=0),
    C("graph_node_id", "graphNodeId", dtype="Int64"),
    X("launch_type", "launchType", default=0),
), required=("start", "end"))

GRAPH_LAUNCHES = TableSpec("graph_launches", ("CUPTI_ACTIVITY_KIND_GRAPH_TRACE",), (
    *_GPU_ACTIVITY,
    C("graph_id", "graphId", dtype="Int64"), C("graph_exec_id", "graphExecId", dtype="Int64"),
), required=("start", "end"))

MEMCPY = TableSpec("memcpy", ("CUPTI_ACTIVITY_KIND_MEMCPY",), (
    *_GPU_ACTIVITY,
    C("bytes", "bytes", default=0), C("copy_kind", "copyKind", default=0),
    C("src_kind", "srcKind", default=7), C("dst_kind", "dstKind", default=7),
    C("graph_node_id", "graphNodeId", dtype="Int64"), C("copy_count", "copyCount", default=1),
    C("src_device_id", "srcDeviceId", dtype="Int64"), C("dst_device_id", "dstDeviceId", dtype="Int64"),
    C("migration_cause", "migrationCause", default=0),  # unified memory rows (copy kinds 11, 12): why it moved
), required=("start", "end"))

MEMSET = TableSpec("memset", ("CUPTI_ACTIVITY_KIND_MEMSET",), (
    *_GPU_ACTIVITY,
    C("bytes", "bytes", default=0), C("mem_kind", "memKind", default=7), C("value", "value", default=0),
    C("graph_node_id", "graphNodeId", dtype="Int64"),
), required=("start", "end"))

SYNC = TableSpec("sync", ("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",), (
    *_GPU_ACTIVITY,
    C("sync_type", "syncType", default=0), C("event_id", "eventId", dtype="Int64"),
), required=("start", "end"))

CUDA_API = TableSpec("cuda_api", ("CUPTI_ACTIVITY_KIND_RUNTIME",), (
    C("start_ns", "start"), C("end_ns", "end"), C("global_tid", "globalTid", default=0),
    C("correlation_id", "correlationId", default=0), C("name", "nameId", dtype="name"),
    X("event_class", "eventClass", default=0), X("return_value", "returnValue", dtype="Int64"),
), required=("start", "end", "nameId"))

OSRT = TableSpec("osrt", ("OSRT_API",), (
    C("start_ns", "start"), C("end_ns", "end"), C("global_tid", "globalTid", default=0),
    C("name", "nameId", dtype="name"), X("return_value", "returnValue", dtype="Int64"),
    X("nesting_level", "nestingLevel", default=0),
    # eventClass 27 is a traced call; 31/32 are "OS runtime libraries profiling started/finished"
    # markers on the profiler's own thread, which nsys' osrt_sum leaves out too.
), required=("start", "end", "nameId"), keep_only=("eventClass", 27))

NVTX_RAW = TableSpec("nvtx_raw", ("NVTX_EVENTS",), (
    C("start_ns", "start"), C("end_ns", "end", dtype="Int64"), C("event_type", "eventType", default=0),
    C("range_id", "rangeId", dtype="Int64"), C("text", "text", dtype="str"),
    C("text_id", "textId", dtype="Int64"), C("global_tid", "globalTid", default=0),
    C("end_global_tid", "endGlobalTid", dtype="Int64"), C("domain_id", "domainId", dtype="Int64"),
    C("category", "category", dtype="Int64"),
), required=("start",))

THREADS = TableSpec("threads", ("ThreadNames",), (
    C("global_tid", "globalTid", default=0), C("name", "nameId", dtype="name"),
), required=("globalTid",))

PROCESSES = TableSpec("processes", ("PROCESSES",), (
    C("global_pid", "globalPid", default=0), C("pid", "pid", default=0), C("name", "name", dtype="str"),
), required=("globalPid",))

GPUS = TableSpec("gpus", ("TARGET_INFO_GPU",), (
    C("device_id", "id", "deviceId", default=0), C("name", "name", dtype="str"),
    C("sm_count", "smCount", dtype="Int64"), C("total_memory_bytes", "totalMemory", dtype="Int64"),
    C("compute_major", "computeMajor", dtype="Int64"), C("compute_minor", "computeMinor", dtype="Int64"),
    C("memory_bandwidth_bytes_per_s", "memoryBandwidth", dtype="Int64"),
    C("clock_rate_hz", "clockRate", dtype="Int64"), C("bus_location", "busLocation", dtype="str"),
), required=())

GPUS_LEGACY = TableSpec("gpus", ("TARGET_INFO_CUDA_GPU",), (
    C("device_id", "deviceId", "id", default=0), C("name", "name", dtype="str"),
    C("sm_count", "smCount", dtype="Int64"), C("total_memory_bytes", "totalMemory", dtype="Int64"),
    C("compute_major", "computeCapabilityMajor", dtype="Int64"),
    C("compute_minor", "computeCapabilityMinor", dtype="Int64"),
    C("memory_bandwidth_bytes_per_s", "memoryBandwidth", dtype="Int64"),
    C("clock_rate_hz", "clockRate", dtype="Int64"), C("bus_location", "pciBusId", dtype="str"),
), required=())

STREAMS = TableSpec("streams", ("TARGET_INFO_CUDA_STREAM",), (
    C("stream_id", "streamId", default=0), C("pid", "processId", default=0),
    C("context_id", "contextId", default=0), C("priority", "priority", dtype="Int64"),
    C("flag", "flag", dtype="Int64"),
), required=("streamId",))

GPU_MEMORY_USAGE = TableSpec("gpu_memory_usage", ("CUDA_GPU_MEMORY_USAGE_EVENTS",), (
    C("start_ns", "start"), C("global_pid", "globalPid", default=0), C("device_id", "deviceId", default=0),
    C("bytes", "bytes", default=0), C("mem_kind", "memKind", default=7),
    C("operation", "memoryOperationType", default=0), C("correlation_id", "correlationId", default=0),
    C("address", "address", default=0),
), required=("start",))

# thread scheduling (``--cpuctxsw``, on by default on Linux): a row per switch of a thread on or off a CPU
SCHED = TableSpec("sched", ("SCHED_EVENTS",), (
    C("start_ns", "start"), C("is_in", "isSchedIn", default=0), C("global_tid", "globalTid", default=0),
), required=("start", "isSchedIn", "globalTid"))

# unified memory page faults (``--cuda-um-gpu-page-faults=true`` / ``--cuda-um-cpu-page-faults=true``)
UM_GPU_FAULTS = TableSpec("um_gpu_faults", ("CUDA_UM_GPU_PAGE_FAULT_EVENTS",), (
    C("start_ns", "start"), C("end_ns", "end"), C("global_pid", "globalPid", default=0),
    C("device_id", "deviceId", default=0), C("faults", "numberOfPageFaults", default=1),
    C("access", "faultAccessType", default=0),
), required=("start", "end"))
UM_CPU_FAULTS = TableSpec("um_cpu_faults", ("CUDA_UM_CPU_PAGE_FAULT_EVENTS",), (
    C("start_ns", "start"), C("global_pid", "globalPid", default=0),
), required=("start",))

# Columns stored in the narrowest signed integer type their values allow, checked per trace at load
# (``frames._narrow``): never narrower than the type given, int64 when a value is beyond int32 (an id
# above 2^31 keeps int64). Times, durations, byte counts and global ids always stay int64; ``pid`` and
# ``tid`` (24 bits each, decoded from globalTid) are int32 in every table. Grid and block dimensions
# go as small as int8: their only consumer widens them (analyses.summaries); ids that analyses
# compare, merge and pack stay at least int32, so a Python scalar up to 2^31 never meets a narrower
# array (numpy 2 keeps an array's type in ``arr + 1000`` or ``np.where(m, arr, 1000)``).
_IDS = {"device_id": "int32", "stream_id": "int32", "correlation_id": "int32"}
NARROW: dict[str, dict[str, str]] = {
    "kernels": {**_IDS, **{c: "int8" for c in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")}},
    "graph_launches": _IDS, "memcpy": _IDS, "memset": _IDS, "sync": _IDS,
    "cuda_api": {"correlation_id": "int32"},
    "streams": {"pid": "int32"},
    # the point-event side tables: enum columns as small as int8 (memory kinds, operations, switch
    # direction: compared with constants only), ids at least int32
    "gpu_memory_usage": {"device_id": "int32", "correlation_id": "int32", "mem_kind": "int8", "operation": "int8"},
    "sched": {"is_in": "int8"},
}

# the event tables (start/end intervals): read by the direct reader when possible, checked and sorted
INTERVAL_TABLES = ("kernels", "graph_launches", "memcpy", "memset", "sync", "cuda_api", "osrt")
# big point-event tables (millions of rows where recorded) that only one analysis reads: decoded by the
# direct reader too, their global ids extra (pid and tid are what is read), but not counted as events
# (``--max-events``, the memory estimate): each is bounded like the other side tables
SIDE_TABLES = ("gpu_memory_usage", "sched")

ALL_SPECS = (KERNELS, GRAPH_LAUNCHES, MEMCPY, MEMSET, SYNC, CUDA_API, OSRT, NVTX_RAW, THREADS, PROCESSES,
             GPUS, STREAMS, GPU_MEMORY_USAGE, SCHED, UM_GPU_FAULTS, UM_CPU_FAULTS)

META_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")

# Enum values, hard-coded (identical in every export that ships ENUM_* tables; see NSYS-SCHEMA.md §7-8).
COPY_KIND = {0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
             8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "UVM HtoD", 12: "UVM DtoH", 13: "UVM DtoD"}
MEM_KIND = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 5: "Device Static",
            6: "Managed Static", 7: "Unknown"}
SYNC_TYPE = {0: "Unknown", 1: "Event sync", 2: "Stream wait", 3: "Stream sync", 4: "Context sync"}
NVTX_RANGE_TYPES = (59, 60, 70, 71)  # push/pop, start/end, NVTXT push/pop, NVTXT start/end
NVTX_PUSHPOP_TYPES = (59, 70)
NVTX_MARK = 34
NVTX_DOMAIN_CREATE = 75


def columns(spec: TableSpec, all_columns: bool) -> tuple[Col, ...]:
    return tuple(c for c in spec.columns if all_columns or not c.extra)


def select_outputs(spec: TableSpec, present: tuple[str, ...], *,
                   all_columns: bool = True) -> list[tuple[str, str | None, int | None]]:
    """Per output column: (name, the first of its source columns that ``present`` has, or None, and
    the literal to use when there is none). The SQL and the direct reader both read this plan."""
    out = []
    for col in columns(spec, all_columns):
        src = next((s for s in col.sources if s in present), None)
        out.append((col.name, src, None if src is not None else col.default))
    return out


def build_select(spec: TableSpec, table: str, present: tuple[str, ...], *, all_columns: bool = True,
                 rowid_range: tuple[int, int] | None = None) -> str:
    """SELECT for ``spec`` against ``table`` whose columns are ``present``. Names are quoted and come
    only from this module and the file's own schema (never from user input). ``rowid_range`` reads
    one slice [lo, hi) of the table (a rowid range scan), so big tables can be read in parallel."""
    parts = []
    for alias, src, default in select_outputs(spec, present, all_columns=all_columns):
        if src is not None:
            parts.append(f'"{src}" AS {alias}')
        elif default is not None:
            parts.append(f"{int(default)} AS {alias}")
        else:
            parts.append(f"NULL AS {alias}")
    sql = f'SELECT {", ".join(parts)} FROM "{table}"'
    where = []
    if spec.keep_only is not None and spec.keep_only[0] in present:
        where.append(f'"{spec.keep_only[0]}" = {int(spec.keep_only[1])}')
    if rowid_range is not None:
        where.append(f"rowid >= {int(rowid_range[0])} AND rowid < {int(rowid_range[1])}")
    if where:
        sql += " WHERE " + " AND ".join(where)
    return sql
