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

ROOT = Path(__file__).resolve().parents[2]
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
        import multiprocessing.popen_fork
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


# -- 3 and 4: sums that cannot wrap, figures within physical bounds, odd GPU properties -------------

M = "CUDA_GPU_MEMORY_USAGE_EVENTS"
F = "CUDA_UM_GPU_PAGE_FAULT_EVENTS"


def copy_of(fixture_dir: Path, name: str, tmp_path: Path, *stmts: str) -> Path:
    """The fixture ``name`` changed by ``stmts`` (NOT NULL constraints dropped first, as a hostile
    writer may); every statement must apply."""
    import sqlite3

    from hostile_gen import loosen

    p = tmp_path / f"{name}.sqlite"
    shutil.copy(fixture_dir / f"{name}.sqlite", p)
    loosen(p)
    con = sqlite3.connect(p)
    for s in stmts:
        con.execute(s)
    con.commit()
    con.close()
    return p


def analyse(p: Path, tmp_path: Path, capsys, *extra: str) -> tuple[int, dict | None, str]:
    import json

    out = tmp_path / "out.json"
    code, _, err = cli(["analyze", str(p), "--json", str(out), "--no-html", "-q", "--force", *extra], capsys)
    return code, (json.loads(out.read_text()) if code == 0 else None), err


def negatives(o: object, path: str = "") -> list[str]:
    """Every negative number (and every magnitude of 2^62 or more) in a JSON document, by path."""
    bad = []
    if isinstance(o, dict):
        for k, v in o.items():
            bad += negatives(v, f"{path}.{k}")
    elif isinstance(o, list):
        for i, v in enumerate(o):
            bad += negatives(v, f"{path}[{i}]")
    elif isinstance(o, (int, float)) and not isinstance(o, bool) and (
            abs(o) >= 2 ** 62 or (o < 0 and not path.endswith("growth_per_iteration_bytes"))):  # memory may shrink
        bad.append(f"{path}={o}")
    return bad


def sound(d: dict) -> None:
    """The memory, unified-memory and launch figures, and the findings' words, within physical bounds."""
    assert not negatives(d["memory"]), negatives(d["memory"])
    assert not negatives(d["unified_memory"] or {}), negatives(d["unified_memory"])
    assert not negatives(d["launch"]), negatives(d["launch"])
    import re

    for f in d["findings"]:
        text = " ".join(str(f.get(k, "")) for k in ("title", "message", "suggestion"))
        assert not re.search(r"(?<![\w.>])[-\u2212]\d", text), (f["rule"], text)


def test_memory_byte_sums_reaching_2_62_refuse_the_trace(fixture_dir, tmp_path, capsys):
    rnd = random.Random(f"{SEED}-memsum")
    each = (1 << 48) - rnd.randint(1, 1000)  # each row under the per-row limit
    n = (1 << 62) // each + rnd.randint(1, 2000)
    p = copy_of(fixture_dir, "mem_growth", tmp_path,
                f"WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < {n}) "
                f"INSERT INTO {M} (start, globalPid, deviceId, contextId, address, pc, bytes, memKind, "
                f"memoryOperationType) SELECT (SELECT min(start) FROM {M}) + i * 1000, (SELECT globalPid FROM {M} "
                f"LIMIT 1), 0, 1, i * 4096, 0, {each}, 2, 0 FROM c")
    code, _, err = analyse(p, tmp_path, capsys)
    assert code == 6 and "2^62" in err, err


FREE_VARIANTS = ["free_without_alloc", "double_free", "free_before_alloc", "free_more_than_alloc",
                 "free_all_at_start", "free_zero_bytes_twice", "frees_on_other_device"]


