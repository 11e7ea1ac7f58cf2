"""The terminal at a known width (issue 51): ``nsysan analyze`` and ``nsysan rules`` at ``COLUMNS=80``
and ``120``, the rules that could not judge a trace, the outputs ``--out-dir`` would not replace,
and the commands' ``-h`` screens.

Truth: each finding's message and fix from the JSON written by the same run (every word kept, in
order), what a trace holds by SQL (``CUDA_GPU_MEMORY_USAGE_EVENTS``), the files on disk, and the
bundled examples' data folder.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest

from nsysan.cli import main
from nsysan.report.terminal.text import message_lines, plain_markup

TRACES = ("example", "launch_eager", "train_dataloader", "waits_python", "mem_growth", "ddp_overlap_rank0",
          "annotate_plain")
LEADS = re.compile(r"^\s*(fix: |note: |- )?")


def _words(text: str) -> str:
    return " " + " ".join(re.findall(r"\w+", text)) + " "


def _analyze(name: str, width: int, fixture_dir: Path, tmp_path: Path, capsys, monkeypatch) -> tuple[str, dict]:
    monkeypatch.setenv("COLUMNS", str(width))
    trace = name if name == "example" else str(fixture_dir / f"{name}.sqlite")
    js = tmp_path / f"{name}-{width}.json"
    assert main(["analyze", trace, "--json", str(js), "--no-html"]) == 0
    return capsys.readouterr().out, json.loads(js.read_text())


def _over(out: str, width: int) -> list[str]:
    """Lines over ``width`` that are more than one unbreakable token after their indent and lead."""
    return [ln for ln in out.splitlines() if len(ln) > width and " " in LEADS.sub("", ln).strip()]


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("name", TRACES)
def test_summary_fits_the_width_and_keeps_every_word(name, width, fixture_dir, tmp_path, capsys, monkeypatch):
    out, d = _analyze(name, width, fixture_dir, tmp_path, capsys, monkeypatch)
    assert not _over(out, width), _over(out, width)
    assert "``" not in out and "\x1b[" not in out
    assert not re.search(r"\d\n\s*(ns|us|ms|s|%)\b", out)  # a number and its unit on one line
    assert not re.search(r"\w [;,]", out)  # no space before a separator ("before timing ; keep")
    words = _words(out)
    assert d["findings"] or "No findings" in out
    for f in d["findings"]:
        assert _words(f["message"]) in words, f["rule"]
        assert _words(f["suggestion"]) in words, f["rule"]
        assert f"[{f['rule']}]" in out


def test_a_long_message_is_a_sentence_then_one_line_a_cause(fixture_dir, tmp_path, capsys, monkeypatch):
    """ladder_baseline's host-bound-gap message (over 1,000 characters in the JSON): its first sentence
    on the message's indent, the list of what the thread was doing as a lead and one "- " line for each
    cause the message names, in its order."""
    out, d = _analyze("ladder_baseline", 80, fixture_dir, tmp_path, capsys, monkeypatch)
    msg = next(f["message"] for f in d["findings"] if f["rule"] == "host-bound-gap")
    assert len(msg) > 1000
    doing = re.search(r"What the submitting thread was doing: (.*?)\. [A-Z]", msg).group(1)
    causes = doing.split("; ")
    assert len(causes) >= 3
    lines = out.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.strip() == "What the submitting thread was doing:")
    shown = [ln.strip() for ln in lines[at + 1:] if ln.strip().startswith("- ")][:len(causes)]
    assert [s[2:].rstrip(".") for s in shown] == causes
    first = msg.split(". ")[0]
    block = out.split("GPU idle while the CPU does other work\n", 1)[1]
    assert _words(block.split("What the submitting thread")[0]) == _words(first)


def test_message_lines_keep_every_word_in_order():
    msg = ("Pageable copies: 9 (4.61 MB). What it did: a: 1 ms (x; y); b: 2 ms; c: 3 ms. "
           "Counted: 1 ms; the rest is latency. 23 of 40 launches were slow.")
    got = message_lines(msg)
    assert got[0] == (0, "Pageable copies: 9 (4.61 MB).")
    assert got[1:5] == [(1, "What it did:"), (2, "- a: 1 ms (x; y)"), (2, "- b: 2 ms"), (2, "- c: 3 ms.")]
    assert got[5:] == [(1, "Counted: 1 ms; the rest is latency."), (1, "23 of 40 launches were slow.")]
    assert _words(" ".join(t for _, t in got)) == _words(msg)


def test_code_markup_is_rendered_not_shown_raw():
    assert plain_markup("use ``torch.where`` and `nsys -s`") == "use `torch.where` and `nsys -s`"


def _sql_has_memory_events(path: Path) -> bool:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        if not con.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='CUDA_GPU_MEMORY_USAGE_EVENTS'"
                           ).fetchone():
            return False
        return con.execute("SELECT COUNT(*) FROM CUDA_GPU_MEMORY_USAGE_EVENTS").fetchone()[0] > 0
    finally:
        con.close()


@pytest.mark.parametrize("name", ["ladder_baseline", "launch_eager", "mem_growth", "mem_churn"])
def test_memory_growth_is_not_checked_on_a_trace_without_memory_events(name, fixture_dir, tmp_path, capsys,
                                                                        monkeypatch):
    """"passed" only where the rule looked at data: without memory usage events (by SQL) the summary
    says memory-growth was not checked and what the trace lacks; with them it is not in that list.
    The counts on the "Rules:" line are the JSON's rules log."""
    out, d = _analyze(name, 120, fixture_dir, tmp_path, capsys, monkeypatch)
    status = {r["rule"]: r["status"] for r in d["rules"]}
    rules_block = " ".join(out.split("\nRules: ", 1)[1].split("\n\n", 1)[0].split())
    if _sql_has_memory_events(fixture_dir / f"{name}.sqlite"):
        assert status["memory-growth"] in ("fired", "passed")
        assert "memory-growth" not in rules_block
    else:
        assert status["memory-growth"] == "not_checked"
        assert ("memory-growth: not checked (the trace lacks GPU memory usage events (nsys profile "
                "--cuda-memory-usage=true))") in rules_block
    fired = len({f["rule"] for f in d["findings"]})
    n = {k: sum(1 for v in status.values() if v == k) for k in ("fired", "passed", "not_checked")}
    assert n["fired"] == fired
    head = f"Rules: {n['fired']} fired, {n['passed']} passed" + (f", {n['not_checked']} not checked:"
                                                                if n["not_checked"] else "")
    assert head in out


