"""Noise and the verdict: the Mann-Whitney test of two runs' per-iteration samples, the run-to-run
spread that judges a metric without samples, and ``verdict``, the one place that turns a change into
words (better, worse, no clear change)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from nsysan.compare.metrics import METRICS, SPEED_METRICS, TESTED_BY

MIN_SAMPLES = 5
ALPHA = 0.01


def mann_whitney(a: np.ndarray, b: np.ndarray) -> float | None:
    """Two-sided p-value of the Mann-Whitney U test (normal approximation, tie-corrected)."""
    n1, n2 = len(a), len(b)
    if n1 < MIN_SAMPLES or n2 < MIN_SAMPLES:
        return None
    allv = np.concatenate([a, b])
    order = np.argsort(allv, kind="mergesort")
    ranks = np.empty(len(allv), dtype=np.float64)
    sv = allv[order]
    # average ranks for ties
    uniq, first, counts = np.unique(sv, return_index=True, return_counts=True)
    avg = first + (counts - 1) / 2.0 + 1.0
    ranks[order] = np.repeat(avg, counts)
    u1 = ranks[:n1].sum() - n1 * (n1 + 1) / 2.0
    mu = n1 * n2 / 2.0
    n = n1 + n2
    tie = float(((counts ** 3) - counts).sum())
    var = n1 * n2 / 12.0 * ((n + 1) - tie / (n * (n - 1)))
    if var <= 0:
        return 1.0
    z = (abs(u1 - mu) - 0.5) / math.sqrt(var)
    return float(math.erfc(max(z, 0.0) / math.sqrt(2)))



def iqr(v: np.ndarray) -> float | None:
    if len(v) == 0:
        return None
    q1, q3 = np.percentile(v, [25, 75])
    return float(q3 - q1)



SPREAD_FLOOR = 0.05  # a metric without a test of its own is never called better or worse for a change under 5%


def noise_test(a: np.ndarray, b: np.ndarray, *, alpha: float = ALPHA, samples: str = "iteration periods"
               ) -> dict[str, Any]:
    """The Mann-Whitney test of two samples of per-iteration times, with its verdict in words."""
    p = mann_whitney(a, b)
    out: dict[str, Any] = {"test": "Mann-Whitney U, two-sided", "samples": samples, "alpha": alpha,
                           "base_samples": int(len(a)), "new_samples": int(len(b)), "p_value": p,
                           "significant": (p is not None and p < alpha),
                           "base_iqr_ns": iqr(a), "new_iqr_ns": iqr(b)}
    if p is None:
        out["note"] = (f"fewer than {MIN_SAMPLES} steady-state iterations on one side: differences cannot be "
                       "told from noise")
    elif p >= alpha:
        out["note"] = f"the {samples} are not distinguishable (p = {p:.3g})"
    else:
        out["note"] = f"the {samples} differ (p = {p:.3g})"
    return out


def relative_spread(a: np.ndarray, b: np.ndarray) -> float | None:
    """How much the iteration periods vary within a run: the larger of the two runs' interquartile
    range of the steady periods divided by their median; None with fewer than ``MIN_SAMPLES``
    iterations on a side. ``max(spread, SPREAD_FLOOR)`` is the noise yardstick for the metrics
    without a test of their own (totals and shares, one number per run)."""
    if len(a) < MIN_SAMPLES or len(b) < MIN_SAMPLES:
        return None
    rel = []
    for v in (a, b):
        med = float(np.median(v))
        if med <= 0:
            return None
        rel.append((iqr(v) or 0.0) / med)
    return max(rel)


def _change_words(metric: str, base: float, new: float) -> str:
    """The size of a change in words: points for shares, else relative."""
    if metric.endswith("_frac"):
        return f"{(new - base) * 100:+.1f} pt"
    if base == 0:
        return "from 0"
    return f"{(new - base) / abs(base):+.1%}"


def verdict(metric: str, base: float | None, new: float | None, *, test: dict[str, Any] | None = None,
            spread: float | None = None) -> dict[str, Any]:
    """The verdict on one metric: the one place that decides whether a change is better, worse or
    noise; the terminal, the HTML page, the JSON and the gate all read what it returns.

    ``test``: the ``noise_test`` of the per-iteration samples that carry this metric (periods for
    the iteration time and throughput, latencies for the latency), or None for a metric with no
    samples (totals, shares). ``spread``: ``relative_spread``, the noise yardstick for the latter.

    Returns ``verdict`` (a code), ``text`` (words for a person), ``basis`` and ``p_value``:

    * None: missing on a side; ``"same"``: identical values;
    * ``"better"`` / ``"worse"`` (by the metric's direction: a time lower, a share of busy time
      higher...): only when the test says the samples differ (basis ``"test"``), or, for a metric
      without a test, when its relative change exceeds the run-to-run spread (basis ``"spread"``);
    * ``"no clear change"``: the test cannot tell the samples apart, or the change is within the
      spread;
    * ``"changed"``: no test and no spread to judge by (fewer than 5 iterations on a side): the
      size of the change, no claim.
    """
    direction = METRICS[metric][1]
    out: dict[str, Any] = {"verdict": None, "text": "-", "basis": None, "p_value": None}
    if base is None or new is None:
        out["text"] = "missing in the base" if base is None and new is not None else \
            "missing in the new" if new is None and base is not None else "-"
        return out
    if new == base:
        return out | {"verdict": "same", "text": "no change"}
    good = (new - base) * direction > 0
    code = "better" if good else "worse"
    word = {"better": "faster", "worse": "slower"}[code] if metric in SPEED_METRICS else code
    size = _change_words(metric, base, new)
    if test is not None and test.get("p_value") is not None:
        p = float(test["p_value"])
        if test["significant"]:
            return out | {"verdict": code, "text": f"{word} ({size}, p={p:.2g})", "basis": "test", "p_value": p}
        return out | {"verdict": "no clear change", "text": f"no clear change ({size}, p={p:.3g})", "basis": "test",
                      "p_value": p}
    if spread is not None:
        rel = abs(new - base) / abs(base) if base else math.inf
        if rel > spread:
            return out | {"verdict": code, "text": f"{word} ({size}; noise ~{spread:.0%})", "basis": "spread"}
        return out | {"verdict": "no clear change", "text": f"no clear change ({size}; noise ~{spread:.0%})",
                      "basis": "spread"}
    why = "too few iterations for a noise test" if metric in TESTED_BY else "no noise estimate"
    return out | {"verdict": "changed", "text": f"changed by {size} ({why})", "basis": None}
