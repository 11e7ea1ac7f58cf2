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
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nsysan.errors import NsysanError, OutputError, OutputExistsError, UsageError
from nsysan.outputs import identity as _identity
from nsysan.outputs import own_output, path_too_long, reason, refuse_special, together, write_atomic
from nsysan.report.formats import OUTPUTS, Output, fit_name
from nsysan.report.summary import RunSummary, run_summary
from nsysan.units import clean_text

if TYPE_CHECKING:
    from nsysan.options import RunOptions


def _progress_factory(quiet: bool, label: str = "") -> Any:
    """Progress for one trace, from its load to its last output (``show(description, done, total)``):
    a progress line on a terminal's stderr; on a stderr that is not a terminal (a log, a pipe), plain
    lines (``_Lines``) that a run of a few seconds never prints; (None, None) when quiet."""
    if quiet:
        return None, None
    if not sys.stderr.isatty():
        lines = _Lines(label)
        return lines, lines.show
    try:
        from rich.progress import Progress
    except ImportError:  # pragma: no cover
        return None, None
    prog = Progress(transient=True)
    task = prog.add_task("loading", total=1)

    def show(description: str, i: int, n: int) -> None:
        prog.update(task, total=max(n, 1), completed=i, description=description)

    return prog, show


class _Lines:
    """Progress as plain lines on a stderr that is not a terminal: one at most every ``EVERY`` seconds,
    the first after ``EVERY`` seconds, so a run of a few seconds prints none and a huge trace's minutes
    (the 10 GB replica: 2-4 minutes) say where they go: ``nsysan: NAME: 40 s, analysing: gaps (3/14)``."""

    EVERY = 10.0

    def __init__(self, label: str) -> None:
        self.label = clean_text(label)
        self.t0 = self.last = time.monotonic()

    def start(self) -> None:
        return None

    def stop(self) -> None:
        return None

    def show(self, description: str, i: int, n: int) -> None:
        now = time.monotonic()
        if now - self.last < self.EVERY:
            return
        self.last = now
        try:
            line = f"nsysan: {self.label}: {now - self.t0:.0f} s, {clean_text(description)} ({i}/{max(n, 1)})"
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
        except (OSError, ValueError):  # stderr closed: progress is not worth an error
            pass


def _prefixed(show: Any, prefix: str) -> Any:
    """``show`` for a loader's or analysis' ``progress(stage, done, total)``: the stage after ``prefix``."""
    return None if show is None else (lambda stage, i, n: show(f"{prefix}{stage}", i, n))


def resolve_input(path: str, quiet: bool = False) -> str:
    """The SQLite file to read for a trace argument: a ``.nsys-rep`` is exported with nsys into
    nsysan's cache (see ``nsysan.record.export``); a FIFO, directory or device is refused before any open."""
    from nsysan.record.export import resolve, stderr_line

    return resolve(path, say=None if quiet else stderr_line)


# -- before any work: the outputs planned and checked --------------------------------------------

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
            exists.append(clean_text(out))
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
    shown = clean_text(out)
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
    shown = clean_text(out)
    long = path_too_long(out)
    if long:
        raise OutputError(f"{option} {shown[:200]}{'...' if len(shown) > 200 else ''}: cannot write: {long}")
    for parent in [Path(out).parent, *Path(out).parent.parents]:
        if parent.exists() or parent.is_symlink():
            if not parent.is_dir():
                raise OutputError(f"{option} {shown}: cannot write: {clean_text(parent)} is not a directory")
            break
    refuse_special(option, out)
    if ident is not None and Path(out).is_dir():
        raise OutputError(f"{option} {shown}: is a directory")
    exists = ident is not None or Path(out).is_symlink()
    if exists and not force and not own_output(out):  # nsysan's own outputs are replaced
        raise OutputExistsError(f"{shown}: exists, and nsysan did not write it", hint="pass --force to overwrite it")


def check_combination(*, many: bool, out_dir: str | None, paths: dict[str, str | None]) -> None:
    """``analyze``'s outputs combined as they can be: with several traces only ``--out-dir`` (which
    writes the outputs with a ``suffix`` per trace), an output of ``one_trace`` only for one trace, and
    ``--out-dir`` a directory."""
    given = [o for o in OUTPUTS if o.one_trace is None]
    flags = [o.flag for o in given]
    if out_dir and any(paths.get(o.name) for o in given):
        per_trace = " and ".join(f"<trace>{o.suffix}" for o in OUTPUTS if o.suffix)
        raise UsageError(f"--out-dir writes {per_trace} per trace; it cannot be combined with "
                         f"{', '.join(flags[:-1])} or {flags[-1]}")
    if many and any(paths.get(o.name) for o in given):
        kinds = " + ".join((o.suffix or "").lstrip(".").upper() for o in OUTPUTS if o.suffix)
        raise UsageError(f"with several traces, use --out-dir DIR (one {kinds} per trace) instead of "
                         f"{'/'.join(flags)}")
    for o in OUTPUTS:
        if o.one_trace and paths.get(o.name) and (many or out_dir):
            raise UsageError(f"{o.flag} writes the {o.one_trace} of one trace; it cannot be combined with several "
                             "traces or --out-dir")
    if out_dir and (os.path.exists(out_dir) or os.path.islink(out_dir)) and not os.path.isdir(out_dir):
        raise OutputError(f"--out-dir {clean_text(out_dir)}: cannot write: exists and is not a directory")


