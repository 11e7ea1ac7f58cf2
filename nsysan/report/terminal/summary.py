"""What ``nsysan analyze`` prints after one trace: the iteration, where its time goes, the fixes by
saving (each with its evidence and what to change), the rules that could not judge the trace, the
top kernels of the steady state. Everything from a trace goes through ``clean_text`` first; rich is
imported only when the summary is printed."""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING, Any

from nsysan.report.terminal.text import NBSP, Screen, glue, short_kernel_name
from nsysan.units import clean_text

if TYPE_CHECKING:
    from nsysan.report.summary import RunSummary

SEVERITY_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}


def print_summary(res: RunSummary) -> None:
    """The terminal summary: the iteration, where its time goes, the fixes by saving (no estimate last)
    (each with its evidence and what to change), the rules that could not judge this trace, the top
    kernels of the steady state. Lines are wrapped to a terminal's width (or ``COLUMNS``; never between
    a number and its unit), a long message into its first sentence and indented lines, one a cause;
    not wrapped at all when the output is piped without ``COLUMNS``; colour only on a terminal (rich
    honours NO_COLOR), code shown in bold there and between single backticks without colour."""
    from rich.console import Console

    scr = Screen(Console(highlight=False, soft_wrap=True))
    _summary_head(res, scr.line)
    scr.console.print()
    _summary_fixes(res, scr)
    _rules_run(res, scr.line)
    _summary_tail(res, scr)


def _summary_head(res: RunSummary, say: Any) -> None:
    """The trace, its iteration, window, GPUs, breakdown and ranks."""
    from nsysan.units import fmt_ns, fmt_pct

    say(f"{res.trace}  (nsys {res.nsys}, analysed in {res.seconds} s)", "bold")
    if res.range_name:
        seqs = int(res.sequences or 1)
        if res.headline == "period":
            head = (f"one every {fmt_ns(res.p50_ns)} (p50 period, {res.throughput_per_s:,.1f}/s), "
                    f"latency p50 {fmt_ns(res.latency_p50_ns)}")
            if res.queueing:
                head += (f" (includes queueing: the CPU runs {res.queue_depth_p50:g} iteration(s) "
                         "ahead of the GPU)")
        else:
            head = f"latency p50 {fmt_ns(res.p50_ns)}"
        n = f"{res.iterations} steady" + (f" in {seqs} sequences (threads or ranks; rates are per sequence)"
                                            if seqs > 1 else "")
        say(f"Iteration '{res.range_name}' ({n}): {head}", indent=2, first="")
        loops = res.loops
        if len(loops) > 1:
            shown = [f"{name} (pid {pid}, tid {tid}) {k} steady, one every {fmt_ns(p50)}" if p50 else
                     f"{name} (pid {pid}, tid {tid}) {k} steady" for name, pid, tid, k, p50 in loops[:4]]
            more = f"; and {len(loops) - 4} more (--json: iterations.sequences)" if len(loops) > 4 else ""
            say("per thread or rank: " + "; ".join(shown) + more, indent=2)
        if res.slow:
            k, cost, share = res.slow
            say(f"{k} slow iteration{'s' if k != 1 else ''} (over 2x the typical period) cost {fmt_ns(cost)}, "
                f"{fmt_pct(share)} of the steady iterations' time: see slow-iterations", "yellow", indent=2, first="")
        say(f"chosen: {res.why}", "dim", indent=2)
    elif res.why:
        say(f"Iteration: none ({res.why})", indent=2, first="")
    say(f"Window: {res.window}, {fmt_ns(res.window_ns)}", indent=2, first="")
    if not res.gpu_recorded:
        say("GPU activity was not recorded in this trace (no kernel, memcpy or memset tables): record it with "
            "nsys profile -t cuda (WSL2 captures have no GPU activity)", "yellow", indent=2, first="")
    for dev, frac, idle in res.busy:
        say(f"GPU {dev}: busy {fmt_pct(frac)}, idle {fmt_ns(idle)} in the window", indent=2, first="")
    for line in res.gpu_metrics:
        say(line, indent=2, first="")
    ct = res.capture_time
    if ct is not None and ct.parts:
        say(f"Where the {fmt_ns(ct.capture_ns)} capture went: " + ", ".join(
            f"{p} {fmt_ns(ns)} ({fmt_pct(fr)})" for p, ns, fr in ct.parts), indent=2, first="")
        if ct.startup_filled and any(p == "start-up" and fr >= 0.05 for p, _, fr in ct.parts):
            say("start-up: " + ", ".join(f"{w} {fmt_ns(ns)}" for w, ns in ct.startup_filled), "dim", indent=2)
        if ct.window_idle_frac > 0.5:
            say(f"The GPU was idle {fmt_pct(ct.window_idle_frac)} of the judged window ({ct.window}): the "
                "first fixes below cost what filled it", "yellow", indent=2, first="")
    for label, span, parts in res.breakdown:
        say(f"Where {label}'s {fmt_ns(span)} goes: " + ", ".join(f"{p} {fmt_ns(ns)} ({fmt_pct(fr)})"
                                                              for p, ns, fr in parts), indent=2, first="")
    if res.ranks_verdict:
        say(f"Ranks: {res.ranks_verdict}", indent=2, first="")


