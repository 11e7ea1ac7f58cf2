"""Who kept the GPU waiting: the CPU and Python samples taken while a device sat idle behind its host.

From ``trace.samples.Samples`` and the analysis' idle gaps. A sample counts for a gap when it was taken
on the gap's process (``pid``) and submitting thread (``tid``), inside the gap, in the steady window,
and the gap's cause is the host (``host``/``sync``). **Python frames first**: when the trace holds
Python samples with their frames, they are attributed; else the native CPU samples
(``COMPOSITE_EVENTS`` + ``SAMPLING_CALLCHAINS``) are.

Per function, two numbers:

* ``self``: samples whose **own-code frame** is this function (``stack_frames``): what the user's own code
  was running;
* ``inclusive``: samples with this function anywhere on the stack.

Each with its share of the samples and the sample count: short gaps hold few samples, so attribution is
over a whole gap class (the activity label the gap analysis gives), never extrapolated from a handful
(``MIN_SAMPLES``: fewer are counted and shown, not attributed). Besides the host-caused gaps as a whole,
each gap class gets its own attribution, and so does the steady loop's CPU time on the launching
thread(s) (every sample there over the steady window, not only in gaps).

``missing_inputs`` says which inputs a trace lacks and the flag that adds each, in one place.

Where each part lives: ``stack_frames`` (the **own-code frame**, Python and native, and how a stack is
shown), ``call_sites`` (where the CUDA calls came from, ``site_note``, ``calls_in``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from nsysan.analyses.call_sites import aggregate_sites, site_calls
from nsysan.analyses.gpu import Window
from nsysan.analyses.stack_frames import (
    INTERPRETER_MODULE,
    display_stack,
    frame_key,
    module_name,
    native_own_frame,
    own_frame,
    where,
)
from nsysan.trace.samples import Samples

MIN_SAMPLES = 10
NO_SAMPLES = ("no CPU or Python samples in this trace: record with `nsys profile -s process-tree` (for Python, "
              "add `--python-sampling=true` and export with `--include-blobs=true`)")
BLOBS_LOST = ("Python samples were recorded but exported without their frames: re-export with "
              "`nsys export --type sqlite --include-blobs=true report.nsys-rep`")
COLUMNS = ["function", "file", "line", "module", "self_samples", "self_share", "inclusive_samples", "inclusive_share"]
# The functions of an input pipeline that runs on the training thread: a map-style Dataset's item and
# batch access, collation and the DataLoader's own fetch (PyTorch, Lightning and HF all use it)
INPUT_FUNCTIONS = r"__getitem__|__getitems__|(default_)?collate(_fn)?|_next_data|fetch|_MapDatasetFetcher.*|__iter__"
TOP_STACKS = 10
# The inputs that explain GPU idle time and GPU load, and the flag that adds each (one place: the report,
# the JSON and the findings quote these).
INPUTS = (
    ("cpu_samples", "CPU samples", "nsys profile -s process-tree (CPU sampling with native call stacks)"),
    ("python_samples", "Python samples",
     "nsys profile -s process-tree --python-sampling=true, exported with nsys export --include-blobs=true"),
    ("cuda_backtraces", "CUDA backtraces", "nsys profile --cudabacktrace=all"),
    ("python_backtraces", "Python backtraces",
     "nsys profile --cudabacktrace=all --python-backtrace=cuda, exported with --include-blobs=true"),
    ("gpu_metrics", "GPU metrics", "nsys profile --gpu-metrics-devices=all"),
)


def missing_inputs(inputs: dict[str, Any] | None, tables: Collection[str] = ()) -> list[dict[str, str]]:
    """The inputs this trace lacks, each with the flag that adds it: ``[{input, label, flag}]``. From the
    counts ``trace.samples`` read (``inputs``), else from the export's table names alone."""
    have = dict(inputs or {})
    tset = set(tables or ())
    out = []
    for key, lab, flag in INPUTS:
        if key in have:
            present = bool(have[key])
        else:
            present = {"cpu_samples": "COMPOSITE_EVENTS", "cuda_backtraces": "CUDA_CALLCHAINS",
                       "gpu_metrics": "GPU_METRICS"}.get(key, "") in tset
        if not present:
            out.append({"input": key, "label": lab, "flag": flag})
    if have.get("python_frames_lost"):
        out.append({"input": "python_frames", "label": "Python frames (lost in export)",
                    "flag": "nsys export --type sqlite --include-blobs=true report.nsys-rep"})
    return out


