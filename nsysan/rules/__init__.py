"""Rules: one file each, registered by ``@rule``, documented from their docstrings.

Every non-underscore module here is imported in sorted order, so a new rule is one new file.
Rules judge the steady state (``ctx.window``) unless a rule's docstring says otherwise.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import Any

from nsysan.rules._base import REGISTRY, Finding, Rule, Severity, rule

for _m in sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")):
    importlib.import_module(f"{__name__}.{_m}")


@dataclass
class RuleContext:
    a: Any  # nsysan.analysis.Analysis

    @property
    def window(self) -> Any:
        return self.a.steady

    @property
    def trace(self) -> Any:
        return self.a.trace


def run_rules(analysis: Any, config: dict[str, dict[str, Any]]) -> tuple[list[Finding], list[dict[str, Any]]]:
    """Run every rule; returns findings sorted by impact (desc) then rule id, and a log of what ran."""
    ctx = RuleContext(analysis)
    findings: list[Finding] = []
    log: list[dict[str, Any]] = []
    disabled = set(config.get("_disabled", {}))
    for rid in sorted(REGISTRY):
        r = REGISTRY[rid]
        if rid in disabled:
            log.append({"rule": rid, "status": "disabled"})
            continue
        params = {**r.thresholds, **config.get(rid, {})}
        got = list(r.fn(ctx, **params))
        findings += got
        log.append({"rule": rid, "status": "fired" if got else "passed", "thresholds": params})
    findings.sort(key=lambda f: (-f.impact_ns, -int(f.severity), f.rule))
    return findings, log


__all__ = ["REGISTRY", "Finding", "Rule", "RuleContext", "Severity", "rule", "run_rules"]
