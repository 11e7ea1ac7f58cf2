"""``sched.Schedule``'s on-CPU intervals against their definition, on random switch tables: per thread
its switches in time order (ties: the table's order); each switch-in runs until the thread's next
switch (the last one: nothing after it is known); empty pieces dropped; the rest merged."""

import numpy as np
import pandas as pd
import pytest

from nsysan.analyses.sched import Schedule


def _by_definition(t: list[int], inn: list[bool]) -> list[tuple[int, int]]:
    order = sorted(range(len(t)), key=lambda i: (t[i], i))
    ts, ins = [t[i] for i in order], [inn[i] for i in order]
    pieces = [(ts[k], ts[k + 1]) for k in range(len(ts) - 1) if ins[k] and ts[k + 1] > ts[k]]
    merged: list[tuple[int, int]] = []
    for s, e in pieces:
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e))
        else:
            merged.append((s, e))
    return merged


@pytest.mark.parametrize("seed", range(30))
def test_on_intervals_as_defined(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    pid = rng.integers(1, 3, size=n)
    tid = rng.integers(1, 4, size=n)
    start = rng.integers(0, 200, size=n) if seed % 2 else np.sort(rng.integers(0, 10_000, size=n))
    is_in = rng.integers(0, 2, size=n).astype(np.int8)
    s = Schedule(pd.DataFrame({"start_ns": start, "pid": pid.astype(np.int32), "tid": tid.astype(np.int32),
                               "is_in": is_in}))
    for p_, t_ in sorted(set(zip(pid.tolist(), tid.tolist()))):
        m = (pid == p_) & (tid == t_)
        want = _by_definition(start[m].tolist(), is_in[m].astype(bool).tolist())
        got_s, got_e = s.on_intervals(p_, t_)
        assert list(zip(got_s.tolist(), got_e.tolist())) == want
