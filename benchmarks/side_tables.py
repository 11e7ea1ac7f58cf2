"""Big side tables (issue 54 item 7): traces whose bulk is one table the time analyses do not need,
built from fixtures by SQL, and the peak memory of ``nsysan analyze`` on them against the promise,
max(2x the file, 300 MB).

    python3 benchmarks/side_tables.py build DIR [--only mem,sched,ranks64]
    python3 benchmarks/side_tables.py measure DIR [--only ...]   # one run each: peak RSS, wall

The traces (deterministic):

* ``mem``: ``mem_growth`` with 3M more CUDA memory-usage events (1.5M allocations of 2 MiB, each
  freed 5 us later at the same address, on the recorded process and device): about 150 MB.
* ``sched``: ``blocked_input`` with 4M more scheduling events (switch-in / switch-out pairs of its
  three busiest threads, spread over the capture): about 115 MB.
* ``ranks64``: ``pipeline`` (two ranks, two GPUs) as 64 ranks: its two processes' events copied 31
  times with new process and thread ids and devices 2k, 2k + 1 (``TARGET_INFO_GPU`` too).

``measure`` runs ``nsysan analyze TRACE --json J --no-html -f -q`` (the analysis cache off) in a child
and reads its own peak (VmHWM, see tests/own_peak.py) and its wall time. Not a test: figures in
docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "traces"


def _fixture(name: str, dst: Path) -> sqlite3.Connection:
    with lzma.open(FIXTURES / name / "trace.sqlite.xz") as f, open(dst, "wb") as g:
        shutil.copyfileobj(f, g)
    return sqlite3.connect(dst)


def build_mem(dst: Path, pairs: int = 1_500_000) -> None:
    con = _fixture("mem_growth", dst)
    t = "CUDA_GPU_MEMORY_USAGE_EVENTS"
    lo, hi, gpid, dev = con.execute(f"SELECT min(start), max(start), min(globalPid), min(deviceId) FROM {t}").fetchone()
    step = max((hi - lo) // pairs, 10_000)
    con.execute(f"WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c WHERE i < {pairs - 1}) "
                f"INSERT INTO {t} (start, globalPid, deviceId, contextId, address, pc, bytes, memKind, "
                f"memoryOperationType) SELECT {lo} + i * {step} + op * 5000, {gpid}, {dev}, 1, "
                f"1099511627776 + (i % 64) * 2097152, 0, 2097152, 2, op FROM c, (SELECT 0 AS op UNION ALL SELECT 1)")
    con.commit()
    con.close()


def build_sched(dst: Path, rows: int = 4_000_000) -> None:
    con = _fixture("blocked_input", dst)
    tids = [r[0] for r in con.execute("SELECT globalTid FROM SCHED_EVENTS GROUP BY 1 ORDER BY count(*) DESC LIMIT 3")]
    lo, hi = con.execute("SELECT min(start), max(start) FROM SCHED_EVENTS").fetchone()
    per = rows // (2 * len(tids))
    step = max((hi - lo) // per, 20)
    for k, tid in enumerate(tids):
        con.execute(f"WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c WHERE i < {per - 1}) "
                    "INSERT INTO SCHED_EVENTS (start, cpu, isSchedIn, globalTid, threadState, threadBlock) "
                    f"SELECT {lo} + i * {step} + {k} + s.x * ({step} / 2), {k}, 1 - s.x, {tid}, 0, NULL "
                    "FROM c, (SELECT 0 AS x UNION ALL SELECT 1) AS s")
    con.commit()
    con.close()


def build_ranks64(dst: Path, ranks: int = 64) -> None:
    con = _fixture("pipeline", dst)
    pids = [r[0] for r in con.execute("SELECT DISTINCT globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY 1")]
    ndev = len(pids)
    tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    proc = " OR ".join(f"(x >> 24) = ({p} >> 24)" for p in pids)  # rows of the CUDA processes
    for k in range(1, ranks // ndev):
        shift = (k * 1000) << 24  # new process ids (the pid field of globalPid/globalTid)
        for t in tables:
            cols = [r[1] for r in con.execute(f'PRAGMA table_info("{t}")')]
            key = next((c for c in ("globalPid", "globalTid") if c in cols), None)
            if t == "TARGET_INFO_GPU":
                sel = [f'"{c}" + {k * ndev}' if c == "id" else f'"{c}"' for c in cols]
                where = f'"id" < {ndev}'  # the recorded devices, not the copies made before
            elif key is None:
                continue
            else:
                sel = [f'"{c}" + {shift}' if c in ("globalPid", "globalTid", "endGlobalTid")
                       else f'"{c}" + {k * 1000}' if c == "pid" and t == "PROCESSES"
                       else f'"{c}" + {k * ndev}' if c in ("deviceId", "srcDeviceId", "dstDeviceId") else f'"{c}"'
                       for c in cols]
                where = proc.replace("x", f'"{key}"')
            names = ", ".join(f'"{c}"' for c in cols)
            con.execute(f'INSERT INTO "{t}" ({names}) SELECT {", ".join(sel)} FROM "{t}" WHERE ({where}) '
                        f"AND rowid <= (SELECT max(rowid) FROM \"{t}\")")
    con.commit()
    con.close()


BUILDERS = {"mem": build_mem, "sched": build_sched, "ranks64": build_ranks64}
PEAK = "next(int(x.split()[1]) for x in open('/proc/self/status') if x.startswith('VmHWM:'))"
CHILD = f"import sys; from nsysan.cli import main; rc = main(sys.argv[1:]); print(rc, {PEAK})"


def measure(path: Path) -> dict[str, float]:
    env = {**os.environ, "NSYSAN_NO_CACHE": "1", "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", CHILD, "analyze", str(path), "--json", str(path.with_suffix(".json")),
                        "--no-html", "-f", "-q"], capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - t0
    rc, kb = r.stdout.split()[-2:]
    size = path.stat().st_size
    return {"rc": int(rc), "wall_s": round(wall, 2), "peak_mib": round(int(kb) / 1024, 1),
            "file_mib": round(size / 2**20, 1), "promise_mib": round(max(2 * size, 300e6) / 2**20, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("build", "measure"))
    ap.add_argument("dir", type=Path)
    ap.add_argument("--only", default=",".join(BUILDERS))
    a = ap.parse_args(argv)
    a.dir.mkdir(parents=True, exist_ok=True)
    for name in a.only.split(","):
        p = a.dir / f"{name}.sqlite"
        if a.what == "build":
            BUILDERS[name](p)
            print(f"{p}: {p.stat().st_size / 1e6:.0f} MB")
        else:
            print(name, json.dumps(measure(p)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
