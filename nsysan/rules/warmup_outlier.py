"""The first iterations are much slower than the steady state.

**Why it matters**: the first iterations pay for lazy module loading, cuDNN/cuBLAS autotuning,
allocator growth and engine/graph setup. Timing them with the rest inflates the mean and the tail.

**Fix**: run warm-up iterations before timing (and before capturing CUDA Graphs); report the
steady state separately, with mean, spread and percentiles over many samples. The setup costs
named follow the program (as recognised in the trace): JAX's compilation, cuDNN autotuning,
TensorRT's engine setup, lazy module loading.

Warm-up iterations are those leading iterations whose service time (the time each alone held the
pipeline: completion - max(start, previous completion), see ``iterations``) exceeds ``warmup_factor``
(see ``--warmup-factor``) x the median of the rest. The message compares the same measure on both
sides: the warm-up iterations' mean service time against the steady state's median service time,
and the extra time is the sum of each warm-up iteration's service time over that median. Service
times never overlap, so a queued warm-up iteration's wait behind an earlier one (its latency) is not
counted again, and an instance of the range that encloses later ones (an outer 'train_step' around
the next 14) is no iteration at all (``iterations``): each warm-up GPU nanosecond counts once.
Impact: 0 -- warm-up costs the measurement, not the steady-state run time.
"""

from __future__ import annotations

from collections.abc import Iterator

from nsysan.analyses.program import Program
from nsysan.rules._advice import Advice, choose
from nsysan.rules._base import Finding, RuleContext, Severity, finding, rule
from nsysan.units import fmt_ns


@rule("warmup-outlier", "Warm-up iterations are outliers")
def check(ctx: RuleContext) -> Iterator[Finding]:
    it = ctx.a.iterations
    if it.warmup == 0 or len(it.table) == 0:
        return
    warm = it.table.loc[it.table["warmup"]]
    steady = it.table.loc[~it.table["warmup"]]
    if len(steady) == 0:
        return
    base = int(round(float(steady["service_ns"].median())))
    extra = int((warm["service_ns"] - base).clip(lower=0).sum())
    ev = tuple({"index": int(r["index"]), "latency_ns": int(r["latency_ns"]), "service_ns": int(r["service_ns"]),
                "start_ns": int(r["start_ns"])} for _, r in warm.iterrows())
    adj = ctx.window.adjective
    yield finding(ctx, "warmup-outlier", severity=Severity.INFO, impact_ns=0, window=ctx.a.capture.to_dict(),
                  suggestion=advice(ctx.program),
                  message=f"The first {it.warmup} '{it.range_name}' iteration(s) took "
                          f"{fmt_ns(warm['service_ns'].mean())} on average vs a {adj}median of {fmt_ns(base)} "
                          f"(time each iteration alone held the pipeline); {fmt_ns(extra)} of extra time, excluded "
                          f"from {adj}numbers.",
                  evidence=ev)


TAIL = " Report the steady state separately, with mean, spread and percentiles over many samples."


TORCH_WARMUP = ("The first iterations pay for {optimizer}cuDNN autotuning (``cudnn.benchmark``), the caching "
                "allocator's growth, lazy CUDA module loading and ``torch.compile``'s compilation: run warm-up "
                "iterations before timing{graphs}keep input shapes fixed so none of it recurs." + TAIL)
ADVICE = Advice(
    jax=("The first call of a jitted function compiles it: call it once (or "
         "``jax.jit(f).lower(...).compile()``) before timing; slow steps later mean recompiles (new shapes or "
         "static arguments: "
         "``jax.config.update(\"jax_log_compiles\", True)`` names them)." + TAIL),
    tensorrt=("The first executions pay for engine deserialisation, execution-context setup and lazy kernel "
              "loading: run warm-up inferences before timing (``trtexec --warmUp``) and before capturing CUDA "
              "Graphs." + TAIL),
    torch_training=TORCH_WARMUP.format(optimizer="optimizer-state allocation, ", graphs="; "),
    torch=TORCH_WARMUP.format(optimizer="", graphs=" (and before capturing CUDA Graphs); "),
    default=("The first iterations pay for CUDA context creation, lazy module loading (``CUDA_MODULE_LOADING=EAGER`` "
             "moves it to start-up), library handle creation (cuBLAS/cuDNN) and first allocations: create them "
             "before the loop and run warm-up iterations before timing (and before capturing CUDA Graphs)." + TAIL),
    first=("jax", "tensorrt"))  # JAX's compilation and TensorRT's engine set-up before PyTorch's warm-up


def advice(p: Program) -> str:
    """What the first iterations pay for, in the program's terms."""
    return choose(ADVICE, p)
