"""What the submitting thread was doing in host-caused GPU idle gaps, credited by overlap (issue 38,
item 1), against SQL.

Each activity is credited with the time it ran inside the gaps (up to the launching call's start),
each nanosecond once: a CUDA API call first, then an OS runtime call, then the innermost NVTX range;
the rest is untraced. So a CUDA API name is never credited more than its calls last in the whole
capture, a gap's shares add up to at most 1, and two ranges that share the gaps are both named with
their own overlap.

Truth is SQL: on the public exports (../shared/corpus/public-exports, skipped when absent) the
export's own tables; on the hand-built traces, the same rows written to an in-memory SQLite table.
``exclusive_time_by_name`` (the per-gap truth that ``test_gap_breakdown_sql`` uses too) takes the
thread's CUDA API and OS runtime calls in a window by SQL and gives each nanosecond to the open call
of the highest layer (CUDA API over OS runtime) that started last.
"""

from __future__ import annotations

import heapq
import sqlite3

import factories as F
import numpy as np
import pytest
import sqltruth
from conftest import CORPUS, analyzed
from hypothesis import given, settings
from hypothesis import strategies as st

PUBLIC = CORPUS / "SamuelAmsih__CUDA__report14.sqlite", CORPUS / "PolPuigPuy__OpenACC_Project_PolPuig__report12.sqlite"
ALL_PUBLIC = sorted(CORPUS.glob("*.sqlite")) if CORPUS.exists() else []
needs_corpus = pytest.mark.skipif(not CORPUS.exists(), reason="public corpus not present (../shared)")
LAYERS = (("cuda_api", sqltruth.API_TABLE), ("osrt", "OSRT_API"))  # highest first


def exclusive_time_by_name(conn: sqlite3.Connection, gtid: int, lo: int, hi: int) -> dict[tuple[str, str], int] | None:
    """Per (source, name): the time of [lo, hi) thread ``gtid`` spent in CUDA API calls, else in OS
    runtime calls, each nanosecond given to the open call of the highest layer that started last (the
    most specific one). None when that is ambiguous (two calls of one layer with different names
    starting at the same time and overlapping)."""
    rows = []  # (clipped start, clipped end, layer rank, original start, source, name)
    for rank, (source, table) in enumerate(LAYERS):
        if table not in sqltruth.tables(conn):
            continue
        q = (f'SELECT s.value, t.start, max(t.start, ?), min(t."end", ?) FROM {table} t JOIN StringIds s '
             f'ON s.id = t.nameId WHERE t.globalTid = ? AND t."end" > ? AND t.start < ? AND t."end" >= t.start')
        for name, start, s, e in conn.execute(q, (lo, hi, gtid, lo, hi)):
            if e > s:
                name = sqltruth._strip_version(name) if source == "cuda_api" else name
                rows.append((int(s), int(e), rank, int(start), source, name))
    starts: dict[tuple[int, int], set[str]] = {}
    for s, e, rank, start, source, name in rows:
        starts.setdefault((rank, start), set()).add(name)
    if any(len(v) > 1 for v in starts.values()):
        return None
    rows.sort()
    points = sorted({r[0] for r in rows} | {r[1] for r in rows})
    out: dict[tuple[str, str], int] = {}
    heap: list[tuple[int, int, int, str, str]] = []  # (layer rank, -original start, end, source, name)
    i = 0
    for t0, t1 in zip(points, points[1:]):
        while i < len(rows) and rows[i][0] <= t0:
            s, e, rank, start, source, name = rows[i]
            heapq.heappush(heap, (rank, -start, e, source, name))
            i += 1
        # the owner: the lowest rank, latest start among the calls still open over [t0, t1) (closed
        # calls below the top never matter until they reach it)
        while heap and heap[0][2] <= t0:
            heapq.heappop(heap)
        if heap:
            _, _, _, source, name = heap[0]
            out[(source, name)] = out.get((source, name), 0) + (t1 - t0)
    return out


def _api_total_by_name(conn: sqlite3.Connection) -> dict[str, int]:
    """Each CUDA API name's total call time in the whole capture (every thread)."""
    out: dict[str, int] = {}
    q = (f'SELECT s.value, sum(t."end" - t.start) FROM {sqltruth.API_TABLE} t JOIN StringIds s ON s.id = t.nameId '
         f'WHERE t."end" >= t.start GROUP BY s.value')
    for name, ns in conn.execute(q):
        key = sqltruth._strip_version(name)
        out[key] = out.get(key, 0) + int(ns)
    return out


