"""A table as read from an export, before it becomes a frame: named columns of numpy values and
validity, without pyarrow.

The direct b-tree reader decodes into numpy arrays and small tables come through ``sqlite3`` as
Python values; neither needs Arrow, and importing pyarrow (its libraries, and the ``pyarrow.compute``
registry pandas builds when it finds it) cost 0.11 s of a small trace's 0.95 s and 38 MiB of resident
memory on the 2-core machine. So the loader's interchange is this module's ``Columns``; pyarrow is
imported only where Arrow is really read: ADBC's bulk reads of big tables the direct reader declines
(``from_arrow`` converts them at that boundary).

A column's ``kind`` is the type ``pyarrow.array`` would have inferred from the same values, so the
frames are what they were when Arrow typed them: ``int`` (int64, or int32 as the direct reader
narrowed it), ``float`` (float64), ``str`` and ``bytes`` (object arrays), ``null`` (no value at
all). ``mask`` marks NULLs (None: none); a masked value is meaningless.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

_NONE = type(None)
_I64 = (-(1 << 63), (1 << 63) - 1)


class Col:
    """One column: ``kind``, ``values`` (numpy) and ``mask`` (True: NULL; None when there is none)."""

    __slots__ = ("kind", "mask", "values")

    def __init__(self, kind: str, values: np.ndarray, mask: np.ndarray | None = None) -> None:
        self.kind = kind
        self.values = values
        self.mask = mask if mask is not None and mask.any() else None

    def __len__(self) -> int:
        return len(self.values)

    @property
    def null_count(self) -> int:
        if self.kind == "null":
            return len(self.values)
        return 0 if self.mask is None else int(self.mask.sum())

    def to_list(self) -> list[Any]:
        """Python values, None for NULL (``pyarrow.Array.to_pylist``)."""
        if self.kind == "null":
            return [None] * len(self.values)
        out = self.values.tolist()
        if self.mask is not None:
            for i in np.flatnonzero(self.mask).tolist():
                out[i] = None
        return out

    def filled(self, fill: Any, dtype: Any = None) -> np.ndarray:
        """The values with each NULL replaced by ``fill`` (a copy only when there are NULLs)."""
        v = self.values if dtype is None else self.values.astype(dtype, copy=False)
        if self.mask is None:
            return v
        v = v.copy() if v is self.values else v
        v[self.mask] = fill
        return v


class Columns:
    """Named columns of one length (``pyarrow.Table``'s part that the loader used)."""

    __slots__ = ("cols", "num_rows")

    def __init__(self, cols: dict[str, Col], num_rows: int) -> None:
        self.cols = cols
        self.num_rows = num_rows

    @property
    def column_names(self) -> list[str]:
        return list(self.cols)

    def column(self, key: str | int) -> Col:
        return self.cols[key] if isinstance(key, str) else list(self.cols.values())[key]


def nulls(n: int) -> Col:
    return Col("null", np.zeros(n, dtype=np.int64))


def typed_empty(kind: str) -> Col:
    return Col(kind, np.zeros(0, dtype={"int": np.int64, "float": np.float64}.get(kind, object)))


def from_values(values: Sequence[Any]) -> Col | None:
    """The column ``pyarrow.array(values)`` would make, or None where it would refuse them (a column
    of mixed types, an integer beyond int64): the caller then reads the query another way."""
    n = len(values)
    types = set(map(type, values))
    has_null = _NONE in types
    types.discard(_NONE)
    mask = np.fromiter((v is None for v in values), dtype=bool, count=n) if has_null and types else None
    if not types:
        return nulls(n)
    if types <= {int}:
        try:
            arr = np.fromiter((0 if v is None else v for v in values), dtype=np.int64, count=n)
        except OverflowError:
            return None
        return Col("int", arr, mask)
    if types <= {int, float}:
        if any(type(v) is int and not _I64[0] <= v <= _I64[1] for v in values):
            return None
        return Col("float", np.fromiter((0.0 if v is None else v for v in values), dtype=np.float64, count=n), mask)
    if types == {str}:
        return Col("str", _objects(values), mask)
    if types == {bytes}:
        return Col("bytes", _objects(values), mask)
    if types == {str, bytes}:  # as Arrow types them: binary, the strings as their UTF-8 bytes
        return Col("bytes", _objects([v.encode("utf-8", "surrogatepass") if isinstance(v, str) else v for v in values]),
                   mask)
    return None


def _objects(values: Sequence[Any]) -> np.ndarray:
    arr = np.empty(len(values), dtype=object)
    arr[:] = list(values)
    return arr


def as_strings(values: Sequence[Any]) -> Col:
    """Any values as strings (``str(v)``), NULLs kept: what a column of mixed types is read as."""
    return Col("str", _objects([None if v is None else str(v) for v in values]),
               np.fromiter((v is None for v in values), dtype=bool, count=len(values)))


def from_rows(names: Sequence[str], rows: Sequence[tuple[Any, ...]]) -> tuple[Columns, list[int]]:
    """Columns from ``sqlite3`` rows, and the positions of the columns no one type holds (read as
    strings here; the caller may read the query again through ADBC instead)."""
    cols = list(zip(*rows)) if rows else [() for _ in names]
    out: dict[str, Col] = {}
    mixed = []
    for i, (name, col) in enumerate(zip(names, cols)):
        c = from_values(col)
        if c is None:
            mixed.append(i)
            c = as_strings(col)
        out[name] = c
    return Columns(out, len(rows)), mixed


def from_arrow(table: Any) -> Columns:
    """An Arrow table (ADBC's reads) as ``Columns``: integers, floats, strings, bytes or NULLs."""
    import pyarrow as pa

    out: dict[str, Col] = {}
    for name in table.column_names:
        arr = table.column(name)
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        t = arr.type
        mask = arr.is_null().to_numpy(zero_copy_only=False) if arr.null_count else None
        if pa.types.is_null(t):
            out[name] = nulls(len(arr))
        elif pa.types.is_integer(t):
            ints = arr.fill_null(0) if arr.null_count else arr
            v = ints.to_numpy(zero_copy_only=False)
            out[name] = Col("int", v if v.dtype in (np.int64, np.int32) else v.astype(np.int64), mask)
        elif pa.types.is_floating(t):
            out[name] = Col("float", arr.cast(pa.float64()).to_numpy(zero_copy_only=False), mask)
        elif pa.types.is_binary(t) or pa.types.is_large_binary(t):
            out[name] = Col("bytes", _objects(arr.to_pylist()), mask)
        else:  # strings (and anything else, as its text)
            vals = arr.to_pylist()
            out[name] = Col("str", _objects(vals if pa.types.is_string(t) or pa.types.is_large_string(t)
                                            else [None if v is None else str(v) for v in vals]), mask)
    return Columns(out, table.num_rows)


def _numeric(values: list[Any]) -> Col:
    """Text read as numbers (``pd.to_numeric``, coerced): what is not a number becomes NULL."""
    num = np.asarray(pd.to_numeric(pd.Series(values, dtype=object), errors="coerce"))
    if num.dtype.kind == "f":
        return Col("float", num.astype(np.float64, copy=False), np.isnan(num))
    if num.dtype.kind in "iub":
        return Col("int", num.astype(np.int64))
    return Col("float", num.astype(np.float64))


def str_objects(values: Iterable[object]) -> np.ndarray:
    """``str(v)`` of each value, as an object array. Never ``np.asarray(...).astype(str)``: numpy's
    string dtype is fixed-width, so one 8 kB NVTX text among 300,000 short ones made it 10 GB."""
    return _objects([str(v) for v in (values.tolist() if isinstance(values, np.ndarray) else values)])


def unique_strings(values: Iterable[object]) -> tuple[np.ndarray, np.ndarray]:
    """The sorted distinct ``str(v)`` of the values (an object array) and each value's position in
    them: ``np.unique(np.asarray(values).astype(str), return_inverse=True)`` without the fixed-width
    copy at the length of the longest (``str_objects``)."""
    strs = str_objects(values)
    codes, uniq = pd.factorize(strs)  # (pandas: imported by every caller already)
    order = sorted(range(len(uniq)), key=list(uniq).__getitem__)  # code point order, as numpy's
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return _objects([uniq[i] for i in order]), rank[codes]
