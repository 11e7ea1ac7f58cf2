"""Command line (``nsysan analyze|rules|profile|example|diff|compare``, ``nsysan -h``). The only package
that prints or exits; it maps ``NsysanError`` to exit codes. Options in ``parser``, commands in
``commands``; the work is ``nsysan.pipeline``'s and ``nsysan.record``'s."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from nsysan.cli.parser import build_parser
from nsysan.errors import NsysanError, as_nsysan_error
from nsysan.units import clean_text as _say

__all__ = ["build_parser", "main", "run"]


def main(argv: Sequence[str] | None = None) -> int:
    from nsysan import _startup

    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:  # `nsysan` alone: what it can do, not an error
        build_parser().print_help()
        return 0
    args = build_parser().parse_args(argv)
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
    except (NsysanError, MemoryError, RecursionError) as e:
        err = as_nsysan_error(e)
        print(f"nsysan: error: {_say(err)}", file=sys.stderr)
        if err.hint:
            print(f"nsysan: hint: {_say(err.hint)}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("nsysan: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as e:  # noqa: BLE001 - the last resort: one line, never a traceback
        if os.environ.get("NSYSAN_DEBUG"):
            raise
        print(f"nsysan: internal error: {type(e).__name__}: {_say(e)}"[:2000], file=sys.stderr)
        print("nsysan: hint: please report this with the command line (NSYSAN_DEBUG=1 shows the traceback)",
              file=sys.stderr)
        return 1
    finally:
        from nsysan._atomic import remove_leftovers

        remove_leftovers()  # a temp file whose clean-up a second Ctrl-C interrupted
        _startup.resume_collector()


def run() -> None:
    """The console entry point: ``main`` in nsysan's own process, then ``_startup.exit_now``."""
    from nsysan import _startup

    _startup.own_process()
    _startup.exit_now(main())
