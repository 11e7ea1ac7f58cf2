"""Calibrate the rules' saving models against measured fixes: each fixture pair (before, after) is
one fix applied to one program, recorded on the same machine.

    python3 benchmarks/calibrate_savings.py [PAIR ...]      # e.g. ladder_reuse:ladder_pinned

For each pair it prints the measured change of the iteration period (median of consecutive
completions of the NVTX iteration range, per thread, by plain SQL on both exports:
``tests/sqltruth.py``), every finding nsysan gives on ``before`` with its predicted saving per
iteration (counted impact / steady iterations of one sequence; the rule's own estimate beside it
when the allocation reduced it), which of them the fix resolved (the rule no longer fires on
``after``: "gone"; or its saving per iteration fell below ``SHRUNK`` of what it was: "shrunk"), and the ratio of
the predicted saving of the resolved findings to the measured one. The measured iteration period
needs the same iteration unit on both sides: pairs whose iteration runs on a different number of
threads or a different number of times (multictx: two contexts on two threads, each a batch in two;
profiles: each context half of every batch) are shown but not judged.

Fixtures come from ``tests/fixtures/traces/<name>/trace.sqlite.xz`` (decompressed once into a
temporary folder by ``tests/sqltruth.py``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import sqltruth  # noqa: E402 (after the path to tests/)

# (before, after, the NVTX iteration range both are timed by): each a fix of one thing
PAIRS: list[tuple[str, str, str]] = [
    ("ladder_baseline", "ladder_reuse", "infer"),
    ("ladder_reuse", "ladder_pinned", "infer"),
    ("ladder_pinned", "ladder_fp16", "infer"),
    ("ladder_fp16", "ladder_overlap", "infer"),
    ("ladder_overlap", "ladder_worker", "infer"),
    ("ladder_worker", "ladder_graph", "infer"),
    ("ladder_graph", "ladder_multictx", "infer"),
    ("ladder_multictx", "ladder_profiles", "infer"),
    ("ddp_serial", "ddp_overlap", "train_step"),
    ("decode_eager", "decode_graph", "decode_token"),
    ("launch_eager", "launch_graph", "step"),
    # issue 41: unified memory prefetched, pipeline stages balanced, two GPUs pipelined
    ("um_thrash", "um_prefetch", "gpu_update"),
    ("pipe_stages", "pipe_balanced", "train_step"),
    ("two_gpu_turns", "two_gpu_pipelined", "train_step"),
    # DDP again: NCCL held to 4 CTAs (overlap pays), and 4 layers of 4096 (overlap gains nothing)
    ("ddp_serial_c4", "ddp_overlap_c4", "train_step"),
    ("ddp_serial_w4096_l4_b4096", "ddp_overlap_w4096_l4_b4096", "train_step"),
]
# a rule still firing on `after` counts as resolved when its saving per iteration fell below this share of
# what it was: a rule that keeps most of its saving was not fixed by the step (serial-copy-compute after
# pinning: the copies got shorter, the overlap fix is still to do). A resolved rule is credited with what
# the step removed (its saving less what is left, ``Pair.credited``), so a half-fixed one (DDP's last
# gradient bucket still exposed: no backward compute follows it) is credited with its half. Was 0.1 while
# the whole saving was credited; at 0.5 no other pair's verdict or number changed.
SHRUNK = 0.5


def gates_open(rule_id: str) -> dict[str, float]:
    """The rule's firing thresholds at their permissive end (``min_*`` 0, ``max_*`` its ceiling), its
    saving models (``assumed_*``) kept: on ``after`` a rule that only fell under its gate (sync-api's
    waits moving to 25% of the step against its 30%: the wait is still there) is not a resolved one."""
    from nsysan.rules import REGISTRY

    out: dict[str, float] = {}
    for k, v in REGISTRY[rule_id].thresholds.items():
        if k.startswith("min_"):
            out[f"{rule_id}.{k}"] = 0
        elif k.startswith("max_"):
            out[f"{rule_id}.{k}"] = 100.0 if k.endswith("pct") else 1.0 if k.endswith(("frac", "share", "ratio")) else 1e18
    return out


@dataclass
class Side:
    name: str
    period_ns: float | None  # median period by SQL
    threads: int  # iteration sequences (threads) running the range
    instances: int  # closed instances of the range
    per_seq: int  # steady iterations of the longest sequence (nsysan's iteration model)
    findings: list[dict] = field(default_factory=list)  # rule, impact_ns, estimate_ns, per_iter_ns
    path: str = ""  # the decompressed export
    range_name: str = ""
    _opened: dict[str, float] = field(default_factory=dict)

    def saving_gates_open(self, rule_id: str) -> float:
        """The rule's saving per iteration here with its own thresholds opened (``gates_open``)."""
        if rule_id not in self._opened:
            self._opened[rule_id] = _per_iteration(self.path, self.range_name, gates_open(rule_id)).get(rule_id, 0.0)
        return self._opened[rule_id]


