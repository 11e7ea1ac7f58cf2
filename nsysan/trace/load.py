"""Load an export into a ``Trace``: describe, read (``columns``), type, resolve strings, decode ids, sort."""

from __future__ import annotations

import re
import sqlite3
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from nsysan import _memory
from nsysan._executor import cpus
from nsysan.errors import CorruptTraceError, NsysanError, ResourceLimitError
from nsysan.trace import budget, direct, metrics, prefetch
from nsysan.trace import schema as S
from nsysan.trace.columns import Col, Columns, nulls, typed_empty, unique_strings
from nsysan.trace.db import Database, display
from nsysan.trace.model import (
    CONSTANT_MIN_ROWS,
    INTERVAL_TABLES,
    TIME_LIMIT,
    Trace,
    TraceMeta,
    as_column,
    constant_column,
    take_columns,
)
from nsysan.units import clean_text

Progress = Callable[[str, int, int], None]

_VERSION_SUFFIX = re.compile(r"_v\d+$")


MAX_STRING = 8192  # longer names/NVTX texts are cut: one MB-long string must not make GB-sized reports
CUT_MARK = "... [truncated]"


def cap_strings(values: list[Any]) -> list[Any]:
    """Cut strings longer than ``MAX_STRING`` characters, marking the cut (None stays None)."""
    if not any(v is not None and len(v) > MAX_STRING for v in values):
        return values
    return [v[:MAX_STRING] + CUT_MARK if v is not None and len(v) > MAX_STRING else v for v in values]


def _numeric(values: list[Any]) -> Col:
    """Text read as numbers (``pd.to_numeric``, coerced): what is not a number becomes NULL."""
    num = np.asarray(pd.to_numeric(pd.Series(values, dtype=object), errors="coerce"))
    if num.dtype.kind == "f":
        return Col("float", num.astype(np.float64, copy=False), np.isnan(num))
    if num.dtype.kind in "iub":
        return Col("int", num.astype(np.int64))
    return Col("float", num.astype(np.float64))


class Strings:
    """``StringIds`` as an id -> category-code map, for vectorised resolution.

    Memory follows the number of strings, never the values of their ids: ids are dense in nsys
    exports (0..n-1) and map through a direct-address table; a file whose largest id is far beyond
    its row count (one row with id 2^31) maps through a sorted id array and a binary search instead.
    Categories are the distinct values, sorted (dictionary-encoded in Arrow: no fixed-width copy of
    every string at the length of the longest)."""

    def __init__(self, table: Columns) -> None:
        self.sorted_ids: np.ndarray | None = None
        self.unresolved: list[tuple[str, int]] = []  # (column, rows) named by an id StringIds lacks
        self.cut = False  # whether a string (a name here, an NVTX text in _to_frame) was shortened
        self._init(table)
        self.index_unknown = self.index.append(pd.Index([UNKNOWN_NAME], dtype=object))

    def _init(self, table: Columns) -> None:
        if table.num_rows == 0:
            self.categories = np.array([], dtype=object)
            self.code_of_id = np.full(1, -1, dtype=np.int8)
            self.index = pd.Index(self.categories, dtype=object)
            return
        raw_ids = table.column("id")
        if raw_ids.kind != "int":  # a REAL, TEXT or BLOB id (not nsys): such rows are dropped
            f = _numeric(raw_ids.to_list())
            v = f.values.astype(np.float64)
            ok = np.isfinite(v) & (v == np.floor(v)) & (np.abs(v) < 2.0 ** 62)
            if f.mask is not None:
                ok &= ~f.mask
            raw_ids = Col("int", np.where(ok, v, 0).astype(np.int64), ~ok)
        ids = raw_ids.filled(-1, np.int64)
        col = table.column("value")
        values = col.to_list()
        if col.kind != "str":
            values = [None if v is None else str(v) for v in values]
        capped = cap_strings(values)
        self.cut |= capped is not values
        values = capped
        # distinct values in code point order (UTF-8 byte order, as Arrow sorted them), each row's rank
        self.categories, inverse = unique_strings("" if v is None else v for v in values)
        uniq_n = len(self.categories)
        self.index = pd.Index(self.categories, dtype=object)  # shared by every resolved column
        valid = ids >= 0
        n = len(ids)
        largest = int(ids.max()) if n else -1
        code_type = _code_dtype(uniq_n)
        if largest < 2 * n + 1_000_000:  # dense (nsys): a direct-address table
            self.code_of_id = np.full(max(largest + 1, 1), -1, dtype=code_type)
            self.code_of_id[ids[valid]] = inverse[valid]
        else:  # sparse ids: sorted ids and their codes, found by binary search
            keep = np.flatnonzero(valid)
            by_id = keep[np.argsort(ids[keep], kind="stable")]
            self.sorted_ids = ids[by_id]
            self.code_of_id = inverse[by_id].astype(code_type)

    def _codes(self, ids: np.ndarray) -> np.ndarray:
        if self.sorted_ids is not None:
            codes = np.full(len(ids), -1, dtype=self.code_of_id.dtype)
            if len(self.sorted_ids):
                pos = np.searchsorted(self.sorted_ids, ids)
                pos[pos >= len(self.sorted_ids)] = 0
                hit = self.sorted_ids[pos] == ids
                codes[hit] = self.code_of_id[pos[hit]]
            return codes
        if len(ids) and int(ids.min()) >= 0 and int(ids.max()) < len(self.code_of_id):
            return self.code_of_id[ids]  # every id known (the usual case): one gather
        codes = np.full(len(ids), -1, dtype=self.code_of_id.dtype)
        ok = (ids >= 0) & (ids < len(self.code_of_id))
        codes[ok] = self.code_of_id[ids[ok]]
        return codes

    def resolve(self, ids: np.ndarray, *, prune: bool = True, column: str | None = None) -> pd.Categorical:
        """Categories of these ids. With ``column``, ids that name no string (missing from StringIds,
        negative, NULL, not a number) become ``UNKNOWN_NAME`` and are counted in ``unresolved``."""
        ids = np.asarray(ids)
        codes = self._codes(ids)
        cats = self.index
        if column is not None:  # the same categories for every slice of a table (they are concatenated)
            cats = self.index_unknown
            if len(codes) and int(codes.min()) < 0:
                bad = codes < 0
                self.unresolved.append((column, int(bad.sum())))
                codes = np.where(bad, len(self.index), codes).astype(_code_dtype(len(cats)))
        cat = pd.Categorical.from_codes(codes, categories=cats, validate=False)
        return prune_categories(cat) if prune else cat


UNKNOWN_NAME = "[unknown name]"


