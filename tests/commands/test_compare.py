"""diff / compare / the regression gate, on real ladder traces and hand-made distributions."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from nsysan import compare
from nsysan.cli import main
from nsysan.compare.gate import gate
from nsysan.compare.stats import mann_whitney
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
    g = gate(d, "iter_p50_ns", 0.05)
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
    g = gate(d, "iter_p50_ns", 0.05)
    assert g["change"] > 0.05 and not g["failed"] and "within noise" in g["message"]


def test_few_samples_decide_by_threshold_and_say_so():
    d = compare.diff(_fake([10e6, 10e6]), _fake([12e6, 12e6]))
    assert d.noise["p_value"] is None and "cannot be told from noise" in d.noise["note"]
    g = gate(d, "iter_p50_ns", 0.05)
    assert g["failed"] and "no noise test possible" in g["message"]


def test_mann_whitney_reference_values():
    a, b = np.arange(10.0), np.arange(10.0) + 100
    # fully separated 10 vs 10: U = 0, z = (50 - 0.5) / sqrt(175)
    want = math.erfc((49.5 / math.sqrt(175)) / math.sqrt(2))
    assert mann_whitney(a, b) == pytest.approx(want, rel=1e-9)
    assert mann_whitney(a, a) == pytest.approx(1.0)
    assert mann_whitney(a[:3], b) is None


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


def _steady_means_by_sql(path, lo: int, hi: int) -> dict[str, float]:
    """SMs active, tensor active and DRAM read + write means over the samples whose period
    ``[t, t + P)`` lies inside ``[lo, hi)`` (P: the median spacing of the sample times), by SQL."""
    import sqlite3

    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        ts = [t for (t,) in con.execute("SELECT DISTINCT timestamp FROM GPU_METRICS ORDER BY timestamp")]
        period = int(np.median(np.diff(np.array(ts, dtype=np.int64))))
        out = {}
        for key, metric in (("sm", "SMs Active [Throughput %]"), ("tensor", "Tensor Active [Throughput %]"),
                            ("dram_read", "DRAM Read Bandwidth [Throughput %]"),
                            ("dram_write", "DRAM Write Bandwidth [Throughput %]")):
            (out[key],) = con.execute(
                "SELECT avg(g.value) FROM GPU_METRICS g JOIN TARGET_INFO_GPU_METRICS t ON t.typeId = g.typeId "
                "AND t.metricId = g.metricId WHERE t.metricName = ? AND g.timestamp >= ? AND g.timestamp + ? <= ?",
                (metric, lo, period, hi)).fetchone()
        return {"sm": out["sm"], "tensor": out["tensor"], "dram": out["dram_read"] + out["dram_write"]}
    finally:
        con.close()


def test_markdown_carries_steady_gpu_metrics(analysis, fixture_dir, capsys):
    """``compare --markdown``: SMs active, tensor active and DRAM read + write of the steady window per
    trace (means by SQL over that window's samples); blank cells for a trace without GPU metrics."""
    names = ("metrics_mix", "waits_phases", "ladder_baseline")
    if not all((fixture_dir / f"{n}.sqlite").exists() for n in names):
        pytest.skip("fixtures missing")
    assert main(["compare", *(str(fixture_dir / f"{n}.sqlite") for n in names), "--markdown"]) == 0
    lines = capsys.readouterr().out.splitlines()
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    assert head[-3:] == ["SMs active % (steady)", "tensor active % (steady)", "DRAM read+write % (steady)"]
    rows = {c[0]: c for c in ([x.strip() for x in ln.strip("|").split("|")] for ln in lines[2:])}
    assert set(rows) == set(names) and all(len(r) == len(head) for r in rows.values())
    for n in names[:2]:
        st = analysis(n).steady
        want = _steady_means_by_sql(fixture_dir / f"{n}.sqlite", int(st.start_ns), int(st.end_ns))
        got = [float(x) for x in rows[n][-3:]]
        assert got == pytest.approx([want["sm"], want["tensor"], want["dram"]], abs=0.06)
    import sqlite3

    con = sqlite3.connect(f"file:{fixture_dir / 'ladder_baseline.sqlite'}?mode=ro", uri=True)
    assert not con.execute("SELECT count(*) FROM sqlite_master WHERE name = 'GPU_METRICS'").fetchone()[0]
    con.close()
    assert rows["ladder_baseline"][-3:] == ["", "", ""]
    # without any metric trace the table keeps its old six columns
    assert main(["compare", str(fixture_dir / "ladder_baseline.sqlite"), str(fixture_dir / "ladder_reuse.sqlite"),
                 "--markdown"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "| trace | Timed region (CPU) | step speedup | total speedup | GPU busy | top finding |"
    assert "steady" not in out
