"""One way to replace a file atomically: write a temp file in the same folder, then rename it over
the target (``os.replace``), so a reader never sees a half-written file and, on any error, the temp
file is removed and the old file stays as it was. Imports nothing of nsysan: every layer may use it
(the outputs, the results cache, the bundled examples).

An interrupted write leaves no temp file behind: each live temp file is named in ``_LIVE`` before it
is created, so an interruption at any point (Ctrl-C between the creation and the ``try``, a second
Ctrl-C during the clean-up) still finds it: ``remove_leftovers`` (the command line calls it on its
way out) removes what a clean-up missed, and while one is live in the main thread, SIGTERM and SIGHUP
remove them all before the process dies of that signal (as it would have).

The command line turns SIGTERM and SIGHUP into ``Terminated`` (a ``KeyboardInterrupt``, so every
clean-up Ctrl-C runs runs for them too: worker processes and nsys' process group stopped, temp files
removed) for its whole run (``terminating``, installed in one place: ``nsysan.cli.main``). A
``Terminated`` (or a Ctrl-C's ``KeyboardInterrupt``) that Python dropped (raised inside a
``__del__``) still stops every rename after it.

Several outputs that belong together (one trace's JSON, HTML and CSV tables; a run's summary files)
are renamed together (``together``): each is written to its temp file, and only when all are written
are they renamed, one after the other with SIGTERM, SIGHUP and SIGINT held back, so an interruption
leaves all of them or none of them new."""

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
_BATCH = threading.local()  # .items: the renames ``together`` holds back in this thread, or None


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP while the command line runs (``terminating``): ``signum`` is the signal; the
    command exits 128 + signum once everything it started is stopped."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


_RECEIVED: list[int] = []  # the signals ``terminating`` turned into ``Terminated``
_INTERRUPTED: list[int] = []  # the Ctrl-Cs (SIGINT) it saw


def _raise_terminated(signum: int, frame: Any) -> None:
    _RECEIVED.append(signum)
    raise Terminated(signum)


def _raise_interrupt(signum: int, frame: Any) -> None:  # Python's own SIGINT handler, noted
    _INTERRUPTED.append(signum)
    raise KeyboardInterrupt


def not_terminated() -> None:
    """Raise ``Terminated`` again where a signal came but its exception was lost: Python runs a
    handler at whatever line the main thread is on, and one raised inside a ``__del__`` or a
    callback is printed and dropped ("Exception ignored"), so the work went on. Called just before
    a temp file replaces its target (with the signals held: after SIGTERM or SIGHUP no report
    replaces an old one) and while a multi-trace run waits for its workers (it stops them)."""
    if _RECEIVED:
        raise Terminated(_RECEIVED[0])
    if _INTERRUPTED:  # a Ctrl-C lost the same way
        raise KeyboardInterrupt


@contextmanager
def terminating() -> Iterator[None]:
    """SIGTERM and SIGHUP raise ``Terminated`` in the main thread inside the block (where their
    action was the default, dying); the handlers before are restored after, and when one of them
    came, the process then dies of it, as it would have at once (exit status 128 + the signal), now
    that everything the block started is stopped. Elsewhere (another thread, a signal the program
    handles itself) nothing changes."""
    import sys

    _RECEIVED.clear()
    _INTERRUPTED.clear()
    before: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        try:
            for sig in _SIGNALS:
                if signal.getsignal(sig) == signal.SIG_DFL:
                    before[sig] = signal.signal(sig, _raise_terminated)
            if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # Ctrl-C as before, but noted
                before[signal.SIGINT] = signal.signal(signal.SIGINT, _raise_interrupt)
        except (ValueError, OSError):  # not the main interpreter
            pass
    try:
        yield
    finally:
        with _held():  # a signal now waits for the handlers it would find: the old ones
            for sig, old in before.items():
                signal.signal(sig, old)
            received = _RECEIVED[:]
            _RECEIVED.clear()  # (a process that lives on writes again)
            _INTERRUPTED.clear()
        if received and signal.getsignal(received[0]) == signal.SIG_DFL:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
            os.kill(os.getpid(), received[0])