def prune_categories(cat: pd.Categorical) -> pd.Categorical:
    """Drop unused categories (a bincount over the codes: faster than pandas' own for big tables)."""
    codes = np.asarray(cat.codes)
    ncat = len(cat.categories)
    if ncat == 0 or len(codes) == 0:
        return cat if ncat == 0 else pd.Categorical.from_codes(codes, categories=cat.categories[:0], validate=False)
    used = np.bincount(codes if int(codes.min()) >= 0 else codes[codes >= 0], minlength=ncat) > 0
    if used.all():
        return cat
    n_used = int(used.sum())
    remap = np.full(ncat + 1, -1, dtype=_code_dtype(n_used))  # the last entry: a missing value's code, -1
    remap[:-1][used] = np.arange(n_used)
    return pd.Categorical.from_codes(remap[codes], categories=cat.categories[used], validate=False)


def _code_dtype(n_categories: int) -> type:
    """The smallest signed integer type for codes of ``n_categories`` (as pandas stores them)."""
    for t in (np.int8, np.int16, np.int32):
        if n_categories < np.iinfo(t).max:
            return t
    return np.int64


def map_categories(values: pd.Series, fn: Callable[[str], str]) -> pd.Series:
    """Apply ``fn`` to each category of a categorical series (fast: once per distinct value)."""
    cat = values.cat
    new = [fn(str(c)) for c in cat.categories]
    if len(new) == 0:
        return values
    # sorted distinct values, as np.unique gave, without a fixed-width copy of every value at the
    # length of the longest (one 8 kB name among a million short ones: 32 GB)
    uniq = sorted(set(new))
    pos = {v: i for i, v in enumerate(uniq)}
    lut = np.full(len(new) + 1, -1, dtype=_code_dtype(len(uniq)))  # the last entry: a missing value's
    lut[:-1] = [pos[v] for v in new]
    mapped = lut[cat.codes.to_numpy()]
    return pd.Series(pd.Categorical.from_codes(mapped, categories=pd.Index(uniq, dtype=object), validate=False),
                     index=values.index, name=values.name)


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
                if big.any():  # beyond int64 (1e300, 1e308): the nearest int64, which _implausible
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
            # _finish_intervals drops the row with a warning
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


MISSING = np.iinfo(np.int64).min


def _finish_intervals(name: str, held: list[pd.DataFrame], warnings: list[str]) -> pd.DataFrame:
    """Rows without a start or end, or ending before they start, dropped (with a warning); ``dur_ns``;
    rows sorted by start. ``held`` holds the frame and nothing else should: it is emptied, so a
    sort frees each unsorted column as its sorted copy is made."""
    df = held.pop()
    missing = (df["start_ns"].to_numpy() == MISSING) | (df["end_ns"].to_numpy() == MISSING)
    if missing.any():
        warnings.append(f"{name}: dropped {int(missing.sum())} row(s) with a missing or non-numeric start/end")
        df = df.loc[~missing]
    bad = df["end_ns"].to_numpy() < df["start_ns"].to_numpy()
    if bad.any():
        warnings.append(f"{name}: dropped {int(bad.sum())} row(s) whose end is before their start")
        df = df.loc[~bad]
    st = df["start_ns"].to_numpy()
    df = df.assign(dur_ns=as_column(df, df["end_ns"].to_numpy() - st))
    if st.size > 1 and not bool((st[1:] >= st[:-1]).all()):
        order = np.argsort(st, kind="stable")  # a few late rows (OS runtime): timsort is near linear
        del st
        return take_columns([df], order)
    return df.reset_index(drop=True)


def _finish_cuda_api(api: pd.DataFrame) -> pd.DataFrame:
    """API names without their version suffix (``cuLaunchKernel_v2`` -> ``cuLaunchKernel``), and
    their layer (runtime or driver). With CUDA backtraces (``--cudabacktrace``) nsys 2025.3 records a
    backtraced call twice, ``cudaMalloc`` and inside it ``cudaMalloc_v3020``, with one correlation id
    on one thread: the inner row is dropped, so each call (and each GPU op's launch) counts once."""
    api = _drop_nested_duplicates(api)
    names = map_categories(api["name"], lambda s: _VERSION_SUFFIX.sub("", s))
    return api.assign(name=names,
                      api_layer=map_categories(names, lambda s: "runtime" if s.startswith("cuda") else "driver"))


def _drop_nested_duplicates(api: pd.DataFrame) -> pd.DataFrame:
    """Rows that repeat an earlier row's (thread, correlation id) inside its interval."""
    if len(api) < 2 or "correlation_id" not in api or ("global_tid" not in api and "tid" not in api):
        return api
    col = api["correlation_id"]
    # int64 for a nullable column; a plain one (int32 or int64, load._narrow) as it is: no copy
    corr = col.to_numpy(dtype=np.int64, na_value=-1) if isinstance(col.dtype, pd.api.extensions.ExtensionDtype) \
        else col.to_numpy()
    del col
    # none can repeat when every correlation id occurs once, which a bitmap of the ids tells (a hash
    # of 2.4M (thread, id) pairs cost 0.7 s of CPU on a trace without a single repeat); the column
    # itself when every id is positive (no copy of a million-row column to learn that)
    positive = corr > 0
    every = bool(positive.all())
    if not every and not positive.any():
        return api
    pos = corr if every else corr[positive]
    del positive
    if int(pos.max()) < 16 * len(corr) + (1 << 24):  # a byte per id value: at most 16 a row, or 16 MB
        seen = np.zeros(int(pos.max()) + 1, dtype=bool)
        seen[pos] = True
        if int(np.count_nonzero(seen)) == pos.size:  # every id once (nsys without backtraces)
            return api
        del seen
    rows = np.flatnonzero(corr > 0)
    pos = corr[rows].astype(np.int64)
    if "global_tid" in api:
        thread = api["global_tid"].to_numpy(dtype=np.int64, na_value=-1)[rows]
    else:  # the global ids left out (an extra column): the thread as pid<<24 | tid, as nsys packs it
        thread = (api["pid"].to_numpy()[rows].astype(np.int64) << 24) | api["tid"].to_numpy()[rows]
    key = pd.MultiIndex.from_arrays([thread, pos])
    dup = key.duplicated(keep="first")
    if not dup.any():
        return api
    first = rows[pd.Series(np.arange(len(rows)), index=key).groupby(level=[0, 1]).transform("min").to_numpy()]
    st, en = api["start_ns"].to_numpy(), api["end_ns"].to_numpy()
    inside = np.zeros(len(api), dtype=bool)
    inside[rows] = dup & (st[rows] >= st[first]) & (en[rows] <= en[first])
    return api.loc[~inside].reset_index(drop=True) if inside.any() else api


def _finish_memcpy(m: pd.DataFrame) -> pd.DataFrame:
    """Copy direction by name, and the host side's memory kind (pageable, pinned, ...)."""
    kinds = m["copy_kind"].map(S.COPY_KIND).fillna("Unknown")
    host_side = np.where(m["copy_kind"].isin((1, 3)), m["src_kind"],
                         np.where(m["copy_kind"].isin((2, 4)), m["dst_kind"], -1))
    return m.assign(kind=kinds.astype("string"),
                    host_mem=pd.Series(host_side, index=m.index).map(S.MEM_KIND).fillna("").astype("string"))


