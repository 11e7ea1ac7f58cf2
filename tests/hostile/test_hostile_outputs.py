"""Adversarial pass over today's outputs: hostile trace strings and file names through the terminal
summary, the diff table, the HTML report's kernel bars and the .nsys-rep export cache. Each test
names what a hostile input could do; the first three failed before their fix."""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import subprocess
import sys
from html import unescape
from pathlib import Path

import factories as F
import pandas as pd
import pytest

from nsysan.analysis import Params, analyze
from nsysan.record import export
from nsysan.report import html, view
from nsysan.units import clean_text

ROOT = Path(__file__).resolve().parents[2]
SRC = "ladder_baseline"
# what a terminal must never receive raw from a trace: escapes, carriage returns, NUL, bidi overrides
# and marks, Unicode line/paragraph separators (a name that fakes a new line in the output)
RAW = ["\x1b", "\r", "\x00", "\x07", "\u202e", "\u2066", "\u200f", "\u2028", "\u2029"]


def _hostile_copy(src: Path, dst: Path) -> dict[str, str]:
    """``src`` with every kernel name and NVTX text carrying a terminal-hostile string; returns the
    new kernel names by their StringIds id (SQL truth for the test)."""
    shutil.copy(src, dst)
    con = sqlite3.connect(dst)
    evil = ["\x1b[31mred\x1b[0m", "a\rb", "nul\x00x", "\u202eevil", "\u2028sep\u2029", "\u200fmark", "\x07bell",
            "\u2066iso\u2069"]
    ids = [r[0] for r in con.execute("SELECT DISTINCT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL UNION "
                                     "SELECT DISTINCT textId FROM NVTX_EVENTS WHERE textId IS NOT NULL ORDER BY 1")]
    names = {}
    for i, sid in enumerate(ids):
        v, = con.execute("SELECT value FROM StringIds WHERE id = ?", (sid,)).fetchone()
        names[sid] = v + evil[i % len(evil)]
        con.execute("UPDATE StringIds SET value = ? WHERE id = ?", (names[sid], sid))
    con.commit()
    con.close()
    return names


def _cli(argv: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[bytes]:
    r = subprocess.run([sys.executable, "-m", "nsysan", *argv], capture_output=True, cwd=cwd, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(ROOT), **env})
    assert b"Traceback" not in r.stderr, r.stderr.decode(errors="replace")
    return r


@pytest.mark.parametrize("ch", RAW)
def test_clean_text_escapes_every_terminal_hazard(ch):
    # GIVEN a name holding one character a terminal acts on (or a line separator that fakes a new line)
    s = clean_text(f"name{ch}tail")
    # THEN it is shown escaped, the rest kept
    assert ch not in s and s.startswith("name\\") and s.endswith("tail")


def test_diff_and_summary_never_print_raw_control_characters(fixture_dir, tmp_path):
    # GIVEN a trace whose kernel names and NVTX texts hold escapes, \r, NUL, bidi characters and the
    # Unicode line separator, and the same trace without them
    base = fixture_dir / f"{SRC}.sqlite"
    hostile = tmp_path / "hostile.sqlite"
    names = _hostile_copy(base, hostile)
    assert any("\u2028" in v for v in names.values())
    # WHEN it is analysed, and diffed against the clean one (names differ: the diff's name tables)
    runs = [_cli(["analyze", str(hostile), "--no-html"], tmp_path),
            _cli(["diff", str(base), str(hostile)], tmp_path, COLUMNS="400")]
    # THEN both succeed and no raw control character from the trace reaches stdout or stderr
    for r in runs:
        assert r.returncode == 0, r.stderr
        out = (r.stdout + r.stderr).decode("utf-8")
        for ch in RAW:
            assert ch not in out, (ch, r.args[3])
    # and the diff does name the hostile kernels (escaped), so the check above looked at them
    shown = ["\\x1b[31mred", "a\\x0db", "nul\\x00x", "\\u202eevil", "\\u2028sep\\u2029", "\\u200fmark", "\\x07bell",
             "\\u2066iso\\u2069"]
    assert any(s in runs[1].stdout.decode() for s in shown)


