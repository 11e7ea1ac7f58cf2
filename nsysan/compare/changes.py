"""What changed between two analyses: the metrics with their verdicts, the kernel and NVTX tables
matched by name, the findings resolved, remaining and new, the GPU metric means, and what makes the
two runs not like for like (``comparability``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nsysan.compare.metrics import (
    GPU_METRIC_KEYS,
    METRIC_HELP,
    METRICS,
    TESTED_BY,
    headline,
    saved_pct,
    steady_latencies,
    steady_periods,
)
from nsysan.compare.stats import ALPHA, SPREAD_FLOOR, noise_test, relative_spread, verdict


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
                            f"{measured:.1%}; at least {SPREAD_FLOOR:.0%})"
                            if spread is not None and measured is not None
                            else "too few iterations for a noise estimate: metrics without a test of their own "
                            "show the size of their change only")
    tests = {"period": noise, "latency": noise["latency"]}
    metrics = []
    for key, (label, direction) in METRICS.items():
        d, ratio = _delta(hb[key], hn[key])
        test = tests[TESTED_BY[key]] if key in TESTED_BY else None
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
    def rows(d: dict[str, Any], table: str) -> list[dict[str, Any]]:
        return (d.get(table) or {}).get("by_name") or []

    return Diff(base_label, new_label, metrics,
                _table_diff(rows(base, "kernels"), rows(new, "kernels")),
                _table_diff(rows(base, "nvtx"), rows(new, "nvtx")),
                findings, noise, warnings=warnings, other_notes=notes, gpu_metrics=gpu_metric_deltas(base, new))



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
            vb, vn = saved_pct(b.get(k)), saved_pct(n.get(k))
            if vb is None and vn is None:
                continue
            row[k] = {"base": vb, "new": vn, "delta": None if vb is None or vn is None else round(vn - vb, 2)}
        out.append(row)
    return out
