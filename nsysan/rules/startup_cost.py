"""The start-up before the first GPU work is the largest part of the capture.

**Why it matters**: a short run (a benchmark, a test, a fine-tuning job of a few hundred steps, a
one-shot script) can spend more time importing, creating the CUDA context, loading modules and
libraries, building the model and loading weights than in the GPU work itself. Every run pays it
again, and a profile that starts at process start shows it as "GPU idle" when it is not part of the
loop at all.

**Fix**: see what filled it (the finding lists the CUDA API and OS runtime calls of the thread
that launched the first GPU work, each nanosecond once, the rest untraced CPU work such as imports):
trim imports (``python -X importtime``), load weights straight to the GPU (safetensors, ``device=``
at load), reuse compiled kernels and engines across runs (a persistent cache), start DataLoader
workers once (``persistent_workers=True``); and profile the loop alone (``nsys profile
--capture-range=cudaProfilerApi`` with ``torch.cuda.profiler.start()``/``stop()`` around it, or
``--delay``).

Fires when the start-up is at least ``min_frac`` of the capture and longer than the judged window.
Impact: 0 -- it lies outside the judged window, whose savings the other findings count; the finding
gives its time (``covers_ns``), so it ranks above small savings.
"""

from __future__ import annotations

from collections.abc import Iterator

from nsysan.analyses.program import Program
from nsysan.rules._advice import Advice, choose
from nsysan.rules._base import Finding, RuleContext, Severity, finding, rule
from nsysan.units import fmt_ns, fmt_pct


@rule("startup-cost", "Start-up is the largest part of the run", min_frac=0.3)
def check(ctx: RuleContext, *, min_frac: float) -> Iterator[Finding]:
    ph = ctx.a.phases
    if ph is None or ph.gpu_active is None or ph.capture.dur_ns <= 0:
        return
    s, cap, win = ph.startup_ns, ph.capture.dur_ns, ph.judged.dur_ns
    if s < min_frac * cap or s <= win:
        return
    filled = ", ".join(f"{x['what']} {fmt_ns(x['ns'])}" for x in ph.startup_filled[:6])
    yield finding(ctx, "startup-cost", severity=Severity.WARNING, impact_ns=0, covers_ns=s,
                  suggestion=advice(ctx.program),
                  message=f"The start-up took {fmt_ns(s)} ({fmt_pct(s / cap)} of the {fmt_ns(cap)} capture) before the "
                          f"first GPU work, longer than the {fmt_ns(win)} judged window ({ph.judged.label}). "
                          + (f"The thread that launched the first GPU work spent it in: {filled}. " if filled else "")
                          + "Not counted in the window's savings: every run pays it again.",
                  evidence=(ph.to_dict(),))


ALONE = ("To profile the loop alone, start the capture at it: ``nsys profile --capture-range=cudaProfilerApi`` "
         "with {start}/{stop} around the loop, or ``--delay SECONDS``.")
TORCH_STARTUP = ("Untraced CPU work before the first kernel is mostly imports and model building: measure the "
                 "imports with ``python -X importtime``, build the model on the GPU (``torch.device('cuda')`` as the "
                 "default device, weights loaded with ``safetensors`` straight to it), keep ``torch.compile``'s "
                 "cache between runs (``TORCHINDUCTOR_CACHE_DIR``){workers}"
                 + ALONE.format(start="``torch.cuda.profiler.start()``", stop="``stop()``"))
ADVICE = Advice(
    torch_training=TORCH_STARTUP.format(workers=", and start DataLoader workers once (``persistent_workers=True``). "),
    torch=TORCH_STARTUP.format(workers=". "),
    jax=("Before the first kernel JAX imports, initialises its backend and compiles: keep compiled executables "
         "between runs (``jax.config.update('jax_compilation_cache_dir', ...)``) and trim imports. "
         + ALONE.format(start="``jax.profiler`` or ``cudaProfilerStart``", stop="``cudaProfilerStop``")),
    default=("Before the first kernel the program creates its CUDA context, loads its modules and prepares its "
             "data: load modules lazily (``CUDA_MODULE_LOADING=LAZY``, the default since CUDA 12.2), read inputs "
             "once and keep them resident, and reuse buffers across runs. "
             + ALONE.format(start="``cudaProfilerStart()``", stop="``cudaProfilerStop()``")))


def advice(p: Program) -> str:
    """What usually fills a start-up, in the program's terms, and how to profile the loop alone."""
    return choose(ADVICE, p)