def _host_sync_total(a) -> int:
    """The host and sync gaps' time per submitting thread, each of its nanoseconds once (the union of
    its gaps: a thread feeding several devices that idle at once is credited once, issue 49 item 7)."""
    g = a.gaps.loc[a.gaps["cause"].astype(str).isin(["host", "sync"])]
    return sum(sqltruth.union_ns(list(zip(d["start_ns"].tolist(), d["end_ns"].tolist())))
               for _, d in g.groupby(["pid", "tid"]))


def _check_credits(path) -> None:

    conn = sqltruth.open_export(path)
    try:
        if sqltruth.API_TABLE not in sqltruth.tables(conn):
            pytest.skip("no CUDA API calls")
        total = _api_total_by_name(conn)
        a = analyzed(path)
        # THEN no CUDA API name is credited more idle time than its calls last in the whole capture
        credited = {x["activity"][len("cuda_api:"):]: x["total_ns"] for x in a.gap_summary["by_activity"]
                    if x["activity"].startswith("cuda_api:")}
        for name, ns in credited.items():
            assert ns <= total.get(name, 0), (path.name, name, ns, total.get(name, 0))
        # and the listed times add up to at most the host and sync gaps' total
        assert sum(x["total_ns"] for x in a.gap_summary["by_activity"]) <= _host_sync_total(a)
        from nsysan.analyses.gap_activity import activity_time

        spent = activity_time(a.gaps, a.gap_activity)
        assert int(spent["ns"].sum()) == _host_sync_total(a)
        for act, ns in zip(spent["activity"].tolist(), spent["ns"].tolist()):
            if act.startswith("cuda_api:"):
                assert ns <= total.get(act[len("cuda_api:"):], 0), (path.name, act, ns)
        # per gap explained in detail: the shares add up to at most 1 (the rest untraced), and the
        # time equals SQL's exclusive time per CUDA API and OS runtime name
        truth = sqltruth.idle_gaps(conn, a.params.min_gap_ns)
        explained = a.gaps.loc[a.gaps["breakdown"].notna()]
        checked = 0
        for g in explained.sort_values("gap_ns", ascending=False, kind="stable").head(40).itertuples():
            span = min(int(g.api_start_ns), int(g.end_ns)) - int(g.start_ns)
            assert sum(int(x["ns"]) for x in g.breakdown) <= span
            assert sum(float(x["share"]) for x in g.breakdown) <= 1.0 + 1e-3
            t = truth[(int(g.device_id), int(g.start_ns), int(g.end_ns))]
            if t["ambiguous"] or t["gtid"] is None:
                continue
            want = exclusive_time_by_name(conn, t["gtid"], int(g.start_ns), min(t["api_start"], int(g.end_ns)))
            if want is None:
                continue
            got = {(x["source"], x["name"]): int(x["ns"]) for x in g.breakdown if x["source"] != "nvtx"}
            assert got == want, (path.name, g.start_ns)
            checked += 1
        assert checked > 0
    finally:
        conn.close()


@needs_corpus
@pytest.mark.parametrize("path", PUBLIC, ids=lambda p: p.stem[:30])
def test_cuda_api_credit_never_exceeds_its_time_in_the_capture(path):
    """SamuelAmsih's export credited 4.416 s of idle time to cudaGraphicsMapResources, whose calls
    take 155.6 ms in the whole capture; PolPuig's 72.7 ms to cuMemAlloc (13.6 ms)."""
    if not path.exists():
        pytest.skip(f"{path.name} not in the corpus")
    _check_credits(path)


@needs_corpus
@pytest.mark.parametrize("path", ALL_PUBLIC, ids=lambda p: p.stem[:40])
def test_attribution_adds_up_on_every_public_export(path):
    """The same invariants on every public export that has host gaps."""
    from nsysan.analyses.gap_activity import activity_time

    conn = sqltruth.open_export(path)
    try:
        total = _api_total_by_name(conn) if sqltruth.API_TABLE in sqltruth.tables(conn) else {}
    finally:
        conn.close()
    a = analyzed(path)
    if _host_sync_total(a) == 0:
        pytest.skip("no host-caused gap")
    spent = activity_time(a.gaps, a.gap_activity)
    assert int(spent["ns"].sum()) == _host_sync_total(a)
    assert bool((spent["ns"] > 0).all())
    for act, ns in zip(spent["activity"].tolist(), spent["ns"].tolist()):
        if act.startswith("cuda_api:"):
            assert ns <= total.get(act[len("cuda_api:"):], 0), (act, ns)
    for g in a.gaps.loc[a.gaps["breakdown"].notna()].itertuples():
        assert sum(int(x["ns"]) for x in g.breakdown) <= min(int(g.api_start_ns), int(g.end_ns)) - int(g.start_ns)


