"""Rules: one file each, registered by ``@rule``, documented from their docstrings.

Every non-underscore module here is imported in sorted order, so a new rule is one new file.
Rules judge the steady state (``ctx.window``) unless a rule's docstring says otherwise.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import Any

from nsysan._executor import Inline
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


def run_rules(analysis: Any, config: dict[str, dict[str, Any]],
              pool: Any = None) -> tuple[list[Finding], list[dict[str, Any]]]:
    """Run every rule; returns findings sorted by impact (desc) then rule id, and a log of what ran.
    Rules only read the analysis, so with an executor (``pool.submit``) they run concurrently; the
    findings and the log do not depend on it."""
    ctx = RuleContext(analysis)
    disabled = set(config.get("_disabled", {}))
    pool = pool or Inline()
    started = []
    for rid in sorted(REGISTRY):
        r = REGISTRY[rid]
        if rid in disabled:
            started.append((rid, None, None))
            continue
        params = {**r.thresholds, **config.get(rid, {})}
        started.append((rid, params, pool.submit(lambda fn=r.fn, kw=params: list(fn(ctx, **kw)))))
    findings: list[Finding] = []
    log: list[dict[str, Any]] = []
    for rid, params, job in started:
        if job is None:
            log.append({"rule": rid, "status": "disabled"})
            continue
        got = job.result()
        findings += got
        log.append({"rule": rid, "status": "fired" if got else "passed", "thresholds": params})
    findings.sort(key=lambda f: (-f.impact_ns, -int(f.severity), f.rule))
    return findings, log


__all__ = ["REGISTRY", "Finding", "Rule", "RuleContext", "Severity", "rule", "run_rules"]
