"""Keep the process's resident memory close to what the frames need.

Two allocators hold on to freed memory after a big load: glibc (each reader thread gets an arena of
its own) and Arrow's pool. ``tune_allocator`` caps glibc's arenas and fixes its mmap threshold at
its maximum, 32 MB; ``release`` hands Arrow's cached blocks back and trims glibc's heaps. Both are
no-ops where unsupported.

The threshold trades memory for time. A numpy array above the threshold is mmapped: fresh pages,
each faulted in and zeroed by the kernel, and unmapped when freed. The analyses make many
temporaries of 10-20 MB (one int64 per kernel or API call); under the threshold they reuse heap
memory instead of faulting in fresh pages each time.

Arrow's default pool (mimalloc in the wheels) keeps the pages of freed conversion buffers, so
``tune_allocator`` makes the system allocator Arrow's default pool, unless the user chose one with
``ARROW_DEFAULT_MEMORY_POOL``.

The command line owns its process (``own_process``), and there the memory a run touches for the
first time is what costs: on a virtual machine the kernel zeroes every fresh page it hands out.
Three sources would hand it pages to zero again and again: ``release``'s ``malloc_trim`` (the freed
heap handed back, then faulted in again), arrays above the mmap threshold (mmapped, zeroed,
unmapped), and the worker threads' own arena (a big allocation there is always mmapped). So a
process-owned run keeps what it frees: one arena, no mmap, no trimming below 2 GB of free heap top,
and ``release`` does nothing but once, before the rules, where the peak is made
(``release(before_peak=True)``); and numpy's arrays on ordinary pages, not transparent huge pages
(``numpy_small_pages``), each zeroed 2 MB at a time. A library user's process (``open_trace`` in a notebook) is not
nsysan's to hold memory in: there the allocator keeps its defaults apart from the arena cap and
threshold above, and ``release`` trims. The measurements behind these choices are in
docs/performance.md ("The allocator").
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_MMAP_MAX = -4
_M_ARENA_MAX = -8
KEEP_BELOW = (1 << 31) - 1  # mallopt takes an int: the highest trim threshold it can be given
MMAP_THRESHOLD = 32 << 20  # glibc's largest on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX)
_tuned = False
_malloc_tuned = False
_owned = False  # the command line's own process (own_process): freed memory is kept for reuse


def owned() -> bool:
    """Whether this process is nsysan's own (``own_process``: the command line)."""
    return _owned


def own_process() -> None:
    """Tell the allocator tuning that this process is nsysan's own (the command line), before any
    table is read: freed memory stays in the process for the next temporaries (module doc)."""
    global _owned
    _owned = True


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
        libc.mallopt(_M_ARENA_MAX, 1 if _owned else 2)
        if _owned:
            libc.mallopt(_M_MMAP_MAX, 0)
            libc.mallopt(_M_TRIM_THRESHOLD, KEEP_BELOW)
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to tune
        pass
    if _owned:
        numpy_small_pages()


def numpy_small_pages() -> None:
    """In nsysan's own process, numpy's arrays on ordinary pages: numpy asks the kernel for
    transparent huge pages on every array of 4 MB or more (``madvise(MADV_HUGEPAGE)``), and each
    2 MB page is zeroed whole the first time any byte of it is touched, again for every heap region
    the allocator gets back from the kernel. ``perf`` on the 245 MB replica put the kernel's
    ``clear_page_erms`` under ``do_huge_pmd_anonymous_page`` at 16-20% of the command's CPU; with
    ordinary pages its system time went 1.02 -> 0.73 s and its wall 0.89x (6 alternating pairs,
    medians; peak 516 -> 523 MiB). Nothing when numpy is not imported yet or lacks the switch."""
    np_core = sys.modules.get("numpy._core.multiarray") or sys.modules.get("numpy.core.multiarray")
    switch = getattr(np_core, "_set_madvise_hugepage", None)
    if switch is not None:
        try:
            switch(False)
        except Exception:  # noqa: BLE001 - an optimisation only
            pass


def tune_allocator() -> None:
    tune_malloc()
    if sys.modules.get("pyarrow") is not None:
        arrow_loaded()


def arrow_loaded() -> None:
    """Arrow's part of ``tune_allocator``, once pyarrow is imported (the loader imports it only for
    ADBC's reads: ``trace/columns.py``)."""
    global _tuned
    if _tuned or not sys.platform.startswith("linux"):
        return
    _tuned = True
    if "ARROW_DEFAULT_MEMORY_POOL" not in os.environ:
        try:
            import pyarrow as pa

            pa.set_memory_pool(pa.system_memory_pool())
        except Exception:  # noqa: BLE001 - best effort
            pass


def release(*, before_peak: bool = False) -> None:
    """Hand freed memory back to the OS (Arrow's cached blocks, glibc's free pages); nothing in a
    process nsysan owns, which would only fault the same pages in again (module doc), except once
    ``before_peak``: after the analyses, before the rules and the report. There the heap holds free
    chunks among the analyses' results that the rules' and the timeline's temporaries do not fit, so
    they would extend the heap; trimmed, the free chunks cost nothing until a temporary touches them
    (measurements: docs/performance.md, "The allocator")."""
    if _owned and not before_peak:
        return
    if sys.modules.get("pyarrow") is not None:  # not imported for it
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
