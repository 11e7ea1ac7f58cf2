"""Writing outputs safely, for the CLI and the Python API alike: atomic (a temp file in the same
folder, then a rename; no temp file left by an error, Ctrl-C, SIGTERM or SIGHUP; the permissions of
the file replaced kept), never over an existing file without ``force`` unless it is an output nsysan
wrote itself (``own_output``: a regular file carrying nsysan's marker, so running the same command
twice works), never over anything but a regular file whatever ``force`` says (``unreplaceable``: a
FIFO, a device, a link into /proc such as /dev/stdout), never over an input (compared by device and
inode, so also through a link), and side files (configs, saved analyses) read with a size limit.
Errors are ``NsysanError``s whose messages name the file: a name over the file system's limits, like
any output that cannot be written, is ``OutputError``."""

from __future__ import annotations

import mmap
import os
import re
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from nsysan import _atomic
from nsysan._atomic import replacing
from nsysan.errors import OutputError, OutputExistsError, TraceNotFoundError, TraceUnreadableError, UsageError
from nsysan.units import clean_text

MAX_SIDE_FILE = 64 << 20  # a config or saved analysis larger than this is not one
NAME_MAX = 255  # bytes in one path component on Linux, macOS and Windows file systems
PATH_MAX = 4096  # bytes in a path given to the system (Linux), its terminating NUL included


def identity(path: str | os.PathLike[str]) -> tuple[int, int] | None:
    """(device, inode) of an existing file, following links; None when there is none."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino)


# the markers of nsysan's own outputs, each where no text from a trace can forge it: the HTML head's
# generator line (before the title); a JSON document's top-level "schema" key at a line start (strings
# hold no raw newline, and nested keys of an indented document are indented further); a Perfetto
# timeline's closing line, after the last event line
HTML_MARK = b'<meta name="generator" content="nsysan">'
_HTML_HEAD = re.compile(rb'\A\s*<!DOCTYPE html>\s*<html lang="en">\s*<head>\s*<meta charset="utf-8">\s*'
                        + re.escape(HTML_MARK))
_JSON_SCHEMA = re.compile(rb'\n ?"schema": "nsysan\.[a-z]+/[0-9]+",?\n')
_PERFETTO_HEAD = b'{"traceEvents":[\n'
_PERFETTO_TAIL = b'\n],"displayTimeUnit":"ns","otherData":{"generator":"nsysan '
# a CSV table carries no marker (a comment line would break its readers): one is nsysan's when its
# header is the header nsysan writes for it (before the analysis, when that is not known yet: a header
# of snake_case column names, as nsysan writes), or when it is the one empty line of an empty table
_CSV_HEADER = re.compile(rb"[a-z_][a-z0-9_]*(,[a-z_][a-z0-9_]*)+\n")


def own_output(path: str | os.PathLike[str], csv_header: bytes | None = None) -> bool:
    """Whether ``path`` is an output nsysan wrote itself, which a new run may replace without
    ``force``: a regular file (not a link, not a device or FIFO) whose content carries nsysan's marker
    (an HTML report, an analysis/diff/summary JSON, a Perfetto timeline), or a ``.csv`` table whose
    header is ``csv_header`` (the header about to be written; when None, a header nsysan could have
    written). Anything else is False."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):  # a link, FIFO or device is not even opened
            return False
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
                     | getattr(os, "O_CLOEXEC", 0))
    except (OSError, ValueError):
        return False  # missing, unreadable, or a symbolic link (O_NOFOLLOW)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
            return False
        head = os.pread(fd, 4096, 0)
        if str(path).endswith(".csv"):
            if head == b"\n" and st.st_size == 1:
                return True
            line = head[:head.find(b"\n") + 1] if b"\n" in head else b""
            return line == csv_header if csv_header is not None else _CSV_HEADER.fullmatch(line) is not None
        if _HTML_HEAD.match(head):
            return True
        if head.startswith(_PERFETTO_HEAD) or head.startswith(b"{\n"):
            with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as m:
                if head.startswith(_PERFETTO_HEAD):
                    return m.rfind(_PERFETTO_TAIL) > 0 and m[-2:] == b"}\n"
                return m[-3:] == b"\n}\n" and _JSON_SCHEMA.search(m) is not None  # type: ignore[call-overload]
        return False
    except (OSError, ValueError):
        return False
    finally:
        os.close(fd)


