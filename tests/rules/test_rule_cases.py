"""Each rule's edge cases as rows of data: a trace built by hand (``factories``), whether the rule
fires on it, and the figure its finding must report, computed here from the rows the trace is
built of, never from nsysan's output.

Every rule has a case that fires, one just on the silent side of its threshold, and degenerate ones
(no GPU work, one op, nothing in the window). The cases run through ``analyze``, as a user's trace
does, with the rules' default thresholds."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import factories as F
import pandas as pd
import pytest

from nsysan.analysis import analyze
from nsysan.trace.model import Trace


@dataclass(frozen=True)
class Built:
    """A hand-built trace, what its finding reports (``figure`` reads it) and what that must be."""

    trace: Trace
    want: Any = None
    figure: Callable[[Any], Any] | None = None
    options: dict[str, Any] = field(default_factory=dict)


def _api(rows: list[tuple[int, int, str, int]]) -> pd.DataFrame:
    """CUDA API calls in time order, as the loader gives them."""
    return F.api(rows).sort_values("start_ns", kind="stable").reset_index(drop=True)


def _evidence(*keys: str) -> Callable[[Any], list[tuple[Any, ...]]]:
    """The finding's evidence rows, ``keys`` of each, sorted."""
    return lambda f: sorted(tuple(e[k] for k in keys) for e in f.evidence)


# --- the builders: each makes a trace of its arguments and the figure from the same rows ------------

def sync_api(n: int, sync_ns: int, kernels: bool = True) -> Built:
    """``n`` iterations of 100 us: a launch call 10 us before each kernel (40 us), and from the second
    on a cudaStreamSynchronize of ``sync_ns`` from 8 us before the launch's kernel. Blocked: the sum
    of the calls (apart, and inside the window, the first call's start to the last kernel's end: with
    10 iterations 950 us, of which min_frac 0.3 is 285 us: 9 calls of 31,667 ns and more fire)."""
    launches = [(i * 100_000 - 10_000, i * 100_000 - 9_000, "cudaLaunchKernel", i + 1) for i in range(n)]
    syncs = [(i * 100_000 - 8_000, i * 100_000 - 8_000 + sync_ns, "cudaStreamSynchronize", 0) for i in range(1, n)]
    k = F.kernels([(i * 100_000, i * 100_000 + 40_000, 7) for i in range(n)])
    blocked = sum(e - s for s, e, *_ in syncs)
    tables = {"kernels": k} if kernels else {}
    return Built(F.make_trace(cuda_api=_api(launches + syncs), **tables), want=[(F.PID, F.PID, blocked, len(syncs))],
                 figure=_evidence("pid", "tid", "blocked_ns", "calls"))


def pageable_memcpy(durations: list[int], host_mem: int = 0) -> Built:
    """Host-to-device copies 100 us apart, of the given durations, from pageable (0) or pinned (1)
    memory. Reported: each pageable copy (its start and duration), all of them under 10."""
    rows = [(i * 100_000, i * 100_000 + d, 7, "HtoD", host_mem) for i, d in enumerate(durations)]
    return Built(F.make_trace(memcpy=F.memcpy(rows)), want=sorted((s, e - s) for s, e, *_ in rows),
                 figure=_evidence("start_ns", "dur_ns"))


def sync_memcpy(n: int, dur: int, copies: bool = True) -> Built:
    """``n`` blocking cudaMemcpy calls of ``dur`` 100 us apart, each with its pinned copy inside it
    (or no copy table: a capture without copy activity). Reported: the calls and the host time they
    held (the sum of the calls)."""
    calls = [(i * 100_000, i * 100_000 + dur, "cudaMemcpy", 1000 + i) for i in range(n)]
    m = F.memcpy([(s + 10, e - 10, 7, "HtoD", 1) for s, e, *_ in calls])
    host = sum(e - s for s, e, *_ in calls)
    tables = {"memcpy": m} if copies else {}
    return Built(F.make_trace(cuda_api=_api(calls), **tables), want=(n, host),
                 figure=lambda f: (int(f.message.split()[0]), sum(e["dur_ns"] for e in f.evidence)))


