"""GPU metrics (trace/metrics.py, analyses/metrics.py, the metric rules, outputs): truth by SQL.

Fixtures: ``waits_phases`` (H200, --gpu-metrics-devices=0 at 10 kHz; memory-bound, tensor-bound and
launch-bound NVTX phases) and ``metrics_mix`` (H200, 10 kHz; per ``step``: h2d_copy, d2h_copy,
fp32_matmul, bf16_matmul, elementwise, tiny_kernels). Every expected mean, count and interval below
is computed here from the export's own tables; a sample at ``t`` counts for an interval when its
period ``[t, t + P)`` lies inside it (P: the median spacing of the source's timestamps, by SQL).
"""

from __future__ import annotations

import functools
import json
import os
import sqlite3
from pathlib import Path

import numpy as np
import pytest
import sqltruth
from conftest import ROOT

from tests.conftest import FIXTURE_NAMES

METRIC_FIXTURES = [n for n in ("waits_phases", "metrics_mix") if n in FIXTURE_NAMES]
NAMES = {"gr_active": "GR Active [Throughput %]", "sm_active": "SMs Active [Throughput %]",
         "tensor_active": "Tensor Active [Throughput %]", "dram_read": "DRAM Read Bandwidth [Throughput %]",
         "dram_write": "DRAM Write Bandwidth [Throughput %]", "pcie_rx": "PCIe RX Throughput [Throughput %]",
         "pcie_tx": "PCIe TX Throughput [Throughput %]"}


def _union_of(s, e) -> list[tuple[int, int]]:
    """The union of the [s, e) intervals given as two columns (``sqltruth.union``)."""
    return sqltruth.union(zip(s, e))


def _con(fixture_dir: Path, name: str) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{fixture_dir / f'{name}.sqlite'}?mode=ro", uri=True)


class Truth:
    """One metric source of an export, by SQL: per metric, (timestamps, values) sorted."""

    def __init__(self, con: sqlite3.Connection) -> None:
        (self.type_id,) = con.execute("SELECT DISTINCT typeId FROM GPU_METRICS").fetchone()
        ids = {n: m for m, n in con.execute("SELECT metricId, metricName FROM TARGET_INFO_GPU_METRICS WHERE typeId = ?",
                                            (self.type_id,))}
        self.series = {}
        for short, name in NAMES.items():
            rows = np.array(con.execute("SELECT timestamp, value FROM GPU_METRICS WHERE typeId = ? AND metricId = ? "
                                        "ORDER BY timestamp", (self.type_id, ids[name])).fetchall(), dtype=np.int64)
            self.series[short] = (rows[:, 0], rows[:, 1].astype(np.float64))
        ts = np.array([t for (t,) in con.execute("SELECT DISTINCT timestamp FROM GPU_METRICS WHERE typeId = ? "
                                                 "ORDER BY timestamp", (self.type_id,))], dtype=np.int64)
        self.period = int(np.median(np.diff(ts)))

    def _where(self, short: str, s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, list[tuple[int, int]]]:
        """Per sample, the merged interval its period lies inside (-1: none), and the intervals. The
        intervals are disjoint and sorted, so the only one that can hold a sample at ``t`` is the last
        one starting at or before ``t``."""
        t, _ = self.series[short]
        merged = _union_of(s, e)
        a = np.array([x for x, _ in merged], dtype=np.int64)
        b = np.array([y for _, y in merged], dtype=np.int64)
        i = np.searchsorted(a, t, side="right") - 1
        ok = (i >= 0) & (t + self.period <= b[np.maximum(i, 0)]) if len(a) else np.zeros(len(t), dtype=bool)
        return np.where(ok, i, -1), merged

    def inside(self, short: str, s: np.ndarray, e: np.ndarray) -> np.ndarray:
        """The values of the samples whose period lies inside one of the merged intervals."""
        where, _ = self._where(short, s, e)
        return self.series[short][1][where >= 0]

    def measured(self, short: str, s: np.ndarray, e: np.ndarray) -> list[tuple[int, int]]:
        """The merged intervals that hold at least one sample's period."""
        where, merged = self._where(short, s, e)
        held = set(np.unique(where[where >= 0]).tolist())
        return [m for j, m in enumerate(merged) if j in held]


