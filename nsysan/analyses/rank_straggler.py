"""The straggler among aligned ranks: the rank the others wait for, its cause and the saving of evening
it out.

**Straggler.** Judged on the collectives only (point-to-point Send/Recv waiting is a pipeline's
dependency, its bubble: measured in the waiting columns, never called a straggler). The rank that
arrives last most often (in at least half of the aligned collectives of the steady state), when it
costs the others materially: their exposed waiting, less the straggler's own, is at least 5% of an
iteration (ranks that take turns arriving last wait for each other about equally: that is noise,
not a straggler). Its cause is found by comparing its own per-iteration numbers with the other
ranks' medians: GPU idle while its host was late, GPU compute, exposed communication. The
**saving** of evening it out is, per iteration, the straggler's excess in its cause, at most the
others' median waiting (without a visible cause: the others' exposed waiting less its own), times
its iterations in the common window, and never more than the waiting the other ranks show there
(the median over them of their total waiting in the aligned collectives; without a visible cause,
of their waiting with the GPU idle). When no rank qualifies the ranks are in step and none is
named.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

LATE_SHARE = 0.5
MIN_MARGIN_FRAC = 0.05
# Point-to-point transfers: the receiver waits for the sender by design (a pipeline's stages), so
# their waiting is a dependency (the pipeline bubble), not a straggler: it is measured, not judged.
P2P = frozenset({"SendRecv", "Send", "Recv"})


def find_straggler(ranks: pd.DataFrame, aligned: pd.DataFrame, iter_ns: float | None, skipped: list[str] | None = None
               ) -> tuple[dict[str, Any] | None, str]:
    if len(ranks) < 2:
        return None, "one rank"
    if len(aligned) == 0:
        why = "; ".join(skipped or []) or ("no collective ran on two ranks or more in their common steady window "
                                          "(a single-rank reduction has no peers)")
        return None, f"no collective could be aligned across the ranks: {why}"
    coll = aligned.loc[~aligned["collective"].isin(list(P2P))]
    if len(coll) == 0:
        return None, ("only point-to-point transfers (Send/Recv) between the ranks: their waiting is the pipeline's "
                      "dependency (see the waiting columns), not a straggler")
    aligned = coll
    n_coll = int(aligned[["collective", "k"]].drop_duplicates().shape[0])
    last = aligned.loc[aligned["last"]].groupby("rank").size()
    ranks = ranks.assign(arrived_last=ranks["rank"].map(last).fillna(0).astype(int))
    r = ranks.sort_values(["arrived_last", "rank"], ascending=[False, True]).iloc[0]
    others = ranks.loc[ranks["rank"] != r["rank"]]
    lead = aligned.loc[aligned["last"] & (aligned["rank"] == r["rank"]), "lead_ns"].to_numpy()
    margin = int(np.median(lead)) if lead.size else 0
    ref = float(iter_ns or 0) or float(np.median(aligned["end_ns"] - aligned["start_ns"]))
    waited_exposed = int(others["wait_exposed_per_iter_ns"].median())
    own = int(r["wait_exposed_per_iter_ns"])
    net = waited_exposed - own  # ranks that take turns wait for each other about equally: noise
    if r["arrived_last"] < LATE_SHARE * n_coll or net < MIN_MARGIN_FRAC * ref:
        return None, (f"ranks in step: no rank arrives last in at least {LATE_SHARE:.0%} of the {n_coll} aligned "
                      f"collectives while the others wait with their GPU idle, beyond its own such waiting, for "
                      f"{MIN_MARGIN_FRAC:.0%} of an iteration (rank {int(r['rank'])} arrives last in "
                      f"{int(r['arrived_last'])}; the others wait {waited_exposed / 1e6:.3f} ms per iteration with "
                      f"their GPU idle, it waits {own / 1e6:.3f} ms; iteration {ref / 1e6:.3f} ms)")
    waited = int(aligned.loc[aligned["rank"] != r["rank"], "wait_ns"].sum())
    waited_per_iter = int(others["wait_per_iter_ns"].median())
    causes: list[dict[str, Any]] = []
    for col, label in (("host_idle_per_iter_ns", "GPU idle while its host was late"),
                       ("compute_per_iter_ns", "GPU compute"),
                       ("comm_transfer_exposed_per_iter_ns", "exposed communication")):
        mine, theirs = int(r[col]), int(others[col].median())
        if mine - theirs > 0.5 * net:
            causes.append({"what": label, "column": col, "straggler_ns": mine, "others_median_ns": theirs,
                           "extra_ns": mine - theirs})
    causes.sort(key=lambda c: -c["extra_ns"])
    per_iter = min(causes[0]["extra_ns"], waited_per_iter) if causes else net
    # the others' step shrinks only by the time their host waited for their GPU: past that, their own
    # host work sets their pace (FSDP's ranks both launch-bound: the others' GPU waits 25 ms a step in
    # the straggler's collectives, their host 4.6 ms of it)
    hw = others["host_wait_per_iter_ns"].to_numpy() if "host_wait_per_iter_ns" in others else np.zeros(0)
    host_cap = int(np.median(hw)) if hw.size and bool((hw >= 0).all()) else None
    if host_cap is not None:
        per_iter = min(per_iter, host_cap)
    n_it = int(r["window_iterations"]) if "window_iterations" in r and int(r["window_iterations"]) > 0 \
        else int(r["iterations"])
    # never more than the waiting the others show in the window (a per-iteration excess times every
    # iteration overstates it when they wait in some iterations only: gradient accumulation, or
    # ranks whose exports chose different iteration units); without a visible cause, their idle waiting
    col = "wait_ns" if causes else "wait_exposed_ns"
    measured = int(others[col].median()) if col in others else waited
    saving = min(int(per_iter) * n_it, measured)
    s = {"rank": int(r["rank"]), "pid": int(r["pid"]), "device_id": int(r["device_id"]),
         "trace": str(r["trace"]), "arrived_last": int(r["arrived_last"]), "collectives": n_coll,
         "median_lead_ns": margin, "others_waited_ns": waited, "others_wait_per_iter_ns": waited_per_iter,
         "others_wait_exposed_per_iter_ns": waited_exposed, "own_wait_exposed_per_iter_ns": own,
         "others_measured_wait_ns": measured, "causes": causes, "iterations": n_it,
         "others_host_wait_per_iter_ns": host_cap,
         "saving_per_iter_ns": saving // max(n_it, 1), "saving_ns": saving,
         "host_idle_activity": r["host_idle_activity"] or None}
    cause = causes[0]["what"] if causes else "not visible in this trace"
    return s, (f"rank {int(r['rank'])} arrives last in {int(r['arrived_last'])} of {n_coll} collectives: the others "
               f"wait {waited_per_iter / 1e6:.2f} ms per iteration for it, {waited_exposed / 1e6:.2f} ms of it with "
               f"their GPU idle (it waits {own / 1e6:.2f} ms so); cause: {cause}")
