"""Scaling guard (CI): every analysis linear in the trace's rows, and no cost where there is no input.

    python3 benchmarks/scaling_guard.py [--fixture launch_eager,slow_iters,mem_growth,slow_iters:no-nvtx] [--scales 1,4,16] [--reps 2]

Replicas of small fixtures (``benchmarks/replicate.py``: every event copied N times, shifted in
time) at 1x, 4x and 16x are analysed (``nsysan.analyze``, analyses and rules, one analysis thread so
each function's time is its own) in a fresh process each, ``--reps`` times. Each run reports the
analysis' wall time, its peak resident memory above the loaded trace (the kernel's high-water mark,
reset once the trace is loaded), and the time of every analysis function ``nsysan/analysis.py``
calls and of every rule. Times are the minimum over the repetitions, memory too.

It fails (exit 1, naming what grew) when, from one scale to the next (4x the rows):

* the total analysis time, or the peak memory above the loaded trace, grows more than 5x;
* any one analysis function or rule grows more than 5x, its smaller time taken as at least 10 ms
  (so the noise of a sub-10 ms function cannot fail it); one under 1 ms at the smaller scale did
  not do its work there (a rule whose input passes its threshold only on the bigger replica: the
  window's copies reach serial-copy-compute's 200 us at 4x) and is judged from the next scale on;
  one under 10 ms is judged at the next step where there is one (such a rule's early exit took
  0.7-1.2 ms at x1 on the 2-core CI machine: 1.2 -> 65.6 ms failed it against the floor, while it
  grew 3.3x from x4 to x16; a superlinear one outgrows the limit at that step too);
* an analysis that has no input on this trace (no memory-usage events, no unified-memory
  migrations or faults, no scheduling events) costs more than 10 ms on the largest replica (a few
  ms of fixed cost are tolerated: on the 2-core machine unified memory's empty tables cost 4-6 ms;
  a cost per row shows at 16x: ``memory._calls_between`` took 40 ms there before issue 52).

Only ratios inside one run are compared, so the machine's speed does not matter; the whole guard
takes about 30 s on 2 cores (three fixtures). ``--plant-quadratic NAME`` adds an O(n^2) loop in n = the trace's kernels
to the analysis named NAME (as listed, e.g. ``slow_iterations.slow_iterations``) in the analysed
processes: the guard must then fail on it (tests/benchmarks/test_scaling_guard.py).
"""

from __future__ import annotations

import argparse
import itertools
import json
import lzma
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "traces"

LIMIT = 5.0  # the most a time or the memory may grow for 4x the rows (4x: linear; 5x: the slack)
FUNC_FLOOR_S = 0.010  # a function's smaller time taken as at least this (noise on tiny functions)
RAN_FLOOR_S = 0.001  # below this at the smaller scale, a function did not do its work there (not compared)
TOTAL_FLOOR_S = 0.050
MEM_FLOOR_MIB = 16.0  # the peak above the loaded trace taken as at least this (allocator noise)
NO_INPUT_CAP_S = 0.010  # an analysis with no input may cost at most this on the largest replica

# what the child times: (module, function) as nsysan/analysis.py calls them; missing ones are skipped
TARGETS = {
    "nsysan.analysis": ["_summaries", "_gaps", "_nvtx", "_busy", "_steady", "_launches", "graph_trace_mode",
                        "_idle_samples", "_gpu_metrics", "analyze_tensorrt", "analyze_ranks", "program"],
    "nsysan.analyses.summaries": ["gpu_ops", "kernel_config_summary", "window_summaries"],
    "nsysan.analyses.nsys_rules": ["instances", "cross_check"],
    "nsysan.analyses.comm": ["comm_ops", "collectives", "comm_per_iteration", "nccl_calls"],
    "nsysan.analyses.breakdown": ["iteration_breakdown"],
    # the analyses beyond time, imported by name when ``_without_gaps`` runs: wrapped in their modules
    "nsysan.analyses.memory": ["memory_use"],
    "nsysan.analyses.unified": ["unified_memory"],
    "nsysan.analyses.sched": ["thread_states"],
    "nsysan.analyses.stages": ["stages"],
    "nsysan.analyses.slow_iterations": ["slow_iterations"],
    "nsysan.analyses.recorded": ["missing_inputs"],
    "nsysan.analyses.phases": ["phases"],
    "nsysan.analyses.syncs": ["hidden_syncs"],
    "nsysan.analyses.iterations.inferred": ["infer"],
    "nsysan.rules": ["run_rules"],
}


