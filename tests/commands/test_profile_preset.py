"""``nsysan profile --diagnose``: the exact ``nsys profile`` command line of the preset (CPU samples,
CUDA backtraces, Python sampling and backtraces for Python programs, GPU metrics), and its second
step, ``nsys export --type sqlite --include-blobs=true`` into NAME.sqlite (``nsys profile --export
sqlite`` would leave the Python frames out). nsys runs as the fake of test_inputs_profile (it logs its
argv); the real preset ran once on an H200 (docs/inputs.md, "Recording for a diagnosis")."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_inputs_profile import calls, env, fixture_sqlite, kernels_by_sql, nsysan  # noqa: F401 (fixtures)

from nsysan import presets

pytestmark = pytest.mark.skipif(os.name != "posix", reason="process groups: POSIX")

PY = ["-s", "process-tree", "--cpuctxsw=process-tree", "--cuda-memory-usage=true", "--cuda-um-gpu-page-faults=true",
      "--cuda-um-cpu-page-faults=true", "--cudabacktrace=sync,memory", "--python-sampling=true",
      "--python-backtrace=cuda", "--gpu-metrics-devices=all", "--gpu-metrics-frequency=10000"]


def profiles(env: dict[str, str]) -> list[list[str]]:
    return [c["argv"] for c in calls(env) if c["argv"][:1] == ["profile"]]


def exports(env: dict[str, str]) -> list[list[str]]:
    return [c["argv"] for c in calls(env) if c["argv"][:1] == ["export"] and c["argv"][1:2] != ["--help"]]


def test_diagnose_records_everything_and_exports_with_blobs(env, tmp_path, fixture_sqlite):
    env["FAKE_BLOBS"] = "1"  # this nsys has `nsys export --include-blobs`
    r = nsysan(["profile", "--diagnose", "-o", "runs/t", "--", "python3", "train.py", "--steps", "3"], env, tmp_path)
    assert r.returncode == 0, r.stderr
    out = str(Path("runs") / "t")
    assert profiles(env) == [["profile", "-t", "cuda,nvtx,osrt", *PY, "-o", out, "-f", "false",
                              "python3", "train.py", "--steps", "3"]]
    assert exports(env) == [["export", "--type", "sqlite", "--include-blobs=true", "--force-overwrite", "true",
                             "--output", out + ".sqlite", out + ".nsys-rep"]]
    order = [c["argv"][0] for c in calls(env) if c["argv"][:2] != ["export", "--help"] and c["argv"] != ["--version"]]
    assert order == ["profile", "export"]  # the export reads the report the recording wrote
    sqlite = tmp_path / "runs" / "t.sqlite"
    assert kernels_by_sql(sqlite) == kernels_by_sql(fixture_sqlite)
    assert f"trace: {out}.sqlite" in r.stdout
    assert "running: " in r.stderr and "--include-blobs=true" in r.stderr


def test_diagnose_without_python_leaves_python_flags_out(env, tmp_path):
    r = nsysan(["profile", "--diagnose", "-f", "--gpu-metrics-devices", "0", "-o", "t", "--", "./app", "-n", "2"],
               env, tmp_path)
    assert r.returncode == 0, r.stderr
    assert profiles(env) == [["profile", "-t", "cuda,nvtx,osrt", "-s", "process-tree", "--cpuctxsw=process-tree",
                              *presets.BEYOND_TIME, "--cudabacktrace=sync,memory", "--gpu-metrics-devices=0", "--gpu-metrics-frequency=10000",
                              "-o", "t", "-f", "true", "./app", "-n", "2"]]
    # the fake nsys has no --include-blobs here (as nsys 2022.4): exported without it, and said so
    assert exports(env) == [["export", "--type", "sqlite", "--force-overwrite", "true", "--output", "t.sqlite",
                             "t.nsys-rep"]]
    assert "Python frames will be missing" in r.stderr


def test_diagnose_overrides(env, tmp_path):
    env["FAKE_BLOBS"] = "1"
    r = nsysan(["profile", "--diagnose", "--python-sampling", "on", "--gpu-metrics-devices", "none",
                "--cuda-backtrace", "all", "--trace", "cuda,nvtx", "--graph-nodes", "-o", "t", "--",
                "./launcher.sh"], env, tmp_path)
    assert r.returncode == 0, r.stderr
    assert profiles(env) == [["profile", "-t", "cuda,nvtx", "-s", "process-tree", "--cpuctxsw=process-tree",
                              *presets.BEYOND_TIME, "--cudabacktrace=all", "--python-sampling=true", "--python-backtrace=cuda",
                              "-o", "t", "-f", "false", "--cuda-graph-trace=node", "./launcher.sh"]]
    r = nsysan(["profile", "--diagnose", "--python-sampling", "off", "-f", "-o", "t", "--", "python3", "x.py"],
               env, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "--python-sampling=true" not in profiles(env)[-1] and "--cudabacktrace=sync,memory" in profiles(env)[-1]


def test_diagnose_without_a_report_does_not_export(env, tmp_path):
    env["FAKE_MODE"] = "none"  # nsys wrote nothing (as when GPU metrics are refused)
    r = nsysan(["profile", "--diagnose", "-o", "t", "--", "python3", "x.py"], env, tmp_path)
    assert r.returncode != 0
    assert len(profiles(env)) == 1 and exports(env) == []
    assert "wrote no t.sqlite" in r.stderr


def test_plain_profile_is_unchanged(env, tmp_path):
    r = nsysan(["profile", "-o", "t", "--", "python3", "x.py"], env, tmp_path)
    assert r.returncode == 0, r.stderr
    assert profiles(env) == [["profile", "-t", "cuda,nvtx,osrt", "-s", "none", "--export", "sqlite", "-o", "t",
                              "-f", "false", "python3", "x.py"]]
    assert exports(env) == []


@pytest.mark.parametrize("command,python", [
    (["python3", "train.py"], True), (["/usr/bin/python3.12", "-m", "pkg"], True), (["python"], True),
    (["env", "-i", "CUDA_VISIBLE_DEVICES=0", "python3", "x.py"], True), (["./train.py"], True),
    (["torchrun", "--nproc-per-node", "2", "t.py"], True), (["pytest", "-x"], True),
    (["accelerate", "launch", "t.py"], True), (["./app"], False), (["bash", "-c", "python3 x.py"], False),
    (["pythonista"], False), ([], False)])
def test_python_commands_are_recognised_by_their_program(command, python):
    assert presets.is_python(command) is python
    assert ("--python-sampling=true" in presets.diagnose_flags(command)) is python
