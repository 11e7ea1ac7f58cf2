"""Issue 40, outputs and paths: an output never replaces what is not a regular file (a FIFO, a
character device, a link into /proc/self/fd, the --config file), whatever --force says; a name over
the file system's limits is the output error (exit 12), not an internal error; an interrupted write
leaves no temporary file and a replaced report keeps its permissions; no CSV cell reads as a formula
after the normalisation spreadsheets apply. Each case is built here; each test failed before the fix.
A seeded generator (``random.Random(FIXED)``) tries 20 variants of each class with the same checks.

/dev/null and /dev/stdout are only ever *checked* (``check_outputs``, which writes nothing): the
writes are aimed at links to them in the test's own folder, so that the code before the fix, which
replaced such links, replaced a link of the test and not a device of the machine."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import random
import re
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import unicodedata
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT
from factories import apply_sql

from nsysan import pipeline
from nsysan.cli import main
from nsysan.errors import OutputError
from nsysan.outputs import write_atomic
from nsysan.report.jsonout import to_csv

FIXED = 40
SRC = "launch_graph_nodes"  # a small real fixture (4 kernel names, 10,803 kernels)


@pytest.fixture(scope="module")
def src(fixture_dir: Path) -> Path:
    return fixture_dir / f"{SRC}.sqlite"


@pytest.fixture
def trace(src: Path, tmp_path: Path) -> Path:
    p = tmp_path / "t.sqlite"
    shutil.copy(src, p)
    return p


@pytest.fixture(scope="module")
def saved(src: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A saved analysis of the fixture, for diff and compare."""
    p = tmp_path_factory.mktemp("saved") / "base.json"
    assert main(["analyze", str(src), "--json", str(p), "--no-html", "-q"]) == 0
    return p


def cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as e:
        code = int(e.code or 0)
    err = capsys.readouterr().err
    assert "Traceback" not in err and "internal error" not in err, err
    return code, err


def state(p: Path) -> tuple[object, ...]:
    """What a path is, without opening it: kind, inode, and its link target or content hash."""
    st = os.lstat(p)
    if stat.S_ISLNK(st.st_mode):
        return ("link", st.st_ino, os.readlink(p))
    if stat.S_ISREG(st.st_mode):
        return ("file", st.st_ino, hashlib.sha256(p.read_bytes()).hexdigest())
    return (stat.S_IFMT(st.st_mode), st.st_ino, st.st_rdev)


def temps(folder: Path) -> list[str]:
    return sorted(n for n in os.listdir(folder) if n.startswith(".nsysan-"))


def dev_null_intact() -> None:
    st = os.lstat("/dev/null")
    assert stat.S_ISCHR(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) == (1, 3)


# -- outputs that are not regular files ---------------------------------------------------------------

def make_target(kind: str, d: Path, name: str = "out") -> Path:
    """An existing ``d/name`` that is not a regular file (or, for the controls, one that is)."""
    p = d / name
    if kind == "fifo":
        os.mkfifo(p)
    elif kind == "link to /dev/null":
        p.symlink_to("/dev/null")
    elif kind == "link to /proc/self/fd/1":
        p.symlink_to("/proc/self/fd/1")
    elif kind == "link to /dev/stdout":
        p.symlink_to("/dev/stdout")
    elif kind == "link to /dev/fd/2":
        p.symlink_to("/dev/fd/2")
    elif kind == "link to a FIFO":
        os.mkfifo(d / f"{name}.fifo")
        p.symlink_to(f"{name}.fifo")
    elif kind == "link to a link to /dev/null":
        (d / f"{name}.hop").symlink_to("/dev/null")
        p.symlink_to(d / f"{name}.hop")
    elif kind == "dangling link":
        p.symlink_to(d / f"{name}.missing")
    elif kind == "regular file":
        p.write_text("mine\n")
    else:
        raise AssertionError(kind)
    return p


SPECIAL = ["fifo", "link to /dev/null", "link to /proc/self/fd/1", "link to /dev/stdout", "link to /dev/fd/2",
           "link to a FIFO", "link to a link to /dev/null", "dangling link"]
