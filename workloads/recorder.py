"""Record fixtures under Nsight Systems, as ``workloads/fixtures.toml`` says (program, arguments, GPUs, nsys flags).

    python3 workloads/recorder.py --list                              # the table: group, name, command
    python3 workloads/recorder.py --out DIR ladder_baseline timing    # named fixtures
    python3 workloads/recorder.py --out DIR --group ddp               # every fixture of a group
    python3 workloads/recorder.py --dry-run --group beyond_time       # the commands, nothing run
    python3 workloads/recorder.py --out DIR --bare 5 ddp_serial ddp_overlap   # no nsys: 5 interleaved rounds

Each recording runs from a scratch folder (``--scratch``, default ``DIR/raw``) under ``timeout`` and writes there
``<name>.sqlite``, ``<name>.log`` (the program's output: its own timings), ``<name>.json`` (provenance: command, nsys
version, GPU, driver, wall time) and, where the entry says ``stats``, ``<name>.stats/<report>.csv``. Then the
entries' ``measure`` re-runs without nsys (``measure.log``), ``workloads/trim.py`` makes the fixtures
(``DIR/fixtures/<name>/``, tarred to ``DIR/fixtures.tar``, split into 15 MiB parts when larger), the logs and
provenance go to ``DIR/logs.tar.xz`` and, for the ladder, ``DIR/ladder.md`` holds the table of its own timers.
It needs ``nsys`` on PATH and the GPUs the entries name. NVLink multicast stays off (NCCL_NVLS_ENABLE=0 ...).
An entry ``via = "nsysan"`` is recorded by ``python3 -m nsysan profile`` (its ``nsysan_flags``) instead of nsys.
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TABLE = HERE / "fixtures.toml"
LADDER_STEPS = ["baseline", "reuse", "pinned", "fp16", "overlap", "worker", "graph", "multictx", "profiles"]
STATS_REPORTS = [
    "cuda_gpu_kern_sum", "cuda_api_sum", "cuda_gpu_mem_time_sum", "cuda_gpu_mem_size_sum",
    "nvtx_sum", "cuda_kern_exec_sum", "nvtx_gpu_proj_sum",
]
# the machines' rule: NVLink multicast can take a host's GPUs out of service
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
DEFAULTS = {"flags": "base", "args": [], "extra_flags": [], "procs": 1, "gpus": 1, "per_rank": False,
            "export": "sqlite", "trim": [], "stats": False, "timeout": 150, "measure": None, "via": "nsys",
            "nsysan_flags": [], "env": {}, "tag": "", "kept": True, "from_report": "", "rounds": 1}
PART = 15 * 2**20


def load(path: Path = TABLE) -> dict[str, dict]:
    """The table's entries, each with its group's defaults and its flag set resolved (``nsys_flags``)."""
    table = tomllib.loads(path.read_text())
    entries = {}
    for name, own in table["fixture"].items():
        e = {**DEFAULTS, **table["group"][own["group"]], **own, "name": name}
        e["nsys_flags"] = [*table["flags"][e["flags"]], *e["extra_flags"]]
        entries[name] = e
    return entries


def not_recorded(path: Path = TABLE) -> dict[str, str]:
    return tomllib.loads(path.read_text()).get("not_recorded", {})


def fixtures_of(e: dict) -> list[str]:
    """The fixture names an entry makes (a per-rank entry: one a rank)."""
    if e["per_rank"]:
        return [f"{e['name'].removesuffix('_ranks')}_rank{r}" for r in range(e["procs"])]
    return [e["name"]]


def program(e: dict, args: list[str] | None = None, quick: bool = False) -> list[str]:
    """The program's command line, as it reads in provenance (``workloads/...``: run from the repository)."""
    argv = [*e["args"]] if args is None else args
    return [f"workloads/{e['program']}", *argv, *(["--quick"] if quick else [])]


