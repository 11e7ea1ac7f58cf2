"""Hostile input for the #24 inputs: CPU samples (COMPOSITE_EVENTS + SAMPLING_CALLCHAINS), CUDA_CALLCHAINS,
Python samples and backtraces (NVTX payload blobs) and GPU metrics (TARGET_INFO_GPU_METRICS + GPU_METRICS).
Each case mutates a copy of a committed fixture with SQL and runs the whole CLI (terminal, JSON, HTML, CSV):
no crash, no raw control character in the terminal, no injected tag in the HTML, CSV formulas neutralised,
no NaN in the JSON; the input is never written."""

from __future__ import annotations

import csv
import hashlib
import json
import lzma
import math
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURES, ROOT
from hostile_gen import loosen
from own_peak import OWN_PEAK_KB

from nsysan.cli import main

SCRIPT = "</script><script>alert(1)</script>"
HOSTILE = f"{SCRIPT}\x1b[31mRED\u202eevil\u2028line\x00nul"
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_SRC: dict[str, Path] = {}


@pytest.fixture(scope="module")
def srcdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("diag-src")


# the recorded GPU metrics (1.7 M samples: every test copied and rewrote 58 MB) thinned to every
# tenth sampling time: the same metrics, sources and time span, the same kinds of damage, a tenth of the rows
THIN = {"metrics_mix": ("DELETE FROM GPU_METRICS WHERE timestamp IN (SELECT timestamp FROM (SELECT timestamp, "
                        "DENSE_RANK() OVER (ORDER BY timestamp) AS r FROM (SELECT DISTINCT timestamp FROM "
                        "GPU_METRICS)) WHERE r % 10 != 1)")}


def copy(name: str, srcdir: Path, tmp_path: Path) -> Path:
    if name not in _SRC or not _SRC[name].exists():
        p = srcdir / f"{name}.sqlite"
        p.write_bytes(lzma.decompress((FIXTURES / name / "trace.sqlite.xz").read_bytes()))
        if name in THIN:
            con = sqlite3.connect(p)
            con.execute(THIN[name])
            con.commit()
            con.execute("VACUUM")
            con.close()
        _SRC[name] = p
    out = tmp_path / f"{name}.sqlite"
    shutil.copy(_SRC[name], out)
    return out


def sql(p: Path, *stmts: str | tuple[str, tuple[object, ...]], loose: bool = False) -> Path:
    if loose:
        loosen(p)
    con = sqlite3.connect(p)
    for s in stmts:
        con.execute(*((s,) if isinstance(s, str) else s))
    con.commit()
    con.close()
    return p