def trace_outputs(trace: str, *, out_dir: str | None, paths: dict[str, str | None], off: set[str]) -> dict[str, str]:
    """One trace's outputs, by name: in ``out_dir`` (``<trace><suffix>``), else the paths given and the
    defaults (``Output.default``), less those turned off."""
    if out_dir is not None:
        return {o.name: str(Path(out_dir) / fit_name(Path(trace).stem, o.suffix)) for o in OUTPUTS
                if o.suffix and o.name not in off}
    chosen = {}
    for o in OUTPUTS:
        path = paths.get(o.name) or (o.default(trace, paths) if o.default else None)
        if path and o.name not in off:
            chosen[o.name] = path
    return chosen


def plan_analyze(traces: Sequence[str], base: RunOptions, *, many: bool, out_dir: str | None,
                 paths: dict[str, str | None], off: set[str], force: bool,
                 side_inputs: Sequence[str] = ()) -> tuple[list[tuple[str, RunOptions]], list[tuple[int, int]]]:
    """Each trace's options (``base`` and its ``outputs``, by name: ``report.formats``), the combination
    checked (``check_combination``) and every output (``check_outputs``) before any trace is opened:
    nothing is analysed for an output that cannot be written, and no output can be written over an
    input (a trace, or a ``side_inputs`` file such as ``--config``). ``paths``: the outputs' options,
    by name; ``off``: the names turned off (``--no-html``). Returns the jobs and the inputs' identities."""
    check_combination(many=many, out_dir=out_dir, paths=paths)
    jobs: list[tuple[str, dict[str, str]]] = []
    planned: list[tuple[str, str]] = []
    stems: dict[str, str] = {}
    checked = sorted(OUTPUTS, key=lambda o: o.files is not None)  # the files, then the folders' files
    for t in traces:
        if many or out_dir:
            stem = Path(t).stem
            if stem in stems:
                raise UsageError(f"{clean_text(stems[stem])} and {clean_text(t)} have the same name {clean_text(stem)!r}: their "
                                 "outputs in --out-dir would overwrite each other", hint="rename or link one of them")
            stems[stem] = t
        chosen = trace_outputs(t, out_dir=(out_dir or ".") if many or out_dir else None, paths=paths, off=off)
        planned += [(o.flag, f) for o in checked if o.name in chosen for f in o.planned(chosen[o.name])]
        jobs.append((t, chosen))
    if out_dir:
        planned.append(("--out-dir", str(Path(out_dir) / "summary.json")))
        if "html" not in off:
            planned.append(("--out-dir", str(Path(out_dir) / "summary.html")))
        planned.append(("--out-dir", str(Path(out_dir) / "ranks.csv")))
    protect = check_outputs([*traces, *side_inputs], planned, force=force)
    shared = tuple(protect)  # (identities are tuples already)
    return [(t, replace(base, outputs=chosen, protect=shared)) for t, chosen in jobs], protect


def analyze_single(trace: str, opts: RunOptions) -> RunSummary:
    """One trace in this process: the big tables decode on background threads (C, no GIL) while
    pandas is being imported."""
    from nsysan.trace import prefetch

    opts = replace(opts, source=resolve_input(trace, opts.quiet))
    if not opts.time_range:  # the prefetch decodes whole tables; a range is kept while decoding
        prefetch.start(opts.source, max_rows=opts.max_events)
    return analyze_one(trace, opts)


# -- several traces --------------------------------------------------------------------------------

def run_many(jobs: list[tuple[str, RunOptions]], *, jobs_n: int,
             on_error: Callable[[str], None]) -> tuple[list[RunSummary], int]:
    """Several traces in local processes (``cluster.run_many``: on a Dask cluster); each failure goes
    to ``on_error`` as it comes. Returns the summaries and the number of failures. An output that
    cannot be written (``OutputError``: a full disk, a read-only folder) ends the run at once, as an
    interruption (Ctrl-C, SIGTERM, SIGHUP) does: the workers are stopped (``_executor.stop_pool``), so
    none outlives the command or writes after it, and the error is raised once."""
    from concurrent.futures import wait

    from nsysan import _atomic, _executor, _startup
    from nsysan.options import positive_jobs

    results, failed = [], 0
    workers = positive_jobs(jobs_n, len(jobs))
    threads = _startup.pool_threads(workers)  # each process analyses on its share of the cores
    pool = _executor.processes(workers, threads)
    try:
        _atomic.not_terminated()
        futs = [(t, pool.submit(analyze_one, t, o)) for t, o in jobs]
        for t, f in futs:
            while not f.done():  # a signal whose exception was lost stops the workers too
                _atomic.not_terminated()
                wait([f], timeout=0.25)
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

