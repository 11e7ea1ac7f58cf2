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
with a two-sided Mann-Whitney U test (normal approximation with tie correction), the latencies
likewise for the latency. ``verdict`` is the one place that turns a change into words: better or
worse (faster or slower) only when the test says ``p < alpha``, or, for a metric without a test of
its own, when the change exceeds the run-to-run spread of the periods; else "no clear change". The
gate fails when the chosen metric got worse by more than the allowed percentage *and* the test does
not call it noise. With fewer than ``MIN_SAMPLES`` iterations on a side, no test is possible and the
verdict says so (the threshold alone decides).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from nsysan.errors import UsageError
from nsysan.saved import SAVED_SHAPE, loads_saved, validate_saved  # noqa: F401  (SAVED_SHAPE: its former home)

MIN_SAMPLES = 5
ALPHA = 0.01

# id -> (human name, direction): +1 means higher is better, -1 lower is better. The ids are the
# machine names (JSON, --metric); the human names are what a person reads (terminal, HTML).
METRICS: dict[str, tuple[str, int]] = {
    "iter_p50_ns": ("Iteration time p50 (period)", -1),
    "iter_p90_ns": ("Iteration time p90 (period)", -1),
    "iter_p99_ns": ("Iteration time p99 (period)", -1),
    "iter_mean_ns": ("Iteration time mean (period)", -1),
    "throughput_per_s": ("Iterations per second", +1),
    "iter_latency_p50_ns": ("Iteration latency p50 (start to completion)", -1),
    "timed_region_ns": ("Timed region (CPU)", -1),
    "timed_region_gpu_ns": ("Timed region with its GPU work", -1),
    "gpu_busy_frac": ("GPU busy (steady)", +1),
    "gpu_idle_ns": ("GPU idle (steady)", -1),
    "overlap_frac_of_copy": ("Copy time overlapped with compute", +1),
    "kernel_total_ns": ("Kernel time, total", -1),
    "launch_api_med_ns": ("Kernel launch call, median", -1),
    "launch_dominated_frac": ("Kernels shorter than their launch call", -1),
    "htod_throughput_bytes_per_s": ("Host-to-device copy throughput", +1),
    "gap_total_ns": ("GPU idle gaps, total", -1),
}
# What each metric means, for a tooltip and the docs.
METRIC_HELP: dict[str, str] = {
    "iter_p50_ns": "median time between consecutive iterations' completions, steady state (warm-up excluded)",
    "iter_p90_ns": "90th percentile of the iteration period, steady state",
    "iter_p99_ns": "99th percentile of the iteration period, steady state",
    "iter_mean_ns": "mean iteration period, steady state",
    "throughput_per_s": "iterations completed per second, steady state",
    "iter_latency_p50_ns": "median time from an iteration's start to its completion; includes queueing when the "
                           "CPU runs ahead of the GPU",
    "timed_region_ns": "the first 'Total Elapsed Time' NVTX range, on the CPU",
    "timed_region_gpu_ns": "the same range until its last GPU op ended",
    "gpu_busy_frac": "share of the steady-state window with at least one GPU op running (all devices)",
    "gpu_idle_ns": "time in the steady-state window with no GPU op running (all devices)",
    "overlap_frac_of_copy": "share of copy time during which a compute kernel ran",
    "kernel_total_ns": "sum of kernel durations, CUDA Graph launches included",
    "launch_api_med_ns": "median duration of the CUDA calls that launched kernels",
    "launch_dominated_frac": "share of kernels that ran shorter than the call that launched them",
    "htod_throughput_bytes_per_s": "bytes copied host to device per second of copy time",
    "gap_total_ns": "sum of the GPU idle gaps of the capture",
}
# metrics whose better/worse reads as faster/slower
_SPEED = {"iter_p50_ns", "iter_p90_ns", "iter_p99_ns", "iter_mean_ns", "throughput_per_s", "iter_latency_p50_ns",
          "timed_region_ns", "timed_region_gpu_ns"}
# metrics the per-iteration samples test: the periods (the latencies for the latency)
_TESTED_BY = {"iter_p50_ns": "period", "iter_p90_ns": "period", "iter_p99_ns": "period", "iter_mean_ns": "period",
              "throughput_per_s": "period", "iter_latency_p50_ns": "latency"}
GATE_METRICS = ("iter_p50_ns", "iter_p90_ns", "iter_p99_ns", "iter_mean_ns", "iter_latency_p50_ns", "timed_region_ns",
                "timed_region_gpu_ns", "kernel_total_ns", "gpu_idle_ns")


