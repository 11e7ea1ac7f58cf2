"""Hostile and broken input: each case gets a correct analysis or a clear NsysanError, never a crash,
hang or partial report; the input is never modified. Plus a fuzzing run over mutated real exports."""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from factories import apply_sql

import nsysan
from nsysan.cli import main
from nsysan.errors import NsysanError
from nsysan.report import html, jsonout, view

SRC = "launch_graph"  # the smallest real fixture (766 KB)


def mutate(fixture_dir: Path, tmp_path: Path, name: str, *sql: str) -> Path:
    p = tmp_path / f"{name}.sqlite"
    shutil.copy(fixture_dir / f"{SRC}.sqlite", p)
    apply_sql(p, *sql)
    return p


def full_run(p: Path) -> nsysan.Trace:
    before = hashlib.sha256(p.read_bytes()).hexdigest()
    t = nsysan.open_trace(p)
    assert t.self_check() == []
    a = nsysan.analyze(t)
    html.render(view.build(a))
    jsonout.to_json(a)
    assert hashlib.sha256(p.read_bytes()).hexdigest() == before
    return t


CASES = {
    "text_in_time_column": (["UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET start='abc' WHERE rowid=5"],
                            "non-numeric start/end"),
    "real_in_integer_column": (['UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET "end"="end"+0.5 WHERE rowid<50'], None),
    "blob_correlation_ids": (["UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET correlationId=x'0102' WHERE rowid<10"], None),
    "duplicate_correlation_ids": (["UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET correlationId=7"], None),
    "invalid_utf8_name": (["UPDATE StringIds SET value=CAST(x'fffe41c328' AS TEXT) WHERE id IN "
                           "(SELECT nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME LIMIT 1)"], None),
    "invalid_utf8_nvtx": (["UPDATE NVTX_EVENTS SET text=CAST(x'fffe41c328' AS TEXT) WHERE eventType=59"], None),
    "mb_long_nvtx_text": (["UPDATE NVTX_EVENTS SET text=printf('%.*c', 3000000, 'x') WHERE rowid IN "
                           "(SELECT rowid FROM NVTX_EVENTS WHERE eventType=59 LIMIT 1)"], "were shortened to their first 8,192"),
    "reversed_intervals": (['UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET start="end"+1000 WHERE rowid<20'],
                           "end is before their start"),
    "negative_times": (['UPDATE CUPTI_ACTIVITY_KIND_GRAPH_TRACE SET start=-start, "end"=-"end" WHERE rowid<3'],
                       "end is before their start"),
    "empty_tables": (["DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME", "DELETE FROM StringIds"], None),
    "table_replaced_by_view": (["DROP TABLE NVTX_EVENTS", "CREATE VIEW NVTX_EVENTS AS SELECT 1 AS start"], None),
    "html_in_names": (["UPDATE StringIds SET value='<img src=x onerror=alert(1)>' WHERE id IN "
                       "(SELECT nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME LIMIT 1)"], None),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_broken_content_gives_a_correct_analysis(case, fixture_dir, tmp_path):
    sql, warning = CASES[case]
    t = full_run(mutate(fixture_dir, tmp_path, case, *sql))
    if warning:
        assert any(warning in w for w in t.meta.warnings), t.meta.warnings


def test_invalid_times_are_dropped_not_zeroed(fixture_dir, tmp_path):
    t = nsysan.open_trace(mutate(fixture_dir, tmp_path, "t", "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET start='x' WHERE rowid=5"))
    assert int(t.cuda_api["start_ns"].min()) > 0 and int(t.cuda_api["dur_ns"].max()) < 10**11


def test_missing_string_table_is_not_an_export(fixture_dir, tmp_path, capsys):
    p = mutate(fixture_dir, tmp_path, "nostr", "DROP TABLE StringIds")
    assert main(["analyze", str(p), "--no-html", "-q"]) == 7
    assert "not an Nsight Systems export" in capsys.readouterr().err


def test_cut_mid_page_and_truncated_files(fixture_dir, tmp_path):
    data = (fixture_dir / f"{SRC}.sqlite").read_bytes()
    for frac in (0.05, 0.5, 0.97):
        cut = int(len(data) * frac) // 4096 * 4096 + 1234  # not on a page boundary
        p = tmp_path / f"cut{frac}.sqlite"
        p.write_bytes(data[:cut])
        try:
            full_run(p)
        except NsysanError as e:
            assert str(p) in str(e) and e.exit_code in (4, 5, 6, 7)


def test_write_locked_and_being_written(fixture_dir, tmp_path):
    p = tmp_path / "locked.sqlite"
    shutil.copy(fixture_dir / f"{SRC}.sqlite", p)
    holder = sqlite3.connect(p, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another process writing: we take no lock and are not blocked
    holder.execute("CREATE TABLE _being_written(x)")  # dirties a page: SQLite creates the -journal
    assert p.with_name(p.name + "-journal").exists()
    try:
        t = full_run(p)
        assert len(t.kernels) + len(t.graph_launches) > 0
        assert any("may still be being written" in w for w in t.meta.warnings)  # its -journal is there
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def _as_nobody(argv: list[str]) -> tuple[int, str]:
    """Run the CLI in a forked child that dropped root to uid/gid 65534, so that file permissions
    apply (root reads any file). nsysan is already imported, so the child needs no access to /root."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 99
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            sys.stderr = os.fdopen(w, "w")
            code = main(argv)
            sys.stderr.flush()
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r) as f:
        err = f.read()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), err


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX permissions")
def test_unreadable_file(fixture_dir, tmp_path, capsys):
    if os.geteuid() == 0:  # a world-traversable folder, a file nobody may read, checked as user nobody
        d = Path(tempfile.mkdtemp(prefix="nsysan-noperm-"))
        d.chmod(0o755)
        p = d / "noperm.sqlite"
        shutil.copy(fixture_dir / f"{SRC}.sqlite", p)
        p.chmod(0)
        try:
            code, err = _as_nobody(["analyze", str(p), "--no-html", "-q"])
        finally:
            shutil.rmtree(d)
    else:
        p = tmp_path / "noperm.sqlite"
        shutil.copy(fixture_dir / f"{SRC}.sqlite", p)
        p.chmod(0)
        code, err = main(["analyze", str(p), "--no-html", "-q"]), capsys.readouterr().err
    assert code == 4, err
    assert "permission denied" in err.lower() and "noperm.sqlite" in err


def test_no_traceback_from_the_command_line_on_garbage(tmp_path):
    p = tmp_path / "garbage.sqlite"
    p.write_bytes(b"SQLite format 3\x00" + os.urandom(50_000))
    r = subprocess.run([sys.executable, "-m", "nsysan", "analyze", str(p), "--no-html", "-q"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode in (4, 5, 6, 7) and "Traceback" not in r.stderr and str(p) in r.stderr


def test_command_line_output_complete_and_closed_pipe_quiet():
    """The console entry point exits straight after main: what it printed is all there (flushed),
    and a reader that stops early (| head) costs neither a traceback nor a failure code."""
    r = subprocess.run([sys.executable, "-m", "nsysan", "rules"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stderr == ""
    assert r.stdout.count("\n") > 20 and r.stdout.rstrip().splitlines()[-1].strip()
    p = subprocess.Popen([sys.executable, "-m", "nsysan", "rules"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout is not None and p.stderr is not None
    p.stdout.read(10)
    p.stdout.close()  # the reader goes away mid-output
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 0 and "Traceback" not in err


def fuzz(src: Path, workdir: Path, n: int, seed: int) -> dict[str, int]:
    """Flip random bytes (headers, b-tree pages, records) in copies of a real export; every run must end in
    an analysis or an NsysanError. Returns counts per outcome."""
    rng = random.Random(seed)
    data = bytearray(src.read_bytes())
    out = {"analysed": 0, "clean_error": 0}
    for i in range(n):
        m = bytearray(data)
        for _ in range(rng.choice((1, 4, 16, 64))):
            pos = rng.randrange(100, len(m)) if rng.random() < 0.9 else rng.randrange(0, 100)
            m[pos] = rng.randrange(256)
        p = workdir / f"fuzz{i}.sqlite"
        p.write_bytes(bytes(m))
        try:
            a = nsysan.analyze(nsysan.open_trace(p))
            jsonout.to_json(a)
            out["analysed"] += 1
        except NsysanError:
            out["clean_error"] += 1
        p.unlink()
    return out


def test_fuzzing_mutated_exports_never_crashes(fixture_dir, tmp_path):
    n = int(os.environ.get("NSYSAN_FUZZ_N", "40"))
    res = fuzz(fixture_dir / f"{SRC}.sqlite", tmp_path, n, seed=1234)
    assert sum(res.values()) == n
    print(f"fuzz: {n} mutated exports: {res}")
