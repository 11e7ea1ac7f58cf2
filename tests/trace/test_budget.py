"""A trace that would not fit in memory is refused before it is read (exit 13, naming --time-range),
and --time-range lets the same trace through, keeping exactly the events that start inside it.

The memory limit is faked with NSYSAN_MEMORY_LIMIT; truth for counts comes from SQL in the test."""

from __future__ import annotations

import json
import re
from pathlib import Path

import planned
import pytest
import sqltruth

import nsysan
from nsysan.cli import main
from nsysan.errors import EXIT_CODES, MemoryLimitError
from nsysan.trace import budget, direct, prefetch
from nsysan.trace import schema as S

TRACE = "launch_eager"


_sql = sqltruth.query  # one read-only query on an export


def _event_tables(path: Path) -> dict[str, str]:
    tables = {r[0] for r in _sql(path, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    out = {}
    for spec in S.ALL_SPECS:
        src = next((t for t in spec.sources if t in tables), None)
        if src and spec.name in S.INTERVAL_TABLES + ("nvtx_raw",):
            out[spec.name] = src
    return out


_planned = planned.planned  # the tables (rows, decoded columns) the loader gives the estimate for a path


def _limit_between(path: Path, share: float) -> int:
    """A memory figure between what decoding takes and what the whole analysis takes: ``share`` of
    the rest fits. From the estimate of the tables the loader plans (their rows are SQL's counts:
    ``test_estimate_counts_the_rows_the_loader_reads``)."""
    est = budget.estimate(_planned(path))
    return budget.BASE + est.decoded + est.fixed + int(est.rest * share)


def test_refused_up_front_with_a_clear_message(fixture_dir, tmp_path, monkeypatch, capsys):
    """Nothing is decoded (the direct reader never starts, the prefetch does not start) and nothing
    is written; the exit code is the README's 13 and the hint names --time-range."""
    path = fixture_dir / f"{TRACE}.sqlite"
    monkeypatch.setenv("NSYSAN_MEMORY_LIMIT", str(_limit_between(path, 0.3)))
    monkeypatch.setenv("NSYSAN_NO_CACHE", "1")
    started = []
    monkeypatch.setattr(direct, "start", lambda *a, **k: started.append(a) or pytest.fail("decoding started"))
    out = tmp_path / "o.json"
    code = main(["analyze", str(path), "--json", str(out), "--no-html", "-q"])
    err = capsys.readouterr().err
    assert code == 13 == EXIT_CODES["MemoryLimitError"]
    assert not started and not out.exists()
    rows = sum(_sql(path, f'SELECT count(*) FROM "{src}"')[0][0] for src in _event_tables(path).values())
    assert f"analysing {rows:,} events needs about" in err and "(NSYSAN_MEMORY_LIMIT)" in err
    assert "--time-range START:END" in err
    assert prefetch.take(path, False) is None


def test_the_named_option_lets_the_same_trace_through(fixture_dir, tmp_path, monkeypatch, capsys):
    """With the same limit, the window the hint proposes (at its start) passes, and the analysis holds
    exactly the kernels and CUDA API calls that start inside it (SQL)."""
    path = fixture_dir / f"{TRACE}.sqlite"
    monkeypatch.setenv("NSYSAN_MEMORY_LIMIT", str(_limit_between(path, 0.9)))
    monkeypatch.setenv("NSYSAN_NO_CACHE", "1")
    out = tmp_path / "o.json"
    assert main(["analyze", str(path), "--json", str(out), "--no-html", "-q"]) == 13
    m = re.search(r"e\.g\. --time-range ([0-9.]+):([0-9.]+) \(about (\d+)% of them\)", capsys.readouterr().err)
    assert m, "the hint proposes a range"
    start, end = float(m.group(1)), float(m.group(2))
    assert end > start
    assert main(["analyze", str(path), "--json", str(out), "--no-html", "-q", "--time-range", f"{start}:{end}"]) == 0
    shift = _sql(path, "SELECT value FROM META_DATA_EXPORT WHERE name = 'EXPORT_CONFIG_TIME_SHIFT'")
    lo = int(shift[0][0]) if shift else 0
    lo, hi = lo + int(start * 1e9), lo + int(end * 1e9)
    kernels = _sql(path, f"SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE start >= {lo} AND start < {hi}")[0][0]
    total = _sql(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0]
    assert 0 < kernels < total
    assert json.loads(out.read_text())["schema"].startswith("nsysan.analysis")
    trace = nsysan.open_trace(path, time_range=(start, end))
    assert len(trace.kernels) == kernels
    inside = sum(_sql(path, f'SELECT count(*) FROM "{src}" WHERE start >= {lo} AND start < {hi}')[0][0]
                 for src in _event_tables(path).values())
    every = sum(_sql(path, f'SELECT count(*) FROM "{src}"')[0][0] for src in _event_tables(path).values())
    assert abs(inside / every - int(m.group(3)) / 100) < 0.05, "the share the hint states, by SQL"
    api = _sql(path, f"SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE start >= {lo} AND start < {hi}")[0][0]
    assert len(trace.cuda_api) <= api  # nested duplicate rows (cudaMalloc_v3020) are dropped on load
    assert any("--time-range" in w for w in trace.meta.warnings)


@pytest.mark.parametrize("reader", ["direct", "sqlite"])
def test_time_range_keeps_exactly_the_events_starting_inside(fixture_dir, monkeypatch, reader):
    if reader == "sqlite":
        monkeypatch.setenv("NSYSAN_READER", "sqlite")
    path = fixture_dir / "ladder_baseline.sqlite"
    t = nsysan.open_trace(path, time_range=(11.0, 14.0))
    lo, hi = 11_000_000_000, 14_000_000_000  # this export's clock starts at 0 (no time shift)
    assert not _sql(path, "SELECT value FROM META_DATA_EXPORT WHERE name = 'EXPORT_CONFIG_TIME_SHIFT' AND value != '0'")
    for frame, table in ((t.kernels, "CUPTI_ACTIVITY_KIND_KERNEL"), (t.memcpy, "CUPTI_ACTIVITY_KIND_MEMCPY"),
                         (t.memset, "CUPTI_ACTIVITY_KIND_MEMSET")):
        n = _sql(path, f"SELECT count(*) FROM {table} WHERE start >= {lo} AND start < {hi}")[0][0]
        assert len(frame) == n
    nvtx = _sql(path, f"SELECT count(*) FROM NVTX_EVENTS WHERE start >= {lo} AND start < {hi}")[0][0]
    assert len(t.nvtx) <= nvtx
    assert t.kernels["start_ns"].between(lo, hi - 1).all()


def test_estimate_counts_the_rows_the_loader_reads(fixture_dir, monkeypatch):
    """The rows the estimate uses are the SQL counts of the event tables (leaf lists, exact)."""
    path = fixture_dir / "ladder_baseline.sqlite"
    seen: dict[str, tuple[int, int]] = {}
    real = budget.check
    monkeypatch.setattr(budget, "check", lambda label, tables, **k: seen.update(tables) or real(label, tables, **k))
    nsysan.open_trace(path)
    for name, src in _event_tables(path).items():
        assert seen[name][0] == _sql(path, f'SELECT count(*) FROM "{src}"')[0][0], name


def test_available_memory_sources(tmp_path, monkeypatch):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemAvailable:   1000 kB\n")
    assert budget._meminfo_available(meminfo) == 1000 * 1024
    root = tmp_path / "cg"
    (root / "a" / "b").mkdir(parents=True)
    (root / "memory.max").write_text("max\n")
    (root / "a" / "memory.max").write_text(f"{10 << 20}\n")
    (root / "a" / "memory.current").write_text(f"{4 << 20}\n")
    (root / "a" / "b" / "memory.max").write_text("max\n")
    (root / "a" / "b" / "memory.current").write_text(f"{1 << 20}\n")
    me = tmp_path / "cgroup"
    me.write_text("0::/a/b\n")
    assert budget._cgroup_room(root, me) == 6 << 20  # the parent's limit binds
    (root / "memory").mkdir()
    me.write_text("4:memory:/\n")
    (root / "memory" / "memory.limit_in_bytes").write_text(f"{1 << 62}\n")  # v1 "no limit"
    assert budget._cgroup_room(root, me) is None
    # v1 in a container: the group's path is not under the mount, whose root is the group itself
    me.write_text("4:memory:/process_api/abc\n")
    (root / "memory" / "memory.limit_in_bytes").write_text(f"{8 << 20}\n")
    (root / "memory" / "memory.usage_in_bytes").write_text(f"{3 << 20}\n")
    assert budget._cgroup_room(root, me) == 5 << 20
    monkeypatch.setenv("NSYSAN_MEMORY_LIMIT", "2G")
    assert budget.available() == (2 << 30, "NSYSAN_MEMORY_LIMIT")
    assert budget.parse_size("512M") == 512 << 20 and budget.parse_size("1.5GiB") == 3 << 29


def test_time_range_option_is_checked(capsys):
    for bad in ("5", "3:2", "-1:2", "a:b", "1:inf"):
        with pytest.raises(SystemExit):
            main(["analyze", "example", "--time-range", bad])
        assert "--time-range" in capsys.readouterr().err


def test_memory_limit_error_is_a_resource_limit():
    assert issubclass(MemoryLimitError, nsysan.errors.ResourceLimitError)


def test_nvtx_ranges_count_in_full_whatever_the_range(fixture_dir, tmp_path):
    """An NVTX range costs ``NVTX_ROW`` bytes in the estimate, whatever share of the events a time
    range keeps (the NVTX table is read whole, through SQL); other events scale with the share.
    Rows from SQL: 200,000 ranges added to a fixture raise the estimate by 200,000 x NVTX_ROW."""
    import shutil
    import sqlite3

    path = tmp_path / "nv.sqlite"
    shutil.copyfile(fixture_dir / "ladder_baseline.sqlite", path)
    con = sqlite3.connect(path)
    gt = con.execute("SELECT globalTid FROM NVTX_EVENTS LIMIT 1").fetchone()[0]
    con.executemany("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) VALUES (?, ?, 59, ?, ?)",
                    [(11_000_000_000 + 10 * i, 11_000_000_000 + 10 * i + 5, f"r{i}", gt) for i in range(200_000)])
    con.commit()
    con.close()
    before, after = (budget.estimate(_planned(p)) for p in (fixture_dir / "ladder_baseline.sqlite", path))
    n = _sql(path, "SELECT count(*) FROM NVTX_EVENTS")[0][0] - _sql(fixture_dir / "ladder_baseline.sqlite",
                                                                     "SELECT count(*) FROM NVTX_EVENTS")[0][0]
    assert n == 200_000 and after.fixed - before.fixed == n * budget.NVTX_ROW
    assert after.peak(0.1) - before.peak(0.1) == after.peak(1.0) - before.peak(1.0) == n * budget.NVTX_ROW

