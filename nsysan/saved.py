"""The saved analysis (``nsysan.analysis/2`` JSON) as input: the parts that ``diff``, ``compare``,
the CI gate and the results cache read, with their types, and the check that names the first field
of a saved file that is not well formed. Imports nothing of nsysan: every layer that reads a saved
file can use it."""

from __future__ import annotations

import math
from typing import Any

# The parts of a saved ``nsysan.analysis/2`` file that diff, compare and the gate read, and their
# types. A saved file is input like any other: each of these is checked before use, and a wrong one
# is named ("kernels.by_name[3].total_ns: expected a number, got null"). "num?" may be null.
_NUM, _NUM_NULL, _STR, _STR_NULL, _BOOL_NULL = "num", "num?", "str", "str?", "bool?"
SAVED_SHAPE: dict[str, Any] = {
    "trace": {"cuda_graph_trace": _STR_NULL, "nsys_version": _STR_NULL, "gpus": [{"name": _STR_NULL}]},
    "windows": {"steady": {"label": _STR_NULL}},
    "iterations": {"range": _STR_NULL,
                   "stats": {k: _NUM_NULL for k in ("p50_ns", "p90_ns", "p99_ns", "mean_ns", "throughput_per_s",
                                                    "latency_p50_ns", "queue_depth_p50")}
                   | {"latency_includes_queueing": _BOOL_NULL},
                   "timed_regions": [{"cpu_ns": _NUM, "with_gpu_ns": _NUM}],
                   "per_iteration": [{"period_ns": _NUM_NULL, "latency_ns": _NUM, "warmup": _BOOL_NULL}]},
    "gpu": {"steady": [{"busy_ns": _NUM, "idle_ns": _NUM}]},
    "overlap": {"by_direction": [{"direction": _STR_NULL, "copy_ns": _NUM, "overlap_ns": _NUM}]},
    "launch": {"kernels": {"api_med_ns": _NUM_NULL, "launch_dominated_frac": _NUM_NULL}},
    "memcpy": {"by_kind": [{"kind": _STR_NULL, "throughput_bytes_per_s": _NUM_NULL}]},
    "gaps": {"summary": {"total_ns": _NUM_NULL}},
    "kernels": {"by_name": [{"name": _STR, "total_ns": _NUM, "count": _NUM, "med_ns": _NUM_NULL}]},
    "nvtx": {"by_name": [{"name": _STR, "total_ns": _NUM, "count": _NUM, "med_ns": _NUM_NULL,
                          "style": _STR_NULL}]},
    "graph_launches": {"total_ns": _NUM_NULL},
    "findings": [{"rule": _STR, "title": _STR_NULL, "impact_ns": _NUM_NULL}],
}
_REQUIRED_IN_ROW = {"latency_ns", "cpu_ns", "with_gpu_ns", "busy_ns", "idle_ns", "copy_ns", "overlap_ns", "name",
                    "total_ns", "count", "rule"}


def _kind(v: Any) -> str:
    return "null" if v is None else {bool: "a boolean", str: "a string", dict: "an object", list: "a list"}.get(
        type(v), "a number" if isinstance(v, (int, float)) else type(v).__name__)


def validate_saved(d: Any, where: str = "") -> str | None:
    """The first field of a saved analysis that does not have the documented type, as
    ``"path: expected ..., got ..."``; None when everything diff and compare read is well formed."""
    return _check(d, SAVED_SHAPE, where)


def _check(v: Any, shape: Any, where: str) -> str | None:
    if isinstance(shape, dict):
        if v is None and where:  # a section may be absent or null ("no such data")
            return None
        if not isinstance(v, dict):
            return f"{where or 'top level'}: expected an object, got {_kind(v)}"
        for k, sub in shape.items():
            if k not in v:
                if where and k in _REQUIRED_IN_ROW:
                    return f"{where}.{k}: missing"
                continue
            bad = _check(v[k], sub, f"{where}.{k}" if where else k)
            if bad:
                return bad
        return None
    if isinstance(shape, list):
        if v is None:
            return None
        if not isinstance(v, list):
            return f"{where}: expected a list, got {_kind(v)}"
        for i, row in enumerate(v):
            if not isinstance(row, dict):
                return f"{where}[{i}]: expected an object, got {_kind(row)}"
            bad = _check(row, shape[0], f"{where}[{i}]")
            if bad:
                return bad
        return None
    nullable = shape.endswith("?")
    if v is None:
        return None if nullable else f"{where}: expected {'a number' if shape.startswith('num') else 'a string'}, got null"
    if shape.startswith("num"):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or abs(v) > 1e30:
            return f"{where}: expected a finite number, got {_kind(v) if not isinstance(v, (int, float)) else v}"
    elif shape.startswith("str"):
        if not isinstance(v, str):
            return f"{where}: expected a string, got {_kind(v)}"
    elif shape.startswith("bool") and not isinstance(v, bool):
        return f"{where}: expected true or false, got {_kind(v)}"
    return None
