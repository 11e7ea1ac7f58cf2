"""The order findings are ranked in (issue 48), stated once for the tests that check it on outputs.

A finding with a counted saving of at least 1% of its window first, largest first; then a summary
without an estimate that covers at least a quarter of its window (a GPU idle most of the window is
never ranked below a 0.1% saving), by the time it covers; then the smaller savings; then the rest by
severity. Independent of ``nsysan.rules.ranked`` (written from the issue, not from the code).
"""

from __future__ import annotations

from typing import Any


def rank_key(impact_ns: int, covers_ns: int, severity: int, window_ns: int) -> tuple[int, int, int, int]:
    if impact_ns > 0:
        tier = 0 if not window_ns or impact_ns >= 0.01 * window_ns else 2
    else:
        tier = 1 if window_ns and covers_ns >= 0.25 * window_ns else 3
    return tier, -impact_ns, -covers_ns, -severity


def finding_key(f: Any) -> tuple[int, int, int, int]:
    """``rank_key`` of a ``Finding``."""
    w = int((f.window or {}).get("dur_ns", 0) or 0)
    return rank_key(int(f.impact_ns), int(getattr(f, "covers_ns", 0)), int(f.severity), w)


def json_key(d: dict[str, Any]) -> tuple[int, int, int, int]:
    """``rank_key`` of a finding in the JSON output (severity by name)."""
    sev = {"info": 1, "warning": 2, "critical": 3}[d["severity"]]
    return rank_key(int(d["impact_ns"]), int(d.get("covers_ns", 0)), sev, int(d["window"].get("dur_ns", 0) or 0))