def unreplaceable(path: str | os.PathLike[str]) -> str | None:
    """Why the existing ``path`` is no file an output may replace, whatever ``force`` says; None
    when it may be written (it does not exist, or it is a regular file, also through symbolic links).
    Refused: a FIFO, socket or device (``/dev/null``), a directory, a symbolic link to a missing file
    or in a loop, and any link through ``/proc`` (``/dev/stdout``, ``/proc/self/fd/N``: a descriptor
    of this process, which a rename would replace by a regular file when run as root). Nothing is
    opened. Paths that cannot even be looked up (a name too long) are left to the write to report."""
    p = os.path.abspath(os.fspath(path))
    for step in range(40):
        parent = os.path.realpath(os.path.dirname(p))
        p = os.path.join(parent, os.path.basename(p))
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            return None if step == 0 else "a symbolic link to a missing file"
        except (OSError, ValueError):
            return None
        if stat.S_ISREG(st.st_mode):
            return None
        if not stat.S_ISLNK(st.st_mode):
            from nsysan.inputs import file_kind

            return file_kind(st.st_mode)
        if parent == "/proc" or parent.startswith("/proc/"):
            return "a link to a file descriptor or process (/proc)"
        try:
            p = os.path.join(parent, os.readlink(p))
        except (OSError, ValueError):
            return None
    return "a loop of symbolic links"


def refuse_special(option: str, path: str | os.PathLike[str]) -> None:
    """``OutputError`` when ``path`` is no file an output may replace (``unreplaceable``)."""
    why = unreplaceable(path)
    if why is not None:
        prefix = f"{option} " if option else ""
        raise OutputError(f"{prefix}{clean_text(path)}: {why}, not a regular file: nsysan writes its outputs only as "
                          "new or regular files, even with --force", hint="name a new file or a regular file")


def path_too_long(path: str | os.PathLike[str]) -> str | None:
    """What of ``path`` is over the file system's limits (a component over NAME_MAX bytes, the whole
    over PATH_MAX), or None."""
    raw = os.fsencode(path)
    if any(len(part) > NAME_MAX for part in raw.split(b"/")):
        return f"a file or folder name longer than {NAME_MAX} bytes"
    if len(raw) >= PATH_MAX:
        return f"a path of {len(raw):,} bytes, longer than the {PATH_MAX - 1:,} a file system accepts"
    return None


def reason(e: OSError) -> str:
    """An ``OSError`` in words, for "cannot write: ..."."""
    import errno

    return {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded",
            errno.EROFS: "read-only file system", errno.EACCES: "permission denied",
            errno.EPERM: "not permitted", errno.ENAMETOOLONG: "file name too long",
            errno.ENOTDIR: "a parent is not a directory", errno.EEXIST: "a parent is not a directory",
            errno.EISDIR: "is a directory", errno.ELOOP: "a loop of symbolic links"}.get(e.errno or 0,
                                                                                        e.strerror or str(e))


