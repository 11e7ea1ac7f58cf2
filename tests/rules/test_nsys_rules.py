"""The nsys analyze cross-check on hand-built frames: nsys' definitions, and the steady/outside split."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

import factories as f
from nsysan.analyses import intervals as iv
from nsysan.analyses import nsys_rules
from nsysan.analyses.gpu import Window


def brute_chunks(s: np.ndarray, e: np.ndarray, chunks: int) -> list[tuple[int, int, float]]:
    """nsys' equal chunks over [first start, last end), each with its union busy percentage."""
    lo, hi = int(s.min()), int(e.max())
    size = int(np.ceil((hi - lo) / chunks))
    out = []
    for c in range(chunks):
        cs, ce = lo + c * size, min(lo + (c + 1) * size, hi)
        if cs >= ce:
            break
        out.append((cs, ce, 100.0 * iv.total(*iv.clip(s, e, cs, ce)) / (ce - cs)))
    return out


def test_low_util_chunks_match_brute_force_union():
    rng = np.random.default_rng(7)
    s = np.sort(rng.integers(0, 10_000_000, 400))
    e = s + rng.integers(1, 40_000, 400)
    ops = pd.DataFrame({"start_ns": s, "end_ns": e, "pid": 1, "device_id": 0})
    got = nsys_rules._low_util(ops, 30, 50.0)
    covered = sum(ce - cs for cs, ce, pct in brute_chunks(s, e, 30) if pct < 50)
    assert int(got["dur_ns"].sum()) == covered and covered > 0


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1_000_000), st.integers(1, 300_000)), min_size=1, max_size=60),
       st.integers(1, 40))
def test_low_util_never_misses_a_chunk(rows, chunks):
    s = np.array([a for a, _ in rows], np.int64)
    e = s + np.array([d for _, d in rows], np.int64)
    ops = pd.DataFrame({"start_ns": s, "end_ns": e, "pid": 1, "device_id": 0})
    got = nsys_rules._low_util(ops, chunks, 50.0)
    assert (got["util_pct"] < 50).all()
    for cs, ce, pct in brute_chunks(s, e, chunks):
        inside = ((got["start_ns"] <= cs) & (got["start_ns"] + got["dur_ns"] >= ce)).any()
        assert inside == (pct < 50), (cs, ce, pct)


def trace_with_copies():
    # a pageable async copy in setup, a pinned one in the steady state, a small sync HtoD (nsys skips it)
    m = f.memcpy([(100, 200, 7, "HtoD", 0), (5_000, 5_100, 7, "HtoD", 1), (6_000, 6_050, 7, "HtoD", 0)])
    m = m.assign(bytes=np.array([1 << 20, 1 << 20, 1000], np.int64))
    api = f.api([(90, 210, "cudaMemcpyAsync", 1000), (4_990, 5_010, "cudaMemcpyAsync", 1001),
                 (5_990, 6_060, "cudaMemcpy", 1002), (7_000, 9_000, "cudaStreamSynchronize", 5000)])
    return f.make_trace(memcpy=m, cuda_api=api)


def test_instances_follow_nsys_definitions():
    found = nsys_rules.instances(trace_with_copies())
    assert found["cuda_memcpy_async"]["start_ns"].tolist() == [100]  # pageable and async only
    assert len(found["cuda_memcpy_sync"]) == 0  # HtoD of <= 64,000 bytes is left out, as nsys does
    assert found["cuda_api_sync"]["name"].tolist() == ["cudaStreamSynchronize"]


def test_cross_check_says_where_and_who():
    found = nsys_rules.instances(trace_with_copies())
    table = nsys_rules.cross_check(found, Window(1_000, 10_000, "steady state"), {"sync-api"}).set_index("nsys_rule")
    assert table.loc["cuda_memcpy_async", "outside_count"] == 1
    assert table.loc["cuda_memcpy_async", "verdict"].startswith("outside the steady state only")
    assert table.loc["cuda_api_sync", "verdict"] == "1 in the steady state, judged by sync-api"
    assert table.loc["cuda_memset_sync", "verdict"].startswith("none")
    table = nsys_rules.cross_check(found, Window(1_000, 10_000, "steady state"), set()).set_index("nsys_rule")
    assert "under the thresholds of sync-api" in table.loc["cuda_api_sync", "verdict"]
