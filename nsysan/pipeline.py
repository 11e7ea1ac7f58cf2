"""Analyse one trace and write its outputs: what ``nsysan analyze`` does per trace, whether the command
line runs it, a local process pool or a Dask worker (``cluster.py``). The command line parses and
prints; this module plans and checks the outputs before any work (``plan_analyze``,
``check_outputs``), loads, analyses and writes (``analyze_one``: a small summary of plain values, what
a worker sends back), runs many in local processes (``run_many``, ``write_cross``), and runs ``diff`` and ``compare``
(``diff``, ``ladder``). It imports nothing of the command line, so the cluster runner does not either."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nsysan._version import __version__
from nsysan.errors import NsysanError, OutputError, OutputExistsError, UsageError
from nsysan.outputs import identity as _identity
from nsysan.outputs import own_output, path_too_long, reason, refuse_special, together, write_atomic
from nsysan.report.summary import CaptureTime, FixLine, RunSummary
from nsysan.units import clean_text as _say

NAME_MAX = 255  # bytes in one path component on Linux, macOS and Windows file systems
CSV_NAMES = ("kernels", "kernel_configs", "cuda_api", "os_runtime", "memcpy", "memset", "nvtx", "launches",
             "overlap", "gpu_busy", "gaps", "iterations", "iteration_breakdown", "collectives", "ranks",
             "nsys_analyze", "findings")


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
    nsysan's cache (see ``nsysan.record.export``); a FIFO, directory or device is refused before any open."""
    from nsysan.record.export import resolve, stderr_line

    return resolve(path, say=None if quiet else stderr_line)


# -- before any work: the outputs planned and checked --------------------------------------------

def fit_name(name: str, suffix: str) -> str:
    """``name + suffix``, the name shortened to fit one path component (NAME_MAX bytes)."""
    budget = NAME_MAX - len(suffix.encode())
    raw = os.fsencode(name)
    if len(raw) <= budget:
        return name + suffix
    import hashlib  # a stable tag: two long names that share their first 240 bytes stay apart

    tag = hashlib.sha256(raw).hexdigest()[:8]
    return os.fsdecode(raw[:budget - 9]) + "-" + tag + suffix


def _default_html(trace: str, json_path: str | None) -> str:
    if json_path:
        return str(Path(json_path).with_suffix(".html"))
    return fit_name(Path(trace).stem, ".nsysan.html")


def check_outputs(inputs: Sequence[str], outputs: Sequence[tuple[str, str]], *, force: bool) -> list[tuple[int, int]]:
    """Before any work: no output is an input (same file by device and inode, so also through a
    symbolic or hard link; ``inputs`` include side files such as ``--config``), no two outputs are one
    file, every output folder can be one, no name is over the file system's limits, an existing
    output is a regular file whatever ``force`` says (not a FIFO, device or link into ``/proc``), and
    one nsysan did not write needs ``force``. ``outputs``: (option, path). Returns the inputs'
    identities, which ``write_atomic`` checks again at the moment of writing. Every existing file
    nsysan would not replace is named at once (exit 8), not one a run; the first other refusal in
    ``outputs`` order still ends the check where it is, as it did."""
    protect = [i for i in (_identity(t) for t in inputs) if i is not None]
    seen: dict[str, str] = {}
    exists: list[str] = []
    for option, out in outputs:
        try:
            _check_output(option, out, protect, seen, force)
        except OutputExistsError:
            exists.append(_say(out))
        except NsysanError:
            if exists:  # an earlier output exists: that refusal came first, as before
                break
            raise
    if len(exists) == 1:
        raise OutputExistsError(f"{exists[0]}: exists, and nsysan did not write it",
                                hint="pass --force to overwrite it")
    if exists:
        raise OutputExistsError(f"{len(exists)} outputs exist that nsysan did not write: {', '.join(exists)}",
                                hint="pass --force to overwrite them")
    return protect


