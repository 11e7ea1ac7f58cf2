"""The iteration model's values: ``IterationStats`` (``Iterations.stats``) and ``Candidate`` (each
repeated range considered as the iteration), with why it was chosen (``Choice``) or rejected
(``Rejection``: a ``Reason`` and the numbers its sentence is made from). The JSON writes them through
``to_json`` (the keys and their order as before these were dicts)."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from enum import Enum
from typing import Any

MIN_INSTANCES = 3  # an iteration repeats at least this many times on one thread
MIN_COVERAGE = 0.25  # and launches at least this share of the GPU time


@dataclass(frozen=True)
class IterationStats:
    """Count, period, latency, the headline figure (``p50_ns`` ...: the period's where the loop has
    one, else the latency's), throughput, queue depth and warm-up of the steady iterations. A field
    is None where it was not measured (no iteration: every field; no period: the ``period_*``); the
    JSON leaves those out."""

    count: int | None = None
    sequences: int | None = None
    overlapping_instances: int | None = None  # most instances complete before an earlier one: no period
    enclosing_instances: int | None = None  # instances around later ones of the same name, set aside
    period_mean_ns: int | None = None
    period_std_ns: int | None = None
    period_min_ns: int | None = None
    period_max_ns: int | None = None
    period_p50_ns: int | None = None
    period_p90_ns: int | None = None
    period_p99_ns: int | None = None
    latency_mean_ns: int | None = None
    latency_std_ns: int | None = None
    latency_min_ns: int | None = None
    latency_max_ns: int | None = None
    latency_p50_ns: int | None = None
    latency_p90_ns: int | None = None
    latency_p99_ns: int | None = None
    mean_ns: int | None = None
    std_ns: int | None = None
    min_ns: int | None = None
    max_ns: int | None = None
    p50_ns: int | None = None
    p90_ns: int | None = None
    p99_ns: int | None = None
    headline: str | None = None  # "period" or "latency"
    throughput_per_s: float | None = None
    queue_depth_p50: float | None = None
    queue_depth_max: int | None = None
    latency_includes_queueing: bool | None = None
    warmup_count: int | None = None
    warmup_mean_ns: int | None = None
    warmup_service_ns: int | None = None
    inferred_loops: list[dict[str, Any]] | None = None  # iterations inferred from the GPU work: the loops found

    def to_json(self) -> dict[str, Any]:
        """The measured fields, in their order (the JSON's ``iterations.stats``)."""
        return {f.name: v for f in fields(self) if (v := getattr(self, f.name)) is not None}




class Choice(Enum):
    """How the chosen candidate was chosen; the value is its verdict."""

    AUTO = "chosen"
    OPTION = "chosen (option)"
    XLA = "chosen (XLA module executions: no range of the program's own qualified)"
    TENSORRT = "chosen (TensorRT engine executions: no range of the program's own qualified)"


class Reason(Enum):
    """Why a candidate is not the iteration."""

    LIBRARY = "library"  # a library's range (NCCL, cuDNN, XLA ...), not the program's own
    FEW_REPEATS = "few_repeats"  # fewer than MIN_INSTANCES on every thread
    NO_GPU_WORK = "no_gpu_work"  # most instances launched nothing
    TOO_SHORT = "too_short"
    RECORDER = "recorder"  # added by nsysan profile --annotate, where the program has ranges of its own
    LOW_COVERAGE = "low_coverage"  # no candidate launched MIN_COVERAGE of the GPU time
    BELOW_BEST = "below_best"  # launched clearly less of the GPU time than the best
    SUBSTEP = "substep"  # runs k times inside each instance of another: its breakdown
    FEWER_INSTANCES = "fewer_instances"  # the chosen one repeats more often


@dataclass(frozen=True)
class Rejection:
    """Why a candidate was rejected, and the numbers its sentence (``prose``) names."""

    reason: Reason
    library: str | None = None  # LIBRARY: which library
    cpu_only: bool = False  # TOO_SHORT: judged without GPU activity (the CPU-only threshold)
    coverage: float = 0.0  # LOW_COVERAGE, BELOW_BEST: the share of the GPU time it launched
    best: float = 0.0  # BELOW_BEST: the best candidate's share
    other: str | None = None  # SUBSTEP: the range it runs inside; FEWER_INSTANCES: the range chosen
    per_other: int = 0  # SUBSTEP: its instances per instance of ``other``
    mine: int = 0  # FEWER_INSTANCES: its most instances on one thread
    theirs: int = 0  # FEWER_INSTANCES: the chosen range's

    @property
    def prose(self) -> str:
        r, o = self.reason, self.other
        if r is Reason.LIBRARY:
            return f"library range ({self.library})"
        if r is Reason.FEW_REPEATS:
            return f"repeats fewer than {MIN_INSTANCES} times on one thread"
        if r is Reason.NO_GPU_WORK:
            return "no GPU work launched below it"
        if r is Reason.TOO_SHORT:
            return "shorter than 10 us (CPU only)" if self.cpu_only else "shorter than 1 us"
        if r is Reason.RECORDER:
            return "added by the recorder (nsysan profile --annotate): the program's own ranges come first"
        if r is Reason.LOW_COVERAGE:
            return f"launched {self.coverage:.0%} of the GPU time (an iteration launches at least {MIN_COVERAGE:.0%})"
        if r is Reason.BELOW_BEST:
            return f"covers {self.coverage:.0%} of the GPU time (best {self.best:.0%})"
        if r is Reason.SUBSTEP:
            return f"a sub-step of {o!r} ({self.per_other} per {o!r}): the loop repeats {o!r}, this is its breakdown"
        return (f"fewer instances than {o!r} ({self.mine} vs {self.theirs} on one thread), which launches as much "
                "of the GPU work")


@dataclass(frozen=True)
class Candidate:
    """A repeated range considered as the iteration: the facts it is judged on, and the decision:
    ``chosen`` or ``rejected`` (or neither: not judged, as when ``--iteration-range`` names another)."""

    name: str
    count: int
    per_thread_max: int  # most instances on one thread
    threads: int
    median_ns: int  # median latency (end, or its GPU work's projected end if later, less the start)
    total_ns: int
    depth: float  # median nesting depth
    with_gpu_frac: float  # share of instances that launched GPU work
    gpu_coverage: float  # share of the GPU time launched inside its instances (0 where not measured)
    library: str | None
    recorder: bool | None  # added by nsysan profile --annotate; None: not asked (a TensorRT execution)
    rejected: Rejection | None = None
    chosen: Choice | None = None

    @property
    def verdict(self) -> str:
        """The decision in words ("chosen", why rejected; "" when neither)."""
        if self.chosen is not None:
            return self.chosen.value
        return self.rejected.prose if self.rejected is not None else ""

    @property
    def undecided(self) -> bool:
        return self.chosen is None and self.rejected is None

    def substep_of(self, outer: str) -> bool:
        """Rejected as a sub-step of ``outer``."""
        return self.rejected is not None and self.rejected.reason is Reason.SUBSTEP and self.rejected.other == outer

    def to_json(self) -> dict[str, Any]:
        out = {"name": self.name, "count": self.count, "per_thread_max": self.per_thread_max, "threads": self.threads,
               "median_ns": self.median_ns, "total_ns": self.total_ns, "depth": self.depth,
               "with_gpu_frac": self.with_gpu_frac, "gpu_coverage": self.gpu_coverage, "library": self.library,
               "verdict": self.verdict}
        if self.recorder is not None:
            out["recorder"] = self.recorder
        return out


def decide(cands: list[Candidate], rejected: dict[str, Rejection],
           chosen: dict[str, Choice] | None = None) -> list[Candidate]:
    """``cands`` with the decisions made by name: a choice (clearing any rejection), else a rejection."""
    chosen = chosen or {}
    return [replace(c, chosen=chosen[c.name], rejected=None) if c.name in chosen else
            replace(c, rejected=rejected[c.name]) if c.name in rejected else c for c in cands]