_FINISH: dict[str, Callable[[pd.DataFrame], pd.DataFrame]] = {"cuda_api": _finish_cuda_api, "memcpy": _finish_memcpy}


def _nvtx(raw: pd.DataFrame, strings: Strings, notes: list[str] | None = None) -> pd.DataFrame:
    """Ranges and marks with resolved text and domain name (``domain:text`` as nsys labels them)."""
    raw = raw.loc[raw["start_ns"].to_numpy() != MISSING]
    text_ids = raw["text_id"].fillna(-1).to_numpy(dtype=np.int64)
    resolved = pd.Series(np.asarray(strings.resolve(text_ids).astype(object)), index=raw.index, dtype="string")
    text = raw["text"].fillna(resolved)
    domains = raw.loc[raw["event_type"] == S.NVTX_DOMAIN_CREATE]
    keep = raw["event_type"].isin((*S.NVTX_RANGE_TYPES, S.NVTX_MARK))
    out = raw.assign(text=text).loc[keep]
    domain_name = pd.Series(pd.NA, index=out.index, dtype="string")
    if len(domains):
        dmap = (domains.assign(domain=text.loc[domains.index])
                .drop_duplicates(["pid", "domain_id"])[["pid", "domain_id", "domain"]])
        joined = out[["pid", "domain_id"]].merge(dmap, on=["pid", "domain_id"], how="left")
        domain_name = pd.Series(joined["domain"].to_numpy(), index=out.index, dtype="string")
    has_domain = domain_name.notna() & (out["domain_id"].fillna(0) != 0)
    domain_name = domain_name.where(has_domain, pd.NA)
    label = out["text"].fillna("")
    name = (domain_name.fillna("") + ":" + label).where(has_domain, label)
    style = np.where(out["event_type"].isin(S.NVTX_PUSHPOP_TYPES), "PushPop",
                     np.where(out["event_type"] == S.NVTX_MARK, "Mark", "StartEnd"))
    end = out["end_ns"].astype("Int64")
    res = pd.DataFrame({
        "start_ns": out["start_ns"].to_numpy(dtype=np.int64),
        "end_ns": end.array,  # IntegerArray: to_numpy() would detour through float64 and round
        #                       absolute-epoch times (~1.7e18 ns) to 256 ns
        "text": out["text"].to_numpy(),
        "domain": domain_name.to_numpy(),
        "name": name.astype("string").to_numpy(),
        "event_type": out["event_type"].to_numpy(dtype=np.int64),
        "style": style,
        "range_id": out["range_id"].to_numpy(),
        "global_tid": out["global_tid"].to_numpy(dtype=np.int64),
        "pid": out["pid"].to_numpy(dtype=np.int32),  # 24-bit fields (_decode_ids)
        "tid": out["tid"].to_numpy(dtype=np.int32),
    })
    res = res.astype({"end_ns": "Int64", "text": "string", "domain": "string", "name": "string",
                      "range_id": "Int64"})
    res = res.assign(dur_ns=(res["end_ns"] - res["start_ns"]).astype("Int64"))
    bad = res["dur_ns"].notna() & (res["dur_ns"] < 0)
    if bad.any():
        if notes is not None:
            notes.append(f"nvtx: dropped {int(bad.sum())} range(s) whose end is before their start")
        res = res.loc[~bad]
    return res.sort_values(["start_ns", "dur_ns"], ascending=[True, False], kind="stable").reset_index(drop=True)


# Values no recording holds (issue 40): such rows are set aside with a warning that counts them.
MAX_BYTES = 1 << 48  # 256 TiB: more than any copy, set or allocation of any GPU
SUM_LIMIT = 1 << 62  # the durations (and the bytes) of a whole trace must add up below this
# an op may outlast the capture (an OS runtime call still blocked when it stopped: 4x the session on
# a public export), never by this factor, nor beyond the floor on a short capture
SPAN_FACTOR = 1_000
SPAN_FLOOR = 3_600 * 10 ** 9
# GPU properties: 0 is how nsys writes "not reported" (an integrated or non-NVIDIA GPU)
GPU_LIMITS = {"sm_count": (0, 10_000), "total_memory_bytes": (0, MAX_BYTES),
              "memory_bandwidth_bytes_per_s": (0, MAX_BYTES), "clock_rate_hz": (0, 1 << 40),
              "compute_major": (0, 1_000), "compute_minor": (0, 1_000)}
BOUNDS_NOTE = (f"times within +-2^62 ns, no op longer than {SPAN_FACTOR:,}x the capture's span (and 1 hour), "
               f"byte counts in 0..2^48, SM counts in 0..{GPU_LIMITS['sm_count'][1]:,} (0: not reported)")


def _implausible(frames: dict[str, pd.DataFrame], session: tuple[int, int] | None, warnings: list[str]) -> None:
    """Rows with values no recording holds, set aside (in place, with a warning that counts them):
    an event time beyond +-``TIME_LIMIT``; an op longer than ``SPAN_FACTOR`` x the capture's span
    (the session's duration, or the extent of the events' starts if longer) and ``SPAN_FLOOR``; a
    copy, set or allocation of a negative or over ``MAX_BYTES`` bytes. An absurd GPU property (an SM
    count over 10,000 or negative) becomes missing. The durations and the bytes of what is left must add up below
    ``SUM_LIMIT`` (so no sum of them can wrap), else the trace is refused as damaged. Vectorised:
    two comparisons a column on a sound trace."""
    timed = [n for n in (*INTERVAL_TABLES, "nvtx") if len(frames[n])]
    dropped: dict[str, int] = {}

    def drop(name: str, bad: np.ndarray) -> None:
        if bad.any():
            dropped[name] = dropped.get(name, 0) + int(bad.sum())
            frames[name] = frames[name].loc[~bad].reset_index(drop=True)

    def ends(df: pd.DataFrame) -> np.ndarray:
        e = df["end_ns"]
        return e.to_numpy(dtype=np.int64, na_value=0) if isinstance(e.dtype, pd.api.extensions.ExtensionDtype) \
            else e.to_numpy()

    for name in timed:
        df = frames[name]
        st, en = df["start_ns"].to_numpy(), ends(df)
        # (a sound trace: four comparisons of min/max, no temporary of the table's length)
        if len(st) and -TIME_LIMIT < int(st.min()) and int(st.max()) < TIME_LIMIT \
                and -TIME_LIMIT < int(en.min()) and int(en.max()) < TIME_LIMIT:
            continue
        drop(name, (st <= -TIME_LIMIT) | (st >= TIME_LIMIT) | (en <= -TIME_LIMIT) | (en >= TIME_LIMIT))
    timed = [n for n in timed if len(frames[n])]
    if timed:
        starts = [frames[n]["start_ns"].to_numpy() for n in timed]
        # the capture's span: the session's when it is sound (the starts' extent is no measure then: a
        # range that starts days early would widen it), else the extent of the events' starts
        if session is not None and 0 < session[1] - session[0] < TIME_LIMIT:
            span = session[1] - session[0]
        else:
            span = max(int(s.max()) for s in starts) - min(int(s.min()) for s in starts)
        span = max(SPAN_FACTOR * span, SPAN_FLOOR)
        for name in timed:
            d = frames[name]["dur_ns"]
            dur = d.to_numpy(dtype=np.int64, na_value=0) if isinstance(d.dtype, pd.api.extensions.ExtensionDtype) \
                else d.to_numpy()
            if len(dur) and int(dur.max()) > span:
                drop(name, dur > span)
    for name in ("memcpy", "memset", "gpu_memory_usage"):
        df = frames[name]
        if len(df) and "bytes" in df:
            b = df["bytes"].to_numpy()
            if int(b.min()) < 0 or int(b.max()) > MAX_BYTES:
                drop(name, (b < 0) | (b > MAX_BYTES))
    _fault_rows(frames, warnings)
    gpus = frames["gpus"]
    unset = []
    for col, (lo, hi) in GPU_LIMITS.items():
        if col in gpus and len(gpus):
            v = gpus[col]
            bad = (v.notna() & ((v < lo) | (v > hi))).to_numpy(dtype=bool, na_value=False)
            if bad.any():
                gpus = gpus.assign(**{col: v.mask(bad)})
                unset.append(f"{col} of {int(bad.sum())} GPU(s)")
    frames["gpus"] = gpus
    if dropped:
        warnings.append("set aside as damaged (" + BOUNDS_NOTE + "): " +
                        ", ".join(f"{name} {k:,} row(s)" for name, k in dropped.items()))
    if unset:
        warnings.append("GPU properties out of range (" + BOUNDS_NOTE + ") read as unknown: " + ", ".join(unset))
    _check_sums(frames, timed)
    _memory_frees(frames, warnings)