def load(source: str | Path, iteration_range: str | None = None) -> dict[str, Any]:
    """An analysis as a dict: from a saved nsysan JSON file, or by analysing a trace."""
    from nsysan.units import clean_text

    path = Path(source)
    if path.suffix == ".json":
        from nsysan.outputs import read_small_file

        shown = clean_text(path)
        raw = read_small_file(path, "saved analysis")
        try:
            d, bad = loads_saved(raw.decode("utf-8"))
        except RecursionError:
            raise UsageError(f"{shown}: not an nsysan JSON file (nested too deeply)") from None
        except (UnicodeDecodeError, ValueError) as e:  # JSONDecodeError is a ValueError
            raise UsageError(f"{shown}: not an nsysan JSON file ({clean_text(e)})") from e
        if bad:  # a number no float holds, anywhere in the file (not only in the fields checked below)
            raise UsageError(f"{shown}: a damaged nsysan JSON file: {clean_text(bad)}",
                             hint="write it again with nsysan analyze TRACE --json OUT.json")
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
    from nsysan import results

    k = results.key(path, results.options_of(iteration_range))
    d = results.get(k)  # analysed before with these options (nsysan analyze, compare or diff)
    if d is not None:
        return d
    from nsysan.analysis import Params, analyze
    from nsysan.report.jsonout import analysis_to_dict, dumps
    from nsysan.trace import open_trace

    d = analysis_to_dict(analyze(open_trace(path), Params(iteration_range=iteration_range)))
    results.put(k, dumps(d))
    return d


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


def steady_latencies(d: dict[str, Any]) -> np.ndarray:
    """The steady-state iterations' latencies (start to completion), warm-up excluded."""
    rows = [r for r in (d.get("iterations") or {}).get("per_iteration") or [] if not r.get("warmup")]
    return np.array([r["latency_ns"] for r in rows], dtype=np.float64)


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
    warnings: list[dict[str, str]] = field(default_factory=list)  # comparability warnings, structured
    other_notes: list[str] = field(default_factory=list)  # remarks that are not warnings (shown after them)
    gpu_metrics: list[dict[str, Any]] = field(default_factory=list)  # GPU metric deltas (gpu_metric_deltas)

    @property
    def notes(self) -> list[str]:
        """Every remark as text, the comparability warnings first."""
        return [w["message"] for w in self.warnings] + self.other_notes

    def to_dict(self) -> dict[str, Any]:
        return {"schema": "nsysan.diff/1", "base": self.base, "new": self.new, "metrics": self.metrics,
                "kernels": self.kernels, "nvtx": self.nvtx, "findings": self.findings, "noise": self.noise,
                "gate": self.gate, "notes": self.notes, "warnings": self.warnings,
                **({"gpu_metrics": self.gpu_metrics} if self.gpu_metrics else {})}


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


# -- noise and the verdict -----------------------------------------------------------------------

SPREAD_FLOOR = 0.05  # a metric without a test of its own is never called better or worse for a change under 5%


def noise_test(a: np.ndarray, b: np.ndarray, *, alpha: float = ALPHA, samples: str = "iteration periods"
               ) -> dict[str, Any]:
    """The Mann-Whitney test of two samples of per-iteration times, with its verdict in words."""
    p = mann_whitney(a, b)
    out: dict[str, Any] = {"test": "Mann-Whitney U, two-sided", "samples": samples, "alpha": alpha,
                           "base_samples": int(len(a)), "new_samples": int(len(b)), "p_value": p,
                           "significant": (p is not None and p < alpha),
                           "base_iqr_ns": _iqr(a), "new_iqr_ns": _iqr(b)}
    if p is None:
        out["note"] = (f"fewer than {MIN_SAMPLES} steady-state iterations on one side: differences cannot be "
                       "told from noise")
    elif p >= alpha:
        out["note"] = f"the {samples} are not distinguishable (p = {p:.3g})"
    else:
        out["note"] = f"the {samples} differ (p = {p:.3g})"
    return out


