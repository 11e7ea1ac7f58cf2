"""The direct b-tree reader (nsysan.trace.direct + the _btree extension) against SQLite's own reading.

Every check compares with what SQLite returns for the same file, so the reader can only be a faster
way to the same frames: on every fixture and the public corpus, on hand-built tables that exercise
each record encoding, and on hypothesis-generated integer tables with random page sizes. Files it
must not decode (REAL/TEXT values, overflow pages, WITHOUT ROWID, damage) are declined and SQLite
reads them.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from conftest import CORPUS, FIXTURE_NAMES
from frame_check import assert_same_frames
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nsysan
from nsysan.errors import CorruptTraceError
from nsysan.trace import direct
from nsysan.trace import schema as S
from nsysan.trace.db import Database
from nsysan.trace.model import INTERVAL_TABLES

pytestmark = pytest.mark.skipif(not direct.available(), reason="the _btree extension is not built here")


def _through_sqlite(path: Path, **kw):
    old = os.environ.get("NSYSAN_READER")
    os.environ["NSYSAN_READER"] = "sqlite"
    try:
        return nsysan.open_trace(path, **kw)
    finally:
        if old is None:
            del os.environ["NSYSAN_READER"]
        else:
            os.environ["NSYSAN_READER"] = old


def _plans(db: Database):
    """(name, the direct reader's plan or None) of each event table of the file."""
    for spec in S.ALL_SPECS:
        if spec.name not in INTERVAL_TABLES:
            continue
        src = next((t for t in spec.sources if db.caps.has(t)), None)
        if src is not None:
            yield spec.name, db.direct_plan(src, S.select_outputs(spec, db.caps.columns(src)), spec.keep_only)


def _direct_tables(path: Path) -> dict[str, str]:
    """Which event tables the direct reader reads from this file: name -> 'direct' | 'declined'."""
    with Database(path) as db:
        return {name: "none" if found is None else ("direct" if db.direct_read(*found) is not None else "declined")
                for name, found in _plans(db)}


def _planned(path: Path) -> dict[str, bool]:
    """The event tables of this file, each with whether the direct reader plans to read it."""
    with Database(path) as db:
        return {name: found is not None for name, found in _plans(db)}


def _read_directly(path: Path) -> tuple[nsysan.Trace, dict[str, str]]:
    """The file read with every column the default way (the direct reader first), and what the direct
    reader returned for each table it was given ('direct', or 'declined': SQLite read it)."""
    taken: dict[str, str] = {}
    read_many = Database.direct_read_many

    def spy(self, plans, *args, **kw):
        out = read_many(self, plans, *args, **kw)
        taken.update({name: "declined" if t is None else "direct" for name, t in out.items()})
        return out

    Database.direct_read_many = spy
    try:
        return nsysan.open_trace(path, all_columns=True), taken
    finally:
        Database.direct_read_many = read_many


_FIXTURE_READS: dict[str, tuple[nsysan.Trace, dict[str, str]]] = {}


def fixture_read(path: Path, *, last: bool = False) -> tuple[nsysan.Trace, dict[str, str]]:
    """``_read_directly`` of a fixture, once per run: test_small_tables compares the same read with
    ADBC's (a fixture's file never changes during a run; files a test writes are read anew). The
    ``last`` reader lets it go (60 reads with every column held to the end: 300 MB more)."""
    key = str(path)
    read = _FIXTURE_READS.pop(key, None) or _read_directly(path)
    if not last:
        _FIXTURE_READS[key] = read
    return read


def _same_trace(path: Path, read: tuple[nsysan.Trace, dict[str, str]] | None = None) -> dict[str, str]:
    """The file read with every column by the direct reader (``read``, else read here) and through
    SQLite: the same frames and warnings. Returns how the first read took each event table: 'direct',
    'declined' (the direct reader gave it up; SQLite read it) or 'none' (not planned for the direct
    reader)."""
    a, taken = read or _read_directly(path)
    b = _through_sqlite(path, all_columns=True)
    for name in INTERVAL_TABLES:
        assert_same_frames(getattr(a, name), getattr(b, name), obj=f"{path.name}:{name}")
    assert a.meta.warnings == b.meta.warnings
    return {name: taken.get(name, "none") if planned else "none" for name, planned in _planned(path).items()}


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_fixture_frames_identical(fixture_dir, name):
    path = fixture_dir / f"{name}.sqlite"
    used = _same_trace(path, fixture_read(path))
    assert used and set(used.values()) == {"direct"}, used  # the fast path is really taken


CORPUS_FILES = sorted(CORPUS.glob("*.sqlite")) if CORPUS.exists() else []


@pytest.mark.skipif(not CORPUS_FILES, reason="public corpus not present (../shared)")
@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: p.stem[:40])
def test_corpus_frames_identical(path):
    """The public exports (nsys 2020.3 to 2026.2): the direct reader takes every event table and agrees
    (two exports have none: their frames are compared all the same)."""
    used = _same_trace(path)
    assert set(used.values()) <= {"direct"}, used


