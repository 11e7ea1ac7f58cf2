"""Load an export into a ``Trace``: the plan (which tables are read, and how: by the prefetch, the
direct reader or SQL; the row limits), the reads, and the steps in order: strings (``strings``),
typed frames (``frames``), each table finished (``finish``), implausible rows set aside
(``checks``), the capture's metadata (``session``)."""

from __future__ import annotations

import re
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from nsysan import _memory, _spill
from nsysan._executor import cpus, pool
from nsysan.errors import CorruptTraceError, NsysanError, ResourceLimitError
from nsysan.trace import budget, direct, metrics, prefetch
from nsysan.trace import schema as S
from nsysan.trace.checks import _implausible
from nsysan.trace.columns import Columns
from nsysan.trace.db import Database
from nsysan.trace.finish import _build_frames, _tidy
from nsysan.trace.frames import _to_frame
from nsysan.trace.model import INTERVAL_TABLES, Trace, TraceMeta
from nsysan.trace.session import _capture_window, _infer_version, _meta_rows, _session
from nsysan.trace.sqlite_file import display
from nsysan.trace.strings import Strings, _unresolved
from nsysan.units import clean_text

Progress = Callable[[str, int, int], None]

SLICE_ROWS = 400_000  # rows of an event table per SQL read (rowid slices read on several threads)


def open_trace(path: str | Path, *, progress: Progress | None = None, max_rows: int | None = None,
               all_columns: bool = False, workers: int | None = None,
               time_range: tuple[float, float] | None = None) -> Trace:
    """Load an Nsight Systems SQLite export, read-only. Raises ``NsysanError`` subclasses on bad input.

    ``max_rows`` refuses traces whose event tables hold more rows in total (a resource guard).
    ``all_columns`` also reads columns no analysis uses (kernel registers and shared memory, context
    ids, return values...). Big tables are read in rowid slices on ``workers`` threads (default: the
    CPU count, at most 4), each with its own read-only connection. A trace whose analysis would not
    fit in memory is refused before it is read (``budget``); ``time_range`` (seconds from the
    capture's start) keeps only the events that start inside it.
    """
    try:
        with _spill.scope():  # a trace larger than memory: its arrays in files (nsysan/_spill.py)
            return _open_trace(Path(path), progress, max_rows, all_columns, workers, time_range)
    except NsysanError:
        raise
    except (sqlite3.Error, UnicodeError, ValueError, TypeError, KeyError, IndexError, OverflowError,
            *_arrow_errors()) as e:
        # a damaged file can fail anywhere in SQLite, the drivers or the decoding of its values
        raise CorruptTraceError(f"{display(path)}: damaged export, cannot be read ({type(e).__name__}: {e})",
                                hint="re-export it from the .nsys-rep (nsys export --type sqlite); if the "
                                     "file is fine, please report this") from e


def _arrow_errors() -> tuple[type[BaseException], ...]:
    """pyarrow's exceptions, where it was imported (an ADBC read): nothing else raises them."""
    pa = sys.modules.get("pyarrow")
    return (pa.ArrowException,) if pa is not None else ()


def _check_rows(db: Database, path: Path, max_rows: int, direct_plans: dict[str, tuple[direct.Plan, np.ndarray]],
                prefetched: dict[str, direct.Pending], sql_tables: list[str]) -> None:
    """Refuse a trace whose event tables hold more than ``max_rows`` rows. The direct reader's leaf
    lists (and a prefetch's columns) give exact counts; a table read through SQL is bounded by its
    rowid span (two b-tree descents) and counted (a scan of every page) only when that bound is
    not enough to let the trace through."""
    n = sum(int(leaves[:, 1].sum(dtype=np.int64)) for _, leaves in direct_plans.values())
    n += sum(len(job.data[0]) if job.data else 0 for job in prefetched.values())
    bound: int | None = 0
    for src in sql_tables:
        try:
            lo, hi = db.rows(f'SELECT min(rowid), max(rowid) FROM "{src}"')[0]
        except NsysanError:  # no rowid (WITHOUT ROWID) or an odd table: count them all
            bound = None
            break
        bound += 0 if lo is None else int(hi) - int(lo) + 1
    if bound is None or n + bound > max_rows:
        n += sum(int(db.rows(f'SELECT count(*) FROM "{src}"')[0][0]) for src in sql_tables)
    if n > max_rows:
        raise ResourceLimitError(
            f"{display(path)}: {n:,} events exceed the limit of {max_rows:,}",
            hint="raise it with --max-events, or export a time window (nsys export --times ...)")