def relative_spread(a: np.ndarray, b: np.ndarray) -> float | None:
    """How much the iteration periods vary within a run: the larger of the two runs' interquartile
    range of the steady periods divided by their median; None with fewer than ``MIN_SAMPLES``
    iterations on a side. ``max(spread, SPREAD_FLOOR)`` is the noise yardstick for the metrics
    without a test of their own (totals and shares, one number per run)."""
    if len(a) < MIN_SAMPLES or len(b) < MIN_SAMPLES:
        return None
    rel = []
    for v in (a, b):
        med = float(np.median(v))
        if med <= 0:
            return None
        rel.append((_iqr(v) or 0.0) / med)
    return max(rel)


def _change_words(metric: str, base: float, new: float) -> str:
    """The size of a change in words: points for shares, else relative."""
    if metric.endswith("_frac"):
        return f"{(new - base) * 100:+.1f} pt"
    if base == 0:
        return "from 0"
    return f"{(new - base) / abs(base):+.1%}"


def verdict(metric: str, base: float | None, new: float | None, *, test: dict[str, Any] | None = None,
            spread: float | None = None) -> dict[str, Any]:
    """The verdict on one metric: the one place that decides whether a change is better, worse or
    noise; the terminal, the HTML page, the JSON and the gate all read what it returns.

    ``test``: the ``noise_test`` of the per-iteration samples that carry this metric (periods for
    the iteration time and throughput, latencies for the latency), or None for a metric with no
    samples (totals, shares). ``spread``: ``relative_spread``, the noise yardstick for the latter.

    Returns ``verdict`` (a code), ``text`` (words for a person), ``basis`` and ``p_value``:

    * None: missing on a side; ``"same"``: identical values;
    * ``"better"`` / ``"worse"`` (by the metric's direction: a time lower, a share of busy time
      higher...): only when the test says the samples differ (basis ``"test"``), or, for a metric
      without a test, when its relative change exceeds the run-to-run spread (basis ``"spread"``);
    * ``"no clear change"``: the test cannot tell the samples apart, or the change is within the
      spread;
    * ``"changed"``: no test and no spread to judge by (fewer than 5 iterations on a side): the
      size of the change, no claim.
    """
    direction = METRICS[metric][1]
    out: dict[str, Any] = {"verdict": None, "text": "-", "basis": None, "p_value": None}
    if base is None or new is None:
        out["text"] = "missing in the base" if base is None and new is not None else \
            "missing in the new" if new is None and base is not None else "-"
        return out
    if new == base:
        return out | {"verdict": "same", "text": "no change"}
    good = (new - base) * direction > 0
    code = "better" if good else "worse"
    word = ({"better": "faster", "worse": "slower"} if metric in _SPEED else {"better": "better", "worse": "worse"})[code]
    size = _change_words(metric, base, new)
    if test is not None and test.get("p_value") is not None:
        p = float(test["p_value"])
        if test["significant"]:
            return out | {"verdict": code, "text": f"{word} ({size}, p={p:.2g})", "basis": "test", "p_value": p}
        return out | {"verdict": "no clear change", "text": f"no clear change ({size}, p={p:.3g})", "basis": "test",
                      "p_value": p}
    if spread is not None:
        rel = abs(new - base) / abs(base) if base else math.inf
        if rel > spread:
            return out | {"verdict": code, "text": f"{word} ({size}; noise ~{spread:.0%})", "basis": "spread"}
        return out | {"verdict": "no clear change", "text": f"no clear change ({size}; noise ~{spread:.0%})",
                      "basis": "spread"}
    why = "too few iterations for a noise test" if metric in _TESTED_BY else "no noise estimate"
    return out | {"verdict": "changed", "text": f"changed by {size} ({why})", "basis": None}


# -- comparability -------------------------------------------------------------------------------

def _gpu_models(d: dict[str, Any]) -> list[str] | None:
    gpus = (d.get("trace") or {}).get("gpus")
    if not gpus:
        return None
    return sorted(str(g.get("name")) for g in gpus if g.get("name"))


