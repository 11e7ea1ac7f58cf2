"""Issue 18, case by case: outputs never destroy anything, no hang or exhaustion from a small file,
one line and a documented exit code for every bad input, option or output, nothing from a trace or
a file name reaches the terminal raw. Each test here failed before its fix."""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from factories import apply_sql
from own_peak import MAIN_THEN_PEAK, cli_peak_kb

import nsysan
from nsysan.analysis import analyze
from nsysan.cli import main
from nsysan.options import positive_jobs
from nsysan.trace.columns import from_rows
from nsysan.trace.strings import CUT_MARK, Strings

UNKNOWN_NAME = "[unknown name]"

SRC = "launch_graph_nodes"  # a small real fixture with kernels (1.7 MB)
ROOT = Path(__file__).resolve().parents[2]


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture
def trace(fixture_dir: Path, tmp_path: Path) -> Path:
    p = tmp_path / "t.sqlite"
    shutil.copy(fixture_dir / f"{SRC}.sqlite", p)
    return p


def mutated(trace: Path, *sql: str, loosen: bool = False) -> Path:
    """The trace changed by SQL (``loosen``: NOT NULL constraints dropped first, as a hostile writer could)."""
    if loosen:
        from hostile_gen import loosen as drop_not_null

        drop_not_null(trace)
    apply_sql(trace, *sql)
    return trace


def cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """main() in process; argparse's own usage errors exit through SystemExit."""
    try:
        code = main(argv)
    except SystemExit as e:
        code = int(e.code or 0)
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return code, out.out, out.err


def cli_proc(argv: list[str], timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([sys.executable, "-m", "nsysan", *argv], capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, "PYTHONPATH": str(ROOT), **env}, errors="replace")
    assert "Traceback" not in r.stderr, r.stderr
    return r


# -- data loss ---------------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["same", "symlink", "hardlink", "csv"])
def test_an_output_is_never_the_input(trace, tmp_path, capsys, how):
    before = sha(trace)
    if how == "same":
        argv = ["--json", str(trace)]
    elif how == "symlink":
        (tmp_path / "r.html").symlink_to(trace)
        argv = ["--html", str(tmp_path / "r.html")]
    elif how == "hardlink":
        os.link(trace, tmp_path / "r.json")
        argv = ["--json", str(tmp_path / "r.json")]
    else:  # a trace called kernels.csv inside the --csv folder
        d = tmp_path / "tables"
        d.mkdir()
        trace = trace.rename(d / "kernels.csv")
        argv = ["--csv", str(d), "--no-html"]
    code, _, err = cli(["analyze", str(trace), *argv, "--force", "-q"], capsys)
    assert code == 2 and "input" in err
    assert sha(trace) == before


def test_json_and_html_on_one_path(trace, tmp_path, capsys):
    out = tmp_path / "x.json"
    code, _, err = cli(["analyze", str(trace), "--json", str(out), "--html", str(out), "--force", "-q"], capsys)
    assert code == 2 and "same file" in err and not out.exists()
    code, _, err = cli(["analyze", str(trace), "--json", str(tmp_path / "y.html"), "--force", "-q"], capsys)
    assert code == 2 and "same file" in err  # the default HTML next to a JSON named .html


def test_json_with_out_dir_is_refused_not_ignored(trace, tmp_path, capsys):
    code, _, err = cli(["analyze", str(trace), "--json", str(tmp_path / "x.json"), "--out-dir", str(tmp_path / "o"),
                        "-q"], capsys)
    assert code == 2 and "--out-dir" in err


# -- hangs and exhaustion ------------------------------------------------------------------------

@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFOs")
def test_fifo_is_refused_before_any_open(tmp_path):
    fifo = tmp_path / "trace.sqlite"
    os.mkfifo(fifo)
    r = cli_proc(["analyze", str(fifo), "-q", "--no-html"], timeout=60)  # the prefetch is on by default
    assert r.returncode == 3 and "not a regular file" in r.stderr
    json_fifo = tmp_path / "base.json"
    os.mkfifo(json_fifo)
    r = cli_proc(["diff", str(json_fifo), str(json_fifo), "-q"], timeout=60)
    assert r.returncode == 3 and "not a regular file" in r.stderr


