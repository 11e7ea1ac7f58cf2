"""Command line (``nsysan analyze|rules|profile|example|diff|compare``, ``nsysan -h``). The only package
that prints or exits; it maps ``NsysanError`` to exit codes. Options in ``parser``, commands in
``commands``; the work is ``nsysan.pipeline``'s and ``nsysan.record``'s."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from nsysan import _startup
from nsysan._atomic import Terminated, remove_leftovers, terminating
from nsysan.errors import EXPLAINED, explain
from nsysan.units import clean_text

__all__ = ["build_parser", "main", "run"]


def build_parser() -> Any:  # imported on first use: ``run`` sets its process up before the options' classes
    from nsysan.cli.parser import build_parser as build
    return build()


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:  # `nsysan` alone: what it can do, not an error
        build_parser().print_help()
        return 0
    args = build_parser().parse_args(argv)
    with terminating():  # SIGTERM and SIGHUP: Terminated, cleaned up as Ctrl-C is
        try:
            return _run(args)
        except Terminated as e:  # a second one during the clean-up
            return 128 + e.signum


def _run(args: Any) -> int:
    try:
        from nsysan.cli import commands
        from nsysan.examples import resolve

        if getattr(args, "traces", None):
            args.traces = [resolve(t) for t in args.traces]
        if args.cmd == "diff":
            args.base, args.new = resolve(args.base), resolve(args.new)
        if args.cmd == "analyze":  # the collector resumes after the imports (pipeline.analyze_one)
            _startup.pause_collector()
        return int(getattr(commands, f"cmd_{args.cmd}")(args))
    except BrokenPipeError:
        return 0
    except (Exception, KeyboardInterrupt) as e:  # one line and a hint, never a traceback
        if os.environ.get("NSYSAN_DEBUG") and not isinstance(e, EXPLAINED):
            raise
        code, lines = explain(e)  # Ctrl-C, SIGTERM, SIGHUP: what nsysan started is stopped by now
        for line in lines:
            print(f"nsysan: {clean_text(line)}", file=sys.stderr)
        return code
    finally:
        remove_leftovers()  # a temp file whose clean-up a second Ctrl-C interrupted
        _startup.resume_collector()


def run() -> None:
    """The console entry point: ``main`` in nsysan's own process, then ``_startup.exit_now``."""
    _startup.own_process()
    _startup.exit_now(main())
