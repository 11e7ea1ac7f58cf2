"""The small-trace fast paths (fewer pandas calls per table) give what the plain pandas calls give.

- ``frames.to_records`` / ``frames.cells`` / ``frames.column_arrays``: the values (and their Python
  types) of ``df.head(n).to_dict("records")`` and ``df.iloc[:, i]``, on hand-made frames of every
  column kind and on every table of the fixtures;
- ``nvtx._extra_by_codes``: the columns of the group-by + merge it replaces, written out in the test;
- ``duration_stats``' sorting path: rows in the order ``sort_values`` gives (total descending, then
  the keys), on every fixture's kernel, API and NVTX tables.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from conftest import FIXTURE_NAMES

from nsysan.analyses import nvtx
from nsysan.analyses.frames import cells, column_arrays, to_records
from nsysan.analyses.summaries import duration_stats, with_share


def _same(a: object, b: object) -> bool:
    """Equal values of the same type (NaN equal to NaN, NA to NA)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)  # type: ignore[arg-type]
    if a is pd.NA or a is pd.NaT:
        return b is a
    return bool(a == b)


def _assert_records_equal(got: list[dict], want: list[dict]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert list(g) == list(w)
        for k in w:
            assert _same(g[k], w[k]), (k, g[k], w[k], type(g[k]), type(w[k]))


def _mixed_frame() -> pd.DataFrame:
    n = 7
    obj = np.empty(n, dtype=object)
    obj[:] = [np.int64(3), np.float64(2.5), np.bool_(True), "x", None, float("nan"), [1, 2]]
    return pd.DataFrame({
        "i": np.arange(n, dtype=np.int64) * 10**12,
        "i32": np.arange(n, dtype=np.int32),
        "u8": np.arange(n, dtype=np.uint8),
        "f": [0.5, np.nan, np.inf, -1.25, 1e300, 0.0, -0.0],
        "b": [True, False] * 3 + [True],
        "obj": obj,
        "cat": pd.Categorical(["a", None, "b", "a", "c", None, "b"]),
        "s": pd.array(["p", None, "q", "r", "", "s", "t"], dtype="str"),
        "nullable": pd.array([1, None, 3, 4, None, 6, 7], dtype="Int64"),
        "t": pd.to_datetime(np.arange(n) * 10**9),
        "td": pd.to_timedelta(np.arange(n), unit="s"),
    })


@pytest.mark.parametrize("limit", [None, 0, 1, 3, 100])
def test_records_equal_pandas_to_dict_on_every_column_kind(limit):
    df = _mixed_frame()
    want = (df if limit is None else df.head(limit)).to_dict("records")
    _assert_records_equal(to_records(df, limit), want)


@pytest.mark.filterwarnings("ignore:DataFrame columns are not unique")
def test_duplicate_and_missing_columns_as_to_dict():
    df = pd.DataFrame([[1, 2.5, "a"], [3, 4.5, "b"]], columns=["x", "x", "y"])
    _assert_records_equal(to_records(df), df.to_dict("records"))
    empty_cols = pd.DataFrame(index=range(3))
    assert to_records(empty_cols) == empty_cols.to_dict("records")
    assert to_records(pd.DataFrame({"a": []})) == []


def test_column_arrays_hold_what_iloc_holds():
    df = _mixed_frame()
    for i, a in enumerate(column_arrays(df)):
        s = df.iloc[:, i]
        assert type(a) is type(s.array) or isinstance(a, np.ndarray)
        assert a.dtype == s.dtype
        assert [x for x in a.tolist()] == [x for x in s.tolist()] or all(
            _same(x, y) for x, y in zip(a.tolist(), s.tolist()))


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_records_equal_to_dict_on_every_fixture_table(load, name):
    t = load(name)
    for table in ("kernels", "cuda_api", "memcpy", "memset", "nvtx", "processes", "gpus"):
        df = getattr(t, table, None)
        if df is None:
            continue
        _assert_records_equal(to_records(df, 50), df.head(50).to_dict("records"))
        by_col = cells(df, 50)
        for c in df.columns:
            assert len(by_col[c]) == min(len(df), 50)


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_range_summary_extra_columns_equal_group_by_and_merge(analysis, name):
    rg = analysis(name).nvtx_ranges
    if len(rg) == 0:
        pytest.skip("no closed NVTX ranges")
    stats = with_share(duration_stats(rg, ["name", "style"]))
    extra = rg.groupby(["name", "style"], sort=True).agg(
        self_total_ns=("self_ns", "sum"), proj_total_ns=("proj_ns", "sum"), gpu_ops=("gpu_ops", "sum"),
        max_gpu_after_end_ns=("gpu_after_end_ns", "max")).reset_index()
    want = stats.merge(extra, on=["name", "style"], how="left")
    got = nvtx._extra_by_codes(rg, stats)
    assert got is not None
    pd.testing.assert_frame_equal(got, want, check_exact=True)


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_duration_stats_rows_in_sort_values_order(load, name):
    t = load(name)
    frames = [(t.kernels, ["name"]), (t.cuda_api, ["name"])]
    if len(t.kernels) and "grid" in t.kernels.columns:
        frames.append((t.kernels, ["name", "grid"]))
    for df, keys in frames:
        if len(df) == 0:
            continue
        got = duration_stats(df, keys)
        want = got.sample(frac=1.0, random_state=1).sort_values(
            ["total_ns", *keys], ascending=[False, *([True] * len(keys))], kind="stable").reset_index(drop=True)
        pd.testing.assert_frame_equal(got, want, check_exact=True)
        # and the same groups and numbers as a brute-force count and sum per key
        sums = df.groupby([df[k].astype(str) for k in keys], observed=True)["dur_ns"].agg(["count", "sum"])
        for row in got.to_dict("records"):
            key = tuple(row[k] for k in keys)
            key = key[0] if len(keys) == 1 else key
            assert int(sums.loc[key, "count"]) == row["count"]
            assert int(sums.loc[key, "sum"]) == row["total_ns"]


def _stream_role_by_group_by(role, kind, dur, comm_names):
    """``streams.stream_role`` as it was written: the GPU time per (role, kind) from a pandas group-by
    (the definition), labelled by ``streams.role_label``."""
    from nsysan.analyses.streams import role_label

    per = pd.Series(np.asarray(dur, dtype=np.int64)).groupby(
        [np.asarray(role.array), np.asarray(kind.array)], sort=True, observed=True).sum()
    if len(per) == 0:
        return "empty"
    return role_label([(k, int(d)) for k, d in per.items()], comm_names)


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_stream_role_equals_the_group_by(analysis, name):
    from nsysan.analyses.streams import stream_role

    ops = analysis(name).ops
    if len(ops) == 0:
        pytest.skip("no GPU ops")
    dur = (ops["end_ns"] - ops["start_ns"]).to_numpy()
    keys = ops["device_id"].astype(np.int64).to_numpy() * (1 << 32) + ops["stream_id"].astype(np.int64).to_numpy()
    groups = [np.flatnonzero(keys == k) for k in np.unique(keys)] + [np.arange(len(ops))]
    for rows in groups:
        role, kind = ops["role"].iloc[rows], ops["kind"].iloc[rows]
        for comm in ([], ["ncclDevKernel_AllReduce"]):
            want = _stream_role_by_group_by(role, kind, dur[rows], comm)
            assert stream_role(role, kind, dur[rows], comm) == want
            # the whole columns and the stream's rows (the timeline's way: no copies per stream)
            assert stream_role(ops["role"], ops["kind"], dur, comm, rows) == want
    # missing keys are left out, as the group-by leaves them out
    role = pd.Series(pd.Categorical(["compute", None, "memcpy", "memcpy"]))
    kind = pd.Series(pd.Categorical([None, "HtoD", "HtoD", "DtoH"]))
    d = np.array([5, 7, 3, 4])
    assert stream_role(role, kind, d, []) == _stream_role_by_group_by(role, kind, d, [])
    # categories no op has, and plain (non-categorical) text columns, give the same label too
    unused = pd.Series(pd.Categorical(["memcpy", "memcpy", "compute", "compute"],
                                      categories=["memset", "compute", "communication", "memcpy"]))
    for r, k in ((unused, kind), (pd.Series(["memcpy", None, "compute", "memcpy"], dtype=object),
                                  pd.Series(["HtoD", "DtoH", None, "DtoH"], dtype="string"))):
        assert stream_role(r, k, d, []) == _stream_role_by_group_by(r, k, d, [])


def test_without_the_block_manager_the_series_path_gives_the_same(monkeypatch):
    """A pandas whose frames lack ``_mgr.iget_values`` (private API) takes the public Series path."""
    df = _mixed_frame()
    want = [a.tolist() for a in column_arrays(df, 3)]
    monkeypatch.setattr(type(df._mgr), "iget_values", None, raising=False)
    got = column_arrays(df, 3)
    assert [type(a) is np.ndarray for a in got] == [isinstance(a, np.ndarray) for a in column_arrays(df, 3)]
    assert all(_same(x, y) for g, w in zip(got, want) for x, y in zip(g.tolist(), w))
    _assert_records_equal(to_records(df, 3), df.head(3).to_dict("records"))
