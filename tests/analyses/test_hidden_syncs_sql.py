"""Synchronizations inside an iteration (issue 49 item 1) against SQL on every fixture.

Truth by plain SQL on each export (``sqltruth``), independent of nsysan's tables:

* a sync call: a row of ``CUPTI_ACTIVITY_KIND_RUNTIME`` whose name (``StringIds``, version suffix
  ``_vNNNN`` dropped) is a blocking synchronize, one per (thread, correlation id) (nsys 2025.3 records
  a backtraced call twice, nested, with one id); or a blocking device-to-host copy: a
  ``CUPTI_ACTIVITY_KIND_MEMCPY`` row of ``copyKind`` 2 (DtoH) whose launching call (same process and
  correlation id) is a synchronous copy call, or an asynchronous one into pageable memory
  (``dstKind`` 0);
* its iteration: a steady iteration of nsysan's iteration table (the model tested elsewhere) of its
  process whose CPU range [start, start + cpu_ns) holds the call's start, its own thread's when that
  thread runs iterations;
* its device: its copy's, else the device of the last GPU op its thread launched before it, else its
  process's most used one; the next op start: the first GPU op start at or after its end on that
  device (all GPU op tables); a point: the calls of one thread in one iteration with the same next op
  start;
* its drain lies between (next start - point end), when the device is idle at the point's end, and
  (next start - point start); the drains of a window never exceed the device's idle time there (the
  window's length minus the union of its GPU ops).
"""

from __future__ import annotations

import bisect
import re
import sqlite3
from collections import defaultdict

import pytest
from conftest import FIXTURE_NAMES
from sqltruth import gpu_tables, open_fixture, tables

SYNC = {"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cuStreamSynchronize",
        "cuCtxSynchronize", "cuEventSynchronize"}
COPY_SYNC = {"cudaMemcpy", "cudaMemcpy2D", "cudaMemcpy3D", "cudaMemcpyFromSymbol", "cuMemcpyDtoH", "cuMemcpy",
             "cuMemcpy2D", "cuMemcpy3D"}
COPY_ASYNC = {"cudaMemcpyAsync", "cudaMemcpy2DAsync", "cudaMemcpy3DAsync", "cudaMemcpyFromSymbolAsync",
              "cuMemcpyDtoHAsync", "cuMemcpyAsync", "cuMemcpy2DAsync", "cuMemcpy3DAsync"}
SUFFIX = re.compile(r"_v\d+$")
M24 = 0xFFFFFF


def _calls(conn: sqlite3.Connection) -> dict[tuple[int, int, int], dict]:
    """Per (pid, tid, correlation id): the outer call's name, start, end."""
    if "CUPTI_ACTIVITY_KIND_RUNTIME" not in tables(conn):
        return {}
    out: dict[tuple[int, int, int], dict] = {}
    rows = conn.execute('SELECT r.globalTid, r.correlationId, r.start, r."end", s.value FROM '
                        'CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId').fetchall()
    for gt, corr, s, e, name in rows:
        pid, tid = (gt >> 24) & M24, gt & M24
        key = (pid, tid, corr) if corr else (pid, tid, -s)
        c = out.get(key)
        if c is None or s < c["start"]:  # the outer row (the nested one starts later, inside it)
            out[key] = {"name": SUFFIX.sub("", name), "start": s, "end": max(e, c["end"]) if c else e}
    return out


def truth_syncs(conn: sqlite3.Connection) -> list[dict]:
    """Every sync call: pid, tid, start, end, device (-1: a synchronize)."""
    calls = _calls(conn)
    out = [{"pid": p, "tid": t, "start": c["start"], "end": c["end"], "device": -1}
           for (p, t, _), c in calls.items() if c["name"] in SYNC]
    if "CUPTI_ACTIVITY_KIND_MEMCPY" in tables(conn):
        by_corr = {(p, k): (t, c) for (p, t, k), c in calls.items() if k >= 0}
        for gp, corr, dev, dst in conn.execute("SELECT globalPid, correlationId, deviceId, dstKind FROM "
                                               "CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 2"):
            hit = by_corr.get(((gp >> 24) & M24, corr))
            if hit is None:
                continue
            t, c = hit
            if c["name"] in COPY_SYNC or (c["name"] in COPY_ASYNC and dst == 0):
                out.append({"pid": (gp >> 24) & M24, "tid": t, "start": c["start"], "end": c["end"], "device": dev})
    return out


