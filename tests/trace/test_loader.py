from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from conftest import CORPUS, FIXTURE_NAMES, SHARED
from frame_check import assert_same_frames

import nsysan
from nsysan.cli import main
from nsysan.errors import (
    CorruptTraceError,
    NotAnNsysExportError,
    NotSQLiteError,
    TraceNotFoundError,
)

GPU_FIXTURES = [n for n in FIXTURE_NAMES if n != "cpu_nsys2022"]


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_fixture_loads_and_passes_self_check(name, load):
    trace = load(name)
    assert trace.self_check() == []
    assert trace.kernels["start_ns"].dtype == "int64"
    assert trace.nvtx["start_ns"].dtype == "int64"


@pytest.mark.parametrize("name", GPU_FIXTURES)
def test_gpu_fixture_recorded_on_the_h200(name, load):
    trace = load(name)
    assert trace.meta.nsys_version.startswith("2025.3")
    assert len(trace.kernels) + len(trace.graph_launches) > 0
    # one GPU, or two for the recordings made on nvidia-h200-x2 (workloads/training/ddp.py, waits.py, and issue 38's
    # `nested` group, workloads/fixtures.toml: all its fixtures, single-GPU programs included; not diagnose.py)
    two = name.startswith(("ddp_", "tp", "fsdp", "pipeline", "waits_python", "waits_phases", "grad_accum",
                           "nested_steps", "serve_loop", "threads_loops",  # nvidia-h200-x2
                           # the `beyond_time` group (issue 41): all on nvidia-h200-x2, one-GPU programs too
                           "mem_growth", "mem_churn", "um_prefetch", "um_thrash", "blocked_input", "busy_input",
                           "slow_iters", "pipe_", "two_gpu_"))
    assert len(trace.gpus) == (2 if two else 1) and set(trace.gpus["name"]) == {"NVIDIA H200"}


def test_own_nsys_2022_export(load):
    """The 2022 schema from a capture of our own (workloads/cpu/record_nsys2022.sh): EXPORT_META_DATA,
    NVTX text inline or through a registered string in a named domain, categories, marks, a start/end
    range, OS runtime calls, and no CUDA tables at all (each an empty typed table)."""
    t = load("cpu_nsys2022")
    assert t.meta.nsys_version == "2022.4.2.1"
    assert "EXPORT_META_DATA" in t.meta.tables and "META_DATA_EXPORT" not in t.meta.tables
    assert t.self_check() == []
    assert len(t.kernels) == len(t.memcpy) == len(t.cuda_api) == len(t.gpus) == 0
    assert list(t.kernels.columns)[:2] == ["start_ns", "end_ns"]
    nv = t.nvtx
    assert nv.loc[nv["style"] == "PushPop", "name"].value_counts().to_dict() == {
        "infer": 3, "nsysan.cpu:preprocess": 3, "Print Result": 3, "setup": 1, "Total Elapsed Time(3 batches)": 1}
    assert set(nv.loc[nv["domain"] == "nsysan.cpu", "text"]) == {"preprocess"}  # registered string (textId)
    assert nv.loc[nv["style"] == "StartEnd", "name"].tolist() == ["teardown (start/end)"]
    assert sorted(nv.loc[nv["style"] == "Mark", "name"]) == ["done", 'flush <io> & "quotes"']
    # every preprocess range nests inside an infer range on the same thread
    inf = nv.loc[nv["name"] == "infer"]
    for _, r in nv.loc[nv["text"] == "preprocess"].iterrows():
        assert ((inf["start_ns"] <= r["start_ns"]) & (inf["end_ns"] >= r["end_ns"])).sum() == 1
    # OS runtime: traced calls only (eventClass 27), not the profiler's started/finished markers
    assert set(t.osrt["name"]) == {"nanosleep", "open", "write", "fflush"}
    assert (t.osrt["tid"] > 0).all() and (t.osrt["dur_ns"] > 0).all()


def test_own_nsys_2022_export_analyses_end_to_end(fixture_dir, tmp_path):
    out = tmp_path / "r.json"
    assert main(["analyze", str(fixture_dir / "cpu_nsys2022.sqlite"), "--json", str(out), "--quiet"]) == 0
    import json

    d = json.loads(out.read_text())
    assert d["iterations"]["range"] == "infer" and len(d["iterations"]["per_iteration"]) == 3
    assert {r["name"] for r in d["os_runtime"]["by_name"]} == {"nanosleep", "open", "write", "fflush"}
    assert d["kernels"]["by_name"] == [] and d["findings"] == []


