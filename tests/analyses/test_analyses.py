"""Analyses on hand-built frames with exact expected values."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import factories as F
from nsysan.analyses import intervals as iv
from nsysan.analysis import Params, analyze


def test_merge_and_total():
    s, e = iv.merge(np.array([5, 0, 2, 20]), np.array([8, 3, 4, 21]))
    assert s.tolist() == [0, 5, 20] and e.tolist() == [4, 8, 21]
    assert iv.total(np.array([0, 1]), np.array([10, 5])) == 10


@given(st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 500)), min_size=0, max_size=60))
def test_union_never_exceeds_span_or_sum(rows):
    s = np.array([a for a, _ in rows], dtype=np.int64)
    e = s + np.array([d for _, d in rows], dtype=np.int64)
    tot = iv.total(s, e)
    assert tot <= int((e - s).sum())
    if rows:
        assert tot <= int(e.max() - s.min())
        # brute force on a unit grid
        grid = np.zeros(10_600, dtype=bool)
        for a, b in zip(s, e):
            grid[a:b] = True
        assert tot == int(grid.sum())


@given(st.lists(st.tuples(st.integers(0, 2000), st.integers(0, 100)), max_size=30),
       st.lists(st.tuples(st.integers(0, 2000), st.integers(0, 100)), max_size=30))
def test_intersection_matches_brute_force(a, b):
    """Zero-length intervals included (a merged set can hold one)."""
    def mk(rows):
        s = np.array([x for x, _ in rows], dtype=np.int64)
        return iv.merge(s, s + np.array([d for _, d in rows], dtype=np.int64))

    A, B = mk(a), mk(b)
    got = iv.intersect(A, B)
    ga, gb = np.zeros(2200, bool), np.zeros(2200, bool)
    for s, e in zip(*A):
        ga[s:e] = True
    for s, e in zip(*B):
        gb[s:e] = True
    assert int((got[1] - got[0]).sum()) == int((ga & gb).sum())
    assert bool((got[1] > got[0]).all()) and bool((got[0][1:] >= got[1][:-1]).all())  # sorted, disjoint


def test_busy_is_union_and_overlap_exact():
    # two streams overlapping: busy is the union (150), never the sum (200)
    k = F.kernels([(0, 100, 7), (50, 150, 13)])
    m = F.memcpy([(120, 220, 14, "HtoD", 1)])
    api = F.api([(-10, -5, "cudaLaunchKernel", 1), (40, 45, "cudaLaunchKernel", 2), (110, 115, "cudaMemcpyAsync", 1000)])
    a = analyze(F.make_trace(kernels=k, memcpy=m, cuda_api=api), rules=False)
    b = a.busy_capture.iloc[0]
    assert b["busy_ns"] == 220 and b["compute_ns"] == 150 and b["copy_ns"] == 100
    assert 0 <= b["busy_frac"] <= 1
    ov = a.overlap.set_index("direction").loc["HtoD"]
    assert ov["overlap_ns"] == 30 and ov["copy_ns"] == 100
    assert a.concurrency.iloc[0]["max_streams"] == 2


def test_gap_cause_host_with_activity_clipped_to_the_gap():
    # kernel 1 ends at 100; the next launch call starts at 900 after a "Print Result" range 150..850
    k = F.kernels([(0, 100, 7), (1000, 1100, 7)])
    api = F.api([(-50, -40, "cudaLaunchKernel", 1), (900, 910, "cudaLaunchKernel", 2),
                 (100, 150, "cudaStreamSynchronize", 99)])
    nv = F.nvtx([(150, 850, "Print Result"), (0, 2000, "infer")])
    a = analyze(F.make_trace(kernels=k, cuda_api=api, nvtx=nv), Params(min_gap_ns=500), rules=False)
    assert len(a.gaps) == 1
    g = a.gaps.iloc[0]
    assert (g["start_ns"], g["end_ns"], g["gap_ns"], g["cause"]) == (100, 1000, 900, "host")
    assert g["activity"] == "nvtx:Print Result"
    items = {(x["source"], x["name"]): x["ns"] for x in g["breakdown"]}
    # clipped to [gap start, launch call start) = [100, 900): Print Result 700, infer (outer, own time)
    # 100 of which the synchronize call inside it takes 50 (each ns counted once: the call first)
    assert items[("nvtx", "Print Result")] == 700
    assert items[("nvtx", "infer")] == 50
    assert items[("cuda_api", "cudaStreamSynchronize")] == 50


def test_nvtx_nesting_self_time_and_projection():
    k = F.kernels([(100, 400, 7), (450, 900, 7)])
    api = F.api([(10, 20, "cudaLaunchKernel", 1), (30, 40, "cudaLaunchKernel", 2)])
    nv = F.nvtx([(0, 200, "outer"), (25, 50, "inner")])
    a = analyze(F.make_trace(kernels=k, cuda_api=api, nvtx=nv), rules=False)
    r = a.nvtx_ranges.set_index("name")
    assert r.loc["outer", "self_ns"] == 175 and r.loc["inner", "self_ns"] == 25
    assert r.loc["outer", "gpu_ops"] == 2 and r.loc["inner", "gpu_ops"] == 1
    assert r.loc["outer", "proj_ns"] == 800 and r.loc["outer", "gpu_after_end_ns"] == 700
    assert r.loc["inner", "proj_start_ns"] == 450


def test_launch_join_uses_process_and_correlation_id():
    k = F.kernels([(100, 110, 7)])
    other = F.api([(0, 50, "cudaLaunchKernel", 1)]).assign(pid=999)  # same correlation id, other process
    mine = F.api([(60, 65, "cudaLaunchKernel", 1)])
    import pandas as pd

    a = analyze(F.make_trace(kernels=k, cuda_api=pd.concat([other, mine], ignore_index=True)), rules=False)
    assert a.launches.iloc[0]["api_start_ns"] == 60 and a.launches.iloc[0]["queue_ns"] == 40


def test_iterations_detect_warmup_and_steady_stats():
    # CPU-only ranges (no GPU activity recorded): 50 us each, every 100 us, after a 500 us first one
    rows = [(0, 500_000, "step")] + [(1_000_000 + i * 100_000, 1_050_000 + i * 100_000, "step") for i in range(9)]
    a = analyze(F.make_trace(nvtx=F.nvtx(rows)), rules=False)
    it = a.iterations
    assert it.range_name == "step" and it.warmup == 1 and it.how.startswith("auto (CPU only")
    assert it.stats.count == 9 and it.stats.latency_p50_ns == 50_000 and it.stats.period_p50_ns == 100_000
    assert a.steady.start_ns == 1_000_000 and a.steady.label == "steady state"


@given(st.lists(st.tuples(st.integers(1, 3), st.integers(0, 40)), max_size=60),
       st.lists(st.tuples(st.integers(1, 3), st.integers(0, 40)), max_size=30))
def test_first_match_equals_merge_with_first_duplicate(table, queries):
    from nsysan.analyses.join import first_match, pack_keys

    t = np.array(table, dtype=np.int64).reshape(-1, 2)
    q = np.array(queries, dtype=np.int64).reshape(-1, 2)
    got = first_match(pack_keys(t[:, 0], t[:, 1]), pack_keys(q[:, 0], q[:, 1]))
    for (pid, corr), idx in zip(q.tolist(), got.tolist()):
        hits = [i for i, (p, c) in enumerate(t.tolist()) if p == pid and c == corr]
        assert idx == (hits[0] if hits else -1)


@given(st.lists(st.integers(0, 40), max_size=60), st.lists(st.integers(-5, 60), max_size=30))
def test_first_match_one_process(table, queries):
    """One process: the direct-address path (distinct keys) or the sort path (a key twice)."""
    from nsysan.analyses.join import first_match, pack_keys

    t, q = np.array(table, dtype=np.int64), np.array(queries, dtype=np.int64)
    got = first_match(pack_keys(np.ones_like(t), t), pack_keys(np.ones_like(q), q))
    assert got.tolist() == [table.index(c) if c in table else -1 for c in queries]


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(-3, 2**33)), max_size=60),
       st.lists(st.tuples(st.integers(0, 3), st.integers(-3, 2**33)), max_size=30),
       st.booleans(), st.booleans(), st.booleans())
@example([(1, 5), (1, 5), (1, 9)], [(1, 5), (1, 9), (1, 7)], True, True, True)  # sorted, a key twice
@example([(1, 2**32 + 5), (1, 5)], [(1, 5)], False, False, True)  # ids that pack_keys folds together
def test_call_keys_join_as_packed_keys(table, queries, sort_table, one_pid, narrow):
    """Joining through ``call_keys`` (the correlation ids themselves for one process with ids in
    [0, 2^32)) finds the same first rows as packed keys, sorted table (binary search) or not, int32
    ids or int64."""
    from nsysan.analyses.join import call_keys, first_match, pack_keys

    t = np.array(sorted(table) if sort_table else table, dtype=np.int64).reshape(-1, 2)
    q = np.array(queries, dtype=np.int64).reshape(-1, 2)
    if one_pid:
        t[:, 0], q[:, 0] = 7, 7
    tc, qc = t[:, 1], q[:, 1]
    if narrow and (len(tc) == 0 or int(np.abs(tc).max()) < 2**31) and (len(qc) == 0 or int(np.abs(qc).max()) < 2**31):
        tc, qc = tc.astype(np.int32), qc.astype(np.int32)
    want = first_match(pack_keys(t[:, 0], t[:, 1]), pack_keys(q[:, 0], q[:, 1]))
    assert first_match(*call_keys(t[:, 0], tc, q[:, 0], qc)).tolist() == want.tolist()


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c<>", "d"]), st.sampled_from([1, 2]),
                          st.integers(0, 10**9)), min_size=1, max_size=80))
def test_sorted_stats_equal_pandas_groupby(rows):
    """The sort-based summary path gives pandas' numbers (count, sum, mean, median, min, max, std)."""
    from nsysan.analyses import summaries

    df = pd.DataFrame({"name": pd.Categorical([r[0] for r in rows]), "cfg": pd.Categorical([r[1] for r in rows]),
                       "dur_ns": np.array([r[2] for r in rows], dtype=np.int64)})
    fast = summaries.duration_stats(df, ["name", "cfg"])
    slow = summaries.duration_stats(df.astype({"name": str, "cfg": str}), ["name", "cfg"])
    assert fast[["name", "cfg"]].values.tolist() == slow[["name", "cfg"]].values.tolist()
    for c in summaries.STAT_COLUMNS:
        np.testing.assert_allclose(fast[c].to_numpy(float), slow[c].to_numpy(float), rtol=1e-9, atol=1e-6)


