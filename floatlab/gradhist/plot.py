"""The figure of a gradient histogram: :func:`plot_histogram` and :meth:`GradHistogram.plot
<floatlab.gradhist.GradHistogram.plot>` draw it, and :mod:`floatlab.plotting` is its public
address (see there for an example). matplotlib is imported inside the functions: importing
this module, or ``floatlab``, never loads it.

>>> sorted(REGION_COLORS)
['normal', 'overflow', 'subnormal', 'undecided', 'zero']
"""

from __future__ import annotations

import math
import os
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from floatlab.exact import floor_log2, pow2
from floatlab.formats import FloatFormat, get_format
from floatlab.gradhist._classes import CLASSES, _as_scale, _deterministic, _thresholds
from floatlab.io import save_figure
from floatlab.text import percent, scale_text

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    # types only: the figure reads a histogram through its public methods
    from floatlab.gradhist import GradHistogram, Verdict

__all__ = ["REGION_COLORS", "plot_histogram"]

#: Background of each range of a format, and (darker) of the bars whose values land there.
REGION_COLORS: dict[str, tuple[str, str]] = {
    "zero": ("#f4c7c3", "#c0392b"),
    "subnormal": ("#fde9c4", "#e08e0b"),
    "normal": ("#d5ecd4", "#2e8b57"),
    "overflow": ("#e3d3ee", "#7d3c98"),
    "undecided": ("#ffffff", "#7f8c8d"),
}
_ZERO_COLOR = "#95a5a6"


def _log2(q: Fraction) -> float:
    """log2 of a positive rational without going through a float that could underflow."""
    e = floor_log2(q)
    return e + math.log2(float(q / pow2(e)))


def _ranges(fmt: FloatFormat, mode: str) -> list[tuple[str, float, float, str]]:
    """(class, lo, hi, label) on the log2 axis of the scaled value, for positive values."""
    (t1, c1), (t2, _c2), (t3, c3) = _thresholds(fmt, mode, False, True)
    a = _log2(t1) if t1 > 0 else -math.inf
    b, c = _log2(t2), _log2(t3)
    flush = f"below {float(t1):.3g}" if c1 else f"up to {float(t1):.3g}"
    over = f"from {float(t3):.6g}" if c3 else f"above {float(t3):.6g}"
    return [
        ("zero", -math.inf, a, f"flushed to zero ({flush})"),
        ("subnormal", a, b, f"subnormal, fewer bits (up to {fmt.smallest_normal:.3g})"),
        ("normal", b, c, f"normal ({fmt.smallest_normal:.3g} to {fmt.max:g})"),
        ("overflow", c, math.inf, f"overflow ({over})"),
    ]


