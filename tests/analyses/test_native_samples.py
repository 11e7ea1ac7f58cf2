"""Native CPU samples, per gap class and steady-loop attribution, native call sites, missing inputs.

Truth is SQL written here: the native samples (``COMPOSITE_EVENTS``), their call chains
(``SAMPLING_CALLCHAINS`` / ``CUDA_CALLCHAINS`` joined to ``StringIds``, ordered by ``stackDepth``), the
launching thread (the one running the ``step`` ranges, or the one with the most kernel launches), and
the GPU's idle intervals (the complement of the union of kernel, memcpy and memset rows, at least 10 us)
inside nsysan's steady window. The own-code frame is computed here by a rule written for each export's
modules (its program binary, or for a Python program the innermost resolved frame of an installed
package that is not the CUDA runtime), independently of nsysan's general tiering.

Fixtures: ``waits_python_noblobs`` (Python samples lost in export, so native samples and native CUDA
backtraces are what is left), ``waits_python``; public exports with native samples (skipped when the
corpus is absent); ``waits_native`` / ``waits_sync`` when present.
"""

from __future__ import annotations

import html
import json
import re
import sqlite3
from collections import Counter
from pathlib import Path

import pytest
import sqltruth
from conftest import CORPUS, FIXTURE_NAMES

HAVE_NOBLOBS = "waits_python_noblobs" in FIXTURE_NAMES
SYSTEM_LIBS = ("libc.", "libc-", "ld-", "libm.", "libm-", "libpthread", "libstdc++", "libgcc", "libdl", "librt", "libcuda")
RUNTIME_SYM = re.compile(r"^(cuda[A-Z]\w*(<.*>)?|__cudart\w*|libcudart_static_\w*)$")


def _con(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)


def _idle(con: sqlite3.Connection, t0: int, t1: int, min_ns: int = 10_000) -> list[tuple[int, int]]:
    ops = sorted(r for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
                 if con.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (t,)).fetchone()
                 for r in con.execute(f'SELECT start, "end" FROM {t} WHERE "end" > ? AND start < ?', (t0, t1)))
    idle, cur = [], None
    for s, e in ops:
        if cur is not None and s > cur and s - cur >= min_ns:
            idle.append((cur, s))
        cur = e if cur is None else max(cur, e)
    return idle


def _inside(ts: int, spans: list[tuple[int, int]]) -> bool:
    return any(s <= ts < e for s, e in spans)


def _chains(con: sqlite3.Connection, table: str, ids: list[int]) -> dict[int, list[tuple[str, str, int]]]:
    out: dict[int, list[tuple[int, str, str, int]]] = {}
    for i in range(0, len(ids), 5000):
        q = ",".join(str(int(x)) for x in ids[i:i + 5000])
        for cid, d, sym, mod, unres in con.execute(
                f"""SELECT c.id, c.stackDepth, s.value, m.value, coalesce(c.unresolved, 0) FROM {table} c
                    JOIN StringIds s ON s.id = c.symbol JOIN StringIds m ON m.id = c.module WHERE c.id IN ({q})"""):
            out.setdefault(int(cid), []).append((int(d), str(sym), str(mod), int(unres)))
    return {k: [(s, m, u) for _, s, m, u in sorted(v)] for k, v in out.items()}


def _own_binary(frames: list[tuple[str, str, int]], binary: str) -> str | None:
    """The innermost resolved frame of the program's own binary that is not the CUDA runtime."""
    for s, m, u in frames:
        if m.endswith("/" + binary) and not u and not s.startswith("0x") and not RUNTIME_SYM.match(s):
            return s
    return None