def test_event_table_view_is_never_run(trace):
    mutated(trace, "ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL RENAME TO k2",
            "CREATE VIEW CUPTI_ACTIVITY_KIND_KERNEL AS WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 "
            "FROM r) SELECT k2.* FROM k2, r")
    r = cli_proc(["analyze", str(trace), "--max-events", "1000", "-q", "--no-html"], timeout=90)
    # refused as damaged (issue 49 item 9), never run and never read as a trace without kernels
    assert r.returncode == 6 and "CUPTI_ACTIVITY_KIND_KERNEL is a view that can run without end" in r.stderr, r.stderr


def test_a_view_in_no_event_table_s_place_is_left_unread(trace):
    mutated(trace, "CREATE VIEW extra AS WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT x FROM r")
    t = nsysan.open_trace(trace)
    assert len(t.kernels) > 0 and any("views or virtual tables" in w for w in t.meta.warnings)


def test_max_events_bounds_the_other_tables(trace, capsys):
    code, _, err = cli(["analyze", str(trace), "--max-events", "25000", "--no-html", "-q"], capsys)
    assert code == 0, err  # 22,131 events
    mutated(trace, "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r WHERE x < 30000) "
                   "INSERT INTO StringIds(id, value) SELECT 100000 + x, 'junk' FROM r")
    code, _, err = cli(["analyze", str(trace), "--max-events", "25000", "--no-html", "-q"], capsys)
    assert code == 9 and "StringIds" in err


def test_string_ids_memory_follows_rows_not_id_values():
    s = Strings(from_rows(["id", "value"], list(zip([0, 1, 2 ** 31, 2 ** 62], ["a", "b", "c", "d"])))[0])
    assert s.code_of_id.nbytes < 1000
    cat = s.resolve(np.array([0, 2 ** 31, 2 ** 62, 5, -1]), column="k.name")
    assert list(cat.astype(object)) == ["a", "c", "d", UNKNOWN_NAME, UNKNOWN_NAME]


def test_one_long_string_among_many_costs_no_fixed_width_copy():
    n = 20_000  # before: np.unique over a fixed-width copy, n x 8192 x 4 bytes = 650 MB
    values = [f"s{i}" for i in range(n)] + ["x" * 8192]
    tracemalloc.start()
    try:
        s = Strings(from_rows(["id", "value"], list(zip(range(n + 1), values)))[0])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(s.categories) == n + 1 and list(s.categories[:3]) == sorted(values)[:3]
    assert peak < 60 << 20, peak


def test_huge_string_id_in_a_real_trace_costs_no_memory(trace):
    mutated(trace, "INSERT INTO StringIds(id, value) VALUES (2147483648, 'x')")
    rc, peak_kb, err = cli_peak_kb(["analyze", str(trace), "--no-html", "-q"], root=str(ROOT))
    assert rc == 0, err
    assert peak_kb < 1_000_000, peak_kb  # the child's own; 139 MB; before: 4.2 GB for a table sized by the id


