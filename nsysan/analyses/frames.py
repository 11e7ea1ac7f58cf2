"""Small helpers for big frames: predicates on categorical columns evaluated once per category."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from nsysan.trace.model import CONSTANT_MIN_ROWS, constant_column, is_constant_column, take_columns

try:  # pandas' own boxing of a cell as to_dict does it (private: a pandas without it takes the fallback)
    from pandas.core.dtypes.cast import maybe_box_native
except ImportError:  # pragma: no cover - every pandas >= 2.2 so far has it
    def maybe_box_native(value: object) -> object:
        return value.item() if isinstance(value, np.generic) else value


def _values_by_series(df: pd.DataFrame, i: int) -> object:
    """Column ``i``'s values through the public API (a Series): the fallback of ``column_arrays``."""
    a = df.iloc[:, i].array  # numpy-backed columns come wrapped: unwrapped as the manager holds them
    return a.to_numpy() if isinstance(a, pd.arrays.NumpyExtensionArray) else a


def column_arrays(df: pd.DataFrame, limit: int | None = None) -> list[Any]:
    """Each column's values by position (what ``df.iloc[:, i]`` holds: a numpy array, or an extension
    array such as a Categorical), the first ``limit`` rows: a fraction of a microsecond a column
    instead of a Series each (on small frames pandas' per-call cost is the run's). It reads pandas'
    block manager (``_mgr.iget_values``, private); a pandas without it gets the Series path."""
    get = getattr(getattr(df, "_mgr", None), "iget_values", None)
    cols: list[Any] = [get(i) for i in range(df.shape[1])] if get is not None else \
        [_values_by_series(df, i) for i in range(df.shape[1])]
    return cols if limit is None else [c[:limit] for c in cols]


def cells(df: pd.DataFrame, limit: int | None = None) -> dict[object, list[object]]:
    """The first ``limit`` rows, column by column, each value as ``df.head(limit).to_dict("records")``
    gives it (numpy columns' cells as Python scalars; object and extension columns' cells through
    pandas' ``maybe_box_native``), without a Series per column and a tuple per row. Of columns with
    the same name the last is kept, as in a record."""
    out: dict[object, list[object]] = {}
    for c, a in zip(df.columns, column_arrays(df, limit)):
        if isinstance(a, np.ndarray) and a.dtype != object:
            out[c] = a.tolist()  # what iterating the column gives (ndarray.item per cell)
        else:
            out[c] = [maybe_box_native(v) for v in (a.tolist() if isinstance(a, np.ndarray) else a)]
    return out


def to_records(df: pd.DataFrame, limit: int | None = None) -> list[dict[object, object]]:
    """``df.head(limit).to_dict("records")``, the same keys and values (``cells``)."""
    cols = cells(df, limit)
    return [dict(zip(cols, row)) for row in zip(*cols.values())] if cols else [{} for _ in range(
        len(df) if limit is None else min(len(df), limit))]


def category_mask(values: pd.Series, pred: Callable[[str], bool]) -> np.ndarray:
    """Boolean mask of rows whose value satisfies ``pred(str(value))``, decided once per distinct
    value, not once per row (a 2.4M-row API table has a few dozen names; 1.2M NVTX ranges of 50 names
    took 1.2 s of per-row string calls): a categorical's categories, or any other column's distinct
    values. A missing value is False in a categorical; elsewhere ``pred`` sees ``str`` of it, per row."""
    arr = values.array if isinstance(values, pd.Series) else values
    if isinstance(arr, pd.Categorical):
        # one entry per category plus a last False one, which a missing value's code (-1) picks
        lut = np.zeros(len(arr.categories) + 1, dtype=bool)
        lut[:-1] = np.fromiter((bool(pred(str(c))) for c in arr.categories), dtype=bool, count=len(arr.categories))
        codes = np.asarray(arr.codes)
        if not lut.any():  # no name matches (the usual answer for a rule's API list): no pass over the rows
            return np.zeros(len(codes), dtype=bool)
        return lut[codes]
    codes, uniq = pd.factorize(arr)  # missing values: code -1
    out = np.append(np.fromiter((bool(pred(str(v))) for v in uniq), dtype=bool, count=len(uniq)), False)[codes]
    missing = np.flatnonzero(codes < 0)
    if len(missing):
        obj = np.asarray(arr, dtype=object)
        out[missing] = [bool(pred(str(v))) for v in obj[missing]]
    return out


