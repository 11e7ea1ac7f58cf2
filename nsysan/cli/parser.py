"""The command line's options (argparse): one builder per command; values are checked by
``nsysan.options`` as they are parsed."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from importlib import import_module
from pathlib import Path

from nsysan._defaults import MAX_EVENTS, MIN_GAP_NS, WARMUP_FACTOR
from nsysan._version import __version__
from nsysan.options import LazyChoices, add_command, one_line_parser, opt_number, scheduler_address, time_range
from nsysan.report.formats import OUTPUTS


def _analyze(a: argparse.ArgumentParser) -> None:
    a.add_argument("traces", nargs="+", metavar="TRACE", help="nsys SQLite export(s), or 'example'")
    for o in OUTPUTS:  # report/formats.py: one entry per output format
        a.add_argument(o.flag, metavar=o.metavar, help=o.help)
        if o.off:
            a.add_argument(o.off[0], action="store_true", help=o.off[1])
    a.add_argument("--out-dir", metavar="DIR", help="per-trace outputs into DIR (several traces), with summary.json, the cross-rank page summary.html and ranks.csv")
    a.add_argument("--iteration-range", metavar="NAME", help="NVTX range that marks one iteration "
                   "(default: chosen by the iteration model: the program's own most repeated range holding the GPU work; "
                   "see docs/iterations.md)")
    a.add_argument("--min-gap-us", type=opt_number("--min-gap-us"), default=MIN_GAP_NS / 1000,
                   help=f"smallest GPU idle gap reported (default {MIN_GAP_NS / 1000:g} us)")
    a.add_argument("--warmup-factor", type=opt_number("--warmup-factor", strict=True), default=WARMUP_FACTOR,
                   help=f"leading iterations slower than this x the median are warm-up (default {WARMUP_FACTOR:g})")
    a.add_argument("--set", action="append", metavar="RULE.THRESHOLD=VALUE", help="override a rule threshold")
    a.add_argument("--config", type=Path, help="JSON file {\"rules\": {rule: {threshold: value}}}")
    a.add_argument("--disable", action="append", metavar="RULE", help="do not run this rule")
    a.add_argument("--show-env", action="store_true", help="include captured environment variables and command "
                   "lines in reports (off by default: they often hold secrets)")
    a.add_argument("--max-events", type=opt_number("--max-events", integer=True), default=MAX_EVENTS,
                   help=f"refuse traces with more events (default {MAX_EVENTS // 1_000_000}M)")
    a.add_argument("--time-range", type=time_range, metavar="START:END", help="analyse only the events that start "
                   "in this part of the capture (seconds from its start): a trace too big for the memory then fits")
    a.add_argument("--jobs", type=opt_number("--jobs", integer=True), default=0,
                   help="parallel processes for several traces (default and most: min(traces, cores))")
    a.add_argument("--scheduler", metavar="ADDRESS", type=scheduler_address, help="run each trace as a task on this Dask distributed "
                   "scheduler (tcp://host:8786); traces and --out-dir must be on a filesystem the workers share")
    a.add_argument("--scheduler-timeout", type=opt_number("--scheduler-timeout", strict=True), default=30.0, metavar="SECONDS",
                   help="how long to wait for the scheduler to answer and for a worker, at the start "
                   "and whenever all workers are gone (default 30)")
    a.add_argument("-f", "--force", action="store_true", help="overwrite existing outputs")
    a.add_argument("-q", "--quiet", action="store_true", help="no terminal summary")


def _profile(pr: argparse.ArgumentParser) -> None:
    pr.add_argument("-o", "--output", default="nsysan_trace", help="output name without extension")
    pr.add_argument("--nsys", help="path to nsys (default: $NSYSAN_NSYS, else nsys on PATH)")
    pr.add_argument("--trace", default="cuda,nvtx,osrt", help="nsys -t value (default cuda,nvtx,osrt)")
    pr.add_argument("--graph-nodes", action="store_true", help="trace CUDA graph kernels individually")
    pr.add_argument("--diagnose", action="store_true", help="also record CPU samples, CUDA backtraces, Python "
                    "samples and backtraces (Python programs) and GPU metrics, and export with blobs (see docs/inputs.md)")
    pr.add_argument("--annotate", action=argparse.BooleanOptionalAction, help="NVTX ranges around each step's parts in a "
                    "Python program's frameworks, no code change (default: on with --diagnose; docs/inputs.md)")
    pr.add_argument("--python-sampling", choices=["auto", "on", "off"], default="auto",
                    help="with --diagnose: Python sampling and backtraces (default auto: when COMMAND is Python)")
    pr.add_argument("--gpu-metrics-devices", default="all", metavar="all|none|N[,N]",
                    help="with --diagnose: GPUs whose metrics are sampled at 10 kHz (default all)")
    pr.add_argument("--cuda-backtrace", default="sync,memory", metavar="SPEC",
                    help="with --diagnose: nsys --cudabacktrace value (default sync,memory; all adds launches)")
    pr.add_argument("-f", "--force", action="store_true", help="overwrite an existing NAME.nsys-rep / NAME.sqlite "
                    "(without it nsysan refuses to start when either exists)")
    pr.add_argument("--timeout", type=opt_number("--timeout", strict=True), metavar="SECONDS",
                    help="stop nsys and everything it started after SECONDS (SIGINT, then SIGTERM, then SIGKILL "
                    "to its process group; exit 9); default: no limit")
    pr.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--iteration-range", metavar="NAME", help="NVTX range that marks one iteration")
    p.add_argument("-f", "--force", action="store_true", help="overwrite existing outputs")
    p.add_argument("-q", "--quiet", action="store_true", help="no terminal output")


def _diff(d: argparse.ArgumentParser, gate_metrics: Sequence[str]) -> None:
    d.add_argument("base", metavar="BASE", help="trace or nsysan JSON (the reference)")
    d.add_argument("new", metavar="NEW", help="trace or nsysan JSON (the candidate)")
    d.add_argument("--json", metavar="OUT.json", help="write the diff as JSON (schema nsysan.diff/1)")
    d.add_argument("--html", metavar="OUT.html", help="write the diff as an HTML page")
    d.add_argument("--fail-on-regression", metavar="PCT", help="exit 11 when --metric got worse by more than "
                   "PCT percent, unless its noise test (iteration metrics) calls the change noise; PCT is always a percentage, with or without the "
                   "%% sign: 5 and 5%% both mean five percent, 0.5 half a percent (0 to 1000)")
    d.add_argument("--metric", default="iter_p50_ns", choices=gate_metrics, help="gate metric (default "
                   "iter_p50_ns: the steady-state iteration time p50, the period between completions)")
    _common(d)
    d.set_defaults(traces=None)


def _compare(c: argparse.ArgumentParser, metrics: Sequence[str]) -> None:
    c.add_argument("traces", nargs="+", metavar="TRACE", help="traces or nsysan JSON files, in order")
    c.add_argument("--labels", help="comma-separated names for the rows (default: file names)")
    c.add_argument("--metric", choices=metrics, help="default: the 'Total Elapsed Time' region when "
                   "every trace has one, else the iteration p50")
    c.add_argument("--json", metavar="OUT.json", help="write the table as JSON (schema nsysan.ladder/1)")
    c.add_argument("--html", metavar="OUT.html", help="write the table and a bar chart as HTML")
    c.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    c.add_argument("--jobs", type=opt_number("--jobs", integer=True), default=0,
                   help="parallel processes (default and most: min(traces, cores))")
    _common(c)


def build_parser() -> argparse.ArgumentParser:
    p = one_line_parser(prog="nsysan", description="Where the time goes in an Nsight Systems trace, "
                        "and what to change.")
    p.add_argument("--version", action="version", version=f"nsysan {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True)
    _analyze(add_command(sub, "analyze"))
    r = add_command(sub, "rules")
    r.add_argument("--markdown", action="store_true", help="as a Markdown table (the README's)")
    _profile(add_command(sub, "profile"))
    gate_metrics = LazyChoices(lambda: import_module("nsysan.compare").GATE_METRICS)
    metrics = LazyChoices(lambda: import_module("nsysan.compare").METRICS)
    _diff(add_command(sub, "diff"), gate_metrics)
    _compare(add_command(sub, "compare"), metrics)
    from nsysan.examples import listing

    add_command(sub, "example").add_argument("name", nargs="?", default="ladder_baseline",
                                             help=f"which one (default ladder_baseline). Bundled: {listing()}")
    gate_metrics.ready = metrics.ready = True
    return p
