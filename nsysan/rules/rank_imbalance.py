"""One rank arrives late at the collectives, and the others wait for it.

**Why it matters**: a collective finishes only when its last rank arrives, so every rank runs at
the pace of the slowest. Time the other ranks spend spinning in NCCL kernels waiting for the
straggler is lost on each of them, every step.

**Fix**: find what makes that rank late (the cause below, from its own trace) and even it out:
input pipelines or host work on one rank only (logging, checkpointing, evaluation on rank 0: move
them off the training thread or spread them), uneven data shards or sequence lengths (balance the
sampler, pad or bucket by length), a slower GPU or a different clock, or a synchronize on one rank.

Judged on the steady state of ranks in one export (several processes, one per GPU). Fires when one
rank arrives last in at least half of the aligned collectives by at least 5% of an iteration
(``analyses/ranks.py``). Impact: the time the other ranks waited (from their start of each
collective to the straggler's), claimed as those intervals.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from nsysan.rules._base import Finding, Severity, claims_of, finding, rule
from nsysan.units import fmt_ns


@rule("rank-imbalance", "A straggler rank keeps the others waiting")
def check(ctx: Any) -> Iterator[Finding]:
    r = ctx.a.ranks
    if r is None or r.straggler is None:
        return
    s = r.straggler
    al = r.aligned
    waits = al.loc[(al["rank"] != s["rank"]) & (al["wait_ns"] > 0)]
    impact = int(waits["wait_ns"].sum())
    if impact <= 0:
        return
    causes = "; ".join(f"{c['what']}: {fmt_ns(c['straggler_ns'])} per iteration vs {fmt_ns(c['others_median_ns'])} "
                       f"on the other ranks" for c in s["causes"]) or "no difference visible in this trace"
    act = f" (its thread was in {s['host_idle_activity']})" if s.get("host_idle_activity") else ""
    yield finding(ctx, "rank-imbalance", severity=Severity.WARNING, impact_ns=impact,
                  claims=claims_of(waits["start_ns"], waits["last_start_ns"]),
                  message=(f"Rank {s['rank']} (pid {s['pid']}, GPU {s['device_id']}) arrived last at "
                           f"{s['arrived_last']} of {s['collectives']} collectives, by {fmt_ns(s['median_lead_ns'])} "
                           f"at the median; the other ranks waited {fmt_ns(impact)} in total. What differs on rank "
                           f"{s['rank']}: {causes}{act}."),
                  evidence=tuple({k: v for k, v in row.items()} for row in r.ranks.to_dict("records")))
