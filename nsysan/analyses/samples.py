"""Who kept the GPU waiting: the Python samples taken while a device sat idle behind its host.

From ``trace.samples.Samples`` (Python periodic samples, with frames) and the analysis' idle gaps:
a sample counts for a gap when it was taken on the gap's process (``pid``) and submitting thread
(``tid``), inside the gap, in the steady window, and the gap's cause is the host (``host``/``sync``).

Per function, two numbers, Python frames only:

* ``self``: samples whose **own-code frame** is this function: the innermost frame outside the
  interpreter's and site-packages' files (``/lib/python3.X/``, ``site-packages``, ``dist-packages``,
  ``<frozen ...>``), else the innermost frame: what the user's own code was running (a
  comprehension or lambda counts for the function around it);
* ``inclusive``: samples with this function anywhere on the stack.

Each with its share of the samples in the gaps, the most frequent line, and the sample count:
short gaps hold few samples, so attribution is over the whole gap class, never extrapolated from a
handful (``MIN_SAMPLES``). ``idle_attribution`` returns the table and a summary line; with no Python
samples it says which input is missing and the flag that adds it.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

LIBRARY_FILE = re.compile(r"/lib/python3\.\d+/|site-packages|dist-packages|^<frozen |^<string>")
MIN_SAMPLES = 10
NO_SAMPLES = ("no CPU or Python samples in this trace: record with `nsys profile -s process-tree` (for Python, "
              "add `--python-sampling=true` and export with `--include-blobs=true`)")
COLUMNS = ["function", "file", "line", "self_samples", "self_share", "inclusive_samples", "inclusive_share"]


@dataclass
class IdleAttribution:
    table: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=COLUMNS))
    samples_in_gaps: int = 0
    gap_ns: int = 0
    note: str = ""
    inputs: dict[str, Any] = field(default_factory=dict)
    sites: pd.DataFrame | None = None  # call_sites: where the steady state's CUDA calls came from

    def top(self, n: int = 3) -> str:
        """'tokenize() waits.py:38 (62% of 140 samples), ...' for messages ('' without enough samples)."""
        if self.samples_in_gaps < MIN_SAMPLES or len(self.table) == 0:
            return ""
        parts = []
        for _, r in self.table.head(n).iterrows():
            where = f"{str(r['file']).rsplit('/', 1)[-1]}:{int(r['line'])}" if r["file"] else ""
            parts.append(f"{r['function']}() {where} ({r['self_share']:.0%})".replace("  ", " "))
        return ", ".join(parts) + f" of {self.samples_in_gaps} Python samples"


INNER = ("<genexpr>", "<listcomp>", "<dictcomp>", "<setcomp>", "<lambda>")


def own_frame(stack: tuple[tuple[str, str, int], ...]) -> tuple[str, str, int] | None:
    """The innermost frame of the user's own code (not the interpreter's or an installed package's);
    a comprehension or lambda counts for the function around it (same file), at its own line."""
    for i, f in enumerate(stack):
        if not LIBRARY_FILE.search(f[1] or ""):
            j = i
            while stack[j][0] in INNER and j + 1 < len(stack) and stack[j + 1][1] == f[1]:
                j += 1
            return (stack[j][0], f[1], f[2])
    return stack[0] if stack else None


def idle_attribution(samples: Any, gaps: pd.DataFrame, window: Any) -> IdleAttribution:
    inputs = dict(samples.inputs) if samples is not None else {}
    out = IdleAttribution(inputs=inputs)
    if samples is None or len(samples.python) == 0:
        if inputs.get("python_frames_lost"):
            out.note = ("Python samples were recorded but exported without their frames: re-export with "
                        "`nsys export --type sqlite --include-blobs=true report.nsys-rep`")
        elif inputs.get("cpu_samples"):
            out.note = (f"{inputs['cpu_samples']:,} native CPU samples but no Python samples (nsysan does not "
                        "attribute native stacks yet): for Python, record with `--python-sampling=true` and export "
                        "with `--include-blobs=true`")
        else:
            out.note = NO_SAMPLES
        return out
    g = gaps
    if len(g):
        g = g.loc[g["cause"].isin(["host", "sync"]).to_numpy() & (g["start_ns"].to_numpy() >= window.start_ns)
                  & (g["end_ns"].to_numpy() <= window.end_ns)]
    out.gap_ns = int(g["gap_ns"].sum()) if len(g) else 0
    py = samples.python
    hit = np.zeros(len(py), dtype=bool)
    ts, spid, stid = py["ts_ns"].to_numpy(), py["pid"].to_numpy(), py["tid"].to_numpy()
    for (pid, tid), gg in g.groupby(["pid", "tid"], sort=True):
        m = np.flatnonzero((spid == pid) & (stid == tid))
        if not m.size:
            continue
        s, e = gg["start_ns"].to_numpy(), gg["end_ns"].to_numpy()
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
        k = np.searchsorted(s, ts[m], side="right") - 1
        ok = k >= 0
        ok[ok] = ts[m][ok] < e[k[ok]]
        hit[m[ok]] = True
    stacks = [samples.stacks[i] for i in py["stack"].to_numpy()[hit]]
    n = len(stacks)
    out.samples_in_gaps = n
    if n == 0:
        out.note = "no Python sample fell inside the host-caused idle gaps of the steady state"
        return out
    self_c: Counter[tuple[str, str]] = Counter()
    lines: dict[tuple[str, str], Counter[int]] = {}
    incl: Counter[tuple[str, str]] = Counter()
    for st in stacks:
        f = own_frame(st)
        if f is not None:
            key = (f[0], f[1])
            self_c[key] += 1
            lines.setdefault(key, Counter())[f[2]] += 1
        for key in {(fr[0], fr[1]) for fr in st}:
            incl[key] += 1
    rows = [{"function": fn, "file": fi, "line": lines[(fn, fi)].most_common(1)[0][0], "self_samples": c,
             "self_share": round(c / n, 4), "inclusive_samples": incl[(fn, fi)],
             "inclusive_share": round(incl[(fn, fi)] / n, 4)} for (fn, fi), c in self_c.items()]
    out.table = pd.DataFrame(rows, columns=COLUMNS).sort_values(
        ["self_samples", "function", "file"], ascending=[False, True, True], kind="stable").reset_index(drop=True)
    if n < MIN_SAMPLES:
        out.note = f"only {n} Python sample(s) in the idle gaps: too few to attribute"
    return out


SITE_COLUMNS = ["api", "function", "file", "line", "calls", "total_ns"]


def call_sites(samples: Any, cuda_api: pd.DataFrame, window: Any) -> pd.DataFrame:
    """Where the CUDA calls of the steady state came from: each Python backtrace of a CUDA call
    (``--python-backtrace=cuda``, taken at the call's start on its thread) joined to its API row by
    (thread, start); per (API name, own-code frame): calls and their total API time."""
    if samples is None or len(samples.backtraces) == 0 or len(cuda_api) == 0:
        return pd.DataFrame(columns=SITE_COLUMNS)
    api = cuda_api.loc[(cuda_api["start_ns"].to_numpy() >= window.start_ns)
                       & (cuda_api["start_ns"].to_numpy() < window.end_ns)]
    bt = samples.backtraces
    key_api = pd.MultiIndex.from_arrays([api["tid"].to_numpy(np.int64), api["start_ns"].to_numpy(np.int64)])
    pos = pd.Series(np.arange(len(api)), index=key_api)
    pos = pos[~pos.index.duplicated(keep="first")]
    key_bt = pd.MultiIndex.from_arrays([bt["tid"].to_numpy(np.int64), bt["ts_ns"].to_numpy(np.int64)])
    hit = pos.reindex(key_bt).to_numpy()
    rows: dict[tuple[str, str, str, int], list[int]] = {}
    names, durs = api["name"].astype(str).to_numpy(), api["dur_ns"].to_numpy()
    for j, stack in zip(hit, bt["stack"].to_numpy()):
        if j != j:  # NaN: no API row in the window at that (thread, start)
            continue
        f = own_frame(samples.stacks[int(stack)])
        if f is None:
            continue
        k = (names[int(j)], f[0], f[1], int(f[2]))
        r = rows.setdefault(k, [0, 0])
        r[0] += 1
        r[1] += int(durs[int(j)])
    out = pd.DataFrame([{"api": a, "function": fn, "file": fi, "line": ln, "calls": c, "total_ns": t}
                        for (a, fn, fi, ln), (c, t) in rows.items()], columns=SITE_COLUMNS)
    return out.sort_values(["total_ns", "api", "function"], ascending=[False, True, True], kind="stable").reset_index(drop=True)


def site_note(sites: pd.DataFrame | None, api_names: tuple[str, ...], n: int = 2) -> str:
    """' Called from fetch_result() waits.py:67 (72 calls), ...' for the given API names ('' without backtraces)."""
    if sites is None or len(sites) == 0:
        return ""
    s = sites.loc[sites["api"].isin(list(api_names))]
    if len(s) == 0:
        return ""
    parts = [f"{r['api']} from {r['function']}() {str(r['file']).rsplit('/', 1)[-1]}:{int(r['line'])} "
             f"({int(r['calls'])} calls)" for _, r in s.head(n).iterrows()]
    return " Call sites (Python backtraces): " + "; ".join(parts) + "."
