"""The rules log says "not checked" where a rule had no data (issue 49 item 9): a rule that needs an
input the trace lacks (GPU memory usage events, unified memory faults, GPU metrics) is not "passed".
Truth: which tables each export holds and which calls it made, by SQL."""

from __future__ import annotations

import json
import sqlite3

import pytest

from nsysan.rules import NEEDS

METRIC_RULES = {r for r, (tables, _) in NEEDS.items() if tables == ("GPU_METRICS",)}


def _sql(fixture_dir, name: str, q: str) -> list[tuple]:
    con = sqlite3.connect(f"file:{fixture_dir / (name + '.sqlite')}?mode=ro&immutable=1", uri=True)
    try:
        return con.execute(q).fetchall()
    finally:
        con.close()


def _tables(fixture_dir, name: str) -> set[str]:
    return {r[0] for r in _sql(fixture_dir, name, "SELECT name FROM sqlite_master WHERE type = 'table'")}


@pytest.mark.parametrize("name", ["ladder_baseline", "mem_growth", "metrics_mix", "um_prefetch"])
def test_a_rule_without_its_input_is_not_checked(name, fixture_dir, analysis):
    # GIVEN the export's tables and calls (SQL)
    tables = _tables(fixture_dir, name)
    cuda_calls = _sql(fixture_dir, name, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME")[0][0]
    kernels = _sql(fixture_dir, name, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0]
    managed = _sql(fixture_dir, name, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s "
                   "ON s.id = r.nameId WHERE s.value LIKE '%MallocManaged%' OR s.value LIKE '%AllocManaged%'")[0][0]
    # WHEN analysed
    a = analysis(name)
    log = {r["rule"]: r for r in a.rule_log}
    # THEN a rule whose input is missing is "not_checked", with the flag that records it
    want = {}
    if cuda_calls and "CUDA_GPU_MEMORY_USAGE_EVENTS" not in tables:
        want["memory-growth"] = "--cuda-memory-usage=true"
    if kernels and "GPU_METRICS" not in tables:
        want |= {r: "--gpu-metrics-devices" for r in METRIC_RULES}
    if managed and not tables & {"CUDA_UM_GPU_PAGE_FAULT_EVENTS", "CUDA_UM_CPU_PAGE_FAULT_EVENTS"}:
        want["unified-memory-faults"] = "--cuda-um-gpu-page-faults"
    got = {r: e for r, e in log.items() if e["status"] == "not_checked"}
    assert set(got) == set(want)
    for r, flag in want.items():
        assert got[r]["reason"].startswith("the trace lacks ") and flag in got[r]["reason"]
    for r, e in log.items():
        assert e["status"] in {"fired", "passed", "not_checked", "disabled"}
        if r not in want:
            assert "reason" not in e
    # the JSON's rules and the HTML's rules list say the same
    rules = {r["rule"]: r for r in json.loads(a.to_json())["rules"]}
    assert {r for r, e in rules.items() if e["status"] == "not_checked"} == set(want)
    html = a.to_html()
    for r in want:
        assert f"<code>{r}</code>: not checked (the trace lacks " in html


def test_the_plain_ladder_lacks_memory_events_and_gpu_metrics(fixture_dir, analysis):
    """Before: every rule of ladder_baseline was "passed" or "fired"; its export has neither table."""
    tables = _tables(fixture_dir, "ladder_baseline")
    assert "CUDA_GPU_MEMORY_USAGE_EVENTS" not in tables and "GPU_METRICS" not in tables
    log = {r["rule"]: r["status"] for r in analysis("ladder_baseline").rule_log}
    assert log["memory-growth"] == "not_checked"
    assert all(log[r] == "not_checked" for r in METRIC_RULES)
