"""Cross-rank analysis of many rank exports on a Dask LocalCluster: time, client memory, bytes back.

    python3 benchmarks/cluster_ranks.py RANK0.sqlite RANK1.sqlite --ranks 64 --workers 2

Copies the given rank exports round-robin into ``--ranks`` files (rank0..rankN-1.sqlite in a
temporary folder: the copies of one export share its clock, so they align like ranks in step),
starts a LocalCluster (processes), runs ``nsysan analyze rank*.sqlite --out-dir DIR --scheduler
ADDR`` in this process, and prints the wall time, this (client) process's peak RSS, and the size of
what each worker returned (the per-trace result with its rank payload, as JSON).
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("exports", nargs="+", type=Path)
    p.add_argument("--ranks", type=int, default=64)
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args()
    from dask.distributed import LocalCluster

    from nsysan import cluster
    from nsysan.cli import main as nsysan_main

    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        files = []
        for r in range(args.ranks):
            f = d / f"rank{r}.sqlite"
            shutil.copyfile(args.exports[r % len(args.exports)], f)
            files.append(str(f))
        sizes: list[int] = []
        orig = cluster.run

        def measured(*a, **kw):  # noqa: ANN002, ANN003, ANN202 - sizes what the workers sent back
            results, errors = orig(*a, **kw)
            sizes.extend(len(json.dumps(r, default=str)) for r in results)
            return results, errors

        cluster.run = measured
        with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True) as lc:
            rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            t0 = time.perf_counter()
            rc = nsysan_main(["analyze", *files, "--out-dir", str(d / "out"), "--scheduler", lc.scheduler_address,
                              "-q", "--no-html"])
            wall = time.perf_counter() - t0
            rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        summary = json.loads((d / "out" / "summary.json").read_text())
        r = summary.get("ranks", {})
        print(f"ranks {args.ranks}, workers {args.workers}, exit {rc}: wall {wall:.1f} s; client peak RSS "
              f"{rss1 / 1024:.0f} MiB (before the run {rss0 / 1024:.0f} MiB); summary.json "
              f"{(d / 'out' / 'summary.json').stat().st_size / 1024:.0f} KiB; ranks aligned {len(r.get('ranks', []))}, "
              f"collectives aligned {r.get('collectives_aligned')}; verdict: {r.get('verdict')}")
        if sizes:
            print(f"what each task sent back to the client (JSON): {min(sizes) / 1024:.1f}..{max(sizes) / 1024:.1f} KiB, "
                  f"{sum(sizes) / 1024:.0f} KiB in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
