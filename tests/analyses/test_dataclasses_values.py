"""The values that cross layers as frozen dataclasses (issue 50): ``RunSummary`` (what ``nsysan
analyze`` prints and a run of many traces gathers), ``IterationStats`` and ``Candidate`` with its
``Rejection``. Their JSON is what the dicts they replaced wrote: the same keys, in the same order."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from nsysan.analyses.iterations import Candidate, Choice, IterationStats, Reason, Rejection
from nsysan.analyses.iterations.values import decide
from nsysan.report.summary import CaptureTime, FixLine, RunSummary


def _cand(name: str = "step", **kw) -> Candidate:
    facts = dict(name=name, count=10, per_thread_max=10, threads=1, median_ns=5_000, total_ns=50_000, depth=0.0,
                 with_gpu_frac=1.0, gpu_coverage=0.9, library=None, recorder=False)
    return Candidate(**{**facts, **kw})


@pytest.mark.parametrize("rejection, prose", [
    (Rejection(Reason.LIBRARY, library="NCCL"), "library range (NCCL)"),
    (Rejection(Reason.FEW_REPEATS), "repeats fewer than 3 times on one thread"),
    (Rejection(Reason.NO_GPU_WORK), "no GPU work launched below it"),
    (Rejection(Reason.TOO_SHORT), "shorter than 1 us"),
    (Rejection(Reason.TOO_SHORT, cpu_only=True), "shorter than 10 us (CPU only)"),
    (Rejection(Reason.RECORDER),
     "added by the recorder (nsysan profile --annotate): the program's own ranges come first"),
    (Rejection(Reason.LOW_COVERAGE, coverage=0.12),
     "launched 12% of the GPU time (an iteration launches at least 25%)"),
    (Rejection(Reason.BELOW_BEST, coverage=0.5, best=0.9), "covers 50% of the GPU time (best 90%)"),
    (Rejection(Reason.SUBSTEP, other="step", per_other=4),
     "a sub-step of 'step' (4 per 'step'): the loop repeats 'step', this is its breakdown"),
    (Rejection(Reason.FEWER_INSTANCES, other="step", mine=5, theirs=20),
     "fewer instances than 'step' (5 vs 20 on one thread), which launches as much of the GPU work"),
])
def test_each_rejection_says_why_in_the_words_the_json_always_had(rejection, prose):
    assert rejection.prose == prose
    assert _cand(rejected=rejection).verdict == prose


def test_a_candidate_is_chosen_or_rejected_by_name_and_a_choice_clears_a_rejection():
    cands = [_cand("a", rejected=Rejection(Reason.LIBRARY, library="XLA")), _cand("b"), _cand("c")]
    out = decide(cands, {"b": Rejection(Reason.BELOW_BEST, coverage=0.1, best=0.9)}, {"a": Choice.XLA})
    assert [c.verdict for c in out] == [Choice.XLA.value, "covers 10% of the GPU time (best 90%)", ""]
    assert out[0].rejected is None and out[2].undecided and cands[1].undecided  # the input is left as it was
    assert out[1].substep_of("x") is False
    assert _cand(rejected=Rejection(Reason.SUBSTEP, other="x", per_other=2)).substep_of("x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        out[0].name = "z"  # type: ignore[misc]


def test_candidate_json_keys_in_order_and_recorder_only_where_asked():
    keys = ["name", "count", "per_thread_max", "threads", "median_ns", "total_ns", "depth", "with_gpu_frac",
            "gpu_coverage", "library", "verdict", "recorder"]
    assert list(_cand(chosen=Choice.AUTO).to_json()) == keys
    trt = _cand("exec", library="TensorRT", recorder=None, chosen=Choice.TENSORRT).to_json()
    assert list(trt) == keys[:-1] and trt["verdict"].startswith("chosen (TensorRT")


def test_iteration_stats_json_leaves_out_what_was_not_measured():
    assert IterationStats().to_json() == {}
    st = IterationStats(count=3, sequences=1, p50_ns=10, headline="latency", warmup_count=0, inferred_loops=[])
    assert list(st.to_json()) == ["count", "sequences", "p50_ns", "headline", "warmup_count", "inferred_loops"]
    assert st.p50_ns == 10 and st.period_p50_ns is None
    assert not hasattr(st, "get")  # read by attribute everywhere: no dict-like access left


def test_run_summary_travels_between_processes():
    s = RunSummary(trace="t.sqlite", p50_ns=5, fixes=[FixLine("r", "info", 0, None, "t", "m", "s")],
                   capture_time=CaptureTime(10, [("start-up", 5, 0.5)], [], 0.0, "steady state"))
    back = pickle.loads(pickle.dumps(s))
    assert back == s and back.fixes[0].rule == "r"
    assert s.straggler_inputs() == {"trace": "t.sqlite", "p50_ns": 5, "program": None, "rank_payloads": []}