def _own_python_program(frames: list[tuple[str, str, int]]) -> tuple[str, str]:
    """For the waits/diagnose workloads (Python programs; no own native module): (symbol, module) of the
    innermost resolved frame of an installed package (site-packages, a Python extension module, a
    /usr/lib library other than libc, libm, libstdc++, the loader...) that is not the CUDA runtime;
    else its innermost unresolved frame; else of the innermost frame (an
    unresolved address as '[unresolved]' in its module, as nsysan.analyses.samples documents)."""
    def installed(m: str) -> bool:
        base = m.rsplit("/", 1)[-1]
        return ("site-packages" in m or ".cpython-3" in base or (
            m.startswith("/usr/lib/") and "/lib-dynload/" not in m and not base.startswith(SYSTEM_LIBS))) \
            and not base.startswith(("libcudart", "libcupti"))

    for s, m, u in frames:
        if installed(m) and not u and not s.startswith("0x") and not RUNTIME_SYM.match(s):
            return s, m
    for s, m, u in frames:  # else an unresolved address in an installed package
        if installed(m):
            return "[unresolved]", m
    if not frames:
        return "", ""
    s, m, u = frames[0]
    return ("[unresolved]" if u or s.startswith("0x") else s), m


def _launching_thread(con: sqlite3.Connection) -> int:
    row = con.execute("""SELECT n.globalTid FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
                         WHERE n.eventType = 59 AND coalesce(n.text, s.value) = 'step' LIMIT 1""").fetchone() \
        if con.execute("SELECT 1 FROM sqlite_master WHERE name = 'NVTX_EVENTS'").fetchone() else None
    if row:
        return int(row[0])
    return int(con.execute("""SELECT r.globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId
                              WHERE s.value LIKE 'cudaLaunchKernel%' OR s.value LIKE 'cuLaunchKernel%'
                              GROUP BY r.globalTid ORDER BY count(*) DESC LIMIT 1""").fetchone()[0])


def _samples(con: sqlite3.Connection, gtid: int, t0: int, t1: int) -> list[tuple[int, int]]:
    return [(int(i), int(s)) for i, s in con.execute(
        "SELECT id, start FROM COMPOSITE_EVENTS WHERE globalTid = ? AND start >= ? AND start < ? ORDER BY start",
        (gtid, t0, t1))]


# -- native samples in GPU-idle time (a Python program whose Python frames were lost in export) ---------


@pytest.mark.parametrize("name", [n for n in ("waits_python_noblobs", "waits_native") if n in FIXTURE_NAMES])
def test_native_samples_in_idle_gaps_from_sql(analysis, fixture_dir, name):
    a = analysis(name)
    con = _con(fixture_dir / f"{name}.sqlite")
    w = a.steady
    idle = _idle(con, w.start_ns, w.end_ns)
    gtid = _launching_thread(con)
    samples = [(i, s) for i, s in _samples(con, gtid, w.start_ns, w.end_ns) if _inside(s, idle)]
    chains = _chains(con, "SAMPLING_CALLCHAINS", [i for i, _ in samples])
    own = Counter(_own_python_program(chains.get(i, [])) for i, _ in samples)
    n = len(samples)
    assert n > 100  # ~290 ms of idle time at ~500 Hz
    got = a.idle_samples
    assert got.source == "native"
    assert abs(got.samples_in_gaps - n) <= 0.03 * n
    t = got.table.set_index(["function", "module"])
    for key, c in own.most_common(4):
        assert t.loc[key, "self_share"] == pytest.approx(c / n, abs=0.02), key
    top = own.most_common(1)[0][0]
    assert (got.table.iloc[0]["function"], got.table.iloc[0]["module"]) == top
    f = next(f for f in a.findings if f.rule == "host-bound-gap")
    if name == "waits_python_noblobs":
        assert top[0] == "_PyEval_EvalFrameDefault" and top[1].endswith("python3.12")
        assert "CPU samples taken in these gaps: _PyEval_EvalFrameDefault in python3.12" in f.message
        assert "only Python samples tell which Python function ran" in f.message
        assert "--include-blobs=true" in f.message  # the frames lost in export, and the command that recovers them
    else:
        # the workload's un-annotated native work in the gaps: numpy's sort (sort_records) and zlib (pack_log)
        mods = Counter()
        for (_, m), c in own.items():
            mods[m.rsplit("/", 1)[-1].split(".")[0]] += c
        assert mods["_multiarray_umath"] + mods["libz"] > 0.3 * n
        assert "CPU samples taken in these gaps: " in f.message and "; by module: _multiarray_umath" in f.message
    by_module: Counter[str] = Counter()
    for (_, m), c in own.items():
        by_module[m.rsplit("/", 1)[-1]] += c
    whole = next(c for c in got.classes if c.key == "nvtx:step")
    for m, share in whole.modules(3):
        assert share == pytest.approx(by_module[m] / n, abs=0.02), m


