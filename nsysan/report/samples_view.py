"""The report's "Who kept the GPU waiting" panel (``templates/_samples.html.j2``): the inputs the trace
holds and lacks (with the flag that adds each), per gap class and for the steady loop the sampled
functions and the most sampled stacks, and the call sites of the steady state's CUDA calls. Plain
strings and numbers only: the template escapes every one."""

from __future__ import annotations

from typing import Any

from nsysan.analyses.samples import INPUTS, MIN_SAMPLES, missing_inputs
from nsysan.analyses.stack_frames import module_name, short_symbol, where
from nsysan.units import clean_text, fmt_ns, fmt_pct

MAX_FUNCTIONS = 10
MAX_STACKS = 6
MAX_SITES = 20


def _functions(g: Any) -> list[dict[str, Any]]:
    out = []
    for r in g.table.head(MAX_FUNCTIONS).to_dict("records"):
        native = bool(r.get("module"))
        out.append({"function": clean_text(short_symbol(r["function"], 120) if native else f"{r['function']}()"),
                    "full": clean_text(str(r["function"])[:400]),
                    "where": clean_text(module_name(r["module"]) if native else
                                        f"{str(r['file']).rsplit('/', 1)[-1]}:{int(r['line'])}" if r["file"] else ""),
                    "self": fmt_pct(float(r["self_share"])), "self_frac": float(r["self_share"]),
                    "self_samples": int(r["self_samples"]), "inclusive": fmt_pct(float(r["inclusive_share"]))})
    return out


def _group(g: Any) -> dict[str, Any]:
    what = {"python": "Python samples", "native": "CPU samples"}.get(g.source, "samples")
    head = f"{g.samples:,} {what}"
    if g.kind == "gaps":
        head = f"{g.gaps:,} gap{'s' if g.gaps != 1 else ''}, {fmt_ns(g.gap_ns)} idle; " + head
    else:
        head = f"over the {fmt_ns(g.gap_ns)} steady window; " + head
    if g.attributed and g.source == "native":
        head += "; by module: " + ", ".join(f"{clean_text(m)[:60]} {fmt_pct(v)}" for m, v in g.modules())
    return {"label": clean_text(str(g.label))[:160], "head": head, "attributed": g.attributed,
            "note": clean_text(g.note) if g.note else (
                "" if g.attributed else f"fewer than {MIN_SAMPLES} samples: too few to attribute"),
            "functions": _functions(g) if g.attributed else [],
            "stacks": [{"share": fmt_pct(float(s["share"])), "frac": float(s["share"]), "samples": int(s["samples"]),
                        "frames": [{"text": clean_text(f["text"])[:140], "own": bool(f["own"])} for f in s["frames"]]}
                       for s in g.stacks[:MAX_STACKS]] if g.attributed else []}


def samples_view(a: Any) -> dict[str, Any]:
    s = a.idle_samples
    inputs = dict(getattr(s, "inputs", {}) or {})
    missing = list(getattr(s, "missing", None) or missing_inputs(None, a.trace.meta.tables))
    lacking = {m["input"] for m in missing}
    held = [f"{lab} ({int(inputs[k]):,})" if isinstance(inputs.get(k), int) else lab
            for k, lab, _ in INPUTS if k not in lacking]
    groups = []
    if s is not None and getattr(s, "source", ""):
        if s.steady is not None:
            groups.append(_group(s.steady))
        groups += [_group(c) for c in s.classes]
    sites = []
    st = getattr(s, "sites", None)
    if st is not None and len(st):
        for r in st.head(MAX_SITES).to_dict("records"):
            sites.append({"api": clean_text(str(r["api"])), "where": clean_text(where(r)),
                          "source": "Python backtrace" if r["source"] == "python" else "CUDA backtrace",
                          "calls": int(r["calls"]), "total": fmt_ns(int(r["total_ns"]))})
    return {"held": held, "missing": [{"label": m["label"], "flag": m["flag"]} for m in missing],
            "note": clean_text(getattr(s, "note", "") or ""), "groups": groups, "sites": sites,
            "source": {"python": "Python samples", "native": "native CPU samples"}.get(getattr(s, "source", ""), ""),
            "min_samples": MIN_SAMPLES}