@functools.lru_cache(maxsize=None)
def _truth_of(path: str) -> Truth:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return Truth(con)
    finally:
        con.close()


def truth_of(fixture_dir: Path, name: str) -> Truth:
    """``Truth`` of a fixture's export, read once per run (1.2-1.7 s of SQL each; five tests read it)."""
    return _truth_of(str(fixture_dir / f"{name}.sqlite"))


def _ranges(con: sqlite3.Connection) -> dict[str, list[tuple[int, int, int]]]:
    """User push/pop ranges by name: (start, end, globalTid)."""
    out: dict[str, list[tuple[int, int, int]]] = {}
    for name, s, e, tid in con.execute("""SELECT coalesce(n.text, s.value), n.start, n."end", n.globalTid
                                          FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
                                          WHERE n.eventType = 59 AND n."end" IS NOT NULL"""):
        out.setdefault(name, []).append((s, e, tid))
    return out


def _gpu_span(con: sqlite3.Connection, s: int, e: int, tid: int) -> tuple[int, int] | None:
    """First start and last end of the GPU ops launched by calls on ``tid`` inside [s, e]."""
    lo, hi = None, None
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
        try:
            a, b = con.execute(f"""SELECT min(k.start), max(k."end") FROM {table} k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
                                   ON r.correlationId = k.correlationId WHERE r.globalTid = ? AND r.start >= ?
                                   AND r.start <= ?""", (tid, s, e)).fetchone()
        except sqlite3.OperationalError:  # no such table in this export
            continue
        if a is not None:
            lo = a if lo is None else min(lo, a)
            hi = b if hi is None else max(hi, b)
    return None if lo is None else (lo, hi)


@pytest.mark.parametrize("name", METRIC_FIXTURES)
def test_reader_keeps_every_sample_of_the_wanted_metrics(name, load, fixture_dir):
    """Per metric: the sample count and mean of the whole table by SQL; the source mapped to GPU 0,
    the only GPU with kernels, by its typeId (the fixtures were recorded with --gpu-metrics-devices=0)."""
    con = _con(fixture_dir, name)
    truth = truth_of(fixture_dir, name)
    m = load(name).gpu_metrics
    assert len(m.sources) == 1
    src = m.sources[0]
    assert src.type_id == truth.type_id and src.device_id == 0 and src.mapped_by == "typeId low byte"
    assert {d for (d,) in con.execute("SELECT DISTINCT deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL")} == {0}
    assert src.period_ns == truth.period
    (n_rows,) = con.execute("SELECT count(*) FROM GPU_METRICS").fetchone()
    assert m.rows == n_rows
    for short, (t, v) in truth.series.items():
        got = src.values[short]
        assert int((~np.isnan(got)).sum()) == len(v)
        assert float(np.nanmean(got)) == pytest.approx(float(v.mean()), rel=1e-6)
        assert np.array_equal(src.ts[~np.isnan(got)], t)


def test_sqlite_path_reads_the_same(fixture_dir, monkeypatch):
    """The direct reader and SQLite (``NSYSAN_READER=sqlite``) give identical arrays."""
    from nsysan.trace.metrics import read_metrics

    name = METRIC_FIXTURES[0] if METRIC_FIXTURES else pytest.skip("no metric fixture")
    path = fixture_dir / f"{name}.sqlite"
    a = read_metrics(path)
    monkeypatch.setenv("NSYSAN_READER", "sqlite")
    b = read_metrics(path)
    assert a.kept == b.kept > 0 and np.array_equal(a.sources[0].ts, b.sources[0].ts)
    for k, v in a.sources[0].values.items():
        assert np.array_equal(v, b.sources[0].values[k], equal_nan=True)


