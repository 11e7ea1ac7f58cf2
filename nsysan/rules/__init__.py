"""Rules: one file each, registered by ``@rule``, documented from their docstrings.

Every non-underscore module here is imported in sorted order, so a new rule is one new file.
Rules judge the steady state (``ctx.window``) unless a rule's docstring says otherwise.

**Savings never overlap.** A rule's ``impact_ns`` is first its own estimate; each finding also
declares the wall-clock time that saving would come from (``Finding.claims``: GPU idle gaps, the
copies, the calls, the kernels; none means "somewhere in its window"). ``run_rules`` then allocates
the estimates against one budget of wall-clock time, the most specific claim first (fewest claimed
ns; ties: smaller estimate first): a finding keeps the share of its estimate that falls on time no
earlier finding has claimed, and claims that share. So no impact exceeds its window, the impacts of a window add up to at most
the window, and two findings never count the same nanoseconds (host-bound-gap, launch-bound,
sync-api and gpu-low-util on the same idle gap; pageable-memcpy, sync-memcpy and
serial-copy-compute on the same copy). A reduced finding keeps its original estimate in its
``window`` (``estimate_ns``, ``overlaps``) and says so in its message.

**Order.** Findings with a counted saving come first, the largest saving first; findings without
a time estimate (a diagnosis or a caution: timing that misleads, a warm-up note) follow, by
severity. A finding with no estimate never ranks above one with a measured saving, whatever its
severity. The terminal, HTML and JSON list findings in this order.

**Per iteration.** A finding on the steady state of an iteration model also gives its saving per
steady iteration (``Finding.per_iteration_ns``); a whole-capture finding (no iteration model) has
none, and its message never speaks of a steady state: each rule names its window by the window's kind
(``Window.named``, ``Window.adjective``).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Collection, Mapping
from concurrent.futures import Executor, Future
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from nsysan._executor import Inline
from nsysan.analyses import intervals as iv
from nsysan.analyses.gpu import Window
from nsysan.result import Analysis
from nsysan.rules._base import REGISTRY, Finding, Rule, RuleContext, Severity, rule
from nsysan.trace.model import Trace
from nsysan.units import fmt_ns

for _m in sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")):
    importlib.import_module(f"{__name__}.{_m}")


def run_rules(analysis: Analysis, thresholds: Mapping[str, Mapping[str, Any]],
              pool: Executor | Inline | None = None, *,
              disabled: Collection[str] = frozenset()) -> tuple[list[Finding], list[dict[str, Any]]]:
    """Run every rule but those in ``disabled``, each with its thresholds overridden by
    ``thresholds[rule]``; returns findings graded (``graded``), with their saving per iteration
    (``per_iteration``), in ``ranked`` order, and a log of what ran.
    Rules only read the analysis, so with an executor (``pool.submit``) they run concurrently; the
    findings and the log do not depend on it."""
    ctx = RuleContext(analysis)
    pool = pool or Inline()
    started: list[tuple[str, dict[str, Any] | None, Future[list[Finding]] | None]] = []
    for rid in sorted(REGISTRY):
        r = REGISTRY[rid]
        if rid in disabled:
            started.append((rid, None, None))
            continue
        given = {**r.thresholds, **thresholds.get(rid, {})}
        started.append((rid, given, pool.submit(_findings_of, r, ctx, given)))
    findings: list[Finding] = []
    log: list[dict[str, Any]] = []
    for rid, params, job in started:
        if job is None:
            log.append({"rule": rid, "status": "disabled"})
            continue
        got = job.result()
        findings += got
        lacks = None if got else unmet_input(rid, analysis.trace)
        log.append({"rule": rid, "status": "fired" if got else "not_checked" if lacks else "passed",
                    **({"reason": f"the trace lacks {lacks}"} if lacks else {}), "thresholds": params})
    steady = analysis.steady
    n_steady = steps_per_sequence(analysis.iterations.table) if steady.kind == "steady" else 0
    out = []
    for f in allocate(findings):
        f = graded(f)
        per = per_iteration(f, steady, n_steady)
        out.append(f if per == f.per_iteration_ns else replace(f, per_iteration_ns=per))
    return ranked(out), log


def _findings_of(r: Rule, ctx: RuleContext, thresholds: dict[str, Any]) -> list[Finding]:
    """Rule ``r``'s findings with these thresholds (a task of ``run_rules``' executor)."""
    return list(r.fn(ctx, **thresholds))


GPU_METRICS_INPUT = (("GPU_METRICS",), "GPU metrics (nsys profile --gpu-metrics-devices=all)")
# rule -> (tables of which the trace must hold one, what they are and the flag that records them):
# without them the rule cannot judge, so it is logged "not_checked", not "passed"
NEEDS: dict[str, tuple[tuple[str, ...], str]] = {
    "memory-growth": (("CUDA_GPU_MEMORY_USAGE_EVENTS",),
                      "GPU memory usage events (nsys profile --cuda-memory-usage=true)"),
    "unified-memory-faults": (("CUDA_UM_GPU_PAGE_FAULT_EVENTS", "CUDA_UM_CPU_PAGE_FAULT_EVENTS"),
                              "unified memory page faults and migrations (nsys profile "
                              "--cuda-um-gpu-page-faults=true --cuda-um-cpu-page-faults=true)"),
    "memory-bound": GPU_METRICS_INPUT, "pcie-bound-copies": GPU_METRICS_INPUT,
    "sms-mostly-idle": GPU_METRICS_INPUT, "tensor-cores-idle": GPU_METRICS_INPUT,
}


def unmet_input(rid: str, trace: Trace) -> str | None:
    """What the trace lacks that rule ``rid`` needs (``NEEDS``), or None when it has it, the rule needs
    nothing special, or the program could not have used it: no CUDA calls (memory growth), no kernels
    (GPU metrics), no managed allocation call (``cudaMallocManaged``/``cuMemAllocManaged``: unified
    memory; its migrations recorded as copies, UVM kinds 11-13, count as the input)."""
    need = NEEDS.get(rid)
    if need is None:
        return None
    tables = set(trace.meta.tables)
    if any(t in tables for t in need[0]):
        return None
    if rid == "memory-growth" and len(trace.cuda_api) == 0:
        return None
    if need is GPU_METRICS_INPUT and len(trace.kernels) == 0:
        return None
    if rid == "unified-memory-faults":
        mc = trace.memcpy
        if len(mc) and bool(np.isin(mc["copy_kind"].to_numpy(), (11, 12, 13)).any()):
            return None
        names = trace.cuda_api["name"]
        cats = names.cat.categories if hasattr(names, "cat") else names.unique()
        managed = [str(c) for c in cats if "AllocManaged" in str(c) or "MallocManaged" in str(c)]
        if not managed or not bool(names.isin(managed).any()):
            return None
    return need[1]


SMALL_SAVING = 0.01  # of the window: a saving below it ranks after a summary that covers much of the window
LARGE_COVER = 0.25  # of the window: a summary without an estimate that covers this much is ranked high


def ranked(findings: list[Finding]) -> list[Finding]:
    """Findings with a counted saving of at least ``SMALL_SAVING`` of their window first, largest
    first; then summaries without an estimate that cover at least ``LARGE_COVER`` of it (a GPU idle
    most of the window is never ranked below a 0.1% saving), by the time they cover; then the smaller
    savings; then the rest by severity; ties by rule id. (Severity alone would let an estimate-less
    warning rank above a finding that saves measured time.)"""
    def tier(f: Finding) -> int:
        dur = int((f.window or {}).get("dur_ns", 0) or 0)
        if f.impact_ns > 0:
            return 0 if not dur or f.impact_ns >= SMALL_SAVING * dur else 2
        return 1 if dur and f.covers_ns >= LARGE_COVER * dur else 3

    return sorted(findings, key=lambda f: (tier(f), -int(f.impact_ns), -int(f.covers_ns), -int(f.severity), f.rule))


def steps_per_sequence(table: pd.DataFrame | None) -> int:
    """The steady iterations of the longest sequence (thread or rank): the steps a saving over the
    window is spread over. Sequences (ranks, worker threads) run at once, so a window that holds 30
    steps of each of two ranks holds 30 steps, not 60."""
    if table is None or len(table) == 0:
        return 0
    t = table.loc[~table["warmup"].to_numpy(dtype=bool)]
    if len(t) == 0:
        return 0
    return int(t.groupby(["pid", "tid"], sort=False).size().max())


def per_iteration(f: Finding, steady: Window, n_steady: int) -> int | None:
    """The finding's counted saving divided by the steady iterations of its window, when that window
    is the steady state of the iteration model (``n_steady`` iterations of one sequence:
    ``steps_per_sequence``); else None. A finding's window is ``Window.to_dict`` (no kind): it is the
    steady state when its label and bounds are those of ``steady`` and ``steady`` is of kind "steady"."""
    w = f.window
    if f.impact_ns <= 0 or n_steady <= 0 or steady.kind != "steady" or w.get("label") != steady.label \
            or int(w.get("start_ns", -1)) != steady.start_ns or int(w.get("end_ns", -1)) != steady.end_ns:
        return None
    return int(round(f.impact_ns / n_steady))


CRITICAL_SHARE = 0.10  # a counted saving of >= 10% of its window is critical
WARNING_SHARE = 0.01  # >= 1% a warning, less is information


def graded(f: Finding) -> Finding:
    """The severity of a finding with a saving follows its counted saving as a share of its window
    (critical >= 10%, warning >= 1%, else info); a finding without a saving (a diagnosis or a
    caution: timing that misleads, a low-utilisation note) keeps its rule's severity, at most warning,
    and ranks after every finding with a saving (``ranked``)."""
    dur = int(f.window.get("end_ns", 0)) - int(f.window.get("start_ns", 0))
    if f.impact_ns <= 0 or dur <= 0:
        sev = min(f.severity, Severity.WARNING)
    else:
        share = f.impact_ns / dur
        sev = Severity.CRITICAL if share >= CRITICAL_SHARE else Severity.WARNING if share >= WARNING_SHARE \
            else Severity.INFO
    return f if sev == f.severity else replace(f, severity=sev)


def allocate(findings: list[Finding]) -> list[Finding]:
    """Each finding's impact as the share of its estimate that no earlier finding has claimed
    (see the module docstring). A finding
    with claims ``(starts, ends)`` measures them clipped to its window, ``M`` ns, of which ``F`` are
    still free: it keeps ``min(estimate, M) * F / M`` and claims that many ns of the free time (the
    same share of each free interval, from its start), so later findings on the same time get the
    rest. Returns new Finding objects where the impact changed.

    Order: a finding with a higher ``precedence`` first (a diagnosis that explains other rules'
    evidence: a straggler rank's late host is the cause of its host-bound gaps), then the most
    specific claim first (the fewest claimed ns: the allocation calls, then the
    gaps after a synchronize, then all host-bound gaps, then every idle gap): the time a precise
    diagnosis names is its own, and a broader one keeps what is left (moving printing off the
    submitting thread does not remove the cudaMalloc calls inside the same gap). On the same time,
    the smaller estimate first: partial fixes compose (pinning halves a copy, overlapping then hides
    what is left of it), and the larger one keeps its estimate's share of the rest."""

    def scope(f: Finding) -> int:
        w = f.window
        lo, hi = int(w.get("start_ns", 0)), int(w.get("end_ns", 0))
        if f.claims is None:
            return max(0, hi - lo)
        return iv.total(*iv.clip(f.claims[0], f.claims[1], lo, hi))

    ranked = sorted(findings, key=lambda f: (-f.precedence, scope(f), f.impact_ns, -int(f.severity), f.rule))
    taken: list[tuple[str, tuple[np.ndarray, np.ndarray]]] = []
    all_s, all_e = np.empty(0, np.int64), np.empty(0, np.int64)
    out: list[Finding] = []
    for f in ranked:
        est = int(f.impact_ns)
        if est <= 0:
            out.append(f if est == 0 else replace(f, impact_ns=0))
            continue
        w = dict(f.window)
        lo, hi = int(w.get("start_ns", 0)), int(w.get("end_ns", 0))
        cs, ce = f.claims if f.claims is not None else (np.array([lo]), np.array([hi]))
        own = iv.merge(*iv.clip(cs, ce, lo, hi))
        m = int((own[1] - own[0]).sum())
        free = iv.subtract(own, (all_s, all_e))
        fr = int((free[1] - free[0]).sum())
        want = min(est, m)
        impact = want if fr == m else (want * fr // m if m else 0)
        if impact > 0:
            took = free[1] - free[0]  # each free interval's share, from its start (one temporary at a time)
            share = took * (impact / fr)
            del took
            take_e = share.astype(np.int64)
            del share
            take_e += free[0]
            short = impact - int((take_e - free[0]).sum())  # rounding: a few ns, one per interval at most
            if short > 0:
                room = np.flatnonzero(take_e < free[1])[:short]
                take_e[room] += 1
            keep = take_e > free[0]
            mine = (free[0], take_e) if bool(keep.all()) else (free[0][keep], take_e[keep])
            del keep
            impact = int((mine[1] - mine[0]).sum())
            taken.append((f.rule, mine))
            all_s, all_e = iv.union((all_s, all_e), iv.merge(*mine))
        if impact == est:
            out.append(f)
            continue
        others = sorted({r for r, t in taken[:-1 if impact > 0 else None] if len(iv.intersect(own, t)[0])})
        note = f" Estimated saving {fmt_ns(est)}"
        if others:
            note += f"; {fmt_ns(max(0, want - impact))} of it is time already counted by {', '.join(others)}"
        if want < est:
            note += f"; capped at the {fmt_ns(m)} of {w.get('label', 'window')} time it concerns"
        note += f": counted {fmt_ns(impact)}."
        w.update(estimate_ns=est, overlaps=others)
        out.append(replace(f, impact_ns=impact, window=w, message=f.message + note))
    return out


__all__ = ["NEEDS", "unmet_input", "allocate", "graded", "per_iteration", "ranked", "REGISTRY", "Finding", "Rule", "RuleContext", "Severity",
           "rule", "run_rules"]