@settings(max_examples=120, deadline=None)
@given(st.lists(st.tuples(st.integers(-1000, 1000), st.integers(-1000, 1000)), min_size=1, max_size=60),
       st.lists(st.tuples(st.integers(0, 59), st.integers(1, 60)), min_size=1, max_size=30),
       st.sampled_from([1, 2, 4, 7, 512]))
def test_range_min_max_equals_brute_force(values, queries, block):
    """NVTX projections use RangeMinMax: spanning queries, inner blocks and in-block queries."""
    from nsysan.analyses.intervals import RangeMinMax

    lo_v = np.array([v[0] for v in values], dtype=np.int64)
    hi_v = np.array([v[1] for v in values], dtype=np.int64)
    q = [(a % len(values), min(len(values), a % len(values) + n)) for a, n in queries]
    lo = np.array([a for a, _ in q], dtype=np.int64)
    hi = np.array([b for _, b in q], dtype=np.int64)
    mn, mx = RangeMinMax(lo_v, hi_v, block=block).query(lo, hi)
    assert mn.tolist() == [int(lo_v[a:b].min()) for a, b in q]
    assert mx.tolist() == [int(hi_v[a:b].max()) for a, b in q]
    # min_max_over, by slices (few queries) or through RangeMinMax (forced by a share of 0): the same
    for share in (iv.SLICE_SHARE, 0):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(iv, "SLICE_SHARE", share)
            m2, x2 = iv.min_max_over(lo_v, hi_v, lo, hi)
        assert m2.tolist() == mn.tolist() and x2.tolist() == mx.tolist()


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(-50, 400), st.integers(0, 60)), min_size=1, max_size=40))
def test_concurrency_equals_counting_each_instant(rows):
    """Most streams busy at once and the mean number busy while any is, against counting per ns
    (each stream's ops merged first; zero-length ops included)."""
    from nsysan.analyses.gpu import Busy, concurrency
    from nsysan.analysis import Window

    ops = pd.DataFrame({"start_ns": [r[1] for r in rows], "end_ns": [r[1] + r[2] for r in rows],
                        "stream_id": [r[0] for r in rows]})
    ops = ops.sort_values("start_ns", kind="stable").reset_index(drop=True)
    ops = ops.assign(device_id=0, pid=1, op=pd.Categorical(["kernel"] * len(ops)),
                     kind=pd.Categorical([""] * len(ops)), name="k")
    w = Window(-100, 500, "capture")
    got = concurrency(ops, w, Busy(ops)).iloc[0]
    t = np.arange(-100, 500)
    per_stream = [((g["start_ns"].to_numpy()[:, None] <= t) & (t < g["end_ns"].to_numpy()[:, None])).any(axis=0)
                  for _, g in ops.groupby("stream_id")]
    depth = np.sum(per_stream, axis=0)
    busy = int((depth > 0).sum())
    assert got["max_streams"] == int(depth.max())
    assert got["mean_streams_when_busy"] == round(int(depth.sum()) / busy if busy else 0.0, 3)
    assert got["streams_used"] == len(per_stream)


