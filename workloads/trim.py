"""Trim recorded exports into small test fixtures (and bundled examples).

For each ``<name>.sqlite`` recorded by ``record.py`` this writes ``<dest>/<name>/``:

  trace.sqlite.xz   a copy with bulky tables nsysan does not read dropped, VACUUMed, xz-compressed
  stats/*.csv       the ``nsys stats`` reference reports recorded next to it (same events: the
                    dropped tables hold no kernel/API/memcpy/NVTX rows)
  README.md         provenance: nsys version, GPU, driver, exact command, what was dropped

The source export is only read (opened read-only); the copy is what gets trimmed.

    python3 workloads/trim.py --src traces --dest tests/fixtures/traces
"""

from __future__ import annotations

import argparse
import json
import lzma
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path

# Tables with no bearing on nsysan's analyses (call stacks, profiler bookkeeping, embedded files).
DROP = ("OSRT_CALLCHAINS", "SAMPLING_CALLCHAINS", "ANALYSIS_FILE", "DIAGNOSTIC_EVENT")
# Tables the analyses of memory, unified memory and thread scheduling read: never dropped.
KEEP = ("SCHED_EVENTS", "COMPOSITE_EVENTS", "CUDA_GPU_MEMORY_USAGE_EVENTS", "CUDA_UM_GPU_PAGE_FAULT_EVENTS",
        "CUDA_UM_CPU_PAGE_FAULT_EVENTS", "CUPTI_ACTIVITY_KIND_MEMCPY", "OSRT_API")
assert not set(DROP) & set(KEEP)
# Log lines that are the workloads' own timings (copied into the fixture README).
RESULT_TAGS = ("[producer_wait]", "[ladder]", "[launch_bound]", "[decode]", "[hf_generate]", "[train]", "[two_procs]", "[ddp]", "[waits]", "[diagnose]")


# nsys' Python sampler thread: its own context switches, hundreds of thousands in a short capture
SAMPLER_THREAD = "NSys PySampling"
SHORT_OSRT_NS = 10_000


def loop_only(con: sqlite3.Connection, loop_range: str) -> list[str]:
    """Before the first instance of the NVTX range ``loop_range``: drop the Python samples (NVTX event
    type 34) and the OS runtime calls shorter than ``SHORT_OSRT_NS`` (what ``--osrt-threshold=10000``
    would have recorded there); everywhere: the context switches of nsys' Python sampler thread.
    Returns what was dropped, for the README."""
    first = con.execute("select min(n.start) from NVTX_EVENTS n left join StringIds s on s.id = n.textId "
                        "where coalesce(n.text, s.value) = ?", (loop_range,)).fetchone()[0]
    if first is None:
        raise SystemExit(f"no NVTX range {loop_range!r}")
    con.execute("delete from NVTX_EVENTS where eventType = 34 and start < ?", (first,))
    con.execute("delete from OSRT_API where start < ? and end - start < ?", (first, SHORT_OSRT_NS))
    con.execute("delete from SCHED_EVENTS where globalTid in (select t.globalTid from ThreadNames t join StringIds s "
                "on s.id = t.nameId where s.value = ?)", (SAMPLER_THREAD,))
    return [(f"before the first `{loop_range}` range ({first} ns): the Python samples and the OS runtime calls "
             f"under {SHORT_OSRT_NS // 1000} us; the SCHED_EVENTS rows of nsys' `{SAMPLER_THREAD}` thread")]


def trim(src: Path, dest_dir: Path, keep_callchains: bool = False, loop_range: str = "") -> Path:
    dest_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "trace.sqlite"
        shutil.copyfile(src, work)
        con = sqlite3.connect(work)
        present = {r[0] for r in con.execute("select name from sqlite_master where type='table'")}
        dropped = [t for t in DROP if t in present and not (keep_callchains and t.endswith("CALLCHAINS"))]
        for table in dropped:
            con.execute(f'DROP TABLE "{table}"')
        rows = loop_only(con, loop_range) if loop_range else []
        con.commit()
        con.execute("VACUUM")
        con.close()
        out = dest_dir / "trace.sqlite.xz"
        out.write_bytes(lzma.compress(work.read_bytes(), preset=9))
    stats = src.with_suffix(".stats")
    if stats.is_dir():
        shutil.copytree(stats, dest_dir / "stats", dirs_exist_ok=True)
    meta_file = src.with_suffix(".json")
    meta = json.loads(meta_file.read_text()) if meta_file.exists() else {}
    log = src.with_suffix(".log")
    result_lines = [ln for ln in (log.read_text().splitlines() if log.exists() else []) if any(tag in ln for tag in RESULT_TAGS)
                    or " n=" in ln]
    readme = [
        f"# {src.stem}",
        "",
        f"- nsys: {meta.get('nsys_version', 'unknown')}",
        f"- GPU: {meta.get('gpu', 'unknown')} ({meta.get('gpu_memory', '?')}), driver {meta.get('driver', '?')}",
        f"- command: `{meta.get('command', 'unknown')}`",
        f"- trimmed by `workloads/trim.py`: dropped {', '.join(dropped) or 'nothing'}; VACUUM; xz -9",
        *[f"- rows dropped (`--loop-only {loop_range}`): {r}" for r in rows],
        "- `stats/`: `nsys stats -f csv` reports made by the same nsys on the untrimmed export" if stats.is_dir()
        else "- no `stats/`: `nsys stats` was not run on this export",
    ]
    if result_lines:
        readme += ["", "What the workload printed about itself:", "", "```", *result_lines, "```"]
    (dest_dir / "README.md").write_text("\n".join(readme) + "\n")
    return dest_dir


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--src", type=Path, required=True, help="folder written by record.py")
    p.add_argument("--dest", type=Path, required=True)
    p.add_argument("names", nargs="*")
    p.add_argument("--keep-callchains", action="store_true", help="keep OSRT/SAMPLING_CALLCHAINS (CPU samples)")
    p.add_argument("--loop-only", default="", metavar="RANGE",
                   help="drop Python samples and short OS runtime calls before this NVTX range, and the sampler's switches")
    args = p.parse_args(argv)
    sources = [args.src / f"{n}.sqlite" for n in args.names] or sorted(args.src.glob("*.sqlite"))
    for src in sources:
        out = trim(src, args.dest / src.stem, args.keep_callchains, args.loop_only)
        size = (out / "trace.sqlite.xz").stat().st_size
        print(f"{src.name} -> {out}/trace.sqlite.xz ({size / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
