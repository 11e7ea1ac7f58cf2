"""This round's outputs on traces they were not written around: the public exports
(../shared/corpus, skipped when absent) and every recorded fixture (JAX, torch.compile, HF generate,
decode loops, worker threads, two processes, two GPUs, DDP/FSDP/TP/pipeline, Python samples).

Truth from SQL on each file:
* the steady-state kernel table (terminal's top kernels, the report's default table, JSON
  ``steady_by_name``): per kernel name, the count and total of the kernel rows that start inside
  nsysan's steady window;
* the timeline ships every kernel, copy and memset: decoded from the page's payload, their number
  and summed duration per kind equal the SQL tables';
* the Perfetto export holds one kernel event per kernel row, with the same summed duration;
And on nsysan's own findings: severity follows the counted saving, fixes are ranked by saving
(those without a time estimate last, by severity), the report's first screen lists them in that order, the terminal prints no raw control
character.
"""

from __future__ import annotations

import base64
import json
import re
import sqlite3
import zlib
from pathlib import Path

import numpy as np
import pytest
from conftest import CORPUS, FIXTURES, analyzed

from nsysan.report.timeline import COPY_D2H, COPY_H2D, COPY_OTHER, KERNEL, MEMSET, build_timeline

CORPUS_FILES = sorted(CORPUS.glob("*.sqlite")) if CORPUS.exists() else []
FIXTURE_NAMES = sorted(p.name for p in FIXTURES.iterdir() if (p / "trace.sqlite.xz").exists())
CASES = [("fixture", n) for n in FIXTURE_NAMES] + [("corpus", str(p)) for p in CORPUS_FILES]
IDS = [n if kind == "fixture" else Path(n).name[:40] for kind, n in CASES]
SEV = {"critical": 3, "warning": 2, "info": 1}


@pytest.fixture
def case(request, fixture_dir):
    kind, name = request.param
    path = fixture_dir / f"{name}.sqlite" if kind == "fixture" else Path(name)
    return path, analyzed(path)


def _sql(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)


def _columns(con: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in con.execute(f'PRAGMA table_info("{table}")')}


def _has(con: sqlite3.Connection, table: str) -> bool:
    return con.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (table,)).fetchone() is not None


def _varints(buf: bytes, count: int) -> np.ndarray:
    """The first ``count`` LEB128 varints of ``buf`` (7 bits a byte, low first; a byte below 0x80
    ends a value), decoded all at once."""
    if count == 0:
        return np.zeros(0, np.int64)
    b = np.frombuffer(buf, dtype=np.uint8)
    ends = np.flatnonzero(b < 0x80)[:count]
    assert len(ends) == count
    b = b[:ends[-1] + 1].astype(np.int64)
    starts = np.concatenate(([0], ends[:-1] + 1))
    shift = 7 * (np.arange(len(b)) - np.repeat(starts, ends - starts + 1))
    return np.add.reduceat((b & 0x7F) << shift, starts)


def _decode(lane: dict) -> tuple[np.ndarray, np.ndarray]:
    """A lane's (duration, kind) columns, decoded as timeline.js does."""
    raw = zlib.decompress(base64.b64decode(lane["data"]))
    n = lane["n"]
    v = _varints(raw, 4 * n)  # start deltas, durations, name ids, kinds
    return v[n:2 * n], v[3 * n:]


@pytest.mark.parametrize("case", CASES, ids=IDS, indirect=True)
def test_steady_kernel_table_is_the_windows_kernels_by_sql(case):
    path, a = case
    con = _sql(path)
    if not _has(con, "CUPTI_ACTIVITY_KIND_KERNEL"):
        assert len(a.steady_summaries["kernels"]) == 0
        return
    name_col = "demangledName" if "demangledName" in _columns(con, "CUPTI_ACTIVITY_KIND_KERNEL") else "shortName"
    rows = con.execute(f"""SELECT s.value, COUNT(*), SUM(k."end" - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k
                           JOIN StringIds s ON s.id = k.{name_col} WHERE k.start >= ? AND k.start < ?
                           GROUP BY s.value""", (a.steady.start_ns, a.steady.end_ns)).fetchall()
    want = {str(n): (int(c), int(t)) for n, c, t in rows}
    got = {str(r["name"]): (int(r["count"]), int(r["total_ns"])) for r in a.steady_summaries["kernels"].to_dict("records")}
    assert got == want


