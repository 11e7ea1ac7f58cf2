"""Issue 41, item 5: slow iterations in the middle of a run.

Truth by SQL (``sqltruth``): the period of each ``train_step`` is the time between consecutive
completions on its thread; the slow ones are the steady ones above 2x the median steady period. The
recording (``workloads/training/slow_iters.py``) checkpoints at steps 14, 29 and 44 (range ``checkpoint``),
changes the input shape at 22 (cuDNN autotunes again) and collects garbage at 37 (range ``gc``).
"""

from __future__ import annotations

import itertools
import statistics

import sqltruth


def _truth(fixture_dir, name: str, warm: int) -> tuple[list[int], list[int], float]:
    con = sqltruth.open_export(fixture_dir / f"{name}.sqlite")
    inst = sorted(sqltruth.range_instances(con, "train_step"), key=lambda i: i["start"])
    con.close()
    done = [i["completion"] for i in inst]
    per = [b - a for a, b in itertools.pairwise(done)]  # period of instance k+1
    steady = list(range(max(1, warm), len(inst)))
    med = statistics.median(per[k - 1] for k in steady)
    slow = [k for k in steady if per[k - 1] > 2 * med]
    return slow, [per[k - 1] for k in slow], med


def test_the_slow_iterations_are_those_sql_finds(analysis, fixture_dir):
    """GIVEN a loop with checkpoints, a shape change and a garbage collection mid-run WHEN analysed
    THEN the slow iterations (index, period) are exactly those SQL finds above 2x the median period,
    and their cost is their periods above the median."""
    a = analysis("slow_iters")
    idx, per, med = _truth(fixture_dir, "slow_iters", a.iterations.warmup)
    t = a.slow_iterations.table
    assert t["index"].tolist() == idx == [14, 22, 29, 37, 44]
    assert t["period_ns"].tolist() == per
    assert int(t["cost_ns"].sum()) == sum(p - round(med) for p in per)


def test_the_causes_are_named(analysis):
    """GIVEN the same loop WHEN analysed THEN the shape change is 'new kernels' (new kernel names), the
    checkpoints and the collection name their ranges, and slow-iterations is the top finding with the
    measured cost as its estimate (less what other findings claimed first)."""
    a = analysis("slow_iters")
    t = a.slow_iterations.table.set_index("index")
    assert t.loc[22, "cause"] == "new kernels" and len(t.loc[22, "new_kernels"]) > 0
    for k in (14, 29, 44):
        assert "checkpoint" in t.loc[k, "extra_ranges"]
    assert "gc" in t.loc[37, "extra_ranges"]
    f = a.findings[0]
    assert f.rule == "slow-iterations"
    assert f.window.get("estimate_ns", f.impact_ns) == int(t["cost_ns"].sum())
    assert 0.9 * int(t["cost_ns"].sum()) <= f.impact_ns
    assert "checkpoint" in f.message and "autotun" in f.suggestion


def test_warm_up_is_not_a_slow_iteration(analysis):
    """GIVEN every fixture's iteration model WHEN slow iterations are listed THEN none is a warm-up
    iteration (those lead the run) and none is a sequence's first."""
    a = analysis("slow_iters")
    t = a.iterations.table
    warm = set(t.loc[t["warmup"], "index"].tolist())
    assert not warm & set(a.slow_iterations.table["index"].tolist())


def test_the_headline_tells_their_share(analysis, fixture_dir):
    """GIVEN the same loop WHEN its headline is built (terminal summary and report) THEN beside the typical
    period it gives the slow iterations' number, cost and share of the steady iterations' time, all by
    SQL (cost: their periods above the median; time: the steady periods' sum); a loop without slow
    iterations that matter gets no such line."""
    from nsysan.report.summary import slow_share
    from nsysan.report.view import build

    a = analysis("slow_iters")
    idx, per, med = _truth(fixture_dir, "slow_iters", a.iterations.warmup)
    con = sqltruth.open_export(fixture_dir / "slow_iters.sqlite")
    inst = sorted(sqltruth.range_instances(con, "train_step"), key=lambda i: i["start"])
    con.close()
    done = [i["completion"] for i in inst]
    steady_time = done[-1] - done[max(1, a.iterations.warmup) - 1]
    cost = sum(p - round(med) for p in per)
    assert slow_share(a) == (len(idx), cost, cost / steady_time)
    from nsysan.units import fmt_ns, fmt_pct

    assert (f"{len(idx)} slow iterations", f"{fmt_ns(cost)} ({fmt_pct(cost / steady_time)})") in build(a).headline
    assert slow_share(analysis("mem_growth")) is None
