"""Issue 38, item 9 (savings match what the fix delivers) and item 11's launch-bound part.

Each pair of fixtures is one program recorded before and after one fix, on the same H200 (the
ladder: ``workloads/ladder/ladder.py``, each step adding one fix; decode and launch loops eager and as
CUDA Graphs; DDP without and with overlapped gradient all-reduce). The measured gain of the fix is
the change of the iteration period: the median of consecutive completions of the NVTX iteration
range per thread, by plain SQL on both exports (``tests/sqltruth.py``; completion = max(CPU end,
end of the GPU ops launched inside)). The predicted gain is what nsysan's findings on ``before``
that the fix resolved say per iteration: counted impact / steady iterations of one sequence, over
the rules that no longer fire on ``after`` (or keep less than half of their saving there: a rule
that keeps most of its saving was not what the step fixed), each credited with the part of its saving
the fix removed by the rule's own measure: its saving on ``before`` less what it still counts on
``after`` with its thresholds opened (``benchmarks/calibrate_savings.gates_open``: ``min_*`` 0,
``max_*`` their ceiling). A rule that only fell under its gate (sync-api after two GPUs were
pipelined: the waits moved to 25% of the step against its 30%, 5.7 ms left per iteration) predicted
nothing the fix delivered, and a partial fix (pipelined over 4 micro-batches, 2.7 ms of turn-taking
left; DDP's last gradient bucket, which no backward compute follows, still exposed) is credited with
what it removed. Predicted within 2x of measured, both ways. ``benchmarks/calibrate_savings.py``
prints the whole table.

Before this change the pinned step predicted 2.19 ms per iteration (pageable-memcpy at an assumed 2x
rate, sync-memcpy's share after serial-copy-compute took the copies) for a measured 7.75 ms (pinned
copies ran 55 GB/s, pageable 9 GB/s), and launch-bound predicted 0.70 ms per decode token (launch
API time above kernel time) for a measured 4.69 ms (the Python between launches).
"""

from __future__ import annotations

import bisect
import sqlite3
import statistics
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import sqltruth
from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
# SHRUNK: a rule still firing on `after` is resolved when it keeps less than this share of its saving
# there (one definition, the table's)
from calibrate_savings import SHRUNK, gates_open

# (before, after, NVTX iteration range)
PAIRS = [
    ("ladder_reuse", "ladder_pinned", "infer"),
    ("ladder_pinned", "ladder_fp16", "infer"),
    ("ladder_fp16", "ladder_overlap", "infer"),
    ("ladder_overlap", "ladder_worker", "infer"),
    ("ladder_worker", "ladder_graph", "infer"),
    ("decode_eager", "decode_graph", "decode_token"),
    ("launch_eager", "launch_graph", "step"),
    ("um_thrash", "um_prefetch", "gpu_update"),
    ("pipe_stages", "pipe_balanced", "train_step"),
    ("two_gpu_turns", "two_gpu_pipelined", "train_step"),
    # NCCL held to 4 CTAs (workloads/training/ddp.py --nccl-ctas 4): the overlapped all-reduce leaves the GEMMs
    # room, and overlap pays (re-run without nsys on 2 H200s: 8.98 -> 7.99 ms per step)
    ("ddp_serial_c4", "ddp_overlap_c4", "train_step"),
]
# measured changes the saving models do not explain (the numbers: benchmarks/calibrate_savings.py)
NOT_EXPLAINED = [
    pytest.param("ladder_baseline", "ladder_reuse", "infer", marks=pytest.mark.xfail(strict=True, reason=(
        "these two recordings do not measure the fix: recorded again, alternating, on one H200 (same command), "
        "the p50 'infer' period changed +3.81, -2.78, -1.17, +0.98 ms (each recording's periods within ~0.5 ms, "
        "its level moving by 4 ms from one run of the program to the next); the fixtures' 1.82 ms is one draw. "
        "A torch replica of the two steps timed in one process, batches alternating: allocating per batch cost 0.65 ms against the 0.40 ms "
        "alloc-in-loop predicts"))),
    pytest.param("ddp_serial", "ddp_overlap", "train_step", marks=pytest.mark.xfail(strict=True, reason=(
        "the fixtures' gain is one draw of a gain within noise: ddp.py serial and ddp run again without nsys on 2 "
        "H200s, alternating, 4 rounds: per-step p50 7.94..8.01 ms against 7.86..7.96 ms, the gain per round "
        "+0.055, +0.047, +0.123, +0.007 ms (the fixtures: +0.029). exposed-communication predicts 0.108 ms "
        "(0.75 ms exposed; the compute before it keeps ~22% of its speed beside 24-CTA NCCL kernels, 3/4 of "
        "it in 120..132-CTA GEMMs that one wave fills): 3.7x the fixtures' draw, 1.9x the re-runs' mean; "
        "test_no_saving_promised_where_overlap_gains_none bounds it by the re-runs instead"))),
]

