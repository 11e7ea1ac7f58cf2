"""What a new user hits first (issue 39): running the same command twice, empty sections, long names,
environment variables, and the Python API's bad options.

Truth comes from the file system (inodes, bytes, links) and from the trace (SQL written here), never
from nsysan's own output.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
from html.parser import HTMLParser
from pathlib import Path

import pytest

import nsysan
from nsysan.cli import main
from nsysan.errors import OutputExistsError

from conftest import CORPUS
from factories import apply_sql

FIXTURE = "ladder_pinned"  # small, one GPU, no NCCL, no TensorRT, no GPU metrics


@pytest.fixture()
def trace(fixture_dir, tmp_path, monkeypatch):
    """A private copy of the fixture, with the working folder next to it (the default HTML lands there)."""
    t = tmp_path / "t.sqlite"
    shutil.copyfile(fixture_dir / f"{FIXTURE}.sqlite", t)
    monkeypatch.chdir(tmp_path)
    return t


def _state(p: Path) -> tuple[int, bytes]:
    return os.lstat(p).st_ino, p.read_bytes() if not p.is_symlink() else os.readlink(p).encode()


# -- 1. the same command twice --------------------------------------------------------------------


def test_running_the_same_command_twice_replaces_its_own_outputs(trace, tmp_path):
    args = ["analyze", str(trace), "-q", "--json", "t.json", "--perfetto", "t.pf.json"]
    assert main(args) == 0
    outs = [tmp_path / "t.json", tmp_path / "t.pf.json", tmp_path / "t.html"]  # --json's HTML beside it
    first = {p: os.stat(p).st_ino for p in outs}
    assert main(args) == 0  # was exit 8: "t.json: exists"
    for p in outs:  # each replaced by a new file (the atomic rename gives it a new inode)
        assert os.stat(p).st_ino != first[p], p
    assert json.loads((tmp_path / "t.json").read_text())["schema"] == "nsysan.analysis/2"
    # the plain command (default HTML name) twice
    assert main(["analyze", str(trace), "-q"]) == 0
    ino = os.stat(tmp_path / "t.nsysan.html").st_ino
    assert main(["analyze", str(trace), "-q"]) == 0
    assert os.stat(tmp_path / "t.nsysan.html").st_ino != ino


def test_csv_tables_and_out_dir_twice(trace, fixture_dir, tmp_path):
    assert main(["analyze", str(trace), "-q", "--no-html", "--csv", "csv"]) == 0
    tables = sorted((tmp_path / "csv").glob("*.csv"))
    first = {p: os.stat(p).st_ino for p in tables}
    assert len(tables) > 10
    assert main(["analyze", str(trace), "-q", "--no-html", "--csv", "csv"]) == 0  # was exit 8
    assert all(os.stat(p).st_ino != first[p] for p in tables)
    # a CSV whose header is not the one nsysan writes for that table is not replaced
    mine = tmp_path / "csv" / "kernels.csv"
    mine.write_text("name,my_notes\nk,1\n")
    before = _state(mine)
    assert main(["analyze", str(trace), "-q", "--no-html", "--csv", "csv"]) == 8
    assert _state(mine) == before
    # --out-dir: per-trace JSON and HTML, summary.json/html and ranks.csv
    other = tmp_path / "u.sqlite"
    shutil.copyfile(fixture_dir / "ladder_reuse.sqlite", other)
    assert main(["analyze", str(trace), str(other), "-q", "--out-dir", "od"]) == 0
    outs = sorted((tmp_path / "od").iterdir())
    first = {p: os.stat(p).st_ino for p in outs}
    assert {p.name for p in outs} >= {"summary.json", "summary.html", "t.json", "u.html"}  # ranks.csv: with ranks
    assert main(["analyze", str(trace), str(other), "-q", "--out-dir", "od"]) == 0
    assert all(os.stat(p).st_ino != first[p] for p in outs)


def _foreign(tmp_path: Path, own: Path) -> dict[str, Path]:
    """Files at an output's path that nsysan did not write, each made here."""
    d = tmp_path / "foreign"
    d.mkdir()
    files = {
        "text": d / "notes.html",
        "html without the marker": d / "page.html",
        "marker outside the head": d / "body.html",
        "other JSON": d / "other.json",
        "schema not at the top level": d / "nested.json",
        "link to nsysan's own report": d / "link.html",
    }
    files["text"].write_text("my notes\n")
    files["html without the marker"].write_text('<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
                                                "<title>mine</title></head></html>\n")
    files["marker outside the head"].write_text('<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
                                                '<title>x</title></head><body><meta name="generator" '
                                                'content="nsysan"></body></html>\n')
    files["other JSON"].write_text('{\n"schema": "someone.else/1",\n"x": 1\n}\n')
    files["schema not at the top level"].write_text('{\n"a": {\n  "schema": "nsysan.analysis/2"\n}\n}\n')
    files["link to nsysan's own report"].symlink_to(own)
    return files