# -- a serving loop: `prepare` then `schedule` in every host gap, inside an outer `serve` range -------

N_STEPS = 20
STEP = 1_100_000  # ns between kernel starts; each kernel runs 100 us, then the GPU idles 1 ms


def _serving_rows() -> tuple[list, list, list]:
    kernels, calls, ranges = [], [], [(-50_000, N_STEPS * STEP + 50_000, "serve")]
    for i in range(N_STEPS):
        t = i * STEP
        kernels.append((t, t + 100_000, 7))
        calls.append((t - 10_000, t - 5_000, "cudaLaunchKernel", i + 1))  # launches kernel i
        if i + 1 < N_STEPS:  # the host gap after kernel i: 66% prepare, 31% schedule of [gap start, call)
            ranges.append((t + 110_000, t + 770_000, "prepare"))
            ranges.append((t + 770_000, t + 1_080_000, "schedule"))
    return kernels, calls, ranges


def _sql_db(kernels, calls, ranges, osrt=()) -> sqlite3.Connection:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE kernel (start INT, end INT, corr INT)")
    db.execute("CREATE TABLE call (start INT, end INT, name TEXT, corr INT)")
    db.execute("CREATE TABLE range (start INT, end INT, name TEXT)")
    db.execute("CREATE TABLE os (start INT, end INT, name TEXT)")
    db.executemany("INSERT INTO kernel VALUES (?, ?, ?)", [(s, e, i + 1) for i, (s, e, _) in enumerate(kernels)])
    db.executemany("INSERT INTO call VALUES (?, ?, ?, ?)", calls)
    db.executemany("INSERT INTO range VALUES (?, ?, ?)", ranges)
    db.executemany("INSERT INTO os VALUES (?, ?, ?)", [r[:3] for r in osrt])
    # the host gaps: from a kernel's end to the next kernel, explained up to its launching call's start
    db.execute("""CREATE VIEW gap AS SELECT g.lo AS lo, min(c.start, g.hi) AS hi, g.hi - g.lo AS gap_ns FROM
                  (SELECT lag(end) OVER (ORDER BY start) AS lo, start AS hi, corr FROM kernel) g
                  JOIN call c ON c.corr = g.corr WHERE g.lo IS NOT NULL AND c.start > g.lo""")
    return db


def _overlap(db: sqlite3.Connection, table: str, name: str) -> int:
    q = (f"SELECT coalesce(sum(max(0, min(r.end, g.hi) - max(r.start, g.lo))), 0) FROM {table} r, gap g "
         f"WHERE r.name = ?")
    return int(db.execute(q, (name,)).fetchone()[0])


def test_serving_loop_credits_each_range_its_overlap():
    """Before: `prepare` (66% of each gap) was credited the whole gaps (98% of the idle time) and
    `schedule` (31%) was not named. Now each range gets its overlap with the gaps (SQL), the outer
    `serve` range only what the inner ones leave, both are named by the host-bound-gap finding,
    and the listed times add up to the gaps' total."""
    from nsysan.analysis import Params, analyze

    kernels, calls, ranges = _serving_rows()
    trace = F.make_trace(kernels=F.kernels(kernels), cuda_api=F.api(calls), nvtx=F.nvtx(ranges))
    a = analyze(trace, Params(min_gap_ns=10_000))
    db = _sql_db(kernels, calls, ranges)
    prepare, schedule = _overlap(db, "range", "prepare"), _overlap(db, "range", "schedule")
    serve = _overlap(db, "range", "serve") - prepare - schedule  # the innermost range owns each moment
    gap_total, span_total = (int(x) for x in db.execute("SELECT sum(gap_ns), sum(hi - lo) FROM gap").fetchone())
    assert prepare > 0 and schedule > 0

    by = {x["activity"]: x["total_ns"] for x in a.gap_summary["by_activity"]}
    assert by.get("nvtx:prepare") == prepare and by.get("nvtx:schedule") == schedule
    f = [x for x in a.findings if x.rule == "host-bound-gap"]
    assert f, [x.rule for x in a.findings]
    assert "nvtx:prepare" in f[0].message and "nvtx:schedule" in f[0].message
    from nsysan.analyses.gap_activity import LAUNCH_TIME, UNTRACED_TIME, activity_time

    spent = dict(zip(activity_time(a.gaps, a.gap_activity)["activity"], activity_time(a.gaps, a.gap_activity)["ns"]))
    assert spent["nvtx:prepare"] == prepare and spent["nvtx:schedule"] == schedule
    assert spent.get("nvtx:serve", 0) == serve
    assert spent.get(UNTRACED_TIME, 0) == span_total - prepare - schedule - serve
    assert sum(spent.values()) == gap_total and spent[LAUNCH_TIME] == gap_total - span_total
    # each gap's label: prepare covers over half of it (66.7% of [gap start, call start))
    host = a.gaps.loc[a.gaps["cause"].astype(str) == "host"]
    assert len(host) == N_STEPS - 1 and set(host["activity"].astype(str)) == {"nvtx:prepare"}
    for g in host.itertuples():
        assert sum(float(x["share"]) for x in g.breakdown) <= 1.0