@given(st.lists(st.tuples(st.sampled_from(["cudaLaunchKernel", "cuLaunchKernel", None]),
                          st.sampled_from(["k1", "k2", "k3", None]), st.integers(0, 10_000), st.integers(0, 10_000),
                          st.integers(-500, 500)), min_size=1, max_size=60))
def test_per_kernel_by_codes_equals_pandas_groupby(rows):
    """The launch table per (API, kernel) from category codes equals pandas' group-by (medians,
    counts, launch-dominated share, group order; rows with a missing key left out)."""
    from nsysan.analyses import launch

    lau = pd.DataFrame({
        "api_name": pd.Categorical([r[0] for r in rows], categories=["cuLaunchKernel", "cudaLaunchKernel", "unused"]),
        "name": pd.Categorical([r[1] for r in rows], categories=["k1", "k2", "k3"]),
        "api_ns": np.array([r[2] for r in rows], dtype=np.int64), "gpu_ns": np.array([r[3] for r in rows], np.int64),
        "queue_ns": np.array([r[4] for r in rows], dtype=np.int64)})
    lau = lau.assign(launch_dominated=lau["api_ns"] > lau["gpu_ns"])
    got = launch.per_kernel(lau)
    g = lau.groupby(["api_name", "name"], sort=True, observed=True)
    want = g.agg(count=("gpu_ns", "size"), api_med_ns=("api_ns", "median"), queue_med_ns=("queue_ns", "median"),
                 gpu_med_ns=("gpu_ns", "median"), launch_dominated_frac=("launch_dominated", "mean")).reset_index()
    want = want.sort_values(["count", "name"], ascending=[False, True], kind="stable").reset_index(drop=True)
    pd.testing.assert_frame_equal(got, want)


