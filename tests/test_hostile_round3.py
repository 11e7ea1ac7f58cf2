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