def test_a_child_s_peak_is_its_own_not_its_parent_s():
    """The measurement above, started by a parent that once held 600 MB (as a pytest worker can under
    the full suite): ru_maxrss read the parent's peak (1,023,440 kB once); the child's own VmHWM does not."""
    parent = ("import subprocess, sys; x = bytearray(600 << 20); x[::4096] = b'\\1' * len(x[::4096]); del x; "
              "r = subprocess.run([sys.executable, '-c', sys.argv[1], 'example'], capture_output=True, text=True); "
              "print(r.stdout.split()[-1])")
    r = subprocess.run([sys.executable, "-c", parent, MAIN_THEN_PEAK], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    assert int(r.stdout.split()[-1]) < 300_000, r.stdout  # kB: `nsysan example` alone, not the parent's 600 MB


def test_jobs_are_validated_and_capped(capsys, trace):
    jobs = positive_jobs
    assert jobs(100_000, 2) <= 2 and jobs(0, 1) == 1
    assert jobs(100_000, 1000) <= (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    code, _, err = cli(["analyze", str(trace), "--jobs", "-1", "-q"], capsys)
    assert code == 2 and "--jobs" in err


# -- malformed exports: analysed, with a warning --------------------------------------------------

@pytest.mark.parametrize("value", ["999999", "-5", "NULL", "'abc'"])
def test_kernel_name_ids_that_name_nothing(trace, value):
    mutated(trace, f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName={value} WHERE rowid < 100", loosen=True)
    t = nsysan.open_trace(trace)
    assert (t.kernels["name"] == UNKNOWN_NAME).sum() == 99
    assert any("kernels.name: 99 row(s)" in w for w in t.meta.warnings)
    nsysan.analyze(t)


@pytest.mark.parametrize("sql", ["UPDATE TARGET_INFO_GPU SET name=NULL",
                                 "UPDATE ANALYSIS_DETAILS SET duration=1e300, startTime=1e300",
                                 "UPDATE StringIds SET value=NULL WHERE id=3"])
def test_odd_values_elsewhere(trace, capsys, sql):
    mutated(trace, sql, loosen=True)
    code, _, err = cli(["analyze", str(trace), "--no-html", "-q"], capsys)
    assert code == 0, err


# -- options and config: exit 2, naming the option ----------------------------------------------

@pytest.mark.parametrize("argv, named", [
    (["--set", "launch-bound.min_kernels=abc"], "launch-bound.min_kernels"),
    (["--set", "launch-bound.min_kernels=NaN"], "launch-bound.min_kernels"),
    (["--min-gap-us", "inf"], "--min-gap-us"),
    (["--min-gap-us", "nan"], "--min-gap-us"),
    (["--warmup-factor", "-1"], "--warmup-factor"),
    (["--max-events", "-5"], "--max-events"),
    (["--scheduler", "notaurl"], "--scheduler"),
    (["--scheduler", "tcp://h:1", "--scheduler-timeout", "nan"], "--scheduler-timeout"),
])
def test_bad_options(trace, capsys, argv, named):
    code, _, err = cli(["analyze", str(trace), "-q", "--no-html", *argv], capsys)
    assert code == 2 and named in err


@pytest.mark.parametrize("content, said", [
    (b'{"rules": {"launch-bound": {"min_kernels": "many"}}}', "launch-bound.min_kernels"),
    (b'{"rules": {"launch-bound": 5}}', "rules.launch-bound"),
    (b"[1, 2]", "top level"),
    (b'\xff\xfe{"rules": {}}', "UTF-8"),
    (b"[" * 100_000, "nested too deeply"),
], ids=["wrong-type", "not-an-object", "list", "not-utf8", "deep"])
def test_bad_config(trace, tmp_path, capsys, content, said):
    cfg = tmp_path / "rules.json"
    cfg.write_bytes(content)
    code, _, err = cli(["analyze", str(trace), "-q", "--no-html", "--config", str(cfg)], capsys)
    assert code == 2 and said in err and "--config" in err


# -- outputs: exit 12 (or 2 when known before any work), the old file kept ------------------------

def _in_child(fn) -> int:
    """Run fn() in a forked child; its return value is the exit status."""
    pid = os.fork()
    if pid == 0:
        code = 99
        try:
            code = fn()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_full_disk_keeps_the_old_file(trace, tmp_path):
    old = tmp_path / "r.json"
    old.write_text("OLD REPORT")

    def child() -> int:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))  # writes past 4 kB fail: EFBIG, like ENOSPC
        sys.stderr = open(tmp_path / "err", "w")
        code = main(["analyze", str(trace), "--json", str(old), "--no-html", "--force", "-q"])
        sys.stderr.flush()
        return code

    assert _in_child(child) == 12
    assert old.read_text() == "OLD REPORT"
    assert "cannot write" in (tmp_path / "err").read_text()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".nsysan-")] == []  # no temp file left


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to drop to nobody")
def test_read_only_directory(trace, tmp_path):
    import tempfile

    top = Path(tempfile.mkdtemp(prefix="nsysan-ro-"))  # world-traversable, unlike pytest's tmp_path
    try:
        top.chmod(0o755)
        t = top / "t.sqlite"
        shutil.copy(trace, t)
        t.chmod(0o644)
        d = top / "ro"
        d.mkdir()
        d.chmod(0o555)
        r, w = os.pipe()

        def child() -> int:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            sys.stderr = os.fdopen(w, "w")
            code = main(["analyze", str(t), "--json", str(d / "r.json"), "--no-html", "-q"])
            sys.stderr.flush()
            return code

        code = _in_child(child)
        os.close(w)
        err = os.fdopen(r).read()
        assert code == 12 and "permission denied" in err, err
    finally:
        shutil.rmtree(top)


