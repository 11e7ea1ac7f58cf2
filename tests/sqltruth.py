"""SQL-derived truth for the recorded fixtures: plain ``sqlite3`` queries on an Nsight Systems export.

Independent of nsysan (nothing here imports it), so tests can compare nsysan's numbers with what the
export itself says. All timestamps and durations are int64 nanoseconds, as stored; a median of an
even count is the mean of the two middle values: an int, or an exact ``.5`` float when their sum
is odd (``median``).

Definitions:

* GPU ops: rows of ``CUPTI_ACTIVITY_KIND_KERNEL``, ``_MEMCPY``, ``_MEMSET`` and ``_GRAPH_TRACE``
  (the latter holds one row per CUDA graph launch when nsys traced graphs as a whole, the default
  ``--cuda-graph-trace=graph``; with ``=node`` the graph's kernels are in the KERNEL table instead),
  whichever of these tables the export has.
* An op's launching call: the row of ``CUPTI_ACTIVITY_KIND_RUNTIME`` (CUDA runtime and driver API
  calls) with the same non-zero ``correlationId`` in the same process (the op's ``globalPid`` and the
  call's ``globalTid`` agree on ``>> 24``; correlation ids are per process).
* A range instance: a closed (``end`` not NULL) NVTX push/pop range (``eventType`` =
  NvtxPushPopRange) whose text (``text``, or ``textId`` -> ``StringIds.value``) is the name. Its
  ops are the GPU ops whose launching call STARTED on the range's thread inside
  [range start, range end] (both ends included); its GPU end is the max end of those ops (None when
  it has none); its completion is max(cpu end, GPU end).
* ``globalTid`` encodes pid as ``(globalTid >> 24) & 0xFFFFFF`` and tid as ``globalTid & 0xFFFFFF``.
"""

from __future__ import annotations

import atexit
import itertools
import lzma
import shutil
import sqlite3
import tempfile
from pathlib import Path
from collections.abc import Iterable
from typing import Any

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "traces"
GPU_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
              "CUPTI_ACTIVITY_KIND_GRAPH_TRACE")
API_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"
PUSHPOP_DEFAULT = 59  # ENUM_NSYS_EVENT_TYPE NvtxPushPopRange in nsys 2022-2025 exports
MASK24 = 0xFFFFFF

_tmpdir: Path | None = None
_files: dict[Path, Path] = {}


def _cleanup() -> None:
    if _tmpdir is not None:
        shutil.rmtree(_tmpdir, ignore_errors=True)


