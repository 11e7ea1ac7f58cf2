"""What ``nsys analyze`` would report on this trace, computed by nsysan, and where nsysan covers it.

nsys' expert-system rules (2022.4 names ``cuda-async-memcpy`` ..., 2023+ ``cuda_memcpy_async`` ...)
list instances without causes or ranking, over the whole capture. nsysan's rules judge the steady
state and rank by time saved. So that nothing nsys reports is lost, each nsys rule's instance set is
rebuilt here with nsys' own definitions (its SQL, read from the 2022.4 rules), split into the steady
state and the time outside it (setup, warm-up, teardown: reported apart, not ranked), and tied to the
nsysan rules that judge the same problem.

Definitions (as nsys):

* ``cuda_memcpy_async``: copies launched by ``cudaMemcpy*Async*`` with a pageable source or
  destination (export enum 0).
* ``cuda_memcpy_sync``: copies launched by ``cudaMemcpy*`` without ``Async``, except host-to-device
  copies of 64,000 bytes or less and copies whose recorded source and destination device are one.
* ``cuda_memset_sync``: memsets launched by ``cudaMemset*`` without ``async`` on pinned or managed
  memory (enum 1 or 4).
* ``cuda_api_sync``: ``cudaDeviceSynchronize*`` and ``cudaStreamSynchronize*`` calls.
* ``gpu_gaps``: per process and device, gaps over ``gap_ns`` (500 ms) between kernels, copies and
  memsets.
* ``gpu_time_util``: per process and device, the span from the first to the last op cut into
  ``chunks`` (30) equal chunks; chunks under ``util_pct`` (50%) busy, consecutive ones merged.

Where nsysan deliberately differs: API names match case-insensitively as SQLite's LIKE does, but a
copy is tied to its call by process *and* correlation id (nsys joins on the correlation id alone,
which pairs calls of different processes); utilization is the union of busy time, never above 100%
(nsys sums overlapping ops, and adds its own profiler overhead, which nsysan does not load).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from nsysan.analyses import intervals as iv
from nsysan.analyses.frames import category_mask, group_rows, name_in, rows_of
from nsysan.analyses.gpu import Window
from nsysan.analyses.join import first_match, pack_keys
from nsysan.trace.model import Trace

# nsys rule (2023+ name) -> (2022 CLI name, nsysan rules that judge the same problem, what it is)
NSYS_RULES: dict[str, tuple[str, tuple[str, ...], str]] = {
    "cuda_memcpy_async": ("cuda-async-memcpy", ("pageable-memcpy", "sync-memcpy"),
                          "async copies with pageable memory (they run synchronously)"),
    "cuda_memcpy_sync": ("cuda-sync-memcpy", ("sync-memcpy",), "synchronous copies"),
    "cuda_memset_sync": ("cuda-sync-memset", ("sync-memcpy",), "synchronous memsets"),
    "cuda_api_sync": ("cuda-sync-api", ("sync-api",), "device/stream synchronization calls"),
    "gpu_gaps": ("gpu-starv", ("host-bound-gap", "gpu-low-util", "launch-bound", "sync-api"),
                 "GPU idle gaps over 500 ms"),
    "gpu_time_util": ("gpu-low-util", ("gpu-low-util", "host-bound-gap"),
                      "regions under 50% GPU utilization"),
}

COLUMNS = ["start_ns", "dur_ns", "pid", "device_id", "name"]


@dataclass(frozen=True)
class NsysRuleParams:
    gap_ns: int = 500_000_000
    chunks: int = 30
    util_pct: float = 50.0


def _api_like(names: pd.Series, prefix: str, *, with_: str | None = None, without: str | None = None) -> np.ndarray:
    """nsys' ``value LIKE 'prefix%'`` (+ ``LIKE '%with_%'`` / ``NOT LIKE '%without%'``): case-insensitive,
    tested once per distinct name."""
    p, w, wo = prefix.lower(), (with_ or "").lower(), (without or "").lower()
    return category_mask(names, lambda s: s.lower().startswith(p) and w in s.lower()
                         and not (wo and wo in s.lower()))


def _frame(df: pd.DataFrame, name: Any = None) -> pd.DataFrame:
    if len(df) == 0:
        return pd.DataFrame({c: pd.Series(dtype="int64" if c != "name" else object) for c in COLUMNS})
    return pd.DataFrame({"start_ns": df["start_ns"].to_numpy(np.int64), "dur_ns": df["dur_ns"].to_numpy(np.int64),
                         "pid": df["pid"].to_numpy(np.int64), "device_id": df["device_id"].to_numpy(np.int64)
                         if "device_id" in df else np.full(len(df), -1, np.int64),
                         "name": (df[name].astype(str).to_numpy() if name else np.full(len(df), "", object))})


def _gpu_ops(ops: pd.DataFrame) -> pd.DataFrame:
    """nsys' GPU ops: kernels, copies and memsets (not whole-graph launches), with ``start > 0``."""
    keep = ~name_in(ops["op"], ("graph",)) & (ops["start_ns"].to_numpy() > 0)
    cols = ["start_ns", "end_ns", "pid", "device_id"]
    return ops[cols] if bool(keep.all()) else ops.loc[keep, cols]


