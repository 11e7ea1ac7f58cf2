"""Distributed training recorded on two H200s (workloads/training/ddp.py, one process a GPU, NCCL 2.28):
DDP with the all-reduce overlapped with backward (``ddp_overlap``), the all-reduce forced after
backward (``ddp_serial``), rank 1 slowed by 8 ms of host work per step (``ddp_straggler``), tensor
parallel (``tp``), FSDP (``fsdp``) and a two-stage pipeline (``pipeline``); ``*_rank0/1`` are the
same runs recorded as one export per rank.

Truth is SQL written here on each export: NCCL kernels per device (count, time, collective type
from the name), the compute kernels running beside them (interval arithmetic in this file), the
``train_step`` ranges and ``load_batch`` ranges per process, the step times by the completion of
the GPU work launched inside them (``test_recorded_workloads.truth_iterations``).
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import numpy as np
import pytest
import sqltruth
from conftest import FIXTURE_NAMES
from test_recorded_workloads import _seq, truth_iterations

NAMES = ("ddp_overlap", "ddp_serial", "ddp_straggler", "tp", "fsdp", "pipeline")
HAVE = [n for n in NAMES if n in FIXTURE_NAMES]
pytestmark = pytest.mark.skipif(not HAVE, reason="distributed fixtures missing")

NCCL = re.compile(r"^nccl(Dev)?Kernel_")


def _con(fixture_dir: Path, name: str) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{fixture_dir / (name + '.sqlite')}?mode=ro&immutable=1", uri=True)


def _kernels(con: sqlite3.Connection) -> list[tuple[int, int, int, int, str]]:
    """(device, pid, start, end, name) of every kernel."""
    return [(d, gp >> 24 & 0xFFFFFF, s, e, n) for d, gp, s, e, n in con.execute(
        """SELECT k.deviceId, k.globalPid, k.start, k."end", s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k
           JOIN StringIds s ON s.id = coalesce(k.demangledName, k.shortName)""")]


def _covered(merged: list[tuple[int, int]], s: int, e: int) -> int:
    return sum(max(0, min(e, me) - max(s, ms)) for ms, me in merged if me > s and ms < e)


def _comm_truth(con: sqlite3.Connection, t0: int, t1: int) -> dict[int, dict[str, int]]:
    """Per device, NCCL kernels starting in [t0, t1): count, total, exposed (no other kernel on the
    device at the same time)."""
    ks = _kernels(con)
    out: dict[int, dict[str, int]] = {}
    for dev in sorted({k[0] for k in ks}):
        comp = sqltruth.union([(s, e) for d, _, s, e, n in ks if d == dev and not NCCL.match(n)])
        comm = [(s, e) for d, _, s, e, n in ks if d == dev and NCCL.match(n) and t0 <= s < t1]
        out[dev] = {"count": len(comm), "total": sum(e - s for s, e in comm),
                    "exposed": sum((e - s) - _covered(comp, s, e) for s, e in comm)}
    return out


@pytest.mark.parametrize("name", HAVE)
def test_communication_vs_compute_per_device_from_sql(name, analysis, fixture_dir):
    a = analysis(name)
    con = _con(fixture_dir, name)
    truth = _comm_truth(con, a.steady.start_ns, a.steady.end_ns)
    assert len(truth) == 2  # two GPUs
    got = a.collectives.groupby("device_id").agg(count=("count", "sum"), total=("total_ns", "sum"),
                                                 exposed=("exposed_ns", "sum"))
    for dev, t in truth.items():
        assert t["count"] > 0
        assert int(got.loc[dev, "count"]) == t["count"]
        assert int(got.loc[dev, "total"]) == t["total"]
        assert int(got.loc[dev, "exposed"]) == t["exposed"]
    # busy per device splits compute from communication: comm_ns is the union of the NCCL kernels
    for _, r in a.busy_steady.iterrows():
        assert int(r["comm_ns"]) <= truth[int(r["device_id"])]["total"]
        assert int(r["compute_ns"]) + int(r["comm_exposed_ns"]) <= int(r["busy_ns"])


def test_collective_types_from_kernel_names(analysis, fixture_dir):
    want = {"ddp_overlap": {"AllReduce"}, "ddp_serial": {"AllReduce"}, "tp": {"AllReduce"},
            "fsdp": {"AllGather", "ReduceScatter"}, "pipeline": {"SendRecv"}}
    for name, kinds in want.items():
        if name not in HAVE:
            continue
        con = _con(fixture_dir, name)
        w = analysis(name).steady  # (DDP's set-up all-gathers run before it)
        names = {n for _, _, s, _, n in _kernels(con) if NCCL.match(n) and w.start_ns <= s < w.end_ns}
        by_sql = {k for k in ("AllReduce", "AllGather", "ReduceScatter", "SendRecv") if any(k in n for n in names)}
        assert by_sql == kinds
        assert set(analysis(name).collectives["collective"]) == kinds


def test_forced_after_backward_is_all_exposed_and_ddp_hides_most(analysis, fixture_dir):
    if not {"ddp_overlap", "ddp_serial"} <= set(HAVE):
        pytest.skip("fixtures missing")
    s, o = analysis("ddp_serial"), analysis("ddp_overlap")
    ts = _comm_truth(_con(fixture_dir, "ddp_serial"), s.steady.start_ns, s.steady.end_ns)
    to = _comm_truth(_con(fixture_dir, "ddp_overlap"), o.steady.start_ns, o.steady.end_ns)
    for dev in (0, 1):
        assert ts[dev]["exposed"] == ts[dev]["total"]  # SQL: no NCCL kernel overlaps compute
        assert to[dev]["exposed"] < 0.3 * to[dev]["total"]  # SQL: DDP hides most of it
    assert {f.rule for f in s.findings} >= {"exposed-communication"}
    assert "exposed-communication" not in {f.rule for f in o.findings}
    f = next(f for f in s.findings if f.rule == "exposed-communication")
    assert "none of it overlapped" in f.message
    # the saving is wall-clock: both GPUs exposed at the same time count once
    assert f.impact_ns <= max(ts[d]["exposed"] for d in (0, 1))


def _pid_of(con: sqlite3.Connection, range_name: str) -> dict[int, float]:
    """Per pid: median duration of the NVTX range ``range_name``."""
    rows = con.execute("""SELECT n.globalTid, n."end" - n.start FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
                          WHERE n.eventType = 59 AND coalesce(n.text, s.value) = ?""", (range_name,)).fetchall()
    per: dict[int, list[int]] = {}
    for g, d in rows:
        per.setdefault(g >> 24 & 0xFFFFFF, []).append(d)
    return {p: float(np.median(v)) for p, v in per.items()}


def _period_p50(con: sqlite3.Connection) -> float:
    rows = truth_iterations(con, "train_step")
    return float(np.median([b["done"] - a["done"] for s in _seq(rows).values() for a, b in zip(s, s[1:])]))


def test_straggler_named_with_its_cause_and_saving(analysis, fixture_dir):
    if not {"ddp_straggler", "ddp_overlap"} <= set(HAVE):
        pytest.skip("fixtures missing")
    a = analysis("ddp_straggler")
    con = _con(fixture_dir, "ddp_straggler")
    load = _pid_of(con, "load_batch")
    slow_pid = max(load, key=load.get)
    assert load[slow_pid] > 5e6 > 50 * min(load.values())  # SQL: one process spends ~8 ms in load_batch
    s = a.ranks.straggler
    assert s is not None and s["pid"] == slow_pid
    assert s["causes"][0]["column"] == "host_idle_per_iter_ns"
    assert s["host_idle_activity"] == "nvtx:load_batch"
    f = next(f for f in a.findings if f.rule == "rank-imbalance")
    assert f.impact_ns == s["saving_ns"]  # first in the allocation: nothing taken before it
    # the saving is what the recordings show: the straggler's step minus the same job's without it
    # (periods by SQL on both exports), over its steady iterations
    want = (_period_p50(con) - _period_p50(_con(fixture_dir, "ddp_overlap"))) * s["saving_ns"] / s["saving_per_iter_ns"]
    assert s["saving_ns"] == pytest.approx(want, rel=0.1)
    # the waiting is not "exposed communication": overlap cannot hide it
    assert "exposed-communication" not in {x.rule for x in a.findings}


@pytest.mark.parametrize("name", [n for n in ("ddp_overlap", "ddp_serial", "tp", "pipeline") if n in HAVE])
def test_ranks_in_step_are_not_called_stragglers(name, analysis, fixture_dir):
    a = analysis(name)
    assert len(a.ranks.ranks) == 2
    assert a.ranks.straggler is None
    assert "rank-imbalance" not in {f.rule for f in a.findings}
    # SQL: step times of the two ranks agree (they run in lockstep)
    con = _con(fixture_dir, name)
    rows = truth_iterations(con, "train_step")
    meds = [float(np.median([b["done"] - x["done"] for x, b in zip(s, s[1:])])) for s in _seq(rows).values()]
    assert len(meds) == 2 and abs(meds[0] - meds[1]) < 0.02 * max(meds)
    got = sorted(int(v) for v in a.ranks.ranks["period_p50_ns"])
    assert got == sorted(int(round(m)) for m in meds)


def test_pipeline_waiting_is_a_dependency_not_a_straggler(analysis):
    if "pipeline" not in HAVE:
        pytest.skip("pipeline missing")
    r = analysis("pipeline").ranks
    assert "point-to-point" in r.verdict
    assert int(r.ranks["wait_per_iter_ns"].sum()) > 0


@pytest.mark.parametrize("base", [b for b in ("ddp_overlap", "ddp_straggler") if f"{b}_rank1" in FIXTURE_NAMES])
def test_one_export_per_rank_through_the_cli(base, fixture_dir, tmp_path, monkeypatch):
    from nsysan.cli import main

    monkeypatch.chdir(tmp_path)
    files = [str(fixture_dir / f"{base}_rank{r}.sqlite") for r in (0, 1)]
    assert main(["analyze", *files, "--out-dir", str(tmp_path / "out"), "-q"]) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    ranks = summary["ranks"]
    assert len(ranks["ranks"]) == 2
    page = (tmp_path / "out" / "summary.html").read_text()
    assert page.count('class="rank-row') == 2 and "rank-lanes" in page
    csv_rows = (tmp_path / "out" / "ranks.csv").read_text().splitlines()
    assert len(csv_rows) == 3 and "wait_exposed_per_iter_ns" in csv_rows[0]
    st = ranks["straggler"]
    if base == "ddp_overlap":
        assert st is None
    else:
        con = _con(fixture_dir, f"{base}_rank1")
        assert _pid_of(con, "load_batch") and max(_pid_of(con, "load_batch").values()) > 5e6  # SQL: rank 1 is slow
        assert st is not None and st["trace"].endswith(f"{base}_rank1.sqlite")
        assert st["causes"][0]["column"] == "host_idle_per_iter_ns"
    # each rank's step time equals its own export's SQL
    for row in ranks["ranks"]:
        con = sqlite3.connect(f"file:{row['trace']}?mode=ro&immutable=1", uri=True)
        rows = truth_iterations(con, "train_step")
        steady = row["iterations"]
        assert steady >= 25
        per = [b["done"] - x["done"] for s in _seq(rows).values() for x, b in zip(s, s[1:])]
        assert abs(row["period_p50_ns"] - float(np.median(per))) < 0.05 * float(np.median(per))
