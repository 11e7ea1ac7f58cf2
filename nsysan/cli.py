"""Command line. The only module that prints or exits; it maps ``NsysanError`` to exit codes.

    nsysan analyze TRACE.sqlite [--json OUT.json] [--html OUT.html] [--csv DIR] ...
    nsysan rules [--markdown]
    nsysan profile [-o NAME] [--nsys PATH] [--diagnose] -- COMMAND ...
    nsysan example            # path of the bundled example trace
    nsysan diff BASE NEW [--fail-on-regression 5%] [--json OUT] [--html OUT]
    nsysan compare T1 T2 ... [--labels a,b,...] [--markdown] [--json OUT] [--html OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import stat
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nsysan._version import __version__
from nsysan.errors import (
    EXIT_CODES,
    NsysanError,
    OutputError,
    OutputExistsError,
    ToolNotFoundError,
    UsageError,
)
from nsysan.options import check_number
from nsysan.options import load_config as _load_config
from nsysan.options import parse_set as _parse_set
from nsysan.outputs import write_atomic
from nsysan.outputs import identity as _identity
from nsysan.pipeline import analyze_one, resolve_input  # noqa: F401  (analyze_one: its former home)
from nsysan.outputs import own_output

NAME_MAX = 255  # bytes in one path component on Linux, macOS and Windows file systems


def _say(text: object) -> str:
    """Untrusted text (from a trace, a file name, an error) made safe for the terminal."""
    from nsysan.units import clean_text

    return clean_text(text)


def _number(option: str, text: str, *, minimum: float = 0.0, strict: bool = False, integer: bool = False) -> Any:
    """A finite number >= minimum (> with strict), or a usage error naming the option."""
    try:
        return check_number(text, minimum=minimum, strict=strict, integer=integer)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _time_range(text: str) -> tuple[float, float]:
    """``START:END`` in seconds from the capture's start, 0 <= START < END."""
    start, sep, end = text.partition(":")
    try:
        a, b = check_number(start), check_number(end)
    except ValueError:
        a = b = -1.0
    if not sep or not 0 <= a < b:
        raise argparse.ArgumentTypeError(f"{_say(text)!r}: expected START:END in seconds from the capture's start, "
                                         "0 <= START < END (e.g. 10:12.5)")
    return (float(a), float(b))


def _opt_number(option: str, **kw: Any) -> Any:
    def parse(text: str) -> Any:
        return _number(option, text, **kw)

    parse.__name__ = option  # argparse names the option in its message
    return parse


_SCHEDULER = re.compile(r"^(?:(?:tcp|tls|ucx|ws|wss|inproc)://)?[A-Za-z0-9_.\-\[\]:%]+(?::\d{1,5})?/?$")


def _scheduler_address(text: str) -> str:
    if not _SCHEDULER.match(text) or text.startswith((":", "/")) or "://" not in text and ":" not in text:
        raise argparse.ArgumentTypeError(f"{_say(text)!r}: expected a Dask scheduler address such as "
                                         "tcp://head:8786 (or host:port)")
    return text


SEVERITY_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}