MAX_FAULTS = 1 << 32  # page faults in one fault row (one page's faults in one group): more is damage


def _check_sums(frames: dict[str, pd.DataFrame], timed: list[str]) -> None:
    """``CorruptTraceError`` when the durations of the ``timed`` tables, the byte counts (copies, sets,
    memory usage events) or the GPU page faults add up to ``SUM_LIMIT`` or more."""
    def fsum(col: pd.Series) -> float:  # in float64, chunk by chunk (no float copy of the column)
        v = col.to_numpy(dtype=np.int64, na_value=0) if isinstance(col.dtype, pd.api.extensions.ExtensionDtype) \
            else col.to_numpy()
        return float(np.add.reduce(v, dtype=np.float64))

    total = sum(fsum(frames[n]["dur_ns"]) for n in timed if len(frames[n]))
    total_bytes = sum(fsum(frames[n]["bytes"]) for n in ("memcpy", "memset", "gpu_memory_usage")
                      if len(frames[n]) and "bytes" in frames[n])
    faults = fsum(frames["um_gpu_faults"]["faults"]) if "faults" in frames.get("um_gpu_faults", ()) else 0.0
    if total >= SUM_LIMIT or total_bytes >= SUM_LIMIT or faults >= SUM_LIMIT:
        what = "durations" if total >= SUM_LIMIT else "byte counts" if total_bytes >= SUM_LIMIT else "page faults"
        raise CorruptTraceError(f"the events' {what} add up to {max(total, total_bytes, faults):.3g}, beyond 2^62: "
                                "the trace is damaged (no recording holds that much)")


def _fault_rows(frames: dict[str, pd.DataFrame], warnings: list[str]) -> None:
    """GPU page fault rows that end before they start or count faults beyond 0..``MAX_FAULTS``, set
    aside with a warning that counts them."""
    gf = frames.get("um_gpu_faults")
    if gf is not None and len(gf) and "faults" in gf and "end_ns" in gf:
        n, st, en = gf["faults"].to_numpy(), gf["start_ns"].to_numpy(), gf["end_ns"].to_numpy()
        bad = (n < 0) | (n > MAX_FAULTS) | (en < st)
        if bad.any():
            frames["um_gpu_faults"] = gf.loc[~bad].reset_index(drop=True)
            warnings.append(f"GPU page fault rows set aside as damaged (fault counts in 0..2^32, none ending "
                            f"before it starts): {int(bad.sum()):,} row(s)")


def _memory_frees(frames: dict[str, pd.DataFrame], warnings: list[str]) -> None:
    """Frees of device memory a process did not hold then (``_overdrawn_frees``), set aside with a
    warning that counts them (after the byte sums are known to be below 2^62: no sum here wraps)."""
    gm = frames.get("gpu_memory_usage")
    if gm is not None and len(gm) and {"operation", "bytes", "mem_kind", "pid", "device_id"} <= set(gm.columns):
        bad = _overdrawn_frees(gm)
        if bad.any():
            frames["gpu_memory_usage"] = gm.loc[~bad].reset_index(drop=True)
            warnings.append(f"device memory: {int(bad.sum()):,} free(s) of memory the process did not hold then "
                            "(no allocation before, a second free, more bytes than it held) set aside: live "
                            "memory never goes below 0")


def _overdrawn_frees(gm: pd.DataFrame) -> np.ndarray:
    """Per (device, process), in time order: the frees of device memory (not host kinds) that would
    take live memory (allocations - frees, the frees kept so far) below 0. A sound trace costs one
    cumulative sum per pair; a pair whose sum goes negative is walked row by row from there. The
    signed bytes are made per pair, in its time order (no signed copy of the whole table beside it)."""
    bad = np.zeros(len(gm), dtype=bool)
    op, b = gm["operation"].to_numpy(), gm["bytes"].to_numpy(np.int64)
    device = ~np.isin(gm["mem_kind"].to_numpy(), (0, 1))  # analyses.memory.HOST_KINDS
    if not (device & (op == 1) & (b != 0)).any():  # no free takes anything
        return bad
    for idx in _process_rows(gm):
        s = _signed_bytes(b, op, device, idx)
        np.cumsum(s, out=s)
        if int(s.min()) >= 0:
            continue
        first = int(np.argmax(s < 0))
        live = int(s[first - 1]) if first else 0
        del s
        idx = np.arange(len(b)) if idx is None else idx
        for j, x in zip(idx[first:].tolist(), _signed_bytes(b, op, device, idx[first:]).tolist()):
            if live + x < 0:
                bad[j] = True
            else:
                live += x
    return bad


def _signed_bytes(b: np.ndarray, op: np.ndarray, device: np.ndarray, idx: np.ndarray | None) -> np.ndarray:
    """Rows ``idx`` (None: all) of the memory usage events as + bytes for a device allocation, - bytes
    for a device free, 0 else (a new int64 array)."""
    s = b.copy() if idx is None else b[idx]
    o, d = (op, device) if idx is None else (op[idx], device[idx])
    s[~(d & ((o == 0) | (o == 1)))] = 0
    np.negative(s, out=s, where=d & (o == 1))
    return s


