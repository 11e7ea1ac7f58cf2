"""sync-api on recordings where a thread really is blocked in synchronization (waits_native, waits_sync:
``.item()`` / ``torch.cuda.synchronize()`` every step, recorded on an H200).

Truth by SQL here: the blocked time of the thread most blocked in cudaStreamSynchronize /
cudaDeviceSynchronize / cudaEventSynchronize inside nsysan's steady window, and the GPU idle gaps
(holes of >= 10 us in the union of kernel, memcpy and memset rows) that open while such a call is
returning: the call ended at most one gap length before the gap opened, or in its first half. A sync
that waits for the GPU's last op returns just after that op ends, i.e. just after the gap opens; the
old rule looked only at syncs that ended before the gap and stayed silent on these traces.
"""

from __future__ import annotations

import bisect
import sqlite3

import pytest
from conftest import FIXTURE_NAMES, ROOT

SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
NAMES = [n for n in ("waits_native", "waits_sync") if n in FIXTURE_NAMES]


def _sql_truth(path, t0: int, t1: int):
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    rt_names = {i: s for i, s in con.execute("SELECT id, value FROM StringIds")}
    # nsys 2025.3 stores a backtraced call twice (``cudaStreamSynchronize`` and, nested inside with the
    # same correlation id, ``cudaStreamSynchronize_v3020``): one call, the outer row
    outer: dict[tuple[int, int], tuple[str, int, int]] = {}
    for n, gt, c, s, e in con.execute(
            'SELECT nameId, globalTid, correlationId, start, "end" FROM CUPTI_ACTIVITY_KIND_RUNTIME'):
        k = (gt, c)
        if k not in outer or e - s > outer[k][2] - outer[k][1]:
            outer[k] = (rt_names.get(n, ""), s, e)
    syncs = [(gt, s, e) for (gt, _), (n, s, e) in outer.items() if n.split("_v")[0] in SYNCS]
    blocked: dict[int, int] = {}
    for gt, s, e in syncs:
        a, b = max(s, t0), min(e, t1)
        if b > a:
            blocked[gt] = blocked.get(gt, 0) + b - a
    gt, most = max(blocked.items(), key=lambda kv: kv[1])
    ends = sorted(e for g, _, e in syncs if g == gt)
    ops = sorted(r for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
                 for r in con.execute(f'SELECT start, "end" FROM {t}'))
    gaps, cur = [], None
    for s, e in ops:
        if cur is not None and s - cur >= 10_000 and cur >= t0 and s <= t1:
            gaps.append((cur, s))
        cur = e if cur is None else max(cur, e)
    after = 0
    for a, b in gaps:
        n = b - a
        i = bisect.bisect_right(ends, a + n // 2) - 1
        if i >= 0 and a - ends[i] <= n:
            after += n
    return most, after


@pytest.mark.parametrize("name", NAMES)
def test_sync_api_fires_with_the_round_trips_sql_finds(analysis, fixture_dir, name):
    a = analysis(name)
    w = a.steady
    blocked, after = _sql_truth(fixture_dir / f"{name}.sqlite", w.start_ns, w.end_ns)
    assert blocked > 0.3 * w.dur_ns  # the premise: the thread is blocked most of the time (SQL)
    f = {f.rule: f for f in a.findings}.get("sync-api")
    assert f is not None, "sync-api must fire: SQL finds the main thread blocked in syncs"
    assert f.evidence[0]["blocked_ns"] == blocked
    est = f.window.get("estimate_ns", f.impact_ns)
    # the gaps nsysan sees come from the same rows; the estimate is the round trips SQL finds
    assert after > 0.2 * w.dur_ns
    assert abs(est - after) <= 0.02 * after


@pytest.mark.skipif("waits_sync" not in FIXTURE_NAMES, reason="fixture missing")
def test_sync_api_names_the_lines_that_synchronize(analysis):
    """The workload's own source says where it synchronizes: ``.item()`` in read_loss() and
    ``torch.cuda.synchronize()`` in the step loop; the finding must quote exactly those lines."""
    import re

    src = (ROOT / "workloads" / "host" / "diagnose.py").read_text().splitlines()
    f = {f.rule: f for f in analysis("waits_sync").findings}["sync-api"]
    quoted = re.findall(r"(cuda\w+Synchronize) from (\w+)\(\) diagnose\.py:(\d+) \((\d+) calls\)", f.message)
    assert {q[0] for q in quoted} == {"cudaStreamSynchronize", "cudaDeviceSynchronize"}
    for api, _, line, calls in quoted:
        text = src[int(line) - 1]
        assert (".item()" in text) if api == "cudaStreamSynchronize" else ("torch.cuda.synchronize()" in text)
        assert int(calls) == 39  # one a step in the 39 steady steps