def _check_other_rows(db: Database, path: Path, max_rows: int, tables: list[str]) -> None:
    """The other tables read (strings, threads, GPUs, ...) may hold at most ``max_rows`` rows each:
    together with the event limit, the rows a file can make nsysan read are bounded, whatever it
    claims. Two b-tree descents per table; a count only when the rowid span is over the limit."""
    for src in tables:
        try:
            lo, hi = db.rows(f'SELECT min(rowid), max(rowid) FROM "{src}"')[0]
            span = 0 if lo is None else int(hi) - int(lo) + 1
        except NsysanError:
            span = max_rows + 1
        if span > max_rows and int(db.rows(f'SELECT count(*) FROM "{src}"')[0][0]) > max_rows:
            raise ResourceLimitError(f"{display(path)}: table {src} holds more than {max_rows:,} rows",
                                     hint="raise the limit with --max-events if the trace is genuine")


SMALL_ROWS = 20_000  # tables with fewer rows are read through sqlite3 (no ADBC start-up)


def _rowid_span(db: Database, src: str) -> int:
    """An upper bound of a table's rows (two b-tree descents); big when unknown (no rowid)."""
    try:
        lo, hi = db.rows(f'SELECT min(rowid), max(rowid) FROM "{src}"')[0]
    except NsysanError:
        return SMALL_ROWS + 1
    return 0 if lo is None or hi is None else int(hi) - int(lo) + 1


def _sql_queries(db: Database, spec: S.TableSpec, src: str, all_columns: bool) -> list[tuple[str, str]]:
    """SELECTs for one table: rowid slices of the event tables (read in parallel), else one."""
    slices = db.rowid_slices(src, SLICE_ROWS) if spec.name in INTERVAL_TABLES else None
    return [(spec.name, S.build_select(spec, src, db.caps.columns(src), all_columns=all_columns, rowid_range=rng))
            for rng in slices or [None]]


def _refuse_event_views(db: Database, path: Path, ignored: tuple[str, ...]) -> None:
    """An endless view standing where an event table nsysan reads belongs (``CUPTI_ACTIVITY_KIND_KERNEL``
    ...) is damage, refused (``CorruptTraceError``, exit 6), never run: one whose query is recursive
    (``WITH RECURSIVE``), names itself, or names another view or virtual table (a loop through views).
    Skipping it would analyse a trace without that table (a GPU without kernels looks idle). Other
    views, which nsys never writes either, are left unread with a warning."""
    events = {src.upper() for spec in S.ALL_SPECS for src in spec.sources}
    mine = [t for t in ignored if t.upper() in events]
    if not mine:
        return
    others = [t.upper() for t in ignored]
    bad = []
    for name in mine:
        rows = db.rows("SELECT sql FROM sqlite_master WHERE name = ?", (name,))
        text = " ".join(str(r[0] or "") for r in rows).upper()
        body = text.split(" AS ", 1)[1] if " AS " in text else text
        words = set(re.findall(r"[A-Z_][A-Z0-9_]*", body.replace('"', " ").replace("`", " ").replace("[", " ")))
        if "RECURSIVE" in words or any(o in words for o in others):
            bad.append(name)
    if bad:
        raise CorruptTraceError(
            f"{display(path)}: the event table {', '.join(clean_text(t) for t in bad[:3])} is a view that can run "
            "without end (recursive, or selecting from itself or another view), not a table nsys writes: the "
            "trace is damaged, and is not read as one without those events",
            hint="export the report again with nsys export --type sqlite")


