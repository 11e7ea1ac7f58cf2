"""diff / compare / the regression gate, on real ladder traces and hand-made distributions."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from nsysan import compare
from nsysan.cli import main
from nsysan.report.jsonout import analysis_to_dict


@pytest.fixture(scope="module")
def dicts(analysis):
    return {n: analysis_to_dict(analysis(n)) for n in ("ladder_baseline", "ladder_reuse", "ladder_pinned")}


def test_self_diff_is_all_zero(dicts):
    d = compare.diff(dicts["ladder_baseline"], dicts["ladder_baseline"])
    present = [m for m in d.metrics if m["base"] is not None]
    assert len(present) >= 10
    assert all(m["delta"] == 0 and m["verdict"] == "same" for m in present)
    assert all(r["delta_total_ns"] == 0 and r["status"] == "both" for r in d.kernels + d.nvtx)
    assert d.findings["resolved"] == [] and d.findings["new"] == []
    assert not d.noise["significant"] and d.noise["p_value"] == pytest.approx(1.0, abs=0.05)
    g = compare.gate(d, "iter_p50_ns", 0.05)
    assert not g["failed"] and g["change"] == 0


def test_consecutive_ladder_steps(dicts):
    """reuse fixes the per-batch allocations: alloc-in-loop is resolved, the timed region is faster."""
    d = compare.diff(dicts["ladder_baseline"], dicts["ladder_reuse"])
    assert "alloc-in-loop" in [f["rule"] for f in d.findings["resolved"]]
    m = {r["metric"]: r for r in d.metrics}
    assert m["timed_region_ns"]["verdict"] == "better"
    assert m["timed_region_ns"]["ratio"] == pytest.approx(56.05 / 61.78, rel=0.01)
    # pinned memory: host-to-device throughput goes up several-fold
    d2 = compare.diff(dicts["ladder_reuse"], dicts["ladder_pinned"])
    m2 = {r["metric"]: r for r in d2.metrics}
    assert m2["htod_throughput_bytes_per_s"]["ratio"] > 3
    assert "pageable-memcpy" in [f["rule"] for f in d2.findings["resolved"]]


def test_gate_fails_on_a_real_regression_and_names_it(fixture_dir, tmp_path, capsys):
    base, new = fixture_dir / "ladder_pinned.sqlite", fixture_dir / "ladder_baseline.sqlite"
    out = tmp_path / "d.json"
    rc = main(["diff", str(base), str(new), "--fail-on-regression", "5%", "--json", str(out), "-q"])
    assert rc == 11
    err = capsys.readouterr().err
    assert "Iteration time p50 (period) got " in err and "% worse" in err and "significant" in err
    d = json.loads(out.read_text())
    assert d["schema"] == "nsysan.diff/1" and d["gate"]["failed"]
    # the other way round it is an improvement
    assert main(["diff", str(new), str(base), "--fail-on-regression", "5%", "-q"]) == 0


def test_saved_json_is_a_baseline(fixture_dir, tmp_path):
    j = tmp_path / "base.json"
    assert main(["analyze", str(fixture_dir / "ladder_reuse.sqlite"), "--json", str(j), "--no-html", "-q"]) == 0
    html = tmp_path / "diff.html"
    assert main(["diff", str(j), str(fixture_dir / "ladder_reuse.sqlite"), "--fail-on-regression", "1%",
                 "--html", str(html), "-q"]) == 0
    text = html.read_text()
    assert "Headline metrics" in text and "<script>alert" not in text


def test_bad_baseline_is_a_clear_error(tmp_path, capsys):
    bad = tmp_path / "x.json"
    bad.write_text('{"schema": "something else"}')
    assert main(["diff", str(bad), str(bad)]) == 2
    assert "not an nsysan analysis" in capsys.readouterr().err
    assert main(["diff", str(bad), str(bad), "--fail-on-regression", "five"]) == 2


def _fake(latencies, rules=()):
    return {"schema": "nsysan.analysis/2", "iterations": {
        "range": "infer", "stats": {"p50_ns": float(np.median(latencies))},
        "per_iteration": [{"latency_ns": float(v), "warmup": False} for v in latencies]},
        "findings": [{"rule": r, "title": r, "impact_ns": 1} for r in rules]}


def test_within_noise_is_not_a_regression():
    rng = np.random.default_rng(7)
    base = rng.normal(10e6, 3e6, 12)
    new = rng.permutation(base) * 1.06  # 6% slower on paper, far inside the spread
    d = compare.diff(_fake(base), _fake(new))
    g = compare.gate(d, "iter_p50_ns", 0.05)
    assert g["change"] > 0.05 and not g["failed"] and "within noise" in g["message"]


def test_few_samples_decide_by_threshold_and_say_so():
    d = compare.diff(_fake([10e6, 10e6]), _fake([12e6, 12e6]))
    assert d.noise["p_value"] is None and "cannot be told from noise" in d.noise["note"]
    g = compare.gate(d, "iter_p50_ns", 0.05)
    assert g["failed"] and "no noise test possible" in g["message"]


def test_mann_whitney_reference_values():
    a, b = np.arange(10.0), np.arange(10.0) + 100
    # fully separated 10 vs 10: U = 0, z = (50 - 0.5) / sqrt(175)
    want = math.erfc((49.5 / math.sqrt(175)) / math.sqrt(2))
    assert compare.mann_whitney(a, b) == pytest.approx(want, rel=1e-9)
    assert compare.mann_whitney(a, a) == pytest.approx(1.0)
    assert compare.mann_whitney(a[:3], b) is None


def test_matching_survives_renamed_processes_threads_and_streams(load):
    """Same work under other pids, tids, thread names and stream ids: nothing changes."""
    from nsysan.analysis import analyze

    t = load("ladder_overlap")
    shift = 4242

    def moved(df):
        df = df.copy()
        for c in ("pid", "tid"):
            if c in df.columns:
                df[c] = df[c] + shift
        if "stream_id" in df.columns:
            df["stream_id"] = df["stream_id"] + 17
        if "name" in df.columns and df is not None and "global_tid" in df.columns and "start_ns" not in df.columns:
            df["name"] = "renamed-thread"
        return df

    t2 = dataclasses.replace(t, **{name: moved(df) for name, df in t.tables().items()})
    d = compare.diff(analysis_to_dict(analyze(t)), analysis_to_dict(analyze(t2)))
    assert all(m["delta"] in (0, None) for m in d.metrics)
    assert all(r["delta_total_ns"] == 0 for r in d.kernels + d.nvtx)


def test_ladder_table_matches_the_workload_timer(fixture_dir, capsys):
    names = ["ladder_baseline", "ladder_reuse", "ladder_pinned"]
    assert main(["compare", *[str(fixture_dir / f"{n}.sqlite") for n in names], "--labels", "a,b,c",
                 "--markdown", "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert "| a | 61.78 ms | - | - |" in out and "| c | 32.82 ms | 1.71x | 1.88x |" in out
    assert main(["compare", str(fixture_dir / "ladder_baseline.sqlite")]) == 2