def test_a_file_nsysan_did_not_write_still_needs_force(trace, tmp_path):
    assert main(["analyze", str(trace), "-q", "--html", "own.html"]) == 0
    own = tmp_path / "own.html"
    own_before = _state(own)
    for what, p in _foreign(tmp_path, own).items():
        before = _state(p)
        opt = "--json" if p.suffix == ".json" else "--html"
        extra = ["--no-html"] if opt == "--json" else []
        assert main(["analyze", str(trace), "-q", opt, str(p), *extra]) == 8, what
        assert _state(p) == before, what  # untouched: same inode, same bytes (a link stays that link)
        assert _state(own) == own_before  # nor the file a link points at
        assert main(["analyze", str(trace), "-q", opt, str(p), *extra, "--force"]) == 0, what
        assert not p.is_symlink() and _state(p) != before, what  # replaced by a report


def test_the_python_api_replaces_its_own_outputs_only(trace, tmp_path):
    a = nsysan.analyze(trace)
    html, js = tmp_path / "api.html", tmp_path / "api.json"
    a.write_html(html)
    a.to_json(js)
    inos = os.stat(html).st_ino, os.stat(js).st_ino
    a.write_html(html)  # was OutputExistsError
    a.to_json(js)
    assert (os.stat(html).st_ino, os.stat(js).st_ino) != inos
    mine = tmp_path / "mine.html"
    mine.write_text("mine\n")
    with pytest.raises(OutputExistsError):
        a.write_html(mine)
    with pytest.raises(OutputExistsError):
        a.to_json(mine)
    assert mine.read_text() == "mine\n"
    a.write_html(mine, force=True)
    assert mine.read_text().startswith("<!DOCTYPE html>")


# -- 2. empty sections, long names, the shortened-strings note --------------------------------------


