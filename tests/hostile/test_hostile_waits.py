"""Hostile input, round 2 (issue 40): bounded waits and clear errors.

- ``diff``/``compare`` on a saved analysis holding numbers no float holds (a 400-digit ``p50_ns``,
  ``1e400``), NaN/Infinity literals or a boolean for a number: exit 2 and the field named.
- ``--scheduler``: schemes nsysan cannot use (``tls://``, ``wss://``, ``ucx://``, ``inproc://``) are
  refused when the command line is read (no Dask needed); a server that accepts and never answers,
  one that answers garbage or resets, a scheduler without workers and workers that leave mid-run each
  end within ``--scheduler-timeout`` with one line and exit 2 (these need Dask distributed: skipped
  without it).
- ``.nsys-rep`` export: ``NSYSAN_EXPORT_TIMEOUT`` bounds the whole export, the capability check
  (``nsys export --help``) included, and nothing the stand-in nsys starts outlives nsysan.

Every case is built here; each class is also tried with seeded variants (``random.Random(SEED)``).
Every run of the CLI that could wait is a subprocess with a timeout, so a regression fails, not hangs.
"""

from __future__ import annotations

import json
import lzma
import os
import random
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT
from test_inputs_profile import fake_nsys, kill_left, running

from nsysan.cli import main

FIXTURE = FIXTURES / "launch_graph" / "trace.sqlite.xz"
SEED = 40
posix_only = pytest.mark.skipif(os.name != "posix", reason="process groups, /proc: POSIX")


def _env(**extra: str) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("NSYSAN_", "FAKE_"))}
    e.update(PYTHONPATH=str(ROOT), **extra)
    return e


def _cli(argv: list[str], env: dict[str, str], cwd: Path, timeout: float) -> tuple[subprocess.CompletedProcess[str], float]:
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "nsysan", *argv], capture_output=True, text=True, timeout=timeout,
                       env=env, cwd=cwd, errors="replace", check=False)
    return r, time.monotonic() - t0


def _code(argv: list[str]) -> int:
    """``main``'s exit status, also when argparse exits (a bad option value)."""
    try:
        return main(argv)
    except SystemExit as e:
        return int(e.code or 0)


def _error_lines(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith("nsysan: error:")]


# -- saved analyses with numbers out of range ------------------------------------------------------------------

def _saved() -> dict:
    """A small, well-formed ``nsysan.analysis/2`` (what diff and compare read)."""
    return {"schema": "nsysan.analysis/2",
            "iterations": {"range": "step", "stats": {"p50_ns": 1000, "p90_ns": 1200, "mean_ns": 1100,
                                                      "throughput_per_s": 900.0},
                           "per_iteration": [{"period_ns": 1000 + i, "latency_ns": 900 + i, "warmup": False}
                                             for i in range(8)]},
            "kernels": {"by_name": [{"name": "k", "total_ns": 5000, "count": 5, "med_ns": 1000}]},
            "notes": {"free": [{"value": 1}]}}


# where a hostile literal goes: the path the error must name, and how to reach it in _saved()
PLACES = {
    "iterations.stats.p50_ns": lambda d: (d["iterations"]["stats"], "p50_ns"),
    "iterations.per_iteration[3].period_ns": lambda d: (d["iterations"]["per_iteration"][3], "period_ns"),
    "kernels.by_name[0].total_ns": lambda d: (d["kernels"]["by_name"][0], "total_ns"),
    "notes.free[0].value": lambda d: (d["notes"]["free"][0], "value"),  # a field diff does not read
}
LITERALS = ["9" * 400, "-" + "1" * 400, "9" * 5000, "1e400", "-1e999", "1" + "0" * 400 + ".5", "NaN", "Infinity",
            "-Infinity"]


def _hostile_text(place: str, literal: str) -> str:
    d = _saved()
    obj, key = PLACES[place](d)
    obj[key] = "@@HOSTILE@@"
    return json.dumps(d).replace('"@@HOSTILE@@"', literal)


def _check_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, place: str,
                   command: str, hostile_first: bool) -> None:
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(_saved()))
    bad.write_text(text)
    pair = [str(bad), str(good)] if hostile_first else [str(good), str(bad)]
    code = main([command, *pair, "-q"] if command == "diff" else [command, *pair])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = _error_lines(err)
    assert len(lines) == 1 and "internal error" not in err and "Traceback" not in err, err
    assert f"{place}: expected a finite number" in lines[0], lines[0]
    assert len(lines[0]) < 400  # the number is described, not printed