@pytest.mark.parametrize("name", [n for n in ("waits_python_noblobs", "waits_native") if n in FIXTURE_NAMES])
def test_native_call_sites_from_cuda_callchains(analysis, fixture_dir, name):
    """Each runtime row with a ``callchainId`` in the steady window, its chain's own-code frame, counted per
    (API name, function) by SQL; nsysan's native call sites equal it, and the rules' sentence quotes it."""
    a = analysis(name)
    con = _con(fixture_dir / f"{name}.sqlite")
    w = a.steady
    rows = con.execute("""SELECT s.value, r.callchainId FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId
                          WHERE r.callchainId IS NOT NULL AND r.start >= ? AND r.start < ?""",
                       (w.start_ns, w.end_ns)).fetchall()
    chains = _chains(con, "CUDA_CALLCHAINS", sorted({int(c) for _, c in rows}))
    want = Counter((re.sub(r"_v\d+$", "", name), *_own_python_program(chains[int(c)])) for name, c in rows)
    sites = a.idle_samples.sites
    got = {(r["api"], r["function"], r["module"]): int(r["calls"]) for _, r in sites.iterrows()}
    assert set(sites["source"]) == {"native"}
    assert got == dict(want)
    # .item(): cudaStreamSynchronize from torch's _local_scalar_dense_cuda, once per step
    sync = next(k for k in want if k[0] == "cudaStreamSynchronize" and k[1].startswith("at::native::_local_scalar_dense"))
    assert want[sync] >= 35
    from nsysan.rules import RuleContext
    from nsysan.rules._wording import call_sites

    note = call_sites(RuleContext(a), ["cudaStreamSynchronize"])
    assert note.startswith(" Call sites (CUDA backtraces): cudaStreamSynchronize from at::native::_local_scalar_dense_cuda")
    assert f"in libtorch_cuda.so ({want[sync]} calls)" in note
    if name == "waits_native":  # the findings quote them
        msg = {f.rule: f.message for f in a.findings}
        assert "Call sites (CUDA backtraces): cudaMalloc from " in msg["alloc-in-loop"]
        assert "Call sites (CUDA backtraces): cudaMemcpy from " in msg["sync-memcpy"]


def _pageable_with_backtrace(con: sqlite3.Connection, t0: int, t1: int) -> Counter[str]:
    """Pageable HtoD/DtoH copies whose runtime call started in the window with a native backtrace, per API."""
    return Counter(re.sub(r"_v\d+$", "", n) for (n,) in con.execute(
        """SELECT s.value FROM CUPTI_ACTIVITY_KIND_MEMCPY m
           JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = m.correlationId
                AND (r.globalTid >> 24) = (m.globalPid >> 24)
           JOIN StringIds s ON s.id = r.nameId
           WHERE m.copyKind IN (1, 2) AND ((m.copyKind = 1 AND m.srcKind = 0) OR (m.copyKind = 2 AND m.dstKind = 0))
           AND r.callchainId IS NOT NULL AND r.start >= ? AND r.start < ? AND m.start < ? AND m."end" > ?""",
        (t0, t1, t1, t0)))