def test_ids_decoded_in_one_place(load, fixture_dir):
    import sqlite3

    import nsysan

    path = fixture_dir / "ladder_baseline.sqlite"
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    threads = {tuple(r) for r in con.execute(
        "SELECT DISTINCT (globalTid >> 24) & 16777215, globalTid & 16777215 FROM CUPTI_ACTIVITY_KIND_RUNTIME")}
    kernel_pids = {r[0] for r in con.execute(
        "SELECT DISTINCT (globalPid >> 24) & 16777215 FROM CUPTI_ACTIVITY_KIND_KERNEL")}
    con.close()
    t = load("ladder_baseline")
    api = t.cuda_api
    assert set(zip(api["pid"].tolist(), api["tid"].tolist())) == threads
    assert set(t.kernels["pid"].tolist()) == kernel_pids
    # the event tables' int64 global ids are extra columns: gone by default, decoded alike on request
    assert not {"global_tid", "global_pid"} & (set(api.columns) | set(t.kernels.columns) | set(t.osrt.columns))
    full = nsysan.open_trace(path, all_columns=True)
    g = full.cuda_api["global_tid"].to_numpy()
    assert ((g >> 24) & 0xFFFFFF).tolist() == full.cuda_api["pid"].tolist()
    assert (g & 0xFFFFFF).tolist() == full.cuda_api["tid"].tolist()
    assert (full.kernels["global_pid"].to_numpy() >> 24 & 0xFFFFFF).tolist() == full.kernels["pid"].tolist()


def test_memory_kind_from_export_enum(load):
    # baseline copies from numpy (pageable); pinned step uses cudaHostAlloc
    assert set(load("ladder_baseline").memcpy.query("kind == 'HtoD'")["host_mem"]) == {"Pageable"}
    # the 77 MB input batches are pinned; the pageable ones are the model weights uploaded in setup
    batches = load("ladder_pinned").memcpy.query("kind == 'HtoD' and bytes == 128 * 3 * 224 * 224 * 4")
    assert len(batches) == 10 and set(batches["host_mem"]) == {"Pinned"}


def test_graph_mode_launches_loaded(load):
    t = load("launch_graph")
    assert len(t.graph_launches) == 53
    assert t.self_check() == []


def test_read_only_and_no_side_files(fixture_dir, tmp_path):
    src = tmp_path / "t.sqlite"
    shutil.copyfile(fixture_dir / "ladder_worker.sqlite", src)
    before = hashlib.sha256(src.read_bytes()).hexdigest()
    mtime = src.stat().st_mtime_ns
    nsysan.analyze(nsysan.open_trace(src))
    assert hashlib.sha256(src.read_bytes()).hexdigest() == before
    assert src.stat().st_mtime_ns == mtime
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.sqlite"]


