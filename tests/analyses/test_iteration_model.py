"""The iteration model on hand-built traces whose truth is written out in each test: which range is
the iteration (never a library range, one without GPU work, or a sub-microsecond one), the period
vs the latency when the CPU runs ahead, per-thread sequences, and --iteration-range errors."""

from __future__ import annotations

import factories as F
import numpy as np
import pandas as pd
import pytest

from nsysan.analysis import Params, analyze
from nsysan.errors import UsageError


def _loop(steps: list[tuple[int, int]], kernels_of_step: list[list[tuple[int, int]]], *, tid: int = F.PID,
          corr0: int = 1, name: str = "step", extra_nvtx: list[tuple[int, int, str]] = ()) -> dict[str, pd.DataFrame]:
    """NVTX ``name`` ranges ``steps`` on ``tid``; each launches its kernels (start, end) with a 1 us
    cudaLaunchKernel call at the range start + 100 ns * k."""
    k_rows, a_rows = [], []
    corr = corr0
    for (s, _), ks in zip(steps, kernels_of_step):
        for j, (ks_, ke) in enumerate(ks):
            k_rows.append((ks_, ke, 7))
            a_rows.append((s + 100 * j + 10, s + 100 * j + 60, "cudaLaunchKernel", corr))
            corr += 1
    k = F.kernels(k_rows, corr_start=corr0)
    a = F.api(a_rows, tid=tid)
    nv = F.nvtx([(s, e, name) for s, e in steps] + list(extra_nvtx), tid=tid)
    return {"kernels": k, "cuda_api": a, "nvtx": nv}


def test_period_not_latency_when_the_cpu_runs_ahead():
    # the CPU opens a 10 us 'step' every 12 us; each launches one 100 us kernel, run back to back
    n = 30
    steps = [(1_000_000 + i * 12_000, 1_000_000 + i * 12_000 + 10_000) for i in range(n)]
    kern = [[(1_000_500 + i * 100_000, 1_000_500 + (i + 1) * 100_000)] for i in range(n)]
    a = analyze(F.make_trace(**_loop(steps, kern)), rules=False)
    it = a.iterations
    assert it.range_name == "step" and it.how == "auto"
    done = np.array([max(e, k[0][1]) for (s, e), k in zip(steps, kern)])
    lat = done - np.array([s for s, _ in steps])
    steady = ~it.table["warmup"].to_numpy()
    assert it.table["end_ns"].tolist() == done.tolist()
    assert it.stats.period_p50_ns == 100_000 and it.stats.p50_ns == 100_000
    assert it.stats.latency_p50_ns == int(round(float(np.median(lat[steady]))))
    assert it.stats.latency_p50_ns > 10 * it.stats.period_p50_ns
    assert it.stats.latency_includes_queueing is True and it.stats.queue_depth_max >= 20
    assert it.stats.throughput_per_s == pytest.approx(1e9 / 100_000)


def test_no_queueing_when_each_iteration_waits():
    steps = [(i * 1_000_000, i * 1_000_000 + 300_000) for i in range(10)]
    kern = [[(s + 1_000, s + 200_000)] for s, _ in steps]
    it = analyze(F.make_trace(**_loop(steps, kern)), rules=False).iterations
    assert it.stats.period_p50_ns == 1_000_000 and it.stats.latency_p50_ns == 300_000
    assert it.stats.queue_depth_max == 0 and it.stats.latency_includes_queueing is False


def test_library_and_gpu_less_ranges_are_never_the_iteration():
    steps = [(i * 1_000_000, i * 1_000_000 + 500_000) for i in range(5)]
    kern = [[(s + 1_000, s + 100_000), (s + 100_000, s + 200_000)] for s, _ in steps]
    tables = _loop(steps, kern)
    # NCCL's own range around the second launch of every step (more frequent when counted with
    # the polls below), and 200 GPU-less polls of 300 ns
    lib = F.nvtx([(s + 150, s + 400, "NCCL:ncclAllReduce") for s, _ in steps]).assign(
        domain=pd.array(["NCCL"] * 5, dtype="string"))
    polls = F.nvtx([(s + 600_000 + j * 1_000, s + 600_000 + j * 1_000 + 300, "poll()")
                    for s, _ in steps for j in range(40)])
    nv = pd.concat([tables["nvtx"], lib, polls], ignore_index=True).sort_values(
        ["start_ns", "dur_ns"], ascending=[True, False]).reset_index(drop=True)
    it = analyze(F.make_trace(**{**tables, "nvtx": nv}), rules=False).iterations
    assert it.range_name == "step"
    verdicts = {c.name: c.verdict for c in it.candidates}
    assert verdicts["NCCL:ncclAllReduce"].startswith("library range")
    assert verdicts["poll()"] == "no GPU work launched below it"
    assert verdicts["step"] == "chosen"


def test_outermost_range_that_covers_the_gpu_work():
    steps = [(i * 1_000_000, i * 1_000_000 + 600_000) for i in range(6)]
    kern = [[(s + 10_000, s + 110_000), (s + 310_000, s + 510_000)] for s, _ in steps]
    inner = [(s, s + 300_000, "forward") for s, _ in steps] + [(s + 300_000, s + 600_000, "backward") for s, _ in steps]
    it = analyze(F.make_trace(**_loop(steps, kern, extra_nvtx=inner)), rules=False).iterations
    # launches at s+10..s+160 ns: both in 'forward'; 'backward' launched nothing
    assert it.range_name == "step"
    cov = {c.name: c.gpu_coverage for c in it.candidates}
    assert cov["step"] == pytest.approx(1.0) and cov["forward"] == pytest.approx(1.0)