def commands(e: dict, out: Path, quick: bool = False) -> list[list[str]]:
    """The commands that record one entry into ``out`` (relative ``workloads/`` paths: run from ROOT)."""
    name, flags = e["name"], [*e["nsys_flags"]]
    if e["from_report"]:
        return [["nsys", "export", "--type", "sqlite", "-f", "true", "-o", str(out / f"{name}.sqlite"),
                 str(out / f"{e['from_report']}.nsys-rep")]]
    if e["via"] == "nsysan":
        return [["python3", "-m", "nsysan", "profile", "-f", "--timeout", str(e["timeout"]), "-o",
                 str(out / name), *e["nsysan_flags"], "--", "python3", *program(e, quick=quick)]]
    if e["export"] == "sqlite":
        flags += ["--export", "sqlite"]
    flags += ["-f", "true"]
    if e["per_rank"]:
        stem = name.removesuffix("_ranks")
        cmd = ["python3", "-m", "torch.distributed.run", f"--nproc_per_node={e['procs']}", "--no-python", "nsys",
               "profile", *flags, "-o", str(out / f"{stem}_rank%q{{RANK}}"), "python3", *program(e, quick=quick)]
    elif e["procs"] > 1:
        cmd = ["nsys", "profile", *flags, "-o", str(out / name), "python3", "-m", "torch.distributed.run",
               f"--nproc_per_node={e['procs']}", *program(e, quick=quick)]
    else:
        cmd = ["nsys", "profile", *flags, "-o", str(out / name), "python3", *program(e, quick=quick)]
    cmds = [cmd]
    if e["export"] in ("blobs", "after"):
        blobs = ["--include-blobs=true"] if e["export"] == "blobs" else []
        cmds.append(["nsys", "export", "--type", "sqlite", *blobs, "-f", "true", "-o", str(out / f"{name}.sqlite"),
                     str(out / f"{name}.nsys-rep")])
    return cmds


def provenance_command(cmds: list[list[str]], out: Path) -> str:
    """The commands as the fixture README gives them (output paths bare)."""
    return "; ".join(shlex.join(c) for c in cmds).replace(str(out) + "/", "").replace("'", "")


def environment(e: dict) -> dict[str, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **NO_MULTICAST, **e["env"],
           "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in range(e["gpus"]))}
    if e["via"] == "nsysan":
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return env


def run(cmd: list[str], log: Path, env: dict[str, str], timeout: float) -> int:
    with log.open("a") as f:
        try:
            proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=timeout)
            return proc.returncode
        except subprocess.TimeoutExpired:
            f.write(f"\nrecorder: timed out after {timeout} s\n")
            return 124


def gpu_info() -> dict[str, str]:
    out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                         text=True, capture_output=True).stdout
    name, driver, memory = ([s.strip() for s in (out.splitlines() or [""])[0].split(",")] + ["", "", ""])[:3]
    return {"gpu": name, "driver": driver, "gpu_memory": memory}


