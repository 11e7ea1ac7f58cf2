"""Issue 54, hostile input round 3 (signals are ``test_hostile_signals.py``): every number a user
types exits 2 naming it; sums that would wrap and figures outside physical bounds never reach a
finding, the JSON or a page; odd GPU properties read as unknown; a full disk and ``nsysan profile``'s
failures end in their documented exit codes; small ones (an out-dir that is a file, one line per
failure, one-line usage errors, unknown enum values, invisible characters before ``=`` in CSV). Each
case failed before its fix; the generated ones come from a seeded ``random.Random``."""

from __future__ import annotations

import os
import random
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from nsysan.cli import main

ROOT = Path(__file__).resolve().parents[1]
SEED = int(os.environ.get("NSYSAN_HOSTILE_SEED", "54"))
SRC = "launch_graph_nodes"


@pytest.fixture
def trace(fixture_dir: Path, tmp_path: Path) -> Path:
    p = tmp_path / "t.sqlite"
    shutil.copy(fixture_dir / f"{SRC}.sqlite", p)
    return p


def cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as e:
        code = int(e.code or 0)
    out = capsys.readouterr()
    assert "Traceback" not in out.err, out.err
    return code, out.out, out.err


def cli_proc(argv: list[str], cwd: Path | None = None, timeout: float = 120, preexec_fn=None,
             **env: str) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([sys.executable, "-m", "nsysan", *argv], capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, "PYTHONPATH": str(ROOT), **env}, errors="replace", cwd=cwd,
                       preexec_fn=preexec_fn)
    assert "Traceback" not in r.stderr, r.stderr
    return r


# -- 2. every number a user types: exit 2 naming it ------------------------------------------------

def _huge(rnd: random.Random) -> str:
    """A number no float or int64 holds: 1 and hundreds of zeros, hundreds of digits, or an exponent."""
    return rnd.choice([lambda: "1" + "0" * rnd.randint(20, 400),
                       lambda: "".join(rnd.choice("123456789") for _ in range(rnd.randint(20, 400))),
                       lambda: f"{rnd.randint(1, 9)}e{rnd.randint(309, 999)}",
                       lambda: f"-{rnd.randint(1, 9)}{'0' * rnd.randint(20, 400)}"])()


@pytest.mark.parametrize("case", range(8))
def test_every_number_a_user_types_exits_2_naming_it(trace, tmp_path, capsys, case):
    rnd = random.Random(f"{SEED}-number-{case}")
    n = _huge(rnd)
    option = rnd.choice(["--max-events", "--min-gap-us", "--warmup-factor", "--jobs", "--set", "--config"])
    if option == "--set":
        argv, named = ["--set", f"launch-bound.min_kernels={n}"], "launch-bound.min_kernels"
    elif option == "--config":
        cfg = tmp_path / "rules.json"
        cfg.write_text(f'{{"rules": {{"launch-bound": {{"min_kernels": {n}}}}}}}')
        argv, named = ["--config", str(cfg)], "launch-bound.min_kernels"
    else:
        argv, named = [option, n], option
    code, _, err = cli(["analyze", str(trace), "-q", "--no-html", *argv], capsys)
    assert code == 2 and named in err and (n[:20] in err or "Infinity" in err), err  # (JSON reads 2e793 as inf)
    assert len(err.strip().splitlines()) <= 2, err  # one line and a hint


def test_a_bad_option_value_is_one_line_and_a_hint_not_the_usage_block(trace, capsys):
    code, _, err = cli(["analyze", str(trace), "--max-events", "many"], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 2 and "--max-events" in lines[0] and "'many'" in lines[0], err
    assert lines[1].startswith("nsysan: hint:") and "usage:" not in err


# -- 5 and 7: a full disk, a read-only out-dir, an out-dir that is a file: exit 12, one line ---------

def _three(trace: Path) -> list[str]:
    out = []
    for stem in "ABC":
        p = trace.with_name(f"{stem}.sqlite")
        shutil.copy(trace, p)
        out.append(str(p))
    return out


def _limit_file_size(nbytes: int):
    def pre() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG), as on a full disk
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))
    return pre


@pytest.mark.parametrize("case", range(2))
def test_a_full_disk_during_out_dir_is_exit_12_and_nothing_looks_complete(trace, tmp_path, case):
    rnd = random.Random(f"{SEED}-full-{case}")
    room = rnd.choice([4096, rnd.randint(20_000, 400_000)])  # no output fits, or the JSON but not the page
    od = tmp_path / "od"
    r = cli_proc(["analyze", *_three(trace), "--out-dir", str(od), "--jobs", str(rnd.choice([1, 2])), "-q"],
                 preexec_fn=_limit_file_size(room), PYTHONDONTWRITEBYTECODE="1")  # no cut .pyc either
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 12, r.stderr
    assert lines[0].startswith("nsysan: error:") and "cannot write" in lines[0] and len(lines) <= 2, r.stderr
    names = sorted(p.name for p in od.iterdir()) if od.exists() else []
    assert not [n for n in names if n.startswith(("summary", "."))], names
    for stem in "ABC":  # a trace's outputs: both or neither
        assert {f"{stem}.json", f"{stem}.html"} & set(names) in (set(), {f"{stem}.json", f"{stem}.html"}), names


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to drop to nobody")
def test_a_read_only_out_dir_is_one_line(trace, tmp_path):
    import tempfile

    top = Path(tempfile.mkdtemp(prefix="nsysan-ro-"))
    try:
        top.chmod(0o755)
        traces = []
        for stem in "ABC":
            shutil.copy(trace, top / f"{stem}.sqlite")
            (top / f"{stem}.sqlite").chmod(0o644)
            traces.append(str(top / f"{stem}.sqlite"))
        od = top / "ro"
        od.mkdir()
        od.chmod(0o555)

        # every module imported first (nobody may not read this Python's library), then as nobody
        assert main(["analyze", traces[0], "--json", str(top / "warm.json"), "-q"]) == 0
        import concurrent.futures.process  # noqa: F401
        import multiprocessing.popen_fork  # noqa: F401
        import multiprocessing.synchronize  # noqa: F401
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 99
            try:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
                sys.stderr = os.fdopen(w, "w")
                code = main(["analyze", *traces, "--out-dir", str(od), "-q", "--jobs", "2"])
                sys.stderr.flush()
            finally:
                os._exit(code)
        os.close(w)
        err = os.fdopen(r).read()
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        lines = err.strip().splitlines()
        assert code == 12 and len(lines) == 1 and "permission denied" in lines[0], err
        assert list(od.iterdir()) == []
    finally:
        shutil.rmtree(top)


def test_an_out_dir_that_is_a_file_is_exit_12(trace, tmp_path, capsys):
    f = tmp_path / "afile"
    f.write_text("x")
    code, _, err = cli(["analyze", str(trace), "--out-dir", str(f), "-q"], capsys)
    assert code == 12 and "not a directory" in err and f.read_text() == "x", err
