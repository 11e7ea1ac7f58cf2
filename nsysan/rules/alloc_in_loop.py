"""Device or pinned memory is allocated and freed inside the steady-state loop.

**Why it matters**: cudaMalloc/cudaFree (and cudaHostAlloc/cudaFreeHost) are slow host calls, and
cudaFree synchronizes the device; doing them per batch adds their full cost to every iteration.

**Fix**: allocate device and pinned host buffers once before the loop and reuse them (a buffer pool,
or a framework caching allocator); free them after the loop. In the program's own terms
(as recognised in the trace): PyTorch's caching allocator kept warm (no ``empty_cache()`` in the loop,
fixed shapes), JAX's preallocation, CuPy's memory pool, OpenACC/OpenMP data regions around the loop.

A RAPIDS program (cuDF, cuML... by their NVTX ranges or kernels) allocates through RMM: it is told to
give RMM a pool (``rmm.reinitialize(pool_allocator=True)``), not ``cudaMallocAsync``.

Only allocations that recur count. With an iteration model: the calls inside steady-state
iterations, firing when at least half of those iterations allocate and there are at least
``min_calls_per_iteration`` calls per iteration. Without one: the calls between the first and the
last GPU operation (or, without GPU activity tables, the first and last kernel launch or copy
call), leaving out each process's first allocation call (it creates the CUDA context), calls
before the work starts or after it ends (setup, teardown) and calls whose name occurs fewer than
``min_calls`` times (a handful of allocations spread over a run is setup, not a loop).
The title says what the calls are: allocated and freed every iteration (churn, with an iteration
model), allocated and freed repeatedly (without one), or allocated repeatedly with none (or little)
freed (a pool growing or a leak). Churn needs the frees: with the memory usage events
(``--cuda-memory-usage=true``) at least half the bytes allocated in the steady window freed there,
else at least half as many free calls as allocation calls; never a claim of frees the trace does
not hold. Impact: the measured host time of those calls, claimed on their wall-clock time (shared with
host-bound-gap when the GPU idles during them, never counted twice).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from nsysan.analyses.frames import name_in
from nsysan.analyses.program import Program
from nsysan.rules._advice import Advice, choose
from nsysan.rules._base import Finding, RuleContext, Severity, claims_of, finding, rule, top_records
from nsysan.rules._window import steady, steady_iterations
from nsysan.rules._wording import call_sites
from nsysan.units import fmt_ns

ALLOC_APIS = ("cudaMalloc", "cudaFree", "cudaMallocHost", "cudaFreeHost", "cudaHostAlloc", "cudaMallocAsync",
              "cudaFreeAsync", "cudaMallocManaged", "cudaMallocPitch", "cuMemAlloc", "cuMemFree", "cuMemHostAlloc",
              "cuMemFreeHost", "cuMemAllocHost")
WORK_APIS = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx", "cudaGraphLaunch",
             "cudaMemcpy", "cudaMemcpyAsync", "cuMemcpyHtoD", "cuMemcpyDtoH", "cuMemcpyHtoDAsync",
             "cuMemcpyDtoHAsync", "cudaMemcpy2D", "cudaMemset", "cudaMemsetAsync")


@rule("alloc-in-loop", "Memory allocated and freed every iteration", min_calls_per_iteration=1.0, min_calls=10)
def check(ctx: RuleContext, *, min_calls_per_iteration: float, min_calls: int) -> Iterator[Finding]:
    api = ctx.trace.cuda_api
    allc = api.loc[name_in(api["name"], ALLOC_APIS)]
    if len(allc) == 0:
        return
    its = steady_iterations(ctx)
    if len(its):
        calls = steady(allc, ctx)
        ist, ien = its["start_ns"].to_numpy(), its["end_ns"].to_numpy()
        o = np.argsort(ist, kind="stable")
        ist, ien = ist[o], ien[o]
        k = np.searchsorted(ist, calls["start_ns"].to_numpy(), side="right") - 1
        inside = (k >= 0) & (calls["start_ns"].to_numpy() < ien[np.clip(k, 0, None)])
        calls = calls.loc[inside]
        with_alloc = len(np.unique(k[inside]))
        if with_alloc < max(2, len(its) / 2) or len(calls) < max(1, int(min_calls_per_iteration * len(its))):
            return
        per = f"{len(calls) / len(its):.1f} per iteration, in {with_alloc} of {len(its)} steady iterations, "
    else:
        lo, hi = _work_span(ctx)
        if hi <= lo:
            return
        first_call = allc.groupby("pid")["start_ns"].transform("min").to_numpy() == allc["start_ns"].to_numpy()
        st = allc["start_ns"].to_numpy()
        calls = allc.loc[~first_call & (st >= lo) & (allc["end_ns"].to_numpy() <= hi)]
        calls = steady(calls, ctx)
        # without iterations, "recurs" means the same call repeats: a name called fewer than
        # ``min_calls`` times is setup or teardown spread over the run (NCCL's buffers, a workspace)
        counts = calls.groupby(calls["name"].astype(str))["dur_ns"].transform("size").to_numpy()
        calls = calls.loc[counts >= min_calls]
        if len(calls) < min_calls:
            return
        per = "between the first and the last GPU work, "
    total = int(calls["dur_ns"].sum())
    names = calls["name"].astype(str)
    frees = int(names.str.contains("Free", regex=False).sum())
    freed = _freed(ctx, frees, len(calls) - frees)
    # what the calls are: churn (allocated and freed) or allocations only (nothing or little freed in
    # the window: a pool or cache growing, or a leak), and per iteration only with an iteration model
    title = ("Memory allocated and freed every iteration" if freed and len(its) else
             "Memory allocated and freed repeatedly" if freed else
             "Memory allocated repeatedly, none of it freed" if frees == 0 else
             "Memory allocated repeatedly, little of it freed")
    where = "in the loop" if len(its) else "during the GPU work"
    by = calls.groupby(calls["name"].astype(str))["dur_ns"].agg(["count", "sum"]).sort_values("sum", ascending=False)
    parts = ", ".join(f"{n} x{int(r['count'])} ({fmt_ns(r['sum'])})" for n, r in by.iterrows())
    severity = Severity.WARNING if total < 0.05 * ctx.window.dur_ns else Severity.CRITICAL
    yield finding(ctx, "alloc-in-loop", severity=severity,
                  impact_ns=total, claims=claims_of(calls["start_ns"], calls["end_ns"]), suggestion=advice(ctx.program),
                  title=title,
                  message=f"{len(calls)} allocation{'/free' if freed else ''} calls recur {where} ({per}"
                          f"{fmt_ns(total)} of host time{_freed_note(ctx, frees, len(calls) - frees, freed)}): "
                          f"{parts}." + call_sites(ctx, calls["name"].astype(str).unique()),
                  evidence=top_records(calls.assign(name=calls["name"].astype(str)), "dur_ns", 10,
                                       ["name", "start_ns", "dur_ns", "tid"]))


def _freed(ctx: RuleContext, frees: int, allocs: int) -> bool:
    """Churn rather than growth: the memory usage events (when recorded) show at least half the bytes
    allocated in the steady window freed there; without them, at least half as many free calls as
    allocation calls. A free call somewhere among many allocations is not churn."""
    mem = ctx.a.memory
    if mem is not None and mem.recorded and len(mem.growth):
        growth = mem.growth
        alloc, freed = int(growth["allocated_bytes"].sum()), int(growth["freed_bytes"].sum())
        if alloc > 0:
            return freed >= 0.5 * alloc
    return frees > 0 and frees >= 0.5 * max(allocs, 1)


def _freed_note(ctx: RuleContext, frees: int, allocs: int, freed: bool) -> str:
    if frees == 0:
        return "; no free call among them"
    mem = ctx.a.memory
    if not freed and mem is not None and mem.recorded and len(mem.growth):
        growth = mem.growth
        freed_mib, alloc_mib = int(growth["freed_bytes"].sum()) >> 20, int(growth["allocated_bytes"].sum()) >> 20
        return (f"; {allocs} allocation and {frees} free calls, and by the memory usage events "
                f"{freed_mib:,} of {alloc_mib:,} MiB "
                "allocated freed: memory-growth")
    return "" if freed else f"; {allocs} allocation and {frees} free calls"


def _work_span(ctx: RuleContext) -> tuple[int, int]:
    """From the first GPU operation's start to the last one's end; without GPU activity tables, from
    the first to the last kernel launch or copy call."""
    ops = ctx.a.ops
    if len(ops):
        return int(ops["start_ns"].min()), int(ops["end_ns"].max())
    api = ctx.trace.cuda_api
    work = api.loc[name_in(api["name"], WORK_APIS)]
    if len(work) == 0:
        return 0, 0
    return int(work["start_ns"].min()), int(work["end_ns"].max())


ADVICE = Advice(
    torch=("PyTorch's caching allocator should serve every step from its cache: allocations recur when the cache "
           "is emptied (``torch.cuda.empty_cache()`` in the loop), when tensor shapes keep changing (pad or "
           "bucket inputs to a few fixed shapes) or when memory is close to full (``PYTORCH_CUDA_ALLOC_CONF="
           "expandable_segments:True`` avoids the fragmentation); pinned buffers: allocate once with "
           "``pin_memory=True`` and reuse them."),
    jax=("Let JAX preallocate its device memory pool (leave ``XLA_PYTHON_CLIENT_PREALLOCATE`` unset, do not set "
         "``XLA_PYTHON_CLIENT_ALLOCATOR=platform``), and keep shapes fixed so the jitted step is not recompiled "
         "with new buffers."),
    cupy=("Keep CuPy's memory pools on (``cupy.get_default_memory_pool()``, "
          "``cupy.get_default_pinned_memory_pool()``) and do not call ``free_all_blocks()`` in the loop; reuse "
          "arrays with ``out=`` arguments."),
    openacc=("Allocate the device copies once: a ``#pragma acc data create(...)``/``copyin(...)`` region around the "
             "loop (or ``#pragma acc enter data`` before it, ``exit data`` after), so the data clauses of the "
             "compute constructs inside find the arrays present instead of allocating and freeing them each time."),
    openmp=("Allocate the device copies once: ``#pragma omp target data map(alloc: ...)`` around the loop (or "
            "``target enter data`` before it, ``exit data`` after), so the ``map`` clauses inside find the arrays "
            "present instead of allocating and freeing them each time."),
    default=("Allocate device and pinned host buffers once before the loop and reuse them (a buffer pool, or "
             "``cudaMallocAsync`` from a memory pool with a release threshold: ``cudaMemPoolAttrReleaseThreshold``); "
             "free them after the loop."))


def advice(p: Program) -> str:
    """Reuse instead of allocating, in the program's terms (RAPIDS: RMM's pool, ``rmm_advice``)."""
    return rmm_advice(p) if p.rapids else choose(ADVICE, p)


def rmm_advice(p: Program) -> str:
    """A RAPIDS program allocates through RMM's current device resource, by default one ``cudaMalloc``
    and ``cudaFree`` per buffer: a pool serves the loop instead (from Python unless the trace says the
    program is not Python: libcudf's C++ API)."""
    if p.python is False:
        return ("libcudf allocates through RMM's current device resource, by default ``rmm::mr::cuda_memory_resource`` "
                "(a ``cudaMalloc`` and a ``cudaFree`` per buffer): set a pool once, before the loop "
                "(``rmm::mr::cuda_memory_resource cuda; rmm::mr::pool_memory_resource<rmm::mr::cuda_memory_resource> "
                "pool{&cuda, initial_size}; rmm::mr::set_current_device_resource(&pool);``, or "
                "``rmm::mr::cuda_async_memory_resource``), and keep it alive until the last buffer is freed.")
    extra = []
    if p.has("Dask-CUDA"):
        extra.append("with Dask-CUDA, ``LocalCUDACluster(rmm_pool_size=...)`` or ``dask-cuda-worker --rmm-pool-size``")
    if p.cupy or p.torch:
        extra.append("let " + " and ".join(n for n, on in (("CuPy", p.cupy), ("PyTorch", p.torch)) if on)
                     + " allocate from the same pool ("
                     + ", ".join(c for c, on in (("``cupy.cuda.set_allocator(rmm.allocators.cupy.rmm_cupy_allocator)``",
                                                  p.cupy),
                                                 ("``torch.cuda.memory.change_current_allocator("
                                                  "rmm.allocators.torch.rmm_torch_allocator)``", p.torch)) if on) + ")")
    return ("RAPIDS allocates device memory through RMM, by default a ``cudaMalloc`` and a ``cudaFree`` per buffer: "
            "give RMM a pool once, before the loop and before the first cuDF object, with "
            "``rmm.reinitialize(pool_allocator=True, initial_pool_size=...)`` (or "
            "``rmm.mr.set_current_device_resource(rmm.mr.PoolMemoryResource(rmm.mr.CudaMemoryResource(), "
            "initial_pool_size=...))``)" + "".join("; " + e for e in extra) + ".")
