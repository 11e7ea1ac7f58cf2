"""Start decoding a trace's event tables before pandas is even imported.

``nsysan analyze`` spends its first ~0.6 s importing pandas, pyarrow and numpy on one core. The
direct reader's decoding runs in C without the GIL, so the CLI starts it first (``start``), on
background threads, and ``open_trace`` takes the decoded columns over (``take``) instead of reading
those tables again. It needs only ``sqlite3``, numpy and the extension; anything unusual (not an
SQLite file, no extension, a damaged page) makes it do nothing, and ``open_trace`` then reads and
reports as usual. The file is opened read-only, as everywhere else.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import threading
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nsysan import _memory
from nsysan._executor import Growing, cpus
from nsysan.trace import budget, direct
from nsysan.trace import schema as S

# real tables only: nsys writes no views, and a view (or a virtual table) is a query that can run
# forever (a recursive CTE) or multiply rows without bound, whatever --max-events says
DESCRIBE_SQL = ("SELECT m.name, p.name FROM sqlite_master AS m JOIN pragma_table_info(m.name) AS p "
                "WHERE m.type = 'table' AND upper(coalesce(m.sql, '')) NOT LIKE 'CREATE VIRTUAL%' "
                "ORDER BY m.name, p.cid")
NOT_TABLES_SQL = ("SELECT name FROM sqlite_master WHERE type = 'view' OR (type = 'table' AND "
                  "upper(coalesce(sql, '')) LIKE 'CREATE VIRTUAL%') ORDER BY name")


JOURNAL_MAGIC = bytes.fromhex("d9d505f920a163d7")
SIDES = ("-wal", "-journal")


@dataclass(frozen=True)
class Side:
    """A ``-wal`` or ``-journal`` file beside a trace, and whether SQLite would read the trace
    differently because of it (``pending``: a WAL holding at least one frame, a rollback journal
    with a live header: SQLite reads the WAL's committed transactions, or rolls the journal back)."""

    suffix: str
    path: Path
    size: int
    pending: bool
    regular: bool = True


def side_files(path: Path) -> list[Side]:
    """The ``-wal`` / ``-journal`` files beside ``path`` (beside the file its links lead to, where
    SQLite looks). Only their sizes and first bytes are read; nothing is created or locked."""
    try:
        real = Path(os.path.realpath(path))
    except (OSError, ValueError):
        return []
    out = []
    for suffix in SIDES:
        side = real.with_name(real.name + suffix)
        try:
            st = os.stat(side)
        except (OSError, ValueError):  # absent, or a name over NAME_MAX
            continue
        if not stat.S_ISREG(st.st_mode):
            out.append(Side(suffix, side, 0, True, False))
            continue
        head = b""
        try:
            fd = os.open(side, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
            try:
                head = os.pread(fd, 32, 0)
            finally:
                os.close(fd)
        except OSError:
            out.append(Side(suffix, side, st.st_size, True))
            continue
        if suffix == "-wal":  # a 32-byte header, then frames of 24 bytes + a page
            page = int.from_bytes(head[8:12], "big") if len(head) >= 12 else 0
            pending = st.st_size >= 32 + 24 + max(page, 512)
        else:  # zero length or a zeroed header (journal_mode TRUNCATE / PERSIST): not hot
            pending = head[:8] == JOURNAL_MAGIC
        out.append(Side(suffix, side, st.st_size, pending))
    return out


def regular_file(path: str | os.PathLike[str]) -> bool:
    """True for a regular file. Checked before anything opens the path: ``open()`` on a FIFO blocks
    until a writer appears (forever, deaf to Ctrl-C while SQLite waits in C)."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def table_columns(con: sqlite3.Connection) -> dict[str, tuple[str, ...]]:
    """Tables and their columns, in order: one query over ``sqlite_master`` and ``pragma_table_info``."""
    tables: dict[str, list[str]] = {}
    for t, c in con.execute(DESCRIBE_SQL).fetchall():
        tables.setdefault(str(t), []).append(str(c))
    return {k: tuple(v) for k, v in tables.items()}


def event_sources(tables: dict[str, tuple[str, ...]]) -> dict[str, tuple[S.TableSpec, str]]:
    """For each event table nsysan reads: its spec and the export's table that holds it."""
    out = {}
    for spec in S.ALL_SPECS:
        if spec.name not in S.INTERVAL_TABLES:
            continue
        src = next((t for t in spec.sources if t in tables), None)
        if src is not None and all(c in tables[src] for c in spec.required):
            out[spec.name] = (spec, src)
    return out


@dataclass
class Prefetched:
    file: direct.File
    pool: Growing
    jobs: dict[str, tuple[direct.Plan, direct.Pending]]

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        self.file.close()


_lock = threading.Lock()
_started: dict[tuple[Any, ...], Prefetched] = {}


def _key(path: str | os.PathLike[str], all_columns: bool) -> tuple[Any, ...]:
    st = os.stat(path)
    return (os.path.realpath(path), st.st_size, st.st_mtime_ns, st.st_ino, bool(all_columns))


def start(path: str | os.PathLike[str], *, all_columns: bool = False, workers: int | None = None,
          max_rows: int | None = None) -> bool:
    """Begin decoding the event tables of ``path`` in the background. True if it started. Nothing
    starts when the tables hold more than ``max_rows`` rows, or their analysis would not fit in memory
    (``budget``): ``open_trace`` then refuses the trace (or reads the part ``--time-range`` keeps)
    with its clear error before any memory is spent (the row counts come from the page headers)."""
    if not direct.available() or os.environ.get("NSYSAN_PREFETCH", "1") == "0" or not regular_file(path):
        return False
    if any(s.pending for s in side_files(Path(path))):  # SQLite would read a WAL or roll a journal back:
        return False  # the pages of the main file are not what it reads (``Database`` reads a private copy)
    _memory.tune_malloc()  # before the decoded columns are allocated, as open_trace would
    file: direct.File | None = None
    try:
        key = _key(path, all_columns)
        uri = "file:" + urllib.parse.quote(os.fsencode(Path(path).resolve())) + "?mode=ro&immutable=1"
        con = sqlite3.connect(uri, uri=True)
        try:
            tables = table_columns(con)
            if "StringIds" not in tables:
                return False
            file = direct.File(path)
            plans = {}
            for name, (spec, src) in event_sources(tables).items():
                p = direct.plan(con, file, src, S.select_outputs(spec, tables[src], all_columns=all_columns),
                                spec.keep_only, tuple(S.NARROW.get(spec.name, ())))
                if p is not None:
                    plans[name] = (p, direct.leaves(file, p))
        finally:
            con.close()
        rows = sum(int(leaves[:, 1].sum(dtype="int64")) for _, leaves in plans.values())
        if not plans or (max_rows is not None and rows > max_rows) \
                or not budget.fits({n: (int(lv[:, 1].sum(dtype="int64")), len(p.slots)) for n, (p, lv) in plans.items()}):
            file.close()
            return False
    except (OSError, sqlite3.Error, direct.Unsupported, ValueError):
        if file is not None:
            file.close()
        return False
    # one core stays with the imports: on 2 cores, 2 decoding threads slowed the pandas import
    # from 0.6 to 0.8 s and the load ended later (3 alternating runs: 1.28-1.45 s vs 1.38-1.59 s);
    # ``take`` adds the other cores once the imports are done
    pool = Growing(workers or max(1, min(4, cpus() - 1)), "nsysan-prefetch")
    jobs = {name: (p, direct.start(file, p, leaves, rows_per_part=direct.ROWS_PER_PART, submit=pool.submit))
            for name, (p, leaves) in plans.items()}
    with _lock:
        old = _started.pop(key, None)
        _started[key] = Prefetched(file, pool, jobs)
    if old is not None:
        old.close()
    return True


def take(path: str | os.PathLike[str], all_columns: bool) -> Prefetched | None:
    """The prefetch started for this very file (same path, size, mtime, inode), handed over once.
    The caller has done its imports: what is left to decode gets every CPU (at most 4 threads)."""
    try:
        key = _key(path, all_columns)
    except OSError:
        return None
    with _lock:
        got = _started.pop(key, None)
    if got is not None:
        got.pool.grow(min(4, cpus()))
    return got