def test_out_dir_names_every_file_it_would_not_replace_at_once(fixture_dir, tmp_path, capsys):
    od = tmp_path / "od"
    od.mkdir()
    theirs = [od / "launch_eager.json", od / "launch_graph.html", od / "summary.json"]
    for p in theirs:
        p.write_text("someone else's\n")
    traces = [str(fixture_dir / f"{n}.sqlite") for n in ("launch_eager", "launch_graph")]
    assert main(["analyze", *traces, "--out-dir", str(od)]) == 8
    err = capsys.readouterr().err
    assert f"{len(theirs)} outputs exist that nsysan did not write" in err
    for p in theirs:
        assert str(p) in err
        assert p.read_text() == "someone else's\n"
    assert sorted(od.iterdir()) == sorted(theirs)  # nothing analysed, nothing written
    theirs[0].unlink()
    theirs[1].unlink()
    assert main(["analyze", *traces, "--out-dir", str(od)]) == 8
    err = capsys.readouterr().err
    assert f"{od / 'summary.json'}: exists, and nsysan did not write it" in err


def test_example_help_lists_every_bundled_example(capsys):
    import nsysan.examples

    bundled = sorted(p.name[:-len(".sqlite.xz")] for p in (Path(nsysan.examples.__file__).parent / "data").iterdir()
                     if p.name.endswith(".sqlite.xz"))
    assert len(bundled) >= 2
    with pytest.raises(SystemExit) as e:
        main(["example", "--help"])
    assert e.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    for n in bundled:
        assert n in out


@pytest.mark.parametrize("cmd", ["analyze", "rules", "profile", "diff", "compare", "example"])
def test_each_command_help_opens_with_a_description(cmd, capsys):
    from nsysan.options import COMMANDS

    with pytest.raises(SystemExit):
        main([cmd, "-h"])
    paras = capsys.readouterr().out.split("\n\n")
    assert paras[0].startswith(f"usage: nsysan {cmd}")
    assert " ".join(paras[1].split()) == COMMANDS[cmd][1]
    assert len(COMMANDS[cmd][1]) > 40


@pytest.mark.parametrize("width", [80, 120])
def test_rules_listing_fits_and_names_no_internal_path(width, capsys, monkeypatch):
    from nsysan.rules import REGISTRY

    monkeypatch.setenv("COLUMNS", str(width))
    assert main(["rules"]) == 0
    out = capsys.readouterr().out
    assert not _over(out, width)
    assert "``" not in out and not re.search(r"\b(analyses|rules|report|trace)/\w+\.py", out)
    words = _words(out)
    for r in REGISTRY.values():
        assert _words(r.summary) in words and _words(r.fix) in words


@pytest.mark.parametrize("width", [80, 50])
def test_cross_trace_table_fits_the_width(width, fixture_dir, tmp_path, capsys, monkeypatch):
    """``nsysan analyze a b --out-dir``'s table of the traces (``print_cross``) at ``COLUMNS``: no line
    longer, and every trace's name, iteration time, top finding and slowest kernel (summary.json of the
    same run) still shown, a long name wrapped within its column or under its row."""
    from nsysan.report.terminal.text import short_kernel_name
    from nsysan.units import fmt_ns

    # GIVEN two fixtures, one under a name longer than any column of an 80-column table
    long = tmp_path / ("rank0_of_a_long_experiment_name_" + "x" * 40 + ".sqlite")
    long.write_bytes((fixture_dir / "launch_eager.sqlite").read_bytes())
    traces = [str(long), str(fixture_dir / "launch_graph.sqlite")]
    monkeypatch.setenv("COLUMNS", str(width))
    # WHEN both are analysed into an output folder
    assert main(["analyze", *traces, "--out-dir", str(tmp_path / "od"), "-q", "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    table = [ln for ln in out.splitlines() if not ln.startswith("wrote")]
    summary = json.loads((tmp_path / "od" / "summary.json").read_text())
    # THEN no line is wider than the terminal
    assert table and all(len(ln) <= width for ln in table), [ln for ln in table if len(ln) > width]
    assert table[0].split()[:2] == ["trace", "p50"]
    # the trace column (its width from the header: "trace" padded, then "p50" right-aligned in 10) read
    # down, and the lines under the rows (indented) read on, each without its line breaks
    tw = table[0].index("p50") + len("p50") - 11
    column = "".join(ln[:tw].strip() for ln in table[1:] if not ln.startswith("  "))
    under = "".join("".join(ln.split()) for ln in table[1:] if ln.startswith("  "))
    for t in summary["traces"]:
        assert Path(t["trace"]).name in column
        assert re.search(rf" {re.escape(fmt_ns(t['p50_ns']))} ", out)
        assert f"topfinding:{t['top_finding'] or '-'}" in under or re.search(rf" {t['top_finding']}\b", out)
        assert "slowestkernel:" + "".join(short_kernel_name(t["slowest_kernel"]).split()) in under
