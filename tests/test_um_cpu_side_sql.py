"""Unified memory, the CPU side (issue 49, item 4), against SQL.

um_cpu_writes: each step the CPU writes a managed buffer the GPU read last; its page faults pull the
pages back (DtoH migrations) while the GPU idles. The migrations split that one wait into ~100 short
gaps a step, each under host-bound-gap's per-gap threshold, so the idle went unnamed. Now the gaps that
end at one launching call count as one wait, and the finding names the range the CPU was in and the
CPU page faults as the cause, with the unified-memory fix.

Truth is SQL on the export: the GPU idle intervals (holes between the merged GPU ops of the device),
the NVTX ``cpu_write`` ranges on the submitting thread, and ``CUDA_UM_CPU_PAGE_FAULT_EVENTS`` rows
inside both.
"""

from __future__ import annotations

import re

import sqltruth

NAME = "um_cpu_writes"


def _idle(conn, lo: int, hi: int) -> list[tuple[int, int]]:
    """The holes between the merged GPU ops (kernels, copies, memsets) inside [lo, hi)."""
    ops = sqltruth._ops_union(conn, "start, end")
    out, run = [], None
    for s, e in conn.execute(f"SELECT start, end FROM ({ops}) ORDER BY start, end"):
        if run is not None and s > run and s > lo and run < hi:
            out.append((max(run, lo), min(s, hi)))
        run = e if run is None else max(run, e)
    return out


def test_cpu_faults_in_the_idle_name_the_host_bound_gap(fixture_dir, analysis):
    conn = sqltruth.open_export(fixture_dir / f"{NAME}.sqlite")
    a = analysis(NAME)
    w = a.steady
    # GIVEN (SQL) the cpu_write ranges of the steady window, the GPU idle inside them and the CPU
    # page faults that fall in that idle
    writes = conn.execute(
        """SELECT n.start, n."end" FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
           WHERE coalesce(n.text, s.value) = 'cpu_write' AND n.start >= ? AND n."end" <= ? ORDER BY n.start""",
        (w.start_ns, w.end_ns)).fetchall()
    assert len(writes) >= 8
    faults = [int(t) for (t,) in conn.execute("SELECT start FROM CUDA_UM_CPU_PAGE_FAULT_EVENTS")]
    idle_ns, write_ns, in_idle = 0, 0, 0
    for lo, hi in writes:
        holes = _idle(conn, lo, hi)
        idle_ns += sum(e - s for s, e in holes)
        write_ns += hi - lo
        in_idle += sum(1 for t in faults if any(s <= t < e for s, e in holes))
    # the GPU idles most of the writes, and the CPU faults fall in that idle
    assert idle_ns > 0.9 * write_ns
    assert in_idle > 50 * len(writes)
    # WHEN nsysan judges the trace
    f = [x for x in a.findings if x.rule == "host-bound-gap"]
    # THEN host-bound-gap fires, names cpu_write, the CPU faults and the unified-memory fix
    assert f, [x.rule for x in a.findings]
    m = f[0].message
    assert "nvtx:cpu_write" in m and "CPU page faults" in m
    assert "cudaMemPrefetchAsync" in f[0].suggestion and "pinned host" in f[0].suggestion
    assert f[0].title == "GPU idle while the CPU pulls managed memory back"
    # the time it lists for cpu_write is the idle inside the ranges (SQL), within the launching calls' slack
    got = re.search(r"nvtx:cpu_write: ([\d.]+) (ms|us)", m)
    ms = float(got.group(1)) * (1 if got.group(2) == "ms" else 1e-3)
    assert abs(ms * 1e6 - idle_ns) <= 0.05 * idle_ns, (ms, idle_ns)
    # the fault count it gives is the faults inside its gaps: at most all the faults of the window,
    # at least those SQL finds in the idle of the writes
    n = int(re.search(r"([\d,]+) CPU page faults", m).group(1).replace(",", ""))
    in_window = sum(1 for t in faults if w.start_ns <= t < w.end_ns)
    assert in_idle <= n <= in_window


def test_the_fix_keeps_the_data_on_one_side(fixture_dir, analysis):
    """um_cpu_hostcopy (the CPU writes pinned host memory, one copy to the device): no managed memory,
    no CPU faults (SQL), and no finding blames them."""
    conn = sqltruth.open_export(fixture_dir / "um_cpu_hostcopy.sqlite")
    has = "CUDA_UM_CPU_PAGE_FAULT_EVENTS" in sqltruth.tables(conn)
    assert not has or conn.execute("SELECT count(*) FROM CUDA_UM_CPU_PAGE_FAULT_EVENTS").fetchone()[0] == 0
    a = analysis("um_cpu_hostcopy")
    assert not any("CPU page faults" in x.message for x in a.findings)
