"""Read-only access to an exported SQLite file.

Two paths, one file handle discipline:

* **Describe** with SQLAlchemy (``inspect``): which tables and columns this export has. nsys adds,
  renames and inserts columns between versions, so every query is built from this description.
* **Read** the big event tables with the direct b-tree reader (``nsysan.trace.direct``) when it can,
  else bulk rows through ADBC's SQLite driver straight into Arrow (``fetch_arrow_table``), about
  ten times faster than ``pd.read_sql`` on million-row tables. If ADBC is unavailable, or its type
  inference rejects a column (ADBC infers column types from the first rows), the stdlib ``sqlite3``
  module reads the same query. Small tables (``bulk=False``: thread names, GPUs, a short string
  table) are read with ``sqlite3`` from the start: importing ADBC (it imports ``pyarrow.dataset``)
  and starting its driver cost about 60 ms, a tenth of a small trace's whole run.

Every read returns ``columns.Columns`` (numpy values and NULL masks): pyarrow is imported only by
an ADBC read, so a trace whose tables are all decoded directly or small never loads it.

The file is opened with ``mode=ro&immutable=1``: SQLite takes no locks, writes no journal or WAL,
and never modifies the user's trace. ``immutable`` also makes SQLite ignore a ``-wal`` or hot
``-journal`` beside the trace, which it would otherwise apply (the WAL's committed transactions, the
rollback of an unfinished one): with either there, the trace and it are copied into a private folder
where SQLite applies it, and that copy is read (``private_copy.py``), nothing being written beside the
trace (no ``-shm``). Row counts never come from rowids alone (``row_bound``): a row at rowid 2^62
is one row.

The file's checks, its URI and connection, and SQLite's errors in the user's words are in
``sqlite_file.py``.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from nsysan import _memory
from nsysan._executor import pool as executor_pool
from nsysan._executor import threads
from nsysan.errors import NotAnNsysExportError, NsysanError
from nsysan.trace import columns, direct, prefetch
from nsysan.trace.columns import Columns
from nsysan.trace.prefetch import side_files
from nsysan.trace.private_copy import private_copy
from nsysan.trace.sqlite_file import check_file, connect, display, readonly_uri, translate_error

MIN_ROW_BYTES = 6  # a table row takes at least this much of its file (see ``Database.file_rows``)


@dataclass
class Caps:
    """Which tables and columns the export has (nsys' ``table_checks`` idea)."""

    tables: dict[str, tuple[str, ...]] = field(default_factory=dict)
    ignored: tuple[str, ...] = ()  # views and virtual tables: never read (nsys writes neither)

    def has(self, table: str, column: str | None = None) -> bool:
        cols = self.tables.get(table)
        if cols is None:
            return False
        return column is None or column in cols

    def columns(self, table: str) -> tuple[str, ...]:
        return self.tables.get(table, ())


class Database:
    """An open, read-only export. Use as a context manager. A trace with a ``-wal`` or hot
    ``-journal`` beside it is read from a private copy to which SQLite applied them (``private_copy``):
    nsysan reads what SQLite reads, and writes nothing beside the trace (no ``-shm``)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        check_file(self.path)
        self._adbc: Any = None
        self._direct: direct.File | None = None
        self._folder: str | None = None
        self._source = self.path  # the file read: the trace, or its private copy
        sides = [s for s in side_files(self.path) if s.pending]
        if sides:
            self._folder, self._source = private_copy(self.path, sides)
        try:
            self._sqlite = connect(self._source)
        except sqlite3.Error as e:
            self._drop_copy()
            raise translate_error(self.path, e) from e
        try:
            self.caps = self._describe()
        except BaseException:
            self.close()
            raise

    def _drop_copy(self) -> None:
        if self._folder is not None:
            import shutil

            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None

    # -- describe ---------------------------------------------------------------------------
    def _describe(self) -> Caps:
        """Tables and columns: one query over ``sqlite_master`` and ``pragma_table_info`` (SQLite
        >= 3.16). SQLAlchemy's inspector is the fallback: importing it costs ~0.3 s, a tenth of the
        whole budget for a 200 MB trace, so it is not on the common path."""
        try:
            tables = prefetch.table_columns(self._sqlite)
            self._ignored = tuple(str(r[0]) for r in self._sqlite.execute(prefetch.NOT_TABLES_SQL).fetchall())
        except sqlite3.DatabaseError as e:
            if "no such table" not in str(e).lower() and "pragma_table_info" not in str(e).lower():
                raise translate_error(self.path, e) from e
            return self._describe_sqlalchemy()
        return self._check_nsys(tables)

    def _describe_sqlalchemy(self) -> Caps:
        import sqlalchemy as sa

        engine = sa.create_engine("sqlite://", creator=lambda: self._sqlite, poolclass=sa.pool.StaticPool)
        try:
            insp = sa.inspect(engine)
            names = insp.get_table_names()
            tables = {}
            self._ignored = tuple(insp.get_view_names())
            for name in names:
                tables[name] = tuple(c["name"] for c in insp.get_columns(name))
        except sa.exc.DBAPIError as e:
            raise translate_error(self.path, e.orig if e.orig is not None else e) from e
        except sqlite3.Error as e:
            raise translate_error(self.path, e) from e
        return self._check_nsys(tables)

    def _check_nsys(self, tables: dict[str, tuple[str, ...]]) -> Caps:
        if "StringIds" not in tables or not any(t.startswith("TARGET_INFO") for t in tables):
            found = ", ".join(sorted(tables)[:5]) or "no tables"
            raise NotAnNsysExportError(
                f"{display(self.path)}: SQLite, but not an Nsight Systems export (has {found})",
                hint="export a report with: nsys export --type sqlite REPORT.nsys-rep",
            )
        return Caps(tables, getattr(self, "_ignored", ()))

    # -- read -------------------------------------------------------------------------------
    def _adbc_conn(self) -> Any:
        if self._adbc is None:
            try:
                import adbc_driver_sqlite.dbapi as adbc

                _memory.arrow_loaded()
                self._adbc = adbc.connect(readonly_uri(self._source))
            except Exception:  # noqa: BLE001 - optional fast path; sqlite3 reads the same data
                self._adbc = False
        return self._adbc

    def table(self, sql: str, params: tuple[Any, ...] = (), *, bulk: bool = True) -> Columns:
        """Run a query and return its columns (ADBC when possible and ``bulk``, else sqlite3)."""
        return self._read(sql, params, self._adbc_conn() if bulk and not params else False, self._sqlite,
                           retry=self._adbc_conn)

    def file_rows(self) -> int:
        """The most rows any table of this file can hold: a row takes at least a 4-byte cell and its
        2-byte pointer on a leaf page (SQLite's own bound, ``MX_CELL``). A rowid span beyond it is
        sparse (one row at rowid 2^62), not a count."""
        try:
            return os.stat(self._source).st_size // MIN_ROW_BYTES
        except OSError:
            return 0

    def rowid_span(self, table: str) -> tuple[int, int] | None:
        """(min, max) rowid of ``table`` (two b-tree descents); None when empty or without rowids."""
        try:
            lo, hi = self._sqlite.execute(f'SELECT (SELECT min(rowid) FROM "{table}"), '
                                          f'(SELECT max(rowid) FROM "{table}")').fetchone()
        except sqlite3.Error:
            return None  # e.g. a WITHOUT ROWID table
        return None if lo is None or hi is None else (int(lo), int(hi))

    def row_bound(self, table: str) -> int:
        """An upper bound of the rows of ``table``: its rowid span where the file could hold that
        many rows (nsys writes dense rowids: span ~ rows), else its count (sparse rowids; a scan of
        its leaf pages): never more than the file holds, whatever its rowids say."""
        span = self.rowid_span(table)
        n = 0 if span is None else span[1] - span[0] + 1
        if span is None or n > self.file_rows():
            try:
                return int(self._sqlite.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])
            except sqlite3.Error as e:
                raise translate_error(self.path, e) from e
        return n

    def rowid_slices(self, table: str, rows_per_slice: int) -> list[tuple[int, int]] | None:
        """[lo, hi) rowid ranges of about ``rows_per_slice`` rows each, or None (read it whole). As
        many slices as the table's rows need (``row_bound``), not its rowid span: sparse rowids (a
        row at 2^40) make fewer, uneven slices, never millions of queries."""
        span = self.rowid_span(table)
        if span is None:
            return None
        lo, hi = span
        try:
            n = self.row_bound(table)
        except NsysanError:
            return None
        if n <= rows_per_slice or hi - lo + 1 <= rows_per_slice:
            return None
        parts = -(-n // rows_per_slice)
        step = -(-(hi - lo + 1) // parts)
        return [(lo + i * step, min(lo + (i + 1) * step, hi + 1)) for i in range(parts)]

    def read_many(self, queries: list[tuple[str, str]], workers: int,
                  on_done: Callable[[str], None] | None = None,
                  convert: Callable[[str, Columns], Any] | None = None,
                  bulk: Callable[[str], bool] | None = None) -> dict[str, list[Any]]:
        """Run ``(key, sql)`` queries on ``workers`` threads, each with its own read-only connection
        (SQLite and ADBC release the GIL while stepping rows). Results per key keep query order.
        ``bulk(key)`` says whether a query may hold many rows (ADBC then reads it; default: all)."""
        def is_bulk(key: str) -> bool:
            return bulk is None or bulk(key)

        if workers <= 1 or len(queries) <= 1:
            out: dict[str, list[Any]] = {}
            for key, sql in queries:
                t = self.table(sql, bulk=is_bulk(key))
                out.setdefault(key, []).append(convert(key, t) if convert else t)
                if on_done:
                    on_done(key)
            return out
        local = threading.local()
        opened: list[Any] = []
        lock = threading.Lock()

        def conns() -> list[Any]:
            mine = getattr(local, "conns", None)  # this thread's [sqlite3, ADBC (None: not opened yet)]
            if mine is None:
                try:
                    mine = local.conns = [connect(self._source), None]
                except sqlite3.Error as e:
                    raise translate_error(self.path, e) from e
                with lock:
                    opened.append(mine)
            return mine

        def adbc_conn() -> Any:
            mine = conns()
            if mine[1] is None:
                try:
                    import adbc_driver_sqlite.dbapi as adbc

                    _memory.arrow_loaded()
                    mine[1] = adbc.connect(readonly_uri(self._source))
                except Exception:  # noqa: BLE001 - optional fast path
                    mine[1] = False
            return mine[1]

        def run(key: str, sql: str) -> Any:
            t = self._read(sql, (), adbc_conn() if is_bulk(key) else False, conns()[0], retry=adbc_conn)
            return convert(key, t) if convert else t

        try:
            with executor_pool(workers, "nsysan-read") as pool:
                futures = [(key, pool.submit(run, key, sql)) for key, sql in queries]
                out = {}
                for key, fut in futures:
                    out.setdefault(key, []).append(fut.result())
                    if on_done:
                        on_done(key)
        finally:
            for sq, a in opened:
                if a:
                    a.close()
                sq.close()
        return out

    def _read(self, sql: str, params: tuple[Any, ...], conn: Any, sq: sqlite3.Connection,
              retry: Callable[[], Any] | None = None) -> Columns:
        """ADBC (``conn``) when given, else sqlite3. A column whose sqlite3 values have no one type (a
        BLOB among integers) makes the query read again with ``retry()``'s ADBC connection, if any:
        such a table then reads as it always did (ADBC decides its types); else it is read as text."""
        if conn:
            try:
                import pyarrow as pa

                cur = conn.cursor()
                try:
                    cur.execute(sql)
                    table = cur.fetch_arrow_table()
                finally:
                    cur.close()
                if any(pa.types.is_string(f.type) or pa.types.is_large_string(f.type) for f in table.schema):
                    table.validate(full=True)  # invalid UTF-8 from the file: read it again through sqlite3
                return columns.from_arrow(table)
            except Exception:  # noqa: BLE001 - ADBC type inference can reject mixed columns
                pass
        try:
            cur = sq.execute(sql, params)
            names = [d[0] for d in cur.description]
            rows = cur.fetchall()
        except sqlite3.Error as e:
            raise translate_error(self.path, e) from e
        out, mixed = columns.from_rows(names, rows)
        if mixed and retry is not None and not params:
            again = retry()
            if again:
                return self._read(sql, params, again, sq)
        return out

    # -- direct reader (nsysan.trace.direct) -----------------------------------------------------
    def direct_plan(self, table: str, outputs: list[tuple[str, str | None, int | None]],
                    keep_only: tuple[str, int] | None, *, leaves: bool = True,
                    narrow: tuple[str, ...] = ()) -> tuple[direct.Plan, Any] | None:
        """A direct-read plan for ``table`` and its leaf pages (None with ``leaves=False``: a
        prefetch listed them already), or None (read it through SQLite)."""
        if not direct.available():
            return None
        try:
            if self._direct is None:
                self._direct = direct.File(self._source)
            p = direct.plan(self._sqlite, self._direct, table, outputs, keep_only, narrow)
            return None if p is None else (p, direct.leaves(self._direct, p) if leaves else None)
        except (OSError, sqlite3.Error, direct.Unsupported):
            return None

    def direct_read(self, p: direct.Plan, leaf_rows: np.ndarray) -> Columns | None:
        """Decode those leaf pages; None if the direct reader meets something it does not handle."""
        return self.direct_read_many({"t": (p, leaf_rows)}, workers=1).get("t")

    def direct_read_many(self, plans: dict[str, tuple[direct.Plan, np.ndarray]], workers: int,
                         rows_per_part: int = direct.ROWS_PER_PART,
                         window: tuple[int, int] | None = None) -> dict[str, Columns | None]:
        """Several tables at once: their parts decode on ``workers`` threads, each into its rows of
        the table's own arrays. None for a table the direct reader declines (SQLite reads it)."""
        assert self._direct is not None or not plans
        out: dict[str, Columns | None] = {}
        with threads(workers, "nsysan-direct") as pool:
            pending = {name: direct.start(self._direct, p, leaves, rows_per_part=rows_per_part, submit=pool.submit,
                                          window=window)
                       for name, (p, leaves) in plans.items()}
            for name, job in pending.items():
                try:
                    out[name] = direct.finish(job, window)
                except (OSError, direct.Unsupported):
                    out[name] = None
        return out

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Small queries through sqlite3."""
        try:
            return self._sqlite.execute(sql, params).fetchall()
        except sqlite3.Error as e:
            raise translate_error(self.path, e) from e

    def close(self) -> None:
        if self._direct is not None:
            self._direct.close()
            self._direct = None
        if self._adbc:
            self._adbc.close()
        self._adbc = None
        self._sqlite.close()
        self._drop_copy()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
