"""The output formats' one table (``nsysan/report/formats.py``, issue 50): the ``analyze`` options,
the planning and writing of a run and the Python API all read it, so a new format is one renderer
plus one entry; the report's timeline begun early is a value handed back, no module-level state."""

from __future__ import annotations

from pathlib import Path

import pytest

from nsysan import api, pipeline
from nsysan.cli import main
from nsysan.cli.parser import build_parser
from nsysan.errors import UsageError
from nsysan.options import RunOptions
from nsysan.report import formats, timeline
from nsysan.report.formats import OUTPUTS, Output


def _summary_text(a, *, show_env: bool = False, early=None) -> str:
    """The new format's renderer (its whole module, in a real one)."""
    return api.summary_text(a) + "\n"


@pytest.fixture
def summary_format():
    # GIVEN a format registered as one entry
    fmt = Output("summary", "--summary-txt", "OUT.txt", "write the terminal summary as text", "text summary",
                 render=_summary_text, suffix=".txt")
    formats.register(fmt)
    try:
        yield fmt
    finally:
        formats.OUTPUTS.remove(fmt)


def _analyze_actions():
    p = build_parser()
    sub = next(a for a in p._actions if a.dest == "cmd")
    return {a.option_strings[0]: a for a in sub.choices["analyze"]._actions if a.option_strings}


def test_the_analyze_options_are_the_tables() -> None:
    actions = _analyze_actions()
    for o in OUTPUTS:
        assert actions[o.flag].help == o.help and actions[o.flag].metavar == o.metavar
        if o.off:
            assert actions[o.off[0]].help == o.off[1]
    flags = [f for f in actions if f in {o.flag for o in OUTPUTS} | {"--no-html", "--out-dir"}]
    assert flags == ["--json", "--html", "--no-html", "--csv", "--perfetto", "--out-dir"]


def test_a_new_format_is_one_entry(summary_format, fixture_dir: Path, tmp_path: Path, analysis) -> None:
    trace = str(fixture_dir / "ladder_baseline.sqlite")
    # THEN the command line has its option
    assert _analyze_actions()["--summary-txt"].help == "write the terminal summary as text"
    # AND a run writes it, with the others
    out = tmp_path / "s.txt"
    assert main(["analyze", trace, "--summary-txt", str(out), "--json", str(tmp_path / "a.json"), "-q"]) == 0
    a = analysis("ladder_baseline")
    assert out.read_text() == _summary_text(a)
    assert (tmp_path / "a.json").exists() and (tmp_path / "a.html").exists()
    # AND the API renders and writes it by name
    assert api.render(a, "summary") == out.read_text()
    assert api.write(a, "summary", tmp_path / "api.txt").read_text() == out.read_text()
    # AND --out-dir plans it per trace, and the combinations name it
    jobs, _ = pipeline.plan_analyze([trace], RunOptions(), many=False, out_dir=str(tmp_path / "d"), paths={}, off=set(),
                                    force=False)
    assert jobs[0][1].outputs["summary"] == str(tmp_path / "d" / "ladder_baseline.txt")
    with pytest.raises(UsageError, match=r"<trace>\.txt per trace; .* --csv or --summary-txt"):
        pipeline.check_combination(many=False, out_dir="d", paths={"summary": "x.txt"})
    # AND a second format of the same name is refused
    with pytest.raises(ValueError):
        formats.register(summary_format)


def test_the_api_writes_every_format(analysis, tmp_path: Path) -> None:
    a = analysis("ladder_baseline")
    assert api.render(a, "json") == a.to_json() == api.to_json(a)
    for o in OUTPUTS:
        p = api.write(a, o.name, tmp_path / f"{o.name}.out")
        assert p.exists()
    assert sorted(f.name for f in (tmp_path / "csv.out").iterdir()) == sorted(f"{n}.csv" for n in formats.CSV_NAMES)
    assert (tmp_path / "json.out").read_text() == a.to_json()
    with pytest.raises(ValueError, match="written as it is made"):
        api.render(a, "perfetto")
    with pytest.raises(KeyError, match="known: json, html, csv, perfetto"):
        api.render(a, "pdf")


def test_the_early_timeline_is_handed_back(analysis, monkeypatch) -> None:
    a = analysis("ladder_baseline")
    assert not hasattr(timeline, "_started")  # no module-level state keyed by id(a)
    monkeypatch.setattr(timeline, "SMALL_EVENTS", 0)  # begun even for this small trace
    begun = timeline.start(a)
    assert begun is not None
    assert timeline.build_timeline(a, begun) == timeline.build_timeline(a)
