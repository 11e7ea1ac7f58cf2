"""Shared helpers for rules: steady-state slices."""

from __future__ import annotations

from typing import Any

import pandas as pd

from nsysan.analysis import in_window


def steady(df: pd.DataFrame, ctx: Any) -> pd.DataFrame:
    return in_window(df, ctx.window) if len(df) else df


def n_iterations(ctx: Any) -> int:
    st = ctx.a.iterations.stats
    return int(st.get("count", 0) or 0)
