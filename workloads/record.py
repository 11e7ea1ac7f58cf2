"""Record the workloads under Nsight Systems and export each run to SQLite.

For every recording this writes, into ``--out``:

  <name>.sqlite             the export (``nsys profile ... --export sqlite``)
  <name>.log                the program's stdout/stderr (the workload's own timings)
  <name>.stats/<report>.csv ``nsys stats`` reference reports (kernel, API, memory, NVTX sums)
  <name>.json               provenance: exact command, nsys version, GPU, driver, wall time

and ``ladder.md``, the measured ladder table from the workloads' own timers.

    python3 workloads/record.py --out traces            # everything
    python3 workloads/record.py --out traces ladder_baseline timing

It needs ``nsys`` on PATH and a CUDA GPU. ``--quick`` passes ``--quick`` to every workload.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
LADDER_STEPS = ["baseline", "reuse", "pinned", "fp16", "overlap", "worker", "graph", "multictx", "profiles"]

RECORDINGS: dict[str, tuple[list[str], list[str]]] = {
    # name: (workload argv, extra nsys flags)
    **{f"ladder_{s}": (["ladder.py", "--step", s, "--backend", "torch"], []) for s in LADDER_STEPS},
    "timing": (["timing.py"], []),
    "launch_eager": (["launch_bound.py"], []),
    "launch_graph": (["launch_bound.py", "--graph"], []),
    "launch_graph_nodes": (["launch_bound.py", "--graph"], ["--cuda-graph-trace=node"]),
    # workloads unlike the ladder: LLM decode (eager / CUDA graph), HF generate, training input
    # pipelines, two processes with NCCL on one GPU
    "decode_eager": (["decode.py"], []),
    "decode_graph": (["decode.py", "--graph"], []),
    "decode_graph_nodes": (["decode.py", "--graph"], ["--cuda-graph-trace=node"]),
    "hf_generate": (["hf_generate.py"], []),
    "train_inline": (["train.py", "--loader", "inline"], []),
    "train_dataloader": (["train.py", "--loader", "dataloader"], []),
    "two_procs": (["two_procs.py"], []),
    # frameworks' own runtimes: a jax.jit train step (XLA's NVTX ranges, command buffers) and a
    # torch.compile(mode="reduce-overhead") train step (CUDA graph trees, the compile in the first step)
    # (XLA runs the step as a CUDA graph that nsys 2025.3 exports no GPU rows for in graph mode: node
    # mode; XLA's autotuning and OS runtime calls under 10 us left out to keep each fixture < 2 MB)
    "jax_train": (["jax_train.py", "--no-autotune"], ["--cuda-graph-trace=node", "--osrt-threshold=10000"]),
    "compile_train": (["compile_train.py"], ["--osrt-threshold=10000"]),
}

STATS_REPORTS = [
    "cuda_gpu_kern_sum", "cuda_api_sum", "cuda_gpu_mem_time_sum", "cuda_gpu_mem_size_sum",
    "nvtx_sum", "cuda_kern_exec_sum", "nvtx_gpu_proj_sum",
]


def run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, text=True, capture_output=True, **kw)  # type: ignore[call-overload]


def gpu_info() -> dict[str, str]:
    out = run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"])
    name, driver, memory = ([s.strip() for s in out.stdout.splitlines()[0].split(",")] + ["", "", ""])[:3]
    return {"gpu": name, "driver": driver, "gpu_memory": memory}


def record(name: str, out: Path, quick: bool, nsys: str, timeout: float) -> dict[str, object]:
    argv, flags = RECORDINGS[name]
    workload = [sys.executable, str(HERE / argv[0]), *argv[1:], *(["--quick"] if quick else [])]
    cmd = [nsys, "profile", "-t", "cuda,nvtx,osrt", "-s", "none", "--cpuctxsw=none", *flags,
           "--export", "sqlite", "-o", str(out / name), "-f", "true", *workload]
    t0 = time.time()
    try:
        proc = run(cmd, cwd=HERE, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        proc = subprocess.CompletedProcess(cmd, -9, str(e.stdout or ""), f"timed out after {timeout} s")
    wall = time.time() - t0
    (out / f"{name}.log").write_text(proc.stdout + proc.stderr)
    sqlite = out / f"{name}.sqlite"
    meta: dict[str, object] = {
        "name": name,
        "command": "nsys " + " ".join(cmd[1:cmd.index(sys.executable)]) + " python3 workloads/" + " ".join(
            workload[1:]).replace(str(HERE) + "/", ""),
        "returncode": proc.returncode,
        "wall_s": round(wall, 2),
        "ok": sqlite.exists(),
    }
    (out / f"{name}.nsys-rep").unlink(missing_ok=True)
    return meta


def stats(sqlite: Path, nsys: str) -> None:
    """``nsys stats`` reference CSVs for one export, one file per report."""
    stats_dir = sqlite.with_suffix(".stats")
    stats_dir.mkdir(exist_ok=True)
    for report in STATS_REPORTS:
        prefix = stats_dir / f"tmp_{report}"
        r = run([nsys, "stats", "-q", "-r", report, "-f", "csv", "-o", str(prefix), str(sqlite)], timeout=300)
        produced = sorted(stats_dir.glob(f"tmp_{report}*.csv"))
        for f in produced:
            f.rename(stats_dir / f"{report}.csv")
        if not produced:
            (stats_dir / f"{report}.err").write_text(r.stdout + r.stderr)


LADDER_RE = re.compile(r"step=(\w+) batch=(\d+) Total Elapsed Time\((\d+) batches\): ([\d.]+) ms per-batch: ([\d.]+)")


def ladder_table(out: Path) -> str:
    rows = ["| step | total (3 batches) | per batch | speedup |", "|---|---|---|---|"]
    base = None
    for step in LADDER_STEPS:
        log = out / f"ladder_{step}.log"
        m = LADDER_RE.search(log.read_text()) if log.exists() else None
        if not m:
            rows.append(f"| {step} | (not run) | | |")
            continue
        total = float(m.group(4))
        base = base or total
        rows.append(f"| {step} | {total:.1f} ms | {float(m.group(5)):.1f} ms | {base / total:.2f}x |")
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("names", nargs="*", help=f"recordings (default: all): {', '.join(RECORDINGS)}")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--no-stats", action="store_true", help="skip the nsys stats reference reports")
    p.add_argument("--timeout", type=float, default=240, help="seconds per recording")
    args = p.parse_args(argv)
    nsys = shutil.which("nsys")
    if nsys is None:
        print("record.py: nsys is not on PATH (install Nsight Systems, or source a kit that provides it)",
              file=sys.stderr)
        return 2
    unknown = [n for n in args.names if n not in RECORDINGS]
    if unknown:
        print(f"record.py: unknown recording(s): {', '.join(unknown)}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    common = {"nsys_version": run([nsys, "--version"]).stdout.strip(), **gpu_info()}
    for name in args.names or list(RECORDINGS):
        meta = {**record(name, args.out, args.quick, nsys, args.timeout), **common}
        (args.out / f"{name}.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        print(f"{name}: rc={meta['returncode']} {meta['wall_s']} s sqlite={meta['ok']}", flush=True)
    if not args.no_stats:
        exports = sorted(args.out.glob("*.sqlite"))
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(lambda f: stats(f, nsys), exports))
    (args.out / "ladder.md").write_text(ladder_table(args.out))
    print((args.out / "ladder.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
