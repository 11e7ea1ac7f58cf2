"""Writing outputs safely, for the CLI and the Python API alike: atomic (a temp file in the same
folder, then a rename), never over an existing file without ``force``, never over an input (compared
by device and inode, so also through a link), and side files (configs, saved analyses) read with a
size limit. Errors are ``NsysanError``s whose messages name the file."""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from nsysan.errors import OutputError, OutputExistsError, TraceNotFoundError, TraceUnreadableError, UsageError
from nsysan.units import clean_text as _say

MAX_SIDE_FILE = 64 << 20  # a config or saved analysis larger than this is not one



def user_cache(kind: str) -> Path:
    """nsysan's folder ``kind`` in the user's cache: ``$XDG_CACHE_HOME/nsysan/KIND``, else
    ``~/.cache/nsysan/KIND`` (bundled examples, .nsys-rep exports, analyses); not created here."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "nsysan" / kind

def identity(path: str | os.PathLike[str]) -> tuple[int, int] | None:
    """(device, inode) of an existing file, following links; None when there is none."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino)


def _why(e: OSError) -> str:
    import errno

    return {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded",
            errno.EROFS: "read-only file system", errno.EACCES: "permission denied",
            errno.EPERM: "not permitted", errno.ENAMETOOLONG: "file name too long",
            errno.ENOTDIR: "a parent is not a directory", errno.EEXIST: "a parent is not a directory",
            errno.EISDIR: "is a directory"}.get(e.errno or 0, e.strerror or str(e))


@contextmanager
def atomic_file(path: Path, *, force: bool, protect: Sequence[tuple[int, int]] = ()) -> Iterator[IO[bytes]]:
    """A binary file to write ``path``'s new content into, streamed: it replaces ``path`` only when the
    ``with`` block ends without an error (fsync'ed first); on any error the temp file is removed and an
    existing ``path`` stays as it was. ``protect``: (device, inode) of the inputs, which an output never
    replaces, whatever ``force`` says."""
    path = Path(path)
    shown = _say(path)
    if protect and identity(path) in set(protect):
        raise UsageError(f"{shown}: is an input of this run; refusing to overwrite it with a report",
                         hint="choose another output name")
    try:
        exists = path.exists() or path.is_symlink()
    except OSError:
        exists = False
    if exists and not force:
        raise OutputExistsError(f"{shown}: exists", hint="pass --force to overwrite it")
    if path.is_dir():
        raise OutputError(f"{shown}: is a directory")
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # a short temp name: the output's own name may already be near NAME_MAX
        fd, tmp = tempfile.mkstemp(prefix=".nsysan-", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())  # on disk before it replaces the old file
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
        tmp = None
    except OSError as e:
        old = " (the existing file is unchanged)" if exists else ""
        raise OutputError(f"{shown}: cannot write: {_why(e)}{old}") from e
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def write_atomic(path: Path, text: str, *, force: bool, protect: Sequence[tuple[int, int]] = ()) -> None:
    """Write via a temp file in the same folder and rename: never a half-written report, and the old
    file stays intact when the write fails (no space, quota). ``protect``: (device, inode) of the
    inputs, which an output never replaces, whatever ``--force`` says (also through a link)."""
    data = text.encode("utf-8", "backslashreplace")  # lone surrogates (undecodable file names) as \udcxx
    with atomic_file(Path(path), force=force, protect=protect) as f:
        f.write(data)


def read_small_file(path: Path, what: str) -> bytes:
    """The bytes of a config or saved-JSON file: a regular file (a FIFO would block the read
    forever), at most MAX_SIDE_FILE bytes. Errors name the file."""
    shown = _say(path)
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
