"""Windows where the GPU is mostly idle, with the causes of the idle time.

**Why it matters**: low utilization means the GPU waits for the host, for data or for
synchronization. nsys' gpu_time_util reports chunks under 50% but not why, and its 500 ms gap rule
misses sub-millisecond bubbles that add up to seconds.

**Fix**: follow the causes listed: host-bound gaps (move CPU work off the submitting thread),
launch-bound loops (CUDA Graphs), serial copies (streams and events); the wording follows the
program (as recognised in the trace).

Fires when the steady-state busy fraction of a device is under ``max_busy_frac`` (per device).
Impact: 0 -- this is a summary of causes; the savings are claimed by the rules that name them
(host-bound-gap, launch-bound, sync-api, serial-copy-compute), so the same idle time is never
counted twice.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd

from nsysan.analyses.frames import count_sum
from nsysan.analyses.program import Program
from nsysan.rules._advice import Advice, choose
from nsysan.rules._base import Finding, RuleContext, Severity, finding, rule
from nsysan.rules._window import has_gpu_activity
from nsysan.units import fmt_ns, fmt_pct


@rule("gpu-low-util", "GPU mostly idle", max_busy_frac=0.5)
def check(ctx: RuleContext, *, max_busy_frac: float) -> Iterator[Finding]:
    w = ctx.window
    gaps = ctx.a.gaps
    inside = ((gaps["start_ns"].to_numpy() >= w.start_ns) & (gaps["end_ns"].to_numpy() <= w.end_ns)
              if len(gaps) else np.zeros(0, dtype=bool))
    if not has_gpu_activity(ctx):
        return
    for _, r in ctx.a.busy_steady.iterrows():
        if r["busy_frac"] >= max_busy_frac or w.dur_ns == 0:
            continue
        rows = np.flatnonzero(inside & (gaps["device_id"].to_numpy() == r["device_id"])) if len(gaps) else inside
        cause_text = ", ".join(f"{c} {fmt_ns(v)}" for c, v in _by_cause(gaps, rows)) or "no gaps above the threshold"
        yield finding(ctx, "gpu-low-util", severity=Severity.WARNING, impact_ns=0, suggestion=advice(ctx.program),
                      covers_ns=int(r["idle_ns"]),
                      message=f"Device {int(r['device_id'])} was busy {fmt_pct(r['busy_frac'])} of the "
                              f"{fmt_ns(w.dur_ns)} {w.label} ({fmt_ns(r['idle_ns'])} idle). Idle gaps by cause: "
                              f"{cause_text}. A summary: the savings are counted by the rules that name the causes.",
                      evidence=({"device_id": int(r["device_id"]), "busy_ns": int(r["busy_ns"]),
                                 "idle_ns": int(r["idle_ns"]), "busy_frac": round(float(r["busy_frac"]), 4)},))


def _by_cause(gaps: pd.DataFrame, rows: np.ndarray) -> list[tuple[str, int]]:
    """Idle time per cause of the gaps ``rows``, largest first (ties in cause order), causes without
    gaps left out."""
    if len(rows) == 0:
        return []
    sums = count_sum(gaps["cause"], gaps["gap_ns"], rows=rows)["sum"]
    return [(str(c), int(v)) for c, v in sums.sort_values(ascending=False, kind="stable").items()]


ADVICE = Advice(
    torch_training=("Follow the causes listed: host-bound gaps (load and augment data in ``DataLoader`` workers with "
                    "``num_workers`` > 0 and ``pin_memory=True``; no ``.item()``/logging each step), launch-bound "
                    "steps (``torch.compile``, CUDA Graphs), serial copies (``non_blocking=True`` copies on a side "
                    "stream)."),
    torch=("Follow the causes listed: host-bound gaps (pre- and post-processing off the submitting thread, larger "
           "or merged batches), launch-bound steps (CUDA Graphs: ``torch.compile(mode=\"reduce-overhead\")``), "
           "serial copies (pinned inputs copied with ``non_blocking=True`` on a side stream)."),
    jax=("Follow the causes listed: host-bound gaps (prefetch batches to the device, no host reads of results "
         "each step), launch-bound steps (jit the whole step, not pieces), serial copies (``jax.device_put`` of "
         "the next batch ahead of use)."),
    openacc=("Follow the causes listed: host-bound gaps (host work between compute constructs; ``async`` queues let "
             "the host run ahead), serial copies and waits (data regions instead of per-construct copies, "
             "``async``/``wait``)."),
    openmp=("Follow the causes listed: host-bound gaps (host work between target regions; ``nowait`` lets the host "
            "run ahead), serial copies and waits (``target data`` regions instead of per-region maps)."),
    default=("Follow the causes listed: host-bound gaps (move CPU work off the submitting thread), launch-bound loops "
             "(CUDA Graphs), serial copies (streams and events)."))


def advice(p: Program) -> str:
    """The usual remedies per cause, in the program's terms."""
    return choose(ADVICE, p)
