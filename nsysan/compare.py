"""Compare analyses: a before/after diff, a ladder table over many traces, and a regression gate.

Everything here works on the JSON form of an analysis (schema ``nsysan.analysis/2``), so a saved
``--json`` output from an earlier run (for example a CI artifact) is as good a baseline as a trace.

Matching is by **name** only -- kernel names, NVTX range names (``domain:text``), rule ids, copy
directions -- never by process, thread or stream ids, which change from run to run.

**Iteration time is the period** (time between consecutive iterations' completions): it gets
smaller when the program gets faster, also when the CPU queues work ahead of the GPU, where the
latency (start to completion) grows with the queue even as the program speeds up. The latency is
shown beside it, never gated by default.

Noise: the per-iteration periods of the steady state (warm-up excluded) of both runs are compared
with a two-sided Mann-Whitney U test (normal approximation with tie correction). A change counts as
real when ``p < alpha``; the gate fails when the chosen metric got worse by more than the allowed
fraction *and* the change is real. With fewer than ``MIN_SAMPLES`` iterations on a side, no test is
possible and the verdict says so (the threshold alone decides).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from nsysan.errors import UsageError

MIN_SAMPLES = 5
ALPHA = 0.01

# name -> (getter, direction): +1 means higher is better, -1 lower is better
METRICS: dict[str, tuple[str, int]] = {
    "iter_p50_ns": ("iteration time p50 (period between completions, steady state)", -1),
    "iter_p90_ns": ("iteration time p90 (period, steady state)", -1),
    "iter_p99_ns": ("iteration time p99 (period, steady state)", -1),
    "iter_mean_ns": ("iteration time mean (period, steady state)", -1),
    "throughput_per_s": ("iterations per second (steady state)", +1),
    "iter_latency_p50_ns": ("iteration latency p50 (start to completion; includes queueing)", -1),
    "timed_region_ns": ("timed region ('Total Elapsed Time'), CPU", -1),
    "timed_region_gpu_ns": ("timed region including its GPU work", -1),
    "gpu_busy_frac": ("GPU busy (steady state)", +1),
    "gpu_idle_ns": ("GPU idle (steady state)", -1),
    "overlap_frac_of_copy": ("share of copy time overlapped with compute", +1),
    "kernel_total_ns": ("total kernel time (CUDA Graph launches included)", -1),
    "launch_api_med_ns": ("median kernel launch call", -1),
    "launch_dominated_frac": ("kernels whose launch outlasts them", -1),
    "htod_throughput_bytes_per_s": ("host-to-device copy throughput", +1),
    "gap_total_ns": ("GPU idle gaps, total", -1),
}
GATE_METRICS = ("iter_p50_ns", "iter_p90_ns", "iter_p99_ns", "iter_mean_ns", "iter_latency_p50_ns", "timed_region_ns",
                "timed_region_gpu_ns", "kernel_total_ns", "gpu_idle_ns")


# The parts of a saved ``nsysan.analysis/2`` file that diff, compare and the gate read, and their
# types. A saved file is input like any other: each of these is checked before use, and a wrong one
# is named ("kernels.by_name[3].total_ns: expected a number, got null"). "num?" may be null.
_NUM, _NUM_NULL, _STR, _STR_NULL, _BOOL_NULL = "num", "num?", "str", "str?", "bool?"
SAVED_SHAPE: dict[str, Any] = {
    "trace": {"cuda_graph_trace": _STR_NULL},
    "iterations": {"range": _STR_NULL,
                   "stats": {k: _NUM_NULL for k in ("p50_ns", "p90_ns", "p99_ns", "mean_ns", "throughput_per_s",
                                                    "latency_p50_ns", "queue_depth_p50")}
                   | {"latency_includes_queueing": _BOOL_NULL},
                   "timed_regions": [{"cpu_ns": _NUM, "with_gpu_ns": _NUM}],
                   "per_iteration": [{"period_ns": _NUM_NULL, "latency_ns": _NUM, "warmup": _BOOL_NULL}]},
    "gpu": {"steady": [{"busy_ns": _NUM, "idle_ns": _NUM}]},
    "overlap": {"by_direction": [{"direction": _STR_NULL, "copy_ns": _NUM, "overlap_ns": _NUM}]},
    "launch": {"kernels": {"api_med_ns": _NUM_NULL, "launch_dominated_frac": _NUM_NULL}},
    "memcpy": {"by_kind": [{"kind": _STR_NULL, "throughput_bytes_per_s": _NUM_NULL}]},
    "gaps": {"summary": {"total_ns": _NUM_NULL}},
    "kernels": {"by_name": [{"name": _STR, "total_ns": _NUM, "count": _NUM, "med_ns": _NUM_NULL}]},
    "nvtx": {"by_name": [{"name": _STR, "total_ns": _NUM, "count": _NUM, "med_ns": _NUM_NULL,
                          "style": _STR_NULL}]},
    "graph_launches": {"total_ns": _NUM_NULL},
    "findings": [{"rule": _STR, "title": _STR_NULL, "impact_ns": _NUM_NULL}],
}
_REQUIRED_IN_ROW = {"latency_ns", "cpu_ns", "with_gpu_ns", "busy_ns", "idle_ns", "copy_ns", "overlap_ns", "name",
                    "total_ns", "count", "rule"}


def _kind(v: Any) -> str:
    return "null" if v is None else {bool: "a boolean", str: "a string", dict: "an object", list: "a list"}.get(
        type(v), "a number" if isinstance(v, (int, float)) else type(v).__name__)


def validate_saved(d: Any, where: str = "") -> str | None:
    """The first field of a saved analysis that does not have the documented type, as
    ``"path: expected ..., got ..."``; None when everything diff and compare read is well formed."""
    return _check(d, SAVED_SHAPE, where)


def _check(v: Any, shape: Any, where: str) -> str | None:
    if isinstance(shape, dict):
        if v is None and where:  # a section may be absent or null ("no such data")
            return None
        if not isinstance(v, dict):
            return f"{where or 'top level'}: expected an object, got {_kind(v)}"
        for k, sub in shape.items():
            if k not in v:
                if where and k in _REQUIRED_IN_ROW:
                    return f"{where}.{k}: missing"
                continue
            bad = _check(v[k], sub, f"{where}.{k}" if where else k)
            if bad:
                return bad
        return None
    if isinstance(shape, list):
        if v is None:
            return None
        if not isinstance(v, list):
            return f"{where}: expected a list, got {_kind(v)}"
        for i, row in enumerate(v):
            if not isinstance(row, dict):
                return f"{where}[{i}]: expected an object, got {_kind(row)}"
            bad = _check(row, shape[0], f"{where}[{i}]")
            if bad:
                return bad
        return None
    nullable = shape.endswith("?")
    if v is None:
        return None if nullable else f"{where}: expected {'a number' if shape.startswith('num') else 'a string'}, got null"
    if shape.startswith("num"):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or abs(v) > 1e30:
            return f"{where}: expected a finite number, got {_kind(v) if not isinstance(v, (int, float)) else v}"
    elif shape.startswith("str"):
        if not isinstance(v, str):
            return f"{where}: expected a string, got {_kind(v)}"
    elif shape.startswith("bool") and not isinstance(v, bool):
        return f"{where}: expected true or false, got {_kind(v)}"
    return None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def load(source: str | Path, iteration_range: str | None = None) -> dict[str, Any]:
    """An analysis as a dict: from a saved nsysan JSON file, or by analysing a trace."""
    from nsysan.units import clean_text

    path = Path(source)
    if path.suffix == ".json":
        from nsysan.cli import read_small_file

        shown = clean_text(path)
        raw = read_small_file(path, "saved analysis")
        try:
            d = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
        except RecursionError:
            raise UsageError(f"{shown}: not an nsysan JSON file (nested too deeply)") from None
        except (UnicodeDecodeError, ValueError) as e:  # JSONDecodeError is a ValueError
            raise UsageError(f"{shown}: not an nsysan JSON file ({clean_text(e)})") from e
        if isinstance(d, dict) and d.get("schema") == "nsysan.analysis/1":
            raise UsageError(f"{shown}: an nsysan.analysis/1 file, whose iteration times are latencies; "
                             "analyse the trace again (nsysan.analysis/2 compares periods)")
        if not isinstance(d, dict) or d.get("schema") != "nsysan.analysis/2":
            raise UsageError(f"{shown}: not an nsysan analysis (expected schema nsysan.analysis/2)")
        bad = validate_saved(d)
        if bad:
            raise UsageError(f"{shown}: a damaged nsysan.analysis/2 file: {clean_text(bad)}",
                             hint="write it again with nsysan analyze TRACE --json OUT.json")
        return d
    from nsysan.analysis import Params, analyze
    from nsysan.report.jsonout import analysis_to_dict
    from nsysan.trace import open_trace

    return analysis_to_dict(analyze(open_trace(path), Params(iteration_range=iteration_range)))


def finite(v: Any) -> Any:
    """``v`` with every NaN or infinite float replaced by None: JSON has no such numbers."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [finite(x) for x in v]
    if isinstance(v, np.generic):
        return finite(v.item())
    return v