@pytest.mark.parametrize("name", [n for n in ("waits_python_noblobs", "waits_native") if n in FIXTURE_NAMES])
def test_pageable_copies_quote_only_their_own_calls(analysis, fixture_dir, name):
    a = analysis(name)
    con = _con(fixture_dir / f"{name}.sqlite")
    want = _pageable_with_backtrace(con, a.steady.start_ns, a.steady.end_ns)
    m = a.trace.memcpy
    w = a.steady
    pg = m.loc[(m["host_mem"] == "Pageable") & m["kind"].isin(["HtoD", "DtoH"]) & (m["start_ns"] < w.end_ns)
               & (m["end_ns"] > w.start_ns)]
    from nsysan.rules import RuleContext
    from nsysan.rules._wording import call_sites

    note = call_sites(RuleContext(a), None, correlation=zip(pg["pid"].tolist(), pg["correlation_id"].tolist()))
    if not want:
        assert note == ""
        return
    got: Counter[str] = Counter()
    for api, c in re.findall(r"(\w+) from .*? \((\d+) calls?\)", note):
        got[api] += int(c)
    assert got == want  # two call sites here: the note lists both, and only the pageable copies' calls
    f = next(f for f in a.findings if f.rule == "pageable-memcpy")
    assert note in f.message


# -- public exports: the steady loop's CPU time and the gap classes ------------------------------------

# export -> its program binary (the own-code module)
OWN_BINARY = {"wenscarl__cutlass_benchmark__report1": "a.out", "kmcho2019__Rodinia_3.1_Gaussian__report2": "gaussian",
              "purdue-ece60827-sp25__cuda-assignment-1-li3878__profile_report": "lab1",
              "mariamiiiiii__my_clue__report3": "main", "cestwc__balinski-and-gomory-cuda__report11": "test1"}


def _export(name: str) -> Path:
    p = CORPUS / f"{name}.sqlite"
    if not p.exists():
        pytest.skip("public corpus absent")
    return p


@pytest.mark.parametrize("name", sorted(OWN_BINARY))
def test_steady_loop_cpu_time_on_public_exports(name):
    p = _export(name)
    from nsysan import analyze, open_trace

    a = analyze(open_trace(p))
    con = _con(p)
    w = a.steady
    gtid = _launching_thread(con)
    samples = _samples(con, gtid, w.start_ns, w.end_ns)
    chains = _chains(con, "SAMPLING_CALLCHAINS", [i for i, _ in samples])
    own = Counter(_own_binary(chains.get(i, []), OWN_BINARY[name]) for i, _ in samples)
    st = a.idle_samples.steady
    assert st is not None and st.source == "native"
    assert st.samples == len(samples)
    # the program's top function by SQL is nsysan's top own-code function, with the same share
    top, c = next((k, v) for k, v in own.most_common() if k is not None)
    t = st.table.set_index("function")
    assert t.loc[top, "self_share"] == pytest.approx(c / len(samples), abs=0.01)
    mine = st.table.loc[st.table["module"].astype(str).str.endswith("/" + OWN_BINARY[name])]
    assert mine.iloc[0]["function"] == top  # the program's own functions in the same order
    # and no frame of another module outranks it unless it has more samples (runtime-only stacks)
    assert all(int(r["self_samples"]) >= c for _, r in st.table.iloc[:int(mine.index[0])].iterrows())


def test_gap_classes_count_the_samples_in_their_gaps():
    """cestwc (1,600+ host gaps of two classes): each class's gaps are idle intervals of the GPU by SQL, and
    the class's sample count is the SQL count of samples on the gap's thread inside those intervals."""
    name = "cestwc__balinski-and-gomory-cuda__report11"
    p = _export(name)
    from nsysan import analyze, open_trace

    a = analyze(open_trace(p))
    con = _con(p)
    w = a.steady
    idle = set(_idle(con, w.start_ns, w.end_ns))
    g = a.gaps
    g = g.loc[g["cause"].isin(["host", "sync"]) & (g["start_ns"] >= w.start_ns) & (g["end_ns"] <= w.end_ns)]
    classes = {c.key: c for c in a.idle_samples.classes}
    assert len(classes) >= 2 and sum(c.gaps for c in classes.values()) == len(g)
    per_thread: dict[tuple[int, int], list[int]] = {}
    for gt, s in con.execute("SELECT globalTid, start FROM COMPOSITE_EVENTS WHERE start >= ? AND start < ?",
                             (w.start_ns, w.end_ns)):
        per_thread.setdefault((int(gt) >> 24 & 0xFFFFFF, int(gt) & 0xFFFFFF), []).append(int(s))
    for act, gg in g.groupby(g["activity"].astype(str)):
        spans = list(zip(gg["start_ns"].tolist(), gg["end_ns"].tolist()))
        assert set(spans) <= idle  # every gap is an idle interval by SQL
        n = sum(1 for (pid, tid), (s, e) in zip(zip(gg["pid"], gg["tid"]), spans)
                for ts in per_thread.get((int(pid), int(tid)), []) if s <= ts < e)
        assert classes[act].samples == n, act
        assert classes[act].gaps == len(gg)
    sync = classes["cuda_api:cudaDeviceSynchronize"]
    assert sync.attributed and sync.samples >= 10
    f = next(f for f in a.findings if f.rule == "host-bound-gap")
    # the synchronize time is named among what the thread did (its own class only where the counted gaps
    # of the window hold it: in the inferred loop's steady state they are mostly untraced CPU work)
    assert "cuda_api:cudaDeviceSynchronize: " in f.message


