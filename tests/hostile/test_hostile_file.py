"""Issue 40, "The file itself": page headers that lie, sparse rowids, a WAL or hot journal beside the
trace, and the memory a million small NVTX ranges take.

Every case is built here from a fixture copy (bytes of a leaf page header patched, rows inserted with
SQL, a writer's WAL or journal snapshot): no hostile file is committed. Truth comes from the file: its
b-tree walked by the small reader below, counts from sqlite3 on a copy SQLite may recover. Each class
is also tried on ``VARIANTS`` variants from a seeded generator (``random.Random(SEED)``).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import nsysan
from nsysan.errors import CorruptTraceError, NsysanError, TraceUnreadableError
from nsysan.trace import budget, direct
from nsysan.trace.db import Database

SRC = "ladder_baseline"  # 1.9 MB, 1,998 kernels, NVTX ranges: the size of the 1.9 MB case
SEED = 40
VARIANTS = 20
KERNELS = "CUPTI_ACTIVITY_KIND_KERNEL"
EVENT_TABLES = (KERNELS, "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY", "NVTX_EVENTS")
MB = 1 << 20

needs_reader = pytest.mark.skipif(not direct.available(), reason="the direct reader's extension is not built")


def _copy(fixture_dir: Path, tmp_path: Path, name: str) -> Path:
    d = tmp_path / name
    d.mkdir()
    p = d / "trace.sqlite"
    shutil.copy(fixture_dir / f"{SRC}.sqlite", p)
    return p


def _count(p: Path, table: str = KERNELS) -> int:
    """Rows of ``table`` as SQLite sees them, on a copy of ``p`` and its side files (SQLite may
    recover a WAL or roll a journal back there: never beside the trace under test)."""
    d = p.parent.with_name(p.parent.name + "-truth")
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir()
    for f in p.parent.iterdir():
        if f.name.startswith(p.name) and f.is_file():
            shutil.copy(f, d / f.name)
    con = sqlite3.connect(d / p.name)
    try:
        return int(con.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])
    finally:
        con.close()
        shutil.rmtree(d, ignore_errors=True)


def _leaf_pages(p: Path, table: str) -> list[tuple[int, int, int]]:
    """(page number, offset of its header, cell count) of each leaf page of ``table``, walked here
    from the file format (https://www.sqlite.org/fileformat2.html), independent of nsysan."""
    con = sqlite3.connect(f"file:{p}?mode=ro&immutable=1", uri=True)
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
    con.close()
    data = p.read_bytes()
    size = int.from_bytes(data[16:18], "big")
    size = 65536 if size == 1 else size
    out, todo = [], [root]
    while todo:
        pg = todo.pop()
        off = (pg - 1) * size
        hdr = off + (100 if pg == 1 else 0)
        kind, cells = data[hdr], int.from_bytes(data[hdr + 3:hdr + 5], "big")
        if kind == 0x0D:
            out.append((pg, hdr, cells))
        elif kind == 0x05:
            todo.append(int.from_bytes(data[hdr + 8:hdr + 12], "big"))
            for c in range(cells):
                ptr = int.from_bytes(data[hdr + 12 + 2 * c:hdr + 14 + 2 * c], "big")
                todo.append(int.from_bytes(data[off + ptr:off + ptr + 4], "big"))
    return out


def _set_cells(p: Path, patches: list[tuple[int, int]]) -> None:
    """Write ``cells`` into the cell-count field of the page header at ``hdr`` (bytes 3-4)."""
    with open(p, "r+b") as f:
        for hdr, cells in patches:
            f.seek(hdr + 3)
            f.write(cells.to_bytes(2, "big"))


CHILD = r"""
import json, resource, sys, time
argv, mode = json.loads(sys.argv[1]), sys.argv[2]
t = time.monotonic()
out = {}
try:
    if mode == "cli":
        from nsysan.cli import main
        try:
            rc = main(argv)
        except SystemExit as e:
            rc = e.code
    else:
        import nsysan
        tr = nsysan.open_trace(argv[0])
        out["kernels"], rc = len(tr.kernels), 0
except Exception as e:
    rc, out["error"] = getattr(e, "exit_code", 1), str(e)
# VmHWM: this process's own peak; ru_maxrss keeps the forking parent's (pytest's) peak across exec
hwm = next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM:"))
out.update(rc=rc, peak=hwm * 1024, maxrss=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
           s=time.monotonic() - t)
print("RESULT " + json.dumps(out))
"""


def _child(argv: list[str], mode: str = "cli", timeout: float = 90, env: dict[str, str] | None = None) -> dict:
    """Run nsysan in a child process; its exit code, peak resident memory (bytes, the child's own
    VmHWM) and time."""
    r = subprocess.run([sys.executable, "-c", CHILD, json.dumps(argv), mode], capture_output=True, text=True, check=False,
                       timeout=timeout, env={**os.environ, **(env or {})})
    line = next((x for x in r.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, r.stdout[-2000:] + r.stderr[-2000:]
    return json.loads(line[7:])


def _bound(p: Path) -> int:
    """The issue's memory bound for a file: max(2x its size, 300 MB)."""
    return max(2 * p.stat().st_size, 300 * MB)


# -- page headers that lie --------------------------------------------------------------------

@needs_reader
def test_leaf_headers_claiming_0xffff_cells_cost_what_the_file_holds(fixture_dir, tmp_path):
    """Every leaf page of the event tables claims 0xFFFF cells: the reader sized its columns by the
    claim (808 MB on this 1.9 MB file). SQLite calls such a page corrupt: exit 6, a bounded peak."""
    p = _copy(fixture_dir, tmp_path, "lie")
    patches = [(hdr, 0xFFFF) for t in EVENT_TABLES for _, hdr, _ in _leaf_pages(p, t)]
    assert len(patches) > 100
    _set_cells(p, patches)
    got = _child(["analyze", str(p), "--json", str(tmp_path / "out.json")])
    assert got["rc"] == CorruptTraceError.exit_code
    assert got["peak"] <= _bound(p), f"{got['peak'] / MB:.0f} MB for a {p.stat().st_size / MB:.1f} MB file"


def _lying_variant(rng: random.Random, p: Path) -> list[tuple[int, int]]:
    table = rng.choice(EVENT_TABLES)
    pages = _leaf_pages(p, table)
    chosen = rng.sample(pages, rng.randint(1, len(pages)))
    kind = rng.choice(["max", "random", "just_over", "page_bound"])
    page_size = int.from_bytes(p.read_bytes()[16:18], "big")
    out = []
    for _, hdr, cells in chosen:
        claim = {"max": 0xFFFF, "random": rng.randint(cells + 1, 0xFFFF), "just_over": cells + 1,
                 "page_bound": (page_size - 8) // 6 + rng.randint(0, 3)}[kind]
        out.append((hdr, min(claim, 0xFFFF)))
    return out


@needs_reader
def test_lying_leaf_headers_generated(fixture_dir, tmp_path):
    """Seeded variants (a table, some of its leaves, a claimed count): the reader never sizes its
    columns beyond what the file can hold (a row takes at least 6 bytes of it), and the trace reads
    as SQLite reads it, or is refused as damaged (exit 6), as SQLite refuses it."""
    rng = random.Random(SEED)
    for i in range(VARIANTS):
        p = _copy(fixture_dir, tmp_path, f"v{i}")
        _set_cells(p, _lying_variant(rng, p))
        f = direct.File(p)
        con = sqlite3.connect(f"file:{p}?mode=ro&immutable=1", uri=True)
        try:
            for t in EVENT_TABLES:
                plan = direct.plan(con, f, t, [("start_ns", "start", None)], None)
                try:
                    rows = int(direct.leaves(f, plan)[:, 1].sum()) if plan is not None else 0
                except direct.Unsupported:
                    continue
                assert rows <= f.size // 6, (i, t, rows)
        finally:
            con.close()
            f.close()
        try:
            truth = _count(p)
        except sqlite3.DatabaseError:
            truth = None
        try:
            t = nsysan.open_trace(p)
        except NsysanError as e:
            assert e.exit_code == CorruptTraceError.exit_code, (i, str(e))
            continue
        assert truth is not None and len(t.kernels) <= truth, i


# -- sparse rowids ------------------------------------------------------------------------------

def _insert_at(p: Path, table: str, rowid: int, start: str = "start") -> None:
    """A copy of the table's last row at ``rowid`` (``start``: the expression for its start)."""
    con = sqlite3.connect(p)
    cols = [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]
    names = ",".join(f'"{c}"' for c in cols)
    values = ",".join(start if c == "start" else f'"{c}"' for c in cols)
    con.execute(f'INSERT INTO "{table}"(rowid, {names}) SELECT {rowid}, {values} FROM "{table}" '
                f'WHERE rowid = (SELECT max(rowid) FROM "{table}")')
    con.commit()
    con.close()


def test_one_nvtx_row_at_rowid_2_62_is_one_row(fixture_dir, tmp_path):
    """One NVTX row at rowid 2^62: estimated as 2^62 rows (7.7 TB) and refused (exit 13)."""
    p = _copy(fixture_dir, tmp_path, "sparse62")
    _insert_at(p, "NVTX_EVENTS", 2 ** 62)
    with Database(p) as db:
        assert budget._rows(db, "NVTX_EVENTS") == _count(p, "NVTX_EVENTS")
    got = _child(["analyze", str(p), "--json", str(tmp_path / "out.json")])
    assert got["rc"] == 0, got


def test_a_row_at_rowid_2_40_with_a_fractional_start_reads_in_bounded_time(fixture_dir, tmp_path):
    """A kernel at rowid 2^40 whose start is REAL: the direct reader declines the table, SQL reads it
    in rowid slices, and the slices followed the span (millions of queries: it hung)."""
    p = _copy(fixture_dir, tmp_path, "sparse40")
    _insert_at(p, KERNELS, 2 ** 40, "start + 0.5")
    try:
        got = _child([str(p)], mode="open", timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("open_trace did not end within 60 s")
    assert got["rc"] == 0 and got["kernels"] == _count(p), got


def test_sparse_rowids_generated(fixture_dir, tmp_path):
    """Seeded variants (a table, one or more rows at far rowids, a fractional start or not): the
    row bound is the table's count, the SQL slices are as many as its rows need and cover them all."""
    rng = random.Random(SEED)
    for i in range(VARIANTS):
        p = _copy(fixture_dir, tmp_path, f"s{i}")
        table = rng.choice(EVENT_TABLES)
        for _ in range(rng.randint(1, 3)):
            rowid = rng.choice([2 ** rng.randint(31, 62), rng.randint(10 ** 6, 2 ** 63 - 1)])
            _insert_at(p, table, rowid, rng.choice(["start", "start + 0.5"]))
        count = _count(p, table)
        per = rng.choice([100, 500, 5_000])
        with Database(p) as db:
            assert budget._rows(db, table) == count, i
            slices = db.rowid_slices(table, per)
            if slices is None:  # read whole: one query
                assert count <= per, i
                continue
            assert len(slices) <= max(1, math.ceil(count / per)), (i, len(slices))
            assert db.row_bound(table) == count, i
            # as schema.build_select writes a slice (a bound of 2^63 is a REAL literal there)
            got = sum(db.rows(f'SELECT count(*) FROM "{table}" WHERE rowid >= {lo} AND rowid < {hi}')[0][0]
                      for lo, hi in slices)
            assert got == count, i


# -- a WAL or hot journal beside the trace ------------------------------------------------------

def _state(d: Path) -> dict[str, str]:
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(d.iterdir())}


def _wal_snapshot(src: Path, dst_dir: Path, commits: int = 1, rng: random.Random | None = None) -> Path:
    """A writer in WAL mode commits ``commits`` transactions and dies: the trace and its -wal (no
    -shm, no checkpoint) copied into ``dst_dir``."""
    con = sqlite3.connect(src, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL").fetchall()
    con.execute("PRAGMA wal_autocheckpoint=0")
    cols = ",".join(f'"{r[1]}"' for r in con.execute(f'PRAGMA table_info("{KERNELS}")'))
    for _ in range(commits):
        if rng is not None and rng.random() < 0.3:
            con.execute(f'DELETE FROM "{KERNELS}" WHERE rowid % {rng.randint(2, 7)} = 0')
        else:
            con.execute(f'INSERT INTO "{KERNELS}"({cols}) SELECT {cols} FROM "{KERNELS}"'
                        + (f" LIMIT {rng.randint(1, 3000)}" if rng is not None else ""))
    dst_dir.mkdir()
    shutil.copy(src, dst_dir / "trace.sqlite")
    shutil.copy(str(src) + "-wal", dst_dir / "trace.sqlite-wal")
    con.close()
    return dst_dir / "trace.sqlite"


def _journal_snapshot(src: Path, dst_dir: Path, rng: random.Random | None = None) -> Path:
    """A writer in rollback mode spills an unfinished transaction into the trace and dies: the
    trace and its hot -journal copied into ``dst_dir``."""
    con = sqlite3.connect(src, isolation_level=None)
    con.execute("PRAGMA cache_size=2")
    con.execute("BEGIN")
    con.execute(f'DELETE FROM "{KERNELS}" WHERE rowid % {rng.randint(2, 5) if rng else 2} = 0')
    con.execute('UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET "end" = "end" + 1')
    dst_dir.mkdir()
    shutil.copy(src, dst_dir / "trace.sqlite")
    shutil.copy(str(src) + "-journal", dst_dir / "trace.sqlite-journal")
    con.execute("ROLLBACK")
    con.close()
    return dst_dir / "trace.sqlite"


def _check_read_as_sqlite(p: Path, side: str) -> None:
    before = _state(p.parent)
    truth = _count(p)
    with sqlite3.connect(f"file:{p}?mode=ro&immutable=1", uri=True) as con:  # the main file alone
        main_only = con.execute(f'SELECT count(*) FROM "{KERNELS}"').fetchone()[0]
    assert main_only != truth  # the case matters: the side file changes what SQLite reads
    t = nsysan.open_trace(p)
    assert len(t.kernels) == truth
    note = [w for w in t.meta.warnings if f"trace.sqlite{side}" in w]
    assert len(note) == 1 and "may still be being written" in note[0] and "read what SQLite reads" in note[0]
    assert "main file only" not in note[0]
    assert _state(p.parent) == before  # nothing written beside the trace: no -shm, side files as they were


def test_wal_beside_the_trace_is_read_as_sqlite_reads_it(fixture_dir, tmp_path):
    """1,998 kernels in the main file, 3,996 committed through the -wal: SQLite sees 3,996."""
    p = _wal_snapshot(_copy(fixture_dir, tmp_path, "writer"), tmp_path / "w")
    _check_read_as_sqlite(p, "-wal")
    out = tmp_path / "out.json"  # the command line too (its prefetch reads the main file's pages)
    got = _child(["analyze", str(p), "--json", str(out)])
    assert got["rc"] == 0
    d = json.loads(out.read_text())
    assert sum(k["count"] for k in d["kernels"]["by_name"]) == _count(p)
    assert any("-wal" in w and "committed" in w for w in d["trace"]["warnings"])


def test_hot_journal_beside_the_trace_is_rolled_back_as_sqlite_would(fixture_dir, tmp_path):
    """A writer died mid-transaction, its deletions already in the main file: SQLite rolls them back."""
    p = _journal_snapshot(_copy(fixture_dir, tmp_path, "writer"), tmp_path / "j")
    _check_read_as_sqlite(p, "-journal")


def test_side_files_without_transactions_and_odd_ones(fixture_dir, tmp_path):
    """An empty -wal or a zeroed journal change nothing: the note says the main file holds it all. A
    -wal that is a FIFO or a device: refused at once (exit 4), nothing opened that could block."""
    p = _copy(fixture_dir, tmp_path, "empty")
    (tmp_path / "empty" / "trace.sqlite-journal").write_bytes(b"\0" * 512)
    (tmp_path / "empty" / "trace.sqlite-wal").write_bytes(b"")
    t = nsysan.open_trace(p)
    assert len(t.kernels) == _count(p)
    notes = [w for w in t.meta.warnings if "trace.sqlite-" in w]
    assert len(notes) == 2 and all("holds no unfinished transaction" in w for w in notes)
    for name, make in (("fifo", lambda s: os.mkfifo(s)), ("device", lambda s: os.symlink("/dev/zero", s))):
        q = _copy(fixture_dir, tmp_path, name)
        make(str(q) + "-wal")
        with pytest.raises(TraceUnreadableError, match="not a regular file"):
            nsysan.open_trace(q)


def test_side_files_generated(fixture_dir, tmp_path):
    """Seeded variants: several WAL commits of inserts and deletions, or a hot journal of deletions:
    the kernels SQLite reads, a true note, nothing written beside the trace."""
    rng = random.Random(SEED)
    for i in range(VARIANTS // 2):
        src = _copy(fixture_dir, tmp_path, f"src{i}")
        if rng.random() < 0.5:
            p, side = _wal_snapshot(src, tmp_path / f"w{i}", rng.randint(1, 4), rng), "-wal"
        else:
            p, side = _journal_snapshot(src, tmp_path / f"j{i}", rng), "-journal"
        before = _state(p.parent)
        t = nsysan.open_trace(p)
        assert len(t.kernels) == _count(p), i
        assert any(side in w and "read what SQLite reads" in w for w in t.meta.warnings), i
        assert _state(p.parent) == before, i


# -- memory: a million small NVTX ranges ----------------------------------------------------------

def test_million_nvtx_ranges_stay_within_the_estimate_and_the_limit_refuses_first(fixture_dir, tmp_path):
    """1M small NVTX ranges (a 55 MB file). Measured whole-process peak (child, VmHWM): within
    ``budget``'s estimate for the trace, whose per-range cost (``NVTX_ROW``) is what makes nsysan
    refuse before reading when the memory given is max(2x file, 300 MB) (exit 13, peak under it)."""
    p = _copy(fixture_dir, tmp_path, "nvtx1m")
    con = sqlite3.connect(p)
    lo = con.execute("SELECT min(start) FROM NVTX_EVENTS").fetchone()[0]
    tid = con.execute("SELECT globalTid FROM NVTX_EVENTS LIMIT 1").fetchone()[0]
    con.execute("WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 999999) "
                "INSERT INTO NVTX_EVENTS(start, \"end\", eventType, text, globalTid, domainId) "
                "SELECT ? + i * 5000, ? + i * 5000 + 2000, 59, 'range ' || (i % 50), ?, 0 FROM n", (lo, lo, tid))
    con.commit()
    ranges = con.execute("SELECT count(*) FROM NVTX_EVENTS").fetchone()[0]
    con.close()
    limit = _bound(p)
    refused = _child(["analyze", str(p), "--json", str(tmp_path / "a.json")],
                     env={budget.LIMIT_ENV: str(limit)})
    assert refused["rc"] == 13 and refused["peak"] <= limit, refused
    # the estimate from the file's own counts: the NVTX ranges, and the ranges alone (every other
    # table counted at nothing): the per-range cost must cover the peak by itself
    est = budget.estimate({"nvtx_raw": (ranges, 0)})
    ran = _child(["analyze", str(p), "--json", str(tmp_path / "b.json")], timeout=120)
    assert ran["rc"] == 0
    assert ran["peak"] <= est.peak(), f"{ran['peak'] / MB:.0f} MB measured, {est.peak() / MB:.0f} MB estimated"
    print(f"1M NVTX ranges, {p.stat().st_size / MB:.0f} MB file: peak {ran['peak'] / MB:.0f} MB in {ran['s']:.1f} s; "
          f"estimated {est.peak() / MB:.0f} MB; refused under {limit / MB:.0f} MB at {refused['peak'] / MB:.0f} MB")


@pytest.mark.parametrize("view", [
    # a view that selects from itself (SQLite: "circularly defined" when run)
    "CREATE VIEW CUPTI_ACTIVITY_KIND_KERNEL AS SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL",
    # two views that select from each other
    "CREATE VIEW CUPTI_ACTIVITY_KIND_KERNEL AS SELECT * FROM loop_b",
])
def test_an_event_table_that_is_an_endless_view_is_damage(fixture_dir, tmp_path, view):
    """Issue 49 item 9: the kernel table replaced by an endless view is refused (exit 6), not read as a
    trace without kernels (whose GPU would look idle)."""
    p = _copy(fixture_dir, tmp_path, "view")
    con = sqlite3.connect(p)
    con.execute(f'DROP TABLE "{KERNELS}"')
    con.execute(view)
    if "loop_b" in view:
        con.execute(f'CREATE VIEW loop_b AS SELECT * FROM "{KERNELS}"')
    con.commit()
    # GIVEN: by construction, the kernel table is now a view and SQLite cannot run it
    assert con.execute("SELECT type FROM sqlite_master WHERE name = ?", (KERNELS,)).fetchone() == ("view",)
    with pytest.raises(sqlite3.OperationalError):
        con.execute(f'SELECT count(*) FROM "{KERNELS}"').fetchone()
    con.close()
    with pytest.raises(CorruptTraceError) as e:
        nsysan.open_trace(p)
    assert e.value.exit_code == 6 and "is a view" in str(e.value)
