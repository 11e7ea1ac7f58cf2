"""HTML renderer: one cached Jinja2 environment over the top-level ``templates/`` folder
(shipped inside the wheel as ``nsysan/templates``)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import jinja2
from markupsafe import Markup

from nsysan.report.view import Report
from nsysan.units import fmt_ns, fmt_pct


def templates_dir() -> Path:
    """The wheel's ``nsysan/templates`` if present, else the checkout's top-level ``templates/``."""
    here = Path(__file__).resolve().parent.parent
    for cand in (here / "templates", here.parent / "templates"):
        if (cand / "report.html.j2").is_file():
            return cand
    raise FileNotFoundError("nsysan templates not found (broken install?)")


def code_spans(text: str) -> Markup:
    """Escape, then show RST-style ````literal```` spans (used in rule docs) as <code>."""
    import re

    from markupsafe import escape

    return Markup(re.sub(r"``(.+?)``", r"<code>\1</code>", str(escape(text))))


@cache
def environment() -> jinja2.Environment:
    tdir = templates_dir()
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(tdir)),
                             autoescape=jinja2.select_autoescape(["html", "j2"], default=True),
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    static = tdir / "static"
    env.globals["static"] = lambda name: Markup((static / name).read_text("utf-8"))
    env.filters["ns"] = fmt_ns
    env.filters["pct"] = fmt_pct
    env.filters["code_spans"] = code_spans
    env.policies["json.dumps_kwargs"] = {"sort_keys": True, "separators": (",", ":")}
    return env


def render(report: Report) -> str:
    return environment().get_template("report.html.j2").render(r=report)
