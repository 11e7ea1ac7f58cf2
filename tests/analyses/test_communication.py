"""Communication vs compute: the op classification, exposed vs hidden collectives, and the
exposed-communication rule, on hand-built traces whose truth is written out here, and on the
public NCCL export (ZhiyiHu1999) with SQL truth."""

from __future__ import annotations

import sqlite3

import factories as F
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from conftest import CORPUS

from nsysan.analyses.opclass import collective_of, is_communication
from nsysan.analysis import analyze

NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


@pytest.mark.parametrize("name,coll", [
    (NCCL, "AllReduce"), ("ncclKernel_AllReduce_TREE_LL_Sum_float(ncclDevComm *, unsigned long, ncclWork *)", "AllReduce"),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "AllGather"),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(x)", "ReduceScatter"),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "SendRecv"),
    ("void <unnamed>::oneRankReduce<FuncPreMulSum<float>>(void *, void *, unsigned long, unsigned long, bool)",
     "Reduce (1 rank)"),
    ("void at::native::vectorized_elementwise_kernel<4, float>(int, float)", None),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_nccl_like", None),
])
def test_collective_from_kernel_name(name, coll):
    assert collective_of(name) == coll and is_communication(name) == (coll is not None)


def _step_trace(comm_at: tuple[int, int]) -> tuple:
    """10 'step' ranges of 1 ms; each launches a compute kernel [0, 800) us on stream 7 and an NCCL
    all-reduce at ``comm_at`` (us, relative to the step) on stream 20."""
    k_rows, names, a_rows, nv = [], [], [], []
    corr = 1
    for i in range(10):
        s = 1_000_000 + i * 1_000_000
        nv.append((s, s + 50_000, "step"))
        for (ks, ke, stream, name) in ((0, 800_000, 7, "gemm"), (comm_at[0] * 1000, comm_at[1] * 1000, 20, NCCL)):
            k_rows.append((s + 10_000 + ks, s + 10_000 + ke, stream))
            names.append(name)
            a_rows.append((s + corr % 2 * 100 + 10, s + corr % 2 * 100 + 60, "cudaLaunchKernel", corr))
            corr += 1
    k = F.kernels(k_rows).assign(name=pd.Categorical(names))
    return F.make_trace(kernels=k, cuda_api=F.api(a_rows), nvtx=F.nvtx(nv)), k


def test_all_reduce_after_compute_is_exposed_and_fires():
    trace, k = _step_trace((800, 1000))
    a = analyze(trace)
    steady = a.iterations.table.loc[~a.iterations.table["warmup"]]
    # truth: every steady step's 200 us all-reduce runs after its compute kernel
    want = 200_000 * len(steady)
    row = a.busy_steady.iloc[0]
    assert int(row["comm_ns"]) == want and int(row["comm_exposed_ns"]) == want
    assert int(row["compute_ns"]) == 800_000 * len(steady)
    c = a.collectives.iloc[0]
    assert c["collective"] == "AllReduce" and int(c["exposed_ns"]) == want and int(c["hidden_ns"]) == 0
    f = [x for x in a.findings if x.rule == "exposed-communication"]
    assert len(f) == 1 and f[0].impact_ns == want and "none of it overlapped" in f[0].message


def test_all_reduce_under_compute_is_hidden_and_quiet():
    trace, _ = _step_trace((300, 500))
    a = analyze(trace)
    row = a.busy_steady.iloc[0]
    assert int(row["comm_ns"]) > 0 and int(row["comm_exposed_ns"]) == 0
    assert int(a.collectives.iloc[0]["hidden_ns"]) == int(a.collectives.iloc[0]["total_ns"])
    assert not [x for x in a.findings if x.rule == "exposed-communication"]
    # busy is the union (compute hides the all-reduce), compute excludes communication
    assert int(row["busy_ns"]) == int(row["compute_ns"])


def test_communication_is_not_compute_for_the_compute_rules():
    trace, _ = _step_trace((800, 1000))
    a = analyze(trace)
    comm_rows = a.ops.loc[a.ops["role"] == "communication"]
    assert len(comm_rows) == 10 and set(comm_rows["name"].astype(str)) == {NCCL}


