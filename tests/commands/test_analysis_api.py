"""The frozen result and the functions that render it (issue 39): ``analyze`` builds an ``Analysis``
once and hands it out frozen; its outputs are ``nsysan.api``'s functions, which its methods of the
same names call; the cross-trace straggler rule is an analysis (``analyses/ranks.cross_stragglers``)."""

from __future__ import annotations

import dataclasses
import sqlite3

import pytest

import nsysan
from nsysan import api
from nsysan.analyses.ranks import SLOWER, cross_stragglers
from nsysan.analysis import analyze
from nsysan.errors import OutputExistsError


def test_the_result_is_frozen(analysis) -> None:
    a = analysis("ladder_baseline")
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.findings = []  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.ranks = None  # type: ignore[misc]
    assert a.findings  # the rules' findings are in the result handed out


def test_on_analyses_sees_the_analyses_before_the_rules_and_the_result_is_that_object(load, fixture_dir) -> None:
    seen = []
    a = analyze(load("ladder_baseline"), on_analyses=lambda x: seen.append((x, list(x.findings), list(x.rule_log))))
    assert len(seen) == 1 and seen[0][0] is a and seen[0][1:] == ([], [])
    assert a.findings and a.rule_log  # filled in before analyze returned it, frozen since
    # every GPU op of the export is in the result: its kernels, copies and memsets
    with sqlite3.connect(fixture_dir / "ladder_baseline.sqlite") as con:
        n = sum(con.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in (
            "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"))
    assert len(a.ops) == n


def test_the_methods_are_the_api_functions(analysis, tmp_path) -> None:
    a = analysis("ladder_baseline")
    assert nsysan.api is api
    assert api.to_dict(a) == a.to_dict()
    assert api.to_json(a) == a.to_json()
    assert api.to_html(a) == a.to_html()
    assert api.summary_text(a) == repr(a)
    assert api.summary_html(a) == a._repr_html_()
    out = tmp_path / "r.html"
    assert api.write_html(a, out) == out and out.read_text("utf-8") == a.to_html()
    foreign = tmp_path / "mine.html"
    foreign.write_text("not nsysan's")
    with pytest.raises(OutputExistsError):
        api.write_html(a, foreign)
    assert foreign.read_text() == "not nsysan's"


def test_the_straggler_across_traces_without_communication_is_a_p50_above_the_median_times_slower() -> None:
    res = [{"trace": "a", "p50_ns": 100}, {"trace": "b", "p50_ns": 100}, {"trace": "c", "p50_ns": 121},
           {"trace": "d", "p50_ns": None}]
    med, ranks, late = cross_stragglers(res)
    assert SLOWER == 1.2 and med == 100 and ranks is None  # median of 100, 100, 121
    assert late == [False, False, True, False]  # 121 > 1.2 x 100; no p50: never
    assert cross_stragglers([{"trace": "a", "p50_ns": 100}, {"trace": "b", "p50_ns": 120}])[2] == [False, False]
    assert cross_stragglers([]) == (None, None, [])


def test_the_timeline_can_start_before_the_rules(load):
    """``analyze(on_analyses=...)`` is called once, with every analysis in place and no finding yet,
    and the result is the one without it (the command line starts the timeline encoding there)."""
    from nsysan import analysis
    from nsysan.report import jsonout

    t = load("ladder_baseline")
    seen = []

    def hook(a):
        seen.append((a, list(a.findings), a.gaps is not None and a.ops is not None and a.nvtx_ranges is not None))

    with_hook = analysis.analyze(t, on_analyses=hook)
    assert len(seen) == 1 and seen[0][0] is with_hook and seen[0][1] == [] and seen[0][2]
    assert jsonout.to_json(with_hook) == jsonout.to_json(analysis.analyze(t))