@pytest.mark.parametrize("variant", FREE_VARIANTS)
def test_frees_that_would_leave_negative_live_memory_are_set_aside(fixture_dir, tmp_path, capsys, variant):
    rnd = random.Random(f"{SEED}-free-{variant}")
    k = rnd.randint(3, 40)
    lo = f"(SELECT min(start) FROM {M})"
    pid = f"(SELECT globalPid FROM {M} LIMIT 1)"
    cols = "start, globalPid, deviceId, contextId, address, pc, bytes, memKind, memoryOperationType"
    frees = {  # each: frees of device memory the program never held
        "free_without_alloc": f"INSERT INTO {M} ({cols}) SELECT start + 7, globalPid, deviceId, contextId, "
                              f"address + 1, pc, bytes * {rnd.randint(2, 50)}, memKind, 1 FROM {M} "
                              f"WHERE memKind = 2 ORDER BY random() LIMIT {k}",
        "double_free": f"INSERT INTO {M} ({cols}) SELECT start + 5 + j.j, globalPid, deviceId, contextId, address, "
                       f"pc, bytes, memKind, 1 FROM {M}, (SELECT 0 AS j UNION ALL SELECT 1 UNION ALL SELECT 2) j "
                       f"WHERE memKind = 2",
        "free_before_alloc": f"INSERT INTO {M} ({cols}) SELECT start - {rnd.randint(1, 10**9)}, globalPid, deviceId, "
                             f"contextId, address, pc, bytes, memKind, 1 FROM {M} WHERE memKind = 2",
        "free_more_than_alloc": f"INSERT INTO {M} ({cols}) SELECT start + 3, globalPid, deviceId, contextId, address,"
                                f" pc, bytes + {rnd.randint(1, 1 << 40)}, memKind, 1 FROM {M} WHERE memKind = 2",
        "free_all_at_start": f"INSERT INTO {M} ({cols}) VALUES ({lo} - 1, {pid}, 0, 1, 0, 0, "
                             f"{rnd.randint(1 << 30, 1 << 47)}, 2, 1)",
        "free_zero_bytes_twice": f"INSERT INTO {M} ({cols}) SELECT start + 5 + j.j, globalPid, deviceId, contextId, "
                                 f"address, pc, bytes * (j.j > 0) * {rnd.randint(2, 9)}, memKind, 1 FROM {M}, "
                                 f"(SELECT 0 AS j UNION ALL SELECT 1) j WHERE memKind = 2",
        "frees_on_other_device": f"INSERT INTO {M} ({cols}) SELECT start + 5, globalPid, 1, contextId, address, pc, "
                                 f"bytes, memKind, 1 FROM {M} WHERE memKind = 2",
    }[variant]
    p = copy_of(fixture_dir, "mem_growth", tmp_path, frees)
    code, d, err = analyse(p, tmp_path, capsys)
    assert code == 0, err
    sound(d)
    assert any("free(s)" in w and "set aside" in w for w in d["trace"]["warnings"]), d["trace"]["warnings"]


@pytest.mark.parametrize("value", ["-5", "NULL", "0", str(1 << 62)])
def test_total_memory_odd_with_memory_events_reads_as_unknown(fixture_dir, tmp_path, capsys, value):
    p = copy_of(fixture_dir, "mem_growth", tmp_path, f"UPDATE TARGET_INFO_GPU SET totalMemory = {value}")
    code, d, err = analyse(p, tmp_path, capsys)
    assert code == 0, err
    sound(d)
    assert all(r["device_total_bytes"] in (0, None) for r in d["memory"]["per_process"])


@pytest.mark.parametrize("case", range(3))
def test_page_fault_counts_near_2_62_never_wrap(fixture_dir, tmp_path, capsys, case):
    rnd = random.Random(f"{SEED}-faults-{case}")
    n = rnd.choice([(1 << 62) - 1, (1 << 62) - rnd.randint(1, 10**6), (1 << 63) - 1, -rnd.randint(1, 1 << 40)])
    p = copy_of(fixture_dir, "um_thrash", tmp_path,
                f"UPDATE {F} SET numberOfPageFaults = {n} WHERE rowid IN (SELECT rowid FROM {F} ORDER BY random() "
                f"LIMIT {rnd.randint(1, 20)})")
    code, d, err = analyse(p, tmp_path, capsys)
    assert code in (0, 6), err
    if code == 0:
        sound(d)
        assert any("page fault" in w for w in d["trace"]["warnings"]), d["trace"]["warnings"]


@pytest.mark.parametrize("case", range(2))
def test_fault_rows_ending_before_they_start_are_set_aside(fixture_dir, tmp_path, capsys, case):
    rnd = random.Random(f"{SEED}-fault-end-{case}")
    p = copy_of(fixture_dir, "um_thrash", tmp_path,
                f"UPDATE {F} SET end = start - {rnd.randint(1, 10**11)} WHERE rowid IN (SELECT rowid FROM {F} "
                f"ORDER BY random() LIMIT {rnd.randint(1, 40)})")
    code, d, err = analyse(p, tmp_path, capsys)
    assert code == 0, err
    sound(d)
    assert any("page fault" in w for w in d["trace"]["warnings"]), d["trace"]["warnings"]


@pytest.mark.parametrize("case", range(2))
def test_kernels_before_their_launch_call_never_queue_negatively(fixture_dir, tmp_path, capsys, case):
    import csv

    rnd = random.Random(f"{SEED}-before-launch-{case}")
    k = "CUPTI_ACTIVITY_KIND_KERNEL"
    shift = rnd.randint(10**6, 10**9)
    p = copy_of(fixture_dir, "launch_eager", tmp_path,
                f"UPDATE {k} SET start = start - {shift}, end = end - {shift} WHERE rowid % {rnd.randint(1, 3)} = 0")
    code, d, err = analyse(p, tmp_path, capsys, "--csv", str(tmp_path / "csv"))
    assert code == 0, err
    sound(d)
    with open(tmp_path / "csv" / "launches.csv", newline="") as f:
        for row in csv.DictReader(f):
            assert float(row["queue_med_ns"]) >= 0, row


