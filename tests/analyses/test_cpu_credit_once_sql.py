"""One thread feeding two GPUs: each CPU nanosecond credited once (issue 49, item 7), against SQL.

When both GPUs of a one-process model-parallel loop idle at once, the thread that feeds them is in
both devices' gaps at the same time. Before, what it did then was credited once per device:
``gaps.summary.by_activity`` (and host-bound-gap's "what the submitting thread was doing") added up
to the gaps' per-device sum, 1.79x the thread's wall-clock idle time on two_gpu_turns and 1.83x on
two_gpu_pipelined. Now the thread's time in several gaps at once counts once.

Truth is SQL on the export (``sqltruth.idle_gaps``: per device the holes between the merged GPU ops,
with the launching call of the op that ends each; host-caused when that call started after the hole
opened): per thread, the union of its host gaps is the time to credit; the union of their explained
parts (each gap up to its launching call's start) is what the activities and the untraced rest share,
the rest is the launching calls' tails; and each CUDA API and OS runtime name gets the thread's
exclusive time in it over that union (``exclusive_time_by_name``, the truth of the per-gap breakdowns).
"""

from __future__ import annotations

import numpy as np
import pytest
import sqltruth
from test_gap_attribution_sql import exclusive_time_by_name

TRACES = ("two_gpu_turns", "two_gpu_pipelined")


def _union(iv: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for s, e in sorted(x for x in iv if x[1] > x[0]):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def _host_gaps(conn, min_gap_ns: int) -> dict[int, list[tuple[int, int, int]]]:
    """Per submitting thread (globalTid): its host-caused gaps (start, end, launching call's start)."""
    out: dict[int, list[tuple[int, int, int]]] = {}
    for (_dev, s, e), g in sqltruth.idle_gaps(conn, min_gap_ns).items():
        assert not g["ambiguous"]
        if g["api_start"] is not None and g["api_start"] > s:
            out.setdefault(int(g["gtid"]), []).append((s, e, int(g["api_start"])))
    return out


def _truth(conn, gaps: dict[int, list[tuple[int, int, int]]]) -> dict[str, int]:
    """Per activity label (as nsysan names them, CUDA API and OS runtime only) and for the totals:
    the thread's time over the union of its gaps, each nanosecond once."""
    out = {"_total": 0, "_explained": 0}
    for gtid, rows in gaps.items():
        whole = _union([(s, e) for s, e, _ in rows])
        explained = _union([(s, min(c, e)) for s, e, c in rows])
        out["_total"] += sum(e - s for s, e in whole)
        out["_explained"] += sum(e - s for s, e in explained)
        for lo, hi in explained:
            got = exclusive_time_by_name(conn, gtid, lo, hi)
            assert got is not None
            for (source, name), ns in got.items():
                out[f"{source}:{name}"] = out.get(f"{source}:{name}", 0) + ns
    return out


@pytest.mark.parametrize("name", TRACES)
def test_each_cpu_nanosecond_is_credited_once(name, fixture_dir, analysis):
    from nsysan.analyses.gap_activity import LAUNCH_TIME, UNTRACED_TIME, activity_time

    # GIVEN the export's host-caused gaps, per device, and the thread that fed both devices
    conn = sqltruth.open_export(fixture_dir / f"{name}.sqlite")
    a = analysis(name)
    gaps = _host_gaps(conn, a.params.min_gap_ns)
    per_device_sum = sum(e - s for rows in gaps.values() for s, e, _ in rows)
    truth = _truth(conn, gaps)
    # the double credit this fixes is there: the devices idle at once most of the time
    assert per_device_sum > 1.5 * truth["_total"], (per_device_sum, truth["_total"])
    # WHEN nsysan credits the gaps' time
    spent = dict(zip(activity_time(a.gaps, a.gap_activity)["activity"], activity_time(a.gaps, a.gap_activity)["ns"]))
    # THEN the credits add up to the threads' wall-clock idle time (each nanosecond once) ...
    assert sum(spent.values()) == truth["_total"]
    assert spent[LAUNCH_TIME] == truth["_total"] - truth["_explained"]
    traced = sum(v for k, v in spent.items() if k not in (LAUNCH_TIME, UNTRACED_TIME))
    assert traced + spent.get(UNTRACED_TIME, 0) == truth["_explained"]
    # ... each CUDA API and OS runtime name gets the thread's exclusive time in it, once
    got = {k: v for k, v in spent.items() if k.startswith(("cuda_api:", "osrt:"))}
    want = {k: v for k, v in truth.items() if not k.startswith("_") and v}
    assert got == want
    # ... and the summary lists no more than that
    by = a.gap_summary["by_activity"]
    assert sum(x["total_ns"] for x in by) <= truth["_total"]
    assert all(x["total_ns"] == spent[x["activity"]] for x in by)


@pytest.mark.parametrize("name", TRACES)
def test_a_subset_of_the_gaps_is_credited_once_too(name, fixture_dir, analysis):
    """host-bound-gap sums a subset (the recurring gaps of its window): the credit-once holds for
    any subset, the pieces shared with gaps left out counted in full."""
    from nsysan.analyses.gap_activity import activity_time

    conn = sqltruth.open_export(fixture_dir / f"{name}.sqlite")
    a = analysis(name)
    g = a.gaps
    host = np.flatnonzero(g["cause"].astype(str).isin(["host", "sync"]).to_numpy())
    sub = host[::2]  # every other host gap, of both devices
    keys = set(zip(g["start_ns"].to_numpy()[sub].tolist(), g["end_ns"].to_numpy()[sub].tolist()))
    gaps = {t: [r for r in rows if (r[0], r[1]) in keys] for t, rows in _host_gaps(conn, a.params.min_gap_ns).items()}
    assert sum(len(v) for v in gaps.values()) == len(sub)
    truth = _truth(conn, gaps)
    spent = activity_time(g, a.gap_activity, sub)
    assert int(spent["ns"].sum()) == truth["_total"]
    got = {k: v for k, v in zip(spent["activity"], spent["ns"]) if k.startswith(("cuda_api:", "osrt:"))}
    assert got == {k: v for k, v in truth.items() if not k.startswith("_") and v}
