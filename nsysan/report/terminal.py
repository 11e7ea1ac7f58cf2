"""The terminal's renderers: what ``nsysan analyze`` prints after one trace (the summary) or several
(the cross-trace table), ``nsysan diff``'s and ``nsysan compare``'s tables (and their HTML page),
and ``nsysan rules``' listing. Everything from a trace goes through ``clean_text`` first;
rich is imported only when a table or summary is printed."""

from __future__ import annotations

import os
import re
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nsysan._version import __version__
from nsysan.units import clean_text

if TYPE_CHECKING:
    from nsysan.report.summary import RunSummary

SEVERITY_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}
_NB = "\u00a0"


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


def table_console() -> Any:
    """A console for tables: the terminal's width on a terminal; piped, wide enough that a row is
    a line (no number split from its unit at 80 columns)."""
    from rich.console import Console

    c = Console(highlight=False, soft_wrap=False)
    if not c.is_terminal and "COLUMNS" not in os.environ:
        c = Console(highlight=False, soft_wrap=False, width=200)
    return c


def _glue(text: str) -> str:
    """A number and its unit stay on one line (no-break space, put back after wrapping)."""
    return re.sub(r"(\d)\s(ns|us|ms|s|%|MB|GB|KB|B|GB/s|MB/s|x)\b", lambda m: m.group(1) + _NB + m.group(2), text)


_CODE = re.compile(r"``(.+?)``|`([^`]+)`")  # ``code`` (the rules' and findings' markup) or `code`
_ON, _OFF = "\x0e", "\x0f"  # a code span's ends while wrapping (clean_text has removed any from the trace)
CODE_STYLE = "bold"


def plain_markup(text: str) -> str:
    """``code`` as `code`: what a terminal without colour shows (piped, NO_COLOR), one backtick each side."""
    return _CODE.sub(lambda m: f"`{m.group(1) or m.group(2)}`", text)


def _marked(text: str, colour: bool) -> str:
    """The code spans of ``text`` between ``_ON`` and ``_OFF`` (styled, no backticks) on a colour
    terminal; else ``plain_markup``."""
    return _CODE.sub(lambda m: _ON + (m.group(1) or m.group(2)) + _OFF, text) if colour else plain_markup(text)


def _styled(body: str, style: str) -> Any:
    """``body`` (code spans marked by ``_marked``) as a rich Text in ``style``, code in ``CODE_STYLE``."""
    from rich.text import Text

    t = Text(style=style)
    code = False
    for part in re.split(f"([{_ON}{_OFF}])", body):
        if part in (_ON, _OFF):
            code = part == _ON
        elif part:
            t.append(part, style=CODE_STYLE if code else None)
    return t


def _depth_zero(text: str, sep: re.Pattern[str]) -> list[str]:
    """``text`` split where ``sep`` matches outside parentheses and brackets."""
    parts, last, depth, pos = [], 0, 0, 0
    for m in sep.finditer(text):
        for ch in text[pos:m.start()]:
            depth += {"(": 1, "[": 1, ")": -1, "]": -1}.get(ch, 0)
        pos = m.start()
        if depth <= 0:
            parts.append(text[last:m.start()])
            last = m.end()
    return [*parts, text[last:]]


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(])")
_CAUSES = re.compile(r";\s+")
MIN_CAUSES = 3  # a sentence that lists this many causes ("What ... was doing: a; b; c") gets a line each


def message_lines(text: str) -> list[tuple[int, str]]:
    """A long message as (depth, text) lines: its first sentence at depth 0, each further sentence
    at depth 1, and a sentence listing ``MIN_CAUSES`` or more causes after a colon as its lead
    ("What the submitting thread was doing:") and one line a cause, one level deeper, led by "- ".
    Every word of the message is kept, in order; only the "; " between the causes goes."""
    out: list[tuple[int, str]] = []
    for i, sentence in enumerate(s for s in _depth_zero(text, _SENTENCE_END) if s.strip()):
        depth = min(i, 1)
        head, _, rest = sentence.partition(": ")
        causes = _depth_zero(rest, _CAUSES) if rest and "; " not in head and "(" not in head else []
        if len(causes) >= MIN_CAUSES:
            out.append((depth, head + ":"))
            out += [(depth + 1, "- " + c) for c in causes]
        else:
            out.append((depth, sentence))
    return out


