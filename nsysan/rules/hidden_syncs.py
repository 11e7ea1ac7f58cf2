"""The loop synchronizes with the GPU inside most steady iterations, and the GPU drains after each.

**Why it matters**: each synchronization empties the GPU's queue: the host waits until the GPU has
finished, then the GPU sits idle while the host prepares and launches the next work (the pipeline
drain), every step. Many are hidden: in PyTorch ``.item()``, ``.cpu()``, ``.tolist()``,
``print(tensor)``, boolean-mask indexing (``out[mask]``), ``nonzero``, ``masked_select`` and
``torch.unique`` each copy a value to the host and wait for it (a ``cudaStreamSynchronize`` or a
blocking device-to-host copy), some of them on the autograd thread in the backward pass. A loop that
would keep the GPU busy runs at the host's pace instead.

**Fix**: keep the host from waiting inside the step: masked arithmetic or ``torch.where`` instead of
boolean indexing (``(loss * mask).sum() / mask.sum()``), metrics accumulated on the GPU
(``total += loss.detach()``) and read every N steps, copies to the host with ``non_blocking=True``
into pinned memory read after an event; in JAX, ``block_until_ready()`` (and ``float(x)``,
``np.asarray(x)``) only at the end or every N steps, ``jnp.where`` instead of boolean indexing. In
the program's own terms (as recognised in the trace).

Counts every host synchronization in the steady iterations (``analyses/syncs.py``: blocking
synchronize calls, blocking device-to-host copies; a copy and the synchronize after it are one
point), per iteration and per call site (Python backtraces, else CUDA backtraces, else the API
name). Fires when sync points occur in at least ``min_iter_share`` of the steady iterations and
their drain is at least ``min_share`` of the steady window. Impact: the drain, the GPU idle time from
when the awaited work finished (never before the wait began) to the next GPU operation on that
device, each at most the GPU work queued before its sync (a host running ahead hides the refill
behind that work and no more: a loop that then waits for its input is charged the step's GPU work,
not the input wait), claimed from each drain's start, so host-bound-gap, sync-api and gpu-low-util
never count it again. Measured on ``syncs_mask`` against ``syncs_none`` (workloads/hidden_syncs.py): predicted
0.441 ms a step, measured 0.880 ms (docs/findings.md). Silent without an iteration model.
"""

from __future__ import annotations

from collections.abc import Iterator

from nsysan.analyses.program import Program
from nsysan.rules._advice import Advice, choose
from nsysan.rules._base import Finding, RuleContext, Severity, claims_of, finding, rule
from nsysan.units import fmt_ns, fmt_pct


