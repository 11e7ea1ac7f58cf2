"""The direct reader: nsys' big event tables decoded straight from the file's b-tree pages.

SQLite hands rows out one value at a time (``sqlite3_step`` and one ``sqlite3_column_*`` call per
value, then ADBC's Arrow builders): about 1.5 us per kernel row, 4 s of CPU for a 245 MB trace. The
event tables hold nothing but integers, so ``_btree`` (a small C extension) walks the table's pages
with ``pread`` on a read-only descriptor and decodes the wanted fields into int64 columns, with the
GIL released: about a tenth of the time, and slices of one table decode on several threads.

It is a fast path, never the only path. ``plan`` returns None, and the caller uses SQLite, when:

* the extension is not built (no C compiler at install time) or ``NSYSAN_READER=sqlite`` is set;
* the table is a WITHOUT ROWID or virtual table, has hidden/generated columns, or a wanted column is
  part of the primary key or has a declared default (a record shorter than the schema takes it);
* the file header is not a plain SQLite 3 header.

``leaves`` raises ``Unsupported`` when a leaf page's header claims more cells than the page can hold
(SQLite's own bound): the cell counts size the decoded columns, so what is allocated is at most the
rows the file can hold (6 bytes of it a row), whatever its headers say (0xFFFF cells on every leaf
of a 1.9 MB file had taken 808 MB, of a 7.4 MB one 3.8 GB; 77 MB now, SQLite then reporting the
damage). ``start`` + ``finish`` raise ``Unsupported`` when it meets something it does not decode (a REAL, TEXT or BLOB in
a wanted column, a record spilling to overflow pages, a damaged page); the caller then reads the
whole table through SQLite, which also reports damage in its own words. A test checks that both
paths give identical frames on every fixture, the public corpus and generated exports.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import numpy as np

from nsysan._executor import Inline
from nsysan._native import VERSION, Unsupported, c_pass, int_buffer, loaded

__all__ = ["VERSION", "File", "Pending", "Plan", "Unsupported", "available", "c_pass", "finish", "int_buffer",
           "leaves", "plan", "split", "start"]

_btree = loaded()  # the extension, None where it is not built (the reader's own passes: leaves, decode)

ROWS_PER_PART = 400_000  # rows of a table decoded as one task: slices of a big table decode on several threads


def available() -> bool:
    """True when the extension is importable and not switched off with ``NSYSAN_READER=sqlite``."""
    return c_pass("decode") is not None and os.environ.get("NSYSAN_READER", "").lower() != "sqlite"


@dataclass(frozen=True)
class Plan:
    """How to read one table: its root page, which record field fills which output column."""

    table: str
    root: int
    fields: tuple[int, ...]  # per record field: output slot, or -1
    slots: tuple[str, ...]  # source column per output slot
    outputs: tuple[tuple[str, str | None, int | None], ...]  # (alias, source column, literal default)
    keep_only: tuple[str, int] | None  # (source column, value)
    # per slot: decoded into int32 (a column that ``schema.NARROW`` narrows; one value beyond int32
    # and that column is decoded again in int64)
    narrow: tuple[bool, ...] = ()


class File:
    """A read-only descriptor and the page geometry of one SQLite file."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            head = os.pread(self.fd, 100, 0)
            self.size = os.fstat(self.fd).st_size
        except OSError:
            os.close(self.fd)
            raise
        ok = len(head) == 100 and head.startswith(b"SQLite format 3\x00")
        page = int.from_bytes(head[16:18], "big") if ok else 0
        self.page_size = 65536 if page == 1 else page
        self.reserved = head[20] if ok else 0
        self.ok = ok and self.page_size >= 512

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def plan(con: sqlite3.Connection, file: File, table: str,
         outputs: list[tuple[str, str | None, int | None]], keep_only: tuple[str, int] | None,
         narrow: tuple[str, ...] = ()) -> Plan | None:
    """A plan for reading ``outputs`` (alias, source column or None, default) of ``table``, or None.
    A source column whose every output is in ``narrow`` is decoded into int32."""
    if not available() or not file.ok:
        return None
    row = con.execute("SELECT type, rootpage, sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()
    if row is None or row[0] != "table" or not row[1] or "WITHOUT ROWID" in str(row[2] or "").upper():
        return None
    info = con.execute(f'SELECT cid, name, dflt_value, pk, hidden FROM pragma_table_xinfo("{table}")').fetchall()
    if any(int(r[4]) != 0 for r in info):
        return None
    by_name = {str(r[1]): r for r in info}
    wanted = [src for _, src, _ in outputs if src is not None]
    if keep_only is not None and keep_only[0] in by_name:
        wanted.append(keep_only[0])
    else:
        keep_only = None
    slots: list[str] = []
    for src in wanted:
        r = by_name.get(src)
        if r is None or r[2] is not None or int(r[3]) != 0:
            return None
        if src not in slots:
            slots.append(src)
    fields = [-1] * (max((int(by_name[s][0]) for s in slots), default=-1) + 1)
    for i, s in enumerate(slots):
        fields[int(by_name[s][0])] = i
    narrow_slots = tuple(
        (keep_only is None or s != keep_only[0])
        and all(alias in narrow for alias, src, _ in outputs if src == s)
        and any(src == s for _, src, _ in outputs) for s in slots)
    return Plan(table, int(row[1]), tuple(fields), tuple(slots), tuple(outputs), keep_only, narrow_slots)


def max_cells(file: File) -> int:
    """The most cells a b-tree page of this file can hold: SQLite's own bound (``MX_CELL``: a cell
    takes at least 4 bytes and its 2-byte pointer), which it checks before it trusts a page."""
    return max(0, (file.page_size - file.reserved - 8) // 6)


def leaves(file: File, p: Plan) -> np.ndarray:
    """(page, cells) rows of the table's leaf pages, in rowid order. Raises ``Unsupported`` when a
    page's header claims more cells than the page can hold (SQLite calls such a page corrupt): the
    cell counts size the decoded columns before any page is decoded, so a header that lies (0xFFFF
    cells on a 4 KiB page) must not decide what is allocated. SQLite then reads, and reports, it."""
    assert _btree is not None
    raw = _btree.leaves(file.fd, file.page_size, file.reserved, file.size, p.root)
    rows = np.frombuffer(raw, dtype=np.uint32).reshape(-1, 2)
    if len(rows) and int(rows[:, 1].max()) > max_cells(file):
        bad = int(rows[int(np.argmax(rows[:, 1])), 0])
        raise Unsupported(f"a leaf page claims more cells than it can hold (page {bad})")
    return rows


def split(leaf_rows: np.ndarray, rows_per_part: int) -> list[np.ndarray]:
    """Consecutive runs of leaf pages holding about ``rows_per_part`` rows each."""
    if len(leaf_rows) == 0:
        return [leaf_rows]
    total = int(leaf_rows[:, 1].sum(dtype=np.int64))
    parts = max(1, -(-total // max(1, rows_per_part)))
    if parts == 1:
        return [leaf_rows]
    cum = np.cumsum(leaf_rows[:, 1], dtype=np.int64)
    cuts = np.searchsorted(cum, [total * i // parts for i in range(1, parts)], side="right")
    return [part for part in np.split(leaf_rows, np.unique(cuts)) if len(part)]


@dataclass
class Pending:
    plan: Plan
    data: list[np.ndarray]
    valid: list[np.ndarray]
    futures: list[Future[Any]]
    windowed: bool = False  # each future returns its part's (data, valid) rows inside the window
    file: File | None = None  # for a column decoded again in int64 (``overflow``)
    leaf_rows: np.ndarray | None = None
    overflow: np.ndarray | None = None  # per slot: 1 when a value did not fit its int32 column


def _decode_window(file: File, p: Plan, part: np.ndarray, window: tuple[int, int], start: int) -> Any:
    """One part decoded into arrays of its own, then only its rows that start inside ``window``
    kept: at most one raw part per thread is alive at a time."""
    assert _btree is not None
    n = int(part[:, 1].sum(dtype=np.int64)) if len(part) else 0
    data = [np.empty(n, dtype=np.int64) for _ in p.slots]
    valid = [np.empty(n, dtype=np.uint8) for _ in p.slots]
    _btree.decode(file.fd, file.page_size, file.reserved, file.size, np.ascontiguousarray(part).tobytes(), p.fields,
                  -1, list(zip(data, valid)))
    d = data[start]
    keep = (d >= window[0]) & (d < window[1]) & (valid[start] != 0)
    return [x[keep] for x in data], [v[keep] for v in valid]


def start(file: File, p: Plan, leaf_rows: np.ndarray, *, rows_per_part: int | None = None,
          submit: Callable[..., Future[Any]] | None = None, window: tuple[int, int] | None = None) -> Pending:
    """Allocate the table's columns and start decoding its parts (``finish`` waits for them). With
    ``window`` (``--time-range``), each part keeps only its rows that start inside it, so the memory
    follows the rows kept, not the table."""
    assert _btree is not None
    src = next((s for alias, s, _ in p.outputs if alias == "start_ns"), None)
    if window is not None and src in p.slots:
        parts = split(leaf_rows, rows_per_part or ROWS_PER_PART)
        return Pending(p, [], [], [(submit or Inline().submit)(_decode_window, file, p, part, window,
                                                                  p.slots.index(src)) for part in parts], True)
    counts = leaf_rows[:, 1].astype(np.int64) if len(leaf_rows) else np.zeros(0, np.int64)
    total = int(counts.sum())
    narrow = p.narrow or (False,) * len(p.slots)
    data = [np.empty(total, dtype=np.int32 if nw and total else np.int64) for nw in narrow]
    overflow = np.zeros(len(p.slots), dtype=np.uint8)
    valid = [np.empty(total, dtype=np.uint8) for _ in p.slots]
    parts = split(leaf_rows, rows_per_part or max(total, 1))
    futures: list[Future[Any]] = []
    row = 0
    for part in parts:
        n = int(part[:, 1].sum(dtype=np.int64)) if len(part) else 0
        outputs = [(d[row:row + n], v[row:row + n]) for d, v in zip(data, valid)]
        args = (file.fd, file.page_size, file.reserved, file.size, np.ascontiguousarray(part).tobytes(), p.fields,
                -1, outputs, overflow)
        futures.append((submit or Inline().submit)(_btree.decode, *args))
        row += n
    return Pending(p, data, valid, futures, file=file, leaf_rows=leaf_rows, overflow=overflow)


def _redecode_wide(pending: Pending) -> None:
    """The int32 columns in which a value did not fit, decoded again into int64 (the whole table,
    that column only): an id above 2^31 keeps its exact value."""
    assert _btree is not None
    if pending.overflow is None or not pending.overflow.any():
        return
    file, leaf_rows, p = pending.file, pending.leaf_rows, pending.plan
    assert file is not None and leaf_rows is not None
    for i in np.flatnonzero(pending.overflow).tolist():
        total = len(pending.data[i])
        wide, valid = np.empty(total, dtype=np.int64), np.empty(total, dtype=np.uint8)
        only = tuple(0 if f == i else -1 for f in p.fields)
        _btree.decode(file.fd, file.page_size, file.reserved, file.size, np.ascontiguousarray(leaf_rows).tobytes(),
                      only, -1, [(wide, valid)])
        pending.data[i] = wide
    pending.overflow[:] = 0


def finish(pending: Pending, window: tuple[int, int] | None = None) -> Any:
    """Wait for the parts and build the table's ``Columns`` (keep_only filter, defaults, NULLs); with
    ``window``, only the rows that start in ``[lo, hi)`` (``--time-range``). Raises ``Unsupported``
    if any part was declined. The decoded columns are let go (a filtered table holds copies)."""
    from nsysan.trace.columns import Col, Columns, nulls

    if pending.windowed:
        got = [f.result() for f in pending.futures]
        pending.data = [np.concatenate([g[0][i] for g in got]) for i in range(len(pending.plan.slots))]
        pending.valid = [np.concatenate([g[1][i] for g in got]) for i in range(len(pending.plan.slots))]
        del got
    for f in pending.futures:
        f.result()
    pending.futures = []
    _redecode_wide(pending)
    p = pending.plan
    values = {}
    for src, d, v in zip(p.slots, pending.data, pending.valid):
        values[src] = (d, None if v.all() else v == 0)
    n = len(pending.data[0]) if pending.data else 0
    keep = None
    if p.keep_only is not None:
        d, null = values[p.keep_only[0]]
        keep = d == p.keep_only[1]
        if null is not None:
            keep &= ~null
    start = next((src for alias, src, _ in p.outputs if alias == "start_ns"), None)
    if window is not None and start in values:
        d, null = values[start]
        inside = (d >= window[0]) & (d < window[1])
        if null is not None:
            inside &= ~null
        keep = inside if keep is None else keep & inside
    if keep is not None:
        n = int(keep.sum())
        if n == len(keep):  # every row kept: the columns as they are, no copies
            keep = None
    pending.data, pending.valid = [], []
    # each decoded column is let go after its last use: filtered copies then need one column's room
    last_use = {src: i for i, (_, src, _) in enumerate(p.outputs) if src is not None}
    for src in [s for s in values if s not in last_use]:  # the keep_only column, once used
        del values[src]
    out: dict[str, Col] = {}
    for i, (alias, src, default) in enumerate(p.outputs):
        if src is None:
            out[alias] = nulls(n) if default is None else Col("int", np.full(n, default, np.int64))
            continue
        d, null = values.pop(src) if last_use[src] == i else values[src]  # int64, or int32 (Plan.narrow)
        if keep is not None:
            d = d[keep]
            null = None if null is None else null[keep]
        out[alias] = Col("int", d, null)
        del d, null
    return Columns(out, n if out else 0)