def gpu_ops(conn: sqlite3.Connection) -> list[tuple[int, int, int, int, int]]:
    """(device, start, end, pid, correlation id) of every GPU op."""
    out = []
    for t in gpu_tables(conn):
        out += conn.execute(f'SELECT deviceId, start, "end", (globalPid >> 24) & {M24}, correlationId FROM "{t}"')
    return out


def test_sql_api_lists_match_nsysan() -> None:
    from nsysan.analyses import syncs
    from nsysan.analyses.gaps import BLOCKING_SYNC_APIS

    assert set(BLOCKING_SYNC_APIS) == SYNC
    assert set(syncs.SYNC_COPY_APIS) == COPY_SYNC and set(syncs.ASYNC_COPY_APIS) == COPY_ASYNC


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_syncs_against_sql(name: str, analysis) -> None:
    a = analysis(name)
    s = a.syncs
    t = a.iterations.table
    steady_its = t.loc[~t["warmup"].to_numpy(dtype=bool)] if len(t) else t
    assert s.iterations == len(steady_its)
    if s.iterations == 0:
        assert len(s.points) == 0 and s.drain_ns == 0
        return
    conn = open_fixture(name)
    try:
        syncs = truth_syncs(conn)
        ops = gpu_ops(conn)
        call_dev = {}
        if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables(conn):
            launch = {}
            for gt, corr, st in conn.execute("SELECT globalTid, correlationId, start FROM CUPTI_ACTIVITY_KIND_RUNTIME "
                                             "WHERE correlationId != 0"):
                launch[((gt >> 24) & M24, corr)] = ((gt & M24), st)
            for dev, _, _, pid, corr in ops:
                hit = launch.get((pid, corr))
                if hit is not None:
                    call_dev.setdefault((pid, hit[0]), []).append((hit[1], dev))
    finally:
        conn.close()
    # iterations: per sequence (pid, tid) its steady rows
    seqs = defaultdict(list)
    for r in steady_its.itertuples():
        seqs[(int(r.pid), int(r.tid))].append((int(r.start_ns), int(r.start_ns) + int(r.cpu_ns), int(r.index)))
    per_it = defaultdict(int)
    mine = []
    for c in syncs:
        found = None
        for (p, tid), rows in sorted(seqs.items()):
            if p != c["pid"] or ((c["pid"], c["tid"]) in seqs and tid != c["tid"]):
                continue
            for lo, hi, idx in rows:
                if lo <= c["start"] < hi:
                    found = idx
                    break
            if found is not None:
                break
        if found is not None:
            per_it[found] += 1
            mine.append({**c, "iteration": found})
    got = dict(zip(s.per_iteration["index"].tolist(), s.per_iteration["calls"].tolist()))
    assert {k: v for k, v in got.items() if v} == dict(per_it), name
    assert s.calls == len(mine)
    if not mine:
        assert len(s.points) == 0 and s.drain_ns == 0
        return
    # devices and next op starts
    starts = defaultdict(list)
    for dev, st, en, _, _ in ops:
        starts[dev].append((st, en))
    for d in starts:
        starts[d].sort()
    for c in mine:
        if c["device"] < 0:
            hist = sorted(call_dev.get((c["pid"], c["tid"]), []))
            k = bisect.bisect_right(hist, (c["start"], 1 << 62)) - 1
            if k >= 0:
                c["device"] = hist[k][1]
            else:
                devs = [d for (p, _), h in call_dev.items() if p == c["pid"] for _, d in h]
                c["device"] = max(set(devs), key=devs.count) if devs else -1
        lst = starts.get(c["device"], [])
        k = bisect.bisect_left(lst, (c["end"], -(1 << 62)))
        c["next"] = lst[k][0] if k < len(lst) else -1
    points = defaultdict(list)
    for c in mine:
        points[(c["pid"], c["tid"], c["device"], c["next"], c["iteration"])].append(c)
    assert len(s.points) == len(points), name
    got_pts = {(int(r.pid), int(r.tid), int(r.device_id), int(r.next_start_ns), int(r.iteration)): r
               for r in s.points.itertuples()}
    assert set(got_pts) == set(points), name
    w0, w1 = a.steady.start_ns, a.steady.end_ns
    by_next = defaultdict(list)
    for key, cs in points.items():
        r = got_pts[key]
        lo, hi = min(c["start"] for c in cs), max(c["end"] for c in cs)
        assert (int(r.start_ns), int(r.end_ns), int(r.calls)) == (lo, hi, len(cs))
        assert 0 <= r.cost_ns <= r.drain_ns
        if key[3] < 0:
            assert r.drain_ns == 0
            continue
        assert r.drain_ns <= max(0, min(key[3], w1) - max(lo, w0)), (name, key)
        by_next[(key[2], key[3])].append((hi, int(r.drain_ns)))
    for (dev, nxt), hs in by_next.items():
        hi = max(h for h, _ in hs)
        lst = starts[dev]
        running = max((en for st, en in lst if st < hi), default=0)
        if running <= hi and w0 <= hi and nxt <= w1:  # idle at the point's end: the drain reaches back to it
            assert sum(d for _, d in hs) >= nxt - hi, (name, dev, nxt)
    # never more than the device's idle time in the window
    for dev in {k[2] for k in points}:
        merged = []
        for st, en in starts.get(dev, []):
            st, en = max(st, w0), min(en, w1)
            if en <= st:
                continue
            if merged and st <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], en)
            else:
                merged.append([st, en])
        idle = (w1 - w0) - sum(e - b for b, e in merged)
        assert int(s.points.loc[s.points["device_id"] == dev, "drain_ns"].sum()) <= idle, name
    f = [f for f in a.findings if f.rule == "hidden-syncs"]
    if f:
        assert 0 <= f[0].impact_ns <= s.cost_ns <= s.drain_ns  # 0: other findings claimed that time first
        assert s.with_syncs >= 0.5 * s.iterations
        n = len(points) / s.iterations
        assert f"synchronizes {'once' if round(n) == 1 else 'twice' if round(n) == 2 else f'{n:.0f} times'}" \
            in f[0].message or f"{n:.1f} times" in f[0].message