def _open_trace(path: Path, progress: Progress | None, max_rows: int | None, all_columns: bool,
                workers: int | None, time_range: tuple[float, float] | None = None) -> Trace:
    """See ``open_trace``."""
    workers = workers or min(4, cpus())
    _memory.tune_allocator()
    warnings = _being_written(path)
    with Database(path) as db:
        caps = db.caps
        _refuse_event_views(db, path, caps.ignored)
        if caps.ignored:
            warnings.append(f"not read: {', '.join(clean_text(t) for t in caps.ignored[:5])}"
                            f"{' ...' if len(caps.ignored) > 5 else ''}: views or virtual tables, which nsys "
                            "never writes (a view is a query, and can run without end)")
        tick = _Ticker(progress, len(S.ALL_SPECS) + 2)
        # tables the CLI began decoding before pandas was imported (prefetch), used if the plan is the same
        early = prefetch.take(path, all_columns)
        try:
            plan = _Plan(db, early, all_columns)
            warnings += plan.notes
            if max_rows is not None:
                plan.check_rows(db, path, max_rows)
            time_window = _guarded(db, path, plan, time_range, warnings, tick)
            queries, bulky = plan.queries(db, all_columns)
        except BaseException:
            if early is not None:
                early.close()
            raise
        # biggest first, so the threads finish together (StringIds stays first: it is read alone)
        queries[1:] = sorted(queries[1:], key=lambda q: 0 if "WHERE rowid" in q[1] else 1)
        # the strings, each table read (decoded by the prefetch or here, or by SQL in slices), each built
        tick.total = len(queries) + len(plan.prefetched) + len(plan.direct_plans) + len(plan.specs)
        with pool(1, "nsysan-strings") as side:
            # the string table (and, for a big one, ADBC's start-up, 45 ms) while the event tables decode
            strings_f = side.submit(lambda sql: Strings(db.table(sql, bulk="StringIds" in bulky)), queries.pop(0)[1])
            raw = _finish_prefetched(early, plan.prefetched, time_window)
            raw.update(db.direct_read_many(plan.direct_plans, workers, window=time_window))
            strings = strings_f.result()
        tick("strings")
        for name in raw:  # (by name: a loop variable would hold the last table's columns to the end)
            if raw[name] is None:  # declined (e.g. a REAL in an integer column): SQLite reads that table
                again = _sql_queries(db, plan.specs[name], plan.sources[name], all_columns)
                queries += again
                tick.total += len(again)
                bulky.add(name)
            tick(f"read {name}")
        # each slice becomes a frame on its worker thread, so its read columns are freed early

        def convert(key: str, t: Columns) -> pd.DataFrame:
            return _to_frame(t, plan.specs[key], strings, all_columns)

        tables: dict[str, list[Any]] = db.read_many(queries, workers, on_done=lambda key: tick(f"read {key}"),
                                                     convert=convert, bulk=bulky.__contains__)
        _memory.release()
        frames = _build_frames(plan.specs, raw, tables, strings, all_columns, convert, tick, warnings)
        warnings += _unresolved(strings)
        meta, meta_source = _meta_rows(db)
        # GPU metrics from the open export, aggregated as they are decoded (trace/metrics.py)
        gpu_metrics = metrics.read(db, frames["gpus"]) if caps.has("GPU_METRICS") else None
        if gpu_metrics is not None and gpu_metrics.note:
            warnings.append(f"GPU metrics: {gpu_metrics.note}")
        capture, session, epoch_offset = _session(db, meta)

    _tidy(frames, strings, warnings)
    _implausible(frames, session if time_window is None else None, warnings)
    if time_window is not None:  # the tables read by SQL; the capture is then the events' extent
        frames, session = budget.restrict(frames, time_window, warnings), None
    window = _capture_window(frames, session, warnings)
    version = meta.get("EXPORT_PRODUCT_VERSION") or _infer_version(caps)
    trace_meta = TraceMeta(
        path=str(path), nsys_version=version, schema_version=meta.get("EXPORT_SCHEMA_VERSION"),
        platform=meta.get("EXPORT_PLATFORM"), version_source=meta_source,
        start_ns=window[0] if window else None, end_ns=window[1] if window else None,
        tables=tuple(sorted(caps.tables)), capture=capture, warnings=tuple(warnings),
        epoch_offset_ns=epoch_offset,
    )
    trace = Trace(meta=trace_meta, gpu_metrics=gpu_metrics, **frames)
    del frames
    _memory.release()  # the conversion buffers' pages go back to the OS before the analyses start
    return trace


