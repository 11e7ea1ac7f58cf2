"""Peak resident memory (RSS) per phase of ``nsysan analyze``: load, analyses + rules, JSON, HTML.

    python3 benchmarks/peak_phases.py TRACE.sqlite [--detail] [--library] [--heap]

A sampler thread reads the process's RSS from /proc every millisecond and keeps the peak of each
phase; each line gives the RSS at the phase's start, its peak, the peak above the start, and the
wall time. ``--detail`` also wraps the analysis functions (run with NSYSAN_THREADS=1 to attribute
peaks to one analysis at a time). The allocator is tuned as the ``nsysan`` command tunes it
(``_memory.own_process``), or as in a library user's process with ``--library``. Linux only (reads /proc/self/statm).

``--heap`` (glibc): each phase's peak of glibc's heap (``mallinfo2``: the bytes the allocator holds,
``arena``) and of the bytes in use in it (``uordblks``); where the heap grows well past what is in
use, freed temporaries between live arrays are what the RSS pays for (session 13: 100-130 MiB on
the 245 MB replica), and a smaller working set alone will not lower the peak.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import time

_PAGE = os.sysconf("SC_PAGE_SIZE")


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def _mallinfo2():
    """glibc's ``mallinfo2`` (2.33+), or None."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        f = libc.mallinfo2
    except (OSError, AttributeError):
        return None
    f.restype = _Mallinfo2
    return f


class Sampler:
    def __init__(self, heap: bool = False) -> None:
        self.active: list[str] = []
        self.peaks: dict[str, list[float]] = {}
        self.heap_peaks: dict[str, list[float]] = {}  # per phase: [peak heap, peak in use] (MiB)
        self.order: list[str] = []
        self._stop = False
        self.top = (0.0, [])  # the process's highest RSS seen and the phases running then
        self._fd = os.open("/proc/self/statm", os.O_RDONLY)
        self._mallinfo = _mallinfo2() if heap else None
        self.t = threading.Thread(target=self._run, daemon=True)

    def rss(self) -> float:
        return int(os.pread(self._fd, 100, 0).split()[1]) * _PAGE / 2**20

    def _run(self) -> None:
        while not self._stop:
            r = self.rss()
            if r > self.top[0]:
                self.top = (r, list(self.active))
            m = self._mallinfo() if self._mallinfo is not None else None
            for name in list(self.active):  # a phase's peak includes its nested phases'
                p = self.peaks[name]
                p[1] = max(p[1], r)
                if m is not None:
                    h = self.heap_peaks.setdefault(name, [0.0, 0.0])
                    h[0] = max(h[0], m.arena / 2**20)
                    h[1] = max(h[1], m.uordblks / 2**20)
            time.sleep(0.001)

    def enter(self, name: str) -> None:
        r = self.rss()
        if name not in self.peaks:
            self.peaks[name] = [r, r, 0.0, time.perf_counter()]
            self.order.append(name)
        else:
            self.peaks[name][3] = time.perf_counter()
        self.active.append(name)

    def leave(self, name: str) -> None:
        p = self.peaks[name]
        p[1] = max(p[1], self.rss())
        p[2] += time.perf_counter() - p[3]
        self.active.remove(name)

    def report(self) -> None:
        for name in self.order:
            start, peak, wall, _ = self.peaks[name]
            heap = self.heap_peaks.get(name)
            more = f"  heap {heap[0]:6.0f} MiB, in use {heap[1]:6.0f} MiB" if heap else ""
            print(f"{name:<34} start {start:7.0f} MiB  peak {peak:7.0f} MiB  (+{peak - start:6.0f})  {wall:6.2f} s{more}")
        print(f"highest RSS sampled {self.top[0]:.0f} MiB, during: {', '.join(n.strip() for n in self.top[1])}")


