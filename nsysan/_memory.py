"""Keep the process's resident memory close to what the frames need.

Two allocators hold on to freed memory after a big load: glibc (its mmap threshold grows after the
first large free, so later big arrays come from a heap that does not shrink, and each reader thread
gets an arena of its own) and Arrow's pool. ``tune_allocator`` fixes glibc's mmap threshold (large
arrays are mmapped and returned to the OS when freed) and caps arenas; ``release`` hands Arrow's
cached blocks back. Both are no-ops where unsupported.

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
_tuned = False


def tune_allocator() -> None:
    global _tuned
    if _tuned or not sys.platform.startswith("linux"):
        return
    _tuned = True
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(_M_MMAP_THRESHOLD, 1 << 20)
        libc.mallopt(_M_ARENA_MAX, 2)
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to tune
        pass
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
            ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):
            pass