def _tables(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _count(con: sqlite3.Connection, sql: str, tables: set[str], table: str) -> int:
    return con.execute(sql).fetchone()[0] if table in tables else 0


def test_empty_sections_are_left_out(trace, tmp_path):
    con = sqlite3.connect(f"file:{trace}?mode=ro", uri=True)
    tabs = _tables(con)
    nccl = _count(con, """SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName
                          WHERE s.value LIKE '%nccl%'""", tabs, "CUPTI_ACTIVITY_KIND_KERNEL")
    memsets = _count(con, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_MEMSET", tabs, "CUPTI_ACTIVITY_KIND_MEMSET")
    metrics = _count(con, "SELECT COUNT(*) FROM GPU_METRICS", tabs, "GPU_METRICS")
    trt = _count(con, "SELECT COUNT(*) FROM StringIds WHERE value LIKE '%TensorRT%'", tabs, "StringIds")
    con.close()
    assert nccl == metrics == trt == 0 < memsets  # this trace has memsets, none of the others
    assert main(["analyze", str(trace), "-q", "--html", "r.html"]) == 0
    page = (tmp_path / "r.html").read_text()
    for sec in ("sec-collectives", "sec-ranks", "sec-tensorrt", "gpu-metrics"):
        assert f'id="{sec}"' not in page, sec
        assert f'href="#{sec}"' not in page, sec
    assert 'id="sec-memset"' in page and 'id="sec-kernels"' in page  # the sections with rows stay


class _Cuts(HTMLParser):
    """(title, text) of every shortened table cell, and the order of the sections."""

    def __init__(self) -> None:
        super().__init__()
        self.cuts: list[list[str]] = []
        self.ids: list[str] = []
        self._in: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids.append(a["id"])
        if tag == "span" and a.get("class") == "cut":
            self._in = [a.get("title") or "", ""]
            self.cuts.append(self._in)

    def handle_endtag(self, tag):
        if tag == "span":
            self._in = None

    def handle_data(self, data):
        if self._in is not None:
            self._in[1] += data


def _top_kernel_id(con: sqlite3.Connection) -> int:
    return con.execute("""SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY demangledName
                          ORDER BY SUM("end" - start) DESC LIMIT 1""").fetchone()[0]


@pytest.mark.parametrize("length", [300, 9000])
def test_long_kernel_names_are_shortened_with_the_full_name_on_hover(trace, tmp_path, length):
    con = sqlite3.connect(trace)
    sid = _top_kernel_id(con)
    con.close()
    hostile = ('void k<"a"&\'b\'><script>alert(1)</script>' + "x" * length)[:length]
    apply_sql(trace, f"UPDATE StringIds SET value = '{hostile.replace(chr(39), chr(39) * 2)}' WHERE id = {sid}")
    con = sqlite3.connect(f"file:{trace}?mode=ro", uri=True)
    name = con.execute("SELECT value FROM StringIds WHERE id = ?", (sid,)).fetchone()[0]
    con.close()
    assert name == hostile
    assert main(["analyze", str(trace), "-q", "--html", "r.html"]) == 0
    page = (tmp_path / "r.html").read_text()
    assert "<script>alert" not in page  # escaped, in the text and in the title
    p = _Cuts()
    p.feed(page)
    full = name[:8192]  # the loader keeps a name's first 8,192 characters
    mine = [c for c in p.cuts if c[0].startswith(full[:200])]
    assert mine, "the long name is not shortened in any table"
    for title, text in mine:
        assert len(text) < 120 and full.startswith(text.rstrip("…")), text
    # the whole name on hover (as loaded: past 8,192 characters, its first 8,192 and a mark)
    assert any(t == full if length <= 8192 else t.startswith(full) for t, _ in mine)
    if length > 8192:
        # the note that names were shortened to 8,192 characters is at the end, not on the first screen
        m = re.search(r"were shortened to their first", page)
        assert m and m.start() > page.index('id="rules"') and m.start() > page.index("</header>")
        assert p.ids.index("notes") > p.ids.index("rules")


# -- 3. environment variables -------------------------------------------------------------------


def _env_exports() -> list[Path]:
    """Public exports whose strings hold an exported shell function (the environment block nsys
    records), smallest first; at most two."""
    out = []
    for f in sorted(CORPUS.glob("*.sqlite"), key=lambda p: p.stat().st_size) if CORPUS.exists() else []:
        con = sqlite3.connect(f"file:{f}?mode=ro", uri=True)
        try:
            n = con.execute("SELECT COUNT(*) FROM StringIds WHERE value LIKE '%BASH_FUNC%'").fetchone()[0]
        except sqlite3.Error:
            n = 0
        con.close()
        if n:
            out.append(f)
        if len(out) == 2:
            break
    return out


ENV_EXPORTS = _env_exports()


@pytest.mark.skipif(not ENV_EXPORTS, reason="public corpus not present (../shared)")
@pytest.mark.parametrize("path", ENV_EXPORTS, ids=lambda p: p.stem[:40])
def test_environment_variables_reach_no_output_without_show_env(path, tmp_path, capsys):
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    blocks = [r[0] for r in con.execute("SELECT value FROM StringIds WHERE value LIKE '%BASH_FUNC%'")]
    con.close()
    # the environment entries in the trace: NAME=VALUE, NUL-separated
    entries = [e for b in blocks for e in b.split("\x00") if re.match(r"[A-Za-z_][A-Za-z0-9_%]*=", e)]
    funcs = [e for e in entries if e.startswith("BASH_FUNC")]
    assert funcs
    out = tmp_path / "o"
    rc = main(["analyze", str(path), "--json", str(out) + ".json", "--html", str(out) + ".html"])
    assert rc == 0
    cap = capsys.readouterr()
    texts = {"terminal": cap.out + cap.err, "JSON": Path(str(out) + ".json").read_text(),
             "HTML": Path(str(out) + ".html").read_text()}
    for where, text in texts.items():
        assert "BASH_FUNC" not in text, where
        for e in entries:  # no NAME=VALUE entry (its first 32 characters), raw, as JSON or HTML writes it
            if len(e) >= 12:
                head = e[:32]
                for form in (head, json.dumps(head)[1:-1], head.replace("&", "&amp;").replace("<", "&lt;")
                             .replace(">", "&gt;").replace('"', "&#34;").replace("'", "&#39;")):
                    assert form not in text, (where, e[:40])
    # the check sees them where they are asked for
    assert main(["analyze", str(path), "-q", "--json", str(out) + ".json", "--no-html", "--show-env"]) == 0
    assert "BASH_FUNC" in Path(str(out) + ".json").read_text()


# -- 5. the Python API's bad options ----------------------------------------------------------------


BAD = [
    ({"bogus": 1}, "bogus"),
    ({"disable": 5}, "disable"),
    ({"disable": [5]}, "disable"),
    ({"disable": ["no-such-rule"]}, "no-such-rule"),
    ({"set": 5}, "set"),
    ({"set": [5]}, "set"),
    ({"set": {"no-such-rule.x": 1}}, "no-such-rule"),
    ({"rule_config": 5}, "rule_config"),
    ({"rule_config": {"no-such-rule": {}}}, "no-such-rule"),
    ({"config": 5}, "config"),
    ({"rules": "no"}, "rules"),
    ({"workers": "x"}, "workers"),
    ({"progress": 5}, "progress"),
    ({"min_gap_us": "x"}, "min_gap_us"),
]


@pytest.mark.parametrize("kw, named", BAD, ids=[f"{next(iter(k))}={next(iter(k.values()))!r}" for k, _ in BAD])
def test_a_bad_option_raises_value_error_naming_it(kw, named, tmp_path, load):
    # README: "an invalid value raises ValueError with the CLI's message"; checked before the trace is read
    with pytest.raises(ValueError, match=re.escape(named)):
        nsysan.analyze(tmp_path / "not-read.sqlite", **kw)
    with pytest.raises(ValueError, match=re.escape(named)):  # and on a loaded trace
        nsysan.analyze(load(FIXTURE), **kw)


def test_an_unknown_rule_in_a_config_file_is_refused_by_the_cli_too(trace, tmp_path, capsys):
    cfg = tmp_path / "rules.json"
    cfg.write_text(json.dumps({"rules": {"no-such-rule": {}}}))
    assert main(["analyze", str(trace), "-q", "--no-html", "--config", str(cfg)]) == 2
    assert "no-such-rule" in capsys.readouterr().err
