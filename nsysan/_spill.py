"""Traces larger than memory: numpy's big arrays kept in files (the spill).

A trace whose analysis would not fit in the memory available (``trace.budget``) is analysed all the
same, by the same code: from then on, every numpy array of ``THRESHOLD`` bytes or more that nsysan's
threads make (the decoded tables, the analyses' columns and temporaries) is a shared mapping of an
unlinked file of its own in the spill directory, not anonymous memory. The kernel writes those pages
back and drops them when memory runs short, and reads them in again when they are touched, so the
process needs the memory it works on at a time, not everything it holds: the 10 GB replica ran in an
8 GiB memory cgroup (docs/performance.md, "Traces larger than memory"). The results are the same
arrays with the same values, so every figure is the one the in-memory analysis gives; only the time
differs (each fresh page is a file page; pages evicted are read back from disk).

The mechanism is numpy's memory-handler interface (NEP 49: ``PyDataMem_SetHandler``, numpy >= 1.22),
implemented in the C extension (``_native/_btree.c``, ``spill_handler``): each file's blocks are
reserved when it is made (a full disk fails that allocation, which then stays on the heap and is
counted and told: ``heap_note``; never a write later), and the file is gone when its array is freed
or the process ends, however it ends. A handler belongs to a thread's context, so each thread nsysan starts takes it
(``enter_thread``: ``_executor.pool``), and nsysan's calls take it in the caller's thread
(``scope``: ``open_trace``, ``analyze``, the result's outputs), giving the caller's handler back
after each in a library user's process.
Arrays smaller than the threshold, Python objects (NVTX texts) and pandas' hash tables stay in
memory; ``budget`` counts them.

``NSYSAN_SPILL``: ``auto`` (the default: only a trace that would not fit), ``never`` (refuse it, exit
13, as before), ``always`` (every trace: for measuring, and for a machine whose figures mislead).
``NSYSAN_SPILL_DIR``: where the files go (default: the system's temporary directory); it must be
on a disk, not a RAM-backed tmpfs (/dev/shm), where the files would take the very memory they save.
``NSYSAN_SPILL_THRESHOLD``: the smallest array put in a file, in bytes (default 4 MiB).
Once started, the spill stays for the rest of the process (a later trace of a multi-trace run in the
same process spills too). The mappings are shared, so a process forked after the start (nsysan forks
none: its worker processes start before any trace is read, and ``subprocess`` execs) would share
those arrays' pages with its parent instead of copying them. Linux only; without the extension
built, a trace that does not fit is refused as before.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

MODE_ENV = "NSYSAN_SPILL"
DIR_ENV = "NSYSAN_SPILL_DIR"
THRESHOLD_ENV = "NSYSAN_SPILL_THRESHOLD"  # bytes; the tests lower it so a small trace's arrays spill too
MODES = ("auto", "always", "never")
THRESHOLD = 4 << 20  # bytes: smaller arrays (chunks, per-iteration figures) stay on the heap
RAM_FILESYSTEMS = {"tmpfs", "ramfs"}

_handler: Any = None  # the C handler (a capsule) once started
_ext: Any = None  # the extension that made it (``spill_set``, ``spill_stats``)
_directory: str | None = None
_local = threading.local()  # per thread: the handler a ``scope`` gives back when the spill started inside it


def mode() -> str:
    """``NSYSAN_SPILL`` (``auto`` when unset or not one of ``MODES``)."""
    m = os.environ.get(MODE_ENV, "auto").strip().lower()
    return m if m in MODES else "auto"


def directory() -> str:
    """Where the files go: ``NSYSAN_SPILL_DIR``, else the system's temporary directory."""
    return os.environ.get(DIR_ENV) or tempfile.gettempdir()


def _c() -> Any:
    """The extension, when it is built with the spill's functions (else None)."""
    from nsysan._native import c_pass, loaded

    return loaded() if c_pass("spill_handler") is not None else None


