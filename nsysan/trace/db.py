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
where SQLite applies it, and that copy is read (``private_copy``), nothing being written beside the
trace (no ``-shm``). Row counts never come from rowids alone (``row_bound``): a row at rowid 2^62
is one row.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import threading
import urllib.parse
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from nsysan import _memory
from nsysan._executor import threads
from nsysan.errors import (
    CorruptTraceError,
    NotAnNsysExportError,
    NotSQLiteError,
    NsysanError,
    TraceNotFoundError,
    TraceUnreadableError,
)
from nsysan.inputs import file_kind
from nsysan.trace import columns, direct, prefetch
from nsysan.trace.columns import Columns
from nsysan.trace.prefetch import Side, side_files

SQLITE_MAGIC = b"SQLite format 3\x00"
MIN_ROW_BYTES = 6  # a table row takes at least this much of its file (see ``Database.file_rows``)


def _uri(path: Path) -> str:
    # bytes: a file name that is not valid UTF-8 (surrogate escapes in ``str``) is quoted byte by byte
    return "file:" + urllib.parse.quote(os.fsencode(path.resolve())) + "?mode=ro&immutable=1"


def display(path: object) -> str:
    """A path for a message: bytes that are not UTF-8 shown as ``\\xNN``, control characters escaped."""
    from nsysan.units import clean_text

    return clean_text(str(path))


