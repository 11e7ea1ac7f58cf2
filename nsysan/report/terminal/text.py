"""Text for the terminal: paragraphs wrapped to the terminal's width (never between a number and its
unit), a long message split into its sentences and causes, the ``code`` markup of the rules and
findings (bold on a colour terminal, between backticks without colour), kernel names without their
signatures, and the consoles tables print on."""

from __future__ import annotations

import os
import re
import textwrap
from typing import Any

from nsysan.units import clean_text

NBSP = "\u00a0"


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


def glue(text: str) -> str:
    """A number and its unit stay on one line (no-break space, put back after wrapping)."""
    return re.sub(r"(\d)\s(ns|us|ms|s|%|MB|GB|KB|B|GB/s|MB/s|x)\b", lambda m: m.group(1) + NBSP + m.group(2), text)


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
            lines = textwrap.wrap(glue(body), width=self.width, initial_indent=lead, subsequent_indent=" " * indent,
                                  break_on_hyphens=False, break_long_words=False) or [lead]
            body = "\n".join(x.replace(NBSP, " ") for x in lines)
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