@pytest.mark.parametrize("case", CASES, ids=IDS, indirect=True)
def test_timeline_and_perfetto_carry_every_gpu_op(case, tmp_path):
    path, a = case
    con = _sql(path)

    def sql(table: str) -> tuple[int, int]:
        if not _has(con, table):
            return 0, 0
        c, t = con.execute(f'SELECT COUNT(*), COALESCE(SUM("end" - start), 0) FROM "{table}"').fetchone()
        return int(c), int(t)

    tl = build_timeline(a)
    by_kind: dict[str, list[int]] = {"kernel": [0, 0], "memcpy": [0, 0], "memset": [0, 0]}
    group = {KERNEL: "kernel", 8: "kernel", COPY_H2D: "memcpy", COPY_D2H: "memcpy", COPY_OTHER: "memcpy",
             MEMSET: "memset"}  # 8: communication kernels (timeline.COMM)
    for lane in tl["lanes"]:
        if lane["group"] != "gpu":
            continue
        dur, kind = _decode(lane)
        for k, g in group.items():
            sel = kind == k
            by_kind[g][0] += int(sel.sum())
            by_kind[g][1] += int(dur[sel].sum())
    for g, table in (("kernel", "CUPTI_ACTIVITY_KIND_KERNEL"), ("memcpy", "CUPTI_ACTIVITY_KIND_MEMCPY"),
                     ("memset", "CUPTI_ACTIVITY_KIND_MEMSET")):
        assert tuple(by_kind[g]) == sql(table), g
    out = tmp_path / "t.perfetto.json"
    a.write_perfetto(out)
    kernels, docs = [], []

    def keep(o: dict) -> None:
        """Each JSON object as parsed (inner first): the kernel events and the document are kept, the
        rest dropped at once (the whole file is still parsed; holding its 250,000 events as dicts
        cost two to three times the parse)."""
        if o.get("cat") == "kernel":
            kernels.append(o)
        elif "traceEvents" in o:
            docs.append(o)

    json.loads(out.read_text(), object_hook=keep)
    assert len(docs) == 1 and isinstance(docs[0]["traceEvents"], list)
    n, total = sql("CUPTI_ACTIVITY_KIND_KERNEL")
    assert len(kernels) == n
    # ts/dur are exact decimal microseconds of the trace's nanoseconds
    assert sum(round(float(e["dur"]) * 1000) for e in kernels) == total


@pytest.mark.parametrize("case", CASES, ids=IDS, indirect=True)
def test_fixes_are_graded_ranked_and_shown_in_that_order(case, tmp_path, capsys):
    path, a = case
    w = a.steady.dur_ns
    fs = a.findings
    # savings of 1% or more first, largest first; summaries covering a quarter of the window; the
    # smaller savings; then the findings without a time estimate, by severity (tests/ranking.py)
    from ranking import finding_key

    keys = [finding_key(f) for f in fs]
    assert keys == sorted(keys)
    for f in fs:
        if f.impact_ns > 0 and w > 0:
            share = f.impact_ns / w
            assert f.severity.name.lower() == ("critical" if share >= 0.10 else "warning" if share >= 0.01 else "info")
        else:
            assert f.severity.name.lower() != "critical"
    page = a.to_html()
    top = re.search(r'<ol class="fixes">(.*?)</ol>', page, re.S)
    if fs:
        assert re.findall(r'href="#(finding-\d+)"', top.group(1)) == [f"finding-{i}" for i in range(1, min(5, len(fs)) + 1)]
    # what `nsysan analyze` prints of this analysis (its terminal summary, over report.summary.run_summary)
    from nsysan.report.summary import run_summary as summary
    from nsysan.report.terminal.summary import print_summary

    print_summary(summary(a, a.trace, str(path), [], 0.0))
    out = capsys.readouterr().out
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f\u202a-\u202e\u2066-\u2069]", out)
    heads = re.findall(r"^\s*\d+\. (CRITICAL|WARNING|INFO)\s", out, re.M)
    assert [h.lower() for h in heads] == [f.severity.name.lower() for f in fs]


