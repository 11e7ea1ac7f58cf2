"""The optional C extension (``_btree``, built from ``_btree.c`` by ``_build.py`` at install time)
and the numpy twin of each of its passes, beside it. Every layer may import this package; it imports
nothing of nsysan.

* ``decode`` / ``leaves``: the direct b-tree reader (``nsysan.trace.direct``); its twin is SQLite itself.
* ``search_sorted``: ``search.search`` (numpy's ``searchsorted`` where not built).
* ``clipped_sums`` / ``window_best``: ``windows.range_sums`` / ``windows.window_best_numpy``.
* ``flatten``: ``analyses.thread_activity._flatten`` (and ``_flat_sums``).
* ``union_merged``: ``analyses.intervals.union``.
* ``lane`` / ``varints``: the report's timeline columns (twins in ``nsysan.report.timeline``).
* ``spill_handler`` / ``spill_set`` / ``spill_stats`` (Linux): numpy's big arrays in files for a trace
  larger than memory (``nsysan._spill``); no twin: without them such a trace is refused, as before.

The extension is never required: where it is not built (no C compiler at install time) or is a
stale build of older source, ``c_pass`` answers None and the numpy twin runs, giving the same result.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

try:
    from nsysan._native import _btree
except ImportError:  # built optionally (the build hook in nsysan/_native/_build.py)
    _btree = None  # type: ignore[assignment]

__all__ = ["VERSION", "Unsupported", "c_pass", "int_buffer", "loaded"]

VERSION = 9  # the extension's source version this Python code goes with (``_btree.VERSION``)

Unsupported: type[Exception] = _btree.Unsupported if _btree is not None else ValueError


def loaded() -> Any:
    """The extension module, or None where it is not built."""
    return _btree


def c_pass(name: str) -> Callable[..., Any] | None:
    """One of the extension's functions (``decode``, ``lane``, ``varints``, ``clipped_sums``,
    ``window_best``, ``search_sorted``, ``flatten``, ``union_merged``), or None where it is not
    built, or is a stale build of older source (an editable install not rebuilt after a pull: its
    passes may take or give other widths): the numpy paths then."""
    if _btree is None or getattr(_btree, "VERSION", 0) != VERSION:
        return None
    return getattr(_btree, name, None)


def int_buffer(values: Any) -> np.ndarray:
    """An integer column as the C passes take one: a C-contiguous int8, int16, int32 or int64 array
    as it is (a categorical's codes, int32 name ids: no int64 copy of millions of values), anything
    else as an int64 copy."""
    v = np.asarray(values)
    if v.dtype in (np.int8, np.int16, np.int32, np.int64) and v.flags.c_contiguous:
        return v
    return np.ascontiguousarray(v, dtype=np.int64)