# -- hand-built tables -------------------------------------------------------------------------------

KERNEL_DDL = """CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL,
  deviceId INTEGER, contextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER,
  demangledName INTEGER, shortName INTEGER, gridX INTEGER, gridY INTEGER, gridZ INTEGER, blockX INTEGER,
  blockY INTEGER, blockZ INTEGER, graphNodeId INTEGER, note TEXT)"""


def _export(path: Path, rows: list[tuple], *, page_size: int = 4096, ddl: str = KERNEL_DDL,
            after: list[str] = ()) -> Path:
    con = sqlite3.connect(path)
    con.execute(f"PRAGMA page_size = {page_size}")
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    con.execute("INSERT INTO StringIds VALUES (1, 'k')")
    con.execute("CREATE TABLE TARGET_INFO_GPU (id INTEGER, name TEXT)")
    con.execute(ddl)
    cols = ddl.split("(", 1)[1].count(",") + 1
    con.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({','.join('?' * cols)})", rows)
    for sql in after:
        con.execute(sql)
    con.commit()
    con.close()
    return path


def _row(i: int, **kw) -> tuple:
    base = dict(start=1000 + 10 * i, end=1005 + 10 * i, deviceId=0, contextId=1, streamId=7, correlationId=i,
                globalPid=(1 << 24) * 42, demangledName=1, shortName=1, gridX=1, gridY=1, gridZ=1, blockX=32,
                blockY=1, blockZ=1, graphNodeId=None, note=None)
    base.update(kw)
    return tuple(base.values())


def test_every_integer_encoding(tmp_path):
    """Values that SQLite stores in 0, 1, 2, 3, 4, 6 and 8 bytes (and the 0/1 constants), signed,
    NULLs, a 64 KiB page size: the frames equal SQLite's."""
    edge = [0, 1, -1, 127, -128, 128, 255, 32767, -32768, 2**23 - 1, -(2**23), 2**31 - 1, -(2**31),
            2**47 - 1, -(2**47), 2**63 - 1, -(2**63)]
    rows = [_row(i, correlationId=v, streamId=v, graphNodeId=None if i % 3 else v) for i, v in enumerate(edge)]
    for page_size in (512, 65536):
        path = _export(tmp_path / f"e{page_size}.sqlite", rows, page_size=page_size)
        assert _direct_tables(path) == {"kernels": "direct"}
        _same_trace(path)
        t = nsysan.open_trace(path)
        assert sorted(t.kernels["correlation_id"].tolist()) == sorted(edge)


def test_deep_btree_many_leaves(tmp_path):
    """512-byte pages: a b-tree three interior levels deep; rowid order and every row kept, also
    when the leaves are split in many small parts read on several threads."""
    rows = [_row(i, correlationId=i * 7919) for i in range(20_000)]
    path = _export(tmp_path / "deep.sqlite", rows, page_size=512)
    with Database(path) as db:
        p, leaf_rows = db.direct_plan("CUPTI_ACTIVITY_KIND_KERNEL", [("c", "correlationId", None)], None)
        assert len(leaf_rows) > 500
        parts = direct.split(leaf_rows, 777)
        assert np.array_equal(np.concatenate(parts), leaf_rows)
        got = np.concatenate([db.direct_read(p, part).column("c").values for part in parts])
    assert got.tolist() == [i * 7919 for i in range(20_000)]
    _same_trace(path)


def test_added_column_short_records(tmp_path):
    """Rows written before ALTER TABLE ADD COLUMN have fewer fields: the new column reads as NULL."""
    ddl = KERNEL_DDL.replace(", graphNodeId INTEGER, note TEXT", ", note TEXT")
    rows = [_row(i)[:-2] + (None,) for i in range(5)]
    path = _export(tmp_path / "alter.sqlite", rows, ddl=ddl,
                   after=["ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL ADD COLUMN graphNodeId INTEGER",
                          "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, correlationId, demangledName, "
                          "graphNodeId) VALUES (5000, 5001, 99, 1, 12)"])
    assert _direct_tables(path) == {"kernels": "direct"}
    _same_trace(path)
    g = nsysan.open_trace(path).kernels["graph_node_id"]
    assert g.isna().sum() == 5 and g.dropna().tolist() == [12]