# ---- issue 38's invariants, on every fixture and public export ------------------------------------
# Verdicts that add up: the idle time of host and sync gaps credited by overlap (each ns once), per
# iteration communication over each rank's tiled periods, collectives clipped to the window as busy
# time is, periods never negative, savings within their window and never counted twice.

COMM_SQL = ("(s.value LIKE 'ncclDevKernel%' OR s.value LIKE 'ncclKernel%' OR s.value LIKE '%oneRankReduce%'"
            " OR s.value LIKE 'nccl%Kernel%')")


def _union_len(s: np.ndarray, e: np.ndarray) -> int:
    """The length of the union of [s, e) (a plain sweep, written here)."""
    tot, cur_s, cur_e = 0, None, None
    for a, b in sorted(zip(s.tolist(), e.tolist())):
        if cur_e is None or a > cur_e:
            if cur_e is not None:
                tot += cur_e - cur_s
            cur_s, cur_e = a, b
        else:
            cur_e = max(cur_e, b)
    if cur_e is not None:
        tot += cur_e - cur_s
    return tot


def _comm_kernels(con: sqlite3.Connection) -> list[tuple[int, int, int, int]]:
    """(start, end, device, pid) of every communication kernel (SQL)."""
    if not _has(con, "CUPTI_ACTIVITY_KIND_KERNEL"):
        return []
    name = "demangledName" if "demangledName" in _columns(con, "CUPTI_ACTIVITY_KIND_KERNEL") else "shortName"
    return con.execute(f"""SELECT k.start, k.end, k.deviceId, (k.globalPid >> 24) & 16777215
        FROM CUPTI_ACTIVITY_KIND_KERNEL AS k JOIN StringIds AS s ON s.id = k.{name} WHERE {COMM_SQL}""").fetchall()


@pytest.mark.parametrize("case", CASES, ids=IDS, indirect=True)
def test_gap_time_is_credited_by_overlap_and_adds_up(case):
    """Per host/sync gap, the breakdown's shares add up to at most 100%; over all of them, the
    activities' time (plus untraced work and the launching calls) equals the gaps' total; and a CUDA
    API name is never credited more than its calls last in the whole capture (SQL), on one device."""
    from nsysan.analyses.gap_activity import activity_time

    path, a = case
    g = a.gaps
    if len(g) == 0:
        return
    explained = g["cause"].astype(str).isin(["host", "sync"]).to_numpy()
    for b in g["breakdown"].to_numpy()[explained]:
        if b:  # shares are rounded to 4 places each
            assert sum(float(x["share"]) for x in b) <= 1.0 + 1e-4 * len(b)
    at = activity_time(g, a.gap_activity)
    if g["device_id"].nunique() != 1:  # one thread feeding devices that idle at once: its time once (issue 49)
        assert int(at["ns"].sum()) <= int(g["gap_ns"].to_numpy()[explained].sum())
        return
    assert int(at["ns"].sum()) == int(g["gap_ns"].to_numpy()[explained].sum())
    con = _sql(path)
    if not _has(con, "CUPTI_ACTIVITY_KIND_RUNTIME"):
        return
    total: dict[str, int] = {}
    for name, ns in con.execute("""SELECT s.value, SUM(r.end - r.start) FROM CUPTI_ACTIVITY_KIND_RUNTIME AS r
            JOIN StringIds AS s ON s.id = r.nameId GROUP BY s.value"""):
        base = re.sub(r"_v\d+$", "", name)  # cudaMalloc_v3020: the API's name without its version
        total[base] = total.get(base, 0) + int(ns)
    for act, ns in zip(at["activity"].tolist(), at["ns"].tolist()):
        if act.startswith("cuda_api:"):
            assert ns <= total[act[len("cuda_api:"):]], act


