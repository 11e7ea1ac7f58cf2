"""TensorRT: engine executions, the per-layer table, the iteration fallback and the four trt-* rules.

Truth: SQL on the two public exports that carry TensorRT ranges (../shared/corpus/public-exports,
skipped when absent), and hand-built traces that follow TensorRT's documented naming for what those
two lack (several engines, several contexts, enqueueV3 captured into a CUDA Graph, launch-bound
executions, synchronous executions followed by idle time).
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import factories as F
import numpy as np
import pandas as pd
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from conftest import CORPUS

from nsysan.analyses.iterations import TENSORRT_HOW
from nsysan.analyses.tensorrt_layers import layer_table
from nsysan.analysis import analyze

MEMFUSION = CORPUS / "LeiWang1999__memfusion_artifact__report1.sqlite"
POOLFORMER = CORPUS / "YoonKyonghwan__EfficientCenterFormer__poolformer.sqlite"

REFORMAT = "Reformatting CopyNode for Input Tensor 0 to /conv1/Conv + /relu/Relu"
CONV = "/conv1/Conv + /relu/Relu"
GEMM = "/fc/Gemm"
K_REFORMAT = "void genericReformat::copyPackedKernel<float, __half>(int)"
K_CONV_TF32 = "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x32"
K_GEMM_F16 = "sm80_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize64x64x64"


class Builder:
    """A hand-built trace: NVTX ranges (TensorRT domain), CUDA API calls, kernels, graph launches."""

    def __init__(self) -> None:
        self.kernels: list[tuple[int, int, int, str, int]] = []
        self.api: dict[int, list[tuple[int, int, str, int]]] = {}
        self.ranges: dict[tuple[int, str | None], list[tuple[int, int, str]]] = {}
        self.graphs: list[tuple[int, int, int, int]] = []
        self.corr = 1
        self.stream_free: dict[int, int] = {}

    def call(self, tid: int, start: int, end: int, name: str) -> int:
        c = self.corr
        self.corr += 1
        self.api.setdefault(tid, []).append((start, end, name, c))
        return c

    def launch(self, tid: int, t: int, stream: int, kernel: str | None, dur: int, api_ns: int = 3_000) -> tuple[int, int]:
        c = self.call(tid, t, t + api_ns, "cudaLaunchKernel")
        if kernel is None:  # launched during a stream capture: no kernel runs
            return -1, -1
        s = max(self.stream_free.get(stream, 0), t + api_ns + 1_000)
        self.kernels.append((s, s + dur, stream, kernel, c))
        self.stream_free[stream] = s + dur
        return s, s + dur

    def range(self, tid: int, start: int, end: int, text: str, domain: str | None = "TensorRT") -> None:
        self.ranges.setdefault((tid, domain), []).append((start, end, text))

    def execute(self, tid: int, t0: int, layers: list[tuple[str, str | None, int]], stream: int, *,
                name: str = "ExecutionContext::enqueue", layer_ns: int = 10_000, sync: bool = False,
                api_ns: int = 3_000) -> tuple[int, int, int]:
        """One engine execution: a layer range of ``layer_ns`` per layer, each launching its kernel
        1 us in. Returns (CPU end, first kernel start, last kernel end)."""
        t = t0 + 1_000
        first, last = -1, -1
        for text, kernel, dur in layers:
            self.range(tid, t, t + layer_ns, text)
            s, e = self.launch(tid, t + 1_000, stream, kernel, dur, api_ns)
            first = s if first < 0 else first
            last = max(last, e)
            t += layer_ns
        if sync:
            done = max(t, last) + 2_000
            self.call(tid, t, done, "cudaStreamSynchronize")
            t = done
        end = t + 1_000
        self.range(tid, t0, end, name)
        return end, first, last

    def trace(self):
        k = pd.concat([F.kernels([(s, e, st)], corr_start=c, name=n) for s, e, st, n, c in self.kernels],
                      ignore_index=True) if self.kernels else None
        tables = {}
        if k is not None:
            tables["kernels"] = k.sort_values("start_ns", kind="stable").reset_index(drop=True)
        if self.api:
            tables["cuda_api"] = pd.concat([F.api(sorted(r), tid=tid) for tid, r in self.api.items()],
                                           ignore_index=True).sort_values("start_ns", kind="stable").reset_index(drop=True)
        nv = pd.concat([F.nvtx(r, tid=tid, domain=d) for (tid, d), r in self.ranges.items()], ignore_index=True)
        tables["nvtx"] = nv.sort_values(["start_ns", "dur_ns"], ascending=[True, False], kind="stable").reset_index(drop=True)
        if self.graphs:
            n = len(self.graphs)
            g = F.kernels([(s, e, st) for s, e, st, _ in self.graphs])
            g = g.assign(correlation_id=np.array([c for *_, c in self.graphs], np.int64))
            tables["graph_launches"] = g[["start_ns", "end_ns", "dur_ns", "device_id", "context_id", "stream_id",
                                          "correlation_id", "global_pid", "pid"]].assign(
                graph_id=pd.array([1] * n, dtype="Int64"), graph_exec_id=pd.array([1] * n, dtype="Int64"))
        return F.make_trace(**tables)


ENGINE_A = [(REFORMAT, K_REFORMAT, 20_000), (CONV, K_CONV_TF32, 200_000), (GEMM, K_GEMM_F16, 80_000)]
ENGINE_B = [("{ForeignNode[/blk/MatMul.../blk/Add]}", "__myl_MatMulAdd_f16_xmma_gemm", 300_000)]


def two_engines_two_contexts(user_range: bool = False):
    """Thread 100 runs engine A then engine B per step on stream 7; thread 101 runs engine A (a
    second execution context) on stream 8. 5 steps of 2 ms."""
    b = Builder()
    for i in range(5):
        t = 1_000_000 + i * 2_000_000
        end, *_ = b.execute(100, t, ENGINE_A, 7)
        end_b, *_ = b.execute(100, end + 50_000, ENGINE_B, 7)
        if user_range:
            b.range(100, t - 1_000, end_b + 1_000, "infer", domain=None)
        b.execute(101, t + 500_000, ENGINE_A, 8)
    return b


def test_several_engines_and_contexts():
    # GIVEN two engines (told apart by their layer sequences), engine A on two threads and streams
    a = analyze(two_engines_two_contexts().trace())
    tr = a.tensorrt
    # THEN 15 executions, engine 1 = A (10 executions, 2 thread/stream pairs), engine 2 = B (5)
    assert len(tr.executions) == 15
    e = tr.engines.set_index("engine")
    assert e.loc[1, "executions"] == 10 and e.loc[1, "contexts"] == 2 and e.loc[1, "threads"] == 2
    assert e.loc[1, "streams"] == 2 and e.loc[1, "layers"] == 3
    assert e.loc[2, "executions"] == 5 and e.loc[2, "contexts"] == 1 and e.loc[2, "layers"] == 1
    assert e.loc[1, "gpu_total_ns"] == 10 * 300_000 and e.loc[2, "gpu_total_ns"] == 5 * 300_000
    # the per-layer table: exact GPU totals, shares, precision, reformat flag, fused nodes
    t = tr.table.set_index(["engine", "layer"])
    assert t.loc[(1, REFORMAT), "gpu_total_ns"] == 10 * 20_000
    assert t.loc[(1, CONV), "gpu_total_ns"] == 10 * 200_000 and t.loc[(1, CONV), "count"] == 10
    assert t.loc[(1, CONV), "gpu_share"] == pytest.approx(200 / 300)
    assert t.loc[(1, CONV), "precision"] == "tf32" and t.loc[(1, GEMM), "precision"] == "fp16"
    assert t.loc[(1, REFORMAT), "reformat"] and t.loc[(1, REFORMAT), "reformat_by"] == "name"
    assert t.loc[(1, CONV), "fused"] == 2 and t.loc[(1, CONV), "nodes"] == "/conv1/Conv; /relu/Relu"
    assert t.loc[(2, ENGINE_B[0][0]), "kind"] == "myelin"
    assert t.loc[(1, CONV), "cpu_total_ns"] == 10 * 10_000
    # no user range: each execution is one iteration (the fallback), never a layer range
    it = a.iterations
    assert it.how == TENSORRT_HOW and it.range_name == "TensorRT:ExecutionContext::enqueue"
    assert len(it.table) == 15 and it.stats.sequences == 2
    # rules: reformat share 20/300 >= 5%; TF32 convolutions 2 ms of 4.5 ms; fp32-compute leaves them alone
    rules = {f.rule: f for f in a.findings}
    assert rules["trt-reformat"].window.get("estimate_ns", rules["trt-reformat"].impact_ns) == 10 * 20_000
    assert rules["trt-fp32-layers"].window.get("estimate_ns", rules["trt-fp32-layers"].impact_ns) == 10 * 200_000 // 2
    assert "fp32-compute" not in rules
    assert "trt-sync-execution" not in rules  # enqueue: asynchronous


def test_user_range_around_executions_wins():
    # GIVEN a user range 'infer' around each step
    a = analyze(two_engines_two_contexts(user_range=True).trace())
    # THEN it is the iteration, not the TensorRT executions
    assert a.iterations.range_name == "infer" and a.iterations.how == "auto"
    assert a.tensorrt.engines["executions"].sum() == 15


def test_enqueue_captured_into_a_cuda_graph():
    # GIVEN enqueueV3 inside cudaStreamBeginCapture/EndCapture (its launches run nothing), then 5 replays
    b = Builder()
    b.call(100, 10_000, 11_000, "cudaStreamBeginCapture")
    end, _, _ = b.execute(100, 20_000, [(lt, None, 0) for lt, _, _ in ENGINE_A], 7)
    b.call(100, end + 1_000, end + 2_000, "cudaStreamEndCapture")
    b.call(100, end + 3_000, end + 50_000, "cudaGraphInstantiate")
    for i in range(5):
        t = 200_000 + i * 500_000
        c = b.call(100, t, t + 4_000, "cudaGraphLaunch")
        b.graphs.append((t + 10_000, t + 310_000, 7, c))
    a = analyze(b.trace())
    tr = a.tensorrt
    ex = tr.executions
    # THEN the execution is flagged captured, its replays counted with their GPU time
    assert len(ex) == 1 and bool(ex["captured"].iloc[0]) and ex["gpu_ops"].iloc[0] == 0
    e = tr.engines.iloc[0]
    assert e["graph_replays"] == 5 and e["graph_replay_gpu_ns"] == 5 * 300_000
    assert any("CUDA Graph" in n for n in tr.notes)
    # a captured execution launched no GPU work: it is not the iteration, and not launch-bound
    assert a.iterations.range_name is None
    assert "trt-launch-overhead" not in {f.rule for f in a.findings}


def test_many_short_layers_wait_for_launches():
    # GIVEN 8 executions of 30 layers, each a 2 us kernel launched every 10 us (3 us launch calls)
    b = Builder()
    layers = [(f"/blk{j}/Conv + /blk{j}/Relu", "sm80_xmma_fprop_implicit_gemm_f16f16_f16f16_f16", 2_000)
              for j in range(30)]
    for i in range(8):
        b.execute(100, 1_000_000 + i * 1_000_000, layers, 7, api_ns=5_000)
    a = analyze(b.trace())
    f = {x.rule: x for x in a.findings}["trt-launch-overhead"]
    # THEN each of the 29 gaps between kernels (10 us apart, 2 us long) is time waiting for a launch
    assert f.window.get("estimate_ns", f.impact_ns) == 8 * 29 * 8_000
    assert "8 steady-state TensorRT executions of 30 layers" in f.message


def test_synchronous_execution_and_its_round_trip():
    # GIVEN 6 synchronous executions (execute, with a stream synchronize inside) 200 us apart
    b = Builder()
    t, spans = 1_000_000, []
    for _ in range(6):
        end, first, last = b.execute(100, t, ENGINE_A, 7, name="ExecutionContext::execute", sync=True)
        spans.append((first, last))
        t = end + 200_000
    a = analyze(b.trace())
    tr = a.tensorrt
    assert tr.executions["sync"].all() and (tr.executions["blocked_ns"] > 0).all()
    f = {x.rule: x for x in a.findings}["trt-sync-execution"]
    # THEN the saving is the idle time from each execution's last kernel to the next one's first
    want = sum(spans[i + 1][0] - spans[i][1] for i in range(5))
    assert f.window.get("estimate_ns", f.impact_ns) == want
    assert "6 of 6 TensorRT executions" in f.message and "cudaStreamSynchronize" not in f.message


def test_nested_execution_ranges_count_once_and_cpu_only_traces_say_so():
    # GIVEN a user range named 'enqueueV3' around TensorRT's own, and no GPU activity at all
    b = Builder()
    for i in range(4):
        t = 1_000_000 * (i + 1)
        b.ranges.setdefault((100, "TensorRT"), [])
        end, _, _ = b.execute(100, t + 1_000, [(lt, None, 0) for lt, _, _ in ENGINE_A], 7)
        b.range(100, t, end + 1_000, "enqueueV3", domain=None)
    trace = b.trace()
    trace = F.make_trace(nvtx=trace.nvtx)  # CPU side only
    a = analyze(trace)
    tr = a.tensorrt
    assert len(tr.executions) == 4 and set(tr.executions["name"]) == {"TensorRT:ExecutionContext::enqueue"}
    assert not tr.gpu_recorded and tr.table["gpu_share"].isna().all()
    assert tr.table.set_index("layer").loc[CONV, "cpu_total_ns"] == 4 * 10_000
    assert any("not recorded" in n for n in tr.notes)


# ---- the public exports: truth from SQL ----------------------------------------------------------

def _analysis(path: Path):
    from conftest import analyzed

    if not path.exists():
        pytest.skip("public corpus not present (../shared)")
    return analyzed(path)


TRT_RANGES = """
  SELECT n.start, n."end", coalesce(n.text, s.value) AS t FROM NVTX_EVENTS n
  LEFT JOIN StringIds s ON s.id = n.textId
  WHERE n.eventType = 59 AND n.domainId = {domain}"""


def _sql(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)


def _trt_ranges(con: sqlite3.Connection) -> str:
    """TRT_RANGES for this export's TensorRT domain id (eventType 75: domain creation)."""
    (dom,), = con.execute("SELECT n.domainId FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
                          "WHERE n.eventType = 75 AND coalesce(n.text, s.value) = 'TensorRT'").fetchall()
    return TRT_RANGES.format(domain=int(dom))


