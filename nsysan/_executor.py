"""Executors for the work nsysan spreads over threads (reading slices, analyses, rules).

``threads(n)`` is a ``ThreadPoolExecutor`` of ``n`` threads, or with ``n <= 1`` an ``Inline`` one
that runs each task as it is submitted: the callers submit and wait the same way either way.
"""

from __future__ import annotations

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


def threads(n: int, name: str = "nsysan") -> Any:
    """A context-managed executor: ``n`` threads, or ``Inline`` for one."""
    return ThreadPoolExecutor(max_workers=n, thread_name_prefix=name) if n > 1 else Inline()
