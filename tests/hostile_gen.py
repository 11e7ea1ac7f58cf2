"""A generator of hostile exports, and a runner that holds nsysan to issue 18's promises on each.

Every case starts from one real fixture and makes it hostile in one or more ways: event tables
replaced by endless views, string ids far beyond the row count, many unused strings with a long
one among them, name ids that name nothing (missing, negative, NULL, text), NULL GPU names, huge
REALs in ANALYSIS_DETAILS, REAL/TEXT in time columns, terminal escapes, rich markup and spreadsheet
formulas in names and NVTX text, dropped tables, truncation, and byte-level mutation of the file;
and (issue 40) impossible values (durations that overflow when summed, an end of 2^63-1, absurd
byte counts and device properties), nested and disordered iteration ranges (duplicated, reversed,
start/end among push/pop, ended on another thread, thousands nested), and columns that are not
plain data (a generated ``end``, a table rebuilt with TEXT times or REAL ids, a column renamed away).
Some cases also point an output at the input.

Each case runs ``nsysan analyze`` (JSON, CSV and HTML) in a child forked from a process that has
imported nsysan but analysed nothing (so the fork is safe and cheap), and must:

* end with a documented exit code and no traceback or "internal error";
* finish within the time bound (a child still running is killed: a hang);
* leave the input byte-identical, and never write an output over it;
* write strict JSON when it succeeds, with no impossible figure in it (a busy fraction or share
  outside [0, 1], a negative duration, count or byte count, a -1 sentinel, a p50 of 0 ns for the
  iteration) and never 0 kernels in silence when the input's kernel table has rows;
* peak within 2x the memory of the same trace without the hostile part (growth since the fork,
  plus 64 MB of slack for allocator noise).

    python3 tests/hostile_gen.py --n 200 --seed 7          # locally, longer
    NSYSAN_HOSTILE_N=500 pytest tests/hostile/test_hostile_generated.py
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import os
import random
import resource
import shutil
import signal
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "traces" / "launch_graph_nodes" / "trace.sqlite.xz"
EXIT_OK = {0, 3, 4, 5, 6, 7, 9}  # documented codes a trace itself can cause
EVENT_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
                "NVTX_EVENTS", "OSRT_API")
EVIL = ["\x1b]0;owned\x07", "\x1b[2J", "\x1b]8;;http://x\x1b\\l\x1b]8;;\x1b\\", "[/]", "[red]", "[bold", "=1+1",
        "+cmd", "-2+3", "@SUM(A1)", "\tx", "\rx", "</script><img src=x>", "\u202e", "\x00", "\ud800"[:0] + "\x7f"]


def loosen(p: Path) -> None:
    """Drop the schema's NOT NULL constraints: a hostile writer is not bound by them."""
    con = sqlite3.connect(p)
    con.execute("PRAGMA writable_schema=ON")
    con.execute("UPDATE sqlite_master SET sql=replace(sql, 'NOT NULL', '') WHERE type='table'")
    con.commit()
    con.close()


def _sql(p: Path, *stmts: str, loosen_first: bool = True) -> None:
    if loosen_first:
        loosen(p)
    con = sqlite3.connect(p)
    for s in stmts:
        try:
            con.execute(s)
        except sqlite3.Error:
            pass  # a statement that does not apply to this table: the case is hostile in its other ways
    con.commit()
    con.close()