def _summary_fixes(res: RunSummary, scr: Screen) -> None:
    """The fixes by saving, each with its evidence and what to change."""
    from rich.text import Text

    from nsysan.units import fmt_ns, fmt_pct

    say, width = scr.line, scr.width
    fixes = res.fixes
    if fixes:
        total = sum(f.impact_ns for f in fixes)
        say(f"Fixes, by time saved, then those without a time estimate ({fmt_ns(total)} in all, "
            f"{fmt_pct(total / res.window_ns) if res.window_ns else '-'} of the window, no time counted twice)",
            "bold")
        for i, f in enumerate(fixes, 1):
            sev = f.severity
            saves = (f"saves {fmt_ns(f.impact_ns)}"
                     + (f" ({fmt_pct(f.impact_ns / res.window_ns)})" if res.window_ns else "")
                     + (f", {fmt_ns(f.per_iteration_ns)} per iteration" if f.per_iteration_ns else "")
                     if f.impact_ns > 0 else "no time estimate")
            head = Text(f"{i:>2}. ")
            head.append(f"{sev.upper():<8}", style=SEVERITY_STYLE.get(sev, ""))
            tail = clean_text(f" {saves}  [{f.rule}]")
            if width and len(head.plain) + len(tail) > width > 30:  # wrapped under the message's indent
                lines = textwrap.wrap(glue(tail), width=width, initial_indent=" " * len(head.plain),
                                      subsequent_indent=" " * 5, break_on_hyphens=False, break_long_words=False)
                tail = "\n".join(lines)[len(head.plain):].replace(NBSP, " ")
            head.append(tail)
            scr.console.print(head)
            say(f.title, "bold", indent=5)
            scr.message(f.message, indent=5)
            say(f"fix: {f.suggestion}", "green", indent=10, first=" " * 5)
    else:
        say("No findings: no rule found time to save in this window.", "bold")


def _rules_run(res: RunSummary, say: Any) -> None:
    """How the rules ended (``run_summary``'s ``rules_run``, the JSON's ``rules``): how many
    fired and passed (looked at the data, found nothing), and each rule that could not judge this
    trace with what the trace lacks, grouped by it: never counted as passed."""
    run = res.rules_run
    if not run:
        return
    count = {k: sum(1 for _, st, _ in run if st == k) for k in ("fired", "passed", "not_checked", "disabled")}
    parts = [f"{count['fired']} fired", f"{count['passed']} passed"]
    parts += [f"{count['not_checked']} not checked"] if count["not_checked"] else []
    parts += [f"{count['disabled']} disabled"] if count["disabled"] else []
    say("Rules: " + ", ".join(parts) + (":" if count["not_checked"] else ""), "dim", indent=2, first="")
    lacking: dict[str, list[str]] = {}
    for rule, status, reason in run:
        if status == "not_checked":
            lacking.setdefault(str(reason or "the trace lacks their input"), []).append(rule)
    for reason, rules in lacking.items():
        say(f"{', '.join(rules)}: not checked ({reason})", "dim", indent=4, first="  ")


def _summary_tail(res: RunSummary, scr: Screen) -> None:
    """The steady state's top kernels, the notes, the outputs written."""
    from rich.text import Text

    from nsysan.units import fmt_ns, fmt_pct

    say, width = scr.line, scr.width
    if res.top_kernels:
        scr.console.print()
        say(f"Top kernels ({res.window}, {fmt_ns(res.kernel_ns)} of kernel time)", "bold")
        for name, tot, share, count in res.top_kernels:
            line = f"{fmt_ns(tot):>10} {fmt_pct(share):>6} {count:>7,}x  "
            short = clean_text(short_kernel_name(name))
            if width and len(line) + len(short) > width:
                short = short[:max(10, width - len(line) - 3)] + "..."
            scr.console.print(Text(line + short))
    for w in res.warnings:
        say(f"note: {w}", "yellow", indent=6, first="")
    for out in res.outputs:
        say(f"wrote {out}", first="")
