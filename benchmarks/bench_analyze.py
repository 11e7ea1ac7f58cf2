"""End-to-end timing of load, analyses+rules, JSON and HTML on one trace, with peak memory.

    python3 benchmarks/bench_analyze.py TRACE.sqlite

Prints one line per stage (wall seconds) and the process's peak RSS. For comparisons against
``nsys stats``/``nsys analyze`` time the whole commands side by side (e.g. /usr/bin/time -v).
"""

from __future__ import annotations

import resource
import sys
import time


def main() -> int:
    path = sys.argv[1]
    t0 = time.perf_counter()
    import nsysan
    from nsysan.analysis import analyze
    from nsysan.report import html, jsonout, view

    t1 = time.perf_counter()
    trace = nsysan.open_trace(path)
    t2 = time.perf_counter()
    a = analyze(trace)
    t3 = time.perf_counter()
    jsonout.to_json(a)
    t4 = time.perf_counter()
    html.render(view.build(a))
    t5 = time.perf_counter()
    c = trace.counts()
    print(f"rows: kernels={c['kernels']:,} cuda_api={c['cuda_api']:,} memcpy={c['memcpy']:,} nvtx={c['nvtx']:,} "
          f"osrt={c['osrt']:,}")
    print(f"import {t1 - t0:.2f}s load {t2 - t1:.2f}s analyze {t3 - t2:.2f}s json {t4 - t3:.2f}s html {t5 - t4:.2f}s "
          f"total {t5 - t0:.2f}s peak_rss {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
