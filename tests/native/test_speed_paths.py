"""The fast paths of speed round 3 give what the plain paths give.

- the report's compiled templates kept in the user's cache: the same page cold, warm, without a
  cache, and with a damaged or unwritable cache;
- the timeline's varint columns in C (``_btree.varints``, ``_btree.lane``): the same bytes as numpy;
- small tables read through sqlite3 instead of ADBC: the same frames on every fixture;
- nested duplicate CUDA API rows looked for only when a correlation id repeats: the same rows kept
  as a brute-force reading of the rule.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest
from conftest import FIXTURE_NAMES, opened
from frame_check import assert_same_frames
from hypothesis import example, given
from hypothesis import strategies as st
from test_direct_reader import fixture_read

from nsysan.analyses import intervals as iv
from nsysan.report import html as html_mod
from nsysan.report import timeline, view
from nsysan.trace import direct
from nsysan.trace import finish as finish_mod
from nsysan.trace import load as load_mod


@pytest.fixture()
def fresh_environment(monkeypatch, tmp_path):
    """html.environment() rebuilt with the user cache in tmp_path (and rebuilt again afterwards)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    html_mod.environment.cache_clear()
    yield tmp_path / "xdg" / "nsysan" / "templates"
    html_mod.environment.cache_clear()


def _page(a) -> str:
    html_mod.environment.cache_clear()
    return html_mod.render(view.build(a, generated_by="test"))