def _with_api_name(table: pd.DataFrame, ops: pd.DataFrame, op: str) -> pd.DataFrame:
    """``table`` (copies or memsets) with the launching call's name, taken from the join ``gpu_ops``
    already made (matched on process and correlation id within that op's few rows)."""
    sub = ops.loc[name_in(ops["op"], (op,))]
    idx = first_match(pack_keys(sub["pid"].to_numpy(), sub["correlation_id"].to_numpy()),
                      pack_keys(table["pid"].to_numpy(), table["correlation_id"].to_numpy()))
    names = sub["api_name"].array
    codes = np.where(idx >= 0, np.asarray(names.codes)[np.maximum(idx, 0)], -1) if len(sub) else \
        np.full(len(table), -1)
    return table.assign(api_name=pd.Categorical.from_codes(codes, categories=names.categories, validate=False))


def _per_process_device(ops: pd.DataFrame) -> list[tuple[int, int, np.ndarray, np.ndarray]]:
    """(pid, device, starts, ends) per process and device, in key order, rows in frame order."""
    st, en = ops["start_ns"].to_numpy(), ops["end_ns"].to_numpy()
    return [(pid, dev, rows_of(st, rows), rows_of(en, rows))
            for (pid, dev), rows in group_rows(ops["pid"].to_numpy(), ops["device_id"].to_numpy())]


def _sorted(v: np.ndarray) -> np.ndarray:
    return v if v.size < 2 or bool((v[1:] >= v[:-1]).all()) else np.sort(v)


def _gaps(ops: pd.DataFrame, gap_ns: int) -> pd.DataFrame:
    rows = []
    for pid, dev, st, en in _per_process_device(ops):
        s, e = _sorted(st), _sorted(en)
        d = s[1:] - e[:-1]
        for i in np.flatnonzero(d > gap_ns):
            rows.append((int(e[i]), int(d[i]), int(pid), int(dev), ""))
    return pd.DataFrame(rows, columns=COLUMNS) if rows else _frame(ops.iloc[0:0])


def _low_util(ops: pd.DataFrame, chunks: int, util_pct: float) -> pd.DataFrame:
    rows = []
    for pid, dev, s, e in _per_process_device(ops):
        lo, hi = int(s.min()), int(e.max())
        size = int(np.ceil((hi - lo) / chunks))
        if size <= 0:
            continue
        us, ue = iv.merge(s, e)
        cum = np.concatenate([[0], np.cumsum(ue - us)])
        edges = np.minimum(lo + np.arange(chunks + 1, dtype=np.int64) * size, hi)
        k = np.searchsorted(us, edges, side="right")  # merged intervals starting at or before each edge
        covered = cum[k] - np.where(k > 0, np.maximum(0, ue[np.maximum(k - 1, 0)] - edges), 0)  # busy before edge
        run: list[tuple[int, int, float]] = []
        for c in range(chunks):
            cs, ce = int(edges[c]), int(edges[c + 1])
            if cs >= ce:
                break
            busy = int(covered[c + 1] - covered[c])
            pct = 100.0 * busy / (ce - cs)
            if pct < util_pct:
                run.append((cs, ce, pct))
                continue
            if run:
                rows.append(_merge(run, pid, dev))
                run = []
        if run:
            rows.append(_merge(run, pid, dev))
    return pd.DataFrame(rows, columns=[*COLUMNS, "util_pct"]) if rows else \
        _frame(ops.iloc[0:0]).assign(util_pct=pd.Series(dtype="float64"))


def _merge(run: list[tuple[int, int, float]], pid: Any, dev: Any) -> tuple[int, int, int, int, str, float]:
    size = sum(ce - cs for cs, ce, _ in run)
    avg = sum((ce - cs) * p for cs, ce, p in run) / size
    return (run[0][0], run[-1][1] - run[0][0], int(pid), int(dev), "", round(avg, 1))