@pytest.mark.parametrize("case", CASES, ids=IDS, indirect=True)
def test_per_iteration_communication_adds_up_per_rank(case):
    """Per rank (process), the per-iteration communication time adds up to the SQL union of its
    communication kernels per device over its iterations' tiled periods, and no iteration shows more
    communication per device than its period."""
    path, a = case
    cpi = a.comm_per_iteration
    if len(cpi) == 0:
        return
    kern = np.array(_comm_kernels(_sql(path)), dtype=np.int64).reshape(-1, 4)
    for pid, rows in cpi.groupby("pid"):
        lo, hi = int(rows["span_start_ns"].min()), int(rows["end_ns"].max())
        mine = kern[kern[:, 3] == int(pid)]
        want = 0
        for dev in np.unique(mine[:, 2]).tolist():
            k = mine[mine[:, 2] == dev]
            want += _union_len(np.clip(k[:, 0], lo, hi), np.clip(k[:, 1], lo, hi))
        assert int(rows["comm_ns"].sum()) == want, pid
        assert bool((rows["comm_exposed_ns"] <= rows["comm_ns"]).all())
        ndev = max(1, len(np.unique(mine[:, 2])))
        assert bool((rows["comm_ns"] <= ndev * (rows["end_ns"] - rows["span_start_ns"])).all())


@pytest.mark.parametrize("case", CASES, ids=IDS, indirect=True)
def test_collectives_are_clipped_to_the_window(case):
    """The collectives table: per device, the SQL time of the communication kernels clipped to the
    steady window, and the count of those with any part inside it."""
    path, a = case
    c = a.collectives
    kern = np.array(_comm_kernels(_sql(path)), dtype=np.int64).reshape(-1, 4)
    lo, hi = a.steady.start_ns, a.steady.end_ns
    inside = kern[(kern[:, 0] < hi) & (kern[:, 1] > lo)] if len(kern) else kern
    if len(c) == 0:
        assert len(inside) == 0 or hi <= lo
        return
    for dev, rows in c.groupby("device_id"):
        k = inside[inside[:, 2] == int(dev)]
        assert int(rows["count"].sum()) == len(k)
        assert int(rows["total_ns"].sum()) == int((np.minimum(k[:, 1], hi) - np.maximum(k[:, 0], lo)).sum())


@pytest.mark.parametrize("case", CASES, ids=IDS, indirect=True)
def test_no_negative_period_and_savings_fit_their_window(case):
    """No iteration has a negative period or service time; each finding's saving lies within its
    window, and the savings of findings on one window add up to at most that window times its devices
    (allocated: no time counted twice); a per-iteration saving is the saving over the steady count."""
    path, a = case
    t = a.iterations.table
    if len(t):
        for col in ("period_ns", "service_ns"):  # -1: none (a sequence's first iteration has no period)
            v = t[col].dropna().to_numpy()
            assert bool(((v >= 0) | (v == -1)).all()), col
    ndev = max(1, int(a.ops["device_id"].nunique())) if len(a.ops) else 1
    per_window: dict[tuple[int, int], int] = {}
    for f in a.findings:
        lo, hi = int(f.window.get("start_ns", 0)), int(f.window.get("end_ns", 0))
        assert 0 <= f.impact_ns <= max(0, hi - lo) * ndev, f.rule
        per_window[(lo, hi)] = per_window.get((lo, hi), 0) + int(f.impact_ns)
        if f.per_iteration_ns is not None:
            # spread over the steps of one sequence (ranks and worker threads run at once)
            steady = int(t.loc[~t["warmup"].astype(bool)].groupby(["pid", "tid"]).size().max()) if len(t) else 0
            assert steady > 0 and abs(f.per_iteration_ns * steady - f.impact_ns) <= steady, f.rule
    for (lo, hi), tot in per_window.items():
        assert tot <= (hi - lo) * ndev


# -- issue 41: what the analyses beyond time say, on every fixture and public export ---------------