class Screen:
    """Where the summary goes: a rich console, the width to wrap to (0: not wrapped, one line a
    paragraph, as piped output without ``COLUMNS`` is, for grep and diff) and whether it has colour."""

    def __init__(self, console: Any) -> None:
        self.console = console
        self.width = wrap_width(console)
        self.colour = bool(console.color_system) and not console.no_color

    def line(self, text: object, style: str = "", indent: int = 0, first: str | None = None) -> None:
        """One paragraph, wrapped to ``width`` under ``indent`` (``first``: the first line's lead);
        code spans rendered (``_marked``); a token longer than the line is never broken."""
        body = _marked(clean_text(text), self.colour)
        lead = " " * indent if first is None else first
        if self.width and self.width > indent + 20:
            lines = textwrap.wrap(_glue(body), width=self.width, initial_indent=lead, subsequent_indent=" " * indent,
                                  break_on_hyphens=False, break_long_words=False) or [lead]
            body = "\n".join(x.replace(_NB, " ") for x in lines)
        else:
            body = lead + body
        self.console.print(_styled(body, style))

    def message(self, text: object, indent: int) -> None:
        """A finding's message: one paragraph when it fits a line (or nothing is wrapped), else
        ``message_lines``, each level two columns deeper, a cause's lines hanging under its text."""
        body = clean_text(text)
        if not self.width or len(body) <= self.width - indent:
            self.line(body, indent=indent)
            return
        for depth, part in message_lines(body):
            at = indent + 2 * depth
            self.line(part, indent=at + 2 if part.startswith("- ") else at, first=" " * at)


def wrap_width(console: Any) -> int:
    """The width to wrap to: the terminal's, or ``COLUMNS`` when it is set (a pager, a CI log of
    known width); 0 when piped without it."""
    if console.is_terminal or os.environ.get("COLUMNS", "").strip().isdigit():
        return int(console.width)
    return 0


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
                lines = textwrap.wrap(_glue(tail), width=width, initial_indent=" " * len(head.plain),
                                      subsequent_indent=" " * 5, break_on_hyphens=False, break_long_words=False)
                tail = "\n".join(lines)[len(head.plain):].replace(_NB, " ")
            head.append(tail)
            scr.console.print(head)
            say(f.title, "bold", indent=5)
            scr.message(f.message, indent=5)
            say(f"fix: {f.suggestion}", "green", indent=10, first=" " * 5)
    else:
        say("No findings: no rule found time to save in this window.", "bold")


def _rules_run(res: RunSummary, say: Any) -> None:
    """How the rules ended (``pipeline.summary``'s ``rules_run``, the JSON's ``rules``): how many
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


def print_cross(summary: dict[str, Any]) -> None:
    """The cross-trace table: per trace (rank) p50, GPU busy, top finding, slowest kernel, stragglers;
    fitted to the terminal's width (or ``COLUMNS``; one line a trace when piped without it)."""
    import shutil

    width = shutil.get_terminal_size().columns if (os.isatty(1) or "COLUMNS" in os.environ) else 0
    for line in cross_lines(summary, width):
        print(line)


CROSS_P50_W, CROSS_BUSY_W, CROSS_FINDING_MAX = 10, 9, 26
CROSS_KERNEL_MIN = 24  # narrower than this, the slowest kernel goes on a line of its own under its trace
CROSS_TEXT_MIN = 16  # the trace column's least width; narrower, the top finding goes under its trace too