def alloc_in_loop(mallocs: int, frees: int, before_work: bool = False) -> Built:
    """20 kernels 10 us apart; ``mallocs`` cudaMalloc (500 ns) and ``frees`` cudaFree (200 ns) calls
    between them (or all before the first kernel: setup). Without an iteration model the first
    allocation call is one-time and a name must recur ``min_calls`` (10) times; the impact is the
    host time of the calls that count."""
    k = F.kernels([(i * 10_000, i * 10_000 + 5_000, 7) for i in range(20)])
    shift = -200_000 if before_work else 0
    m = [(shift + i * 10_000 + 6_000, shift + i * 10_000 + 6_500, "cudaMalloc", 0) for i in range(mallocs)]
    fr = [(shift + i * 10_000 + 7_000, shift + i * 10_000 + 7_200, "cudaFree", 0) for i in range(frees)]
    counted = [c for c in (m[1:], fr) if len(c) >= 10]  # the first call of the process left out
    total = sum(e - s for calls in counted for s, e, *_ in calls)
    return Built(F.make_trace(kernels=k, cuda_api=_api(m + fr)), want=(sum(map(len, counted)), total),
                 figure=lambda f: (int(f.message.split()[0]), f.impact_ns))


def gpu_low_util(n: int, dur: int, period: int) -> Built:
    """``n`` kernels of ``dur`` every ``period``: busy the kernels' time of the window, the first
    kernel's start to the last one's end."""
    k = F.kernels([(i * period, i * period + dur, 7) for i in range(n)])
    busy, span = n * dur, (n - 1) * period + dur
    return Built(F.make_trace(kernels=k), want=[(0, busy, span - busy)],
                 figure=_evidence("device_id", "busy_ns", "idle_ns"))


def serial_copy_compute(copy_ns: int, kernel_ns: int, overlap_ns: int) -> Built:
    """One pinned host-to-device copy on stream 8 and one kernel on stream 7 that starts
    ``overlap_ns`` before the copy ends (no kernel when ``kernel_ns`` is 0)."""
    m = F.memcpy([(0, copy_ns, 8, "HtoD", 1)])
    start = copy_ns - overlap_ns
    tables = {"kernels": F.kernels([(start, start + kernel_ns, 7)])} if kernel_ns else {}
    return Built(F.make_trace(memcpy=m, **tables), want=[(0, copy_ns, kernel_ns, overlap_ns)],
                 figure=_evidence("device_id", "copy_ns", "compute_ns", "overlap_ns"))


def startup_cost(startup: int, work: int, capture: int, kernels: bool = True) -> Built:
    """An NVTX "init" range from 0 to ``startup``, one kernel for ``work`` after it, and a "teardown"
    range to ``capture``: the start-up is ``startup`` of the ``capture``; it must be at least
    ``min_frac`` (0.3) of the capture and longer than the judged window (the kernel)."""
    nv = F.nvtx([(0, startup, "init"), (startup + work, capture, "teardown")])
    tables = {"kernels": F.kernels([(startup, startup + work, 7)])} if kernels else {}
    return Built(F.make_trace(nvtx=nv, **tables), want=(startup, capture),
                 figure=lambda f: (f.covers_ns, f.evidence[0]["capture_ns"]))


def launch_bound(n: int, launch_ns: int = 10_000, kernel_ns: int = 2_000) -> Built:
    """``n`` launches 20 us apart, each call ``launch_ns`` long, each kernel ``kernel_ns`` right after
    its call: every launch but the first (one-time: module loading) costs more than its kernel runs.
    Reported: "<dominated> of <judged> kernel launches"."""
    calls = [(i * 20_000, i * 20_000 + launch_ns, "cudaLaunchKernel", i + 1) for i in range(n)]
    k = F.kernels([(e + 100, e + 100 + kernel_ns, 7) for _, e, *_ in calls])
    judged = n - 1
    dominated = judged if launch_ns > kernel_ns else 0
    return Built(F.make_trace(kernels=k, cuda_api=_api(calls)), want=[(dominated, judged)],
                 figure=lambda f: [tuple(map(int, m)) for m in re.findall(r"(\d+) of (\d+) kernel launches",
                                                                          f.message)])


