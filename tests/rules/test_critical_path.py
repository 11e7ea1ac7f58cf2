"""The replay behind serial-copy-compute's saving (``nsysan/rules/_critical_path.py``) on hand-built
devices whose answer follows from its rules by hand: blocks are unions of op intervals, each starts
at the later of when its first kept op was launched (the launching call's end; a synchronous copy's
call start) and the previous block's new end; a stream in a block keeps its own gaps; the host moves
with the GPU work it waited for. All times below in us (``US`` ns); one process, one thread."""

from __future__ import annotations

from types import SimpleNamespace

import factories as F
import numpy as np
import pytest

from nsysan.analyses import summaries
from nsysan.analyses.gpu import Window
from nsysan.rules._critical_path import saving, window_ops

US = 1000


def _us(rows):
    """Start and end (the first two fields) from us to ns."""
    return [(r[0] * US, r[1] * US, *r[2:]) for r in rows]


def _ctx(kernels=(), copies=(), calls=()):
    """kernels: (start, end, stream); copies: (start, end, stream, kind, 0 pageable / 1 pinned);
    calls: (start, end, api, correlation id); copies' correlation ids count from 1000."""
    tables = {"cuda_api": F.api(_us(calls))}
    if kernels:
        tables["kernels"] = F.kernels(_us(kernels))
    if copies:
        tables["memcpy"] = F.memcpy(_us(copies))
    trace = F.make_trace(**tables)
    ops = summaries.gpu_ops(trace)
    window = Window(int(ops["start_ns"].min()), int(ops["end_ns"].max()) + 1, "test")
    return SimpleNamespace(trace=trace, a=SimpleNamespace(ops=ops), window=window)


def _saving(ctx, new_dur) -> int:
    """The device's saving with the window's ops (by start) taking ``new_dur(ops)`` ns."""
    rows = window_ops(ctx)
    got = saving(ctx, rows, new_dur(ctx.a.ops.iloc[rows]))
    assert set(got) == {0}
    return got[0]


def _copies_off(o) -> np.ndarray:
    return np.where(o["op"].astype(str).to_numpy() == "memcpy", 0, o["dur_ns"].to_numpy(np.int64))


def _eager_after_copy(n_kernels: int):
    """A 100 us pinned host-to-device copy [10, 110) on stream 7, its async call [0, 2]; then kernels
    of 10 us on the same stream, launched one by one (calls [20 + 30i, 25 + 30i]): the first ones
    queue behind the copy and run back to back, 1 us apart (111, 122, 133, 144, 155), the sixth when
    it is launched (its call ends at 175)."""
    starts = [111, 122, 133, 144, 155, 175][:n_kernels]
    return _ctx(kernels=[(s, s + 10, 7) for s in starts], copies=[(10, 110, 7, "HtoD", 1)],
                calls=[(0, 2, "cudaMemcpyAsync", 1000)]
                + [(20 + 30 * i, 25 + 30 * i, "cudaLaunchKernel", i + 1) for i in range(n_kernels)])


@pytest.mark.parametrize("n_kernels,expected_us", [
    # without the copy each kernel runs when launched: [25, 35), [55, 65), [85, 95), [115, 125),
    # [145, 155), [175, 185); the sixth ended at 185 before too: nothing gained
    (6, 0),
    # the window ends with the fifth: it ended at 165, now at 155
    (5, 10),
])
def test_a_copy_ahead_of_eager_launches_saves_what_the_launches_do_not_fill(n_kernels, expected_us):
    """GIVEN a copy ahead of kernels the host launches one by one WHEN the copy is taken off the queue
    THEN the kernels start no earlier than their launches: the saving is not the copy's 100 us."""
    assert _saving(_eager_after_copy(n_kernels), _copies_off) == expected_us * US


def test_streams_side_by_side_keep_the_longest():
    """GIVEN a 100 us copy [10, 110) on stream 8 beside a 200 us kernel [10, 210) on stream 7 (both
    launched by calls ending at 5) WHEN the copy is taken off THEN nothing is saved (the kernel still
    runs 200 us from the block's start); WHEN instead the kernel is halved to 100 us and a 100 us
    kernel [10, 110) on stream 8 is halved to 50 THEN the block lasts its longest stream's 100 us:
    it ends at 110, 100 us saved, once (not 100 + 50)."""
    calls = [(0, 5, "cudaLaunchKernel", 1), (1, 5, "cudaMemcpyAsync", 1000)]
    ctx = _ctx(kernels=[(10, 210, 7)], copies=[(10, 110, 8, "HtoD", 1)], calls=calls)
    assert _saving(ctx, _copies_off) == 0
    ctx = _ctx(kernels=[(10, 210, 7), (10, 110, 8)],
               calls=[(0, 5, "cudaLaunchKernel", 1), (1, 5, "cudaLaunchKernel", 2)])
    assert _saving(ctx, lambda o: o["dur_ns"].to_numpy(np.int64) // 2) == 100 * US


def test_the_host_moves_with_a_synchronous_copy_it_waited_for():
    """GIVEN a synchronous pageable copy (cudaMemcpy [0, 112], the copy [10, 110)) and then a kernel
    launched by a call [120, 125] and run [125, 225) WHEN the copy takes 50 us instead of 100 THEN
    the copy, ready when its call began (0; the previous end bounds it: 10), ends at 60; the host,
    which waited for it, returns 50 us earlier, so the launch call ends at 75 and the kernel runs
    [75, 175): 50 us saved. The same copy made asynchronously (a call [0, 2] the host did not wait
    on) saves nothing: the kernel is still launched at 125."""
    kernel = [(125, 225, 7)]
    launch = (120, 125, "cudaLaunchKernel", 1)

    def half_copy(o):
        d = o["dur_ns"].to_numpy(np.int64)
        return np.where(o["op"].astype(str).to_numpy() == "memcpy", d // 2, d)

    sync = _ctx(kernels=kernel, copies=[(10, 110, 7, "HtoD", 0)], calls=[(0, 112, "cudaMemcpy", 1000), launch])
    assert _saving(sync, half_copy) == 50 * US
    not_waited = _ctx(kernels=kernel, copies=[(10, 110, 7, "HtoD", 1)],
                      calls=[(0, 2, "cudaMemcpyAsync", 1000), launch])
    assert _saving(not_waited, half_copy) == 0


def test_faster_kernels_save_nothing_when_the_host_is_the_bottleneck():
    """GIVEN 5 kernels of 10 us, each launched by a call [30i, 30i + 5] and run [30i + 5, 30i + 15)
    (the GPU idle 20 us of every 30) WHEN the first four take 5 us THEN each ends earlier but the
    fifth, unchanged, still starts when it is launched (125) and ends at 135: nothing saved; WHEN
    all five do THEN only the last one's 5 us."""
    ctx = _ctx(kernels=[(30 * i + 5, 30 * i + 15, 7) for i in range(5)],
               calls=[(30 * i, 30 * i + 5, "cudaLaunchKernel", i + 1) for i in range(5)])

    def first_four(o):
        d = o["dur_ns"].to_numpy(np.int64)
        return np.where(o["start_ns"].to_numpy() < 120 * US, d // 2, d)

    assert _saving(ctx, first_four) == 0
    assert _saving(ctx, lambda o: o["dur_ns"].to_numpy(np.int64) // 2) == 5 * US
