"""Generated hostile exports (tests/hostile_gen.py): a short run with a fixed seed in CI; set
NSYSAN_HOSTILE_N (and NSYSAN_HOSTILE_SEED) for a longer one locally."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT


@pytest.mark.skipif(not hasattr(os, "fork") or not Path("/proc/self/statm").exists(), reason="fork and /proc")
def test_generated_hostile_exports():
    n = os.environ.get("NSYSAN_HOSTILE_N", "30")
    seed = os.environ.get("NSYSAN_HOSTILE_SEED", "18")
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "hostile_gen.py"), "--n", n, "--seed", seed],
                       capture_output=True, text=True, timeout=60 + 40 * int(n),
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.stdout.strip(), r.stderr[-3000:]
    stats = json.loads(r.stdout)
    print(f"hostile exports: {stats['cases']} cases, exit codes {stats['codes']}, worst {stats['worst_seconds']} s, "
          f"worst growth {stats['worst_growth_kb'] // 1024} MB (reference {stats['reference']})")
    assert r.returncode == 0 and stats["failures"] == [], "\n".join(stats["failures"])
    assert stats["cases"] == int(n)
