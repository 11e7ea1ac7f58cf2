"""Keep the process's resident memory close to what the frames need.

Two allocators hold on to freed memory after a big load: glibc (each reader thread gets an arena of
its own) and Arrow's pool. ``tune_allocator`` caps glibc's arenas and fixes its mmap threshold at
its maximum, 32 MB; ``release`` hands Arrow's cached blocks back and trims glibc's heaps. Both are
no-ops where unsupported.

The threshold trades memory for time. A numpy array above the threshold is mmapped: fresh pages,
each faulted in and zeroed by the kernel, and unmapped when freed. The analyses make many
temporaries of 10-20 MB (one int64 per kernel or API call), and with a 1 MB threshold the
2-core machine spent 2.0 s of system time on 345,000 page faults on a 245 MB trace. With 32 MB
those arrays reuse heap memory: 0.8-1.1 s of system time, 4.5 s -> 3.5-3.9 s end to end, and a
peak of about 900 MB instead of 860 MB (malloc_trim after the load returns the freed pages).

Arrow's default pool (mimalloc in the wheels) keeps the pages of freed conversion buffers: on a
245 MB trace the process held 752 MB after loading with it and 510 MB with the system allocator,
at the same speed. So ``tune_allocator`` makes the system allocator Arrow's default pool, unless
the user chose one with ``ARROW_DEFAULT_MEMORY_POOL``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
MMAP_THRESHOLD = 32 << 20  # glibc's largest on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX)
_tuned = False
_malloc_tuned = False


_libc: ctypes.CDLL | None | bool = False  # not looked up yet


def _glibc() -> ctypes.CDLL | None:
    """The C library, opened once: glibc by its soname, else whatever ``find_library`` names (it runs
    ``ldconfig -p`` in a subprocess, about 1 ms, and the analysis releases memory several times);
    None where there is none."""
    global _libc
    if _libc is False:
        _libc = None
        for name in ("libc.so.6", None):
            try:
                _libc = ctypes.CDLL(name or ctypes.util.find_library("c") or "libc.so.6")
                break
            except OSError:
                continue
    return _libc  # type: ignore[return-value]


def tune_malloc() -> None:
    """glibc's part of ``tune_allocator`` (no import of pyarrow: the prefetch calls it first)."""
    global _malloc_tuned
    if _malloc_tuned or not sys.platform.startswith("linux"):
        return
    _malloc_tuned = True
    try:
        libc = _glibc()
        if libc is None:
            return
        libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        libc.mallopt(_M_ARENA_MAX, 2)
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to tune
        pass


def tune_allocator() -> None:
    global _tuned
    tune_malloc()
    if _tuned or not sys.platform.startswith("linux"):
        return
    _tuned = True
    if "ARROW_DEFAULT_MEMORY_POOL" not in os.environ:
        try:
            import pyarrow as pa

            pa.set_memory_pool(pa.system_memory_pool())
        except Exception:  # noqa: BLE001 - best effort
            pass


def release() -> None:
    try:
        import pyarrow as pa

        pa.default_memory_pool().release_unused()
    except Exception:  # noqa: BLE001 - best effort
        pass
    if sys.platform.startswith("linux"):
        try:
            libc = _glibc()
            if libc is not None:
                libc.malloc_trim(0)
        except (OSError, AttributeError):
            pass