def _process_rows(gm: pd.DataFrame) -> list[np.ndarray | None]:
    """The rows of each (device, process) of the memory usage events, in that order, each in time
    order (ties: the table's order); None for all the rows in the table's order (one pair whose
    rows are in time order already: no index of the whole table)."""
    dev, pid, st = gm["device_id"].to_numpy(), gm["pid"].to_numpy(), gm["start_ns"].to_numpy()
    if int(dev.min()) == int(dev.max()) and int(pid.min()) == int(pid.max()):
        return [None] if bool((st[1:] >= st[:-1]).all()) else [np.argsort(st, kind="stable")]
    order = np.lexsort((st, pid, dev))  # stable: ties keep the table's order
    ds, ps = dev[order], pid[order]
    cuts = np.flatnonzero((ds[1:] != ds[:-1]) | (ps[1:] != ps[:-1])) + 1
    return np.split(order, cuts)


def _int_or_none(v: Any) -> int | None:
    try:
        i = int(v)
    except (TypeError, ValueError, OverflowError):
        return None
    return i if -(2 ** 63) <= i < 2 ** 63 else None


def _capture_window(frames: dict[str, pd.DataFrame], session: tuple[int, int] | None,
                    warnings: list[str]) -> tuple[int, int] | None:
    """The capture window, on the event clock: the session ``[shift, shift + duration]`` when every
    event lies inside it, else the extent of the events themselves (first start to last end over the
    GPU, API, OS runtime and NVTX tables). Events are never clipped away."""
    starts: list[int] = []
    ends: list[int] = []
    for n, f in frames.items():
        if n not in INTERVAL_TABLES + ("nvtx",) or not len(f):
            continue
        starts.append(int(f["start_ns"].min()))
        e = f["end_ns"].max()
        ends.append(int(e) if pd.notna(e) else int(f["start_ns"].max()))
    if not starts:
        return session
    extent = (min(starts), max(ends))
    if session is None:
        return extent
    if session[0] <= extent[0] and extent[1] <= session[1]:
        return session
    warnings.append("the session window (ANALYSIS_DETAILS.duration) does not contain every event: "
                    "the capture window is the extent of the events")
    return extent


def _meta_rows(db: Database) -> tuple[dict[str, str], str]:
    for table in S.META_TABLES:
        if db.caps.has(table, "name") and db.caps.has(table, "value"):
            rows = db.rows(f'SELECT name, value FROM "{table}"')
            return {str(k): str(v) for k, v in rows}, table
    return {}, "inferred"


def _infer_version(caps: object) -> str | None:
    c = caps  # fingerprints from NSYS-SCHEMA.md §1, for exports without a metadata table
    assert hasattr(c, "has")
    if c.has("TARGET_INFO_CUDA_GPU") or c.has("TARGET_INFO_GPU", "deviceId"):
        return "2020.x (inferred)"
    if c.has("CUPTI_ACTIVITY_KIND_KERNEL") and not c.has("CUPTI_ACTIVITY_KIND_KERNEL", "mangledName"):
        return "2021.x or earlier (inferred)"
    return "2021.x (inferred)"


SLICE_ROWS = 400_000  # rows of an event table per SQL read (rowid slices read on several threads)


def open_trace(path: str | Path, *, progress: Progress | None = None, max_rows: int | None = None,
               all_columns: bool = False, workers: int | None = None,
               time_range: tuple[float, float] | None = None) -> Trace:
    """Load an Nsight Systems SQLite export, read-only. Raises ``NsysanError`` subclasses on bad input.

    ``max_rows`` refuses traces whose event tables hold more rows in total (a resource guard).
    ``all_columns`` also reads columns no analysis uses (kernel registers and shared memory, context
    ids, return values...). Big tables are read in rowid slices on ``workers`` threads (default: the
    CPU count, at most 4), each with its own read-only connection. A trace whose analysis would not
    fit in memory is refused before it is read (``budget``); ``time_range`` (seconds from the
    capture's start) keeps only the events that start inside it.
    """
    try:
        return _open_trace(Path(path), progress, max_rows, all_columns, workers, time_range)
    except NsysanError:
        raise
    except (sqlite3.Error, UnicodeError, ValueError, TypeError, KeyError, IndexError, OverflowError,
            *_arrow_errors()) as e:
        # a damaged file can fail anywhere in SQLite, the drivers or the decoding of its values
        raise CorruptTraceError(f"{display(path)}: damaged export, cannot be read ({type(e).__name__}: {e})",
                                hint="re-export it from the .nsys-rep (nsys export --type sqlite); if the "
                                     "file is fine, please report this") from e


def _arrow_errors() -> tuple[type[BaseException], ...]:
    """pyarrow's exceptions, where it was imported (an ADBC read): nothing else raises them."""
    pa = sys.modules.get("pyarrow")
    return (pa.ArrowException,) if pa is not None else ()


def _check_rows(db: Database, path: Path, max_rows: int, direct_plans: dict[str, tuple[direct.Plan, np.ndarray]],
                prefetched: dict[str, direct.Pending], sql_tables: list[str]) -> None:
    """Refuse a trace whose event tables hold more than ``max_rows`` rows. The direct reader's leaf
    lists (and a prefetch's columns) give exact counts; a table read through SQL is bounded by its
    rowid span (two b-tree descents) and counted (a scan of every page) only when that bound is
    not enough to let the trace through."""
    n = sum(int(leaves[:, 1].sum(dtype=np.int64)) for _, leaves in direct_plans.values())
    n += sum(len(job.data[0]) if job.data else 0 for job in prefetched.values())
    bound: int | None = 0
    for src in sql_tables:
        try:
            lo, hi = db.rows(f'SELECT min(rowid), max(rowid) FROM "{src}"')[0]
        except NsysanError:  # no rowid (WITHOUT ROWID) or an odd table: count them all
            bound = None
            break
        bound += 0 if lo is None else int(hi) - int(lo) + 1
    if bound is None or n + bound > max_rows:
        n += sum(int(db.rows(f'SELECT count(*) FROM "{src}"')[0][0]) for src in sql_tables)
    if n > max_rows:
        raise ResourceLimitError(
            f"{display(path)}: {n:,} events exceed the limit of {max_rows:,}",
            hint="raise it with --max-events, or export a time window (nsys export --times ...)")