def name_in(values: pd.Series, names: Iterable[str]) -> np.ndarray:
    """Rows whose value is one of ``names`` (exact match)."""
    wanted = frozenset(names)
    return category_mask(values, lambda s: s in wanted)


DENSE_RANGE = 1 << 16  # distinct() counts integers whose range is at most this
DISTINCT_CHUNK = 1 << 18  # ... this many rows at a time
FEW_GROUPS = 16  # up to this many key combinations, group_rows uses masks instead of a sort


def group_rows(*keys: np.ndarray) -> list[tuple[tuple[int, ...], np.ndarray]]:
    """Row positions per distinct combination of integer key arrays, keys ascending, rows in their
    original order: one mask per combination when there are a few, else one stable sort; no
    sub-DataFrames (pandas' groupby iterator builds one frame per group, 0.4 s on 2.4M rows)."""
    if len(keys) == 0 or len(keys[0]) == 0:
        return []
    # int32 keys (the loader's narrow ids) as they are: no int64 copy of a million-row column
    ks = [a if (a := np.asarray(k)).dtype.kind == "i" and a.dtype.itemsize >= 4 else a.astype(np.int64)
          for k in keys]
    uniq = [distinct(k) for k in ks]  # a comparison pass, or a hash of the values: no sort
    n_combos = math.prod(len(u) for u in uniq)
    if n_combos == 1:  # one group (one process, one device): no sort
        return [(tuple(int(u[0]) for u in uniq), np.arange(len(ks[0])))]
    if n_combos <= FEW_GROUPS:  # a few streams or threads: one mask per combination beats a sort
        combos = list(itertools.product(*(u.tolist() for u in uniq)))
        eq = [{v: k == v for v in u.tolist()} for k, u in zip(ks, uniq)]
        out = []
        for combo in combos:
            mask = eq[0][combo[0]]
            for e, v in zip(eq[1:], combo[1:]):
                mask = mask & e[v]
            rows = np.flatnonzero(mask)
            if len(rows):
                out.append((combo, rows))
        return out
    order = np.lexsort(ks[::-1])
    sorted_keys = [k[order] for k in ks]
    change = np.zeros(len(order) - 1, dtype=bool)
    for k in sorted_keys:
        change |= k[1:] != k[:-1]
    cut = np.flatnonzero(change) + 1
    first = np.concatenate([[0], cut])
    return [(tuple(int(k[i]) for k in sorted_keys), rows) for i, rows in zip(first, np.split(order, cut))]


def lexsorted(keys: tuple[np.ndarray, ...]) -> bool:
    """Whether rows are already in ``np.lexsort(keys)`` order (last key primary)."""
    n = len(keys[0])
    if n < 2:
        return True
    ok = np.ones(n - 1, dtype=bool)  # rows i, i+1 in order given the keys checked so far
    tied = np.ones(n - 1, dtype=bool)  # ... and equal on them
    for k in keys[::-1]:
        a, b = k[:-1], k[1:]
        ok &= ~tied | (a <= b)
        tied &= a == b
    return bool(ok.all())


def sort_rows(df: pd.DataFrame, keys: tuple[np.ndarray, ...]) -> pd.DataFrame:
    """``df`` in ``np.lexsort(keys)`` order (last key primary; a stable sort), with a fresh index; no
    sort or copy of the rows when they are in that order already (the usual case for traces)."""
    if lexsorted(keys):
        return df.reset_index(drop=True)
    return take_columns([df], np.lexsort(keys))  # a broadcast column (``compact``) stays one


def one_key(*keys: np.ndarray) -> tuple[int, ...] | None:
    """The one value of each key array when every row has the same values (one process, one thread:
    the common case), else None (no rows, or several combinations): a comparison pass, no positions
    (``group_rows`` gives one array of every row's position for a single group)."""
    if len(keys) == 0 or len(keys[0]) == 0:
        return None
    for k in keys:
        v = np.asarray(k)
        if not (is_constant_column(v) or bool((v == v[0]).all())):
            return None
    return tuple(int(np.asarray(k)[0]) for k in keys)