def dumps(d: dict[str, Any]) -> str:
    """A diff or ladder as strict JSON (sorted keys, no NaN)."""
    return json.dumps(finite(d), sort_keys=True, indent=1, allow_nan=False, default=str) + "\n"


def headline(d: dict[str, Any]) -> dict[str, float | None]:
    """The metrics of ``METRICS`` from one analysis (None where the trace has no such thing)."""
    st = (d.get("iterations") or {}).get("stats") or {}
    regions = (d.get("iterations") or {}).get("timed_regions") or []
    steady = (d.get("gpu") or {}).get("steady") or []
    overlap = [r for r in (d.get("overlap") or {}).get("by_direction") or [] if r.get("direction") == "all"]
    launch = (d.get("launch") or {}).get("kernels") or {}
    htod = [r for r in (d.get("memcpy") or {}).get("by_kind") or [] if r.get("kind") == "HtoD"]
    gaps = ((d.get("gaps") or {}).get("summary") or {})
    busy = sum(float(r.get("busy_ns", 0)) for r in steady)
    span = sum(float(r.get("busy_ns", 0)) + float(r.get("idle_ns", 0)) for r in steady)

    def num(v: Any) -> float | None:
        return None if v is None else float(v)

    copy_ns = sum(float(r.get("copy_ns", 0)) for r in overlap)
    return {
        "iter_p50_ns": num(st.get("p50_ns")), "iter_p90_ns": num(st.get("p90_ns")),
        "iter_p99_ns": num(st.get("p99_ns")), "iter_mean_ns": num(st.get("mean_ns")),
        "throughput_per_s": num(st.get("throughput_per_s")),
        "iter_latency_p50_ns": num(st.get("latency_p50_ns")),
        "timed_region_ns": num(regions[0]["cpu_ns"]) if regions else None,
        "timed_region_gpu_ns": num(regions[0]["with_gpu_ns"]) if regions else None,
        "gpu_busy_frac": busy / span if span else None,
        "gpu_idle_ns": sum(float(r.get("idle_ns", 0)) for r in steady) if steady else None,
        "overlap_frac_of_copy": (sum(float(r.get("overlap_ns", 0)) for r in overlap) / copy_ns) if copy_ns else None,
        "kernel_total_ns": float(sum(r["total_ns"] for r in (d.get("kernels") or {}).get("by_name") or []))
        + float((d.get("graph_launches") or {}).get("total_ns") or 0),
        "launch_api_med_ns": num(launch.get("api_med_ns")),
        "launch_dominated_frac": num(launch.get("launch_dominated_frac")),
        "htod_throughput_bytes_per_s": num(htod[0].get("throughput_bytes_per_s")) if htod else None,
        "gap_total_ns": num(gaps.get("total_ns")),
    }


