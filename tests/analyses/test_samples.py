"""Python samples in GPU-idle time (``waits_python``: workloads/host/waits.py --mode python on an H200, CPU and
Python sampling at 2 kHz, CUDA and Python backtraces, exported with and without blobs).

Truth is SQL written here: the Python sampling rows (NVTX ``eventType`` 34 in the domain 'Python
Periodic Sampling'), their frames decoded in this file with the layout documented in
``../shared/NSYS-SCHEMA.md`` (fixed offsets, not the schema tables nsysan reads), the launching
thread (the one running the ``step`` ranges) and the GPU's idle intervals (the complement of the
union of kernel, memcpy and memset rows, at least 10 us) inside nsysan's steady window.
"""

from __future__ import annotations

import html
import sqlite3
import struct
from collections import Counter
from pathlib import Path

import pytest
import sqltruth
from conftest import FIXTURE_NAMES

pytestmark = pytest.mark.skipif("waits_python" not in FIXTURE_NAMES, reason="waits fixtures missing")


def _con(fixture_dir: Path, name: str) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{fixture_dir / (name + '.sqlite')}?mode=ro&immutable=1", uri=True)


def _idle(con: sqlite3.Connection, t0: int, t1: int, min_ns: int = 10_000) -> list[tuple[int, int]]:
    ops = sorted(r for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
                 for r in con.execute(f'SELECT start, "end" FROM {t} WHERE "end" > ? AND start < ?', (t0, t1)))
    idle, cur = [], t0
    for s, e in ops:
        if s > cur and s - cur >= min_ns:
            idle.append((cur, s))
        cur = max(cur, e)
    return idle


def _frames(blob: bytes) -> list[tuple[int, int, int]]:
    _, _, _, base = struct.unpack_from("<QQQQ", blob, 0)
    n = struct.unpack_from("<I", blob, base + 12)[0]
    return [(struct.unpack_from("<Q", blob, base + 16 + 24 * i)[0], struct.unpack_from("<Q", blob, base + 24 + 24 * i)[0],
             struct.unpack_from("<i", blob, base + 32 + 24 * i)[0]) for i in range(n)]


def test_functions_sampled_in_gpu_idle_time_from_sql(analysis, fixture_dir):
    a = analysis("waits_python")
    con = _con(fixture_dir, "waits_python")
    dom = sqltruth.nvtx_domain(con, "Python Periodic Sampling")
    (tid,) = con.execute("""SELECT n.globalTid FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
                            WHERE n.eventType = 59 AND coalesce(n.text, s.value) = 'step' LIMIT 1""").fetchone()
    w = a.steady
    idle = _idle(con, w.start_ns, w.end_ns)
    rows = con.execute("SELECT start, binaryData FROM NVTX_EVENTS WHERE eventType = 34 AND domainId = ? AND globalTid = ? "
                       "AND start >= ? AND start < ?", (dom, tid, w.start_ns, w.end_ns)).fetchall()
    strings = dict(con.execute("SELECT id, value FROM StringIds"))
    own: Counter[str] = Counter()
    n = 0
    for ts, blob in rows:
        if not any(s <= ts < e for s, e in idle):
            continue
        n += 1
        frames = [(html.unescape(strings[f]), strings[fi], ln) for f, fi, ln in _frames(blob)]
        user = [f for f in frames if f[1].endswith("workloads/waits.py")]
        # the innermost frame of the workload's own file; a generator expression counts for its function
        k = 0
        while user[k][0] == "<genexpr>":
            k += 1
        own[user[k][0]] += 1
    assert n > 400  # ~290 ms of idle time at 2 kHz
    got = a.idle_samples
    assert abs(got.samples_in_gaps - n) <= 0.03 * n
    t = got.table.set_index("function")
    for fn in ("tokenize", "featurize"):
        assert t.loc[fn, "self_share"] == pytest.approx(own[fn] / n, abs=0.02)
    assert got.table.iloc[0]["function"] == "tokenize" and t.loc["tokenize", "self_share"] > 0.8
    assert int(t.loc["tokenize", "line"]) == 37 and str(t.loc["tokenize", "file"]).endswith("workloads/waits.py")
    f = next(f for f in a.findings if f.rule == "host-bound-gap")
    assert "tokenize() waits.py:37" in f.message


def test_frames_lost_in_export_say_how_to_get_them(analysis, fixture_dir):
    if "waits_python_noblobs" not in FIXTURE_NAMES:
        pytest.skip("fixture missing")
    con = _con(fixture_dir, "waits_python_noblobs")
    # SQL: the sampling rows are there, their blobs are not
    n, with_blob = con.execute("""SELECT count(*), count(binaryData) FROM NVTX_EVENTS WHERE eventType = 34""").fetchone()
    assert n > 1000 and with_blob == 0
    a = analysis("waits_python_noblobs")
    # no Python frame is attributed: the native CPU samples are (tests/analyses/test_native_samples.py)
    assert a.idle_samples.inputs["python_frames_lost"] and a.idle_samples.source == "native"
    assert "--include-blobs=true" in a.idle_samples.note
    f = next(f for f in a.findings if f.rule == "host-bound-gap")
    assert "exported without their frames" in f.message and "nsys export --type sqlite --include-blobs=true" in f.message


def test_traces_without_samples_name_the_flag_and_keep_their_numbers(analysis):
    a = analysis("train_inline")
    assert a.idle_samples.samples_in_gaps == 0 and "-s process-tree" in a.idle_samples.note


def test_call_sites_of_cuda_calls_from_python_backtraces(analysis, fixture_dir):
    """Each Python backtrace of a CUDA call (domain 'Python Backtrace on CUDA') matches its runtime row by
    (thread, start); per API name, the calls from each own-code function, by SQL."""
    con = _con(fixture_dir, "waits_python")
    dom = sqltruth.nvtx_domain(con, "Python Backtrace on CUDA")
    a = analysis("waits_python")
    w = a.steady
    strings = dict(con.execute("SELECT id, value FROM StringIds"))
    want: Counter[tuple[str, str, int]] = Counter()
    for name, blob in con.execute("""SELECT s.value, b.binaryData FROM NVTX_EVENTS b
                                     JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.globalTid = b.globalTid AND r.start = b.start
                                     JOIN StringIds s ON s.id = r.nameId
                                     WHERE b.eventType = 34 AND b.domainId = ? AND r.callchainId IS NOT NULL
                                     AND b.start >= ? AND b.start < ?""", (dom, w.start_ns, w.end_ns)):
        user = [f for f in _frames(blob) if strings[f[1]].endswith("workloads/waits.py")]
        f = user[0]
        want[(name, html.unescape(strings[f[0]]), f[2])] += 1
    sites = a.idle_samples.sites
    got = {(r["api"], r["function"], int(r["line"])): int(r["calls"]) for _, r in sites.iterrows()}
    assert got == dict(want)
    assert got[("cudaStreamSynchronize", "fetch_result", 67)] >= 55
    from nsysan.rules import RuleContext
    from nsysan.rules._wording import call_sites

    # what sync-api / sync-memcpy / alloc-in-loop append to their messages
    note = call_sites(RuleContext(a), ["cudaStreamSynchronize"])
    assert f"cudaStreamSynchronize from fetch_result() waits.py:67 ({got[('cudaStreamSynchronize', 'fetch_result', 67)]} " \
           "calls)" in note
    assert call_sites(RuleContext(analysis("train_inline")), ["cudaStreamSynchronize"]) == ""