OPTIONS = ["--json", "--html", "--perfetto", "--csv"]


def _analyze_into(trace: Path, option: str, kind: str, d: Path) -> tuple[list[str], Path]:
    """analyze's command line writing ``option`` over a ``kind`` target in ``d``; the target."""
    if option == "--csv":
        (d / "csv").mkdir()
        target = make_target(kind, d / "csv", "kernels.csv")
        return ["analyze", str(trace), "--csv", str(d / "csv"), "--no-html", "-q", "--force"], target
    target = make_target(kind, d)
    extra = [] if option == "--html" else ["--no-html"]
    return ["analyze", str(trace), option, str(target), *extra, "-q", "--force"], target


@pytest.mark.parametrize("kind", SPECIAL)
@pytest.mark.parametrize("option", OPTIONS)
def test_force_never_replaces_what_is_not_a_regular_file(trace, tmp_path, capsys, option, kind):
    # GIVEN an output naming a FIFO, a link to a device or to a descriptor of the process
    d = tmp_path / "o"
    d.mkdir()
    argv, target = _analyze_into(trace, option, kind, d)
    before = state(target)
    # WHEN analyze writes it with --force
    code, err = cli(argv, capsys)
    # THEN it is refused with the output error, naming what is there, and nothing is touched
    assert code == 12 and "not a regular file" in err, (code, err)
    assert state(target) == before
    assert not temps(target.parent)
    dev_null_intact()


@pytest.mark.parametrize("cmd", ["diff", "compare"])
@pytest.mark.parametrize("kind", ["fifo", "link to /dev/null", "link to /proc/self/fd/1"])
def test_diff_and_compare_outputs_refuse_them_too(saved, tmp_path, capsys, cmd, kind):
    for option in ("--json", "--html"):
        d = tmp_path / option.strip("-")
        d.mkdir()
        target = make_target(kind, d)
        before = state(target)
        code, err = cli([cmd, str(saved), str(saved), option, str(target), "-q", "--force"], capsys)
        assert code == 12 and "not a regular file" in err, (cmd, option, code, err)
        assert state(target) == before and not temps(d)
    dev_null_intact()


@pytest.mark.parametrize("path", ["/dev/null", "/dev/stdout", "/dev/fd/1", "/proc/self/fd/2"])
def test_the_device_nodes_themselves_are_refused_before_any_work(path):
    # (only checked: check_outputs writes nothing, before or after the fix)
    with pytest.raises(OutputError, match="not a regular file"):
        pipeline.check_outputs([], [("--json", path)], force=True)
    dev_null_intact()


@pytest.mark.parametrize("how", ["same path", "symlink", "hard link", "csv table"])
def test_the_config_file_is_an_input(trace, tmp_path, capsys, how):
    # GIVEN a --config file, and an output naming it (by its path, through a link, as a CSV table)
    cfg = tmp_path / "kernels.csv"
    cfg.write_text('{"rules": {}}\n')
    before = state(cfg)
    if how == "same path":
        out = ["--json", str(cfg), "--no-html"]
    elif how == "symlink":
        (tmp_path / "c.html").symlink_to(cfg)
        out = ["--html", str(tmp_path / "c.html")]
    elif how == "hard link":
        os.link(cfg, tmp_path / "c.json")
        out = ["--json", str(tmp_path / "c.json"), "--no-html"]
    else:
        out = ["--csv", str(tmp_path), "--no-html"]
    # WHEN analyze runs with --force
    code, err = cli(["analyze", str(trace), "--config", str(cfg), *out, "-q", "--force"], capsys)
    # THEN it is refused as an output over an input (exit 2), before any work
    assert code == 2 and "input" in err, (code, err)
    assert state(cfg) == before


def test_force_still_replaces_regular_files_and_links_to_them(trace, tmp_path, capsys):
    mine = make_target("regular file", tmp_path, "mine.json")
    (tmp_path / "link.json").symlink_to(mine)
    for p in (mine, tmp_path / "link.json"):
        code, err = cli(["analyze", str(trace), "--json", str(p), "--no-html", "-q", "--force"], capsys)
        assert code == 0, err
        assert json.loads(p.read_text())["schema"] == "nsysan.analysis/2"


