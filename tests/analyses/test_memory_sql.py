"""Issue 41, item 1: GPU memory over time, growth per iteration, churn versus growth.

Truth by SQL on the recordings (``workloads/memory/mem_loop.py``, ``--cuda-memory-usage=true``): live device
memory is the running sum of the usage events (allocation +bytes, deallocation -bytes; host kinds
left out), read at the CPU bounds of the steady ``train_step`` ranges (each one's start, then the last
one's end: ``sqltruth.range_instances``), where their allocation calls are (issue 49 item 3; the
run-ahead case and the calls joined by correlation id: ``test_memory_leak_sql.py``).
"""

from __future__ import annotations

import sqlite3

import pytest
import sqltruth

MIB = 1 << 20


def _live_at(con: sqlite3.Connection, times: list[int]) -> list[int]:
    ev = con.execute("""SELECT start, CASE memoryOperationType WHEN 0 THEN bytes WHEN 1 THEN -bytes ELSE 0 END
                        FROM CUDA_GPU_MEMORY_USAGE_EVENTS WHERE memKind NOT IN (0, 1) ORDER BY start""").fetchall()
    out, live, i = [], 0, 0
    for t in sorted(times):
        while i < len(ev) and ev[i][0] <= t:
            live += ev[i][1]
            i += 1
        out.append(live)
    return out


def _steady_bounds(a, con: sqlite3.Connection) -> list[int]:
    inst = sqltruth.range_instances(con, "train_step")[a.iterations.warmup:]
    return [i["start"] - 1 for i in inst] + [inst[-1]["end"] - 1]


def test_growth_per_iteration_matches_the_usage_events(analysis, fixture_dir):
    """GIVEN a loop that keeps a 128 MiB tensor alive every step WHEN analysed THEN the growth per
    iteration, the live memory at the first and last steady bound and the peak equal the SQL
    running sum of the usage events, and memory-growth fires with the figure and the iterations left."""
    a = analysis("mem_growth")
    con = sqltruth.open_export(fixture_dir / "mem_growth.sqlite")
    live = _live_at(con, _steady_bounds(a, con))
    peak = con.execute("""SELECT MAX(s) FROM (SELECT SUM(CASE memoryOperationType WHEN 0 THEN bytes ELSE -bytes END)
                          OVER (ORDER BY start, rowid) AS s FROM CUDA_GPU_MEMORY_USAGE_EVENTS WHERE memKind NOT IN (0, 1))""").fetchone()[0]
    total = con.execute("SELECT totalMemory FROM TARGET_INFO_GPU").fetchone()[0]
    con.close()
    g = a.memory.growth.iloc[0]
    assert g["live_first_bytes"] == live[0] and g["live_last_bytes"] == live[-1]
    assert g["growth_per_iteration_bytes"] == pytest.approx((live[-1] - live[0]) / (len(live) - 1))
    assert int(a.memory.per_process["peak_bytes"].max()) == peak
    f = [f for f in a.findings if f.rule == "memory-growth"]
    assert len(f) == 1
    per = (live[-1] - live[0]) / (len(live) - 1)
    assert f"{per / MIB:,.1f} MiB per iteration" in f[0].message
    assert f"{(total - peak) // int(per):,} more iterations" in f[0].message


def test_churn_is_not_growth(analysis, fixture_dir):
    """GIVEN a loop that allocates and frees the same buffers every step WHEN analysed THEN live memory
    at every steady bound is the same (SQL), no memory-growth finding, and alloc-in-loop calls it
    allocated and freed."""
    a = analysis("mem_churn")
    con = sqltruth.open_export(fixture_dir / "mem_churn.sqlite")
    live = _live_at(con, _steady_bounds(a, con))
    con.close()
    assert len(set(live)) == 1
    assert a.memory.growth.iloc[0]["growth_per_iteration_bytes"] == 0
    assert not [f for f in a.findings if f.rule == "memory-growth"]
    f = next(f for f in a.findings if f.rule == "alloc-in-loop")
    assert "freed" in f.title and "none of it freed" not in f.title


def test_growth_is_never_called_churn(analysis):
    """GIVEN the growing loop WHEN alloc-in-loop fires THEN it never says the memory was freed."""
    a = analysis("mem_growth")
    for f in a.findings:
        if f.rule == "alloc-in-loop":
            assert "allocated and freed" not in f.title


def test_without_usage_events_the_flag_is_named(analysis, fixture_dir):
    """GIVEN a trace recorded without --cuda-memory-usage WHEN analysed THEN the memory source is the
    allocation calls (counted as SQL counts them) and the missing flag is named."""
    a = analysis("slow_iters")
    con = sqltruth.open_export(fixture_dir / "slow_iters.sqlite")
    has = con.execute("SELECT COUNT(*) FROM sqlite_master WHERE name = 'CUDA_GPU_MEMORY_USAGE_EVENTS'").fetchone()[0]
    con.close()
    assert has == 0
    assert a.memory.source == "allocation calls"
    assert "--cuda-memory-usage=true" in a.memory.missing
    assert any(m["flag"] == "--cuda-memory-usage=true" for m in a.to_dict()["inputs_missing"])
