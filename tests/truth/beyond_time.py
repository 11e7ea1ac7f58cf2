"""Write the "SQL-derived truth" section of issue 41's fixture READMEs (memory, unified memory, scheduling,
pipeline stages, two GPUs, slow iterations), by plain SQL and interval arithmetic on the trimmed export.

Independent of nsysan (uses ``tests/sqltruth.py`` for opening exports and NVTX range instances only).
Times are int64 ns on the export's clock. Iterations are the closed ``train_step`` push/pop ranges
(per process); an iteration's window is [range start, completion], completion = max(CPU end, end of
the GPU ops launched inside it on its thread).

    python3 -m tests.truth.beyond_time                      # all of them
    python3 -m tests.truth.beyond_time --print um_thrash    # print, don't write
"""

from __future__ import annotations

import argparse
import sys

from tests import sqltruth as T

HEADER = "## SQL-derived truth"
MIB = 2**20
KIND = {"mem_growth": "memory", "mem_churn": "memory", "um_thrash": "um", "um_prefetch": "um",
        "blocked_input": "sched", "busy_input": "sched", "pipe_stages": "pipe", "pipe_balanced": "pipe",
        "two_gpu_turns": "two_gpu", "two_gpu_pipelined": "two_gpu", "slow_iters": "slow"}


def ms(v: float) -> str:
    return f"{v / 1e6:.3f} ms"


def clip_len(iv: list[tuple[int, int]], lo: int, hi: int) -> int:
    """Length of a disjoint interval list inside [lo, hi]."""
    return sum(max(0, min(e, hi) - max(s, lo)) for s, e in iv)