def check_file(path: Path) -> None:
    """Raise a precise error for a path that cannot be an export; return if it looks like SQLite."""
    shown = display(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise TraceNotFoundError(f"{shown}: no such file", hint="check the path; nsys writes <name>.sqlite") from None
    except OSError as e:  # a name too long, a loop of links, a parent that is a file
        raise TraceNotFoundError(f"{shown}: {e.strerror or e}") from None
    if stat.S_ISDIR(st.st_mode):
        raise TraceNotFoundError(f"{shown}: is a directory, not a trace file")
    if not stat.S_ISREG(st.st_mode):  # a FIFO, socket or device: opening it could block forever
        raise TraceNotFoundError(f"{shown}: not a regular file ({file_kind(st.st_mode)})")
    if not os.access(path, os.R_OK):
        raise TraceUnreadableError(f"{shown}: permission denied", hint="make the file readable (chmod +r)")
    try:  # O_NONBLOCK: should the path have been swapped for a FIFO since the stat, do not wait on it
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                raise TraceNotFoundError(f"{shown}: not a regular file ({file_kind(mode)})")
            head = os.pread(fd, 100, 0)
        finally:
            os.close(fd)
    except OSError as e:
        raise TraceUnreadableError(f"{shown}: cannot read: {e.strerror or e}") from e
    if len(head) == 0:
        raise NotSQLiteError(f"{shown}: empty file")
    if head.startswith(b"version https://git-lfs"):
        raise NotSQLiteError(f"{shown}: a Git LFS pointer, not the trace", hint="run `git lfs pull` first")
    if not head.startswith(SQLITE_MAGIC):
        hint = None
        if path.suffix in (".nsys-rep", ".qdrep"):
            hint = f"export it first: nsys export --type sqlite {shown}"
        raise NotSQLiteError(f"{shown}: not an SQLite file", hint=hint)
    if len(head) < 100:
        raise CorruptTraceError(f"{shown}: truncated SQLite file ({len(head)} bytes)")


def _translate(path: Path, e: Exception) -> Exception:
    msg = str(e).lower()
    path = display(path)  # type: ignore[assignment]
    if "malformed" in msg or "corrupt" in msg or "truncat" in msg or "disk i/o" in msg:
        return CorruptTraceError(f"{path}: corrupt or truncated SQLite database ({e})")
    if "not a database" in msg or "file is encrypted" in msg:
        return NotSQLiteError(f"{path}: not an SQLite database ({e})")
    if "locked" in msg or "busy" in msg or "unable to open" in msg or "permission" in msg:
        return TraceUnreadableError(f"{path}: cannot open ({e})")
    return CorruptTraceError(f"{path}: SQLite error: {e}")


def _connect(path: Path) -> sqlite3.Connection:
    con = sqlite3.connect(_uri(path), uri=True, check_same_thread=False)
    con.execute("PRAGMA query_only = 1")
    # trace strings are untrusted: invalid UTF-8 becomes U+FFFD instead of an exception
    con.text_factory = lambda b: b.decode("utf-8", "replace")
    return con


def launched_program(capture: Iterable[tuple[str, str]]) -> str | None:
    """The program nsys launched, from its ``META_DATA_CAPTURE`` rows (``TraceMeta.capture``, read at
    load): ``PROCESS_0:COMMAND`` and its first argument that is not an option (the script or ``-m``
    module), e.g. ``python3 train.py``; the other arguments (a rank, a step) are left out. None when
    the export does not say."""
    got = {str(k): str(v) for k, v in capture if str(k).startswith("PROCESS_0:")}
    cmd = got.get("PROCESS_0:COMMAND")
    if not cmd:
        return None
    args = [got[f"PROCESS_0:ARGUMENT_{i}"] for i in range(len(got)) if f"PROCESS_0:ARGUMENT_{i}" in got]
    words = [cmd]
    for i, a in enumerate(args):
        if a == "-m" and i + 1 < len(args):
            words += [a, args[i + 1]]
            break
        if not a.startswith("-"):
            words.append(a)
            break
    return " ".join(words)


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


def side_note(path: Path, sides: list[Side]) -> list[str]:
    """A true note per side file: what it holds and what nsysan read (``Database`` reads as said)."""
    from nsysan.units import clean_text

    name = clean_text(Path(path).name)
    notes = []
    for s in sides:
        if not s.pending:
            notes.append(f"{name}{s.suffix} exists but holds no unfinished transaction: the trace may still be being "
                         "written; nsysan read the main file, which holds everything committed so far")
        elif s.suffix == "-wal":
            notes.append(f"{name}-wal exists ({s.size:,} bytes): the trace may still be being written; nsysan read what "
                         "SQLite reads, the main file with the transactions committed in its -wal, from a private copy "
                         "(the trace and its -wal were left untouched)")
        else:
            notes.append(f"{name}-journal exists ({s.size:,} bytes): the trace may still be being written; nsysan read "
                         "what SQLite reads, the main file as it was before the unfinished transaction in its -journal, "
                         "from a private copy (the trace and its -journal were left untouched)")
    return notes


def _copy_regular(src: Path, dst: Path, size: int) -> None:
    """``size`` bytes of regular file ``src`` into a new ``dst`` (O_NONBLOCK: never waits on a FIFO)."""
    fd = os.open(src, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{display(src)} is not a regular file")
        with open(dst, "xb") as out:
            left = size
            while left > 0:
                chunk = os.read(fd, min(left, 8 << 20))
                if not chunk:
                    break
                out.write(chunk)
                left -= len(chunk)
    finally:
        os.close(fd)


def private_copy(path: Path, sides: list[Side]) -> tuple[str, Path]:
    """The trace and its side files copied into a private folder, where SQLite (read-write there,
    and only there) applies them as it would: a WAL's committed transactions checkpointed into the
    copy, a hot journal rolled back. Returns (folder, copy). Raises TraceUnreadableError."""
    import shutil
    import tempfile

    shown = display(path)
    held = ", ".join(f"{shown}{s.suffix} ({s.size:,} bytes)" for s in sides if s.pending)
    odd = [s for s in sides if s.pending and not s.regular]
    if odd:
        raise TraceUnreadableError(f"{shown}: {shown}{odd[0].suffix} beside it is not a regular file: SQLite would "
                                   "read the trace through it, nsysan will not",
                                   hint=f"remove or rename {shown}{odd[0].suffix} if no program is writing the trace")
    folder = tempfile.mkdtemp(prefix="nsysan-trace-")
    copy = Path(folder) / "trace.sqlite"
    try:
        _copy_regular(path, copy, os.stat(path).st_size)
        for s in sides:
            if s.pending:
                _copy_regular(s.path, Path(str(copy) + s.suffix), s.size)
        con = sqlite3.connect(copy, isolation_level=None)
        try:
            # applies the WAL (checkpoint) or rolls the hot journal back, then a plain file: the
            # direct reader reads the copy's pages, which now hold what SQLite reads
            con.execute("PRAGMA journal_mode=DELETE").fetchall()
            con.execute("SELECT count(*) FROM sqlite_master").fetchall()
        finally:
            con.close()
    except sqlite3.Error as e:  # damage SQLite found while applying them: reported in its words
        shutil.rmtree(folder, ignore_errors=True)
        raise _translate(path, e) from None
    except OSError as e:
        shutil.rmtree(folder, ignore_errors=True)
        raise TraceUnreadableError(
            f"{shown}: {held} beside it hold transactions SQLite would apply; nsysan reads a private copy to see "
            f"them without writing beside the trace, and that copy failed ({e})",
            hint="wait until the program writing the trace has finished, or free space in the temporary folder "
                 "(TMPDIR)") from None
    return folder, copy


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
            self._sqlite = _connect(self._source)
        except sqlite3.Error as e:
            self._drop_copy()
            raise _translate(self.path, e) from e
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
                raise _translate(self.path, e) from e
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
            raise _translate(self.path, e.orig if e.orig is not None else e) from e
        except sqlite3.Error as e:
            raise _translate(self.path, e) from e
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
                self._adbc = adbc.connect(_uri(self._source))
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
                raise _translate(self.path, e) from e
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
                    mine = local.conns = [_connect(self._source), None]
                except sqlite3.Error as e:
                    raise _translate(self.path, e) from e
                with lock:
                    opened.append(mine)
            return mine

        def adbc_conn() -> Any:
            mine = conns()
            if mine[1] is None:
                try:
                    import adbc_driver_sqlite.dbapi as adbc

                    _memory.arrow_loaded()
                    mine[1] = adbc.connect(_uri(self._source))
                except Exception:  # noqa: BLE001 - optional fast path
                    mine[1] = False
            return mine[1]

        def run(key: str, sql: str) -> Any:
            t = self._read(sql, (), adbc_conn() if is_bulk(key) else False, conns()[0], retry=adbc_conn)
            return convert(key, t) if convert else t

        try:
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="nsysan-read") as pool:
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
            raise _translate(self.path, e) from e
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
            raise _translate(self.path, e) from e

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
