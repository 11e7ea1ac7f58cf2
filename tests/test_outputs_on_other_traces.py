"""This round's outputs on traces they were not written around: the public exports
(../shared/corpus, skipped when absent) and every recorded fixture (JAX, torch.compile, HF generate,
decode loops, worker threads, two processes, two GPUs, DDP/FSDP/TP/pipeline, Python samples).

Truth from SQL on each file:
* the steady-state kernel table (terminal's top kernels, the report's default table, JSON
  ``steady_by_name``): per kernel name, the count and total of the kernel rows that start inside
  nsysan's steady window;
* the timeline ships every kernel, copy and memset: decoded from the page's payload, their number
  and summed duration per kind equal the SQL tables';
* the Perfetto export holds one kernel event per kernel row, with the same summed duration;
And on nsysan's own findings: severity follows the counted saving, fixes are ranked by severity
then saving, the report's first screen lists them in that order, the terminal prints no raw control
character.
"""

from __future__ import annotations

import base64
import json
import re
import sqlite3
import zlib
from pathlib import Path

import numpy as np
import pytest
from conftest import CORPUS, FIXTURES

from nsysan.report.timeline import COPY_D2H, COPY_H2D, COPY_OTHER, KERNEL, MEMSET, build_timeline

CORPUS_FILES = sorted(CORPUS.glob("*.sqlite")) if CORPUS.exists() else []
FIXTURE_NAMES = sorted(p.name for p in FIXTURES.iterdir() if (p / "trace.sqlite.xz").exists())
CASES = [("fixture", n) for n in FIXTURE_NAMES] + [("corpus", str(p)) for p in CORPUS_FILES]
IDS = [n if kind == "fixture" else Path(n).name[:40] for kind, n in CASES]
SEV = {"critical": 3, "warning": 2, "info": 1}
_cache: dict[str, object] = {}


@pytest.fixture
def case(request, fixture_dir):
    kind, name = request.param
    path = fixture_dir / f"{name}.sqlite" if kind == "fixture" else Path(name)
    if str(path) not in _cache:
        import nsysan

        _cache[str(path)] = nsysan.analyze(nsysan.open_trace(path))
    return path, _cache[str(path)]


def _sql(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)


def _columns(con: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in con.execute(f'PRAGMA table_info("{table}")')}


def _has(con: sqlite3.Connection, table: str) -> bool:
    return con.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (table,)).fetchone() is not None


def _varints(buf: bytes, n: int, pos: int) -> tuple[np.ndarray, int]:
    out = np.empty(n, dtype=np.int64)
    for i in range(n):
        v = shift = 0
        while True:
            b = buf[pos]
            pos += 1
            v |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                break
        out[i] = v
    return out, pos


def _decode(lane: dict) -> tuple[np.ndarray, np.ndarray]:
    """A lane's (duration, kind) columns, decoded as timeline.js does."""
    raw = zlib.decompress(base64.b64decode(lane["data"]))
    n = lane["n"]
    _, pos = _varints(raw, n, 0)  # start deltas
    dur, pos = _varints(raw, n, pos)
    _, pos = _varints(raw, n, pos)  # name ids
    kind, _ = _varints(raw, n, pos)
    return dur, kind


@pytest.mark.parametrize("case", CASES, ids=IDS, indirect=True)
def test_steady_kernel_table_is_the_windows_kernels_by_sql(case):
    path, a = case
    con = _sql(path)
    if not _has(con, "CUPTI_ACTIVITY_KIND_KERNEL"):
        assert len(a.steady_summaries["kernels"]) == 0
        return
    name_col = "demangledName" if "demangledName" in _columns(con, "CUPTI_ACTIVITY_KIND_KERNEL") else "shortName"
    rows = con.execute(f"""SELECT s.value, COUNT(*), SUM(k."end" - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k
                           JOIN StringIds s ON s.id = k.{name_col} WHERE k.start >= ? AND k.start < ?
                           GROUP BY s.value""", (a.steady.start_ns, a.steady.end_ns)).fetchall()
    want = {str(n): (int(c), int(t)) for n, c, t in rows}
    got = {str(r["name"]): (int(r["count"]), int(r["total_ns"])) for r in a.steady_summaries["kernels"].to_dict("records")}
    assert got == want


@pytest.mark.parametrize("case", CASES, ids=IDS, indirect=True)
def test_timeline_and_perfetto_carry_every_gpu_op(case, tmp_path):
    path, a = case
    con = _sql(path)

    def sql(table: str) -> tuple[int, int]:
        if not _has(con, table):
            return 0, 0
        c, t = con.execute(f'SELECT COUNT(*), COALESCE(SUM("end" - start), 0) FROM "{table}"').fetchone()
        return int(c), int(t)

    tl = build_timeline(a)
    by_kind: dict[str, list[int]] = {"kernel": [0, 0], "memcpy": [0, 0], "memset": [0, 0]}
    group = {KERNEL: "kernel", 8: "kernel", COPY_H2D: "memcpy", COPY_D2H: "memcpy", COPY_OTHER: "memcpy",
             MEMSET: "memset"}  # 8: communication kernels (timeline.COMM)
    for lane in tl["lanes"]:
        if lane["group"] != "gpu":
            continue
        dur, kind = _decode(lane)
        for k, g in group.items():
            sel = kind == k
            by_kind[g][0] += int(sel.sum())
            by_kind[g][1] += int(dur[sel].sum())
    for g, table in (("kernel", "CUPTI_ACTIVITY_KIND_KERNEL"), ("memcpy", "CUPTI_ACTIVITY_KIND_MEMCPY"),
                     ("memset", "CUPTI_ACTIVITY_KIND_MEMSET")):
        assert tuple(by_kind[g]) == sql(table), g
    out = tmp_path / "t.perfetto.json"
    a.write_perfetto(out)
    doc = json.loads(out.read_text())
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    n, total = sql("CUPTI_ACTIVITY_KIND_KERNEL")
    assert len(kernels) == n
    # ts/dur are exact decimal microseconds of the trace's nanoseconds
    assert sum(round(float(e["dur"]) * 1000) for e in kernels) == total


@pytest.mark.parametrize("case", CASES, ids=IDS, indirect=True)
def test_fixes_are_graded_ranked_and_shown_in_that_order(case, tmp_path, capsys):
    path, a = case
    w = a.steady.dur_ns
    fs = a.findings
    keys = [(int(f.severity), f.impact_ns) for f in fs]
    assert keys == sorted(keys, reverse=True)
    for f in fs:
        if f.impact_ns > 0 and w > 0:
            share = f.impact_ns / w
            assert f.severity.name.lower() == ("critical" if share >= 0.10 else "warning" if share >= 0.01 else "info")
        else:
            assert f.severity.name.lower() != "critical"
    page = a.to_html()
    top = re.search(r'<ol class="fixes">(.*?)</ol>', page, re.S)
    if fs:
        assert re.findall(r'href="#(finding-\d+)"', top.group(1)) == [f"finding-{i}" for i in range(1, min(5, len(fs)) + 1)]
    from nsysan.cli import main

    assert main(["analyze", str(path), "--no-html"]) == 0
    out = capsys.readouterr().out
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f\u202a-\u202e\u2066-\u2069]", out)
    heads = re.findall(r"^\s*\d+\. (CRITICAL|WARNING|INFO)\s", out, re.M)
    assert [h.lower() for h in heads] == [f.severity.name.lower() for f in fs]
