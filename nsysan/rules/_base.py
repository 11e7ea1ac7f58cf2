"""Finding, Severity, the ``@rule`` registry and the rule context (``RuleContext``)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import pandas as pd

from nsysan.analyses.frames import to_records
from nsysan.analyses.gpu import Window
from nsysan.analyses.program import UNKNOWN_PROGRAM, Program
from nsysan.result import Analysis
from nsysan.trace.model import Trace


class Severity(IntEnum):
    INFO = 1
    WARNING = 2
    CRITICAL = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    rule: str
    severity: Severity
    title: str
    message: str
    suggestion: str
    impact_ns: int
    evidence: tuple[Mapping[str, Any], ...] = ()
    window: Mapping[str, Any] = field(default_factory=dict)
    # The wall-clock time the saving comes from: (starts, ends) int64 arrays of absolute ns, or None
    # for "anywhere in the window". Not serialised; ``run_rules`` allocates impacts against it.
    claims: tuple[np.ndarray, np.ndarray] | None = field(default=None, compare=False, repr=False)
    # A diagnosis that explains other rules' evidence (a straggler rank explains its host gaps and the
    # others' waiting) is allocated before them: higher first. Not serialised.
    precedence: int = field(default=0, compare=False, repr=False)
    # The saving per iteration: the counted impact over the window divided by the steady iterations
    # in it, when the window is the steady state of an iteration model (``run_rules`` sets it after
    # allocating); None for a finding of the whole capture or of another window, or without a saving.
    per_iteration_ns: int | None = None
    # The idle or wasted time a finding without its own estimate explains (a summary of causes the
    # other rules cost: gpu-low-util's idle time): ranks it above small savings, never counted.
    covers_ns: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "severity": self.severity.name.lower(), "title": self.title,
                "message": self.message, "suggestion": self.suggestion, "impact_ns": int(self.impact_ns),
                "evidence": [dict(e) for e in self.evidence], "window": dict(self.window),
                **({"covers_ns": int(self.covers_ns)} if self.covers_ns > 0 else {})}


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    fn: Callable[..., Iterator[Finding]]
    thresholds: Mapping[str, Any]
    doc: str

    @property
    def why(self) -> str:
        return _section(self.doc, "Why it matters")

    @property
    def fix(self) -> str:
        return _section(self.doc, "Fix")

    @property
    def summary(self) -> str:
        return self.doc.strip().split("\n\n")[0].replace("\n", " ")


def _section(doc: str, name: str) -> str:
    for para in inspect.cleandoc(doc).split("\n\n"):
        if para.startswith(f"**{name}**"):
            return " ".join(para.split(":", 1)[1].split())
    return ""


REGISTRY: dict[str, Rule] = {}


@dataclass
class RuleContext:
    """What a rule reads: the frozen result of the trace's analyses (``a``), its window and trace."""

    a: Analysis

    @property
    def window(self) -> Window:
        return self.a.steady

    @property
    def trace(self) -> Trace:
        return self.a.trace

    @property
    def program(self) -> Program:
        """The program the trace recorded (training or inference, Python or not, its libraries), for
        the rules' advice; the unknown one when the analysis has none."""
        p = self.a.program
        return p if p is not None else UNKNOWN_PROGRAM


def rule(id: str, title: str, **thresholds: Any) -> Callable[[Callable[..., Iterator[Finding]]], Callable[..., Iterator[Finding]]]:
    """Register a rule. Thresholds are keyword arguments, overridable from the CLI or a config file."""

    def wrap(fn: Callable[..., Iterator[Finding]]) -> Callable[..., Iterator[Finding]]:
        if id in REGISTRY:
            raise ValueError(f"duplicate rule id {id}")
        module_doc = inspect.getmodule(fn).__doc__ or ""  # type: ignore[union-attr]
        REGISTRY[id] = Rule(id, title, fn, dict(thresholds), module_doc)
        return fn

    return wrap


def top_records(df: pd.DataFrame, by: str, n: int = 10, cols: list[str] | None = None) -> tuple[dict[str, Any], ...]:
    """Evidence: the ``n`` largest rows by ``by`` as JSON-ready records."""
    if len(df) == 0:
        return ()
    d = df.nlargest(n, by) if n else df
    if cols:
        d = d[cols]
    out: list[dict[str, Any]] = []
    for rec in records(d):
        out.append({k: (v.item() if hasattr(v, "item") else (None if v is pd.NA else v)) for k, v in rec.items()})
    return tuple(out)


def records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """``to_records(df)``: each row's cells (as ``iterrows`` gives them), keyed by the column names."""
    return cast(list[dict[str, Any]], to_records(df))


def claims_of(starts: npt.ArrayLike, ends: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """A finding's ``claims``: the wall-clock intervals its saving would come from."""
    return (np.asarray(starts, dtype=np.int64).reshape(-1), np.asarray(ends, dtype=np.int64).reshape(-1))


def finding(ctx: RuleContext, rule_id: str, **kw: Any) -> Finding:
    r = REGISTRY[rule_id]
    kw.setdefault("suggestion", r.fix)
    kw.setdefault("window", ctx.window.to_dict())
    return Finding(rule=rule_id, title=kw.pop("title", r.title), **kw)