@pytest.fixture(scope="module")
def analysed(analysis):
    return lambda name, rng: analysis(name, iteration_range=rng)


def _con(fixture_dir: Path, name: str) -> sqlite3.Connection:
    return sqltruth.open_export(fixture_dir / f"{name}.sqlite")


def _period(fixture_dir: Path, name: str, rng: str) -> float:
    con = _con(fixture_dir, name)
    try:
        p = sqltruth.iteration_period_p50(con, rng)
    finally:
        con.close()
    assert p is not None
    return float(p)


def _per_seq(a) -> int:
    from nsysan.rules import steps_per_sequence

    return steps_per_sequence(a.iterations.table)


def _per_iteration(a) -> dict[str, float]:
    n = _per_seq(a)
    out: dict[str, float] = {}
    for f in a.findings:
        out[f.rule] = out.get(f.rule, 0.0) + f.impact_ns / n
    return out


def _left_gates_open(analysis, name: str, rng: str, rule: str) -> float:
    """What ``rule`` still counts per iteration on ``name`` with its own thresholds opened."""
    return _per_iteration(analysis(name, iteration_range=rng, set=gates_open(rule))).get(rule, 0.0)


# rules that name one cause: the drain after a host synchronization is sync-api's where it fires first
# and hidden-syncs' where that one does (issue 49): a fix resolved it only if neither still counts it
SAME_CAUSE = {"hidden-syncs": "sync-api"}