def test_cached_templates_give_the_same_page(analysis, fresh_environment, monkeypatch):
    a = analysis("ladder_baseline")
    cold = _page(a)
    files = sorted(fresh_environment.glob("*.jinja"))
    assert len(files) >= 2  # report.html.j2 and the macros it imports
    stamps = [f.stat().st_mtime_ns for f in files]
    warm = _page(a)
    assert warm == cold
    assert [f.stat().st_mtime_ns for f in files] == stamps  # read, not written again
    monkeypatch.setattr(html_mod, "template_cache", lambda: None)
    assert _page(a) == cold  # no cache at all
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(fresh_environment.parents[1]))
    for f in files:  # damaged: a cut file, garbage after a valid header
        data = f.read_bytes()
        f.write_bytes(data[: len(data) // 2])
    assert _page(a) == cold
    assert [f.read_bytes() for f in files] != [b""] * len(files)
    for f in files:
        head = f.read_bytes().split(b"\n", 4)
        f.write_bytes(b"\n".join(head[:4]) + b"\n" + b"\x00garbage" * 10)
    assert _page(a) == cold


def test_a_template_cache_for_other_source_is_not_used(analysis, fresh_environment):
    a = analysis("ladder_baseline")
    cold = _page(a)
    for f in fresh_environment.glob("*.jinja"):  # the source's hash in the header no longer matches
        lines = f.read_bytes().split(b"\n", 4)
        lines[3] = b"0" * 64
        f.write_bytes(b"\n".join(lines))
    assert _page(a) == cold


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_an_unwritable_template_cache_is_ignored(analysis, fresh_environment):
    fresh_environment.mkdir(parents=True)
    fresh_environment.chmod(0o500)
    try:
        assert _page(analysis("ladder_baseline")) == _page(analysis("ladder_baseline"))
    finally:
        fresh_environment.chmod(0o700)


def test_a_template_cache_that_cannot_be_created_is_ignored(analysis, fresh_environment):
    fresh_environment.parent.mkdir(parents=True)
    fresh_environment.write_text("a file where the folder should be")
    a = analysis("ladder_baseline")
    page = _page(a)
    assert fresh_environment.read_text() == "a file where the folder should be"
    html_mod.environment.cache_clear()
    assert page == html_mod.environment().get_template("report.html.j2").render(
        r=view.build(a, generated_by="test"))


needs_c = pytest.mark.skipif(not hasattr(direct._btree, "lane"), reason="the C extension is not built")


@needs_c
def test_c_varints_equal_numpy():
    rng = np.random.default_rng(7)
    edges = np.array([0, 1, 127, 128, 16383, 16384, 2**21 - 1, 2**21, 2**62, 2**63 - 1], dtype=np.int64)
    for _ in range(200):
        cols = tuple(rng.integers(0, 2 ** int(rng.integers(1, 63)), size=int(rng.integers(0, 500)), dtype=np.int64)
                     for _ in range(int(rng.integers(1, 6)))) + (edges,)
        assert direct._btree.varints(list(cols)) == b"".join(timeline.varint(c) for c in cols)
    with pytest.raises(ValueError):
        direct._btree.varints([np.array([3, -1], dtype=np.int64)])
    with pytest.raises(TypeError):
        direct._btree.varints([np.array([1.5])])


@needs_c
def test_c_lane_equals_numpy_encoding():
    rng = np.random.default_rng(11)
    for k in range(300):
        n = int(rng.integers(0, 400))
        start = rng.integers(-10**6, 10**12, size=n)
        if k % 3 == 0:
            start = np.sort(start)
        end = start + rng.integers(-1000, 10**7, size=n)  # some end before their start
        if k % 4 == 0 and n:
            start[: n // 2] = start[0]  # ties
        name, kind = rng.integers(0, 300, size=n), rng.integers(0, 10, size=n)
        depth = None if k % 2 else rng.integers(-2, 6, size=n)
        t0 = int(rng.integers(-10**6, 10**9))
        text_np, order_np = timeline.encode_ops(start - t0, end - t0, name, kind, depth)
        if k % 5 == 1:  # one kind for every op, as an int
            kind = np.full(n, 3)
            text_np, _ = timeline.encode_ops(start - t0, end - t0, name, kind, depth)
            kind = 3
        elif k % 5 == 2:  # narrow name ids and kind codes, taken as they are
            name, kind = name.astype(np.int32), kind.astype(np.int8)
        text, order, covered = timeline.encode_lane(start, end, name, kind, depth, t0)
        assert text == text_np
        # None: the rows as they are, only when the starts are sorted
        assert order is None or not bool((np.diff(start) >= 0).all())
        assert np.array_equal(np.arange(n) if order is None else order, order_np)
        ms, me = iv.merge(start, end) if n else (np.zeros(0, np.int64), np.zeros(0, np.int64))
        assert covered == int(np.sum(me - ms))
    with pytest.raises(ValueError):
        direct._btree.lane(np.array([0]), np.array([5]), np.array([6]), np.array([-1]), np.array([0]), None, 0)
    with pytest.raises(IndexError):
        direct._btree.lane(np.array([3]), np.array([5]), np.array([6]), np.array([1]), np.array([0]), None, 0)


@pytest.mark.parametrize("name", FIXTURE_NAMES)
@pytest.mark.parametrize("all_columns", [False, True])
def test_small_tables_through_sqlite3_equal_adbc(fixture_dir, monkeypatch, all_columns, name):
    """Every fixture's frames, small tables read through sqlite3 (the default) and through ADBC
    (every table counted as big)."""
    path = fixture_dir / f"{name}.sqlite"
    monkeypatch.setattr(load_mod, "SMALL_ROWS", 0)
    through_adbc = load_mod.open_trace(path, all_columns=all_columns)
    monkeypatch.undo()
    # the default read (the run's shared one, ``conftest.opened``, when all_columns is off)
    # (with every column: the read test_direct_reader compares with SQLite's, shared)
    through_sqlite3 = fixture_read(path, last=True)[0] if all_columns else opened(path)
    assert through_adbc.meta == through_sqlite3.meta, name
    for table, df in through_adbc.tables().items():
        other = through_sqlite3.tables()[table]
        assert_same_frames(df, other, obj=f"{name}.{table}")
        assert list(df.dtypes) == list(other.dtypes), (name, table)


def _kept_by_definition(df: pd.DataFrame) -> list[int]:
    """Rows kept: a row is dropped when an earlier row of its thread has its (positive) correlation
    id and its interval contains the row's."""
    first: dict[tuple[int, int], int] = {}
    kept = []
    for i, (tid, corr, st, en) in enumerate(zip(df["global_tid"], df["correlation_id"], df["start_ns"], df["end_ns"])):
        c = -1 if corr is pd.NA else int(corr)
        key = (int(tid), c)
        if c > 0 and key in first:
            j = first[key]
            if st >= df["start_ns"].iloc[j] and en <= df["end_ns"].iloc[j]:
                continue
        first.setdefault(key, i)
        kept.append(i)
    return kept


def test_nested_duplicates_dropped_as_defined():
    rng = np.random.default_rng(3)
    for k in range(300):
        n = int(rng.integers(2, 120))
        corr = rng.integers(-2, int(rng.integers(2, 40)), size=n)
        if k % 5 == 0:
            corr = rng.permutation(n) + int(rng.integers(-1, 3))  # every id once: the bitmap's answer
        if k % 7 == 0:
            corr = corr + 10**12  # ids too large for the bitmap
        ids = pd.array(corr, dtype="Int64")
        if k % 3 == 0:
            ids[rng.integers(0, n, size=2)] = pd.NA
        start = rng.integers(0, 1000, size=n)
        # threads of one process, or of several (ids repeat across processes: no row is a repeat then)
        pids = rng.integers(0, 3, size=n) if k % 2 else np.zeros(n, dtype=np.int64)
        gtid = (pids << 24) | rng.integers(0, 3, size=n)
        df = pd.DataFrame({"correlation_id": ids, "global_tid": gtid, "start_ns": start,
                           "end_ns": start + rng.integers(0, 200, size=n)})
        got = finish_mod._drop_nested_duplicates(df)
        want = df.iloc[_kept_by_definition(df)].reset_index(drop=True)
        pd.testing.assert_frame_equal(got.reset_index(drop=True), want)
        # the global ids left out (an extra column): pid and tid say the thread
        split = df.drop(columns="global_tid").assign(pid=(gtid >> 24).astype(np.int32),
                                                     tid=(gtid & 0xFFFFFF).astype(np.int32))
        got = finish_mod._drop_nested_duplicates(split)
        pd.testing.assert_frame_equal(got.reset_index(drop=True),
                                      split.iloc[_kept_by_definition(df)].reset_index(drop=True))


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads through /proc")
def test_numpy_imported_without_blas_threads_and_nothing_passed_on():
    import subprocess
    import sys

    code = ("import os\nfrom nsysan._startup import numpy_without_blas_threads as f\nf()\n"
            "print(len(os.listdir('/proc/self/task')), 'OPENBLAS_NUM_THREADS' in os.environ)")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["1", "False"]  # one thread: OpenBLAS started none; the variable is gone


def test_the_c_extension_was_built_where_a_compiler_exists():
    """The fast paths fall back silently when ``_btree.c`` fails to compile (the install only warns),
    so a broken C source would pass every other test: where a C compiler and Python's headers are
    present, the extension must be there."""
    import shutil
    import sysconfig
    from pathlib import Path

    if not (shutil.which("cc") or shutil.which("gcc")) or not (Path(sysconfig.get_paths()["include"]) / "Python.h").exists():
        pytest.skip("no C compiler or Python headers: nsysan reads through SQLite")
    from nsysan import _native

    assert _native.loaded() is not None, "the C source did not compile"


# --- speed round 3, small traces: one analysis thread, copy byte sums without a group-by ----------

COPY_SQL = """
SELECT CASE copyKind WHEN 1 THEN 'HtoD' WHEN 2 THEN 'DtoH' WHEN 3 THEN 'HtoA' WHEN 4 THEN 'AtoH'
         WHEN 5 THEN 'AtoA' WHEN 6 THEN 'AtoD' WHEN 7 THEN 'DtoA' WHEN 8 THEN 'DtoD' WHEN 9 THEN 'HtoH'
         WHEN 10 THEN 'PtoP' WHEN 11 THEN 'UVM HtoD' WHEN 12 THEN 'UVM DtoH' WHEN 13 THEN 'UVM DtoD'
         ELSE 'Unknown' END AS kind,
       CASE WHEN copyKind IN (1, 3) THEN srcKind WHEN copyKind IN (2, 4) THEN dstKind ELSE -1 END AS host,
       bytes
FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE start IS NOT NULL AND "end" IS NOT NULL
"""


@pytest.mark.parametrize("name", [n for n in FIXTURE_NAMES if n.startswith(("ladder_", "ddp_", "decode_", "jax",
                                                                            "pipeline", "timing", "waits_sync"))])
def test_copy_kinds_bytes_and_host_memory_equal_sql(fixture_dir, analysis, name):
    import sqlite3

    con = sqlite3.connect(f"file:{fixture_dir / (name + '.sqlite')}?mode=ro", uri=True)
    try:
        has = con.execute("SELECT count(*) FROM sqlite_master WHERE name = 'CUPTI_ACTIVITY_KIND_MEMCPY'").fetchone()[0]
        rows = con.execute(COPY_SQL).fetchall() if has else []
    finally:
        con.close()
    truth: dict[str, dict[str, int]] = {}
    for kind, host, nbytes in rows:  # host memory kinds 0 pageable, 1 pinned (ENUM_CUDA_MEM_KIND)
        t = truth.setdefault(kind, dict.fromkeys(("total_bytes", "pageable_count", "pinned_count",
                                                  "pageable_bytes", "pinned_bytes"), 0))
        t["total_bytes"] += nbytes
        if host == 0:
            t["pageable_count"] += 1
            t["pageable_bytes"] += nbytes
        elif host == 1:
            t["pinned_count"] += 1
            t["pinned_bytes"] += nbytes
    m = analysis(name).memcpy
    got = {r["kind"]: {k: r[k] for k in truth.get(r["kind"], {})} for r in m.to_dict("records")}
    assert set(got) == set(truth)
    assert got == truth
    for c in ("total_bytes", "pageable_count", "pinned_count", "pageable_bytes", "pinned_bytes"):
        assert m[c].dtype == np.int64, c


def test_a_missing_copy_kind_takes_the_group_by_with_the_same_columns():
    from nsysan.analyses.summaries import memcpy_stats

    m = pd.DataFrame({"kind": pd.array(["HtoD", "HtoD", "DtoH"], dtype="string"),
                      "host_mem": pd.array(["Pageable", "Pinned", "Pinned"], dtype="string"),
                      "bytes": np.array([10, 20, 40], dtype=np.int64), "dur_ns": np.array([5, 6, 7], dtype=np.int64)})
    fast = memcpy_stats(m)
    assert fast[["kind", "total_bytes", "pageable_count", "pinned_bytes"]].values.tolist() == \
        [["HtoD", 30, 1, 20], ["DtoH", 40, 0, 40]]  # by total time, descending
    missing = m.assign(kind=pd.array(["HtoD", None, "DtoH"], dtype="string"))
    slow = memcpy_stats(missing)  # the group-by path: the copy without a kind has no byte sums
    assert list(slow.columns) == list(fast.columns)


def test_small_traces_analyse_on_one_thread(load, monkeypatch):
    from nsysan._executor import SMALL_EVENTS
    from nsysan.analysis import analyze, default_workers, event_rows
    from nsysan.report import jsonout

    monkeypatch.delenv("NSYSAN_THREADS", raising=False)
    trace = load("ladder_baseline")
    n = event_rows(trace)
    assert n == sum(len(getattr(trace, t)) for t in ("kernels", "memcpy", "memset", "cuda_api", "osrt", "nvtx"))
    assert 0 < n < SMALL_EVENTS and default_workers(n) == 1
    assert default_workers(SMALL_EVENTS) == min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    monkeypatch.setenv("NSYSAN_THREADS", "3")
    assert default_workers(n) == 3  # the user's choice wins
    assert jsonout.to_json(analyze(trace)) == jsonout.to_json(analyze(trace, workers=2))


def test_threads_follow_the_cpus_this_process_may_use(monkeypatch):
    """Two cores of a 16-core machine (taskset, a container's or a batch job's cpuset): the analysis,
    the loader's readers and ``--jobs`` count those 2, not the machine's 16; without an affinity
    mask (macOS), the machine's count."""
    from nsysan import _executor
    from nsysan._executor import SMALL_EVENTS
    from nsysan.analysis import default_workers
    from nsysan.options import positive_jobs

    monkeypatch.delenv("NSYSAN_THREADS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert _executor.cpus() == 2
    assert default_workers(SMALL_EVENTS) == 2
    assert positive_jobs(0, 100) == 2 and positive_jobs(8, 100) == 2
    monkeypatch.delattr(os, "sched_getaffinity")
    assert _executor.cpus() == 16 and default_workers(SMALL_EVENTS) == 4


def test_a_growing_pool_runs_every_task_and_takes_more_threads_when_told():
    """The prefetch's pool: one thread while the imports run, more once they are done (``grow``);
    every task runs once, in order on one thread, errors reach ``result``, ``shutdown`` waits."""
    import threading

    from nsysan._executor import Growing

    pool = Growing(1, "t-grow")
    gate, order = threading.Event(), []
    first = pool.submit(gate.wait, 10)
    later = [pool.submit(order.append, i) for i in range(5)]
    assert not any(f.done() for f in later)  # one thread, held by the first task
    gate.set()
    assert first.result(10) is True and [f.result(10) for f in later] == [None] * 5 and order == list(range(5))
    barrier = threading.Barrier(3, timeout=10)  # three tasks that finish only together: three threads
    pool.grow(3)
    pool.grow(2)  # never fewer
    assert sorted(f.result(10) for f in [pool.submit(barrier.wait) for _ in range(3)]) == [0, 1, 2]
    assert len({t.name for t in threading.enumerate() if t.name.startswith("t-grow_")}) == 3
    with pytest.raises(ZeroDivisionError):
        pool.submit(lambda: 1 // 0).result(10)
    slow = pool.submit(lambda: threading.Event().wait(0.2) or "done")
    pool.shutdown(wait=True)
    assert slow.done() and slow.result() == "done"
    assert not [t for t in threading.enumerate() if t.name.startswith("t-grow_")]
    with pytest.raises(RuntimeError):
        pool.submit(print)


def test_the_prefetch_decodes_on_every_cpu_once_taken(fixture_dir, tmp_path, monkeypatch):
    """While the command line imports pandas the prefetch keeps one core free (one thread on 2
    cores); ``take`` is called after the imports, and what is left to decode gets both."""
    from nsysan.trace import prefetch

    monkeypatch.setattr(prefetch, "cpus", lambda: 2)
    path = tmp_path / "g.sqlite"
    path.write_bytes((fixture_dir / "launch_eager.sqlite").read_bytes())
    assert prefetch.start(path)
    with prefetch._lock:
        assert len(prefetch._started[prefetch._key(path, False)].pool._threads) == 1
    got = prefetch.take(path, False)
    assert got is not None and len(got.pool._threads) == 2
    got.close()


def test_the_collector_is_paused_for_the_imports_only(fixture_dir, tmp_path, monkeypatch):
    import gc

    from nsysan import _startup, cli

    monkeypatch.setenv("NSYSAN_NO_CACHE", "1")
    seen = []
    real = _startup.resume_collector

    def resume():
        seen.append(gc.isenabled())
        real()
        seen.append(gc.isenabled())

    monkeypatch.setattr(_startup, "resume_collector", resume)
    assert gc.isenabled()
    code = cli.main(["analyze", str(fixture_dir / "ladder_baseline.sqlite"), "--json", str(tmp_path / "a.json"),
                     "--html", str(tmp_path / "a.html"), "-q"])
    assert code == 0
    assert seen[:2] == [False, True]  # paused until after the imports, then running for the analysis
    assert gc.isenabled()
    gc.unfreeze()


def _glibc_loaded() -> bool:
    try:
        with open("/proc/self/maps") as f:
            return "libc.so.6" in f.read()
    except OSError:
        return False


@pytest.mark.skipif(not _glibc_loaded(), reason="not glibc")
def test_the_c_library_is_opened_once_without_a_subprocess(monkeypatch):
    import ctypes.util

    from nsysan import _memory

    calls = []
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: calls.append(name) or None)
    monkeypatch.setattr(_memory, "_libc", False)
    _memory.release()
    first = _memory._glibc()
    _memory.release()
    assert first is not None and _memory._glibc() is first
    assert calls == []  # glibc by its soname: no `ldconfig -p` subprocess


def test_only_the_command_lines_own_process_keeps_freed_memory(monkeypatch):
    """A library user's process keeps glibc's defaults (trim, mmap) and ``release`` trims; the
    command line's own process (``own_process``) gets one arena, no mmap and no trim, and
    ``release`` hands nothing back but before the rules (``before_peak``)."""
    from nsysan import _memory

    class FakeLibc:
        def __init__(self):
            self.calls = []

        def mallopt(self, param, value):
            self.calls.append((param, value))
            return 1

        def malloc_trim(self, pad):
            self.calls.append(("trim", pad))
            return 1

    monkeypatch.setattr(_memory.sys, "platform", "linux")
    for owned, expected in ((False, [(_memory._M_MMAP_THRESHOLD, 32 << 20), (_memory._M_ARENA_MAX, 2), ("trim", 0)]),
                            (True, [(_memory._M_MMAP_THRESHOLD, 32 << 20), (_memory._M_ARENA_MAX, 1),
                                    (_memory._M_MMAP_MAX, 0), (_memory._M_TRIM_THRESHOLD, 2**31 - 1)])):
        fake = FakeLibc()
        monkeypatch.setattr(_memory, "_libc", fake)
        monkeypatch.setattr(_memory, "_malloc_tuned", False)
        monkeypatch.setattr(_memory, "_owned", owned)
        monkeypatch.setattr(_memory, "_tuned", True)  # (Arrow's pool: not this test's concern)
        _memory.tune_malloc()
        _memory.release()
        assert fake.calls == expected
        _memory.release(before_peak=True)  # the one trim either process gets: before the rules
        assert fake.calls == [*expected, ("trim", 0)]


@given(st.lists(st.integers(-2**62, 2**62), max_size=300), st.lists(st.integers(-2**62, 2**62), max_size=300),
       st.booleans(), st.sampled_from(["left", "right"]), st.integers(0, 5))
@example([], [5, 3], False, "left", 0)
@example([1, 1, 1, 2, 2], [1, 2, 0, 3, 1], False, "right", 0)
def test_galloping_search_equals_numpy(a, v, in_order, side, spread):
    """``intervals.search`` (the C gallop from the previous answer) gives numpy's positions for any
    needles, in order or not, duplicates and the int64 extremes included."""
    from nsysan.analyses import intervals as iv
    from nsysan.trace import direct

    if getattr(direct._btree, "search_sorted", None) is None:
        pytest.skip("the C extension is not built")
    hay = np.sort(np.array([x >> spread for x in a], dtype=np.int64))
    nee = np.array(sorted(v) if in_order else v, dtype=np.int64)
    out = np.empty(len(nee), dtype=np.int64)
    direct._btree.search_sorted(hay, nee, side == "right", out)  # the C pass itself, whatever the size
    assert out.tolist() == np.searchsorted(hay, nee, side=side).tolist()
    assert iv.search(hay, nee, side).tolist() == np.searchsorted(hay, nee, side=side).tolist()


def test_galloping_search_rejects_bad_buffers():
    from nsysan.trace import direct

    if getattr(direct._btree, "search_sorted", None) is None:
        pytest.skip("the C extension is not built")
    with pytest.raises(TypeError):
        direct._btree.search_sorted(np.zeros(3, np.int32), np.zeros(2, np.int64), False, np.zeros(2, np.int64))
    with pytest.raises(ValueError):
        direct._btree.search_sorted(np.zeros(3, np.int64), np.zeros(2, np.int64), False, np.zeros(3, np.int64))
    with pytest.raises(ValueError):  # a float64 output of the right size is not taken either
        direct._btree.search_sorted(np.zeros(3, np.int64), np.zeros(2, np.int64), False, np.zeros(2, np.float64))


def test_the_timeline_can_start_before_the_rules(load):
    """``analyze(on_analyses=...)`` is called once, with every analysis in place and no finding yet,
    and the result is the one without it (the command line starts the timeline encoding there)."""
    from nsysan import analysis
    from nsysan.report import jsonout

    t = load("ladder_baseline")
    seen = []

    def hook(a):
        seen.append((a, list(a.findings), a.gaps is not None and a.ops is not None and a.nvtx_ranges is not None))

    with_hook = analysis.analyze(t, on_analyses=hook)
    assert len(seen) == 1 and seen[0][0] is with_hook and seen[0][1] == [] and seen[0][2]
    assert jsonout.to_json(with_hook) == jsonout.to_json(analysis.analyze(t))


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_the_c_window_choice_equals_the_numpy_one(analysis, load, name, monkeypatch):
    """``_btree.window_best`` (each gap's sync flag and best entry in one C pass) gives the gap
    frame the numpy path gives: causes, activities, breakdowns, on every fixture."""
    from nsysan.analyses import gaps as G

    if G._fast_window_best() is None:
        pytest.skip("the C extension is not built")
    a = analysis(name)
    if len(a.ops) == 0:
        pytest.skip("no GPU ops")
    fast = G.idle_gaps(load(name), a.ops, a.capture)
    monkeypatch.setattr(G, "_fast_window_best", lambda: None)
    slow = G.idle_gaps(load(name), a.ops, a.capture)
    assert fast["cause"].astype(str).tolist() == slow["cause"].astype(str).tolist()
    assert fast["activity"].astype(str).tolist() == slow["activity"].astype(str).tolist()
    assert fast["breakdown"].tolist() == slow["breakdown"].tolist()
    assert fast.drop(columns=["breakdown"]).equals(slow.drop(columns=["breakdown"]))


def test_window_best_by_hand():
    """Ties go to the first entry; source 0 over half the span wins, then source 1, then any source
    with at least the share; the sync flag sums source 0's sync codes (code -1 at the last slot)."""
    from nsysan.trace import direct

    fast = getattr(direct._btree, "window_best", None)
    if fast is None:
        pytest.skip("the C extension is not built")
    win = np.array([0, 0, 0, 1, 1, 3], dtype=np.int32)
    src = np.array([0, 1, 0, 1, 2, 2], dtype=np.int8)
    code = np.array([1, 0, -1, 0, 4, 0], dtype=np.int32)
    ns = np.array([60, 90, 60, 40, 40, 5], dtype=np.int64)
    span = np.array([100, 100, 10, 100], dtype=np.int64)
    sync = np.array([False, True, True])  # codes 0, 1; code -1 at the last slot (a sync call too)
    b, s = fast(win, src, code, ns, span, sync, 0.1)
    # window 0: source 0's best is 60 (first of the tie) and over half: entry 0; sync 60 + 60 > 100
    # window 1: no source 0; source 1's 40 is not over half; any source: 40 (first) >= 10: entry 3
    # window 2: no entries; window 3: 5 < 0.1 * 100: none
    assert np.frombuffer(b, np.int64).tolist() == [0, 3, -1, -1]
    assert np.frombuffer(s, np.uint8).tolist() == [1, 0, 0, 0]
    with pytest.raises(ValueError):  # windows not ascending
        fast(win[::-1].copy(), src, code, ns, span, sync, 0.1)
    with pytest.raises(ValueError):  # a source-0 code beyond the sync table
        fast(win, src, np.array([5, 0, -1, 0, 4, 0], np.int32), ns, span, sync, 0.1)
    with pytest.raises(TypeError):
        fast(win.astype(np.float64), src, code, ns, span, sync, 0.1)


@given(st.lists(st.tuples(st.integers(0, 10**6), st.integers(-5, 10**4)), max_size=60), st.integers(0, 4))
@example([(0, 5), (6, 9)], 0)  # apart: the inputs themselves
@example([(0, 5), (5, 9)], 0)  # touching: merged
@example([(0, 5), (7, 3)], 0)  # an interval ending before it starts
def test_merge_returns_disjoint_inputs_themselves_and_unions_others(pairs, spread):
    """``intervals.merge`` equals a sweep for any intervals; when they are sorted, apart and each
    ends at or after its start, the result is the input arrays themselves (no copy)."""
    s = np.array([a << spread for a, _ in pairs], dtype=np.int64)
    e = s + np.array([d for _, d in pairs], dtype=np.int64)
    ms, me = iv.merge(s, e)
    order = np.argsort(s, kind="stable")
    ss, ee = s[order], e[order]
    want_s: list[int] = []
    want_e: list[int] = []
    run = None
    for a, b in zip(ss.tolist(), ee.tolist()):  # the groups as the general path forms them
        if run is None or a > run:
            want_s.append(a)
            want_e.append(b)
        else:
            want_e[-1] = max(want_e[-1], b)
        run = b if run is None else max(run, b)
    assert ms.tolist() == want_s and me.tolist() == want_e
    apart = len(s) > 0 and bool((np.diff(s) > 0).all()) and bool((s[1:] > e[:-1]).all()) and bool((e >= s).all())
    assert (ms is s and me is e) == apart


def test_rows_of_gives_views_of_runs_and_copies_otherwise():
    from nsysan.analyses.frames import rows_of

    v = np.arange(5000, dtype=np.int64) * 3
    assert rows_of(v, np.arange(5000)) is v
    run = rows_of(v, np.arange(10, 4000))
    assert np.shares_memory(run, v) and run.tolist() == v[10:4000].tolist()
    holes = np.r_[np.arange(10, 2000), np.arange(2001, 4000)]
    got = rows_of(v, holes)
    assert not np.shares_memory(got, v) and got.tolist() == v[holes].tolist()


def test_kernel_only_ops_move_no_bytes_without_a_column_of_zeros(load):
    """gpu_ops of a kernels-only trace (launch_eager: no copy or memset table, one GPU): bytes is one
    read-only zero for every row, and so is the gaps' device id; both read as full columns."""
    from nsysan import analysis

    a = analysis.analyze(load("launch_eager"))
    assert len(a.trace.kernels) and not len(a.trace.memcpy) and not len(a.trace.memset)
    b = a.ops["bytes"].to_numpy()
    assert b.strides == (0,) and not b.flags.writeable and len(b) == len(a.ops) and not b.any()
    assert a.ops["bytes"].sum() == 0 and a.ops.take([0, len(a.ops) - 1])["bytes"].tolist() == [0, 0]
    d = a.gaps["device_id"].to_numpy()
    assert d.strides == (0,) and set(d.tolist()) == set(a.ops["device_id"].tolist()) and len(d) == len(a.gaps)


@needs_c
@pytest.mark.parametrize("code_type", [np.int8, np.int16, np.int32, np.int64])
def test_c_clipped_sums_equal_numpy(code_type, monkeypatch):
    """``range_sums`` through the C pass (name codes in their own width, windows and codes back
    as int32) equals the numpy path, with and without row positions and the end filter."""
    import types

    from nsysan import _native
    from nsysan._native.windows import range_sums

    rng = np.random.default_rng(5)
    for k in range(60):
        n = int(rng.integers(0, 300))
        st_ = np.sort(rng.integers(0, 10**6, size=n)).astype(np.int64)
        en = st_ + rng.integers(0, 5000, size=n)
        codes = rng.integers(-1, 100, size=n).astype(code_type)
        cats = np.array([f"n{i}" for i in range(100)], dtype=object)
        m = int(rng.integers(0, 50))
        lo = np.sort(rng.integers(0, 10**6, size=m)).astype(np.int64)
        hi = lo + rng.integers(1, 20000, size=m)
        rows = np.sort(rng.choice(n, size=n // 2, replace=False)) if (k % 2 and n) else None
        base_s, base_e = (st_, en) if rows is None else (st_[rows], en[rows])
        i0 = np.searchsorted(np.maximum.accumulate(base_e) if len(base_e) else base_e, lo, side="right")
        i1 = np.searchsorted(base_s, hi, side="left")
        filt = bool(k % 3 == 0)
        fast = range_sums(0, st_, en, codes, len(cats), lo, hi, i0, i1, rows, filt)
        with monkeypatch.context() as mp:
            mp.setattr(_native, "_btree", types.SimpleNamespace())
            slow = range_sums(0, st_, en, codes, len(cats), lo, hi, i0, i1, rows, filt)
        assert fast[0].dtype == np.int32 and fast[2].dtype == np.int32
        for x, y in zip(fast, slow):
            assert x.tolist() == y.tolist()


def test_report_streams_are_standard_zlib_from_either_backend(monkeypatch):
    """The report's deflate (ISA-L where installed, else the standard library) writes zlib streams
    that the standard library reads back to the same bytes; without isal it falls back to zlib."""
    import importlib
    import sys
    import zlib

    from nsysan.report import deflate

    rng = np.random.default_rng(3)
    raws = [b"", b"x", bytes(rng.integers(0, 4, size=200_000, dtype=np.uint8)),
            direct._btree.varints([rng.integers(0, 10**6, size=50_000)]) if hasattr(direct._btree, "varints")
            else bytes(range(256)) * 100]
    for raw in raws:
        assert zlib.decompress(deflate.compress(raw)) == raw
    monkeypatch.setitem(sys.modules, "isal", None)  # an import of it fails, as where it is not installed
    try:
        plain = importlib.reload(deflate)
        assert plain.BACKEND == "zlib"
        for raw in raws:
            assert plain.compress(raw) == zlib.compress(raw, 1)
    finally:
        monkeypatch.delitem(sys.modules, "isal")
        importlib.reload(deflate)


def test_the_timeline_lanes_decode_to_the_encoded_columns(analysis):
    """Every lane's text is base64 of a zlib stream of its varint columns, whichever backend wrote
    it: decoded, the first column's start deltas sum to the last op's start (relative to t0)."""
    import base64
    import zlib

    a = analysis("launch_eager")
    tl = timeline.build_timeline(a)
    for lane in tl["lanes"]:
        raw = zlib.decompress(base64.b64decode(lane["data"]))
        vals, cur, shift = [], 0, 0
        for byte in raw:
            cur |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                vals.append(cur)
                cur, shift = 0, 0
        n = lane["n"]
        assert len(vals) == 5 * n
        if n and lane["group"] == "api":
            api = a.trace.cuda_api
            assert sum(vals[:n]) == int(api["start_ns"].max()) - tl["t0"]


def test_busy_stream_keys_of_broadcast_columns_equal_packed_keys():
    """Busy.stream_keys over the loader's broadcast pid and stream columns gives the packed key of
    every selected op, as over full columns."""
    from nsysan.analyses import gpu
    from nsysan.trace.model import constant_column

    n = 5000
    st_ = np.arange(n, dtype=np.int64) * 10
    for pid, stream in ((constant_column(77, n, np.int32), constant_column(13, n, np.int32)),
                        (np.full(n, 77, np.int32), np.full(n, 13, np.int32))):
        ops = pd.DataFrame({"start_ns": st_, "end_ns": st_ + 5, "device_id": constant_column(0, n, np.int32),
                            "stream_id": stream, "pid": pid, "op": pd.Categorical(["kernel"] * n),
                            "role": pd.Categorical(["compute"] * n), "kind": pd.Categorical([""] * n)}, copy=False)
        b = gpu.Busy(ops)
        sel = (st_ % 3) == 0
        keys = b.stream_keys(sel)
        assert keys.tolist() == [(77 << 32) | 13] * int(sel.sum())


@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 50)), max_size=80), st.booleans())
@example([(3, 5), (3, 5), (1, 5), (3, 2)], True)
def test_first_launches_without_a_sort_equal_the_sorted_definition(pairs, in_call_order):
    """launch-bound's first launch of each kernel key: the backwards-write path (launches in call
    order) marks the same rows as the stable sort by (key, call start)."""
    from nsysan.rules.launch_bound import first_launches

    key = np.array([k for k, _ in pairs], dtype=np.int32)
    start = np.array([s for _, s in pairs], dtype=np.int64)
    if in_call_order:
        o = np.argsort(start, kind="stable")
        key, start = key[o], start[o]
    fast = first_launches(key, start)
    slow = first_launches(key, start, fast=False)
    assert fast.tolist() == slow.tolist()
    seen: dict[int, int] = {}
    for i, (k, s) in enumerate(zip(key.tolist(), start.tolist())):  # by hand: earliest call, then row
        if k not in seen or s < start[seen[k]]:
            seen[k] = i
    assert [i for i, f in enumerate(fast.tolist()) if f] == sorted(seen.values())


def test_a_stale_build_of_the_extension_is_not_used(monkeypatch):
    """The C passes are used only from a build of the source this code goes with: a module of
    another VERSION (an editable install not rebuilt after a pull) gives None, so the numpy paths
    run, with the same results."""
    import types

    from nsysan import _native
    from nsysan.analyses import intervals as iv

    if direct._btree is not None:
        assert direct._btree.VERSION == direct.VERSION
    stale = types.SimpleNamespace(**{k: getattr(direct._btree, k) for k in dir(direct._btree) if not k.startswith("_")}) \
        if direct._btree is not None else types.SimpleNamespace()
    stale.VERSION = direct.VERSION - 1
    monkeypatch.setattr(_native, "_btree", stale)
    assert direct.c_pass("lane") is None and direct.c_pass("clipped_sums") is None and not direct.available()
    hay = np.arange(0, 50_000, 3, dtype=np.int64)
    nee = np.arange(0, 50_000, 7, dtype=np.int64)
    assert iv.search(hay, nee).tolist() == np.searchsorted(hay, nee).tolist()


def _same_gaps(x: pd.DataFrame, y: pd.DataFrame) -> None:
    assert x["cause"].astype(str).tolist() == y["cause"].astype(str).tolist()
    assert x["activity"].astype(str).tolist() == y["activity"].astype(str).tolist()
    assert x["breakdown"].tolist() == y["breakdown"].tolist()
    assert x.drop(columns=["breakdown"]).equals(y.drop(columns=["breakdown"]))


# fixtures with many host gaps (launch loops, decoding), several submitting threads or processes
# (two_procs, the dataloader, the two-GPU recordings), nested NVTX ranges on the submitting thread
GAP_FIXTURES = [n for n in FIXTURE_NAMES if n.startswith(("launch_eager", "decode_eager", "ladder_baseline",
                                                          "ladder_worker", "two_procs", "train_", "ddp_straggler",
                                                          "waits_", "hf_generate", "pipeline"))]


@pytest.mark.parametrize("name", GAP_FIXTURES)
def test_gaps_explained_in_chunks_equal_all_at_once(analysis, load, name, monkeypatch):
    """The host gaps of a thread explained a chunk of windows at a time (the working set's bound)
    give the gap frame that all of them at once gives: every window's sums, best entry, label and
    breakdown depend on that window alone. Chunks of 7 windows against one chunk of all."""
    from nsysan.analyses import gaps as G

    a = analysis(name)
    if len(a.ops) == 0:
        pytest.skip("no GPU ops")
    monkeypatch.setattr(G, "EXPLAIN_CHUNK", 1 << 40)
    whole = G.idle_gaps(load(name), a.ops, a.capture)
    if int((whole["cause"].astype(str) == "host").sum() + (whole["cause"].astype(str) == "sync").sum()) < 8:
        pytest.skip("fewer host gaps than two chunks")
    monkeypatch.setattr(G, "EXPLAIN_CHUNK", 7)
    _same_gaps(G.idle_gaps(load(name), a.ops, a.capture), whole)


@pytest.mark.parametrize("name", ["ladder_baseline", "waits_phases", "train_inline", "decode_eager"])
def test_nvtx_swept_window_by_window_the_same_in_chunks(analysis, load, name, monkeypatch):
    """When more nested NVTX ranges touch a thread's gaps than ``INNERMOST_MAX``, the NVTX layer is
    swept window by window (the detailed gaps only); that decision is the whole thread's, so the
    chunks keep it (a chunk with few ranges would otherwise count NVTX in every window)."""
    from nsysan.analyses import gaps as G
    from nsysan.analyses import thread_activity as TA

    a = analysis(name)
    monkeypatch.setattr(TA, "INNERMOST_MAX", 2)
    swept = []
    real = TA.ThreadActivity.nvtx_swept
    monkeypatch.setattr(TA.ThreadActivity, "nvtx_swept",
                        lambda self, *args: swept.append(real(self, *args)) or swept[-1])
    monkeypatch.setattr(G, "EXPLAIN_CHUNK", 1 << 40)
    whole = G.idle_gaps(load(name), a.ops, a.capture)
    if not any(swept):
        pytest.skip("no thread with nested NVTX ranges over its gaps")
    monkeypatch.setattr(G, "EXPLAIN_CHUNK", 3)
    _same_gaps(G.idle_gaps(load(name), a.ops, a.capture), whole)


@pytest.mark.parametrize("name", ["two_procs", "train_dataloader", "hf_generate", "ddp_straggler", "waits_python"])
def test_thread_rows_by_comparison_equal_the_sorted_grouping(analysis, load, name, monkeypatch):
    """A thread's rows of a source several threads share: found by a comparison for the first
    threads asked for, by one sort by thread after that; the same gaps either way."""
    from nsysan.analyses import gaps as G
    from nsysan.analyses import thread_activity as TA

    a = analysis(name)
    if len(a.ops) == 0:
        pytest.skip("no GPU ops")
    by_compare = G.idle_gaps(load(name), a.ops, a.capture)
    monkeypatch.setattr(TA, "FEW_THREADS", 0)
    _same_gaps(G.idle_gaps(load(name), a.ops, a.capture), by_compare)
    t = load(name)
    index = TA.ThreadActivity(t)
    for source, df in index._sources:  # rows by hand: the thread's, ascending; every row as a slice
        for p, tid in set(zip(df["pid"].tolist(), df["tid"].tolist())):
            got = index._thread_rows(source, df, int(p), int(tid))
            want = np.flatnonzero((df["pid"].to_numpy() == p) & (df["tid"].to_numpy() == tid))
            assert (np.arange(len(df))[got] if isinstance(got, slice) else got).tolist() == want.tolist()


@pytest.mark.parametrize("name", ["launch_eager", "decode_eager", "ladder_baseline", "train_inline"])
def test_launch_bound_in_chunks_equals_all_at_once(load, name, monkeypatch):
    """launch-bound judges the launches a chunk at a time against each kernel's median: the same
    finding (message, impact, evidence) as one chunk of all of them."""
    from nsysan.analysis import analyze
    from nsysan.rules import launch_bound as lb

    monkeypatch.setattr(lb, "CHUNK", 1 << 40)
    whole = [f for f in analyze(load(name)).findings if f.rule == "launch-bound"]
    monkeypatch.setattr(lb, "CHUNK", 5)
    chunked = [f for f in analyze(load(name)).findings if f.rule == "launch-bound"]
    assert [(f.message, f.impact_ns, f.evidence) for f in chunked] == [(f.message, f.impact_ns, f.evidence) for f in whole]


@given(st.lists(st.tuples(st.integers(0, 12), st.integers(0, 10**6)), min_size=1, max_size=200))
@example([(0, 5), (0, 5), (1, 3)])
def test_median_per_key_equals_pandas(pairs):
    """Each key's median of its values (one per key) equals pandas' group-by median, and the
    per-element medians are it looked up."""
    from nsysan.rules.launch_bound import _median_per_key

    key = np.array([k for k, _ in pairs], dtype=np.int32)
    v = np.array([x for _, x in pairs], dtype=np.int64)
    keys, med = _median_per_key(key, v)
    want = pd.Series(v).groupby(key).median()
    assert keys.tolist() == want.index.tolist()
    assert med.tolist() == want.tolist()
    assert med[np.searchsorted(keys, key)].tolist() == want.loc[key].tolist()
    mine = v.copy()  # the caller's own temporary, overwritten: the same medians
    k2, m2 = _median_per_key(key, mine, own=True)
    assert k2.tolist() == keys.tolist() and m2.tolist() == med.tolist()


@pytest.mark.parametrize("name", ["decode_eager", "launch_eager", "ladder_baseline"])
def test_gpu_coverage_of_one_thread_equals_its_rows_by_position(analysis, name):
    """The iteration model's GPU coverage with one thread's owned ops as every row (a slice, no
    positions; a sort only when the calls are out of order) equals it with the rows' positions."""
    from nsysan.analyses.iterations import choice as I

    a = analysis(name)
    owned = a.owned
    assert len(owned) and owned["tid"].nunique() == 1 and owned["pid"].nunique() == 1
    rg = a.nvtx_ranges
    inst = rg.loc[rg["name"].astype(str) == a.iterations.range_name]
    assert len(inst) >= 3
    api_all = owned["api_start_ns"].to_numpy()
    st_all, en_all = owned["start_ns"].to_numpy(), owned["end_ns"].to_numpy()
    dur_all = en_all - st_all
    key = (int(owned["pid"].iloc[0]), int(owned["tid"].iloc[0]))
    inst_args = (inst["pid"].to_numpy(), inst["tid"].to_numpy(), inst["start_ns"].to_numpy(), inst["end_ns"].to_numpy())

    def coverage(rows):
        by_thread = {key: rows}
        return I._coverage(*inst_args, I._launch_sums(by_thread, api_all, st_all, en_all), int(dur_all.sum()),
                           by_thread)

    whole = coverage(slice(None))
    assert whole == coverage(np.arange(len(owned)))
    assert 0 < whole <= 1
    shuffled = np.random.default_rng(0).permutation(len(owned))  # out of order: sorted first
    assert whole == coverage(shuffled)
    # and by definition: the GPU time of the ops whose API call starts inside an instance's union
    us, ue = iv.merge(inst["start_ns"].to_numpy(), inst["end_ns"].to_numpy())
    pos = np.searchsorted(ue, api_all, side="left")
    inside = (pos < len(us)) & (us[np.minimum(pos, len(us) - 1)] <= api_all)
    assert whole == int(dur_all[inside].sum()) / int(dur_all.sum())


def _activity_trace(api_rows, osrt_rows, nvtx_rows):
    """A hand-built trace of two threads' CUDA API and OS runtime calls (``(start, end, name, tid)``,
    nested or not) and one thread's NVTX ranges (``(start, end, text)``)."""
    import factories as F

    api = pd.concat([F.api([(s, e, n, i + 1) for i, (s, e, n, t) in enumerate(api_rows) if t == tid], tid=tid)
                     for tid in (101, 102)], ignore_index=True)
    api = api.sort_values("start_ns", kind="stable").reset_index(drop=True)
    api["name"] = pd.Categorical(api["name"].astype(str))
    os_ = pd.DataFrame({"start_ns": np.array([r[0] for r in osrt_rows], np.int64),
                        "end_ns": np.array([r[1] for r in osrt_rows], np.int64),
                        "name": pd.Categorical([r[2] for r in osrt_rows]),
                        "pid": np.full(len(osrt_rows), F.PID, np.int64),
                        "tid": np.array([r[3] for r in osrt_rows], np.int64)})
    os_ = os_.assign(dur_ns=os_["end_ns"] - os_["start_ns"]).sort_values("start_ns", kind="stable").reset_index(drop=True)
    nv = F.nvtx(nvtx_rows, tid=101) if nvtx_rows else F.nvtx([(0, 1, "x")]).iloc[0:0]
    return F.make_trace(cuda_api=api, osrt=os_, nvtx=nv)


_call = st.tuples(st.integers(0, 2_000), st.integers(0, 400), st.sampled_from(["cudaStreamSynchronize", "cudaLaunchKernel",
                                                                            "poll", "write"]), st.sampled_from([101, 102]))


@given(st.lists(_call, max_size=40), st.lists(_call, max_size=30),
       st.lists(st.tuples(st.integers(0, 2_000), st.integers(1, 600), st.sampled_from(["step", "fwd", "bwd"])), max_size=12),
       st.lists(st.tuples(st.integers(1, 80), st.integers(1, 120), st.sampled_from([101, 102])), min_size=1, max_size=25),
       st.integers(0, 2**16))
@example([(0, 300, "cudaStreamSynchronize", 101), (10, 20, "cudaLaunchKernel", 101)],
         [(5, 500, "poll", 101), (6, 7, "write", 101)], [(0, 900, "step"), (50, 100, "fwd"), (60, 70, "bwd")],
         [(1, 40, 101), (5, 50, 101), (3, 30, 102), (2, 400, 101)], 5)
def test_gap_explanation_in_any_chunks_equals_one_pass(api_rows, osrt_rows, nvtx_rows, windows, seed):
    """Generated threads (nested and overlapping calls, nested NVTX ranges, two threads sharing the
    tables) and host gaps: the explanation a chunk of 1, 2 or 3 windows at a time, with the threads'
    rows sorted by thread from the start, and with the NVTX sweep engaged (INNERMOST_MAX 1), equals
    the one pass over all windows with the same settings."""
    from nsysan.analyses import gaps as G
    from nsysan.analyses import thread_activity as TA

    t = _activity_trace([(s, s + d, n, tid) for s, d, n, tid in api_rows],
                        [(s, s + d, n, tid) for s, d, n, tid in osrt_rows],
                        [(s, s + d, n) for s, d, n in nvtx_rows])
    # disjoint, ascending windows (the gaps of one device), each given to one of the two threads
    lo, hi, tids, at = [], [], [], 0
    for gap, length, tid in windows:
        at += gap
        lo.append(at)
        hi.append(at + length)
        tids.append(tid)
        at += length
    lo_a, hi_a = np.array(lo, np.int64), np.array(hi, np.int64)
    tid_a, pid_a = np.array(tids, np.int64), np.full(len(tids), 100, np.int64)
    rows = np.arange(len(lo), dtype=np.int64)
    detail = np.flatnonzero(np.random.default_rng(seed).random(len(lo)) < 0.5)
    saved = (G.EXPLAIN_CHUNK, TA.FEW_THREADS, TA.INNERMOST_MAX)

    def explain(chunk, few, inner):
        G.EXPLAIN_CHUNK, TA.FEW_THREADS, TA.INNERMOST_MAX = chunk, few, inner
        act, cats, bd, sync = G.explain_gaps(t, rows, lo_a, hi_a, pid_a, tid_a, detail, len(lo))
        return [cats[c] for c in act.tolist()], bd.tolist(), sync.tolist()

    try:
        for inner in (saved[2], 1):
            one_pass = explain(1 << 40, saved[1], inner)
            for chunk in (1, 2, 3):
                assert explain(chunk, saved[1], inner) == one_pass
            assert explain(2, 0, inner) == one_pass
    finally:
        G.EXPLAIN_CHUNK, TA.FEW_THREADS, TA.INNERMOST_MAX = saved


@given(st.lists(st.tuples(st.integers(0, 500), st.integers(0, 300)), max_size=60),
       st.lists(st.integers(-10, 900), min_size=1, max_size=12), st.sampled_from([1, 2, 3, 4096]), st.data())
@example([(0, 300), (10, 5), (20, 5), (400, 1)], [15, 0, 299, 300], 2, None)  # one long call keeps the maximum up
def test_reach_searches_equal_the_running_maximum(calls, xs, block, data):
    """``thread_activity.Reach`` (block prefix maxima, the exact running maximum only over the rows a search
    needs) answers as ``searchsorted`` on the full running maximum of the ends, capped at ``stop``;
    and ``_touching`` with it gives exactly the calls that overlap a window (brute force)."""
    from nsysan.analyses import thread_activity as G

    calls.sort()
    s = np.array([c[0] for c in calls], np.int64)
    e = s + np.array([c[1] for c in calls], np.int64)
    x = np.array(xs, np.int64)
    saved = G.REACH_BLOCK
    G.REACH_BLOCK = block
    try:
        r = G.Reach(e)
        stop = data.draw(st.integers(0, len(e))) if data is not None else len(e)
        want = np.minimum(np.searchsorted(np.maximum.accumulate(e), x, side="right"), stop) if len(e) else 0 * x
        assert r.search(x, stop).tolist() == (want if r.blocks is not None else
                                               np.searchsorted(e, x, side="right")).tolist()
        wl, wh = iv.merge(x, x + 7)
        rows = G._touching(s, e, r, wl, wh)
        hit = [i for i in range(len(s)) if any(s[i] < b and a < e[i] for a, b in zip(wl.tolist(), wh.tolist()))]
        if rows is None:  # every call, and they never overlap (calls touching no window add nothing)
            assert len(s) < 2 or bool((s[1:] >= e[:-1]).all())
        else:
            assert rows.tolist() == hit
    finally:
        G.REACH_BLOCK = saved


@needs_c
@given(st.lists(st.tuples(st.integers(-50, 10**6), st.integers(-5, 10**4), st.integers(0, 5), st.booleans()),
                min_size=1, max_size=120), st.integers(-10**6, 10**6), st.booleans())
@example([(5, 3, 1, True), (2, 4, 0, True)], 0, False)  # starts that decrease along the rows: no result
@example([(-40, 3, 1, True), (7, -2, 2, False), (9, 1, 0, True)], 0, True)  # a start before t0: clamped
def test_a_lane_read_through_its_rows_equals_its_copies(ops, t0, sort):
    """``encode_lane_rows`` (the C lane reading the whole columns at the lane's positions) gives the
    text and busy length that ``encode_lane`` gives on copies of the lane's rows, or None (starts
    that decrease along the rows) and the caller copies."""
    if sort:
        ops = sorted(ops)
    s = np.array([o[0] for o in ops], np.int64)
    e = s + np.array([o[1] for o in ops], np.int64)
    name = np.array([o[2] for o in ops], np.int8)
    kind = np.array([o[2] % 3 for o in ops], np.int8)
    rows = np.flatnonzero([o[3] for o in ops])
    if len(rows) == 0:
        return
    got = timeline.encode_lane_rows(s, e, name, kind, rows, t0)
    if bool((np.diff(s[rows]) < 0).any()):
        assert got is None
        return
    text, _, covered = timeline.encode_lane(s[rows], e[rows], name[rows], kind[rows], None, t0)
    assert got == (text, covered)
    assert timeline.encode_lane_rows(s, e, name, 4, rows, t0) == timeline.encode_lane(s[rows], e[rows], name[rows], 4,
                                                                                        None, t0)[::2]


def test_the_timeline_reads_a_big_lane_through_its_rows(analysis, monkeypatch):
    """The stream of all but a handful of a trace's kernels is read through its positions (no copies
    of its times), and the report's lanes are what copies give."""
    a = analysis("launch_eager")
    ops = a.ops
    keys = ops["stream_id"].to_numpy()
    if len(np.unique(keys)) < 2:
        pytest.skip("one stream: its lane is the columns themselves")
    used = []
    real = timeline.encode_lane_rows
    monkeypatch.setattr(timeline, "encode_lane_rows", lambda *x: used.append(1) or real(*x))
    through = timeline._build_timeline(a)
    monkeypatch.setattr(timeline, "encode_lane_rows", lambda *x: None)
    copied = timeline._build_timeline(a)
    assert used and through == copied