@dataclass
class Pair:
    before: Side
    after: Side
    range_name: str

    @property
    def measured_ns(self) -> float | None:
        b, a = self.before.period_ns, self.after.period_ns
        return None if b is None or a is None else b - a

    @property
    def comparable(self) -> bool:
        b, a = self.before, self.after
        return b.threads == a.threads and b.instances == a.instances and self.measured_ns is not None

    def resolved(self) -> list[tuple[dict, str]]:
        """The findings on `before` that the fix resolved, with how: "gone" or "shrunk"."""
        after = {}
        for f in self.after.findings:
            after[f["rule"]] = after.get(f["rule"], 0.0) + f["per_iter_ns"]
        out = []
        for f in self.before.findings:
            if f["per_iter_ns"] <= 0:
                continue
            if f["rule"] not in after:
                out.append((f, "gone"))
            elif after[f["rule"]] < SHRUNK * f["per_iter_ns"]:
                out.append((f, "shrunk"))
        return out

    def credited(self, f: dict) -> float:
        """What a resolved finding predicted the fix saves per iteration: its saving on `before` less
        what the same rule still counts on `after` with its thresholds opened (``gates_open``): a
        rule that only fell under its gate (sync-api's waits moving to 25% of the step against its
        30%) did not predict that its waits go."""
        before = sum(g["per_iter_ns"] for g in self.before.findings if g["rule"] == f["rule"])
        left = self.after.saving_gates_open(f["rule"])
        return f["per_iter_ns"] * max(0.0, before - left) / before if before > 0 else 0.0

    @property
    def predicted_ns(self) -> float:
        return sum(self.credited(f) for f, _ in self.resolved())

    @property
    def ratio(self) -> float | None:
        m = self.measured_ns
        if m is None or m <= 0:
            return None
        return self.predicted_ns / m


def fixture(name: str) -> Path:
    return sqltruth.FIXTURES / name / "trace.sqlite.xz"


def measured_period(name: str, range_name: str) -> tuple[float | None, int, int]:
    """Median period of ``range_name`` by SQL (consecutive completions per thread, pooled), the
    number of threads that run it and its number of instances."""
    con = sqltruth.open_fixture(name)
    try:
        inst = sqltruth.range_instances(con, range_name)
        threads = len({(r["pid"], r["tid"]) for r in inst})
        return sqltruth.iteration_period_p50(con, range_name), threads, len(inst)
    finally:
        con.close()


def side(name: str, range_name: str) -> Side:
    import nsysan
    from nsysan.analysis import analyze

    period, threads, instances = measured_period(name, range_name)
    con = sqltruth.open_export(fixture(name))  # the decompressed copy's path
    path = con.execute("PRAGMA database_list").fetchone()[2]
    con.close()
    a = analyze(nsysan.open_trace(path), iteration_range=range_name)
    per_seq = _per_seq(a)
    s = Side(name, period, threads, instances, per_seq, path=path, range_name=range_name)
    for f in a.findings:
        est = int(f.window.get("estimate_ns", f.impact_ns))
        s.findings.append({"rule": f.rule, "impact_ns": int(f.impact_ns), "estimate_ns": est,
                           "per_iter_ns": f.impact_ns / per_seq if per_seq else 0.0})
    return s


