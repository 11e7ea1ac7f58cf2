"""The GPUs of one process take turns instead of computing at once.

**Why it matters**: a model split across devices in one process (naive model parallelism: layers
on ``cuda:0``, then ``cuda:1``) runs one device at a time; each GPU idles while the other computes,
so two GPUs deliver the speed of one.

**Fix**: pipeline micro-batches across the devices (split each batch into m micro-batches and
launch micro-batch i+1 on the first device while micro-batch i runs on the second: PyTorch
``torch.distributed.pipelining``, or a hand-written loop over ``batch.chunk(m)`` with the second
stage on its own stream), or use data parallelism (one replica per GPU, DDP) when the model fits.

Read from ``analyses/stages.py``: a process with compute kernels on two or more devices. Fires when
they compute at once for less than ``max_both_share`` of the time any of them computes. Impact: the
busy span they would lose when pipelined with ``m = 4`` micro-batches (GPipe's span
``(m + p - 1) / m`` x the busiest device's compute, against today's union of their compute),
allocated before the rules that see each device's idle time (``precedence``).
"""

from __future__ import annotations

from collections.abc import Iterator

from nsysan.rules._base import Finding, RuleContext, Severity, finding, rule
from nsysan.units import fmt_ns


@rule("gpus-take-turns", "GPUs of one process take turns", max_both_share=0.2)
def check(ctx: RuleContext, *, max_both_share: float) -> Iterator[Finding]:
    stages = ctx.a.stages
    for t in (stages.turns if stages is not None else []):
        if t.both_share >= max_both_share or t.saving_ns <= 0:
            continue
        per = ", ".join(f"GPU {d} {fmt_ns(v)}" for d, v in sorted(t.compute_ns.items()))
        yield finding(ctx, "gpus-take-turns", severity=Severity.CRITICAL if t.both_share < 0.05 else Severity.WARNING,
                      impact_ns=t.saving_ns, precedence=1,
                      message=(f"Process {t.pid} computes on {len(t.devices)} GPUs ({per} of compute) but they compute "
                               f"at once only {t.both_share:.1%} of the {fmt_ns(t.union_ns)} any of them computes: they "
                               f"take turns. Pipelined over 4 micro-batches the busy span would be about "
                               f"{fmt_ns(t.union_ns - t.saving_ns)}."),
                      evidence=(t.to_dict(),))