@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2), st.integers(0, 3)), max_size=25))
def test_lexsorted_check_agrees_with_lexsort(rows):
    from nsysan.analyses.frames import lexsorted

    keys = tuple(np.array([r[i] for r in rows], dtype=np.int64) for i in range(3))
    order = np.lexsort(keys) if rows else np.array([], dtype=np.int64)
    assert lexsorted(keys) == bool((order == np.arange(len(rows))).all() or
                                    all(tuple(k[order][i] for k in keys) == tuple(k[i] for k in keys)
                                        for i in range(len(rows))))


@given(st.lists(st.tuples(st.integers(0, 500), st.integers(0, 40)), max_size=40), st.integers(-20, 560),
       st.integers(0, 600))
@example(rows=[(0, 2)], lo=1, width=0)  # an empty window inside an interval (found at random)
def test_clip_merged_equals_clip(rows, lo, width):
    """The slice-based clip of merged intervals equals the general clip (zero-length ones dropped)."""
    ms, me = iv.merge(np.array([a for a, _ in rows], dtype=np.int64),
                      np.array([a + d for a, d in rows], dtype=np.int64))
    want = iv.clip(ms, me, lo, lo + width)
    got = iv.clip_merged(ms, me, lo, lo + width)
    assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist()


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(-1, 1), st.integers(0, 40)), max_size=60),
       st.integers(1, 3))