def _check_output(option: str, out: str, protect: list[tuple[int, int]], seen: dict[str, str], force: bool) -> None:
    """One output of ``check_outputs`` (``seen``: the outputs so far, by real path)."""
    shown = _say(out)
    ident = _identity(out)
    if ident is not None and ident in protect:
        raise UsageError(f"{option} {shown}: is an input of this run; refusing to write a report over it",
                         hint="choose another output name")
    key = os.path.normcase(os.path.realpath(out))
    if key in seen:
        raise UsageError(f"{option} {shown}: the same file as {seen[key]}; each output needs its own path")
    seen[key] = f"{option} {shown}"
    try:
        _check_output_path(option, out, ident, force)
    except OSError as e:  # a lookup the file system refuses (a name too long, a loop of links)
        raise OutputError(f"{option} {shown[:200]}: cannot write: {reason(e)}") from None


def _check_output_path(option: str, out: str, ident: tuple[int, int] | None, force: bool) -> None:
    shown = _say(out)
    long = path_too_long(out)
    if long:
        raise OutputError(f"{option} {shown[:200]}{'...' if len(shown) > 200 else ''}: cannot write: {long}")
    for parent in [Path(out).parent, *Path(out).parent.parents]:
        if parent.exists() or parent.is_symlink():
            if not parent.is_dir():
                raise OutputError(f"{option} {shown}: cannot write: {_say(parent)} is not a directory")
            break
    refuse_special(option, out)
    if ident is not None and Path(out).is_dir():
        raise OutputError(f"{option} {shown}: is a directory")
    exists = ident is not None or Path(out).is_symlink()
    if exists and not force and not own_output(out):  # nsysan's own outputs are replaced
        raise OutputExistsError(f"{shown}: exists, and nsysan did not write it", hint="pass --force to overwrite it")


def plan_analyze(traces: Sequence[str], base: dict[str, Any], *, many: bool, out_dir: str | None, json_path: str | None,
                 html: str | None, no_html: bool, csv: str | None, perfetto: str | None, force: bool,
                 side_inputs: Sequence[str] = ()) -> tuple[list[tuple[str, dict[str, Any]]], list[tuple[int, int]]]:
    """Each trace's options (``base`` and its outputs), every output checked (``check_outputs``)
    before any trace is opened: nothing is analysed for an output that cannot be written, and no
    output can be written over an input (a trace, or a ``side_inputs`` file such as ``--config``).
    Returns the jobs and the inputs' identities."""
    jobs = []
    planned: list[tuple[str, str]] = []
    stems: dict[str, str] = {}
    for t in traces:
        o = dict(base)
        if many or out_dir:
            d = Path(out_dir or ".")
            stem = Path(t).stem
            if stem in stems:
                raise UsageError(f"{_say(stems[stem])} and {_say(t)} have the same name {_say(stem)!r}: their "
                                 "outputs in --out-dir would overwrite each other", hint="rename or link one of them")
            stems[stem] = t
            o.update(json=str(d / fit_name(stem, ".json")),
                     html=None if no_html else str(d / fit_name(stem, ".html")), csv=None)
        else:
            o.update(json=json_path, csv=csv, perfetto=perfetto,
                     html=None if no_html else (html or _default_html(t, json_path)))
        planned += [(opt, o[key]) for opt, key in (("--json", "json"), ("--html", "html"), ("--perfetto", "perfetto"))
                    if o.get(key)]
        if o["csv"]:
            planned += [("--csv", str(Path(o["csv"]) / f"{n}.csv")) for n in CSV_NAMES]
        jobs.append((t, o))
    if out_dir:
        planned.append(("--out-dir", str(Path(out_dir) / "summary.json")))
        if not no_html:
            planned.append(("--out-dir", str(Path(out_dir) / "summary.html")))
        planned.append(("--out-dir", str(Path(out_dir) / "ranks.csv")))
    protect = check_outputs([*traces, *side_inputs], planned, force=force)
    for _, o in jobs:
        o["protect"] = protect
    return jobs, protect


def analyze_single(trace: str, opts: dict[str, Any], *, quiet: bool, max_events: int,
                   time_range: Any) -> RunSummary:
    """One trace in this process: the big tables decode on background threads (C, no GIL) while
    pandas is being imported."""
    from nsysan.trace import prefetch

    opts["source"] = resolve_input(trace, quiet)
    if not time_range:  # the prefetch decodes whole tables; a range is kept while decoding
        prefetch.start(opts["source"], max_rows=max_events)
    return analyze_one(trace, opts)


