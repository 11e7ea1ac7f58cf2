"""Where the CUDA calls came from: each backtraced call's own-code call site, and the calls per
(API name, site).

Call sites: each CUDA call in the steady window with a Python backtrace (``--python-backtrace=cuda``,
joined to its API row by thread and start) or, without one, a native backtrace (``CUDA_CALLCHAINS`` of
its ``callchainId``, joined by process and correlation id), is counted under its own-code frame.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from nsysan.analyses.gpu import Window
from nsysan.analyses.stack_frames import native_own_frame, own_frame, where
from nsysan.trace.samples import Samples

SITE_COLUMNS = ["api", "function", "file", "line", "module", "source", "calls", "total_ns"]
CALL_COLUMNS = ["pid", "tid", "start_ns", "correlation_id", "api", "dur_ns", "function", "file", "line", "module",
                "source"]


def site_calls(samples: Samples | None, cuda_api: pd.DataFrame, window: Window) -> pd.DataFrame:
    """Each CUDA call of the steady window with a backtrace, with its own-code call site (``CALL_COLUMNS``):
    a Python backtrace (taken at the call's start on its thread) joined by (thread, start), else a
    native one (``CUDA_CALLCHAINS``) joined by (process, correlation id)."""
    empty = pd.DataFrame(columns=CALL_COLUMNS)
    if samples is None or len(cuda_api) == 0:
        return empty
    st_all = cuda_api["start_ns"].to_numpy()
    api = cuda_api.loc[(st_all >= window.start_ns) & (st_all < window.end_ns)]
    if len(api) == 0:
        return empty
    site: dict[int, tuple[str, str, int, str, str]] = {}  # api row position -> site
    bt = samples.backtraces
    if len(bt):
        hit = _first_rows(api, ("tid", "start_ns"), bt, ("tid", "ts_ns"))
        for j, stack in zip(hit, bt["stack"].to_numpy()):
            if np.isnan(j):  # no API row in the window at that (thread, start)
                continue
            f = own_frame(samples.stacks[int(stack)])
            if f is not None:
                site.setdefault(int(j), (f[0], f[1], int(f[2]), "", "python"))
    cc = getattr(samples, "cuda_chains", None)
    if cc is not None and len(cc):
        hit = _first_rows(api, ("pid", "correlation_id"), cc, ("pid", "correlation_id"))
        for j, stack in zip(hit, cc["stack"].to_numpy()):
            if np.isnan(j) or int(j) in site:  # no API row, or a Python backtrace already names the site
                continue
            f = native_own_frame(samples.native_stacks[int(stack)])
            if f is not None:
                site[int(j)] = (f[0], "", 0, f[1], "native")
    if not site:
        return empty
    rows = np.array(sorted(site), dtype=np.int64)
    sub = api.iloc[rows]
    vals = [site[int(j)] for j in rows]
    return pd.DataFrame({"pid": sub["pid"].to_numpy(np.int64), "tid": sub["tid"].to_numpy(np.int64),
                         "start_ns": sub["start_ns"].to_numpy(np.int64),
                         "correlation_id": sub["correlation_id"].to_numpy(np.int64),
                         "api": sub["name"].astype(str).to_numpy(), "dur_ns": sub["dur_ns"].to_numpy(np.int64),
                         "function": [v[0] for v in vals], "file": [v[1] for v in vals], "line": [v[2] for v in vals],
                         "module": [v[3] for v in vals], "source": [v[4] for v in vals]}, columns=CALL_COLUMNS)


def aggregate_sites(calls: pd.DataFrame | None) -> pd.DataFrame:
    """Per (API name, call site): calls and their total API time (``SITE_COLUMNS``), most time first."""
    if calls is None or len(calls) == 0:
        return pd.DataFrame(columns=SITE_COLUMNS)
    g = calls.groupby(["api", "function", "file", "line", "module", "source"],
                      sort=False)["dur_ns"].agg(["size", "sum"])
    out = g.reset_index().rename(columns={"size": "calls", "sum": "total_ns"})
    out["calls"] = out["calls"].astype(np.int64)
    out["total_ns"] = out["total_ns"].astype(np.int64)
    return out.sort_values(["total_ns", "api", "function"], ascending=[False, True, True], kind="stable")[
        SITE_COLUMNS].reset_index(drop=True)



def _first_rows(api: pd.DataFrame, api_cols: tuple[str, str], other: pd.DataFrame,
                other_cols: tuple[str, str]) -> np.ndarray:
    """Per row of ``other``, the position of the first row of ``api`` with the same pair of values
    (``api_cols`` against ``other_cols``); NaN where none has it."""
    pos = pd.Series(np.arange(len(api)), index=pd.MultiIndex.from_arrays([api[c].to_numpy(np.int64) for c in api_cols]))
    pos = pos[~pos.index.duplicated(keep="first")]
    return pos.reindex(pd.MultiIndex.from_arrays([other[c].to_numpy(np.int64) for c in other_cols])).to_numpy()


def call_sites(samples: Samples | None, cuda_api: pd.DataFrame, window: Window) -> pd.DataFrame:
    """Where the CUDA calls of the steady state came from: per (API name, own-code frame), calls and
    their total API time (``aggregate_sites`` of ``site_calls``)."""
    return aggregate_sites(site_calls(samples, cuda_api, window))


def site_text(r: Mapping[str, Any]) -> str:
    """'cudaStreamSynchronize from fetch_result() waits.py:67 (59 calls)' or
    'cudaMalloc from ns::alloc_block in libc10_cuda.so (12 calls)'."""
    return f"{r['api']} from {where(r)} ({int(r['calls'])} call{'s' if int(r['calls']) != 1 else ''})"


def site_note(sites: pd.DataFrame | None, api_names: tuple[str, ...] | None, n: int = 2,
              calls: pd.DataFrame | None = None, correlation: Iterable[tuple[int, int]] | None = None) -> str:
    """' Call sites (Python backtraces): fetch_result() waits.py:67 (72 calls), ...' for the given API
    names ('' without backtraces). With ``calls`` (``site_calls``) and ``correlation`` ((pid,
    correlation id) pairs), only those calls (e.g. the pageable copies' own calls); ``api_names`` None:
    every API name."""
    if correlation is not None and calls is not None and len(calls):
        keys = {(int(p), int(c)) for p, c in correlation}
        pk = list(zip(calls["pid"].tolist(), calls["correlation_id"].tolist()))
        sites = aggregate_sites(calls.loc[[k in keys for k in pk]])
    if sites is None or len(sites) == 0:
        return ""
    s = sites if api_names is None else sites.loc[sites["api"].isin(list(api_names))]
    if len(s) == 0:
        return ""
    recs = s.head(n).to_dict("records")
    kinds = sorted({r.get("source", "python") for r in recs})
    label = " and ".join({"python": "Python backtraces", "native": "CUDA backtraces"}[k] for k in kinds)
    return f" Call sites ({label}): " + "; ".join(site_text(r) for r in recs) + "."


def calls_in(calls: pd.DataFrame | None, ranges: pd.DataFrame) -> pd.DataFrame:
    """The backtraced calls (``site_calls``) made inside these ranges on the ranges' own threads."""
    if calls is None or len(calls) == 0 or len(ranges) == 0:
        return pd.DataFrame(columns=CALL_COLUMNS)
    keep = np.zeros(len(calls), dtype=bool)
    st = calls["start_ns"].to_numpy()
    cp, ct = calls["pid"].to_numpy(), calls["tid"].to_numpy()
    for (pid, tid), r in ranges.groupby(["pid", "tid"], sort=False):
        m = np.flatnonzero((cp == pid) & (ct == tid))
        if not m.size:
            continue
        s0 = r["start_ns"].to_numpy(np.int64)
        e0 = r["end_ns"].to_numpy(np.int64)
        order = np.argsort(s0, kind="stable")
        s0, e0 = s0[order], np.maximum.accumulate(e0[order])
        k = np.searchsorted(s0, st[m], side="right") - 1
        ok = k >= 0
        ok[ok] = st[m][ok] < e0[k[ok]]
        keep[m[ok]] = True
    return calls.loc[keep]
