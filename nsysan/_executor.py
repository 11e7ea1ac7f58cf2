"""Executors for the work nsysan spreads over threads (reading slices, analyses, rules).

``threads(n)`` is a ``ThreadPoolExecutor`` of ``n`` threads, or with ``n <= 1`` an ``Inline`` one
that runs each task as it is submitted: the callers submit and wait the same way either way.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any


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
    return ThreadPoolExecutor(max_workers=n, thread_name_prefix=name) if n > 1 else Inline()
