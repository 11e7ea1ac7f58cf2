"""``summaries``: the copy table's kinds, bytes and host memory (against SQL), and the GPU ops
of a kernels-only trace."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import FIXTURE_NAMES

COPY_SQL = """
SELECT CASE copyKind WHEN 1 THEN 'HtoD' WHEN 2 THEN 'DtoH' WHEN 3 THEN 'HtoA' WHEN 4 THEN 'AtoH'
         WHEN 5 THEN 'AtoA' WHEN 6 THEN 'AtoD' WHEN 7 THEN 'DtoA' WHEN 8 THEN 'DtoD' WHEN 9 THEN 'HtoH'
         WHEN 10 THEN 'PtoP' WHEN 11 THEN 'UVM HtoD' WHEN 12 THEN 'UVM DtoH' WHEN 13 THEN 'UVM DtoD'
         ELSE 'Unknown' END AS kind,
       CASE WHEN copyKind IN (1, 3) THEN srcKind WHEN copyKind IN (2, 4) THEN dstKind ELSE -1 END AS host,
       bytes
FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE start IS NOT NULL AND "end" IS NOT NULL
"""


@pytest.mark.parametrize("name", [n for n in FIXTURE_NAMES if n.startswith(("ladder_", "ddp_", "decode_", "jax",
                                                                            "pipeline", "timing", "waits_sync"))])
def test_copy_kinds_bytes_and_host_memory_equal_sql(fixture_dir, analysis, name):
    import sqlite3

    con = sqlite3.connect(f"file:{fixture_dir / (name + '.sqlite')}?mode=ro", uri=True)
    try:
        has = con.execute("SELECT count(*) FROM sqlite_master WHERE name = 'CUPTI_ACTIVITY_KIND_MEMCPY'").fetchone()[0]
        rows = con.execute(COPY_SQL).fetchall() if has else []
    finally:
        con.close()
    truth: dict[str, dict[str, int]] = {}
    for kind, host, nbytes in rows:  # host memory kinds 0 pageable, 1 pinned (ENUM_CUDA_MEM_KIND)
        t = truth.setdefault(kind, dict.fromkeys(("total_bytes", "pageable_count", "pinned_count",
                                                  "pageable_bytes", "pinned_bytes"), 0))
        t["total_bytes"] += nbytes
        if host == 0:
            t["pageable_count"] += 1
            t["pageable_bytes"] += nbytes
        elif host == 1:
            t["pinned_count"] += 1
            t["pinned_bytes"] += nbytes
    m = analysis(name).memcpy
    got = {r["kind"]: {k: r[k] for k in truth.get(r["kind"], {})} for r in m.to_dict("records")}
    assert set(got) == set(truth)
    assert got == truth
    for c in ("total_bytes", "pageable_count", "pinned_count", "pageable_bytes", "pinned_bytes"):
        assert m[c].dtype == np.int64, c


def test_a_missing_copy_kind_takes_the_group_by_with_the_same_columns():
    from nsysan.analyses.summaries import memcpy_stats

    m = pd.DataFrame({"kind": pd.array(["HtoD", "HtoD", "DtoH"], dtype="string"),
                      "host_mem": pd.array(["Pageable", "Pinned", "Pinned"], dtype="string"),
                      "bytes": np.array([10, 20, 40], dtype=np.int64), "dur_ns": np.array([5, 6, 7], dtype=np.int64)})
    fast = memcpy_stats(m)
    assert fast[["kind", "total_bytes", "pageable_count", "pinned_bytes"]].values.tolist() == \
        [["HtoD", 30, 1, 20], ["DtoH", 40, 0, 40]]  # by total time, descending
    missing = m.assign(kind=pd.array(["HtoD", None, "DtoH"], dtype="string"))
    slow = memcpy_stats(missing)  # the group-by path: the copy without a kind has no byte sums
    assert list(slow.columns) == list(fast.columns)


def test_kernel_only_ops_move_no_bytes_without_a_column_of_zeros(load):
    """gpu_ops of a kernels-only trace (launch_eager: no copy or memset table, one GPU): bytes is one
    read-only zero for every row, and so is the gaps' device id; both read as full columns."""
    from nsysan import analysis

    a = analysis.analyze(load("launch_eager"))
    assert len(a.trace.kernels) and not len(a.trace.memcpy) and not len(a.trace.memset)
    b = a.ops["bytes"].to_numpy()
    assert b.strides == (0,) and not b.flags.writeable and len(b) == len(a.ops) and not b.any()
    assert a.ops["bytes"].sum() == 0 and a.ops.take([0, len(a.ops) - 1])["bytes"].tolist() == [0, 0]
    d = a.gaps["device_id"].to_numpy()
    assert d.strides == (0,) and set(d.tolist()) == set(a.ops["device_id"].tolist()) and len(d) == len(a.gaps)
