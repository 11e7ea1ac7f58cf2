"""Issue 41, item 2: unified memory, its migrations and page faults.

Truth by SQL on the recordings (``workloads/memory/um_loop.py``, recorded with
``--cuda-um-gpu-page-faults=true --cuda-um-cpu-page-faults=true``): each iteration the CPU updates a
managed array and a GPU kernel updates it (``thrash``: pages migrate on faults both ways), or the
same with ``cudaMemPrefetchAsync`` each way (``prefetch``: the fix).
"""

from __future__ import annotations

import sqltruth


def _iteration_bounds(a):
    t = a.iterations.table
    st = t.loc[~t["warmup"] & (t["period_ns"] >= 0)]
    hi = (st["start_ns"] + st["latency_ns"]).tolist()
    return [(h - p, h) for h, p in zip(hi, st["period_ns"].tolist())]


def test_faults_and_bytes_per_iteration_match_sql(analysis, fixture_dir):
    """GIVEN managed memory touched by the CPU and the GPU each iteration WHEN analysed THEN per steady
    iteration the GPU faults, CPU faults and bytes migrated each way equal SQL sums over its period, and
    the analysis calls it thrashing."""
    a = analysis("um_thrash")
    u = a.unified
    con = sqltruth.open_export(fixture_dir / "um_thrash.sqlite")
    per = u.per_iteration.set_index("index")
    t = a.iterations.table
    st = t.loc[~t["warmup"] & (t["period_ns"] >= 0)]
    for (lo, hi), idx in zip(_iteration_bounds(a), st["index"].tolist()):
        gpu = con.execute("SELECT COALESCE(SUM(numberOfPageFaults), 0) FROM CUDA_UM_GPU_PAGE_FAULT_EVENTS "
                          "WHERE start > ? AND start <= ?", (lo, hi)).fetchone()[0]
        cpu = con.execute("SELECT COUNT(*) FROM CUDA_UM_CPU_PAGE_FAULT_EVENTS WHERE start > ? AND start <= ?",
                          (lo, hi)).fetchone()[0]
        htod, dtoh = (con.execute("SELECT COALESCE(SUM(bytes), 0) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = ? "
                                  "AND start > ? AND start <= ?", (k, lo, hi)).fetchone()[0] for k in (11, 12))
        row = per.loc[idx]
        assert (row["gpu_faults"], row["cpu_faults"], row["bytes_htod"], row["bytes_dtoh"]) == (gpu, cpu, htod, dtoh)
    con.close()
    assert u.thrashing and u.faults_recorded


def test_unified_memory_finding_and_its_saving(analysis, fixture_dir):
    """GIVEN the thrashing loop and its prefetching twin WHEN analysed THEN unified-memory-faults fires
    on the first only, names the prefetch fix, and its saving per iteration is within 2x of the
    measured change of the iteration period (SQL)."""
    a, b = analysis("um_thrash"), analysis("um_prefetch")
    f = next(f for f in a.findings if f.rule == "unified-memory-faults")
    assert "cudaMemPrefetchAsync" in f.suggestion
    assert not [f for f in b.findings if f.rule == "unified-memory-faults"]
    rng = a.iterations.range_name
    con = sqltruth.open_export(fixture_dir / "um_thrash.sqlite")
    before = sqltruth.iteration_period_p50(con, rng)
    con.close()
    con = sqltruth.open_export(fixture_dir / "um_prefetch.sqlite")
    after = sqltruth.iteration_period_p50(con, rng)
    con.close()
    measured = before - after
    per_it = f.impact_ns / a.unified.steady_iterations
    assert measured / 2 <= per_it <= 2 * measured, (per_it, measured)
