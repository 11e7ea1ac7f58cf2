"""A synchronizing call inside a function gets that function, file and line as its call site, from
the Python backtrace nsys took of the CUDA call (``syncs._sites`` through ``call_sites.site_calls``).

Fixtures: ``syncs_mask`` and ``syncs_none`` (H200, ``workloads/host/hidden_syncs.py``, recorded with
``--cudabacktrace=all --python-backtrace=cuda`` and exported with blobs). ``syncs_mask`` logs
``loss.item()`` every step in ``run`` (line 83) and indexes with a boolean mask in ``loss_mask``
(line 55, two ``nonzero``); ``syncs_none`` reads an accumulated loss with ``acc.item()`` every 50
steps (``run``, line 87).

Truth is SQL written here: the ``cudaStreamSynchronize`` rows of ``CUPTI_ACTIVITY_KIND_RUNTIME``
started on the ``train_step`` thread inside one of its instances; the Python backtrace of each is the
NVTX extended-payload row (``eventType`` 34) of the domain 'Python Backtrace on CUDA' on the same
thread at the same start; its frames are decoded here with the layout of
``../shared/NSYS-SCHEMA.md`` (offsets checked against ``NVTX_PAYLOAD_SCHEMA_ENTRIES``), innermost
first. The call site is the innermost frame, which is the workload's own file (``.item()`` and
indexing are C functions: no Python frame of PyTorch's is above them).
"""

from __future__ import annotations

import html
import sqlite3
import struct
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import FIXTURE_NAMES

NAMES = [n for n in ("syncs_mask", "syncs_none") if n in FIXTURE_NAMES]
pytestmark = pytest.mark.skipif(not NAMES, reason="syncs fixtures missing")


def _con(fixture_dir: Path, name: str) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{fixture_dir / f'{name}.sqlite'}?mode=ro&immutable=1", uri=True)


def _frames(con: sqlite3.Connection, blob: bytes) -> list[tuple[int, int, int]]:
    """(function id, file id, line) per frame, innermost first."""
    _, _, _, base = struct.unpack_from("<QQQQ", blob, 0)
    n = struct.unpack_from("<I", blob, base + 12)[0]
    return [struct.unpack_from("<QQi", blob, base + 16 + 24 * i) for i in range(n)]


def sync_sites(con: sqlite3.Connection) -> dict[tuple[int, int], tuple[str, str, int]]:
    """(thread id, start) of each cudaStreamSynchronize inside a train_step instance on its thread ->
    the innermost Python frame of its backtrace (function, file name, line)."""
    offsets = dict(con.execute("""SELECT e.name, e.offset FROM NVTX_PAYLOAD_SCHEMA_ENTRIES e
                                  JOIN NVTX_PAYLOAD_SCHEMAS s ON s.domainId = e.domainId AND s.schemaId = e.schemaId
                                  WHERE s.name = 'Python Backtrace on CUDA'"""))
    assert offsets["Frames count"] == 12 and offsets["Frames"] == 16  # the layout _frames reads
    (dom,) = con.execute("SELECT domainId FROM NVTX_EVENTS WHERE eventType = 75 AND text = 'Python Backtrace on CUDA'"
                         ).fetchone()
    strings = dict(con.execute("SELECT id, value FROM StringIds"))
    out = {}
    for tid, start, blob in con.execute(
            """WITH inst AS (SELECT n.start AS s, n."end" AS e, n.globalTid AS tid FROM NVTX_EVENTS n
                             LEFT JOIN StringIds t ON t.id = n.textId
                             WHERE n.eventType = 59 AND coalesce(n.text, t.value) = 'train_step')
               SELECT r.globalTid, r.start, b.binaryData FROM CUPTI_ACTIVITY_KIND_RUNTIME r
               JOIN StringIds s ON s.id = r.nameId
               JOIN inst i ON i.tid = r.globalTid AND r.start >= i.s AND r.start <= i.e
               JOIN NVTX_EVENTS b ON b.eventType = 34 AND b.domainId = ? AND b.globalTid = r.globalTid
                    AND b.start = r.start
               WHERE s.value = 'cudaStreamSynchronize'""", (dom,)):
        f, file, line = _frames(con, blob)[0]
        out[(tid & 0xFFFFFF, start)] = (html.unescape(strings[f]), strings[file].rsplit("/", 1)[-1], line)
    return out


def test_item_in_a_function_is_named_by_that_function(analysis, fixture_dir):
    """syncs_mask: 60 steady steps; by SQL, 60 syncs from ``run`` line 83 (``loss.item()``) and 120 from
    ``loss_mask`` line 55. Every sync point nsysan finds on the training thread carries the site of
    its call's backtrace, and the finding names each site with its count a step."""
    con = _con(fixture_dir, "syncs_mask")
    want = sync_sites(con)
    assert Counter(want.values()) == {("run", "hidden_syncs.py", 83): 60, ("loss_mask", "hidden_syncs.py", 55): 120}
    a = analysis("syncs_mask")
    pts = a.syncs.points
    (train_tid,) = {t for t, _ in want}
    mine = pts.loc[pts["tid"] == train_tid]
    assert len(mine) == len(want)
    for rec in mine.to_dict("records"):
        fn, file, line = want[(int(rec["tid"]), int(rec["start_ns"]))]
        assert (rec["site"], rec["source"]) == (f"{fn}() {file}:{line}", "python")
    steps = a.syncs.iterations
    assert steps == 60
    f = next(f for f in a.findings if f.rule == "hidden-syncs")
    per_step = Counter(want.values())
    for (fn, file, line), n in per_step.items():
        assert f"{fn}() {file}:{line} (cudaStreamSynchronize, {n // steps} a step" in f.message


def test_one_read_every_50_steps_is_named_too(analysis, fixture_dir):
    """syncs_none: by SQL, the accumulated loss is read once in the 60 recorded steps, from ``run`` line
    87 (``acc.item()``); nsysan's one sync point on that thread has that site (the rule stays silent:
    once in 60 steps is not every step)."""
    con = _con(fixture_dir, "syncs_none")
    want = sync_sites(con)
    assert list(want.values()) == [("run", "hidden_syncs.py", 87)]
    a = analysis("syncs_none")
    pts = a.syncs.points
    ((tid, start),) = want
    mine = pts.loc[pts["tid"] == tid]
    assert len(mine) == 1 and int(mine["start_ns"].iloc[0]) == start
    assert mine["site"].iloc[0] == "run() hidden_syncs.py:87"
    assert not [f for f in a.findings if f.rule == "hidden-syncs"]
