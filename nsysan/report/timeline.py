"""The canvas timeline's data: every GPU op, idle gap, NVTX range and CUDA API call, one lane per
stream or thread, shipped whole and compactly.

Nothing is dropped or binned here: each lane carries all its operations as columns of unsigned
LEB128 varints (start delta from the previous op, duration, name index, kind, NVTX depth), deflated
(a zlib stream, ``report/deflate.py``) and base64-encoded. On the 84 MB ``launch_eager`` x40 replica (1.3M kernels and API calls)
that is ~3.5 MB of HTML. The browser (``templates/static/timeline.js``) inflates it with the native
``DecompressionStream`` and aggregates per pixel column when several ops share one, so a lane that
is 5% busy looks 5% busy at every zoom.

Times are ns relative to the capture start. Strings from the trace (kernel, API, NVTX, thread and
process names) stay raw: ``tojson`` escapes them in the page and the script sets them as text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from nsysan._executor import SMALL_EVENTS, default_workers, event_rows
from nsysan._executor import threads as thread_pool
from nsysan.analyses.frames import distinct, group_rows, name_in
from nsysan.analyses.streams import stream_role
from nsysan.report import deflate, metrics_view
from nsysan.report.encoding import varint
from nsysan.report.resources_view import memory_lanes

MAX_NAME = 300  # characters of an op name shipped (C++ kernel names run to thousands)
ITERATIONS_SHOWN = 3  # the timeline opens on this many steady iterations

# kind codes: the colour of an op in timeline.js (KIND_NAMES there, same order)
KERNEL, COPY_H2D, MEMSET, GRAPH, COPY_D2H, GAP, NVTX, API, COMM, COPY_OTHER = range(10)


def encode_ops(start: np.ndarray, end: np.ndarray, name: np.ndarray, kind: np.ndarray,
               depth: np.ndarray | None = None) -> tuple[str, np.ndarray]:
    """One lane's ops as base64(zlib(varint columns)): start deltas, durations, name ids, kinds,
    depths, ``n`` values each, in start order. Returns the text and the order used (positions into
    the inputs), so callers can check what was shipped."""
    s = np.asarray(start, dtype=np.int64)
    order = np.argsort(s, kind="stable")
    s = s[order]
    e = np.maximum(np.asarray(end, dtype=np.int64)[order], s)
    first = int(s[0]) if len(s) else 0
    if first < 0:  # an op before the capture start (clock skew): the first delta is from 0, so clamp
        s = np.maximum(s, 0)
        e = np.maximum(e, s)
    d = np.diff(s, prepend=0)
    dep = np.zeros(len(s), dtype=np.int64) if depth is None else np.asarray(depth, dtype=np.int64)[order]
    held = [varints((d, e - s, np.asarray(name, dtype=np.int64)[order], np.asarray(kind, dtype=np.int64)[order],
                     np.maximum(dep, 0)))]
    return deflate.text(held), order


def encode_lane(start: np.ndarray, end: np.ndarray, name: np.ndarray, kind: np.ndarray,
                depth: np.ndarray | None, t0: int) -> tuple[str, np.ndarray, int]:
    """``encode_ops(start - t0, end - t0, ...)`` and the length of the union of the ops' intervals
    (``intervals.merge``'s total). With the extension, both come from the ops' own columns in one C
    pass (``_btree.lane``), without a temporary per column; the same text and length. ``kind`` may be
    one int for every op. The order returned is None when it is the rows as they are (starts sorted)."""
    from nsysan.analyses import intervals as iv
    from nsysan.trace import direct

    fast = direct.c_pass("lane")
    s = np.ascontiguousarray(start, dtype=np.int64)
    e = np.ascontiguousarray(end, dtype=np.int64)
    if fast is None or _wraps(s, t0):  # a shift that wraps: numpy's way
        if np.ndim(kind) == 0:
            kind = np.full(len(s), int(kind), dtype=np.int64)
        text, order = encode_ops(s - t0, e - t0, name, kind, depth)
        ms, me = iv.merge(s, e) if len(s) else (np.zeros(0, np.int64), np.zeros(0, np.int64))
        return text, order, int(np.sum(me - ms))
    # the order of start - t0, as the shift does not wrap; none (the rows as they are) when the
    # starts are sorted already (the usual case: no argsort, no positions array)
    order = None if len(s) < 2 or bool((s[1:] >= s[:-1]).all()) else np.argsort(s, kind="stable")
    text, covered = _c_lane(fast, order, s, e, name, kind, depth, t0)
    return text, order, covered


def _wraps(s: np.ndarray, t0: int) -> bool:
    """Whether shifting some start of ``s`` by ``-t0`` leaves int64 (the C lane then does not apply)."""
    lo, hi = (int(s.min()), int(s.max())) if len(s) else (0, 0)
    return not (-(1 << 63) <= lo - t0 and hi - t0 < (1 << 63))


def _c_lane(fast: Any, order: np.ndarray | None, s: np.ndarray, e: np.ndarray, name: np.ndarray,
            kind: np.ndarray | int, depth: np.ndarray | None, t0: int) -> tuple[str, int]:
    """``_btree.lane`` (the ops at ``order`` of the columns, or every row) deflated: (text, busy length)."""
    from nsysan.trace import direct

    got = fast(order, s, e, direct.int_buffer(name), int(kind) if np.ndim(kind) == 0 else direct.int_buffer(kind),
               None if depth is None else np.ascontiguousarray(depth, dtype=np.int64), int(t0))
    held, covered = [got[0]], got[1]
    del got
    return deflate.text(held), covered


ROWS_CHECK = 1 << 18  # positions checked together for start order (encode_lane_rows)


def encode_lane_rows(start: np.ndarray, end: np.ndarray, name: np.ndarray, kind: np.ndarray | int,
                     rows: np.ndarray, t0: int) -> tuple[str, int] | None:
    """``encode_lane`` of the ops at ``rows`` (ascending positions into the whole columns ``start``,
    ``end``, ``name`` and ``kind``), read through the positions by the C lane instead of copies of
    every column (a stream of all but a few of a million ops: two int64 copies of its times were
    the lane's largest temporaries); the same text and busy length. None where that does not apply
    (no extension, no name id for every row, starts that decrease along the rows, a shift by ``t0``
    that wraps): the caller then copies the lane's rows."""
    from nsysan.trace import direct

    fast = direct.c_pass("lane")
    s, e = np.asarray(start), np.asarray(end)
    if fast is None or s.dtype != np.int64 or e.dtype != np.int64 or not s.flags.c_contiguous \
            or not e.flags.c_contiguous or len(rows) == 0 or name is None:
        return None
    if _wraps(s, t0):  # (bounds of every row: within them, the lane's rows do not wrap)
        return None
    last = None
    for a in range(0, len(rows), ROWS_CHECK):  # the lane's starts in row order: its start order
        x = s[rows[a:a + ROWS_CHECK]]
        if (last is not None and int(x[0]) < last) or not bool((x[1:] >= x[:-1]).all()):
            return None
        last = int(x[-1])
        del x
    return _c_lane(fast, np.ascontiguousarray(rows, dtype=np.int64), s, e, name, kind, None, t0)


def varints(columns: tuple[np.ndarray, ...]) -> bytes:
    """``varint`` of each column, concatenated: in one C pass when the extension has it (``_btree``;
    about 15x faster on millions of ops, the same bytes), else with numpy."""
    from nsysan.trace import direct

    fast = direct.c_pass("varints")
    if fast is None:
        return b"".join(varint(c) for c in columns)
    return fast([np.ascontiguousarray(c, dtype=np.int64) for c in columns])


class _Names:
    """Op names shipped once; ops refer to them by index (first seen, first numbered)."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.index: dict[str, int] = {}

    def id(self, n: str) -> int:
        n = n[:MAX_NAME]
        if n not in self.index:
            self.index[n] = len(self.names)
            self.names.append(n)
        return self.index[n]

    def ids(self, values: pd.Series, rows: np.ndarray | None = None) -> np.ndarray:
        """The name id of each row of ``values`` (``rows`` of it), one lookup per distinct text."""
        codes, texts = _text_codes(values, rows)
        if len(codes) == 0:
            return np.zeros(0, dtype=np.int64)
        lut = _narrow(np.array([self.id(t) for t in texts], dtype=np.int32))  # ids number far below 2^31
        return lut[codes]

    def ids_later(self, values: pd.Series, rows: np.ndarray) -> Any:
        """``ids(values, rows)`` as a function that makes the array when called: the names are
        numbered now (in the same order as ``ids``), the one id per row only when its lane is
        encoded, so the lanes waiting their turn hold no per-row arrays. A function of an optional
        mask over ``rows``; with ``every``, the id of every row of ``values`` (None where the column
        is not categorical)."""
        arr = values.array
        if not isinstance(arr, pd.Categorical):  # (no id for every row: numbering them would add names)
            nm = self.ids(values, None if isinstance(rows, slice) else rows)
            return lambda mask=None, every=False: None if every else nm if mask is None else nm[mask]
        # a categorical column: its categories then "nan" are numbered, as ``_text_codes`` lists them;
        # a missing value's code -1 picks the last entry ("nan"), as _text_codes' where does
        lut = _narrow(np.array([self.id(t) for t in [str(c) for c in arr.categories] + ["nan"]], dtype=np.int32))

        def make(mask: np.ndarray | None = None, every: bool = False) -> np.ndarray:
            codes = np.asarray(arr.codes) if every else _rows(np.asarray(arr.codes), rows)
            return lut[codes if mask is None else codes[mask]]

        return make


ALL = slice(None)  # every row of a table: its lane uses the columns themselves


def _narrow(ids: np.ndarray) -> np.ndarray:
    """Name ids in the narrowest of int8, int16 and int32 that holds them (the C lane reads any of
    them): one id per op of a lane of millions, a quarter of the room when the names are few."""
    from nsysan.trace.frames import narrow_type

    return ids.astype(narrow_type(0, int(ids.max(initial=0)), "int8") or np.int32, copy=False)


def _rows(col: np.ndarray, rows: np.ndarray | slice) -> np.ndarray:
    """``col[rows]``: the column itself for ``ALL`` or positions that are all of its rows
    (``group_rows`` gives ascending, distinct ones)."""
    return col if isinstance(rows, slice) or len(rows) == len(col) else col[rows]


def _groups(*keys: np.ndarray) -> list[tuple[tuple[int, ...], np.ndarray | slice, int]]:
    """``group_rows(*keys)`` with each group's row count, and ``ALL`` for a group of every row (one
    thread, one stream: no array of millions of positions kept while the lanes wait)."""
    n = len(keys[0]) if keys else 0
    # positions kept while the lanes wait their turn: int32 where they fit (half the room)
    pt = np.int32 if n < 1 << 31 else np.int64
    return [(k, ALL if len(r) == n else r.astype(pt, copy=False), len(r)) for k, r in group_rows(*keys)]


def _through_rows(whole: Any, t0: int) -> tuple[str, int, int] | None:
    """A lane of most of its table's rows encoded through its positions (``encode_lane_rows``):
    (text, busy length, ops), or None (then its rows are copied). ``whole``: (rows, the table's
    length, a function giving the table's starts, ends, name ids and kinds), or None. Below half the
    table, the copies cost less than the table's name id of every row."""
    if whole is None:
        return None
    rows, n_table, columns = whole
    if isinstance(rows, slice) or len(rows) * 2 < n_table:
        return None
    got = encode_lane_rows(*columns(), rows, t0)
    return None if got is None else (got[0], got[1], len(rows))


def _op_kinds(ops: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Each op's kind code (int8) and whether it is communication; each test of the op, role and kind
    columns a mask of this function only (``name_in``: a categorical column decided per category, no
    int64 code per op: 28 MiB of temporaries on 1.2M ops)."""
    code_all = np.full(len(ops), KERNEL, dtype=np.int8)  # widened per lane when it is encoded
    code_all[name_in(ops["op"], ("graph",))] = GRAPH
    code_all[name_in(ops["op"], ("memset",))] = MEMSET
    comm_all = name_in(ops["role"], ("communication",))
    code_all[comm_all] = COMM
    copy_all = name_in(ops["op"], ("memcpy",))
    code_all[copy_all] = COPY_OTHER
    code_all[copy_all & name_in(ops["kind"], ("HtoD",))] = COPY_H2D
    code_all[copy_all & name_in(ops["kind"], ("DtoH",))] = COPY_D2H
    return code_all, comm_all


def _text_codes(values: pd.Series, rows: np.ndarray | None = None) -> tuple[np.ndarray, list[str]]:
    """A code per row (of ``rows``, default all) and the text of each code (``str`` of the value,
    ``"nan"`` for a missing one): a categorical column's own codes, else codes of the values' text."""
    arr = values.array
    if isinstance(arr, pd.Categorical):  # its codes as int32 (one copy; a missing value's -1 made "nan"'s)
        texts = [str(c) for c in arr.categories] + ["nan"]
        codes = np.asarray(arr.codes)
        out = (codes if rows is None else codes[rows]).astype(np.int32)
        out[out < 0] = len(texts) - 1
        return out, texts
    taken = arr if rows is None else arr.take(rows)
    uniq, codes = np.unique(np.array([str(v) for v in taken], dtype=object), return_inverse=True)
    return codes.reshape(-1).astype(np.int64), [str(u) for u in uniq]


def _gap_keys(gaps: pd.DataFrame, rows: np.ndarray | slice = ALL) -> tuple[np.ndarray, list[str], list[str]]:
    """A key per gap (of ``rows``) for its (cause, activity) pair, and the cause and activity texts."""
    cause_codes, cause_text = _text_codes(gaps["cause"], None if isinstance(rows, slice) else rows)
    act_codes, act_text = _text_codes(gaps["activity"], None if isinstance(rows, slice) else rows)
    if len(cause_text) * len(act_text) >= 1 << 31:  # (int32 codes: their product would not fit)
        cause_codes = cause_codes.astype(np.int64)
    cause_codes *= len(act_text)
    cause_codes += act_codes
    return cause_codes, cause_text, act_text


def _gap_key(gaps: pd.DataFrame, rows: np.ndarray | slice) -> np.ndarray:
    return _gap_keys(gaps, rows)[0]


def initial_window(a: Any) -> tuple[int, int, str]:
    """Where the timeline opens (absolute ns) and what it is: ``ITERATIONS_SHOWN`` consecutive steady
    iterations of the chosen iteration range (of its longest sequence: one thread), from the first
    steady one, clipped to the steady window; else the steady window; else the capture."""
    st, cap = a.steady, a.capture
    t = a.iterations.table
    if len(t) and {"start_ns", "end_ns", "warmup", "pid", "tid"} <= set(t.columns):
        steady = t.loc[~t["warmup"].to_numpy(dtype=bool)
                       & (t["start_ns"].to_numpy() >= st.start_ns) & (t["end_ns"].to_numpy() <= st.end_ns)]
        if len(steady):
            seq = steady.groupby(["pid", "tid"], sort=True).size().idxmax()
            one = steady.loc[(steady["pid"] == seq[0]).to_numpy() & (steady["tid"] == seq[1]).to_numpy()]
            one = one.sort_values("start_ns", kind="stable")
            first = one.iloc[: ITERATIONS_SHOWN]
            lo = int(first["start_ns"].iloc[0])
            # to the start of the iteration after the last one shown (its GPU work has run by then),
            # or the last one's end
            nxt = one["start_ns"].to_numpy()[ITERATIONS_SHOWN:ITERATIONS_SHOWN + 1]
            hi = max(int(first["end_ns"].max()), int(nxt[0]) if len(nxt) else 0)
            hi = min(hi, st.end_ns)
            if hi > lo:
                return lo, hi, f"{len(first)} steady iteration{'s' if len(first) > 1 else ''} of '{a.iterations.range_name}'"
    if st.dur_ns > 0 and st.kind != cap.kind:
        return st.start_ns, st.end_ns, st.label
    return cap.start_ns, cap.end_ns, "whole capture"


def start(a: Any) -> Any:
    """Begin ``build_timeline(a)`` on a background thread (its encoding is mostly C and deflate, which
    release the GIL), so the rules run and the JSON is written meanwhile (the command line calls it
    from ``analyze(on_analyses=...)``, before the rules); returns what ``build_timeline(a, begun)``
    takes the result from (dropping it forgets the work: an output that could not be written). None for
    a small trace (fewer than ``_executor.SMALL_EVENTS`` event rows): ``build_timeline`` then builds its
    lanes when asked."""
    from nsysan._executor import pool as executor_pool

    if event_rows(a.trace) < SMALL_EVENTS:  # a small trace's lanes are mostly Python: no gain, only switching
        return None
    side = executor_pool(1, "nsysan-timeline-start")
    begun = side.submit(_build_timeline, a)
    side.shutdown(wait=False)
    return begun


def build_timeline(a: Any, begun: Any = None) -> dict[str, Any]:
    """Lanes for the canvas timeline (see ``_build_timeline``), or the result of ``begun = start(a)``."""
    if begun is not None:
        return begun.result()
    return _build_timeline(a)


class _Lanes:
    """The timeline's lanes being gathered: their labels (process and thread names), the names shipped
    once (``_Names``), and each lane's job, encoded later (``encode``) so only the lanes being
    encoded hold per-op arrays."""

    def __init__(self, a: Any) -> None:
        self.t0 = int(a.capture.start_ns)
        self.span = int(a.capture.dur_ns)
        self.names = _Names()
        self.threads, self.procs = a.trace.thread_names(), a.trace.process_names()
        ops, rg, api = a.ops, a.nvtx_ranges, a.trace.cuda_api
        self.gpu_pids = distinct(ops["pid"].to_numpy()) if len(ops) else None
        pids = set(distinct(ops["pid"].to_numpy()).tolist() if len(ops) else []) \
            | set(distinct(rg["pid"].to_numpy()).tolist() if len(rg) else [])
        if len(api):
            api_pids = distinct(api["pid"].to_numpy())
            pids |= set((api_pids if self.gpu_pids is None else api_pids[np.isin(api_pids, self.gpu_pids)]).tolist())
        self.several = len(pids) > 1
        self.jobs: list[tuple[Any, ...]] = []

    def proc(self, pid: int) -> str:
        return f"{self.procs.get(pid, 'pid')} [{pid}] · " if self.several else ""

    def thread(self, pid: int, tid: int) -> str:
        n = self.threads.get((pid, tid))
        return f"{self.proc(pid)}{n} (tid {tid})" if n else f"{self.proc(pid)}tid {tid}"

    def add(self, label: str, group: str, make: Any, whole: Any = None) -> None:
        # encoded later, lanes on threads; ``make`` gives the lane's (starts, ends, name ids, kinds,
        # depths) when the lane is encoded; ``whole``, for a lane of most of a table's rows: (its rows,
        # a function giving the table's starts, ends, name ids and kinds), read through the rows instead
        # of copied
        self.jobs.append((label, group, make, whole))

    def encode(self, label: str, group: str, make: Any, whole: Any = None) -> dict[str, Any]:
        t0, span = self.t0, self.span
        got = _through_rows(whole, t0)
        if got is not None:
            data, covered, n = got
            return {"label": label, "group": group, "n": n, "rows": 1,
                    "busy": round(float(covered) / span if span > 0 and n else 0.0, 6), "data": data}
        s, e, nm, kind, depth = make()
        data, order, covered = encode_lane(s, e, nm, kind, depth, t0)
        del order
        busy = float(covered) / span if span > 0 and len(s) else 0.0
        rows = int(np.max(depth)) + 1 if depth is not None and len(depth) else 1
        return {"label": label, "group": group, "n": len(s), "rows": max(rows, 1),
                "busy": round(busy, 6), "data": data}


def _build_timeline(a: Any) -> dict[str, Any]:
    """Lanes for the canvas timeline, times relative to the capture start (ns).

    Returns ``{"t0", "span", "names", "lanes", "initial": [a, b], "initial_label", "steady": [a, b]}``;
    a lane is ``{"label", "group" (gpu, gaps, nvtx, api), "n" (ops), "rows" (NVTX depth + 1),
    "busy" (fraction of the capture covered, merged), "data"}`` with ``data`` as in ``encode_ops``.
    Every op of the trace is in a lane: none is dropped or binned.
    """
    ln = _Lanes(a)
    t0 = ln.t0
    if len(a.ops):
        _stream_lanes(ln, a.ops)
    if len(a.gaps):
        _gap_lanes(ln, a.gaps)
    _thread_lanes(ln, a.nvtx_ranges, a.trace.cuda_api)
    # the lanes encode independently: numpy's sorts and deflate release the GIL, so they share the cores
    jobs = ln.jobs
    with thread_pool(min(default_workers(event_rows(a.trace)), max(len(jobs), 1)), "nsysan-timeline") as pool:
        futures = [pool.submit(ln.encode, *job) for job in jobs]
        lanes = [f.result() for f in futures]
    lo, hi, what = initial_window(a)
    return {"t0": t0, "span": ln.span, "lanes": lanes, "names": ln.names.names,
            "initial": [int(lo - t0), int(hi - t0)], "initial_label": what,
            "steady": [int(a.steady.start_ns - t0), int(a.steady.end_ns - t0)], "steady_label": a.steady.label,
            **metric_lanes(a, t0)}


def _stream_lanes(ln: _Lanes, ops: pd.DataFrame) -> None:
    """One lane per GPU stream, labelled with what the stream mostly does (``stream_role``)."""
    names, proc, add = ln.names, ln.proc, ln.add
    code_all, comm_all = _op_kinds(ops)
    dur_all, pid_all = ops["dur_ns"].to_numpy(), ops["pid"].to_numpy()
    # a stream id is per process: two processes on one GPU each have their stream 7
    for (dev, pid, stream), rows, _n in _groups(ops["device_id"].to_numpy(), pid_all, ops["stream_id"].to_numpy()):
        nm = names.ids_later(ops["name"], rows)
        who = proc(int(pid))
        comm = _rows(comm_all, rows)
        comm_names = [names.names[i] for i in distinct(nm(comm)).tolist()] if comm.any() else []
        del comm
        role = stream_role(ops["role"], ops["kind"], dur_all, comm_names, rows)
        add(f"{who}GPU {dev} · stream {stream} ({role})", "gpu",
            lambda rows=rows, nm=nm: (_rows(ops["start_ns"].to_numpy(), rows), _rows(ops["end_ns"].to_numpy(), rows),
                                      nm(), _rows(code_all, rows), None),
            (rows, len(ops), lambda nm=nm: (ops["start_ns"].to_numpy(), ops["end_ns"].to_numpy(), nm(every=True),
                                           code_all)))


def _gap_lanes(ln: _Lanes, gaps: pd.DataFrame) -> None:
    """One lane of idle gaps per GPU, each gap named by its cause and what the host was doing."""
    names, add = ln.names, ln.add
    gap_key, cause_text, act_text = _gap_keys(gaps)  # a name per (cause, activity), not per gap
    na = len(act_text)

    def gap_name(k: int) -> str:
        act = act_text[k % na]
        return f"idle: {cause_text[k // na]}" + (f" ({act})" if act not in ("", "nan", "None", "<NA>") else "")

    for (dev,), rows, n in _groups(gaps["device_id"].to_numpy()):
        keys = np.unique(_rows(gap_key, rows))
        lut = _narrow(np.array([names.id(gap_name(int(k))) for k in keys], dtype=np.int32))
        # each gap's name id (keys sorted: a search gives np.unique's inverse), when the lane is
        # encoded where the keys can be made again from categorical codes
        later = all(isinstance(gaps[c].array, pd.Categorical) for c in ("cause", "activity"))
        nm = None if later else lut[np.searchsorted(keys, _rows(gap_key, rows))]
        add(f"GPU {dev} · idle gaps", "gaps",
            lambda rows=rows, n=n, keys=keys, lut=lut, nm=nm: (
                _rows(gaps["start_ns"].to_numpy(), rows), _rows(gaps["end_ns"].to_numpy(), rows),
                lut[np.searchsorted(keys, _gap_key(gaps, rows))] if nm is None else nm,
                GAP, None))
    del gap_key


def _thread_lanes(ln: _Lanes, rg: pd.DataFrame, api: pd.DataFrame) -> None:
    """Per thread, its NVTX ranges' lane and its CUDA API calls' lane (of the processes with GPU work)."""
    names, thread, add, gpu_pids = ln.names, ln.thread, ln.add, ln.gpu_pids
    nv_groups = {k: (r, n) for k, r, n in _groups(rg["pid"].to_numpy(), rg["tid"].to_numpy())} if len(rg) else {}
    api_groups = {k: (r, n) for k, r, n in _groups(api["pid"].to_numpy(), api["tid"].to_numpy())
                  if gpu_pids is None or k[0] in gpu_pids} if len(api) else {}
    threads_seen = sorted(set(nv_groups) | set(api_groups))
    for key in threads_seen:
        if key in nv_groups:
            rows, n = nv_groups[key]
            nm = names.ids_later(rg["name"], rows)
            add(f"NVTX · {thread(*key)}", "nvtx",
                lambda rows=rows, n=n, nm=nm: (
                    _rows(rg["start_ns"].to_numpy(), rows), _rows(rg["end_ns"].to_numpy(), rows), nm(),
                    NVTX, _rows(rg["depth"].to_numpy(), rows)))
        if key in api_groups:
            rows, n = api_groups[key]
            nm = names.ids_later(api["name"], rows)
            add(f"CUDA API · {thread(*key)}", "api",
                lambda rows=rows, n=n, nm=nm: (
                    _rows(api["start_ns"].to_numpy(), rows), _rows(api["end_ns"].to_numpy(), rows), nm(),
                    API, None),
                (rows, len(api), lambda nm=nm: (api["start_ns"].to_numpy(), api["end_ns"].to_numpy(), nm(every=True), API)))


def metric_lanes(a: Any, t0: int) -> dict[str, Any]:
    """The GPU-metrics lanes (``report/metrics_view.py``) and the device-memory lanes
    (``report/resources_view.py``), under ``metrics`` when the trace has any."""
    got = metrics_view.lanes(a, t0) + memory_lanes(a, t0)  # device memory over time, when recorded
    return {"metrics": got} if got else {}


def evidence_span(rec: Mapping[str, Any], t0: int) -> tuple[int, int] | None:
    """Where an evidence row lies on the timeline (ns relative to the capture start), from its time
    fields: start and end, start and a length (duration, gap, span), or a start alone (a point);
    None when it has no time."""

    def num(k: str) -> int | None:
        v = rec.get(k)
        return int(v) if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) \
            and v == v else None

    for s_key, e_key in (("start_ns", "end_ns"), ("gap_start_ns", "gap_end_ns"), ("api_start_ns", "api_end_ns")):
        s, e = num(s_key), num(e_key)
        if s is not None and e is not None and e >= s:
            return s - t0, e - t0
    s = num("start_ns")
    if s is not None:
        for k in ("dur_ns", "gap_ns", "span_ns"):
            d = num(k)
            if d is not None and d >= 0:
                return s - t0, s + d - t0
        return s - t0, s - t0
    ws = num("worst_start_ns")
    if ws is not None:  # timing-unsynchronized: the worst instance, its range (average length) and GPU tail
        return ws - t0, ws + (num("range_avg_ns") or 0) + (num("worst_after_ns") or 0) - t0
    return None
