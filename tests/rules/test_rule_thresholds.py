"""Every rule's thresholds at both ends of their range (``--set rule.min_x=0``, ``max_x`` at its
ceiling, and the other way round) are settings a user may give: the analysis still runs, and
every finding it gives has a saving within its window. Before: ``launch-bound.min_kernels=0`` on a
window with no launch divided by zero."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from calibrate_savings import gates_open

# fixtures that between them fire most rules (copies, launches, NCCL, unified memory, stages, GPU metrics)
NAMES = ["ladder_baseline", "launch_eager", "ddp_serial", "um_thrash", "pipe_stages", "metrics_mix", "two_gpu_turns"]


def _settings(open_: bool) -> dict[str, float]:
    from nsysan.rules import REGISTRY

    out: dict[str, float] = {}
    for rid in REGISTRY:
        for k, v in gates_open(rid).items():
            out[k] = v if open_ else (0 if v else 10**12 if isinstance(REGISTRY[rid].thresholds[k.split(".", 1)[1]], int)
                                      else 1e12)
    return out


@pytest.mark.parametrize("open_", [True, False], ids=["gates-open", "gates-shut"])
@pytest.mark.parametrize("name", NAMES)
def test_rules_at_their_threshold_ends_run(load, name, open_):
    from nsysan.analysis import analyze

    a = analyze(load(name), set=_settings(open_))
    ndev = max(1, int(a.ops["device_id"].nunique())) if len(a.ops) else 1
    per_window: dict[tuple[int, int], int] = {}
    for f in a.findings:  # each saving within its window; on one window, no time counted twice
        lo, hi = int(f.window.get("start_ns", 0)), int(f.window.get("end_ns", 0))
        assert 0 <= f.impact_ns <= max(0, hi - lo) * ndev, (f.rule, f.impact_ns)
        per_window[(lo, hi)] = per_window.get((lo, hi), 0) + int(f.impact_ns)
    assert all(tot <= (hi - lo) * ndev for (lo, hi), tot in per_window.items())
    if open_:  # opened, the rules that count time fire wherever the trace has what they count
        assert a.findings
    else:
        assert not [f for f in a.findings if f.impact_ns > 0 and f.rule in ("launch-bound", "host-bound-gap")]