def _q(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def k_view(rng: random.Random, p: Path) -> str:
    t = rng.choice(EVENT_TABLES)
    _sql(p, f'ALTER TABLE "{t}" RENAME TO "{t}_real"',
         f'CREATE VIEW "{t}" AS WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) '
         f'SELECT "{t}_real".* FROM "{t}_real", r')
    return f"view:{t}"


def k_huge_id(rng: random.Random, p: Path) -> str:
    i = rng.choice((2 ** 31, 2 ** 40, 2 ** 62, 2 ** 63 - 1))
    _sql(p, f"INSERT INTO StringIds(id, value) VALUES ({i}, 'x')")
    return f"huge-id:{i}"


def k_many_strings(rng: random.Random, p: Path) -> str:
    n = rng.choice((20_000, 100_000))
    _sql(p, f"WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r WHERE x < {n}) "
            f"INSERT INTO StringIds(id, value) SELECT 10000000 + x, 's' || x FROM r",
         "INSERT INTO StringIds(id, value) VALUES (9999999, printf('%.*c', 8000, 'L'))")
    return f"strings:{n}"


def k_name_ids(rng: random.Random, p: Path) -> str:
    t, col = rng.choice((("CUPTI_ACTIVITY_KIND_KERNEL", "demangledName"), ("CUPTI_ACTIVITY_KIND_KERNEL", "shortName"),
                         ("CUPTI_ACTIVITY_KIND_RUNTIME", "nameId"), ("OSRT_API", "nameId")))
    v = rng.choice(("NULL", "-7", "99999999", "'text'", "1.5", "x'00ff'"))
    _sql(p, f'UPDATE "{t}" SET "{col}" = {v} WHERE rowid % {rng.choice((1, 2, 7))} = 0')
    return f"name-id:{t}.{col}={v}"


def k_meta(rng: random.Random, p: Path) -> str:
    s = rng.choice(("UPDATE TARGET_INFO_GPU SET name = NULL", "UPDATE ANALYSIS_DETAILS SET duration = 1e300",
                    "UPDATE ANALYSIS_DETAILS SET duration = -5, startTime = 'x'",
                    "UPDATE META_DATA_EXPORT SET value = NULL", "DELETE FROM TARGET_INFO_GPU",
                    "UPDATE ThreadNames SET nameId = -1", "UPDATE TARGET_INFO_GPU SET id = NULL"))
    _sql(p, s)
    return f"meta:{s}"


def k_times(rng: random.Random, p: Path) -> str:
    t = rng.choice(EVENT_TABLES)
    v = rng.choice(("'abc'", "1e300", "-1e300", "NULL", "start + 0.5", "9223372036854775807", "x'01'"))
    c = rng.choice(("start", '"end"', "globalTid", "correlationId", "deviceId", "streamId"))
    _sql(p, f'UPDATE "{t}" SET {c} = {v} WHERE rowid % {rng.choice((3, 11, 101))} = 0')
    return f"times:{t}.{c}={v}"


def k_evil_text(rng: random.Random, p: Path) -> str:
    e = "".join(rng.sample(EVIL, 4))
    _sql(p, f"UPDATE StringIds SET value = {_q(e)} || value WHERE id % {rng.choice((1, 3))} = 0",
         f"UPDATE NVTX_EVENTS SET text = {_q(e)} || text WHERE text IS NOT NULL",
         "UPDATE ThreadNames SET nameId = nameId")
    return "evil-text"


def k_drop(rng: random.Random, p: Path) -> str:
    t = rng.choice(("StringIds", "TARGET_INFO_GPU", "ThreadNames", "META_DATA_EXPORT", "ANALYSIS_DETAILS",
                    *EVENT_TABLES))
    _sql(p, f'DROP TABLE "{t}"')
    return f"drop:{t}"


def k_bytes(rng: random.Random, p: Path) -> str:
    data = bytearray(p.read_bytes())
    n = rng.choice((1, 8, 64, 512))
    for _ in range(n):
        pos = rng.randrange(100, len(data)) if rng.random() < 0.95 else rng.randrange(0, 100)
        data[pos] = rng.randrange(256)
    p.write_bytes(bytes(data))
    return f"bytes:{n}"


def k_truncate(rng: random.Random, p: Path) -> str:
    data = p.read_bytes()
    cut = rng.randrange(100, len(data))
    p.write_bytes(data[:cut])
    return f"truncate:{cut}"


K = "CUPTI_ACTIVITY_KIND_KERNEL"


def k_values(rng: random.Random, p: Path) -> str:
    """Issue 40: values no recording holds, on a few rows."""
    rows = ", ".join(str(r) for r in rng.sample(range(1, 60), rng.randint(1, 4)))
    s = rng.choice((
        f'UPDATE {K} SET "end" = start + {rng.choice((1 << 62, (1 << 62) + 11, 1 << 61))} WHERE rowid IN ({rows})',
        (f'UPDATE {K} SET "end" = {rng.choice(("9223372036854775807", "1e300", "4611686018427387904"))} '
         f"WHERE rowid IN ({rows})"),
        f'UPDATE {K} SET start = -4611686018427387000, "end" = 4611686018427387000 WHERE rowid IN ({rows})',
        f"UPDATE TARGET_INFO_GPU SET smCount = {rng.choice(('1e308', '-4', '100000', '-1e300'))}",
        f"UPDATE TARGET_INFO_GPU SET totalMemory = {rng.choice(('-1', '1e30', str(1 << 62)))}",
        # a copy table with absurd byte counts (this fixture has none): -1e9, 2^62
        (f'CREATE TABLE IF NOT EXISTS CUPTI_ACTIVITY_KIND_MEMCPY AS SELECT start, "end", deviceId, streamId, '
         f"correlationId, globalPid, {rng.choice(('-1000000000', str(1 << 62), '4096', '1e19'))} AS bytes, "
         f"1 AS copyKind, 0 AS srcKind, 2 AS dstKind FROM {K} WHERE rowid IN ({rows})"),
    ))
    _sql(p, s)
    return f"values:{s[:70]}"


def k_disorder(rng: random.Random, p: Path) -> str:
    """Issue 40: the NVTX ranges (the iteration range among them) duplicated, reversed, made start/end
    among push/pop ones, ended on another thread, moved to another thread, or nested by thousands."""
    m = rng.choice((2, 3, 5))
    s = rng.choice((
        f"INSERT INTO NVTX_EVENTS SELECT * FROM NVTX_EVENTS WHERE eventType = 59 AND rowid % {m} = 0",
        f'UPDATE NVTX_EVENTS SET start = "end" + 1000, "end" = start WHERE eventType = 59 AND rowid % {m} = 0',
        f"UPDATE NVTX_EVENTS SET eventType = 60 WHERE eventType = 59 AND rowid % {m} = 0",
        f"UPDATE NVTX_EVENTS SET eventType = 60, endGlobalTid = globalTid + 5 WHERE eventType = 59 AND rowid % {m} = 0",
        f"UPDATE NVTX_EVENTS SET globalTid = globalTid + 1 WHERE eventType = 59 AND rowid % {m} = 0",
        (f"WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r WHERE x < {rng.choice((1000, 20_000))}) "
         'INSERT INTO NVTX_EVENTS (start, "end", eventType, globalTid, textId) SELECT a.lo - 100000 + x, '
         'a.hi + 100000 - x, 59, a.g, a.t FROM r, (SELECT min(start) AS lo, max("end") AS hi, min(globalTid) AS g, '
         "textId AS t FROM NVTX_EVENTS WHERE eventType = 59 GROUP BY textId ORDER BY count(*) DESC LIMIT 1) AS a"),
    ))
    _sql(p, s)
    return f"disorder:{s[:60]}"


def k_columns(rng: random.Random, p: Path) -> str:
    """Issue 40: the kernel table rebuilt: ``end`` generated (virtual or stored), TEXT times, REAL ids,
    or ``end`` renamed away."""
    con = sqlite3.connect(p)
    cols = [r[1] for r in con.execute(f"PRAGMA table_info({K})")]
    con.close()
    rest = [c for c in cols if c not in ("start", "end")]
    names = ", ".join(f'"{c}"' for c in rest)
    how = rng.choice(("VIRTUAL", "STORED", "text", "real", "rename"))
    if how in ("VIRTUAL", "STORED"):
        stmts = [f"ALTER TABLE {K} RENAME TO k_old",
                 f'CREATE TABLE {K} (start INTEGER, dur INTEGER, "end" INTEGER GENERATED ALWAYS AS (start + dur) {how}, '
                 + ", ".join(f'"{c}"' for c in rest) + ")",
                 f'INSERT INTO {K} (start, dur, {names}) SELECT start, "end" - start, {names} FROM k_old', "DROP TABLE k_old"]
    elif how in ("text", "real"):
        t = "TEXT" if how == "text" else "REAL"
        sel = ", ".join(f'CAST("{c}" AS REAL) AS "{c}"' if how == "real" and c.endswith("Id") else f'"{c}"' for c in rest)
        stmts = [f'CREATE TABLE k_new AS SELECT CAST(start AS {t}) AS start, CAST("end" AS {t}) AS "end", {sel} FROM {K}',
                 f"DROP TABLE {K}", f"ALTER TABLE k_new RENAME TO {K}"]
    else:
        stmts = [f'ALTER TABLE {K} RENAME COLUMN "end" TO finish']
    _sql(p, *stmts, loosen_first=False)
    return f"columns:{how}"


SQL_KINDS: list[Callable[[random.Random, Path], str]] = [k_view, k_huge_id, k_many_strings, k_name_ids, k_meta,
                                                         k_times, k_evil_text, k_drop, k_values, k_disorder, k_columns]
KINDS: list[Callable[[random.Random, Path], str]] = [*SQL_KINDS, k_bytes, k_truncate]
# byte counts that cannot be negative (live memory and its growth can: frees of memory allocated
# before the capture)
NON_NEGATIVE = frozenset(("bytes", "total_bytes", "pageable_bytes", "pinned_bytes", "allocated_bytes", "freed_bytes",
                          "fault_bytes", "bytes_dtoh", "bytes_htod"))
SENTINEL_KEYS = ("period_ns", "device_id", "stream_id", "tid", "api_start_ns", "proj_start_ns", "proj_end_ns")


def impossible(d: dict, input_kernels: int) -> list[str]:
    """Issue 40's promises on a written JSON: the figures it reports could be real."""
    found: list[str] = []

    def walk(o: object, path: str) -> None:
        if isinstance(o, dict):
            for k, v in o.items():
                walk(v, f"{path}.{k}")
        elif isinstance(o, list):
            for v in o:
                walk(v, path + "[]")
        elif isinstance(o, (int, float)) and not isinstance(o, bool):
            key = path.rsplit(".", 1)[-1]
            never_negative = (key.endswith("_ns") and not key.endswith(("start_ns", "end_ns")) or key == "count"
                              or key.endswith("_count") or key in NON_NEGATIVE or key in ("device_id", "stream_id", "tid"))
            if ((key.endswith("_frac") or key == "share") and not 0 <= o <= 1.000001 or o < 0 and never_negative
                    or o == -1 and key in SENTINEL_KEYS):
                found.append(f"{path} = {o}")

    walk(d, "")
    it = d.get("iterations") or {}
    if (it.get("stats") or {}).get("p50_ns") == 0:
        found.append("iterations.stats.p50_ns = 0")
    tr = d.get("trace") or {}
    if input_kernels and (tr.get("counts") or {}).get("kernels") == 0 and not tr.get("warnings"):
        found.append(f"0 kernels of {input_kernels} without a warning")
    return found[:5]


def build(base: Path, workdir: Path, i: int, rng: random.Random) -> tuple[Path, list[str]]:
    """Case ``i``: one to three SQL-level kinds, then byte-level mutation or truncation now and then."""
    p = workdir / f"case{i}.sqlite"
    shutil.copy(base, p)
    done = [k(rng, p) for k in rng.sample(SQL_KINDS, rng.choice((1, 1, 2, 3)))]
    r = rng.random()
    if r < 0.25:
        done.append(k_bytes(rng, p))
    elif r < 0.3:
        done.append(k_truncate(rng, p))
    return p, done


def kernel_rows(p: Path) -> int:
    """The rows of the case's kernel table (0 when SQLite cannot tell, or it is not a table: a view
    may be endless), counted within a bounded number of SQLite steps."""
    try:
        con = sqlite3.connect(f"file:{p}?mode=ro", uri=True)
        try:
            if con.execute("SELECT type FROM sqlite_master WHERE name = ?", (K,)).fetchone() != ("table",):
                return 0
            con.set_progress_handler(lambda: 1, 50_000_000)  # a bound, whatever the file holds
            return int(con.execute(f"SELECT count(*) FROM {K}").fetchone()[0])
        finally:
            con.close()
    except (sqlite3.Error, TypeError, ValueError):
        return 0


def _rss_kb() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)