def distinct(values: np.ndarray) -> np.ndarray:
    """Sorted distinct values, as ``np.unique``, without a sort or hash of millions: one comparison
    pass when they are all equal (one process, one device, one thread: the common case), a count
    when they are integers in a small range."""
    v = np.asarray(values)
    if len(v) == 0:
        return np.unique(v)
    if bool((v == v[0]).all()):
        return v[:1].copy()
    if v.dtype.kind in "iu":
        lo, hi = int(v.min()), int(v.max())
        if hi - lo <= DENSE_RANGE:  # small ids (streams, devices, threads of one process): a count,
            # a chunk of rows at a time (no int64 copy of a million-row column)
            seen = np.zeros(hi - lo + 1, dtype=bool)
            for a in range(0, len(v), DISTINCT_CHUNK):
                seen |= np.bincount((v[a:a + DISTINCT_CHUNK] - lo).astype(np.intp, copy=False), minlength=len(seen)) > 0
            return (np.flatnonzero(seen) + lo).astype(v.dtype)
    return np.unique(v)


def text_codes(values: pd.Series) -> tuple[np.ndarray, list[str]]:
    """Each row's code into ``texts``, the distinct values as text in sorted order (a missing value is
    ``nan``, as ``astype(str)`` writes it; values alike in text share a code): text is made once per
    distinct value (a categorical's codes are read as they are), never per row."""
    if isinstance(values.dtype, pd.CategoricalDtype):  # its own codes: no int64 code of every row
        cat = values.array
        codes = np.asarray(cat.codes)
        uniq = list(cat.categories)
        if len(codes) and int(codes.min()) < 0:  # missing: one more value, after the categories
            codes = np.where(codes < 0, len(uniq), codes.astype(np.int32))
            uniq.append(np.nan)
        used = np.bincount(codes, minlength=len(uniq)) > 0 if len(codes) else np.zeros(len(uniq), bool)
        if not bool(used.all()):  # only the values that occur
            renum = np.cumsum(used) - 1
            codes = renum.astype(codes.dtype)[codes]
            uniq = [u for u, k in zip(uniq, used) if k]
    else:
        codes, uniq = pd.factorize(values, use_na_sentinel=False)
    text = np.array([str(u) for u in uniq], dtype=object)
    if not len(text):
        return np.zeros(len(codes), np.int64), []
    texts, key = np.unique(text, return_inverse=True)
    return key.astype(np.int32 if len(texts) < 1 << 31 else np.int64)[codes], [str(t) for t in texts]