def steady_periods(d: dict[str, Any]) -> np.ndarray:
    """The steady-state iteration periods (a sequence's first iteration has none); the latencies
    when no sequence has two steady iterations (the headline falls back the same way)."""
    rows = [r for r in (d.get("iterations") or {}).get("per_iteration") or [] if not r.get("warmup")]
    per = [r["period_ns"] for r in rows if r.get("period_ns") is not None and r["period_ns"] >= 0]
    return np.array(per if per else [r["latency_ns"] for r in rows], dtype=np.float64)


def mann_whitney(a: np.ndarray, b: np.ndarray) -> float | None:
    """Two-sided p-value of the Mann-Whitney U test (normal approximation, tie-corrected)."""
    n1, n2 = len(a), len(b)
    if n1 < MIN_SAMPLES or n2 < MIN_SAMPLES:
        return None
    allv = np.concatenate([a, b])
    order = np.argsort(allv, kind="mergesort")
    ranks = np.empty(len(allv), dtype=np.float64)
    sv = allv[order]
    # average ranks for ties
    uniq, first, counts = np.unique(sv, return_index=True, return_counts=True)
    avg = first + (counts - 1) / 2.0 + 1.0
    ranks[order] = np.repeat(avg, counts)
    u1 = ranks[:n1].sum() - n1 * (n1 + 1) / 2.0
    mu = n1 * n2 / 2.0
    n = n1 + n2
    tie = float(((counts ** 3) - counts).sum())
    var = n1 * n2 / 12.0 * ((n + 1) - tie / (n * (n - 1)))
    if var <= 0:
        return 1.0
    z = (abs(u1 - mu) - 0.5) / math.sqrt(var)
    return float(math.erfc(max(z, 0.0) / math.sqrt(2)))


