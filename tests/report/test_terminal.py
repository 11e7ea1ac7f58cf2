"""The terminal summary as a user reads it: piped (a file, a pager, CI logs) and on a terminal.

Truth from the trace: the steady state's top kernels by SQL over the kernel table (in nsysan's
steady window, read from its JSON), and the severity order from the findings' own savings.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys

import pytest

from nsysan.cli import main
from nsysan.report.terminal.text import plain_markup, short_kernel_name
from nsysan.units import fmt_ns

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
SEV = {"critical": 3, "warning": 2, "info": 1}


def _run_piped(fixture_dir, tmp_path, capsys, name="ladder_baseline"):
    js = tmp_path / f"{name}.json"
    assert main(["analyze", str(fixture_dir / f"{name}.sqlite"), "--json", str(js), "--no-html"]) == 0
    return capsys.readouterr().out, json.loads(js.read_text())


def test_piped_output_is_not_wrapped_and_lists_fixes_with_suggestions(fixture_dir, tmp_path, capsys):
    out, d = _run_piped(fixture_dir, tmp_path, capsys)
    lines = out.splitlines()
    assert "\x1b[" not in out  # no colour when piped
    # no line break between a number and its unit, and every finding's message whole on one line,
    # its ``code`` markup shown as `code`
    assert not re.search(r"\d\n\s*(ns|us|ms|s|%)\b", out)
    assert "``" not in out
    for f in d["findings"]:
        assert any(ln.strip() == plain_markup(f["message"]) for ln in lines), f["rule"]
        assert any(ln.strip() == "fix: " + plain_markup(f["suggestion"]) for ln in lines), f["rule"]
    assert "nsys analyze would list" not in out  # jargon: that cross-check lives in the report and JSON


def test_fixes_are_ranked_by_severity_then_saving_and_severity_follows_the_saving(fixture_dir, tmp_path, capsys):
    for name in ("ladder_baseline", "launch_eager", "decode_eager", "train_dataloader"):
        out, d = _run_piped(fixture_dir, tmp_path, capsys, name)
        w = d["windows"]["steady"]["dur_ns"]
        fs = d["findings"]
        keys = [(SEV[f["severity"]], f["impact_ns"]) for f in fs]
        assert keys == sorted(keys, reverse=True), name
        for f in fs:
            if f["impact_ns"] > 0:
                share = f["impact_ns"] / w
                want = "critical" if share >= 0.10 else "warning" if share >= 0.01 else "info"
                assert f["severity"] == want, (name, f["rule"], share)
            else:
                assert f["severity"] != "critical", (name, f["rule"])
        # the terminal lists them in that order, numbered
        heads = re.findall(r"^\s*(\d+)\. (CRITICAL|WARNING|INFO)\s+.*\[([a-z0-9-]+)\]$", out, re.M)
        assert [(int(i), s.lower(), r) for i, s, r in heads] == [
            (i, f["severity"], f["rule"]) for i, f in enumerate(fs, 1)], name


def test_top_kernels_are_the_steady_states_by_sql(fixture_dir, tmp_path, capsys):
    out, d = _run_piped(fixture_dir, tmp_path, capsys)
    w = d["windows"]["steady"]
    con = sqlite3.connect(f"file:{fixture_dir / 'ladder_baseline.sqlite'}?mode=ro", uri=True)
    rows = con.execute("""SELECT s.value, SUM(k.end - k.start) AS tot, COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k
                          JOIN StringIds s ON s.id = k.demangledName WHERE k.start >= ? AND k.start < ?
                          GROUP BY s.value ORDER BY tot DESC, s.value LIMIT 5""", (w["start_ns"], w["end_ns"])).fetchall()
    total = con.execute("SELECT SUM(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE start >= ? AND start < ?",
                        (w["start_ns"], w["end_ns"])).fetchone()[0]
    con.close()
    block = out.split("Top kernels (steady state, ", 1)[1]
    assert block.startswith(f"{fmt_ns(total)} of kernel time)")
    got = [ln for ln in block.splitlines()[1:6]]
    for (name, tot, n), ln in zip(rows, got):
        assert ln.split()[0] + " " + ln.split()[1] == fmt_ns(tot)
        assert f"{n:,}x" in ln and ln.endswith(short_kernel_name(name))
    # the JSON carries the same steady table
    assert [(r["name"], r["total_ns"], r["count"]) for r in d["kernels"]["steady_by_name"][:5]] == \
        [(a, b, c) for a, b, c in rows]


def test_on_a_terminal_lines_fit_the_width_and_severity_is_coloured(fixture_dir, tmp_path):
    env = {**os.environ, "FORCE_COLOR": "1", "COLUMNS": "72", "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    cmd = [sys.executable, "-m", "nsysan", "analyze", str(fixture_dir / "ladder_baseline.sqlite"), "--no-html"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    plain = ANSI.sub("", p.stdout)
    assert max(len(ln) for ln in plain.splitlines()) <= 72
    assert not re.search(r"\d\n\s*(ns|us|ms|s|%)\b", plain)
    assert "\x1b[1;31mCRITICAL" in p.stdout  # critical in bold red
    p2 = subprocess.run(cmd, env={**env, "NO_COLOR": "1"}, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert "\x1b[1;31m" not in p2.stdout and "CRITICAL" in p2.stdout


@pytest.mark.parametrize("name, short", [
    ("void cudnn::bn_fw<float, (int)1>(T2, const T1 *)", "cudnn::bn_fw<float, (int)1>"),
    ("sm90_xmma_gemm_kernel", "sm90_xmma_gemm_kernel"),
    ("void f<(a)>(g(h), i)", "f<(a)>"),
    ("(weird)", "(weird)"),
])
def test_short_kernel_name(name, short):
    assert short_kernel_name(name) == short


def test_a_terminal_sees_progress_from_the_load_to_the_last_output(fixture_dir, tmp_path, monkeypatch):
    """On a terminal one progress line follows the whole job: each table loaded, each analysis step
    as it is waited for (``done`` counts up to ``analysis.STEPS``), each output written; it stops
    before the summary is printed, and the JSON is the same as without it."""
    from nsysan import pipeline as pipeline_mod
    from nsysan.analysis import STEPS

    seen: list[tuple[str, int, int]] = []
    calls: list[str] = []

    class Prog:
        def start(self) -> None:
            calls.append("start")

        def stop(self) -> None:
            calls.append("stop")

    monkeypatch.setattr(pipeline_mod, "_progress_factory",
                        lambda quiet, label="": (Prog(), lambda d, i, n: (seen.append((d, i, n)), calls.append("show"))))
    trace = str(fixture_dir / "ladder_baseline.sqlite")
    assert main(["analyze", trace, "--json", str(tmp_path / "p.json"), "--html", str(tmp_path / "p.html")]) == 0
    assert calls[0] == "start" and calls[-1] == "stop" and calls.count("stop") == 1
    loading = [s for s in seen if s[0].startswith("loading ")]
    steps = [s for s in seen if s[0].startswith("analysing: ")]
    writing = [s for s in seen if s[0].startswith("writing ")]
    assert seen == loading + steps + writing  # in that order
    assert loading and all(0 <= i <= n for _, i, n in loading)
    assert [i for _, i, _ in steps] == list(range(STEPS + 1)) and {n for _, _, n in steps} == {STEPS}
    assert steps[-1][0] == "analysing: done" and "analysing: rules" in [s[0] for s in steps]
    assert writing == [("writing JSON", 0, 2), ("writing HTML report", 1, 2)]
    monkeypatch.setattr(pipeline_mod, "_progress_factory", lambda quiet, label="": (None, None))
    assert main(["analyze", trace, "--json", str(tmp_path / "q.json"), "--no-html", "-q"]) == 0
    assert json.loads((tmp_path / "p.json").read_text()) == json.loads((tmp_path / "q.json").read_text())


def test_plain_progress_lines_off_a_terminal(fixture_dir, tmp_path, monkeypatch, capsys):
    """stderr not a terminal (here: captured): a run shorter than ``_Lines.EVERY`` prints no progress;
    with ``EVERY`` at 0 every step is a plain line naming the trace, the seconds so far and the step,
    in the loader's, the analysis' and the writers' order; ``-q`` prints none."""
    from nsysan import pipeline as pipeline_mod

    trace = fixture_dir / "ladder_baseline.sqlite"
    args = ["analyze", str(trace), "--json", str(tmp_path / "p.json"), "--no-html"]
    assert main(args) == 0
    assert "nsysan: ladder_baseline.sqlite:" not in capsys.readouterr().err
    monkeypatch.setattr(pipeline_mod._Lines, "EVERY", 0.0)
    assert main(args) == 0
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("nsysan: ladder_baseline.sqlite: ")]
    steps = [re.fullmatch(r"nsysan: ladder_baseline\.sqlite: \d+ s, (.+) \((\d+)/(\d+)\)", ln) for ln in lines]
    assert all(steps), lines
    names = [m.group(1) for m in steps]
    assert names[0].startswith("loading ") and "analysing: rules" in names and names[-1] == "writing JSON"
    assert main(args + ["-q"]) == 0
    assert "nsysan: ladder_baseline.sqlite:" not in capsys.readouterr().err


def test_the_analysis_reports_its_steps_without_the_rules_too(load):
    from nsysan.analysis import STEPS, analyze

    seen: list[tuple[str, int, int]] = []
    analyze(load("launch_eager"), rules=False, progress=lambda d, i, n: seen.append((d, i, n)))
    assert "rules" not in [d for d, _, _ in seen] and seen[-1] == ("done", STEPS, STEPS)
    assert [i for _, i, _ in seen[:-1]] == list(range(STEPS - 1))


def test_the_library_reports_progress_for_a_path_too(fixture_dir):
    """``nsysan.analyze(path, progress=f)``: the load's steps, then the analysis steps, one function."""
    import nsysan
    from nsysan.analysis import STEPS

    seen: list[tuple[str, int, int]] = []
    nsysan.analyze(fixture_dir / "launch_graph.sqlite", progress=lambda d, i, n: seen.append((d, i, n)))
    names = [d for d, _, _ in seen]
    first_step = names.index("GPU operations")
    assert first_step > 0 and "strings" in names[:first_step] and seen[-1] == ("done", STEPS, STEPS)
