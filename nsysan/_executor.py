"""Executors for the work nsysan spreads over threads (reading slices, analyses, rules).

``threads(n)`` is a ``ThreadPoolExecutor`` of ``n`` threads, or with ``n <= 1`` an ``Inline`` one
that runs each task as it is submitted: the callers submit and wait the same way either way.
"""

from __future__ import annotations

import atexit
import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from nsysan import _spill


class Inline:
    """An executor that runs each task when it is submitted (no threads at all)."""

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future[Any]:
        f: Future[Any] = Future()
        try:
            f.set_result(fn(*args, **kwargs))
        except BaseException as e:  # noqa: BLE001 - re-raised by .result(), as a pool would
            f.set_exception(e)
        return f

    def __enter__(self) -> Inline:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def cpus() -> int:
    """The CPUs this process may run on: its affinity mask where the OS keeps one (``taskset``, a
    container's or a batch job's cpuset: 2 cores of a 16-core node), else the machine's count.
    Threads beyond it only queue for the same cores, each with its own temporaries: on 2 cores of
    a 16-core GPU host, 4 analysis threads took the 245 MB replica to 481-489 MiB."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity mask (macOS, Windows)
        return max(1, os.cpu_count() or 1)


def threads(n: int, name: str = "nsysan") -> Any:
    """A context-managed executor: ``n`` threads, or ``Inline`` for one."""
    return pool(n, name) if n > 1 else Inline()


def pool(n: int, name: str = "nsysan") -> ThreadPoolExecutor:
    """A ``ThreadPoolExecutor`` of ``n`` threads, each given the process's memory handler as it
    starts (``_spill.enter_thread``: a trace larger than memory keeps its arrays in files)."""
    return ThreadPoolExecutor(max_workers=n, thread_name_prefix=name, initializer=_spill.enter_thread)


class Growing:
    """A thread pool whose number of threads can be raised while it works (``grow``): the prefetch
    decodes on one thread while the main thread imports pandas, and on every CPU once it is done.
    Tasks run in the order submitted; ``shutdown`` waits for them all, and runs at the interpreter's
    exit for a pool nobody shut down (its threads are daemons, so an idle one never holds the exit
    up, but a task still writing into arrays is waited for before they are freed)."""

    def __init__(self, n: int, name: str = "nsysan") -> None:
        self._queue: queue.SimpleQueue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]] | None] \
            = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._name = name
        self._lock = threading.Lock()
        self._closed = False
        atexit.register(self.shutdown)
        self.grow(n)

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            f, fn, args, kwargs = item
            if not f.set_running_or_notify_cancel():
                continue
            _spill.enter_thread()  # the process's memory handler (one per thread; the spill may start later)
            try:
                f.set_result(fn(*args, **kwargs))
            except BaseException as e:  # noqa: BLE001 - re-raised by .result()
                f.set_exception(e)
            del f, fn, args, kwargs, item  # a finished task's arguments (decoded columns) are not kept

    def grow(self, n: int) -> None:
        """At least ``n`` threads from now on (never fewer than there are)."""
        with self._lock:
            while not self._closed and len(self._threads) < n:
                t = threading.Thread(target=self._work, name=f"{self._name}_{len(self._threads)}", daemon=True)
                t.start()
                self._threads.append(t)

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future[Any]:
        f: Future[Any] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("submit after shutdown")
            self._queue.put((f, fn, args, kwargs))
        return f

    def shutdown(self, wait: bool = True) -> None:
        atexit.unregister(self.shutdown)
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for _ in self._threads:
                self._queue.put(None)
        if wait:
            for t in self._threads:
                t.join()


# Below this many event rows the analyses run on one thread: their work is then pandas' per-call
# overhead, which holds the GIL, and a second thread only adds switching (ladder_baseline, 36k rows,
# on 2 cores: analyses 0.10 s on one thread, 0.12-0.14 s on two; the whole command 20 ms slower).
SMALL_EVENTS = 250_000


def default_workers(events: int | None = None) -> int:
    """Analysis threads: ``NSYSAN_THREADS`` if set, else 1 for a trace of fewer than ``SMALL_EVENTS``
    event rows (``events``), else the CPUs this process may run on (``_executor.cpus``: its affinity
    mask), at most 4."""
    env = os.environ.get("NSYSAN_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    if events is not None and events < SMALL_EVENTS:
        return 1
    return min(4, cpus())


def event_rows(trace: Any) -> int:
    """The trace's event rows (kernels, copies, memsets, CUDA and OS runtime calls, NVTX)."""
    return sum(len(getattr(trace, name, ())) for name in ("kernels", "memcpy", "memset", "cuda_api", "osrt", "nvtx"))


def worker_start(threads: str) -> None:
    """A worker process' initializer (``processes``): its analysis threads (``NSYSAN_THREADS``),
    SIGTERM and SIGHUP back to their default action (the parent stops its workers with SIGTERM), and
    on Linux SIGTERM when the parent dies (even of SIGKILL): no worker outlives its command."""
    import signal

    from nsysan._atomic import default_signals

    os.environ["NSYSAN_THREADS"] = threads
    default_signals()
    parent = os.getppid()
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux
        pass
    if os.getppid() != parent:  # the parent died before the line above
        os._exit(128 + int(signal.SIGTERM))


def processes(workers: int, threads: str) -> Any:
    """A ``ProcessPoolExecutor`` of ``workers`` processes started by ``worker_start``."""
    from concurrent.futures import ProcessPoolExecutor

    return ProcessPoolExecutor(max_workers=workers, initializer=worker_start, initargs=(threads,))


def stop_pool(pool: Any, wait: float = 5.0) -> None:
    """Stop ``pool``'s worker processes now (an interruption, or an error that ends the run): queued
    tasks cancelled, SIGTERM to each worker (it removes its temp files and dies), SIGKILL to one still
    there after ``wait`` seconds; each reaped."""
    import time

    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        try:
            p.terminate()
        except (OSError, ValueError, AttributeError):
            pass
    deadline = time.monotonic() + wait
    for p in procs:
        try:
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join(3.0)
        except (OSError, ValueError, AssertionError, AttributeError):
            pass