def test_generated_output_targets(src, tmp_path, capsys):
    rng = random.Random(FIXED)
    trace = tmp_path / "t.sqlite"
    shutil.copy(src, trace)
    for i in range(20):
        kind = rng.choice(SPECIAL + ["regular file"])
        option = rng.choice(OPTIONS)
        d = tmp_path / f"case{i}"
        d.mkdir()
        argv, target = _analyze_into(trace, option, kind, d)
        if rng.random() < 0.5:
            argv.remove("--force")
        before = state(target)
        code, err = cli(argv, capsys)
        if kind == "regular file":  # the control: replaced with --force, else exit 8
            assert code == (0 if "--force" in argv else 8), (i, kind, option, err)
            assert (state(target) != before) == ("--force" in argv)
        else:
            assert code == 12 and "not a regular file" in err, (i, kind, option, argv, err)
            assert state(target) == before
        assert not temps(target.parent), (i, kind, option)
    dev_null_intact()


# -- names over the file system's limits --------------------------------------------------------------

def long_path(d: Path, how: str, n: int, suffix: str = ".json") -> Path:
    if how == "folder":  # one folder name of n bytes
        return d / ("d" * n) / f"r{suffix}"
    if how == "file":  # the file's own name of n bytes
        return d / ("f" * (n - len(suffix)) + suffix)
    parts, left = [], n  # a path of n bytes in folders of 200
    while left > 0:
        parts.append("a" * min(200, left))
        left -= 201
    return d.joinpath(*parts) / f"r{suffix}"


LONG = [("folder", 300), ("path", 5000), ("file", 300)]


@pytest.mark.parametrize("how,n", LONG)
@pytest.mark.parametrize("option", OPTIONS + ["--out-dir"])
def test_names_over_the_limits_are_the_output_error(trace, tmp_path, capsys, option, how, n):
    out = long_path(tmp_path, how, n, ".html" if option == "--html" else ".json")
    if option in ("--csv", "--out-dir"):
        out = out.parent if how != "file" else tmp_path / ("c" * n)
    extra = [] if option in ("--html", "--out-dir") else ["--no-html"]
    code, err = cli(["analyze", str(trace), option, str(out), *extra, "-q"], capsys)
    assert code == 12 and "cannot write" in err, (code, err)
    assert os.listdir(tmp_path) == ["t.sqlite"]  # no folder made, no temp file


@pytest.mark.parametrize("how,n", LONG)
def test_diff_and_the_api_name_it_too(saved, tmp_path, capsys, how, n):
    out = long_path(tmp_path, how, n)
    code, err = cli(["diff", str(saved), str(saved), "--json", str(out), "-q"], capsys)
    assert code == 12 and "cannot write" in err, (code, err)
    with pytest.raises(OutputError, match="cannot write"):  # the Python API's writes (to_json, write_html)
        write_atomic(out, "{}\n", force=True)
    assert os.listdir(tmp_path) == []


def test_generated_long_names(trace, tmp_path, capsys):
    rng = random.Random(FIXED)
    for i in range(20):
        how = rng.choice(["folder", "path", "file"])
        n = rng.randint(256, 400) if how != "path" else rng.randint(4096, 9000)
        option = rng.choice(["--json", "--html", "--perfetto"])
        d = tmp_path / f"case{i}"
        d.mkdir()
        out = long_path(d, how, n, ".html" if option == "--html" else ".json")
        extra = [] if option == "--html" else ["--no-html"]
        code, err = cli(["analyze", str(trace), option, str(out), *extra, "-q", "--force"], capsys)
        assert code == 12 and "cannot write" in err, (i, how, n, option, err)
        assert os.listdir(d) == []


# -- interrupted writes, permissions ------------------------------------------------------------------

