"""``nsysan rules``: every rule's title, summary, why, fix and thresholds, as wrapped text or as a
Markdown table."""

from __future__ import annotations

import os
import textwrap

from nsysan.report.terminal.text import NBSP, glue, plain_markup


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
        return "\n".join(textwrap.wrap(glue(body), width=width, subsequent_indent="    ",
                                        break_on_hyphens=False, break_long_words=False)).replace(NBSP, " ") + "\n"

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
