"""``_memory``: the C library opened once, and freed memory kept or handed back by process."""

from __future__ import annotations

import pytest


def _glibc_loaded() -> bool:
    try:
        with open("/proc/self/maps") as f:
            return "libc.so.6" in f.read()
    except OSError:
        return False


@pytest.mark.skipif(not _glibc_loaded(), reason="not glibc")
def test_the_c_library_is_opened_once_without_a_subprocess(monkeypatch):
    import ctypes.util

    from nsysan import _memory

    calls = []
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: calls.append(name) or None)
    monkeypatch.setattr(_memory, "_libc", False)
    _memory.release()
    first = _memory._glibc()
    _memory.release()
    assert first is not None and _memory._glibc() is first
    assert calls == []  # glibc by its soname: no `ldconfig -p` subprocess


def test_only_the_command_lines_own_process_keeps_freed_memory(monkeypatch):
    """A library user's process keeps glibc's defaults (trim, mmap) and ``release`` trims; the
    command line's own process (``own_process``) gets one arena, no mmap and no trim, and
    ``release`` hands nothing back but before the rules (``before_peak``)."""
    from nsysan import _memory

    class FakeLibc:
        def __init__(self):
            self.calls = []

        def mallopt(self, param, value):
            self.calls.append((param, value))
            return 1

        def malloc_trim(self, pad):
            self.calls.append(("trim", pad))
            return 1

    monkeypatch.setattr(_memory.sys, "platform", "linux")
    for owned, expected in ((False, [(_memory._M_MMAP_THRESHOLD, 32 << 20), (_memory._M_ARENA_MAX, 2), ("trim", 0)]),
                            (True, [(_memory._M_MMAP_THRESHOLD, 32 << 20), (_memory._M_ARENA_MAX, 1),
                                    (_memory._M_MMAP_MAX, 0), (_memory._M_TRIM_THRESHOLD, 2**31 - 1)])):
        fake = FakeLibc()
        monkeypatch.setattr(_memory, "_libc", fake)
        monkeypatch.setattr(_memory, "_malloc_tuned", False)
        monkeypatch.setattr(_memory, "_owned", owned)
        monkeypatch.setattr(_memory, "_tuned", True)  # (Arrow's pool: not this test's concern)
        small: list[bool] = []
        monkeypatch.setattr(_memory, "numpy_small_pages", lambda: small.append(True))
        _memory.tune_malloc()
        _memory.release()
        assert fake.calls == expected
        assert small == ([True] if owned else [])  # numpy's huge pages: off in the own process only
        _memory.release(before_peak=True)  # the one trim either process gets: before the rules
        assert fake.calls == [*expected, ("trim", 0)]


def test_numpy_arrays_get_ordinary_pages_in_the_own_process_only():
    """In a fresh interpreter: numpy's transparent-huge-page advice stays on for a library user's
    process and is off once the command line's own process tunes its allocator (``numpy_small_pages``)."""
    import subprocess
    import sys

    code = ("try:\n    import numpy._core.multiarray as m\nexcept ImportError:\n    import numpy.core.multiarray as m\n"
            "from nsysan import _memory\n"
            "{own}_memory.tune_malloc()\nprint(m._set_madvise_hugepage(True))")
    for own, want in (("", "True"), ("_memory.own_process()\n", "False")):
        out = subprocess.run([sys.executable, "-c", code.format(own=own)], capture_output=True, text=True,
                             timeout=60, check=True).stdout.split()
        assert out == [want]
