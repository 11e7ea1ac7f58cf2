"""launch-bound's parts: first launches, per-key medians, and the chunked judgement."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import example, given
from hypothesis import strategies as st


@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 50)), max_size=80), st.booleans())
@example([(3, 5), (3, 5), (1, 5), (3, 2)], True)
def test_first_launches_without_a_sort_equal_the_sorted_definition(pairs, in_call_order):
    """launch-bound's first launch of each kernel key: the backwards-write path (launches in call
    order) marks the same rows as the stable sort by (key, call start)."""
    from nsysan.rules.launch_bound import first_launches

    key = np.array([k for k, _ in pairs], dtype=np.int32)
    start = np.array([s for _, s in pairs], dtype=np.int64)
    if in_call_order:
        o = np.argsort(start, kind="stable")
        key, start = key[o], start[o]
    fast = first_launches(key, start)
    slow = first_launches(key, start, fast=False)
    assert fast.tolist() == slow.tolist()
    seen: dict[int, int] = {}
    for i, (k, s) in enumerate(zip(key.tolist(), start.tolist())):  # by hand: earliest call, then row
        if k not in seen or s < start[seen[k]]:
            seen[k] = i
    assert [i for i, f in enumerate(fast.tolist()) if f] == sorted(seen.values())


@pytest.mark.parametrize("name", ["launch_eager", "decode_eager", "ladder_baseline", "train_inline"])
def test_launch_bound_in_chunks_equals_all_at_once(load, name, monkeypatch):
    """launch-bound judges the launches a chunk at a time against each kernel's median: the same
    finding (message, impact, evidence) as one chunk of all of them."""
    from nsysan.analysis import analyze
    from nsysan.rules import launch_bound as lb

    monkeypatch.setattr(lb, "CHUNK", 1 << 40)
    whole = [f for f in analyze(load(name)).findings if f.rule == "launch-bound"]
    monkeypatch.setattr(lb, "CHUNK", 5)
    chunked = [f for f in analyze(load(name)).findings if f.rule == "launch-bound"]
    assert [(f.message, f.impact_ns, f.evidence) for f in chunked] == [(f.message, f.impact_ns, f.evidence) for f in whole]


@given(st.lists(st.tuples(st.integers(0, 12), st.integers(0, 10**6)), min_size=1, max_size=200))
@example([(0, 5), (0, 5), (1, 3)])
def test_median_per_key_equals_pandas(pairs):
    """Each key's median of its values (one per key) equals pandas' group-by median, and the
    per-element medians are it looked up."""
    from nsysan.rules.launch_bound import _median_per_key

    key = np.array([k for k, _ in pairs], dtype=np.int32)
    v = np.array([x for _, x in pairs], dtype=np.int64)
    keys, med = _median_per_key(key, v)
    want = pd.Series(v).groupby(key).median()
    assert keys.tolist() == want.index.tolist()
    assert med.tolist() == want.tolist()
    assert med[np.searchsorted(keys, key)].tolist() == want.loc[key].tolist()
    mine = v.copy()  # the caller's own temporary, overwritten: the same medians
    k2, m2 = _median_per_key(key, mine, own=True)
    assert k2.tolist() == keys.tolist() and m2.tolist() == med.tolist()