@dataclass
class Attribution:
    """The samples of one group (a gap class, all host-caused gaps, or the steady loop): functions
    (``table``, ``COLUMNS``) and the most sampled stacks."""

    key: str
    label: str
    kind: str  # "gaps" or "steady"
    source: str = ""  # "python", "native" or "" (no samples)
    gaps: int = 0
    gap_ns: int = 0
    samples: int = 0
    table: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=COLUMNS))
    stacks: list[dict[str, Any]] = field(default_factory=list)
    note: str = ""

    @property
    def attributed(self) -> bool:
        return self.samples >= MIN_SAMPLES and len(self.table) > 0

    def modules(self, n: int = 3) -> list[tuple[str, float]]:
        """Native samples: the self share per module (library), largest first."""
        if self.source != "native" or len(self.table) == 0:
            return []
        by = self.table.groupby(self.table["module"].astype(str).map(module_name), sort=False)["self_samples"].sum()
        by = by.sort_values(ascending=False, kind="stable")
        return [(str(m), float(c) / self.samples) for m, c in by.head(n).items()]

    def top(self, n: int = 3) -> str:
        """'tokenize() waits.py:37 (62%), ... of 140 Python samples' ('' without enough samples); for
        native samples also the share per module."""
        if not self.attributed:
            return ""
        parts = [f"{where(r)} ({r['self_share']:.0%})" for r in self.table.head(n).to_dict("records")]
        what = "Python samples" if self.source == "python" else "CPU samples"
        tail = ""
        if self.source == "native":
            tail = "; by module: " + ", ".join(f"{m} {share:.0%}" for m, share in self.modules())
            if INTERPRETER_MODULE.search(str(self.table.iloc[0]["module"])):
                tail += " (the Python interpreter: only Python samples tell which Python function ran)"
        return ", ".join(parts) + f" of {self.samples:,} {what}{tail}"

    def input_share(self) -> float:
        """The share of the samples inside the input pipeline (``INPUT_FUNCTIONS``: a ``Dataset``'s
        ``__getitem__``, collate, the DataLoader's fetch), by inclusive samples; 0 without enough."""
        if not self.attributed or self.source != "python":
            return 0.0
        t = self.table
        hit = t["function"].astype(str).str.fullmatch(INPUT_FUNCTIONS).to_numpy()
        return float(t["inclusive_share"].to_numpy()[hit].max()) if hit.any() else 0.0

    def to_dict(self, limit: int = 20) -> dict[str, Any]:
        return {"key": self.key, "label": self.label, "kind": self.kind, "source": self.source, "gaps": self.gaps,
                "gap_ns": self.gap_ns, "samples": self.samples, "attributed": self.attributed, "note": self.note,
                "modules": [{"module": m, "self_share": round(v, 4)} for m, v in self.modules(10)],
                "functions": self.table.head(limit).to_dict("records"), "stacks": self.stacks[:TOP_STACKS]}


@dataclass
class IdleAttribution:
    table: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=COLUMNS))
    samples_in_gaps: int = 0
    gap_ns: int = 0
    note: str = ""
    inputs: dict[str, Any] = field(default_factory=dict)
    sites: pd.DataFrame | None = None  # call_sites: where the steady state's CUDA calls came from
    source: str = ""  # "python" or "native": which samples are attributed
    classes: list[Attribution] = field(default_factory=list)  # per host-caused gap class
    steady: Attribution | None = None  # the steady loop's CPU time on the launching thread(s)
    missing: list[dict[str, str]] = field(default_factory=list)  # missing_inputs
    site_calls: pd.DataFrame | None = None  # per backtraced call of the window: its call site
    _data: Any = field(default=None, repr=False)  # (samples frame, stacks, source) for for_gaps

    def top(self, n: int = 3) -> str:
        """'tokenize() waits.py:38 (62%), ... of 140 Python samples' for messages ('' without enough samples)."""
        return Attribution("all", "", "gaps", self.source, samples=self.samples_in_gaps, table=self.table).top(n)

    def for_gaps(self, gaps: pd.DataFrame, label: str = "") -> Attribution:
        """The attribution of exactly these gaps (a rule's own selection)."""
        if self._data is None or len(gaps) == 0:
            return Attribution(label, label, "gaps", self.source, gaps=len(gaps),
                               gap_ns=int(gaps["gap_ns"].sum()) if len(gaps) else 0)
        df, stacks, source = self._data
        k = gap_index(df, gaps)
        return _attribute(df.loc[k >= 0], stacks, source, label, label, "gaps", len(gaps), int(gaps["gap_ns"].sum()))