@rule("hidden-syncs", "The loop synchronizes with the GPU every step", min_iter_share=0.5, min_share=0.02)
def check(ctx: RuleContext, *, min_iter_share: float, min_share: float) -> Iterator[Finding]:
    s = ctx.a.syncs
    w = ctx.window
    if s is None or s.iterations == 0 or len(s.points) == 0 or w.dur_ns <= 0:
        return
    if s.with_syncs < min_iter_share * s.iterations or s.cost_ns < min_share * w.dur_ns:
        return
    pts = s.points.loc[s.points["cost_ns"].to_numpy() > 0]
    per_step = len(s.points) / s.iterations
    times = f"{per_step:.0f} times" if abs(per_step - round(per_step)) < 0.05 else f"{per_step:.1f} times"
    times = {"1 times": "once", "2 times": "twice"}.get(times, times)
    sites = []
    for r in s.sites.head(4).to_dict("records"):
        n = r["points"] / s.iterations
        a_step = f"{n:.0f} a step" if abs(n - round(n)) < 0.05 else f"{n:.2f} a step"
        what = f"{a_step}" if r["source"] == "api" else f"{r['api']}, {a_step}"
        sites.append(f"{r['site']} ({what}" + (", on another thread" if r["other_thread"] else "")
                     + f", drain {fmt_ns(int(r['drain_ns']))})")
    more = f" and {len(s.sites) - 4} more" if len(s.sites) > 4 else ""
    label = {"Python backtraces": "Python backtraces", "CUDA backtraces": "CUDA backtraces"}.get(s.source)
    where = f" Call sites ({label}): " if label else " Calls: "
    yield finding(ctx, "hidden-syncs", severity=Severity.WARNING, impact_ns=int(s.cost_ns),
                  claims=claims_of(pts["drain_start_ns"], pts["drain_start_ns"] + pts["cost_ns"]), suggestion=advice(ctx.program),
                  message=(f"This loop synchronizes {times} a step: {len(s.points)} points where the host waited "
                           f"for the GPU ({s.calls} calls) in {s.with_syncs} of the {s.iterations} steady iterations."
                           + where + "; ".join(sites) + more + "."
                           + f" After each the GPU sat idle while the host refilled its queue: "
                           f"{fmt_ns(round(s.drain_ns / s.iterations))} a step ({fmt_ns(int(s.drain_ns))}, "
                           f"{fmt_pct(s.drain_ns / w.dur_ns)} of the {w.label})"
                           + (f"; a host that runs ahead hides {fmt_ns(round(s.cost_ns / s.iterations))} a step of "
                              "it behind the GPU work it queued before each sync (the rest is the host's own time)"
                              if s.cost_ns < 0.9 * s.drain_ns else "") + "."),
                  evidence=tuple({"site": str(r["site"]), "api": str(r["api"]), "source": str(r["source"]),
                                  "points": int(r["points"]), "calls": int(r["calls"]),
                                  "per_iteration": round(float(r["per_iteration"]), 3),
                                  "drain_ns": int(r["drain_ns"]), "cost_ns": int(r["cost_ns"]), "other_thread": bool(r["other_thread"])}
                                 for r in s.sites.head(10).to_dict("records")))


ADVICE = Advice(
    # an inference loop, whatever its framework: overlap reading one result with queueing the next
    inference=("Queue the next request before reading this one's result: launch step k+1, then read step k's output "
               "(a device-to-host copy into pinned memory, ``non_blocking=True`` in PyTorch, read after an event; "
               "``jax.device_get`` after dispatching the next step in JAX); keep data-dependent sizes on the GPU "
               "(``torch.where``/masks instead of boolean indexing) and read metrics every N steps."),
    torch=("Keep the host from waiting inside the step: replace boolean indexing (``x[mask]``, ``nonzero``, "
           "``masked_select``, ``torch.unique``) with ``torch.where(mask, x, 0)`` or masked arithmetic "
           "(``(loss * mask).sum() / mask.sum()``); accumulate metrics on the GPU (``total += loss.detach()``) "
           "and read them with ``.item()`` every N steps, not each step (``.item()``, ``.cpu()``, ``.tolist()`` "
           "and ``print(tensor)`` each wait); copy results with ``.to('cpu', non_blocking=True)`` into pinned "
           "memory and read them after an event. ``torch.cuda.set_sync_debug_mode('warn')`` names each one."),
    jax=("Keep JAX's dispatch asynchronous: call ``block_until_ready()`` only at the end (or every N steps), "
         "read metrics (``float(x)``, ``np.asarray(x)``, ``jax.device_get``) every N steps, and use "
         "``jnp.where`` instead of boolean indexing."),
    cupy=("Keep the host from waiting inside the step: no per-step ``.get()``, ``float(x)``, "
          "``stream.synchronize()`` or boolean indexing (``cupy.nonzero``); use ``cupy.where``, accumulate on "
          "the GPU and read every N steps."),
    default=("Synchronize once per several steps, not inside each: record an event (cudaEventRecord) and wait on it "
             "only where the host needs the result; copy results with cudaMemcpyAsync into pinned memory; keep "
             "data-dependent sizes on the GPU (fixed-size outputs with a mask) instead of reading a count back."))


def advice(p: Program) -> str:
    """No waits inside the step, in the program's terms (an inference loop needs each result: it
    overlaps reading one with queueing the next)."""
    return choose(ADVICE, p)