@pytest.mark.parametrize("case", range(2))
def test_nvtx_ranges_far_longer_than_the_capture_are_set_aside(fixture_dir, tmp_path, capsys, case):
    rnd = random.Random(f"{SEED}-nvtx-long-{case}")
    days = rnd.uniform(1.0, 13.0)
    n = "NVTX_EVENTS"
    long = int(days * 86400e9)
    change = [f"end = start + {long}",  # ends days after the capture
              f"start = start - {long}"][case % 2]  # starts days before it (and widens the starts' extent)
    p = copy_of(fixture_dir, "nested_steps", tmp_path,
                f"UPDATE {n} SET {change} WHERE rowid IN (SELECT rowid FROM {n} "
                f"WHERE end IS NOT NULL ORDER BY random() LIMIT {rnd.randint(1, 5)})")
    code, d, err = analyse(p, tmp_path, capsys)
    assert code == 0, err
    assert d["windows"]["capture"]["dur_ns"] < 3600 * 10**9, d["windows"]["capture"]
    assert any("set aside" in w and "nvtx" in w for w in d["trace"]["warnings"]), d["trace"]["warnings"]


# -- 7: an unknown migration cause, invisible characters before "=" in CSV ---------------------------

def test_an_unknown_migration_cause_is_named_unknown_n(fixture_dir, tmp_path, capsys):
    cause = random.Random(f"{SEED}-cause").randint(5, 10**6)
    p = copy_of(fixture_dir, "um_thrash", tmp_path,
                f"UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET migrationCause = {cause} WHERE copyKind IN (11, 12) AND "
                "rowid % 3 = 0")
    code, d, err = analyse(p, tmp_path, capsys)
    assert code == 0, err
    assert f"unknown ({cause})" in d["unified_memory"]["by_cause"], d["unified_memory"]["by_cause"]


INVISIBLE = ["\u3164", "\u115f", "\u1160", "\uffa0", "\u2800", "\u034f", "\u061c", "\u200e", "\u200f", "\u180e",
             "\u17b4", "\u17b5", "\ufe0f", "\u2061", "\U000e0020", "\U0001d173"]


@pytest.mark.parametrize("case", range(4))
def test_invisible_characters_before_a_formula_are_neutralised_in_csv(case):
    from nsysan.report.jsonout import csv_safe

    rnd = random.Random(f"{SEED}-csv-{case}")
    for ch in INVISIBLE:
        lead = "".join(rnd.choice([ch, " ", "\u3000", "\u200b", ch]) for _ in range(rnd.randint(1, 4)))
        v = lead + rnd.choice("=+-@") + "HYPERLINK(\"http://x\")"
        out = csv_safe(v)  # a leading ', or the invisible character written visibly (\u200f)
        assert out.startswith("'") or out.lstrip(" \u3000\u200b" + ch).startswith("\\"), repr(v)


# -- 6: nsysan profile's failures, each to its documented code ---------------------------------------

def _profile(tmp_path: Path, fixture_dir: Path, mode: str, out: str = "t") -> subprocess.CompletedProcess[str]:
    from test_inputs_profile import FAKE_NSYS, fake_nsys

    fake, path = fake_nsys(tmp_path, FAKE_NSYS.replace(
        'if mode == "none" or', 'if mode == "exit3":\n        sys.exit(3)\n    if mode == "none" or'))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NSYSAN_", "FAKE_"))}
    env.update(PATH=path, PYTHONPATH=str(ROOT), NSYSAN_NSYS=str(fake), XDG_CACHE_HOME=str(tmp_path / "cache"),
               FAKE_LOG=str(tmp_path / "nsys.log"), FAKE_SQLITE=str(fixture_dir / "launch_graph.sqlite"),
               FAKE_PIDS=str(tmp_path / "pids"), FAKE_MODE=mode)
    r = subprocess.run([sys.executable, "-m", "nsysan", "profile", "-o", out, "--", "true"], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=60, check=False)
    assert "Traceback" not in r.stderr, r.stderr
    return r


@pytest.mark.parametrize("mode", ["none", "exit3"])
def test_profile_without_a_trace_is_exit_12(tmp_path, fixture_dir, mode):
    r = _profile(tmp_path, fixture_dir, mode)
    assert r.returncode == 12 and "t.sqlite" in r.stderr and "error:" in r.stderr, r.stderr


def test_profile_output_name_over_255_bytes_is_exit_12(tmp_path, fixture_dir):
    r = _profile(tmp_path, fixture_dir, "ok", out="n" * random.Random(f"{SEED}-name").randint(256, 400))
    assert r.returncode == 12 and "255 bytes" in r.stderr and len(r.stderr.strip().splitlines()) <= 2, r.stderr