def test_output_paths_that_cannot_be(trace, tmp_path, capsys):
    f = tmp_path / "afile"
    f.write_text("x")
    code, _, err = cli(["analyze", str(trace), "--json", str(f / "r.json"), "-q"], capsys)
    assert code == 12 and "not a directory" in err  # issue 40: an output that cannot be written
    code, _, err = cli(["analyze", str(trace), "--out-dir", str(f), "-q"], capsys)
    assert code == 12 and "not a directory" in err  # issue 54: as the README's table says
    code, _, err = cli(["analyze", str(trace), "--json", str(tmp_path / ("n" * 300 + ".json")), "-q"], capsys)
    assert code == 12 and "255" in err


def test_default_report_name_of_a_long_trace_name(trace, tmp_path, monkeypatch, capsys):
    long = trace.rename(tmp_path / ("a" * 245 + ".sqlite"))
    monkeypatch.chdir(tmp_path)
    code, _, err = cli(["analyze", str(long), "--force"], capsys)
    assert code == 0, err
    html = [p for p in tmp_path.iterdir() if p.name.endswith(".nsysan.html")]
    assert len(html) == 1 and len(html[0].name) <= 255


def test_same_stem_twice_in_one_out_dir(trace, tmp_path, capsys):
    other = tmp_path / "sub"
    other.mkdir()
    shutil.copy(trace, other / trace.name)
    code, _, err = cli(["analyze", str(trace), str(other / trace.name), "--out-dir", str(tmp_path / "o"), "-q"],
                       capsys)
    assert code == 2 and "same name" in err


def test_undecodable_file_name(trace, tmp_path):
    odd = Path(os.fsdecode(os.fsencode(str(tmp_path)) + b"/\xff\xfe trace.sqlite"))
    trace.rename(odd)
    r = cli_proc(["analyze", str(odd), "--no-html", "--json", str(tmp_path / "r.json")], timeout=120)
    assert r.returncode == 0, r.stderr
    json.loads((tmp_path / "r.json").read_text("utf-8"))
    assert "\\xff\\xfe trace.sqlite" in r.stdout


# -- diff and compare on broken JSON --------------------------------------------------------------

@pytest.fixture(scope="module")
def saved(analysis) -> dict:
    from nsysan.report.jsonout import analysis_to_dict

    return json.loads(json.dumps(analysis_to_dict(analysis("launch_eager"))))