def test_memfusion_execution_layers_and_gpu_time_from_sql():
    a = _analysis(MEMFUSION)
    con = _sql(MEMFUSION)
    TRT_RANGES = _trt_ranges(con)
    ex = con.execute(f"SELECT start, \"end\" FROM ({TRT_RANGES}) WHERE t = 'ExecutionContext::execute'").fetchall()
    assert len(ex) == 1
    (s0, e0), = ex
    tr = a.tensorrt
    assert len(tr.executions) == 1
    r = tr.executions.iloc[0]
    assert (r["start_ns"], r["end_ns"], r["cpu_ns"]) == (s0, e0, e0 - s0) == (18992108, 25834711, 6842603)
    # GPU ops (kernels and copies) whose launching call started on the thread inside each layer range
    ops = """SELECT o.start, o."end", r.start AS api FROM (SELECT start, "end", correlationId FROM
             CUPTI_ACTIVITY_KIND_KERNEL UNION ALL SELECT start, "end", correlationId FROM CUPTI_ACTIVITY_KIND_MEMCPY) o
             JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = o.correlationId"""
    per_layer = dict(con.execute(
        f"SELECT l.t, coalesce(sum(o.\"end\" - o.start), 0) FROM ({TRT_RANGES}) l LEFT JOIN ({ops}) o "
        f"ON o.api >= l.start AND o.api <= l.\"end\" WHERE l.t != 'ExecutionContext::execute' GROUP BY l.t"))
    assert len(per_layer) == 58 == r["layers"]
    t = tr.table.set_index("layer")
    assert {k: int(v) for k, v in t["gpu_total_ns"].items()} == per_layer
    total = con.execute(f"SELECT sum(\"end\" - start) FROM ({ops}) WHERE api >= ? AND api <= ?", (s0, e0)).fetchone()[0]
    assert r["gpu_ns"] == total == 6421420
    # reformat share: layers named 'Reformatting CopyNode ...' (the CUTENSOR permutation: 111,521 ns)
    ref = sum(v for k, v in per_layer.items() if k.startswith("Reformatting CopyNode"))
    assert ref == 111521
    assert t.loc[t["reformat_by"] == "name", "gpu_total_ns"].sum() == ref
    assert t.loc[t["reformat_by"] == "name", "gpu_share"].sum() == pytest.approx(ref / total, rel=1e-5)
    # the Identity casts run only genericReformat kernels: reformat by kernels
    assert set(t.index[t["reformat_by"] == "kernels"]) == {f"Identity_{i}" for i in range(12)}
    assert (t.loc[t["gpu_total_ns"] > 100_000, "precision"] != "fp32").all()
    # the execution is the iteration (no range of the program's own), synchronous with a stream sync inside
    it = a.iterations
    assert it.how == TENSORRT_HOW and it.range_name == "TensorRT:ExecutionContext::execute"
    gpu_end = con.execute(f"SELECT max(\"end\") FROM ({ops}) WHERE api >= ? AND api <= ?", (s0, e0)).fetchone()[0]
    assert it.table["latency_ns"].tolist() == [max(e0, gpu_end) - s0]
    blocked = con.execute("SELECT sum(r.\"end\" - r.start) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s "
                          "ON s.id = r.nameId WHERE s.value LIKE 'cudaStreamSynchronize%' AND r.start >= ? AND "
                          "r.\"end\" <= ?", (s0, e0)).fetchone()[0]
    assert r["sync"] and r["blocked_ns"] == blocked == 5558486
    rules = {f.rule: f for f in a.findings}
    assert rules["trt-sync-execution"].impact_ns == 0  # nothing runs after it inside the window
    assert "trt-reformat" not in rules  # 1.7% by name, 2.0% with the casts: under 5%


