"""``--perfetto``: the timeline as Chrome trace-event JSON. Truth from SQL on the export: every kernel
(each start and duration to the nanosecond), memcpy, memset, graph launch and closed NVTX range is
there once; the file is valid JSON; X events have dur >= 0 and nest properly on every thread (checked
with a stack); overlapping ranges go on separate threads; the CLI writes the file only where planned."""

from __future__ import annotations

import hashlib
import json
import lzma
import os
import sqlite3
from collections import defaultdict
from pathlib import Path

import pytest
from conftest import FIXTURES

import factories as F
import nsysan
from nsysan.cli import main
from nsysan.report.perfetto import write_perfetto

NAMES = ["ladder_baseline", "launch_graph", "two_procs"]  # overlapping kernels; CUDA graphs; two processes
NVTX_RANGE_TYPES = (59, 60, 70, 71)  # push/pop, start/end, and their NVTXT forms


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("perfetto")
    out = {}
    for n in NAMES:
        out[n] = d / f"{n}.sqlite"
        out[n].write_bytes(lzma.decompress((FIXTURES / n / "trace.sqlite.xz").read_bytes()))
    return out


def _sql(path: Path, q: str, *args: object) -> list[tuple]:
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        return con.execute(q, args).fetchall()
    finally:
        con.close()


def _tables(path: Path) -> set[str]:
    return {r[0] for r in _sql(path, "SELECT name FROM sqlite_master WHERE type = 'table'")}


def _ns(us: float) -> int:
    return round(us * 1000)


def _check_well_formed(doc: dict) -> dict[tuple[int, int], list[dict]]:
    """Every X event has dur >= 0 and a named thread; the X events of each thread nest properly."""
    events = doc["traceEvents"]
    named = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    tracks: dict[tuple[int, int], list[dict]] = defaultdict(list)
    for e in events:
        assert e["ph"] in ("X", "M", "i", "C"), e
        if e["ph"] == "X":
            assert e["dur"] >= 0, e
            assert isinstance(e["name"], str) and isinstance(e["ts"], (int, float))
            tracks[(e["pid"], e["tid"])].append(e)
    assert set(tracks) <= named, set(tracks) - named
    for key, evs in tracks.items():
        spans = sorted(((_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])) for e in evs), key=lambda x: (x[0], -x[1]))
        stack: list[int] = []
        for s, e in spans:
            while stack and stack[-1] <= s:
                stack.pop()
            assert not stack or e <= stack[-1], f"thread {key}: [{s}, {e}) overlaps its parent ending {stack[-1]}"
            stack.append(e)
    return tracks


@pytest.mark.parametrize("name", NAMES)
def test_events_match_sql(name, traces, tmp_path):
    path = traces[name]
    a = nsysan.analyze(path)
    out = tmp_path / "t.json"
    other = write_perfetto(a, out)
    doc = json.loads(out.read_text())  # valid JSON, the JSON Object Format
    assert doc["displayTimeUnit"] == "ns" and doc["otherData"] == other and other["capped"] is False
    t0 = other["t0_ns"]
    _check_well_formed(doc)
    by_cat: dict[str, list[dict]] = defaultdict(list)
    for e in doc["traceEvents"]:
        by_cat[e.get("cat", "")].append(e)
    tables = _tables(path)
    # kernels: each one, start and duration to the nanosecond, all inside the capture
    (dur_s,) = _sql(path, 'SELECT max(duration) FROM "ANALYSIS_DETAILS"')[0]
    sql_k = sorted(_sql(path, "SELECT start, end - start FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE start >= 0 AND end <= ?",
                        dur_s))
    (n_all,) = _sql(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0]
    got_k = sorted((_ns(e["ts"]) + t0, _ns(e["dur"])) for e in by_cat["kernel"])
    assert len(got_k) == len(sql_k) == n_all > 0
    assert got_k == sql_k
    assert sum(d for _, d in got_k) == sum(d for _, d in sql_k)
    # copies, memsets, whole-graph launches: one event each
    for cat, table in (("memcpy", "CUPTI_ACTIVITY_KIND_MEMCPY"), ("memset", "CUPTI_ACTIVITY_KIND_MEMSET"),
                       ("graph", "CUPTI_ACTIVITY_KIND_GRAPH_TRACE")):
        want = sorted(_sql(path, f"SELECT start, end - start FROM {table}")) if table in tables else []
        assert sorted((_ns(e["ts"]) + t0, _ns(e["dur"])) for e in by_cat[cat]) == want, cat
    if name == "launch_graph":
        assert by_cat["graph"]
    # NVTX: every closed range once, with its own start and duration
    want_nv = sorted(_sql(path, f"SELECT start, end - start FROM NVTX_EVENTS WHERE eventType IN "
                                f"({','.join(map(str, NVTX_RANGE_TYPES))}) AND end IS NOT NULL AND end >= start"))
    assert sorted((_ns(e["ts"]) + t0, _ns(e["dur"])) for e in by_cat["nvtx"]) == want_nv and want_nv
    # NVTX ranges on the thread that recorded them (pid, tid from globalTid)
    want_thr = sorted(_sql(path, f"SELECT (globalTid >> 24) & 16777215, globalTid & 16777215 FROM NVTX_EVENTS "
                                 f"WHERE eventType IN ({','.join(map(str, NVTX_RANGE_TYPES))}) AND end IS NOT NULL "
                                 "AND end >= start"))
    assert sorted((e["pid"], e["tid"] % (1 << 24)) for e in by_cat["nvtx"]) == want_thr
    # GPU idle gaps: a cause each, on the "GPU N idle" thread; findings: one global instant each
    assert all(e["args"]["cause"] and e["tid"] == 0 for e in by_cat["gap"])
    assert len(by_cat["finding"]) == len(a.findings)
    assert all(e["ph"] == "i" and e["s"] == "g" for e in by_cat["finding"])
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    # thread names from the trace's ThreadNames
    thread_names = dict(((p, t), n) for p, t, n in _sql(
        path, "SELECT (t.globalTid >> 24) & 16777215, t.globalTid & 16777215, s.value FROM ThreadNames t "
              "JOIN StringIds s ON s.id = t.nameId")) if "ThreadNames" in tables else {}
    for e in by_cat["nvtx"][:50]:
        if (e["pid"], e["tid"]) in thread_names:
            assert names[(e["pid"], e["tid"])] == thread_names[(e["pid"], e["tid"])]


