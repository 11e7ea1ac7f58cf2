"""What a rule reads of its window (``ctx.window``: the steady state, else the whole capture): the
frames sliced to it, its iterations and gaps, and which events in it are one-time costs rather than
a loop's."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from nsysan.analyses.gpu import in_window
from nsysan.rules._base import RuleContext

ONE_TIME_OUTLIER = 20.0  # a gap this many times its group's median is a one-time cost, not a loop's
# activities that are setup by their nature (JIT compiles, module loads, initialisation, autotuning)
ONE_TIME_NAMES = re.compile(r"compil|\bjit|nvrtc|CommInit|\binit|initiali[sz]|load(ing)?\b|LoadData|autotun|"
                            r"warm.?up|build", re.I)


def steady(df: pd.DataFrame, ctx: RuleContext) -> pd.DataFrame:
    return in_window(df, ctx.window) if len(df) else df


def has_gpu_activity(ctx: RuleContext) -> bool:
    """The trace holds GPU activity (kernels, graph launches, copies or memsets). WSL2 exports and
    ``-t osrt`` captures have none: rules that judge GPU time stay silent there."""
    return len(ctx.a.ops) > 0


def steady_iterations(ctx: RuleContext) -> pd.DataFrame:
    """The steady-state iterations (start_ns, end_ns, ...), or an empty frame without an iteration model."""
    it = ctx.a.iterations
    t = it.table
    if it.steady is None or len(t) == 0 or "warmup" not in t:
        return pd.DataFrame(columns=["start_ns", "end_ns"])
    return t.loc[~t["warmup"].to_numpy(dtype=bool)]


def window_gaps(ctx: RuleContext, causes: tuple[str, ...] | None = None,
                columns: list[str] | None = None) -> pd.DataFrame:
    """The gaps inside the window (of ``causes``), only ``columns`` of them when given (a launch
    loop's gaps run to millions: a rule copies only what it reads)."""
    g = ctx.a.gaps
    if len(g) == 0:
        return g
    rows = window_gap_rows(ctx, causes)
    if columns is not None:
        g = g[columns]
    return g if len(rows) == len(g) else g.iloc[rows]


def window_gap_rows(ctx: RuleContext, causes: tuple[str, ...] | None = None) -> np.ndarray:
    """Positions in ``ctx.a.gaps`` of the gaps ``window_gaps`` returns, ascending."""
    g = ctx.a.gaps
    w = ctx.window
    m = (g["start_ns"].to_numpy() >= w.start_ns) & (g["end_ns"].to_numpy() <= w.end_ns)
    if causes is not None:
        m &= g["cause"].isin(list(causes)).to_numpy()
    return np.flatnonzero(m)


def one_time_mask(ctx: RuleContext, keys: pd.Series, sizes: np.ndarray, starts: np.ndarray | None = None) -> np.ndarray:
    """Which events (gaps, calls) are one-time costs rather than a loop's: those of a key (activity
    label, call name) that occurs fewer than max(3, half the steady iterations of the longest
    iteration sequence: with several ranks or threads, one loop's) times, those whose
    key names setup work (``ONE_TIME_NAMES``: compile, JIT, module load, init, autotune, warm-up,
    build), and outliers over ``ONE_TIME_OUTLIER`` x their key's median (a JIT compile among
    ordinary gaps) unless such outliers of their key recur as often as a loop's events do (with
    ``starts``, the events' times: in as many distinct steady iterations, not as many events: one
    slow step's many long gaps are one occurrence)."""
    n = len(keys)
    if n == 0:
        return np.zeros(0, dtype=bool)
    it = steady_iterations(ctx)
    per_seq = int(it.groupby(["pid", "tid"]).size().max()) if len(it) else 0
    need = max(3, math.ceil(per_seq / 2))
    codes, uniq = pd.factorize(keys.astype(str), sort=True)
    counts = np.bincount(codes)
    setup = np.array([bool(ONE_TIME_NAMES.search(str(u))) for u in uniq], dtype=bool)
    one = (counts[codes] < need) | setup[codes]
    sizes = np.asarray(sizes, dtype=np.float64)
    med = np.zeros(len(counts))
    for c in np.flatnonzero(counts >= need).tolist():
        med[c] = float(np.median(sizes[codes == c]))
    big = sizes > ONE_TIME_OUTLIER * np.maximum(med[codes], 1.0)
    # large ones that themselves recur (a data load each step among the slivers of untraced CPU work
    # between launches, in a trace whose ranges do not tell them apart) are the loop's, not outliers
    if starts is not None and len(it):
        seq = it.groupby(["pid", "tid"]).size().idxmax()  # the longest sequence's iterations
        its = np.sort(it.loc[(it["pid"] == seq[0]) & (it["tid"] == seq[1]), "start_ns"].to_numpy(np.int64))
        where = np.searchsorted(its, np.asarray(starts, dtype=np.int64)[big], side="right")
        pairs = np.unique(codes[big].astype(np.int64) * (len(its) + 1) + where)  # (key, iteration), once each
        recurring = np.bincount(pairs // (len(its) + 1), minlength=len(counts)) >= need
    else:
        recurring = np.bincount(codes[big], minlength=len(counts)) >= need
    return one | (big & ~recurring[codes])


def recurrence_keys(ctx: RuleContext, labels: pd.Series) -> pd.Series:
    """Gap activity labels as ``one_time_mask`` keys: CPU time inside the iteration range or a range
    around iterations (a timed region, an enclosing level) is the loop's own untraced work, however
    the gap was labelled ('nvtx:infer', 'mostly untraced CPU work' and 'untraced CPU work' are one
    key): a per-step gap keeps its key whether or not the program annotated its loop."""
    it = ctx.a.iterations
    loop = {str(it.range_name)} if it.range_name else set()
    loop |= {str(r.get("name")) for r in (it.timed_regions or [])}
    loop |= {str(lv.get("name")) for lv in (it.levels or []) if lv.get("name")}
    words = labels.astype(str).str.replace(r"^mostly ", "", regex=True)
    inside = words.str.startswith("nvtx:") & words.str[5:].isin(loop)
    return words.where(~inside, "untraced CPU work")
