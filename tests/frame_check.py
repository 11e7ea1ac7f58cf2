"""Exact frame comparison at the speed of the columns' own arrays.

``pd.testing.assert_frame_equal`` compares a categorical column element by element in Python (about
5 us a row, when the values are not exact-checked) before it compares the categories and codes: 1.4 s
for one read of the hf_generate fixture, most of the direct reader's test. ``assert_same_frames``
checks the same things and more (every column exactly, floats included) with whole-array operations:
the column names and order, the index, each dtype, and the values:
- categorical columns, by default: the same categories in the same order and the same codes (equal
  values follow, NULLs included);
- ``categories="values"``: only the values each row shows (NULL where either is NULL), for two reads
  whose category lists may legitimately differ;
- every other column through ``assert_frame_equal(check_exact=True)``, which is array-fast for them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def _decoded(s: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """(the values as objects, where NULL) of a categorical column, without boxing row by row."""
    codes = s.cat.codes.to_numpy()
    null = codes < 0
    cats = np.asarray(s.cat.categories.astype(object))
    values = cats[np.where(null, 0, codes)] if len(cats) else np.full(len(codes), None, dtype=object)
    values[null] = None
    return values, null


def _same_categorical(x: pd.Series, y: pd.Series, where: str, categories: str) -> None:
    both = isinstance(x.dtype, pd.CategoricalDtype) and isinstance(y.dtype, pd.CategoricalDtype)
    if categories == "exact":
        assert both, f"{where}: dtype {x.dtype} != {y.dtype}"
        assert x.dtype.ordered == y.dtype.ordered, f"{where}: ordered differs"
        pd.testing.assert_index_equal(x.cat.categories, y.cat.categories, exact=True, obj=f"{where} categories")
        cx, cy = x.cat.codes.to_numpy(), y.cat.codes.to_numpy()
        if not np.array_equal(cx, cy):
            i = int(np.flatnonzero(cx != cy)[0])
            raise AssertionError(f"{where}: row {i} differs: {x.iloc[i]!r} != {y.iloc[i]!r}")
        return
    assert categories == "values", categories
    vx, nx = _decoded(x) if isinstance(x.dtype, pd.CategoricalDtype) else (x.to_numpy(object), x.isna().to_numpy())
    vy, ny = _decoded(y) if isinstance(y.dtype, pd.CategoricalDtype) else (y.to_numpy(object), y.isna().to_numpy())
    if not np.array_equal(nx, ny):
        i = int(np.flatnonzero(nx != ny)[0])
        raise AssertionError(f"{where}: row {i}: NULL on one side only ({x.iloc[i]!r}, {y.iloc[i]!r})")
    differ = (vx != vy) & ~nx
    if differ.any():
        i = int(np.flatnonzero(differ)[0])
        raise AssertionError(f"{where}: row {i} differs: {vx[i]!r} != {vy[i]!r}")


def assert_same_frames(x: pd.DataFrame, y: pd.DataFrame, obj: str = "DataFrame", *,
                       categories: str = "exact") -> None:
    """``x`` and ``y`` hold the same columns, index and values exactly (see the module's docstring)."""
    assert list(x.columns) == list(y.columns), f"{obj}: columns {list(x.columns)} != {list(y.columns)}"
    pd.testing.assert_index_equal(x.index, y.index, exact=True, obj=f"{obj}.index")
    cat = [c for c in x.columns
           if isinstance(x[c].dtype, pd.CategoricalDtype) or isinstance(y[c].dtype, pd.CategoricalDtype)]
    for c in cat:
        _same_categorical(x[c], y[c], f"{obj}[{c!r}]", categories)
    rest = [c for c in x.columns if c not in cat]
    pd.testing.assert_frame_equal(x[rest], y[rest], check_exact=True, obj=obj)
