"""The terminal's renderers, one module a command's output: ``summary`` (what ``nsysan analyze``
prints after one trace), ``cross_table`` (after several), ``rules_listing`` (``nsysan rules``),
``comparison`` (``nsysan diff``'s and ``nsysan compare``'s tables and their HTML page), all on
``text`` (wrapping, code markup, the consoles). Everything from a trace goes through ``clean_text``
first; rich is imported only when a table or summary is printed.

The commands print through the names below."""

from nsysan.report.terminal.comparison import compare_html, ladder_markdown, print_diff, print_ladder
from nsysan.report.terminal.cross_table import print_cross
from nsysan.report.terminal.rules_listing import rules_markdown, rules_text
from nsysan.report.terminal.summary import print_summary

__all__ = ["compare_html", "ladder_markdown", "print_cross", "print_diff", "print_ladder", "print_summary",
           "rules_markdown", "rules_text"]
