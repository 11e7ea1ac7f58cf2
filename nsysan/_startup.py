"""Start-up measures of nsysan's own process, in one place: what the command line does before and
around its imports, and what its worker processes are given. Standard library only.

The garbage collector (``pause_collector``, ``resume_collector``). Importing numpy, pyarrow, pandas
and jinja2 creates several hundred thousand objects (modules, classes, functions) that live until
the process ends. The collector runs every 700 allocations and a full collection walks every
tracked object, so during the imports it walked that growing heap over and over for nothing, and
each later full collection walked it again. ``pause_collector`` stops it before the imports;
``resume_collector`` moves everything alive by then into the permanent generation (``gc.freeze``:
never walked again) and starts it again, so the analysis' own cyclic garbage is collected as usual.
On the 2-core machine this took a 1.9 MB trace's whole ``analyze --json --html`` from 1.00 to 0.87
of its CPU time (20 alternating pairs, median ratio; the same as no collection at all), with the
same outputs and the same peak memory.

pandas without pyarrow (``pandas_without_arrow``). pandas imports pyarrow whenever it is installed
(and builds ``pyarrow.compute``'s function registry): 0.11 s of a 1.9 MB trace's 0.95 s on the
2-core machine, and 38 MiB of resident memory (Arrow's libraries) that a 245 MB trace's peak carries
too. nsysan's loader needs no Arrow unless it reads a big table through ADBC
(``trace/columns.py``), so ``nsysan analyze`` imports pandas while ``pyarrow`` is hidden from it;
pandas then keeps its own Python string storage, and a later ADBC read imports pyarrow as usual. A
process that imported pandas already (a notebook, the tests) is left as it is.
``NSYSAN_PANDAS_ARROW=1`` lets pandas find pyarrow again.

numpy without OpenBLAS' threads (``numpy_without_blas_threads``); the allocator told the process is
nsysan's own and the dataclass methods compiled once across runs (``own_process``: ``nsysan._memory``,
``nsysan._dataclass_code``); the analysis threads of each worker process of a
multi-trace run (``pool_threads``, ``set_threads``: ``NSYSAN_THREADS``).
"""

from __future__ import annotations

import gc
import os
import sys

_paused = False


def pause_collector() -> None:
    """Stop the cyclic collector (if it runs) until ``resume_collector``."""
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def resume_collector() -> None:
    """After the imports: freeze what exists and restart the collector ``pause_collector`` stopped (once)."""
    global _paused
    if _paused:
        _paused = False
        gc.freeze()
        gc.enable()


def pandas_without_arrow() -> None:
    """Import pandas with ``pyarrow`` hidden, then unhide it (once; see the module doc)."""
    if "pandas" in sys.modules or os.environ.get("NSYSAN_PANDAS_ARROW") or "pyarrow" in sys.modules:
        return
    sys.modules["pyarrow"] = None  # type: ignore[assignment]  # `import pyarrow` raises ImportError
    try:
        import pandas  # noqa: F401
    finally:
        if sys.modules.get("pyarrow", 0) is None:
            del sys.modules["pyarrow"]


def numpy_without_blas_threads() -> None:
    """numpy's OpenBLAS starts a thread per core when numpy is imported, and they spun for about
    0.1 s of CPU during the imports that follow, on the core the prefetch decodes on. nsysan calls
    no BLAS routine, so numpy is imported with ``OPENBLAS_NUM_THREADS=1`` (unless the user set it);
    the variable is removed again at once, so no program nsysan starts (nsys, a profiled command)
    inherits it."""
    if "numpy" in sys.modules or "OPENBLAS_NUM_THREADS" in os.environ:
        return
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        import numpy  # noqa: F401
    finally:
        os.environ.pop("OPENBLAS_NUM_THREADS", None)


def own_process() -> None:
    """The command line's process is nsysan's own: freed memory stays in it (``_memory.own_process``),
    and the methods ``dataclasses`` generates are compiled once across runs (``_dataclass_code``)."""
    from nsysan import _dataclass_code, _memory

    _memory.own_process()
    _dataclass_code.install()


def pool_threads(workers: int) -> str:
    """Analysis threads of each of ``workers`` processes: ``NSYSAN_THREADS``, else their share of the cores."""
    from nsysan._executor import cpus

    return os.environ.get("NSYSAN_THREADS") or str(max(1, cpus() // workers))


def set_threads(n: str) -> None:
    """A worker process' initializer: its analysis threads (``pool_threads``)."""
    os.environ["NSYSAN_THREADS"] = n


def exit_now(code: int) -> None:
    """The command line's exit: output flushed, then ``os._exit`` without the interpreter's shutdown
    (a ~1 GB heap freed object by object took 0.2 s after a 245 MB trace, for nothing: the outputs
    are written and closed by then). The dataclass methods compiled in this run are kept first."""
    from nsysan import _dataclass_code

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (nsysan ... | head): nothing more to say
            pass
    _dataclass_code.save()
    os._exit(code)