# -- several traces --------------------------------------------------------------------------------

def run_many(jobs: list[tuple[str, dict[str, Any]]], *, jobs_n: int,
             on_error: Callable[[str], None]) -> tuple[list[RunSummary], int]:
    """Several traces in local processes (``cluster.run_many``: on a Dask cluster); each failure goes
    to ``on_error`` as it comes. Returns the summaries and the number of failures. An output that
    cannot be written (``OutputError``: a full disk, a read-only folder) ends the run at once, as an
    interruption (Ctrl-C, SIGTERM, SIGHUP) does: the workers are stopped (``_executor.stop_pool``), so
    none outlives the command or writes after it, and the error is raised once."""
    from nsysan import _executor, _startup
    from nsysan.options import positive_jobs

    results, failed = [], 0
    workers = positive_jobs(jobs_n, len(jobs))
    threads = _startup.pool_threads(workers)  # each process analyses on its share of the cores
    pool = _executor.processes(workers, threads)
    try:
        futs = [(t, pool.submit(analyze_one, t, o)) for t, o in jobs]
        for t, f in futs:
            try:
                results.append(f.result())
            except OutputError:
                raise
            except NsysanError as e:
                failed += 1
                on_error(str(e))
            except Exception as e:  # noqa: BLE001 - one trace's failure (a crashed worker) is reported, not raised
                failed += 1
                on_error(f"{t}: internal error ({type(e).__name__}: {e})")
    except BaseException:
        _executor.stop_pool(pool)
        raise
    pool.shutdown()
    return results, failed


def write_cross(cs: dict[str, Any], out_dir: str, *, html: bool, force: bool, protect: list[Any],
                wrote: Callable[[Path], None]) -> None:
    """The cross-trace summary's outputs in ``out_dir``: summary.json, summary.html, ranks.csv."""
    summary = Path(out_dir) / "summary.json"
    written = [summary]
    with together():  # all of them or none: never a summary that looks complete beside a missing page
        write_atomic(summary, json.dumps(cs, indent=1, default=str) + "\n", force=force, protect=protect)
        if html:
            from nsysan.report.cross import render_cross_html

            written.append(summary.with_name("summary.html"))
            write_atomic(written[-1], render_cross_html(cs), force=force, protect=protect)
        if cs.get("ranks", {}).get("ranks"):
            import pandas as pd

            from nsysan.report.jsonout import to_csv

            written.append(summary.with_name("ranks.csv"))
            write_atomic(written[-1], to_csv(pd.DataFrame(cs["ranks"]["ranks"])), force=force, protect=protect)
    for p in written:
        wrote(p)


# -- diff and compare --------------------------------------------------------------------------------

def labels(paths: Sequence[str]) -> list[str]:
    """Row names for traces or saved analyses: their file names without the extension."""
    return [Path(p).name.removesuffix(".json").removesuffix(".sqlite").removesuffix(".nsys-rep") for p in paths]


def diff(base_path: str, new_path: str, *, metric: str, fail_on_regression: str | None, iteration_range: str | None,
         json_path: str | None, html: str | None, force: bool, quiet: bool) -> Any:
    """``nsysan diff``: both sides loaded, compared, gated (``fail_on_regression``) and written."""
    from nsysan import compare
    from nsysan.compare.gate import gate, gate_rule, parse_threshold, threshold_note
    from nsysan.report.terminal import compare_html

    threshold = parse_threshold(fail_on_regression) if fail_on_regression is not None else None
    if threshold is not None:
        gate_rule(metric, threshold)  # a wrong --metric fails before the traces are read
    protect = check_outputs([base_path, new_path], [(o, v) for o, v in (("--json", json_path), ("--html", html)) if v],
                            force=force)
    base = compare.load(resolve_input(base_path, quiet), iteration_range=iteration_range)
    new = compare.load(resolve_input(new_path, quiet), iteration_range=iteration_range)
    lb, ln = labels([base_path, new_path])
    if lb == ln:
        lb, ln = "base", "new"
    d = compare.diff(base, new, base_label=lb, new_label=ln)
    if threshold is not None:
        d.gate = gate(d, metric, threshold)
        note = threshold_note(fail_on_regression)
        if note:
            d.gate["note"] = note
    if json_path:
        write_atomic(Path(json_path), compare.dumps(d.to_dict()), force=force, protect=protect)
    if html:
        write_atomic(Path(html), compare_html(title=f"nsysan diff: {lb} vs {ln}", diff=d, ladder=None),
                     force=force, protect=protect)
    return d


