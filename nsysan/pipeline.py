"""Analyse one trace and write its outputs: what ``nsysan analyze`` does per trace, whether the command
line runs it, a local process pool or a Dask worker (``cluster.py``). The command line parses and
prints; this module loads, analyses and writes, and returns a small summary of plain values (what a
worker sends back). It imports nothing of the command line, so the cluster runner does not either."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from nsysan._version import __version__
from nsysan.outputs import identity as _identity
from nsysan.outputs import write_atomic


def _progress_factory(quiet: bool) -> Any:
    """A progress line on a terminal's stderr for one trace, from its load to its last output
    (``show(description, done, total)``); (None, None) when quiet or not on a terminal."""
    if quiet or not sys.stderr.isatty():
        return None, None
    try:
        from rich.progress import Progress
    except ImportError:  # pragma: no cover
        return None, None
    prog = Progress(transient=True)
    task = prog.add_task("loading", total=1)

    def show(description: str, i: int, n: int) -> None:
        prog.update(task, total=max(n, 1), completed=i, description=description)

    return prog, show


def _prefixed(show: Any, prefix: str) -> Any:
    """``show`` for a loader's or analysis' ``progress(stage, done, total)``: the stage after ``prefix``."""
    return None if show is None else (lambda stage, i, n: show(f"{prefix}{stage}", i, n))


def resolve_input(path: str, quiet: bool = False) -> str:
    """The SQLite file to read for a trace argument: a ``.nsys-rep`` is exported with nsys into
    nsysan's cache (see ``nsysan.inputs``); a FIFO, directory or device is refused before any open."""
    from nsysan import inputs

    return inputs.resolve(path, say=None if quiet else inputs._stderr)


def analyze_one(trace_path: str, opts: dict[str, Any]) -> dict[str, Any]:
    """Analyse one trace and write its outputs; returns a small summary (used in parallel runs)."""
    from nsysan import _gc
    from nsysan._imports import pandas_without_arrow

    pandas_without_arrow()  # before anything imports pandas (after the prefetch started)
    from nsysan.analysis import Params, analyze
    from nsysan.report import timeline
    from nsysan.trace import open_trace

    if opts["html"]:  # the report's libraries too, before the collector resumes
        from nsysan.report import html, view  # noqa: F401
    if not opts["quiet"]:  # and the terminal's
        import rich.console
        import rich.text  # noqa: F401
    _gc.resume()

    t0 = time.perf_counter()
    # a .nsys-rep is read from its export (made once into the cache); names stay the user's
    source = opts.get("source") or resolve_input(trace_path, opts["quiet"])
    protect = [tuple(x) for x in opts.get("protect", ())] + [i for i in [_identity(source)] if i is not None]
    # one progress line on a terminal, from the load to the last output (a 2.5 GB trace: 19 s on 2 cores)
    prog, show = _progress_factory(opts["quiet"]) if opts.get("interactive") else (None, None)
    if prog:
        prog.start()
    started: list[Any] = []
    try:
        trace = open_trace(source, progress=_prefixed(show, "loading "), max_rows=opts["max_events"],
                           time_range=opts.get("time_range"))
        params = Params(iteration_range=opts["iteration_range"], min_gap_ns=opts["min_gap_ns"],
                        warmup_factor=opts["warmup_factor"])

        def begin(x: Any) -> None:
            started.append(x)
            timeline.start(x)

        outputs: list[str] = []
        # with both outputs, the report's timeline encodes while the rules run and the JSON is written
        a = analyze(trace, params, rule_config=opts["rule_config"],
                    on_analyses=begin if opts["html"] and opts["json"] else None,
                    progress=_prefixed(show, "analysing: "))
        return _write_outputs(a, trace, trace_path, source, opts, protect, outputs, t0, show)
    finally:
        if prog:
            prog.stop()
        for x in started:  # (an output that could not be written, or rules that failed)
            timeline.discard(x)