def gap_index(samples: pd.DataFrame, gaps: pd.DataFrame) -> np.ndarray:
    """Per sample, the position (in ``gaps``) of the gap on its own thread that contains it, or -1."""
    out = np.full(len(samples), -1, dtype=np.int64)
    if len(samples) == 0 or len(gaps) == 0:
        return out
    ts, spid, stid = samples["ts_ns"].to_numpy(), samples["pid"].to_numpy(), samples["tid"].to_numpy()
    gs, ge = gaps["start_ns"].to_numpy(np.int64), gaps["end_ns"].to_numpy(np.int64)
    gap_pid, gap_tid = gaps["pid"].to_numpy(np.int64), gaps["tid"].to_numpy(np.int64)
    for pid, tid in set(zip(gap_pid.tolist(), gap_tid.tolist())):
        m = np.flatnonzero((spid == pid) & (stid == tid))
        if not m.size:
            continue
        rows = np.flatnonzero((gap_pid == pid) & (gap_tid == tid))
        order = rows[np.argsort(gs[rows], kind="stable")]
        s, e = gs[order], ge[order]
        k = np.searchsorted(s, ts[m], side="right") - 1
        ok = k >= 0
        ok[ok] = ts[m][ok] < e[k[ok]]
        out[m[ok]] = order[k[ok]]
    return out


def _attribute(df: pd.DataFrame, stacks: list[Any], source: str, key: str, label: str, kind: str,
               n_gaps: int = 0, gap_ns: int = 0) -> Attribution:
    """Functions (self, inclusive) and top stacks of the samples in ``df``: counted per distinct stack,
    then per function (never a loop over samples)."""
    out = Attribution(key, label, kind, source, gaps=int(n_gaps), gap_ns=int(gap_ns), samples=len(df))
    if len(df) == 0:
        out.note = "no sample was taken here"
        return out
    ids, counts = np.unique(df["stack"].to_numpy(), return_counts=True)
    n = int(counts.sum())
    own_of = own_frame if source == "python" else native_own_frame
    self_c: Counter[tuple[str, str]] = Counter()
    lines: dict[tuple[str, str], Counter[int]] = {}
    incl: Counter[tuple[str, str]] = Counter()
    shown: Counter[tuple[tuple[str, bool], ...]] = Counter()
    for sid, c in zip(ids.tolist(), counts.tolist()):
        st = stacks[sid]
        f = own_of(st)
        if f is not None:
            k = (f[0], f[1])
            self_c[k] += c
            lines.setdefault(k, Counter())[f[2]] += c
        for k in {frame_key(fr, source) for fr in st}:
            incl[k] += c
        shown[display_stack(st, source)] += c
    rows = []
    for (fn, fi), c in self_c.items():
        py = source == "python"
        rows.append({"function": fn, "file": fi if py else "",
                     "line": lines[(fn, fi)].most_common(1)[0][0] if py else 0,
                     "module": "" if py else fi, "self_samples": c, "self_share": round(c / n, 4),
                     "inclusive_samples": incl[(fn, fi)], "inclusive_share": round(incl[(fn, fi)] / n, 4)})
    out.table = pd.DataFrame(rows, columns=COLUMNS).sort_values(
        ["self_samples", "function", "file", "module"], ascending=[False, True, True, True], kind="stable"
    ).reset_index(drop=True)
    out.stacks = [{"samples": c, "share": round(c / n, 4), "frames": [{"text": t, "own": o} for t, o in disp]}
                  for disp, c in sorted(shown.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_STACKS]]
    if n < MIN_SAMPLES:
        out.note = f"only {n} sample(s): too few to attribute (at least {MIN_SAMPLES})"
    return out


