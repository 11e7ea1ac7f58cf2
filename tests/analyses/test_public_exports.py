"""Right on other people's traces: the 40 public exports (../shared/corpus/public-exports, never
committed; skipped when absent). Truth comes from SQL on each file, not from nsysan.

* every GPU op lies inside the analysis window (ANALYSIS_DETAILS.startTime/stopTime is on another
  clock in most exports: 12 of 27 exports with kernels had kernels outside it);
* NVTX times are exact int64 on absolute-epoch exports (ZhiyiHu: ~1.7e18 ns);
* the iteration is never a library range, a range without GPU work or a sub-microsecond range;
* device busy is one number per device, the union over every process on it.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest
from conftest import CORPUS, analyzed

from nsysan.analyses.iterations import TENSORRT_HOW
from nsysan.analyses.libranges import library_of
from nsysan.analyses.tensorrt_ranges import execution_rows

FILES = sorted(CORPUS.glob("*.sqlite")) if CORPUS.exists() else []
pytestmark = pytest.mark.skipif(not FILES, reason="public corpus not present (../shared)")

GPU_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")

def _analysis(path: Path):
    return analyzed(path)


def _sql(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)


def _tables(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _one(name: str) -> Path:
    hits = [f for f in FILES if f.name.startswith(name)]
    if not hits:
        pytest.skip(f"{name} not in the corpus")
    return hits[0]


@pytest.mark.parametrize("path", FILES, ids=[f.name[:40] for f in FILES])
def test_every_gpu_op_inside_the_window_and_the_iteration_is_the_users(path: Path):
    con = _sql(path)
    present = [t for t in GPU_TABLES if t in _tables(con)]
    bounds = [con.execute(f'SELECT min(start), max("end"), count(*) FROM "{t}"').fetchone() for t in present]
    bounds = [b for b in bounds if b[2]]
    a = _analysis(path)
    if bounds:
        lo, hi = min(b[0] for b in bounds), max(b[1] for b in bounds)
        assert a.capture.start_ns <= lo and hi <= a.capture.end_ns, (lo, hi, a.capture)
        # and every op was kept: the analysed GPU ops are the rows of the tables
        n_rows = sum(b[2] for b in bounds)
        assert len(a.ops) == n_rows
    it = a.iterations
    if it.range_name is not None:
        # a library range only through the TensorRT fallback: engine executions, never a layer range
        assert library_of(it.range_name) is None or (it.how == TENSORRT_HOW and execution_rows(
            a.nvtx_ranges)[a.nvtx_ranges["name"].to_numpy() == it.range_name].all())
        assert it.stats.count >= 1
        assert it.stats.latency_p50_ns >= 1_000
        if len(a.ops):
            assert int(it.table["gpu_ops"].gt(0).sum()) * 2 >= len(it.table)
    else:
        # no iteration: the judged window is the GPU-active part (SQL: the first to the last GPU op, of
        # those a call launched where there are any; issue 48), else the capture when no GPU op ran
        assert it.why
        if bounds:
            assert lo <= a.steady.start_ns and a.steady.end_ns <= hi and a.steady.label == "GPU-active part"
        else:
            assert a.steady == a.capture


def test_window_from_the_event_clock_not_analysis_details():
    # cestwc: 0 of 6,039 kernels inside ANALYSIS_DETAILS.startTime/stopTime
    path = _one("cestwc__balinski")
    con = _sql(path)
    start, stop = con.execute("SELECT startTime, stopTime FROM ANALYSIS_DETAILS").fetchone()
    inside_old = con.execute('SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE start >= ? AND "end" <= ?',
                             (start, stop)).fetchone()[0]
    assert inside_old == 0  # the old clock
    dur = con.execute("SELECT duration FROM ANALYSIS_DETAILS").fetchone()[0]
    a = _analysis(path)
    busy = con.execute('SELECT sum("end" - start) FROM CUPTI_ACTIVITY_KIND_KERNEL').fetchone()[0]
    assert a.capture.start_ns == 0 and a.capture.end_ns == dur
    assert int(a.busy_capture["busy_ns"].sum()) > 0 and int(a.busy_capture["compute_ns"].sum()) <= busy


def test_absolute_epoch_nvtx_is_exact():
    path = _one("ZhiyiHu1999")
    con = _sql(path)
    want = dict(con.execute('SELECT text, sum("end" - start) FROM NVTX_EVENTS WHERE "end" IS NOT NULL AND '
                            'text IS NOT NULL GROUP BY text'))
    a = _analysis(path)
    rg = a.nvtx_ranges
    got = rg.assign(text=rg["name"].str.split(":", n=1).str[-1]).groupby("text")["dur_ns"].sum()
    for text, total in want.items():
        if text in got.index:
            assert int(got[text]) == total, text
    ends = con.execute('SELECT "end" FROM NVTX_EVENTS WHERE "end" IS NOT NULL ORDER BY start').fetchall()
    nv = a.trace.nvtx
    assert nv["end_ns"].dropna().astype("int64").sort_values().tolist() == sorted(e for (e,) in ends)


def test_nccl_polls_are_not_the_iteration():
    path = _one("ZhiyiHu1999")
    a = _analysis(path)
    polls = _sql(path).execute("SELECT count(*) FROM NVTX_EVENTS WHERE text = 'ncclNetRecvTest()'").fetchone()[0]
    assert polls > 30_000
    assert a.iterations.range_name is None
    verdict = {c.name: c.verdict for c in a.iterations.candidates}
    assert verdict["ncclNetRecvTest()"] == "library range (NCCL)"


@pytest.mark.parametrize("name,library", [("quasiben__nvtx-examples__cudf", "cuDF"),
                                          ("NVIDIA__Fuser__report1", "nvFuser"),
                                          ("yyhtbs-yye__mmagic", "pyprof"),
                                          ("MohanadOdema__DLProf", "pyprof")])
def test_library_annotations_are_not_iterations(name: str, library: str):
    a = _analysis(_one(name))
    # never a library range: no iteration, or the loop inferred from the GPU work (issue 48)
    assert a.iterations.range_name is None or a.iterations.how.startswith("inferred")
    assert library_of(str(a.iterations.range_name)) is None
    libs = {c.library for c in a.iterations.candidates}
    assert library in libs


def test_user_range_with_gpu_work_is_chosen_over_finer_ones():
    # caoye310: 'A-Task 0' (18 instances) holds the 'Inner Level N' ranges that launch the work
    path = _one("caoye310")
    con = _sql(path)
    n = con.execute("SELECT count(*) FROM NVTX_EVENTS WHERE text = 'A-Task 0' AND \"end\" IS NOT NULL").fetchone()[0]
    a = _analysis(path)
    assert a.iterations.range_name == "A-Task 0"
    assert len(a.iterations.table) == n


def test_no_gpu_tables_says_so():
    # WSL2-style and osrt-only captures: no GPU activity tables at all
    for name in ("quasiben__nvtx-examples__multiprocessing", "YoonKyonghwan__EfficientCenterFormer"):
        path = _one(name)
        assert not (set(GPU_TABLES) & _tables(_sql(path)))
        a = _analysis(path)
        assert len(a.ops) == 0 and a.graph_trace == "none"
        assert a.to_dict()["trace"]["gpu_activity_recorded"] is False


def test_device_busy_is_per_device_union_over_processes():
    for path in FILES:
        con = _sql(path)
        if "CUPTI_ACTIVITY_KIND_KERNEL" not in _tables(con):
            continue
        a = _analysis(path)
        for _, r in a.busy_capture.iterrows():
            dev = int(r["device_id"])
            iv = []
            for t in (x for x in GPU_TABLES if x in _tables(con)):
                iv += con.execute(f'SELECT start, "end" FROM "{t}" WHERE deviceId = ?', (dev,)).fetchall()
            iv.sort()
            union, cur_s, cur_e = 0, None, None
            for s, e in iv:
                if cur_e is None or s > cur_e:
                    if cur_e is not None:
                        union += cur_e - cur_s
                    cur_s, cur_e = s, e
                else:
                    cur_e = max(cur_e, e)
            if cur_e is not None:
                union += cur_e - cur_s
            assert int(r["busy_ns"]) == union, (path.name, dev)
        assert a.busy_capture["device_id"].is_unique
        assert (a.busy_capture["busy_frac"] <= 1.0).all()
        assert np.all(a.busy_steady["ops"].to_numpy() <= a.busy_capture["ops"].to_numpy())


def test_a_handful_of_allocations_is_not_a_loop():
    """ZhiyiHu (an NCCL test program, no loop): allocation calls while the GPU works, but no name
    called 10 times there, among them a 124 ms cudaFree: not 'allocation in the loop'."""
    path = _one("ZhiyiHu1999")
    con = _sql(path)
    lo = min(con.execute(f'SELECT min(start) FROM "{t}"').fetchone()[0] for t in GPU_TABLES)
    hi = max(con.execute(f'SELECT max("end") FROM "{t}"').fetchone()[0] for t in GPU_TABLES)
    names = dict(con.execute("""SELECT s.value, count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r
        JOIN StringIds s ON s.id = r.nameId WHERE (s.value LIKE 'cudaMalloc%' OR s.value LIKE 'cudaFree%'
        OR s.value LIKE 'cudaHostAlloc%' OR s.value LIKE 'cuMem%') AND r.start >= ? AND r."end" <= ?
        GROUP BY s.value""", (lo, hi)))
    assert names and max(names.values()) < 10 and sum(names.values()) >= 10  # fired before on the total
    a = _analysis(path)
    assert not [f for f in a.findings if f.rule == "alloc-in-loop"]
