"""The export as a file: whether a path can be an export at all (``check_file``: a readable regular
file that starts as SQLite does, with a precise error otherwise), its read-only URI and sqlite3
connection (``mode=ro&immutable=1``, query-only, invalid UTF-8 replaced), SQLite's errors in the
user's words (``translate_error``) and paths shown in messages (``display``)."""

from __future__ import annotations

import os
import sqlite3
import stat
import urllib.parse
from pathlib import Path

from nsysan.errors import CorruptTraceError, NotSQLiteError, TraceNotFoundError, TraceUnreadableError
from nsysan.inputs import file_kind

SQLITE_MAGIC = b"SQLite format 3\x00"


def readonly_uri(path: Path) -> str:
    """The file's SQLite URI, read-only and immutable (no locks, no journal, no WAL applied)."""
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


def translate_error(path: Path, e: Exception) -> Exception:
    msg = str(e).lower()
    path = display(path)  # type: ignore[assignment]
    if "malformed" in msg or "corrupt" in msg or "truncat" in msg or "disk i/o" in msg:
        return CorruptTraceError(f"{path}: corrupt or truncated SQLite database ({e})")
    if "not a database" in msg or "file is encrypted" in msg:
        return NotSQLiteError(f"{path}: not an SQLite database ({e})")
    if "locked" in msg or "busy" in msg or "unable to open" in msg or "permission" in msg:
        return TraceUnreadableError(f"{path}: cannot open ({e})")
    return CorruptTraceError(f"{path}: SQLite error: {e}")


def connect(path: Path) -> sqlite3.Connection:
    con = sqlite3.connect(readonly_uri(path), uri=True, check_same_thread=False)
    con.execute("PRAGMA query_only = 1")
    # trace strings are untrusted: invalid UTF-8 becomes U+FFFD instead of an exception
    con.text_factory = lambda b: b.decode("utf-8", "replace")
    return con