@pytest.mark.parametrize("breakage, field", [
    (lambda d: d.__setitem__("findings", [1, 2]), "findings[0]"),
    (lambda d: d.__setitem__("iterations", 7), "iterations"),
    (lambda d: d["kernels"]["by_name"][0].__setitem__("total_ns", None), "kernels.by_name[0].total_ns"),
    (lambda d: d["iterations"]["stats"].__setitem__("p50_ns", "fast"), "iterations.stats.p50_ns"),
    (lambda d: d["gpu"].__setitem__("steady", {"a": 1}), "gpu.steady"),
])
def test_diff_names_the_broken_field(saved, tmp_path, capsys, breakage, field):
    bad = json.loads(json.dumps(saved))
    breakage(bad)
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    (tmp_path / "good.json").write_text(json.dumps(saved))
    for cmd in (["diff", str(tmp_path / "good.json"), str(tmp_path / "bad.json")],
                ["compare", str(tmp_path / "good.json"), str(tmp_path / "bad.json")]):
        code, _, err = cli([*cmd, "-q"], capsys)
        assert code == 2 and field in err, err


def test_diff_on_json_that_is_not_one(saved, tmp_path, capsys):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(saved))
    (tmp_path / "dir.json").mkdir()
    code, _, err = cli(["diff", str(good), str(tmp_path / "dir.json"), "-q"], capsys)
    assert code == 3 and "directory" in err
    nan = json.dumps(saved).replace('"p50_ns": ', '"p50_ns": NaN, "x": ', 1)
    (tmp_path / "nan.json").write_text(nan)
    code, _, err = cli(["diff", str(good), str(tmp_path / "nan.json"), "-q"], capsys)
    assert code == 2 and "NaN" in err
    (tmp_path / "deep.json").write_text("[" * 200_000)
    code, _, err = cli(["diff", str(good), str(tmp_path / "deep.json"), "-q"], capsys)
    assert code == 2 and "nested" in err