def test_row_limit_is_a_note_not_a_failure(fixture_dir):
    from nsysan.trace.db import Database
    from nsysan.trace.metrics import read

    name = METRIC_FIXTURES[0] if METRIC_FIXTURES else pytest.skip("no metric fixture")
    with Database(fixture_dir / f"{name}.sqlite") as db:
        m = read(db, max_rows=1000)
    assert not m.sources and "more than 1,000 rows" in m.note


@pytest.mark.parametrize("name", METRIC_FIXTURES)
def test_means_per_range_from_sql(name, analysis, fixture_dir):
    """Per user range: instances by SQL, each spanning its GPU work (launch calls on its thread inside
    it, joined to their ops by correlation id); samples and means over the merged spans."""
    con = _con(fixture_dir, name)
    truth = truth_of(fixture_dir, name)
    a = analysis(name)
    got = a.gpu_metrics.by_range.set_index("range")
    ranges = _ranges(con)
    assert set(ranges) <= set(got.index)
    for rng, inst in ranges.items():
        spans = [_gpu_span(con, s, e, tid) or (s, e) for s, e, tid in inst]
        s, e = np.array([x[0] for x in spans]), np.array([x[1] for x in spans])
        assert int(got.loc[rng, "instances"]) == len(inst)
        for short in NAMES:
            vals = truth.inside(short, s, e)
            assert int(got.loc[rng, "samples"]) == len(vals)
            assert got.loc[rng, short] == pytest.approx(vals.mean(), abs=0.006)
        dur = sum(b - a for a, b in _union_of(s, e))
        assert got.loc[rng, "coverage"] == pytest.approx(min(1, len(vals) * truth.period / dur), abs=0.001)


@pytest.mark.parametrize("name,range_name", [("waits_phases", "tensor_bound"), ("metrics_mix", "step")])
def test_means_per_iteration_from_sql(name, range_name, analysis, fixture_dir):
    """Per iteration (the instances of the iteration range): start to completion (the later of the
    range's end and its GPU work's end, by SQL)."""
    if name not in METRIC_FIXTURES:
        pytest.skip("fixture missing")
    con = _con(fixture_dir, name)
    truth = truth_of(fixture_dir, name)
    a = analysis(name)
    assert a.iterations.range_name == range_name
    it = a.gpu_metrics.by_iteration.sort_values("start_ns")
    inst = sorted(_ranges(con)[range_name])
    assert len(it) == len(inst)
    for (s, e, tid), row in zip(inst, it.to_dict("records")):
        span = _gpu_span(con, s, e, tid)
        end = max(e, span[1]) if span else e
        assert (row["start_ns"], row["end_ns"]) == (s, end)
        for short in NAMES:
            vals = truth.inside(short, np.array([s]), np.array([end]))
            assert row["samples"] == len(vals)
            assert row[short] == pytest.approx(vals.mean(), abs=0.006)


@pytest.mark.parametrize("name", METRIC_FIXTURES)
def test_means_per_kernel_group_from_sql(name, analysis, fixture_dir):
    """Per kernel name (the top ones) and for the host-to-device copies, in the steady window: the
    ops by SQL, clipped to the window and merged; samples and means; the measured part."""
    con = _con(fixture_dir, name)
    truth = truth_of(fixture_dir, name)
    a = analysis(name)
    lo, hi = a.steady.start_ns, a.steady.end_ns
    k = a.gpu_metrics.by_kernel
    rows = k.loc[k["kind"] == "kernel"]
    assert len(rows) >= 3
    checked = 0
    for rec in rows.to_dict("records"):
        ops = con.execute("""SELECT k.start, k."end" FROM CUPTI_ACTIVITY_KIND_KERNEL k
                             JOIN StringIds s ON s.id = coalesce(k.demangledName, k.shortName)
                             WHERE s.value = ? AND k.deviceId = 0 AND k.start < ? AND k."end" > ?""",
                          (rec["group"], hi, lo)).fetchall()
        if not ops:  # the export's name column differs (short names): compared through the copies below
            continue
        s = np.array([max(x[0], lo) for x in ops])
        e = np.array([min(x[1], hi) for x in ops])
        assert rec["ops"] == len(ops)
        assert rec["busy_ns"] == sum(b - a for a, b in _union_of(s, e))
        vals = truth.inside("dram_read", s, e)
        assert rec["samples"] == len(vals)
        if len(vals):
            for short in NAMES:
                assert rec[short] == pytest.approx(truth.inside(short, s, e).mean(), abs=0.006)
        measured = truth.measured("dram_read", s, e)
        assert rec["measured_ns"] == sum(y - x for x, y in measured)
        checked += 1
    assert checked >= 3
    copies = con.execute("""SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 1 AND deviceId = 0
                            AND start < ? AND "end" > ?""", (hi, lo)).fetchall() if name == "metrics_mix" else []
    if copies:
        rec = k.loc[k["group"] == "memcpy HtoD"].iloc[0]
        s, e = np.array([max(x[0], lo) for x in copies]), np.array([min(x[1], hi) for x in copies])
        vals = truth.inside("pcie_rx", s, e)
        assert int(rec["samples"]) == len(vals) and rec["pcie_rx"] == pytest.approx(vals.mean(), abs=0.006)


