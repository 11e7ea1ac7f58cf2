"""The report's line plots: an SVG plot with both axes ticked and labelled, computed here in the
plot's own pixels (the template only draws them): time per iteration, and GPU utilization over the
capture."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from nsysan.units import fmt_ns


@dataclass
class Plot:
    """An SVG line plot with axes, drawn by the template: coordinates already in the plot's pixels."""
    width: int
    height: int
    left: int  # the plot area: x in [left, width - 8], y in [8, height - bottom]
    bottom: int
    series: list[tuple[str, str, str]]  # (css class, legend text, polyline points)
    dots: list[tuple[str, float, float, str]]  # (css class, x, y, title)
    xticks: list[tuple[float, str]]
    yticks: list[tuple[float, str]]
    xlabel: str
    ylabel: str
    label: str  # the aria label: what the plot shows


def nice_ticks(hi: float, n: int = 4) -> list[float]:
    """About ``n`` round tick values from 0 to at least ``hi`` (1, 2, 2.5 or 5 times a power of ten)."""
    if not hi > 0:
        return [0.0, 1.0]
    raw = hi / n
    mag = 10 ** np.floor(np.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    return [float(k * step) for k in range(int(np.ceil(hi / step - 1e-9)) + 1)]


def _fmt_s(ns: float) -> str:
    return fmt_ns(int(ns)) if ns else "0"


def line_plot(xs: np.ndarray, ys: np.ndarray, *, warm: np.ndarray | None = None, xlabel: str, ylabel: str,
              yfmt: Callable[[float], str], xfmt: Callable[[float], str], label: str, series: str,
              cls: str = "line", ymax: float | None = None, width: int = 600, height: int = 190) -> Plot | None:
    """A line plot with both axes ticked and labelled; warm-up points (``warm``) drawn as red dots
    and left out of the line, so a single warm-up iteration still shows."""
    if xs.size == 0:
        return None
    left, bottom, top, right = 80, 34, 8, 12
    warm = np.zeros(xs.size, dtype=bool) if warm is None else warm.astype(bool)
    steady_y = ys[~warm] if (~warm).any() else ys
    yt = nice_ticks(float(ymax if ymax is not None else steady_y.max()) or 1.0)
    ytop = yt[-1] or 1.0
    x0, x1 = float(xs.min()), float(xs.max())
    xspan = (x1 - x0) or 1.0
    pw, ph = width - left - right, height - top - bottom

    def px(x: float) -> float:
        return left + (x - x0) / xspan * pw

    def py(y: float) -> float:
        return top + ph - min(max(y, 0.0), ytop) / ytop * ph  # off the scale: drawn at the top

    pts = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y, w in zip(xs, ys, warm) if not w)
    dots = [("dot-warm", px(x), py(y), f"warm-up: {yfmt(y)}") for x, y, w in zip(xs, ys, warm) if w]
    if len(xs) <= 60:
        dots += [("dot", px(x), py(y), yfmt(y)) for x, y, w in zip(xs, ys, warm) if not w]
    xt = [x0 + v for v in nice_ticks(xspan, 5) if v <= xspan * (1 + 1e-9)] if x1 > x0 else [x0]
    plot_series = [(cls, series, pts)]
    if warm.any():
        off = int((ys[warm] > ytop).sum())
        plot_series.append(("dot-warm",
                            "warm-up (excluded)" + (f"; {off} off the scale, drawn at the top" if off else ""), ""))
    return Plot(width, height, left, bottom, plot_series, dots, [(px(x), xfmt(x)) for x in xt],
                [(py(y), yfmt(y)) for y in yt], xlabel, ylabel, label)


def iteration_plot(a: Any) -> Plot | None:
    it = a.iterations.table
    if not len(it):
        return None
    # the period (time since the previous completion on the thread), or the service time for a
    # sequence's first iteration (no previous completion)
    y = np.where(it["period_ns"].to_numpy() >= 0, it["period_ns"].to_numpy(), it["service_ns"].to_numpy())
    return line_plot(it["index"].to_numpy(float), y.astype(float), warm=it["warmup"].to_numpy(dtype=bool),
                     xlabel=f"iteration ('{a.iterations.range_name}')", ylabel="time per iteration",
                     yfmt=_fmt_s, xfmt=lambda v: f"{v:,.0f}", series="period (time between completions)",
                     label="time per iteration, by iteration")


def util_plot(a: Any) -> Plot | None:
    u = a.utilization
    if not len(u):
        return None
    u0 = u.groupby("bin_start_ns", sort=True)["busy_frac"].max()
    t = u0.index.to_numpy(float) - a.capture.start_ns
    return line_plot(t, u0.to_numpy(float) * 100, xlabel="time since capture start", ylabel="GPU busy",
                     yfmt=lambda v: f"{v:.0f}%", xfmt=_fmt_s, series="busy (the busiest GPU, per bin)",
                     label="GPU utilization over the capture", cls="line util", ymax=100.0, height=160)
