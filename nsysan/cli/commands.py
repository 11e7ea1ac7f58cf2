"""The commands: each parses nothing more, hands the work to ``nsysan.pipeline`` (or
``nsysan.record``) and prints through ``nsysan.report.terminal``."""

from __future__ import annotations

import argparse
import sys

from nsysan.units import clean_text


def _fail(message: str) -> None:  # one trace of several failed
    print(f"nsysan: {clean_text(message)}", file=sys.stderr)


def cmd_analyze(args: argparse.Namespace) -> int:
    from nsysan import _startup, pipeline
    from nsysan.options import RunOptions
    from nsysan.report.formats import OUTPUTS

    _startup.numpy_without_blas_threads()
    many = len(args.traces) > 1 or bool(args.scheduler)
    paths = {o.name: getattr(args, o.dest) for o in OUTPUTS}
    off = {o.name for o in OUTPUTS if o.off_dest and getattr(args, o.off_dest)}
    jobs, protect = pipeline.plan_analyze(
        args.traces, RunOptions.from_args(args, many), many=many, out_dir=args.out_dir, paths=paths, off=off,
        force=args.force, side_inputs=[str(args.config)] if args.config else [])
    if not many:
        res = pipeline.analyze_single(*jobs[0])
        if not args.quiet:
            from nsysan.report.terminal import print_summary

            print_summary(res)
        return 0
    if args.scheduler:
        from nsysan import cluster

        results, failed = cluster.run_many(args.scheduler, jobs, timeout_s=args.scheduler_timeout, on_error=_fail)
    else:
        results, failed = pipeline.run_many(jobs, jobs_n=args.jobs, on_error=_fail)
    from nsysan.report.cross import cross_summary
    from nsysan.report.terminal import print_cross

    cs = cross_summary(results)  # each result names its program (report.summary.run_summary): ranks of one job
    print_cross(cs)
    if args.out_dir:
        pipeline.write_cross(cs, args.out_dir, html=not args.no_html, force=args.force, protect=protect,
                             wrote=lambda p: print(f"wrote {clean_text(p)}"))
    return 1 if failed else 0


def cmd_rules(args: argparse.Namespace) -> int:
    from nsysan.report import terminal

    print(terminal.rules_markdown() if args.markdown else terminal.rules_text(), end="")
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    from nsysan.errors import OutputError
    from nsysan.record.export import stderr_line
    from nsysan.record.profile import profile

    rc, sqlite, written = profile(
        args.command, output=args.output, nsys=args.nsys, force=args.force, timeout=args.timeout, say=stderr_line,
        annotate=args.annotate, trace=args.trace, graph_nodes=args.graph_nodes, diagnose=args.diagnose,
        python=args.python_sampling, gpu_metrics_devices=args.gpu_metrics_devices, cuda_backtrace=args.cuda_backtrace)
    if not written:  # an output that is not there: exit 12 (errors.OutputError), nsys' own status named
        raise OutputError(f"nsys exited {rc} and wrote no {clean_text(sqlite)}", hint="see nsys' messages above")
    print(f"trace: {clean_text(sqlite)}\nnext:  nsysan analyze {clean_text(sqlite)}")
    return rc


def cmd_example(args: argparse.Namespace) -> int:
    from nsysan.examples import example_path

    name = args.name[len("example:"):] if args.name.startswith("example:") else args.name  # as the README writes it
    print(example_path("ladder_baseline" if name == "example" else name))
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    from nsysan import pipeline
    from nsysan.report import terminal

    d = pipeline.diff(args.base, args.new, metric=args.metric, fail_on_regression=args.fail_on_regression,
                      iteration_range=args.iteration_range, json_path=args.json, html=args.html, force=args.force,
                      quiet=args.quiet)
    if not args.quiet:
        terminal.print_diff(d)
    if d.gate and d.gate["failed"]:
        from nsysan.errors import RegressionError

        raise RegressionError(d.gate["message"])
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from nsysan import pipeline
    from nsysan.report import terminal

    lad = pipeline.ladder(args.traces, args.labels, metric=args.metric, iteration_range=args.iteration_range,
                          jobs_n=args.jobs, json_path=args.json, html=args.html, force=args.force, quiet=args.quiet)
    if args.markdown:
        print(terminal.ladder_markdown(lad), end="")
    elif not args.quiet:
        terminal.print_ladder(lad)
    return 0