def comparability(base: dict[str, Any], new: dict[str, Any]) -> list[dict[str, str]]:
    """What makes the two analyses not like for like, each ``{"code", "level", "message"}``; level
    ``"warning"`` (the numbers may mislead) or ``"note"`` (worth knowing). Checks: the GPU models,
    the CUDA Graph trace mode (``trace.cuda_graph_trace``), the iteration range (``iterations.range``),
    the window the steady-state metrics cover (``windows.steady.label``), the nsys version."""
    out: list[dict[str, str]] = []

    def add(code: str, level: str, message: str) -> None:
        out.append({"code": code, "level": level, "message": message})

    gb, gn = _gpu_models(base), _gpu_models(new)
    if gb and gn and gb != gn:
        add("gpu-model", "warning", f"different GPUs: {', '.join(gb)} vs {', '.join(gn)}; times compare the "
            "hardware as much as the program")
    tb, tn = ((x.get("trace") or {}).get("cuda_graph_trace") for x in (base, new))
    if tb and tn and tb != tn and "none" not in (tb, tn):
        add("cuda-graph-trace", "warning", f"CUDA Graphs were traced differently ({tb} vs {tn}: "
            "--cuda-graph-trace=graph records one entry per graph launch, =node each kernel): compare the GPU "
            "totals, not the kernel tables")
    rb, rn = ((x.get("iterations") or {}).get("range") for x in (base, new))
    if rb and rn and rb != rn:
        add("iteration-range", "warning", f"different iteration ranges: {rb!r} vs {rn!r}; the iteration metrics "
            "compare different things (pass --iteration-range NAME to choose one for both)")
    elif bool(rb) != bool(rn):
        add("iteration-range", "warning", f"only the {'base' if rb else 'new'} run has an iteration range "
            f"({rb or rn!r}); there are no iteration metrics to compare (pass --iteration-range NAME)")
    wb, wn = ((((x.get("windows") or {}).get("steady") or {}).get("label")) for x in (base, new))
    if wb and wn and wb != wn:
        add("steady-window", "warning", f"GPU busy, idle and overlap cover the {wb} in the base but the {wn} in "
            "the new run; shares of different windows do not compare")
    vb, vn = ((x.get("trace") or {}).get("nsys_version") for x in (base, new))
    if vb and vn and vb != vn:
        add("nsys-version", "note", f"recorded by different nsys versions ({vb} vs {vn}); its overhead and what "
            "it records can differ a little")
    return out


def diff(base: dict[str, Any], new: dict[str, Any], *, base_label: str = "base", new_label: str = "new",
         alpha: float = ALPHA) -> Diff:
    hb, hn = headline(base), headline(new)
    lb, ln = steady_periods(base), steady_periods(new)
    noise = noise_test(lb, ln, alpha=alpha)
    noise["latency"] = noise_test(steady_latencies(base), steady_latencies(new), alpha=alpha,
                                  samples="iteration latencies")
    measured = relative_spread(lb, ln)
    spread = None if measured is None else max(measured, SPREAD_FLOOR)
    noise["spread_measured"], noise["spread"] = measured, spread
    noise["spread_note"] = (f"metrics without a test of their own are called better or worse only beyond "
                            f"{spread:.1%} (the iteration periods' spread, interquartile range / median: "
                            f"{measured:.1%}; at least {SPREAD_FLOOR:.0%})" if spread is not None and measured is not None
                            else "too few iterations for a noise estimate: metrics without a test of their own "
                            "show the size of their change only")
    tests = {"period": noise, "latency": noise["latency"]}
    metrics = []
    for key, (label, direction) in METRICS.items():
        d, ratio = _delta(hb[key], hn[key])
        test = tests[_TESTED_BY[key]] if key in _TESTED_BY else None
        v = verdict(key, hb[key], hn[key], test=test, spread=None if test else spread)
        metrics.append({"metric": key, "label": label, "help": METRIC_HELP[key], "base": hb[key], "new": hn[key],
                        "delta": d, "ratio": ratio, "higher_is_better": direction > 0, "verdict": v["verdict"],
                        "verdict_text": v["text"], "basis": v["basis"], "p_value": v["p_value"]})
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
    warnings = comparability(base, new)
    notes = []
    for label, x in ((base_label, base), (new_label, new)):
        st = (x.get("iterations") or {}).get("stats") or {}
        if st.get("latency_includes_queueing"):
            notes.append(f"{label}: the CPU runs ahead of the GPU (queue depth p50 {st.get('queue_depth_p50')}); its "
                         "iteration latency includes queueing, so the period is compared")
    return Diff(base_label, new_label, metrics,
                _table_diff((base.get("kernels") or {}).get("by_name") or [], (new.get("kernels") or {}).get("by_name") or []),
                _table_diff((base.get("nvtx") or {}).get("by_name") or [], (new.get("nvtx") or {}).get("by_name") or []),
                findings, noise, warnings=warnings, other_notes=notes, gpu_metrics=gpu_metric_deltas(base, new))