@pytest.mark.parametrize("literal", ["9" * 400, "9" * 5000, "1e400", "NaN", "-Infinity"])
@pytest.mark.parametrize("command", ["diff", "compare"])
def test_saved_numbers_out_of_range_name_the_field(tmp_path, capsys, literal, command):
    _check_refused(tmp_path, capsys, _hostile_text("iterations.stats.p50_ns", literal), "iterations.stats.p50_ns",
                   command, hostile_first=False)


def test_a_boolean_for_a_number_is_named_as_a_boolean(tmp_path, capsys):
    _check_refused(tmp_path, capsys, _hostile_text("kernels.by_name[0].total_ns", "true"),
                   "kernels.by_name[0].total_ns", "diff", hostile_first=True)
    bad = tmp_path / "bad.json"
    assert main(["diff", str(bad), str(bad), "-q"]) == 2
    assert "got a boolean" in capsys.readouterr().err


def test_saved_out_of_range_generated(tmp_path, capsys):
    rng = random.Random(SEED)
    seen = set()
    for i in range(20):
        place, literal = rng.choice(sorted(PLACES)), rng.choice(LITERALS)
        command, first = rng.choice(["diff", "compare"]), rng.random() < 0.5
        seen.add(place)
        case = tmp_path / f"case{i}"
        case.mkdir()
        _check_refused(case, capsys, _hostile_text(place, literal), place, command, hostile_first=first)
    assert len(seen) >= 3  # the seed tries several places


def test_a_well_formed_saved_file_still_compares(tmp_path, capsys):
    good = tmp_path / "good.json"
    d = _saved()
    d["iterations"]["stats"]["p50_ns"] = 10 ** 18  # large, but a number any float holds
    good.write_text(json.dumps(d))
    assert main(["diff", str(good), str(good), "-q"]) == 0


# -- --scheduler -------------------------------------------------------------------------------------------------

UNSUPPORTED = ["tls", "wss", "ucx", "inproc"]


def _trace(tmp_path: Path) -> Path:
    p = tmp_path / "t.sqlite"
    if not p.exists():
        p.write_bytes(lzma.decompress(FIXTURE.read_bytes()))
    return p