def idle_attribution(samples: Samples | None, gaps: pd.DataFrame, window: Window,
                     launch_threads: list[tuple[int, int]] | None = None,
                     tables: Collection[str] = ()) -> IdleAttribution:
    inputs = dict(samples.inputs) if samples is not None else {}
    out = IdleAttribution(inputs=inputs, missing=missing_inputs(inputs if samples is not None else None, tables))
    if samples is None:
        out.note = NO_SAMPLES
        return out
    if len(samples.python):
        df, stacks, source = samples.python, samples.stacks, "python"
    elif len(getattr(samples, "native", ())):
        df, stacks, source = samples.native, samples.native_stacks, "native"
    else:
        if inputs.get("python_frames_lost"):
            out.note = BLOBS_LOST
        elif inputs.get("python_blobs_damaged"):
            out.note = blobs_damaged(inputs)
        elif inputs.get("cpu_samples") or inputs.get("python_samples"):
            out.note = f"no CPU or Python sample was taken on the threads that launch the GPU work in {window.named}"
        else:
            out.note = NO_SAMPLES
        return out
    out.source = source
    out._data = (df, stacks, source)
    g = gaps
    if len(g):
        g = g.loc[g["cause"].isin(["host", "sync"]).to_numpy() & (g["start_ns"].to_numpy() >= window.start_ns)
                  & (g["end_ns"].to_numpy() <= window.end_ns)].reset_index(drop=True)
    out.gap_ns = int(g["gap_ns"].sum()) if len(g) else 0
    k = gap_index(df, g)
    hit = k >= 0
    whole = _attribute(df.loc[hit], stacks, source, "all", "all host-caused gaps", "gaps", len(g), out.gap_ns)
    out.table, out.samples_in_gaps = whole.table, whole.samples
    if len(g):
        act = g["activity"].astype(str).to_numpy()
        cls_of_sample = act[k[hit]]
        sub = df.loc[hit]
        for a in pd.Series(act).value_counts(sort=False).index:
            sel = act == a
            out.classes.append(_attribute(sub.loc[cls_of_sample == a], stacks, source, str(a),
                                          str(a) or "untraced CPU work", "gaps", int(sel.sum()),
                                          int(g["gap_ns"].to_numpy()[sel].sum())))
        out.classes.sort(key=lambda c: (-c.gap_ns, c.key))
    if launch_threads:
        keys = {(int(p) << 24) | int(t) for p, t in launch_threads}
        pk = (df["pid"].to_numpy(np.int64) << 24) | df["tid"].to_numpy(np.int64)
        ts = df["ts_ns"].to_numpy()
        m = np.isin(pk, list(keys)) & (ts >= window.start_ns) & (ts < window.end_ns)
        names = ", ".join(f"{t}" for _, t in sorted(launch_threads)[:4])
        out.steady = _attribute(df.loc[m], stacks, source, "steady", f"steady loop, launching thread {names}", "steady",
                                0, int(window.end_ns - window.start_ns))
    what = "Python" if source == "python" else "CPU"
    if out.samples_in_gaps == 0:
        out.note = f"no {what} sample fell inside the host-caused idle gaps of {window.named}"
    elif out.samples_in_gaps < MIN_SAMPLES:
        out.note = f"only {out.samples_in_gaps} {what} sample(s) in the idle gaps: too few to attribute"
    elif source == "native" and inputs.get("python_frames_lost"):
        out.note = BLOBS_LOST
    elif source == "native" and inputs.get("python_blobs_damaged"):
        out.note = blobs_damaged(inputs)
    return out


def blobs_damaged(inputs: dict[str, object]) -> str:
    return (f"{int(inputs['python_blobs_damaged']):,} Python sample payloads could not be decoded (damaged, or a "  # type: ignore[call-overload]
            "layout nsysan does not know): their samples were skipped")


def call_sites_of(out: IdleAttribution, samples: Samples | None, cuda_api: pd.DataFrame, window: Window) -> None:
    """Fill ``out.site_calls`` and ``out.sites``."""
    out.site_calls = site_calls(samples, cuda_api, window)
    out.sites = aggregate_sites(out.site_calls)


LAUNCH_SHARE = 0.10  # a thread is a launching thread when it launched this share of the steady state's GPU work


def launching_threads(launches: pd.DataFrame, window: Window) -> list[tuple[int, int]]:
    """The (pid, tid) of the threads that launched at least ``LAUNCH_SHARE`` of the GPU operations
    whose launch call started in the window."""
    if launches is None or len(launches) == 0:
        return []
    st = launches["api_start_ns"].to_numpy()
    m = (st >= window.start_ns) & (st < window.end_ns) & (launches["tid"].to_numpy() >= 0)
    if not m.any():
        return []
    key = (launches["pid"].to_numpy(np.int64)[m] << 24) | launches["tid"].to_numpy(np.int64)[m]
    u, c = np.unique(key, return_counts=True)
    keep = u[c >= LAUNCH_SHARE * c.sum()]
    return sorted((int(k >> 24), int(k & 0xFFFFFF)) for k in keep)
