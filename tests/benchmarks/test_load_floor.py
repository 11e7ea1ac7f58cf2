"""benchmarks/load_floor.py stops where the trace is loaded: it exits 0, says when, and writes none
of the outputs its arguments name (the floor it times must not include them)."""

from __future__ import annotations

import lzma
import os
import shutil
import subprocess
import sys

from conftest import FIXTURES, ROOT


def test_stops_after_the_load_and_writes_nothing(tmp_path):
    trace = tmp_path / "slow_iters.sqlite"
    with lzma.open(FIXTURES / "slow_iters" / "trace.sqlite.xz") as f, open(trace, "wb") as g:
        shutil.copyfileobj(f, g)
    env = dict(os.environ, NSYSAN_NO_CACHE="1")
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "load_floor.py"), "analyze", str(trace),
                        "--json", "a.json", "--html", "a.html", "-q"],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300, check=False)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stderr.startswith("loaded after ") and p.stderr.rstrip().endswith(" s"), p.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["slow_iters.sqlite"]
