"""A trace larger than memory, analysed in memory and with the spill inside a memory limit (nsysan/_spill.py).

    python3 benchmarks/replicate.py /tmp/big_eager115.sqlite /tmp/huge10g.sqlite --copies 40   # 10 GB
    python3 benchmarks/spill.py /tmp/huge10g.sqlite --limit 8G [--skip-memory]

Runs ``nsysan analyze TRACE --json --html`` twice, each a fresh process with the analysis cache off:
in memory (``NSYSAN_SPILL=never``, no memory figure), then spilled with ``NSYSAN_MEMORY_LIMIT=LIMIT``
inside a cgroup v1 memory group of LIMIT (``/sys/fs/cgroup/memory/nsysan-spill-PID``; root only), so
the limit is the kernel's, not only nsysan's figure. Without a group it says so and runs with the
figure alone (the spill starts; nothing enforces the limit). The page cache is dropped before each
run where that is allowed (``--keep-cache``: not). Prints each run's wall time, CPU, peak RSS and
peak anonymous memory (``RssAnon``, sampled every 0.5 s), the group's peak and its reclaims, and
whether the two JSON documents are equal apart from the note that says it spilled.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

V1 = Path("/sys/fs/cgroup/memory")


def _cgroup(limit: int) -> Path | None:
    """A fresh v1 memory cgroup of ``limit`` bytes (root only), else None."""
    d = V1 / f"nsysan-spill-{os.getpid()}"
    try:
        d.mkdir()
        (d / "memory.limit_in_bytes").write_text(str(limit))
        return d
    except OSError:
        return None


def _drop_caches() -> None:
    try:
        subprocess.run(["sync"], check=False)
        Path("/proc/sys/vm/drop_caches").write_text("3")
    except OSError:
        pass


def _run(cmd: list[str], env: dict[str, str], group: Path | None, drop: bool = True) -> dict[str, float]:
    if drop:
        _drop_caches()
    pre = (lambda: (group / "cgroup.procs").write_text(str(os.getpid()))) if group else None
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=pre)
    anon = [0]

    def sample() -> None:
        while p.poll() is None:
            try:
                for line in Path(f"/proc/{p.pid}/status").read_text().splitlines():
                    if line.startswith("RssAnon:"):
                        anon[0] = max(anon[0], int(line.split()[1]) * 1024)
            except OSError:
                pass
            time.sleep(0.5)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    t.join()
    err = p.stderr.read().decode(errors="replace") if p.stderr else ""
    out = {"rc": p.returncode, "wall_s": round(wall, 1), "cpu_s": round(ru.ru_utime + ru.ru_stime, 1),
           "peak_rss_gib": round(ru.ru_maxrss / (1 << 20), 2), "peak_anon_gib": round(anon[0] / (1 << 30), 2)}
    if group is not None:
        out["cgroup_peak_gib"] = round(int((group / "memory.max_usage_in_bytes").read_text()) / (1 << 30), 2)
        out["cgroup_reclaims"] = int((group / "memory.failcnt").read_text())
    if p.returncode:
        out["stderr"] = err[-2000:]
    return out


def _doc(path: Path) -> dict[str, object]:
    d = json.loads(path.read_text())
    d["trace"]["warnings"] = [w for w in d["trace"]["warnings"] if "big arrays in files" not in w]
    return d


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--limit", default="8G", help="memory of the spilled run (default 8G)")
    ap.add_argument("--skip-memory", action="store_true", help="only the spilled run")
    ap.add_argument("--keep-cache", action="store_true", help="do not drop the page cache before each run")
    a = ap.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from nsysan.trace.budget import parse_size

    limit = parse_size(a.limit)
    base = {**os.environ, "NSYSAN_NO_CACHE": "1"}
    with tempfile.TemporaryDirectory(prefix="nsysan-spill-bench-") as tmp:
        out = Path(tmp)

        def cmd(tag: str) -> list[str]:
            return [sys.executable, "-m", "nsysan", "analyze", a.trace, "--json", str(out / f"{tag}.json"),
                    "--html", str(out / f"{tag}.html"), "-q", "-f"]

        results = {}
        if not a.skip_memory:
            results["memory"] = _run(cmd("memory"), {**base, "NSYSAN_SPILL": "never", "NSYSAN_MEMORY_LIMIT": "1T"},
                                     None, not a.keep_cache)
        group = _cgroup(limit)
        if group is None:
            print("no memory cgroup could be made (root and cgroup v1's memory controller needed): the spilled "
                  "run has nsysan's figure only, nothing enforces it", file=sys.stderr)
        try:
            results["spilled"] = _run(cmd("spilled"), {**base, "NSYSAN_SPILL": "auto", "NSYSAN_MEMORY_LIMIT": a.limit},
                                      group, not a.keep_cache)
        finally:
            if group is not None:
                group.rmdir()
        if "memory" in results and all(r["rc"] == 0 for r in results.values()):
            results["same_json"] = _doc(out / "memory.json") == _doc(out / "spilled.json")
    print(json.dumps(results, indent=1))
    return 0 if all(r["rc"] == 0 for r in results.values() if isinstance(r, dict)) else 1


if __name__ == "__main__":
    raise SystemExit(main())
