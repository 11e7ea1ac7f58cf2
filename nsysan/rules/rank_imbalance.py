"""One rank arrives late at the collectives, and the others wait for it.

**Why it matters**: a collective finishes only when its last rank arrives, so every rank runs at
the pace of the slowest. Time the other ranks spend spinning in NCCL kernels waiting for the
straggler is lost on each of them, every step.

**Fix**: find what makes that rank late (the cause below, from its own trace) and even it out:
input pipelines or host work on one rank only (logging, checkpointing, evaluation on rank 0: move
them off the training thread or spread them), uneven data shards or sequence lengths (balance the
sampler, pad or bucket by length), a slower GPU or a different clock, or a synchronize on one rank.

Judged on the steady state of ranks in one export (several processes, one per GPU; for one export
per rank, ``nsysan analyze rank*.sqlite`` names the straggler in its cross-rank summary), their
collectives aligned over the whole capture and clipped to the ranks' common window. Fires when one
rank arrives last in at least half of the aligned collectives and the others wait for it with their
GPU idle, beyond the straggler's own such waiting, for at least 5% of an iteration: ranks that take
turns arriving last wait for each other about equally, and that is noise, not a straggler
(``analyses/ranks.py``). Impact: per iteration, what the straggler spends more than the others on
its cause (at most the others' median waiting; without a visible cause, the others' idle waiting
less its own), times its iterations in the common window, and never more than the waiting the
other ranks show there (a per-iteration excess times every iteration overstates it when the others
wait in some iterations only, as with gradient accumulation): the step would shrink by that on
every rank. Claimed on the straggler's own late-host gaps (those of the activity that made it late)
when that is the cause, else on the others' idle waiting; so ``host-bound-gap`` keeps only the rest
of those gaps.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from nsysan.analyses import intervals as iv
from nsysan.rules._base import Finding, RuleContext, Severity, claims_of, finding, rule
from nsysan.rules._window import window_gaps
from nsysan.units import fmt_ns


@rule("rank-imbalance", "A straggler rank keeps the others waiting")
def check(ctx: RuleContext) -> Iterator[Finding]:
    ranks = ctx.a.ranks
    if ranks is None or ranks.straggler is None:
        return
    s = ranks.straggler
    aligned = ranks.aligned
    impact = int(s.get("saving_ns", 0))
    if impact <= 0:
        return
    top = s["causes"][0]["column"] if s["causes"] else ""
    if top == "host_idle_per_iter_ns" and len(ctx.a.gaps):
        mine = window_gaps(ctx, ("host", "sync"))
        mine = mine.loc[mine["pid"] == s["pid"]]
        if s.get("host_idle_activity") and "activity" in mine:  # the gaps of what made it late
            mine = mine.loc[mine["activity"].astype(str) == s["host_idle_activity"]]
        claims = claims_of(mine["start_ns"], mine["end_ns"])
    else:
        starts, ends = [], []
        merged = ctx.a.busy  # the merged busy intervals per device
        for pid in aligned.loc[aligned["rank"] != s["rank"], "pid"].unique():
            dev = int(ctx.a.comm.loc[ctx.a.comm["pid"] == pid, "device_id"].mode().iloc[0])
            ws = ranks.waiting(int(pid), p2p=False)  # point-to-point waiting is a pipeline's bubble
            comp = merged.per_dev[dev]["compute"] if merged is not None and dev in merged.per_dev \
                else (ws[0][:0], ws[1][:0])
            x = iv.subtract(ws, comp)
            starts.append(x[0])
            ends.append(x[1])
        claims = claims_of(np.concatenate(starts or [np.empty(0, np.int64)]),
                           np.concatenate(ends or [np.empty(0, np.int64)]))
    causes = "; ".join(f"{c['what']}: {fmt_ns(c['straggler_ns'])} per iteration vs {fmt_ns(c['others_median_ns'])} "
                       f"on the other ranks" for c in s["causes"]) or "no difference visible in this trace"
    act = f" (its thread was in {s['host_idle_activity']})" if s.get("host_idle_activity") else ""
    yield finding(ctx, "rank-imbalance", severity=Severity.WARNING, impact_ns=impact,
                  claims=claims, precedence=1,
                  message=(f"Rank {s['rank']} (pid {s['pid']}, GPU {s['device_id']}) arrived last at "
                           f"{s['arrived_last']} of {s['collectives']} collectives; the other ranks waited "
                           f"{fmt_ns(s['others_wait_per_iter_ns'])} per iteration for it (median), "
                           f"{fmt_ns(s['others_wait_exposed_per_iter_ns'])} of it with their GPU idle. What differs on "
                           f"rank {s['rank']}: {causes}{act}. Evening it out would save about "
                           f"{fmt_ns(s['saving_per_iter_ns'])} per iteration ({fmt_ns(s['saving_ns'])} over "
                           f"{s.get('iterations', '?')} iterations; the others waited "
                           f"{fmt_ns(s.get('others_measured_wait_ns', s['others_waited_ns']))} in all"
                           + (f"; at most the {fmt_ns(s['others_host_wait_per_iter_ns'])} per iteration their host "
                              f"waited for their GPU: past that, their own host work sets their pace"
                              if s.get("others_host_wait_per_iter_ns") is not None
                              and s["others_host_wait_per_iter_ns"] <= s["saving_per_iter_ns"] else "")
                           + ")."),
                  evidence=tuple({k: v for k, v in row.items()} for row in ranks.ranks.to_dict("records")))
