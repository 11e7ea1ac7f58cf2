"""``nsysan analyze --scheduler ADDRESS``: the per-trace work on a Dask distributed cluster.

The test starts a real local cluster (a scheduler and two worker processes on this machine, talking
TCP), points the CLI at its address, and checks the result against a local run of the same traces."""

from __future__ import annotations

import json
import shutil

import pytest

from nsysan.cli import main

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def cluster():
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                      host="127.0.0.1") as c:
        yield c


def test_ranks_on_a_dask_cluster_match_a_local_run(cluster, fixture_dir, tmp_path, capsys):
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    # three "ranks": two fast steps of the ladder and the slow baseline (the straggler)
    for i, name in enumerate(["ladder_overlap", "ladder_worker", "ladder_baseline"]):
        shutil.copy(fixture_dir / f"{name}.sqlite", ranks / f"rank{i}.sqlite")
    traces = sorted(str(p) for p in ranks.glob("rank*.sqlite"))
    remote, local = tmp_path / "remote", tmp_path / "local"
    assert main(["analyze", *traces, "--out-dir", str(remote), "-q", "--scheduler", cluster.scheduler_address]) == 0
    out = capsys.readouterr()
    assert "3/3 traces done" in out.err
    lines = {ln.split()[0]: ln for ln in out.out.splitlines()[1:] if ln.strip() and not ln.startswith("wrote")}
    assert "STRAGGLER" in lines["rank2.sqlite"] and "STRAGGLER" not in lines["rank0.sqlite"]
    summary = json.loads((remote / "summary.json").read_text())
    assert [t["straggler"] for t in summary["traces"]] == [False, False, True]
    assert all(t["slowest_kernel"] for t in summary["traces"])

    assert main(["analyze", *traces, "--out-dir", str(local), "-q", "--jobs", "1"]) == 0
    for i in range(3):
        a = json.loads((remote / f"rank{i}.json").read_text())
        b = json.loads((local / f"rank{i}.json").read_text())
        assert a == b  # same analysis, wherever it ran
        assert (remote / f"rank{i}.html").stat().st_size > 10_000
    assert json.loads((local / "summary.json").read_text())["traces"] == summary["traces"]


def test_a_bad_trace_on_the_cluster_is_reported_not_fatal(cluster, fixture_dir, tmp_path, capsys):
    bad = tmp_path / "rank1.sqlite"
    bad.write_bytes(b"not a database at all" * 100)
    good = tmp_path / "rank0.sqlite"
    shutil.copy(fixture_dir / "launch_graph.sqlite", good)
    code = main(["analyze", str(good), str(bad), "--out-dir", str(tmp_path / "o"), "-q",
                 "--scheduler", cluster.scheduler_address])
    assert code == 1
    err = capsys.readouterr().err
    assert "NotSQLiteError" in err and "rank1.sqlite" in err
    assert (tmp_path / "o" / "rank0.json").exists()


def test_unreachable_scheduler_is_a_clear_error(fixture_dir, tmp_path, capsys):
    code = main(["analyze", str(fixture_dir / "launch_graph.sqlite"), "--out-dir", str(tmp_path), "-q",
                 "--scheduler", "tcp://127.0.0.1:9", "--scheduler-timeout", "2"])
    assert code == 2
    assert "cannot reach the Dask scheduler" in capsys.readouterr().err