# -- Python samples: the steady loop ------------------------------------------------------------------


def test_python_steady_loop_from_sql(analysis, fixture_dir):
    if "waits_python" not in FIXTURE_NAMES:
        pytest.skip("fixture missing")
    from test_samples import _frames

    a = analysis("waits_python")
    con = _con(fixture_dir / "waits_python.sqlite")
    dom = sqltruth.nvtx_domain(con, "Python Periodic Sampling")
    gtid = _launching_thread(con)
    w = a.steady
    strings = dict(con.execute("SELECT id, value FROM StringIds"))
    own: Counter[str] = Counter()
    n = 0
    for (blob,) in con.execute("SELECT binaryData FROM NVTX_EVENTS WHERE eventType = 34 AND domainId = ? AND globalTid = ? "
                               "AND start >= ? AND start < ?", (dom, gtid, w.start_ns, w.end_ns)):
        n += 1
        user = [strings[f] for f, fi, _ in _frames(blob) if strings[fi].endswith("workloads/waits.py")]
        k = 0
        while user[k] == "&lt;genexpr&gt;":
            k += 1
        own[user[k]] += 1
    st = a.idle_samples.steady
    assert st.source == "python" and st.samples == n
    t = st.table.set_index("function")
    for fn in ("tokenize", "fetch_result", "featurize"):
        assert t.loc[fn, "self_share"] == pytest.approx(own[fn] / n, abs=0.02), fn
    # the steady loop sees what the gaps do not: fetch_result() blocked in cudaStreamSynchronize
    gaps_t = a.idle_samples.table.set_index("function")
    assert t.loc["fetch_result", "self_samples"] > 3 * gaps_t.loc["fetch_result", "self_samples"]


# -- which inputs a trace lacks, and the flag that adds each --------------------------------------------

FLAGS = {"cpu_samples": "-s process-tree", "python_samples": "--python-sampling=true",
         "cuda_backtraces": "--cudabacktrace=all", "python_backtraces": "--python-backtrace=cuda",
         "gpu_metrics": "--gpu-metrics-devices=all"}


