"""The tables (rows, decoded columns) the loader hands the memory estimate (``nsysan.trace.budget``)
for a trace: what the tests of the refusal and of the spill set their memory figures from."""

from __future__ import annotations

from pathlib import Path

import nsysan
from nsysan.trace import budget


def planned(path: Path) -> dict[str, tuple[int, int]]:
    """The tables ``open_trace(path)`` gives ``budget.check`` (it loads the trace once)."""
    seen: dict[str, tuple[int, int]] = {}
    real = budget.check
    budget.check = lambda label, tables, **k: seen.update(tables) or real(label, tables, **k)  # type: ignore[assignment]
    try:
        nsysan.open_trace(path)
    finally:
        budget.check = real  # type: ignore[assignment]
    return seen


def spill_limit(path: Path) -> int:
    """A memory figure (bytes) between the estimate with the arrays in files and the estimate in
    memory (``budget``): a trace that spills under ``auto``."""
    est = budget.estimate(planned(path))
    low, high = est.spilled_peak(), est.peak()
    assert low < high
    return (low + high) // 2
