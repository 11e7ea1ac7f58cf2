"""Live parity with Debian's Nsight Systems 2022.4 (``../shared/tools/install-nsys2022.sh``).

Its ``nsys stats`` runs on any export (it cannot trace CUDA 13 programs, but reads our 2025 exports).
Each fixture is copied, the six summary reports run once on the copy, and every row is compared with
nsysan's. Skipped cleanly when that nsys is not installed (set ``NSYSAN_NSYS2022`` to its path, or put
``nsys2022`` on PATH).

2022.4 differs from 2025.3 in ways this test pins down: ``gpukernsum`` groups by name *and* launch
configuration (nsysan's ``kernels.by_config``), copy labels are ``[CUDA memcpy HtoD]`` and ``[CUDA Unified Memory memcpy DtoH]`` (``summaries.nsys_operation``), sizes are in
MB rounded to 3 decimals and averages/std to 0.1 ns, and API names keep their ``_v7000`` suffix.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from conftest import FIXTURE_NAMES
from nsysan.analyses import summaries
from test_parity import compare

NSYS = os.environ.get("NSYSAN_NSYS2022") or shutil.which("nsys2022")
pytestmark = pytest.mark.skipif(not NSYS, reason="Debian nsys 2022.4 not installed "
                                "(run ../shared/tools/install-nsys2022.sh)")
REPORTS = ["gpukernsum", "cudaapisum", "gpumemtimesum", "gpumemsizesum", "nvtxsum", "osrtsum"]
_runs: dict[str, dict[str, pd.DataFrame]] = {}


def run_on_copy(fixture_dir: Path, tmp_path_factory: pytest.TempPathFactory, name: str, cmd: str,
                args: list[str], csvs: dict[str, str]) -> dict[str, pd.DataFrame]:
    """Run ``nsys CMD ARGS -f csv -o DIR/r COPY`` on a copy of a fixture; check nsys left the copy
    byte-identical; read each CSV ``DIR/r_<csvs[key]>.csv`` (an empty file: no rows) under ``key``."""
    d = tmp_path_factory.mktemp(f"n22-{cmd}-{name}")
    copy = d / f"{name}.sqlite"
    shutil.copy(fixture_dir / f"{name}.sqlite", copy)
    before = hashlib.sha256(copy.read_bytes()).hexdigest()
    subprocess.run([NSYS, cmd, "-q", *args, "-f", "csv", "-o", str(d / "r"), str(copy)],
                   check=True, capture_output=True, timeout=300)
    assert hashlib.sha256(copy.read_bytes()).hexdigest() == before  # nsys 2022 does not write either
    out = {}
    for key, stem in csvs.items():
        p = d / f"r_{stem}.csv"
        out[key] = pd.read_csv(p) if p.exists() and p.stat().st_size else pd.DataFrame()
    return out


def stats(fixture_dir: Path, tmp_path_factory: pytest.TempPathFactory, name: str) -> dict[str, pd.DataFrame]:
    if name not in _runs:
        _runs[name] = run_on_copy(fixture_dir, tmp_path_factory, name, "stats", ["-r", ",".join(REPORTS)],
                                  {r: r for r in REPORTS})
    return _runs[name]


def check(ours: pd.DataFrame, theirs: pd.DataFrame, key_ours: str, key_theirs: str, count_col: str) -> int:
    """The same row-by-row comparison as against 2025.3.1 (tolerance 1 ns: 2022.4 prints one decimal)."""
    compare(ours, theirs, key_ours, key_theirs, count_col)
    return len(theirs)


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_summaries_match_nsys_2022(name, fixture_dir, tmp_path_factory, load):
    ref = stats(fixture_dir, tmp_path_factory, name)
    trace = load(name)
    rows = 0
    k = ref["gpukernsum"]
    if len(k):
        k = k.assign(key=k["Name"] + "|" + k["GridXYZ"].map(lambda s: "x".join(s.split()))
                     + "|" + k["BlockXYZ"].map(lambda s: "x".join(s.split())))
    cfg = summaries.kernel_config_summary(trace)
    rows += check(cfg.assign(key=cfg["name"] + "|" + cfg["grid"] + "|" + cfg["block"]), k, "key", "key", "Instances")
    api = ref["cudaapisum"]
    if len(api):
        api = api.assign(Name=api["Name"].map(lambda s: re.sub(r"_v\d+$", "", s)))
    if not _nested_api_rows(fixture_dir, name):
        rows += check(summaries.api_summary(trace), api, "name", "Name", "Num Calls")
    # else: nsys 2022.4 counts each backtraced call twice (cudaMalloc + cudaMalloc_v3020, one
    # correlation id): test_backtraced_calls_count_once checks nsysan's counts against SQL
    mem = summaries.memcpy_summary(trace)
    mem = mem.assign(op=[summaries.nsys_operation(k, "2022.4") for k in mem["kind"].astype(str)])
    ms = summaries.memset_summary(trace).assign(op="[CUDA memset]")
    both = pd.concat([d for d in (mem, ms) if len(d)], ignore_index=True) if len(mem) + len(ms) else mem
    rows += check(both, ref["gpumemtimesum"], "op", "Operation", "Count")
    if len(ref["gpumemsizesum"]):
        sizes = ref["gpumemsizesum"].set_index("Operation")
        for _, r in both.iterrows():
            assert abs(r["total_bytes"] / 1e6 - sizes.loc[r["op"], "Total (MB)"]) < 0.001
    nv = ref["nvtxsum"]
    ours = summaries.nvtx_summary(trace)
    if len(nv):
        nv = nv.assign(key=nv["Range"] + "|" + nv["Style"])
    rows += check(ours.assign(key=ours["name"] + "|" + ours["style"]), nv, "key", "key", "Instances")
    rows += check(summaries.osrt_summary(trace), ref["osrtsum"], "name", "Name", "Num Calls")
    assert rows > 0


def _nested_api_rows(fixture_dir: Path, name: str) -> int:
    """CUDA API rows that repeat an earlier row's (thread, correlation id) (nsys 2025.3 with
    --cudabacktrace records cudaX and, inside it, cudaX_v3020)."""
    import sqlite3

    con = sqlite3.connect(f"file:{fixture_dir / (name + '.sqlite')}?mode=ro&immutable=1", uri=True)
    have = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "CUPTI_ACTIVITY_KIND_RUNTIME" not in have:
        return 0
    n, d = con.execute("SELECT count(*), count(DISTINCT globalTid || ':' || correlationId) FROM CUPTI_ACTIVITY_KIND_RUNTIME "
                       "WHERE correlationId > 0").fetchone()
    return int(n - d)


@pytest.mark.parametrize("name", [n for n in FIXTURE_NAMES if n.startswith("waits_python")])
def test_backtraced_calls_count_once(name, fixture_dir, load):
    """With CUDA backtraces each call has an outer row (callchainId set) and a nested versioned one;
    nsysan's API summary counts the outer rows: per name, SQL's rows with a callchain or no twin."""
    import sqlite3

    assert _nested_api_rows(fixture_dir, name) > 100
    con = sqlite3.connect(f"file:{fixture_dir / (name + '.sqlite')}?mode=ro&immutable=1", uri=True)
    want: dict[str, int] = {}
    for nm, n in con.execute("""SELECT s.value, count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId
                                WHERE r.correlationId <= 0 OR NOT EXISTS (SELECT 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME o
                                  WHERE o.globalTid = r.globalTid AND o.correlationId = r.correlationId
                                  AND o.rowid != r.rowid AND o.start <= r.start AND o."end" >= r."end"
                                  AND (o.start < r.start OR o.rowid < r.rowid))
                                GROUP BY s.value"""):
        key = re.sub(r"_v\d+$", "", nm)
        want[key] = want.get(key, 0) + n
    got = summaries.api_summary(load(name)).set_index("name")["count"].to_dict()
    assert got == want


# --- nsys analyze -------------------------------------------------------------------------------
_analyze_runs: dict[str, dict[str, pd.DataFrame]] = {}
ANALYZE = {"cuda_memcpy_async": "cuda-async-memcpy", "cuda_memcpy_sync": "cuda-sync-memcpy",
           "cuda_memset_sync": "cuda-sync-memset", "cuda_api_sync": "cuda-sync-api", "gpu_gaps": "gpu-starv",
           "gpu_time_util": "gpu-low-util"}


def analyze_rows(fixture_dir: Path, tmp_path_factory: pytest.TempPathFactory, name: str) -> dict[str, pd.DataFrame]:
    """All rows of nsys 2022.4's six CUDA rules (``rows=-1`` lifts its 50-row default) on a copy."""
    if name not in _analyze_runs:
        args = [a for r in ANALYZE.values() for a in ("-r", f"{r}:rows=-1")]
        _analyze_runs[name] = run_on_copy(fixture_dir, tmp_path_factory, name, "analyze", args,
                                          {ours: f"{theirs}_rows=-1" for ours, theirs in ANALYZE.items()})
    return _analyze_runs[name]


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_everything_nsys_analyze_reports_nsysan_finds(name, fixture_dir, tmp_path_factory, analysis):
    """Each instance nsys 2022.4 ``analyze`` lists is in nsysan's ``nsys_analyze`` cross-check (and so in
    the JSON and the report, with the nsysan rule that judges it or why it is reported apart)."""
    ref = analyze_rows(fixture_dir, tmp_path_factory, name)
    a = analysis(name)
    found = a.nsys_instances
    for rule in ("cuda_memcpy_async", "cuda_memcpy_sync", "cuda_memset_sync", "cuda_api_sync", "gpu_gaps"):
        theirs = ref[rule]
        ours = found[rule]
        pairs_theirs = sorted(zip(theirs["Start (ns)"], theirs["Duration (ns)"])) if len(theirs) else []
        if len(set(a.ops["pid"].tolist())) > 1 or _nested_api_rows(fixture_dir, name):
            # nsys 2022.4 joins API calls to GPU work on the correlation id alone; with several
            # processes their ids collide and it lists an instance once per matching call
            # (two_procs: each of 276 copies twice). nsysan joins on (process, id): each once.
            pairs_theirs = sorted(set(pairs_theirs))
        if rule == "cuda_api_sync" and _nested_api_rows(fixture_dir, name):
            # backtraced calls: 2022.4 lists the outer call and the versioned one inside it
            pairs_theirs = [p for p in pairs_theirs if not any(q != p and q[0] <= p[0] and q[0] + q[1] >= p[0] + p[1]
                                                                   for q in pairs_theirs)]
        assert sorted(zip(ours["start_ns"], ours["dur_ns"])) == pairs_theirs, rule
    # gpu_time_util: same chunks; nsysan's union busy time is at most nsys' summed busy time (which
    # can pass 100% and includes profiler overhead), so every region nsys flags lies inside one of ours
    theirs, ours = ref["gpu_time_util"], found["gpu_time_util"]
    for _, r in theirs.iterrows():
        s, e = int(r["Start (ns)"]), int(r["Start (ns)"]) + int(r["Duration (ns)"])
        inside = ours.loc[(ours["pid"] == r["PID"]) & (ours["device_id"] == r["Device ID"])
                          & (ours["start_ns"] <= s) & (ours["start_ns"] + ours["dur_ns"] >= e)]
        assert len(inside) == 1, (s, e)
        # nsys 2022.4 leaves out chunks without any op, so one of its regions can be part of a longer
        # run of ours (tp: chunk 0 at 0.1%, then empty chunks, all one low-use run here, 1.2% on average)
        same = int(inside["start_ns"].iloc[0]) == s and int(inside["dur_ns"].iloc[0]) == e - s
        if same:
            assert float(inside["util_pct"].iloc[0]) <= float(r["In-Use (%)"]) + 0.05
    table = a.nsys_rules.set_index("nsys_rule")
    for rule in ANALYZE:
        assert int(table.loc[rule, "count"]) == len(found[rule])
        assert table.loc[rule, "verdict"]