def _pct(v: Any) -> float | None:
    """A metric mean from a saved analysis: a finite number, else None (saved files are untrusted)."""
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def steady_gpu_metrics(d: dict[str, Any]) -> dict[str, Any]:
    """``{"gpu_metrics": {device: {sm_active, tensor_active, dram (read + write), samples}}}``: the
    steady-window means of an analysis with GPU metrics (a ladder row's extra), else ``{}``."""
    g = d.get("gpu_metrics") if isinstance(d.get("gpu_metrics"), dict) else {}
    if not g.get("devices") or not isinstance(g.get("by_range"), list):
        return {}
    out = {}
    for r in g.get("by_range") or []:
        if isinstance(r, dict) and str(r.get("range", "")).startswith("["):
            dr, dw = _pct(r.get("dram_read")), _pct(r.get("dram_write"))
            out[str(r.get("device"))] = {"sm_active": _pct(r.get("sm_active")),
                                         "tensor_active": _pct(r.get("tensor_active")),
                                         "dram": None if dr is None or dw is None else round(dr + dw, 2),
                                         "samples": None if _pct(r.get("samples")) is None else int(r["samples"])}
    return {"gpu_metrics": out} if out else {}


GPU_METRIC_KEYS = ("gr_active", "sm_active", "tensor_active", "dram_read", "dram_write", "pcie_rx", "pcie_tx",
                   "nvlink_rx", "nvlink_tx")


def gpu_metric_deltas(base: dict[str, Any], new: dict[str, Any]) -> list[dict[str, Any]]:
    """GPU metric means (% of peak) of both analyses, per device and range where both have them: the
    steady window (``[steady state]``, matched whatever its label) and user ranges by name. Devices
    match by their label (``GPU 0``); with one metric device on each side, those two. Empty when
    either side has no GPU metrics."""
    def rows(d: dict[str, Any]) -> list[dict[str, Any]]:
        g = d.get("gpu_metrics") if isinstance(d.get("gpu_metrics"), dict) else {}
        rr = g.get("by_range") if isinstance(g.get("by_range"), list) else []
        return [r for r in rr if isinstance(r, dict)] if g.get("devices") else []

    rb, rn = rows(base), rows(new)
    if not rb or not rn:
        return []
    db, dn = {str(r.get("device")) for r in rb}, {str(r.get("device")) for r in rn}
    pair = {x: x for x in db & dn} or ({next(iter(db)): next(iter(dn))} if len(db) == len(dn) == 1 else {})

    def key(r: dict[str, Any]) -> str:
        name = str(r.get("range"))
        return "[steady state]" if name.startswith("[") else name

    nb = {(str(r.get("device")), key(r)): r for r in rb}
    nn = {(str(r.get("device")), key(r)): r for r in rn}
    out = []
    for (dev, name), b in sorted(nb.items(), key=lambda kv: (kv[0][0], kv[0][1] != "[steady state]", kv[0][1])):
        n = nn.get((pair.get(dev, ""), name))
        if n is None:
            continue
        row: dict[str, Any] = {"device": dev if pair.get(dev) == dev else f"{dev} / {pair.get(dev)}", "range": name,
                               "base_samples": b.get("samples"), "new_samples": n.get("samples"),
                               "base_verdict": b.get("verdict") or "", "new_verdict": n.get("verdict") or ""}
        for k in GPU_METRIC_KEYS:
            vb, vn = _pct(b.get(k)), _pct(n.get(k))
            if vb is None and vn is None:
                continue
            row[k] = {"base": vb, "new": vn, "delta": None if vb is None or vn is None else round(vn - vb, 2)}
        out.append(row)
    return out


def _iqr(v: np.ndarray) -> float | None:
    if len(v) == 0:
        return None
    q1, q3 = np.percentile(v, [25, 75])
    return float(q3 - q1)


# -- names ---------------------------------------------------------------------------------------

from nsysan.report.names import ELLIPSIS, short_names  # noqa: E402,F401  (their former home)

# -- the gate ------------------------------------------------------------------------------------

THRESHOLD_MAX_PCT = 1000.0