def _held(con: sqlite3.Connection) -> set[str]:
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    out = set()
    if "COMPOSITE_EVENTS" in tables and con.execute("SELECT count(*) FROM COMPOSITE_EVENTS").fetchone()[0]:
        out.add("cpu_samples")
    if "CUDA_CALLCHAINS" in tables and con.execute("SELECT count(*) FROM CUDA_CALLCHAINS").fetchone()[0]:
        out.add("cuda_backtraces")
    if "GPU_METRICS" in tables and con.execute("SELECT count(*) FROM GPU_METRICS").fetchone()[0]:
        out.add("gpu_metrics")
    if "NVTX_EVENTS" in tables and "NVTX_PAYLOAD_SCHEMA_ENTRIES" in tables:
        for key, dom in (("python_samples", "Python Periodic Sampling"), ("python_backtraces", "Python Backtrace on CUDA")):
            if con.execute("""SELECT count(*) FROM NVTX_EVENTS e JOIN NVTX_EVENTS d ON d.domainId = e.domainId
                              AND d.eventType = 75 AND d.text = ? WHERE e.eventType = 34""", (dom,)).fetchone()[0]:
                out.add(key)
    return out


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_missing_inputs_name_their_flags(analysis, fixture_dir, name):
    a = analysis(name)
    con = _con(fixture_dir / f"{name}.sqlite")
    held = _held(con)
    missing = a.idle_samples.missing
    assert {m["input"] for m in missing} - {"python_frames"} == set(FLAGS) - held
    for m in missing:
        if m["input"] in FLAGS:
            assert FLAGS[m["input"]] in m["flag"]
    cols = {r[1] for r in con.execute("PRAGMA table_info(NVTX_EVENTS)")}
    # Python samples are marks (eventType 34) in nsys's Python domains; a mark of another domain (the
    # recorder's 'item FILE:LINE' of nsysan profile --annotate) carries no frames and none are lost
    lost = con.execute(
        "SELECT count(*) - count(e.binaryData) FROM NVTX_EVENTS e WHERE e.eventType = 34 AND EXISTS (SELECT 1 FROM "
        "NVTX_EVENTS d LEFT JOIN StringIds s ON s.id = d.textId WHERE d.eventType = 75 AND d.domainId = e.domainId "
        "AND (d.globalTid >> 24) = (e.globalTid >> 24) AND coalesce(d.text, s.value) LIKE 'Python %')").fetchone()[0] \
        if "binaryData" in cols else 0
    assert ("python_frames" in {m["input"] for m in missing}) == bool(lost)
    d = json.loads(a.to_json())["samples"]
    assert d["missing_inputs"] == json.loads(json.dumps(missing))


@pytest.mark.parametrize("name", [n for n in ("ladder_baseline", "waits_python_noblobs", "waits_python")
                                  if n in FIXTURE_NAMES])
def test_report_panel_says_what_is_missing_and_what_ran(analysis, name):
    a = analysis(name)
    html = a.to_html()
    i = html.find('<section id="sec-inputs_missing">')
    lacks = html[i:html.index("</section>", i)] if i >= 0 else ""
    if name == "ladder_baseline":  # nothing sampled: the panel is left out, said once with why
        assert '<section id="samples">' not in html
        note = html[html.index('id="not-shown"'):]
        assert "Who kept the GPU waiting (no CPU or Python samples" in note[:note.index("</p>")]
        for m in a.idle_samples.missing:  # every flag that would fill it, in the one list of what the trace lacks
            assert m["flag"] in lacks
        return
    i = html.index('<section id="samples">')
    panel = html[i:html.index("</section>", i)]
    for m in a.idle_samples.missing:  # each missing input named, its flag beside it or in the list it links to
        assert m["label"] in panel and (m["flag"] in panel or (m["flag"] in lacks and "#sec-inputs_missing" in panel))
    top = a.idle_samples.classes[0].table.iloc[0]
    assert str(top["function"]).split("(")[0] in panel
    assert "Most sampled stacks" in panel
    if name == "waits_python":
        assert "cudaStreamSynchronize" in panel and "fetch_result()" in panel  # the call sites table


# -- waits_sync: Python samples and Python backtraces with syncs, pageable copies and allocations --------


def _own_workload(frames: list[tuple[str, str, int]]) -> tuple[str, int]:
    """The innermost frame of the workload's own files (workloads/*.py), a comprehension counted for its function."""
    user = [(f, ln) for f, fi, ln in frames if "/workloads/" in fi]
    k = 0
    while user[k][0] in ("<genexpr>", "<listcomp>", "<lambda>") and k + 1 < len(user):
        k += 1
    return user[k][0], user[0][1]  # the line: where the innermost own frame was


def _py_frames(con: sqlite3.Connection, blob: bytes, strings: dict[int, str]) -> list[tuple[str, str, int]]:
    from test_samples import _frames

    return [(html.unescape(strings[f]), strings[fi], ln) for f, fi, ln in _frames(blob)]


