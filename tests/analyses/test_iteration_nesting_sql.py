"""Steps within steps (issue 38, items 6 and 7), truth by SQL on the trace.

* A range that encloses later instances of itself (an outer ``train_step`` around the next 14): the
  innermost instances are the iterations; count, periods and service times follow from them, none
  negative, and the warm-up finding counts each warm-up nanosecond once.
* Nested candidates: the iteration is the unit the loop repeats (k micro-batches per optimizer step,
  L layers per step: the outer range), the finer one is its breakdown (the sub-step table), whose
  per-iteration counts, CPU and GPU times equal SQL's.
* JAX/XLA with the program's own ranges gone: the jitted step's ``XlaModule`` range, never a compile
  pass or a thunk.

Fixture-based cases copy a recorded export and change it with SQL (``factories.apply_sql``); the
synthetic ones are written into an in-memory SQLite database and queried there.
"""

from __future__ import annotations

import lzma
import sqlite3
from pathlib import Path

import factories as F
import numpy as np
import pandas as pd
import pytest
import sqltruth
from conftest import FIXTURES

import nsysan
from nsysan.analysis import analyze

FIX = FIXTURES


def _is(name: str, t: str = "NVTX_EVENTS") -> str:
    """SQL: the row ``t`` of NVTX_EVENTS is a closed range of that text (inline or in StringIds)."""
    return (f"({t}.text = '{name}' OR {t}.textId IN (SELECT id FROM StringIds WHERE value = '{name}')) "
            f"AND {t}.end IS NOT NULL")


IS_TRAIN_STEP = _is("train_step")


def _copy(name: str, tmp_path: Path) -> Path:
    out = tmp_path / f"{name}.sqlite"
    out.write_bytes(lzma.decompress((FIX / name / "trace.sqlite.xz").read_bytes()))
    return out


def _leaves(conn: sqlite3.Connection, name: str) -> list[tuple[int, int, int]]:
    """(start, end, globalTid) of the closed instances of range ``name`` that enclose no other
    instance of it on their thread, by start."""
    return conn.execute(f"""
        SELECT n.start, n.end, n.globalTid FROM NVTX_EVENTS AS n WHERE {_is(name, 'n')}
        AND NOT EXISTS (SELECT 1 FROM NVTX_EVENTS AS m WHERE {_is(name, 'm')}
                        AND m.globalTid = n.globalTid AND m.rowid != n.rowid
                        AND m.start >= n.start AND m.end <= n.end)
        ORDER BY n.start""").fetchall()


# ---------------------------------------------------------------- item 6: a range around itself


def test_range_enclosing_later_instances_of_itself(tmp_path):
    path = _copy("train_inline", tmp_path)
    # two outer 'train_step's (one around the first 14 instances, one around instances 20..33),
    # on the same thread, with the instances' own event type, string and thread
    for first, last in ((0, 13), (20, 33)):
        F.apply_sql(path, f"""
            INSERT INTO NVTX_EVENTS (start, end, eventType, text, textId, globalTid, domainId)
            SELECT a.start - 1, b.end + 1, a.eventType, a.text, a.textId, a.globalTid, a.domainId
            FROM (SELECT * FROM NVTX_EVENTS WHERE {IS_TRAIN_STEP} ORDER BY start LIMIT 1 OFFSET {first}) AS a,
                 (SELECT * FROM NVTX_EVENTS WHERE {IS_TRAIN_STEP} ORDER BY start LIMIT 1 OFFSET {last}) AS b""")
    conn = sqltruth.open_export(path)
    inst = sqltruth.range_instances(conn, "train_step")
    leaves = set(_leaves(conn, "train_step"))
    assert len(inst) == len(leaves) + 2  # the two outer instances are there
    leaf = [r for r in inst if (r["start"], r["end"]) in {(s, e) for s, e, _ in leaves}]
    done = [r["completion"] for r in leaf]
    sql_periods = [b - a for a, b in zip(done, done[1:])]
    assert all(p > 0 for p in sql_periods)

    a = analyze(nsysan.open_trace(path))
    it = a.iterations
    t = it.table.sort_values("start_ns")
    assert it.range_name == "train_step"
    assert len(t) == len(leaf) and it.stats.count + it.warmup == len(leaf)
    assert it.stats.enclosing_instances == 2
    assert t["start_ns"].tolist() == [r["start"] for r in leaf]
    assert t["end_ns"].tolist() == done
    assert t["period_ns"].tolist() == [-1] + sql_periods
    assert (t["service_ns"] >= 0).all()
    # count and periods agree: one period per steady iteration after a sequence's first
    steady = t.loc[~t["warmup"]]
    assert int((steady["period_ns"] >= 0).sum()) == len(steady) - (0 if it.warmup else 1)
    # the warm-up finding: warm-up iterations are innermost instances, each nanosecond counted once
    for f in a.findings:
        if f.rule == "warmup-outlier":
            starts = [e["start_ns"] for e in f.evidence]
            assert set(starts) <= {r["start"] for r in leaf}
            assert sum(e["service_ns"] for e in f.evidence) <= max(done) - min(starts)


