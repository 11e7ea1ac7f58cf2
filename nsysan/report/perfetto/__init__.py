"""The timeline as Chrome trace-event JSON, for the Perfetto UI (ui.perfetto.dev) and chrome://tracing.

The "JSON Object Format" of the Trace Event Format: ``{"traceEvents": [...], "displayTimeUnit": "ns",
"otherData": {...}}``. Times are microseconds (``ts``, ``dur``), written as exact decimals of the
trace's integer nanoseconds (``12.345``) from ``t0_ns`` (``otherData``: the capture start, or the
earliest event when one starts before it), so a reader that rounds ``ts * 1000`` gets the nanoseconds
back. What is in it, all of it (nothing is capped):

* a process "GPU N" per device (pid ``GPU_PID + N``): a thread per (process, stream) with the GPU
  ops (``cat`` kernel, memcpy, memset, graph: CUDA graph launches traced whole), and a thread "GPU N
  idle" with the idle gaps (``cat`` gap; args ``cause``, ``activity``: what the submitting thread was
  doing, the next API call and op, and ``findings``: the rules whose estimated saving comes from
  that gap);
* per host process (its pid) and thread (its tid, named from the trace's ThreadNames), the NVTX
  ranges (``cat`` nvtx) and the CUDA API calls (``cat`` cuda_api) together, so calls nest under the
  ranges they ran in; NVTX marks as thread-scoped instant events (``cat`` nvtx_mark);
* each finding as a global instant event (``cat`` finding) at the start of the time it claims, with
  its rule, severity, estimated saving and message;
* with GPU metrics (``nsys profile --gpu-metrics-devices``), a counter track (``ph`` C, ``cat``
  gpu_metric, arg ``%``) per device and metric in the "GPU N" process: SMs active, tensor active,
  DRAM read, DRAM write, in % of peak, from the samples the loader already read (a sample without
  the metric is left out). Above ``MAX_COUNTER_SAMPLES`` samples a track, consecutive samples are
  averaged in buckets of ``ceil(n / MAX_COUNTER_SAMPLES)`` (at the first sample's time; the last
  bucket may be smaller); ``otherData.gpu_metrics`` says, per track, the samples and the bucket.
  Traces without metrics give the same bytes as before.
* with GPU memory usage events (``--cuda-memory-usage=true``), a counter track per device and process
  in the "GPU N" process (``cat`` device_memory, arg ``MiB``): live device memory, the series the
  report's memory lane draws (at most ``LANE_POINTS`` points a pair, its peaks kept);
* with unified memory, counter tracks in the "GPU N" process (``cat`` unified_memory): the bytes
  migrated so far to and from the device (``MiB``, from the unified-memory copies), the GPU page
  faults so far (``faults``); and per host process its CPU page faults so far. A track above
  ``MAX_COUNTER_SAMPLES`` events keeps that many, evenly spaced (the running total is exact at each).

``X`` events on one thread must nest (a child inside its parent) for the viewers. Events that
overlap without nesting (NVTX start/end ranges, or any other overlap in a trace) go on an extra
thread of the same process, named after the first with ``(overlap K)``, so every thread of the file
holds properly nested events only.

Written as a stream, one event per line, through the atomic writer (never half a file, never over
an input, never over an existing file without ``force``).

The document is written here; its parts in ``events`` (the writer, complete events, metadata,
nesting lanes), ``tracks`` (GPU ops and idle gaps, host ranges and API calls, NVTX marks, findings)
and ``counters`` (GPU metrics, device memory, unified memory).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from nsysan.report.perfetto.counters import (
    MAX_COUNTER_SAMPLES,
    memory_counters,
    metric_counters,
    metric_sources,
    um_counters,
)
from nsysan.report.perfetto.events import GPU_PID, Writer
from nsysan.report.perfetto.tracks import finding_events, finding_time, gpu_tracks, host_tracks


def _origin(a: Any) -> int:
    """The document's time origin: the capture start, or the earliest event, sample or finding before it."""
    t0 = int(a.capture.start_ns)
    for df in (a.ops, a.gaps, a.nvtx_ranges, a.trace.cuda_api, a.trace.nvtx):
        if len(df):
            t0 = min(t0, int(df["start_ns"].min()))
    for src in metric_sources(a):
        t0 = min(t0, int(src.ts[0]))
    m = a.memory
    if m is not None and getattr(m, "recorded", False) and len(m.series):
        t0 = min(t0, int(m.series["t_ns"].min()))
    for df in (a.trace.um_gpu_faults, a.trace.um_cpu_faults):
        if len(df):
            t0 = min(t0, int(df["start_ns"].min()))
    for f in a.findings:
        t0 = min(t0, finding_time(f))
    return t0


def write_events(a: Any, f: IO[bytes]) -> dict[str, Any]:
    """Stream the whole trace-event JSON document to ``f``; returns ``otherData`` (the counts per
    category, ``t0_ns``)."""
    t0 = _origin(a)
    f.write(b'{"traceEvents":[\n')
    w = Writer(f)
    steps: Sequence[Callable[[Writer, Any, int], None]] = (gpu_tracks, host_tracks, finding_events)
    for step in steps:
        step(w, a, t0)
    named = {GPU_PID + d for d in (*a.ops["device_id"].astype("int64").tolist(),
                                   *a.gaps["device_id"].astype("int64").tolist())}
    gm = metric_counters(w, a, t0, named, MAX_COUNTER_SAMPLES) if metric_sources(a) else {}
    mem = memory_counters(w, a, t0, named)
    um = um_counters(w, a, t0, named, MAX_COUNTER_SAMPLES)
    w.flush()
    from nsysan._version import __version__

    other = {"generator": f"nsysan {__version__}", "trace": Path(a.trace.meta.path).name if a.trace.meta.path else "",
             "t0_ns": t0, "time_unit": "ts and dur in microseconds from t0_ns", "capped": False,
             "counts": dict(sorted(w.counts.items()))}
    if gm:  # only with GPU metrics: the bytes of other traces stay as they were
        other["gpu_metrics"] = {"unit": "% of peak", "max_events_per_track": MAX_COUNTER_SAMPLES, "tracks": gm}
    if mem:  # only with memory usage events, as above
        other["device_memory"] = {"unit": "MiB live", "tracks": mem}
    if um:
        other["unified_memory"] = {"unit": "running totals: MiB migrated, faults",
                                   "max_events_per_track": MAX_COUNTER_SAMPLES, "tracks": um}
    f.write(b'\n],"displayTimeUnit":"ns","otherData":' + json.dumps(other, separators=(",", ":")).encode() + b"}\n")
    return other


def write_perfetto(a: Any, path: Path, *, force: bool = False,
                   protect: Sequence[tuple[int, int]] = ()) -> dict[str, Any]:
    """Write ``a``'s timeline to ``path`` (atomically; see ``nsysan.outputs.atomic_file``)."""
    from nsysan.outputs import atomic_file

    with atomic_file(Path(path), force=force, protect=protect) as f:
        return write_events(a, f)