# -- the analysed process ---------------------------------------------------------------------------

def _status(key: str) -> float:
    """A /proc/self/status memory line (VmRSS, VmHWM) in MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


def _label(modname: str, name: str) -> str:
    return f"{modname.rsplit('.', 1)[-1]}.{name}"


def _instrument(times: dict[str, float], plant: str | None, trace_rows: list[int]) -> None:
    import dataclasses
    import functools
    import importlib

    def timed(label: str, f: Any, consume: bool = False) -> Any:
        def w(*a: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                out = f(*a, **kw)
                if consume:  # a rule is a generator: its work is done as it is consumed
                    out = list(out)
                if label == plant:
                    _quadratic(trace_rows[0])
                return out
            finally:
                times[label] = times.get(label, 0.0) + time.perf_counter() - t0

        return functools.wraps(f)(w)

    for modname, names in TARGETS.items():
        mod = importlib.import_module(modname)
        for n in names:
            f = getattr(mod, n, None)
            if callable(f):
                setattr(mod, n, timed(_label(modname, n), f))
    from nsysan.rules import REGISTRY

    for rid, r in list(REGISTRY.items()):
        REGISTRY[rid] = dataclasses.replace(r, fn=timed(f"rule:{rid}", r.fn, consume=True))


def _quadratic(kernels: int) -> int:
    """The planted defect: a pure-Python double loop over a share of the kernels, O(n^2)."""
    n = kernels // 40
    s = 0
    for i in range(n):
        for j in range(n):
            s += i ^ j
    return s


def _no_input(trace: Any) -> dict[str, str]:
    """The analyses that have nothing to read on this trace, with what they lack."""
    import numpy as np

    out = {}
    if len(trace.gpu_memory_usage) == 0:
        out["memory.memory_use"] = "no CUDA memory-usage events"
    mc = trace.memcpy
    um = int(np.isin(mc["copy_kind"].to_numpy(), (11, 12)).sum()) if len(mc) else 0
    faults = len(getattr(trace, "um_gpu_faults", ())) + len(getattr(trace, "um_cpu_faults", ()))
    if um == 0 and faults == 0:
        out["unified.unified_memory"] = "no unified-memory migrations or faults"
    if len(getattr(trace, "sched", ())) == 0:
        out["sched.thread_states"] = "no scheduling events"
    return out


def child(path: str, out: str, plant: str | None) -> int:
    from nsysan import _memory

    _memory.own_process()  # the allocator as the `nsysan` command sets it
    from nsysan._startup import pandas_without_arrow

    pandas_without_arrow()
    import nsysan
    from nsysan import analysis

    times: dict[str, float] = {}
    rows = [0]
    _instrument(times, plant, rows)
    t0 = time.perf_counter()
    trace = nsysan.open_trace(path)
    load_s = time.perf_counter() - t0
    rows[0] = len(trace.kernels)
    loaded = _status("VmRSS")
    load_peak = _status("VmHWM")
    try:  # the high-water mark from here on (Linux >= 4.0)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        reset = True
    except OSError:
        reset = False
    times.clear()
    t0 = time.perf_counter()
    analysis.analyze(trace)
    total = time.perf_counter() - t0
    peak = _status("VmHWM")
    Path(out).write_text(json.dumps({
        "total_s": total, "load_s": load_s, "loaded_mib": loaded, "load_peak_mib": load_peak,
        "peak_mib": peak, "above_loaded_mib": peak - loaded if reset else max(0.0, peak - loaded),
        "hwm_reset": reset, "kernels": rows[0], "events": int(len(trace.kernels) + len(trace.cuda_api)
                                                               + len(trace.osrt)),
        "funcs": times, "no_input": _no_input(trace)}))
    return 0


# -- the guard ----------------------------------------------------------------------------------------

def _replicas(fixture: str, scales: list[int], tmp: Path) -> dict[int, Path]:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import replicate

    src = tmp / "source.sqlite"
    base, _, variant = fixture.partition(":")
    with lzma.open(FIXTURES / base / "trace.sqlite.xz") as f, open(src, "wb") as g:
        shutil.copyfileobj(f, g)
    if variant == "no-nvtx":  # as most users' traces arrive: the loop inferred from the GPU work
        import sqlite3

        con = sqlite3.connect(src)
        con.execute("DELETE FROM NVTX_EVENTS")
        con.commit()
        con.close()
    out = {}
    for n in scales:
        dst = tmp / f"x{n}.sqlite"
        replicate.main([str(src), str(dst), "--copies", str(n)])
        out[n] = dst
    return out


def measure(fixture: str, scales: list[int], reps: int, plant: str | None = None,
            tmp: Path | None = None) -> list[dict[str, Any]]:
    """One summary per scale: the minimum time of each function, the total, the memory, over ``reps``
    fresh processes (run in turn over the scales, so a slow minute of the machine hits them all)."""
    own = tmp is None
    tmp = Path(tempfile.mkdtemp(prefix="nsysan-scaling-")) if tmp is None else tmp
    try:
        paths = _replicas(fixture, scales, tmp)
        env = dict(os.environ, NSYSAN_THREADS="1", NSYSAN_NO_CACHE="1", OPENBLAS_NUM_THREADS="1")
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
        got: dict[int, list[dict[str, Any]]] = {n: [] for n in scales}
        for r in range(reps):
            for n in scales:
                res = tmp / f"x{n}.{r}.json"
                cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(paths[n]), str(res)]
                if plant:
                    cmd += ["--plant-quadratic", plant]
                p = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
                if p.returncode != 0:
                    raise RuntimeError(f"analysis of the x{n} replica failed (exit {p.returncode}):\n{p.stderr[-3000:]}")
                got[n].append(json.loads(res.read_text()))
        return [_best(n, got[n]) for n in scales]
    finally:
        if own:
            shutil.rmtree(tmp, ignore_errors=True)


def _best(scale: int, runs: list[dict[str, Any]]) -> dict[str, Any]:
    names = set().union(*(r["funcs"] for r in runs))
    return {"scale": scale, "events": runs[0]["events"], "kernels": runs[0]["kernels"],
            "total_s": min(r["total_s"] for r in runs), "load_s": min(r["load_s"] for r in runs),
            "loaded_mib": min(r["loaded_mib"] for r in runs),
            "above_loaded_mib": min(r["above_loaded_mib"] for r in runs),
            "funcs": {k: min(r["funcs"].get(k, 0.0) for r in runs) for k in names},
            "no_input": runs[0]["no_input"]}


def check(runs: list[dict[str, Any]], *, limit: float = LIMIT, func_floor_s: float = FUNC_FLOOR_S,
          total_floor_s: float = TOTAL_FLOOR_S, mem_floor_mib: float = MEM_FLOOR_MIB,
          no_input_cap_s: float = NO_INPUT_CAP_S, ran_floor_s: float = RAN_FLOOR_S) -> list[str]:
    """The failures, as sentences naming what grew, of summaries ordered by scale (``measure``'s):
    each scale against the one before, the limit ``limit`` for 4x the rows (``limit * k / 4`` for k
    times the rows); each analysis with no input against ``no_input_cap_s`` at the largest scale."""
    bad: list[str] = []
    for small, big in itertools.pairwise(runs):
        k = big["scale"] / small["scale"]
        allowed = limit * k / 4
        step = f"x{small['scale']} -> x{big['scale']} ({k:g}x the rows)"

        def grew(what: str, a: float, b: float, floor: float, unit: str, allowed: float = allowed,
                 step: str = step) -> None:
            ratio = b / max(a, floor)
            if ratio > allowed:
                fmt = (lambda v: f"{v * 1000:.1f} ms") if unit == "s" else (lambda v: f"{v:.0f} MiB")
                bad.append(f"{what}: {fmt(a)} -> {fmt(b)}, {ratio:.1f}x for {step}, more than {allowed:g}x: "
                           "superlinear in the trace's rows")

        grew("total analysis time", small["total_s"], big["total_s"], total_floor_s, "s")
        grew("peak memory above the loaded trace", small["above_loaded_mib"], big["above_loaded_mib"],
             mem_floor_mib, "MiB")
        last = big is runs[-1]
        for name in sorted(big["funcs"]):
            a = small["funcs"].get(name, 0.0)
            # under 1 ms it did not run at the smaller scale (its input did not qualify there: a rule's
            # threshold on the window's totals); under the floor, only the floor is compared, so where a
            # later step follows, that one judges it (superlinear work outgrows the limit there too)
            if a < ran_floor_s or (a < func_floor_s and not last):
                continue
            grew(f"analysis {name}", a, big["funcs"][name], func_floor_s, "s")
    for r in runs[-1:]:
        for name, why in sorted(r.get("no_input", {}).items()):
            t = r["funcs"].get(name)
            if t is not None and t > no_input_cap_s:
                bad.append(f"analysis {name} has no input ({why}) but took {t * 1000:.1f} ms at x{r['scale']} "
                           f"(at most {no_input_cap_s * 1000:g} ms)")
    return bad


def report(runs: list[dict[str, Any]], top: int = 12) -> str:
    lines = []
    for r in runs:
        lines.append(f"x{r['scale']:<3} {r['events']:>9,} events  analysis {r['total_s']:7.3f} s  "
                     f"memory {r['loaded_mib']:6.0f} MiB loaded, +{r['above_loaded_mib']:5.0f} MiB at peak  "
                     f"(load {r['load_s']:.2f} s)")
    last = runs[-1]
    names = sorted(last["funcs"], key=lambda n: -last["funcs"][n])[:top]
    head = "".join(f"{'x' + str(r['scale']):>10}" for r in runs)
    lines.append(f"\n{'slowest at x' + str(last['scale']):<40}{head}  ratios")
    for n in names:
        ts = [r["funcs"].get(n, 0.0) for r in runs]
        ratios = " ".join(f"{b / a:5.1f}" if a > 0 else "    -" for a, b in itertools.pairwise(ts))
        lines.append(f"{n:<40}" + "".join(f"{t * 1000:8.1f}ms" for t in ts) + f"  {ratios}")
    for name, why in sorted(last.get("no_input", {}).items()):
        ts = " ".join(f"{r['funcs'].get(name, 0.0) * 1000:.1f}" for r in runs)
        lines.append(f"no input: {name} ({why}): {ts} ms")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixture", default="launch_eager,slow_iters,mem_growth,slow_iters:no-nvtx",
                    help="fixtures, comma-separated (default: a launch loop with no memory, unified-memory or "
                         "scheduling input; slow iterations with checkpoints; memory-usage events)")
    ap.add_argument("--scales", default="1,4,16", help="replica sizes, ascending (default 1,4,16)")
    ap.add_argument("--reps", type=int, default=3, help="fresh processes per scale; times are their minimum")
    ap.add_argument("--plant-quadratic", metavar="NAME", help=argparse.SUPPRESS)
    ap.add_argument("--json", type=Path, help="also write the measurements here")
    ap.add_argument("--child", nargs=2, metavar=("TRACE", "OUT"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        return child(a.child[0], a.child[1], a.plant_quadratic)
    scales = [int(s) for s in a.scales.split(",")]
    if scales != sorted(set(scales)) or scales[0] < 1:
        ap.error(f"--scales {a.scales}: ascending copy counts, e.g. 1,4,16")
    t0 = time.perf_counter()
    bad: list[str] = []
    everything = {}
    for fixture in a.fixture.split(","):
        runs = measure(fixture, scales, a.reps, a.plant_quadratic)
        everything[fixture] = runs
        print(f"scaling guard: {fixture} at {', '.join(f'x{s}' for s in scales)}, min of {a.reps} runs each, "
              "one analysis thread")
        print(report(runs) + "\n")
        bad += [f"{fixture}: {b}" for b in check(runs)]
    if a.json:
        a.json.write_text(json.dumps(everything, indent=1))
    print(f"({time.perf_counter() - t0:.1f} s)")
    if bad:
        print("\nscaling guard FAILED: superlinear, or costly without input:", file=sys.stderr)
        for b in bad:
            print(f"  {b}", file=sys.stderr)
        return 1
    print("scaling guard passed: every analysis within 5x for 4x the rows; no cost without input")
    return 0


if __name__ == "__main__":
    sys.exit(main())
