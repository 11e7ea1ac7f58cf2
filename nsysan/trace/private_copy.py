"""A trace with a ``-wal`` or hot ``-journal`` beside it (it may still be being written): the private
copy SQLite applies them to (a WAL's committed transactions checkpointed, a hot journal rolled back),
read in the trace's place with nothing written beside it, and the note that says what was read."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

from nsysan.errors import TraceUnreadableError
from nsysan.trace.prefetch import Side
from nsysan.trace.sqlite_file import display, translate_error


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
            notes.append(f"{name}-wal exists ({s.size:,} bytes): the trace may still be being written; nsysan read "
                         "what SQLite reads, the main file with the transactions committed in its -wal, from a private "
                         "copy (the trace and its -wal were left untouched)")
        else:
            notes.append(f"{name}-journal exists ({s.size:,} bytes): the trace may still be being written; nsysan "
                         "read what SQLite reads, the main file as it was before the unfinished transaction in its "
                         "-journal, from a private copy (the trace and its -journal were left untouched)")
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
        raise translate_error(path, e) from None
    except OSError as e:
        shutil.rmtree(folder, ignore_errors=True)
        raise TraceUnreadableError(
            f"{shown}: {held} beside it hold transactions SQLite would apply; nsysan reads a private copy to see "
            f"them without writing beside the trace, and that copy failed ({e})",
            hint="wait until the program writing the trace has finished, or free space in the temporary folder "
                 "(TMPDIR)") from None
    return folder, copy