def test_periods_never_negative_when_work_completes_out_of_order():
    # 6 'step's on one thread; each launches one kernel on its own stream, and the second step's
    # kernel ends after the third's: the period of the third (since the latest earlier completion) is 0
    steps = [(i * 1_000_000, i * 1_000_000 + 200_000) for i in range(6)]
    kern = [(s + 1_000, s + 500_000) for s, _ in steps]
    kern[1] = (steps[1][0] + 1_000, steps[2][0] + 800_000)
    k = pd.concat([F.kernels([(ks, ke, 7 + i)], corr_start=i + 1) for i, (ks, ke) in enumerate(kern)],
                  ignore_index=True)
    api = F.api([(s + 10, s + 60, "cudaLaunchKernel", i + 1) for i, (s, _) in enumerate(steps)])
    nv = F.nvtx([(s, e, "step") for s, e in steps])
    it = analyze(F.make_trace(kernels=k, cuda_api=api, nvtx=nv), rules=False).iterations
    done = [max(e, ke) for (_, e), (_, ke) in zip(steps, kern)]
    want = [-1] + [max(done[i] - max(done[:i]), 0) for i in range(1, 6)]
    assert it.table["period_ns"].tolist() == want and want[2] == 0
    assert (it.table["service_ns"] >= 0).all()


# ---------------------------------------------------------------- item 7: steps within steps


def _db(tables: dict[str, pd.DataFrame]) -> sqlite3.Connection:
    """The synthetic trace's NVTX ranges, launches and kernels in an in-memory SQLite database."""
    conn = sqlite3.connect(":memory:")
    nv = tables["nvtx"]
    pd.DataFrame({"start": nv["start_ns"].astype("int64"), "end": nv["end_ns"].astype("int64"),
                  "text": nv["text"].astype(str), "tid": nv["tid"].astype("int64")}).to_sql("nvtx", conn)
    a = tables["cuda_api"]
    pd.DataFrame({"start": a["start_ns"], "corr": a["correlation_id"], "tid": a["tid"]}).to_sql("api", conn)
    k = tables["kernels"]
    pd.DataFrame({"start": k["start_ns"], "end": k["end_ns"], "corr": k["correlation_id"],
                  "name": k["name"].astype(str)}).to_sql("kernels", conn)
    return conn


def _inner_counts(conn: sqlite3.Connection, outer: str, inner: str) -> list[int]:
    return [r[0] for r in conn.execute(
        "SELECT (SELECT count(*) FROM nvtx AS i WHERE i.text = :i AND i.tid = o.tid AND i.start >= o.start "
        "AND i.end <= o.end) FROM nvtx AS o WHERE o.text = :o ORDER BY o.start", {"o": outer, "i": inner})]


def _build(ranges: list[tuple[int, int, str]], launches: list[tuple[int, int, int, str]],
           tid: int = F.PID, corr0: int = 1) -> dict[str, pd.DataFrame]:
    """NVTX ``ranges`` (start, end, text) on ``tid``; ``launches``: (API start, kernel start, kernel
    end, kernel name), one 50 ns cudaLaunchKernel each."""
    ks = []
    for i, (_, s, e, name) in enumerate(launches):
        ks.append(F.kernels([(s, e, 7)], corr_start=corr0 + i, name=name))
    return {"kernels": pd.concat(ks, ignore_index=True),
            "cuda_api": F.api([(a, a + 50, "cudaLaunchKernel", corr0 + i) for i, (a, *_) in enumerate(launches)],
                              tid=tid),
            "nvtx": F.nvtx(ranges, tid=tid)}


