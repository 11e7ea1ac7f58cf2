"""Who a blocked thread waited for (issue 49 item 5), against SQL on the trace.

Truth by plain SQL (``SCHED_EVENTS``, ``OSRT_API``, ``NVTX_EVENTS``, ``ThreadNames``): the loop's
thread is the one with the ``data`` ranges; its waits are its ``sem_wait`` or ``read`` calls of at
least 1 ms inside its ``train_step`` ranges; each wait's wake is the thread's last switch-in before
the call returned. A thread was near a wake when, at the switch-in, its last switch was a switch-in
(on a CPU) or it switched out in the 200 us before (nsys' own threads left out). The waker is the
thread near the most wakes; on the multiprocessing fixture its traced ``write`` to the pipe ends
before the waiter's switch-in. nsysan must name that thread (host-bound-gap's message), and the
median duration of its ``make_batch`` ranges as the batch's cost.
"""

from __future__ import annotations

import statistics
from collections import Counter

import pytest
from conftest import FIXTURE_NAMES
from sqltruth import open_fixture

from nsysan.units import fmt_ns

NEAR_NS = 200_000
CASES = {"waits_producer": ("sem_wait", "producer0"), "waits_producer_mp": ("read", "producer0"),
         "blocked_input": ("sem_wait", "producer")}


def _thread(conn, name: str) -> tuple[int, int]:
    """(pid, tid) of the thread with the NVTX range ``name``."""
    (g,) = conn.execute("SELECT DISTINCT n.globalTid FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
                        "WHERE coalesce(n.text, s.value) = ?", (name,)).fetchone()
    return (g >> 24) & 0xFFFFFF, g & 0xFFFFFF


def _ranges(conn, name: str) -> list[tuple[int, int, int]]:
    return conn.execute("SELECT n.start, n.\"end\", n.globalTid FROM NVTX_EVENTS n LEFT JOIN StringIds s "
                        "ON s.id = n.textId WHERE coalesce(n.text, s.value) = ? AND n.\"end\" IS NOT NULL",
                        (name,)).fetchall()


def _names(conn) -> dict[int, str]:
    return {g: n for g, n in conn.execute("SELECT t.globalTid, s.value FROM ThreadNames t JOIN StringIds s ON s.id = t.nameId")}


def _truth(conn, call: str) -> dict:
    pid, tid = _thread(conn, "data")
    steps = [(s, e) for s, e, _ in _ranges(conn, "train_step")]
    main = next(g for _, _, g in _ranges(conn, "data"))
    waits = conn.execute("SELECT o.start, o.\"end\" FROM OSRT_API o JOIN StringIds s ON s.id = o.nameId "
                         "WHERE o.globalTid = ? AND s.value = ? AND o.\"end\" - o.start >= 1000000",
                         (main, call)).fetchall()
    waits = [(s, e) for s, e in waits if any(a <= s and e <= b for a, b in steps)]
    names = _names(conn)
    others = [g for (g,) in conn.execute("SELECT DISTINCT globalTid FROM SCHED_EVENTS WHERE globalTid != ?", (main,))
              if not names.get(g, "").startswith(("[NSys", "NSys ", "*"))]
    near: Counter[int] = Counter()
    released: Counter[int] = Counter()
    wakes = []
    for _, end in waits:
        (t,) = conn.execute("SELECT max(start) FROM SCHED_EVENTS WHERE globalTid = ? AND isSchedIn = 1 AND start <= ?",
                            (main, end)).fetchone()
        wakes.append(t)
        for g in others:
            last = conn.execute("SELECT isSchedIn FROM SCHED_EVENTS WHERE globalTid = ? AND start <= ? "
                                "ORDER BY start DESC LIMIT 1", (g, t)).fetchone()
            out = conn.execute("SELECT 1 FROM SCHED_EVENTS WHERE globalTid = ? AND isSchedIn = 0 AND start BETWEEN ? AND ?",
                               (g, t - NEAR_NS, t)).fetchone()
            if (last and last[0]) or out:
                near[g] += 1
            rel = conn.execute("SELECT 1 FROM OSRT_API o JOIN StringIds s ON s.id = o.nameId WHERE o.globalTid = ? "
                               "AND s.value = 'write' AND o.\"end\" BETWEEN ? AND ?", (g, t - NEAR_NS, t)).fetchone()
            if rel:
                released[g] += 1
    waker, count = near.most_common(1)[0]
    batches = [e - s for s, e, g in _ranges(conn, "make_batch") if g == waker]
    return {"main": (pid, tid), "wakes": len(wakes), "waker": ((waker >> 24) & 0xFFFFFF, waker & 0xFFFFFF),
            "name": names.get(waker, ""), "near": count, "released": released[waker],
            "cycle_ns": int(statistics.median(batches)) if batches else 0}


def _message(analysis, name: str) -> str:
    (f,) = [f for f in analysis(name).findings if f.rule == "host-bound-gap"]
    return f.message


@pytest.mark.parametrize("name", [n for n in CASES if n in FIXTURE_NAMES])
def test_the_waker_is_the_thread_that_ran_before_each_wake(name, analysis, fixture_dir):
    # GIVEN the loop's waits and, per wake, the threads on a CPU just before it (SQL)
    call, thread = CASES[name]
    truth = _truth(open_fixture(name), call)
    assert truth["wakes"] >= 25
    assert truth["name"] == thread
    assert truth["near"] >= 0.9 * truth["wakes"]
    # WHEN nsysan explains the GPU's idle time
    msg = _message(analysis, name)
    # THEN it names that thread as the one the loop waited for
    pid, tid = truth["waker"]
    assert f"It waited mostly for {thread} (pid {pid}, tid {tid})" in msg
    if truth["cycle_ns"]:  # and what it was doing: make_batch, at its median cost per batch (SQL)
        assert f"make_batch takes {fmt_ns(truth['cycle_ns'])} a batch" in msg
        assert f"{thread} was on a CPU" in msg and "decode()" in msg


def test_the_producer_process_writes_before_the_waiter_runs(analysis, fixture_dir):
    # GIVEN a producer process that sends each batch through a pipe: its write ends right before the
    # waiting thread is switched in (SQL), in most waits
    if "waits_producer_mp" not in FIXTURE_NAMES:
        pytest.skip("no waits_producer_mp fixture")
    truth = _truth(open_fixture("waits_producer_mp"), "read")
    assert truth["released"] >= 0.8 * truth["wakes"]
    # THEN nsysan counts those traced release calls for that process's thread
    pid, tid = truth["waker"]
    assert pid != truth["main"][0]
    msg = _message(analysis, "waits_producer_mp")
    assert f"(pid {pid}, tid {tid})" in msg and "right after its traced release call" in msg