def test_os_call_inside_a_cuda_call_is_counted_once():
    """An OS runtime call (ioctl) inside a CUDA API call (cudaMalloc) in a host gap: the gap's time
    goes to the CUDA call; the OS runtime calls get only the time outside it (SQL: their overlap
    with the gap minus their overlap with the CUDA call), and the shares add up to at most 1."""
    from nsysan.analysis import Params, analyze

    kernels = [(0, 100_000, 7), (1_100_000, 1_200_000, 7)]
    calls = [(-20_000, -10_000, "cudaLaunchKernel", 1), (1_090_000, 1_095_000, "cudaLaunchKernel", 2),
             (200_000, 600_000, "cudaMalloc", 99)]
    osrt = [(250_000, 550_000, "ioctl", 0), (500_000, 800_000, "poll", 0)]  # nested; overlapping the end
    trace = F.make_trace(kernels=F.kernels(kernels), cuda_api=F.api(calls), osrt=F.api(osrt))
    a = analyze(trace, Params(min_gap_ns=10_000), rules=False)
    db = _sql_db(kernels, calls, [], osrt)
    cuda = _overlap(db, "call", "cudaMalloc")
    q = ("SELECT coalesce(sum(max(0, min(o.end, c.end, g.hi) - max(o.start, c.start, g.lo))), 0) "
         "FROM os o, call c, gap g WHERE o.name = ? AND c.name = 'cudaMalloc'")
    want = {"cuda_api:cudaMalloc": cuda}
    for name in ("ioctl", "poll"):
        want[f"osrt:{name}"] = _overlap(db, "os", name) - int(db.execute(q, (name,)).fetchone()[0])
    span = int(db.execute("SELECT sum(hi - lo) FROM gap").fetchone()[0])
    assert want["osrt:ioctl"] == 0 and want["osrt:poll"] > 0
    g = a.gaps.loc[a.gaps["cause"].astype(str) == "host"].iloc[0]
    got = {f"{x['source']}:{x['name']}": x["ns"] for x in g["breakdown"]}
    assert {k: v for k, v in got.items() if v} == {k: v for k, v in want.items() if v}
    assert sum(got.values()) <= span
    from nsysan.analyses.gap_activity import activity_time

    spent = dict(zip(activity_time(a.gaps, a.gap_activity)["activity"], activity_time(a.gaps, a.gap_activity)["ns"]))
    assert {k: spent.get(k, 0) for k in want} == want


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1500), st.integers(0, 300), st.sampled_from(["cudaA", "cudaB"])), max_size=12),
       st.lists(st.tuples(st.integers(0, 1500), st.integers(0, 300), st.sampled_from(["poll", "ioctl"])), max_size=12),
       st.lists(st.tuples(st.integers(0, 1500), st.integers(0, 700), st.sampled_from(["r1", "r2"])), max_size=10),
       st.lists(st.tuples(st.integers(0, 1500), st.integers(1, 800)), min_size=1, max_size=6))