def _panel(
    ax: Axes, h: GradHistogram, fmt: FloatFormat, scale: Fraction, mode: str, log: bool
) -> tuple[Verdict, list[Any]]:
    from matplotlib.patches import Patch
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    v = h.verdict(fmt, scale, mode)
    exps, per = h.binade_classes(fmt, scale, mode)
    shift = _log2(scale)
    total = max(h.total, 1)
    left = exps + shift  # binade [2^e, 2^(e+1)) of x is [e + shift, e + 1 + shift) on the axis
    ranges = _ranges(fmt, mode)
    data_lo = float(left[0]) if exps.size else ranges[1][1]
    data_hi = float(left[-1] + 1) if exps.size else ranges[3][1]
    lo = math.floor(min(data_lo, ranges[1][1]) - 3)
    hi = math.ceil(max(data_hi, ranges[3][1]) + 2)
    zero_at = lo - 2  # the bar of exact zeros stands apart, left of the axis
    for name, a, b, label in ranges:
        ax.axvspan(max(a, lo), min(b, hi), color=REGION_COLORS[name][0], zorder=0, label=label)
    bottom = np.zeros(exps.size)
    names = (*CLASSES, "undecided")
    for k, name in enumerate(names):
        share = 100 * per[:, k] / total
        if share.any():
            ax.bar(
                left,
                share,
                width=1.0,
                bottom=bottom,
                align="edge",
                color=REGION_COLORS[name][1],
                edgecolor="white",
                linewidth=0.3,
                zorder=2,
            )
        bottom += share
    handles, _labels = ax.get_legend_handles_labels()
    if h.zeros:
        zshare = 100 * h.zeros / total
        ax.bar([zero_at], [zshare], width=1.0, align="edge", color=_ZERO_COLOR, zorder=2)
        ax.annotate(
            "0",
            (zero_at + 0.5, zshare),
            xytext=(0, 2),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=8,
            color="#555555",
        )
        handles.append(Patch(color=_ZERO_COLOR, label="exact zeros (left bar, stay zero)"))
    ax.set_xlim(zero_at - 0.5, hi)
    ax.xaxis.set_major_locator(MaxNLocator(nbins=12, integer=True))

    def tick(val: float, _pos: int) -> str:
        return f"{int(val)}" if val > zero_at + 1 else ""

    ax.xaxis.set_major_formatter(FuncFormatter(tick))
    ax.set_xlabel("log2 |x|" if scale == 1 else f"log2 |x · {scale_text(scale)}|")
    ax.set_ylabel("share of all values (%)")
    if log:
        ax.set_yscale("log")
        shares = [100 * h.zeros / total, *(100 * per.sum(axis=1)[per.sum(axis=1) > 0] / total)]
        positive = [s for s in shares if s > 0]
        if positive:
            ax.set_ylim(min(positive) / 2, 150)
    t = v.total
    ax.set_title(
        f"{fmt.name} at scale {scale_text(scale)}: {percent(v.flushed, t)} flushed to zero, "
        f"{percent(v.subnormal, t)} subnormal, {percent(v.overflow, t)} overflow",
        fontsize=10,
    )
    ax.grid(axis="y", color="white", linewidth=0.6, zorder=1)
    return v, handles


def plot_histogram(
    h: GradHistogram,
    fmt: FloatFormat | str = "fp16",
    *,
    scale: float | Fraction | None = None,
    recommend: bool = True,
    headroom: int = 2,
    rounding: str = "rne",
    log: bool = True,
    path: str | os.PathLike[str] | None = None,
    title: str | None = None,
) -> Figure:
    """The histogram of ``h`` over the ranges of ``fmt``: one panel unscaled and, below it, one
    at ``scale`` (or, when ``scale`` is None and ``recommend`` is true, at the scale
    :meth:`~floatlab.gradhist.GradHistogram.recommend_scale` picks with ``headroom``; no second
    panel when that is 1). Bars are coloured by what the format makes of their values; the
    background shows its ranges. ``log`` puts the shares on a log axis. With ``path`` the figure
    is also written there (PNG, SVG or PDF, by suffix).

    >>> import numpy as np
    >>> from floatlab.gradhist import histogram
    >>> len(plot_histogram(histogram(np.ones(4)), "bf16").axes)
    1
    """
    from floatlab._figure import ShownFigure

    f = get_format(fmt)
    mode = _deterministic(rounding)
    scales = [Fraction(1)]
    if scale is not None:
        q = _as_scale(scale)
        if q != 1:
            scales.append(q)
    elif recommend:
        advice = h.recommend_scale(f, headroom=headroom, rounding=mode)
        if advice.log2_scale:
            scales.append(pow2(advice.log2_scale))
    fig = ShownFigure(figsize=(10, 3.4 * len(scales) + 1.4), layout="constrained")
    axes = fig.subplots(len(scales), 1, squeeze=False)[:, 0]
    handles: list[Any] = []
    for ax, q in zip(axes, scales, strict=True):
        _v, handles = _panel(ax, h, f, q, mode, log)
    fig.legend(handles=handles, loc="outside lower center", ncol=3, fontsize=8, frameon=False)
    extra = []
    if h.posinf + h.neginf + h.nan:
        extra.append(f"{h.posinf + h.neginf:,} inf and {h.nan:,} NaN not shown")
    dtypes = ", ".join(h.dtypes) or "no"
    head = title or f"Exponents of {h.total:,} {dtypes} values and the ranges of {f.name}"
    fig.suptitle(head + (f" ({'; '.join(extra)})" if extra else ""), fontsize=11)
    if path is not None:
        save_figure(fig, path, dpi=120)  # (no dates, no random names: the same bytes each run)
    return fig
