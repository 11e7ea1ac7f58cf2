"""Frames and values as JSON-ready Python (integer nanoseconds, floats rounded, NaN as None): what
every JSON output (``jsonout``, the GPU-metrics block, the ranks panel) is made of."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from nsysan.analyses.frames import column_arrays


class Cleaned(list):  # type: ignore[type-arg]
    """Records already cleaned column by column (``records``): ``clean`` passes them through."""


def clean(v: Any, key: str = "") -> Any:
    t = type(v)
    if t is str or t is int or t is Cleaned:  # already JSON-ready: most leaves of nested records
        return v
    if t is float and not (key.endswith("_ns") or key in ("bytes", "total_bytes")):
        return round(v, 6) if math.isfinite(v) else None
    if isinstance(v, dict):
        return {str(k): clean(x, str(k)) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [clean(x, key) for x in v]
    if v is None or v is pd.NA:
        return None
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.bool_, bool)):
        return bool(v)
    if isinstance(v, (np.floating, float)):
        f = float(v)
        if math.isnan(f) or math.isinf(f):
            return None
        if key.endswith("_ns") or key in ("bytes", "total_bytes"):
            return int(round(f))
        return round(f, 6)
    if isinstance(v, np.ndarray):
        return [clean(x, key) for x in v.tolist()]
    return v


def column(key: str, a: Any) -> list[Any]:
    """One column (``column_arrays``) as JSON-ready Python values, exactly as ``clean`` turns each cell
    (numpy ints and bools to Python, NaN to None, floats rounded), but without a type check per cell."""
    dt = a.dtype
    if isinstance(a, np.ndarray) and dt.kind in "iub":
        return a.tolist()
    if isinstance(a, np.ndarray) and dt.kind == "f":
        as_int = key.endswith("_ns") or key in ("bytes", "total_bytes")
        return [None if math.isnan(f) or math.isinf(f) else (int(round(f)) if as_int else round(f, 6))
                for f in a.tolist()]
    return [clean(v, key) for v in a.tolist()]


def records(df: pd.DataFrame, limit: int | None = None) -> list[dict[str, Any]]:
    """Rows as JSON-ready dicts (cleaned column by column: a 5,000-iteration table is 60,000 cells)."""
    if df is None or len(df) == 0:
        return []
    keys = [str(c) for c in df.columns]
    cols = [column(k, a) for k, a in zip(keys, column_arrays(df, limit))]
    return Cleaned(dict(zip(keys, row)) for row in zip(*cols))
