"""Device memory grows every iteration and is never freed.

**Why it matters**: memory that a loop allocates each step and never frees is a leak: the job runs
until the device is full and then dies with an out-of-memory error (or the framework's allocator
starts freeing and retrying, slowing every step), however fast each step is.

**Fix**: find what keeps each step's tensors alive and drop it: a list that collects losses or
outputs with their autograd graph (append ``loss.item()`` or ``loss.detach().cpu()``), a cache or
history kept on the GPU (move it to the CPU), metrics accumulated as device tensors (``.item()`` for
scalars). Emptying the allocator's cache (``torch.cuda.empty_cache()``) is not a fix: the memory is
still referenced.

Read from the memory usage events (``--cuda-memory-usage=true``; ``analyses/memory.py``), counted on
the CPU's iteration boundaries (the allocation and free calls made inside each steady iteration, not
the GPU's completions, which lag the allocations when the CPU runs ahead): fires when a process's
live device memory grows by at least ``min_mib_per_iteration`` MiB per iteration on average, rises in
at least ``min_rising_share`` of the steady iterations or in every quarter of them (a pool that asks
the driver for memory in chunks grows in some iterations only), and less than ``max_freed_share`` of
the bytes allocated in the steady iterations were freed. The message gives the growth per iteration,
the live memory at the end, the device's memory and how many more iterations fit, and the
allocating call sites when the trace has backtraces (``--cudabacktrace=memory``, Python
backtraces). Impact: none in time (the cost is the run that dies).
"""

from __future__ import annotations

from collections.abc import Iterator

from nsysan.analyses.memory import ALLOC, ALLOC_CALLS
from nsysan.analyses.program import Program
from nsysan.rules._advice import Advice, choose
from nsysan.rules._base import Finding, RuleContext, Severity, finding, rule
from nsysan.rules._wording import call_sites

MIB = 1 << 20


@rule("memory-growth", "Device memory grows every iteration and is never freed", min_mib_per_iteration=1.0,
      min_rising_share=0.8, max_freed_share=0.1)
def check(ctx: RuleContext, *, min_mib_per_iteration: float, min_rising_share: float,
          max_freed_share: float) -> Iterator[Finding]:
    mem = ctx.a.memory
    if mem is None or not mem.recorded or len(mem.growth) == 0:
        return
    per = mem.per_process
    for g in mem.growth.itertuples(index=False):
        grow = float(g.growth_per_iteration_bytes)
        if not grow >= min_mib_per_iteration * MIB or g.steps < 2:
            continue
        if g.grew_in < min_rising_share * g.steps and not (g.quarters >= 4 and g.grew_in_quarters == g.quarters):
            continue
        if g.allocated_bytes <= 0 or g.freed_bytes > max_freed_share * g.allocated_bytes:
            continue
        mine = per.loc[per["pid"].to_numpy() == g.pid]
        total = int(mine["device_total_bytes"].max()) if len(mine) else 0
        live_end = int(mine["live_end_bytes"].sum()) if len(mine) else int(g.live_last_bytes)
        left = (f"; {max(0, (total - live_end)) // int(grow):,} more iterations fill the device's "
                f"{total / MIB / 1024:.0f} GiB" if total > 0 else "")
        yield finding(ctx, "memory-growth", severity=Severity.CRITICAL if total > 0 else Severity.WARNING,
                      impact_ns=0, suggestion=advice(ctx.program),
                      message=(f"Process {g.pid}: live device memory grows {grow / MIB:,.1f} MiB per iteration "
                               f"(by the calls inside each iteration: it rose in {g.grew_in} of {g.steps} steady "
                               f"iterations, "
                               f"{g.live_first_bytes / MIB:,.0f} -> {g.live_last_bytes / MIB:,.0f} MiB); "
                               f"{g.allocated_bytes / MIB:,.0f} MiB allocated and "
                               f"{g.freed_bytes / MIB:,.0f} MiB freed in {ctx.window.named}; "
                               f"{live_end / MIB:,.0f} MiB live at the end{left}."
                               f"{_sites(ctx, g.pid, g.first_ns, g.last_ns)}"),
                      evidence=({"pid": int(g.pid), "growth_per_iteration_bytes": int(grow), "steps": int(g.steps),
                                 "grew_in": int(g.grew_in), "allocated_bytes": int(g.allocated_bytes),
                                 "freed_bytes": int(g.freed_bytes), "live_end_bytes": live_end,
                                 "device_total_bytes": total},))


def _sites(ctx: RuleContext, pid: int, first_ns: int, last_ns: int) -> str:
    """Where the allocations of process ``pid`` in [first_ns, last_ns) (its steady ones) were made,
    from backtraces (their calls joined by correlation id), '' without backtraces."""
    ev = ctx.trace.gpu_memory_usage
    t = ev["start_ns"].to_numpy()
    m = ((ev["pid"].to_numpy() == pid) & (ev["operation"].to_numpy() == ALLOC) & (t >= first_ns)
         & (t < last_ns))
    pairs = list(zip(ev["pid"].to_numpy()[m].tolist(), ev["correlation_id"].to_numpy()[m].tolist()))
    return call_sites(ctx, ALLOC_CALLS, pairs) if pairs else ""


ADVICE = Advice(
    torch=("Drop what keeps each step's tensors alive: a list of losses or outputs kept with their autograd graph "
           "(append ``loss.item()`` or ``out.detach().cpu()``), metrics accumulated as GPU tensors (``.item()``), "
           "a history or cache kept on the GPU (move it to the CPU). "
           "``torch.cuda.memory._record_memory_history()`` "
           "and a snapshot show the allocating lines. ``torch.cuda.empty_cache()`` is not a fix: the memory is "
           "still referenced."),
    jax=("Do not keep each step's device arrays (outputs, metrics) in Python lists: convert scalars with "
         "``float(x)`` / ``jax.device_get`` and keep histories on the host."),
    cupy=("Drop references to each step's arrays (move kept results to the host with ``.get()``); "
          "``free_all_blocks()`` is not a fix while they are referenced."),
    default=("Free what each iteration allocates (``cudaFree`` / ``cudaFreeAsync``) or allocate it once before the "
             "loop and reuse it; keep results that must survive on the host."))


def advice(p: Program) -> str:
    return choose(ADVICE, p)
