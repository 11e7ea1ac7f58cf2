"""Ranks aligned on their collectives: waiting vs transfer, the straggler and its cause, and no
straggler when the ranks are in step. Hand-built two-rank traces (one process per GPU, as torchrun
starts them) whose truth is written out here; the two-process recording (two_procs) has no
communicator shared by its processes, so nothing is aligned there."""

from __future__ import annotations

import factories as F
import numpy as np
import pandas as pd

from nsysan.analyses.ranks import RankInputs, analyze_ranks
from nsysan.analysis import analyze

NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
STEP = 10_000_000  # 10 ms


def _rank(pid: int, dev: int, late_ns: int, corr0: int, n: int = 12) -> dict[str, pd.DataFrame]:
    """``n`` 'train_step' ranges of one rank. Each: the host works ``late_ns`` before launching a 4 ms
    compute kernel, then an all-reduce that ends for every rank 1 ms after the latest rank arrives,
    and waits for it (a cudaStreamSynchronize: the step reads its loss)."""
    gpid = (1 << 48) | (pid << 24)
    k_rows, names, a_rows, nv = [], [], [], []
    corr = corr0
    for i in range(n):
        s = 1_000_000_000 + i * STEP
        nv.append((s, s + 9_000_000, "train_step"))
        c0 = s + 100_000 + late_ns
        k_rows.append((c0, c0 + 4_000_000, 7))
        names.append("gemm")
        a_rows.append((c0 - 50_000, c0 - 40_000, "cudaLaunchKernel", corr))
        corr += 1
        arrive = c0 + 4_000_000
        last = s + 100_000 + LATEST[0] + 4_000_000
        k_rows.append((arrive, last + 1_000_000, 20))
        names.append(NCCL)
        a_rows.append((arrive - 30_000, arrive - 20_000, "cudaLaunchKernel", corr))
        corr += 1
        # the step ends reading its loss (``.item()``): the host waits for the all-reduce to finish
        a_rows.append((arrive - 10_000, last + 1_000_000 + 5_000, "cudaStreamSynchronize", 900_000 + corr))
    k = F.kernels(k_rows, corr_start=corr0).assign(name=pd.Categorical(names), device_id=dev, pid=pid,
                                                   global_pid=gpid)
    a = F.api(a_rows, tid=pid).assign(pid=pid, global_pid=gpid, global_tid=gpid | pid, tid=pid)
    v = F.nvtx(nv, tid=pid).assign(pid=pid, global_tid=gpid | pid, tid=pid)
    return {"kernels": k, "cuda_api": a, "nvtx": v}


LATEST = [0]


def _trace(lates: list[int]):
    LATEST[0] = max(lates)
    parts = [_rank(100 + 100 * r, r, late, corr0=1 + 1000 * r) for r, late in enumerate(lates)]
    tables = {k: pd.concat([p[k] for p in parts], ignore_index=True).sort_values("start_ns", kind="stable")
              .reset_index(drop=True) for k in parts[0]}
    return F.make_trace(**tables)


def test_straggler_named_with_its_cause_and_the_wait_it_causes():
    a = analyze(_trace([0, 3_000_000]))  # rank 1's host is 3 ms late every step
    r = analyze_ranks(RankInputs.of(a))
    assert len(r.ranks) == 2 and list(r.ranks["device_id"]) == [0, 1]
    s = r.straggler
    assert s is not None and s["rank"] == 1
    steady = a.iterations.table.loc[~a.iterations.table["warmup"]]
    n = int((steady["pid"] == 100).sum())
    # truth: rank 0 arrives 3 ms earlier at each all-reduce and spins until rank 1 arrives
    assert s["arrived_last"] == s["collectives"] == n
    assert s["median_lead_ns"] == 3_000_000
    assert s["others_waited_ns"] == 3_000_000 * n
    r0 = r.ranks.set_index("rank").loc[0]
    r1 = r.ranks.set_index("rank").loc[1]
    assert r0["wait_per_iter_ns"] == 3_000_000 and r1["wait_per_iter_ns"] == 0
    assert r0["transfer_per_iter_ns"] == r1["transfer_per_iter_ns"] == 1_000_000
    # the cause: rank 1's GPU idles while its host is late (3 ms a step more than rank 0's)
    assert s["causes"] and s["causes"][0]["column"] == "host_idle_per_iter_ns"
    assert "rank 1 arrives last" in r.verdict
    f = [x for x in a.findings if x.rule == "rank-imbalance"]
    assert len(f) == 1 and f[0].impact_ns > 0 and "rank 1" in f[0].message