def open_export(path: str | Path) -> sqlite3.Connection:
    """Open an export read-only; a ``.xz`` file is decompressed once into a temporary file first."""
    global _tmpdir
    path = Path(path).resolve()
    if path.suffix == ".xz":
        if path not in _files:
            if _tmpdir is None:
                _tmpdir = Path(tempfile.mkdtemp(prefix="sqltruth-"))
                atexit.register(_cleanup)
            dest = _tmpdir / f"{len(_files)}-{path.parent.name}.sqlite"
            with lzma.open(path) as src, open(dest, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
            _files[path] = dest
        path = _files[path]
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def query(path: str | Path, sql: str, *args: object) -> list[tuple]:
    """The rows of one read-only query on an export (opened and closed here), ``args`` bound to its ``?``."""
    con = open_export(path)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


def nvtx_domain(conn: sqlite3.Connection, text: str) -> int:
    """The id of the NVTX domain named ``text`` (a domain-create event, type 75), e.g. nsys' own
    'Python Periodic Sampling' and 'Python Backtrace on CUDA'."""
    (dom,) = conn.execute("SELECT domainId FROM NVTX_EVENTS WHERE eventType = 75 AND text = ?", (text,)).fetchone()
    return int(dom)


# a folder holding every fixture decompressed as ``<name>.sqlite`` (the test run's, tests/conftest.py):
# read there instead of decompressing each one again
DECOMPRESSED: Path | None = None


def open_fixture(name: str) -> sqlite3.Connection:
    """The fixture ``tests/fixtures/traces/<name>/trace.sqlite.xz``, decompressed, opened read-only."""
    if DECOMPRESSED is not None and (DECOMPRESSED / f"{name}.sqlite").exists():
        return sqlite3.connect(f"file:{DECOMPRESSED / f'{name}.sqlite'}?mode=ro", uri=True)
    return open_export(FIXTURES / name / "trace.sqlite.xz")


def tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def gpu_tables(conn: sqlite3.Connection) -> list[str]:
    present = tables(conn)
    return [t for t in GPU_TABLES if t in present]


def _ops_union(conn: sqlite3.Connection, cols: str) -> str:
    parts = [f"SELECT {cols} FROM {t}" for t in gpu_tables(conn)]
    return " UNION ALL ".join(parts) if parts else f"SELECT {cols} FROM (SELECT 0 AS start) WHERE 0"


def _pushpop_type(conn: sqlite3.Connection) -> int:
    if "ENUM_NSYS_EVENT_TYPE" in tables(conn):
        row = conn.execute("SELECT id FROM ENUM_NSYS_EVENT_TYPE WHERE name = 'NvtxPushPopRange'").fetchone()
        if row:
            return int(row[0])
    return PUSHPOP_DEFAULT


def _launches(conn: sqlite3.Connection) -> None:
    """TEMP table ``_truth_launch``: per API call that launched GPU ops, its thread, start, max op end, op count."""
    if conn.execute("SELECT 1 FROM sqlite_temp_master WHERE name = '_truth_launch'").fetchone():
        return
    ops = _ops_union(conn, "correlationId AS corr, globalPid AS gpid, end")
    if API_TABLE in tables(conn):
        conn.execute(f"""
            CREATE TEMP TABLE _truth_launch AS
            SELECT a.globalTid AS gtid, a.start AS start, MAX(o.end) AS gpu_end, COUNT(*) AS ops
            FROM (SELECT rowid AS rid, globalTid, start, correlationId FROM {API_TABLE}
                  WHERE correlationId IS NOT NULL AND correlationId != 0) AS a
            JOIN ({ops}) AS o ON o.corr = a.correlationId AND (o.gpid >> 24) = (a.globalTid >> 24)
            GROUP BY a.rid""")
    else:
        conn.execute("CREATE TEMP TABLE _truth_launch (gtid INTEGER, start INTEGER, gpu_end INTEGER, ops INTEGER)")
    conn.execute("CREATE INDEX temp._truth_launch_i ON _truth_launch (gtid, start)")


def range_instances(conn: sqlite3.Connection, name: str, pid: int | None = None) -> list[dict[str, Any]]:
    """Closed push/pop ranges named ``name`` (optionally of one pid), ordered by (start, pid, tid).

    Each: ``start``, ``end`` (CPU end), ``gpu_end`` (None without ops), ``completion`` =
    max(end, gpu_end), ``pid``, ``tid``, ``ops`` (number of GPU ops launched inside it on its thread).
    """
    if "NVTX_EVENTS" not in tables(conn):
        return []
    _launches(conn)
    has_strings = "StringIds" in tables(conn)
    text_match = "(n.text = :name" + (" OR n.textId IN (SELECT id FROM StringIds WHERE value = :name))"
                                      if has_strings else ")")
    rows = conn.execute(f"""
        SELECT n.start, n.end, n.globalTid, MAX(l.gpu_end), COALESCE(SUM(l.ops), 0)
        FROM NVTX_EVENTS AS n
        LEFT JOIN _truth_launch AS l ON l.gtid = n.globalTid AND l.start >= n.start AND l.start <= n.end
        WHERE n.eventType = :ptype AND n.end IS NOT NULL AND {text_match}
        GROUP BY n.rowid""", {"name": name, "ptype": _pushpop_type(conn)}).fetchall()
    out = []
    for start, end, gtid, gpu_end, ops in rows:
        p, tid = (int(gtid) >> 24) & MASK24, int(gtid) & MASK24
        if pid is not None and p != pid:
            continue
        completion = int(end) if gpu_end is None else max(int(end), int(gpu_end))
        out.append({"start": int(start), "end": int(end), "gpu_end": None if gpu_end is None else int(gpu_end),
                    "completion": completion, "pid": p, "tid": tid, "ops": int(ops)})
    out.sort(key=lambda r: (r["start"], r["pid"], r["tid"]))
    return out


def _sequences(inst: list[dict[str, Any]]) -> dict[tuple[int, int], list[dict[str, Any]]]:
    seqs: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for r in inst:
        seqs.setdefault((r["pid"], r["tid"]), []).append(r)
    for s in seqs.values():
        s.sort(key=lambda r: r["start"])
    return seqs


def periods(conn: sqlite3.Connection, name: str) -> list[int]:
    """Per (pid, tid): differences between consecutive instances' completions, all sequences pooled."""
    out: list[int] = []
    for seq in _sequences(range_instances(conn, name)).values():
        out += [b["completion"] - a["completion"] for a, b in itertools.pairwise(seq)]
    return out


def iteration_period_p50(conn: sqlite3.Connection, name: str) -> int | float | None:
    """Median of ``periods`` (None when no sequence has two instances)."""
    return median(periods(conn, name))


def latency_p50(conn: sqlite3.Connection, name: str) -> int | float | None:
    """Median over all instances of completion - start."""
    return median([r["completion"] - r["start"] for r in range_instances(conn, name)])


def median(values: list[int]) -> int | float | None:
    """Exact median of ints: the middle value, or the mean of the two middle ones (int unless it ends in .5)."""
    if not values:
        return None
    v = sorted(values)
    n = len(v)
    if n % 2:
        return v[n // 2]
    total = v[n // 2 - 1] + v[n // 2]
    return total // 2 if total % 2 == 0 else total / 2


def union(intervals: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """The intervals' union as sorted, disjoint (start, end) pairs (touching ones joined): a plain sweep."""
    out: list[list[int]] = []
    for s, e in sorted((int(s), int(e)) for s, e in intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def union_ns(intervals: list[tuple[int, int]]) -> int:
    """The time the intervals cover, each nanosecond once."""
    return sum(e - s for s, e in union(intervals))


def device_busy_ns(conn: sqlite3.Connection, device_id: int, t0: int | None = None, t1: int | None = None) -> int:
    """Length of the union of all GPU op intervals on ``device_id`` (all processes), clipped to [t0, t1]."""
    ops = _ops_union(conn, "deviceId AS dev, start, end")
    rows = conn.execute(f"SELECT start, end FROM ({ops}) WHERE dev = ?", (device_id,)).fetchall()
    iv = []
    for s, e in rows:
        s, e = int(s), int(e)
        if t0 is not None:
            s = max(s, t0)
        if t1 is not None:
            e = min(e, t1)
        if e > s:
            iv.append((s, e))
    return union_ns(iv)


def devices(conn: sqlite3.Connection) -> list[int]:
    """Device ids that have GPU ops."""
    ops = _ops_union(conn, "deviceId AS dev")
    return [int(r[0]) for r in conn.execute(f"SELECT DISTINCT dev FROM ({ops}) ORDER BY dev")]


def gpu_op_span(conn: sqlite3.Connection, device_id: int | None = None) -> tuple[int, int] | None:
    """(first GPU op start, last GPU op end), on one device or all."""
    ops = _ops_union(conn, "deviceId AS dev, start, end")
    where = "" if device_id is None else f"WHERE dev = {int(device_id)}"
    row = conn.execute(f"SELECT MIN(start), MAX(end) FROM ({ops}) {where}").fetchone()
    return None if row[0] is None else (int(row[0]), int(row[1]))


def stream_pairs(conn: sqlite3.Connection) -> list[tuple[int, int]]:
    """Distinct (pid, streamId) pairs over the GPU op tables."""
    ops = _ops_union(conn, "globalPid AS gpid, streamId AS stream")
    rows = conn.execute(f"SELECT DISTINCT (gpid >> 24) & {MASK24}, stream FROM ({ops}) ORDER BY 1, 2").fetchall()
    return [(int(a), int(b)) for a, b in rows]


def gpu_op_counts(conn: sqlite3.Connection) -> dict[str, int]:
    return {t: int(conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]) for t in gpu_tables(conn)}


def event_window(conn: sqlite3.Connection) -> tuple[int, int] | None:
    """(min start, max end) over the GPU op tables, CUDA API calls, closed NVTX ranges and OS runtime calls."""
    present = tables(conn)
    parts = [f"SELECT MIN(start) AS s, MAX(end) AS e FROM {t}" for t in gpu_tables(conn)]
    for t in (API_TABLE, "OSRT_API"):
        if t in present:
            parts.append(f"SELECT MIN(start), MAX(end) FROM {t}")
    if "NVTX_EVENTS" in present:
        parts.append("SELECT MIN(start), MAX(end) FROM NVTX_EVENTS WHERE end IS NOT NULL")
    if not parts:
        return None
    row = conn.execute(f"SELECT MIN(s), MAX(e) FROM ({' UNION ALL '.join(parts)})").fetchone()
    return None if row[0] is None else (int(row[0]), int(row[1]))


def summary(conn: sqlite3.Connection, name: str) -> dict[str, Any]:
    """The truth table of one export for the iteration range ``name`` (what the fixture READMEs list)."""
    inst = range_instances(conn, name)
    seqs = _sequences(inst)
    win = event_window(conn)
    return {
        "range": name,
        "count": len(inst),
        "sequences": {f"{p}/{t}": len(s) for (p, t), s in sorted(seqs.items())},
        "ops_per_instance_min_max": (min(r["ops"] for r in inst), max(r["ops"] for r in inst)) if inst else None,
        "instances_without_ops": sum(1 for r in inst if r["ops"] == 0),
        "period_p50_ns": iteration_period_p50(conn, name),
        "latency_p50_ns": latency_p50(conn, name),
        "cpu_p50_ns": median([r["end"] - r["start"] for r in inst]),
        "device_busy_ns": {d: device_busy_ns(conn, d) for d in devices(conn)},
        "device_busy_in_iterations_ns": {
            d: device_busy_ns(conn, d, min(r["start"] for r in inst), max(r["completion"] for r in inst))
            for d in devices(conn)} if inst else {},
        "iterations_window": (min(r["start"] for r in inst), max(r["completion"] for r in inst)) if inst else None,
        "stream_pairs": stream_pairs(conn),
        "gpu_op_counts": gpu_op_counts(conn),
        "event_window": win,
    }


def idle_gaps(conn: sqlite3.Connection, min_gap_ns: int = 10_000) -> dict[tuple[int, int, int], dict[str, Any]]:
    """Per device, the holes of at least ``min_gap_ns`` between the merged intervals of every GPU op
    (all processes), keyed by (device, start, end), each with the op that ends it (the op starting
    at the hole's end with the earliest end) and that op's launching call: ``gtid`` and ``api_start``
    (None when the call is not in the export), ``ambiguous`` when several ops start there with the
    same earliest end but different launching calls."""
    ops = _ops_union(conn, "deviceId AS dev, start, end, correlationId AS corr, globalPid AS gpid")
    rows = conn.execute(f"SELECT dev, start, end, corr, gpid FROM ({ops}) ORDER BY dev, start, end").fetchall()
    calls: dict[tuple[int, int], tuple[int, int]] = {}
    if API_TABLE in tables(conn):
        for gtid, start, corr in conn.execute(
                f"SELECT globalTid, start, correlationId FROM {API_TABLE} WHERE correlationId IS NOT NULL"):
            calls.setdefault((int(gtid) >> 24, int(corr)), (int(gtid), int(start)))
    out: dict[tuple[int, int, int], dict[str, Any]] = {}
    for dev, group in itertools.groupby(rows, key=lambda r: int(r[0])):
        g = list(group)
        run_end = None
        for i, (_, s, e, corr, gpid) in enumerate(g):
            s, e = int(s), int(e)
            if run_end is not None and s - run_end >= min_gap_ns:
                enders, j = [], i  # rows are sorted by (start, end): those starting at s follow row i
                while j < len(g) and int(g[j][1]) == s:
                    if int(g[j][2]) == e:
                        enders.append(g[j])
                    j += 1
                launched = {calls.get((int(r[4]) >> 24, int(r[3]) if r[3] is not None else -1)) for r in enders}
                call = next(iter(launched))
                out[(dev, run_end, s)] = {"gtid": None if call is None else call[0],
                                          "api_start": None if call is None else call[1],
                                          "ambiguous": len(launched) > 1}
            run_end = e if run_end is None else max(run_end, e)
    return out


def _strip_version(name: str) -> str:
    """A CUDA API name without its version suffix (``cuLaunchKernel_v2`` -> ``cuLaunchKernel``)."""
    head, sep, tail = name.rpartition("_v")
    return head if sep and tail.isdigit() else name


def thread_time_by_name(conn: sqlite3.Connection, table: str, gtid: int, lo: int, hi: int) -> dict[str, int]:
    """Per call name, the length of the union of thread ``gtid``'s calls in ``table``
    (``CUPTI_ACTIVITY_KIND_RUNTIME``, names without version suffix, or ``OSRT_API``) clipped to
    [lo, hi); names with no time left out."""
    if table not in tables(conn):
        return {}
    per: dict[str, list[tuple[int, int]]] = {}
    q = (f'SELECT s.value, max(t.start, ?), min(t."end", ?) FROM {table} t JOIN StringIds s ON s.id = t.nameId '
         f'WHERE t.globalTid = ? AND t."end" > ? AND t.start < ? AND t."end" >= t.start')
    for name, s, e in conn.execute(q, (lo, hi, gtid, lo, hi)):
        if e > s:
            per.setdefault(_strip_version(name) if table == API_TABLE else name, []).append((int(s), int(e)))
    return {n: t for n, iv in per.items() if (t := union_ns(iv)) > 0}


def check_export(conn: sqlite3.Connection, a: Any, check: Any, why: str) -> None:
    """``check(conn, a)`` (it returns how many items it compared with SQL), the connection closed
    afterwards; the test is skipped with ``why`` when there was nothing to compare."""
    import pytest

    try:
        if check(conn, a) == 0:
            pytest.skip(why)
    finally:
        conn.close()


def check_public_export(path: Path, a: Any, check: Any, why: str) -> None:
    """``check_export`` on a public export and its analysis ``a``."""
    check_export(open_export(path), a, check, why)


def only_pid(src: Any, dst: Any, pid: int, vacuum: bool = False) -> None:
    """A copy of export ``src`` at ``dst`` with one process's events only (one export per rank, on
    the same clock): its kernels, copies, memsets, CUDA API calls, NVTX ranges and OS runtime calls."""
    shutil.copyfile(src, dst)
    con = sqlite3.connect(dst)
    names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    for t, col in (("CUPTI_ACTIVITY_KIND_KERNEL", "globalPid"), ("CUPTI_ACTIVITY_KIND_MEMCPY", "globalPid"),
                   ("CUPTI_ACTIVITY_KIND_MEMSET", "globalPid"), ("CUPTI_ACTIVITY_KIND_RUNTIME", "globalTid"),
                   ("NVTX_EVENTS", "globalTid"), ("OSRT_API", "globalTid")):
        if t in names:
            con.execute(f'DELETE FROM "{t}" WHERE (({col} >> 24) & 16777215) != ?', (pid,))
    con.commit()
    if vacuum:
        con.execute("VACUUM")
    con.close()
