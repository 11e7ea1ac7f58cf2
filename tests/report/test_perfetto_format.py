"""``--perfetto`` against the Trace Event Format (the JSON Object Format: ``traceEvents``, each event's
phase and the fields that phase needs), as a JSON Schema checked by nsysan's own validator, on traces
of every kind of track; and the counter tracks the HTML's lanes have: device memory, unified memory
(bytes migrated, GPU and CPU page faults), their values from SQL on the export."""

from __future__ import annotations

import io
import json
from collections import defaultdict

import pytest
import sqltruth
from conftest import FIXTURE_NAMES

from nsysan.report.perfetto import write_events
from nsysan.report.perfetto.counters import MIB
from nsysan.report.perfetto.events import GPU_PID
from nsysan.report.schema import validate

_NUM = {"type": "number"}
_INT = {"type": "integer"}
_ARGS = {"type": "object"}
# the Trace Event Format's JSON Object Format (Google's "Trace Event Format" document, as Perfetto and
# chrome://tracing read it): the phases nsysan writes, each with the fields it needs
TRACE_EVENT_SCHEMA = {
    "$defs": {
        "complete": {"type": "object", "required": ["ph", "name", "cat", "pid", "tid", "ts", "dur"],
                     "properties": {"ph": {"const": "X"}, "name": {"type": "string"}, "cat": {"type": "string"},
                                    "pid": _INT, "tid": _INT, "ts": _NUM, "dur": {"type": "number", "minimum": 0},
                                    "args": _ARGS}},
        "counter": {"type": "object", "required": ["ph", "name", "pid", "ts", "args"],
                    "properties": {"ph": {"const": "C"}, "name": {"type": "string"}, "cat": {"type": "string"},
                                   "pid": _INT, "ts": _NUM,
                                   "args": {"type": "object", "additionalProperties": _NUM}}},
        "instant": {"type": "object", "required": ["ph", "name", "pid", "ts", "s"],
                    "properties": {"ph": {"const": "i"}, "name": {"type": "string"}, "cat": {"type": "string"},
                                   "pid": _INT, "tid": _INT, "ts": _NUM, "s": {"enum": ["g", "p", "t"]},
                                   "args": _ARGS}},
        "metadata": {"type": "object", "required": ["ph", "name", "pid", "args"],
                     "properties": {"ph": {"const": "M"}, "pid": _INT, "tid": _INT,
                                    "name": {"enum": ["process_name", "process_sort_index", "thread_name",
                                                      "thread_sort_index"]},
                                    "args": _ARGS}},
    },
    "type": "object", "required": ["traceEvents"],
    "properties": {
        "traceEvents": {"type": "array", "items": {"anyOf": [{"$ref": "#/$defs/complete"}, {"$ref": "#/$defs/counter"},
                                                             {"$ref": "#/$defs/instant"},
                                                             {"$ref": "#/$defs/metadata"}]}},
        "displayTimeUnit": {"enum": ["ms", "ns"]}, "otherData": {"type": "object"}},
}
# one of each kind of track: streams and idle gaps, GPU metrics, device memory, unified memory, two processes
KINDS = [n for n in ("ladder_baseline", "metrics_mix", "mem_growth", "um_thrash", "um_cpu_writes", "two_procs")
         if n in FIXTURE_NAMES]


def _events(a) -> dict:
    b = io.BytesIO()
    write_events(a, b)
    return json.loads(b.getvalue())


def _tracks(doc: dict, cat: str) -> dict[tuple[int, str], list[tuple[float, float]]]:
    out: dict[tuple[int, str], list[tuple[float, float]]] = defaultdict(list)
    for e in doc["traceEvents"]:
        if e["ph"] == "C" and e.get("cat") == cat:
            ((_, v),) = e["args"].items()
            out[(e["pid"], e["name"])].append((e["ts"], v))
    return out


