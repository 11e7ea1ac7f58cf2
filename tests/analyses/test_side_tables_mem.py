"""memory.memory_use's lower-memory steps (issue 54 item 7) against plain references: the timeline
lane's bins found by a binary search of each edge (``_runs``), the call times matched a part at a
time and written over the events' own times (``_call_times``), and the growth step sorting and
summing in place (``_growth``)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from nsysan.analyses import memory as M


def _downsample_ref(t: np.ndarray, live: np.ndarray, points: int) -> tuple[np.ndarray, np.ndarray]:
    """The lane's points as every row numbered by its bin (the code before ``_runs``)."""
    if len(t) <= points:
        return t, live
    edges = np.linspace(t[0], t[-1], points + 1)
    b = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, points - 1)
    if not bool((b[1:] >= b[:-1]).all()):
        order = np.lexsort((-live, b))
        first = np.concatenate([[True], b[order][1:] != b[order][:-1]])
        pick = np.sort(order[first])
        return t[pick], live[pick]
    bounds = [0, *(np.flatnonzero(b[1:] != b[:-1]) + 1).tolist(), len(b)]
    pick = np.array([lo + int(np.argmax(live[lo:hi])) for lo, hi in zip(bounds[:-1], bounds[1:])], np.int64)
    return t[pick], live[pick]


@pytest.mark.parametrize("case", ["dense", "sparse", "ties", "constant", "huge", "unsorted", "negative"])
def test_lane_bins_by_edges_equal_bins_by_row(case):
    rng = np.random.default_rng(7)
    n, points = 50_000, 997
    if case == "dense":
        t = np.sort(rng.integers(0, 10**6, n))
    elif case == "sparse":
        t = np.sort(rng.integers(0, 10**12, n))
    elif case == "ties":
        t = np.sort(rng.integers(0, 3000, n)) * 1000 + 123
    elif case == "constant":
        t = np.full(n, 5_000, np.int64)
    elif case == "huge":  # beyond 2^53: the rows numbered as before
        t = np.sort(rng.integers(2**60, 2**60 + 10**9, n))
    elif case == "negative":
        t = np.sort(rng.integers(-10**9, 10**9, n))
    else:
        t = rng.integers(0, 10**9, n)
    t = t.astype(np.int64)
    live = rng.integers(0, 1000, n).astype(np.int64)
    got, want = M._downsample(t, live, points), _downsample_ref(t, live, points)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def _events(n: int, pids: np.ndarray, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    t = (np.arange(n) * 1000 + rng.integers(0, 1000, n)).astype(np.int64)  # distinct times
    corr = rng.integers(0, n // 2, n).astype(np.int32)  # some without a call, some twice
    op = rng.integers(0, 2, n).astype(np.int8)
    ev = pd.DataFrame({"start_ns": t, "device_id": np.zeros(n, np.int32), "pid": pids.astype(np.int32),
                       "bytes": rng.integers(1, 1 << 20, n).astype(np.int64), "mem_kind": np.full(n, 2, np.int8),
                       "operation": op, "correlation_id": corr})
    m = n // 3  # calls out of the events' order: their starts random
    api = pd.DataFrame({"pid": rng.choice(np.unique(pids), m).astype(np.int32),
                        "correlation_id": rng.permutation(n // 2)[:m].astype(np.int32),
                        "start_ns": rng.integers(0, n * 1000, m).astype(np.int64),
                        "name": pd.Categorical(["cudaMalloc"] * m)})
    return ev, api


def _growth_ref(ev: pd.DataFrame, api: pd.DataFrame, bounds: dict[int, np.ndarray]) -> list[tuple[int, ...]]:
    first: dict[tuple[int, int], int] = {}
    for p, c, s in zip(api["pid"].tolist(), api["correlation_id"].tolist(), api["start_ns"].tolist()):
        first.setdefault((p, c), s)
    ct = np.array([first.get((p, c), t) if c > 0 else t for p, c, t in
                   zip(ev["pid"].tolist(), ev["correlation_id"].tolist(), ev["start_ns"].tolist())], np.int64)
    op, by = ev["operation"].to_numpy(), ev["bytes"].to_numpy()
    delta = np.where(op == M.ALLOC, by, -by)
    out = []
    for pid, b in bounds.items():
        m = ev["pid"].to_numpy() == pid
        o = np.argsort(ct[m], kind="stable")
        t, d = ct[m][o], delta[m][o]
        live = M._live(d.copy())
        at = np.searchsorted(t, b, side="left") - 1
        lv = np.where(at >= 0, live[np.clip(at, 0, None)], 0)
        inside = (t >= b[0]) & (t < b[-1])
        out.append((pid, int(lv[0]), int(lv[-1]), int((np.diff(lv) > 0).sum()),
                    int(d[inside & (d > 0)].sum()), int(-d[inside & (d < 0)].sum())))
    return out


@pytest.mark.parametrize("part", [1 << 20, 1000, 1])
@pytest.mark.parametrize("procs", [1, 3])
def test_growth_in_place_equals_the_plain_reference(monkeypatch, part, procs):
    n = 6000
    rng = np.random.default_rng(procs)
    pids = np.full(n, 11) if procs == 1 else rng.choice([11, 12, 13], n)
    ev, api = _events(n, pids, seed=part + procs)
    bounds = {p: np.linspace(n * 100, n * 900, 9).astype(np.int64) for p in np.unique(pids).tolist()}
    table = pd.DataFrame([{"pid": p, "tid": p, "warmup": False, "start_ns": int(s), "cpu_ns": n * 100}
                          for p, b in bounds.items() for s in b[:-1]])
    monkeypatch.setattr(M, "_PART", part)
    e = M._device_events(ev.iloc[rng.permutation(n)].reset_index(drop=True))  # the table out of time order
    assert e is not None and e.own_t
    got = M._growth(api, table, e)
    want = _growth_ref(ev, api, bounds)
    assert [(r.pid, r.live_first_bytes, r.live_last_bytes, r.grew_in, r.allocated_bytes, r.freed_bytes)
            for r in got.itertuples()] == want


@pytest.mark.parametrize("part", [1 << 18, 7, 1])
def test_running_sum_undone_in_place_gives_the_deltas_back(monkeypatch, part):
    rng = np.random.default_rng(part)
    d = rng.integers(-2**62, 2**62, 5000).astype(np.int64)  # sums that wrap around int64
    d[:3] = [np.iinfo(np.int64).max, 5, -7]
    want = d.copy()
    monkeypatch.setattr(M, "_PART", part)
    with np.errstate(over="ignore"):
        M._live(d, in_place=True)
    M._differences(d)
    assert np.array_equal(d, want)