def instances(trace: Trace, params: NsysRuleParams | None = None,
              ops: pd.DataFrame | None = None) -> dict[str, pd.DataFrame]:
    """Per nsys rule, its instances over the whole trace: start_ns, dur_ns, pid, device_id, name
    (the API, for call-based rules), plus util_pct for ``gpu_time_util``. ``ops`` is
    ``summaries.gpu_ops(trace)`` when the caller has it (its launch join is reused)."""
    p = params or NsysRuleParams()
    if ops is None:
        from nsysan.analyses.summaries import gpu_ops

        ops = gpu_ops(trace)
    out: dict[str, pd.DataFrame] = {}
    m = _with_api_name(trace.memcpy, ops, "memcpy") if len(trace.memcpy) else trace.memcpy.assign(api_name=None)
    if len(m):
        pageable = (m["src_kind"].to_numpy() == 0) | (m["dst_kind"].to_numpy() == 0)
        is_async = _api_like(m["api_name"], "cudaMemcpy", with_="async")
        out["cuda_memcpy_async"] = _frame(m.loc[pageable & is_async], "api_name")
        small_h2d = (m["bytes"].to_numpy() <= 64000) & (m["copy_kind"].to_numpy() == 1)
        if "src_device_id" in m and "dst_device_id" in m:
            src, dst = m["src_device_id"], m["dst_device_id"]
            same_dev = (src.notna() & (src == dst)).fillna(False).to_numpy(bool)
        else:
            same_dev = np.zeros(len(m), bool)
        sync = _api_like(m["api_name"], "cudaMemcpy", without="async")
        out["cuda_memcpy_sync"] = _frame(m.loc[sync & ~small_h2d & ~same_dev], "api_name")
    else:
        out["cuda_memcpy_async"] = out["cuda_memcpy_sync"] = _frame(m)
    ms = trace.memset
    if len(ms):
        ms = _with_api_name(ms, ops, "memset")
        sel = _api_like(ms["api_name"], "cudaMemset", without="async") & ms["mem_kind"].isin([1, 4]).to_numpy(bool)
        out["cuda_memset_sync"] = _frame(ms.loc[sel], "api_name")
    else:
        out["cuda_memset_sync"] = _frame(ms)
    api = trace.cuda_api
    sel = _api_like(api["name"], "cudaDeviceSynchronize") | _api_like(api["name"], "cudaStreamSynchronize") \
        if len(api) else np.zeros(0, bool)
    out["cuda_api_sync"] = _frame(api.loc[sel], "name") if len(api) else _frame(api)
    nsys_ops = _gpu_ops(ops)
    out["gpu_gaps"] = _gaps(nsys_ops, p.gap_ns)
    out["gpu_time_util"] = _low_util(nsys_ops, p.chunks, p.util_pct)
    return out


def cross_check(found: dict[str, pd.DataFrame], steady: Window, fired: set[str]) -> pd.DataFrame:
    """One row per nsys rule: how many instances nsys would list, how many fall in the steady state
    (an instance counts there when it starts inside it) and outside it, which nsysan rules judge that
    problem, which of them fired, and a one-line verdict."""
    rows = []
    for rule, (cli, ours, what) in NSYS_RULES.items():
        df = found[rule]
        ins = ((df["start_ns"] >= steady.start_ns) & (df["start_ns"] < steady.end_ns)).to_numpy(bool)
        n_in, n_out = int(ins.sum()), int((~ins).sum())
        t_in, t_out = int(df["dur_ns"].to_numpy()[ins].sum()), int(df["dur_ns"].to_numpy()[~ins].sum())
        hit = [r for r in ours if r in fired] if n_in else []
        if len(df) == 0:
            verdict = "none: nsys would report nothing either"
        elif n_in == 0:
            verdict = (f"outside the steady state only ({n_out} in setup, warm-up or teardown): a one-time cost, "
                       f"reported apart and not ranked")
        elif hit:
            verdict = f"{n_in} in the steady state, judged by {', '.join(hit)}" + \
                (f"; {n_out} more outside it (one-time)" if n_out else "")
        else:
            verdict = (f"{n_in} in the steady state, under the thresholds of {', '.join(ours)} "
                       f"(nsys lists every instance; nsysan ranks what costs time)")
        rows.append({"nsys_rule": rule, "nsys_2022_name": cli, "what": what, "count": len(df),
                     "total_ns": int(df["dur_ns"].sum()), "steady_count": n_in, "steady_ns": t_in,
                     "outside_count": n_out, "outside_ns": t_out, "nsysan_rules": ", ".join(ours),
                     "fired": ", ".join(hit), "verdict": verdict})
    return pd.DataFrame(rows)