def test_two_processes_get_their_own_stream_threads(traces, tmp_path):
    path = traces["two_procs"]
    out = tmp_path / "t.json"
    write_perfetto(nsysan.analyze(path), out)
    doc = json.loads(out.read_text())
    want = {(p,) for (p,) in _sql(path, "SELECT DISTINCT (globalPid >> 24) & 16777215 FROM CUPTI_ACTIVITY_KIND_KERNEL")}
    assert len(want) == 2
    got = {(e["args"]["pid"],) for e in doc["traceEvents"] if e.get("cat") == "kernel"}
    assert got == want
    per_thread = defaultdict(set)
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel":
            per_thread[(e["pid"], e["tid"])].add(e["args"]["pid"])
    assert all(len(p) == 1 for p in per_thread.values())  # a thread holds one process's stream


def test_overlapping_ranges_go_on_separate_threads(tmp_path):
    # GIVEN start/end ranges on one thread that overlap without nesting, and API calls inside them
    nv = F.nvtx([(0, 1_000, "a"), (500, 1_500, "b"), (600, 700, "c"), (2_000, 3_000, "d")]).assign(style="StartEnd")
    api = F.api([(100, 200, "cudaLaunchKernel", 1), (550, 1_200, "cudaMemcpy", 2)])
    k = F.kernels([(300, 400, 7)])
    a = nsysan.analyze(F.make_trace(nvtx=nv, cuda_api=api, kernels=k), min_gap_us=0.01)
    out = tmp_path / "t.json"
    write_perfetto(a, out)
    doc = json.loads(out.read_text())
    # THEN all of them are there, each thread nests properly, and "b" is on an extra thread
    tracks = _check_well_formed(doc)
    nvtx = {e["name"]: e for e in doc["traceEvents"] if e.get("cat") == "nvtx"}
    assert set(nvtx) == {"a", "b", "c", "d"}
    assert nvtx["a"]["tid"] == nvtx["d"]["tid"] == F.PID != nvtx["b"]["tid"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    assert "(overlap 1)" in names[(F.PID, nvtx["b"]["tid"])]
    assert sum(len(v) for v in tracks.values() if v[0]["pid"] == F.PID) == 4 + 2


def test_hostile_names_stay_json_strings(tmp_path):
    weird = 'k<"\\\n\x00\u2028</script>'
    k = F.kernels([(0, 100, 7), (1_000, 1_100, 7)], name=weird)
    api = F.api([(-50, -40, "cudaLaunchKernel", 1), (900, 910, "cudaLaunchKernel", 2)])
    nv = F.nvtx([(0, 2_000, weird)])
    a = nsysan.analyze(F.make_trace(kernels=k, cuda_api=api, nvtx=nv), min_gap_us=0.1)
    out = tmp_path / "t.json"
    write_perfetto(a, out)
    doc = json.loads(out.read_text())
    assert sum(e["name"] == weird for e in doc["traceEvents"]) == 3
    _check_well_formed(doc)


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_cli_writes_only_where_planned(traces, tmp_path, monkeypatch):
    trace = tmp_path / "in.sqlite"
    trace.write_bytes(traces["launch_graph"].read_bytes())
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    before = _sha(trace)
    # written, and nothing else (no HTML asked for)
    assert main(["analyze", str(trace), "--no-html", "-q", "--perfetto", "tl.json"]) == 0
    assert sorted(os.listdir(work)) == ["tl.json"]
    json.loads((work / "tl.json").read_text())
    # not overwritten without -f (checked before the analysis), overwritten with it
    (work / "tl.json").write_text("keep")
    assert main(["analyze", str(trace), "--no-html", "-q", "--perfetto", "tl.json"]) == 8
    assert (work / "tl.json").read_text() == "keep"
    assert main(["analyze", str(trace), "--no-html", "-q", "-f", "--perfetto", "tl.json"]) == 0
    assert json.loads((work / "tl.json").read_text())["traceEvents"]
    # never over the input, even with -f, also through a link
    (work / "link.json").symlink_to(trace)
    for target in (str(trace), "link.json"):
        assert main(["analyze", str(trace), "--no-html", "-q", "-f", "--perfetto", target]) == 2
    assert _sha(trace) == before
    # the same path as another output, or with several traces: refused before any work
    assert main(["analyze", str(trace), "--no-html", "-q", "-f", "--json", "x.json", "--perfetto", "x.json"]) == 2
    assert main(["analyze", str(trace), str(trace), "-q", "--perfetto", "y.json"]) == 2
    assert sorted(os.listdir(work)) == ["link.json", "tl.json"]


def test_api_write_perfetto_protects_the_trace(traces, tmp_path):
    from nsysan.errors import OutputExistsError, UsageError

    a = nsysan.analyze(traces["launch_graph"])
    out = tmp_path / "t.json"
    assert a.write_perfetto(out) == out
    a.write_perfetto(out)  # its own earlier timeline is replaced
    mine = tmp_path / "mine.json"
    mine.write_text("keep")
    with pytest.raises(OutputExistsError):
        a.write_perfetto(mine)
    assert mine.read_text() == "keep"
    with pytest.raises(UsageError):
        a.write_perfetto(traces["launch_graph"], force=True)


def test_loads_in_perfetto_trace_processor(traces, tmp_path):
    """The real consumer: Perfetto's trace processor (``pip install perfetto``; it runs the
    trace_processor_shell binary, which it downloads on first use, or PERFETTO_TP_BIN)."""
    tp_mod = pytest.importorskip("perfetto.trace_processor")
    path = traces["ladder_baseline"]
    out = tmp_path / "t.json"
    write_perfetto(nsysan.analyze(path), out)
    cfg = tp_mod.TraceProcessorConfig(bin_path=os.environ.get("PERFETTO_TP_BIN"))
    try:
        tp = tp_mod.TraceProcessor(trace=str(out), config=cfg)
    except Exception as e:  # noqa: BLE001 - no binary and no network to fetch one
        pytest.skip(f"trace_processor_shell unavailable: {type(e).__name__}")
    try:
        def one(q: str) -> int:
            return int(next(iter(tp.query(q))).n)

        (n_k,) = _sql(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0]
        assert one("SELECT count(*) AS n FROM slice WHERE category = 'kernel'") == n_k
        (sum_k,) = _sql(path, "SELECT sum(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0]
        assert one("SELECT sum(dur) AS n FROM slice WHERE category = 'kernel'") == sum_k
        assert one("SELECT count(*) AS n FROM stats WHERE severity IN ('error', 'data_loss') AND value > 0 "
                   "AND name LIKE 'json%'") == 0
    finally:
        tp.close()


METRIC_NAMES = {"SMs active": "SMs Active [Throughput %]", "Tensor active": "Tensor Active [Throughput %]",
                "DRAM read": "DRAM Read Bandwidth [Throughput %]", "DRAM write": "DRAM Write Bandwidth [Throughput %]"}


def _metric_truth(path: Path) -> dict[str, tuple[list[int], list[float]]]:
    """Per counter title: the (timestamps, values) of its metric by SQL, in time order."""
    ((type_id,),) = _sql(path, "SELECT DISTINCT typeId FROM GPU_METRICS")
    out = {}
    for title, metric in METRIC_NAMES.items():
        rows = _sql(path, "SELECT g.timestamp, g.value FROM GPU_METRICS g JOIN TARGET_INFO_GPU_METRICS t "
                          "ON t.typeId = g.typeId AND t.metricId = g.metricId WHERE g.typeId = ? AND t.metricName = ? "
                          "AND g.value IS NOT NULL ORDER BY g.timestamp", type_id, metric)
        out[title] = ([r[0] for r in rows], [float(r[1]) for r in rows])
    return out


def _counter_tracks(doc: dict) -> dict[tuple[int, str], list[dict]]:
    tracks: dict[tuple[int, str], list[dict]] = defaultdict(list)
    for e in doc["traceEvents"]:
        if e["ph"] == "C":
            assert e["cat"] == "gpu_metric" and set(e["args"]) == {"%"}
            tracks[(e["pid"], e["name"])].append(e)
    return tracks


def test_gpu_metric_counters_match_sql(fixture_dir, tmp_path):
    """metrics_mix (one metric source, GPU 0): a counter track per metric in the "GPU 0" process, one
    event per sample, at the sample's own time, with the mean of its values equal to SQL's."""
    path = fixture_dir / "metrics_mix.sqlite"
    if not path.exists():
        pytest.skip("metrics_mix fixture missing")
    out = tmp_path / "t.json"
    other = write_perfetto(nsysan.analyze(path), out)
    doc = json.loads(out.read_text())
    _check_well_formed(doc)
    t0 = other["t0_ns"]
    tracks = _counter_tracks(doc)
    (dev,) = {d for (d,) in _sql(path, "SELECT DISTINCT deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL")}
    pid = (1 << 30) + dev
    assert set(tracks) == {(pid, title) for title in METRIC_NAMES}
    truth = _metric_truth(path)
    for title, (ts, vals) in truth.items():
        evs = tracks[(pid, title)]
        assert len(evs) == len(vals) > 1000
        assert [_ns(e["ts"]) + t0 for e in evs] == ts
        got = [e["args"]["%"] for e in evs]
        assert sum(got) / len(got) == pytest.approx(sum(vals) / len(vals), rel=1e-9)
        assert other["gpu_metrics"]["tracks"][f"GPU {dev} {title}"] == {"samples": len(vals), "events": len(vals),
                                                                         "bucket": 1}
    assert other["counts"]["gpu_metric"] == sum(len(v) for _, v in truth.values())
    # the kernels are still there, each one to the nanosecond (the origin moved to the first sample)
    sql_k = sorted(_sql(path, "SELECT start, end - start FROM CUPTI_ACTIVITY_KIND_KERNEL"))
    assert sorted((_ns(e["ts"]) + t0, _ns(e["dur"])) for e in doc["traceEvents"] if e.get("cat") == "kernel") == sql_k
    assert t0 == min(t0, sql_k[0][0], min(min(t) for t, _ in truth.values()))


def test_gpu_metric_counters_downsampled_in_buckets(fixture_dir, tmp_path, monkeypatch):
    """Over the cap, each event is the mean of ``bucket`` consecutive samples (by SQL) at the first
    one's time; the number of events is the number of buckets."""
    from nsysan.report import perfetto

    path = fixture_dir / "metrics_mix.sqlite"
    if not path.exists():
        pytest.skip("metrics_mix fixture missing")
    cap = 1000
    monkeypatch.setattr(perfetto, "MAX_COUNTER_SAMPLES", cap)
    out = tmp_path / "t.json"
    other = write_perfetto(nsysan.analyze(path), out)
    doc = json.loads(out.read_text())
    t0 = other["t0_ns"]
    tracks = _counter_tracks(doc)
    for title, (ts, vals) in _metric_truth(path).items():
        (evs,) = [v for (_, name), v in tracks.items() if name == title]
        k = -(-len(vals) // cap)
        assert k > 1 and len(evs) == -(-len(vals) // k) <= cap
        assert [_ns(e["ts"]) + t0 for e in evs] == ts[::k]
        want = [sum(vals[i:i + k]) / len(vals[i:i + k]) for i in range(0, len(vals), k)]
        assert [e["args"]["%"] for e in evs] == pytest.approx(want, rel=1e-5, abs=1e-9)
        note = other["gpu_metrics"]["tracks"][next(n for n in other["gpu_metrics"]["tracks"] if n.endswith(title))]
        assert note == {"samples": len(vals), "events": len(evs), "bucket": k}


@pytest.mark.parametrize("name", NAMES)
def test_no_counters_without_gpu_metrics(name, traces, tmp_path):
    """A trace without GPU_METRICS: no counter event, no ``gpu_metrics`` note (the file as before)."""
    assert "GPU_METRICS" not in _tables(traces[name])
    out = tmp_path / "t.json"
    other = write_perfetto(nsysan.analyze(traces[name]), out)
    assert '"ph":"C"' not in out.read_text() and "gpu_metrics" not in other and "gpu_metric" not in other["counts"]
