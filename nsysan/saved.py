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


# A number in a saved file is out of range when a float cannot hold it (an integer of more than 30
# digits, 1e400) or when it is not a JSON number at all (NaN, Infinity). ``loads_saved`` keeps such a
# value as an ``OutOfRange`` and ``out_of_range`` names the first one by its path.
_MAX_DIGITS = 30


class OutOfRange:
    """A number of a saved file that no float holds, as its text (shortened when long). Neither a
    number nor a string: no check or computation can take it for data."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text

    __repr__ = __str__


def loads_saved(text: str) -> tuple[Any, str | None]:
    """``json.loads`` for a saved analysis, and the first number in it that no float holds, NaN or
    Infinity, anywhere in the file, as ``"path: expected a finite number, got ..."`` (None when
    none). Such a value is kept as an ``OutOfRange``: an integer is never converted when longer than
    30 digits (so 5,000 digits do not hit Python's limit on integer conversion either). The number
    hooks cost about 1 s per 100 MB of JSON; the paths are searched only when one fired.
    ``ValueError``/``RecursionError`` as json's."""
    import json

    hits: list[int] = []

    def parse_int(t: str) -> int | OutOfRange:
        if len(t) > _MAX_DIGITS:  # a sign and 30 digits pass: abs < 1e30 is checked by validate_saved
            digits = len(t) - t.startswith("-")
            if digits > _MAX_DIGITS:
                hits.append(1)
                return OutOfRange(f"an integer of {digits} digits")
        return int(t)

    def parse_float(t: str) -> float | OutOfRange:
        v = float(t)
        if v - v == 0:  # finite
            return v
        hits.append(1)
        return OutOfRange(t if len(t) <= 40 else f"a number of {len(t)} characters")

    def parse_constant(name: str) -> OutOfRange:
        hits.append(1)
        return OutOfRange(f"{name}, which is not a JSON number")

    d = json.loads(text, parse_int=parse_int, parse_float=parse_float, parse_constant=parse_constant)
    return d, (out_of_range(d) if hits else None)


def _key(k: str) -> str:
    return k if len(k) <= 60 else k[:57] + "..."


def out_of_range(d: Any) -> str | None:
    """The first number of ``loads_saved(...)`` that is out of range, as ``"path: ..."``; None if none.
    Iterative: a deeply nested file cannot exhaust the stack here."""
    stack: list[tuple[Any, str]] = [(d, "")]
    while stack:
        v, where = stack.pop()
        if isinstance(v, OutOfRange):
            return f"{where or 'top level'}: expected a finite number, got {v}"
        if isinstance(v, dict):
            stack.extend((x, f"{where}.{_key(k)}" if where else _key(k)) for k, x in reversed(list(v.items())))
        elif isinstance(v, list):
            stack.extend((x, f"{where}[{i}]") for i, x in reversed(list(enumerate(v))))
    return None


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
        if isinstance(v, OutOfRange):
            return f"{where}: expected a finite number, got {v}"
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return f"{where}: expected a finite number, got {_kind(v)}"
        if isinstance(v, int) and abs(v) > 10 ** _MAX_DIGITS:  # never float(v): a huge int overflows
            return f"{where}: expected a finite number, got an integer beyond 1e{_MAX_DIGITS}"
        if not math.isfinite(v) or abs(v) > 1e30:
            return f"{where}: expected a finite number, got {v}{' (a number out of range)' if math.isinf(v) else ''}"
    elif shape.startswith("str"):
        if not isinstance(v, str):
            return f"{where}: expected a string, got {_kind(v)}"
    elif shape.startswith("bool") and not isinstance(v, bool):
        return f"{where}: expected true or false, got {_kind(v)}"
    return None