def _per_seq(a) -> int:
    """Steady iterations of the longest sequence (nsysan's iteration model)."""
    from nsysan.rules import steps_per_sequence

    return steps_per_sequence(a.iterations.table)


def _per_iteration(path: str, range_name: str, settings: dict[str, float]) -> dict[str, float]:
    """Each rule's saving per iteration on the export at ``path`` under rule ``settings``."""
    import nsysan
    from nsysan.analysis import analyze

    a = analyze(nsysan.open_trace(path), iteration_range=range_name, set=settings)
    n = max(_per_seq(a), 1)
    out: dict[str, float] = {}
    for f in a.findings:
        out[f.rule] = out.get(f.rule, 0.0) + f.impact_ns / n
    return out


def calibrate(pairs: list[tuple[str, str, str]] | None = None) -> list[Pair]:
    cache: dict[tuple[str, str], Side] = {}
    out = []
    for b, a, rng in pairs or PAIRS:
        for n in (b, a):
            if (n, rng) not in cache:
                cache[(n, rng)] = side(n, rng)
        out.append(Pair(cache[(b, rng)], cache[(a, rng)], rng))
    return out


def ms(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / 1e6:.3f}"


def report(pairs: list[Pair]) -> str:
    lines = []
    for p in pairs:
        b, a = p.before, p.after
        lines.append(f"== {b.name} -> {a.name} ('{p.range_name}', {b.per_seq} steady iterations per sequence)")
        lines.append(f"   measured period (SQL p50): {ms(b.period_ns)} -> {ms(a.period_ns)} ms: change "
                     f"{ms(p.measured_ns)} ms per iteration"
                     + ("" if p.comparable else f"  [not comparable: {b.threads} vs {a.threads} threads, "
                                                   f"{b.instances} vs {a.instances} instances]"))
        resolved = {id(f): how for f, how in p.resolved()}
        after_rules = {f["rule"] for f in a.findings}
        for f in b.findings:
            how = resolved.get(id(f), "fires" if f["rule"] in after_rules else "gone, no saving")
            if id(f) in resolved:
                how += f", credited {ms(p.credited(f))} ms/iter ({ms(a.saving_gates_open(f['rule']))} left, gates open)"
            own = ms(f["estimate_ns"] / max(b.per_seq, 1))
            est = "" if f["estimate_ns"] == f["impact_ns"] else f" (own estimate {own})"
            lines.append(f"     {f['rule']:24s} {ms(f['per_iter_ns']):>8s} ms/iter{est:28s} {how}")
        r = p.ratio
        lines.append(f"   predicted by the resolved findings: {ms(p.predicted_ns)} ms per iteration; "
                     f"predicted/measured = {'-' if r is None else f'{r:.2f}'}")
    lines.append("")
    lines.append(f"{'pair':40s} {'measured':>9s} {'predicted':>9s} {'ratio':>6s}  (ms per iteration)")
    for p in pairs:
        r = p.ratio
        verdict = "not comparable" if not p.comparable else ("within 2x" if r is not None and 0.5 <= r <= 2 else
                                                             "OFF")
        lines.append(f"{p.before.name + ' -> ' + p.after.name:40s} {ms(p.measured_ns):>9s} {ms(p.predicted_ns):>9s} "
                     f"{'-' if r is None else f'{r:.2f}':>6s}  {verdict}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    pairs = None
    if argv:
        by = {f"{b}:{a}": (b, a, r) for b, a, r in PAIRS}
        pairs = [by[x] for x in argv]
    print(report(calibrate(pairs)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