def analyze_one(trace_path: str, opts: RunOptions) -> RunSummary:
    """Analyse one trace and write its outputs; returns a small summary (used in parallel runs)."""
    from nsysan import _startup

    _startup.pandas_without_arrow()  # before anything imports pandas (after the prefetch started)
    from importlib import import_module

    import nsysan.analysis  # noqa: F401 - the analysis and the loader imported before the collector resumes
    import nsysan.trace  # noqa: F401

    chosen = [o for o in sorted(OUTPUTS, key=lambda o: o.write_order) if opts.outputs.get(o.name)]
    for module in [m for o in chosen for m in o.preload]:  # the renderers' libraries, before the collector resumes
        import_module(module)
    if not opts.quiet:  # and the terminal's
        import rich.console
        import rich.text  # noqa: F401
    _startup.resume_collector()

    t0 = time.perf_counter()
    # a .nsys-rep is read from its export (made once into the cache); names stay the user's
    source = opts.source or resolve_input(trace_path, opts.quiet)
    protect = [tuple(x) for x in opts.protect] + [i for i in [_identity(source)] if i is not None]
    # one progress line on a terminal, from the load to the last output (a 2.5 GB trace: 19 s on 2 cores);
    # elsewhere a plain line every 10 s of a long run
    prog, show = _progress_factory(opts.quiet, Path(trace_path).name) if opts.interactive else (None, None)
    if prog:
        prog.start()
    try:
        return _analyze_and_write(source, trace_path, opts, chosen, protect, show, t0)
    finally:
        if prog:
            prog.stop()


def _analyze_and_write(source: str, trace_path: str, opts: RunOptions, chosen: list[Output], protect: list[Any],
                       show: Any, t0: float) -> RunSummary:
    """``analyze_one``'s work once its inputs are resolved: load, analyse, write the outputs; inside
    the spill's scope (``nsysan._spill``: a trace larger than memory keeps its report's arrays in
    files too; a worker of a Dask cluster gets its own handler back after)."""
    from nsysan import _spill
    from nsysan.analysis import Params, analyze
    from nsysan.trace import open_trace

    before = _spill.stats()
    with _spill.scope():
        trace = open_trace(source, progress=_prefixed(show, "loading "), max_rows=opts.max_events,
                           time_range=opts.time_range)
        params = Params(iteration_range=opts.iteration_range, min_gap_ns=opts.min_gap_ns,
                        warmup_factor=opts.warmup_factor)

        # work an output begins before the rules (the report's timeline), handed to it when it is written;
        # dropped with this frame when an output cannot be written or the rules fail
        early: dict[str, Any] = {}
        starters = [o for o in chosen if o.early and any(opts.outputs.get(n) for n in o.early_with)]

        def begin(x: Any) -> None:
            early.update((o.name, o.early(x)) for o in starters if o.early)

        a = analyze(trace, params, rule_config=opts.rule_config.thresholds, disable=opts.rule_config.disabled,
                    on_analyses=begin if starters else None,
                    progress=_prefixed(show, "analysing: "))
        with together():  # the trace's outputs appear together, or none of them (an error, a signal)
            outputs = _write_outputs(a, source, opts, chosen, protect, early, show)
        summary = run_summary(a, trace, trace_path, outputs, round(time.perf_counter() - t0, 3))
    note = _spill.heap_note(before)  # (the outputs are written: the terminal's summary says it)
    if note:
        summary.warnings.append(note)
    return summary


def _write_outputs(a: Any, source: Any, opts: RunOptions, chosen: list[Output], protect: list[Any],
                   early: dict[str, Any], show: Any = None) -> list[str]:
    """Each output in ``chosen`` (in its ``write_order``) written; returns how the run names them. The
    text of a ``cached`` output (the JSON) is kept in the results cache, which ``compare`` and ``diff`` reuse."""
    outputs = []
    for i, o in enumerate(chosen):
        if show:
            show(f"writing {o.label}", i, len(chosen))
        path = opts.outputs[o.name]
        text = o.write(a, path, force=opts.force, protect=protect, show_env=opts.show_env,
                       early=early.get(o.name))
        outputs.append(o.shown(path))
        if o.cached and text is not None:
            _keep_result(source, opts, text)
    return outputs


def _keep_result(source: Any, opts: RunOptions, text: str) -> None:
    from nsysan import results

    if not opts.show_env and not opts.time_range and results.enabled():  # compare and diff reuse it
        results.put(results.key(source, results.options_of(
            opts.iteration_range, opts.min_gap_ns, opts.warmup_factor, opts.rule_config.cache_key())), text)