def _check_other_rows(db: Database, path: Path, max_rows: int, tables: list[str]) -> None:
    """The other tables read (strings, threads, GPUs, ...) may hold at most ``max_rows`` rows each:
    together with the event limit, the rows a file can make nsysan read are bounded, whatever it
    claims. Two b-tree descents per table; a count only when the rowid span is over the limit."""
    for src in tables:
        try:
            lo, hi = db.rows(f'SELECT min(rowid), max(rowid) FROM "{src}"')[0]
            span = 0 if lo is None else int(hi) - int(lo) + 1
        except NsysanError:
            span = max_rows + 1
        if span > max_rows and int(db.rows(f'SELECT count(*) FROM "{src}"')[0][0]) > max_rows:
            raise ResourceLimitError(f"{display(path)}: table {src} holds more than {max_rows:,} rows",
                                     hint="raise the limit with --max-events if the trace is genuine")


SMALL_ROWS = 20_000  # tables with fewer rows are read through sqlite3 (no ADBC start-up)


def _rowid_span(db: Database, src: str) -> int:
    """An upper bound of a table's rows (two b-tree descents); big when unknown (no rowid)."""
    try:
        lo, hi = db.rows(f'SELECT min(rowid), max(rowid) FROM "{src}"')[0]
    except NsysanError:
        return SMALL_ROWS + 1
    return 0 if lo is None or hi is None else int(hi) - int(lo) + 1


def _sql_queries(db: Database, spec: S.TableSpec, src: str, all_columns: bool) -> list[tuple[str, str]]:
    """SELECTs for one table: rowid slices of the event tables (read in parallel), else one."""
    slices = db.rowid_slices(src, SLICE_ROWS) if spec.name in INTERVAL_TABLES else None
    return [(spec.name, S.build_select(spec, src, db.caps.columns(src), all_columns=all_columns, rowid_range=rng))
            for rng in slices or [None]]


def _refuse_event_views(db: Database, path: Path, ignored: tuple[str, ...]) -> None:
    """An endless view standing where an event table nsysan reads belongs (``CUPTI_ACTIVITY_KIND_KERNEL``
    ...) is damage, refused (``CorruptTraceError``, exit 6), never run: one whose query is recursive
    (``WITH RECURSIVE``), names itself, or names another view or virtual table (a loop through views).
    Skipping it would analyse a trace without that table (a GPU without kernels looks idle). Other
    views, which nsys never writes either, are left unread with a warning."""
    events = {src.upper() for spec in S.ALL_SPECS for src in spec.sources}
    mine = [t for t in ignored if t.upper() in events]
    if not mine:
        return
    others = [t.upper() for t in ignored]
    bad = []
    for name in mine:
        rows = db.rows("SELECT sql FROM sqlite_master WHERE name = ?", (name,))
        text = " ".join(str(r[0] or "") for r in rows).upper()
        body = text.split(" AS ", 1)[1] if " AS " in text else text
        words = set(re.findall(r"[A-Z_][A-Z0-9_]*", body.replace('"', " ").replace("`", " ").replace("[", " ")))
        if "RECURSIVE" in words or any(o in words for o in others):
            bad.append(name)
    if bad:
        raise CorruptTraceError(
            f"{display(path)}: the event table {', '.join(clean_text(t) for t in bad[:3])} is a view that can run "
            "without end (recursive, or selecting from itself or another view), not a table nsys writes: the "
            "trace is damaged, and is not read as one without those events",
            hint="export the report again with nsys export --type sqlite")


def _open_trace(path: Path, progress: Progress | None, max_rows: int | None, all_columns: bool,
                workers: int | None, time_range: tuple[float, float] | None = None) -> Trace:
    """See ``open_trace``."""
    workers = workers or min(4, cpus())
    _memory.tune_allocator()
    warnings = _being_written(path)
    with Database(path) as db:
        caps = db.caps
        _refuse_event_views(db, path, caps.ignored)
        if caps.ignored:
            warnings.append(f"not read: {', '.join(clean_text(t) for t in caps.ignored[:5])}"
                            f"{' ...' if len(caps.ignored) > 5 else ''}: views or virtual tables, which nsys "
                            "never writes (a view is a query, and can run without end)")
        tick = _Ticker(progress, len(S.ALL_SPECS) + 2)
        # tables the CLI began decoding before pandas was imported (prefetch), used if the plan is the same
        early = prefetch.take(path, all_columns)
        try:
            plan = _Plan(db, early, all_columns)
            warnings += plan.notes
            if max_rows is not None:
                plan.check_rows(db, path, max_rows)
            time_window = budget.guard(db, display(path), plan.event_plans(), plan.prefetched, plan.by_sql, time_range)
            queries, bulky = plan.queries(db, all_columns)
        except BaseException:
            if early is not None:
                early.close()
            raise
        # biggest first, so the threads finish together (StringIds stays first: it is read alone)
        queries[1:] = sorted(queries[1:], key=lambda q: 0 if "WHERE rowid" in q[1] else 1)
        # the strings, each table read (decoded by the prefetch or here, or by SQL in slices), each built
        tick.total = len(queries) + len(plan.prefetched) + len(plan.direct_plans) + len(plan.specs)
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="nsysan-strings") as side:
            # the string table (and, for a big one, ADBC's start-up, 45 ms) while the event tables decode
            strings_f = side.submit(lambda sql: Strings(db.table(sql, bulk="StringIds" in bulky)), queries.pop(0)[1])
            raw = _finish_prefetched(early, plan.prefetched, time_window)
            raw.update(db.direct_read_many(plan.direct_plans, workers, window=time_window))
            strings = strings_f.result()
        tick("strings")
        for name in raw:  # (by name: a loop variable would hold the last table's columns to the end)
            if raw[name] is None:  # declined (e.g. a REAL in an integer column): SQLite reads that table
                again = _sql_queries(db, plan.specs[name], plan.sources[name], all_columns)
                queries += again
                tick.total += len(again)
                bulky.add(name)
            tick(f"read {name}")
        # each slice becomes a frame on its worker thread, so its read columns are freed early

        def convert(key: str, t: Columns) -> pd.DataFrame:
            return _to_frame(t, plan.specs[key], strings, all_columns)

        tables: dict[str, list[Any]] = db.read_many(queries, workers, on_done=lambda key: tick(f"read {key}"),
                                                     convert=convert, bulk=bulky.__contains__)
        _memory.release()
        frames = _build_frames(plan.specs, raw, tables, strings, all_columns, convert, tick, warnings)
        warnings += _unresolved(strings)
        meta, meta_source = _meta_rows(db)
        # GPU metrics from the open export, aggregated as they are decoded (trace/metrics.py)
        gpu_metrics = metrics.read(db, frames["gpus"]) if caps.has("GPU_METRICS") else None
        if gpu_metrics is not None and gpu_metrics.note:
            warnings.append(f"GPU metrics: {gpu_metrics.note}")
        capture, session, epoch_offset = _session(db, meta)

    _tidy(frames, strings, warnings)
    _implausible(frames, session if time_window is None else None, warnings)
    if time_window is not None:  # the tables read by SQL; the capture is then the events' extent
        frames, session = budget.restrict(frames, time_window, warnings), None
    window = _capture_window(frames, session, warnings)
    version = meta.get("EXPORT_PRODUCT_VERSION") or _infer_version(caps)
    trace_meta = TraceMeta(
        path=str(path), nsys_version=version, schema_version=meta.get("EXPORT_SCHEMA_VERSION"),
        platform=meta.get("EXPORT_PLATFORM"), version_source=meta_source,
        start_ns=window[0] if window else None, end_ns=window[1] if window else None,
        tables=tuple(sorted(caps.tables)), capture=capture, warnings=tuple(warnings),
        epoch_offset_ns=epoch_offset,
    )
    trace = Trace(meta=trace_meta, gpu_metrics=gpu_metrics, **frames)
    del frames
    _memory.release()  # the conversion buffers' pages go back to the OS before the analyses start
    return trace


