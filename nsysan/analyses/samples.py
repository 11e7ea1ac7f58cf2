"""Who kept the GPU waiting: the CPU and Python samples taken while a device sat idle behind its host,
and where the CUDA calls came from.

From ``trace.samples.Samples`` and the analysis' idle gaps. A sample counts for a gap when it was taken
on the gap's process (``pid``) and submitting thread (``tid``), inside the gap, in the steady window,
and the gap's cause is the host (``host``/``sync``). **Python frames first**: when the trace holds
Python samples with their frames, they are attributed; else the native CPU samples
(``COMPOSITE_EVENTS`` + ``SAMPLING_CALLCHAINS``) are.

Per function, two numbers:

* ``self``: samples whose **own-code frame** is this function (see below): what the user's own code
  was running;
* ``inclusive``: samples with this function anywhere on the stack.

Own-code frame, Python: the innermost frame outside the interpreter's and site-packages' files
(``/lib/python3.X/``, ``site-packages``, ``dist-packages``, ``<frozen ...>``), else the innermost frame;
a comprehension or lambda counts for the function around it. Own-code frame, native: the innermost
frame of the best tier, tiers in this order: (0) a resolved symbol of the program's own modules;
(1) a resolved symbol of an installed library (``site-packages``, ``dist-packages``, conda, ``/usr/lib``,
``/lib``, ``/opt/nvidia``, ``/nix/store``, and Python extension modules ``*.cpython-*.so``: e.g. libtorch,
cuBLAS, OpenBLAS, numpy); (2) an unresolved
address in own code, (3) in a library; (4) the runtime below every program, never "self" unless
nothing else is on the stack: libc, libpthread, libm, libdl, librt, libstdc++, libgcc_s, the dynamic
loader, the kernel (``[kernel.kallsyms]``, ``[vdso]``, kernel-mode frames), the Python and Julia
interpreters (``python3.X``, ``libpython``, its ``lib-dynload`` modules, ``libjulia``), the CUDA driver and runtime stack
(``libcuda``, ``libcudart``, ``libcupti``, ``libnvidia-*``, ``libnvrtc``; and the statically linked
runtime by its symbols: ``cuda*`` API names and templates, ``__cudart*``, ``libcudart_static_*``), nsys' own injection
libraries, and nsys' markers (``[Unknown]``, ``[Broken backtraces]``, ``[Max depth]``). An unresolved
address is counted as ``[unresolved]`` in its module. A stack whose
own frame is the interpreter says so: only Python sampling can tell which Python function ran.

Each with its share of the samples and the sample count: short gaps hold few samples, so attribution is
over a whole gap class (the activity label the gap analysis gives), never extrapolated from a handful
(``MIN_SAMPLES``: fewer are counted and shown, not attributed). Besides the host-caused gaps as a whole,
each gap class gets its own attribution, and so does the steady loop's CPU time on the launching
thread(s) (every sample there over the steady window, not only in gaps).

Call sites: each CUDA call in the steady window with a Python backtrace (``--python-backtrace=cuda``,
joined to its API row by thread and start) or, without one, a native backtrace (``CUDA_CALLCHAINS`` of
its ``callchainId``, joined by process and correlation id), is counted under its own-code frame.
``missing_inputs`` says which inputs a trace lacks and the flag that adds each, in one place.
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
BLOBS_LOST = ("Python samples were recorded but exported without their frames: re-export with "
              "`nsys export --type sqlite --include-blobs=true report.nsys-rep`")
COLUMNS = ["function", "file", "line", "module", "self_samples", "self_share", "inclusive_samples", "inclusive_share"]
# The functions of an input pipeline that runs on the training thread: a map-style Dataset's item and
# batch access, collation and the DataLoader's own fetch (PyTorch, Lightning and HF all use it)
INPUT_FUNCTIONS = r"__getitem__|__getitems__|(default_)?collate(_fn)?|_next_data|fetch|_MapDatasetFetcher.*|__iter__"
TOP_STACKS = 10
STACK_FRAMES = 14  # frames shown per stack (innermost kept)

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


def missing_inputs(inputs: dict[str, Any] | None, tables: Any = ()) -> list[dict[str, str]]:
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


# -- own-code frames ---------------------------------------------------------------------------------

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


RUNTIME_MODULE = re.compile(
    r"(^|/)(libc|libpthread|libm|libdl|librt|libutil|libresolv|libgcc_s|libstdc\+\+|libc\+\+(abi)?|ld|ld-linux[^/]*|"
    r"libcuda|libcudart|libcupti|libnvidia-[^/]*|libnvrtc[^/]*|libnvrtc-builtins[^/]*|libToolsInjection[^/]*|"
    r"libpython[^/]*|libjulia[^/]*)([.-][^/]*)?$"
    r"|(^|/)python(\d(\.\d+)?)?[dmu]?$|(^|/)julia$|/lib/python\d\.\d+/lib-dynload/|^\[|kallsyms|^//anon|\.ko$|^$")
INTERPRETER_MODULE = re.compile(r"(^|/)(libpython[^/]*|python(\d(\.\d+)?)?[dmu]?|libjulia[^/]*|julia)$")
LIBRARY_MODULE = re.compile(r"site-packages|dist-packages|conda|/envs/|^/(usr/)?(local/)?lib(32|64|x32|exec)?/|"
                            r"^/opt/nvidia/|^/nix/store/|/nsight-systems|/cuda[-\d.]*/|\.cpython-\d+[^/]*\.so$|\.abi3\.so$")
_HEX = re.compile(r"^0x[0-9a-fA-F]+$")
# the CUDA runtime linked statically into a program (its API, its templates in cuda_runtime.h and its
# internals) is the runtime too, whatever module holds it
RUNTIME_SYMBOL = re.compile(r"^(cuda[A-Z]\w*(<.*>)?|__cudart\w*|libcudart_static_\w*|cudart::.*|"
                            r"cu(Launch|Mem|Ctx|Stream|Event|Module|Graph|Init|Device|Func|Library|Kernel)\w*)$")


def native_tier(symbol: str, module: str, unresolved: int) -> int:
    """0 own code, 1 an installed library, 2 unresolved own code, 3 unresolved library, 4 runtime.
    Remembered per frame (a capture's stacks repeat the same few thousand frames: waits_native's
    stacks asked 26,000 times for 346 frames), up to ``TIER_MEMO`` frames of short names."""
    key = (symbol, module, unresolved)
    t = _tiers.get(key)
    if t is None:
        t = _native_tier(symbol, module, unresolved)
        if len(_tiers) < TIER_MEMO and len(str(symbol)) + len(str(module)) < 1024:
            _tiers[key] = t
    return t


TIER_MEMO = 65_536
_tiers: dict[tuple[Any, Any, Any], int] = {}


def _native_tier(symbol: str, module: str, unresolved: int) -> int:
    if RUNTIME_MODULE.search(module or "") or RUNTIME_SYMBOL.match(symbol or ""):
        return 4
    lib = bool(LIBRARY_MODULE.search(module))
    if unresolved or _HEX.match(symbol or "") or not symbol or symbol.startswith("["):
        return 3 if lib else 2
    return 1 if lib else 0


UNRESOLVED = "[unresolved]"


def native_own_frame(stack: tuple[tuple[str, str, int], ...]) -> tuple[str, str, int] | None:
    """The innermost frame of the best tier (``native_tier``). An unresolved address counts as
    ``[unresolved]`` in its module (addresses alone would split one module's time into many rows)."""
    best, best_tier = None, 99
    for f in stack:
        t = native_tier(f[0], f[1], f[2])
        if t < best_tier:
            best, best_tier = f, t
            if t == 0:
                break
    if best is not None and (best[2] or _HEX.match(best[0] or "")):
        return (UNRESOLVED, best[1], best[2])
    return best


def short_symbol(symbol: str, limit: int = 100) -> str:
    """A C++ symbol without its parameter list (and return type): ``ns::Class::method``."""
    s = str(symbol).strip()
    s = s.removesuffix(" const")
    if s.endswith(")"):
        depth = 0
        for i in range(len(s) - 1, -1, -1):
            if s[i] == ")":
                depth += 1
            elif s[i] == "(":
                depth -= 1
                if depth == 0:
                    if i > 0 and not s[:i].endswith("operator"):
                        s = s[:i]
                    break
    # a return type before the name ("float ns::f<...>"): the last space outside template brackets
    depth, cut = 0, -1
    for i, ch in enumerate(s):
        if ch in "<({":
            depth += 1
        elif ch in ">)}" and not s[:i].endswith("operator-"):
            depth -= 1
        elif ch == " " and depth == 0 and not s[:i].endswith("operator"):
            cut = i
    if cut > 0:
        s = s[cut + 1:]
    if len(s) > 60:  # long template arguments: shown as <…>
        out: list[str] = []
        depth = 0
        for ch in s:
            if ch == "<" and not "".join(out).endswith("operator"):
                if depth == 0:
                    out.append("<…>")
                depth += 1
            elif ch == ">" and depth > 0:
                depth -= 1
            elif depth == 0:
                out.append(ch)
        s = "".join(out)
    return s if len(s) <= limit else s[: limit - 1] + "…"


def module_name(module: str) -> str:
    return str(module).rsplit("/", 1)[-1]


def where(r: Any) -> str:
    """'tokenize() waits.py:37' (Python) or 'generate_tensor_2D in a.out' (native) for a table row."""
    if r.get("module"):
        return f"{short_symbol(r['function'])} in {module_name(r['module'])}"
    loc = f" {str(r['file']).rsplit('/', 1)[-1]}:{int(r['line'])}" if r.get("file") else ""
    return f"{r['function']}(){loc}"


# -- attribution -------------------------------------------------------------------------------------


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


def _display(stack: tuple[tuple[str, str, int], ...], source: str) -> tuple[tuple[str, bool], ...]:
    """A stack for display, outermost first: (text, own code?) per frame; runs of library/runtime
    frames are folded into one '[N frames: module, ...]'."""
    own = own_frame(stack) if source == "python" else native_own_frame(stack)
    items: list[tuple[str, bool]] = []
    run: list[str] = []

    def flush() -> None:
        if run:
            mods = list(dict.fromkeys(run))
            more = ", ..." if len(mods) > 3 else ""
            items.append((f"[{len(run)} frame{'s' if len(run) > 1 else ''}: {', '.join(mods[:3])}{more}]", False))
            run.clear()

    for f in reversed(stack):
        if source == "python":
            lib = bool(LIBRARY_FILE.search(f[1] or ""))
            text = f"{f[0]} ({str(f[1]).rsplit('/', 1)[-1]})"
            mod = "python" if f[1].startswith("<") or "/lib/python3" in f[1] else (
                str(f[1]).split("site-packages/")[-1].split("/", 1)[0] if "-packages/" in f[1] else "library")
        else:
            lib = native_tier(f[0], f[1], f[2]) >= 3
            text = f"{short_symbol(f[0], 80)} ({module_name(f[1])})"
            mod = module_name(f[1]) or "?"
        is_own = own is not None and (f[0], f[1]) == (own[0], own[1])
        if lib and not is_own:
            run.append(mod)
            continue
        flush()
        items.append((text, is_own))
    flush()
    return tuple(items[-STACK_FRAMES:])


def _frame_key(f: tuple[str, str, int], source: str) -> tuple[str, str]:
    """(function, file or module) of a frame, an unresolved native address as ``[unresolved]``."""
    if source != "python" and (f[2] or _HEX.match(f[0] or "")):
        return (UNRESOLVED, f[1])
    return (f[0], f[1])


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
        for k in {_frame_key(fr, source) for fr in st}:
            incl[k] += c
        shown[_display(st, source)] += c
    rows = []
    for (fn, fi), c in self_c.items():
        py = source == "python"
        rows.append({"function": fn, "file": fi if py else "", "line": lines[(fn, fi)].most_common(1)[0][0] if py else 0,
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


def idle_attribution(samples: Any, gaps: pd.DataFrame, window: Any,
                     launch_threads: list[tuple[int, int]] | None = None, tables: Any = ()) -> IdleAttribution:
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
            out.note = "no CPU or Python sample was taken on the threads that launch the GPU work in the steady state"
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
            out.classes.append(_attribute(sub.loc[cls_of_sample == a], stacks, source, str(a), str(a) or "untraced CPU work",
                                          "gaps", int(sel.sum()), int(g["gap_ns"].to_numpy()[sel].sum())))
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
        out.note = f"no {what} sample fell inside the host-caused idle gaps of the steady state"
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


# -- call sites --------------------------------------------------------------------------------------

SITE_COLUMNS = ["api", "function", "file", "line", "module", "source", "calls", "total_ns"]
CALL_COLUMNS = ["pid", "tid", "start_ns", "correlation_id", "api", "dur_ns", "function", "file", "line", "module",
                "source"]


def site_calls(samples: Any, cuda_api: pd.DataFrame, window: Any) -> pd.DataFrame:
    """Each CUDA call of the steady window with a backtrace, with its own-code call site (``CALL_COLUMNS``):
    a Python backtrace (taken at the call's start on its thread) joined by (thread, start), else a
    native one (``CUDA_CALLCHAINS``) joined by (process, correlation id)."""
    empty = pd.DataFrame(columns=CALL_COLUMNS)
    if samples is None or len(cuda_api) == 0:
        return empty
    st_all = cuda_api["start_ns"].to_numpy()
    api = cuda_api.loc[(st_all >= window.start_ns) & (st_all < window.end_ns)]
    if len(api) == 0:
        return empty
    site: dict[int, tuple[str, str, int, str, str]] = {}  # api row position -> site
    bt = samples.backtraces
    if len(bt):
        key_api = pd.MultiIndex.from_arrays([api["tid"].to_numpy(np.int64), api["start_ns"].to_numpy(np.int64)])
        pos = pd.Series(np.arange(len(api)), index=key_api)
        pos = pos[~pos.index.duplicated(keep="first")]
        hit = pos.reindex(pd.MultiIndex.from_arrays([bt["tid"].to_numpy(np.int64), bt["ts_ns"].to_numpy(np.int64)])).to_numpy()
        for j, stack in zip(hit, bt["stack"].to_numpy()):
            if np.isnan(j):  # no API row in the window at that (thread, start)
                continue
            f = own_frame(samples.stacks[int(stack)])
            if f is not None:
                site.setdefault(int(j), (f[0], f[1], int(f[2]), "", "python"))
    cc = getattr(samples, "cuda_chains", None)
    if cc is not None and len(cc):
        key_api = pd.MultiIndex.from_arrays([api["pid"].to_numpy(np.int64), api["correlation_id"].to_numpy(np.int64)])
        pos = pd.Series(np.arange(len(api)), index=key_api)
        pos = pos[~pos.index.duplicated(keep="first")]
        hit = pos.reindex(pd.MultiIndex.from_arrays([cc["pid"].to_numpy(np.int64),
                                                     cc["correlation_id"].to_numpy(np.int64)])).to_numpy()
        for j, stack in zip(hit, cc["stack"].to_numpy()):
            if np.isnan(j) or int(j) in site:  # no API row, or a Python backtrace already names the site
                continue
            f = native_own_frame(samples.native_stacks[int(stack)])
            if f is not None:
                site[int(j)] = (f[0], "", 0, f[1], "native")
    if not site:
        return empty
    rows = np.array(sorted(site), dtype=np.int64)
    sub = api.iloc[rows]
    vals = [site[int(j)] for j in rows]
    return pd.DataFrame({"pid": sub["pid"].to_numpy(np.int64), "tid": sub["tid"].to_numpy(np.int64),
                         "start_ns": sub["start_ns"].to_numpy(np.int64),
                         "correlation_id": sub["correlation_id"].to_numpy(np.int64),
                         "api": sub["name"].astype(str).to_numpy(), "dur_ns": sub["dur_ns"].to_numpy(np.int64),
                         "function": [v[0] for v in vals], "file": [v[1] for v in vals], "line": [v[2] for v in vals],
                         "module": [v[3] for v in vals], "source": [v[4] for v in vals]}, columns=CALL_COLUMNS)


def aggregate_sites(calls: pd.DataFrame | None) -> pd.DataFrame:
    """Per (API name, call site): calls and their total API time (``SITE_COLUMNS``), most time first."""
    if calls is None or len(calls) == 0:
        return pd.DataFrame(columns=SITE_COLUMNS)
    g = calls.groupby(["api", "function", "file", "line", "module", "source"], sort=False)["dur_ns"].agg(["size", "sum"])
    out = g.reset_index().rename(columns={"size": "calls", "sum": "total_ns"})
    out["calls"] = out["calls"].astype(np.int64)
    out["total_ns"] = out["total_ns"].astype(np.int64)
    return out.sort_values(["total_ns", "api", "function"], ascending=[False, True, True], kind="stable")[
        SITE_COLUMNS].reset_index(drop=True)


def call_sites(samples: Any, cuda_api: pd.DataFrame, window: Any) -> pd.DataFrame:
    """Where the CUDA calls of the steady state came from: per (API name, own-code frame), calls and
    their total API time (``aggregate_sites`` of ``site_calls``)."""
    return aggregate_sites(site_calls(samples, cuda_api, window))


def site_text(r: Any) -> str:
    """'cudaStreamSynchronize from fetch_result() waits.py:67 (59 calls)' or
    'cudaMalloc from ns::alloc_block in libc10_cuda.so (12 calls)'."""
    return f"{r['api']} from {where(r)} ({int(r['calls'])} call{'s' if int(r['calls']) != 1 else ''})"


def site_note(sites: pd.DataFrame | None, api_names: tuple[str, ...] | None, n: int = 2,
              calls: pd.DataFrame | None = None, correlation: Any = None) -> str:
    """' Call sites (Python backtraces): fetch_result() waits.py:67 (72 calls), ...' for the given API
    names ('' without backtraces). With ``calls`` (``site_calls``) and ``correlation`` ((pid,
    correlation id) pairs), only those calls (e.g. the pageable copies' own calls); ``api_names`` None:
    every API name."""
    if correlation is not None and calls is not None and len(calls):
        keys = {(int(p), int(c)) for p, c in correlation}
        pk = list(zip(calls["pid"].tolist(), calls["correlation_id"].tolist()))
        sites = aggregate_sites(calls.loc[[k in keys for k in pk]])
    if sites is None or len(sites) == 0:
        return ""
    s = sites if api_names is None else sites.loc[sites["api"].isin(list(api_names))]
    if len(s) == 0:
        return ""
    recs = s.head(n).to_dict("records")
    kinds = sorted({r.get("source", "python") for r in recs})
    label = " and ".join({"python": "Python backtraces", "native": "CUDA backtraces"}[k] for k in kinds)
    return f" Call sites ({label}): " + "; ".join(site_text(r) for r in recs) + "."


def call_sites_of(out: IdleAttribution, samples: Any, cuda_api: pd.DataFrame, window: Any) -> None:
    """Fill ``out.site_calls`` and ``out.sites``."""
    out.site_calls = site_calls(samples, cuda_api, window)
    out.sites = aggregate_sites(out.site_calls)


LAUNCH_SHARE = 0.10  # a thread is a launching thread when it launched this share of the steady state's GPU work


def launching_threads(launches: pd.DataFrame, window: Any) -> list[tuple[int, int]]:
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


def calls_in(calls: pd.DataFrame | None, ranges: pd.DataFrame) -> pd.DataFrame:
    """The backtraced calls (``site_calls``) made inside these ranges on the ranges' own threads."""
    if calls is None or len(calls) == 0 or len(ranges) == 0:
        return pd.DataFrame(columns=CALL_COLUMNS)
    keep = np.zeros(len(calls), dtype=bool)
    st = calls["start_ns"].to_numpy()
    cp, ct = calls["pid"].to_numpy(), calls["tid"].to_numpy()
    for (pid, tid), r in ranges.groupby(["pid", "tid"], sort=False):
        m = np.flatnonzero((cp == pid) & (ct == tid))
        if not m.size:
            continue
        s0 = r["start_ns"].to_numpy(np.int64)
        e0 = r["end_ns"].to_numpy(np.int64)
        order = np.argsort(s0, kind="stable")
        s0, e0 = s0[order], np.maximum.accumulate(e0[order])
        k = np.searchsorted(s0, st[m], side="right") - 1
        ok = k >= 0
        ok[ok] = st[m][ok] < e0[k[ok]]
        keep[m[ok]] = True
    return calls.loc[keep]
