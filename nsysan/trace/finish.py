"""Each table's frame built and finished: intervals without a sound start and end dropped (with a
warning), durations, rows sorted by start; CUDA API names without their version suffix, copy
directions and memory kinds, NVTX ranges with their text and domain; the last touches to the set."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from nsysan.trace import schema as S
from nsysan.trace.columns import Columns
from nsysan.trace.frames import MISSING, _concat, _decode_ids, _empty, _narrow, _to_frame
from nsysan.trace.model import INTERVAL_TABLES, as_column, is_constant_column, take_columns
from nsysan.trace.strings import Strings, _cut_note, map_categories

_VERSION_SUFFIX = re.compile(r"_v\d+$")


def _build_frames(specs: dict[str, S.TableSpec], raw: dict[str, Columns | None], tables: dict[str, list[Any]],
                  strings: Strings, all_columns: bool, convert: Callable[[str, Columns], pd.DataFrame],
                  tick: Callable[[str], None], warnings: list[str]) -> dict[str, pd.DataFrame]:
    """Every table's frame, one at a time, the big ones first: each reuses the memory the one before
    let go (on two threads, two tables' buffers would be held at once, for a load no sooner done).
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
        held.append(df)  # held alone: each unsorted column is freed as its sorted copy is made
        del df
        return take_columns(held, order)
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
    # int64 for a nullable column; a plain one (int32 or int64, frames._narrow) as it is: no copy
    corr = col.to_numpy(dtype=np.int64, na_value=-1) if isinstance(col.dtype, pd.api.extensions.ExtensionDtype) \
        else col.to_numpy()
    del col
    rows = np.flatnonzero(corr > 0)
    if rows.size < 2:
        return api
    if rows.size == len(corr):
        rows = None  # every row: no copies of million-row columns to select them all
    pos = (corr if rows is None else corr[rows]).astype(np.int64)
    del corr
    span = int(pos.max()) + 1  # the id values' range, read once
    if _each_once(_codes(api, "pid", rows), pos, span):  # ids are per process: none repeats (nsys without backtraces)
        return api
    key = _combine(_codes(api, "global_tid", rows), pos, span)
    del pos
    order = np.argsort(key, kind="stable")  # a key's rows in row order: its first row leads its run
    same = key[order[1:]] == key[order[:-1]]
    del key
    if not same.any():
        return api
    lead = np.arange(1, len(order))
    lead[same] = 0
    lead = np.maximum.accumulate(lead)  # each sorted row's run's first position
    later, first = order[1:][same], order[lead[same]]
    del order, lead, same
    if rows is not None:
        later, first = rows[later], rows[first]
    st, en = api["start_ns"].to_numpy(), api["end_ns"].to_numpy()
    inside = np.zeros(len(api), dtype=bool)
    inside[later] = (st[later] >= st[first]) & (en[later] <= en[first])
    return api.loc[~inside].reset_index(drop=True) if inside.any() else api


def _codes(api: pd.DataFrame, column: str, rows: np.ndarray | None) -> np.ndarray:
    """``column``'s values (of ``rows``, or every row) as dense int64 codes 0..k-1. Without the
    global ids (an extra column), the thread is pid<<24 | tid, as nsys packs it."""
    if column == "global_tid" and column not in api:
        v = (api["pid"].to_numpy().astype(np.int64) << 24) | api["tid"].to_numpy()
    elif column == "pid" and column not in api:  # the process: the global thread id's upper bits
        v = api["global_tid"].to_numpy(dtype=np.int64, na_value=-1) >> 24
    else:
        v = api[column].to_numpy(dtype=np.int64, na_value=-1)
    if rows is not None:
        v = v[rows]
    if is_constant_column(v) or len(v) == 0 or bool((v == v[0]).all()):
        return np.zeros(len(v), dtype=np.int64)
    codes, _ = pd.factorize(v, sort=False)
    return codes.astype(np.int64, copy=False)


def _combine(codes: np.ndarray, pos: np.ndarray, span: int) -> np.ndarray:
    """One int64 key per (code, id) pair: ``codes * span + pos`` (``span``: above every id), or a
    dense code of the pairs where that product would not fit."""
    if (int(codes.max()) + 1) * span < (1 << 62):
        key = codes * span
        key += pos
        return key
    codes2, _ = pd.MultiIndex.from_arrays([codes, pos]).factorize()
    return codes2.astype(np.int64, copy=False)


def _each_once(codes: np.ndarray, pos: np.ndarray, span: int) -> bool:
    """Whether every (code, id) pair occurs once: a bitmap of the pairs when it takes at most 16
    bytes a row or 16 MB (no hash of every pair on a trace without a single repeat), else False
    (the caller's sort decides)."""
    cells = (int(codes.max()) + 1) * span
    if cells >= 16 * len(pos) + (1 << 24):
        return False
    seen = np.zeros(cells, dtype=bool)
    seen[_combine(codes, pos, span)] = True
    return int(np.count_nonzero(seen)) == len(pos)


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