def test_each_thread_is_its_own_sequence():
    # two threads (ranks) each run 8 steps every 2 ms, offset by 1 ms: one merged list would
    # show a 1 ms period
    t1 = _loop([(i * 2_000_000, i * 2_000_000 + 400_000) for i in range(8)],
               [[(i * 2_000_000 + 1_000, i * 2_000_000 + 300_000)] for i in range(8)], tid=F.PID)
    t2 = _loop([(1_000_000 + i * 2_000_000, 1_000_000 + i * 2_000_000 + 400_000) for i in range(8)],
               [[(1_000_000 + i * 2_000_000 + 1_000, 1_000_000 + i * 2_000_000 + 300_000)] for i in range(8)],
               tid=F.PID + 1, corr0=100)
    tables = {k: pd.concat([t1[k], t2[k]], ignore_index=True).sort_values("start_ns", kind="stable")
              .reset_index(drop=True) for k in t1}
    it = analyze(F.make_trace(**tables), rules=False).iterations
    assert it.stats.sequences == 2
    assert it.stats.period_p50_ns == 2_000_000
    assert set(it.table["tid"]) == {F.PID, F.PID + 1}


def test_sub_microsecond_ranges_are_rejected():
    steps = [(i * 10_000, i * 10_000 + 200) for i in range(20)]
    kern = [[(s + 50, s + 600)] for s, _ in steps]  # 550 ns of GPU work: the whole iteration < 1 us
    it = analyze(F.make_trace(**_loop(steps, kern)), rules=False).iterations
    assert {c.verdict for c in it.candidates} == {"shorter than 1 us"}
    # the range is not the iteration; the GPU work still repeats (one kernel every 10 us): the loop
    # inferred from it, whose period is the kernels' spacing
    assert it.how.startswith("inferred") and it.range_name != "step"
    assert it.stats.period_p50_ns == 10_000


def test_no_iteration_means_the_gpu_active_part_is_judged():
    a = analyze(F.make_trace(kernels=F.kernels([(0, 1_000, 7), (5_000, 9_000, 7)])), rules=False)
    assert a.iterations.range_name is None
    # two kernels, nothing repeats: the window is the first kernel's start to the last one's end
    assert (a.steady.start_ns, a.steady.end_ns, a.steady.label) == (0, 9_000, "GPU-active part")
    assert "GPU-active part" in a.iterations.why


def test_unknown_iteration_range_is_a_usage_error_listing_candidates():
    steps = [(i * 1_000_000, i * 1_000_000 + 500_000) for i in range(5)]
    tables = _loop(steps, [[(s + 1_000, s + 100_000)] for s, _ in steps])
    with pytest.raises(UsageError) as e:
        analyze(F.make_trace(**tables), Params(iteration_range="train_step"), rules=False)
    assert e.value.exit_code == 2 and "'step'" in (e.value.hint or "")


def test_iteration_range_by_text_without_domain():
    steps = [(i * 1_000_000, i * 1_000_000 + 500_000) for i in range(5)]
    tables = _loop(steps, [[(s + 1_000, s + 100_000)] for s, _ in steps], name="app:step")
    tables["nvtx"] = tables["nvtx"].assign(domain=pd.array(["app"] * 5, dtype="string"))
    it = analyze(F.make_trace(**tables), Params(iteration_range="step"), rules=False).iterations
    assert it.range_name == "app:step" and it.how == "option"


def test_warmup_judged_on_service_time_not_on_queueing():
    # a slow first step (2 ms of GPU work), then a loop that runs ahead: the growing latencies of
    # the queued steps are not warm-up, the first step is
    n = 20
    steps = [(i * 10_000, i * 10_000 + 5_000) for i in range(n)]
    kern = [[(100, 2_000_100)]] + [[(2_000_100 + (i - 1) * 100_000, 2_000_100 + i * 100_000)] for i in range(1, n)]
    it = analyze(F.make_trace(**_loop(steps, kern)), rules=False).iterations
    assert it.warmup == 1 and it.stats.count == n - 1
    assert it.stats.period_p50_ns == 100_000


def test_the_finest_covering_range_wins_over_an_epoch_around_it():
    # 4 'epoch' ranges of 10 'step's each; every launch is inside both: the step is the iteration
    steps = [(e * 20_000_000 + i * 1_000_000, e * 20_000_000 + i * 1_000_000 + 500_000) for e in range(4) for i in range(10)]
    kern = [[(s + 1_000, s + 300_000)] for s, _ in steps]
    epochs = [(e * 20_000_000, e * 20_000_000 + 10_000_000, "epoch") for e in range(4)]
    it = analyze(F.make_trace(**_loop(steps, kern, extra_nvtx=epochs)), rules=False).iterations
    assert it.range_name == "step"
    v = {c.name: c.verdict for c in it.candidates}
    assert v["epoch"].startswith("fewer instances than 'step'")
