"""The scaling guard of CI (benchmarks/scaling_guard.py): its verdict on timings given to it (linear
passes; quadratic, memory that grows faster than the rows, and cost without input fail, naming what
grew), and one run on small replicas with a planted quadratic loop, which it must catch."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))

import scaling_guard


def runs(func, total=None, mem=None, no_input=None, scales=(1, 4, 16)):
    """Summaries as ``scaling_guard.measure`` gives them, each value a function of the scale."""
    out = []
    for s in scales:
        out.append({"scale": s, "events": 1000 * s, "kernels": 100 * s, "load_s": 0.01 * s,
                    "loaded_mib": 80.0 + s,
                    "total_s": total(s) if total else 0.2 + 0.05 * s,
                    "above_loaded_mib": mem(s) if mem else 4.0 * s,
                    "funcs": {name: f(s) for name, f in func.items()},
                    "no_input": dict(no_input or {})})
    return out


LINEAR = {"gaps._gaps": lambda s: 0.02 * s, "nvtx._nvtx": lambda s: 0.03 + 0.002 * s,
          "memory.memory_use": lambda s: 0.003}


def test_linear_and_n_log_n_pass():
    nlogn = {"sort": lambda s: 0.01 * s * (1 + 0.1 * s.bit_length())}
    assert scaling_guard.check(runs({**LINEAR, **nlogn}, no_input={"memory.memory_use": "no events"})) == []


def test_quadratic_analysis_fails_and_is_named():
    bad = scaling_guard.check(runs({**LINEAR, "slow_iterations.slow_iterations": lambda s: 0.004 * s * s}))
    assert bad and all("slow_iterations.slow_iterations" in b for b in bad)
    assert any("x4 -> x16" in b and "superlinear" in b for b in bad)


def test_noise_below_the_floor_does_not_fail():
    # 1 ms -> 8 ms is 8x, but under the 10 ms floor: noise on a tiny function, not a verdict
    assert scaling_guard.check(runs({"tiny": lambda s: {1: 0.001, 4: 0.008, 16: 0.03}[s]})) == []


def test_a_rule_that_starts_its_work_between_two_scales_is_judged_at_the_next():
    # serial-copy-compute on slow_iters in CI: an early exit of 1.2 ms at x1 (over the 1 ms "did not
    # run" mark), its work from x4 on, linear from there; the same growth at the last step fails
    started = {"rule:serial-copy-compute": lambda s: {1: 0.0012, 4: 0.0656, 16: 0.2186}[s]}
    assert scaling_guard.check(runs(started)) == []
    bad = scaling_guard.check(runs(started, scales=(1, 4)))
    assert bad and "rule:serial-copy-compute" in bad[0] and "x1 -> x4" in bad[0]


def test_total_time_and_memory_growth_fail():
    bad = scaling_guard.check(runs(LINEAR, total=lambda s: 0.1 * s * s, mem=lambda s: 2.0 * s * s))
    assert any(b.startswith("total analysis time") for b in bad)
    assert any(b.startswith("peak memory above the loaded trace") for b in bad)


def test_cost_without_input_fails():
    bad = scaling_guard.check(runs({"memory.memory_use": lambda s: 0.0025 * s},
                                   no_input={"memory.memory_use": "no CUDA memory-usage events"}))
    assert any("memory.memory_use has no input (no CUDA memory-usage events)" in b and "x16" in b for b in bad)
    # the same cost on a trace where it has input is not a failure by itself (it grows linearly)
    assert scaling_guard.check(runs({"memory.memory_use": lambda s: 0.0025 * s})) == []


def test_planted_quadratic_is_caught_end_to_end():
    """Tiny replicas (x1, x4 of launch_eager, one run each, 5-10 s): the guard fails, naming the analysis."""
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "scaling_guard.py"), "--fixture", "launch_eager",
                        "--scales", "1,4", "--reps", "1", "--plant-quadratic", "slow_iterations.slow_iterations"],
                       capture_output=True, text=True, timeout=300, check=False)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "launch_eager: analysis slow_iterations.slow_iterations" in p.stderr
    assert "superlinear" in p.stderr
    assert "slow_iterations.slow_iterations" in p.stdout  # and the report lists its times


@pytest.mark.parametrize("bad_scales", ["4,1"])
def test_scales_must_ascend(bad_scales):
    with pytest.raises(SystemExit):
        scaling_guard.main(["--scales", bad_scales])