def ladder(traces: Sequence[str], names: str | None, *, metric: str | None, iteration_range: str | None,
           jobs_n: int, json_path: str | None, html: str | None, force: bool, quiet: bool) -> dict[str, Any]:
    """``nsysan compare``: every trace loaded (in parallel), one table, written. ``names``: the rows'
    comma-separated names (default: the file names)."""
    from nsysan import compare
    from nsysan.compare.ladder import ladder as ladder_table
    from nsysan.options import positive_jobs
    from nsysan.report.terminal import compare_html

    rows = names.split(",") if names else labels(traces)
    if len(rows) != len(traces):
        raise UsageError(f"--labels has {len(rows)} names for {len(traces)} traces")
    if len(traces) < 2:
        raise UsageError("compare needs at least two traces (or nsysan JSON files)")
    protect = check_outputs(traces, [(o, v) for o, v in (("--json", json_path), ("--html", html)) if v], force=force)
    sources = [resolve_input(t, quiet) for t in traces]
    workers = positive_jobs(jobs_n, len(sources))
    if workers > 1:
        from nsysan import _executor, _startup

        pool = _executor.processes(workers, _startup.pool_threads(workers))
        try:
            dicts = list(pool.map(compare.load, sources, [iteration_range] * len(sources)))
        except BaseException:  # an interruption (Ctrl-C, SIGTERM, SIGHUP) or a failure: no worker left
            _executor.stop_pool(pool)
            raise
        pool.shutdown()
    else:
        dicts = [compare.load(t, iteration_range=iteration_range) for t in sources]
    lad = ladder_table(list(zip(rows, dicts)), metric)
    if json_path:
        write_atomic(Path(json_path), compare.dumps(lad), force=force, protect=protect)
    if html:
        vmax = max([r["value"] for r in lad["rows"] if r["value"]] or [1])
        write_atomic(Path(html), compare_html(title="nsysan compare", diff=None, ladder=lad, ladder_max=vmax),
                     force=force, protect=protect)
    return lad


# -- one trace ------------------------------------------------------------------------------------------

def analyze_one(trace_path: str, opts: dict[str, Any]) -> RunSummary:
    """Analyse one trace and write its outputs; returns a small summary (used in parallel runs)."""
    from nsysan import _startup

    _startup.pandas_without_arrow()  # before anything imports pandas (after the prefetch started)
    from nsysan.analysis import Params, analyze
    from nsysan.report import timeline
    from nsysan.trace import open_trace

    if opts["html"]:  # the report's libraries too, before the collector resumes
        from nsysan.report import html, view  # noqa: F401
    if not opts["quiet"]:  # and the terminal's
        import rich.console
        import rich.text  # noqa: F401
    _startup.resume_collector()

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
        with together():  # the trace's outputs appear together, or none of them (an error, a signal)
            _write_outputs(a, trace, trace_path, source, opts, protect, outputs, show)
        return summary(a, trace, trace_path, outputs, round(time.perf_counter() - t0, 3))
    finally:
        if prog:
            prog.stop()
        for x in started:  # (an output that could not be written, or rules that failed)
            timeline.discard(x)


def _write_outputs(a: Any, trace: Any, trace_path: str, source: Any, opts: dict[str, Any], protect: list[Any],
                   outputs: list[str], show: Any = None) -> None:
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