@pytest.mark.skipif("waits_sync" not in FIXTURE_NAMES, reason="fixture missing")
def test_waits_sync_python_call_sites_and_findings(analysis, fixture_dir):
    a = analysis("waits_sync")
    con = _con(fixture_dir / "waits_sync.sqlite")
    dom = sqltruth.nvtx_domain(con, "Python Backtrace on CUDA")
    w = a.steady
    strings = dict(con.execute("SELECT id, value FROM StringIds"))
    want: Counter[tuple[str, str, int]] = Counter()
    for name, blob in con.execute("""SELECT s.value, b.binaryData FROM NVTX_EVENTS b
                                     JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.globalTid = b.globalTid AND r.start = b.start
                                     JOIN StringIds s ON s.id = r.nameId
                                     WHERE b.eventType = 34 AND b.domainId = ? AND b.start >= ? AND b.start < ?""",
                                  (dom, w.start_ns, w.end_ns)):
        fn, ln = _own_workload(_py_frames(con, blob, strings))
        want[(re.sub(r"_v\d+$", "", name), fn, ln)] += 1
    sites = a.idle_samples.sites
    got = {(r["api"], r["function"], int(r["line"])): int(r["calls"]) for _, r in sites.iterrows()}
    assert set(sites["source"]) == {"python"} and got == dict(want)
    msg = {f.rule: f.message for f in a.findings}
    assert f"cudaMemcpy from memcpy() common.py:123 ({want[('cudaMemcpy', 'memcpy', 123)]} calls)" in msg["sync-memcpy"]
    assert f"cudaMalloc from malloc() common.py:78 ({want[('cudaMalloc', 'malloc', 78)]} calls)" in msg["alloc-in-loop"]
    assert f"cudaFree from free() common.py:82 ({want[('cudaFree', 'free', 82)]} calls)" in msg["alloc-in-loop"]
    # pageable-memcpy quotes the pageable copies' own calls only (not the pinned DtoH of read_loss)
    pg = _pageable_with_python_backtrace(con, dom, w.start_ns, w.end_ns, strings)
    for (api, fn, ln), c in pg.items():
        assert f"{api} from {fn}() " in msg["pageable-memcpy"] and f":{ln} ({c} calls)" in msg["pageable-memcpy"]
    assert "read_loss" not in msg["pageable-memcpy"]


def _pageable_with_python_backtrace(con: sqlite3.Connection, dom: int, t0: int, t1: int,
                                    strings: dict[int, str]) -> Counter[tuple[str, str, int]]:
    out: Counter[tuple[str, str, int]] = Counter()
    for name, blob in con.execute(
            """SELECT s.value, b.binaryData FROM CUPTI_ACTIVITY_KIND_MEMCPY m
               JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = m.correlationId
                    AND (r.globalTid >> 24) = (m.globalPid >> 24)
               JOIN NVTX_EVENTS b ON b.eventType = 34 AND b.domainId = ? AND b.globalTid = r.globalTid AND b.start = r.start
               JOIN StringIds s ON s.id = r.nameId
               WHERE ((m.copyKind = 1 AND m.srcKind = 0) OR (m.copyKind = 2 AND m.dstKind = 0))
               AND r.start >= ? AND r.start < ? AND m.start < ? AND m."end" > ?""", (dom, t0, t1, t1, t0)):
        fn, ln = _own_workload(_py_frames(con, blob, strings))
        out[(re.sub(r"_v\d+$", "", name), fn, ln)] += 1
    return out