@pytest.mark.parametrize("case", CASES, ids=IDS, indirect=True)
def test_beyond_time_holds_on_every_trace(case):
    """GIVEN any trace WHEN analysed THEN (by SQL) memory is read from the usage events exactly when the
    export has them and each process's live memory at the end is its allocations less its frees of
    device kinds; unified memory counts the export's migration rows (copy kinds 11, 12); running or
    blocked is claimed only with SCHED_EVENTS and each range's running + off-CPU time is its total, its
    per-call off time within its off time; every slow iteration is a steady one over twice its thread's
    median period and their cost stays within the steady periods; the new rules' savings stay within
    their window."""
    path, a = case
    con = _sql(path)
    try:
        has_mem = _has(con, "CUDA_GPU_MEMORY_USAGE_EVENTS")
        assert a.memory.recorded == (has_mem and con.execute(
            "SELECT COUNT(*) FROM CUDA_GPU_MEMORY_USAGE_EVENTS WHERE memKind NOT IN (0, 1)").fetchone()[0] > 0)
        if a.memory.recorded:
            for r in a.memory.per_process.itertuples():
                alloc, freed = con.execute(
                    "SELECT COALESCE(SUM(CASE memoryOperationType WHEN 0 THEN bytes END), 0), "
                    "COALESCE(SUM(CASE memoryOperationType WHEN 1 THEN bytes END), 0) FROM CUDA_GPU_MEMORY_USAGE_EVENTS "
                    "WHERE memKind NOT IN (0, 1) AND deviceId = ? AND ((globalPid >> 24) & 16777215) = ?",
                    (int(r.device_id), int(r.pid))).fetchone()
                assert (r.allocated_bytes, r.freed_bytes, r.live_end_bytes) == (alloc, freed, alloc - freed)
        um = con.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind IN (11, 12)").fetchone()[0] \
            if _has(con, "CUPTI_ACTIVITY_KIND_MEMCPY") else 0
        assert a.unified.migrations == um
        th = a.thread_states
        assert th.recorded == (_has(con, "SCHED_EVENTS") and con.execute("SELECT COUNT(*) FROM SCHED_EVENTS").fetchone()[0] > 0)
        # what adds up: unified memory per steady iteration sums to the SQL bytes over the periods it tiles
        u = a.unified
        for pid, g in u.per_iteration.groupby("pid"):
            if not _has(con, "CUPTI_ACTIVITY_KIND_MEMCPY"):
                assert int(g["bytes_htod"].sum()) == int(g["bytes_dtoh"].sum()) == 0
                continue
            t = a.iterations.table
            st = t.loc[(t["pid"] == pid) & ~t["warmup"] & (t["period_ns"] >= 0)]
            done = (st["start_ns"] + st["latency_ns"]).to_numpy()
            lo, hi = done - st["period_ns"].to_numpy(), done
            for kind, col in ((11, "bytes_htod"), (12, "bytes_dtoh")):
                want = sum(con.execute(
                    "SELECT COALESCE(SUM(bytes), 0) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = ? AND "
                    "((globalPid >> 24) & 16777215) = ? AND start > ? AND start <= ?",
                    (kind, int(pid), int(a_), int(b_))).fetchone()[0] for a_, b_ in zip(lo.tolist(), hi.tolist()))
                assert int(g[col].sum()) == want, (pid, col)
    finally:
        con.close()
    # memory: the change of live memory over the steady completions is what was allocated less what was freed
    for g in a.memory.growth.itertuples():
        if a.memory.recorded:
            assert g.live_last_bytes - g.live_first_bytes == g.allocated_bytes - g.freed_bytes
    # stages: no stage computes longer than its step, and shares stay within 0..1
    p = a.stages.pipeline
    if p is not None:
        assert (p.stages["compute_ns"] <= p.stages["step_ns"]).all() and p.stages["bubble"].between(0, 1).all()
    for tt in a.stages.turns:
        assert 0 <= tt.both_ns <= tt.union_ns <= sum(tt.compute_ns.values())
    if not th.recorded:
        assert len(th.ranges) == 0
    for r in th.ranges.itertuples():
        assert r.running_ns + r.off_cpu_ns == r.total_ns and 0 <= r.off_cpu_untraced_ns <= r.off_cpu_ns
        assert 0 <= r.off_cpu_share <= 1
    s = a.slow_iterations
    t = a.iterations.table
    for r in s.table.itertuples():
        row = t.loc[(t["index"] == r.index) & (t["pid"] == r.pid) & (t["tid"] == r.tid)].iloc[0]
        assert not row["warmup"] and row["period_ns"] == r.period_ns > s.factor * r.median_ns
    assert s.cost_ns <= s.steady_span_ns
    new = {"memory-growth", "unified-memory-faults", "pipeline-imbalance", "gpus-take-turns", "slow-iterations"}
    for f in a.findings:
        if f.rule in new:
            assert 0 <= f.impact_ns <= max(a.steady.dur_ns, a.capture.dur_ns)