def test_poolformer_cpu_side_layer_table_from_sql():
    a = _analysis(POOLFORMER)
    con = _sql(POOLFORMER)
    TRT_RANGES = _trt_ranges(con)
    ex = con.execute(f"SELECT start, \"end\" FROM ({TRT_RANGES}) WHERE t = 'ExecutionContext::execute' "
                     "ORDER BY start").fetchall()
    assert len(ex) == 188
    tr = a.tensorrt
    assert not tr.gpu_recorded and any("not recorded" in n for n in tr.notes)
    got = tr.executions.sort_values("start_ns")
    assert list(zip(got["start_ns"], got["end_ns"])) == ex
    assert int(got["cpu_ns"].sum()) == sum(e - s for s, e in ex)
    # one engine of 97 layers; the last execution was cut by the end of the capture (94 layers)
    assert len(tr.engines) == 1 and tr.engines["layers"].iloc[0] == 97
    assert got["truncated"].tolist() == [False] * 187 + [True] and got["layers"].iloc[-1] == 94
    # per-layer host time over all executions = SQL per name (TensorRT domain, inside an execution)
    # (the capture starts inside an execution: its last 3 layers have no execution range around them)
    rows = con.execute(f"SELECT start, \"end\", t FROM ({TRT_RANGES}) WHERE t != 'ExecutionContext::execute'").fetchall()
    es, ee = np.array([s for s, _ in ex]), np.array([e for _, e in ex])
    want: dict[str, int] = {}
    for s, e, t in rows:
        k = np.searchsorted(es, s, side="right") - 1
        if k >= 0 and e <= ee[k]:
            want[t] = want.get(t, 0) + e - s
    full = layer_table(tr.executions, tr.layers, tr.ops, gpu_recorded=False).set_index("layer")
    assert {k: int(v) for k, v in full["cpu_total_ns"].items()} == want
    # Myelin's own ranges (myelin-exec domain) are not layers
    assert not any(str(x).startswith("myelin") for x in full.index)
    # reformat share of the executions' host time
    ref = sum(v for k, v in want.items() if k.startswith("Reformatting CopyNode"))
    share = full.loc[full["reformat_by"] == "name", "cpu_share"].sum()
    assert share == pytest.approx(ref / sum(e - s for s, e in ex), rel=1e-5)
    assert full["gpu_share"].isna().all()
    # the program's own range stays the iteration; the table covers the executions in its steady state
    assert a.iterations.range_name == "3D_backbone"
    assert tr.table_window == "steady state" and int(tr.table["count"].max()) == 187
    sync = {f.rule: f for f in a.findings}["trt-sync-execution"]
    assert sync.impact_ns == 0 and "not recorded" in sync.message