@pytest.mark.parametrize("name", KINDS)
def test_every_event_follows_the_trace_event_format(name, analysis):
    # GIVEN the timeline of a trace with that kind of track
    doc = _events(analysis(name))
    # THEN every event has the fields of its phase, and each process is named
    assert validate(doc, TRACE_EVENT_SCHEMA) == []
    named = {e["pid"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
    assert {e["pid"] for e in doc["traceEvents"] if e["ph"] in ("X", "C")} <= named


def test_the_validator_catches_what_the_format_forbids():
    # GIVEN events each missing what its phase needs, or of a phase the format has not
    bad = {"traceEvents": [{"ph": "X", "name": "k", "cat": "kernel", "pid": 1, "tid": 1, "ts": 0},
                           {"ph": "X", "name": "k", "cat": "kernel", "pid": 1, "tid": 1, "ts": 0, "dur": -1},
                           {"ph": "C", "name": "m", "pid": 1, "ts": 0, "args": {"MiB": "12"}},
                           {"ph": "Q", "name": "q", "pid": 1, "ts": 0}]}
    # THEN each is named by its index
    errs = validate(bad, TRACE_EVENT_SCHEMA)
    assert [e.split(":")[0] for e in errs] == [f"$.traceEvents[{i}]" for i in range(4)], errs


@pytest.mark.skipif("mem_growth" not in FIXTURE_NAMES, reason="fixture absent")
def test_device_memory_counter_is_the_live_memory_by_sql(analysis, fixture_dir):
    # GIVEN a loop that keeps memory alive every step, recorded with --cuda-memory-usage=true
    path = fixture_dir / "mem_growth.sqlite"
    doc = _events(analysis("mem_growth"))
    tracks = _tracks(doc, "device_memory")
    # THEN a track per device and process, in the "GPU N" process: its peak and last value are the
    # running sum of device allocations minus frees (pinned and pageable host memory left out), by SQL
    rows = sqltruth.query(path, "SELECT deviceId, (globalPid >> 24) & 16777215, bytes, memoryOperationType "
                      "FROM CUDA_GPU_MEMORY_USAGE_EVENTS WHERE memKind NOT IN (0, 1) ORDER BY start")
    live: dict[tuple[int, int], list[int]] = defaultdict(lambda: [0])
    for dev, pid, nbytes, op in rows:
        live[(dev, pid)].append(live[(dev, pid)][-1] + (nbytes if op == 0 else -nbytes))
    assert {(GPU_PID + d, f"Device memory, pid {p}") for d, p in live} == set(tracks)
    for (dev, pid), run in live.items():
        vals = [v for _, v in tracks[(GPU_PID + dev, f"Device memory, pid {pid}")]]
        assert max(vals) * MIB == pytest.approx(max(run), rel=1e-9)
        assert vals[-1] * MIB == pytest.approx(run[-1], rel=1e-9)
        assert vals[-1] > vals[0]  # it grows: the lane the HTML draws


@pytest.mark.parametrize("name", [n for n in ("um_thrash", "um_cpu_writes") if n in FIXTURE_NAMES])
def test_unified_memory_counters_are_running_totals_by_sql(name, analysis, fixture_dir):
    path = fixture_dir / f"{name}.sqlite"
    doc = _events(analysis(name))
    tracks = _tracks(doc, "unified_memory")
    # THEN bytes migrated each way and GPU page faults per device, CPU page faults per process, each
    # track rising to the totals SQL counts
    for kind, way in ((11, "to device"), (12, "to host")):
        for dev, total in sqltruth.query(path, "SELECT deviceId, sum(bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = ? "
                                     "GROUP BY deviceId", kind):
            vals = [v for _, v in tracks[(GPU_PID + dev, f"Unified memory migrated {way}")]]
            assert vals == sorted(vals) and vals[-1] * MIB == pytest.approx(total, rel=1e-9)
    for dev, faults in sqltruth.query(path, "SELECT deviceId, sum(numberOfPageFaults) FROM CUDA_UM_GPU_PAGE_FAULT_EVENTS "
                                  "GROUP BY deviceId"):
        assert tracks[(GPU_PID + dev, "GPU page faults")][-1][1] == faults
    for pid, n in sqltruth.query(path, "SELECT (globalPid >> 24) & 16777215, count(*) FROM CUDA_UM_CPU_PAGE_FAULT_EVENTS "
                             "GROUP BY 1"):
        assert tracks[(pid, "CPU page faults")][-1][1] == n
    assert doc["otherData"]["unified_memory"]["tracks"]