def default_signals() -> None:
    """A worker process' start (forked from a command line in ``terminating``): SIGTERM and SIGHUP
    back to their default action, so the parent can stop it (``_guard`` still removes its temp files)."""
    _RECEIVED.clear()
    _INTERRUPTED.clear()
    try:
        if signal.getsignal(signal.SIGINT) is _raise_interrupt:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    except (ValueError, OSError):
        pass
    for sig in _SIGNALS:
        try:
            if signal.getsignal(sig) is _raise_terminated:
                signal.signal(sig, signal.SIG_DFL)
        except (ValueError, OSError):
            pass


@contextmanager
def together() -> Iterator[None]:
    """The ``replacing(..., batched=True)`` writes of this thread inside the block replace their
    files only at its end, all of them, with SIGTERM, SIGHUP and SIGINT held back meanwhile: an error
    or an interruption before then leaves every old file as it was and no temp file. Nested: the
    outermost block renames."""
    if getattr(_BATCH, "items", None) is not None:
        yield
        return
    items: list[tuple[str, str, Callable[[], None] | None]] = []
    _BATCH.items = items
    try:
        yield
        _BATCH.items = None
        for _tmp, _path, check in items:  # every check before any rename
            if check is not None:
                check()
        with _held():
            not_terminated()  # a signal before the hold whose exception was lost
            while items:
                tmp, path, _check = items[0]
                os.replace(tmp, path)
                items.pop(0)
                with _LOCK:
                    _LIVE.discard(tmp)
    finally:
        _BATCH.items = None
        for tmp, _path, _check in items:  # not renamed: removed
            _drop(tmp)
        with _LOCK:
            empty = not _LIVE
        if empty:
            _guard(False)


def _drop(tmp: str) -> None:
    """Remove a temp file of ours (gone already: nothing to do) and forget it."""
    try:
        os.unlink(tmp)
    except OSError:
        pass
    with _LOCK:
        _LIVE.discard(tmp)


@contextmanager
def _held() -> Iterator[None]:
    """SIGTERM, SIGHUP and SIGINT held back in this thread inside the block (delivered after it, to
    the handlers then in force); nothing where there is no ``pthread_sigmask`` (Windows)."""
    try:
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {*_SIGNALS, signal.SIGINT})
    except (AttributeError, ValueError, OSError):
        held = None
    try:
        yield
    finally:
        if held is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)


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
            _drop(tmp)
            raise
    raise FileExistsError(f"{folder}: no free temporary file name")


@contextmanager
def replacing(path: str | os.PathLike[str], *, prefix: str = ".nsysan-", suffix: str = ".tmp",
              durable: bool = False, shared: bool = True,
              check: Callable[[], None] | None = None, batched: bool = False) -> Iterator[IO[bytes]]:
    """A binary file whose content replaces ``path`` when the ``with`` block ends without an error.
    ``durable``: flushed and fsync'ed before the rename (on disk before it replaces the old file).
    ``shared``: the permissions of the file it replaces (a private report stays private), or for a
    new file 0666 less the umask; otherwise mkstemp's 0600. ``check``: called just before the
    rename (it raises to keep the old file). The temp name is short (``prefix``, random, ``suffix``):
    the target's own name may already be near NAME_MAX. Errors (``OSError`` included) propagate to
    the caller; on any error or interruption the temp file is removed. ``batched``: inside
    ``together``, the rename waits for the end of its block (the checks run again then)."""
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
        batch = getattr(_BATCH, "items", None) if batched else None
        if batch is not None:
            not_terminated()
            batch.append((tmp, os.fspath(path), check))  # renamed (or removed) by ``together``
        else:
            with _held():  # no signal between the check and the rename
                not_terminated()
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