@dataclass
class Diff:
    base: str
    new: str
    metrics: list[dict[str, Any]]
    kernels: list[dict[str, Any]]
    nvtx: list[dict[str, Any]]
    findings: dict[str, list[dict[str, Any]]]
    noise: dict[str, Any]
    gate: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": "nsysan.diff/1", "base": self.base, "new": self.new, "metrics": self.metrics,
                "kernels": self.kernels, "nvtx": self.nvtx, "findings": self.findings, "noise": self.noise,
                "gate": self.gate, "notes": self.notes}


def _delta(b: float | None, n: float | None) -> tuple[float | None, float | None]:
    if b is None or n is None:
        return None, None
    return n - b, (n / b if b else (1.0 if n == 0 else None))


def _by_name(rows: list[dict[str, Any]], key: str = "name") -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        k = str(r.get(key))
        if "style" in r:
            k = f"{k} [{r['style']}]"
        out.setdefault(k, r)
    return out


def _table_diff(base: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    b, n = _by_name(base), _by_name(new)
    rows = []
    for name in sorted(set(b) | set(n)):
        rb, rn = b.get(name), n.get(name)
        status = "new" if rb is None else "vanished" if rn is None else "both"
        tb = float(rb["total_ns"]) if rb else 0.0
        tn = float(rn["total_ns"]) if rn else 0.0
        rows.append({"name": name, "status": status, "base_count": int(rb["count"]) if rb else 0,
                     "new_count": int(rn["count"]) if rn else 0, "base_total_ns": int(tb), "new_total_ns": int(tn),
                     "delta_total_ns": int(tn - tb),
                     "base_med_ns": rb.get("med_ns") if rb else None, "new_med_ns": rn.get("med_ns") if rn else None})
    rows.sort(key=lambda r: (-abs(r["delta_total_ns"]), r["name"]))
    return rows


def diff(base: dict[str, Any], new: dict[str, Any], *, base_label: str = "base", new_label: str = "new",
         alpha: float = ALPHA) -> Diff:
    hb, hn = headline(base), headline(new)
    metrics = []
    for key, (label, direction) in METRICS.items():
        d, ratio = _delta(hb[key], hn[key])
        verdict = None
        if d is not None:
            verdict = "same" if d == 0 else ("better" if d * direction > 0 else "worse")
        metrics.append({"metric": key, "label": label, "base": hb[key], "new": hn[key], "delta": d, "ratio": ratio,
                        "higher_is_better": direction > 0, "verdict": verdict})
    lb, ln = steady_periods(base), steady_periods(new)
    p = mann_whitney(lb, ln)
    noise = {"test": "Mann-Whitney U, two-sided", "alpha": alpha, "base_samples": int(len(lb)),
             "new_samples": int(len(ln)), "p_value": p,
             "significant": (p is not None and p < alpha),
             "base_iqr_ns": _iqr(lb), "new_iqr_ns": _iqr(ln)}
    if p is None:
        noise["note"] = (f"fewer than {MIN_SAMPLES} steady-state iterations on one side: differences cannot be "
                         "told from noise")
    elif p >= alpha:
        noise["note"] = f"the iteration time distributions are not distinguishable (p = {p:.3g})"
    else:
        noise["note"] = f"the iteration time distributions differ (p = {p:.3g})"
    fb = {f["rule"]: f for f in base.get("findings") or []}
    fn = {f["rule"]: f for f in new.get("findings") or []}

    def brief(f: dict[str, Any], other: dict[str, Any] | None = None) -> dict[str, Any]:
        out = {"rule": f["rule"], "title": f.get("title"), "impact_ns": f.get("impact_ns", 0)}
        if other is not None:
            out["base_impact_ns"] = other.get("impact_ns", 0)
        return out

    findings = {
        "resolved": [brief(fb[r]) for r in sorted(set(fb) - set(fn))],
        "remaining": [brief(fn[r], fb[r]) for r in sorted(set(fb) & set(fn))],
        "new": [brief(fn[r]) for r in sorted(set(fn) - set(fb))],
    }
    notes = []
    rb, rn = (base.get("iterations") or {}).get("range"), (new.get("iterations") or {}).get("range")
    if rb != rn:
        notes.append(f"iteration ranges differ: {rb!r} vs {rn!r}; iteration metrics compare different things")
    gb, gn = ((x.get("trace") or {}).get("cuda_graph_trace") for x in (base, new))
    if gb and gn and gb != gn and "none" not in (gb, gn):
        notes.append(f"CUDA Graphs were traced differently ({gb} vs {gn}: --cuda-graph-trace=graph records one "
                     "entry per graph launch, =node each kernel): compare the GPU totals, not the kernel tables")
    for label, x in ((base_label, base), (new_label, new)):
        st = (x.get("iterations") or {}).get("stats") or {}
        if st.get("latency_includes_queueing"):
            notes.append(f"{label}: the CPU runs ahead of the GPU (queue depth p50 {st.get('queue_depth_p50')}); its "
                         "iteration latency includes queueing, so the period is compared")
    return Diff(base_label, new_label, metrics,
                _table_diff((base.get("kernels") or {}).get("by_name") or [], (new.get("kernels") or {}).get("by_name") or []),
                _table_diff((base.get("nvtx") or {}).get("by_name") or [], (new.get("nvtx") or {}).get("by_name") or []),
                findings, noise, notes=notes)


def _iqr(v: np.ndarray) -> float | None:
    if len(v) == 0:
        return None
    q1, q3 = np.percentile(v, [25, 75])
    return float(q3 - q1)


def parse_threshold(text: str) -> float:
    """'5%' -> 0.05; '0.05' -> 0.05."""
    t = text.strip()
    try:
        v = float(t[:-1]) / 100.0 if t.endswith("%") else float(t)
    except ValueError as e:
        raise UsageError(f"--fail-on-regression {text!r}: expected a percentage such as 5%") from e
    if not math.isfinite(v) or not 0 <= v < 10:
        raise UsageError(f"--fail-on-regression {text!r}: out of range")
    return v


def gate(dd: Diff, metric: str, threshold: float) -> dict[str, Any]:
    """Regression verdict for ``metric`` (lower is better for every gate metric)."""
    if metric not in GATE_METRICS:
        raise UsageError(f"--metric {metric!r}: choose one of {', '.join(GATE_METRICS)}")
    row = next(m for m in dd.metrics if m["metric"] == metric)
    if row["base"] is None or row["new"] is None:
        raise UsageError(f"metric {metric} is missing in {'the base' if row['base'] is None else 'the new'} "
                         "analysis (no iteration range found? pass --iteration-range NAME or choose another --metric)")
    if row["base"] < 0 or row["new"] < 0:
        raise UsageError(f"metric {metric} is negative in {'the base' if row['base'] < 0 else 'the new'} analysis")
    if row["base"] > 0:
        change = (row["new"] - row["base"]) / row["base"]
    else:  # a baseline of 0: any growth is a regression (of unbounded size), none is no change
        change = math.inf if row["new"] > 0 else 0.0
    uses_iterations = metric.startswith("iter_")
    significant = dd.noise["significant"] if uses_iterations else None
    tested = uses_iterations and dd.noise["p_value"] is not None
    worse = change > threshold
    failed = worse and (significant is not False or not tested)
    if failed:
        why = (f"{metric} regressed by {change:+.1%} (threshold {threshold:.1%})"
               + (f", and the change is significant (p = {dd.noise['p_value']:.3g})" if tested else
                  ", no noise test possible" if uses_iterations else ""))
    elif worse:
        why = (f"{metric} is {change:+.1%} but within noise (p = {dd.noise['p_value']:.3g} >= {dd.noise['alpha']}); "
               "not a regression")
    else:
        why = f"{metric} changed by {change:+.1%} (threshold {threshold:.1%}): OK"
    return {"metric": metric, "threshold": threshold, "change": change, "failed": failed, "message": why}


# -- ladder ------------------------------------------------------------------------------------

def ladder(items: list[tuple[str, dict[str, Any]]], metric: str | None = None) -> dict[str, Any]:
    """One row per analysis in order, with the chosen metric and the speedup of each step.

    Default metric: the timed region ("Total Elapsed Time") when every trace has one, else the
    steady-state iteration p50."""
    heads = [(label, headline(d), d) for label, d in items]
    if metric is None:
        metric = "timed_region_ns" if all(h["timed_region_ns"] for _, h, _ in heads) else "iter_p50_ns"
    if metric not in METRICS:
        raise UsageError(f"--metric {metric!r}: choose one of {', '.join(METRICS)}")
    rows = []
    first = prev = None
    for label, h, d in heads:
        v = h[metric]
        top = (d.get("findings") or [{}])[0] if d.get("findings") else {}
        rows.append({"label": label, "value": v,
                     "step_speedup": (prev / v) if (prev and v) else None,
                     "total_speedup": (first / v) if (first and v) else None,
                     "iter_p50_ns": h["iter_p50_ns"], "gpu_busy_frac": h["gpu_busy_frac"],
                     "top_finding": top.get("rule"), "top_impact_ns": top.get("impact_ns")})
        if v:
            first = first or v
            prev = v
    return {"schema": "nsysan.ladder/1", "metric": metric, "label": METRICS[metric][0], "rows": rows}
