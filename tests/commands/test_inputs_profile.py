"""What the user passes in (`.nsys-rep` reports exported into a cache; FIFOs, directories and devices
refused before any open) and `nsysan profile` (outputs checked first, a fresh trace or an error,
`--timeout` and Ctrl-C stopping nsys' whole process group).

nsys cannot profile a GPU program here, so most tests run a fake `nsys` (a Python script named by
NSYSAN_NSYS) that logs its arguments and copies a fixture export to `--output`; one test runs the
real Nsight Systems 2022.4 when it is installed. Every CLI run is a subprocess with a timeout, so a
regression that blocks (a FIFO opened, a process group waited on) fails instead of hanging the suite.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import ROOT

pytestmark = pytest.mark.skipif(os.name != "posix", reason="process groups, FIFOs: POSIX")

FAKE_NSYS = r'''#!{python}
"""A stand-in for nsys: logs its argv (one JSON line) to $FAKE_LOG, then acts per $FAKE_MODE."""
import json, os, shutil, signal, subprocess, sys, time
argv = sys.argv[1:]
signal.signal(signal.SIGINT, lambda *_: sys.exit(130))  # as nsys: no traceback on Ctrl-C
AGENT = """import subprocess, sys
p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "--start-agent",
                      "--session-name", sys.argv[1]], start_new_session=True, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL)
