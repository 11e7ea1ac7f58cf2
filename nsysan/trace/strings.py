"""StringIds as categories: string ids resolved to category codes, long texts capped, the categories
pruned and mapped, and the warnings of unresolved ids and shortened texts."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from nsysan.trace.columns import Col, Columns, _numeric, unique_strings

MAX_STRING = 8192  # longer names/NVTX texts are cut: one MB-long string must not make GB-sized reports
CUT_MARK = "... [truncated]"


def cap_strings(values: list[Any]) -> list[Any]:
    """Cut strings longer than ``MAX_STRING`` characters, marking the cut (None stays None)."""
    if not any(v is not None and len(v) > MAX_STRING for v in values):
        return values
    return [v[:MAX_STRING] + CUT_MARK if v is not None and len(v) > MAX_STRING else v for v in values]



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
        self.cut = False  # whether a string (a name here, an NVTX text in frames._to_frame) was shortened
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


def _unresolved(strings: Strings) -> list[str]:
    """A warning per column whose rows name string ids StringIds does not hold."""
    unresolved: dict[str, int] = {}
    for column, k in strings.unresolved:
        unresolved[column] = unresolved.get(column, 0) + k
    return [f"{column}: {k:,} row(s) name a string id that StringIds does not hold (missing, "
            f"negative, NULL or not a number): named {UNKNOWN_NAME!r}" for column, k in sorted(unresolved.items())]


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