def intersect(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if e > s:
            out.append((s, e))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def steps(conn, name: str = "train_step", pid: int | None = None) -> list[dict]:
    return T.range_instances(conn, name, pid)


def kernels(conn, device: int, nccl: bool | None = None) -> list[tuple[int, int]]:
    """Kernel intervals on a device; nccl True/False keeps only NCCL / non-NCCL kernels (by short name)."""
    where = "" if nccl is None else (" AND s.value LIKE 'nccl%'" if nccl else " AND s.value NOT LIKE 'nccl%'")
    return [(int(a), int(b)) for a, b in conn.execute(
        "SELECT k.start, k.end FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName "
        f"WHERE k.deviceId = ?{where}", (device,))]


# --- memory -------------------------------------------------------------------------------------------------
def memory(conn) -> list[str]:
    L = ["Device memory, from `CUDA_GPU_MEMORY_USAGE_EVENTS` (point events; `memoryOperationType` 0 allocation, 1 free;"
         " live bytes = cumulative allocations - frees of `memKind` 2 (device) per (device, pid), in (start, rowid) order):", ""]
    for kind, op, n, b in conn.execute(
            "SELECT memKind, memoryOperationType, COUNT(*), SUM(bytes) FROM CUDA_GPU_MEMORY_USAGE_EVENTS GROUP BY 1, 2"):
        L.append(f"- memKind {kind}, {'free' if op else 'alloc'}: {n} rows, {b} bytes ({b / MIB:.1f} MiB)")
    rows = conn.execute("""
        SELECT start, deviceId, (globalPid >> 24) & 16777215, bytes, memoryOperationType,
               SUM(CASE memoryOperationType WHEN 0 THEN bytes ELSE -bytes END)
                   OVER (PARTITION BY deviceId, globalPid ORDER BY start, rowid) AS live
        FROM CUDA_GPU_MEMORY_USAGE_EVENTS WHERE memKind = 2 ORDER BY start, rowid""").fetchall()
    if not rows:
        return L + ["- no device (memKind 2) rows"]

    def live_at(t: int) -> int:
        v = 0
        for r in rows:
            if r[0] > t:
                break
            v = r[5]
        return v

    peak = max(rows, key=lambda r: r[5])
    L.append(f"- device {rows[0][1]}, pid {rows[0][2]}: live at the last event {rows[-1][5]} bytes "
             f"({rows[-1][5] / MIB:.1f} MiB); peak {peak[5]} bytes ({peak[5] / MIB:.1f} MiB) at {peak[0]}")
    it = steps(conn)
    L += ["", f"Per `train_step` ({len(it)}; window [start, completion]): device allocations / frees inside it "
          "(count, MiB) and live MiB at its completion:", ""]
    ends, growth = [], []
    for i, s in enumerate(it):
        a = [r for r in rows if s["start"] <= r[0] <= s["completion"]]
        na = sum(1 for r in a if r[4] == 0)
        nf = len(a) - na
        ba = sum(r[3] for r in a if r[4] == 0)
        bf = sum(r[3] for r in a if r[4] == 1)
        lv = live_at(s["completion"])
        ends.append(lv)
        L.append(f"  - {i}: alloc {na} ({ba / MIB:.1f} MiB), free {nf} ({bf / MIB:.1f} MiB), live {lv / MIB:.1f} MiB")
    growth = [b - a for a, b in zip(ends, ends[1:])]
    g = T.median(growth)
    L += ["", f"- growth of live device memory per iteration (completion to completion): median {g} bytes "
          f"({(g or 0) / MIB:.1f} MiB), min {min(growth) / MIB:.1f} MiB, max {max(growth) / MIB:.1f} MiB; "
          f"first -> last iteration {(ends[-1] - ends[0]) / MIB:.1f} MiB over {len(ends) - 1} iterations",
          f"- iterations with at least one free of device memory: "
          f"{sum(1 for s in it if any(r[4] == 1 and s['start'] <= r[0] <= s['completion'] for r in rows))} of {len(it)}"]
    return L


# --- unified memory ---------------------------------------------------------------------------------------
def um(conn) -> list[str]:
    tabs = T.tables(conn)
    L = ["Unified memory: migrations are `CUPTI_ACTIVITY_KIND_MEMCPY` rows of `copyKind` 11 (HtoD) / 12 (DtoH) with "
         "`migrationCause` (1 user prefetch, 2 page fault, 3 speculative prefetch); GPU faults "
         "`CUDA_UM_GPU_PAGE_FAULT_EVENTS` (rows = fault groups, `numberOfPageFaults`), CPU faults "
         "`CUDA_UM_CPU_PAGE_FAULT_EVENTS` (one row per fault). Whole trace:", ""]
    for ck, cause, n, b in conn.execute("SELECT copyKind, migrationCause, COUNT(*), SUM(bytes) FROM "
                                        "CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind IN (11, 12, 13) GROUP BY 1, 2"):
        L.append(f"- copyKind {ck}, migrationCause {cause}: {n} rows, {b} bytes ({b / MIB:.2f} MiB)")
    gpu = "CUDA_UM_GPU_PAGE_FAULT_EVENTS" in tabs
    cpu = "CUDA_UM_CPU_PAGE_FAULT_EVENTS" in tabs
    if gpu:
        n, f = conn.execute("SELECT COUNT(*), SUM(numberOfPageFaults) FROM CUDA_UM_GPU_PAGE_FAULT_EVENTS").fetchone()
        L.append(f"- GPU page fault groups: {n} rows, {f} faults")
    else:
        L.append("- no `CUDA_UM_GPU_PAGE_FAULT_EVENTS` table (no GPU page fault recorded)")
    if cpu:
        L.append(f"- CPU page faults: {conn.execute('SELECT COUNT(*) FROM CUDA_UM_CPU_PAGE_FAULT_EVENTS').fetchone()[0]}")
    else:
        L.append("- no `CUDA_UM_CPU_PAGE_FAULT_EVENTS` table")
    it = steps(conn)
    L += ["", f"Per `train_step` ({len(it)}; events whose start lies in [start, completion]): GPU fault groups/faults, "
          "CPU faults, HtoD and DtoH migrated bytes (MiB) and rows, kernel time (sum of kernel durations):", ""]
    tot = {"gf": 0, "cf": 0, "h": 0, "d": 0}
    for i, s in enumerate(it):
        a, b = s["start"], s["completion"]
        gr, gf = conn.execute("SELECT COUNT(*), COALESCE(SUM(numberOfPageFaults), 0) FROM CUDA_UM_GPU_PAGE_FAULT_EVENTS "
                              "WHERE start BETWEEN ? AND ?", (a, b)).fetchone() if gpu else (0, 0)
        cf = conn.execute("SELECT COUNT(*) FROM CUDA_UM_CPU_PAGE_FAULT_EVENTS WHERE start BETWEEN ? AND ?",
                          (a, b)).fetchone()[0] if cpu else 0
        mig = dict(((k, (n, by)) for k, n, by in conn.execute(
            "SELECT copyKind, COUNT(*), SUM(bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind IN (11, 12) AND "
            "start BETWEEN ? AND ? GROUP BY 1", (a, b))))
        kt = conn.execute("SELECT COALESCE(SUM(end - start), 0) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE start BETWEEN ? "
                          "AND ?", (a, b)).fetchone()[0]
        h, d = mig.get(11, (0, 0)), mig.get(12, (0, 0))
        tot["gf"] += gf
        tot["cf"] += cf
        tot["h"] += h[1]
        tot["d"] += d[1]
        L.append(f"  - {i}: GPU faults {gr}/{gf}, CPU faults {cf}, HtoD {h[1] / MIB:.2f} MiB ({h[0]} rows), DtoH "
                 f"{d[1] / MIB:.2f} MiB ({d[0]} rows), kernels {ms(kt)}")
    n = max(1, len(it))
    L += ["", f"- per iteration mean: GPU faults {tot['gf'] / n:.1f}, CPU faults {tot['cf'] / n:.1f}, HtoD "
          f"{tot['h'] / n / MIB:.2f} MiB, DtoH {tot['d'] / n / MIB:.2f} MiB"]
    return L


# --- thread scheduling ------------------------------------------------------------------------------------
def on_cpu(conn, gtid: int, t_end: int) -> list[tuple[int, int]]:
    """On-CPU intervals of a thread from SCHED_EVENTS (switch-in to next switch-out; open at the start if the
    first row is a switch-out, from the thread's first event)."""
    rows = conn.execute("SELECT start, isSchedIn FROM SCHED_EVENTS WHERE globalTid = ? ORDER BY start, rowid",
                        (gtid,)).fetchall()
    out, cur = [], None
    if rows and rows[0][1] == 0:
        cur = 0
    for t, sin in rows:
        if sin:
            if cur is None:
                cur = t
        elif cur is not None:
            out.append((cur, t))
            cur = None
    if cur is not None:
        out.append((cur, t_end))
    return out


def sched(conn) -> list[str]:
    it = steps(conn)
    tid = (it[0]["pid"] << 24) | it[0]["tid"]
    gtid = conn.execute("SELECT globalTid FROM NVTX_EVENTS WHERE globalTid & 0xFFFFFFFFFFFF = ? LIMIT 1",
                        (tid,)).fetchone()[0]
    end = max(r["completion"] for r in it)
    on = on_cpu(conn, gtid, end)
    osrt = [(int(a), int(b), n) for a, b, n in conn.execute(
        "SELECT o.start, o.end, s.value FROM OSRT_API o JOIN StringIds s ON s.id = o.nameId WHERE o.globalTid = ?",
        (gtid,))]
    L = [f"Thread scheduling of the main thread (pid {it[0]['pid']}, tid {it[0]['tid']}: the `train_step` thread), "
         "from `SCHED_EVENTS` (on CPU from a switch-in to the next switch-out); off-CPU time attributed to the "
         "`OSRT_API` call of that thread covering it (by name), else 'not in a traced call':", ""]
    for rng in ("train_step", "data"):
        inst = [r for r in steps(conn, rng) if r["tid"] == it[0]["tid"]]
        shares, offs, names = [], 0, {}
        total_dur = 0
        for r in inst:
            a, b = r["start"], r["end"]
            dur = b - a
            o = clip_len(on, a, b)
            shares.append(o / dur if dur else 0.0)
            total_dur += dur
            off = [(max(s, a), min(e, b)) for s, e in
                   [(x[1], y[0]) for x, y in zip([(0, a)] + on, on + [(b, b)])] if min(e, b) > max(s, a)]
            offs += sum(e - s for s, e in off)
            for s, e in off:
                covered = 0
                for os_, oe, n in osrt:
                    c = max(0, min(oe, e) - max(os_, s))
                    if c:
                        names[n] = names.get(n, 0) + c
                        covered += c
                names["not in a traced call"] = names.get("not in a traced call", 0) + max(0, (e - s) - covered)
        if not inst:
            continue
        L.append(f"- `{rng}` ({len(inst)} instances, CPU duration total {ms(total_dur)}): on CPU "
                 f"{ms(total_dur - offs)} ({(total_dur - offs) / total_dur:.1%}), off CPU {ms(offs)} "
                 f"({offs / total_dur:.1%}); per-instance on-CPU share median {T.median([int(x * 1e6) for x in shares]) / 1e6:.3f}, "
                 f"min {min(shares):.3f}, max {max(shares):.3f}")
        for n, v in sorted(names.items(), key=lambda kv: -kv[1])[:4]:
            L.append(f"  - off CPU in {n}: {ms(v)} ({v / offs:.1%} of the off-CPU time)" if offs else "")
    return L


# --- pipeline stages ----------------------------------------------------------------------------------------
def pipe(conn) -> list[str]:
    pids = sorted({r["pid"] for r in steps(conn)})
    L = ["Per stage (one rank a process, one GPU each; `train_step` windows [start, completion] of that rank): compute "
         "= union of its device's non-NCCL kernels in the window, p2p = union of its `nccl*` (SendRecv) kernels, "
         "wait = window - compute:", ""]
    per = {}
    for pid in pids:
        dev = conn.execute("SELECT deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE ((globalPid >> 24) & 16777215) = ? GROUP BY 1 "
                           "ORDER BY COUNT(*) DESC LIMIT 1", (pid,)).fetchone()[0]
        comp = T.union(kernels(conn, dev, nccl=False))
        p2p = T.union(kernels(conn, dev, nccl=True))
        it = steps(conn, pid=pid)
        c = [clip_len(comp, s["start"], s["completion"]) for s in it]
        q = [clip_len(p2p, s["start"], s["completion"]) for s in it]
        d = [s["completion"] - s["start"] for s in it]
        mb = len([r for r in steps(conn, "micro_batch", pid) if it[0]["start"] <= r["start"] <= it[0]["end"]])
        per[pid] = (dev, T.median(c), T.median(d))
        L.append(f"- pid {pid} (device {dev}): {len(it)} steps, {mb} `micro_batch` ranges in the first; step median "
                 f"{ms(T.median(d))}; compute median {ms(T.median(c))} ({T.median(c) / T.median(d):.1%} of the step), "
                 f"p2p kernels median {ms(T.median(q))}, wait (step - compute) median {ms(T.median(d) - T.median(c))}")
    slow = max(per, key=lambda p: per[p][1])
    mean = sum(v[1] for v in per.values()) / len(per)
    L += ["", f"- bottleneck stage: pid {slow} (device {per[slow][0]}), compute median {ms(per[slow][1])}; mean stage "
          f"compute {ms(mean)}; slowest - mean = {ms(per[slow][1] - mean)} a step (the saving bound from balancing); "
          f"compute ratio slowest/fastest {per[slow][1] / min(v[1] for v in per.values()):.2f}",
          f"- ideal bubble of GPipe/1F1B with p = {len(per)} stages and m = {mb} micro-batches: (p-1)/(m+p-1) = "
          f"{(len(per) - 1) / (mb + len(per) - 1):.1%} of the step"]
    return L


# --- two GPUs in one process --------------------------------------------------------------------------------
def two_gpu(conn) -> list[str]:
    devs = T.devices(conn)
    busy = {d: T.union(kernels(conn, d)) for d in devs}
    it = steps(conn)
    L = [f"One process, devices {devs}; per `train_step` ({len(it)}), from kernel intervals (union per device): "
         "busy per device, both at once = length of the intersection, share = both / (either busy):", ""]
    both_all, either_all = 0, 0
    for i, s in enumerate(it):
        a, b = s["start"], s["completion"]
        u = {d: [(max(x, a), min(y, b)) for x, y in busy[d] if min(y, b) > max(x, a)] for d in devs}
        both = sum(e - q for q, e in intersect(u[devs[0]], u[devs[1]]))
        either = sum(e - q for q, e in T.union(u[devs[0]] + u[devs[1]]))
        both_all += both
        either_all += either
        L.append(f"  - {i}: step {ms(b - a)}, busy " + ", ".join(f"dev {d} {ms(sum(e - q for q, e in u[d]))}" for d in devs)
                 + f", both {ms(both)}, share {both / either if either else 0:.1%}")
    L += ["", f"- all steps: both at once {ms(both_all)} of {ms(either_all)} with either busy "
          f"({both_all / either_all:.1%}); step median {ms(T.median([s['completion'] - s['start'] for s in it]))}"]
    return L


# --- slow iterations ----------------------------------------------------------------------------------------
def slow(conn) -> list[str]:
    it = steps(conn)
    d = [s["completion"] - s["start"] for s in it]
    med = T.median(d)
    slow_ = [(i, s, x) for i, (s, x) in enumerate(zip(it, d)) if x > 2 * med]
    L = [f"`train_step` instances: {len(it)}; duration = completion - start; median {med} ns ({ms(med)}); "
         f"iterations > 2x the median (index from 0, start, duration, GPU ops launched inside, child ranges):", ""]
    for i, s, x in slow_:
        kids = conn.execute(
            "SELECT COALESCE(n.text, st.value) FROM NVTX_EVENTS n LEFT JOIN StringIds st ON st.id = n.textId WHERE "
            "n.globalTid & 0xFFFFFF = ? AND n.start > ? AND n.end <= ? AND n.end IS NOT NULL", (s["tid"], s["start"], s["end"])
        ).fetchall()
        L.append(f"  - {i}: start {s['start']}, duration {x} ns ({ms(x)}), ops {s['ops']}, ranges "
                 f"{sorted({k[0] for k in kids}) or '-'}")
    cost = sum(x - med for _, _, x in slow_)
    L += ["", f"- total cost of these above the median: {cost} ns ({ms(cost)}), {cost / sum(d):.1%} of the sum of "
          f"all step durations ({ms(sum(d))}); ops per step median {T.median([s['ops'] for s in it])}"]
    return L


def section(name: str) -> str:
    conn = T.open_fixture(name)
    body = {"memory": memory, "um": um, "sched": sched, "pipe": pipe, "two_gpu": two_gpu, "slow": slow}[KIND[name]](conn)
    conn.close()
    return "\n".join([HEADER, "", ("Computed by `tests/truth/beyond_time.py` (plain SQL and interval arithmetic "
                                   f"on the trimmed export; `python3 -m tests.truth.beyond_time {name}` "
                                   "rewrites this section). Times are int64 ns from the export's clock."), "",
                      *[x for x in body if x is not None], ""])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("names", nargs="*", help=f"fixtures (default: {', '.join(KIND)})")
    p.add_argument("--print", action="store_true")
    args = p.parse_args(argv)
    for name in args.names or list(KIND):
        text = section(name)
        if args.print:
            print(text)
            continue
        readme = T.FIXTURES / name / "README.md"
        head = readme.read_text().split(HEADER)[0].rstrip("\n")
        readme.write_text(head + "\n\n" + text)
        print(f"{readme}: truth written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
