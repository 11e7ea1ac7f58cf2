"""The proof on real traces: on each ladder step the rule that the next step fixes fires, with an
impact of the right order of magnitude, and after the fix it no longer fires."""

from __future__ import annotations

import re

import pytest
from conftest import FIXTURES, ROOT

from nsysan.report.terminal.rules_listing import rules_markdown
from nsysan.rules import REGISTRY

# step -> rules that must fire (the problem the NEXT step fixes, and others planted there)
MUST_FIRE = {
    "ladder_baseline": {"alloc-in-loop", "pageable-memcpy", "sync-memcpy", "serial-copy-compute", "host-bound-gap",
                        "fp32-compute", "warmup-outlier"},
    "ladder_reuse": {"pageable-memcpy", "sync-memcpy", "serial-copy-compute", "host-bound-gap", "fp32-compute"},
    "ladder_pinned": {"fp32-compute", "serial-copy-compute", "host-bound-gap"},
    "ladder_fp16": {"serial-copy-compute", "host-bound-gap", "launch-bound"},
    "ladder_overlap": {"host-bound-gap", "launch-bound"},
    "ladder_worker": {"launch-bound"},
    "launch_eager": {"launch-bound", "gpu-low-util"},
    "launch_graph": {"timing-unsynchronized"},
    "timing": {"timing-unsynchronized", "warmup-outlier"},
}
# step -> rules fixed by this step or an earlier one, which must no longer fire
MUST_NOT_FIRE = {
    "ladder_reuse": {"alloc-in-loop"},
    "ladder_pinned": {"alloc-in-loop", "pageable-memcpy", "sync-memcpy"},
    "ladder_fp16": {"alloc-in-loop", "pageable-memcpy", "sync-memcpy", "fp32-compute"},
    "ladder_overlap": {"alloc-in-loop", "pageable-memcpy", "fp32-compute", "serial-copy-compute"},
    "ladder_worker": {"alloc-in-loop", "pageable-memcpy", "fp32-compute", "host-bound-gap"},
    "ladder_graph": {"alloc-in-loop", "pageable-memcpy", "fp32-compute", "launch-bound"},
    "launch_graph": {"launch-bound"},
    "launch_graph_nodes": {"launch-bound"},
}


@pytest.mark.parametrize("name", sorted(set(MUST_FIRE) | set(MUST_NOT_FIRE)))
def test_ladder_intent(name, analysis):
    fired = {f.rule for f in analysis(name).findings}
    assert MUST_FIRE.get(name, set()) <= fired, f"missing: {MUST_FIRE.get(name, set()) - fired}"
    assert not (MUST_NOT_FIRE.get(name, set()) & fired), f"should be fixed: {MUST_NOT_FIRE[name] & fired}"


def _ms(log: str) -> float:
    return float(re.search(r"Total Elapsed Time\(3 batches\): ([\d.]+) ms", log).group(1))


SAVED_BY_NEXT = [  # (step, rule the next step fixes, next step)
    ("ladder_baseline", "alloc-in-loop", "ladder_reuse"),
    ("ladder_reuse", "pageable-memcpy", "ladder_pinned"),
    ("ladder_pinned", "fp32-compute", "ladder_fp16"),
    ("ladder_overlap", "host-bound-gap", "ladder_worker"),
]


@pytest.mark.parametrize("step,rule_id,nxt", SAVED_BY_NEXT)
def test_impact_has_the_right_order_of_magnitude(step, rule_id, nxt, analysis):
    """Impact (over the steady state: 9 iterations) per iteration vs the measured per-batch saving
    of the next step (from the workloads' own timer around the 3 timed batches): within 10x."""
    fx = FIXTURES
    saved_per_batch_ms = (_ms((fx / step / "README.md").read_text()) - _ms((fx / nxt / "README.md").read_text())) / 3
    a = analysis(step)
    f = next(f for f in a.findings if f.rule == rule_id)
    impact_per_iter_ms = f.impact_ns / a.iterations.stats.count / 1e6
    assert saved_per_batch_ms > 0
    assert saved_per_batch_ms / 10 <= impact_per_iter_ms <= saved_per_batch_ms * 10, (impact_per_iter_ms, saved_per_batch_ms)


def test_findings_sorted_by_impact(analysis):
    from ranking import finding_key

    f = analysis("ladder_baseline").findings
    assert [finding_key(x) for x in f] == sorted(finding_key(x) for x in f)


def test_findings_shape(analysis):
    for f in analysis("ladder_baseline").findings:
        d = f.to_dict()
        # covers_ns only on a summary without an estimate (gpu-low-util, startup-cost): the time it explains
        assert set(d) - {"covers_ns"} == {"rule", "severity", "title", "message", "suggestion", "impact_ns", "evidence",
                                          "window"}
        assert "covers_ns" not in d or (d["impact_ns"] == 0 and d["covers_ns"] > 0)
        assert d["suggestion"] and isinstance(d["impact_ns"], int)


def test_registry_docs():
    required = {"alloc-in-loop", "pageable-memcpy", "sync-memcpy", "serial-copy-compute", "host-bound-gap",
                "launch-bound", "fp32-compute", "sync-api", "gpu-low-util", "timing-unsynchronized", "warmup-outlier"}
    assert required <= set(REGISTRY)
    for r in REGISTRY.values():
        assert r.why and r.fix and r.summary, r.id


def test_readme_rules_table_is_current():
    readme = (ROOT / "README.md").read_text()
    assert rules_markdown() in readme, "regenerate with: nsysan rules --markdown"