def run_case(trace: Path, outdir: Path, argv_extra: list[str], timeout_s: float) -> dict[str, object]:
    """Fork; the child runs the CLI with an alarm as the hang bound. Returns code, seconds, growth (kB)."""
    from nsysan.cli import main

    outdir.mkdir(parents=True, exist_ok=True)
    res_file = outdir / "res.json"
    argv = ["analyze", str(trace), "--json", str(outdir / "r.json"), "--csv", str(outdir / "csv"), "--html",
            str(outdir / "r.html"), "--force", *argv_extra]
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:  # child
        code = 98
        try:
            signal.alarm(int(timeout_s) + 1)  # default action: the child dies, the parent sees a hang
            start = _rss_kb()
            out = os.open(outdir / "stdout", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            err = os.open(outdir / "stderr", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(out, 1)
            os.dup2(err, 2)
            sys.stdout = open(1, "w", closefd=False)
            sys.stderr = open(2, "w", closefd=False)
            code = main(argv)
            sys.stdout.flush()
            sys.stderr.flush()
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            res_file.write_text(json.dumps({"start_kb": start, "peak_kb": peak}))
        except BaseException as e:  # noqa: BLE001 - reported to the parent as a crash
            try:
                (outdir / "crash").write_text(f"{type(e).__name__}: {e}")
            except OSError:
                pass
            code = 97
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    secs = time.monotonic() - t0
    res: dict[str, object] = {"seconds": round(secs, 3)}
    if os.WIFSIGNALED(status):
        res["code"] = -os.WTERMSIG(status)
        return res
    res["code"] = os.WEXITSTATUS(status)
    if res_file.exists():
        m = json.loads(res_file.read_text())
        res["growth_kb"] = max(0, m["peak_kb"] - m["start_kb"])
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=12)
    ap.add_argument("--seed", type=int, default=18)
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds per case before it counts as a hang")
    ap.add_argument("--keep", help="folder for failing cases")
    args = ap.parse_args(argv)
    # imported before the forks (the CLI imports pandas lazily): each child starts warm
    import nsysan.analysis
    import nsysan.cli
    import nsysan.report.html
    import nsysan.trace.load

    del nsysan

    rng = random.Random(args.seed)
    failures: list[str] = []
    stats = {"cases": 0, "codes": {}, "worst_seconds": 0.0, "worst_growth_kb": 0, "worst_case": None}
    with tempfile.TemporaryDirectory(prefix="nsysan-hostile-") as tmp:
        work = Path(tmp)
        base = work / "base.sqlite"
        base.write_bytes(lzma.decompress(FIXTURE.read_bytes()))
        ref = run_case(base, work / "ref", [], args.timeout)
        assert ref["code"] == 0 and "growth_kb" in ref, ref
        ref_growth = int(ref["growth_kb"])  # type: ignore[arg-type]
        stats["reference"] = {"seconds": ref["seconds"], "growth_kb": ref_growth}
        limit_kb = 2 * ref_growth + 64 * 1024
        for i in range(args.n):
            p, kinds = build(base, work, i, rng)
            before = hashlib.sha256(p.read_bytes()).hexdigest()
            extra: list[str] = []
            over_input = rng.random() < 0.1
            if over_input:  # an output aimed at the input (through a link half the time)
                target = p
                if rng.random() < 0.5:
                    target = work / f"link{i}.json"
                    target.symlink_to(p)
                extra = ["--json", str(target)] if rng.random() < 0.5 else ["--html", str(target)]
                kinds.append("output-over-input")
            if rng.random() < 0.2:
                extra += ["--max-events", str(rng.choice((1000, 20_000, 100_000)))]
            out = work / f"out{i}"
            res = run_case(p, out, extra, args.timeout)
            stats["cases"] += 1
            codes = stats["codes"]
            codes[str(res["code"])] = codes.get(str(res["code"]), 0) + 1  # type: ignore[union-attr]
            err = (out / "stderr").read_text(errors="replace") if (out / "stderr").exists() else ""
            problems = []
            if res["code"] not in EXIT_OK | ({2} if over_input else set()):
                problems.append(f"exit {res['code']}")
            if over_input and res["code"] != 2:
                problems.append("an output over the input was not refused")
            if "Traceback" in err or "internal error" in err or (out / "crash").exists():
                problems.append("traceback/internal error")
            if hashlib.sha256(p.read_bytes()).hexdigest() != before:
                problems.append("input modified")
            if res["code"] == 0:
                try:
                    doc = json.loads((out / "r.json").read_text("utf-8"), parse_constant=lambda c: 1 / 0)
                except (OSError, ValueError, ZeroDivisionError) as e:
                    problems.append(f"JSON output invalid ({e})")
                else:
                    problems += [f"impossible figure: {x}" for x in impossible(doc, kernel_rows(p))]
            growth = int(res.get("growth_kb", 0))  # type: ignore[arg-type]
            if growth > limit_kb:
                problems.append(f"memory {growth // 1024} MB > 2x reference ({ref_growth // 1024} MB) + 64 MB")
            if float(res["seconds"]) > stats["worst_seconds"]:  # type: ignore[arg-type]
                stats["worst_seconds"] = float(res["seconds"])  # type: ignore[arg-type]
                stats["worst_case"] = kinds
            stats["worst_growth_kb"] = max(int(stats["worst_growth_kb"]), growth)  # type: ignore[arg-type]
            if problems:
                failures.append(f"case {i} {kinds}: {'; '.join(problems)}: {err.strip()[-300:]}")
                if args.keep:
                    Path(args.keep).mkdir(parents=True, exist_ok=True)
                    shutil.copy(p, Path(args.keep) / p.name)
            p.unlink()
            shutil.rmtree(out, ignore_errors=True)
    stats["failures"] = failures
    print(json.dumps(stats, indent=1))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
