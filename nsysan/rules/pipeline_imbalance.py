"""Pipeline stages are unbalanced: one stage computes much longer than the others, which wait.

**Why it matters**: in a pipeline (each rank one stage, activations passed with point-to-point
send/receive) every stage runs at the pace of the slowest. The others spend the difference waiting
in their receive kernels, which look like communication but are idle time.

**Fix**: move layers from the slowest stage to the others until their compute per step is even
(Megatron/DeepSpeed ``pipeline_model_parallel`` partition by parameters or measured time, not by
layer count; PyTorch ``torch.distributed.pipelining`` split points); more micro-batches per step
shrink the fill-and-drain bubble ``(p-1)/(m+p-1)``; an interleaved (virtual-stage) schedule shrinks
it further.

Read from ``analyses/stages.py``: ranks whose communication is mostly point-to-point are a pipeline,
each rank a stage. Fires when the slowest stage's compute per steady iteration exceeds the stages'
mean by at least ``min_excess`` (a fraction of the mean). Impact: per iteration, the slowest stage's
compute minus the mean (what balancing would take off the step), times the steady iterations; a
diagnosis that explains the other stages' waiting and idle time, so it is allocated before the rules
that see that time (``precedence``).
"""

from __future__ import annotations

from collections.abc import Iterator

from nsysan.rules._base import Finding, RuleContext, Severity, finding, rule
from nsysan.units import fmt_ns


@rule("pipeline-imbalance", "Pipeline stages are unbalanced", min_excess=0.15)
def check(ctx: RuleContext, *, min_excess: float) -> Iterator[Finding]:
    p = ctx.a.stages.pipeline if ctx.a.stages is not None else None
    if p is None or len(p.stages) < 2:
        return
    df = p.stages
    mean = float(df["compute_ns"].mean())
    top = df.loc[df["compute_ns"].idxmax()]
    if mean <= 0 or float(top["compute_ns"]) < (1 + min_excess) * mean:
        return
    impact = int(p.saving_per_iteration_ns) * int(p.iterations)
    stages = "; ".join(f"rank pid {int(r.pid)} (GPU {int(r.device_id)}): compute {fmt_ns(int(r.compute_ns))}, "
                       f"waiting in send/receive {fmt_ns(int(r.p2p_ns))}, idle {fmt_ns(int(r.idle_ns))}"
                       for r in df.itertuples())
    bubble = (f" With {p.micro_batches} micro-batches over {len(df)} stages the schedule's own bubble would be "
              f"{p.ideal_bubble:.0%} of the step; the stages are without compute "
              f"{', '.join(f'{b:.0%}' for b in df['bubble'])} of it." if p.ideal_bubble is not None else "")
    yield finding(ctx, "pipeline-imbalance", severity=Severity.CRITICAL if top["compute_ns"] >= 1.5 * mean else Severity.WARNING,
                  impact_ns=impact, precedence=1,
                  message=(f"{len(df)} pipeline stages, per steady iteration ({fmt_ns(int(df['step_ns'].max()))}): "
                           f"{stages}. The slowest stage (pid {int(top['pid'])}) computes "
                           f"{float(top['compute_ns']) / mean:.2f}x the mean; balanced stages would take "
                           f"{fmt_ns(p.saving_per_iteration_ns)} off each step.{bubble}"),
                  evidence=tuple({k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()}
                                 for r in df.to_dict("records")))