@contextmanager
def atomic_file(path: Path, *, force: bool, protect: Sequence[tuple[int, int]] = (),
                csv_header: bytes | None = None) -> Iterator[IO[bytes]]:
    """A binary file to write ``path``'s new content into, streamed: it replaces ``path`` only when the
    ``with`` block ends without an error (fsync'ed first); on any error the temp file is removed and an
    existing ``path`` stays as it was. An existing ``path`` needs ``force`` unless nsysan wrote it
    (``own_output``; ``csv_header``: the header line of the CSV table about to be written), and must
    be a regular file whatever ``force`` says (``unreplaceable``: checked again just before the rename).
    ``protect``: (device, inode) of the inputs, which an output never
    replaces, whatever ``force`` says."""
    path = Path(path)
    shown = clean_text(path)
    if protect and identity(path) in set(protect):
        raise UsageError(f"{shown}: is an input of this run; refusing to overwrite it with a report",
                         hint="choose another output name")
    exists = False
    try:
        long = path_too_long(path)
        if long:
            raise OutputError(f"{shown[:200]}{'...' if len(shown) > 200 else ''}: cannot write: {long}")
        refuse_special("", path)
        exists = path.exists() or path.is_symlink()
        if exists and not force and not own_output(path, csv_header):
            raise OutputExistsError(f"{shown}: exists, and nsysan did not write it",
                                    hint="pass --force to overwrite it")
        if path.is_dir():
            raise OutputError(f"{shown}: is a directory")

        def still_writable() -> None:  # the same checks at the moment of the rename
            if protect and identity(path) in set(protect):
                raise UsageError(f"{shown}: is an input of this run; refusing to overwrite it with a report")
            refuse_special("", path)

        path.parent.mkdir(parents=True, exist_ok=True)
        with replacing(path, durable=True, check=still_writable, batched=True) as f:
            yield f
    except OSError as e:
        old = " (the existing file is unchanged)" if exists else ""
        raise OutputError(f"{shown}: cannot write: {reason(e)}{old}") from e


@contextmanager
def together() -> Iterator[None]:
    """The outputs written inside the block (``atomic_file``, ``write_atomic``) appear together at its
    end, or none of them (``_atomic.together``): one trace's JSON, HTML and CSV tables are never left
    half of them new by an error, Ctrl-C, SIGTERM or SIGHUP. A rename that fails is ``OutputError``."""
    try:
        with _atomic.together():
            yield
    except OSError as e:
        shown = clean_text(e.filename2 or e.filename or "")
        raise OutputError(f"{shown}: cannot write: {reason(e)}") from e


def write_atomic(path: Path, text: str, *, force: bool, protect: Sequence[tuple[int, int]] = ()) -> None:
    """Write via a temp file in the same folder and rename: never a half-written report, and the old
    file stays intact when the write fails (no space, quota). ``protect``: (device, inode) of the
    inputs, which an output never replaces, whatever ``--force`` says (also through a link)."""
    data = text.encode("utf-8", "backslashreplace")  # lone surrogates (undecodable file names) as \udcxx
    header = data[:data.find(b"\n") + 1] if str(path).endswith(".csv") else None
    with atomic_file(Path(path), force=force, protect=protect, csv_header=header) as f:
        f.write(data)


def read_small_file(path: Path, what: str) -> bytes:
    """The bytes of a config or saved-JSON file: a regular file (a FIFO would block the read
    forever), at most MAX_SIDE_FILE bytes. Errors name the file."""
    shown = clean_text(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise TraceNotFoundError(f"{what} {shown}: no such file") from None
    except OSError as e:
        raise TraceNotFoundError(f"{what} {shown}: {e.strerror or e}") from None
    if stat.S_ISDIR(st.st_mode):
        raise TraceNotFoundError(f"{what} {shown}: is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        from nsysan.inputs import file_kind

        raise TraceNotFoundError(f"{what} {shown}: not a regular file ({file_kind(st.st_mode)})")
    if st.st_size > MAX_SIDE_FILE:
        raise UsageError(f"{what} {shown}: {st.st_size:,} bytes, more than the {MAX_SIDE_FILE >> 20} MB such a "
                         "file can be")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(fd, "rb") as f:
            return f.read(MAX_SIDE_FILE + 1)
    except OSError as e:
        raise TraceUnreadableError(f"{what} {shown}: cannot read: {e.strerror or e}") from e