def test_group_rows_equals_pandas_groupby(rows, nkeys):
    """Groups (keys ascending, rows in order) equal pandas' group-by, whether group_rows takes the
    mask path (few combinations) or the sort path (many: the third key has up to 41 values)."""
    from nsysan.analyses.frames import distinct, group_rows

    keys = [np.array([r[i] for r in rows], dtype=np.int64) for i in range(nkeys)]
    got = [(k, r.tolist()) for k, r in group_rows(*keys)]
    if not rows:
        assert got == []
        return
    df = pd.DataFrame({f"k{i}": k for i, k in enumerate(keys)})
    want = [((k,) if not isinstance(k, tuple) else tuple(k), g.tolist())
            for k, g in df.groupby([f"k{i}" for i in range(nkeys)], sort=True).indices.items()]
    want = sorted(want)
    assert got == [(tuple(int(x) for x in k), r) for k, r in want]
    for k in keys:
        assert distinct(k).tolist() == np.unique(k).tolist()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["host", "sync", "dependency", None]), st.integers(0, 1000)), max_size=40),
       st.booleans())
def test_gap_causes_equal_pandas_groupby(rows, categorical):
    """gpu-low-util's idle time per cause equals pandas' group-by sum, largest first, empty causes
    and missing ones left out, whether the cause column is categorical or not."""
    from nsysan.rules.gpu_low_util import _by_cause

    causes = [r[0] for r in rows]
    gaps = pd.DataFrame({"cause": pd.Categorical(causes, categories=["host", "sync", "dependency", "launch"])
                         if categorical else pd.Series(causes, dtype=object),
                         "gap_ns": np.array([r[1] for r in rows], dtype=np.int64)})
    want = gaps.groupby("cause")["gap_ns"].sum()
    want = want[gaps.groupby("cause")["gap_ns"].count() > 0].sort_values(ascending=False, kind="stable")
    assert _by_cause(gaps, np.arange(len(rows))) == [(str(c), int(v)) for c, v in want.items()]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["", "a", "b<", "c", None]), st.integers(0, 10_000)), max_size=40),
       st.booleans(), st.sampled_from([None, ""]))
def test_count_sum_equals_pandas_groupby(rows, categorical, skip):
    from nsysan.analyses.frames import count_sum

    keys = [r[0] for r in rows]
    df = pd.DataFrame({"k": pd.Categorical(keys, categories=["", "a", "b<", "c", "unused"]) if categorical
                       else pd.Series(keys, dtype=object), "v": np.array([r[1] for r in rows], dtype=np.int64)})
    sub = df if skip is None else df.loc[df["k"] != skip]
    want = sub.groupby("k", sort=True)["v"].agg(["count", "sum"])
    got = count_sum(df["k"], df["v"], skip=skip)
    assert [str(k) for k in got.index] == [str(k) for k in want.index]
    assert got["count"].tolist() == want["count"].tolist() and got["sum"].tolist() == want["sum"].tolist()
    # the same order after the sort the callers make
    assert list(got.sort_values("sum", ascending=False).index.astype(str)) == \
        list(want.sort_values("sum", ascending=False).index.astype(str))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 200), st.integers(0, 60)), max_size=40))
@example([(5, 0), (5, 10), (5, 3), (8, 0), (15, 5)])
def test_innermost_time_equals_the_innermost_segments(rows):
    """``innermost_time`` (one pass with a stack) gives each interval the time ``innermost``'s
    segments give it, zero-length and tied starts included, and the time of each instant's
    latest-starting open interval counted one nanosecond at a time."""
    from nsysan.analyses import intervals as iv

    s = np.array(sorted(r[0] for r in rows), dtype=np.int64)
    e = s + np.array([r[1] for r in rows], dtype=np.int64)
    got = iv.innermost_time(s, e)
    seg_s, seg_e, owner = iv.innermost(s, e)
    want = np.zeros(len(s), np.int64)
    np.add.at(want, owner, seg_e - seg_s)
    assert got.tolist() == want.tolist()
    per_ns = np.zeros(len(s), np.int64)
    for t in range(0, 261):
        open_ = [i for i in range(len(s)) if s[i] <= t < e[i]]
        if open_:
            per_ns[max(open_)] += 1
        here = np.flatnonzero((seg_s <= t) & (t < seg_e))  # the segments: that owner, or none
        assert len(here) == (1 if open_ else 0)
        if open_:
            assert owner[here[0]] == max(open_)
    assert got.tolist() == per_ns.tolist()
    # sorted, disjoint, and one owner's adjacent pieces joined
    assert (seg_e > seg_s).all() and (seg_s[1:] >= seg_e[:-1]).all()
    assert not ((seg_s[1:] == seg_e[:-1]) & (owner[1:] == owner[:-1])).any()