def record(e: dict, raw: Path, common: dict[str, str], quick: bool, timeout: float | None) -> int:
    cmds = commands(e, raw, quick)
    log = raw / f"{e['name']}.log"
    log.write_text("")
    if e["from_report"]:
        shutil.copyfile(raw / f"{e['from_report']}.log", log)
    t0, rc = time.time(), 0
    for cmd in cmds:
        rc = rc or run(cmd, log, environment(e), timeout or e["timeout"])
    wall = round(time.time() - t0, 2)
    gpu = common["gpu"] if e["gpus"] == 1 else f"{e['gpus']}x {common['gpu']}"
    command = provenance_command(cmds, raw)
    if e["via"] == "nsysan":  # the nsys command nsysan ran
        command = next((ln[len("running: "):].strip() for ln in log.read_text(errors="replace").splitlines()
                        if ln.startswith("running: ")), command)
    for fixture in fixtures_of(e):
        meta = {**common, "gpu": gpu, "name": fixture, "command": command, "returncode": rc, "wall_s": wall}
        (raw / f"{fixture}.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        if fixture != e["name"]:
            shutil.copyfile(log, raw / f"{fixture}.log")
    print(f"{e['name']}: rc={rc} {wall} s sqlite={all((raw / f'{f}.sqlite').exists() for f in fixtures_of(e))}",
          flush=True)
    return rc


def stats(sqlite: Path, nsys: str = "nsys") -> None:
    """``nsys stats`` reference CSVs for one export, one file per report."""
    stats_dir = sqlite.with_suffix(".stats")
    stats_dir.mkdir(exist_ok=True)
    for report in STATS_REPORTS:
        prefix = stats_dir / f"tmp_{report}"
        r = subprocess.run([nsys, "stats", "-q", "-r", report, "-f", "csv", "-o", str(prefix), str(sqlite)],
                           text=True, capture_output=True, timeout=300)
        produced = sorted(stats_dir.glob(f"tmp_{report}*.csv"))
        for f in produced:
            f.rename(stats_dir / f"{report}.csv")
        if not produced:
            (stats_dir / f"{report}.err").write_text(r.stdout + r.stderr)


def measure(entries: list[dict], raw: Path, rounds: int | None) -> None:
    """The entries' re-runs without nsys, each distinct command once a round, into ``measure.log``."""
    runs: dict[str, dict] = {}
    for e in entries:
        if e["measure"] is not None:
            runs.setdefault(shlex.join(program(e, e["measure"])), e)
    log = raw / "measure.log"
    for r in range(1, (rounds or max((e["rounds"] for e in runs.values()), default=1)) + 1):
        for text, e in runs.items():
            with log.open("a") as f:
                f.write(f"== round {r}: python3 {text}\n")
            run(["python3", *shlex.split(text)], log, environment(e), e["timeout"])


LADDER_RE = re.compile(r"step=(\w+) batch=(\d+) Total Elapsed Time\((\d+) batches\): ([\d.]+) ms per-batch: ([\d.]+)")


def ladder_table(raw: Path) -> str:
    rows = ["| step | total (3 batches) | per batch | speedup |", "|---|---|---|---|"]
    base = None
    for step in LADDER_STEPS:
        log = raw / f"ladder_{step}.log"
        m = LADDER_RE.search(log.read_text()) if log.exists() else None
        if not m:
            rows.append(f"| {step} | (not run) | | |")
            continue
        total = float(m.group(4))
        base = base or total
        rows.append(f"| {step} | {total:.1f} ms | {float(m.group(5)):.1f} ms | {base / total:.2f}x |")
    return "\n".join(rows) + "\n"


def package(entries: list[dict], raw: Path, out: Path) -> None:
    """Trim the kept fixtures (``DIR/fixtures.tar``), xz and split the untrimmed exports, tar the logs."""
    sys.path.insert(0, str(HERE))
    import trim

    trim.RESULT_TAGS += tuple({e["tag"] or f"[{Path(e['program']).stem}]" for e in entries})
    dest = out / "fixtures"
    for e in entries:
        for name in fixtures_of(e):
            src = raw / f"{name}.sqlite"
            if not src.exists() or not e["kept"]:
                continue
            if e["trim"] is False:
                data = lzma.compress(src.read_bytes(), preset=6)
                for i in range(0, len(data), PART):
                    (out / f"{name}.sqlite.xz.part-{i // PART:02d}").write_bytes(data[i:i + PART])
                continue
            loop = e["trim"][e["trim"].index("--loop-only") + 1] if "--loop-only" in e["trim"] else ""
            trim.trim(src, dest / name, keep_callchains="--keep-callchains" in e["trim"], loop_range=loop)
    if dest.is_dir():
        with tarfile.open(out / "fixtures.tar", "w") as tar:
            tar.add(dest, arcname="fixtures")
        data = (out / "fixtures.tar").read_bytes()
        if len(data) > PART:
            for i in range(0, len(data), PART):
                (out / f"fixtures.tar.part-{i // PART:02d}").write_bytes(data[i:i + PART])
            (out / "fixtures.tar").unlink()
    with tarfile.open(out / "logs.tar.xz", "w:xz") as tar:
        for f in sorted([*raw.glob("*.log"), *raw.glob("*.json")]):
            tar.add(f, arcname=f.name)


def bare(entries: list[dict], out: Path, rounds: int) -> None:
    """No nsys: every entry's program ``rounds`` times, interleaved, into ``DIR/bare.txt``."""
    log = out / "bare.txt"
    for r in range(1, rounds + 1):
        for e in entries:
            cmd = program(e)
            if e["procs"] > 1:
                cmd = ["-m", "torch.distributed.run", f"--nproc_per_node={e['procs']}", *cmd]
            with log.open("a") as f:
                f.write(f"== round {r} {e['name']}: python3 {shlex.join(cmd)}\n")
            run(["python3", *cmd], log, environment(e), e["timeout"])
    print(log.read_text())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("names", nargs="*", help="fixtures (entries of workloads/fixtures.toml)")
    p.add_argument("--group", action="append", default=[], help="every fixture of this group (repeatable)")
    p.add_argument("--out", type=Path, default=Path("out"))
    p.add_argument("--scratch", type=Path, help="where the untrimmed exports go (default: OUT/raw)")
    p.add_argument("--list", action="store_true", help="print the table and exit")
    p.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    p.add_argument("--bare", type=int, default=0, metavar="ROUNDS", help="no nsys: run the programs ROUNDS times")
    p.add_argument("--rounds", type=int, help="rounds of the measure re-runs (default: the group's)")
    p.add_argument("--quick", action="store_true", help="pass --quick to every program")
    p.add_argument("--no-stats", action="store_true", help="skip the nsys stats reference reports")
    p.add_argument("--no-measure", action="store_true", help="skip the re-runs without nsys")
    p.add_argument("--timeout", type=float, help="seconds per recording (default: the entry's)")
    args = p.parse_args(argv)
    table = load()
    unknown = [n for n in args.names if n not in table]
    groups = {e["group"] for e in table.values()}
    unknown += [f"group {g}" for g in args.group if g not in groups]
    if unknown:
        print(f"recorder.py: unknown: {', '.join(unknown)}", file=sys.stderr)
        return 2
    chosen = [e for n, e in table.items() if n in args.names or e["group"] in args.group]
    if args.list or args.dry_run:
        raw = args.scratch or args.out / "raw"
        for e in chosen or table.values():
            print(f"{e['group']:12} {e['name']:28} {provenance_command(commands(e, raw), raw) if args.dry_run else ''}")
        return 0
    if not chosen:
        p.error("name fixtures or a --group (--list shows them)")
    args.out.mkdir(parents=True, exist_ok=True)
    if args.bare:
        bare(chosen, args.out, args.bare)
        return 0
    if shutil.which("nsys") is None:
        print("recorder.py: nsys is not on PATH (install Nsight Systems, or source a kit that provides it)",
              file=sys.stderr)
        return 2
    raw = (args.scratch or args.out / "raw").resolve()
    raw.mkdir(parents=True, exist_ok=True)
    nsys_version = subprocess.run(["nsys", "--version"], text=True, capture_output=True).stdout.strip()
    common = {"nsys_version": nsys_version, **gpu_info()}
    rc = 0
    for e in chosen:
        rc = record(e, raw, common, args.quick, args.timeout) or rc
    for f in raw.glob("*.nsys-rep"):
        f.unlink()
    if not args.no_stats:
        exports = [raw / f"{n}.sqlite" for e in chosen if e["stats"] for n in fixtures_of(e)]
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(stats, [f for f in exports if f.exists()]))
    if not args.no_measure:
        measure(chosen, raw, args.rounds)
    package(chosen, raw, args.out)
    if any(e["group"] == "ladder" for e in chosen):
        (args.out / "ladder.md").write_text(ladder_table(raw))
        print((args.out / "ladder.md").read_text())
    return rc


if __name__ == "__main__":
    sys.exit(main())