@pytest.mark.skipif("waits_sync" not in FIXTURE_NAMES, reason="fixture missing")
def test_waits_sync_python_samples_in_gaps(analysis, fixture_dir):
    a = analysis("waits_sync")
    con = _con(fixture_dir / "waits_sync.sqlite")
    dom = sqltruth.nvtx_domain(con, "Python Periodic Sampling")
    gtid = _launching_thread(con)
    w = a.steady
    idle = _idle(con, w.start_ns, w.end_ns)
    strings = dict(con.execute("SELECT id, value FROM StringIds"))
    own: Counter[str] = Counter()
    n = 0
    for ts, blob in con.execute("SELECT start, binaryData FROM NVTX_EVENTS WHERE eventType = 34 AND domainId = ? AND "
                                "globalTid = ? AND start >= ? AND start < ?", (dom, gtid, w.start_ns, w.end_ns)):
        if not _inside(ts, idle):
            continue
        n += 1
        own[_own_workload(_py_frames(con, blob, strings))[0]] += 1
    got = a.idle_samples
    assert got.source == "python" and abs(got.samples_in_gaps - n) <= 0.03 * n and n > 300
    t = got.table.set_index("function")
    for fn in ("prepare_batch", "augment"):
        assert t.loc[fn, "self_share"] == pytest.approx(own[fn] / n, abs=0.02), fn
    assert got.table.iloc[0]["function"] == "prepare_batch"
    cls = {c.key: c for c in got.classes}
    assert sum(c.samples for c in cls.values()) == got.samples_in_gaps
    f = next(f for f in a.findings if f.rule == "host-bound-gap")
    assert "Python samples taken in these gaps: prepare_batch() diagnose.py:" in f.message


@pytest.mark.skipif("waits_sync" not in FIXTURE_NAMES, reason="fixture missing")
def test_call_sites_inside_ranges(analysis, fixture_dir):
    """What timing-unsynchronized quotes: the backtraced calls made inside given NVTX ranges on their thread
    (here the steady 'step' ranges), per call site, by SQL (Python backtraces joined to runtime rows)."""
    a = analysis("waits_sync")
    con = _con(fixture_dir / "waits_sync.sqlite")
    w = a.steady
    rg = a.nvtx_ranges
    steps = rg.loc[(rg["name"] == "step") & (rg["start_ns"] >= w.start_ns) & (rg["end_ns"] <= w.end_ns)]
    spans = [(int(s), int(e)) for s, e in con.execute(
        """SELECT n.start, n."end" FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
           WHERE n.eventType = 59 AND coalesce(n.text, s.value) = 'step' AND n.start >= ? AND n."end" <= ?""",
        (w.start_ns, w.end_ns))]
    assert len(spans) == len(steps) > 30
    dom = sqltruth.nvtx_domain(con, "Python Backtrace on CUDA")
    strings = dict(con.execute("SELECT id, value FROM StringIds"))
    want: Counter[tuple[str, str, int]] = Counter()
    spent: Counter[tuple[str, str, int]] = Counter()
    for name, ts, dur, blob in con.execute("""SELECT s.value, r.start, r."end" - r.start, b.binaryData FROM NVTX_EVENTS b
                                         JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.globalTid = b.globalTid AND r.start = b.start
                                         JOIN StringIds s ON s.id = r.nameId
                                         WHERE b.eventType = 34 AND b.domainId = ? AND b.start >= ? AND b.start < ?""",
                                      (dom, w.start_ns, w.end_ns)):
        if _inside(ts, spans):
            fn, ln = _own_workload(_py_frames(con, blob, strings))
            want[(re.sub(r"_v\d+$", "", name), fn, ln)] += 1
            spent[(re.sub(r"_v\d+$", "", name), fn, ln)] += int(dur)
    from nsysan.analyses.call_sites import aggregate_sites, calls_in

    got = aggregate_sites(calls_in(a.idle_samples.site_calls, steps))
    assert {(r["api"], r["function"], int(r["line"])): int(r["calls"]) for _, r in got.iterrows()} == dict(want)
    from nsysan.rules import RuleContext
    from nsysan.rules._wording import call_sites_in

    (api, fn, ln), _ = max(spent.items(), key=lambda kv: kv[1])  # the site with the most time in its calls first
    note = call_sites_in(RuleContext(a), steps)
    assert note.startswith(f" Call sites (Python backtraces): {api} from {fn}() diagnose.py:{ln} ({want[(api, fn, ln)]} calls)")
