"""``gaps``: the host gaps' explanation a chunk of windows at a time equals one pass."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import FIXTURE_NAMES
from hypothesis import example, given
from hypothesis import strategies as st


def _same_gaps(x: pd.DataFrame, y: pd.DataFrame) -> None:
    assert x["cause"].astype(str).tolist() == y["cause"].astype(str).tolist()
    assert x["activity"].astype(str).tolist() == y["activity"].astype(str).tolist()
    assert x["breakdown"].tolist() == y["breakdown"].tolist()
    assert x.drop(columns=["breakdown"]).equals(y.drop(columns=["breakdown"]))


# fixtures with many host gaps (launch loops, decoding), several submitting threads or processes
# (two_procs, the dataloader, the two-GPU recordings), nested NVTX ranges on the submitting thread
GAP_FIXTURES = [n for n in FIXTURE_NAMES if n.startswith(("launch_eager", "decode_eager", "ladder_baseline",
                                                          "ladder_worker", "two_procs", "train_", "ddp_straggler",
                                                          "waits_", "hf_generate", "pipeline"))]


@pytest.mark.parametrize("name", GAP_FIXTURES)
def test_gaps_explained_in_chunks_equal_all_at_once(analysis, load, name, monkeypatch):
    """The host gaps of a thread explained a chunk of windows at a time (the working set's bound)
    give the gap frame that all of them at once gives: every window's sums, best entry, label and
    breakdown depend on that window alone. Chunks of 7 windows against one chunk of all."""
    from nsysan.analyses import gaps as G

    a = analysis(name)
    if len(a.ops) == 0:
        pytest.skip("no GPU ops")
    monkeypatch.setattr(G, "EXPLAIN_CHUNK", 1 << 40)
    whole = G.idle_gaps(load(name), a.ops, a.capture)
    if int((whole["cause"].astype(str) == "host").sum() + (whole["cause"].astype(str) == "sync").sum()) < 8:
        pytest.skip("fewer host gaps than two chunks")
    monkeypatch.setattr(G, "EXPLAIN_CHUNK", 7)
    _same_gaps(G.idle_gaps(load(name), a.ops, a.capture), whole)


@pytest.mark.parametrize("name", ["ladder_baseline", "waits_phases", "train_inline", "decode_eager"])
def test_nvtx_swept_window_by_window_the_same_in_chunks(analysis, load, name, monkeypatch):
    """When more nested NVTX ranges touch a thread's gaps than ``INNERMOST_MAX``, the NVTX layer is
    swept window by window (the detailed gaps only); that decision is the whole thread's, so the
    chunks keep it (a chunk with few ranges would otherwise count NVTX in every window)."""
    from nsysan.analyses import gaps as G
    from nsysan.analyses import thread_activity as TA

    a = analysis(name)
    monkeypatch.setattr(TA, "INNERMOST_MAX", 2)
    swept = []
    real = TA.ThreadActivity.nvtx_swept
    monkeypatch.setattr(TA.ThreadActivity, "nvtx_swept",
                        lambda self, *args: swept.append(real(self, *args)) or swept[-1])
    monkeypatch.setattr(G, "EXPLAIN_CHUNK", 1 << 40)
    whole = G.idle_gaps(load(name), a.ops, a.capture)
    if not any(swept):
        pytest.skip("no thread with nested NVTX ranges over its gaps")
    monkeypatch.setattr(G, "EXPLAIN_CHUNK", 3)
    _same_gaps(G.idle_gaps(load(name), a.ops, a.capture), whole)


def _activity_trace(api_rows, osrt_rows, nvtx_rows):
    """A hand-built trace of two threads' CUDA API and OS runtime calls (``(start, end, name, tid)``,
    nested or not) and one thread's NVTX ranges (``(start, end, text)``)."""
    import factories as F

    api = pd.concat([F.api([(s, e, n, i + 1) for i, (s, e, n, t) in enumerate(api_rows) if t == tid], tid=tid)
                     for tid in (101, 102)], ignore_index=True)
    api = api.sort_values("start_ns", kind="stable").reset_index(drop=True)
    api["name"] = pd.Categorical(api["name"].astype(str))
    os_ = pd.DataFrame({"start_ns": np.array([r[0] for r in osrt_rows], np.int64),
                        "end_ns": np.array([r[1] for r in osrt_rows], np.int64),
                        "name": pd.Categorical([r[2] for r in osrt_rows]),
                        "pid": np.full(len(osrt_rows), F.PID, np.int64),
                        "tid": np.array([r[3] for r in osrt_rows], np.int64)})
    os_ = os_.assign(dur_ns=os_["end_ns"] - os_["start_ns"]).sort_values("start_ns", kind="stable").reset_index(drop=True)
    nv = F.nvtx(nvtx_rows, tid=101) if nvtx_rows else F.nvtx([(0, 1, "x")]).iloc[0:0]
    return F.make_trace(cuda_api=api, osrt=os_, nvtx=nv)


