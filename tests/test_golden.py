"""Golden outputs: what nsysan concludes on each real fixture, stored in ``tests/golden/<fixture>.json``.

A change in rules, thresholds, impact estimates, wording or the nsys cross-check shows up here as a
diff to review. When the change is intended, regenerate and commit the files:

    NSYSAN_UPDATE_GOLDEN=1 python3 -m pytest tests/test_golden.py

Impacts are kept to 3 significant digits, so that a last-digit change in a float sum is not noise.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from conftest import FIXTURE_NAMES

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("NSYSAN_UPDATE_GOLDEN") == "1"


def sig3(x: float) -> float:
    if x == 0:
        return 0
    return round(x, -int(math.floor(math.log10(abs(x)))) + 2)


def summary(a) -> dict:
    it = a.iterations
    return {
        "steady_window_label": a.steady.label,
        "iteration_range": it.range_name,
        "iterations": int(len(it.table)),
        "findings": [{"rule": f.rule, "severity": f.severity.name.lower(), "title": f.title,
                      "impact_ns": sig3(int(f.impact_ns)), "message": f.message, "evidence_items": len(f.evidence)}
                     for f in a.findings],
        "rules_fired": sorted(r["rule"] for r in a.rule_log if r["status"] == "fired"),
        "nsys_analyze": [{k: r[k] for k in ("nsys_rule", "count", "steady_count", "outside_count", "verdict")}
                         for r in a.nsys_rules.to_dict("records")],
    }


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_golden(name, analysis):
    got = json.loads(json.dumps(summary(analysis(name)), default=int))
    path = GOLDEN / f"{name}.json"
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(json.dumps(got, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    assert path.exists(), f"no golden file for {name}: run NSYSAN_UPDATE_GOLDEN=1 pytest tests/test_golden.py"
    want = json.loads(path.read_text())
    assert got == want


@pytest.mark.parametrize("name", ["ladder_overlap", "timing", "launch_eager"])
def test_threads_do_not_change_the_output(name, load):
    """Analyses and rules on 4 threads give the JSON of a run without threads, byte for byte."""
    import nsysan
    from nsysan.report import jsonout

    trace = load(name)
    assert jsonout.to_json(nsysan.analyze(trace, workers=4)) == jsonout.to_json(nsysan.analyze(trace, workers=1))