def test_a_column_default_is_left_to_sqlite(tmp_path):
    ddl = KERNEL_DDL.replace("streamId INTEGER", "streamId INTEGER DEFAULT 7")
    path = _export(tmp_path / "dflt.sqlite", [_row(i) for i in range(3)], ddl=ddl)
    assert _direct_tables(path) == {"kernels": "none"}
    _same_trace(path)


@pytest.mark.parametrize("value", [1.5, "abc", b"\x00\x01"])
def test_non_integer_values_are_declined(tmp_path, value):
    """A REAL, TEXT or BLOB in a wanted column: the direct reader declines and SQLite's path decides
    (a REAL is truncated, text that is not a number drops the row with a warning, a blob is damage)."""
    rows = [_row(i) for i in range(4)] + [_row(4, start=value)]
    path = _export(tmp_path / "mixed.sqlite", rows)
    assert _direct_tables(path) == {"kernels": "declined"}
    if isinstance(value, bytes):
        for read in (nsysan.open_trace, _through_sqlite):
            with pytest.raises(CorruptTraceError):
                read(path)
    else:
        _same_trace(path)


def test_numeric_text_is_stored_as_an_integer(tmp_path):
    """SQLite's INTEGER affinity stores '12' as the integer 12: the direct reader reads it."""
    path = _export(tmp_path / "aff.sqlite", [_row(i) for i in range(4)] + [_row(4, correlationId="12")])
    assert _direct_tables(path) == {"kernels": "direct"}
    _same_trace(path)
    assert 12 in nsysan.open_trace(path).kernels["correlation_id"].tolist()


def test_text_in_an_unread_column_is_fine(tmp_path):
    rows = [_row(i, note="x" * 50) for i in range(10)]
    path = _export(tmp_path / "note.sqlite", rows)
    assert _direct_tables(path) == {"kernels": "direct"}
    _same_trace(path)


def test_overflow_pages_are_declined(tmp_path):
    """A row longer than a page spills to overflow pages: declined, read by SQLite, same frames."""
    rows = [_row(i) for i in range(10)] + [_row(10, note="y" * 10_000)]
    path = _export(tmp_path / "overflow.sqlite", rows)
    assert _direct_tables(path) == {"kernels": "declined"}
    _same_trace(path)


def test_without_rowid_is_left_to_sqlite(tmp_path):
    ddl = KERNEL_DDL.replace("start INTEGER NOT NULL", "start INTEGER NOT NULL PRIMARY KEY")[:-1] + ") WITHOUT ROWID"
    path = _export(tmp_path / "wr.sqlite", [_row(i) for i in range(5)], ddl=ddl)
    assert _direct_tables(path) == {"kernels": "none"}
    _same_trace(path)


def test_keep_only_filter_and_null_filter_values(tmp_path):
    """OSRT keeps eventClass 27 only; a NULL eventClass is not 27 (as in SQL)."""
    con = sqlite3.connect(tmp_path / "o.sqlite")
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    con.execute("INSERT INTO StringIds VALUES (1, 'read'), (2, 'write')")
    con.execute("CREATE TABLE TARGET_INFO_GPU (id INTEGER)")
    con.execute("CREATE TABLE OSRT_API (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER, "
                "globalTid INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER, nestingLevel INTEGER, "
                "callchainId INTEGER)")
    con.executemany("INSERT INTO OSRT_API VALUES (?,?,?,?,?,?,?,?)",
                    [(i * 10, i * 10 + 5, [27, 31, None, 27][i % 4], 7, 1 + i % 2, 0, 0, 0) for i in range(40)])
    con.commit()
    con.close()
    path = tmp_path / "o.sqlite"
    assert _direct_tables(path) == {"osrt": "direct"}
    _same_trace(path)
    assert len(nsysan.open_trace(path).osrt) == 20