def test_exclusive_sums_equal_their_definition(calls, os_calls, ranges, windows):
    """``ThreadActivity.exclusive_sums`` against its definition one nanosecond at a time: the
    nanosecond goes to the open CUDA API call (the latest-starting one, ties to the later row), else
    the open OS runtime call (the same), else the innermost NVTX range; so a window's entries add up
    to at most its span. Through the batched layer (the C sweep ``_btree.flatten`` where built, and
    its numpy twin), and through the NVTX sweep (``INNERMOST_MAX`` 0) and every-call candidate test
    (``REACH_MAX_SHARE`` 0)."""
    import pandas as pd

    import nsysan.analyses.thread_activity as G

    api_rows = sorted((s, s + d, n, i + 1) for i, (s, d, n) in enumerate(calls))
    os_rows = sorted((s, s + d, n, 0) for s, d, n in os_calls)
    api = F.api(api_rows) if api_rows else F.api([(0, 1, "x", 1)]).iloc[0:0]
    os_ = F.api(os_rows) if os_rows else F.api([(0, 1, "x", 1)]).iloc[0:0]
    for df in (api, os_):
        df["name"] = pd.Categorical(df["name"].astype(str))
    nv = F.nvtx([(s, s + d, n) for s, d, n in ranges]) if ranges else F.nvtx([(0, 1, "x")]).iloc[0:0]
    trace = F.make_trace(cuda_api=api, osrt=os_, nvtx=nv)
    # each source's rows in the frame's (start-sorted) order, as nsysan reads them
    layers = [(source, df["start_ns"].tolist(), [int(x) for x in df["end_ns"]], df["name"].astype(str).tolist())
              for source, df in (("cuda_api", api), ("osrt", os_), ("nvtx", nv))]
    want = []
    for lo, n in windows:
        acc: dict[tuple[str, str], int] = {}
        for t in range(lo, lo + n):
            for source, s_, e_, nm in layers:
                owner = max((i for i in range(len(s_)) if s_[i] <= t < e_[i]), default=None)
                if owner is not None:
                    acc[(source, nm[owner])] = acc.get((source, nm[owner]), 0) + 1
                    break
        want.append(acc)
    lo_a = np.array([w[0] for w in windows], np.int64)
    hi_a = lo_a + np.array([w[1] for w in windows], np.int64)
    saved = G.INNERMOST_MAX, G.REACH_MAX_SHARE, G.c_pass
    numpy_only = lambda name: None  # noqa: E731 - the numpy twins of every C pass
    paths = [saved[2]] + ([numpy_only] if saved[2]("flatten") is not None else [])
    try:
        for inner, share, passes in [(i, s, p) for i, s in ((saved[0], saved[1]), (0, saved[1]), (saved[0], 0.0))
                                     for p in paths]:
            G.INNERMOST_MAX, G.REACH_MAX_SHARE, G.c_pass = inner, share, passes
            names, win, src, code, ns = G.ThreadActivity(trace).exclusive_sums(F.PID, F.PID, lo_a, hi_a)
            got: list[dict[tuple[str, str], int]] = [{} for _ in windows]
            for w, s_, c_, v in zip(win.tolist(), src.tolist(), code.tolist(), ns.tolist()):
                source = G.SOURCES[s_]
                got[w][(source, str(names[source][c_]))] = v
            assert got == want, (inner, share, passes)
            for w, (lo, n) in enumerate(windows):
                assert sum(got[w].values()) <= n
    finally:
        G.INNERMOST_MAX, G.REACH_MAX_SHARE, G.c_pass = saved


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 60), st.integers(-3, 40)), max_size=25), st.sampled_from([64, 1, 0]))
def test_innermost_segments_equal_their_definition(rows, rounds):
    """``intervals.innermost`` (numpy passes: lone calls apart, "previous later end" links, a walk
    back from each bound) against its definition one nanosecond at a time: the owner of t is the
    latest-starting interval open at t (ties to the later row), and a segment is a run of one owner
    (empty and negative intervals own nothing). Also where the walk hands over to the loop
    (``INNERMOST_ROUNDS`` 0 and 1), and the loop itself (``INNERMOST_LOOP_MAX``, its default)."""
    import nsysan.analyses.intervals as G

    starts = np.array(sorted(s for s, _ in rows), dtype=np.int64)
    lens = [d for _, d in rows]
    ends = starts + np.array(lens, dtype=np.int64)
    want: list[tuple[int, int, int]] = []
    for t in range(0, 110):
        owner = max((i for i in range(len(starts)) if starts[i] <= t < ends[i]), default=None)
        if owner is None:
            continue
        if want and want[-1][2] == owner and want[-1][1] == t:
            want[-1] = (want[-1][0], t + 1, owner)
        else:
            want.append((t, t + 1, owner))
    saved = G.INNERMOST_ROUNDS, G.INNERMOST_LOOP_MAX
    try:
        for loop_max in (0, saved[1]):
            G.INNERMOST_ROUNDS, G.INNERMOST_LOOP_MAX = rounds, loop_max
            s, e, o = G.innermost(starts, ends)
            assert s.dtype == e.dtype == o.dtype == np.int64
            assert list(zip(s.tolist(), e.tolist(), o.tolist())) == want, loop_max
    finally:
        G.INNERMOST_ROUNDS, G.INNERMOST_LOOP_MAX = saved