def unavailable(need: int, where: str | None = None) -> str | None:
    """Why ``need`` bytes cannot be spilled to ``where`` (default ``directory()``), in words; None
    when they can: Linux, the extension built, a writable directory on a disk with room for them."""
    where = where or directory()
    if not sys.platform.startswith("linux"):
        return "spilling to disk needs Linux"
    if _c() is None:
        return "spilling to disk needs nsysan's C extension, which is not built"
    if not os.path.isdir(where) or not os.access(where, os.W_OK | os.X_OK):
        return f"the spill directory {where} is not a writable directory ({DIR_ENV})"
    if _filesystem(where) in RAM_FILESYSTEMS:
        return f"the spill directory {where} is in memory (tmpfs): set {DIR_ENV} to a directory on a disk"
    free = shutil.disk_usage(where).free
    if free < need:
        return f"the spill directory {where} has {free / (1 << 30):.1f} GiB free, {need / (1 << 30):.1f} GiB needed " \
               f"({DIR_ENV})"
    return None


def _filesystem(path: str) -> str | None:
    """The type of the filesystem ``path`` is on (/proc/self/mounts: its longest mount point)."""
    try:
        real = os.path.realpath(path)
        best, kind = "", None
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split()
                if len(parts) < 3:
                    continue
                mnt = parts[1].replace("\\040", " ")
                if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                    best, kind = mnt, parts[2]
        return kind
    except OSError:
        return None


def threshold() -> int:
    """The smallest array kept in a file: ``NSYSAN_SPILL_THRESHOLD`` (bytes, at least 1), else ``THRESHOLD``."""
    text = os.environ.get(THRESHOLD_ENV, "")
    return max(1, int(text)) if text.isdigit() else THRESHOLD


def start(where: str | None = None, smallest: int | None = None) -> None:
    """From now on, arrays of ``smallest`` bytes or more (default ``threshold()``) made by this
    thread, and by the threads that call ``enter_thread``, are kept in files in ``where`` (default
    ``directory()``). Once per process; later calls change nothing."""
    global _handler, _directory, _ext
    if _handler is not None:
        return
    c = _c()
    if c is None:
        raise RuntimeError("spilling to disk needs nsysan's C extension")
    _directory = where or directory()
    _handler, _ext = c.spill_handler(_directory, int(smallest or threshold())), c
    before = c.spill_set(_handler)
    if getattr(_local, "scopes", 0):  # inside a ``scope``: it gives this thread's handler back
        _local.before = before


def active() -> bool:
    return _handler is not None


def where() -> str | None:
    """The spill directory, once started."""
    return _directory


@contextmanager
def scope() -> Iterator[None]:
    """nsysan's work in the caller's thread (``open_trace``, ``analyze``, the result's outputs):
    inside, the thread's arrays spill once the spill has started, before or inside; after, in a
    library user's process (a notebook), the thread has the memory handler it had before, so the
    user's own arrays stay in memory. nsysan's own process (the command line) keeps the spill's
    handler: its report is written after the analysis returns."""
    from nsysan import _memory

    prev = _ext.spill_set(_handler) if _handler is not None else None
    _local.scopes = getattr(_local, "scopes", 0) + 1
    try:
        yield
    finally:
        _local.scopes -= 1
        started_here = getattr(_local, "before", None)
        back = prev if prev is not None else started_here
        if _local.scopes == 0:
            _local.before = None
        if back is not None and not _memory.owned():
            _ext.spill_set(back)


def enter_thread() -> None:
    """Give this thread the spill's handler (numpy keeps one per thread context); nothing before
    ``start``. Called as each of nsysan's pool threads starts, and before each task of the growing pool."""
    if _handler is not None:
        _ext.spill_set(_handler)


def stats() -> dict[str, int] | None:
    """The spill's figures (bytes in files now and at most, files made, allocations left on the
    heap for want of a file); None before ``start``."""
    if _handler is None:
        return None
    live, peak, files, fallbacks = _ext.spill_stats(_handler)
    return {"live": live, "peak": peak, "files": files, "fallbacks": fallbacks}


def heap_note(before: dict[str, int] | None) -> str | None:
    """A note when arrays stayed on the heap since ``before`` (a ``stats()``, None before the start)
    for want of a file (the directory full or gone); None when none did."""
    now = stats()
    n = 0 if now is None else now["fallbacks"] - (before or {}).get("fallbacks", 0)
    if n <= 0:
        return None
    return (f"{n} big array{'s' if n > 1 else ''} stayed in memory: the spill directory {_directory} could not "
            f"hold {'them' if n > 1 else 'it'} (full, or gone); {DIR_ENV} names a directory on a disk with room")
