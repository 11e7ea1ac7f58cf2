"""Per-name summaries with the same numbers as ``nsys stats`` (cuda_gpu_kern_sum, cuda_api_sum,
cuda_gpu_mem_time_sum / cuda_gpu_mem_size_sum, nvtx_sum), plus the unified GPU-operation frame."""

from __future__ import annotations

import numpy as np
import pandas as pd

from nsysan.analyses.frames import compact_codes, filled, sort_rows
from nsysan.trace.columns import unique_strings
from nsysan.trace.model import Trace, as_column, constant_column, is_constant_column

STAT_COLUMNS = ["count", "total_ns", "avg_ns", "med_ns", "min_ns", "max_ns", "std_ns"]


def duration_stats(df: pd.DataFrame, keys: list[str], dur: str = "dur_ns") -> pd.DataFrame:
    """count, total, mean, median, min, max and sample standard deviation (ddof=1, 0 for one sample)
    of ``dur`` per ``keys``, as nsys computes them; sorted by total descending, then keys."""
    if len(df) == 0:
        return pd.DataFrame({**{k: pd.Series(dtype=object) for k in keys},
                             **{c: pd.Series(dtype="float64") for c in STAT_COLUMNS}})
    out = _stats_by_sorting(df, keys, dur)
    if out is not None:
        return out  # already in the order below
    g = df.groupby(keys, sort=True, observed=True, dropna=False)[dur]
    out = g.agg(count="count", total_ns="sum", avg_ns="mean", med_ns="median", min_ns="min", max_ns="max",
                std_ns="std").reset_index()
    out = out.assign(std_ns=out["std_ns"].fillna(0.0))
    for k in keys:
        if isinstance(out[k].dtype, pd.CategoricalDtype):
            out[k] = out[k].astype(str)
    return out.sort_values(["total_ns", *keys], ascending=[False, *([True] * len(keys))],
                           kind="stable").reset_index(drop=True)


_DUR_BITS = 40  # durations below 2^40 ns (18 minutes) share an int64 with the group code