def _bad(tmp_path: Path, name: str, data: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


def test_bad_inputs_raise_precise_errors(tmp_path, fixture_dir):
    with pytest.raises(TraceNotFoundError):
        nsysan.open_trace(tmp_path / "missing.sqlite")
    with pytest.raises(TraceNotFoundError):
        nsysan.open_trace(tmp_path)
    with pytest.raises(NotSQLiteError):
        nsysan.open_trace(_bad(tmp_path, "empty.sqlite", b""))
    with pytest.raises(NotSQLiteError):
        nsysan.open_trace(_bad(tmp_path, "rand.sqlite", os.urandom(4096)))
    with pytest.raises(NotSQLiteError, match="LFS"):
        nsysan.open_trace(_bad(tmp_path, "lfs.sqlite", b"version https://git-lfs.github.com/spec/v1\noid sha256:ab\n"))
    full = (fixture_dir / "ladder_baseline.sqlite").read_bytes()
    with pytest.raises(CorruptTraceError):
        nsysan.analyze(nsysan.open_trace(_bad(tmp_path, "trunc.sqlite", full[: len(full) // 3])))
    other = tmp_path / "other.sqlite"
    con = sqlite3.connect(other)
    con.execute("create table t(x)")
    con.commit()
    con.close()
    with pytest.raises(NotAnNsysExportError):
        nsysan.open_trace(other)


def test_cli_exit_codes_and_one_line_errors(tmp_path, capsys):
    assert main(["analyze", str(tmp_path / "nope.sqlite")]) == 3
    err = capsys.readouterr().err
    assert "no such file" in err and "Traceback" not in err
    assert main(["analyze", str(_bad(tmp_path, "x.nsys-rep", b"\x00" * 200))]) == 5
    assert "nsys export" in capsys.readouterr().err


def test_empty_capture_gives_no_events_not_a_crash(tmp_path, fixture_dir):
    p = tmp_path / "empty.sqlite"
    shutil.copyfile(fixture_dir / "launch_graph.sqlite", p)
    con = sqlite3.connect(p)
    for t in ["CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "OSRT_API",
              "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"]:
        con.execute(f"drop table {t}")
    con.commit()
    con.close()
    trace = nsysan.open_trace(p)
    assert trace.is_empty
    a = nsysan.analyze(trace)
    assert a.findings == [] and a.to_dict()["kernels"]["by_name"] == []


CORPUS_FILES = sorted(CORPUS.glob("*.sqlite")) + ([SHARED / "corpus" / "p25.sqlite"] if SHARED.exists() else [])


@pytest.mark.skipif(not CORPUS_FILES, reason="../shared/corpus not present")
@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: p.name[:40])
def test_public_corpus_loads_and_analyses(path):
    from conftest import analyzed, opened

    trace = opened(path)
    assert trace.self_check() == []
    a = analyzed(path)
    d = a.to_dict()
    for row in d["gpu"]["capture"]:
        assert 0 <= row["busy_frac"] <= 1


def test_sliced_parallel_read_equals_whole_read(fixture_dir, monkeypatch):
    """Big tables are read in rowid slices on threads; the result must not depend on it."""
    import nsysan.trace.load as L

    path = fixture_dir / "launch_eager.sqlite"
    whole = L.open_trace(path, workers=1)
    monkeypatch.setattr(L, "SLICE_ROWS", 997)  # many uneven slices
    sliced = L.open_trace(path, workers=3)
    for name in ("kernels", "cuda_api", "osrt", "memcpy", "nvtx"):
        a, b = getattr(whole, name), getattr(sliced, name)
        assert len(a) > 0 or name == "memcpy"
        assert_same_frames(a, b, obj=name, categories="values")


def test_extra_columns_only_on_request(fixture_dir):
    path = fixture_dir / "ladder_baseline.sqlite"
    lean = nsysan.open_trace(path)
    full = nsysan.open_trace(path, all_columns=True)
    assert "registers_per_thread" not in lean.kernels.columns
    assert (full.kernels["registers_per_thread"] > 0).all()
    assert set(lean.kernels.columns) < set(full.kernels.columns)


@pytest.mark.parametrize("name", ["launch_eager", "ladder_baseline", "decode_eager", "ddp_overlap"])
def test_columns_of_one_value_are_broadcast_and_equal_sql(fixture_dir, load, name):
    """A column that holds one value in every row of a big table (one thread's calls, one process's
    and one device's kernels, one grid size) is that value broadcast, read-only and costing no
    memory; it reads as the full column, equal to the trace's own rows by SQL. Columns that vary
    are ordinary arrays."""
    import sqlite3

    from nsysan.trace.model import CONSTANT_MIN_ROWS

    t = load(name)
    con = sqlite3.connect(fixture_dir / f"{name}.sqlite")
    checks = [
        (t.cuda_api, "pid", "SELECT (globalTid >> 24) & 16777215 FROM CUPTI_ACTIVITY_KIND_RUNTIME"),
        (t.cuda_api, "tid", "SELECT globalTid & 16777215 FROM CUPTI_ACTIVITY_KIND_RUNTIME"),
        (t.kernels, "pid", "SELECT (globalPid >> 24) & 16777215 FROM CUPTI_ACTIVITY_KIND_KERNEL"),
        (t.kernels, "device_id", "SELECT deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL"),
        (t.kernels, "stream_id", "SELECT streamId FROM CUPTI_ACTIVITY_KIND_KERNEL"),
        (t.kernels, "grid_x", "SELECT gridX FROM CUPTI_ACTIVITY_KIND_KERNEL"),
    ]
    for frame, col, sql in checks:
        want = [r[0] for r in con.execute(sql)]
        v = frame[col].to_numpy()
        assert sorted(v.tolist()) == sorted(want), (name, col)
        one = len(set(want)) == 1 and len(want) >= CONSTANT_MIN_ROWS
        assert (v.strides == (0,)) == one, (name, col)
        if one:
            assert not v.flags.writeable


@pytest.mark.parametrize("name", ["launch_eager", "launch_graph_nodes"])
def test_a_wholly_missing_nullable_column_is_one_broadcast_missing_value(fixture_dir, load, name):
    """A kernel table's graph node ids: all missing (no CUDA graph traced at node level, by SQL) in
    a table of CONSTANT_MIN_ROWS rows or more: one broadcast missing value, reading as all missing;
    otherwise the values as SQL has them."""
    import sqlite3

    from nsysan.trace.model import CONSTANT_MIN_ROWS

    k = load(name).kernels
    con = sqlite3.connect(fixture_dir / f"{name}.sqlite")
    want = [r[0] for r in con.execute("SELECT graphNodeId FROM CUPTI_ACTIVITY_KIND_KERNEL")]
    col = k["graph_node_id"]
    assert sorted(col.dropna().tolist()) == sorted(v for v in want if v is not None)
    assert int(col.isna().sum()) == sum(v is None for v in want)
    data = col.array._data
    assert (data.strides == (0,)) == (all(v is None for v in want) and len(want) >= CONSTANT_MIN_ROWS)
