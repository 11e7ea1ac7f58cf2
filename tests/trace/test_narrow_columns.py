"""Narrow integer columns (``schema.NARROW``, ``frames._narrow``, the direct reader's int32 outputs).

The loaded tables keep ids in int32 and grid/block dimensions in as little as int8 when the trace's
values allow, checked per column and per trace. Truth comes from SQL on copies of a fixture whose
values were pushed past those ranges by SQL in the test: the frames must hold exactly what SQLite
holds, through the direct reader and through SQLite, and the analyses must give the same numbers.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import sqltruth

import nsysan
from nsysan.report import jsonout
from nsysan.trace import direct
from nsysan.trace import frames as frames_mod

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
BEYOND_INT32 = 2**31
READERS = ["direct", "sqlite"]


def _open(path: Path, reader: str):
    if reader == "direct" and not direct.available():
        pytest.skip("the _btree extension is not built here")
    old = os.environ.get("NSYSAN_READER")
    os.environ["NSYSAN_READER"] = "sqlite" if reader == "sqlite" else "auto"
    try:
        return nsysan.open_trace(path)
    finally:
        if old is None:
            del os.environ["NSYSAN_READER"]
        else:
            os.environ["NSYSAN_READER"] = old


def _copy(fixture_dir: Path, tmp_path: Path, name: str, *statements: str) -> Path:
    path = tmp_path / name / "trace.sqlite"
    path.parent.mkdir()
    shutil.copyfile(fixture_dir / "launch_eager.sqlite", path)
    con = sqlite3.connect(path)
    for sql in statements:
        con.execute(sql)
    con.commit()
    con.close()
    return path


_sql = sqltruth.query  # one read-only query on an export


def _column_is(frame: pd.DataFrame, column: str, path: Path, sql: str) -> None:
    """The frame's column holds exactly the values SQL gives, sorted (the frame is sorted by start)."""
    want = np.sort(np.array([r[0] for r in _sql(path, sql)], dtype=np.int64))
    got = np.sort(frame[column].to_numpy(dtype=np.int64))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("reader", READERS)
def test_columns_are_narrow_where_the_values_allow(fixture_dir, reader):
    path = fixture_dir / "launch_eager.sqlite"
    t = _open(path, reader)
    k = t.kernels
    lo_hi = {c: _sql(path, f"SELECT min({s}), max({s}) FROM {KERNEL}")[0] for c, s in
             [("grid_x", "gridX"), ("block_x", "blockX"), ("correlation_id", "correlationId"),
              ("stream_id", "streamId")]}
    for c, (lo, hi) in lo_hi.items():
        want = frames_mod.narrow_type(lo, hi, "int8" if c.startswith(("grid", "block")) else "int32")
        assert want is not None and k[c].dtype == np.dtype(want), (c, lo, hi, k[c].dtype)
    _column_is(k, "grid_x", path, f"SELECT gridX FROM {KERNEL}")
    _column_is(k, "block_x", path, f"SELECT blockX FROM {KERNEL}")
    _column_is(k, "correlation_id", path, f"SELECT correlationId FROM {KERNEL}")
    _column_is(t.cuda_api, "correlation_id", path, f"SELECT correlationId FROM {RUNTIME}")
    for df in (k, t.cuda_api, t.osrt, t.nvtx, t.threads):
        assert df["pid"].dtype == np.int32
    _column_is(t.cuda_api, "pid", path, f"SELECT (globalTid >> 24) & 16777215 FROM {RUNTIME}")
    _column_is(t.cuda_api, "tid", path, f"SELECT globalTid & 16777215 FROM {RUNTIME}")
    assert t.self_check() == []


@pytest.mark.parametrize("reader", READERS)
def test_correlation_ids_beyond_int32_keep_int64_and_every_number(fixture_dir, tmp_path, reader):
    """Every correlation id moved past 2^31 (kernels and their launching calls alike): the columns
    stay int64 with SQL's values, and the analysis, which joins ops to launches on them, is the same."""
    plain = _copy(fixture_dir, tmp_path, "plain")
    moved = _copy(fixture_dir, tmp_path, "moved",
                  f"UPDATE {KERNEL} SET correlationId = correlationId + {BEYOND_INT32} WHERE correlationId > 0",
                  f"UPDATE {RUNTIME} SET correlationId = correlationId + {BEYOND_INT32} WHERE correlationId > 0")
    assert _sql(moved, f"SELECT max(correlationId) FROM {KERNEL}")[0][0] > BEYOND_INT32
    t = _open(moved, reader)
    assert t.kernels["correlation_id"].dtype == np.int64 and t.cuda_api["correlation_id"].dtype == np.int64
    _column_is(t.kernels, "correlation_id", moved, f"SELECT correlationId FROM {KERNEL}")
    _column_is(t.cuda_api, "correlation_id", moved, f"SELECT correlationId FROM {RUNTIME}")
    assert jsonout.to_json(nsysan.analyze(t)) == jsonout.to_json(nsysan.analyze(_open(plain, reader)))


