"""What the user passed on the command line: a regular file (never a FIFO, directory or device), an
SQLite export or an Nsight Systems report (``nsysan.record.export`` makes a report into an export).

Only the standard library is imported here, and nothing is opened before ``os.stat`` says it is a
regular file: opening a FIFO blocks until a writer comes, and reading ``/dev/zero`` never ends.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from nsysan.errors import TraceNotFoundError, TraceUnreadableError
from nsysan.units import clean_text

REPORT_SUFFIXES = (".nsys-rep", ".qdrep")
# the first bytes of a report written by nsys 2022.4 and 2025.3 (a .nsys-rep under another name)
REPORT_MAGIC = b"NVIDIA Tegra Profiler Report"
SQLITE_MAGIC = b"SQLite format 3\x00"


def file_kind(mode: int) -> str:
    """``st_mode`` in words, for "not a regular file (a FIFO)"."""
    for test, words in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                        (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return words
    return "an unknown kind of file"


def regular_file(path: str | os.PathLike[str], what: str = "") -> os.stat_result:
    """``os.stat`` of an input that must be a regular file; ``TraceNotFoundError`` naming the path
    (and ``what`` it is, e.g. "saved analysis") otherwise. Nothing is opened."""
    shown = (what + " " if what else "") + clean_text(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise TraceNotFoundError(f"{shown}: no such file") from None
    except (OSError, ValueError) as e:  # a name too long, a loop of links, a parent that is a file, a NUL
        raise TraceNotFoundError(f"{shown}: {getattr(e, 'strerror', None) or e}") from None
    if stat.S_ISDIR(st.st_mode):
        raise TraceNotFoundError(f"{shown}: is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise TraceNotFoundError(f"{shown}: not a regular file ({file_kind(st.st_mode)})")
    return st


def read_head(path: str | os.PathLike[str], n: int = 64) -> bytes:
    """The first bytes of a regular file, opened without waiting (O_NONBLOCK): should the path have
    become a FIFO since the stat, the open returns at once and the fstat refuses it."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise TraceUnreadableError(f"{clean_text(path)}: cannot read: {e.strerror or e}") from e
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise TraceNotFoundError(f"{clean_text(path)}: not a regular file ({file_kind(st.st_mode)})")
        return os.pread(fd, n, 0)
    except OSError as e:
        raise TraceUnreadableError(f"{clean_text(path)}: cannot read: {e.strerror or e}") from e
    finally:
        os.close(fd)


def is_report(path: str | os.PathLike[str], head: bytes) -> bool:
    """An Nsight Systems report (not its export): named ``.nsys-rep``/``.qdrep`` or starting with the
    report header. A file so named that is an SQLite file, empty, or a Git LFS pointer is not one
    (the loader explains those better than an export would)."""
    if head.startswith(SQLITE_MAGIC) or not head or head.startswith(b"version https://git-lfs"):
        return False
    return Path(path).suffix.lower() in REPORT_SUFFIXES or head.startswith(REPORT_MAGIC)