def run_all(p: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    """The CLI on ``p`` with every output; checks the safety properties common to all cases."""
    before = hashlib.sha256(p.read_bytes()).hexdigest()
    j, h, c = tmp_path / "o.json", tmp_path / "o.html", tmp_path / "csv"
    code = main(["analyze", str(p), "--json", str(j), "--html", str(h), "--csv", str(c), "--force"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "Traceback" not in out.err
    assert hashlib.sha256(p.read_bytes()).hexdigest() == before
    for stream in (out.out, out.err):
        bad = {hex(ord(ch)) for ch in CONTROL.findall(stream.replace("\n", ""))}
        assert not bad, bad
    page = h.read_text(encoding="utf-8")
    assert "<script>alert(1)" not in page and "alert(1)</script>" not in page
    doc = json.loads(j.read_text(), parse_constant=lambda s: pytest.fail(f"{s} in JSON"))
    for f in c.glob("*.csv"):
        with f.open(newline="", encoding="utf-8") as fh:
            for row in csv.reader(fh):
                for cell in row:
                    assert not (cell[:1] in ("=", "@", "+") or (cell[:1] == "-" and not _number(cell))), (f.name, cell)
    return {"doc": doc, "page": page, "out": out.out, "err": out.err}


def _number(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return False


def _finite(x: object) -> None:
    if isinstance(x, float):
        assert math.isfinite(x)
    elif isinstance(x, dict):
        for v in x.values():
            _finite(v)
    elif isinstance(x, list):
        for v in x:
            _finite(v)


# -- hostile names ------------------------------------------------------------------------------

NAMES = {"script_escape_bidi": HOSTILE, "formula_eq": "=HYPERLINK(\"http://x\")", "formula_plus": "+1+cmd|' /C calc'!A0",
         "formula_minus": "-2+3", "formula_at": "@SUM(A1)"}


@pytest.mark.parametrize("case", sorted(NAMES))
def test_hostile_native_symbols_and_modules(case, srcdir, tmp_path, capsys):
    bad = NAMES[case]
    p = sql(copy("waits_native", srcdir, tmp_path),
            (("UPDATE StringIds SET value = ? || value WHERE id IN (SELECT symbol FROM SAMPLING_CALLCHAINS UNION "
            "SELECT module FROM SAMPLING_CALLCHAINS UNION SELECT symbol FROM CUDA_CALLCHAINS UNION "
            "SELECT module FROM CUDA_CALLCHAINS)"), (bad,)))
    r = run_all(p, tmp_path, capsys)
    if case == "script_escape_bidi":
        assert "RED" in r["out"]  # the names are shown, only cleaned
        assert "&lt;/script&gt;" in r["page"] or "&lt;script&gt;" in r["page"]


def test_hostile_python_frames(srcdir, tmp_path, capsys):
    # nsys stores Python names HTML-escaped and nsysan unescapes them once: an escaped tag becomes a real one
    esc = SCRIPT.replace("<", "&lt;").replace(">", "&gt;")
    p = sql(copy("waits_python", srcdir, tmp_path),
            f"UPDATE StringIds SET value = '{esc}' || char(27) || '[31m' || char(8238) || char(8232) || value "
            "WHERE value NOT LIKE 'Python %' AND id NOT IN (SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL "
            "UNION SELECT shortName FROM CUPTI_ACTIVITY_KIND_KERNEL UNION SELECT mangledName FROM "
            "CUPTI_ACTIVITY_KIND_KERNEL)")
    run_all(p, tmp_path, capsys)


def test_megabyte_names(srcdir, tmp_path, capsys):
    # the most sampled symbol and module, and the first CUDA call site's symbol, each 1 MB longer
    p = sql(copy("waits_native", srcdir, tmp_path), *(
        "UPDATE StringIds SET value = printf('%.*c', 1000000, 'x') || value WHERE id = "
        f"(SELECT {c} FROM {t} GROUP BY {c} ORDER BY count(*) DESC LIMIT 1)"
        for t in ("SAMPLING_CALLCHAINS", "CUDA_CALLCHAINS") for c in ("symbol", "module")))
    r = run_all(p, tmp_path, capsys)
    assert len(r["out"]) < 200_000 and len(r["page"]) < 20_000_000


@pytest.mark.parametrize("case", sorted(NAMES))
def test_hostile_metric_names(case, srcdir, tmp_path, capsys):
    bad = NAMES[case]
    p = sql(copy("metrics_mix", srcdir, tmp_path),
            ("UPDATE TARGET_INFO_GPU_METRICS SET metricName = metricName || ?1, typeName = ?1 || typeName", (bad,)))
    r = run_all(p, tmp_path, capsys)
    assert r["doc"]


# -- malformed content ----------------------------------------------------------------------------

# the call-chain tables rebuilt without their primary key (a writer not bound by it), with a plain index
UNKEYED = [*(f"CREATE TABLE k_{t} AS SELECT * FROM {t}" for t in ("SAMPLING_CALLCHAINS", "CUDA_CALLCHAINS")),
           "DROP TABLE SAMPLING_CALLCHAINS", "CREATE INDEX k_s ON k_SAMPLING_CALLCHAINS (id, stackDepth)",
           "DROP TABLE CUDA_CALLCHAINS", "ALTER TABLE k_SAMPLING_CALLCHAINS RENAME TO SAMPLING_CALLCHAINS",
           "ALTER TABLE k_CUDA_CALLCHAINS RENAME TO CUDA_CALLCHAINS",
           "CREATE INDEX k_c ON CUDA_CALLCHAINS (id, stackDepth)"]

NATIVE_BROKEN = {
    "chain_id_points_nowhere": (["UPDATE COMPOSITE_EVENTS SET id = id + 1000000000"], False),
    "cuda_chain_id_points_nowhere": (["UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET callchainId = callchainId + 100000000"],
                                     False),
    "depth_duplicates": ([*UNKEYED, "UPDATE SAMPLING_CALLCHAINS SET stackDepth = 0",
                          "UPDATE CUDA_CALLCHAINS SET stackDepth = 1"], True),
    "chains_without_index": ([*UNKEYED[:3], *UNKEYED[4:7]], True),
    "depth_gaps": ([*UNKEYED, "UPDATE SAMPLING_CALLCHAINS SET stackDepth = stackDepth * 1000 + 7",
                    "UPDATE CUDA_CALLCHAINS SET stackDepth = -stackDepth * 3"], True),
    "null_symbol": (["UPDATE SAMPLING_CALLCHAINS SET symbol = NULL WHERE rowid % 3 = 0",
                     "UPDATE CUDA_CALLCHAINS SET module = NULL WHERE rowid % 2 = 0",
                     "UPDATE SAMPLING_CALLCHAINS SET stackDepth = NULL WHERE rowid % 5 = 0"], True),
    "symbol_not_an_id": (["UPDATE SAMPLING_CALLCHAINS SET symbol = 'a:b,c' WHERE rowid % 3 = 0",
                          "UPDATE CUDA_CALLCHAINS SET symbol = 1.5 WHERE rowid % 2 = 0",
                          "UPDATE SAMPLING_CALLCHAINS SET unresolved = 'x' WHERE rowid % 4 = 0"], True),
    "symbol_id_names_nothing": (["UPDATE SAMPLING_CALLCHAINS SET symbol = symbol + 900000000",
                                 "UPDATE CUDA_CALLCHAINS SET module = -5"], True),
    "null_times_and_threads": (["UPDATE COMPOSITE_EVENTS SET start = NULL WHERE rowid % 3 = 0",
                                "UPDATE COMPOSITE_EVENTS SET globalTid = NULL WHERE rowid % 3 = 1",
                                "UPDATE COMPOSITE_EVENTS SET threadState = 'sleepy' WHERE rowid % 5 = 1"], True),
    "zero_samples": (["DELETE FROM COMPOSITE_EVENTS", "DELETE FROM CUDA_CALLCHAINS"], False),
    "no_frames": (["DELETE FROM SAMPLING_CALLCHAINS"], False),
}


@pytest.mark.parametrize("case", sorted(NATIVE_BROKEN))
def test_broken_native_samples(case, srcdir, tmp_path, capsys):
    stmts, loose = NATIVE_BROKEN[case]
    r = run_all(sql(copy("waits_native", srcdir, tmp_path), *stmts, loose=loose), tmp_path, capsys)
    _finite(r["doc"])
    assert "could not be read" not in r["out"]  # a few odd rows must not drop every sample


PY_BROKEN = {
    "truncated_blobs": ["UPDATE NVTX_EVENTS SET binaryData = substr(binaryData, 1, 40) WHERE eventType = 34"],
    "truncated_mid_frame": [("UPDATE NVTX_EVENTS SET binaryData = substr(binaryData, 1, length(binaryData) - 5) "
                            "WHERE eventType = 34")],
    "random_bytes": ["UPDATE NVTX_EVENTS SET binaryData = randomblob(64 + rowid % 300) WHERE eventType = 34"],
    "huge_count_and_offset": [("UPDATE NVTX_EVENTS SET binaryData = x'01000000000000000100000000000000ffffffffffffff7f"
                              "2000000000000000' || zeroblob(8) || x'ffffffff' || zeroblob(40) WHERE eventType = 34")],
    "wrong_schema": ["UPDATE NVTX_PAYLOAD_SCHEMA_ENTRIES SET schemaId = schemaId + 77"],
    "schema_offsets_wild": ["UPDATE NVTX_PAYLOAD_SCHEMA_ENTRIES SET offset = -9 WHERE name = 'Frames count'",
                            "UPDATE NVTX_PAYLOAD_SCHEMA_ENTRIES SET offset = 1000000000 WHERE name = 'Line'",
                            "UPDATE NVTX_PAYLOAD_SCHEMA_ENTRIES SET type = 'text' WHERE name = 'Function'"],
    "schema_frame_size_zero": ["UPDATE NVTX_PAYLOAD_SCHEMAS SET payloadSize = -1"],
    "blob_as_text": ["UPDATE NVTX_EVENTS SET binaryData = 'not a blob' WHERE eventType = 34"],
    "null_start": ["UPDATE NVTX_EVENTS SET start = NULL WHERE eventType = 34 AND rowid % 2 = 0"],
    "no_schema": ["DELETE FROM NVTX_PAYLOAD_SCHEMA_ENTRIES"],
}


@pytest.mark.parametrize("case", sorted(PY_BROKEN))
def test_broken_python_samples(case, srcdir, tmp_path, capsys):
    r = run_all(sql(copy("waits_python", srcdir, tmp_path), *PY_BROKEN[case], loose=True), tmp_path, capsys)
    _finite(r["doc"])
    assert "could not be read" not in r["out"]


METRIC_BROKEN = {
    "negative_values": ["UPDATE GPU_METRICS SET value = -value - 5"],
    "huge_values": ["UPDATE GPU_METRICS SET value = 1e308 WHERE rowid % 3 = 0"],
    "inf_values": ["UPDATE GPU_METRICS SET value = 9e999 WHERE rowid % 3 = 0",
                   "UPDATE GPU_METRICS SET value = -9e999 WHERE rowid % 3 = 1"],
    "int64_values": ["UPDATE GPU_METRICS SET value = 9223372036854775807 WHERE rowid % 2 = 0"],
    "text_values": ["UPDATE GPU_METRICS SET value = 'NaN' WHERE rowid % 2 = 0"],
    "null_values_and_times": ["UPDATE GPU_METRICS SET value = NULL WHERE rowid % 3 = 0",
                              "UPDATE GPU_METRICS SET timestamp = NULL WHERE rowid % 3 = 1"],
    "type_without_names": ["UPDATE GPU_METRICS SET typeId = 4242 WHERE rowid % 2 = 0"],
    "duplicate_names": [("INSERT INTO TARGET_INFO_GPU_METRICS SELECT typeId, sourceId, typeName, metricId + 500, "
                        "metricName FROM TARGET_INFO_GPU_METRICS"),
                        "UPDATE GPU_METRICS SET metricId = metricId + 500 WHERE rowid % 2 = 0"],
    "duplicate_ids": [("INSERT INTO TARGET_INFO_GPU_METRICS SELECT typeId, sourceId, typeName, metricId, "
                      "'GR Active [Throughput %]' FROM TARGET_INFO_GPU_METRICS")],
    "zero_samples": ["DELETE FROM GPU_METRICS"],
    "one_sample": ["DELETE FROM GPU_METRICS WHERE timestamp > (SELECT min(timestamp) FROM GPU_METRICS)"],
    "all_at_one_time": ["UPDATE GPU_METRICS SET timestamp = 5"],
    "times_reversed": ["UPDATE GPU_METRICS SET timestamp = -timestamp"],
}


@pytest.mark.parametrize("case", sorted(METRIC_BROKEN))
def test_broken_gpu_metrics(case, srcdir, tmp_path, capsys):
    r = run_all(sql(copy("metrics_mix", srcdir, tmp_path), *METRIC_BROKEN[case], loose=True), tmp_path, capsys)
    _finite(r["doc"])


def test_odd_sample_rows_are_skipped_not_fatal(srcdir, tmp_path):
    """Read without a window (which would hide NULL times): rows with a NULL or text time, thread or state
    are skipped one by one; every other sample is kept."""
    from nsysan.trace.samples import read_samples

    p = sql(copy("waits_python", srcdir, tmp_path),
            "UPDATE NVTX_EVENTS SET start = NULL WHERE eventType = 34 AND rowid % 5 = 0",
            "UPDATE NVTX_EVENTS SET start = 'soon' WHERE eventType = 34 AND rowid % 5 = 1",
            "UPDATE COMPOSITE_EVENTS SET start = NULL WHERE rowid % 3 = 0",
            "UPDATE COMPOSITE_EVENTS SET threadState = 'sleepy' WHERE rowid % 3 = 1", loose=True)
    con = sqlite3.connect(p)
    py = con.execute("SELECT count(*) FROM NVTX_EVENTS e WHERE eventType = 34 AND typeof(start) = 'integer' AND "
                     "binaryData IS NOT NULL AND domainId IN (SELECT domainId FROM NVTX_EVENTS WHERE eventType = 75 "
                     "AND text IN ('Python Periodic Sampling', 'Python Backtrace on CUDA'))").fetchone()[0]
    native = con.execute("SELECT count(*) FROM COMPOSITE_EVENTS WHERE typeof(start) = 'integer' AND "
                         "globalTid IS NOT NULL").fetchone()[0]
    con.close()
    s = read_samples(p)
    assert py > 0 and native > 0
    assert len(s.python) + len(s.backtraces) == py
    assert len(s.native) == native


def test_infinite_and_huge_metric_values_are_missing(srcdir, tmp_path):
    from nsysan.trace.metrics import read_metrics

    p = sql(copy("metrics_mix", srcdir, tmp_path), "UPDATE GPU_METRICS SET value = 9e999 WHERE rowid % 3 = 0",
            "UPDATE GPU_METRICS SET value = -1e300 WHERE rowid % 3 = 1", loose=True)
    m = read_metrics(p)
    assert m.sources
    for src in m.sources:
        for v in src.values.values():
            assert not np.isinf(v).any()


def test_undecodable_python_blobs_are_said(srcdir, tmp_path, capsys):
    p = sql(copy("waits_python", srcdir, tmp_path),
            "UPDATE NVTX_EVENTS SET binaryData = randomblob(20) WHERE eventType = 34")  # shorter than a header
    con = sqlite3.connect(p)
    n = con.execute("SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 34 AND domainId IN (SELECT domainId FROM "
                    "NVTX_EVENTS WHERE eventType = 75 AND text IN ('Python Periodic Sampling', "
                    "'Python Backtrace on CUDA'))").fetchone()[0]
    con.close()
    r = run_all(p, tmp_path, capsys)
    assert n > 0
    said = re.findall(r"([\d,]+) Python sample payloads could not be decoded", json.dumps(r["doc"]))
    assert said and 0 < int(said[0].replace(",", "")) <= n  # those of the window read


# -- size ---------------------------------------------------------------------------------------

CHAINS = 200_000


def test_many_distinct_stacks_bounded(srcdir, tmp_path):
    """200k samples with 200k distinct call chains (4 frames each), made by SQL: bounded time and memory."""
    p = copy("waits_native", srcdir, tmp_path)
    con = sqlite3.connect(p)
    lo, hi, g = con.execute("SELECT min(start), max(start), globalTid FROM COMPOSITE_EVENTS GROUP BY globalTid "
                            "ORDER BY count(*) DESC LIMIT 1").fetchone()
    base = con.execute("SELECT max(id) FROM StringIds").fetchone()[0] + 1
    top = con.execute("SELECT max(id) FROM COMPOSITE_EVENTS").fetchone()[0] + 1
    con.execute(f"WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < {CHAINS}) "
                f"INSERT INTO StringIds SELECT {base} + i, 'fn_' || i FROM n")
    con.execute(f"WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < {CHAINS - 1}) "
                f"INSERT INTO COMPOSITE_EVENTS (id, start, cpu, threadState, globalTid, cpuCycles) "
                f"SELECT {top} + i, {lo} + (i * ({hi} - {lo})) / {CHAINS}, 0, 1, {g}, 0 FROM n")
    con.execute(f"WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < {CHAINS - 1}), "
                f"d(k) AS (VALUES (0), (1), (2), (3)) "
                f"INSERT INTO SAMPLING_CALLCHAINS (id, symbol, module, stackDepth, unresolved) "
                f"SELECT {top} + i, {base} + ((i + k * 7919) % {CHAINS}), {base}, k, 0 FROM n, d")
    con.commit()
    n = con.execute("SELECT count(*) FROM COMPOSITE_EVENTS").fetchone()[0]
    con.close()
    assert n >= CHAINS
    # every chain read (no window, no thread filter), then the whole CLI; CPU time and peak RSS of both
    code = ("import sys, time; from nsysan.cli import main; from nsysan.trace.samples import read_samples; "
            f"t = time.process_time(); assert len(read_samples({str(p)!r}).native_stacks) > {CHAINS}; "
            f"c = main(['analyze', {str(p)!r}, '--json', {str(tmp_path / 'o.json')!r}, '--html', "
            f"{str(tmp_path / 'o.html')!r}, '--force', '-q']); "
            f"print(c, time.process_time() - t, {OWN_PEAK_KB})")  # the child's own peak (tests/own_peak.py)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT, check=False)
    assert "Traceback" not in r.stderr, r.stderr
    rc, cpu_s, rss_kb = r.stdout.split()[-3:]
    assert rc == "0"
    print(f"{CHAINS} distinct chains: {float(cpu_s):.1f} s CPU, {int(rss_kb) / 1024:.0f} MB peak RSS")
    assert float(cpu_s) < 60 and int(rss_kb) < 1_000_000  # measured: 3.9 s, 419 MB (the fixture alone: 0.5 s, 134 MB)
    page = (tmp_path / "o.html").read_text()
    assert len(page) < 30_000_000
