"""Issue 54, item 1: SIGTERM and SIGHUP, like Ctrl-C and ``--timeout``, leave nothing running and
nothing that looks complete. ``nsysan analyze A B C --out-dir od --jobs 2`` gets the signal at a
seeded random moment while its workers write (each write made slow, half a file at a time, by a
``sitecustomize`` the processes load); ``nsysan profile`` gets it while a fake nsys records. Then:
death by the signal (exit status 128 + the signal), no process carrying the run's marker in its environment (found through
/proc by psutil), no temp file, and each trace's outputs all there or none of them, the summary
only after every trace. Each failed before the fix: the parent died alone, its workers kept
writing after it, and nsys and the profiled program kept running under init."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT

psutil = pytest.importorskip("psutil")

SEED = int(os.environ.get("NSYSAN_HOSTILE_SEED", "54"))
pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="/proc, process groups")

def as_a_shell_starts_it() -> None:
    """The child's SIGHUP and SIGTERM at their default actions, as a shell gives them: a test run under
    ``nohup`` passes SIGHUP on ignored, and nsysan rightly leaves an ignored signal ignored."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


# loaded by every nsysan process of the run (PYTHONPATH): each output is written half, a pause, the rest
SLOW_WRITES = '''
import os, time
from pathlib import Path
import nsysan.outputs as o
import nsysan.pipeline as p

def slow(path, text, *, force, protect=()):
    data = text.encode("utf-8", "backslashreplace")
    with o.atomic_file(Path(path), force=force, protect=protect) as f:
        f.write(data[:len(data) // 2])
        f.flush()
        time.sleep(float(os.environ["NSYSAN_SLOW_WRITE"]))
        f.write(data[len(data) // 2:])

p.write_atomic = slow
'''


def marked(mark: str) -> list[tuple[int, list[str]]]:
    """The processes whose environment carries ``mark`` (zombies aside)."""
    found = []
    for q in psutil.process_iter():
        try:
            if q.status() != psutil.STATUS_ZOMBIE and q.environ().get("NSYSAN_TEST_MARK") == mark:
                found.append((q.pid, q.cmdline()))
        except psutil.Error:
            continue
    return found


def settle(mark: str, seconds: float = 10.0) -> list[tuple[int, list[str]]]:
    deadline = time.monotonic() + seconds
    while marked(mark) and time.monotonic() < deadline:
        time.sleep(0.1)
    return marked(mark)


def kill_marked(mark: str) -> None:
    for pid, _ in marked(mark):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def signalled(cmd: list[str], sig: signal.Signals, mark: str, ready, delay: float,
              **popen) -> tuple[subprocess.Popen, str, list[tuple[int, list[str]]]]:
    """Start ``cmd`` (its signals at their defaults), wait until ``ready(p)`` (at most 60 s) and
    ``delay`` seconds more, send ``sig``; returns the process, its stderr and the processes carrying
    ``mark`` still running once it ended. Whatever carries the mark is killed after, in any case."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=as_a_shell_starts_it, **popen)
    try:
        deadline = time.monotonic() + 60
        while not ready(p) and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(delay)
        p.send_signal(sig)
        _, err = p.communicate(timeout=60)
        return p, err, settle(mark)
    finally:
        kill_marked(mark)
        if p.poll() is None:
            p.kill()


@pytest.fixture
def traces(fixture_dir: Path, tmp_path: Path) -> list[Path]:
    out = []
    for stem in "ABC":
        p = tmp_path / f"{stem}.sqlite"
        shutil.copy(fixture_dir / "launch_graph_nodes.sqlite", p)
        out.append(p)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SLOW_WRITES)
    return out


def check_out_dir(od: Path, finished: bool) -> None:
    """No temp file; each trace's JSON and HTML both there (the JSON whole) or neither; the summary
    only when the run finished."""
    names = sorted(p.name for p in od.iterdir()) if od.exists() else []
    assert not [n for n in names if n.startswith(".")], names
    for stem in "ABC":
        have = {s for s in (".json", ".html") if f"{stem}{s}" in names}
        assert have in (set(), {".json", ".html"}), names
        if have:
            assert json.loads((od / f"{stem}.json").read_text())["schema"].startswith("nsysan.analysis/")
    assert ("summary.json" in names) == finished, names


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
@pytest.mark.parametrize("case", range(2))
def test_a_signal_to_analyze_with_jobs_leaves_no_worker_and_no_half_output(traces, tmp_path, sig, case):
    rnd = random.Random(f"{SEED}-{sig.name}-{case}")
    delay = rnd.uniform(0.3, 2.5)  # after the workers started, while they analyse or write
    mark = f"analyze-{os.getpid()}-{sig.name}-{case}"
    od = tmp_path / "od"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(ROOT)]),
           "NSYSAN_TEST_MARK": mark, "NSYSAN_SLOW_WRITE": "0.4"}
    p, err, left = signalled([sys.executable, "-m", "nsysan", "analyze", *map(str, traces), "--out-dir", str(od),
                              "--jobs", "2", "-q"], sig, mark, lambda p: len(psutil.Process(p.pid).children()) >= 2,
                             delay, env=env)
    assert not left, f"still running after {sig.name} at +{delay:.2f} s: {left}"
    assert "Traceback" not in err, err
    finished = p.returncode == 0
    assert finished or p.returncode == -sig, (p.returncode, err)  # it dies of the signal once all is stopped
    if not finished:
        assert err.strip().splitlines()[-1] == f"nsysan: terminated ({sig.name})", err
    check_out_dir(od, finished)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_signal_to_profile_stops_nsys_and_the_profiled_group(tmp_path, fixture_dir, sig):
    from test_inputs_profile import FAKE_NSYS, fake_nsys

    rnd = random.Random(f"{SEED}-profile-{sig.name}")
    mark = f"profile-{os.getpid()}-{sig.name}"
    fake, path = fake_nsys(tmp_path, FAKE_NSYS)
    pids = tmp_path / "pids"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NSYSAN_", "FAKE_"))}
    env.update(PATH=path, PYTHONPATH=str(ROOT), NSYSAN_NSYS=str(fake), XDG_CACHE_HOME=str(tmp_path / "cache"),
               FAKE_LOG=str(tmp_path / "nsys.log"), FAKE_SQLITE=str(fixture_dir / "launch_graph.sqlite"),
               FAKE_PIDS=str(pids), FAKE_MODE="hang", NSYSAN_TEST_MARK=mark)
    p, err, left = signalled([sys.executable, "-m", "nsysan", "profile", "-o", "t", "--", "sleep", "301"], sig, mark,
                             lambda p: pids.exists() and len(pids.read_text().split()) == 2, rnd.uniform(0.0, 1.0),
                             env=env, cwd=tmp_path)
    assert not left, f"still running after {sig.name}: {left}"
    assert p.returncode == -sig and f"terminated ({sig.name})" in err and "Traceback" not in err, err
    assert not (tmp_path / "t.sqlite").exists()
