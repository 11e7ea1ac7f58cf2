"""Make a big trace from a real one by replicating its events with time offsets.

    python3 benchmarks/replicate.py SRC.sqlite DST.sqlite --copies 120

Kernels, memcpy, memset, CUDA API, NVTX, OS runtime and memory-usage rows are copied ``copies`` times, each copy
shifted by the source's span (so intervals never overlap their originals) and given fresh
correlation ids (offset by a multiple of the largest id), keeping every join valid. The source is
only read.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import sys

TABLES = {  # table: has correlationId
    "CUPTI_ACTIVITY_KIND_KERNEL": True, "CUPTI_ACTIVITY_KIND_MEMCPY": True, "CUPTI_ACTIVITY_KIND_MEMSET": True,
    "CUPTI_ACTIVITY_KIND_RUNTIME": True, "NVTX_EVENTS": False, "OSRT_API": False,
    "CUDA_GPU_MEMORY_USAGE_EVENTS": True,  # point events (``start`` only); absent from most exports
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("--copies", type=int, default=10)
    a = p.parse_args(argv)
    shutil.copyfile(a.src, a.dst)
    con = sqlite3.connect(a.dst)
    present = {r[0] for r in con.execute("select name from sqlite_master where type='table'")}
    lo, hi = con.execute("select min(start), max(end) from CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()
    span = hi - lo + 1_000_000
    maxcorr = con.execute("select max(correlationId) from CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0] + 1
    for table, corr in TABLES.items():
        if table not in present:
            continue
        cols = [r[1] for r in con.execute(f'pragma table_info("{table}")')]
        sel = []
        for c in cols:
            if c in ("start", "end"):
                sel.append(f'"{c}" + :off')
            elif c == "correlationId" and corr:
                sel.append('"correlationId" + :coff')
            else:
                sel.append(f'"{c}"')
        base = f'SELECT {", ".join(sel)} FROM "{table}" WHERE rowid <= :n'
        n = con.execute(f'select max(rowid) from "{table}"').fetchone()[0] or 0
        for i in range(1, a.copies):
            con.execute(f'INSERT INTO "{table}" ({", ".join(chr(34) + c + chr(34) for c in cols)}) {base}',
                        {"off": i * span, "coff": i * maxcorr, "n": n})
        con.commit()
    con.execute("DELETE FROM ANALYSIS_DETAILS") if "ANALYSIS_DETAILS" in present else None
    con.commit()
    con.execute("VACUUM")
    con.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