def test_syncs_mask_names_each_sync(analysis) -> None:
    """The recorded loop: two boolean-mask indexings (``nonzero``) in ``loss_mask``, the backward's
    ``nonzero`` on the autograd thread and ``loss.item()`` in ``run``: four points a step, each one
    ``cudaStreamSynchronize`` (PyTorch copies the count into pinned memory: not a blocking copy by
    itself); the rule fires with these sites. The loop without them synchronizes once in 60 steps
    and the rule stays silent."""
    a = analysis("syncs_mask")
    s = a.syncs
    assert (s.iterations, s.with_syncs, len(s.points)) == (60, 60, 240)
    sites = dict(zip(s.sites["site"], s.sites["points"]))
    assert sites["loss_mask() hidden_syncs.py:55"] == 120 and sites["run() hidden_syncs.py:83"] == 60
    assert any("nonzero" in k for k in sites)
    f = [f for f in a.findings if f.rule == "hidden-syncs"]
    assert f and "synchronizes 4 times a step" in f[0].message and "loss_mask() hidden_syncs.py:55" in f[0].message
    assert "torch.where" in f[0].suggestion
    # predicted saving per step within 2x of the measured gain (tests/fixtures/traces/syncs_mask/README.md)
    measured_ns = 879_500
    assert measured_ns / 2 <= f[0].per_iteration_ns <= measured_ns * 2
    b = analysis("syncs_none")
    assert b.syncs.with_syncs <= 1 and not [f for f in b.findings if f.rule == "hidden-syncs"]