def test_sample_describes_the_period_after_its_timestamp(load, fixture_dir):
    """The sampling semantics the means rely on: at each GEMM's start (waits_phases, kernels of 1.4 ms
    after an idle gap), the sample taken in the 100 us before the start reads less tensor activity
    than the one just after it, which reads near the GEMM's level."""
    if "waits_phases" not in METRIC_FIXTURES:
        pytest.skip("fixture missing")
    con = _con(fixture_dir, "waits_phases")
    truth = truth_of(fixture_dir, "waits_phases")
    t, v = truth.series["tensor_active"]
    starts = [s for (s,) in con.execute("""SELECT k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s
                                           ON s.id = k.shortName WHERE s.value LIKE 'nvjet%' ORDER BY k.start""")]
    before, after = [], []
    for s in starts:
        i = int(np.searchsorted(t, s))
        if 0 < i < len(t) and s - t[i - 1] < truth.period:
            before.append(v[i - 1])
            after.append(v[i])
    assert len(before) >= 100
    assert np.median(after) >= 80 and np.median(before) < np.median(after) - 30


def test_verdicts_on_the_phases(analysis):
    if "metrics_mix" not in METRIC_FIXTURES or "waits_phases" not in METRIC_FIXTURES:
        pytest.skip("fixtures missing")
    mix = analysis("metrics_mix").gpu_metrics
    rg = mix.by_range.set_index("range")["verdict"]
    assert rg["h2d_copy"] == "PCIe-bound" and rg["d2h_copy"] == "PCIe-bound"
    assert rg["bf16_matmul"] == "tensor-bound" and rg["elementwise"] == "memory-bound"
    assert rg["tiny_kernels"].startswith("SMs mostly idle")
    k = mix.by_kernel.set_index("group")["verdict"]
    fp32 = [g for g in k.index if "f32f32" in g]
    assert len(fp32) == 1 and k[fp32[0]] == "tensor cores idle"
    wp = analysis("waits_phases").gpu_metrics.by_range.set_index("range")["verdict"]
    assert wp["memory_bound"] == "memory-bound" and wp["tensor_bound"] == "tensor-bound"
    assert wp["launch_bound"].startswith("SMs mostly idle")


def _kernel_wall(con, like: str, lo: int, hi: int) -> int:
    ops = con.execute("""SELECT k.start, k."end" FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName
                         WHERE s.value LIKE ? AND k.start < ? AND k."end" > ?""", (like, hi, lo)).fetchall()
    return sum(b - a for a, b in _union_of([max(x[0], lo) for x in ops], [min(x[1], hi) for x in ops]))