def _by_cause(per: dict[str, float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for r, v in per.items():
        out[SAME_CAUSE.get(r, r)] = out.get(SAME_CAUSE.get(r, r), 0.0) + v
    return out


def _predicted(analysis, before, after, after_name: str, rng: str) -> tuple[float, list[str]]:
    b, a = _by_cause(_per_iteration(before)), _by_cause(_per_iteration(after))
    resolved = [r for r, v in b.items() if v > 0 and a.get(r, 0.0) < SHRUNK * v]
    return sum(max(0.0, b[r] - _left_gates_open(analysis, after_name, rng, r)) for r in resolved), sorted(resolved)


def _check_pair(fixture_dir, analysis, analysed, before: str, after: str, rng: str) -> None:
    measured = _period(fixture_dir, before, rng) - _period(fixture_dir, after, rng)
    predicted, rules = _predicted(analysis, analysed(before, rng), analysed(after, rng), after, rng)
    assert measured > 0
    assert rules, "no finding on the first trace was resolved by the fix"
    assert measured / 2 <= predicted <= measured * 2, (
        f"{before} -> {after}: resolved {rules} predict {predicted / 1e6:.3f} ms per iteration, "
        f"measured {measured / 1e6:.3f} ms")


@pytest.mark.parametrize("before,after,rng", PAIRS + NOT_EXPLAINED)
def test_predicted_saving_matches_the_measured_fix(fixture_dir, analysis, analysed, before, after, rng):
    """GIVEN a program recorded before and after one fix WHEN nsysan analyses both THEN the findings
    the fix resolved predicted the measured change of the iteration period (SQL) within 2x."""
    _check_pair(fixture_dir, analysis, analysed, before, after, rng)


# Fixes whose gain is within the noise of the program run again: (before, after, range, the gains per
# step in ms measured without nsys on the machine the fixtures come from, ddp.py's two modes run
# alternately, one gain per round). The 2x test cannot judge them (a 2x band around noise); the
# saving nsysan promises must still not exceed twice the largest gain any measurement saw.
WITHIN_NOISE = [
    # 8 layers of 2048, batch 8192, NCCL's own 24 CTAs (the fixtures above): 4 rounds
    ("ddp_serial", "ddp_overlap", "train_step", (0.055, 0.047, 0.123, 0.007)),
    # 4 layers of 4096, batch 4096 (twice the gradient bytes, the same GEMM time): 3 rounds
    ("ddp_serial_w4096_l4_b4096", "ddp_overlap_w4096_l4_b4096", "train_step", (-0.003, -0.036, 0.002)),
]


@pytest.mark.parametrize("before,after,rng,reruns", WITHIN_NOISE)
def test_no_saving_promised_where_overlap_gains_none(fixture_dir, analysis, analysed, before, after, rng, reruns):
    """GIVEN an all-reduce after backward and the same program under DDP on two H200s, NCCL's 24-CTA
    kernels beside GEMMs of 120..132 CTAs (one wave of the 132 SMs), where overlapping gained 0..0.12
    ms per step in every measurement (the fixtures' periods by SQL and re-runs without nsys) of
    0.75..1.06 ms exposed WHEN nsysan analyses both THEN exposed-communication is what the fix
    resolved and it credits at most twice the largest measured gain: the collective's SMs split the
    GEMMs' one wave, so overlap saves little (before this model it credited the exposed time, 0.61 ms
    per step)."""
    measured = _period(fixture_dir, before, rng) - _period(fixture_dir, after, rng)
    predicted, rules = _predicted(analysis, analysed(before, rng), analysed(after, rng), after, rng)
    assert "exposed-communication" in rules
    exposed = _per_iteration(analysed(before, rng))  # sanity: the rule fires on `before`
    assert exposed["exposed-communication"] > 0
    largest = max(measured / 1e6, *reruns)
    assert 0 <= predicted / 1e6 <= 2 * largest, (predicted / 1e6, measured / 1e6, reruns)


NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def _exposed_trace(compute_ctas: int, comm_ctas: int):
    """12 'step' ranges 1 ms apart on a GPU of 132 SMs (the factories' device): each runs a compute
    kernel of ``compute_ctas`` CTAs for 800 us, then an NCCL all-reduce of ``comm_ctas`` CTAs for 200
    us on another stream, nothing beside it."""
    import factories as F

    k_rows, names, ctas, a_rows, nv = [], [], [], [], []
    for i in range(12):
        s = 1_000_000 + i * 1_000_000
        nv.append((s, s + 50_000, "step"))
        for j, (ks, ke, stream, name, c) in enumerate(((0, 800_000, 7, "gemm", compute_ctas),
                                                       (800_000, 1_000_000, 20, NCCL, comm_ctas))):
            k_rows.append((s + 10_000 + ks, s + 10_000 + ke, stream))
            names.append(name)
            ctas.append(c)
            a_rows.append((s + 10 + 100 * j, s + 60 + 100 * j, "cudaLaunchKernel", 2 * i + j + 1))
    k = F.kernels(k_rows).assign(name=pd.Categorical(names), grid_x=np.array(ctas, dtype=np.int64))
    return F.make_trace(kernels=k, cuda_api=F.api(a_rows), nvtx=F.nvtx(nv))


@pytest.mark.parametrize("compute_ctas,comm_ctas,share", [
    (128, 4, 1.0),  # 128 CTAs fit in the 128 SMs a 4-CTA collective leaves
    (64, 24, 1.0),  # fits in 108
    (128, 24, 0.0),  # one wave of 128 on 132 SMs, split by 24: its last 20 CTAs wait the collective out
    (132, 1, 0.0),  # one SM taken from a kernel that fills them all
    (16384, 24, 125 / 152),  # many waves: ceil(16384/132) = 125 of them, ceil(16384/108) = 152 beside 24
])
def test_overlap_saving_counts_the_sms_the_collective_holds(compute_ctas, comm_ctas, share):
    """GIVEN steps of 800 us of compute then a 200 us all-reduce with nothing beside it, on 132 SMs,
    the compute and collective grids chosen WHEN analysed THEN exposed-communication's saving is the
    exposed time times the share of its speed the compute before it keeps beside the collective (by
    construction: 1 when it fits in the SMs left, 0 when the collective splits its one wave, the ratio
    of waves when it has many), and nothing fires when that is 0."""
    from nsysan.analysis import analyze
    from nsysan.rules.exposed_communication import progress_beside

    assert float(progress_beside([compute_ctas], comm_ctas, 132)[0]) == pytest.approx(share)
    a = analyze(_exposed_trace(compute_ctas, comm_ctas))
    steady = int((~a.iterations.table["warmup"].to_numpy(dtype=bool)).sum())
    assert int(a.busy_steady.iloc[0]["comm_exposed_ns"]) == 200_000 * steady
    f = [x for x in a.findings if x.rule == "exposed-communication"]
    if share == 0:
        assert not f
        return
    assert len(f) == 1
    est = int(f[0].window.get("estimate_ns", f[0].impact_ns))
    assert abs(est - 200_000 * steady * share) <= 1
    assert f"hold {comm_ctas} of the 132 SMs" in f[0].message


def _launch_truth(con: sqlite3.Connection, rng: str) -> tuple[int, int, int]:
    """Per instance of ``rng``: the kernels launched inside it on its thread (KERNEL rows whose
    launching call, same process and correlation id, started in the range), the CPU span from the
    first such call's start to the last one's end, and the time inside that span when no GPU op of
    any process ran on the kernels' device; medians over the instances."""
    rows = con.execute("""
        SELECT n.rowid, COUNT(*), MIN(r.start), MAX(r.end), MIN(k.deviceId)
        FROM NVTX_EVENTS n
        JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.globalTid = n.globalTid AND r.start >= n.start AND r.start <= n.end
        JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId
             AND (k.globalPid >> 24) = (r.globalTid >> 24)
        WHERE n.end IS NOT NULL AND (n.text = :n OR n.textId IN (SELECT id FROM StringIds WHERE value = :n))
        GROUP BY n.rowid""", {"n": rng}).fetchall()
    assert rows and len({r[4] for r in rows}) == 1
    dev = int(rows[0][4])
    ops = " UNION ALL ".join(f"SELECT start, end FROM {t} WHERE deviceId = {dev}" for t in sqltruth.gpu_tables(con))
    merged: list[list[int]] = []
    for s, e in con.execute(f"SELECT start, end FROM ({ops}) ORDER BY start"):
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    starts = [m[0] for m in merged]
    before = [0]  # busy time before each merged interval
    for s, e in merged:
        before.append(before[-1] + e - s)

    def busy_until(t: int) -> int:
        i = bisect.bisect_right(starts, t)
        return before[i - 1] + min(t, merged[i - 1][1]) - merged[i - 1][0] if i else 0

    idle = [(t1 - t0) - (busy_until(t1) - busy_until(t0)) for _, _, t0, t1, _ in rows]
    return (int(statistics.median(r[1] for r in rows)), int(statistics.median(r[3] - r[2] for r in rows)),
            int(statistics.median(idle)))


LAUNCH_PAIRS = [("decode_eager", "decode_graph", "decode_token"), ("launch_eager", "launch_graph", "step")]


@pytest.mark.parametrize("eager,graph,rng", LAUNCH_PAIRS)
def test_launch_bound_counts_the_wait_for_launches(fixture_dir, analysed, eager, graph, rng):
    """GIVEN an eager loop of small kernels launched one by one from Python (the GPU busy ~7% of
    the time) and the same loop replayed as a CUDA Graph WHEN nsysan analyses the eager one THEN
    launch-bound is its largest saving, names the range the launches happen in and the kernels per
    iteration (SQL), counts the GPU's idle time inside the CPU span of the launches (SQL), and that
    saving per iteration is within 2x of what the graph measured (SQL)."""
    a = analysed(eager, rng)
    f = next(f for f in a.findings if f.rule == "launch-bound")
    assert f.impact_ns == max(x.impact_ns for x in a.findings)
    con = _con(fixture_dir, eager)
    try:
        kernels, span, idle = _launch_truth(con, rng)
    finally:
        con.close()
    assert f"launches {kernels} kernels" in f.message
    assert f"inside NVTX range '{rng}'" in f.message
    estimate = f.window.get("estimate_ns", f.impact_ns) / _per_seq(a)
    assert 0.8 * idle <= estimate <= idle * 1.05 <= span, (estimate, idle, span)
    measured = _period(fixture_dir, eager, rng) - _period(fixture_dir, graph, rng)
    per_iteration = f.impact_ns / _per_seq(a)
    assert measured / 2 <= per_iteration <= measured * 2, (per_iteration, measured)


@pytest.mark.parametrize("name,where", [("hf_generate", "request"), ("serve_loop", "forward")])
def test_launch_bound_in_a_serving_loop(fixture_dir, analysed, name, where):
    """GIVEN a serving loop per request: transformers' generate (32 tokens, ~220 small kernels a
    token, a sync a token), or host work (prepare, schedule: ~6 ms) then 4 tokens each holding an
    eager ``forward`` of 280 kernels (~5 ms of CPU for ~0.65 ms of GPU) and a sync WHEN analysed
    per request THEN launch-bound is the largest saving, names the range the launches happen in
    (``forward``, not the request) and the kernels per request (SQL), and counts per request the GPU
    idle time inside the CPU span of the request's launches (SQL), less the few long host pauses
    between launches, which are other work (host-bound-gap's)."""
    a = analysed(name, "request")
    f = next(f for f in a.findings if f.rule == "launch-bound")
    assert f.impact_ns == max(x.impact_ns for x in a.findings)
    con = _con(fixture_dir, name)
    try:
        kernels, span, idle = _launch_truth(con, "request")
    finally:
        con.close()
    assert f"launches {kernels} kernels" in f.message
    assert f"inside NVTX range '{where}'" in f.message
    estimate = f.window.get("estimate_ns", f.impact_ns) / _per_seq(a)
    assert 0.8 * idle <= estimate <= idle * 1.05 <= span, (estimate, idle, span)


def _eager_loop(steps: int, kernels: int, pause_after: int | None = None, pause_us: int = 3000):
    """A hand-built eager loop: ``steps`` NVTX ``step`` ranges 1 ms apart, each launching ``kernels``
    kernels every 30 us (a 5 us launch call, the kernel 8..10 us after the call starts), with an
    optional pause of ``pause_us`` of other host work after launch ``pause_after``."""
    import factories as F

    us = 1000
    k_rows, a_rows, n_rows = [], [], []
    t = 1_000 * us
    corr = 1
    for _ in range(steps):
        t0 = t
        for i in range(kernels):
            a_rows.append((t, t + 5 * us, "cudaLaunchKernel", corr))
            k_rows.append((t + 8 * us, t + 10 * us, 7))
            corr += 1
            t += 30 * us + (pause_us * us if pause_after is not None and i == pause_after else 0)
        n_rows.append((t0 - 10 * us, t, "step"))
        t += 1_000 * us
    return F.make_trace(kernels=F.kernels(k_rows), cuda_api=F.api(a_rows), nvtx=F.nvtx(n_rows))


@pytest.mark.parametrize("pause_after", [None, 99])
def test_launch_bound_counts_idle_inside_launch_runs_only(pause_after):
    """GIVEN 20 steps of 200 kernels of 2 us launched every 30 us (by construction: a run of
    launches spans 199 x 30 + 5 us with 199 kernels inside it, the 200th starting after the last
    call ends: 5975 - 398 = 5577 us idle a step), once with a 3 ms pause of other host work in the
    middle of each step (two runs of 2975 - 198 = 2777 us idle each: 5554 us; the pause is not
    launching) WHEN analysed THEN launch-bound counts exactly that idle time per step."""
    from nsysan.analysis import analyze

    a = analyze(_eager_loop(20, 200, pause_after))
    f = next(f for f in a.findings if f.rule == "launch-bound")
    per_step = 5577_000 if pause_after is None else 2 * 2777_000
    n = _per_seq(a)
    assert n >= 18
    assert f.window.get("estimate_ns", f.impact_ns) == per_step * n
    assert "launches 200 kernels" in f.message and "inside NVTX range 'step'" in f.message


# Issue 49 item 8: every ladder step against the finding whose fix the step is. The test above credits
# whatever rules the step resolved; this one names them: the saving per iteration the finding for B's fix
# states on A ("Estimated saving", its own estimate before the allocation among findings; host-bound-gap
# on ladder_overlap states 2.90 ms a step although hidden-syncs counts the same idle time), against the
# change of the median 'infer' period by SQL, within 2x. Per step (workloads/ladder/ladder.py), measured / stated:
#   baseline -> reuse      buffers reused        alloc-in-loop                        1.817 / 0.436  (xfail below)
#   reuse -> pinned        pinned, async copies  pageable-memcpy + sync-memcpy        7.751 / 7.577
#   pinned -> fp16         FP16                  fp32-compute                         1.841 / 1.176
#   fp16 -> overlap        copy stream           serial-copy-compute                  0.744 / 1.349
#   overlap -> worker      printing off-thread   host-bound-gap                       2.409 / 2.903
#   worker -> graph        CUDA Graph            launch-bound + serial-copy-compute   1.317 / 0.820
#   graph -> multictx      two contexts: 2 ms a batch slower (SQL), no finding proposes it
#   multictx -> profiles   each batch split over both contexts (20 'infer' ranges for 10 batches against
#                          10): no per-iteration unit in common, and no finding proposes the split
LADDER_FIXES = [
    pytest.param("ladder_baseline", "ladder_reuse", ("alloc-in-loop",), marks=pytest.mark.xfail(strict=True, reason=(
        "the period fell 1.817 ms a batch (SQL), of which the allocation calls the fix removed took 0.389 ms; "
        "1.41 ms came from work the fix leaves as it is, run again faster (per period, SQL medians: Print Result "
        "3.765 -> 3.042 ms, host-to-device copies 9.181 -> 8.584, kernels 6.208 -> 6.114): one draw of a level "
        "that moves by up to 4 ms between recordings (test_reuse_gain_is_mostly_work_it_does_not_touch)"))),
    ("ladder_reuse", "ladder_pinned", ("pageable-memcpy", "sync-memcpy")),
    ("ladder_pinned", "ladder_fp16", ("fp32-compute",)),
    ("ladder_fp16", "ladder_overlap", ("serial-copy-compute",)),
    ("ladder_overlap", "ladder_worker", ("host-bound-gap",)),
    # a CUDA Graph removes the launches (launch-bound) and, in ladder_worker, also moves the next batch's
    # copy: it is issued only after the batch's 167 eager launches, so it ran behind the compute it could
    # have overlapped (serial-copy-compute); in the graph the launch is one call and the copy goes at once.
    # The step is both fixes; the two findings count disjoint time (asserted), so their savings add
    ("ladder_worker", "ladder_graph", ("launch-bound", "serial-copy-compute")),
]


def _stated(a, rule: str) -> float:
    """The saving per iteration the findings of ``rule`` state (their own estimates), 0 without one."""
    return sum(f.window.get("estimate_ns", f.impact_ns) for f in a.findings if f.rule == rule) / _per_seq(a)


@pytest.mark.parametrize("before,after,rules", LADDER_FIXES)
def test_ladder_step_saves_what_its_finding_states(fixture_dir, analysed, before, after, rules):
    """GIVEN two neighbouring steps of the ladder (one program, one fix apart, same H200) WHEN nsysan
    analyses the first THEN the findings whose fix the step applies fire there, and the saving per
    iteration they state is within 2x of the change of the median 'infer' period (SQL)."""
    a = analysed(before, "infer")
    measured = _period(fixture_dir, before, "infer") - _period(fixture_dir, after, "infer")
    for r in rules:
        assert any(f.rule == r for f in a.findings), f"{r} does not fire on {before}"
    if len(rules) > 1:  # several findings: none counts time another one also states
        for f in a.findings:
            if f.rule in rules:
                assert not set(f.window.get("overlaps", ())) & set(rules), (f.rule, f.window.get("overlaps"))
    stated = sum(_stated(a, r) for r in rules)
    assert measured > 0
    assert measured / 2 <= stated <= measured * 2, (
        f"{before} -> {after}: {rules} state {stated / 1e6:.3f} ms per iteration, measured {measured / 1e6:.3f} ms")


def _median_per_period(con: sqlite3.Connection, rng: str, sql: str) -> float:
    """Median over consecutive completions of ``rng`` (one thread) of ``sql``'s sum between them
    (``sql`` takes :t0 and :t1 and sums a duration of what starts in [t0, t1))."""
    inst = sqltruth.range_instances(con, rng)
    assert len({(r["pid"], r["tid"]) for r in inst}) == 1
    return statistics.median(con.execute(sql, {"t0": a["completion"], "t1": b["completion"]}).fetchone()[0] or 0
                             for a, b in zip(inst, inst[1:]))


_NVTX_NAMED = """SELECT SUM(n.end - n.start) FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
                 WHERE n.start >= :t0 AND n.start < :t1 AND COALESCE(n.text, s.value) = 'Print Result'"""
_H2D = "SELECT SUM(end - start) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE start >= :t0 AND start < :t1 AND copyKind = 1"
_KERNELS = "SELECT SUM(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE start >= :t0 AND start < :t1"
_ALLOC = """SELECT SUM(r.end - r.start) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId
            WHERE r.start >= :t0 AND r.start < :t1 AND (s.value LIKE 'cudaMalloc%' OR s.value LIKE 'cudaFree%')"""


def test_reuse_gain_is_mostly_work_it_does_not_touch(fixture_dir, analysed):
    """GIVEN ladder_baseline (device buffers allocated and freed per batch) and ladder_reuse (allocated
    once) WHEN the period change is split by SQL THEN the allocation calls the fix removed are under a
    third of it, most of it is work the fix leaves as it is that ran faster (printing the result,
    host-to-device copies, kernels: a recording's level, not the fix), and alloc-in-loop's stated
    saving is within 2x of the allocation calls' time (what the fix removed)."""
    per: dict[str, dict[str, float]] = {}
    for name in ("ladder_baseline", "ladder_reuse"):
        con = _con(fixture_dir, name)
        try:
            per[name] = {k: _median_per_period(con, "infer", q)
                         for k, q in (("print", _NVTX_NAMED), ("h2d", _H2D), ("kernels", _KERNELS), ("alloc", _ALLOC))}
        finally:
            con.close()
    b, r = per["ladder_baseline"], per["ladder_reuse"]
    measured = _period(fixture_dir, "ladder_baseline", "infer") - _period(fixture_dir, "ladder_reuse", "infer")
    untouched = sum(b[k] - r[k] for k in ("print", "h2d", "kernels"))
    assert r["alloc"] == 0 and b["alloc"] < measured / 3
    assert untouched > measured / 2, (untouched, measured)
    stated = _stated(analysed("ladder_baseline", "infer"), "alloc-in-loop")
    assert b["alloc"] / 2 <= stated <= 2 * b["alloc"], (stated, b["alloc"])


def _timed_per_batch(con: sqlite3.Connection) -> float:
    """The ladder's timed region ('Total Elapsed Time(3 batches)') per batch."""
    (dur,), = con.execute("""SELECT n.end - n.start FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
                             WHERE COALESCE(n.text, s.value) = 'Total Elapsed Time(3 batches)'""").fetchall()
    return dur / 3


@pytest.mark.xfail(strict=True, reason=(
    "host-bound-gap on ladder_graph (the GPU idle while the host prints and prepares between graph replays, "
    "one gap a batch after each synchronize: 258 us a batch) vanishes in ladder_multictx, whose two contexts "
    "overlap one's host work with the other's GPU work but contend for the GPU (6.05 -> 8.04 ms a batch, SQL): "
    "the saving model does not foresee the contention a second context brings"))
def test_no_finding_proposes_the_step_that_made_it_slower(fixture_dir, analysis, analysed):
    """GIVEN ladder_graph and ladder_multictx (two execution contexts on two threads, batches dealt
    round-robin), whose timed region per batch got slower (SQL: 6.05 -> 8.04 ms; the per-thread
    'infer' period is not comparable, each thread runs every other batch) WHEN nsysan analyses both
    THEN no finding on ladder_graph that the step resolved claims a saving: none promises a gain the
    step did not deliver."""
    per_batch = {}
    for name in ("ladder_graph", "ladder_multictx"):
        con = _con(fixture_dir, name)
        try:
            per_batch[name] = _timed_per_batch(con)
        finally:
            con.close()
    assert per_batch["ladder_multictx"] > per_batch["ladder_graph"]
    predicted, rules = _predicted(analysis, analysed("ladder_graph", "infer"), analysed("ladder_multictx", "infer"),
                                  "ladder_multictx", "infer")
    assert predicted == 0, (predicted, rules)
