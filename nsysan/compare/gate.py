"""The regression gate (``nsysan diff --fail-on-regression``): the threshold as the user wrote it,
the rule in words, and the verdict on one metric of a ``Diff``."""

from __future__ import annotations

import math
from typing import Any

from nsysan.compare.changes import Diff
from nsysan.compare.metrics import GATE_METRICS, METRICS, TESTED_BY
from nsysan.errors import UsageError

THRESHOLD_MAX_PCT = 1000.0


def parse_threshold(text: str) -> float:
    """``--fail-on-regression``: a percentage, with or without the sign: '5%' and '5' are both 5
    percent, '0.5' is half a percent (never a fraction: '0.05' is 0.05%). Returns the fraction
    (0.05 for 5%). Negative, NaN, infinite and over 1000% are usage errors."""
    t = str(text).strip()
    num = t[:-1].strip() if t.endswith("%") else t
    try:
        pct = float(num)
    except ValueError:
        pct = math.nan
        if not num or not any(c.isdigit() for c in num):
            raise UsageError(f"--fail-on-regression {text!r}: expected a percentage such as 5 or 5%") from None
    if not math.isfinite(pct) or pct < 0 or pct > THRESHOLD_MAX_PCT:
        raise UsageError(f"--fail-on-regression {text!r}: expected a percentage from 0 to "
                         f"{THRESHOLD_MAX_PCT:g} (5 or 5% mean five percent)")
    return pct / 100.0


def threshold_note(text: str) -> str | None:
    """A reminder when a bare number below 1 may have been meant as a fraction ('0.05' is 0.05%)."""
    t = str(text).strip()
    if t.endswith("%"):
        return None
    try:
        v = float(t)
    except ValueError:
        return None
    if 0 < v < 1:
        return (f"--fail-on-regression {t} is read as {t} percent (a number is always a percentage); "
                f"for {v * 100:g} percent write {v * 100:g}%")
    return None


def fmt_threshold(threshold: float) -> str:
    """A threshold fraction as a percentage, without rounding a small one away: 0.05 -> '5.0%',
    0.0005 -> '0.05%'."""
    pct = threshold * 100.0
    return f"{pct:.1f}%" if pct == 0 or round(pct, 1) == round(pct, 6) else f"{pct:.3g}%"


def gate_rule(metric: str, threshold: float) -> str:
    """The gate as the user asked for it, in words."""
    if metric not in GATE_METRICS:
        raise UsageError(f"--metric {metric!r}: choose one of {', '.join(GATE_METRICS)}")
    label = METRICS[metric][0]
    label = label[:1].lower() + label[1:]
    noise = ("and the change is significant (Mann-Whitney test of the iterations)" if metric in TESTED_BY else
             "(no noise test for this metric: the threshold alone decides)")
    return f"fail when {label} gets more than {fmt_threshold(threshold)} worse {noise}"


def gate(dd: Diff, metric: str, threshold: float) -> dict[str, Any]:
    """Regression verdict for ``metric`` (lower is better for every gate metric). A change beyond
    the threshold fails unless the metric's noise test (its ``verdict``, basis ``"test"``) calls it
    noise; a metric without a test (or with too few iterations for one) fails on the threshold alone."""
    rule = gate_rule(metric, threshold)
    row = next(m for m in dd.metrics if m["metric"] == metric)
    label = row["label"]
    if row["base"] is None or row["new"] is None:
        raise UsageError(f"{label} ({metric}) is missing in {'the base' if row['base'] is None else 'the new'} "
                         "analysis (no iteration range found? pass --iteration-range NAME or choose another --metric)")
    if row["base"] < 0 or row["new"] < 0:
        raise UsageError(f"{label} ({metric}) is negative in {'the base' if row['base'] < 0 else 'the new'} analysis")
    if row["base"] > 0:
        change = (row["new"] - row["base"]) / row["base"]
    else:  # a baseline of 0: any growth is a regression (of unbounded size), none is no change
        change = math.inf if row["new"] > 0 else 0.0
    worse = change > threshold
    tested = row["basis"] == "test"
    failed = worse and not (tested and row["verdict"] == "no clear change")
    lim = fmt_threshold(threshold)
    p = row["p_value"]
    if failed:
        size = "grew from 0" if math.isinf(change) else f"got {change:.1%} worse"
        why = (f"{label} {size}, more than the {lim} allowed"
               + (f", and the change is significant (p = {p:.3g})" if tested else
                  "; too few iterations: no noise test possible" if metric in TESTED_BY else
                  "; no noise test for this metric"))
    elif worse:
        why = (f"{label} is {change:+.1%} but within noise (p = {p:.3g} >= {dd.noise['alpha']}): "
               "not a regression")
    else:
        why = f"{label} changed by {change:+.1%} (allowed: {lim} worse): OK"
    return {"metric": metric, "label": label, "threshold": threshold, "threshold_pct": threshold * 100.0,
            "rule": rule, "change": change, "failed": failed, "basis": row["basis"], "message": why}
