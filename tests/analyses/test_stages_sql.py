"""Issue 41, item 4: pipeline stages, and GPUs of one process that take turns.

Truth by interval arithmetic in the test: per device, the union of its compute kernels (kernels that
are not NCCL's) inside the steady window; per process, the time two devices compute at once. The
recordings: ``workloads/training/pipe_stages.py`` (2 ranks, send/recv, stage 0 ~3x the layers of stage 1;
``--balanced``: equal stages) and ``workloads/training/two_gpu.py`` (one process, a model split over two GPUs:
``turns`` runs them one after the other, ``pipelined`` over micro-batches).
"""

from __future__ import annotations

import sqlite3

import sqltruth


def _compute(con: sqlite3.Connection, dev: int, lo: int, hi: int) -> list[tuple[int, int]]:
    rows = con.execute("""SELECT k.start, k.end FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName
                          WHERE k.deviceId = ? AND s.value NOT LIKE 'nccl%' AND k.end > ? AND k.start < ?""",
                       (dev, lo, hi)).fetchall()
    return sqltruth.union([(max(s, lo), min(e, hi)) for s, e in rows])


def _len(iv) -> int:
    return sum(e - s for s, e in iv)


def _period(fixture_dir, name: str) -> float:
    con = sqltruth.open_export(fixture_dir / f"{name}.sqlite")
    p = sqltruth.iteration_period_p50(con, "train_step")
    con.close()
    return float(p)


def test_stage_compute_matches_interval_arithmetic(analysis, fixture_dir):
    """GIVEN a 2-stage send/recv pipeline with stage 0 holding ~3x the layers WHEN analysed THEN each
    stage's compute per steady iteration equals the union of its device's non-NCCL kernels in the
    steady window over its iterations (SQL), stage 0 is the bottleneck, and pipeline-imbalance
    predicts the measured gain of balancing (the pair's period change by SQL) within 2x."""
    a = analysis("pipe_stages")
    p = a.stages.pipeline
    assert p is not None
    con = sqltruth.open_export(fixture_dir / "pipe_stages.sqlite")
    for r in p.stages.itertuples():
        c = _len(_compute(con, int(r.device_id), a.steady.start_ns, a.steady.end_ns))
        assert r.compute_ns == c // r.iterations
    con.close()
    assert p.bottleneck_pid == int(p.stages.loc[p.stages["compute_ns"].idxmax(), "pid"])
    f = next(f for f in a.findings if f.rule == "pipeline-imbalance")
    measured = _period(fixture_dir, "pipe_stages") - _period(fixture_dir, "pipe_balanced")
    assert measured / 2 <= p.saving_per_iteration_ns <= 2 * measured
    assert f.impact_ns == p.saving_per_iteration_ns * p.iterations or f.window.get("estimate_ns")


def test_balanced_pipeline_has_no_imbalance(analysis):
    """GIVEN the same pipeline with equal stages WHEN analysed THEN no pipeline-imbalance finding."""
    a = analysis("pipe_balanced")
    assert a.stages.pipeline is not None
    assert not [f for f in a.findings if f.rule == "pipeline-imbalance"]


def test_gpus_taking_turns(analysis, fixture_dir):
    """GIVEN one process running a model split over two GPUs one after the other WHEN analysed THEN the
    share of time both compute equals the interval arithmetic on its two devices (SQL), gpus-take-turns
    fires, and its saving per iteration is within 2x of what pipelining measured (SQL periods); the
    pipelined recording does not fire."""
    a = analysis("two_gpu_turns")
    t = a.stages.turns[0]
    con = sqltruth.open_export(fixture_dir / "two_gpu_turns.sqlite")
    d0 = _compute(con, 0, a.steady.start_ns, a.steady.end_ns)
    d1 = _compute(con, 1, a.steady.start_ns, a.steady.end_ns)
    con.close()
    union = _len(sqltruth.union(d0 + d1))
    assert t.union_ns == union and t.both_ns == _len(d0) + _len(d1) - union
    f = next(f for f in a.findings if f.rule == "gpus-take-turns")
    measured = _period(fixture_dir, "two_gpu_turns") - _period(fixture_dir, "two_gpu_pipelined")
    per_it = f.impact_ns / t.iterations
    assert measured / 2 <= per_it <= 2 * measured
    b = analysis("two_gpu_pipelined")
    assert not [f for f in b.findings if f.rule == "gpus-take-turns"]
