"""Issue 41, item 3: running or blocked, from the context switches (``SCHED_EVENTS``).

Truth by SQL: a thread is on a CPU from each switch-in (``isSchedIn`` = 1) to its next switch; the
on-CPU time inside a set of intervals is summed in Python over those rows. The recordings
(``workloads/host/input_wait.py``): the main thread takes each batch from a queue a slow producer thread
fills (blocked) or prepares it itself with numpy (busy), inside an NVTX range ``data``.
"""

from __future__ import annotations

import sqlite3

import pytest
import sqltruth


def _on_cpu(con: sqlite3.Connection, gtid: int, intervals: list[tuple[int, int]]) -> tuple[int, int]:
    sw = con.execute("SELECT start, isSchedIn FROM SCHED_EVENTS WHERE globalTid = ? ORDER BY start", (gtid,)).fetchall()
    on = [(sw[i][0], sw[i + 1][0]) for i in range(len(sw) - 1) if sw[i][1] == 1]
    lo, hi = sw[0][0], sw[-1][0]
    total = running = 0
    for s, e in intervals:
        s, e = max(s, lo), min(e, hi)
        if e <= s:
            continue
        total += e - s
        running += sum(max(0, min(e, b) - max(s, a)) for a, b in on)
    return total, running


def _data_ranges(con: sqlite3.Connection) -> tuple[int, list[tuple[int, int]]]:
    rows = con.execute("""SELECT globalTid, start, end FROM NVTX_EVENTS WHERE end IS NOT NULL AND
                          (text = 'data' OR textId IN (SELECT id FROM StringIds WHERE value = 'data'))""").fetchall()
    return rows[0][0], [(s, e) for _, s, e in rows]


@pytest.mark.parametrize("name,blocked", [("blocked_input", True), ("busy_input", False)])
def test_range_running_share_matches_the_switches(analysis, fixture_dir, name, blocked):
    """GIVEN a loop whose 'data' range waits on a queue (or computes) WHEN analysed THEN the range's
    running and off-CPU time on its thread equal the SQL sums over the context switches, and the
    off-CPU call named is the semaphore the queue waits in."""
    a = analysis(name)
    con = sqltruth.open_export(fixture_dir / f"{name}.sqlite")
    gtid, iv = _data_ranges(con)
    total, running = _on_cpu(con, gtid, iv)
    con.close()
    r = a.thread_states.ranges
    row = r.loc[r["name"] == "data"].iloc[0]
    assert (row["total_ns"], row["running_ns"]) == (total, running)
    if blocked:
        assert row["off_cpu_share"] > 0.9 and row["top_call"] == "sem_wait"
    else:
        assert row["off_cpu_share"] < 0.05


@pytest.mark.parametrize("name,word", [("blocked_input", "blocked"), ("busy_input", "running")])
def test_host_bound_gap_says_running_or_blocked(analysis, fixture_dir, name, word):
    """GIVEN the two loops WHEN host-bound-gap fires THEN it says whether the submitting thread was
    blocked (and in which call) or running during the gaps, with the share by the switches, and the
    fix follows (input workers versus moving CPU work)."""
    a = analysis(name)
    f = next(f for f in a.findings if f.rule == "host-bound-gap")
    assert f"{word}" in f.message
    if word == "blocked":
        assert "sem_wait" in f.message and "worker" in f.suggestion
    else:
        assert "off the submitting thread" in f.suggestion or "CPU work" in f.suggestion


def test_no_switches_no_claim(analysis):
    """GIVEN a trace recorded with --cpuctxsw=none WHEN analysed THEN no running/blocked figure is given,
    and the missing input is named with its flag."""
    a = analysis("mem_growth")
    assert not a.thread_states.recorded
    assert any(m["flag"] == "--cpuctxsw=process-tree" for m in a.to_dict()["inputs_missing"])
    for f in a.findings:
        assert "off the CPU" not in f.message