class _Ticker:
    """``open_trace``'s progress: one step done per call, of ``total`` (which may grow)."""

    def __init__(self, progress: Progress | None, total: int) -> None:
        self.progress, self.total, self.done = progress, total, 0
        if progress:
            progress("strings", 0, total)

    def __call__(self, name: str) -> None:
        self.done += 1
        if self.progress:
            self.progress(name, self.done, self.total)


def _tidy(frames: dict[str, pd.DataFrame], strings: Strings, warnings: list[str]) -> None:
    """The last touches, in place: ``nvtx`` under its name, the shortened-strings note, memory
    usage rows without a time dropped, thread names as strings."""
    frames["nvtx"] = frames.pop("nvtx_raw")  # finished by _nvtx in _build_frames
    cut = _cut_note(strings, frames["nvtx"])
    if cut is not None:
        warnings.append(cut)
    gm = frames["gpu_memory_usage"]
    timeless = gm["start_ns"].to_numpy() == MISSING
    if timeless.any():  # (else no copy of the table: 3M rows are 90 MB)
        frames["gpu_memory_usage"] = gm.loc[~timeless].reset_index(drop=True)
    th = frames["threads"]
    frames["threads"] = th.assign(name=th["name"].astype("string"))


def _being_written(path: Path) -> list[str]:
    """A note per ``-wal`` / ``-journal`` file beside the trace (it may still be being written),
    saying what nsysan read: ``Database`` reads what SQLite reads (a private copy with the WAL's
    committed transactions, or with the hot journal rolled back), never writing beside the trace."""
    from nsysan.trace.db import side_files, side_note

    return side_note(path, side_files(path))


def _generated_columns(db: Database) -> set[str]:
    """The tables read here that have generated columns (``"end" AS (start + dur)``), which the
    table list omits: each such column is added to ``db.caps`` so it is selected, and the table is
    read through SQLite (which computes them; they are not in the stored rows the direct reader
    decodes). nsys writes none: on its exports this is one query that finds nothing."""
    names = sorted({t for spec in (*S.ALL_SPECS, S.GPUS_LEGACY) for t in spec.sources if db.caps.has(t)})
    if not names:
        return set()
    try:
        rows = db.rows("SELECT m.name, x.name FROM sqlite_master AS m, pragma_table_xinfo(m.name) AS x "
                       f"WHERE m.type = 'table' AND x.hidden IN (2, 3) AND m.name IN ({', '.join('?' * len(names))})",
                       tuple(names))
    except NsysanError:  # an SQLite without table_xinfo (< 3.26): no generated columns to find
        return set()
    found: set[str] = set()
    for table, col in rows:
        table, col = str(table), str(col)
        cols = db.caps.tables.get(table)
        if cols is not None and col not in cols:
            db.caps.tables[table] = (*cols, col)
        found.add(table)
    return found


class _Plan:
    """How each table is read: decoded by the prefetch (``prefetched``), by the direct reader
    (``direct_plans``) or through SQL (``by_sql``); ``specs`` and ``sources`` name every table's
    spec and source table."""

    def __init__(self, db: Database, early: Any, all_columns: bool) -> None:
        caps = db.caps
        self.prefetched: dict[str, direct.Pending] = {}
        self.specs: dict[str, S.TableSpec] = {}
        self.sources: dict[str, str] = {}
        self.direct_plans: dict[str, tuple[direct.Plan, np.ndarray]] = {}
        self.by_sql: list[tuple[S.TableSpec, str]] = []
        self.notes: list[str] = []
        generated = _generated_columns(db)
        for spec in S.ALL_SPECS:
            src = next((t for t in spec.sources if caps.has(t)), None)
            if spec.name == "gpus" and src is None and caps.has("TARGET_INFO_CUDA_GPU"):
                spec, src = S.GPUS_LEGACY, "TARGET_INFO_CUDA_GPU"
            self.specs[spec.name] = spec
            if src is None:
                continue
            lacking = [c for c in spec.required if not caps.has(src, c)]
            if lacking:  # a table rebuilt without a column it needs: said, never "0 kernels" in silence
                self.notes.append(f"{clean_text(src)} has no column {', '.join(map(clean_text, lacking))}: "
                                  "its rows are not read")
                continue
            self.sources[spec.name] = src
            if src in generated:  # computed by SQLite, absent from the stored rows: SQL reads it
                self.by_sql.append((spec, src))
                continue
            if spec.name in INTERVAL_TABLES + S.SIDE_TABLES and self._direct(db, spec, src, early, all_columns):
                continue
            self.by_sql.append((spec, src))

    def event_plans(self) -> dict[str, tuple[direct.Plan, np.ndarray]]:
        """The direct reader's plans of the event tables (the side tables' left out: not events)."""
        return {name: p for name, p in self.direct_plans.items() if name in INTERVAL_TABLES}

    def check_rows(self, db: Database, path: Path, max_rows: int) -> None:
        """``--max-rows``: refuse the trace before reading it when a table holds more rows."""
        _check_rows(db, path, max_rows, self.event_plans(), self.prefetched,
                    [src for spec, src in self.by_sql if spec.name in INTERVAL_TABLES + ("nvtx_raw",)])
        _check_other_rows(db, path, max_rows, ["StringIds"] + [
            src for spec, src in self.by_sql if spec.name not in INTERVAL_TABLES + ("nvtx_raw",)]
            + [self.sources[name] for name in self.direct_plans if name not in INTERVAL_TABLES])

    def queries(self, db: Database, all_columns: bool) -> tuple[list[tuple[str, str]], set[str]]:
        """The SQL reads (the string table first), and the tables read through ADBC (``bulky``:
        small tables through sqlite3, big ones through ADBC, see trace.db)."""
        queries: list[tuple[str, str]] = [("StringIds", 'SELECT id, value FROM "StringIds"')]
        for spec, src in self.by_sql:
            queries += _sql_queries(db, spec, src, all_columns)
        bulky = {key for key, src in [("StringIds", "StringIds")] + [(spec.name, src) for spec, src in self.by_sql]
                 if _rowid_span(db, src) > SMALL_ROWS}
        return queries, bulky

    def _direct(self, db: Database, spec: S.TableSpec, src: str, early: Any, all_columns: bool) -> bool:
        """Whether event table ``spec`` is decoded directly (by the prefetch when it planned the same)."""
        outputs = S.select_outputs(spec, db.caps.columns(src), all_columns=all_columns)
        pre = early.jobs.get(spec.name) if early is not None else None
        narrow = tuple(S.NARROW.get(spec.name, ()))
        found = db.direct_plan(src, outputs, spec.keep_only, leaves=pre is None, narrow=narrow)
        if found is not None and pre is not None and found[0] == pre[0]:
            self.prefetched[spec.name] = pre[1]
            return True
        if found is not None and pre is not None:  # the prefetch planned otherwise: list the leaves
            found = db.direct_plan(src, outputs, spec.keep_only, narrow=narrow)
        if found is not None:
            self.direct_plans[spec.name] = found
            return True
        return False


