"""Rendering and writing an analysis: functions of the public API over the frozen ``Analysis``
(``nsysan.analyze``'s result), as the command line writes its outputs.

    import nsysan
    from nsysan import api
    a = nsysan.analyze("report.sqlite")
    api.to_json(a, "out.json")        # also a.to_json("out.json"): the methods call these
    api.write_html(a, "report.html")  # a.write_html(...)
    api.write(a, "csv", "tables/")    # any format of ``nsysan.report.formats.OUTPUTS`` by name

``Analysis``'s methods of the same names (``to_dict``, ``to_json``, ``to_html``, ``write_html``,
``write_perfetto``, ``__repr__`` = ``summary_text``, ``_repr_html_`` = ``summary_html``) delegate
here through ``nsysan/_registry.py``, filled when ``nsysan`` is imported, so the analysis imports
nothing of the renderers. The renderers are imported when first called (``import nsysan`` stays
light)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from nsysan import _registry

if TYPE_CHECKING:  # pathlib is imported when a file is written (``nsysan --version`` does not pay for it)
    from pathlib import Path


def to_dict(a: Any, *, show_env: bool = False) -> dict[str, Any]:
    """The JSON-ready dict (schema ``nsysan.analysis/2``), as ``nsysan analyze --json`` writes it."""
    from nsysan.report.jsonout import analysis_to_dict

    return analysis_to_dict(a, show_env=show_env)


def _inputs(a: Any) -> list[tuple[int, int]]:
    """The trace's file identity: no output is ever written over it."""
    from nsysan.outputs import identity

    ident = identity(a.trace.meta.path) if a.trace.meta.path else None
    return [ident] if ident is not None else []


def render(a: Any, name: str, *, show_env: bool = False) -> str:
    """The text of the output format ``name`` (``nsysan.report.formats.OUTPUTS``: "json", "html"...), as
    ``nsysan analyze`` writes it; a format written as it is made (a folder of CSV tables, the Perfetto
    timeline) has no one text: ``write`` it."""
    from nsysan.report.formats import output

    o = output(name)
    if o.render is None:
        raise ValueError(f"the {name} output is written as it is made: nsysan.api.write(a, {name!r}, path)")
    return o.render(a, show_env=show_env)


def write(a: Any, name: str, path: str | os.PathLike[str], *, force: bool = False, show_env: bool = False) -> Path:
    """Write the output format ``name`` (``nsysan.report.formats.OUTPUTS``) to ``path`` atomically, as
    ``nsysan analyze`` does. An existing file nsysan did not write is replaced only with ``force=True``
    (else ``OutputExistsError``); its own earlier outputs are; the trace itself never is (``UsageError``)."""
    from pathlib import Path

    from nsysan.report.formats import output

    out = Path(path)
    output(name).write(a, out, force=force, protect=_inputs(a), show_env=show_env)
    return out


def to_json(a: Any, path: str | os.PathLike[str] | None = None, *, show_env: bool = False,
            force: bool = False) -> str:
    """The JSON text ``nsysan analyze --json`` writes; also written to ``path`` when given (never over an
    existing file nsysan did not write without ``force``, never over the trace)."""
    from nsysan.report.formats import output

    if path is None:
        return render(a, "json", show_env=show_env)
    text = output("json").write(a, path, force=force, protect=_inputs(a), show_env=show_env)
    assert text is not None
    return text


def to_html(a: Any, *, show_env: bool = False) -> str:
    """The self-contained HTML report, as ``nsysan analyze --html`` writes it."""
    return render(a, "html", show_env=show_env)


def write_html(a: Any, path: str | os.PathLike[str], *, force: bool = False, show_env: bool = False) -> Path:
    """Write the HTML report to ``path`` atomically (``write``'s overwrite rules)."""
    return write(a, "html", path, force=force, show_env=show_env)


def write_perfetto(a: Any, path: str | os.PathLike[str], *, force: bool = False) -> Path:
    """Write the timeline as Chrome trace-event JSON (Perfetto UI, chrome://tracing), as
    ``nsysan analyze --perfetto`` does; same overwrite rules as ``write_html``."""
    return write(a, "perfetto", path, force=force)


def summary_text(a: Any) -> str:
    """A few lines (``repr(a)``): the trace, the iterations, the window, GPU busy, the findings and the top one."""
    from nsysan.report.notebook import text_summary

    return text_summary(a)


def summary_html(a: Any) -> str:
    """A compact, self-contained HTML fragment for notebooks (``a._repr_html_()``; no scripts, trace text escaped)."""
    from nsysan.report.notebook import html_summary

    return html_summary(a)


_registry.register(to_dict=to_dict, to_json=to_json, to_html=to_html, write_html=write_html,
                   write_perfetto=write_perfetto, summary_text=summary_text, summary_html=summary_html,
                   render=render, write=write)