def test_public_nccl_export_reads_as_one_exposed_all_reduce():
    path = next(iter(sorted(CORPUS.glob("ZhiyiHu1999*.sqlite"))), None) if CORPUS.exists() else None
    if path is None:
        pytest.skip("public corpus not present (../shared)")
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    (n, dur), = con.execute("""SELECT count(*), sum(k."end" - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k
                               JOIN StringIds s ON s.id = k.demangledName WHERE s.value LIKE 'ncclKernel_AllReduce%'""")
    from nsysan import open_trace

    a = analyze(open_trace(path))
    c = a.collectives
    assert len(c) == 1 and c.iloc[0]["collective"] == "AllReduce" and int(c.iloc[0]["count"]) == n == 1
    assert int(c.iloc[0]["total_ns"]) == dur and int(c.iloc[0]["exposed_ns"]) == dur
    assert int(a.busy_capture.iloc[0]["compute_ns"]) == 0
    # the all-reduce is wholly exposed, but there is no compute to overlap it with (issue 38's audit):
    # overlap saves nothing, so no exposed-communication finding promises it
    assert not [x for x in a.findings if x.rule == "exposed-communication"]
    # communicator set-up is NCCL's own range, never the iteration nor a ranked finding
    assert "NCCL:ncclCommInitRank" in set(a.nccl_calls["name"])
    # the communicator's set-up is never a loop's cost; in a run with no loop (issue 48: its one-time
    # costs are its cost) it may be named, as one-time work with the one-time fix
    assert all("CommInit" not in x.message or ("one-time" in x.suggestion and not len(a.iterations.table))
               for x in a.findings if x.impact_ns > 0)


def test_iteration_breakdown_adds_up_and_splits_compute_comm_idle():
    from nsysan.analyses.breakdown import breakdown_summary

    trace, _ = _step_trace((800, 1000))
    a = analyze(trace, rules=False)
    bd = a.breakdown
    steady = bd.loc[~bd["warmup"]]
    parts = steady[["compute_ns", "comm_exposed_ns", "copy_exposed_ns", "idle_ns"]].sum(axis=1)
    assert (parts == steady["span_ns"]).all()
    # each later step: 1 ms since the previous completion = 800 us compute + 200 us all-reduce
    later = steady.loc[steady["index"] > 0]
    assert (later["span_ns"] == 1_000_000).all()
    assert (later["compute_ns"] == 800_000).all() and (later["comm_exposed_ns"] == 200_000).all()
    assert (later["idle_ns"] == 0).all()
    s = breakdown_summary(bd)
    assert s["iterations"] == len(steady)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["NCCL:AllReduce", "ncclAllReduce", "NCCL:", "x NCCL:", "step", None]),
                          st.sampled_from(["NCCL", "nccl", " NCCL", "NCCL ", "TensorRT", "", None, float("nan")])),
                min_size=1, max_size=25))
def test_nccl_ranges_are_the_rows_a_per_row_test_picks(rows):
    """``nccl_calls`` decides each distinct name and domain once: the same rows as the per-row
    ``astype(str)`` test (domain ``NCCL`` in any case, or a name starting ``NCCL:``), counted by name."""
    from nsysan.analyses.comm import nccl_calls

    rg = pd.DataFrame({"name": pd.Series([r[0] for r in rows], dtype=object),
                       "domain": pd.Series([r[1] for r in rows], dtype=object),
                       "dur_ns": np.arange(1, len(rows) + 1, dtype=np.int64) * 10,
                       "start_ns": np.arange(len(rows), dtype=np.int64)})
    m = (rg["domain"].astype(str).str.upper() == "NCCL").to_numpy() | \
        rg["name"].astype(str).str.startswith("NCCL:").to_numpy()
    want = rg.loc[m].groupby("name", sort=True)["dur_ns"].agg(["size", "sum"])
    got = nccl_calls(rg).set_index("name").sort_index()
    assert got["count"].tolist() == want["size"].tolist() and got["total_ns"].tolist() == want["sum"].tolist()
    assert got.index.tolist() == want.index.tolist()
