"""The command line's start: numpy without BLAS threads, the cyclic collector paused for the
imports only."""

from __future__ import annotations

import os

import pytest


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads through /proc")
def test_numpy_imported_without_blas_threads_and_nothing_passed_on():
    import subprocess
    import sys

    code = ("import os\nfrom nsysan._startup import numpy_without_blas_threads as f\nf()\n"
            "print(len(os.listdir('/proc/self/task')), 'OPENBLAS_NUM_THREADS' in os.environ)")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["1", "False"]  # one thread: OpenBLAS started none; the variable is gone


def test_the_collector_is_paused_for_the_imports_only(fixture_dir, tmp_path, monkeypatch):
    import gc

    from nsysan import _startup, cli

    monkeypatch.setenv("NSYSAN_NO_CACHE", "1")
    seen = []
    real = _startup.resume_collector

    def resume():
        seen.append(gc.isenabled())
        real()
        seen.append(gc.isenabled())

    monkeypatch.setattr(_startup, "resume_collector", resume)
    assert gc.isenabled()
    code = cli.main(["analyze", str(fixture_dir / "ladder_baseline.sqlite"), "--json", str(tmp_path / "a.json"),
                     "--html", str(tmp_path / "a.html"), "-q"])
    assert code == 0
    assert seen[:2] == [False, True]  # paused until after the imports, then running for the analysis
    assert gc.isenabled()
    gc.unfreeze()