def test_ranks_in_step_name_no_straggler():
    a = analyze(_trace([0, 20_000]))  # 20 us apart: noise, not a straggler
    r = analyze_ranks(RankInputs.of(a))
    assert r.straggler is None and r.verdict.startswith("ranks in step")
    assert not [x for x in a.findings if x.rule == "rank-imbalance"]


def test_collective_counts_that_differ_by_one_are_aligned_on_those_that_run_together():
    """Issue 38 item 4: one rank's capture holds one collective fewer (its last one dropped): the
    others' k-th collectives still run at the same time as its k-th, so they are aligned on those
    and the straggler is still named, never dropped silently."""
    t = _trace([0, 3_000_000])
    k = t.kernels
    whole = analyze_ranks(RankInputs.of(analyze(t)))
    for which in (-1, 0):  # the last one, or the first one
        drop = k.index[(k["pid"] == 200) & (k["name"].astype(str) == NCCL)][which]
        from dataclasses import replace

        a = analyze(replace(t, kernels=k.drop(index=drop).reset_index(drop=True)))
        r = analyze_ranks(RankInputs.of(a))
        assert not r.not_aligned and len(r.aligned)
        assert r.straggler is not None and r.straggler["rank"] == whole.straggler["rank"]
        assert "different numbers" in r.verdict and "aligned on" in r.verdict


def test_collectives_that_never_run_together_are_not_aligned():
    """Counts that differ and no shift under which the k-th kernels of both ranks overlap in time
    (here: one rank's collectives all moved far away): not aligned, and the verdict says why."""
    t = _trace([0, 3_000_000])
    k = t.kernels
    from dataclasses import replace

    sel = ((k["pid"] == 200) & (k["name"].astype(str) == NCCL)).to_numpy()
    drop = k.index[sel][-1]
    moved = k.assign(start_ns=np.where(sel, k["start_ns"] + 10**12, k["start_ns"]),
                     end_ns=np.where(sel, k["end_ns"] + 10**12, k["end_ns"]))
    kept = moved.drop(index=drop).sort_values("start_ns", kind="stable").reset_index(drop=True)
    a = analyze(replace(t, kernels=kept))
    r = analyze_ranks(RankInputs.of(a))
    assert r.straggler is None and r.not_aligned and "different numbers" in r.not_aligned[0]


def test_single_rank_world_reductions_are_not_aligned(analysis):
    a = analysis("two_procs")
    r = analyze_ranks(RankInputs.of(a))
    assert len(r.ranks) == 2 and len(r.aligned) == 0 and r.straggler is None
    assert np.all(r.ranks["wait_per_iter_ns"] == 0)


def test_one_export_per_rank_gives_the_same_ranks():
    """Each rank in its own export (torchrun ... nsys profile -o rank%q{RANK}): per-rank payloads of a
    few numbers and 3 values per collective, combined on one clock, give the same straggler."""
    from dataclasses import replace

    from nsysan.analyses.ranks import combine, rank_payloads

    whole = _trace([0, 3_000_000])
    one = analyze_ranks(RankInputs.of(analyze(whole)))
    payloads = []
    shift = -7_000_000_000  # the second export's clock reads 7 s more: its offset brings it back
    for pid, off in ((100, 0), (200, shift)):
        part = replace(whole, **{k: getattr(whole, k).loc[getattr(whole, k)["pid"] == pid]
                                 .assign(start_ns=lambda d: d["start_ns"] - off, end_ns=lambda d: d["end_ns"] - off)
                                 .reset_index(drop=True) for k in ("kernels", "cuda_api", "nvtx")})
        payloads += rank_payloads(analyze(part), offset_ns=off, trace=f"rank{pid // 100 - 1}.sqlite")
    many = combine(payloads)
    assert many.straggler["rank"] == one.straggler["rank"] == 1
    assert many.straggler["others_waited_ns"] == one.straggler["others_waited_ns"]
    assert many.ranks["wait_per_iter_ns"].tolist() == one.ranks["wait_per_iter_ns"].tolist()
    assert sum(len(p["comm"]["start_ns"]) for p in payloads) == len(one.aligned)