def test_metric_rules_on_metrics_mix(analysis, fixture_dir):
    """tensor-cores-idle: half the steady wall time of the FP32 GEMM (by SQL); fp32-compute on the same
    kernels keeps only what is left, so the two never exceed that time; memory-bound counts a quarter
    of the FP32 elementwise kernels' measured time; pcie-bound-copies has no estimate; sms-mostly-idle
    names the tiny_kernels range."""
    if "metrics_mix" not in METRIC_FIXTURES:
        pytest.skip("fixture missing")
    con = _con(fixture_dir, "metrics_mix")
    a = analysis("metrics_mix")
    by = {f.rule: f for f in a.findings}
    assert {"tensor-cores-idle", "memory-bound", "pcie-bound-copies", "sms-mostly-idle"} <= set(by)
    lo, hi = a.steady.start_ns, a.steady.end_ns
    gemm = _kernel_wall(con, "%xmma_gemm_f32f32%", lo, hi)
    assert gemm > 0
    assert abs(by["tensor-cores-idle"].impact_ns - gemm // 2) <= 1
    assert by["tensor-cores-idle"].impact_ns + by["fp32-compute"].impact_ns <= gemm
    assert "tensor-cores-idle" in by["fp32-compute"].window.get("overlaps", [])
    mb = by["memory-bound"]
    measured = sum(r["busy_ns"] for r in mb.evidence)
    assert 0 < mb.impact_ns <= measured // 4 + 1
    assert by["pcie-bound-copies"].impact_ns == 0 and "PCIe RX at" in by["pcie-bound-copies"].message
    assert "range 'tiny_kernels'" in by["sms-mostly-idle"].message
    assert sum(f.impact_ns for f in a.findings) <= a.steady.dur_ns


def test_traces_without_metrics_are_unchanged(analysis):
    """No GPU_METRICS: nothing read, no metric rule fires, the JSON block is the one it always was."""
    a = analysis("train_inline")
    assert a.trace.gpu_metrics is None and a.gpu_metrics is None
    fired = {r["rule"] for r in a.rule_log if r["status"] == "fired"}
    assert not fired & {"tensor-cores-idle", "memory-bound", "pcie-bound-copies", "sms-mostly-idle"}
    d = json.loads(a.to_json())
    assert d["gpu_metrics"] == {"by_range": [], "note": "no GPU metrics in this trace: record with nsys profile "
                                                      "--gpu-metrics-devices=all"}
    tl = a.to_html().split('id="tl-data">')[1].split("</script>")[0]
    assert '"metrics"' not in tl


def test_device_mapping_never_assumes_an_id():
    import pandas as pd

    from nsysan.trace.metrics import map_device

    two = pd.DataFrame({"device_id": [0, 1], "name": ["A", "B"], "bus_location": ["0000:00:06.0", "0000:00:07.0"]})
    assert map_device(5, "GPU Metrics [0000:00:07.0]", two) == (1, "type name (PCI bus)")
    assert map_device(5, "GPU 1 - something", two) == (1, "type name")
    assert map_device((1 << 48) | (1 << 32) | 1, "", two) == (1, "typeId low byte")
    assert map_device((1 << 48) | 7, "", two) == (None, "")  # the low byte names no GPU of the trace
    one = two.iloc[[1]]
    assert map_device((1 << 48) | 7, "", one) == (1, "only GPU")


def test_json_and_report_carry_the_metrics(analysis):
    name = METRIC_FIXTURES[-1] if METRIC_FIXTURES else pytest.skip("no metric fixture")
    a = analysis(name)
    d = json.loads(a.to_json())["gpu_metrics"]
    assert d["devices"][0]["device_id"] == 0 and d["devices"][0]["period_ns"] > 0
    assert len(d["by_range"]) == len(a.gpu_metrics.by_range) and len(d["by_iteration"]) == len(a.gpu_metrics.by_iteration)
    assert {r["group"] for r in d["by_kernel"]} == set(a.gpu_metrics.by_kernel["group"])
    html = a.to_html()
    assert 'id="gpu-metrics"' in html and "by NVTX range" in html and "by iteration" in html
    from nsysan.report.jsonout import csv_tables, to_csv

    tabs = csv_tables(a)
    assert to_csv(tabs["gpu_metrics_by_range"]).count("\n") == len(a.gpu_metrics.by_range) + 1
    assert len(tabs["gpu_metrics_by_iteration"]) == len(a.gpu_metrics.by_iteration)
    assert "gpu_metrics_by_kernel" not in csv_tables(analysis("train_inline"))
    tl = json.loads(html.split('id="tl-data">')[1].split("</script>")[0])
    lane = tl["metrics"][0]
    assert lane["n"] == len(a.gpu_metrics.sources[0].ts) and [s["key"] for s in lane["series"]] == \
        ["sm_active", "tensor_active", "dram"]


def test_diff_shows_metric_deltas_per_range(analysis):
    """diff: the steady rows of both sides and every range both have, with each side's own means."""
    from nsysan import compare

    if len(METRIC_FIXTURES) < 2:
        pytest.skip("fixtures missing")
    wp = json.loads(analysis("waits_phases").to_json())
    mix = json.loads(analysis("metrics_mix").to_json())
    d = compare.diff(wp, mix).to_dict()
    (row,) = d["gpu_metrics"]  # no range name in common: the steady window only
    sb = next(r for r in wp["gpu_metrics"]["by_range"] if r["range"].startswith("["))
    sn = next(r for r in mix["gpu_metrics"]["by_range"] if r["range"].startswith("["))
    assert row["range"] == "[steady state]" and row["base_samples"] == sb["samples"] and row["new_samples"] == sn["samples"]
    for k in ("sm_active", "tensor_active", "dram_read", "pcie_rx"):
        assert (row[k]["base"], row[k]["new"]) == (sb[k], sn[k])
        assert row[k]["delta"] == pytest.approx(sn[k] - sb[k], abs=0.01)
    same = compare.diff(wp, wp).to_dict()["gpu_metrics"]
    assert {r["range"] for r in same} == {r["range"] if not r["range"].startswith("[") else "[steady state]"
                                          for r in wp["gpu_metrics"]["by_range"]}
    assert all(v["delta"] == 0 for r in same for k, v in r.items() if isinstance(v, dict) and v["delta"] is not None)
    plain = json.loads(analysis("train_inline").to_json())
    assert "gpu_metrics" not in compare.diff(plain, wp).to_dict()


def test_two_gpus_each_source_on_its_device(fixture_dir, tmp_path):
    """A second GPU and a second metric source built into a copy of metrics_mix (typeId low byte 1, each
    value v stored as 100 - v, one of them as a REAL): each source lands on its own device, the means
    of each equal SQL on that source, and the REAL sends the reader down the SQLite path unharmed."""
    import shutil

    import nsysan
    from nsysan.analysis import analyze
    from tests.factories import apply_sql

    if "metrics_mix" not in METRIC_FIXTURES:
        pytest.skip("fixture missing")
    p = tmp_path / "two.sqlite"
    shutil.copy(fixture_dir / "metrics_mix.sqlite", p)
    con = _con(fixture_dir, "metrics_mix")
    (t0,) = con.execute("SELECT DISTINCT typeId FROM GPU_METRICS").fetchone()
    t1 = t0 | 1
    cols = [r[1] for r in con.execute("PRAGMA table_info(TARGET_INFO_GPU)")]
    sel = ", ".join("1" if c in ("id", "cuDevice") else "'0000:00:09.0'" if c == "busLocation" else f'"{c}"' for c in cols)
    apply_sql(p, f"INSERT INTO TARGET_INFO_GPU SELECT {sel} FROM TARGET_INFO_GPU WHERE id = 0",
              f"INSERT INTO TARGET_INFO_GPU_METRICS SELECT {t1}, sourceId, typeName, metricId, metricName "
              f"FROM TARGET_INFO_GPU_METRICS WHERE typeId = {t0}",
              f"INSERT INTO GPU_METRICS SELECT rawTimestamp, timestamp, {t1}, metricId, 100 - value FROM GPU_METRICS "
              f"WHERE typeId = {t0}",
              f"UPDATE GPU_METRICS SET value = 50.0 WHERE rowid = (SELECT max(rowid) FROM GPU_METRICS)")
    a = analyze(nsysan.open_trace(p), rules=False)
    m = a.trace.gpu_metrics
    assert [(s.device_id, s.mapped_by) for s in m.sources] == [(0, "typeId low byte"), (1, "typeId low byte")]
    two = sqlite3.connect(f"file:{p}?mode=ro", uri=True)
    ids = {n: mid for mid, n in two.execute("SELECT metricId, metricName FROM TARGET_INFO_GPU_METRICS WHERE typeId = ?",
                                            (t0,))}
    got = a.gpu_metrics.by_range
    period = m.sources[0].period_ns
    for dev, typ in ((0, t0), (1, t1)):
        row = got.loc[(got["device_id"] == dev) & (got["range"] == "elementwise")].iloc[0]
        inst = [(s, e, tid) for s, e, tid in _ranges(two)["elementwise"]]
        spans = [_gpu_span(two, s, e, tid) for s, e, tid in inst]
        for short in ("sm_active", "dram_read"):
            vals = [v for a_, b_ in _union_of([x[0] for x in spans], [x[1] for x in spans]) for (v,) in two.execute(
                "SELECT value FROM GPU_METRICS WHERE typeId = ? AND metricId = ? AND timestamp >= ? AND timestamp + ? <= ?",
                (typ, ids[NAMES[short]], a_, period, b_))]
            assert row["samples"] == len(vals) and row[short] == pytest.approx(sum(vals) / len(vals), abs=0.006)
    html = a.to_html()
    assert "GPU 0: by NVTX range" in html and "GPU 1: by NVTX range" in html


def test_compare_ladder_carries_steady_means(analysis):
    """compare: each trace's steady-window means (as its own JSON has them); a trace without metrics
    keeps the row it always had."""
    from nsysan.compare.ladder import ladder

    if len(METRIC_FIXTURES) < 2:
        pytest.skip("fixtures missing")
    items = [(n, json.loads(analysis(n).to_json())) for n in ("waits_phases", "metrics_mix", "train_inline")]
    lad = ladder(items)
    for (name, d), row in zip(items, lad["rows"]):
        steady = [r for r in (d["gpu_metrics"]["by_range"]) if r["range"].startswith("[")]
        if not steady:
            assert "gpu_metrics" not in row
            continue
        got = row["gpu_metrics"]["GPU 0"]
        assert (got["sm_active"], got["tensor_active"], got["samples"]) == \
            (steady[0]["sm_active"], steady[0]["tensor_active"], steady[0]["samples"])
        assert got["dram"] == pytest.approx(steady[0]["dram_read"] + steady[0]["dram_write"], abs=0.01)


def test_damaged_metric_tables_are_a_warning(fixture_dir, tmp_path):
    """A text where a metric value belongs, or no metric names: the trace still loads and analyses,
    without GPU metrics, and says why."""
    import shutil

    import nsysan
    from nsysan.analysis import analyze
    from tests.factories import apply_sql

    if "metrics_mix" not in METRIC_FIXTURES:
        pytest.skip("fixture missing")
    p = tmp_path / "bad.sqlite"
    shutil.copy(fixture_dir / "metrics_mix.sqlite", p)
    apply_sql(p, "UPDATE GPU_METRICS SET value = 'abc' WHERE rowid = 5")
    t = nsysan.open_trace(p)
    assert not t.gpu_metrics.sources
    assert any(w.startswith("GPU metrics: the GPU metric tables could not be read") for w in t.meta.warnings)
    a = analyze(t)
    assert a.gpu_metrics is None and len(a.kernels) > 0
    apply_sql(p, "DELETE FROM TARGET_INFO_GPU_METRICS")
    t = nsysan.open_trace(p)
    assert not t.gpu_metrics.sources and any("none of the GPU metrics nsysan reads" in w for w in t.meta.warnings)


def test_hostile_saved_metrics_do_not_break_diff_or_compare(analysis):
    """Saved analyses are untrusted: text, NaN and lists where metric means belong are shown as
    missing, never an exception."""
    from nsysan import compare
    from nsysan.compare.ladder import ladder

    name = METRIC_FIXTURES[-1] if METRIC_FIXTURES else pytest.skip("no metric fixture")
    good = json.loads(analysis(name).to_json())
    bad = json.loads(json.dumps(good))
    for r in bad["gpu_metrics"]["by_range"]:
        r["sm_active"], r["dram_read"], r["tensor_active"] = "<script>", [1], float("nan")
    rows = compare.diff(good, bad).to_dict()["gpu_metrics"]
    assert rows and all(r["sm_active"]["new"] is None and r["sm_active"]["delta"] is None for r in rows)
    lad = ladder([("a", good), ("b", bad)])
    m = next(iter(lad["rows"][1]["gpu_metrics"].values()))
    assert m["sm_active"] is None and m["dram"] is None and m["tensor_active"] is None
    bad["gpu_metrics"] = {"devices": [1], "by_range": "x"}
    assert "gpu_metrics" not in compare.diff(good, bad).to_dict() and "gpu_metrics" not in ladder(
        [("a", bad), ("b", bad)])["rows"][0]


# the 170 MB recording (not committed): NSYSAN_FULL_DIAG=PATH, else ../bigtraces/ beside the checkout
BIG = Path(os.environ.get("NSYSAN_FULL_DIAG") or ROOT.parent / "bigtraces" / "full_diag.sqlite")


@pytest.mark.skipif(not BIG.exists(), reason="the big recorded export is not on this machine")
def test_reader_on_a_big_recorded_export():
    """full_diag (170 MB, every input at once, 2.58M metric rows): per metric, the count and mean of its
    samples by one SQL aggregate; the source mapped to the trace's only GPU."""
    import nsysan

    t = nsysan.open_trace(BIG)
    m = t.gpu_metrics
    (src,) = m.sources
    con = sqlite3.connect(f"file:{BIG}?mode=ro", uri=True)
    names = {mid: n for mid, n in con.execute("SELECT metricId, metricName FROM TARGET_INFO_GPU_METRICS WHERE typeId = ?",
                                              (src.type_id,))}
    want = {names[mid]: (n, avg) for mid, n, avg in con.execute(
        "SELECT metricId, count(*), avg(value) FROM GPU_METRICS WHERE typeId = ? GROUP BY metricId", (src.type_id,))}
    assert m.rows == con.execute("SELECT count(*) FROM GPU_METRICS").fetchone()[0]
    for short, name in src.names.items():
        v = src.values[short]
        assert int((~np.isnan(v)).sum()) == want[name][0]
        assert float(np.nanmean(v.astype(np.float64))) == pytest.approx(want[name][1], rel=1e-6)
    assert src.device_id == int(t.gpus["device_id"].iloc[0]) and len(t.gpus) == 1


def test_cli_diff_and_compare_show_the_metrics(fixture_dir, tmp_path, capsys):
    """The terminal, HTML and JSON of ``nsysan diff`` and ``nsysan compare`` on two metric traces."""
    from nsysan.cli import main

    if len(METRIC_FIXTURES) < 2:
        pytest.skip("fixtures missing")
    a, b = (str(fixture_dir / f"{n}.sqlite") for n in ("waits_phases", "metrics_mix"))
    assert main(["diff", a, b, "--json", str(tmp_path / "d.json"), "--html", str(tmp_path / "d.html")]) == 0
    out = capsys.readouterr().out
    assert "GPU metrics (mean % of peak): base -> new" in out and "GPU 0 [steady state]" in out
    d = json.loads((tmp_path / "d.json").read_text())
    assert d["gpu_metrics"][0]["range"] == "[steady state]"
    assert 'id="gpu-metrics"' in (tmp_path / "d.html").read_text()
    assert main(["compare", a, b, "--json", str(tmp_path / "c.json"), "--html", str(tmp_path / "c.html")]) == 0
    assert "SMs / tensor / DRAM" in capsys.readouterr().out
    rows = json.loads((tmp_path / "c.json").read_text())["rows"]
    assert all("GPU 0" in r["gpu_metrics"] for r in rows)
    assert "GPU metrics, steady state" in (tmp_path / "c.html").read_text()