def _guarded(db: Database, path: Path, plan: _Plan, time_range: tuple[float, float] | None, warnings: list[str],
             tick: _Ticker) -> tuple[int, int] | None:
    """``budget.guard`` on the planned tables: refused, spilled (the progress then says so from here
    on: a trace larger than memory takes minutes) or let through; the event clock's window of
    ``time_range``."""
    window = budget.guard(db, display(path), plan.event_plans(), plan.prefetched, plan.by_sql, time_range, warnings)
    if _spill.active():
        tick.suffix = f" (arrays in files in {_spill.where()})"
    return window


class _Ticker:
    """``open_trace``'s progress: one step done per call, of ``total`` (which may grow)."""

    def __init__(self, progress: Progress | None, total: int) -> None:
        self.progress, self.total, self.done = progress, total, 0
        self.suffix = ""  # said after each step's name (the spill)
        if progress:
            progress("strings", 0, total)

    def __call__(self, name: str) -> None:
        self.done += 1
        if self.progress:
            self.progress(name + self.suffix, self.done, self.total)


def _being_written(path: Path) -> list[str]:
    """A note per ``-wal`` / ``-journal`` file beside the trace (it may still be being written),
    saying what nsysan read: ``Database`` reads what SQLite reads (a private copy with the WAL's
    committed transactions, or with the hot journal rolled back), never writing beside the trace."""
    from nsysan.trace.prefetch import side_files
    from nsysan.trace.private_copy import side_note

    return side_note(path, side_files(path))


def _generated_columns(db: Database) -> set[str]:
    """The tables read here that have generated columns (``"end" AS (start + dur)``), which the
    table list omits: each such column is added to ``db.caps`` so it is selected, and the table is
    read through SQLite (which computes them; they are not in the stored rows the direct reader
    decodes). nsys writes none: on its exports this is one query that finds nothing."""
    names = sorted({t for spec in (*S.ALL_SPECS, S.GPUS_LEGACY) for t in spec.sources if db.caps.has(t)})
    if not names:
        return set()
    try:
        rows = db.rows("SELECT m.name, x.name FROM sqlite_master AS m, pragma_table_xinfo(m.name) AS x "
                       f"WHERE m.type = 'table' AND x.hidden IN (2, 3) AND m.name IN ({', '.join('?' * len(names))})",
                       tuple(names))
    except NsysanError:  # an SQLite without table_xinfo (< 3.26): no generated columns to find
        return set()
    found: set[str] = set()
    for table, col in rows:
        table, col = str(table), str(col)
        cols = db.caps.tables.get(table)
        if cols is not None and col not in cols:
            db.caps.tables[table] = (*cols, col)
        found.add(table)
    return found