_SPECIAL = ["ExecutionContext::execute", "IExecutionContext::enqueueV3", "IExecutionContext::enqueueV2\n",
            "enqueueV2", "enqueueV3", "executeV2", "executeV2\n", "execute", "enqueueV4", "IExecutionContext::",
            "ExecutionContext::executeV2x", "Reformatting CopyNode for Input Tensor 0", "{ForeignNode[conv1...fc]}",
            " {ForeignNode[", "xExecutionContext::execute", "TensorRT:enqueueV3", "myelin:ExecutionContext::execute",
            "conv1 + relu", "\n", ""]


# the label tests as regular expressions (what range_kinds decided before session 16): the oracle
EXEC_TEXT = re.compile(r"^(?:I?ExecutionContext::(?:execute|executeV2|enqueue|enqueueV2|enqueueV3)|"
                       r"enqueueV[23]|executeV2)$")
TRT_TEXT = re.compile(r"^(?:I?ExecutionContext::|Reformatting CopyNode|\{ForeignNode\[)")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.sampled_from(_SPECIAL), st.text(max_size=12)),
                          st.sampled_from([None, "", "TensorRT", " tensorrt ", "myelin", "Myelin-Exec", "NCCL",
                                           float("nan")])), min_size=1, max_size=30))
@example([("executeV2\n", None), ("TensorRT:enqueueV3", "TensorRT"), ("{ForeignNode[", "NCCL")])
def test_range_kinds_equal_the_regular_expressions(rows):
    """``range_kinds`` decides labels with set lookups and prefixes: the same answers as the regular
    expressions ``EXEC_TEXT`` (a whole text; ``$`` also before a final newline) and ``TRT_TEXT``,
    for each label with the domain of its first range (a label is one domain and text)."""
    from nsysan.analyses import tensorrt_ranges as T

    rg = pd.DataFrame({"name": [r[0] for r in rows], "domain": pd.Series([r[1] for r in rows], dtype=object)})
    trt, ex, my = T.range_kinds(rg)
    first: dict[str, object] = {}
    for name, d in rows:
        first.setdefault(name, d)
    for i, (name, _) in enumerate(rows):
        d = first[name]
        d = "" if d is None or (isinstance(d, float) and np.isnan(d)) else str(d).strip()
        text = T._text(str(name), d or None)
        m = d.lower() in T.MYELIN_DOMAINS
        assert my[i] == m
        assert trt[i] == (d.lower() in T.TRT_DOMAINS or m or bool(TRT_TEXT.search(text))
                          or bool(EXEC_TEXT.match(text)))
        assert ex[i] == (bool(EXEC_TEXT.match(text)) and not m)