def rows_of(values: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``values[rows]`` for distinct ascending ``rows`` (as ``group_rows`` gives them); the array
    itself, not a copy, when the rows are all of them (one process, one device: the common case),
    and a view of it when they are one run of consecutive rows (all but a stray op of another
    stream). Read-only use: the result may share the column's memory."""
    if len(rows) == len(values):
        return values
    if len(rows) > 1024 and int(rows[-1]) - int(rows[0]) + 1 == len(rows):
        return values[int(rows[0]):int(rows[-1]) + 1]
    return values[rows]


def take(values: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``values[idx]`` for integer positions ``idx``; for a column of one value throughout (the loader's read-only broadcast,
    ``model.constant_column``) that value broadcast to ``len(idx)`` rows, not an array of copies."""
    if is_constant_column(values):
        return constant_column(values[0], len(idx), values.dtype)
    return values[idx]


def compact(values: np.ndarray) -> np.ndarray:
    """A new column of an analysis as the loader keeps its columns: when it has at least
    ``CONSTANT_MIN_ROWS`` rows of one value (one launching thread, kernels only, no graph launch),
    that value broadcast (``model.constant_column``: no memory, read-only), else ``values``. Put it in
    a frame with ``model.as_column`` (``DataFrame.assign`` would copy it into a full array)."""
    if len(values) >= CONSTANT_MIN_ROWS and not is_constant_column(values) and bool((values == values[0]).all()):
        return constant_column(values[0], len(values), values.dtype)
    return values


def filled(value: int, n: int, dtype: npt.DTypeLike) -> np.ndarray:
    """``np.full(n, value, dtype)`` as ``compact`` would keep it: broadcast from ``CONSTANT_MIN_ROWS``
    rows on (a column known to hold one value, without an array made to be compared)."""
    return constant_column(value, n, dtype) if n >= CONSTANT_MIN_ROWS else np.full(n, value, dtype=dtype)


def compact_codes(cat: pd.Categorical) -> pd.Categorical:
    """``cat`` with its codes ``compact``: one category throughout costs no memory."""
    codes = np.asarray(cat.codes)
    small = compact(codes)
    return cat if small is codes else pd.Categorical.from_codes(small, dtype=cat.dtype, validate=False)


def top_rows(values: np.ndarray, rows: np.ndarray, n: int) -> np.ndarray:
    """The ``n`` of ``rows`` with the largest ``values``, largest first, ties in row order (as a
    stable sort of all of them, or ``nlargest(keep="first")``), without sorting them all."""
    v = values[rows]
    if len(v) > n > 0:
        v.partition(len(v) - n)  # in place (v is a copy): the n-th largest value, no second copy
        cut = v[len(v) - n]
        del v
        rows = rows[values[rows] >= cut]
        v = values[rows]
    return rows[np.argsort(-v, kind="stable")[:n]]


def count_sum(keys: pd.Series, values: pd.Series, skip: str | None = None,
              rows: np.ndarray | None = None) -> pd.DataFrame:
    """``count`` and ``sum`` of integer ``values`` per key, as pandas' ``groupby(keys, sort=True)
    [values].agg(["count", "sum"])`` (observed keys only, missing keys dropped), over ``rows``
    (distinct ascending positions; default all), rows whose key is ``skip`` left out. For a categorical key, from its codes: one
    pass, no sub-frames."""
    if rows is not None and len(rows) == len(keys):
        rows = None  # every row (distinct positions): the columns as they are
    arr = keys.array
    if not isinstance(arr, pd.Categorical):
        if rows is not None:
            keys, values = keys.iloc[rows], values.iloc[rows]
        keep = (keys != skip).to_numpy() if skip is not None else slice(None)
        frame = pd.DataFrame({"key": keys.to_numpy()[keep], "v": values.to_numpy()[keep]})
        out = frame.groupby("key", sort=True)["v"].agg(["count", "sum"])
        out.index.name = keys.name
        return out
    # the codes in their own width and the values as they are (views of a run of rows): no copies
    # of a million-gap column unless rows are picked or keys are missing
    codes, v = np.asarray(arr.codes), values.to_numpy()
    if rows is not None:
        codes, v = rows_of(codes, rows), rows_of(v, rows)
    n = len(arr.categories)
    known = codes >= 0
    if skip is not None and skip in arr.categories:
        known &= codes != arr.categories.get_loc(skip)
    if not bool(known.all()):
        codes, v = codes[known], v[known]
    counts = np.bincount(codes, minlength=n)
    sums = np.bincount(codes, weights=v, minlength=n).astype(np.int64)  # exact below 2^53
    seen = np.flatnonzero(counts)
    return pd.DataFrame({"count": counts[seen], "sum": sums[seen]},
                        index=pd.CategoricalIndex(arr.categories[seen], categories=arr.categories, name=keys.name))


def per_key(keys: list[object], values: dict[str, tuple[np.ndarray, str]],
            at: list[list[object]]) -> dict[str, np.ndarray] | None:
    """Exact int64 aggregates of ``values`` (name -> (array, "sum" or "max")) per distinct key (the
    tuple of ``keys``' values on a row), for each key in ``at`` (one list per key column, rows aligned):
    one stable sort of combined integer codes and ``reduceat``s, no group-by and no merge (on a small
    trace those pandas calls cost more than the data). None, for the caller's pandas path, when a key
    is missing or not a string, a value is not int64, or ``at`` is not exactly the distinct keys."""
    vals = {k: (np.asarray(v), how) for k, (v, how) in values.items()}
    if len(keys) == 0 or len(keys[0]) == 0 or any(v.dtype != np.int64 for v, _ in vals.values()):  # type: ignore[arg-type]
        return None
    group = np.zeros(len(keys[0]), dtype=np.int64)  # type: ignore[arg-type]
    index: list[dict[object, int]] = []
    for key in keys:
        codes, uniq = pd.factorize(np.asarray(key, dtype=object))
        uniq = uniq.tolist()
        if (codes < 0).any() or not all(type(x) is str for x in uniq):
            return None
        group = group * len(uniq) + codes
        index.append({x: i for i, x in enumerate(uniq)})
    order = np.argsort(group, kind="stable")
    gs = group[order]
    start = np.flatnonzero(np.concatenate([[True], gs[1:] != gs[:-1]]))
    pos = {c: i for i, c in enumerate(gs[start].tolist())}
    try:
        rows = []
        for ks in zip(*at):
            code = 0
            for x, ix in zip(ks, index):
                code = code * len(ix) + ix[x]
            rows.append(pos[code])
    except (KeyError, TypeError):  # a key ``at`` spells differently (not expected)
        return None
    row = np.array(rows, dtype=np.int64)
    if len(row) != len(start):
        return None
    reduce = {"sum": np.add.reduceat, "max": np.maximum.reduceat}
    return {k: reduce[how](v[order], start)[row] for k, (v, how) in vals.items()}