def test_diff_json_output_is_strict_json(saved, tmp_path, capsys):
    zero = json.loads(json.dumps(saved))
    zero["iterations"]["stats"]["p50_ns"] = 0
    (tmp_path / "a.json").write_text(json.dumps(zero))
    (tmp_path / "b.json").write_text(json.dumps(saved))
    cli(["diff", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--json", str(tmp_path / "d.json"), "-q"], capsys)
    json.loads((tmp_path / "d.json").read_text(), parse_constant=lambda c: pytest.fail(f"{c} in JSON"))


# -- the gate -----------------------------------------------------------------------------------

def test_gate_empty_threshold_and_zero_baseline(saved, tmp_path, capsys):
    (tmp_path / "b.json").write_text(json.dumps(saved))
    code, _, err = cli(["diff", str(tmp_path / "b.json"), str(tmp_path / "b.json"), "--fail-on-regression", ""],
                       capsys)
    assert code == 2 and "--fail-on-regression" in err
    zero = json.loads(json.dumps(saved))
    zero["iterations"]["stats"]["p50_ns"] = 0
    zero["iterations"]["per_iteration"] = []
    (tmp_path / "z.json").write_text(json.dumps(zero))
    code, _, err = cli(["diff", str(tmp_path / "z.json"), str(tmp_path / "b.json"), "--fail-on-regression", "5%",
                        "-q"], capsys)
    assert code == 11, err


# -- injection ----------------------------------------------------------------------------------

EVIL = "\x1b]0;owned\x07\x1b[2J\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\[/][red]x\u202e"


def _no_raw_control(text: str) -> None:
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text, repr(text[:300])


def test_terminal_never_gets_trace_text_raw(trace, tmp_path, capsys):
    evil_q = EVIL.replace("'", "''")
    mutated(trace, f"UPDATE StringIds SET value = '{evil_q}' || value WHERE id IN "
                   "(SELECT DISTINCT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL)",
            f"UPDATE NVTX_EVENTS SET text = '{evil_q}' || text WHERE text IS NOT NULL")
    named = trace.rename(tmp_path / f"run{EVIL.replace('/', '_')}.sqlite")
    code, out, err = cli(["analyze", str(named), "--no-html"], capsys)
    assert code == 0, err
    _no_raw_control(out + err)
    assert "\\x1b" in out  # shown, escaped
    other = tmp_path / "other.sqlite"
    shutil.copy(named, other)
    code, out, err = cli(["analyze", str(named), str(other), "--out-dir", str(tmp_path / "o"), "--no-html"], capsys)
    assert code == 0, err
    _no_raw_control(out + err)


def test_diff_and_compare_tables_escape_names(saved, tmp_path, capsys):
    evil = json.loads(json.dumps(saved))
    evil["findings"] = [{"rule": EVIL, "title": EVIL, "impact_ns": 1}]
    evil["kernels"]["by_name"][0]["name"] = EVIL
    a, b = tmp_path / f"a{EVIL.replace('/', '_')}.json", tmp_path / "b.json"
    a.write_text(json.dumps(evil))
    b.write_text(json.dumps(saved))
    for cmd in (["diff", str(a), str(b)], ["compare", str(a), str(b)], ["compare", str(a), str(b), "--markdown"],
                ["compare", str(a), str(b), "--labels", f"{EVIL},x"]):
        code, out, err = cli(cmd, capsys)
        assert code == 0, err
        _no_raw_control(out + err)


def test_every_csv_neutralises_formulas(trace, tmp_path, capsys):
    mutated(trace, "UPDATE StringIds SET value = '=1+1 ' || value WHERE id IN "
                   "(SELECT DISTINCT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL)",
            "UPDATE StringIds SET value = '@SUM(A1) ' || value WHERE id IN "
            "(SELECT DISTINCT nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME)",
            "UPDATE NVTX_EVENTS SET text = '+cmd ' || text WHERE text IS NOT NULL")
    code, _, err = cli(["analyze", str(trace), "--csv", str(tmp_path / "csv"), "--no-html", "-q"], capsys)
    assert code == 0, err
    import csv

    seen = 0
    for f in (tmp_path / "csv").glob("*.csv"):
        for row in csv.reader(f.open(encoding="utf-8")):
            for cell in row:
                assert not cell[:1] in ("=", "+", "@", "\t", "\r") and not (cell[:1] == "-" and not _number(cell)), (
                    f.name, cell)
                seen += cell.startswith(("'=", "'@", "'+"))
    assert seen >= 3


def _number(cell: str) -> bool:
    try:
        float(cell)
        return True
    except ValueError:
        return False


def test_readme_documents_every_exit_code():
    from nsysan.errors import EXIT_CODES

    text = (ROOT / "README.md").read_text()
    start = text.index("## Exit codes")
    end = text.find("\n## ", start + 1)
    section = text[start:end if end >= 0 else len(text)]
    for name, code in EXIT_CODES.items():
        assert f" {code} " in section.replace(";", " ").replace("\n", " "), (name, code)


def test_one_long_nvtx_text_among_many_ranges_costs_no_fixed_width_copy(trace):
    """20,000 NVTX ranges on the launching thread, one of them 9,000 characters long: before, the gap
    explanation and summaries made numpy string arrays at the width of the longest string for every
    row (20,000 x 9,000 x 4 bytes = 720 MB here; 300,000 ranges were killed at 24 GB)."""
    mutated(trace,
            "WITH RECURSIVE r(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM r WHERE x < 19999), "
            "w(lo, hi, tid) AS (SELECT min(start), max(end), min(globalTid) FROM CUPTI_ACTIVITY_KIND_RUNTIME) "
            "INSERT INTO NVTX_EVENTS(start, end, eventType, globalTid, text, domainId) "
            "SELECT lo + x * ((hi - lo) / 20000), lo + x * ((hi - lo) / 20000) + 100, 59, tid, "
            "CASE WHEN x = 7 THEN 'r' || printf('%.9000c', 'x') ELSE 'step ' || (x % 50) END, 0 FROM r, w")
    tracemalloc.start()
    try:
        a = analyze(nsysan.open_trace(trace))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    long = [n for n in a.nvtx_ranges["name"].astype(str) if len(n) > 8000]
    assert long and all(n.endswith(CUT_MARK) for n in long)  # it was read, cut and analysed
    assert peak < 300 << 20, peak