def _write_outputs(a: Any, trace: Any, trace_path: str, source: Any, opts: dict[str, Any], protect: list[Any],
                   outputs: list[str], t0: float, show: Any = None) -> dict[str, Any]:
    from nsysan.report import html as html_mod
    from nsysan.report import jsonout, view

    kinds = [k for k in ("json", "csv", "html", "perfetto") if opts.get(k)]

    def writing(what: str, kind: str) -> None:
        if show:
            show(f"writing {what}", kinds.index(kind), len(kinds))

    if opts["json"]:
        writing("JSON", "json")
        text = jsonout.to_json(a, show_env=opts["show_env"])
        write_atomic(Path(opts["json"]), text, force=opts["force"], protect=protect)
        outputs.append(opts["json"])
        from nsysan import results

        if not opts["show_env"] and not opts.get("time_range") and results.enabled():  # compare and diff reuse it
            results.put(results.key(source, results.options_of(
                opts["iteration_range"], opts["min_gap_ns"], opts["warmup_factor"], opts["rule_config"])), text)
    if opts["csv"]:
        writing("CSV tables", "csv")
        d = Path(opts["csv"])
        for name, df in jsonout.csv_tables(a).items():
            write_atomic(d / f"{name}.csv", jsonout.to_csv(df), force=opts["force"], protect=protect)
        outputs.append(str(d) + "/")
    if opts["html"]:
        writing("HTML report", "html")
        text = html_mod.render(view.build(a, show_env=opts["show_env"], generated_by=f"nsysan {__version__}"))
        write_atomic(Path(opts["html"]), text, force=opts["force"], protect=protect)
        outputs.append(opts["html"])
    if opts.get("perfetto"):
        from nsysan.report.perfetto import write_perfetto

        writing("Perfetto timeline", "perfetto")
        write_perfetto(a, Path(opts["perfetto"]), force=opts["force"], protect=protect)
        outputs.append(opts["perfetto"])
    st = a.iterations.stats
    return {"trace": trace_path, "seconds": round(time.perf_counter() - t0, 3), "outputs": outputs,
            "findings": [(f.rule, f.severity.name.lower(), f.impact_ns, f.message) for f in a.findings],
            "fixes": [{"rule": f.rule, "severity": f.severity.name.lower(), "impact_ns": int(f.impact_ns),
                       "per_iteration_ns": f.per_iteration_ns, "title": f.title, "message": f.message,
                       "suggestion": f.suggestion} for f in a.findings],
            "breakdown": _breakdown_lines(a),
            "gpu_metrics": _gpu_metrics_lines(a),
            "top_kernels": [(str(r["name"]), int(r["total_ns"]), float(r["share"]), int(r["count"])) for r in
                            a.steady_summaries.get("kernels", a.kernels).head(5).to_dict("records")],
            "kernel_ns": int(a.steady_summaries.get("kernels", a.kernels)["total_ns"].sum()),
            "p50_ns": st.get("p50_ns"), "iterations": st.get("count", 0), "range": a.iterations.range_name,
            "latency_p50_ns": st.get("latency_p50_ns"), "queueing": bool(st.get("latency_includes_queueing")),
            "queue_depth_p50": st.get("queue_depth_p50"), "headline": st.get("headline"),
            "throughput_per_s": st.get("throughput_per_s"), "why": a.iterations.why,
            "gpu_recorded": bool(len(a.ops)),
            "busy": [(int(r.device_id), float(r.busy_frac), int(r.idle_ns)) for r in a.busy_steady.itertuples()],
            "window": a.steady.label, "window_ns": a.steady.dur_ns, "nsys": trace.meta.nsys_version,
            "slowest_kernel": (a.kernels.iloc[0]["name"] if len(a.kernels) else None),
            # per process with communication: a few numbers and 3 values per collective, on the UTC
            # clock, so the ranks of several exports (or cluster workers) can be aligned
            "rank_payloads": _rank_payloads(a, trace_path),
            "sequences": st.get("sequences"),
            "ranks_verdict": (a.ranks.verdict if a.ranks is not None and len(a.ranks.ranks) > 1 else None),
            "warnings": list(trace.meta.warnings),
            "nsys_rules": [(r["nsys_rule"], int(r["count"]), int(r["steady_count"])) for r in
                           a.nsys_rules.to_dict("records") if r["count"]]}


def _gpu_metrics_lines(a: Any) -> list[str]:
    from nsysan.report.metrics_view import terminal_lines

    return terminal_lines(a)


def _breakdown_lines(a: Any) -> list[tuple[str, int, list[tuple[str, int, float]]]]:
    """Where one steady iteration's time goes, per sequence group (``report.view`` draws the same
    numbers as a stacked bar): (label, mean period ns, [(part, mean ns, share)])."""
    from nsysan.analyses.breakdown import breakdown_groups
    from nsysan.report.view import BREAKDOWN_PARTS

    return [(label, int(sm["span_mean_ns"]), [(name, int(sm[k + "_mean_ns"]), float(sm[k + "_frac"]))
                                              for k, name, _ in BREAKDOWN_PARTS if sm[k + "_mean_ns"] > 0])
            for label, sm in breakdown_groups(a.breakdown)]


def _rank_payloads(a: Any, trace_path: str) -> list[dict[str, Any]]:
    from nsysan.analyses.ranks import rank_payloads

    return rank_payloads(a, offset_ns=a.trace.meta.epoch_offset_ns or 0, trace=str(trace_path))
