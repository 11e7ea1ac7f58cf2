"""A table's read ``Columns`` as a typed frame: each column in its spec's type (names resolved
through ``Strings``, times without a value marked ``MISSING``), slices joined, nsys' global ids
decoded into pid and tid, integer columns narrowed."""

from __future__ import annotations

import numpy as np
import pandas as pd

from nsysan.trace import schema as S
from nsysan.trace.columns import Col, Columns, _numeric, nulls, typed_empty
from nsysan.trace.model import CONSTANT_MIN_ROWS, as_column, constant_column
from nsysan.trace.strings import Strings, cap_strings, prune_categories

MISSING = np.iinfo(np.int64).min


def _empty(spec: S.TableSpec, all_columns: bool) -> Columns:
    kinds = {"int64": "int", "Int64": "int", "float64": "float", "str": "str", "name": "int"}
    return Columns({c.name: typed_empty(kinds[c.dtype]) for c in S.columns(spec, all_columns)}, 0)


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Slices of one table read in parallel, joined column by column (each slice's memory is released
    as soon as its columns are copied); categorical name columns share one category index."""
    if len(frames) == 1:
        df = frames.pop()  # the list lets go: a column replaced later (narrowed, sorted) is then freed
        cats = [c for c, dt in df.dtypes.items() if isinstance(dt, pd.CategoricalDtype)]  # one Series each else
        return df.assign(**{c: prune_categories(df[c].array) for c in cats})
    cols = list(frames[0].columns)
    data: dict[str, object] = {}
    for c in cols:
        parts = [f[c].array for f in frames]
        first = parts[0]
        if isinstance(first, pd.Categorical):
            codes = np.concatenate([np.asarray(p.codes) for p in parts])
            data[c] = prune_categories(pd.Categorical.from_codes(codes, categories=first.categories, validate=False))
        elif isinstance(first, np.ndarray) or getattr(first, "dtype", None) is not None and first.dtype.kind in "iuf" \
                and not isinstance(first.dtype, pd.api.extensions.ExtensionDtype):
            data[c] = np.concatenate([np.asarray(p) for p in parts])
        elif all(p.dtype == first.dtype for p in parts):  # e.g. nullable Int64, string: one array copy
            data[c] = type(first)._concat_same_type(parts)
        else:
            data[c] = pd.concat([pd.Series(p) for p in parts], ignore_index=True).array
    frames.clear()
    return pd.DataFrame(data, copy=False)


def _to_frame(table: Columns, spec: S.TableSpec, strings: Strings, all_columns: bool = True) -> pd.DataFrame:
    data: dict[str, object] = {}
    n = table.num_rows
    for col in S.columns(spec, all_columns):
        arr = table.column(col.name) if col.name in table.column_names else nulls(n)
        if col.dtype == "str":
            values = arr.to_list()
            if arr.kind == "str":
                capped = cap_strings(values)
                strings.cut |= capped is not values
                values = capped
            data[col.name] = pd.array(values, dtype="string") if n else pd.array([], dtype="string")
            continue
        all_null = arr.null_count == n  # absent from this export, or wholly empty
        if arr.kind == "str":
            arr = _numeric(arr.to_list())
        if arr.kind == "bytes":
            raise ValueError(f"{spec.name}.{col.name}: BLOB values where numbers belong")
        if arr.kind == "null":
            arr = Col("int", np.zeros(n, np.int64), np.ones(n, bool)) if col.default is None \
                else Col("int", np.full(n, col.default, np.int64))
        if arr.kind == "float":
            v = arr.values
            null = np.isnan(v) if arr.mask is None else arr.mask | np.isnan(v)  # NaN is NULL
            if col.dtype != "float64":  # REAL stored in an integer column: truncate
                v = np.where(null, 0.0, v)
                big = ~(np.abs(v) < 2.0 ** 63)
                with np.errstate(invalid="ignore"):
                    iv = v.astype(np.int64)
                if big.any():  # beyond int64 (1e300, 1e308): the nearest int64, which checks._implausible
                    # then sets aside, never whatever a cast makes of it (the smallest int64)
                    iv[big] = np.where(v[big] > 0, np.iinfo(np.int64).max, -np.iinfo(np.int64).max)
                arr = Col("int", iv, null)
            else:
                arr = Col("float", v, null)
        if col.dtype == "name":
            ids = arr.filled(-1, np.int64)
            # a column wholly NULL (absent in this nsys version) stays missing; otherwise an id that
            # names no string becomes UNKNOWN_NAME, with a warning, instead of a NaN in the analyses
            data[col.name] = strings.resolve(ids, prune=False,
                                             column=None if all_null else f"{spec.name}.{col.name}")
        elif col.dtype == "Int64" and all_null and n >= CONSTANT_MIN_ROWS:
            # wholly missing (a kernel's graph node id outside CUDA graphs): one broadcast missing value
            data[col.name] = pd.arrays.IntegerArray(constant_column(0, n, np.int64), constant_column(True, n, np.bool_))
        elif col.dtype == "Int64":
            values = arr.filled(0, np.int64)
            mask = arr.mask if arr.mask is not None else np.zeros(n, dtype=bool)
            data[col.name] = pd.arrays.IntegerArray(values, mask)
        elif col.dtype == "float64":
            data[col.name] = arr.filled(np.nan, np.float64)
        else:
            # a missing or non-numeric time must not become 0 (a call from the epoch): mark it, and
            # finish._finish_intervals drops the row with a warning
            fill = col.default if col.default is not None else (MISSING if col.name in ("start_ns", "end_ns") else 0)
            # int32 as the direct reader decoded it (a column schema.NARROW narrows), else int64
            keep32 = arr.values.dtype == np.int32 and col.name in S.NARROW.get(spec.name, {})
            data[col.name] = arr.filled(fill, None if keep32 else np.int64)
    return pd.DataFrame(data, copy=False)


def _field24(g: np.ndarray, shift: int) -> np.ndarray:
    """``(g >> shift) & 0xFFFFFF`` as int32, without an int64 temporary of the whole column: the
    shift is written straight into the int32 result (which keeps its low 32 bits), then masked."""
    out = np.empty(len(g), dtype=np.int32)
    if shift:
        np.right_shift(g, shift, out=out, casting="unsafe")
        np.bitwise_and(out, 0xFFFFFF, out=out)
    else:
        np.bitwise_and(g, 0xFFFFFF, out=out, casting="unsafe")
    return out


def _decode_ids(df: pd.DataFrame, keep_global: bool = True) -> pd.DataFrame:
    """The one place that decodes nsys' serialized global ids: ``vm<<48 | pid<<24 | tid``. ``pid``
    and ``tid`` are 24-bit fields: int32 columns. Without ``keep_global`` the int64 global ids give
    way to them (an event table's ``global_tid``/``global_pid``: 16 bytes a row no analysis reads)."""
    if "global_tid" in df.columns:
        g = df["global_tid"].to_numpy(dtype=np.int64)
        if len(g) >= CONSTANT_MIN_ROWS and bool((g == g[0]).all()):  # one thread: two broadcast values
            g0 = int(g[0])
            pid = as_column(df, constant_column((g0 >> 24) & 0xFFFFFF, len(g), np.int32))
            tid = as_column(df, constant_column(g0 & 0xFFFFFF, len(g), np.int32))
        else:
            pid, tid = as_column(df, _field24(g, 24)), as_column(df, _field24(g, 0))
        if not keep_global:
            return _without(df, "global_tid").assign(pid=pid, tid=tid)
        return df.assign(pid=pid, tid=tid, global_pid=as_column(df, g & ~np.int64(0xFFFFFF)))
    if "global_pid" in df.columns:
        g = df["global_pid"].to_numpy(dtype=np.int64)
        if len(g) >= CONSTANT_MIN_ROWS and bool((g == g[0]).all()):  # one process: one broadcast value
            pid = as_column(df, constant_column((int(g[0]) >> 24) & 0xFFFFFF, len(g), np.int32))
        else:
            pid = as_column(df, _field24(g, 24))
        return (df.assign(pid=pid) if keep_global else _without(df, "global_pid").assign(pid=pid))
    return df


def _without(df: pd.DataFrame, column: str) -> pd.DataFrame:
    """``df`` less one column, its array released (a frame of the other columns' arrays as they are,
    not a view of a block that would keep the dropped column alive)."""
    return pd.DataFrame({c: df[c].array for c in df.columns if c != column}, index=df.index, copy=False)


_NARROW_TYPES = {"int8": (np.int8, np.int16, np.int32), "int16": (np.int16, np.int32), "int32": (np.int32,)}


def narrow_type(lo: int, hi: int, floor: str) -> type | None:
    """The smallest signed integer type, not below ``floor``, that holds every value in [lo, hi];
    None when only int64 does."""
    for t in _NARROW_TYPES[floor]:
        info = np.iinfo(t)
        if info.min <= lo and hi <= info.max:
            return t
    return None


def _narrow(df: pd.DataFrame, name: str) -> pd.DataFrame:
    """``schema.NARROW``'s columns of this table in the narrowest type their values allow (checked
    here, on this trace's values: one above int32 keeps the column int64). Each narrowed column
    replaces its int64 one, which is freed when nothing else holds it."""
    want = S.NARROW.get(name)
    if not want or len(df) == 0:
        return df
    for col, floor in want.items():
        if col not in df.columns:
            continue
        v = df[col].to_numpy()
        if v.dtype not in (np.int64, np.int32):  # int32: decoded so by the direct reader
            continue
        lo, hi = int(v.min()), int(v.max())
        t = narrow_type(lo, hi, floor)
        if lo == hi and len(v) >= CONSTANT_MIN_ROWS:  # one device, stream, grid...: one broadcast value
            df = df.assign(**{col: as_column(df, constant_column(lo, len(v), t or np.int64))})
        elif t is not None and np.dtype(t).itemsize < v.dtype.itemsize:
            df = df.assign(**{col: as_column(df, v.astype(t))})
        elif t is None and v.dtype != np.int64:  # not reached: the reader widens what does not fit
            df = df.assign(**{col: as_column(df, v.astype(np.int64))})
        del v
    return df