def test_kernel_bars_keep_names_apart_that_differ_after_140_characters():
    # GIVEN two kernels whose names share their first 200 characters (templated C++ kernels do)
    a_name, b_name = "P" * 200 + "_alpha", "P" * 200 + "_beta"
    k = F.kernels([(0, 100, 7), (200, 260, 7)], name="x")
    k["name"] = k["short_name"] = pd.Categorical([a_name, b_name])
    a = analyze(F.make_trace(kernels=k), Params(min_gap_ns=10))
    out = html.render(view.build(a))
    # THEN the report's kernel bars show two different labels, each naming its kernel in full on hover
    titles = [unescape(t) for t in re.findall(r'<div class="bar-label" title="([^"]*)">', out)]
    assert sorted(t for t in titles if t.startswith("PPP")) == sorted([a_name, b_name])


def test_export_cache_fits_a_long_report_name_inside_the_cache(tmp_path, monkeypatch):
    # GIVEN a report named with 250 bytes (a name + '.sqlite' would exceed NAME_MAX) and other hostile
    # names, detected by the report header, and a private cache
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    d = tmp_path / "in"
    d.mkdir()
    names = ["x" * 246 + ".rep", "a\nb;c -d.nsys-rep", "-rf.nsys-rep", ".nsys-rep", "..nsys-rep",
             os.fsdecode(b"\xff\xfe" * 100 + b".qdrep"), "\x1b[31m" + "\u00e9" * 120 + ".bin"]
    exports = tmp_path / "cache" / "nsysan" / "exports"
    seen = set()
    for n in names:
        p = d / n
        p.write_bytes(b"NVIDIA Tegra Profiler Report 1.\n")
        st = os.stat(p)
        # WHEN its export's place is chosen
        out = export.export_path(p, st)
        # THEN it lies in its own folder directly under the cache, with a name a file system accepts
        assert out.parent.parent == exports and out.suffix == ".sqlite"
        assert len(os.fsencode(out.name)) <= 255 and "/" not in out.name and out.name not in (".", "..")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(b"")  # creatable: no ENAMETOOLONG
        seen.add(out)
    assert len(seen) == len(names)


