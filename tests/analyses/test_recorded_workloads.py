"""The recordings of workloads unlike the ladder (workloads/inference/decode.py, hf_generate.py, train.py,
two_procs.py; H100, nsys 2025.3): LLM token decoding eager and as a replayed CUDA Graph (traced as
graph and as nodes), a Hugging Face generate loop, a training loop fed inline and by DataLoader
workers, and two training processes with NCCL on one GPU.

Truth is SQL written here, on each export: the instances of the iteration range, their completions
(the later of the range's end and the end of the GPU work launched inside it on its thread, or on a
thread of its process that runs no such range, like PyTorch's autograd thread), periods and
latencies, and each device's busy time (union over every process).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURE_NAMES

RECORDED = {"decode_eager": "decode_token", "decode_graph": "decode_token", "decode_graph_nodes": "decode_token",
            "hf_generate": "request", "train_inline": "train_step", "train_dataloader": "train_step",
            "two_procs": "train_step",
            # two H200s, one process a GPU (workloads/training/ddp.py): one export of both ranks, and one per rank
            **{n: "train_step" for n in ("ddp_overlap", "ddp_serial", "ddp_straggler", "tp", "fsdp", "pipeline",
                                         "ddp_overlap_rank0", "ddp_overlap_rank1", "ddp_straggler_rank0",
                                         "ddp_straggler_rank1")}}
HAVE = [n for n in RECORDED if n in FIXTURE_NAMES]
pytestmark = pytest.mark.skipif(not HAVE, reason="recorded workload fixtures missing")

GPU = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
       "CUPTI_ACTIVITY_KIND_GRAPH_TRACE")


def _con(fixture_dir: Path, name: str) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{fixture_dir / (name + '.sqlite')}?mode=ro&immutable=1", uri=True)


def _gpu_tables(con: sqlite3.Connection) -> list[str]:
    have = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    return [t for t in GPU if t in have]


def truth_iterations(con: sqlite3.Connection, text: str) -> list[dict[str, int]]:
    """Instances of the push/pop range ``text`` with their completion, by SQL."""
    ops = " UNION ALL ".join(f'SELECT correlationId AS corr, globalPid AS gpid, "end" AS e FROM "{t}"'
                             for t in _gpu_tables(con))
    con.execute("DROP TABLE IF EXISTS temp.launch")
    con.execute(f"""CREATE TEMP TABLE launch AS
        SELECT r.start AS api, r.globalTid AS gtid, max(o.e) AS e, count(*) AS n
        FROM (SELECT start, globalTid, correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME) r
        JOIN ({ops}) o ON o.corr = r.correlationId AND o.gpid = (r.globalTid & ~0xFFFFFF)
        GROUP BY r.correlationId, r.globalTid""")
    inst = con.execute("""
        SELECT n.start, n."end", n.globalTid FROM NVTX_EVENTS n
        LEFT JOIN StringIds s ON s.id = n.textId
        WHERE n.eventType = 59 AND n."end" IS NOT NULL AND coalesce(n.text, s.value) = ?
        ORDER BY n.globalTid, n.start""", (text,)).fetchall()
    seq_threads = {g for _, _, g in inst}
    rows = []
    for s, e, g in inst:
        pid_mask = g & ~0xFFFFFF
        # the range's own thread, and threads of its process that run no instance of the range
        helpers = [t for (t,) in con.execute("SELECT DISTINCT gtid FROM launch WHERE (gtid & ~0xFFFFFF) = ?",
                                             (pid_mask,)) if t not in seq_threads]
        threads = [g] + helpers
        q = f"SELECT max(e), sum(n) FROM launch WHERE api >= ? AND api <= ? AND gtid IN ({','.join('?' * len(threads))})"
        gpu_end, n = con.execute(q, (s, e, *threads)).fetchone()
        rows.append({"start": s, "cpu_end": e, "tid": g, "done": max(e, gpu_end or e), "ops": n or 0})
    return rows


def _seq(rows: list[dict[str, int]]) -> dict[int, list[dict[str, int]]]:
    out: dict[int, list[dict[str, int]]] = {}
    for r in rows:
        out.setdefault(r["tid"], []).append(r)
    return out


def union_ns(con: sqlite3.Connection, device: int, t0: int, t1: int) -> int:
    iv = sorted(x for t in _gpu_tables(con) for x in con.execute(
        f'SELECT max(start, ?), min("end", ?) FROM "{t}" WHERE deviceId = ? AND "end" > ? AND start < ?',
        (t0, t1, device, t0, t1)))
    total, cs, ce = 0, None, None
    for s, e in iv:
        if ce is None or s > ce:
            total += (ce - cs) if ce is not None else 0
            cs, ce = s, e
        else:
            ce = max(ce, e)
    return total + ((ce - cs) if ce is not None else 0)


@pytest.mark.parametrize("name", HAVE)
def test_iteration_range_period_latency_and_busy_from_sql(name, analysis, fixture_dir):
    a = analysis(name)
    con = _con(fixture_dir, name)
    text = RECORDED[name]
    it = a.iterations
    assert it.range_name == text and it.how == "auto"
    truth = truth_iterations(con, text)
    table = it.table.sort_values(["pid", "tid", "start_ns"], kind="stable")
    assert table["start_ns"].tolist() == [r["start"] for r in truth]
    assert table["end_ns"].tolist() == [r["done"] for r in truth]
    # warm-up: leading iterations of a sequence only
    for _, g in table.groupby("tid"):
        w = g["warmup"].to_numpy()
        assert not (np.diff(w.astype(int)) > 0).any()
    steady_periods, steady_lat = [], []
    for tid, rows in _seq(truth).items():
        warm = table.loc[table["tid"] == (tid & 0xFFFFFF), "warmup"].to_numpy()
        for i, r in enumerate(rows):
            if warm[i]:
                continue
            steady_lat.append(r["done"] - r["start"])
            if i:
                steady_periods.append(r["done"] - rows[i - 1]["done"])
    assert it.stats.period_p50_ns == int(round(float(np.median(steady_periods))))
    assert it.stats.latency_p50_ns == int(round(float(np.median(steady_lat))))
    assert it.stats.p50_ns == it.stats.period_p50_ns
    for _, r in a.busy_steady.iterrows():
        assert int(r["busy_ns"]) == union_ns(con, int(r["device_id"]), a.steady.start_ns, a.steady.end_ns)
    for _, r in a.busy_capture.iterrows():
        assert int(r["busy_ns"]) == union_ns(con, int(r["device_id"]), a.capture.start_ns, a.capture.end_ns)


def test_graph_decode_runs_ahead_eager_does_not(analysis):
    if not {"decode_eager", "decode_graph"} <= set(HAVE):
        pytest.skip("decode fixtures missing")
    g = analysis("decode_graph").iterations.stats
    e = analysis("decode_eager").iterations.stats
    assert g.latency_includes_queueing and g.queue_depth_p50 >= 5
    assert g.latency_p50_ns > 5 * g.period_p50_ns
    assert not e.latency_includes_queueing


def test_two_processes_on_one_gpu(analysis, fixture_dir):
    if "two_procs" not in HAVE:
        pytest.skip("two_procs missing")
    a = analysis("two_procs")
    con = _con(fixture_dir, "two_procs")
    pairs = {(gp >> 24 & 0xFFFFFF, s) for t in _gpu_tables(con)
             for gp, s in con.execute(f'SELECT DISTINCT globalPid, streamId FROM "{t}"')}
    cap = a.busy_capture
    assert len(cap) == 1 and int(cap.iloc[0]["streams"]) == len(pairs) == 6
    assert int(cap.iloc[0]["processes"]) == 2
    assert a.iterations.stats.sequences == 2
    # two sequences, not one interleaved list: the period is a step of one process (~11.9 ms)
    assert 10_000_000 < a.iterations.stats.period_p50_ns < 14_000_000
    assert {c.name: c.verdict for c in a.iterations.candidates}["NCCL:ncclAllReduce"] == "library range (NCCL)"


@pytest.mark.parametrize("slow,fast", [("decode_eager", "decode_graph"), ("train_inline", "train_dataloader")])
def test_compare_and_gate_follow_the_real_speedup(slow, fast, analysis, fixture_dir):
    if not {slow, fast} <= set(HAVE):
        pytest.skip("fixtures missing")
    from nsysan import compare
    from nsysan.compare.gate import gate
    from nsysan.compare.ladder import ladder
    from nsysan.report.jsonout import analysis_to_dict

    db, dn = analysis_to_dict(analysis(slow)), analysis_to_dict(analysis(fast))
    text = RECORDED[slow]
    # the speedup by SQL: median period of each (all iterations after the first of each thread)
    def med_period(name: str) -> float:
        rows = truth_iterations(_con(fixture_dir, name), text)
        return float(np.median([b["done"] - a["done"] for s in _seq(rows).values() for a, b in zip(s, s[1:])]))

    want = med_period(slow) / med_period(fast)
    assert want > 2.5
    lad = ladder([(slow, db), (fast, dn)])
    assert lad["metric"] == "iter_p50_ns"
    assert lad["rows"][1]["step_speedup"] == pytest.approx(want, rel=0.1)
    ok = gate(compare.diff(db, dn), "iter_p50_ns", 0.05)
    bad = gate(compare.diff(dn, db), "iter_p50_ns", 0.05)
    assert not ok["failed"] and bad["failed"]


def test_diff_notes_different_cuda_graph_trace_modes(analysis):
    if not {"decode_graph", "decode_graph_nodes"} <= set(HAVE):
        pytest.skip("fixtures missing")
    from nsysan import compare
    from nsysan.report.jsonout import analysis_to_dict

    g, n = analysis("decode_graph"), analysis("decode_graph_nodes")
    assert g.graph_trace == "graph" and n.graph_trace == "node"
    d = compare.diff(analysis_to_dict(g), analysis_to_dict(n))
    assert any("traced differently" in x for x in d.notes)
    # GPU totals compare like with like: graph launches count as kernel time
    kt = {m["metric"]: m for m in d.metrics}["kernel_total_ns"]
    assert 0.5 < kt["new"] / kt["base"] < 2.0


@pytest.mark.parametrize("name", [n for n in ("two_procs", "train_inline") if n in HAVE])
def test_steady_ops_and_streams_count_the_steady_window(name, analysis, fixture_dir):
    a = analysis(name)
    con = _con(fixture_dir, name)
    w0, w1 = a.steady.start_ns, a.steady.end_ns
    n, pairs = 0, set()
    for t in _gpu_tables(con):
        for gp, s in con.execute(f'SELECT globalPid, streamId FROM "{t}" WHERE start < ? AND "end" > ?', (w1, w0)):
            n += 1
            pairs.add((gp, s))
    row = a.busy_steady.iloc[0]
    assert int(row["ops"]) == n and int(row["streams"]) == len(pairs)
    assert int(row["ops"]) < int(a.busy_capture.iloc[0]["ops"])


@pytest.mark.parametrize("name", [n for n in ("jax_train", "compile_train") if n in FIXTURE_NAMES])
def test_framework_ranges_are_information_not_the_iteration(name, analysis, fixture_dir):
    """JAX/XLA (XlaModule, Thunk, XlaPass ... in XLA's TSL domain) and torch.compile traces: the
    program's own train_step is the iteration; every XLA range is a library range."""
    a = analysis(name)
    con = _con(fixture_dir, name)
    truth = truth_iterations(con, "train_step")
    it = a.iterations
    assert it.range_name == "train_step" and len(it.table) == len(truth)
    steady = it.table.loc[~it.table["warmup"]].sort_values(["pid", "tid", "start_ns"])
    done = {r["start"]: r["done"] for r in truth}
    assert [done[s] for s in steady["start_ns"]] == steady["end_ns"].tolist()
    tsl = {r[0] for r in con.execute("""SELECT DISTINCT coalesce(n.text, s.value) FROM NVTX_EVENTS n
        LEFT JOIN StringIds s ON s.id = n.textId JOIN NVTX_EVENTS d ON d.eventType = 75 AND d.domainId = n.domainId
        LEFT JOIN StringIds ds ON ds.id = d.textId WHERE n.domainId != 0 AND coalesce(d.text, ds.value) = 'TSL'""")}
    for c in it.candidates:
        if c.name.startswith("TSL:") or c.name.split(":", 1)[-1] in tsl:
            assert c.library == "XLA", c.name