def short_kernel_name(name: str) -> str:
    """A C++ kernel name without its return type and argument list (the terminal shows the rest)."""
    n = name.strip()
    if n.startswith("void "):
        n = n[5:]
    if n.endswith(")"):  # drop the balanced parameter list at the end
        depth = 0
        for i in range(len(n) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(n[i], 0)
            if depth == 0:
                n = n[:i] if i > 0 else n
                break
    return n


def _table_console() -> Any:
    """A console for tables: the terminal's width on a terminal; piped, wide enough that a row is
    a line (no number split from its unit at 80 columns)."""
    from rich.console import Console

    c = Console(highlight=False, soft_wrap=False)
    if not c.is_terminal and "COLUMNS" not in os.environ:
        c = Console(highlight=False, soft_wrap=False, width=200)
    return c


def _print_summary(res: dict[str, Any]) -> None:
    """The terminal summary: the iteration, where its time goes, the fixes by saving (no estimate last)
    (each with its evidence and what to change), the top kernels of the steady state. Lines are
    wrapped to a terminal's width (never between a number and its unit) and not wrapped at all when
    the output is piped; colour only on a terminal (rich honours NO_COLOR)."""
    import textwrap

    from rich.console import Console
    from rich.text import Text

    from nsysan.units import fmt_ns, fmt_pct

    console = Console(highlight=False, soft_wrap=True)
    width = console.width if console.is_terminal else 0
    nb = "\u00a0"

    def glue(text: str) -> str:  # a number and its unit stay on one line
        import re

        return re.sub(r"(\d)\s(ns|us|ms|s|%|MB|GB|KB|B|GB/s|MB/s|x)\b", lambda m: m.group(1) + nb + m.group(2), text)

    def say(text: object, style: str = "", indent: int = 0, first: str | None = None) -> None:
        body = _say(text)
        lead = " " * indent if first is None else first
        if width and width > indent + 20:
            lines = textwrap.wrap(glue(body), width=width, initial_indent=lead, subsequent_indent=" " * indent,
                                  break_on_hyphens=False, break_long_words=True) or [lead]
            body = "\n".join(x.replace(nb, " ") for x in lines)
        else:
            body = lead + body
        console.print(Text(body, style=style))

    say(f"{res['trace']}  (nsys {res['nsys']}, analysed in {res['seconds']} s)", "bold")
    if res["range"]:
        seqs = int(res.get("sequences") or 1)
        if res.get("headline") == "period":
            head = (f"one every {fmt_ns(res['p50_ns'])} (p50 period, {res.get('throughput_per_s', 0):,.1f}/s), "
                    f"latency p50 {fmt_ns(res.get('latency_p50_ns'))}")
            if res.get("queueing"):
                head += f" (includes queueing: the CPU runs {res.get('queue_depth_p50'):g} iteration(s) ahead of the GPU)"
        else:
            head = f"latency p50 {fmt_ns(res['p50_ns'])}"
        n = f"{res['iterations']} steady" + (f" in {seqs} sequences (threads or ranks; rates are per sequence)"
                                            if seqs > 1 else "")
        say(f"Iteration '{res['range']}' ({n}): {head}", indent=2, first="")
        say(f"chosen: {res.get('why', '')}", "dim", indent=2)
    elif res.get("why"):
        say(f"Iteration: none ({res['why']}); the whole capture is judged", indent=2, first="")
    say(f"Window: {res['window']}, {fmt_ns(res['window_ns'])}", indent=2, first="")
    if not res.get("gpu_recorded", True):
        say("GPU activity was not recorded in this trace (no kernel, memcpy or memset tables): record it with "
            "nsys profile -t cuda (WSL2 captures have no GPU activity)", "yellow", indent=2, first="")
    for dev, frac, idle in res["busy"]:
        say(f"GPU {dev}: busy {fmt_pct(frac)}, idle {fmt_ns(idle)} in the window", indent=2, first="")
    for line in res.get("gpu_metrics", []):
        say(line, indent=2, first="")
    for label, span, parts in res.get("breakdown", []):
        say(f"Where {label}'s {fmt_ns(span)} goes: " + ", ".join(f"{p} {fmt_ns(ns)} ({fmt_pct(fr)})"
                                                              for p, ns, fr in parts), indent=2, first="")
    if res.get("ranks_verdict"):
        say(f"Ranks: {res['ranks_verdict']}", indent=2, first="")
    fixes = res.get("fixes") or []
    console.print()
    if fixes:
        total = sum(f["impact_ns"] for f in fixes)
        say(f"Fixes, by time saved, then those without a time estimate ({fmt_ns(total)} in all, "
            f"{fmt_pct(total / res['window_ns']) if res['window_ns'] else '-'} of the window, no time counted twice)",
            "bold")
        for i, f in enumerate(fixes, 1):
            sev = f["severity"]
            saves = (f"saves {fmt_ns(f['impact_ns'])}"
                     + (f" ({fmt_pct(f['impact_ns'] / res['window_ns'])})" if res["window_ns"] else "")
                     + (f", {fmt_ns(f['per_iteration_ns'])} per iteration" if f.get("per_iteration_ns") else "")
                     if f["impact_ns"] > 0 else "no time estimate")
            head = Text(f"{i:>2}. ")
            head.append(f"{sev.upper():<8}", style=SEVERITY_STYLE.get(sev, ""))
            tail = _say(f" {saves}  [{f['rule']}]")
            if width and len(head.plain) + len(tail) > width > 30:  # wrapped under the message's indent
                lines = textwrap.wrap(glue(tail), width=width, initial_indent=" " * len(head.plain),
                                      subsequent_indent=" " * 5, break_on_hyphens=False)
                tail = "\n".join(lines)[len(head.plain):].replace(nb, " ")
            head.append(tail)
            console.print(head)
            say(f["title"], "bold", indent=5)
            say(f["message"], indent=5)
            say(f"fix: {f['suggestion']}", "green", indent=10, first=" " * 5)
    else:
        say("No findings: no rule found time to save in this window.", "bold")
    if res.get("top_kernels"):
        console.print()
        say(f"Top kernels ({res['window']}, {fmt_ns(res.get('kernel_ns', 0))} of kernel time)", "bold")
        for name, tot, share, count in res["top_kernels"]:
            line = f"{fmt_ns(tot):>10} {fmt_pct(share):>6} {count:>7,}x  "
            short = _say(short_kernel_name(name))
            if width and len(line) + len(short) > width:
                short = short[:max(10, width - len(line) - 3)] + "..."
            console.print(Text(line + short))
    for w in res["warnings"]:
        say(f"note: {w}", "yellow", indent=6, first="")
    for out in res["outputs"]:
        say(f"wrote {out}", first="")


def _fit_name(name: str, suffix: str) -> str:
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
    return _fit_name(Path(trace).stem, ".nsysan.html")


CSV_NAMES = ("kernels", "kernel_configs", "cuda_api", "os_runtime", "memcpy", "memset", "nvtx", "launches",
             "overlap", "gpu_busy", "gaps", "iterations", "iteration_breakdown", "collectives", "ranks",
             "nsys_analyze", "findings")


def _same_place(a: str, b: str) -> bool:
    return os.path.normcase(os.path.realpath(a)) == os.path.normcase(os.path.realpath(b))


def check_outputs(inputs: Sequence[str], outputs: Sequence[tuple[str, str]], *, force: bool) -> list[tuple[int, int]]:
    """Before any work: no output is an input (same file by device and inode, so also through a
    symbolic or hard link), no two outputs are one file, every output folder can be one, and an
    existing output nsysan did not write needs ``force``. ``outputs``: (option, path). Returns the
    inputs' identities, which ``write_atomic`` checks again at the moment of writing."""
    protect = [i for i in (_identity(t) for t in inputs) if i is not None]
    seen: dict[str, str] = {}
    for option, out in outputs:
        shown = _say(out)
        ident = _identity(out)
        if ident is not None and ident in protect:
            raise UsageError(f"{option} {shown}: is the input trace; refusing to write a report over it",
                             hint="choose another output name")
        key = os.path.normcase(os.path.realpath(out))
        if key in seen:
            raise UsageError(f"{option} {shown}: the same file as {seen[key]}; each output needs its own path")
        seen[key] = f"{option} {shown}"
        if len(os.fsencode(Path(out).name)) > NAME_MAX:
            raise UsageError(f"{option} {shown[:80]}...: file name longer than {NAME_MAX} bytes")
        for parent in [Path(out).parent, *Path(out).parent.parents]:
            if parent.exists() or parent.is_symlink():
                if not parent.is_dir():
                    raise UsageError(f"{option} {shown}: {_say(parent)} is not a directory")
                break
        if ident is not None and Path(out).is_dir():
            raise UsageError(f"{option} {shown}: is a directory")
        if ident is not None and not force and not own_output(out):  # nsysan's own outputs are replaced
            raise OutputExistsError(f"{shown}: exists, and nsysan did not write it",
                                    hint="pass --force to overwrite it")
    return protect


def _positive_jobs(jobs: int, n: int) -> int:
    """Workers: min(--jobs or the cores, traces, cores)."""
    from nsysan._executor import cpus

    cores = cpus()
    return max(1, min(jobs or cores, n, cores))


def _import_numpy_without_blas_threads() -> None:
    """numpy's OpenBLAS starts a thread per core when numpy is imported, and they spun for about
    0.1 s of CPU during the imports that follow, on the core the prefetch decodes on. nsysan calls
    no BLAS routine, so numpy is imported with ``OPENBLAS_NUM_THREADS=1`` (unless the user set it);
    the variable is removed again at once, so no program nsysan starts (nsys, a profiled command)
    inherits it."""
    if "numpy" in sys.modules or "OPENBLAS_NUM_THREADS" in os.environ:
        return
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        import numpy  # noqa: F401
    finally:
        os.environ.pop("OPENBLAS_NUM_THREADS", None)


def cmd_analyze(args: argparse.Namespace) -> int:
    _import_numpy_without_blas_threads()
    rule_config = _load_config(args.config)
    for rid, th in _parse_set(args.set or []).items():
        rule_config.setdefault(rid, {}).update(th)
    if args.disable:
        from nsysan.options import disabled_rules

        rule_config["_disabled"] = disabled_rules(args.disable)
    many = len(args.traces) > 1 or bool(args.scheduler)
    if args.out_dir and (args.json or args.html or args.csv):
        raise UsageError("--out-dir writes <trace>.json and <trace>.html per trace; it cannot be combined with "
                         "--json, --html or --csv")
    if many and (args.json or args.html or args.csv):
        raise UsageError("with several traces, use --out-dir DIR (one JSON + HTML per trace) instead of "
                         "--json/--html/--csv")
    if args.perfetto and (many or args.out_dir):
        raise UsageError("--perfetto writes the timeline of one trace; it cannot be combined with several traces "
                         "or --out-dir")
    if args.out_dir and (os.path.exists(args.out_dir) or os.path.islink(args.out_dir)) \
            and not os.path.isdir(args.out_dir):
        raise UsageError(f"--out-dir {_say(args.out_dir)}: exists and is not a directory")
    base = {"iteration_range": args.iteration_range, "min_gap_ns": int(args.min_gap_us * 1000),
            "warmup_factor": args.warmup_factor, "rule_config": rule_config, "show_env": args.show_env,
            "force": args.force, "quiet": args.quiet, "max_events": args.max_events, "interactive": not many,
            "time_range": args.time_range}
    jobs = []
    planned: list[tuple[str, str]] = []
    stems: dict[str, str] = {}
    for t in args.traces:
        o = dict(base)
        if many or args.out_dir:
            d = Path(args.out_dir or ".")
            stem = Path(t).stem
            if stem in stems:
                raise UsageError(f"{_say(stems[stem])} and {_say(t)} have the same name {_say(stem)!r}: their "
                                 "outputs in --out-dir would overwrite each other", hint="rename or link one of them")
            stems[stem] = t
            o.update(json=str(d / _fit_name(stem, ".json")),
                     html=None if args.no_html else str(d / _fit_name(stem, ".html")), csv=None)
        else:
            o.update(json=args.json, csv=args.csv, perfetto=args.perfetto,
                     html=None if args.no_html else (args.html or _default_html(t, args.json)))
        planned += [(opt, o[key]) for opt, key in (("--json", "json"), ("--html", "html"), ("--perfetto", "perfetto"))
                    if o.get(key)]
        if o["csv"]:
            planned += [("--csv", str(Path(o["csv"]) / f"{n}.csv")) for n in CSV_NAMES]
        jobs.append((t, o))
    if args.out_dir:
        planned.append(("--out-dir", str(Path(args.out_dir) / "summary.json")))
        if not args.no_html:
            planned.append(("--out-dir", str(Path(args.out_dir) / "summary.html")))
        planned.append(("--out-dir", str(Path(args.out_dir) / "ranks.csv")))
    # options and outputs checked before the trace is opened: nothing is analysed for an output
    # that cannot be written, and no output can be written over an input
    protect = check_outputs(args.traces, planned, force=args.force)
    for _, o in jobs:
        o["protect"] = protect
    if not many:
        # decode the big tables on background threads (C, no GIL) while pandas is being imported
        from nsysan.trace import prefetch

        jobs[0][1]["source"] = resolve_input(args.traces[0], args.quiet)
        if not args.time_range:  # the prefetch decodes whole tables; a range is kept while decoding
            prefetch.start(jobs[0][1]["source"], max_rows=args.max_events)
        res = analyze_one(*jobs[0])
        if not args.quiet:
            _print_summary(res)
        return 0
    results, failed = _run_many(jobs, args)
    from nsysan.report.cross import cross_summary, render_cross_html

    cs = cross_summary(results)
    _print_cross(cs)
    if args.out_dir:
        summary = Path(args.out_dir) / "summary.json"
        write_atomic(summary, json.dumps(cs, indent=1, default=str) + "\n", force=args.force, protect=protect)
        print(f"wrote {_say(summary)}")
        if not args.no_html:
            page = summary.with_name("summary.html")
            write_atomic(page, render_cross_html(cs), force=args.force, protect=protect)
            print(f"wrote {_say(page)}")
        if cs.get("ranks", {}).get("ranks"):
            import pandas as pd

            from nsysan.report.jsonout import to_csv

            table = summary.with_name("ranks.csv")
            write_atomic(table, to_csv(pd.DataFrame(cs["ranks"]["ranks"])), force=args.force, protect=protect)
            print(f"wrote {_say(table)}")
    return 1 if failed else 0


def _set_threads(n: str) -> None:
    os.environ["NSYSAN_THREADS"] = n


def _run_many(jobs: list[tuple[str, dict[str, Any]]], args: argparse.Namespace) -> tuple[list[dict[str, Any]], int]:
    """Several traces: local processes, or one task each on a Dask cluster (``--scheduler``)."""
    if args.scheduler:
        from nsysan import cluster

        results, errors = cluster.run(args.scheduler, jobs, timeout_s=args.scheduler_timeout)
        for e in errors:
            print(f"nsysan: {_say(e['error'])}", file=sys.stderr)
        return results, len(errors)
    from concurrent.futures import ProcessPoolExecutor

    results, failed = [], 0
    workers = _positive_jobs(args.jobs, len(jobs))
    # each process analyses on its share of the cores
    from nsysan._executor import cpus

    threads = os.environ.get("NSYSAN_THREADS") or str(max(1, cpus() // workers))
    with ProcessPoolExecutor(max_workers=workers, initializer=_set_threads, initargs=(threads,)) as pool:
        futs = [(t, pool.submit(analyze_one, t, o)) for t, o in jobs]
        for t, f in futs:
            try:
                results.append(f.result())
            except NsysanError as e:
                failed += 1
                print(f"nsysan: {_say(e)}", file=sys.stderr)
            except Exception as e:  # noqa: BLE001 - one trace's failure (a crashed worker) is reported, not raised
                failed += 1
                print(f"nsysan: {_say(t)}: internal error ({type(e).__name__}: {_say(e)})", file=sys.stderr)
    return results, failed


def _print_cross(summary: dict[str, Any]) -> None:
    """The cross-trace table: per trace (rank) p50, GPU busy, top finding, slowest kernel, stragglers."""
    from nsysan.units import fmt_ns, fmt_pct

    print(f"{'trace':40s} {'p50':>10s} {'GPU busy':>9s} {'top finding':30s} slowest kernel")
    for r in summary["traces"]:
        busy = fmt_pct(r["busy"][0]["busy_frac"]) if r["busy"] else "-"
        print(f"{_say(Path(r['trace']).name)[:40]:40s} {fmt_ns(r['p50_ns']):>10s} {busy:>9s} "
              f"{_say(r['top_finding'] or '-'):30s} "
              f"{_say(str(r['slowest_kernel']))[:60]}{' STRAGGLER' if r['straggler'] else ''}")
    if "ranks" in summary:
        print(f"ranks: {_say(summary['ranks']['verdict'])}")


def cmd_rules(args: argparse.Namespace) -> int:
    from nsysan.rules import REGISTRY

    if args.markdown:
        print(rules_markdown(), end="")
        return 0
    for rid in sorted(REGISTRY):
        r = REGISTRY[rid]
        th = ", ".join(f"{k}={v}" for k, v in r.thresholds.items()) or "-"
        print(f"{rid}: {r.title}\n  {r.summary}\n  why: {r.why}\n  fix: {r.fix}\n  thresholds: {th}\n")
    return 0


def rules_markdown() -> str:
    from nsysan.rules import REGISTRY

    lines = ["| rule | what it finds | fix | thresholds |", "|---|---|---|---|"]
    for rid in sorted(REGISTRY):
        r = REGISTRY[rid]
        th = ", ".join(f"`{k}={v}`" for k, v in r.thresholds.items()) or "-"
        lines.append(f"| `{rid}` | {r.summary} | {r.fix} | {th} |")
    return "\n".join(lines) + "\n"


MIN_NSYS = (2021, 2)


PROFILE_SLACK_NS = 2_000_000_000  # file times are coarse on some file systems (FAT: 2 s)


def cmd_profile(args: argparse.Namespace) -> int:
    """Run a command under ``nsys profile --export sqlite``. Outputs are checked first (nsys itself
    writes to another name when the output exists, e.g. /tmp/nsys-report-XXXX or x(1), and exits 0);
    nsys runs in its own process group, stopped as a whole on ``--timeout`` or Ctrl-C; the trace
    reported is checked to be written by this run."""
    from nsysan import inputs

    cmd = list(args.command)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise UsageError("nothing to profile: nsysan profile [options] -- COMMAND ...")
    out = args.output
    for suffix in (".nsys-rep", ".qdrep", ".sqlite"):  # -o x.nsys-rep means x
        if out.lower().endswith(suffix) and len(out) > len(suffix):
            out = out[: -len(suffix)]
            break
    if "%" in out:
        raise UsageError(f"-o {_say(out)}: nsys expands %p, %h, %q{{VAR}} in output names, so nsysan could not "
                         "tell which file it wrote", hint="give a plain name")
    if not out or out.endswith(("/", os.sep)) or os.path.isdir(out):
        raise UsageError(f"-o {_say(out)}: expected an output name without extension (e.g. -o runs/mytrace)")
    nsys = inputs.find_nsys(args.nsys)
    if not nsys:
        raise ToolNotFoundError("nsys (Nsight Systems CLI) is not on PATH",
                                hint="install Nsight Systems, or pass --nsys /path/to/nsys (or set NSYSAN_NSYS)")
    inputs.check_nsys(nsys)
    report, sqlite = Path(out + ".nsys-rep"), Path(out + ".sqlite")
    existing = [p for p in (report, sqlite) if p.exists() or p.is_symlink()]
    for p in existing:
        if p.is_dir() and not p.is_symlink():
            raise UsageError(f"{_say(p)}: is a directory", hint="choose another -o name")
    if existing and not args.force:
        raise OutputExistsError(f"{' and '.join(_say(p) for p in existing)}: exists; nsys would write its trace "
                                "under another name", hint="pass -f to overwrite, or choose another -o name")
    try:
        ver = subprocess.run([nsys, "--version"], capture_output=True, text=True, timeout=60,
                             stdin=subprocess.DEVNULL).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ToolNotFoundError(f"{_say(nsys)}: cannot run it ({_say(e)})") from e
    m = re.search(r"(\d{4})\.(\d+)", ver)
    if not m or (int(m.group(1)), int(m.group(2))) < MIN_NSYS:
        raise ToolNotFoundError(f"{_say(nsys)}: version {_say(ver.strip()) or 'unknown'} is too old; need "
                                f"{MIN_NSYS[0]}.{MIN_NSYS[1]} or newer for SQLite export with NVTX")
    for p in existing:  # -f: the old files go first, so a file found afterwards is this run's
        try:
            p.unlink()
        except OSError as e:
            raise OutputError(f"{_say(p)}: cannot remove it to overwrite it: {e.strerror or e}") from e
    try:  # nsys 2022.4 writes /tmp/nsys-report-XXXX.* (and exits 0) when the folder is missing
        sqlite.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"-o {_say(out)}: cannot create its folder: {e.strerror or e}") from e
    from nsysan import presets

    full = presets.profile_command(nsys, out, cmd, trace=args.trace, force=args.force, graph_nodes=args.graph_nodes,
                                   diagnose=args.diagnose, python=args.python_sampling,
                                   gpu_metrics_devices=args.gpu_metrics_devices, cuda_backtrace=args.cuda_backtrace)
    print("running: " + _say(" ".join(full)), file=sys.stderr, flush=True)
    started_ns = time.time_ns()
    try:
        rc = inputs.run_group(full, timeout=args.timeout, say=inputs._stderr)
        if args.diagnose and _fresh(report, started_ns):  # the preset exports with blobs in a step of its own
            rc = presets.export_report(nsys, str(report), str(sqlite), timeout=args.timeout,
                                       say=inputs._stderr) or rc
    except subprocess.TimeoutExpired:
        from nsysan.errors import ResourceLimitError

        kept = _fresh(sqlite, started_ns)
        raise ResourceLimitError(
            f"nsys did not finish within --timeout {args.timeout:g} s; it and every process it started were stopped",
            hint=(f"nsys wrote {_say(sqlite)} before it stopped: nsysan analyze {_say(sqlite)}" if kept else
                  "raise --timeout, or make the run shorter (nsys profile --duration SECONDS)")) from None
    if not sqlite.exists():
        print(f"nsysan: nsys exited {rc} and wrote no {_say(sqlite)}", file=sys.stderr)
        return rc or 1
    if not _fresh(sqlite, started_ns):
        raise OutputError(f"{_say(sqlite)}: not written by this run (older than its start); nsys wrote its "
                          "trace elsewhere (see its \"Generated:\" lines above)", hint="pass -f to overwrite")
    print(f"trace: {_say(sqlite)}\nnext:  nsysan analyze {_say(sqlite)}")
    return rc


def _fresh(path: Path, started_ns: int) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_mtime_ns >= started_ns - PROFILE_SLACK_NS


def cmd_example(args: argparse.Namespace) -> int:
    from nsysan.examples import example_path

    name = args.name[len("example:"):] if args.name.startswith("example:") else args.name  # as the README writes it
    print(example_path("ladder_baseline" if name == "example" else name))
    return 0


def _fmt_metric(metric: str, v: float | None, signed: bool = False) -> str:
    """A metric's value with its unit (``metric`` is its id: the suffix says the unit)."""
    from nsysan.units import fmt_bytes, fmt_ns, fmt_pct

    if v is None:
        return "-"
    sign = "+" if signed and v > 0 else ""
    if metric.endswith("_ns"):
        return sign + fmt_ns(v)
    if "frac" in metric:
        return (f"{v * 100:+.1f} pt" if signed else fmt_pct(v))
    if metric.endswith("bytes_per_s"):
        return sign + fmt_bytes(v) + "/s"
    if metric.endswith("_per_s"):
        return f"{sign}{v:,.2f}/s"
    return f"{sign}{v:,.2f}"


def _render_compare(**ctx: Any) -> str:
    from nsysan.report.html import environment

    return environment().get_template("compare.html.j2").render(
        fmt=_fmt_metric, generated_by=f"nsysan {__version__}", **ctx)


def _labels(paths: Sequence[str]) -> list[str]:
    return [Path(p).name.removesuffix(".json").removesuffix(".sqlite").removesuffix(".nsys-rep") for p in paths]


def cmd_diff(args: argparse.Namespace) -> int:
    from nsysan import compare

    threshold = compare.parse_threshold(args.fail_on_regression) if args.fail_on_regression is not None else None
    if threshold is not None:
        compare.gate_rule(args.metric, threshold)  # a wrong --metric fails before the traces are read
    inputs = [args.base, args.new]
    protect = check_outputs(inputs, [(o, v) for o, v in (("--json", args.json), ("--html", args.html)) if v],
                            force=args.force)
    base = compare.load(resolve_input(args.base, args.quiet), iteration_range=args.iteration_range)
    new = compare.load(resolve_input(args.new, args.quiet), iteration_range=args.iteration_range)
    lb, ln = _labels([args.base, args.new])
    if lb == ln:
        lb, ln = "base", "new"
    d = compare.diff(base, new, base_label=lb, new_label=ln)
    if threshold is not None:
        d.gate = compare.gate(d, args.metric, threshold)
        note = compare.threshold_note(args.fail_on_regression)
        if note:
            d.gate["note"] = note
    if args.json:
        write_atomic(Path(args.json), compare.dumps(d.to_dict()), force=args.force, protect=protect)
    if args.html:
        write_atomic(Path(args.html), _render_compare(title=f"nsysan diff: {lb} vs {ln}", diff=d, ladder=None),
                     force=args.force, protect=protect)
    if not args.quiet:
        _print_diff(d)
    if d.gate and d.gate["failed"]:
        from nsysan.errors import RegressionError

        raise RegressionError(d.gate["message"])
    return 0


def _print_diff(d: Any) -> None:
    from rich.table import Table
    from rich.text import Text as _Text

    from nsysan.compare import short_names
    from nsysan.units import fmt_ns

    def Text(text: object, **kw: Any) -> _Text:  # labels and names come from files
        return _Text(_say(text), **kw)

    c = _table_console()
    for w in d.warnings:
        c.print(Text(f"{w['level']}: {w['message']}", style="yellow" if w["level"] == "warning" else None))
    if d.gate:
        c.print(Text(f"gate: {d.gate['rule']}"))
        if d.gate.get("note"):
            c.print(Text(f"note: {d.gate['note']}", style="yellow"))
    t = Table(title=Text(f"{d.base} -> {d.new}"))
    t.add_column("metric", overflow="fold", ratio=3)
    for col in (d.base, d.new):
        t.add_column(Text(col), overflow="fold", justify="right", ratio=2)
    t.add_column("change", overflow="fold", justify="right", ratio=2)
    t.add_column("ratio", justify="right", ratio=1)
    t.add_column("verdict", overflow="fold", ratio=4)
    styles = {"better": "green", "worse": "red"}
    for m in d.metrics:
        if m["base"] is None and m["new"] is None:
            continue
        t.add_row(*(Text(x) for x in (m["label"], _fmt_metric(m["metric"], m["base"]),
                                      _fmt_metric(m["metric"], m["new"]), _fmt_metric(m["metric"], m["delta"], signed=True),
                                      f"{m['ratio']:.3f}" if m["ratio"] is not None else "-")),
                  Text(m["verdict_text"], style=styles.get(m["verdict"] or "")))
    c.print(t)
    c.print(Text(f"noise: {d.noise['note']} ({d.noise['base_samples']} vs {d.noise['new_samples']} iterations); "
                 f"{d.noise['spread_note']}"))
    for k in ("resolved", "remaining", "new"):
        names = ", ".join(f["rule"] for f in d.findings[k]) or "none"
        c.print(Text(f"findings {k}: {names}"))
    for label, rows in (("Kernels", d.kernels), ("NVTX ranges", d.nvtx)):
        top = [r for r in rows if r["delta_total_ns"] != 0][:5]
        if not top:
            continue
        short = short_names([r["name"] for r in rows], width=max(40, c.width - 40))
        kt = Table(title=Text(f"{label}: largest changes in total time"), title_justify="left")
        kt.add_column("name", overflow="fold", ratio=6)
        kt.add_column("status")
        kt.add_column("count", justify="right")
        kt.add_column("change", justify="right")
        for r in top:
            kt.add_row(Text(short[r["name"]]), Text(r["status"]), Text(f"{r['base_count']} -> {r['new_count']}"),
                       Text(("+" if r["delta_total_ns"] > 0 else "") + fmt_ns(r["delta_total_ns"])))
        c.print(kt)
    _print_gpu_metric_deltas(c, d, Text)
    for n in d.other_notes:
        c.print(Text(f"note: {n}", style="yellow"))
    if d.gate:
        c.print(Text(("REGRESSION: " if d.gate["failed"] else "gate passed: ") + d.gate["message"],
                     style="bold red" if d.gate["failed"] else "green"))


def _print_gpu_metric_deltas(c: Any, d: Any, Text: Any) -> None:
    """GPU metric means per device and range on both sides (``compare.gpu_metric_deltas``)."""
    from rich.table import Table

    if not d.gpu_metrics:
        return
    t = Table(title=Text("GPU metrics (mean % of peak): base -> new"), title_justify="left")
    t.add_column("device / range", overflow="fold", ratio=3)
    for k in ("SMs active", "tensor", "DRAM rd+wr", "PCIe rx/tx"):
        t.add_column(k, justify="right", ratio=2)
    t.add_column("verdict", overflow="fold", ratio=3)

    def pair(r: dict[str, Any], *keys: str) -> str:
        got = [r.get(k) for k in keys]
        if any(g is None for g in got):
            return "-"
        b = sum(g["base"] or 0 for g in got)
        n = sum(g["new"] or 0 for g in got)
        return f"{b:.1f} -> {n:.1f}"

    for r in d.gpu_metrics:
        v = r["base_verdict"] if r["base_verdict"] == r["new_verdict"] else f"{r['base_verdict'] or '-'} -> {r['new_verdict'] or '-'}"
        t.add_row(Text(f"{r['device']} {r['range']}"), Text(pair(r, "sm_active")), Text(pair(r, "tensor_active")),
                  Text(pair(r, "dram_read", "dram_write")),
                  Text(f"{pair(r, 'pcie_rx')} / {pair(r, 'pcie_tx')}"), Text(v))
    c.print(t)


def cmd_compare(args: argparse.Namespace) -> int:
    from concurrent.futures import ProcessPoolExecutor

    from nsysan import compare

    labels = args.labels.split(",") if args.labels else _labels(args.traces)
    if len(labels) != len(args.traces):
        raise UsageError(f"--labels has {len(labels)} names for {len(args.traces)} traces")
    if len(args.traces) < 2:
        raise UsageError("compare needs at least two traces (or nsysan JSON files)")
    protect = check_outputs(args.traces, [(o, v) for o, v in (("--json", args.json), ("--html", args.html)) if v],
                            force=args.force)
    sources = [resolve_input(t, args.quiet) for t in args.traces]
    workers = _positive_jobs(args.jobs, len(sources))
    if workers > 1:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            dicts = list(pool.map(compare.load, sources, [args.iteration_range] * len(sources)))
    else:
        dicts = [compare.load(t, iteration_range=args.iteration_range) for t in sources]
    lad = compare.ladder(list(zip(labels, dicts)), args.metric)
    if args.json:
        write_atomic(Path(args.json), compare.dumps(lad), force=args.force, protect=protect)
    if args.html:
        vmax = max([r["value"] for r in lad["rows"] if r["value"]] or [1])
        write_atomic(Path(args.html), _render_compare(title="nsysan compare", diff=None, ladder=lad, ladder_max=vmax),
                     force=args.force, protect=protect)
    if args.markdown:
        print(ladder_markdown(lad), end="")
    elif not args.quiet:
        from rich.table import Table
        from rich.text import Text

        t = Table(title=Text(_say(lad["label"])))
        gm = any(r.get("gpu_metrics") for r in lad["rows"])  # steady GPU metric means (compare.steady_gpu_metrics)
        for col in ("trace", "value", "step", "total", "iteration p50", "GPU busy", "top finding",
                    *(("SMs / tensor / DRAM (steady, % of peak)",) if gm else ())):
            t.add_column(col)
        for r in lad["rows"]:
            t.add_row(*(Text(_say(x)) for x in (
                r["label"], _fmt_metric(lad["metric"], r["value"]),
                f"{r['step_speedup']:.2f}x" if r["step_speedup"] else "-",
                f"{r['total_speedup']:.2f}x" if r["total_speedup"] else "-",
                _fmt_metric("iter_p50_ns", r["iter_p50_ns"]), _fmt_metric("busy_frac", r["gpu_busy_frac"]),
                r["top_finding"] or "-", *((_gpu_metrics_cell(r),) if gm else ()))))
        _table_console().print(t)
    return 0


def _gpu_metrics_cell(r: dict[str, Any]) -> str:
    def pct(v: Any) -> str:
        return "-" if v is None else f"{float(v):.1f}"

    return "; ".join(f"{dev}: {pct(m['sm_active'])} / {pct(m['tensor_active'])} / {pct(m['dram'])}"
                     for dev, m in (r.get("gpu_metrics") or {}).items()) or "-"


def ladder_markdown(lad: dict[str, Any]) -> str:
    # steady-state GPU metric means (compare.steady_gpu_metrics), only when a trace has them; blank
    # for a trace without; "GPU N: v" per device when a trace has several
    gm = any(r.get("gpu_metrics") for r in lad["rows"])
    extra = ("SMs active % (steady)", "tensor active % (steady)", "DRAM read+write % (steady)") if gm else ()
    lines = [f"| trace | {lad['label']} | step speedup | total speedup | GPU busy | top finding |"
             + "".join(f" {c} |" for c in extra),
             "|---|---:|---:|---:|---:|---|" + "---:|" * len(extra)]
    def md(text: object) -> str:  # one table cell: no escapes, no column breaks
        return _say(text).replace("|", "\\|")

    def metric_cell(r: dict[str, Any], key: str) -> str:
        devs = r.get("gpu_metrics") or {}
        vals = [(dev, m.get(key)) for dev, m in devs.items()]
        if len(vals) == 1:
            return "-" if vals[0][1] is None else f"{float(vals[0][1]):.1f}"
        return md("; ".join(f"{dev}: {'-' if v is None else format(float(v), '.1f')}" for dev, v in vals))

    for r in lad["rows"]:
        lines.append(f"| {md(r['label'])} | {_fmt_metric(lad['metric'], r['value'])} | "
                     f"{(format(r['step_speedup'], '.2f') + 'x') if r['step_speedup'] else '-'} | "
                     f"{(format(r['total_speedup'], '.2f') + 'x') if r['total_speedup'] else '-'} | "
                     f"{_fmt_metric('busy_frac', r['gpu_busy_frac'])} | {md(r['top_finding'] or '-')} |"
                     + "".join(f" {metric_cell(r, k)} |" for k in (("sm_active", "tensor_active", "dram") if gm else ())))
    return "\n".join(lines) + "\n"


def _compare_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--iteration-range", metavar="NAME", help="NVTX range that marks one iteration")
    p.add_argument("-f", "--force", action="store_true", help="overwrite existing outputs")
    p.add_argument("-q", "--quiet", action="store_true", help="no terminal output")


class _LazyChoices(Sequence[str]):
    """An option's choices taken from ``nsysan.compare`` when argparse first uses them (to check a
    value, or to print help). ``add_argument`` also formats them once, only to check that it can:
    until ``ready`` is set (once the parser is built) they read as empty for that."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.ready = False

    def _items(self) -> list[str]:
        if not self.ready:
            return []
        from nsysan import compare

        return list(getattr(compare, self.name))

    def __getitem__(self, i: Any) -> Any:
        return self._items()[i]

    def __len__(self) -> int:
        return len(self._items())

    def __iter__(self) -> Any:
        return iter(self._items())

    def __contains__(self, x: object) -> bool:
        return x in self._items()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="nsysan", description="Where the time goes in an Nsight Systems trace, "
                                "and what to change.")
    p.add_argument("--version", action="version", version=f"nsysan {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("analyze", help="analyse one or more nsys SQLite exports")
    a.add_argument("traces", nargs="+", metavar="TRACE", help="nsys SQLite export(s), or 'example'")
    a.add_argument("--json", metavar="OUT.json", help="write the analysis as JSON (schema nsysan.analysis/2)")
    a.add_argument("--html", metavar="OUT.html", help="write the HTML report here (default: next to --json, or "
                   "./<trace>.nsysan.html)")
    a.add_argument("--no-html", action="store_true", help="do not write an HTML report")
    a.add_argument("--csv", metavar="DIR", help="write the tables as CSV files into DIR")
    a.add_argument("--perfetto", metavar="OUT.json", help="write the timeline (GPU ops per stream, idle gaps with "
                   "their causes, NVTX ranges, CUDA API calls, findings) as Chrome trace-event JSON for "
                   "ui.perfetto.dev or chrome://tracing")
    a.add_argument("--out-dir", metavar="DIR", help="per-trace outputs into DIR (several traces), with summary.json, the cross-rank page summary.html and ranks.csv")
    a.add_argument("--iteration-range", metavar="NAME", help="NVTX range that marks one iteration "
                   "(default: chosen by the iteration model: the program's own most repeated range holding the GPU work; "
                   "see docs/iterations.md)")
    a.add_argument("--min-gap-us", type=_opt_number("--min-gap-us"), default=10.0, help="smallest GPU idle gap reported (default 10 us)")
    a.add_argument("--warmup-factor", type=_opt_number("--warmup-factor", strict=True), default=1.5, help="leading iterations slower than this x the "
                   "median are warm-up (default 1.5)")
    a.add_argument("--set", action="append", metavar="RULE.THRESHOLD=VALUE", help="override a rule threshold")
    a.add_argument("--config", type=Path, help="JSON file {\"rules\": {rule: {threshold: value}}}")
    a.add_argument("--disable", action="append", metavar="RULE", help="do not run this rule")
    a.add_argument("--show-env", action="store_true", help="include captured environment variables and command "
                   "lines in reports (off by default: they often hold secrets)")
    a.add_argument("--max-events", type=_opt_number("--max-events", integer=True), default=200_000_000, help="refuse traces with more events "
                   "(default 200M)")
    a.add_argument("--time-range", type=_time_range, metavar="START:END", help="analyse only the events that start "
                   "in this part of the capture (seconds from its start): a trace too big for the memory then fits")
    a.add_argument("--jobs", type=_opt_number("--jobs", integer=True), default=0,
                   help="parallel processes for several traces (default and most: min(traces, cores))")
    a.add_argument("--scheduler", metavar="ADDRESS", type=_scheduler_address, help="run each trace as a task on this Dask distributed "
                   "scheduler (tcp://host:8786); traces and --out-dir must be on a filesystem the workers share")
    a.add_argument("--scheduler-timeout", type=_opt_number("--scheduler-timeout", strict=True), default=30.0, metavar="SECONDS",
                   help="how long to try to reach the scheduler (default 30)")
    a.add_argument("-f", "--force", action="store_true", help="overwrite existing outputs")
    a.add_argument("-q", "--quiet", action="store_true", help="no terminal summary")
    a.set_defaults(fn=cmd_analyze)
    r = sub.add_parser("rules", help="list the rules, their rationale and thresholds")
    r.add_argument("--markdown", action="store_true", help="as a Markdown table (the README's)")
    r.set_defaults(fn=cmd_rules)
    pr = sub.add_parser("profile", help="run a command under nsys and export SQLite")
    pr.add_argument("-o", "--output", default="nsysan_trace", help="output name without extension")
    pr.add_argument("--nsys", help="path to nsys (default: $NSYSAN_NSYS, else nsys on PATH)")
    pr.add_argument("--trace", default="cuda,nvtx,osrt", help="nsys -t value (default cuda,nvtx,osrt)")
    pr.add_argument("--graph-nodes", action="store_true", help="trace CUDA graph kernels individually")
    pr.add_argument("--diagnose", action="store_true", help="also record CPU samples, CUDA backtraces, Python "
                    "samples and backtraces (Python programs) and GPU metrics, and export with blobs (see docs/inputs.md)")
    pr.add_argument("--python-sampling", choices=["auto", "on", "off"], default="auto",
                    help="with --diagnose: Python sampling and backtraces (default auto: when COMMAND is Python)")
    pr.add_argument("--gpu-metrics-devices", default="all", metavar="all|none|N[,N]",
                    help="with --diagnose: GPUs whose metrics are sampled at 10 kHz (default all)")
    pr.add_argument("--cuda-backtrace", default="sync,memory", metavar="SPEC",
                    help="with --diagnose: nsys --cudabacktrace value (default sync,memory; all adds launches)")
    pr.add_argument("-f", "--force", action="store_true", help="overwrite an existing NAME.nsys-rep / NAME.sqlite "
                    "(without it nsysan refuses to start when either exists)")
    pr.add_argument("--timeout", type=_opt_number("--timeout", strict=True), metavar="SECONDS",
                    help="stop nsys and everything it started after SECONDS (SIGINT, then SIGTERM, then SIGKILL "
                    "to its process group; exit 9); default: no limit")
    pr.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    pr.set_defaults(fn=cmd_profile)
    # diff's and compare's metric names, looked up only when one of them parses or prints its help
    # (nsysan.compare imports numpy: 10 ms before `analyze` could start reading the trace)
    GATE_METRICS, METRICS = _LazyChoices("GATE_METRICS"), _LazyChoices("METRICS")

    d = sub.add_parser("diff", help="compare two traces (or nsysan JSON files): metrics, kernels, NVTX, findings")
    d.add_argument("base", metavar="BASE", help="trace or nsysan JSON (the reference)")
    d.add_argument("new", metavar="NEW", help="trace or nsysan JSON (the candidate)")
    d.add_argument("--json", metavar="OUT.json", help="write the diff as JSON (schema nsysan.diff/1)")
    d.add_argument("--html", metavar="OUT.html", help="write the diff as an HTML page")
    d.add_argument("--fail-on-regression", metavar="PCT", help="exit 11 when --metric got worse by more than "
                   "PCT percent, unless its noise test (iteration metrics) calls the change noise; PCT is always a percentage, with or without the "
                   "%% sign: 5 and 5%% both mean five percent, 0.5 half a percent (0 to 1000)")
    d.add_argument("--metric", default="iter_p50_ns", choices=GATE_METRICS, help="gate metric (default "
                   "iter_p50_ns: the steady-state iteration time p50, the period between completions)")
    _compare_common(d)
    d.set_defaults(fn=cmd_diff, traces=None)
    c = sub.add_parser("compare", help="one table over many traces (an optimization ladder)")
    c.add_argument("traces", nargs="+", metavar="TRACE", help="traces or nsysan JSON files, in order")
    c.add_argument("--labels", help="comma-separated names for the rows (default: file names)")
    c.add_argument("--metric", choices=METRICS, help="default: the 'Total Elapsed Time' region when "
                   "every trace has one, else the iteration p50")
    c.add_argument("--json", metavar="OUT.json", help="write the table as JSON (schema nsysan.ladder/1)")
    c.add_argument("--html", metavar="OUT.html", help="write the table and a bar chart as HTML")
    c.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    c.add_argument("--jobs", type=_opt_number("--jobs", integer=True), default=0,
                   help="parallel processes (default and most: min(traces, cores))")
    _compare_common(c)
    c.set_defaults(fn=cmd_compare)
    e = sub.add_parser("example", help="print the path of a bundled example trace")
    e.add_argument("name", nargs="?", default="ladder_baseline")
    e.set_defaults(fn=cmd_example)
    GATE_METRICS.ready = METRICS.ready = True
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:  # `nsysan` alone: what it can do, not an error
        build_parser().print_help()
        return 0
    args = build_parser().parse_args(argv)
    try:
        from nsysan.examples import resolve

        if getattr(args, "traces", None):
            args.traces = [resolve(t) for t in args.traces]
        if args.cmd == "diff":
            args.base, args.new = resolve(args.base), resolve(args.new)
        if args.cmd == "analyze":  # the collector resumes after the imports (analyze_one)
            from nsysan import _gc

            _gc.pause()
        return int(args.fn(args))
    except NsysanError as e:
        print(f"nsysan: error: {_say(e)}", file=sys.stderr)
        if e.hint:
            print(f"nsysan: hint: {_say(e.hint)}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("nsysan: interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        print("nsysan: error: out of memory; try --max-events or export a shorter time range", file=sys.stderr)
        return EXIT_CODES["ResourceLimitError"]
    except BrokenPipeError:
        return 0
    except RecursionError:
        print("nsysan: error: input nested too deeply", file=sys.stderr)
        return EXIT_CODES["UsageError"]
    except Exception as e:  # noqa: BLE001 - the last resort: one line, never a traceback
        if os.environ.get("NSYSAN_DEBUG"):
            raise
        print(f"nsysan: internal error: {type(e).__name__}: {_say(e)}"[:2000], file=sys.stderr)
        print("nsysan: hint: please report this with the command line (NSYSAN_DEBUG=1 shows the traceback)",
              file=sys.stderr)
        return 1
    finally:
        from nsysan import _gc

        _gc.resume()


def run() -> None:
    """The console entry point: ``main``, then an immediate exit. The outputs are written and
    closed by then; the interpreter's own shutdown (module teardown, the rest of a ~1 GB heap freed
    object by object) took 0.2 s after a 245 MB trace, for nothing. The process is nsysan's own:
    freed memory stays in it for reuse (``_memory.own_process``)."""
    from nsysan import _memory

    _memory.own_process()
    code = main()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (nsysan ... | head): nothing more to say
            pass
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    run()