def _split_by_pid(src, dst, keep_pid: int) -> None:
    """A copy of an export with only one process's events (one export per rank)."""
    from sqltruth import only_pid

    only_pid(src, dst, keep_pid, vacuum=True)


def test_cross_trace_summary_of_one_export_per_process(fixture_dir, tmp_path, capsys):
    """two_procs split into one export per process: the summary knows they hold ranks (processes with
    communication kernels on one clock), aligns nothing (each NCCL world has one rank) and so names
    no straggler, instead of comparing unrelated numbers."""
    import json
    import sqlite3

    from nsysan.cli import main

    src = fixture_dir / "two_procs.sqlite"
    pids = sorted({r[0] for r in sqlite3.connect(f"file:{src}?mode=ro&immutable=1", uri=True).execute(
        "SELECT DISTINCT (globalPid >> 24) & 16777215 FROM CUPTI_ACTIVITY_KIND_KERNEL")})
    assert len(pids) == 2
    files = []
    for i, p in enumerate(pids):
        f = tmp_path / f"rank{i}.sqlite"
        _split_by_pid(src, f, p)
        files.append(str(f))
    out = tmp_path / "out"
    assert main(["analyze", *files, "--out-dir", str(out), "-q", "--jobs", "1"]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["schema"] == "nsysan.cross/2" and "ranks" in s
    assert len(s["ranks"]["ranks"]) == 2 and s["ranks"]["collectives_aligned"] == 0
    assert not any(t["straggler"] for t in s["traces"])
    assert "ranks:" in capsys.readouterr().out


def test_unrelated_programs_side_by_side_have_no_straggler(fixture_dir, tmp_path):
    """Issue 49 item 9: three exports of three programs (by SQL: META_DATA_CAPTURE's command and script
    differ) are not ranks of one job: none is a straggler, though one's p50 passes 1.2x the median."""
    import json
    import shutil
    import sqlite3

    from nsysan.analyses.ranks import SLOWER, cross_stragglers
    from nsysan.cli import main

    names = ["decode_eager", "timing", "ladder_baseline"]
    programs = set()
    for n in names:
        con = sqlite3.connect(f"file:{fixture_dir / (n + '.sqlite')}?mode=ro&immutable=1", uri=True)
        programs.add(con.execute("SELECT value FROM META_DATA_CAPTURE WHERE name = 'PROCESS_0:ARGUMENT_0'").fetchone())
    assert len(programs) == 3
    files = []
    for n in names:
        shutil.copy(fixture_dir / f"{n}.sqlite", tmp_path / f"{n}.sqlite")
        files.append(str(tmp_path / f"{n}.sqlite"))
    out = tmp_path / "out"
    assert main(["analyze", *files, "--out-dir", str(out), "-q", "--jobs", "1"]) == 0
    s = json.loads((out / "summary.json").read_text())
    p50s = [t["p50_ns"] for t in s["traces"]]
    med = sorted(p50s)[1]
    assert any(p > SLOWER * med for p in p50s)  # the old rule would have named one
    assert not any(t["straggler"] for t in s["traces"])
    # the same numbers as ranks of one program: the slow one is named
    same = [{"trace": t["trace"], "p50_ns": t["p50_ns"], "program": "python3 train.py"} for t in s["traces"]]
    assert cross_stragglers(same)[2] == [p > SLOWER * med for p in p50s]