_call = st.tuples(st.integers(0, 2_000), st.integers(0, 400), st.sampled_from(["cudaStreamSynchronize", "cudaLaunchKernel",
                                                                            "poll", "write"]), st.sampled_from([101, 102]))


@given(st.lists(_call, max_size=40), st.lists(_call, max_size=30),
       st.lists(st.tuples(st.integers(0, 2_000), st.integers(1, 600), st.sampled_from(["step", "fwd", "bwd"])), max_size=12),
       st.lists(st.tuples(st.integers(1, 80), st.integers(1, 120), st.sampled_from([101, 102])), min_size=1, max_size=25),
       st.integers(0, 2**16))
@example([(0, 300, "cudaStreamSynchronize", 101), (10, 20, "cudaLaunchKernel", 101)],
         [(5, 500, "poll", 101), (6, 7, "write", 101)], [(0, 900, "step"), (50, 100, "fwd"), (60, 70, "bwd")],
         [(1, 40, 101), (5, 50, 101), (3, 30, 102), (2, 400, 101)], 5)
def test_gap_explanation_in_any_chunks_equals_one_pass(api_rows, osrt_rows, nvtx_rows, windows, seed):
    """Generated threads (nested and overlapping calls, nested NVTX ranges, two threads sharing the
    tables) and host gaps: the explanation a chunk of 1, 2 or 3 windows at a time, with the threads'
    rows sorted by thread from the start, and with the NVTX sweep engaged (INNERMOST_MAX 1), equals
    the one pass over all windows with the same settings."""
    from nsysan.analyses import gaps as G
    from nsysan.analyses import thread_activity as TA

    t = _activity_trace([(s, s + d, n, tid) for s, d, n, tid in api_rows],
                        [(s, s + d, n, tid) for s, d, n, tid in osrt_rows],
                        [(s, s + d, n) for s, d, n in nvtx_rows])
    # disjoint, ascending windows (the gaps of one device), each given to one of the two threads
    lo, hi, tids, at = [], [], [], 0
    for gap, length, tid in windows:
        at += gap
        lo.append(at)
        hi.append(at + length)
        tids.append(tid)
        at += length
    lo_a, hi_a = np.array(lo, np.int64), np.array(hi, np.int64)
    tid_a, pid_a = np.array(tids, np.int64), np.full(len(tids), 100, np.int64)
    rows = np.arange(len(lo), dtype=np.int64)
    detail = np.flatnonzero(np.random.default_rng(seed).random(len(lo)) < 0.5)
    saved = (G.EXPLAIN_CHUNK, TA.FEW_THREADS, TA.INNERMOST_MAX)

    def explain(chunk, few, inner):
        G.EXPLAIN_CHUNK, TA.FEW_THREADS, TA.INNERMOST_MAX = chunk, few, inner
        act, cats, bd, sync = G.explain_gaps(t, rows, lo_a, hi_a, pid_a, tid_a, detail, len(lo))
        return [cats[c] for c in act.tolist()], bd.tolist(), sync.tolist()

    try:
        for inner in (saved[2], 1):
            one_pass = explain(1 << 40, saved[1], inner)
            for chunk in (1, 2, 3):
                assert explain(chunk, saved[1], inner) == one_pass
            assert explain(2, 0, inner) == one_pass
    finally:
        G.EXPLAIN_CHUNK, TA.FEW_THREADS, TA.INNERMOST_MAX = saved
