"""The trace-event JSON's building blocks: exact microseconds from integer nanoseconds, the writer
that streams events in chunks and counts them per category, complete (``X``) events, process and
thread metadata, JSON string literals of names (each distinct one encoded once), and the lanes that
keep every thread's events properly nested (an event that overlaps without nesting goes on an extra
thread, ``(overlap K)``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import IO, Any

import numpy as np
import pandas as pd

GPU_PID = 1 << 30  # "GPU N" is process GPU_PID + N: far above any OS process id (at most 2**22 on Linux)
IDLE_TID = 0  # the "GPU N idle" thread; streams get 1, 2, ... in order
OVERLAP_TID = 1 << 24  # extra threads for overlapping events: above any OS thread id of the trace's 24-bit field
CHUNK = 20_000  # events per write


def us(ns: int) -> str:
    """Non-negative integer nanoseconds as exact decimal microseconds."""
    q, r = divmod(ns, 1000)
    return f"{q}.{r:03d}" if r else str(q)


def nest_lanes(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For events sorted by (start ascending, end descending): a lane per event such that the events
    of each lane nest properly (each one either inside the previous open one or after it ends). Lane
    0 takes all it can; an event overlapping an open one without fitting inside goes to the first
    lane where it fits, or a new one."""
    n = len(start)
    out = np.zeros(n, dtype=np.int64)
    if n < 2:
        return out
    open_end = np.maximum.accumulate(end)
    if bool((start[1:] >= open_end[:-1]).all()):  # nothing overlaps: the usual case, no loop
        return out
    stacks: list[list[int]] = []
    for i, (a, b) in enumerate(zip(start.tolist(), end.tolist())):
        for k, st in enumerate(stacks):
            while st and st[-1] <= a:
                st.pop()
            if not st or b <= st[-1]:
                st.append(b)
                out[i] = k
                break
        else:
            stacks.append([b])
            out[i] = len(stacks) - 1
    return out


class Writer:
    """Comma-separated events, one per line, written in chunks; counts per category."""

    def __init__(self, f: IO[bytes]) -> None:
        self.f = f
        self.first = True
        self.buf: list[str] = []
        self.counts: dict[str, int] = {}

    def add(self, line: str, cat: str | None = None) -> None:
        self.buf.append(line)
        if cat is not None:
            self.counts[cat] = self.counts.get(cat, 0) + 1
        if len(self.buf) >= CHUNK:
            self.flush()

    def extend(self, lines: list[str], cat: str) -> None:
        self.buf += lines
        self.counts[cat] = self.counts.get(cat, 0) + len(lines)
        if len(self.buf) >= CHUNK:
            self.flush()

    def flush(self) -> None:
        if self.buf:
            text = ",\n".join(self.buf)
            self.f.write(((",\n" if not self.first else "") + text).encode("utf-8", "backslashreplace"))
            self.first = False
            self.buf = []


def meta(w: Writer, what: str, pid: int, tid: int | None, args: dict[str, Any]) -> None:
    ev: dict[str, Any] = {"ph": "M", "name": what, "pid": pid, "args": args}
    if tid is not None:
        ev["tid"] = tid
    w.add(json.dumps(ev, separators=(",", ":")), "metadata")


def json_names(values: pd.Series, rows: np.ndarray) -> list[str]:
    """JSON string literals of ``values[rows]``, each distinct value encoded once."""
    arr = values.array
    if isinstance(arr, pd.Categorical):
        cats = [json.dumps(str(c)) for c in arr.categories] + ['""']
        codes = np.asarray(arr.codes)[rows]
        return [cats[c] for c in codes.tolist()]
    cache: dict[Any, str] = {}
    out = []
    for v in arr.take(rows):
        key = None if v is None or v is pd.NA or (isinstance(v, float) and v != v) else v
        s = cache.get(key)
        if s is None:
            s = cache[key] = json.dumps("" if key is None else str(key))
        out.append(s)
    return out


def emit(w: Writer, cat: str, pid: int, tids: np.ndarray, s: np.ndarray, e: np.ndarray,
          names: Callable[[np.ndarray], list[str]], args: Callable[[np.ndarray], list[str]]) -> None:
    """Complete events, CHUNK at a time (a thread with millions of calls is never held as text at
    once): ``names(idx)`` / ``args(idx)`` give the JSON texts of the events at positions ``idx``."""
    head = f'{{"ph":"X","cat":"{cat}","pid":{pid},"tid":'
    for lo in range(0, len(s), CHUNK):
        idx = np.arange(lo, min(lo + CHUNK, len(s)))
        w.extend([f'{head}{t},"ts":{us(a)},"dur":{us(b - a)},"name":{n},"args":{g}}}'
                  for t, a, b, n, g in zip(tids[idx].tolist(), s[idx].tolist(), e[idx].tolist(), names(idx),
                                           args(idx))],
                 cat)


class Tracks:
    """Thread ids and names within one process: real threads keep their tid, extra threads for
    overlapping events get fresh ids above OVERLAP_TID."""

    def __init__(self, w: Writer, pid: int) -> None:
        self.w, self.pid = w, pid
        self.next_extra = OVERLAP_TID
        self.named: set[int] = set()

    def name(self, tid: int, name: str, sort_index: int) -> None:
        if tid in self.named:
            return
        self.named.add(tid)
        meta(self.w, "thread_name", self.pid, tid, {"name": name})
        meta(self.w, "thread_sort_index", self.pid, tid, {"sort_index": sort_index})

    def lanes(self, tid: int, name: str, sort_index: int, lane: np.ndarray) -> np.ndarray:
        """The thread id of each event given its lane (0: ``tid`` itself); names the threads used."""
        self.name(tid, name, sort_index)
        n_lanes = int(lane.max()) + 1 if len(lane) else 1
        ids = [tid]
        for k in range(1, n_lanes):
            extra = self.next_extra
            self.next_extra += 1
            self.name(extra, f"{name} (overlap {k})", sort_index)
            ids.append(extra)
        return np.asarray(ids, dtype=np.int64)[lane]


def nesting_order(s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Order by start ascending, end descending (a parent before the events inside it)."""
    return np.lexsort((-e, s))
