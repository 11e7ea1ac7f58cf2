"""One way to replace a file atomically: write a temp file in the same folder, then rename it over
the target (``os.replace``), so a reader never sees a half-written file and, on any error, the temp
file is removed and the old file stays as it was. Imports nothing of nsysan: every layer may use it
(the outputs, the results cache, the bundled examples).

An interrupted write leaves no temp file behind: each live temp file is named in ``_LIVE`` before it
is created, so an interruption at any point (Ctrl-C between the creation and the ``try``, a second
Ctrl-C during the clean-up) still finds it: ``remove_leftovers`` (the command line calls it on its
way out) removes what a clean-up missed, and while one is live in the main thread, SIGTERM and SIGHUP
remove them all before the process dies of that signal (as it would have)."""

from __future__ import annotations

import os
import signal
import stat
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

_LIVE: set[str] = set()  # the temp files being written now, by any thread
_LOCK = threading.RLock()  # reentrant: the signal handler runs in the main thread, which may hold it
_SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGHUP") if hasattr(signal, n))
_INSTALLED: dict[int, Any] = {}  # signal -> the handler it had (SIG_DFL) while ours is on


def remove_leftovers() -> None:
    """Remove every temp file still live (an interrupted clean-up); safe to call at any time."""
    with _LOCK:
        names = list(_LIVE)
        _LIVE.clear()
    for tmp in names:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def _on_signal(signum: int, frame: Any) -> None:  # SIGTERM/SIGHUP while a temp file is live
    remove_leftovers()
    signal.signal(signum, _INSTALLED.pop(signum, signal.SIG_DFL))
    os.kill(os.getpid(), signum)  # die of it, as without us (exit status 128 + signum)


def _guard(on: bool) -> None:
    """Our SIGTERM/SIGHUP handler on while a temp file is live (main thread only, and only where the
    default action, dying, was in force: a program's own handler is left alone); off after."""
    if threading.current_thread() is not threading.main_thread():
        return
    try:
        for sig in _SIGNALS:
            if on and sig not in _INSTALLED and signal.getsignal(sig) == signal.SIG_DFL:
                _INSTALLED[sig] = signal.signal(sig, _on_signal)
            elif not on and sig in _INSTALLED and signal.getsignal(sig) is _on_signal:
                signal.signal(sig, _INSTALLED.pop(sig))
    except (ValueError, OSError):  # not the main interpreter: nothing installed
        pass


def _umask() -> int:
    """The process umask, read without setting it (``os.umask`` to read it would leave 0 in force for
    other threads for an instant); 0o022 where it cannot be read."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def _new_temp(folder: Path, prefix: str, suffix: str) -> tuple[int, str]:
    """A new empty file in ``folder`` (mode 0600, like ``mkstemp``), its name in ``_LIVE`` before it exists."""
    import secrets

    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        tmp = os.path.join(folder, f"{prefix}{secrets.token_hex(6)}{suffix}")
        with _LOCK:
            _LIVE.add(tmp)
        try:
            return os.open(tmp, flags, 0o600), tmp
        except FileExistsError:
            with _LOCK:
                _LIVE.discard(tmp)  # someone else's: never removed
            continue
        except OSError:  # not created
            with _LOCK:
                _LIVE.discard(tmp)
            raise
        except BaseException:  # an interruption (Ctrl-C) just after the file was created: ours to remove
            try:
                os.unlink(tmp)
            except OSError:
                pass
            with _LOCK:
                _LIVE.discard(tmp)
            raise
    raise FileExistsError(f"{folder}: no free temporary file name")


@contextmanager
def replacing(path: str | os.PathLike[str], *, prefix: str = ".nsysan-", suffix: str = ".tmp",
              durable: bool = False, shared: bool = True,
              check: Callable[[], None] | None = None) -> Iterator[IO[bytes]]:
    """A binary file whose content replaces ``path`` when the ``with`` block ends without an error.
    ``durable``: flushed and fsync'ed before the rename (on disk before it replaces the old file).
    ``shared``: the permissions of the file it replaces (a private report stays private), or for a
    new file 0666 less the umask; otherwise mkstemp's 0600. ``check``: called just before the
    rename (it raises to keep the old file). The temp name is short (``prefix``, random, ``suffix``):
    the target's own name may already be near NAME_MAX. Errors (``OSError`` included) propagate to
    the caller; on any error or interruption the temp file is removed."""
    folder = Path(path).parent
    tmp, settled = "", False  # settled: the temp file renamed or removed (else left for remove_leftovers)
    _guard(True)
    try:
        fd, tmp = _new_temp(folder, prefix, suffix)
        with os.fdopen(fd, "wb") as f:
            yield f
            if durable:
                f.flush()
                os.fsync(f.fileno())
        if shared:
            try:
                old = os.stat(path)
                mode = stat.S_IMODE(old.st_mode) & 0o777 if stat.S_ISREG(old.st_mode) else None
            except (OSError, ValueError):
                mode = None
            os.chmod(tmp, mode if mode is not None else 0o666 & ~_umask())
        if check is not None:
            check()
        os.replace(tmp, path)
        settled = True
    except BaseException:
        if tmp:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            settled = True
        raise
    finally:
        with _LOCK:
            if settled:
                _LIVE.discard(tmp)
            empty = not _LIVE
        if empty:
            _guard(False)
