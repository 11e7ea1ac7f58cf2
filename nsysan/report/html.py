"""HTML renderer: one cached Jinja2 environment over the top-level ``templates/`` folder
(shipped inside the wheel as ``nsysan/templates``).

Compiling the report's templates (Jinja's lexer, parser and code generator, then Python's
``compile``) took 30-40 ms of every run, more than a small trace's whole JSON output. The compiled
code is kept in the user's cache (``TemplateCache``), as Python keeps ``.pyc`` files: keyed by the
template's path, its source text, Jinja's and Python's versions and the environment's options, and
used only when all of them match; otherwise the template is compiled as before."""

from __future__ import annotations

import hashlib
import marshal
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import jinja2
from markupsafe import Markup, escape

from nsysan.report.view import Report
from nsysan.units import fmt_ns, fmt_pct


def templates_dir() -> Path:
    """The wheel's ``nsysan/templates`` if present, else the checkout's top-level ``templates/``."""
    here = Path(__file__).resolve().parent.parent
    for cand in (here / "templates", here.parent / "templates"):
        if (cand / "report.html.j2").is_file():
            return cand
    raise FileNotFoundError("nsysan templates not found (broken install?)")


# a `literal` in single backticks (Markdown, as nsysan's notes write commands): opened at the start or
# after a space or an opening bracket, closed before a space, punctuation or the end, so the backtick of
# a C++ name (`anonymous namespace') alone is left as it is
_TICKS = re.compile(r"(?:(?<=^)|(?<=[\s(\[]))`([^`\n]+?)`(?=$|[\s.,;:)\]])")


def code_spans(text: str) -> Markup:
    """Escape, then show RST-style ````literal```` spans (rule docs) and Markdown `literal` spans
    (notes and messages) as <code>: the reader never sees the backticks."""
    out = re.sub(r"``(.+?)``", r"<code>\1</code>", str(escape(text)))
    return Markup(_TICKS.sub(r"<code>\1</code>", out))


class TemplateCache(jinja2.BytecodeCache):
    """Compiled templates in ``$XDG_CACHE_HOME/nsysan/templates`` (else ``~/.cache/...``), one small
    file each. The file name hashes the template's name and path, Jinja's version, Python's bytecode
    tag and the environment's options (what the generated code depends on); the file starts with
    those and the hash of the template's source, and is used only when they all match. Written under
    a temporary name and renamed (a reader sees a whole file or none); an unreadable, damaged or
    unwritable cache is ignored (the template is then compiled, as without a cache).

    Not ``jinja2.FileSystemBytecodeCache`` (3.1), which keeps neither guarantee: its key is the
    template's name and path only (not Jinja's version, nor the environment's options: with 3.1.6 an
    autoescaping environment sharing its directory with one that does not escape ran the other's
    code and rendered ``<b>`` unescaped), it does not create its directory, and a
    missing or unwritable directory, or a damaged file (its ``pickle.load`` of the checksum), raises
    out of ``get_template``: the report would fail instead of being compiled."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    @staticmethod
    def _options(env: jinja2.Environment, name: str) -> str:
        auto = env.autoescape(name) if callable(env.autoescape) else env.autoescape
        return repr((jinja2.__version__, sys.implementation.cache_tag, sys.version_info[:2], name, bool(auto),
                     env.block_start_string, env.block_end_string, env.variable_start_string,
                     env.variable_end_string, env.comment_start_string, env.comment_end_string,
                     env.line_statement_prefix, env.line_comment_prefix, env.trim_blocks, env.lstrip_blocks,
                     env.newline_sequence, env.keep_trailing_newline, env.optimized, env.is_async,
                     env.finalize is not None, sorted(env.extensions)))

    def get_bucket(self, environment: jinja2.Environment, name: str, filename: str | None,
                   source: str) -> jinja2.bccache.Bucket:
        options = self._options(environment, name)
        key = hashlib.sha256(f"{options}\0{filename}".encode("utf-8", "surrogateescape")).hexdigest()
        checksum = hashlib.sha256(source.encode("utf-8", "surrogateescape")).hexdigest()
        bucket = jinja2.bccache.Bucket(environment, key, checksum)
        bucket.header = f"nsysan-template\n{options}\n{filename}\n{checksum}\n".encode(  # type: ignore[attr-defined]
            "utf-8", "surrogateescape")
        self.load_bytecode(bucket)
        return bucket

    def _path(self, bucket: jinja2.bccache.Bucket) -> Path:
        return self.directory / f"{bucket.key}.jinja"

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            data = self._path(bucket).read_bytes()
        except (OSError, ValueError):
            return
        head: bytes = bucket.header  # type: ignore[attr-defined]
        if data.startswith(head):
            try:
                bucket.code = marshal.loads(data[len(head):])
            except Exception:  # noqa: BLE001 - damaged: compiled again and rewritten
                bucket.reset()

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        tmp = None
        try:
            data = bucket.header + marshal.dumps(bucket.code)  # type: ignore[attr-defined]
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-", suffix=".jinja")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, self._path(bucket))
            tmp = None
        except (OSError, ValueError):  # a read-only or full disk: compiled again next time
            pass
        finally:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass


def template_cache() -> TemplateCache | None:
    from nsysan._cache import user_cache

    try:
        return TemplateCache(user_cache("templates"))
    except (OSError, RuntimeError, KeyError):  # no home directory to find
        return None


@cache
def environment() -> jinja2.Environment:
    tdir = templates_dir()
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(tdir)),
                             autoescape=jinja2.select_autoescape(["html", "j2"], default=True),
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                             bytecode_cache=template_cache())
    static = tdir / "static"
    env.globals["static"] = lambda name: Markup((static / name).read_text("utf-8"))
    env.filters["ns"] = fmt_ns
    env.filters["pct"] = fmt_pct
    env.filters["code_spans"] = code_spans
    env.policies["json.dumps_kwargs"] = {"sort_keys": True, "separators": (",", ":")}
    return env


def pieces(report: Report) -> Iterator[str]:
    """The report's HTML in the pieces the template makes, to write as they come."""
    return environment().get_template("report.html.j2").generate(r=report)


def render(report: Report) -> str:
    """The report's HTML, whole."""
    return "".join(pieces(report))