CHILD = """
import os, signal, sys, time
# the signals' default actions, as a shell gives them (a run under nohup inherits SIGHUP ignored)
signal.signal(signal.SIGHUP, signal.SIG_DFL)
signal.signal(signal.SIGTERM, signal.SIG_DFL)
signal.signal(signal.SIGINT, signal.default_int_handler)
def slow(fd):  # the write is under way: the temp file holds the report, not yet renamed
    print("ready", flush=True)
    time.sleep(30)  # (a handler whose exception is lost lets it run out: the rename is still refused)
os.fsync = slow
from nsysan.cli import main
option, out = sys.argv[2], sys.argv[3]
extra = [] if option == "--html" else ["--no-html"]
sys.exit(main(["analyze", sys.argv[1], option, out, *extra, "-q", "--force"]))
"""


# the same, the signal arriving while a ``__del__`` runs: Python prints the handler's exception and drops it
# ("Exception ignored"), and the write goes on; it must still not replace the old report
CHILD_LOST = CHILD.replace("""def slow(fd):""", """class Dropped:
    def __del__(self):
        print("ready", flush=True)
        time.sleep(20)
def slow(fd):
    Dropped()
    return
""")


def _threads(pid: int) -> list[str]:
    """Each thread of a live process: its name, state, kernel wait and signal masks (for a message)."""
    out = []
    for t in sorted(os.listdir(f"/proc/{pid}/task")):
        try:
            d = Path(f"/proc/{pid}/task/{t}")
            fields = dict(line.split(":", 1) for line in (d / "status").read_text().splitlines() if ":" in line)
            out.append(" ".join([(d / "comm").read_text().strip(), (d / "wchan").read_text().strip(),
                                 *(f"{k}={fields.get(k, '').strip()}" for k in ("State", "SigBlk", "SigPnd"))]))
        except OSError:
            pass
    return out