def _finish_prefetched(early: Any, prefetched: dict[str, direct.Pending],
                       time_window: tuple[int, int] | None) -> dict[str, Columns | None]:
    """The tables the prefetch decoded (None: declined, SQLite reads it); the prefetch closed."""
    raw: dict[str, Columns | None] = {}
    if early is not None:
        try:
            for name, job in prefetched.items():
                try:
                    raw[name] = direct.finish(job, time_window)
                except (OSError, direct.Unsupported):
                    raw[name] = None
        finally:
            early.close()
    return raw


def _build_frames(specs: dict[str, S.TableSpec], raw: dict[str, Columns | None], tables: dict[str, list[Any]],
                  strings: Strings, all_columns: bool, convert: Callable[[str, Columns], pd.DataFrame],
                  tick: Callable[[str], None], warnings: list[str]) -> dict[str, pd.DataFrame]:
    """Every table's frame, one at a time, the big ones first: each reuses the memory the one before
    let go (built on two threads, the 245 MB trace's load peaked 60-80 MB higher, no sooner done).
    The event tables' warnings go to ``warnings`` in a fixed order."""

    def build(name: str) -> tuple[pd.DataFrame, list[str]]:
        """One table's frame: slices joined, ids decoded; event tables also lose their invalid
        rows (with a warning), gain durations and are sorted by start."""
        spec = specs[name]
        whole = raw.pop(name, None)
        parts = ([convert(name, whole)] if whole is not None else tables.pop(name, None)) \
            or [_to_frame(_empty(spec, all_columns), spec, strings, all_columns)]
        del whole  # the read columns: their int64 arrays go as their narrow copies replace them
        # an event or side table's global ids are extra: pid and tid are what the analyses read
        df = _narrow(_decode_ids(_concat(parts), all_columns or name not in INTERVAL_TABLES + S.SIDE_TABLES), name)
        notes: list[str] = []
        if name in INTERVAL_TABLES:
            held = [df]
            del df
            df = _finish_intervals(name, held, notes)
        if name == "nvtx_raw":
            df = _nvtx(df, strings, notes)
        elif name in _FINISH:
            df = _FINISH[name](df)
        return df, notes

    frames: dict[str, pd.DataFrame] = {}
    built: dict[str, tuple[pd.DataFrame, list[str]]] = {}
    for name in sorted(specs, key=lambda n: n not in INTERVAL_TABLES):
        built[name] = build(name)
        tick(name)
    for name in specs:
        frames[name] = built[name][0]
    for name in (*INTERVAL_TABLES, "nvtx_raw"):  # warnings in a fixed order, whatever thread finished first
        warnings += built[name][1]
    return frames


def _unresolved(strings: Strings) -> list[str]:
    """A warning per column whose rows name string ids StringIds does not hold."""
    unresolved: dict[str, int] = {}
    for column, k in strings.unresolved:
        unresolved[column] = unresolved.get(column, 0) + k
    return [f"{column}: {k:,} row(s) name a string id that StringIds does not hold (missing, "
            f"negative, NULL or not a number): named {UNKNOWN_NAME!r}" for column, k in sorted(unresolved.items())]


def _session(db: Database, meta: dict[str, str]) -> tuple[tuple[tuple[str, str], ...], tuple[int, int] | None,
                                                           int | None]:
    """The capture's settings (``META_DATA_CAPTURE``), the session's extent on the event clock and
    the offset from it to UTC epoch ns, each where the export has it."""
    caps = db.caps
    capture: tuple[tuple[str, str], ...] = ()
    if caps.has("META_DATA_CAPTURE", "name"):
        capture = tuple((str(k), str(v)) for k, v in db.rows('SELECT name, value FROM "META_DATA_CAPTURE"'))
    session = None
    if caps.has("ANALYSIS_DETAILS", "duration"):
        # only ``duration`` is on the event clock (startTime/stopTime are not, in most exports):
        # events lie in [0, duration], shifted by EXPORT_CONFIG_TIME_SHIFT when normalised
        rows = db.rows('SELECT max(duration) FROM "ANALYSIS_DETAILS"')
        shift = _int_or_none(meta.get("EXPORT_CONFIG_TIME_SHIFT")) or 0
        dur = _int_or_none(rows[0][0]) if rows else None
        if dur is not None and dur > 0:
            session = (shift, shift + dur)
    epoch_offset = None
    if caps.has("TARGET_INFO_SESSION_START_TIME", "utcEpochNs"):
        rows = db.rows('SELECT min(utcEpochNs) FROM "TARGET_INFO_SESSION_START_TIME"')
        utc = _int_or_none(rows[0][0]) if rows else None
        if utc is not None:
            epoch_offset = utc - (_int_or_none(meta.get("EXPORT_CONFIG_TIME_SHIFT")) or 0)
    return capture, session, epoch_offset


def _cut_note(strings: Strings, nvtx: pd.DataFrame) -> str | None:
    """The warning that names and NVTX texts were shortened (to ``MAX_STRING``), or None. Looked for
    only when one was (a scan of every string)."""
    cut: list[str] = []
    cut_nvtx = pd.Series([], dtype="string")
    if strings.cut:
        cut = [str(v) for v in strings.categories if str(v).endswith(CUT_MARK)]
        nv = nvtx["text"].fillna("")
        cut_nvtx = nv.loc[nv.str.endswith(CUT_MARK)]
    if not (len(cut) or len(cut_nvtx)):
        return None
    # the example is never an environment block (StringIds holds the profiled process's
    # environment, NUL-separated NAME=VALUE: it may hold secrets, shown only with --show-env)
    env = re.compile(r"[A-Za-z_][A-Za-z0-9_%]*=")
    first = next((v for v in (*cut, *cut_nvtx.head(20).astype(str)) if "\x00" not in v and not env.match(v)), None)
    eg = f" (e.g. {first[:60]!r}...)" if first is not None else ""
    return (f"{len(cut) + len(cut_nvtx)} name(s) or NVTX text(s) longer than {MAX_STRING:,} characters "
            f"were shortened to their first {MAX_STRING:,}{eg}; numbers are "
            "unaffected unless two names differ only after that point")