class _Plan:
    """How each table is read: decoded by the prefetch (``prefetched``), by the direct reader
    (``direct_plans``) or through SQL (``by_sql``); ``specs`` and ``sources`` name every table's
    spec and source table."""

    def __init__(self, db: Database, early: Any, all_columns: bool) -> None:
        caps = db.caps
        self.prefetched: dict[str, direct.Pending] = {}
        self.specs: dict[str, S.TableSpec] = {}
        self.sources: dict[str, str] = {}
        self.direct_plans: dict[str, tuple[direct.Plan, np.ndarray]] = {}
        self.by_sql: list[tuple[S.TableSpec, str]] = []
        self.notes: list[str] = []
        generated = _generated_columns(db)
        for spec in S.ALL_SPECS:
            src = next((t for t in spec.sources if caps.has(t)), None)
            if spec.name == "gpus" and src is None and caps.has("TARGET_INFO_CUDA_GPU"):
                spec, src = S.GPUS_LEGACY, "TARGET_INFO_CUDA_GPU"
            self.specs[spec.name] = spec
            if src is None:
                continue
            lacking = [c for c in spec.required if not caps.has(src, c)]
            if lacking:  # a table rebuilt without a column it needs: said, never "0 kernels" in silence
                self.notes.append(f"{clean_text(src)} has no column {', '.join(map(clean_text, lacking))}: "
                                  "its rows are not read")
                continue
            self.sources[spec.name] = src
            if src in generated:  # computed by SQLite, absent from the stored rows: SQL reads it
                self.by_sql.append((spec, src))
                continue
            if spec.name in INTERVAL_TABLES + S.SIDE_TABLES and self._direct(db, spec, src, early, all_columns):
                continue
            self.by_sql.append((spec, src))

    def event_plans(self) -> dict[str, tuple[direct.Plan, np.ndarray]]:
        """The direct reader's plans of the event tables (the side tables' left out: not events)."""
        return {name: p for name, p in self.direct_plans.items() if name in INTERVAL_TABLES}

    def check_rows(self, db: Database, path: Path, max_rows: int) -> None:
        """``--max-rows``: refuse the trace before reading it when a table holds more rows."""
        _check_rows(db, path, max_rows, self.event_plans(), self.prefetched,
                    [src for spec, src in self.by_sql if spec.name in INTERVAL_TABLES + ("nvtx_raw",)])
        _check_other_rows(db, path, max_rows, ["StringIds"] + [
            src for spec, src in self.by_sql if spec.name not in INTERVAL_TABLES + ("nvtx_raw",)]
            + [self.sources[name] for name in self.direct_plans if name not in INTERVAL_TABLES])

    def queries(self, db: Database, all_columns: bool) -> tuple[list[tuple[str, str]], set[str]]:
        """The SQL reads (the string table first), and the tables read through ADBC (``bulky``:
        small tables through sqlite3, big ones through ADBC, see trace.db)."""
        queries: list[tuple[str, str]] = [("StringIds", 'SELECT id, value FROM "StringIds"')]
        for spec, src in self.by_sql:
            queries += _sql_queries(db, spec, src, all_columns)
        bulky = {key for key, src in [("StringIds", "StringIds")] + [(spec.name, src) for spec, src in self.by_sql]
                 if _rowid_span(db, src) > SMALL_ROWS}
        return queries, bulky

    def _direct(self, db: Database, spec: S.TableSpec, src: str, early: Any, all_columns: bool) -> bool:
        """Whether event table ``spec`` is decoded directly (by the prefetch when it planned the same)."""
        outputs = S.select_outputs(spec, db.caps.columns(src), all_columns=all_columns)
        pre = early.jobs.get(spec.name) if early is not None else None
        narrow = tuple(S.NARROW.get(spec.name, ()))
        found = db.direct_plan(src, outputs, spec.keep_only, leaves=pre is None, narrow=narrow)
        if found is not None and pre is not None and found[0] == pre[0]:
            self.prefetched[spec.name] = pre[1]
            return True
        if found is not None and pre is not None:  # the prefetch planned otherwise: list the leaves
            found = db.direct_plan(src, outputs, spec.keep_only, narrow=narrow)
        if found is not None:
            self.direct_plans[spec.name] = found
            return True
        return False


def _finish_prefetched(early: Any, prefetched: dict[str, direct.Pending],
                       time_window: tuple[int, int] | None) -> dict[str, Columns | None]:
    """The tables the prefetch decoded (None: declined, SQLite reads it); the prefetch closed."""
    raw: dict[str, Columns | None] = {}
    if early is not None:
        try:
            for name, job in prefetched.items():
                try:
                    raw[name] = direct.finish(job, time_window)
                except (OSError, direct.Unsupported):
                    raw[name] = None
        finally:
            early.close()
    return raw