def _interrupted(trace: Path, out: Path, sig: int, option: str = "--json", child: str = CHILD) -> int:
    p = subprocess.Popen([sys.executable, "-c", child, str(trace), option, str(out)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert p.stdout is not None and p.stdout.readline() == "ready\n", p.stderr.read() if p.stderr else ""
        assert len(temps(out.parent)) == 1  # the temp file is there while the report is written
        p.send_signal(sig)
        try:
            return p.wait(timeout=60)
        except subprocess.TimeoutExpired:  # what it was doing, for the message
            threads = _threads(p.pid)
            p.kill()
            _, err = p.communicate()
            raise AssertionError(f"no exit 60 s after signal {sig}: threads {threads}; stderr {err[-4000:]!r}")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_remove_the_temp_file(trace, tmp_path, sig):
    out = tmp_path / "o" / "r.json"
    out.parent.mkdir()
    out.write_text("OLD REPORT\n")
    code = _interrupted(trace, out, sig)
    assert code == -sig  # it still dies of the signal
    assert out.read_text() == "OLD REPORT\n" and os.listdir(out.parent) == ["r.json"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_whose_exception_was_lost_still_keeps_the_old_report(trace, tmp_path, sig):
    out = tmp_path / "o" / "r.json"
    out.parent.mkdir()
    out.write_text("OLD REPORT\n")
    code = _interrupted(trace, out, sig, child=CHILD_LOST)
    assert code == (130 if sig == signal.SIGINT else -sig)  # it dies of the signal (Ctrl-C: 130) once the write is over
    assert out.read_text() == "OLD REPORT\n" and os.listdir(out.parent) == ["r.json"]


# a multi-trace run whose parent loses the signal's exception as the workers start: it stops them
CHILD_MULTI_LOST = """
import signal, sys, time
signal.signal(signal.SIGHUP, signal.SIG_DFL)
signal.signal(signal.SIGTERM, signal.SIG_DFL)
from nsysan import _executor
real = _executor.processes
class Dropped:
    def __del__(self):
        print("ready", flush=True)
        time.sleep(20)
def processes(*a, **k):
    pool = real(*a, **k)
    Dropped()
    return pool
_executor.processes = processes
from nsysan.cli import main
sys.exit(main(["analyze", sys.argv[1], sys.argv[2], "--out-dir", sys.argv[3], "-q", "--force"]))
"""


def test_a_lost_signal_in_a_multi_trace_run_keeps_every_old_report(trace, fixture_dir, tmp_path):
    out = tmp_path / "out"
    second = str(fixture_dir / "ladder_baseline.sqlite")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "nsysan", "analyze", str(trace), second, "--out-dir", str(out), "-q"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    names = sorted(os.listdir(out))
    assert len(names) >= 6  # each trace's JSON and HTML, the summary's
    for n in names:
        (out / n).write_text("OLD\n")
    p = subprocess.Popen([sys.executable, "-c", CHILD_MULTI_LOST, str(trace), second, str(out)], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline() == "ready\n"
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=60) == -signal.SIGTERM
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert sorted(os.listdir(out)) == names and all((out / n).read_text() == "OLD\n" for n in names)


# a second signal while ``terminating`` puts the old handlers back: it finds the old handler (dies of it)
CHILD_RESTORE_RACE = """
import os, signal
signal.signal(signal.SIGHUP, signal.SIG_DFL)
signal.signal(signal.SIGTERM, signal.SIG_DFL)
from nsysan import _atomic
real = signal.signal
def restoring(sig, handler):
    old = real(sig, handler)
    if sig == signal.SIGTERM and handler == signal.SIG_DFL:  # SIGTERM's handler back: a SIGHUP comes now
        os.kill(os.getpid(), signal.SIGHUP)
    return old
with _atomic.terminating():
    signal.signal = restoring
signal.signal = real
print("lived on", _atomic._RECEIVED, flush=True)
"""


def test_a_signal_while_the_handlers_are_put_back_finds_the_old_ones():
    r = subprocess.run([sys.executable, "-c", CHILD_RESTORE_RACE], env={**os.environ, "PYTHONPATH": str(ROOT)},
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == -signal.SIGHUP, (r.returncode, r.stdout, r.stderr[-2000:])  # not a traceback


def _first_call_interrupted(monkeypatch, name: str, *, after: bool) -> None:
    """``os.<name>`` on a temp file of nsysan raises KeyboardInterrupt once (a Ctrl-C arriving there):
    ``after`` the real call (the file was just created), or instead of it (the clean-up interrupted)."""
    real = getattr(os, name)
    fired = []

    def hit(path, *a, **k):
        if not fired and os.path.basename(os.fspath(path)).startswith(".nsysan-"):
            fired.append(path)
            if after:
                real(path, *a, **k)
            raise KeyboardInterrupt
        return real(path, *a, **k)

    monkeypatch.setattr(os, name, hit)


@pytest.mark.parametrize("where", ["just after the temp file is created", "during the clean-up"])
def test_ctrl_c_leaves_no_empty_temp_file(trace, tmp_path, capsys, monkeypatch, where):
    out = tmp_path / "o" / "r.json"
    out.parent.mkdir()
    out.write_text("OLD REPORT\n")
    if where == "during the clean-up":  # a first Ctrl-C while writing, a second one in the clean-up
        def interrupted(fd: int) -> None:
            raise KeyboardInterrupt

        monkeypatch.setattr(os, "fsync", interrupted)
        _first_call_interrupted(monkeypatch, "unlink", after=False)
    else:
        _first_call_interrupted(monkeypatch, "open", after=True)
    code, err = cli(["analyze", str(trace), "--json", str(out), "--no-html", "-q", "--force"], capsys)
    assert code == 130 and "interrupted" in err
    assert out.read_text() == "OLD REPORT\n" and os.listdir(out.parent) == ["r.json"]


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o604])
def test_a_replaced_report_keeps_its_permissions(trace, tmp_path, capsys, mode):
    out = tmp_path / "r.json"
    assert cli(["analyze", str(trace), "--json", str(out), "--no-html", "-q"], capsys)[0] == 0
    os.chmod(out, mode)
    ino = os.stat(out).st_ino
    assert cli(["analyze", str(trace), "--json", str(out), "--no-html", "-q"], capsys)[0] == 0  # its own output
    assert os.stat(out).st_ino != ino and stat.S_IMODE(os.stat(out).st_mode) == mode
    foreign = tmp_path / "f.html"
    foreign.write_text("mine\n")
    os.chmod(foreign, mode)
    assert cli(["analyze", str(trace), "--html", str(foreign), "-q", "--force"], capsys)[0] == 0
    assert stat.S_IMODE(os.stat(foreign).st_mode) == mode


def test_generated_interruptions(trace, tmp_path, capsys, monkeypatch):
    rng = random.Random(FIXED)
    for i in range(6):  # a signal that kills, each in a process of its own (~1 s)
        sig = rng.choice([signal.SIGTERM, signal.SIGHUP])
        option = rng.choice(["--json", "--html", "--perfetto"])
        mode = rng.choice([0o600, 0o640, 0o644, 0o660])
        out = tmp_path / f"kill{i}" / "r.out"
        out.parent.mkdir()
        out.write_text(f"OLD {i}\n")
        os.chmod(out, mode)
        assert _interrupted(trace, out, sig, option) == -sig, i
        assert out.read_text() == f"OLD {i}\n" and os.listdir(out.parent) == ["r.out"], i
        assert stat.S_IMODE(os.stat(out).st_mode) == mode
    for i in range(14):  # a Ctrl-C at a random step of the write, sometimes a second one in the clean-up
        step, after = rng.choice(["open", "chmod", "replace", "fsync"]), rng.random() < 0.5
        option = rng.choice(["--json", "--html", "--perfetto"])
        out = tmp_path / f"int{i}" / "r.out"
        out.parent.mkdir()
        out.write_text(f"OLD {i}\n")
        with monkeypatch.context() as m:
            if step == "fsync":
                def interrupted(fd: int) -> None:
                    raise KeyboardInterrupt

                m.setattr(os, "fsync", interrupted)
                if after:
                    _first_call_interrupted(m, "unlink", after=False)
            else:
                _first_call_interrupted(m, step, after=after)
            extra = [] if option == "--html" else ["--no-html"]
            code, err = cli(["analyze", str(trace), option, str(out), *extra, "-q", "--force"], capsys)
        assert code == 130, (i, step, after, err)
        assert os.listdir(out.parent) == ["r.out"], (i, step, after)
        text = out.read_text()  # the old file, or (interrupted just after the rename) the whole new one
        assert text == f"OLD {i}\n" or (step, after) == ("replace", True) and len(text) > 1000, (i, step, after)


# -- CSV cells --------------------------------------------------------------------------------------------

# what a spreadsheet skips before it decides a cell is a formula (the test's own model): white space
# of every kind and invisible format characters, after NFKC (＝ ＋ － ＠ become = + - @)
FORMULA_START = "=+-@\u2212"
LINE_BREAKS = re.compile("\r\n|[\r\n\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")


def reads_as_formula(cell: str) -> bool:
    t = unicodedata.normalize("NFKC", cell)
    i = 0
    while i < len(t) and (t[i].isspace() or unicodedata.category(t[i]) in ("Cf", "Cc", "Zs")):
        i += 1
    if t[i:i + 1] not in tuple(FORMULA_START) or not t[i:]:
        return False
    try:
        float(t)  # a number (a negative value) is a number, not a formula
        return False
    except ValueError:
        return True


def formulas_in(text: str) -> list[str]:
    """Cells that read as formulas, in the file as a CSV reader parses it, and line by line as a
    reader that splits rows at every line break (a CR or LF inside a quoted cell) would."""
    bad = [c for row in csv.reader(io.StringIO(text, newline="")) for c in row if reads_as_formula(c)]
    for line in LINE_BREAKS.split(text):
        bad += [c for row in csv.reader([line]) for c in row if reads_as_formula(c)]
    return bad


HOSTILE_CSV = ["=1+1", "name\n=HYPERLINK(\"http://x\")", "name\r@SUM(A1)", "  =cmd|' /C calc'!A0", "\t+1+1",
               "\u200b=1+1", "\u3000=1+1", "\uff1d1+1", "\uff0b1+1", "\uff0d1+1", "\uff20SUM(A1)", "\xa0-2+3",
               "\ufeff=1", "\u3000\u200b \uff1dx", "\u2028=1", "\ufe661", "\r\n-1+x", "plain kernel"]


def unescape(cell: str) -> str:
    """The test's inverse of the CSV's visible escapes (``\\x0a``, ``\\u2028``) and leading quote."""
    cell = cell.removeprefix("'")
    return re.sub(r"\\x([0-9a-f]{2})|\\u([0-9a-f]{4})", lambda m: chr(int(m.group(1) or m.group(2), 16)), cell)


def hostile_names(trace: Path, names: list[str]) -> list[str]:
    """Every kernel named by one of ``names`` (by rowid, in turn), as new strings; returns the names
    the kernels carry (SQL truth)."""
    con = sqlite3.connect(trace)
    base = con.execute("SELECT MAX(id) + 1 FROM StringIds").fetchone()[0]
    con.executemany("INSERT INTO StringIds (id, value) VALUES (?, ?)", [(base + i, n) for i, n in enumerate(names)])
    con.commit()
    con.close()
    apply_sql(trace, f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = {base} + rowid % {len(names)}, "
                     f"shortName = {base} + rowid % {len(names)}")
    con = sqlite3.connect(trace)
    got = [r[0] for r in con.execute("SELECT DISTINCT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                                     "JOIN StringIds s ON s.id = k.demangledName")]
    con.close()
    return got


def _csv_run(trace: Path, d: Path, capsys) -> dict[str, str]:
    code, err = cli(["analyze", str(trace), "--csv", str(d), "--no-html", "-q"], capsys)
    assert code == 0, err
    return {f.name: f.read_text(encoding="utf-8") for f in sorted(d.glob("*.csv"))}


def _check_csv(files: dict[str, str], names: list[str]) -> None:
    for name, text in files.items():
        assert not formulas_in(text), (name, formulas_in(text)[:5])
    rows = list(csv.DictReader(io.StringIO(files["kernels.csv"], newline="")))
    assert sorted(unescape(r["name"]) for r in rows) == sorted(names)  # every name there, none lost


def test_no_csv_cell_reads_as_a_formula(trace, tmp_path, capsys):
    # GIVEN kernels named with formulas behind what spreadsheets skip or normalise
    names = hostile_names(trace, HOSTILE_CSV)
    # WHEN every CSV table is written, THEN none reads as a formula, and every name is there
    _check_csv(_csv_run(trace, tmp_path / "csv", capsys), names)


def _generated_cell(rng: random.Random) -> str:
    skip = [" ", "\t", "\u200b", "\u3000", "\xa0", "\ufeff", "\u2060", "\u2007", "\u00ad"]
    lead = "".join(rng.choice(skip) for _ in range(rng.randint(0, 4)))
    start = rng.choice(["=", "+", "-", "@", "\uff1d", "\uff0b", "\uff0d", "\uff20", "\ufe66", "\ufe62", "\ufe63",
                        "\ufe6b", "\u207a", "\u208a", "\u2212"])
    body = lead + start + rng.choice(["1+1", "SUM(A1)", "cmd|' /C calc'!A0", "HYPERLINK(\"http://x\")"])
    if rng.random() < 0.4:  # behind a line break inside the name
        body = rng.choice(["kernel", "k", ""]) + rng.choice(["\n", "\r", "\r\n", "\u2028", "\x0b"]) + body
    return body


def test_generated_csv_cells(trace, tmp_path, capsys):
    rng = random.Random(FIXED)
    cells = list(dict.fromkeys(_generated_cell(rng) for _ in range(20)))
    # the writer alone, on a table of them (and of numbers, which stay numbers)
    text = to_csv(pd.DataFrame({"name": cells, "value": [rng.uniform(-1e6, 1e6) for _ in cells]}))
    assert not formulas_in(text), formulas_in(text)[:5]
    parsed = list(csv.DictReader(io.StringIO(text, newline="")))
    assert [unescape(r["name"]) for r in parsed] == cells
    assert all(float(r["value"]) == float(r["value"]) for r in parsed)
    # and through analyze, as kernel names
    names = hostile_names(trace, cells)
    _check_csv(_csv_run(trace, tmp_path / "csv", capsys), names)