def _grad_accum(steps: int = 8, k: int = 4) -> dict[str, pd.DataFrame]:
    """``steps`` optimizer steps of ``k`` micro-batches each: every micro-batch launches a 1.5 ms
    forward/backward kernel, the last one also the all-reduce, and the optimizer runs after them."""
    ranges, launches = [], []
    t = 1_000_000
    gpu = t
    for _ in range(steps):
        s0 = t
        for m in range(k):
            ranges.append((t, t + 2_000_000, "micro_batch"))
            launches.append((t + 100, max(gpu, t + 200), max(gpu, t + 200) + 1_500_000, "gemm_fwd_bwd"))
            gpu = launches[-1][2]
            if m == k - 1:
                launches.append((t + 300, gpu, gpu + 300_000, "ncclDevKernel_AllReduce_Sum_f32_RING_LL"))
                gpu = launches[-1][2]
            t += 2_000_000
        ranges.append((t, t + 300_000, "optimizer"))
        launches.append((t + 100, max(gpu, t + 200), max(gpu, t + 200) + 200_000, "multi_tensor_apply_adam"))
        gpu = launches[-1][2]
        t += 300_000
        ranges.append((s0, t, "optimizer_step"))
        t += 100_000
    return _build(ranges, launches)


def test_gradient_accumulation_iteration_is_the_optimizer_step():
    tables = _grad_accum()
    conn = _db(tables)
    n_steps = conn.execute("SELECT count(*) FROM nvtx WHERE text = 'optimizer_step'").fetchone()[0]
    per_step = _inner_counts(conn, "optimizer_step", "micro_batch")
    it = analyze(F.make_trace(**tables), rules=False).iterations
    v = {c.name: c.verdict for c in it.candidates}
    assert it.range_name == "optimizer_step", v
    assert len(it.table) == n_steps
    assert v["micro_batch"].startswith("a sub-step of 'optimizer_step'")
    sub = it.substeps.loc[it.substeps["name"] == "micro_batch"].sort_values("index")
    assert sub["count"].tolist() == per_step
    lv = {lv["name"]: lv for lv in it.levels}
    assert lv["micro_batch"]["role"] == "sub-step"
    assert lv["micro_batch"]["per_iteration_p50"] == float(np.median(per_step[it.warmup:]))