def test_edge_traces_write_every_output(fixture_dir, tmp_path):
    # GIVEN a trace with no GPU ops, one with no NVTX (no iterations), one with a single kernel, and one
    # whose NVTX ranges all end before they start
    base = fixture_dir / f"{SRC}.sqlite"
    cases = {"nogpu": ["DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL", "DELETE FROM CUPTI_ACTIVITY_KIND_MEMCPY",
                       "DELETE FROM CUPTI_ACTIVITY_KIND_MEMSET"],
             "noiter": ["DELETE FROM NVTX_EVENTS"],
             "oneop": ["DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid > "
                       "(SELECT min(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL)",
                       "DELETE FROM CUPTI_ACTIVITY_KIND_MEMCPY", "DELETE FROM CUPTI_ACTIVITY_KIND_MEMSET"],
             "backwards": ["UPDATE NVTX_EVENTS SET end = start - 1000"]}
    import json

    for name, sql in cases.items():
        t = tmp_path / f"{name}.sqlite"
        shutil.copy(base, t)
        F.apply_sql(t, *sql)
        # WHEN every output is asked for
        r = _cli(["analyze", str(t), "--json", f"{name}.json", "--html", f"{name}.html", "--csv", f"{name}_csv",
                  "--perfetto", f"{name}.pf.json"], tmp_path)
        # THEN it succeeds, the JSON files are strict JSON, and the trace's own counts hold
        assert r.returncode == 0, (name, r.stderr)
        d = json.loads((tmp_path / f"{name}.json").read_text(), parse_constant=lambda c: pytest.fail(c))
        pf = json.loads((tmp_path / f"{name}.pf.json").read_text(), parse_constant=lambda c: pytest.fail(c))
        con = sqlite3.connect(t)
        nk, = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
        con.close()
        assert sum(k["count"] for k in d["kernels"]["by_name"]) == nk
        assert sum(1 for e in pf["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel") == nk
        assert (tmp_path / f"{name}.html").stat().st_size > 0


XSS = ["</script><script>alert(1)</script>", '"><img src=x onerror=alert(2)>', "{{7*7}}<svg onload=alert(3)>"]


def test_html_pages_run_nothing_from_trace_strings_in_chromium(fixture_dir, tmp_path):
    """Regression guard (passed when written): report (tables, lane labels from thread names, search
    box, tooltip), diff page, compare page and notebook fragment, all from a trace whose kernel names,
    NVTX texts, thread and process names carry script and markup, opened in Chromium."""
    from browser_kit import ARGS, CHROMIUM

    sync_api = pytest.importorskip("playwright.sync_api")
    if not CHROMIUM:
        pytest.skip("no chromium executable")
    base = fixture_dir / f"{SRC}.sqlite"
    t = tmp_path / "x.sqlite"
    shutil.copy(base, t)
    con = sqlite3.connect(t)
    ids = [r[0] for r in con.execute("SELECT DISTINCT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL UNION "
                                     "SELECT DISTINCT textId FROM NVTX_EVENTS WHERE textId IS NOT NULL ORDER BY 1")]
    for i, sid in enumerate(ids):
        con.execute("UPDATE StringIds SET value = value || ? WHERE id = ?", (XSS[i % len(XSS)], sid))
    # the thread that made the CUDA calls, and its process
    gtid, tname_id = con.execute("""SELECT t.globalTid, t.nameId FROM ThreadNames t WHERE t.globalTid IN
                                    (SELECT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME) LIMIT 1""").fetchone()
    con.execute("UPDATE StringIds SET value = ? WHERE id = ?", (XSS[1] + " worker", tname_id))
    con.execute("UPDATE PROCESSES SET name = ? WHERE pid = ?", (XSS[0], (gtid >> 24) & 0xFFFFFF))
    con.commit()
    con.close()
    assert _cli(["analyze", str(t), "--html", "r.html", "-q"], tmp_path).returncode == 0
    assert _cli(["diff", str(base), str(t), "--html", "d.html", "-q"], tmp_path).returncode == 0
    assert _cli(["compare", str(base), str(t), "--labels", f"base,{XSS[0]}", "--html", "c.html", "-q"], tmp_path).returncode == 0
    import nsysan

    (tmp_path / "nb.html").write_text("<!doctype html><body>" + nsysan.analyze(str(t))._repr_html_(),
                                      encoding="utf-8")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            for name in ("r.html", "d.html", "c.html", "nb.html"):
                page = b.new_page(viewport={"width": 1400, "height": 1000})
                dialogs: list[str] = []
                page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
                page.goto((tmp_path / name).as_uri())
                page.wait_for_load_state("load")
                if name == "r.html":
                    labels = page.evaluate("window.nsysanTimeline.lanes.map(l => l.label)")
                    assert f"CUDA API · {XSS[1]} worker (tid {gtid & 0xFFFFFF})" in labels
                    box = page.get_by_placeholder("search op names")
                    for s in XSS:
                        box.fill(s)
                    box.fill("")
                    c = page.locator("#tl")
                    c.scroll_into_view_if_needed()
                    bb = c.bounding_box()
                    for y in range(0, int(bb["height"]), 8):
                        page.mouse.move(bb["x"] + bb["width"] * 0.5, bb["y"] + y)
                # THEN nothing from the trace ran or became markup
                page.wait_for_timeout(100)
                assert dialogs == [], (name, dialogs)
                assert page.evaluate("document.querySelectorAll('img, svg[onload], [onerror], [onload]').length") == 0
                text = page.locator("body").inner_text()
                assert any(x in text for x in XSS), name  # shown as text
                page.close()
        finally:
            b.close()