def summary(a: Any, trace: Any, trace_path: str, outputs: list[str], seconds: float) -> RunSummary:
    """What ``nsysan analyze`` prints of an analysis (``report.terminal.print_summary``), and what a
    run of many traces collects per trace: plain values (``report.summary.RunSummary``)."""
    from nsysan.trace.db import launched_program

    st = a.iterations.stats
    kernels = a.steady_summaries.get("kernels", a.kernels)
    return RunSummary(
        trace=trace_path, seconds=seconds, outputs=outputs,
        # the program the trace recorded (only traces of one program are ranks of one job: a straggler)
        program=launched_program(trace.meta.capture),
        findings=[(f.rule, f.severity.name.lower(), f.impact_ns, f.message) for f in a.findings],
        fixes=[FixLine(rule=f.rule, severity=f.severity.name.lower(), impact_ns=int(f.impact_ns),
                       per_iteration_ns=f.per_iteration_ns, title=f.title, message=f.message,
                       suggestion=f.suggestion) for f in a.findings],
        breakdown=_breakdown_lines(a), capture_time=_capture_lines(a), gpu_metrics=_gpu_metrics_lines(a),
        top_kernels=[(str(r["name"]), int(r["total_ns"]), float(r["share"]), int(r["count"]))
                     for r in kernels.head(5).to_dict("records")],
        kernel_ns=int(kernels["total_ns"].sum()),
        p50_ns=st.p50_ns, iterations=st.count or 0, range_name=a.iterations.range_name,
        slow=slow_share(a), latency_p50_ns=st.latency_p50_ns,
        queueing=bool(st.latency_includes_queueing), queue_depth_p50=st.queue_depth_p50,
        headline=st.headline, throughput_per_s=st.throughput_per_s, why=a.iterations.why,
        sequences=st.sequences,
        # per thread or rank that runs the loop: its name, steady iterations and period
        loops=[(str(q.get("thread") or f"pid {q['pid']} tid {q['tid']}"), int(q["pid"]), int(q["tid"]),
                int(q["count"]), q.get("period_p50_ns")) for q in a.iterations.sequences],
        gpu_recorded=bool(len(a.ops)),
        busy=[(int(r.device_id), float(r.busy_frac), int(r.idle_ns)) for r in a.busy_steady.itertuples()],
        window=a.steady.label, window_ns=a.steady.dur_ns, nsys=trace.meta.nsys_version,
        slowest_kernel=(a.kernels.iloc[0]["name"] if len(a.kernels) else None),
        rank_payloads=_rank_payloads(a, trace_path),
        ranks_verdict=(a.ranks.verdict if a.ranks is not None and len(a.ranks.ranks) > 1 else None),
        warnings=list(trace.meta.warnings),
        # how each rule ended: fired, passed (it looked at the data), not_checked (with the input the
        # trace lacks), disabled; the JSON's "rules" and the report's "Rules run" carry the same
        rules_run=[(r["rule"], r["status"], r.get("reason")) for r in a.rule_log],
        nsys_rules=[(r["nsys_rule"], int(r["count"]), int(r["steady_count"])) for r in
                    a.nsys_rules.to_dict("records") if r["count"]])


def _gpu_metrics_lines(a: Any) -> list[str]:
    from nsysan.report.metrics_view import terminal_lines

    return terminal_lines(a)


def slow_share(a: Any) -> tuple[int, int, float] | None:
    """``analyses.slow_iterations.headline`` (imported when a summary is built: not at start-up)."""
    from nsysan.analyses.slow_iterations import headline

    return headline(a.slow_iterations, any(f.rule == "slow-iterations" for f in a.findings))


def _capture_lines(a: Any) -> CaptureTime | None:
    """Where every second of the capture went (``analyses.phases``): the parts, the start-up's fillers,
    the window's idle share."""
    from nsysan.report.tables import capture_parts

    ph = a.phases
    if ph is None:
        return None
    span = ph.judged.dur_ns
    return CaptureTime(capture_ns=ph.capture.dur_ns, parts=capture_parts(ph),
                       startup_filled=[(x["what"], int(x["ns"]))
                                       for x in sorted(ph.startup_filled, key=lambda x: -x["ns"])[:4]],
                       window_idle_frac=(ph.idle_ns / span) if span else 0.0, window=ph.judged.label)


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