def test_tensor_parallel_layers_inside_the_step():
    # 6 steps of 12 layers; each layer launches a GEMM and the all-reduce, the step the loss
    ranges, launches = [], []
    t = 1_000_000
    for _ in range(6):
        s0 = t
        for _ in range(12):
            ranges.append((t, t + 400_000, "transformer_layer"))
            launches += [(t + 100, t + 1_000, t + 300_000, "sm90_xmma_gemm"),
                         (t + 200, t + 300_000, t + 390_000, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL")]
            t += 400_000
        launches.append((t + 100, t + 1_000, t + 60_000, "loss_kernel"))
        t += 100_000
        ranges.append((s0, t, "train_step"))
        t += 200_000
    tables = _build(ranges, launches)
    conn = _db(tables)
    per_step = _inner_counts(conn, "train_step", "transformer_layer")
    it = analyze(F.make_trace(**tables), rules=False).iterations
    assert it.range_name == "train_step"
    assert len(it.table) == conn.execute("SELECT count(*) FROM nvtx WHERE text = 'train_step'").fetchone()[0]
    sub = it.substeps.loc[it.substeps["name"] == "transformer_layer"].sort_values("index")
    assert sub["count"].tolist() == per_step
    # the layers' CPU time per step, by SQL
    cpu = [r[0] for r in conn.execute(
        "SELECT (SELECT sum(i.end - i.start) FROM nvtx AS i WHERE i.text = 'transformer_layer' AND i.tid = o.tid "
        "AND i.start >= o.start AND i.end <= o.end) FROM nvtx AS o WHERE o.text = 'train_step' ORDER BY o.start")]
    assert sub["cpu_ns"].tolist() == cpu


def test_tokens_inside_requests_both_levels_shown():
    # 6 requests: a prefill kernel, then 10 decode tokens of one kernel each
    ranges, launches = [], []
    t = 1_000_000
    for _ in range(6):
        s0 = t
        launches.append((t + 100, t + 1_000, t + 2_000_000, "prefill_gemm"))
        t += 2_100_000
        for _ in range(10):
            ranges.append((t, t + 500_000, "decode_token"))
            launches.append((t + 100, t + 1_000, t + 450_000, "decode_gemv"))
            t += 500_000
        ranges.append((s0, t, "request"))
        t += 100_000
    tables = _build(ranges, launches)
    conn = _db(tables)
    it = analyze(F.make_trace(**tables), rules=False).iterations
    assert it.range_name in ("request", "decode_token")
    other = "decode_token" if it.range_name == "request" else "request"
    lv = {lv["name"]: lv for lv in it.levels}
    assert other in lv
    if it.range_name == "request":
        assert it.substeps.loc[it.substeps["name"] == "decode_token"].sort_values("index")["count"].tolist() == \
            _inner_counts(conn, "request", "decode_token")
    else:
        assert lv["request"]["role"] == "encloses the iterations"


def test_decode_fixture_shows_the_request_level(tmp_path):
    path = _copy("decode_eager", tmp_path)
    conn = sqltruth.open_export(path)
    tok = {(r["start"], r["end"]) for r in sqltruth.range_instances(conn, "decode_token")}
    req = sqltruth.range_instances(conn, "request")
    per_request = [sum(1 for s, e in tok if r["start"] <= s and e <= r["end"]) for r in req]
    a = analyze(nsysan.open_trace(path), rules=False)
    it = a.iterations
    assert it.range_name == "decode_token"
    lv = {lv["name"]: lv for lv in it.levels}
    assert lv["request"]["role"] == "encloses the iterations"
    assert lv["request"]["instances"] == len(req)
    assert lv["request"]["iterations_per_instance_min"] == min(per_request)
    assert lv["request"]["iterations_per_instance_max"] == max(per_request)


def test_sub_step_table_equals_sql_on_a_recorded_loop(tmp_path):
    # train_inline with an 'optimizer_step' range around each 4 consecutive 'train_step's. The
    # sub-steps' GPU time: ops launched inside them from their thread or from a thread of the
    # process that runs no iteration (the autograd thread launches the backward pass)
    path = _copy("train_inline", tmp_path)
    F.apply_sql(path, f"""
        WITH s AS (SELECT start, end, eventType, globalTid,
                          (ROW_NUMBER() OVER (ORDER BY start) - 1) / 4 AS g
                   FROM NVTX_EVENTS WHERE {IS_TRAIN_STEP})
        INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId)
        SELECT MIN(start) - 1, MAX(end) + 1, MIN(eventType), 'optimizer_step', MIN(globalTid), 0 FROM s GROUP BY g""")
    conn = sqltruth.open_export(path)
    outer = conn.execute("SELECT start, end, globalTid FROM NVTX_EVENTS WHERE text = 'optimizer_step' "
                         "ORDER BY start").fetchall()
    ops = sqltruth._ops_union(conn, "correlationId AS corr, globalPid AS gpid, start, end")
    want_count, want_cpu, want_gpu = [], [], []
    for s, e, g in outer:
        inner = conn.execute(f"SELECT start, end FROM NVTX_EVENTS WHERE {IS_TRAIN_STEP} AND globalTid = ? "
                             "AND start >= ? AND end <= ?", (g, s, e)).fetchall()
        want_count.append(len(inner))
        want_cpu.append(sum(b - a for a, b in inner))
        want_gpu.append(sum(conn.execute(f"""
            SELECT COALESCE(SUM(o.end - o.start), 0) FROM {sqltruth.API_TABLE} AS a
            JOIN ({ops}) AS o ON o.corr = a.correlationId AND (o.gpid >> 24) = (a.globalTid >> 24)
            WHERE (a.globalTid = :g OR ((a.globalTid >> 24) = (:g >> 24) AND a.globalTid NOT IN
                   (SELECT globalTid FROM NVTX_EVENTS WHERE text = 'optimizer_step')))
              AND a.start >= :s AND a.start <= :e AND a.correlationId != 0""",
                                         {"g": g, "s": a0, "e": b0}).fetchone()[0] for a0, b0 in inner))
    it = analyze(nsysan.open_trace(path), rules=False).iterations
    assert it.range_name == "optimizer_step"
    assert len(it.table) == len(outer)
    sub = it.substeps.loc[it.substeps["name"] == "train_step"].sort_values("index")
    assert sub["count"].tolist() == want_count
    assert sub["cpu_ns"].tolist() == want_cpu
    assert sub["gpu_ns"].tolist() == want_gpu


def test_worker_threads_each_their_own_loop():
    # two threads, each its own 'step' loop (different periods): one sequence per thread
    t1 = _build([(i * 1_000_000, i * 1_000_000 + 400_000, "step") for i in range(8)],
                [(i * 1_000_000 + 100, i * 1_000_000 + 1_000, i * 1_000_000 + 300_000, "k") for i in range(8)],
                tid=F.PID)
    t2 = _build([(500_000 + i * 1_500_000, 500_000 + i * 1_500_000 + 400_000, "step") for i in range(6)],
                [(500_000 + i * 1_500_000 + 100, 500_000 + i * 1_500_000 + 1_000, 500_000 + i * 1_500_000 + 200_000,
                  "k") for i in range(6)], tid=F.PID + 1, corr0=100)
    tables = {k: pd.concat([t1[k], t2[k]], ignore_index=True).sort_values("start_ns", kind="stable")
              .reset_index(drop=True) for k in t1}
    conn = _db(tables)
    per_thread = dict(conn.execute("SELECT tid, count(*) FROM nvtx WHERE text = 'step' GROUP BY tid").fetchall())
    it = analyze(F.make_trace(**tables), rules=False).iterations
    assert it.range_name == "step" and it.stats.sequences == len(per_thread)
    assert it.table.groupby("tid").size().to_dict() == per_thread


# ---------------------------------------------------------------- JAX: the jitted step's module range


def test_jax_without_its_own_ranges_picks_the_module_range(tmp_path):
    path = _copy("jax_train", tmp_path)
    F.apply_sql(path, "DELETE FROM NVTX_EVENTS WHERE text IN ('train_step', 'warmup') OR textId IN "
                      "(SELECT id FROM StringIds WHERE value IN ('train_step', 'warmup'))")
    conn = sqltruth.open_export(path)
    mods = dict(conn.execute("""
        SELECT s.value, count(*) FROM NVTX_EVENTS AS n JOIN StringIds AS s ON s.id = n.textId
        WHERE s.value LIKE 'XlaModule:%' AND n.end IS NOT NULL GROUP BY s.value""").fetchall())
    assert mods
    it = analyze(nsysan.open_trace(path), rules=False).iterations
    assert it.range_name is not None
    text = it.range_name.split(":", 1)[1] if it.range_name.startswith("TSL:") else it.range_name
    assert text.startswith("XlaModule:") and "hlo_module=jit_step," in text
    assert not any(w in text for w in ("Thunk", "XlaCompile", "XlaPass", "XlaEmit"))
    assert len(it.table) == mods[text]
    assert "XLA module" in it.how


@pytest.mark.parametrize("name", ["tp", "jax_train", "hf_generate", "train_dataloader", "two_procs"])
def test_recorded_fixtures_keep_their_step(name, tmp_path):
    """The nesting rules change no choice on these recordings: the step the workload times
    (its README's iteration range), checked against the export's instance count."""
    path = _copy(name, tmp_path)
    conn = sqltruth.open_export(path)
    want = {"tp": "train_step", "jax_train": "train_step", "hf_generate": "request",
            "train_dataloader": "train_step", "two_procs": "train_step"}[name]
    it = analyze(nsysan.open_trace(path), rules=False).iterations
    assert it.range_name == want
    assert len(it.table) == len(_leaves(conn, want))


# ---------------------------------------------------------------- the recordings made for issue 38

NEW = ("nested_steps", "grad_accum", "threads_loops", "serve_loop")


def _need(name: str) -> None:
    if not (FIX / name / "trace.sqlite.xz").exists():
        pytest.skip(f"fixture {name} not recorded")


def test_nested_steps_recording(tmp_path):
    """An outer 'train_step' around each group of 14 (4 groups): the 56 innermost instances are the
    iterations, their periods the SQL differences of consecutive completions, none negative."""
    _need("nested_steps")
    path = _copy("nested_steps", tmp_path)
    conn = sqltruth.open_export(path)
    leaves = {(s, e) for s, e, _ in _leaves(conn, "train_step")}
    inst = sqltruth.range_instances(conn, "train_step")
    leaf = [r for r in inst if (r["start"], r["end"]) in leaves]
    assert len(inst) > len(leaf)  # the recording does hold enclosing instances
    done = [r["completion"] for r in leaf]
    a = analyze(nsysan.open_trace(path))
    it = a.iterations
    t = it.table.sort_values("start_ns")
    assert it.range_name == "train_step" and len(t) == len(leaf)
    assert it.stats.enclosing_instances == len(inst) - len(leaf)
    assert t["period_ns"].tolist() == [-1] + [b - a_ for a_, b in zip(done, done[1:])]
    assert (t["period_ns"].iloc[1:] > 0).all() and (t["service_ns"] >= 0).all()
    # the first step compiles (the workload prints 340 ms): a warm-up finding whose iterations are
    # innermost instances, each with its service time from SQL (no instance's work counted twice)
    service = [done[0] - leaf[0]["start"]] + [d - max(r["start"], p) for r, d, p in zip(leaf[1:], done[1:], done)]
    warm = [f for f in a.findings if f.rule == "warmup-outlier"]
    assert len(warm) == 1 and it.warmup >= 1
    assert [e["start_ns"] for e in warm[0].evidence] == [r["start"] for r in leaf[:it.warmup]]
    assert [e["service_ns"] for e in warm[0].evidence] == service[:it.warmup]


def test_synthetic_range_around_itself_two_levels():
    """20 'step's; an outer 'step' around steps 0-13 and another around that one and steps 14-15
    (three levels of one name on one thread): the 20 innermost are the iterations (SQL)."""
    steps = [(1_000_000 + i * 1_000_000, 1_000_000 + i * 1_000_000 + 400_000) for i in range(20)]
    launches = [(s + 100, s + 1_000, s + 300_000, "k") for s, _ in steps]
    outer = [(steps[0][0] - 10, steps[13][1] + 10, "step"), (steps[0][0] - 20, steps[15][1] + 20, "step")]
    tables = _build([(s, e, "step") for s, e in steps] + outer, launches)
    conn = _db(tables)
    leaves = conn.execute("""
        SELECT n.start, max(n.end, coalesce((SELECT max(k.end) FROM api AS a JOIN kernels AS k ON k.corr = a.corr
                                             WHERE a.tid = n.tid AND a.start >= n.start AND a.start <= n.end), 0))
        FROM nvtx AS n WHERE n.text = 'step' AND NOT EXISTS (
            SELECT 1 FROM nvtx AS m WHERE m.text = 'step' AND m.tid = n.tid AND m.rowid != n.rowid
            AND m.start >= n.start AND m.end <= n.end) ORDER BY n.start""").fetchall()
    it = analyze(F.make_trace(**tables), rules=False).iterations
    t = it.table.sort_values("start_ns")
    assert len(t) == len(leaves) and it.stats.enclosing_instances == 2
    assert t["start_ns"].tolist() == [s for s, _ in leaves]
    assert t["end_ns"].tolist() == [d for _, d in leaves]
    assert t["period_ns"].tolist() == [-1] + [b[1] - a[1] for a, b in zip(leaves, leaves[1:])]
    assert (t["period_ns"].iloc[1:] > 0).all() and (t["service_ns"] >= 0).all()


def test_grad_accum_recording(tmp_path):
    """4 micro-batches per optimizer step ('train_step'), the all-reduce in the last, the optimizer
    after them, on 2 ranks: the iteration is the optimizer step, the micro-batches its sub-steps
    (per step: SQL's count of 'micro_batch' inside it on its thread)."""
    _need("grad_accum")
    path = _copy("grad_accum", tmp_path)
    conn = sqltruth.open_export(path)
    steps = conn.execute(f"SELECT start, end, globalTid FROM NVTX_EVENTS WHERE {IS_TRAIN_STEP} "
                         "ORDER BY start, globalTid").fetchall()
    per_step = {(s, g & sqltruth.MASK24): conn.execute(
        f"SELECT count(*) FROM NVTX_EVENTS WHERE {_is('micro_batch')} AND globalTid = ? AND start >= ? AND end <= ?",
        (g, s, e)).fetchone()[0] for s, e, g in steps}
    it = analyze(nsysan.open_trace(path), rules=False).iterations
    assert it.range_name == "train_step" and len(it.table) == len(steps)
    v = {c.name: c.verdict for c in it.candidates}
    assert v["micro_batch"].startswith("a sub-step of 'train_step'")
    sub = it.substeps.loc[it.substeps["name"] == "micro_batch"].merge(it.table[["index", "start_ns"]], on="index")
    got = {(int(s), int(t)): int(c) for s, t, c in zip(sub["start_ns"], sub["tid"], sub["count"])}
    assert got == per_step


def test_threads_loops_recording(tmp_path):
    """Three worker threads, each its own 'worker_step' loop: one sequence per thread, named by the
    thread (ThreadNames), with SQL's count and median period. An instance's completion also takes
    the GPU work launched during it by the process's threads that run no instance (PyTorch's
    autograd thread: the iteration model's rule, see ``iterations``)."""
    _need("threads_loops")
    path = _copy("threads_loops", tmp_path)
    conn = sqltruth.open_export(path)
    names = dict(conn.execute("SELECT t.globalTid & 16777215, s.value FROM ThreadNames AS t "
                              "JOIN StringIds AS s ON s.id = t.nameId").fetchall())
    seqs = sqltruth._sequences(sqltruth.range_instances(conn, "worker_step"))
    it = analyze(nsysan.open_trace(path), rules=False).iterations
    assert it.range_name == "worker_step" and it.stats.sequences == len(seqs) > 1
    got = {(s["pid"], s["tid"]): s for s in it.sequences}
    assert set(got) == set(seqs)
    assert len({p for p, _ in seqs}) == 1
    pid = next(iter(seqs))[0]
    for key, seq in seqs.items():
        s = got[key]
        assert s["thread"] == names[key[1]]
        assert s["count"] + s["warmup"] == len(seq)
        helper = [conn.execute(
            "SELECT MAX(gpu_end) FROM _truth_launch WHERE ((gtid >> 24) & 16777215) = ? AND (gtid & 16777215) "
            f"NOT IN ({','.join(str(t) for _, t in seqs)}) AND start >= ? AND start <= ?",
            (pid, r["start"], r["end"])).fetchone()[0] for r in seq]
        done = [max(r["completion"], h or 0) for r, h in zip(seq, helper)][s["warmup"]:]
        assert s["period_p50_ns"] == int(round(float(np.median(np.diff(done)))))


def test_serve_loop_recording(tmp_path):
    """Requests of 4 tokens each: the request or the token is the iteration, and the other level is
    shown (tokens per request equal SQL's count)."""
    _need("serve_loop")
    path = _copy("serve_loop", tmp_path)
    conn = sqltruth.open_export(path)
    it = analyze(nsysan.open_trace(path), rules=False).iterations
    assert it.range_name in ("request", "token")
    lv = {lv["name"]: lv for lv in it.levels}
    if it.range_name == "request":
        reqs = conn.execute(f"SELECT start, end, globalTid FROM NVTX_EVENTS WHERE {_is('request')} "
                            "ORDER BY start").fetchall()
        want = [conn.execute(f"SELECT count(*) FROM NVTX_EVENTS WHERE {_is('token')} AND globalTid = ? "
                             "AND start >= ? AND end <= ?", (g, s, e)).fetchone()[0] for s, e, g in reqs]
        assert lv["token"]["role"] == "sub-step"
        assert it.substeps.loc[it.substeps["name"] == "token"].sort_values("index")["count"].tolist() == want
    else:
        assert lv["request"]["role"] == "encloses the iterations"