def _stats_by_sorting(df: pd.DataFrame, keys: list[str], dur: str) -> pd.DataFrame | None:
    """The same statistics from one ``np.sort`` of (group code << 40 | duration): each group's values
    come out contiguous and ordered, so min, max and median are positions and count, sum and the
    squared deviations are ``reduceat``s. Used when every key is categorical without missing values
    and durations fit; returns None otherwise (pandas group-by then)."""
    cats = [df[k].array for k in keys]
    if not all(isinstance(c, pd.Categorical) for c in cats):
        return None
    codes = [np.asarray(c.codes) for c in cats]  # in their own width (int8/int16): no int64 copies
    d = df[dur].to_numpy()
    if d.dtype.kind not in "iu" or any(bool((c < 0).any()) for c in codes):
        return None
    if int(d.min()) < 0 or int(d.max()) >= 1 << _DUR_BITS:
        return None
    sizes = [max(len(c.categories), 1) for c in cats]
    # one int64 array of a row each, built, shifted, combined and sorted in place (a 4M-call table's
    # temporaries add up to hundreds of MB otherwise, and the summaries run beside the other analyses)
    v = codes[0].astype(np.int64)
    for c, n in zip(codes[1:], sizes[1:]):
        v *= n  # mixed radix: decoded below
        v += c
    del codes
    uniq = None  # the mixed-radix code itself is small enough to be the group code
    if int(v.max()) >= 1 << (63 - _DUR_BITS):
        group, uniq = pd.factorize(v)  # hashing, no sort; order is restored by the final sort
        if len(uniq) >= 1 << (63 - _DUR_BITS):
            return None
        v = group.astype(np.int64, copy=False)
        del group
    v <<= _DUR_BITS
    v |= d.astype(np.int64, copy=False)
    v.sort()
    n_codes = (int(v[-1]) >> _DUR_BITS) + 1
    if n_codes <= max(len(v) >> 4, 1024):
        # each group's first row by binary search (a few names): no per-row group array
        start = np.searchsorted(v, np.arange(n_codes, dtype=np.int64) << _DUR_BITS)
        start = start[np.flatnonzero(np.diff(np.append(start, len(v))))]
        g_first = v[start] >> _DUR_BITS
    else:
        g = v >> _DUR_BITS
        start = np.flatnonzero(np.concatenate([[True], g[1:] != g[:-1]]))
        g_first = g[start]
        del g
    v &= (1 << _DUR_BITS) - 1  # the durations, each group's in ascending order
    count = np.diff(np.append(start, len(v)))
    total = np.add.reduceat(v, start)
    mean = total / count
    lo_mid, hi_mid = start + (count - 1) // 2, start + count // 2
    med = (v[lo_mid] + v[hi_mid]) / 2
    dev = np.repeat(mean, count)
    np.subtract(v, dev, out=dev)  # v - mean, squared, in one array
    np.multiply(dev, dev, out=dev)
    ss = np.add.reduceat(dev, start)
    del dev
    std = np.where(count > 1, np.sqrt(ss / np.maximum(count - 1, 1)), 0.0)
    out, rank = {}, {}
    rest = g_first if uniq is None else np.asarray(uniq)[g_first]
    for k, c, n in zip(reversed(keys), reversed(cats), reversed(sizes)):
        names = np.asarray(c.categories.astype(str), dtype=object)
        code = rest % n
        out[k] = names[code]
        # the name's place in sorted order (equal names share it), for duration_stats' final order
        rank[k] = np.unique(names, return_inverse=True)[1].reshape(-1)[code] if len(names) else code
        rest = rest // n
    # duration_stats' order (total descending, then the keys ascending, stably) on the arrays, before
    # the frame is made: the same rows as sort_values + reset_index, without them
    order = np.lexsort([*(rank[k] for k in reversed(keys)), -total])
    cols = {"count": count, "total_ns": total, "avg_ns": mean, "med_ns": med, "min_ns": v[start],
            "max_ns": v[np.append(start[1:], len(v)) - 1], "std_ns": std}
    return pd.DataFrame({**{k: out[k][order] for k in keys}, **{c: a[order] for c, a in cols.items()}})


def with_share(df: pd.DataFrame) -> pd.DataFrame:
    t = df["total_ns"].to_numpy()
    if t.dtype == np.int64:  # no missing values: numpy's sum and division are pandas' (without its per-call cost)
        tot = t.sum()
        return df.assign(share=(t / tot) if tot else 0.0)
    tot = df["total_ns"].sum()
    return df.assign(share=(df["total_ns"] / tot) if tot else 0.0)


def kernel_summary(trace: Trace) -> pd.DataFrame:
    """Per kernel name (demangled): stats of kernel duration and share of all kernel time.
    Matches ``nsys stats -r cuda_gpu_kern_sum`` (Instances = count; StdDev is the sample std)."""
    return with_share(duration_stats(trace.kernels, ["name"]))