def parse_threshold(text: str) -> float:
    """``--fail-on-regression``: a percentage, with or without the sign: '5%' and '5' are both 5
    percent, '0.5' is half a percent (never a fraction: '0.05' is 0.05%). Returns the fraction
    (0.05 for 5%). Negative, NaN, infinite and over 1000% are usage errors."""
    t = str(text).strip()
    num = t[:-1].strip() if t.endswith("%") else t
    try:
        pct = float(num)
    except ValueError:
        pct = math.nan
        if not num or not any(c.isdigit() for c in num):
            raise UsageError(f"--fail-on-regression {text!r}: expected a percentage such as 5 or 5%") from None
    if not math.isfinite(pct) or pct < 0 or pct > THRESHOLD_MAX_PCT:
        raise UsageError(f"--fail-on-regression {text!r}: expected a percentage from 0 to "
                         f"{THRESHOLD_MAX_PCT:g} (5 or 5% mean five percent)")
    return pct / 100.0


def threshold_note(text: str) -> str | None:
    """A reminder when a bare number below 1 may have been meant as a fraction ('0.05' is 0.05%)."""
    t = str(text).strip()
    if t.endswith("%"):
        return None
    try:
        v = float(t)
    except ValueError:
        return None
    if 0 < v < 1:
        return (f"--fail-on-regression {t} is read as {t} percent (a number is always a percentage); "
                f"for {v * 100:g} percent write {v * 100:g}%")
    return None


def fmt_threshold(threshold: float) -> str:
    """A threshold fraction as a percentage, without rounding a small one away: 0.05 -> '5.0%',
    0.0005 -> '0.05%'."""
    pct = threshold * 100.0
    return f"{pct:.1f}%" if pct == 0 or round(pct, 1) == round(pct, 6) else f"{pct:.3g}%"


def gate_rule(metric: str, threshold: float) -> str:
    """The gate as the user asked for it, in words."""
    if metric not in GATE_METRICS:
        raise UsageError(f"--metric {metric!r}: choose one of {', '.join(GATE_METRICS)}")
    label = METRICS[metric][0]
    label = label[:1].lower() + label[1:]
    noise = ("and the change is significant (Mann-Whitney test of the iterations)" if metric in _TESTED_BY else
             "(no noise test for this metric: the threshold alone decides)")
    return f"fail when {label} gets more than {fmt_threshold(threshold)} worse {noise}"


def gate(dd: Diff, metric: str, threshold: float) -> dict[str, Any]:
    """Regression verdict for ``metric`` (lower is better for every gate metric). A change beyond
    the threshold fails unless the metric's noise test (its ``verdict``, basis ``"test"``) calls it
    noise; a metric without a test (or with too few iterations for one) fails on the threshold alone."""
    rule = gate_rule(metric, threshold)
    row = next(m for m in dd.metrics if m["metric"] == metric)
    label = row["label"]
    if row["base"] is None or row["new"] is None:
        raise UsageError(f"{label} ({metric}) is missing in {'the base' if row['base'] is None else 'the new'} "
                         "analysis (no iteration range found? pass --iteration-range NAME or choose another --metric)")
    if row["base"] < 0 or row["new"] < 0:
        raise UsageError(f"{label} ({metric}) is negative in {'the base' if row['base'] < 0 else 'the new'} analysis")
    if row["base"] > 0:
        change = (row["new"] - row["base"]) / row["base"]
    else:  # a baseline of 0: any growth is a regression (of unbounded size), none is no change
        change = math.inf if row["new"] > 0 else 0.0
    worse = change > threshold
    tested = row["basis"] == "test"
    failed = worse and not (tested and row["verdict"] == "no clear change")
    lim = fmt_threshold(threshold)
    p = row["p_value"]
    if failed:
        size = "grew from 0" if math.isinf(change) else f"got {change:.1%} worse"
        why = (f"{label} {size}, more than the {lim} allowed"
               + (f", and the change is significant (p = {p:.3g})" if tested else
                  "; too few iterations: no noise test possible" if metric in _TESTED_BY else
                  "; no noise test for this metric"))
    elif worse:
        why = (f"{label} is {change:+.1%} but within noise (p = {p:.3g} >= {dd.noise['alpha']}): "
               "not a regression")
    else:
        why = f"{label} changed by {change:+.1%} (allowed: {lim} worse): OK"
    return {"metric": metric, "label": label, "threshold": threshold, "threshold_pct": threshold * 100.0,
            "rule": rule, "change": change, "failed": failed, "basis": row["basis"], "message": why}


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
                     "top_finding": top.get("rule"), "top_impact_ns": top.get("impact_ns"),
                     **steady_gpu_metrics(d)})
        if v:
            first = first or v
            prev = v
    return {"schema": "nsysan.ladder/1", "metric": metric, "label": METRICS[metric][0], "rows": rows}
