"""Every second of the capture accounted for, against SQL (issue 48): the start-up, the GPU-active part,
the judged window's busy time, and on the public exports where the GPU idles most of the window, the
first findings cost the idle time and no more than SQL finds.

Truth by plain SQL on each export (``sqltruth``): the GPU-active part is [first start, last end] of
the GPU operations a CUDA call of the program launched (a row of the runtime table with the op's
correlation id in its process), of every operation where none was; busy = the union of the device's
operations in the window.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from conftest import CORPUS, FIXTURE_NAMES, analyzed
from sqltruth import device_busy_ns, gpu_tables, open_export, tables

FILES = sorted(CORPUS.glob("*.sqlite")) if CORPUS.exists() else []
SLACK_NS, SLACK_FRAC = 50_000_000, 0.05  # launch latency between a step's CPU start and its first op


def _active(conn: sqlite3.Connection) -> tuple[int, int] | None:
    """[first start, last end] of the launched GPU operations (of all of them when none was launched):
    an op is launched when a runtime row of its process has its (non-zero) correlation id."""
    ops = gpu_tables(conn)
    if not ops:
        return None
    rows = [r for t in ops for r in conn.execute(f'SELECT start, "end", correlationId, globalPid >> 24 FROM "{t}"')]
    if not rows:
        return None
    calls: set[tuple[int, int]] = set()
    if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables(conn):
        calls = {(int(c), int(p)) for c, p in conn.execute(
            "SELECT correlationId, globalTid >> 24 FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE correlationId != 0")}
    launched = [(s, e) for s, e, c, p in rows if c and (int(c), int(p)) in calls] or [(s, e) for s, e, _, _ in rows]
    return int(min(s for s, _ in launched)), int(max(e for _, e in launched))


def _check(path: Path, window_inside: bool = True) -> None:
    a = analyzed(path)
    ph = a.phases
    cap = a.capture
    assert sum(ns for _, ns in ph.parts()) == cap.dur_ns, ph.parts()
    assert all(ns >= 0 for _, ns in ph.parts()), ph.parts()
    conn = open_export(path)
    try:
        span = _active(conn)
        if span is None:
            assert ph.gpu_active is None and ph.startup_ns == cap.dur_ns
            return
        lo, hi = max(span[0], cap.start_ns), min(span[1], cap.end_ns)
        assert (ph.gpu_active.start_ns, ph.gpu_active.end_ns) == (lo, hi)
        assert ph.startup_ns == lo - cap.start_ns and ph.tail_ns == cap.end_ns - hi
        # the judged window lies inside the GPU-active part (slack for the launch latency of the first step)
        slack = max(SLACK_NS, SLACK_FRAC * (hi - lo))
        assert not window_inside or a.steady.start_ns >= lo - slack and a.steady.end_ns <= hi + slack, (a.steady, lo, hi)
        w0, w1 = ph.judged.start_ns, ph.judged.end_ns
        if ph.device_id is not None:
            assert ph.busy_ns == device_busy_ns(conn, ph.device_id, w0, w1)
            assert ph.busy_ns + ph.idle_ns == w1 - w0
    finally:
        conn.close()


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_fixture_phases_add_up_and_match_sql(name, fixture_dir):
    """On a fixture the window is checked against the GPU-active part where nsysan chose it (inferred or
    none): a program's own range may outlast its GPU work (a last step closed at exit)."""
    a = analyzed(fixture_dir / f"{name}.sqlite")
    _check(fixture_dir / f"{name}.sqlite", window_inside=a.iterations.how.startswith(("inferred", "none")))


@pytest.mark.skipif(not FILES, reason="public corpus not present (../shared)")
@pytest.mark.parametrize("path", FILES, ids=[f.name[:40] for f in FILES])
def test_public_export_phases_add_up_and_match_sql(path: Path):
    _check(path)


@pytest.mark.skipif(not FILES, reason="public corpus not present (../shared)")
@pytest.mark.parametrize("path", FILES, ids=[f.name[:40] for f in FILES])
def test_an_idle_window_is_costed_by_the_first_findings(path: Path):
    """Where the GPU is busy under a quarter of the judged window (by SQL), the first three findings
    cost at least a quarter of it, and each costed one saves no more than SQL finds idle there."""
    a = analyzed(path)
    if not len(a.ops):
        pytest.skip("no GPU activity")
    w0, w1 = a.steady.start_ns, a.steady.end_ns
    conn = open_export(path)
    try:
        devs = [int(r[0]) for r in conn.execute(
            " UNION ".join(f'SELECT DISTINCT deviceId FROM "{t}"' for t in gpu_tables(conn)))]
        busy = {d: device_busy_ns(conn, d, w0, w1) for d in devs}
    finally:
        conn.close()
    if max(busy.values()) >= 0.25 * (w1 - w0):
        pytest.skip("the GPU is busy a quarter of the window or more")
    idle = sum((w1 - w0) - b for b in busy.values())
    top = a.findings[:3]
    assert sum(f.impact_ns for f in top if f.impact_ns > 0) >= 0.25 * (w1 - w0), [(f.rule, f.impact_ns) for f in top]
    for f in a.findings:
        if f.rule in ("host-bound-gap", "launch-bound", "sync-api", "sync-memcpy", "slow-iterations"):
            assert f.impact_ns <= idle, (f.rule, f.impact_ns, idle)
