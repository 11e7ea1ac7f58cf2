"""The analyses' own columns of one value (``frames.compact``): the GPU ops' op, kind, role, tid and
api_name, the launches' flags and the gaps' tid are one broadcast value when a big frame holds one
value throughout, and ordinary arrays otherwise; either way they read as the values SQL gives.

Truth comes from the export (SQL written here), never from nsysan's own output."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd
import pytest
import sqltruth

import nsysan
from nsysan.analyses.frames import compact, compact_codes
from nsysan.trace.model import CONSTANT_MIN_ROWS, as_column

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
NAMES = ["launch_eager", "ladder_baseline", "decode_eager", "ddp_overlap", "train_dataloader", "launch_graph"]


def _broadcast(values: np.ndarray) -> bool:
    return values.strides == (0,)


def _is_compact(values: np.ndarray) -> bool:
    """Broadcast when the column is big and of one value; never when it holds two (a column taken
    from a broadcast one stays broadcast at any length)."""
    one = len(set(values.tolist())) == 1
    if _broadcast(values):
        return one
    return not (one and len(values) >= CONSTANT_MIN_ROWS)


def test_compact_keeps_values_and_shares_nothing_writable():
    v = np.full(CONSTANT_MIN_ROWS, 7, np.int32)
    c = compact(v)
    assert _broadcast(c) and not c.flags.writeable and c.dtype == np.int32 and (c == v).all()
    assert compact(c) is c  # already one value: as it is
    w = v.copy()
    w[-1] = 8
    assert compact(w) is w  # two values
    short = np.full(CONSTANT_MIN_ROWS - 1, 7)
    assert compact(short) is short  # a small frame keeps its array
    cat = pd.Categorical.from_codes(np.zeros(CONSTANT_MIN_ROWS, np.int8), categories=["x", "y"])
    cc = compact_codes(cat)
    assert _broadcast(np.asarray(cc.codes)) and cc.tolist() == cat.tolist() and cc.dtype == cat.dtype
    df = pd.DataFrame({"a": np.arange(CONSTANT_MIN_ROWS)}).assign(t=as_column(pd.DataFrame(index=range(
        CONSTANT_MIN_ROWS)), c), k=as_column(pd.DataFrame(index=range(CONSTANT_MIN_ROWS)), cc))
    assert _broadcast(df["t"].to_numpy()) and _broadcast(np.asarray(df["k"].array.codes))


@pytest.mark.parametrize("name", NAMES)
def test_new_columns_of_one_value_are_broadcast_and_equal_sql(fixture_dir, name):
    path = fixture_dir / f"{name}.sqlite"
    a = nsysan.analyze(nsysan.open_trace(path), rules=False)
    con = sqltruth.open_export(path)
    tabs = sqltruth.tables(con)
    ops, lau, gaps = a.ops, a.launches, a.gaps

    # each GPU op's launching thread (-1 without a call in the export), and its kind of op
    calls = {(int(g) >> 24, int(c)): int(g) & 0xFFFFFF for g, c in con.execute(
        f"SELECT globalTid, correlationId FROM {RUNTIME} WHERE correlationId IS NOT NULL")} if RUNTIME in tabs else {}
    want_tid: Counter[int] = Counter()
    want_op: Counter[str] = Counter()
    for table, op in [(KERNEL, "kernel"), ("CUPTI_ACTIVITY_KIND_MEMCPY", "memcpy"),
                      ("CUPTI_ACTIVITY_KIND_MEMSET", "memset"), ("CUPTI_ACTIVITY_KIND_GRAPH_TRACE", "graph")]:
        if table not in tabs:
            continue
        for gpid, corr in con.execute(f"SELECT globalPid, correlationId FROM {table}"):
            want_tid[calls.get((int(gpid) >> 24, int(corr) if corr is not None else -1), -1)] += 1
            want_op[op] += 1
    assert Counter(ops["tid"].to_numpy().tolist()) == want_tid
    assert Counter(ops["op"].astype(str).tolist()) == want_op
    for col in ("tid",):
        assert _is_compact(ops[col].to_numpy()), col
    for col in ("op", "kind", "role", "api_name"):
        assert _is_compact(np.asarray(ops[col].array.codes)), col

    # launch_dominated: the launching call took longer than the kernel ran (SQL join on the ids)
    if RUNTIME in tabs and KERNEL in tabs:
        dominated = con.execute(
            f"""SELECT SUM(a.end - a.start > k.end - k.start), COUNT(*) FROM {KERNEL} k JOIN {RUNTIME} a
                ON a.correlationId = k.correlationId AND (a.globalTid >> 24) = (k.globalPid >> 24)""").fetchone()
        if "graph" not in want_op:  # graph launches join another table; kernels alone here
            assert int(lau["launch_dominated"].sum()) == int(dominated[0] or 0)
            assert len(lau) == int(dominated[1])
    for col in ("launch_dominated", "is_graph"):
        assert _is_compact(lau[col].to_numpy()), col

    # the gaps' launching thread: sqltruth's gaps, each ended by an op whose call is on that thread
    truth = sqltruth.idle_gaps(con)
    got = Counter(gaps.loc[gaps["cause"].astype(str) != "other", "tid"].to_numpy().tolist()) if len(gaps) else Counter()
    if truth and not any(g["ambiguous"] for g in truth.values()) and len(gaps) == len(truth):
        want = Counter(int(g["gtid"]) & 0xFFFFFF for g in truth.values() if g["gtid"] is not None)
        assert got == want
    if len(gaps):
        assert _is_compact(gaps["tid"].to_numpy())
    con.close()




def test_a_copy_of_an_analysis_frame_can_be_written(fixture_dir):
    """A broadcast column is read-only: a write into the analysis's own frame either raises or (pandas'
    copy on write, the column being shared) changes that frame alone; the frame's ``copy()`` takes
    writes, with the other values the same."""
    a = nsysan.analyze(nsysan.open_trace(fixture_dir / "launch_eager.sqlite"), rules=False)
    assert _broadcast(a.ops["tid"].to_numpy())
    before = a.launches["tid"].tolist()
    ops = a.ops.copy()
    ops.loc[0, "tid"] = 1
    assert int(ops["tid"].iloc[0]) == 1 and ops["tid"].iloc[1:].tolist() == a.ops["tid"].iloc[1:].tolist()
    try:
        a.ops.loc[0, "tid"] = 1
    except ValueError as e:
        assert "read-only" in str(e)
    assert a.launches["tid"].tolist() == before