@pytest.mark.parametrize("reader", READERS)
def test_one_wide_id_in_one_table_only(fixture_dir, tmp_path, reader):
    """One API call that launched nothing gets a correlation id of 2^32: that table's column is
    int64, the kernels' stays int32, and the join across the two gives the same numbers."""
    plain = _copy(fixture_dir, tmp_path, "plain")
    lonely = _sql(plain, f"SELECT rowid FROM {RUNTIME} WHERE correlationId > 0 AND correlationId NOT IN "
                         f"(SELECT correlationId FROM {KERNEL}) LIMIT 1")[0][0]
    moved = _copy(fixture_dir, tmp_path, "moved",
                  f"UPDATE {RUNTIME} SET correlationId = {2**32} WHERE rowid = {lonely}")
    t = _open(moved, reader)
    assert t.cuda_api["correlation_id"].dtype == np.int64 and t.kernels["correlation_id"].dtype == np.int32
    _column_is(t.cuda_api, "correlation_id", moved, f"SELECT correlationId FROM {RUNTIME}")
    assert int(t.cuda_api["correlation_id"].max()) == 2**32
    assert jsonout.to_json(nsysan.analyze(t)) == jsonout.to_json(nsysan.analyze(_open(plain, reader)))


@pytest.mark.parametrize("reader", READERS)
def test_grid_and_block_beyond_their_narrow_types(fixture_dir, tmp_path, reader):
    """A grid of 2^31 + 7 (beyond int32) and a block of 40,000 (beyond int16) on two kernels: the
    columns widen, the values are SQL's and the launch configurations are formatted from them."""
    plain = _copy(fixture_dir, tmp_path, "plain")
    first, second = [r[0] for r in _sql(plain, f"SELECT rowid FROM {KERNEL} ORDER BY rowid LIMIT 2")]
    moved = _copy(fixture_dir, tmp_path, "moved",
                  f"UPDATE {KERNEL} SET gridX = {BEYOND_INT32 + 7} WHERE rowid = {first}",
                  f"UPDATE {KERNEL} SET blockX = 40000, gridY = -3 WHERE rowid = {second}")
    t = _open(moved, reader)
    k = t.kernels
    assert k["grid_x"].dtype == np.int64 and k["block_x"].dtype == np.int32
    for c, s in [("grid_x", "gridX"), ("grid_y", "gridY"), ("block_x", "blockX")]:
        _column_is(k, c, moved, f"SELECT {s} FROM {KERNEL}")
    shapes = {f"{gx}x{gy}x{gz}|{bx}x{by}x{bz}" for gx, gy, gz, bx, by, bz in
              _sql(moved, f"SELECT gridX, gridY, gridZ, blockX, blockY, blockZ FROM {KERNEL}")}
    got = nsysan.analyze(t).kernel_configs
    assert {f"{g}|{b}" for g, b in zip(got["grid"], got["block"])} == shapes
    assert f"{BEYOND_INT32 + 7}x1x1" in set(got["grid"])


def test_narrow_type_bounds():
    i8, i16, i32 = np.iinfo(np.int8), np.iinfo(np.int16), np.iinfo(np.int32)
    assert frames_mod.narrow_type(i8.min, i8.max, "int8") is np.int8
    assert frames_mod.narrow_type(i8.min - 1, 0, "int8") is np.int16
    assert frames_mod.narrow_type(0, i16.max + 1, "int8") is np.int32
    assert frames_mod.narrow_type(0, 1, "int32") is np.int32
    assert frames_mod.narrow_type(i32.min, i32.max, "int16") is np.int32
    assert frames_mod.narrow_type(0, i32.max + 1, "int32") is None
    assert frames_mod.narrow_type(i32.min - 1, 0, "int8") is None


def test_pid_and_tid_fields_of_any_global_id():
    """``_field24`` writes the shift into int32 (low 32 bits kept) and masks: the same 24-bit fields
    as Python's arbitrary-precision arithmetic, for ids with VM bits, negative ones and extremes."""
    rng = np.random.default_rng(7)
    g = np.concatenate([rng.integers(np.iinfo(np.int64).min, np.iinfo(np.int64).max, size=5000, dtype=np.int64),
                        np.array([0, -1, 1, 2**24 - 1, 2**24, 2**48 + (5 << 24) + 9, np.iinfo(np.int64).max,
                                  np.iinfo(np.int64).min], dtype=np.int64)])
    pid, tid = frames_mod._field24(g, 24), frames_mod._field24(g, 0)
    assert pid.dtype == np.int32 and tid.dtype == np.int32
    assert pid.tolist() == [(int(v) >> 24) & 0xFFFFFF for v in g.tolist()]
    assert tid.tolist() == [int(v) & 0xFFFFFF for v in g.tolist()]