print(p.pid)"""  # double fork: the agent's parent is gone at once, as a daemon's
with open(os.environ["FAKE_LOG"], "a") as f:
    f.write(json.dumps({{"argv": argv, "cwd": os.getcwd(), "pid": os.getpid(), "pgid": os.getpgid(0)}}) + "\n")
mode = os.environ.get("FAKE_MODE", "ok")
if argv == ["--version"]:
    print("NVIDIA Nsight Systems version 2025.3.1.90-253135822126v0")
elif argv[:2] == ["export", "--help"]:
    print("usage: nsys export [<args>] [nsys-rep-file]\n  --type=\n  --output=")
    if os.environ.get("FAKE_BLOBS"):
        print("  --include-blobs=")
elif argv[:1] == ["export"]:
    if mode == "fail":
        print("Importer error: the file is not a valid report", file=sys.stderr)
        sys.exit(1)
    if mode == "hang":
        child = subprocess.Popen(["sleep", "600"])
        open(os.environ["FAKE_PIDS"], "w").write(f"{{os.getpid()}} {{child.pid}}")
        time.sleep(600)
    out = argv[argv.index("--output") + 1]
    shutil.copyfile(os.environ["FAKE_SQLITE"], out)
elif argv[:1] == ["profile"]:
    out = argv[argv.index("-o") + 1]
    if mode == "hang":  # a profiled program that starts a child and runs long
        child = subprocess.Popen(["sleep", "600"])
        open(os.environ["FAKE_PIDS"], "w").write(f"{{os.getpid()}} {{child.pid}}")
        time.sleep(600)
    if mode == "hang-detached":  # as nsys 2022.4: the program in a session of its own, an agent daemon
        child = subprocess.Popen(["sleep", "600"], start_new_session=True)
        agent = subprocess.run([sys.executable, "-c", AGENT, f"profile-{{os.getpid()}}"],
                               capture_output=True, text=True).stdout.strip()
        open(os.environ["FAKE_PIDS"], "w").write(f"{{os.getpid()}} {{child.pid}} {{agent}}")
        time.sleep(600)
    if mode == "stale":  # an output with a time before the run (nsys wrote its trace elsewhere)
        shutil.copyfile(os.environ["FAKE_SQLITE"], out + ".sqlite")
        os.utime(out + ".sqlite", (time.time() - 3600, time.time() - 3600))
        sys.exit(0)
    if mode == "none" or not os.path.isdir(os.path.dirname(out) or "."):  # nsys 2022.4 then writes to /tmp
        sys.exit(0)
    open(out + ".nsys-rep", "wb").write(b"NVIDIA Tegra Profiler Report 1.\n")
    shutil.copyfile(os.environ["FAKE_SQLITE"], out + ".sqlite")
else:
    sys.exit(f"fake nsys: unexpected {{argv}}")
'''


@pytest.fixture(scope="module")
def fixture_sqlite(fixture_dir: Path) -> Path:
    return fixture_dir / "launch_graph.sqlite"


def fake_nsys(tmp_path: Path, script: str) -> tuple[Path, str]:
    """``script`` (formatted with this Python) as an executable fake nsys in ``tmp_path/bin``, and a
    PATH without any real nsys."""
    fake = tmp_path / "bin" / "fake-nsys"
    fake.parent.mkdir()
    fake.write_text(script.format(python=sys.executable))
    fake.chmod(0o755)
    return fake, os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                                 if p and not (Path(p) / "nsys").exists())


def kill_left(pids: Path) -> None:
    """SIGKILL every process the fake nsys recorded in ``pids`` that still runs (a failed test
    leaves nothing running either)."""
    for pid in (int(x) for x in (pids.read_text().split() if pids.exists() else [])):
        if running(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def env(tmp_path: Path, fixture_sqlite: Path):
    """A fake nsys named by NSYSAN_NSYS, a private cache, and no real nsys on PATH."""
    fake, path = fake_nsys(tmp_path, FAKE_NSYS)
    e = {k: v for k, v in os.environ.items() if not k.startswith(("NSYSAN_", "FAKE_"))}
    e.update(PATH=path, PYTHONPATH=str(ROOT), NSYSAN_NSYS=str(fake), XDG_CACHE_HOME=str(tmp_path / "cache"),
             FAKE_LOG=str(tmp_path / "nsys.log"), FAKE_SQLITE=str(fixture_sqlite),
             FAKE_PIDS=str(tmp_path / "pids"))
    yield e
    kill_left(Path(e["FAKE_PIDS"]))


def nsysan(argv: list[str], env: dict[str, str], cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([sys.executable, "-m", "nsysan", *argv], capture_output=True, text=True, timeout=timeout,
                       env=env, cwd=cwd, errors="replace")
    assert "Traceback" not in r.stderr, r.stderr
    return r


def calls(env: dict[str, str]) -> list[dict]:
    log = Path(env["FAKE_LOG"])
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def exports(env: dict[str, str]) -> list[list[str]]:
    return [c["argv"] for c in calls(env) if c["argv"][:1] == ["export"] and c["argv"][1:2] != ["--help"]]


def kernels_by_sql(path: Path) -> int:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    finally:
        con.close()


def running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie waits for an init that may never reap it)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except (FileNotFoundError, ProcessLookupError):
        return False
    except OSError:  # no /proc: signal 0
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def a_report(folder: Path, name: str = "run.nsys-rep") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / name
    p.write_bytes(b"NVIDIA Tegra Profiler Report 1.\n" + os.urandom(64))
    return p


# -- .nsys-rep inputs --------------------------------------------------------------------------

def test_report_is_exported_once_into_the_cache_never_beside_it(env, tmp_path, fixture_sqlite):
    rep = a_report(tmp_path / "data")
    work = tmp_path / "work"
    work.mkdir()
    r = nsysan(["analyze", str(rep), "--json", "out.json"], env, work)
    assert r.returncode == 0, r.stderr
    assert f"exporting {rep} with nsys" in r.stderr and "cached at" in r.stderr
    # the export: nsys export --type sqlite --output <cache>/<key>/run.sqlite <absolute report>
    (argv,) = exports(env)
    out = Path(argv[argv.index("--output") + 1])
    assert argv[:3] == ["export", "--type", "sqlite"] and argv[-1] == str(rep)
    assert "--include-blobs=true" not in argv  # this nsys's help does not list it
    cached = Path(env["XDG_CACHE_HOME"]) / "nsysan" / "exports"
    [final] = cached.glob("*/run.sqlite")
    assert out.parent.parent == cached and out.name == "run.sqlite"  # written in the cache, renamed in it
    assert final.read_bytes() == fixture_sqlite.read_bytes()
    assert not [p for p in cached.iterdir() if p.name.startswith(".export-")]  # no temp folder left
    assert sorted(p.name for p in rep.parent.iterdir()) == ["run.nsys-rep"]  # nothing beside the report
    # the analysis is the export's: its kernel count is the SQL count of the fixture
    d = json.loads((work / "out.json").read_text())
    assert d["trace"]["counts"]["kernels"] == kernels_by_sql(fixture_sqlite) > 0
    # the HTML report is named after the user's report, in the current folder (not the cache's name)
    assert (work / "out.html").exists()
    r = nsysan(["analyze", str(rep), "-q"], env, work)
    assert r.returncode == 0, r.stderr
    assert (work / "run.nsysan.html").exists()
    # second run: the cached export is reused, nsys is not run again
    assert len(exports(env)) == 1 and "using its SQLite export cached at" not in r.stderr  # -q: silent
    r = nsysan(["analyze", str(rep), "--no-html"], env, work)
    assert r.returncode == 0 and "using its SQLite export cached at" in r.stderr and len(exports(env)) == 1
    # the report written again (another size and time): a new export
    rep.write_bytes(rep.read_bytes() + b"more")
    os.utime(rep, ns=(time.time_ns(), time.time_ns() + 10**9))
    r = nsysan(["analyze", str(rep), "--no-html", "-q"], env, work)
    assert r.returncode == 0, r.stderr
    assert len(exports(env)) == 2 and len(list(cached.glob("*/run.sqlite"))) == 2


def test_include_blobs_is_asked_for_where_nsys_has_it(env, tmp_path):
    rep = a_report(tmp_path)
    r = nsysan(["analyze", str(rep), "--no-html", "-q"], {**env, "FAKE_BLOBS": "1"}, tmp_path)
    assert r.returncode == 0, r.stderr
    (argv,) = exports(env)
    assert "--include-blobs=true" in argv


def test_diff_and_compare_read_reports(env, tmp_path):
    a, b = a_report(tmp_path / "a", "base.nsys-rep"), a_report(tmp_path / "b", "new.nsys-rep")
    r = nsysan(["diff", str(a), str(b), "--json", "d.json"], env, tmp_path)
    assert r.returncode == 0, r.stderr
    d = json.loads((tmp_path / "d.json").read_text())
    assert (d["base"], d["new"]) == ("base", "new")
    r = nsysan(["compare", str(a), str(b), "--markdown", "--jobs", "1"], env, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "| base |" in r.stdout and "| new |" in r.stdout
    assert len(exports(env)) == 2  # each report once; compare reused diff's exports


def test_report_without_nsys_says_how_to_export_it(env, tmp_path):
    rep = a_report(tmp_path)
    e = {k: v for k, v in env.items() if k != "NSYSAN_NSYS"}
    r = nsysan(["analyze", str(rep), "--no-html"], e, tmp_path)
    assert r.returncode == 5
    assert f"hint: export it first: nsys export --type sqlite {rep}" in r.stderr and "NSYSAN_NSYS" in r.stderr
    assert not (Path(env["XDG_CACHE_HOME"]) / "nsysan" / "exports").exists()  # nothing exported, nothing cached
    # an export already cached is read without nsys
    assert nsysan(["analyze", str(rep), "--no-html", "-q"], env, tmp_path).returncode == 0
    r = nsysan(["analyze", str(rep), "--no-html"], e, tmp_path)
    assert r.returncode == 0 and "using its SQLite export cached at" in r.stderr and len(exports(env)) == 1


def test_a_relative_nsys_path_works(env, tmp_path):
    rep = a_report(tmp_path / "data")
    nsys = Path(env["NSYSAN_NSYS"])
    r = nsysan(["analyze", str(rep), "--no-html", "-q"], {**env, "NSYSAN_NSYS": f"./{nsys.name}"}, nsys.parent)
    assert r.returncode == 0, r.stderr
    assert len(exports(env)) == 1


def test_a_report_nsys_cannot_export_is_a_clear_error(env, tmp_path):
    rep = a_report(tmp_path)
    r = nsysan(["analyze", str(rep), "--no-html"], {**env, "FAKE_MODE": "fail"}, tmp_path)
    assert r.returncode == 5
    assert "nsys export failed (exit 1): Importer error: the file is not a valid report" in r.stderr
    cached = Path(env["XDG_CACHE_HOME"]) / "nsysan" / "exports"
    assert not list(cached.rglob("*.sqlite")) and not [p for p in cached.iterdir() if p.name.startswith(".")]


def test_an_export_that_hangs_is_stopped_with_its_processes(env, tmp_path):
    rep = a_report(tmp_path)
    t0 = time.monotonic()
    r = nsysan(["analyze", str(rep), "--no-html"], {**env, "FAKE_MODE": "hang", "NSYSAN_EXPORT_TIMEOUT": "1"},
               tmp_path)
    assert r.returncode == 9 and "did not finish within 1 s" in r.stderr and "NSYSAN_EXPORT_TIMEOUT" in r.stderr
    assert time.monotonic() - t0 < 30
    pids = [int(x) for x in Path(env["FAKE_PIDS"]).read_text().split()]
    assert not [p for p in pids if running(p)]
    cached = Path(env["XDG_CACHE_HOME"]) / "nsysan" / "exports"
    assert not list(cached.rglob("*.sqlite")) and not [p for p in cached.iterdir() if p.name.startswith(".")]


def test_sqlite_named_nsys_rep_is_read_as_is(env, tmp_path, fixture_sqlite):
    renamed = tmp_path / "renamed.nsys-rep"
    shutil.copyfile(fixture_sqlite, renamed)
    r = nsysan(["analyze", str(renamed), "--no-html", "-q"], env, tmp_path)
    assert r.returncode == 0, r.stderr
    assert exports(env) == []


REAL_NSYS = shutil.which("nsys2022") or shutil.which("nsys")


@pytest.mark.skipif(not REAL_NSYS, reason="no Nsight Systems CLI (shared/tools/install-nsys2022.sh installs 2022.4)")
def test_real_nsys_exports_a_real_report(env, tmp_path):
    """Nsight Systems itself (2022.4 as nsys2022, or any nsys on PATH) records `/bin/true` (no GPU
    needed), and nsysan analyses the report through its own export: the flags it passes exist."""
    data = tmp_path / "data"
    data.mkdir()
    try:
        subprocess.run([REAL_NSYS, "profile", "-t", "nvtx", "-s", "none", "--cpuctxsw=none", "-o",
                        str(data / "true_nvtx"), "/bin/true"], capture_output=True, timeout=180, start_new_session=True,
                       env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    except subprocess.TimeoutExpired:
        pytest.skip("nsys could not record here")
    rep = data / "true_nvtx.nsys-rep"
    if not rep.exists():
        pytest.skip("nsys could not record here")
    r = nsysan(["analyze", str(rep), "--json", "out.json", "--no-html"], {**env, "NSYSAN_NSYS": REAL_NSYS},
               tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr
    [final] = (Path(env["XDG_CACHE_HOME"]) / "nsysan" / "exports").glob("*/true_nvtx.sqlite")
    con = sqlite3.connect(f"file:{final}?mode=ro", uri=True)
    n_threads = con.execute("SELECT count(*) FROM ThreadNames").fetchone()[0]
    con.close()
    d = json.loads((tmp_path / "out.json").read_text())
    assert d["trace"]["counts"]["threads"] == n_threads > 0
    assert sorted(p.name for p in data.iterdir()) == ["true_nvtx.nsys-rep"]  # nothing written beside it


# -- inputs that are not regular files -------------------------------------------------------

def _special(kind: str, tmp_path: Path):
    if kind == "fifo":
        p = tmp_path / "t.sqlite"
        os.mkfifo(p)
        return p, "a FIFO", None
    if kind == "fifo-report":
        p = tmp_path / "t.nsys-rep"
        os.mkfifo(p)
        return p, "a FIFO", None
    if kind == "socket":
        p = tmp_path / "t.sock"
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(p))
        return p, "a socket", s
    if kind == "chardev":
        return Path("/dev/zero"), "a character device", None
    if kind == "blockdev":
        devs = [d for d in Path("/dev").iterdir() if d.is_block_device()] if Path("/dev").exists() else []
        if not devs:
            pytest.skip("no block device")
        return devs[0], "a block device", None
    p = tmp_path / "d.sqlite"
    p.mkdir()
    return p, "is a directory", None


@pytest.mark.parametrize("kind", ["fifo", "fifo-report", "socket", "chardev", "blockdev", "directory"])
def test_non_regular_inputs_are_refused_before_any_open(env, tmp_path, kind):
    path, words, keep = _special(kind, tmp_path)
    try:
        expect = f"{path}: " + (words if words.startswith("is ") else f"not a regular file ({words})")
        for argv in (["analyze", str(path), "--no-html"], ["diff", str(path), str(path)],
                     ["compare", str(path), str(path)]):
            r = nsysan(argv, env, tmp_path, timeout=30)
            assert r.returncode == 3 and expect in r.stderr, (argv, r.stderr)
        code = f"import nsysan; nsysan.open_trace({str(path)!r})"
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, env=env)
        assert "TraceNotFoundError" in r.stderr and expect in r.stderr, r.stderr
        assert exports(env) == []
    finally:
        if keep is not None:
            keep.close()


# -- nsysan profile --------------------------------------------------------------------------

@pytest.mark.parametrize("existing", ["t.sqlite", "t.nsys-rep"])
def test_profile_refuses_an_existing_output_before_running_anything(env, tmp_path, existing):
    (tmp_path / existing).write_bytes(b"old")
    r = nsysan(["profile", "-o", "t", "--", "true"], env, tmp_path)
    assert r.returncode == 8 and f"{existing}: exists" in r.stderr and "-f" in r.stderr
    assert calls(env) == []  # nsys never ran
    assert (tmp_path / existing).read_bytes() == b"old"


def test_profile_force_overwrites_with_a_fresh_trace(env, tmp_path, fixture_sqlite):
    for name in ("t.sqlite", "t.nsys-rep"):
        (tmp_path / name).write_bytes(b"old")
        os.utime(tmp_path / name, (1, 1))
    r = nsysan(["profile", "-o", "t.nsys-rep", "-f", "--", "true"], env, tmp_path)
    assert r.returncode == 0, r.stderr
    (prof,) = [c["argv"] for c in calls(env) if c["argv"][:1] == ["profile"]]
    assert prof[prof.index("-o") + 1] == "t" and prof[prof.index("-f") + 1] == "true"
    assert prof[-1] == "true" and prof[prof.index("--export") + 1] == "sqlite"
    assert (tmp_path / "t.sqlite").read_bytes() == fixture_sqlite.read_bytes()
    assert "trace: t.sqlite" in r.stdout


def test_profile_without_force_passes_f_false_and_reports_the_trace(env, tmp_path):
    r = nsysan(["profile", "-o", "sub/t", "--", "python3", "-c", "pass"], env, tmp_path)
    assert r.returncode == 0, r.stderr
    (prof,) = [c["argv"] for c in calls(env) if c["argv"][:1] == ["profile"]]
    assert prof[prof.index("-f") + 1] == "false" and prof[-3:] == ["python3", "-c", "pass"]
    assert "next:  nsysan analyze sub/t.sqlite" in r.stdout


def test_profile_fails_on_a_trace_not_written_by_this_run(env, tmp_path):
    r = nsysan(["profile", "-o", "t", "--", "true"], {**env, "FAKE_MODE": "stale"}, tmp_path)
    assert r.returncode == 12 and "t.sqlite: not written by this run" in r.stderr


def test_profile_without_a_trace_fails(env, tmp_path):
    r = nsysan(["profile", "-o", "t", "--", "true"], {**env, "FAKE_MODE": "none"}, tmp_path)
    assert r.returncode == 12 and "wrote no t.sqlite" in r.stderr  # an output that is not there (issue 54)


def test_profile_refuses_names_nsys_would_expand(env, tmp_path):
    r = nsysan(["profile", "-o", "run-%p", "--", "true"], env, tmp_path)
    assert r.returncode == 2 and "%p" in r.stderr and calls(env) == []


def test_profile_timeout_stops_the_whole_process_group(env, tmp_path):
    t0 = time.monotonic()
    r = nsysan(["profile", "-o", "t", "--timeout", "1", "--", "sleep", "60"], {**env, "FAKE_MODE": "hang"},
               tmp_path)
    assert r.returncode == 9 and "did not finish within --timeout 1 s" in r.stderr, r.stderr
    assert "sent SIGINT to nsys (process group" in r.stderr and "sent SIGTERM" not in r.stderr
    assert time.monotonic() - t0 < 30
    nsys_pid, child = (int(x) for x in Path(env["FAKE_PIDS"]).read_text().split())
    (prof,) = [c for c in calls(env) if c["argv"][:1] == ["profile"]]
    assert prof["pgid"] == prof["pid"] == nsys_pid  # nsys led its own group
    assert not running(nsys_pid) and not running(child)


def test_profile_timeout_also_stops_what_left_the_group(env, tmp_path):
    """nsys 2022.4 starts the program in a session of its own and its agent as a daemon: when nsys
    dies on SIGINT without stopping them, SIGTERM reaches them anyway."""
    r = nsysan(["profile", "-o", "t", "--timeout", "1", "--", "sleep", "60"],
               {**env, "FAKE_MODE": "hang-detached"}, tmp_path)
    assert r.returncode == 9, r.stderr
    assert "sent SIGTERM" in r.stderr
    nsys_pid, child, agent = (int(x) for x in Path(env["FAKE_PIDS"]).read_text().split())
    assert not running(nsys_pid) and not running(child) and not running(agent)


def test_profile_ctrl_c_stops_nsys_and_exits_130(env, tmp_path):
    # Ctrl-C as a terminal delivers it: a test run started in the background of a shell without job
    # control (`pytest &`) ignores SIGINT, and a child inherits that (Python then installs no handler)
    p = subprocess.Popen([sys.executable, "-m", "nsysan", "profile", "-o", "t", "--", "sleep", "60"],
                         env={**env, "FAKE_MODE": "hang"}, cwd=tmp_path, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    pids = Path(env["FAKE_PIDS"])
    deadline = time.monotonic() + 30
    while not (pids.exists() and len(pids.read_text().split()) == 2) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        nsys_pid, child = (int(x) for x in pids.read_text().split())
        assert os.getpgid(nsys_pid) != os.getpgid(p.pid)  # a terminal's Ctrl-C would reach nsysan only
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130 and "interrupted" in err and "Traceback" not in err, err
    assert not running(nsys_pid) and not running(child)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="/proc")
@pytest.mark.parametrize("args", [["--session-name", "profile-{root}"], ["--session-name=profile-true-{root}"]],
                         ids=["2025.3", "2022.4"])
def test_nsys_agents_are_found_by_their_session_name(args):
    """nsys' agent daemonizes (own session, parent init): it is found by the session name that ends
    with the nsys pid, as nsys 2025.3 and 2022.4 write it; another run's agent is not."""
    from nsysan.record.process import _agents, _table

    root = os.getpid()
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "--start-agent",
                               *(a.format(root=r) for a in args)], start_new_session=True)
             for r in (root, root + 1)]
    try:
        time.sleep(0.3)
        assert _agents(root, _table()) == {procs[0].pid}
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_stop_group_escalates_to_sigkill(tmp_path):
    """A group that ignores SIGINT and SIGTERM is killed; the signals sent are the ones needed."""
    from nsysan.record.process import group_alive, stop_group

    script = textwrap.dedent("""
        import signal, subprocess, sys, time
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, signal.SIG_IGN)
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # inherits SIG_IGN
        print(child.pid, flush=True)
        time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True, stdout=subprocess.PIPE, text=True)
    child = int(proc.stdout.readline())
    sent = stop_group(proc, steps=[(signal.SIGINT, 0.5), (signal.SIGTERM, 0.5), (signal.SIGKILL, 5)])
    assert sent == ["SIGINT", "SIGTERM", "SIGKILL"]
    assert not group_alive(proc) and not running(proc.pid) and not running(child)
    assert proc.returncode == -signal.SIGKILL


def test_file_kind_names_each_kind(tmp_path):
    from nsysan.inputs import file_kind

    os.mkfifo(tmp_path / "f")
    assert file_kind(os.stat(tmp_path / "f").st_mode) == "a FIFO"
    assert file_kind(os.stat("/dev/null").st_mode) == "a character device"
    assert file_kind(os.stat(tmp_path).st_mode) == "a directory"
    assert file_kind(stat.S_IFSOCK) == "a socket" and file_kind(stat.S_IFBLK) == "a block device"
