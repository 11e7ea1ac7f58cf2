"""benchmarks/peak_phases.py --detail runs on the current analyses (it failed once a method it
wrapped, ThreadActivity._layers, was merged away) and labels the analyses, those beyond time too."""

from __future__ import annotations

import lzma
import os
import shutil
import subprocess
import sys

from conftest import FIXTURES, ROOT


def test_detail_mode_runs(tmp_path):
    trace = tmp_path / "slow_iters.sqlite"
    with lzma.open(FIXTURES / "slow_iters" / "trace.sqlite.xz") as f, \
            open(trace, "wb") as g:
        shutil.copyfileobj(f, g)
    env = dict(os.environ, NSYSAN_THREADS="1", NSYSAN_NO_CACHE="1")
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "peak_phases.py"), str(trace), "--detail"],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300, check=False)
    assert p.returncode == 0, p.stderr[-3000:]
    for label in ("analyze (analyses + rules)", "gaps.explain_gaps", "ThreadActivity.", "slow_iterations.slow_iterations",
                  "memory.memory_use", "rules.run_rules", "html: render", "process peak"):
        assert label in p.stdout, label