@pytest.mark.parametrize("scheme", UNSUPPORTED)
def test_unsupported_scheduler_schemes_are_refused_with_the_reason(tmp_path, capsys, scheme):
    # checked when the command line is read: no Dask needed, no trace opened
    code = _code(["analyze", str(tmp_path / "absent.sqlite"), "--out-dir", str(tmp_path / "o"), "-q",
                 "--scheduler", f"{scheme}://127.0.0.1:8786", "--scheduler-timeout", "2"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"{scheme}:// schedulers are not supported" in err and "tcp://" in err
    assert "internal error" not in err and len([ln for ln in err.splitlines() if "error:" in ln]) == 1  # argparse's


def test_scheduler_addresses_generated(tmp_path, capsys):
    rng = random.Random(SEED)
    for _ in range(20):
        scheme = rng.choice(UNSUPPORTED)
        scheme = "".join(c.upper() if rng.random() < 0.3 else c for c in scheme)
        host = rng.choice(["127.0.0.1", "head", "[::1]", "node-7.cluster.local"])
        port = rng.choice(["", f":{rng.randrange(1, 65536)}"])
        code = _code(["analyze", str(tmp_path / "absent.sqlite"), "-q", "--scheduler", f"{scheme}://{host}{port}"])
        err = capsys.readouterr().err
        assert code == 2 and "schedulers are not supported" in err, err
    for bad in ["tcp://head:99999", "tcp://head:65536"]:
        assert _code(["analyze", str(tmp_path / "absent.sqlite"), "-q", "--scheduler", bad]) == 2
        assert "port 0-65535" in capsys.readouterr().err


class _Server:
    """A TCP server on 127.0.0.1 that accepts and then: ``silent`` (never answers), ``close`` (resets),
    or sends ``reply`` bytes and keeps the connection open."""

    def __init__(self, mode: str, reply: bytes = b"") -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.address = f"tcp://127.0.0.1:{self.sock.getsockname()[1]}"
        self.mode, self.reply, self.conns = mode, reply, []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(c)
            try:
                if self.mode == "close":
                    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    c.close()
                elif self.mode == "reply":
                    c.sendall(self.reply)
            except OSError:
                pass

    def close(self) -> None:
        self.sock.close()
        for c in self.conns:
            c.close()


def _run_against(tmp_path: Path, address: str, timeout_s: float) -> tuple[subprocess.CompletedProcess[str], float]:
    trace = _trace(tmp_path)
    return _cli(["analyze", str(trace), "--out-dir", str(tmp_path / "o"), "-q", "--scheduler", address,
                 "--scheduler-timeout", f"{timeout_s:g}"], _env(), tmp_path, timeout=timeout_s + 60)


# what a run may take beyond --scheduler-timeout: starting Python and importing Dask on a loaded machine
SLACK_S = 15.0


def _check_scheduler_error(r: subprocess.CompletedProcess[str], took: float, timeout_s: float, words: str) -> None:
    assert r.returncode == 2, r.stderr
    lines = _error_lines(r.stderr)
    assert len(lines) == 1 and words in lines[0], r.stderr
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr
    assert took < timeout_s + SLACK_S, took


@pytest.mark.parametrize("mode", ["silent", "garbage", "close"])
def test_a_server_that_is_not_a_scheduler_ends_within_the_timeout(tmp_path, mode):
    pytest.importorskip("distributed")
    srv = _Server("reply" if mode == "garbage" else mode, b"\xff" * 64 + b"HTTP/1.1 200 OK\r\n\r\n" * 10)
    try:
        r, took = _run_against(tmp_path, srv.address, 3)
    finally:
        srv.close()
    _check_scheduler_error(r, took, 3, "did not answer within 3 s" if mode == "silent" else "cannot reach")


def test_servers_generated(tmp_path):
    pytest.importorskip("distributed")
    rng = random.Random(SEED)
    for i in range(5):
        mode = rng.choice(["silent", "close", "reply", "reply"])
        reply = rng.randbytes(rng.choice([1, 8, 64, 4096]))
        srv = _Server(mode, reply)
        case = tmp_path / f"case{i}"
        case.mkdir()
        try:
            r, took = _run_against(case, srv.address, 2)
        finally:
            srv.close()
        _check_scheduler_error(r, took, 2, "Dask scheduler at")


SCHEDULER = """import asyncio
from distributed import Scheduler
async def main():
    async with Scheduler(host="127.0.0.1", port=0, dashboard_address=None) as s:
        print(s.address, flush=True)
        await asyncio.sleep(600)
asyncio.run(main())
"""


def test_a_scheduler_without_workers_ends_within_the_timeout(tmp_path):
    pytest.importorskip("distributed")
    p = subprocess.Popen([sys.executable, "-c", SCHEDULER], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         text=True, env=_env())
    try:
        address = p.stdout.readline().strip()
        assert address.startswith("tcp://"), address
        r, took = _run_against(tmp_path, address, 3)
    finally:
        p.kill()
        p.wait()
    _check_scheduler_error(r, took, 3, "has no workers")


# -- .nsys-rep export ---------------------------------------------------------------------------------------------

FAKE_NSYS = r'''#!{python}
"""A stand-in for nsys: per $FAKE_MODE, the checks (--version, export --help) or the export sleep, or
leave a grandchild running (its pid appended to $FAKE_PIDS)."""
import os, shutil, subprocess, sys, time
argv = sys.argv[1:]
mode = os.environ.get("FAKE_MODE", "ok")
def grandchild():
    p = subprocess.Popen(["sleep", "600"])  # same process group; holds stdout like any child
    with open(os.environ["FAKE_PIDS"], "a") as f:
        f.write(f"{{p.pid}}\n")
check = argv == ["--version"] or argv[:2] == ["export", "--help"]
if check or argv[:1] == ["export"]:
    stage = "check" if check else "export"
    if mode in (stage + "-child", stage + "-hang"):
        grandchild()
    if mode == stage + "-hang":
        time.sleep(600)
    if check:
        print("NVIDIA Nsight Systems version 2025.3.1.90-253135822126v0\n  --include-blobs=")
    else:
        shutil.copyfile(os.environ["FAKE_SQLITE"], argv[argv.index("--output") + 1])
else:
    sys.exit(f"fake nsys: unexpected {{argv}}")
'''


@pytest.fixture(scope="module")
def fixture_sqlite(fixture_dir: Path) -> Path:
    return fixture_dir / "launch_graph.sqlite"


@pytest.fixture
def nsys_env(tmp_path: Path, fixture_sqlite: Path):
    fake, path = fake_nsys(tmp_path, FAKE_NSYS)
    pids = tmp_path / "pids"
    e = _env(PATH=path, NSYSAN_NSYS=str(fake), XDG_CACHE_HOME=str(tmp_path / "cache"), FAKE_SQLITE=str(fixture_sqlite),
             FAKE_PIDS=str(pids))
    yield e
    kill_left(pids)


def _report(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / "run.nsys-rep"
    p.write_bytes(b"NVIDIA Tegra Profiler Report 1.\n" + os.urandom(64))
    return p


def _export_case(env: dict[str, str], folder: Path, mode: str, limit: float) -> None:
    if not mode.endswith("-hang"):
        # an export that finishes must not be cut short on a loaded machine (two Python starts of the fake
        # nsys can take over 2 s in CI): a roomy limit, and the grandchild still must not be waited for
        limit = 30
    rep = _report(folder)
    r, took = _cli(["analyze", str(rep), "--no-html", "-q", "--json", str(folder / "out.json")],
                   {**env, "FAKE_MODE": mode, "NSYSAN_EXPORT_TIMEOUT": f"{limit:g}"}, folder, timeout=limit + 90)
    assert "Traceback" not in r.stderr, r.stderr
    if mode.endswith("-hang"):
        assert r.returncode == 9, r.stderr
        assert f"did not finish within {limit:g} s" in r.stderr and "NSYSAN_EXPORT_TIMEOUT" in r.stderr
        # the limit, then at most SIGINT's grace for the group (5 s), and starting Python
        assert took < limit + 5 + SLACK_S, took
    else:
        assert r.returncode == 0, r.stderr
        assert json.loads((folder / "out.json").read_text())["schema"] == "nsysan.analysis/2"
        assert took < limit, took  # a check whose grandchild holds its output is not waited for (60 s before)
    pids = Path(env["FAKE_PIDS"])
    left = [int(p) for p in (pids.read_text().split() if pids.exists() else []) if running(int(p))]
    assert not left, f"{mode}: left running: {left}"


@posix_only
@pytest.mark.parametrize("mode", ["check-hang", "check-child", "export-child", "export-hang"])
def test_export_timeout_bounds_the_whole_export_and_leaves_nothingrunning(nsys_env, tmp_path, mode):
    _export_case(nsys_env, tmp_path / "w", mode, 2)


@posix_only
def test_export_waits_generated(nsys_env, tmp_path):
    rng = random.Random(SEED)
    for i in range(6):
        mode = rng.choice(["check-hang", "check-child", "export-child", "export-hang", "ok"])
        _export_case(nsys_env, tmp_path / f"case{i}", mode, rng.choice([1, 2]))


@posix_only
def test_profile_version_check_is_bounded_by_timeout(nsys_env, tmp_path):
    r, took = _cli(["profile", "-o", "t", "--timeout", "2", "--", "sleep", "60"], {**nsys_env, "FAKE_MODE": "check-hang"},
                   tmp_path, timeout=90)
    assert r.returncode == 9 and "--version did not answer within --timeout 2 s" in r.stderr, r.stderr
    assert took < 2 + 5 + SLACK_S, took
    pids = Path(nsys_env["FAKE_PIDS"])
    assert not [p for p in pids.read_text().split() if running(int(p))]


def test_workers_that_leave_mid_run_end_it_within_the_timeout(tmp_path):
    """The only worker is killed once the first trace is done: the tasks left (and results kept on
    that worker) would wait forever; the run ends ``--scheduler-timeout`` later, with one line."""
    pytest.importorskip("distributed")
    trace = _trace(tmp_path)
    traces = []
    for i in range(24):
        p = tmp_path / f"rank{i}.sqlite"
        p.write_bytes(trace.read_bytes())
        traces.append(str(p))
    env = _env(NSYSAN_NO_CACHE="1")
    sched = subprocess.Popen([sys.executable, "-c", SCHEDULER], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             text=True, env=env)
    worker = run = None
    try:
        address = sched.stdout.readline().strip()
        worker = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1",
                                   "--no-nanny", "--no-dashboard"], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, env=env)
        run = subprocess.Popen([sys.executable, "-m", "nsysan", "analyze", *traces, "--out-dir", str(tmp_path / "o"),
                                "-q", "--scheduler", address, "--scheduler-timeout", "3"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
        err = []
        for line in run.stderr:  # the worker is there (nsysan waited for it) and works
            err.append(line)
            if "traces done on" in line:
                break
        assert err and "1/24 traces done" in err[-1], "".join(err)
        worker.kill()
        killed = time.monotonic()
        try:
            _, rest = run.communicate(timeout=3 + 60)
        except subprocess.TimeoutExpired:
            pytest.fail("the run kept waiting for workers that left")
        took = time.monotonic() - killed
    finally:
        for p in (run, worker, sched):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
    err_text = "".join(err) + rest
    assert run.returncode == 2, err_text
    lines = _error_lines(err_text)
    assert len(lines) == 1 and "has had no workers for 3 s" in lines[0] and "of 24 traces were not analysed" in lines[0]
    assert took < 3 + SLACK_S, took