def test_damaged_page_falls_back_to_sqlite_and_its_error(tmp_path):
    """A leaf page whose type byte is destroyed: the direct reader declines, SQLite reports the
    damage as a CorruptTraceError, the copy of the user's file is never modified."""
    path = _export(tmp_path / "dmg.sqlite", [_row(i) for i in range(2000)])
    with Database(path) as db:
        _, leaf_rows = db.direct_plan("CUPTI_ACTIVITY_KIND_KERNEL", [("s", "start", None)], None)
    victim = int(leaf_rows[len(leaf_rows) // 2, 0])
    data = bytearray(path.read_bytes())
    data[(victim - 1) * 4096] = 0x42
    path.write_bytes(bytes(data))
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    assert _direct_tables(path)["kernels"] in ("none", "declined")  # found while listing leaves, or later
    with pytest.raises(CorruptTraceError):
        nsysan.open_trace(path)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def test_truncated_file_is_declined(tmp_path):
    path = _export(tmp_path / "cut.sqlite", [_row(i) for i in range(3000)])
    cut = tmp_path / "cut2.sqlite"
    shutil.copyfile(path, cut)
    with cut.open("r+b") as f:
        f.truncate(cut.stat().st_size - 3 * 4096)
    with pytest.raises(CorruptTraceError):  # SQLite notices first here: the schema page count is wrong
        _direct_tables(cut)
    with pytest.raises(CorruptTraceError):
        nsysan.open_trace(cut)
    with Database(path) as db:  # the reader itself refuses pages past the end of the file
        p, leaf_rows = db.direct_plan("CUPTI_ACTIVITY_KIND_KERNEL", [("s", "start", None)], None)
        too_far = leaf_rows.copy()
        too_far[-1, 0] = path.stat().st_size // 4096 + 5
        assert db.direct_read(p, too_far) is None
        assert db.direct_read(p, leaf_rows) is not None


def _decode_starts(fd: int, size: int, leaf_rows: np.ndarray) -> np.ndarray:
    """The extension's own decode of the kernel table's ``start`` (record field 0) over ``leaf_rows``,
    with the file taken to be ``size`` bytes long."""
    from nsysan._native import _btree

    n = int(leaf_rows[:, 1].sum())
    data, valid = np.zeros(n, np.int64), np.zeros(n, np.uint8)
    _btree.decode(fd, 4096, 0, size, np.ascontiguousarray(leaf_rows.astype(np.uint32)).tobytes(), (0,), -1,
                  [(data, valid)])
    assert valid.all()
    return data


def test_runs_of_leaves_are_read_together_and_errors_name_their_page(tmp_path):
    """Leaves that follow each other in the file are read by one pread (up to 32 pages): the same
    values as SQLite's, in rowid order; where the file ends inside such a run, or a run reaches past
    the pages the header counts, the error names the first page missing, as a page-by-page read did."""
    from nsysan._native import Unsupported

    path = _export(tmp_path / "runs.sqlite", [_row(i) for i in range(6000)])
    with Database(path) as db:
        _, leaf_rows = db.direct_plan("CUPTI_ACTIVITY_KIND_KERNEL", [("s", "start", None)], None)
    pages = leaf_rows[:, 0].astype(np.int64)
    assert len(pages) > 40 and (np.diff(pages) == 1).all()  # one run longer than a read
    size = path.stat().st_size
    fd = os.open(path, os.O_RDONLY)
    try:
        assert _decode_starts(fd, size, leaf_rows).tolist() == [1000 + 10 * i for i in range(6000)]
        inside = int(pages[37])  # the sixth page of the second read
        with pytest.raises(Unsupported, match=rf"page number outside the file \(page {inside}\)"):
            _decode_starts(fd, (inside - 1) * 4096, leaf_rows)
    finally:
        os.close(fd)
    cut = tmp_path / "cut.sqlite"
    cut.write_bytes(path.read_bytes()[:(inside - 1) * 4096 + 100])  # the file ends inside page `inside`
    fd = os.open(cut, os.O_RDONLY)
    try:  # its header (and the size given) still count the pages that are gone
        with pytest.raises(Unsupported, match=rf"file shorter than its pages \(page {inside}\)"):
            _decode_starts(fd, size, leaf_rows)
        assert _decode_starts(fd, size, leaf_rows[:37]).tolist() == [1000 + 10 * i for i in range(
            int(leaf_rows[:37, 1].sum()))]
    finally:
        os.close(fd)


def test_an_output_no_field_fills_is_null_and_one_filled_twice_is_refused(tmp_path):
    """An output column that no record field (nor the rowid) fills reads as NULL in every row, also
    over rows whose values were decoded before; two fields into one column are refused."""
    from nsysan._native import _btree

    path = _export(tmp_path / "map.sqlite", [_row(i) for i in range(500)])
    with Database(path) as db:
        _, leaf_rows = db.direct_plan("CUPTI_ACTIVITY_KIND_KERNEL", [("s", "start", None)], None)
    n = int(leaf_rows[:, 1].sum())
    leaves = np.ascontiguousarray(leaf_rows.astype(np.uint32)).tobytes()
    fd = os.open(path, os.O_RDONLY)
    try:
        start, free = (np.full(n, 7, np.int64), np.ones(n, np.uint8)), (np.full(n, 7, np.int64), np.ones(n, np.uint8))
        _btree.decode(fd, 4096, 0, path.stat().st_size, leaves, (0,), -1, [start, free])
        assert start[0].tolist() == [1000 + 10 * i for i in range(500)] and start[1].all()
        assert not free[0].any() and not free[1].any()
        with pytest.raises(ValueError, match="filled twice"):
            _btree.decode(fd, 4096, 0, path.stat().st_size, leaves, (0, 0), -1, [start])
    finally:
        os.close(fd)


def test_switch_off_with_environment(tmp_path, monkeypatch):
    path = _export(tmp_path / "env.sqlite", [_row(i) for i in range(3)])
    monkeypatch.setenv("NSYSAN_READER", "sqlite")
    assert _direct_tables(path) == {"kernels": "none"}


@settings(max_examples=int(os.environ.get("NSYSAN_GEN_N", "40")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(page_size=st.sampled_from([512, 1024, 4096, 65536]),
       values=st.lists(st.tuples(st.integers(-(2**63), 2**63 - 1), st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
                                 st.integers(0, 2**40)), min_size=0, max_size=400),
       slots=st.integers(1, 50))
def test_generated_integer_tables(tmp_path_factory, page_size, values, slots):
    """Random int64 values (any size, NULLs), random page sizes, random part sizes: every part
    decodes to exactly what SQLite's SELECT returns, in the same order."""
    path = tmp_path_factory.mktemp("gen") / "g.sqlite"
    rows = [_row(i, correlationId=a, graphNodeId=b, globalPid=c) for i, (a, b, c) in enumerate(values)]
    _export(path, rows, page_size=page_size)
    outs = [("c", "correlationId", None), ("g", "graphNodeId", None), ("p", "globalPid", None),
            ("missing", None, 3), ("nothing", None, None)]
    with Database(path) as db:
        p, leaf_rows = db.direct_plan("CUPTI_ACTIVITY_KIND_KERNEL", outs, None)
        parts = [db.direct_read(p, part) for part in direct.split(leaf_rows, slots)]
    got = {c: [v for part in parts for v in part.column(c).to_list()] for c in ("c", "g", "p", "missing", "nothing")}
    con = sqlite3.connect(path)
    want = con.execute("SELECT correlationId, graphNodeId, globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchall()
    con.close()
    assert got["c"] == [w[0] for w in want]
    assert got["g"] == [w[1] for w in want]
    assert got["p"] == [w[2] for w in want]
    assert got["missing"] == [3] * len(want)
    assert got["nothing"] == [None] * len(want)


# -- prefetch: the CLI starts decoding before pandas is imported -----------------------------------


def test_prefetch_hands_over_identical_tables(fixture_dir, tmp_path):
    """A prefetched trace loads to the same frames as a plain load; the prefetch is taken once."""
    from nsysan.trace import prefetch

    path = tmp_path / "p.sqlite"
    shutil.copyfile(fixture_dir / "launch_eager.sqlite", path)
    plain = nsysan.open_trace(path)
    assert prefetch.start(path)
    assert prefetch.take(path, False) is not None  # taken: a second take finds nothing
    assert prefetch.take(path, False) is None
    assert prefetch.start(path)
    fetched = nsysan.open_trace(path)
    assert prefetch.take(path, False) is None  # open_trace took it over
    for name in INTERVAL_TABLES:
        assert_same_frames(getattr(plain, name), getattr(fetched, name), obj=name)


def test_prefetch_of_a_changed_file_is_not_used(fixture_dir, tmp_path):
    """The prefetch is keyed by path, size, mtime and inode: a file replaced in between is read anew."""
    from nsysan.trace import prefetch

    path = tmp_path / "c.sqlite"
    shutil.copyfile(fixture_dir / "launch_graph.sqlite", path)
    assert prefetch.start(path)
    shutil.copyfile(fixture_dir / "launch_eager.sqlite", path.with_suffix(".new"))
    os.replace(path.with_suffix(".new"), path)
    t = nsysan.open_trace(path)
    assert len(t.kernels) == len(nsysan.open_trace(fixture_dir / "launch_eager.sqlite").kernels)


@pytest.mark.parametrize("content", [b"", b"not sqlite at all", b"SQLite format 3\x00" + b"\x00" * 50])
def test_prefetch_ignores_what_it_cannot_read(tmp_path, content):
    from nsysan.trace import prefetch

    path = tmp_path / "bad.sqlite"
    path.write_bytes(content)
    assert prefetch.start(path) is False
    assert prefetch.start(tmp_path / "missing.sqlite") is False


def test_cli_prefetches_and_writes_the_same_json(fixture_dir, tmp_path):
    """``nsysan analyze`` (which prefetches) and the library path give byte-identical JSON."""
    from nsysan.cli import main
    from nsysan.report import jsonout

    out = tmp_path / "o.json"
    assert main(["analyze", str(fixture_dir / "ladder_baseline.sqlite"), "--json", str(out), "--no-html", "-q"]) == 0
    ref = jsonout.to_json(nsysan.analyze(nsysan.open_trace(fixture_dir / "ladder_baseline.sqlite")))
    assert out.read_text() == ref


def test_prefetch_respects_the_event_limit(fixture_dir, tmp_path):
    """Over --max-events nothing is decoded ahead: open_trace refuses the trace with its own error."""
    from nsysan.errors import ResourceLimitError
    from nsysan.trace import prefetch

    path = tmp_path / "limit.sqlite"
    shutil.copyfile(fixture_dir / "launch_eager.sqlite", path)
    assert prefetch.start(path, max_rows=100) is False
    assert prefetch.take(path, False) is None
    with pytest.raises(ResourceLimitError):
        nsysan.open_trace(path, max_rows=100)


@pytest.mark.parametrize("reader", ["direct", "sqlite"])
def test_event_limit_is_exact(fixture_dir, tmp_path, monkeypatch, reader):
    """--max-events counts exactly what a count(*) of every event table (and NVTX) gives, whether
    the counts come from the leaf lists (direct reader) or from rowid bounds then count(*) (SQLite):
    the limit itself passes, one less refuses, and a prefetch's columns count the same."""
    from nsysan.errors import ResourceLimitError
    from nsysan.trace import prefetch

    if reader == "sqlite":
        monkeypatch.setenv("NSYSAN_READER", "sqlite")
    path = fixture_dir / "launch_eager.sqlite"
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    n = 0
    for spec in S.ALL_SPECS:
        src = next((t for t in spec.sources if t in tables), None)
        if src and spec.name in INTERVAL_TABLES + ("nvtx_raw",):
            n += con.execute(f'SELECT count(*) FROM "{src}"').fetchone()[0]
    con.close()
    assert len(nsysan.open_trace(path, max_rows=n).kernels) > 0
    with pytest.raises(ResourceLimitError, match=f"{n:,} events exceed the limit of {n - 1:,}"):
        nsysan.open_trace(path, max_rows=n - 1)
    if reader == "direct":
        copy = tmp_path / "p.sqlite"
        shutil.copyfile(path, copy)
        assert prefetch.start(copy, max_rows=n) is True
        assert len(nsysan.open_trace(copy, max_rows=n).kernels) > 0
        assert prefetch.start(copy, max_rows=n) is True
        with pytest.raises(ResourceLimitError, match=f"{n:,} events"):
            nsysan.open_trace(copy, max_rows=n - 1)


@pytest.mark.parametrize("how", ["plain", "prefetched", "declined"])
def test_load_progress_counts_every_step_once(fixture_dir, tmp_path, how):
    """The load's progress (a terminal's progress line) ends at its total and never passes it: for a
    plain load, one whose tables the prefetch decoded, and one with a table the reader declined and
    SQLite read again (those steps were missing from the total, so the count ran past it)."""
    from nsysan.trace import prefetch

    if how == "declined":
        path = _export(tmp_path / "mixed.sqlite", [_row(i) for i in range(4)] + [_row(4, start=1.5)])
        assert _direct_tables(path) == {"kernels": "declined"}
    else:
        path = tmp_path / "t.sqlite"
        shutil.copyfile(fixture_dir / "launch_eager.sqlite", path)
        if how == "prefetched":
            assert prefetch.start(path)
    seen: list[tuple[int, int]] = []
    nsysan.open_trace(path, progress=lambda stage, i, n: seen.append((i, n)))
    assert seen and all(0 <= i <= n for i, n in seen) and seen[-1][0] == seen[-1][1]
    assert [i for i, _ in seen[1:]] == list(range(1, len(seen)))