# --- the cases: (rule, builder, its arguments, fires) ---------------------------------------------

CASES = [
    # sync-api: min_frac 0.3 of the window blocked on one thread
    pytest.param("sync-api", sync_api, {"n": 10, "sync_ns": 47_000}, True, id="sync-api-fires"),
    pytest.param("sync-api", sync_api, {"n": 10, "sync_ns": 31_666}, False, id="sync-api-just-under"),
    pytest.param("sync-api", sync_api, {"n": 10, "sync_ns": 31_667}, True, id="sync-api-just-over"),
    pytest.param("sync-api", sync_api, {"n": 10, "sync_ns": 47_000, "kernels": False}, False,
                 id="sync-api-no-gpu-work"),
    pytest.param("sync-api", sync_api, {"n": 1, "sync_ns": 47_000}, False, id="sync-api-one-op"),
    # pageable-memcpy: min_total_ns 100 us of pageable copies
    pytest.param("pageable-memcpy", pageable_memcpy, {"durations": [30_000] * 5}, True, id="pageable-fires"),
    pytest.param("pageable-memcpy", pageable_memcpy, {"durations": [33_333] * 3}, False, id="pageable-just-under"),
    pytest.param("pageable-memcpy", pageable_memcpy, {"durations": [100_000]}, True, id="pageable-one-op-at-threshold"),
    pytest.param("pageable-memcpy", pageable_memcpy, {"durations": [30_000] * 5, "host_mem": 1}, False,
                 id="pageable-pinned-only"),
    # sync-memcpy: min_total_ns 100 us of blocking calls
    pytest.param("sync-memcpy", sync_memcpy, {"n": 5, "dur": 30_020}, True, id="sync-memcpy-fires"),
    pytest.param("sync-memcpy", sync_memcpy, {"n": 3, "dur": 33_333}, False, id="sync-memcpy-just-under"),
    pytest.param("sync-memcpy", sync_memcpy, {"n": 1, "dur": 100_000}, True, id="sync-memcpy-one-op-at-threshold"),
    pytest.param("sync-memcpy", sync_memcpy, {"n": 5, "dur": 30_020, "copies": False}, False,
                 id="sync-memcpy-no-copy-activity"),
    # alloc-in-loop: without iterations, a name recurring min_calls (10) times inside the GPU work
    pytest.param("alloc-in-loop", alloc_in_loop, {"mallocs": 12, "frees": 12}, True, id="alloc-fires"),
    pytest.param("alloc-in-loop", alloc_in_loop, {"mallocs": 10, "frees": 9}, False, id="alloc-just-under"),
    pytest.param("alloc-in-loop", alloc_in_loop, {"mallocs": 10, "frees": 10}, True, id="alloc-frees-at-threshold"),
    pytest.param("alloc-in-loop", alloc_in_loop, {"mallocs": 12, "frees": 12, "before_work": True}, False,
                 id="alloc-all-before-the-gpu-work"),
    pytest.param("alloc-in-loop", alloc_in_loop, {"mallocs": 1, "frees": 0}, False, id="alloc-one-op"),
    # gpu-low-util: busy under max_busy_frac (0.5) of the window
    pytest.param("gpu-low-util", gpu_low_util, {"n": 10, "dur": 400, "period": 1000}, True, id="low-util-fires"),
    pytest.param("gpu-low-util", gpu_low_util, {"n": 10, "dur": 900, "period": 1900}, False,
                 id="low-util-busy-exactly-half"),
    pytest.param("gpu-low-util", gpu_low_util, {"n": 10, "dur": 899, "period": 1900}, True,
                 id="low-util-busy-just-under-half"),
    pytest.param("gpu-low-util", gpu_low_util, {"n": 1, "dur": 400, "period": 1000}, False, id="low-util-one-op"),
    # serial-copy-compute: min_copy_ns 200 us of copies, under max_overlap_frac (0.5) overlapped
    pytest.param("serial-copy-compute", serial_copy_compute,
                 {"copy_ns": 300_000, "kernel_ns": 300_000, "overlap_ns": 0}, True, id="serial-fires"),
    pytest.param("serial-copy-compute", serial_copy_compute,
                 {"copy_ns": 300_000, "kernel_ns": 300_000, "overlap_ns": 100_000}, True,
                 id="serial-a-third-overlapped"),
    pytest.param("serial-copy-compute", serial_copy_compute,
                 {"copy_ns": 199_999, "kernel_ns": 300_000, "overlap_ns": 0}, False, id="serial-copy-just-under"),
    pytest.param("serial-copy-compute", serial_copy_compute,
                 {"copy_ns": 200_000, "kernel_ns": 300_000, "overlap_ns": 0}, True, id="serial-copy-at-threshold"),
    pytest.param("serial-copy-compute", serial_copy_compute,
                 {"copy_ns": 300_000, "kernel_ns": 300_000, "overlap_ns": 150_000}, False, id="serial-half-overlapped"),
    pytest.param("serial-copy-compute", serial_copy_compute, {"copy_ns": 300_000, "kernel_ns": 0, "overlap_ns": 0},
                 False, id="serial-no-compute"),
    # startup-cost: at least min_frac (0.3) of the capture, and longer than the judged window
    pytest.param("startup-cost", startup_cost, {"startup": 3_100_000, "work": 1_000_000, "capture": 10_000_000},
                 True, id="startup-fires"),
    pytest.param("startup-cost", startup_cost, {"startup": 2_999_000, "work": 1_000_000, "capture": 10_000_000},
                 False, id="startup-just-under"),
    pytest.param("startup-cost", startup_cost, {"startup": 3_000_000, "work": 1_000_000, "capture": 10_000_000},
                 True, id="startup-at-threshold"),
    pytest.param("startup-cost", startup_cost, {"startup": 3_500_000, "work": 4_000_000, "capture": 10_000_000},
                 False, id="startup-shorter-than-the-window"),
    pytest.param("startup-cost", startup_cost,
                 {"startup": 3_100_000, "work": 1_000_000, "capture": 10_000_000, "kernels": False}, False,
                 id="startup-no-gpu-work"),
    # launch-bound: min_kernels (100) launches judged, the first of each kernel left out
    pytest.param("launch-bound", launch_bound, {"n": 101}, True, id="launch-bound-fires"),
    pytest.param("launch-bound", launch_bound, {"n": 100}, False, id="launch-bound-just-under"),
    pytest.param("launch-bound", launch_bound, {"n": 1}, False, id="launch-bound-one-op"),
]


@pytest.mark.parametrize(("rule", "build", "args", "fires"), CASES)
def test_rule_case(rule: str, build: Callable[..., Built], args: dict[str, Any], fires: bool) -> None:
    case = build(**args)
    a = analyze(case.trace, **case.options)
    found = [f for f in a.findings if f.rule == rule]
    assert bool(found) == fires, [f.message for f in found]
    if found:
        assert len(found) == 1
        assert case.figure is not None and case.figure(found[0]) == case.want


def test_every_case_names_a_rule_that_exists() -> None:
    from nsysan.rules import REGISTRY

    rules = {p.values[0] for p in CASES}
    assert rules <= set(REGISTRY) and len(rules) >= 8
    for rule in rules:  # each rule: a case that fires and one that does not
        assert {p.values[3] for p in CASES if p.values[0] == rule} == {True, False}, rule
