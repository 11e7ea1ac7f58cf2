"""benchmarks/spill.py runs: a fixture analysed in memory and spilled (with a memory figure between the
two estimates, and every array of 64 kB or more in a file), the two JSON documents equal apart from
the note. Inside a memory cgroup where the machine lets it make one (root), else with the figure alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT

from nsysan._native import c_pass


@pytest.mark.skipif(not sys.platform.startswith("linux") or c_pass("spill_handler") is None,
                    reason="the spill needs Linux and the C extension")
def test_spill_benchmark_runs(fixture_dir, tmp_path):
    from planned import spill_limit

    path = fixture_dir / "launch_eager.sqlite"
    limit = spill_limit(path)
    env = dict(os.environ, NSYSAN_SPILL_THRESHOLD="65536", NSYSAN_SPILL_DIR=str(tmp_path))
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "spill.py"), str(path), "--limit", str(limit),
                        "--keep-cache"],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300, check=False)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    got = json.loads(p.stdout)
    assert got["memory"]["rc"] == 0 and got["spilled"]["rc"] == 0 and got["same_json"] is True
