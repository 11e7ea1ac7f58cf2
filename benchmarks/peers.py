"""nsysan against its peers on one trace, whole processes in alternating pairs.

    python3 benchmarks/peers.py setup                    # once: install the peers (root, package registries)
    python3 benchmarks/peers.py pairs TRACE.sqlite --vs nsysai --pairs 5
    python3 benchmarks/peers.py pairs TRACE.sqlite --vs nsys2022 --pairs 3
    python3 benchmarks/peers.py pairs TRACE.sqlite --a nsysan --vs nsysan:/other/venv/bin/nsysan

The peers, installed outside the repository (never committed):

* ``nsys2022``: Debian's Nsight Systems 2022.4 (``shared/tools/install-nsys2022.sh``, or ``$NSYS``);
  ``benchmarks/peer_nsys2022.sh`` runs its ``stats`` with the eight reports (kernel, CUDA API, NVTX,
  memcpy by time and by size, kernel launch/exec, NVTX-kernel, OS runtime) and ``analyze``.
* ``nsysai`` / ``nsysai-cold``: nsys-ai 0.3 ``analyze --format json`` in its own venv
  (``$PEERS_DIR/nsysai-venv``) with duckdb 1.4.4 and the ``duckdb-ext-sqlite`` 1.4.4 wheel's
  extension copied into duckdb's extension folder (duckdb would download it at run time otherwise).
  nsys-ai keeps a Parquet cache beside the trace, so it runs on a copy in ``$PEERS_DIR/work``:
  ``nsysai`` with that cache built (one untimed run first), ``nsysai-cold`` with it deleted before
  each run (untimed).
* ``nsysan``: ``analyze TRACE --json --html`` with the analysis cache off (``NSYSAN_NO_CACHE=1``);
  ``nsysan:PATH`` names another build's console script (default: ``.venv/bin/nsysan`` of this checkout).
  ``nsysan-json`` (``--a nsysan-json``): the JSON alone (``--no-html``), the output nsys-ai writes.

Each run is timed from outside (``os.wait4``: wall, user, system time and the largest process's peak
RSS); the two commands run in turn, A B A B ..., after one untimed warm-up each, and the ratio A/B is
taken pair by pair, so a drift of the shared machine's speed cancels. Prints min-median-max of each.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PEERS_DIR = Path(os.environ.get("PEERS_DIR", Path.home() / ".cache" / "nsysan-peers"))
NSYSAI_VENV = PEERS_DIR / "nsysai-venv"
NSYSAI_PINS = ["nsys-ai==0.3.0", "duckdb==1.4.4", "duckdb-ext-sqlite==1.4.4.20260205"]
NSYS = os.environ.get("NSYS", "nsys2022")


def setup() -> int:
    """Install the peers (idempotent)."""
    if shutil.which(NSYS) is None:
        script = HERE.parent.parent / "shared" / "tools" / "install-nsys2022.sh"
        for candidate in (script,):
            if candidate.exists():
                subprocess.run(["bash", str(candidate)], check=True)
                break
        else:
            print("install-nsys2022.sh not found: install Nsight Systems 2022.4 and set $NSYS", file=sys.stderr)
    py = NSYSAI_VENV / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(NSYSAI_VENV)], check=True)
    subprocess.run([str(py), "-m", "pip", "install", "-q", *NSYSAI_PINS], check=True)
    # duckdb looks for extensions in ~/.duckdb/extensions/<version>/<platform>/; the wheel ships the
    # file under its own package folder
    code = ("import duckdb, glob, os, shutil, sysconfig\n"
            "src = glob.glob(os.path.join(sysconfig.get_paths()['purelib'], 'duckdb_ext', 'extensions', "
            "'v' + duckdb.__version__, '*', 'sqlite_scanner.duckdb_extension'))[0]\n"
            "ver, plat = src.split(os.sep)[-3:-1]\n"
            "dst = os.path.expanduser(os.path.join('~', '.duckdb', 'extensions', ver, plat))\n"
            "os.makedirs(dst, exist_ok=True); shutil.copy(src, dst)\n"
            "con = duckdb.connect(); con.execute('LOAD sqlite'); print('duckdb', duckdb.__version__, 'sqlite ok')\n")
    subprocess.run([str(py), "-c", code], check=True)
    return 0


class Tool:
    """A command to time, with an untimed step before each run."""

    def __init__(self, spec: str, trace: Path, out: Path) -> None:
        self.spec = spec
        self.env = dict(os.environ)
        self.before = lambda: None
        kind, _, arg = spec.partition(":")
        if kind in ("nsysan", "nsysan-json"):
            exe = arg or str(HERE.parent / ".venv" / "bin" / "nsysan")
            tag = ("a" if not arg else str(abs(hash(arg)) % 10_000)) + kind
            html = ["--no-html"] if kind == "nsysan-json" else ["--html", str(out / f"n{tag}.html")]
            self.cmd = [exe, "analyze", str(trace), "--json", str(out / f"n{tag}.json"), *html, "--force", "--quiet"]
            self.env["NSYSAN_NO_CACHE"] = "1"
        elif kind == "nsys2022":
            self.cmd = ["sh", str(HERE / "peer_nsys2022.sh"), str(trace)]
        elif kind in ("nsysai", "nsysai-cold"):
            work = PEERS_DIR / "work"
            work.mkdir(parents=True, exist_ok=True)
            copy = work / trace.name
            if not copy.exists() or copy.stat().st_size != trace.stat().st_size:
                shutil.copyfile(trace, copy)
            cache = copy.with_suffix(".nsys-cache")
            self.cmd = [str(NSYSAI_VENV / "bin" / "nsys-ai"), "analyze", "--format", "json", str(copy)]
            self.env["NSYS_AI_ARTIFACT_ROOT"] = str(out / "nsysai-artifacts")
            if kind == "nsysai-cold":
                self.before = lambda: shutil.rmtree(cache, ignore_errors=True)
        else:
            raise SystemExit(f"unknown tool {spec!r}")

    def run(self, timeout: float) -> dict[str, float]:
        self.before()
        t0 = time.perf_counter()
        p = subprocess.Popen(self.cmd, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = t0 + timeout
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                p.kill()
                pid, status, ru = os.wait4(p.pid, 0)
                break
            time.sleep(0.005)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        return {"wall": wall, "user": ru.ru_utime, "sys": ru.ru_stime, "cpu": ru.ru_utime + ru.ru_stime,
                "peak_mb": ru.ru_maxrss / 1024, "rc": p.returncode}


def spread(xs: list[float]) -> str:
    return f"{min(xs):.3f}-{statistics.median(xs):.3f}-{max(xs):.3f}"


def pairs(a: argparse.Namespace) -> int:
    trace = Path(a.trace).resolve()
    with tempfile.TemporaryDirectory(prefix="peers-") as tmp:
        out = Path(tmp)
        ta, tb = Tool(a.a, trace, out), Tool(a.vs, trace, out)
        for t in (ta, tb):
            for _ in range(a.warmup):
                r = t.run(a.timeout)
                if r["rc"] != 0:
                    print(f"warning: {t.spec} exited {r['rc']} in the warm-up", file=sys.stderr)
        runs: dict[str, list[dict[str, float]]] = {"A": [], "B": []}
        for _ in range(a.pairs):
            runs["A"].append(ta.run(a.timeout))
            runs["B"].append(tb.run(a.timeout))
    size = trace.stat().st_size
    print(f"trace {trace} ({size / 1e6:.1f} MB), {a.pairs} alternating pairs, min-median-max; "
          f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs")
    for key, t in (("A", ta), ("B", tb)):
        rs = runs[key]
        print(f"{key} {t.spec}: " + ", ".join(f"{f} {spread([r[f] for r in rs])}"
                                              for f in ("wall", "user", "sys", "cpu", "peak_mb"))
              + f"; exit codes {sorted({int(r['rc']) for r in rs})}")
    for f in ("wall", "cpu"):
        ratios = [x[f] / y[f] for x, y in zip(runs["A"], runs["B"]) if y[f] > 0]
        print(f"ratio A/B {f}: {spread(ratios)}")
    if a.json:
        Path(a.json).write_text(json.dumps({"trace": str(trace), "size": size, "a": a.a, "b": a.vs, "runs": runs},
                                           indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("setup")
    q = sub.add_parser("pairs")
    q.add_argument("trace")
    q.add_argument("--a", default="nsysan")
    q.add_argument("--vs", default="nsysai", help="nsysai, nsysai-cold, nsys2022 or nsysan:PATH")
    q.add_argument("--pairs", type=int, default=5)
    q.add_argument("--warmup", type=int, default=1)
    q.add_argument("--timeout", type=float, default=600)
    q.add_argument("--json", help="write every run's figures here")
    a = p.parse_args(argv)
    return setup() if a.cmd == "setup" else pairs(a)


if __name__ == "__main__":
    sys.exit(main())