def main() -> int:
    path = sys.argv[1]
    detail = "--detail" in sys.argv[2:]
    s = Sampler(heap="--heap" in sys.argv[2:])
    s.t.start()

    def phase(name, fn, *a, **kw):
        s.enter(name)
        try:
            return fn(*a, **kw)
        finally:
            s.leave(name)

    from nsysan import _memory

    if "--library" not in sys.argv[2:]:  # the allocator and imports as the `nsysan` command sets them
        _memory.own_process()
        from nsysan._startup import pandas_without_arrow

        s.enter("import")
        pandas_without_arrow()
    else:
        s.enter("import")
    import nsysan
    from nsysan import analysis
    from nsysan.report import html, jsonout, view
    s.leave("import")
    if detail:
        _wrap(analysis, phase)
    trace = phase("load", nsysan.open_trace, path)
    from nsysan.report import timeline

    # as the CLI does with --json and --html: the timeline encodes during the rules and the JSON
    a = phase("analyze (analyses + rules)", analysis.analyze, trace, on_analyses=timeline.start)
    phase("json (timeline encoding meanwhile)", jsonout.to_json, a)
    vm = phase("html: view model", view.build, a)
    # as the CLI writes it: the template's pieces as they come (none of them kept here)
    phase("html: render", lambda v: sum(len(p) for p in html.pieces(v)), vm)
    s._stop = True
    s.report()
    import resource

    print(f"process peak (ru_maxrss) {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    return 0


def _wrap(analysis, phase) -> None:
    """Label the named analysis functions as phases (meaningful with NSYSAN_THREADS=1)."""
    import functools
    import importlib

    targets = {
        "nsysan.analysis": ["_summaries", "_gaps", "_nvtx", "_busy", "_launches", "_steady", "_idle_samples",
                            "_gpu_metrics", "graph_trace_mode", "_without_gaps", "_syncs", "_beyond_time"],
        "nsysan.analyses.summaries": ["gpu_ops", "kernel_config_summary", "window_summaries"],
        "nsysan.analyses.nsys_rules": ["instances", "cross_check"],
        "nsysan.analyses.comm": ["comm_ops", "collectives", "comm_per_iteration", "nccl_calls"],
        "nsysan.analyses.breakdown": ["iteration_breakdown"],
        "nsysan.analyses.ranks": ["analyze_ranks"],
        "nsysan.rules": ["run_rules"],
        "nsysan.analyses.gaps": ["with_launch_calls", "_device_gaps", "explain_gaps", "gap_summary"],
        "nsysan.analyses.nvtx": ["owned_ops", "ranges", "range_summary"],
        "nsysan.analyses.launch": ["launches", "launch_summary", "per_kernel"],
        "nsysan.report.timeline": ["start", "build_timeline"],
        # the analyses beyond time (issue 41), imported by name when ``analysis._without_gaps`` runs
        "nsysan.analyses.memory": ["memory_use"],
        "nsysan.analyses.unified": ["unified_memory"],
        "nsysan.analyses.sched": ["thread_states"],
        "nsysan.analyses.stages": ["stages"],
        "nsysan.analyses.slow_iterations": ["slow_iterations"],
    }
    for modname, names in targets.items():
        try:
            mod = importlib.import_module(modname)
        except ImportError:  # a module renamed or gone: its functions are not labelled
            continue
        for n in names:
            f = getattr(mod, n, None)
            if f is None:
                continue

            label = f"  {modname.rsplit('.', 1)[-1]}.{n}"

            def w(*a, _f=f, _n=label, **kw):
                return phase(_n, _f, *a, **kw)

            functools.update_wrapper(w, f)
            setattr(mod, n, w)
            if modname != "nsysan.analysis" and hasattr(analysis, n):
                setattr(analysis, n, w)
    try:
        from nsysan.analyses import thread_activity
    except ImportError:  # a version with the per-thread engine inside gaps
        from nsysan.analyses import gaps as thread_activity
    # the gap attribution's per-thread work, under whichever names this version has (``_layers`` and
    # ``sums`` were merged into ``exclusive_sums``: missing methods are skipped, not an error)
    for n in ("_thread", "_layers", "sums", "exclusive_sums", "nvtx_swept"):
        f = getattr(thread_activity.ThreadActivity, n, None)
        if f is None:
            continue
        setattr(thread_activity.ThreadActivity, n, lambda self, *a, _f=f, _n=f"    ThreadActivity.{n}", **kw: phase(_n, _f, self, *a, **kw))
    if hasattr(analysis, "analyze_tensorrt"):
        analysis.analyze_tensorrt = (lambda *a, _f=analysis.analyze_tensorrt, **kw:
                                     phase("  tensorrt.analyze_tensorrt", _f, *a, **kw))


if __name__ == "__main__":
    sys.exit(main())