def kernel_config_summary(trace: Trace) -> pd.DataFrame:
    """Per kernel name and launch configuration (grid and block dimensions)."""
    k = trace.kernels
    if len(k) == 0:
        return with_share(duration_stats(k.assign(grid=pd.Series(dtype=str), block=pd.Series(dtype=str)),
                                         ["name", "grid", "block"]))
    # group on integer codes of each distinct (grid, block) shape; format the few distinct ones
    # (the codes only group rows: the output is ordered by the formatted shapes, not by code)
    combined: np.ndarray | None = None  # None while no dimension varies
    for c in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"):
        v = k[c].to_numpy()  # in its own width (int8/int16, or the loader's broadcast of one value)
        if is_constant_column(v) or bool((v == v[0]).all()):  # most dimensions are the same for every launch
            continue
        codes, uniq = pd.factorize(v)
        # mixed radix while it fits, then re-factorized: the combined code stays below the row count
        combined = codes.astype(np.int64) if combined is None else combined * len(uniq) + codes
        if int(combined.max()) >= len(k):
            combined = pd.factorize(combined)[0].astype(np.int64)
    # one shape for every launch (a loop of one kernel configuration): code 0 throughout, no hashing
    combined = np.zeros(len(k), dtype=np.int8) if combined is None else pd.factorize(combined)[0].astype(np.int64)
    first_row = np.zeros(int(combined.max()) + 1, dtype=np.int64)  # one row of each shape
    first_row[combined[::-1]] = np.arange(len(combined) - 1, -1, -1)
    dims = np.stack([k[c].to_numpy(dtype=np.int64)[first_row] for c in
                     ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")], axis=1)
    shapes, code = dims, combined
    grid = pd.Index([f"{a}x{b}x{c}" for a, b, c in shapes[:, :3]], dtype=object)
    block = pd.Index([f"{a}x{b}x{c}" for a, b, c in shapes[:, 3:]], dtype=object)
    code = code.reshape(-1)
    frame = pd.DataFrame({"name": k["name"].array, "dur_ns": k["dur_ns"].to_numpy(),
                          "grid": pd.Categorical.from_codes(code, categories=pd.Index(range(len(shapes))))},
                         copy=False)
    out = duration_stats(frame, ["name", "grid"])
    shape = out["grid"].astype(np.int64).to_numpy()
    out = out.assign(grid=grid[shape], block=block[shape])
    cols = ["name", "grid", "block", *STAT_COLUMNS]
    return with_share(out[cols].sort_values(["total_ns", "name", "grid", "block"],
                                            ascending=[False, True, True, True], kind="stable").reset_index(drop=True))


def api_summary(trace: Trace) -> pd.DataFrame:
    """Per CUDA runtime/driver API name (version suffix stripped): stats of the call duration.
    Same rows as ``nsys stats -r cuda_api_sum``."""
    return with_share(duration_stats(trace.cuda_api, ["name"]))


def osrt_summary(trace: Trace) -> pd.DataFrame:
    """Per OS runtime function (libc calls nsys traced with ``-t osrt``, above its duration threshold):
    stats of the call duration. Same rows as ``nsys stats -r osrt_sum``."""
    return with_share(duration_stats(trace.osrt, ["name"]))


MEMCPY_LABEL = {
    "HtoD": "Host-to-Device", "DtoH": "Device-to-Host", "DtoD": "Device-to-Device", "HtoH": "Host-to-Host",
    "PtoP": "Peer-to-Peer", "HtoA": "Host-to-Array", "AtoH": "Array-to-Host", "AtoA": "Array-to-Array",
    "AtoD": "Array-to-Device", "DtoA": "Device-to-Array", "UVM HtoD": "Unified Host-to-Device",
    "UVM DtoH": "Unified Device-to-Host", "UVM DtoD": "Unified Device-to-Device", "Unknown": "Unknown",
}


def nsys_operation(kind: str, nsys: str = "2023") -> str:
    """The name ``nsys stats`` gives a copy kind (``kind``: nsysan's ``HtoD`` ... ``UVM DtoH``) in its
    GPU memory summaries' ``Operation`` column, per nsys version (``nsys``: its year, ``"2022.4"``):
    2022 and before ``[CUDA memcpy HtoD]`` and, for unified memory, ``[CUDA Unified Memory memcpy
    HtoD]``; 2023 and later the export's own label, ``[CUDA memcpy Host-to-Device]``,
    ``[CUDA memcpy Unified Host-to-Device]``."""
    if int(str(nsys).split(".")[0]) <= 2022:
        return f"[CUDA Unified Memory memcpy {kind[4:]}]" if kind.startswith("UVM ") else f"[CUDA memcpy {kind}]"
    return f"[CUDA memcpy {MEMCPY_LABEL.get(kind, kind)}]"


def memcpy_summary(trace: Trace) -> pd.DataFrame:
    """Per copy kind: duration stats, bytes, throughput (bytes / busy time of that kind), and the host
    memory split (pageable vs pinned, from the export's own enum: 0 pageable, 1 pinned)."""
    return memcpy_stats(trace.memcpy)


def memcpy_stats(m: pd.DataFrame) -> pd.DataFrame:
    """``memcpy_summary`` of a frame of copies (the whole trace's, or a window's)."""
    if len(m) == 0:
        return pd.DataFrame(columns=["kind", *STAT_COLUMNS, "total_bytes", "throughput_bytes_per_s",
                                     "pageable_count", "pinned_count", "pageable_bytes", "pinned_bytes"])
    stats = duration_stats(m, ["kind"])
    pageable = (m["host_mem"] == "Pageable").astype("int64")
    pinned = (m["host_mem"] == "Pinned").astype("int64")
    out = _with_byte_sums(stats, m, pageable.to_numpy(), pinned.to_numpy())
    if out is None:  # a missing copy kind: pandas' group-by and merge, as before
        out = _with_byte_sums_by_merge(stats, m, pageable, pinned)
    tn, tb = out["total_ns"].to_numpy(), out["total_bytes"].to_numpy()
    if tn.dtype == np.int64 and tb.dtype == np.int64:  # numpy's division is pandas' here
        with np.errstate(divide="ignore", invalid="ignore"):
            thr = np.where(tn > 0, tb / (tn / 1e9), 0.0)
    else:
        thr = np.where(out["total_ns"] > 0, out["total_bytes"] / (out["total_ns"] / 1e9), 0.0)
    return out.assign(throughput_bytes_per_s=thr, operation=out["kind"].map(MEMCPY_LABEL).fillna(out["kind"]))


def _with_byte_sums(stats: pd.DataFrame, m: pd.DataFrame, pageable: np.ndarray,
                    pinned: np.ndarray) -> pd.DataFrame | None:
    """``stats`` (one row per copy kind) with each kind's bytes, pageable/pinned counts and bytes: the
    columns the group-by and merge below give, summed exactly in int64 (``frames.per_key``); None
    when a kind is missing or bytes are not integers."""
    from nsysan.analyses.frames import per_key

    b = m["bytes"].to_numpy()
    got = per_key([m["kind"].to_numpy(dtype=object, na_value=None)],
                  {"total_bytes": (b, "sum"), "pageable_count": (pageable, "sum"), "pinned_count": (pinned, "sum"),
                   "pageable_bytes": (b * pageable, "sum"), "pinned_bytes": (b * pinned, "sum")},
                  [stats["kind"].tolist()])
    return None if got is None else stats.assign(**got)


def _with_byte_sums_by_merge(stats: pd.DataFrame, m: pd.DataFrame, pageable: pd.Series,
                             pinned: pd.Series) -> pd.DataFrame:
    extra = (m.assign(pageable_count=pageable, pinned_count=pinned, pageable_bytes=m["bytes"] * pageable,
                      pinned_bytes=m["bytes"] * pinned)
             .groupby("kind", sort=True, observed=True)
             .agg(total_bytes=("bytes", "sum"), pageable_count=("pageable_count", "sum"),
                  pinned_count=("pinned_count", "sum"), pageable_bytes=("pageable_bytes", "sum"),
                  pinned_bytes=("pinned_bytes", "sum"))
             .reset_index())
    return stats.merge(extra, on="kind", how="left")


def in_window(df: pd.DataFrame, start_ns: int, end_ns: int, columns: list[str] | None = None) -> pd.DataFrame | None:
    """The rows that start inside ``[start_ns, end_ns)`` (how a window owns an op or a call), only
    ``columns`` of them; None when every row is inside (the whole table's summary then holds)."""
    s = df["start_ns"].to_numpy()
    mask = (s >= start_ns) & (s < end_ns)
    if bool(mask.all()):
        return None
    cols = columns or list(df.columns)
    n = int(np.count_nonzero(mask))
    if n:
        a = int(np.argmax(mask))
        b = len(mask) - int(np.argmax(mask[::-1]))
        if b - a == n:  # one run of rows (a table sorted by start, as loaded): views, not copies
            return pd.DataFrame({c: df[c].array[a:b] for c in cols}, copy=False)
    rows = np.flatnonzero(mask)
    return pd.DataFrame({c: df[c].array.take(rows) for c in cols}, copy=False)


def window_summaries(trace: Trace, start_ns: int, end_ns: int,
                     whole: dict[str, pd.DataFrame] | None = None) -> dict[str, pd.DataFrame]:
    """The kernel, CUDA API and copy summaries of the rows that start in a window (the steady state):
    the same statistics as the whole-capture ones (``whole``, reused when every row is inside), so a
    table can switch between the two."""
    whole = whole or {}
    out = {}
    for key, frame, cols, fn in (
            ("kernels", trace.kernels, ["name", "dur_ns"], lambda d: with_share(duration_stats(d, ["name"]))),
            ("cuda_api", trace.cuda_api, ["name", "dur_ns"], lambda d: with_share(duration_stats(d, ["name"]))),
            ("memcpy", trace.memcpy, ["kind", "dur_ns", "bytes", "host_mem"], memcpy_stats)):
        sub = in_window(frame, start_ns, end_ns, cols if all(c in frame.columns for c in cols) else None)
        out[key] = whole[key] if sub is None and key in whole else fn(frame if sub is None else sub)
    return out


def memset_summary(trace: Trace) -> pd.DataFrame:
    m = trace.memset
    stats = duration_stats(m.assign(kind="memset"), ["kind"])
    if len(m) == 0:
        return stats.assign(total_bytes=pd.Series(dtype="int64"))
    return stats.assign(total_bytes=int(m["bytes"].sum()))


def nvtx_summary(trace: Trace) -> pd.DataFrame:
    """Per NVTX range name (``domain:text``) and style: stats of the CPU range duration. Matches
    ``nsys stats -r nvtx_sum`` (ranges still open at the end of the capture are left out)."""
    r = trace.nvtx.loc[(trace.nvtx["style"] != "Mark") & trace.nvtx["end_ns"].notna()]
    r = r.assign(dur_ns=r["dur_ns"].astype("int64"), name=r["name"].astype(str))
    return with_share(duration_stats(r, ["name", "style"]))


def _bytes(part: pd.DataFrame) -> np.ndarray:
    """A part's bytes column; kernels and graph launches move none: one read-only zero for every
    row (a view, not a column of zeros)."""
    if "bytes" in part:
        return part["bytes"].to_numpy(dtype=np.int64)
    return constant_column(0, len(part), np.int64)


def gpu_ops(trace: Trace) -> pd.DataFrame:
    """All GPU activity in one frame, sorted by start: kernels, memcpy, memset and CUDA Graph launches
    traced as a whole (graph mode). Columns: start_ns, end_ns, dur_ns, device_id, stream_id, pid,
    correlation_id, op ("kernel", "memcpy", "memset", "graph"), name, kind, role (``opclass``: compute,
    communication, memcpy, memset) (categoricals), bytes; and
    the launching call (``join.attach_launch_calls``): tid, api_start_ns, api_end_ns, api_name."""
    from pandas.api.types import union_categoricals

    from nsysan.analyses.join import attach_launch_calls

    cols = ["start_ns", "end_ns", "dur_ns", "device_id", "stream_id", "pid", "correlation_id"]
    parts: list[pd.DataFrame] = []
    names: list[pd.Categorical] = []
    kinds: list[pd.Categorical] = []
    ops_: list[tuple[str, int]] = []

    def cat(values: object, n: int) -> pd.Categorical:
        if isinstance(values, str):  # one name throughout: broadcast codes (``filled``)
            return pd.Categorical.from_codes(filled(0, n, np.int8), categories=pd.Index([values], dtype=object),
                                             validate=False)
        uniq, codes = unique_strings(np.asarray(values, dtype=object).reshape(-1))
        return pd.Categorical.from_codes(codes, categories=pd.Index(uniq, dtype=object), validate=False)

    k, m, s, g = trace.kernels, trace.memcpy, trace.memset, trace.graph_launches
    if len(k):
        parts.append(k[cols])  # no bytes column: zeros, made below only where needed
        nm = k["name"].array
        if isinstance(nm, pd.Categorical):
            nm = pd.Categorical.from_codes(nm.codes, validate=False,
                                           categories=pd.Index(np.asarray(nm.categories, dtype=object), dtype=object))
        names.append(nm if isinstance(nm, pd.Categorical) else cat(k["name"].astype(str).to_numpy(), len(k)))
        kinds.append(cat("", len(k)))
        ops_.append(("kernel", len(k)))
    if len(m):
        parts.append(m[cols].assign(bytes=m["bytes"].to_numpy()))
        names.append(cat(("[memcpy " + m["kind"].astype(str) + "]").to_numpy(), len(m)))
        kinds.append(cat(m["kind"].astype(str).to_numpy(), len(m)))
        ops_.append(("memcpy", len(m)))
    if len(s):
        parts.append(s[cols].assign(bytes=s["bytes"].to_numpy()))
        names.append(cat("[memset]", len(s)))
        kinds.append(cat("memset", len(s)))
        ops_.append(("memset", len(s)))
    if len(g):
        parts.append(g[cols])
        names.append(cat(("[CUDA graph " + g["graph_id"].astype(str) + "]").to_numpy(), len(g)))
        kinds.append(cat("graph", len(g)))
        ops_.append(("graph", len(g)))
    if not parts:
        empty = pd.DataFrame({**{c: pd.Series(dtype="int64") for c in cols},
                              "op": pd.Categorical([]), "name": pd.Categorical([]),
                              "bytes": pd.Series(dtype="int64"), "kind": pd.Categorical([]),
                              "role": pd.Categorical([], categories=["compute", "communication", "memcpy", "memset"])})
        return attach_launch_calls(trace, empty)
    # ids keep the width the loader gave them (int32 where the values allow: no int64 copy of every
    # kernel's ids); mixed widths concatenate to the wider
    ids = ("device_id", "stream_id", "pid", "correlation_id")
    if len(parts) == 1:  # one kind of op (kernels only: common): its columns as they are, no copies
        data = {c: parts[0][c].to_numpy() if c in ids else parts[0][c].to_numpy(dtype=np.int64)
                for c in cols}
        data["bytes"] = _bytes(parts[0])
    else:
        data = {c: np.concatenate([p[c].to_numpy() if c in ids else p[c].to_numpy(dtype=np.int64) for p in parts])
                for c in cols}
        data["bytes"] = np.concatenate([_bytes(p) for p in parts])
    op_names = [o for o, _ in ops_]
    op_codes = filled(0, ops_[0][1], np.int8) if len(ops_) == 1 else \
        np.concatenate([np.full(n, i, dtype=np.int8) for i, (_, n) in enumerate(ops_)])
    frame = pd.DataFrame({
        **{c: data[c] for c in cols},
        "op": pd.Categorical.from_codes(op_codes, categories=pd.Index(op_names, dtype=object), validate=False),
        "name": names[0] if len(names) == 1 else union_categoricals(names), "bytes": data["bytes"],
        "kind": kinds[0] if len(kinds) == 1 else union_categoricals(kinds),
    }, copy=False)
    from nsysan.analyses.opclass import roles

    frame = frame.assign(role=as_column(frame, compact_codes(roles(frame["op"], frame["name"]))))
    return attach_launch_calls(trace, sort_rows(frame, (data["end_ns"], data["start_ns"])))
