"""Words for findings' messages: where CUDA calls came from (call sites), what the launching thread
ran, what a window is called and the adjective said of it (by its kind), activity labels with their
library, idle time per device."""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from nsysan.analyses.gpu import Window
from nsysan.analyses.libranges import library_of
from nsysan.rules._base import RuleContext


def call_sites(ctx: RuleContext, api_names: Iterable[object] | None,
               correlation: Iterable[tuple[int, int]] | None = None) -> str:
    """Where these CUDA calls came from, from Python backtraces, else native CUDA backtraces
    (``analyses/samples.call_sites``), as a sentence for a finding's message; '' when the trace has no
    backtraces. ``correlation``: (pid, correlation id) pairs to count only those calls; ``api_names``
    None: any API."""
    from nsysan.analyses.call_sites import site_note

    samples = ctx.a.idle_samples
    return site_note(None if samples is None else samples.sites,
                     None if api_names is None else tuple(str(n) for n in api_names),
                     calls=None if samples is None else samples.site_calls, correlation=correlation)


def steady_cpu(ctx: RuleContext) -> str:
    """Which functions the launching thread ran over ``ctx.window``, from its CPU or Python samples,
    as a sentence for a finding's message ('' without enough samples)."""
    samples = ctx.a.idle_samples
    loop = None if samples is None else samples.steady
    if loop is None or not loop.attributed:
        return ""
    return f" Samples on the launching thread over {ctx.window.named}: {loop.top()}."


def label(activity: str) -> str:
    """An activity label for a message, saying when an NVTX range belongs to a library."""
    name = str(activity) or "untraced CPU work"
    if name.startswith("nvtx:"):
        library = library_of(name[5:])
        if library:
            return f"{name} ({library} library range)"
    return name


def by_device(gaps: pd.DataFrame, w: Window) -> str:
    """Idle time per device, each as a share of the window on that device (never summed over devices)."""
    if len(gaps) == 0:
        return ""
    per_device = gaps.groupby("device_id", sort=True)["gap_ns"].sum()
    from nsysan.units import fmt_ns, fmt_pct

    return "; ".join(f"device {int(d)}: {fmt_ns(int(v))} ({fmt_pct(int(v) / w.dur_ns)} of the {w.label})"
                     for d, v in per_device.items())


def call_sites_in(ctx: RuleContext, ranges: pd.DataFrame, n: int = 2) -> str:
    """The call sites of the backtraced CUDA calls made inside these NVTX ranges, as a sentence."""
    from nsysan.analyses.call_sites import aggregate_sites, calls_in, site_note

    samples = ctx.a.idle_samples
    sites = aggregate_sites(calls_in(None if samples is None else samples.site_calls, ranges))
    return site_note(sites, None, n)
