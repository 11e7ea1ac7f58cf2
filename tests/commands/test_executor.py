"""``_executor``: how many threads an analysis and the loader take, and the growing pool."""

from __future__ import annotations

import os

import pytest


def test_small_traces_analyse_on_one_thread(load, monkeypatch):
    from nsysan._executor import SMALL_EVENTS
    from nsysan.analysis import analyze, default_workers, event_rows
    from nsysan.report import jsonout

    monkeypatch.delenv("NSYSAN_THREADS", raising=False)
    trace = load("ladder_baseline")
    n = event_rows(trace)
    assert n == sum(len(getattr(trace, t)) for t in ("kernels", "memcpy", "memset", "cuda_api", "osrt", "nvtx"))
    assert 0 < n < SMALL_EVENTS and default_workers(n) == 1
    assert default_workers(SMALL_EVENTS) == min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    monkeypatch.setenv("NSYSAN_THREADS", "3")
    assert default_workers(n) == 3  # the user's choice wins
    assert jsonout.to_json(analyze(trace)) == jsonout.to_json(analyze(trace, workers=2))


def test_threads_follow_the_cpus_this_process_may_use(monkeypatch):
    """Two cores of a 16-core machine (taskset, a container's or a batch job's cpuset): the analysis,
    the loader's readers and ``--jobs`` count those 2, not the machine's 16; without an affinity
    mask (macOS), the machine's count."""
    from nsysan import _executor
    from nsysan._executor import SMALL_EVENTS
    from nsysan.analysis import default_workers
    from nsysan.options import positive_jobs

    monkeypatch.delenv("NSYSAN_THREADS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert _executor.cpus() == 2
    assert default_workers(SMALL_EVENTS) == 2
    assert positive_jobs(0, 100) == 2 and positive_jobs(8, 100) == 2
    monkeypatch.delattr(os, "sched_getaffinity")
    assert _executor.cpus() == 16 and default_workers(SMALL_EVENTS) == 4


def test_a_growing_pool_runs_every_task_and_takes_more_threads_when_told():
    """The prefetch's pool: one thread while the imports run, more once they are done (``grow``);
    every task runs once, in order on one thread, errors reach ``result``, ``shutdown`` waits."""
    import threading

    from nsysan._executor import Growing

    pool = Growing(1, "t-grow")
    gate, order = threading.Event(), []
    first = pool.submit(gate.wait, 10)
    later = [pool.submit(order.append, i) for i in range(5)]
    assert not any(f.done() for f in later)  # one thread, held by the first task
    gate.set()
    assert first.result(10) is True and [f.result(10) for f in later] == [None] * 5 and order == list(range(5))
    barrier = threading.Barrier(3, timeout=10)  # three tasks that finish only together: three threads
    pool.grow(3)
    pool.grow(2)  # never fewer
    assert sorted(f.result(10) for f in [pool.submit(barrier.wait) for _ in range(3)]) == [0, 1, 2]
    assert len({t.name for t in threading.enumerate() if t.name.startswith("t-grow_")}) == 3
    with pytest.raises(ZeroDivisionError):
        pool.submit(lambda: 1 // 0).result(10)
    slow = pool.submit(lambda: threading.Event().wait(0.2) or "done")
    pool.shutdown(wait=True)
    assert slow.done() and slow.result() == "done"
    assert not [t for t in threading.enumerate() if t.name.startswith("t-grow_")]
    with pytest.raises(RuntimeError):
        pool.submit(print)