def cross_lines(summary: dict[str, Any], width: int = 0) -> list[str]:
    """``print_cross``'s lines. ``width`` 0: one line a trace, nothing cut (for grep). Else no line
    is longer than ``width``: the columns by priority (trace, p50, GPU busy, top finding, slowest
    kernel), a name too long for its column wrapped within it (a token broken only where it alone
    is wider), and where the width runs out the slowest kernel, then the top finding, on indented
    lines of their own under the trace's row."""
    from nsysan.units import fmt_ns, fmt_pct

    rows = []
    for r in summary["traces"]:
        rows.append({"trace": clean_text(Path(r["trace"]).name) + (" STRAGGLER" if r["straggler"] else ""),
                     "p50": fmt_ns(r["p50_ns"]), "busy": fmt_pct(r["busy"][0]["busy_frac"]) if r["busy"] else "-",
                     "finding": clean_text(r["top_finding"] or "-"),
                     "kernel": clean_text(short_kernel_name(str(r["slowest_kernel"] or "-")))})
    head = {"trace": "trace", "p50": "p50", "busy": "GPU busy", "finding": "top finding", "kernel": "slowest kernel"}
    longest = {k: max([len(head[k])] + [len(r[k]) for r in rows]) for k in head}
    fixed = CROSS_P50_W + 1 + CROSS_BUSY_W + 1
    if width <= 0:
        cols = {"trace": longest["trace"], "finding": longest["finding"], "kernel": longest["kernel"]}
        below: list[str] = []
    else:
        fw = min(longest["finding"], CROSS_FINDING_MAX)
        rest = width - fixed - (fw + 1)
        below = []
        if rest < CROSS_TEXT_MIN:  # too narrow for the finding beside the trace: both under it
            below, rest, fw = ["finding", "kernel"], width - fixed, 0
        tw = min(longest["trace"], max(CROSS_TEXT_MIN, rest // 2))
        if not below and rest - tw - 1 < CROSS_KERNEL_MIN:
            below = ["kernel"]
        cols = {"trace": max(1, min(longest["trace"], rest)) if below else tw}
        if "finding" not in below:
            cols["finding"] = fw
        if not below:
            cols["kernel"] = min(longest["kernel"], rest - tw - 1)
    label = {"finding": "top finding: ", "kernel": "slowest kernel: "}

    def row(cells: dict[str, str]) -> list[str]:
        wrapped = {k: _cell(cells[k], w, width > 0) for k, w in cols.items()}
        n = max(len(v) for v in wrapped.values())
        out = []
        for i in range(n):
            def at(k: str) -> str:
                return wrapped[k][i] if i < len(wrapped[k]) else ""
            parts = [at("trace").ljust(cols["trace"]), (cells["p50"] if i == 0 else "").rjust(CROSS_P50_W),
                     (cells["busy"] if i == 0 else "").rjust(CROSS_BUSY_W)]
            if "finding" in cols:
                parts.append(at("finding").ljust(cols["finding"]))
            if "kernel" in cols:
                parts.append(at("kernel"))
            out.append(" ".join(parts).rstrip())
        return out

    lines = row(head)
    for r in rows:
        lines += row(r)
        for k in below:
            text = label[k] + r[k]
            lines += textwrap.wrap(text, width=width, initial_indent="  ", subsequent_indent="    ",
                                   break_on_hyphens=False) if width > 6 else ["  " + text]
    if "ranks" in summary:
        verdict = f"ranks: {clean_text(summary['ranks']['verdict'])}"
        lines += textwrap.wrap(verdict, width=width, subsequent_indent="  ", break_on_hyphens=False) \
            if width > 20 else [verdict]
    return lines


def _cell(text: str, width: int, wrap: bool) -> list[str]:
    """A table cell's lines: ``text`` wrapped to ``width`` (a word wider than it broken), or as it is."""
    if not wrap or len(text) <= width:
        return [text]
    return textwrap.wrap(text, width=width, break_on_hyphens=False) or [""]


def rules_text(width: int | None = None) -> str:
    """``nsysan rules``: each rule's title, summary, why, fix and thresholds, the code markup as
    `code`, wrapped to ``width`` (default: the terminal's, or ``COLUMNS``; 0: one line a part)."""
    import shutil

    from nsysan.rules import REGISTRY

    if width is None:
        width = shutil.get_terminal_size().columns if (os.isatty(1) or "COLUMNS" in os.environ) else 0

    def part(text: str, lead: str) -> str:
        body = lead + plain_markup(text)
        if width <= 30:
            return body + "\n"
        return "\n".join(textwrap.wrap(_glue(body), width=width, subsequent_indent="    ",
                                        break_on_hyphens=False, break_long_words=False)).replace(_NB, " ") + "\n"

    out = []
    for rid in sorted(REGISTRY):
        r = REGISTRY[rid]
        th = ", ".join(f"{k}={v}" for k, v in r.thresholds.items()) or "-"
        out += [part(r.title, f"{rid}: "), part(r.summary, "  "), part(r.why, "  why: "), part(r.fix, "  fix: "),
                part(th, "  thresholds: "), "\n"]
    return "".join(out)


def rules_markdown() -> str:
    from nsysan.rules import REGISTRY

    lines = ["| rule | what it finds | fix | thresholds |", "|---|---|---|---|"]
    for rid in sorted(REGISTRY):
        r = REGISTRY[rid]
        th = ", ".join(f"`{k}={v}`" for k, v in r.thresholds.items()) or "-"
        lines.append(f"| `{rid}` | {r.summary} | {r.fix} | {th} |")
    return "\n".join(lines) + "\n"


def fmt_metric(metric: str, v: float | None, signed: bool = False) -> str:
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


def compare_html(**ctx: Any) -> str:
    from nsysan.report.html import environment

    return environment().get_template("compare.html.j2").render(
        fmt=fmt_metric, generated_by=f"nsysan {__version__}", **ctx)


def print_diff(d: Any) -> None:
    from rich.table import Table
    from rich.text import Text as _Text

    from nsysan.report.names import short_names
    from nsysan.units import fmt_ns

    def Text(text: object, **kw: Any) -> _Text:  # labels and names come from files
        return _Text(clean_text(text), **kw)

    c = table_console()
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
        t.add_row(*(Text(x) for x in (m["label"], fmt_metric(m["metric"], m["base"]),
                                      fmt_metric(m["metric"], m["new"]),
                                      fmt_metric(m["metric"], m["delta"], signed=True),
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
    _gpu_metric_deltas(c, d, Text)
    for n in d.other_notes:
        c.print(Text(f"note: {n}", style="yellow"))
    if d.gate:
        c.print(Text(("REGRESSION: " if d.gate["failed"] else "gate passed: ") + d.gate["message"],
                     style="bold red" if d.gate["failed"] else "green"))


def _gpu_metric_deltas(c: Any, d: Any, Text: Any) -> None:
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
        v = (r["base_verdict"] if r["base_verdict"] == r["new_verdict"]
             else f"{r['base_verdict'] or '-'} -> {r['new_verdict'] or '-'}")
        t.add_row(Text(f"{r['device']} {r['range']}"), Text(pair(r, "sm_active")), Text(pair(r, "tensor_active")),
                  Text(pair(r, "dram_read", "dram_write")),
                  Text(f"{pair(r, 'pcie_rx')} / {pair(r, 'pcie_tx')}"), Text(v))
    c.print(t)


def print_ladder(lad: dict[str, Any]) -> None:
    """``nsysan compare``'s table (``compare.ladder``) on the terminal."""
    from rich.table import Table
    from rich.text import Text

    t = Table(title=Text(clean_text(lad["label"])))
    gm = any(r.get("gpu_metrics") for r in lad["rows"])  # steady GPU metric means (compare.steady_gpu_metrics)
    for col in ("trace", "value", "step", "total", "iteration p50", "GPU busy", "top finding",
                *(("SMs / tensor / DRAM (steady, % of peak)",) if gm else ())):
        t.add_column(col)
    for r in lad["rows"]:
        t.add_row(*(Text(clean_text(x)) for x in (
            r["label"], fmt_metric(lad["metric"], r["value"]),
            f"{r['step_speedup']:.2f}x" if r["step_speedup"] else "-",
            f"{r['total_speedup']:.2f}x" if r["total_speedup"] else "-",
            fmt_metric("iter_p50_ns", r["iter_p50_ns"]), fmt_metric("busy_frac", r["gpu_busy_frac"]),
            r["top_finding"] or "-", *((_gpu_metrics_cell(r),) if gm else ()))))
    table_console().print(t)


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
        return clean_text(text).replace("|", "\\|")

    def metric_cell(r: dict[str, Any], key: str) -> str:
        devs = r.get("gpu_metrics") or {}
        vals = [(dev, m.get(key)) for dev, m in devs.items()]
        if len(vals) == 1:
            return "-" if vals[0][1] is None else f"{float(vals[0][1]):.1f}"
        return md("; ".join(f"{dev}: {'-' if v is None else format(float(v), '.1f')}" for dev, v in vals))

    for r in lad["rows"]:
        lines.append(f"| {md(r['label'])} | {fmt_metric(lad['metric'], r['value'])} | "
                     f"{(format(r['step_speedup'], '.2f') + 'x') if r['step_speedup'] else '-'} | "
                     f"{(format(r['total_speedup'], '.2f') + 'x') if r['total_speedup'] else '-'} | "
                     f"{fmt_metric('busy_frac', r['gpu_busy_frac'])} | {md(r['top_finding'] or '-')} |"
                     + "".join(f" {metric_cell(r, k)} |"
                               for k in (("sm_active", "tensor_active", "dram") if gm else ())))
    return "\n".join(lines) + "\n"
