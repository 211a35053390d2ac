"""The explorers of lessons 02, 04 and 05: a number or a histogram drawn as a figure, with a
slider or two to move it. :class:`RoundingExplorer` sends one value through every rounding
mode, :class:`UpdateExplorer` asks whether ``w + u`` is still ``w``, and :class:`ScaleExplorer`
slides a loss scale over a gradient histogram.

>>> RoundingExplorer("float8_e4m3fn", 2.3).neighbours()
(2.25, 2.5)
"""

from __future__ import annotations

import html
import math
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from floatlab.codec import decode, decode_array, encode
from floatlab.formats import FloatFormat, get_format
from floatlab.rounding import MODE_DESCRIPTIONS, ROUNDING_MODES
from floatlab.widgets.base import Interactive, figure_html

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from floatlab.gradhist import GradHistogram, Verdict
    from floatlab.simulate import AddExplanation

__all__ = ["RoundingExplorer", "ScaleExplorer", "UpdateExplorer"]


# ---- lesson 02: where each rounding mode sends a value --------------------------------------------
def _values_between(fmt: FloatFormat, lo: float, hi: float) -> np.ndarray[Any, np.dtype[np.float64]]:
    """The finite values of a format (of at most 16 bits) in [lo, hi], ascending."""
    if fmt.bits > 16:
        raise ValueError(f"format {fmt.name} has {fmt.bits} bits: expected at most 16 to list its values")
    v = decode_array(np.arange(1 << fmt.bits, dtype=np.uint32), fmt)
    v = np.unique(v[np.isfinite(v)])
    return v[(v >= lo) & (v <= hi)]


class RoundingExplorer(Interactive):
    """Move ``x`` along the number line of a small format and see where every rounding mode sends it.

    Each deterministic mode picks one of the two neighbours of ``x``; stochastic rounding picks
    the upper one with probability equal to the distance from the lower one, in gaps.

    >>> r = RoundingExplorer("float8_e4m3fn", 2.3)
    >>> r.results()["rne"], r.results()["rup"], r.neighbours()
    (2.25, 2.5, (2.25, 2.5))
    >>> round(r.p_up(), 6)
    0.2
    """

    def __init__(self, fmt: FloatFormat | str = "float8_e4m3fn", x: float = 2.3) -> None:
        super().__init__()
        self.fmt = get_format(fmt)
        if self.fmt.bits > 16:
            raise ValueError(f"format {self.fmt.name}: expected a format of at most 16 bits")
        self.x = self._check(x)
        self._slider: Any = None

    def _check(self, x: float) -> float:
        x = float(x)
        if not (math.isfinite(x) and abs(x) <= self.fmt.max):
            raise ValueError(
                f"x={x!r}: expected a finite number within +-{self.fmt.max:g}, the range of {self.fmt.name}"
            )
        return x

    def set_x(self, x: float) -> dict[str, float]:
        """Move to ``x`` and return :meth:`results`."""
        self.x = self._check(x)
        self._refresh()
        return self.results()

    def results(self) -> dict[str, float]:
        """Where each deterministic mode (rne, rna, rtz, rup, rdown, rodd) sends ``x``."""
        return {
            m: decode(encode(self.x, self.fmt, m), self.fmt).value
            for m in ROUNDING_MODES
            if m != "stochastic"
        }

    def neighbours(self) -> tuple[float, float]:
        """The format values just below and just above ``x`` (equal when x is one of them)."""
        r = self.results()
        return r["rdown"], r["rup"]

    def p_up(self) -> float:
        """The probability that stochastic rounding picks the upper neighbour."""
        lo, hi = self.neighbours()
        return 0.0 if hi == lo else float((Fraction(self.x) - Fraction(lo)) / (Fraction(hi) - Fraction(lo)))

    def figure(self) -> Figure:
        """The number line around ``x``, with an arrow from x to each mode's result."""
        from matplotlib.figure import Figure

        lo, hi = self.neighbours()
        gap = (hi - lo) or float(decode(encode(self.x, self.fmt, "rup"), self.fmt).ulp or 1)
        vals = _values_between(self.fmt, lo - 2.5 * gap, hi + 2.5 * gap)
        fig = Figure(figsize=(8, 3.2), layout="constrained")
        ax = fig.subplots()
        ax.axhline(0, color="#444", lw=0.8, zorder=1)
        ax.plot(
            vals, np.zeros_like(vals), "|", ms=18, color="#333", zorder=2, label=f"{self.fmt.name} values"
        )
        ax.plot([self.x], [0], "o", color="#c0392b", ms=7, zorder=3, label=f"x = {self.x:g}")
        modes = [m for m in ROUNDING_MODES if m != "stochastic"]
        res = self.results()
        for i, m in enumerate(modes, 1):
            y = i * 0.5
            target = res[m]
            ax.annotate(
                "",
                xy=(target, y),
                xytext=(self.x, y),
                arrowprops={"arrowstyle": "-|>", "color": f"C{i - 1}", "lw": 1.5},
            )
            ax.plot([target], [y], "s", color=f"C{i - 1}", ms=5)
            ax.text(vals.min() if vals.size else lo, y, f"{m} ", ha="right", va="center", fontsize=9)
        p = self.p_up()
        ax.text(
            0.99,
            0.02,
            f"stochastic: {lo:g} with p = {1 - p:.3f}, {hi:g} with p = {p:.3f}",
            transform=ax.transAxes,
            ha="right",
            va="bottom",
            fontsize=9,
        )
        ax.set_ylim(-0.4, 0.5 * len(modes) + 0.5)
        ax.set_yticks([])
        ax.set_xlabel(f"value (the ticks are the {self.fmt.name} values)")
        ax.set_title(f"Where each rounding mode sends x = {self.x:g} in {self.fmt.name}", fontsize=11)
        ax.legend(loc="upper right", fontsize=8)
        for side in ("left", "right", "top"):
            ax.spines[side].set_visible(False)
        return fig

    def html(self) -> str:
        """The figure and a table of the modes."""
        cell = '<td style="text-align:left;padding:0 0.8em 0 0">'
        rows = "".join(
            f"<tr>{cell}{m}</td>{cell}{html.escape(MODE_DESCRIPTIONS[m])}</td>{cell}{v!r}</td></tr>"
            for m, v in self.results().items()
        )
        lo, hi = self.neighbours()
        p = self.p_up()
        rows += (
            f"<tr>{cell}stochastic</td>{cell}{html.escape(MODE_DESCRIPTIONS['stochastic'])}</td>"
            f"{cell}{lo!r} (p = {1 - p:.3f}) or {hi!r} (p = {p:.3f})</td></tr>"
        )
        head = '<th style="text-align:left">'
        table = (
            f'<table style="border-collapse:collapse"><tr>{head}mode</th>{head}</th>{head}result</th></tr>'
            f"{rows}</table>"
        )
        return figure_html(self.figure(), alt=f"rounding modes at x = {self.x:g}") + table

    def __repr__(self) -> str:
        parts = ", ".join(f"{m} {v:g}" for m, v in self.results().items())
        return f"RoundingExplorer({self.fmt.name}, x={self.x:g}: {parts})"

    def _controls(self) -> list[Any]:
        import ipywidgets as w

        top = min(self.fmt.max, 16.0)
        self._slider = w.FloatSlider(
            value=self.x,
            min=-top,
            max=top,
            step=top / 1600,
            readout_format=".4f",
            description="x",
            continuous_update=False,
            layout=w.Layout(width="40em"),
        )
        self._slider.observe(lambda change: self.set_x(change["new"]), names="value")
        return [self._slider]


# ---- lesson 04: does this update survive? ---------------------------------------------------------
class UpdateExplorer(Interactive):
    """A weight ``w`` and an update ``u`` of size ``|w| / ratio`` and sign ``sign``: is ``w + u``
    still ``w`` in the format?

    The sign matters at a power of two, where the gap below ``w`` is half the gap above it.

    >>> e = UpdateExplorer(1.0, 2048, "fp16")
    >>> e.update, e.lost              # 1 + 2^-11 is a tie, and the tie goes to the even 1
    (0.00048828125, True)
    >>> e.set(weight=1.5).lost        # the same ratio next to 1.5 survives
    False
    >>> e.set(weight=1.0, ratio=3000).lost, e.set(sign=-1).lost   # below 1 the gap is 2^-11
    (True, False)
    """

    def __init__(
        self, weight: float = 1.0, ratio: float = 2048.0, fmt: FloatFormat | str = "fp16", *, sign: int = 1
    ) -> None:
        super().__init__()
        self.fmt = get_format(fmt)
        self.weight = 1.0
        self.ratio = 2048.0
        self.sign = 1
        self._apply(weight, ratio, sign)

    def _apply(self, weight: float | None, ratio: float | None, sign: int | None = None) -> None:
        w = self.weight if weight is None else float(weight)
        r = self.ratio if ratio is None else float(ratio)
        sg = self.sign if sign is None else sign
        if not (math.isfinite(w) and w != 0):
            raise ValueError(f"weight={weight!r}: expected a finite nonzero number")
        if not (math.isfinite(r) and r >= 1):
            raise ValueError(
                f"ratio={ratio!r}: expected a finite number >= 1 (|weight| / |update|; sign= gives the sign)"
            )
        if isinstance(sg, bool) or sg not in (1, -1):
            raise ValueError(f"sign={sign!r}: expected 1 (a positive update) or -1 (a negative one)")
        self.weight, self.ratio, self.sign = w, r, int(sg)

    def set(
        self,
        *,
        weight: float | None = None,
        ratio: float | None = None,
        fmt: str | None = None,
        sign: int | None = None,
    ) -> UpdateExplorer:
        """Change any of the four and redraw; returns self."""
        if fmt is not None:
            self.fmt = get_format(fmt)
        self._apply(weight, ratio, sign)
        self._refresh()
        return self

    @property
    def update(self) -> float:
        """The update, ``sign * abs(weight) / ratio`` (in float64)."""
        return self.sign * abs(self.weight) / self.ratio

    def explanation(self) -> AddExplanation:
        """:func:`floatlab.simulate.explain_add` for ``weight + update``."""
        from floatlab.simulate import explain_add

        return explain_add(self.weight, self.update, self.fmt)

    @property
    def lost(self) -> bool:
        """True when ``w + u``, rounded to nearest even, is the stored ``w``."""
        return bool(self.explanation().swallowed)

    def figure(self) -> Figure:
        """The stored weight, its neighbours, the halfway points where rounding switches, and w + u."""
        from matplotlib.figure import Figure

        ex = self.explanation()
        w = ex.a_value
        d = decode(ex.a_code, self.fmt)
        up = decode(d.next_up, self.fmt).value if d.next_up is not None else w
        down = decode(d.next_down, self.fmt).value if d.next_down is not None else w
        exact = float(ex.exact_sum) if ex.exact_sum is not None else math.nan
        fig = Figure(figsize=(8, 2.4), layout="constrained")
        ax = fig.subplots()
        ax.axhline(0, color="#444", lw=0.8)
        ax.axvspan((down + w) / 2, (w + up) / 2, color="#f4c7c3", alpha=0.6, label="rounds back to w")
        ax.plot([down, w, up], [0, 0, 0], "|", ms=22, color="#333", label=f"{self.fmt.name} values")
        ax.plot(
            [exact], [0], "o", color="#c0392b" if ex.swallowed else "#2e8b57", ms=8, label="w + u (exact)"
        )
        ax.annotate("w", (w, 0), xytext=(0, 14), textcoords="offset points", ha="center")
        span = up - down
        ax.set_xlim(down - 0.1 * span, up + 0.1 * span)
        ax.ticklabel_format(axis="x", useOffset=False)  # show 1.0005, not 0.0005 and a "+1" aside
        ax.set_yticks([])
        ax.set_xlabel("value")
        verdict = "lost" if ex.swallowed else "kept"
        if ex.tie:
            verdict += " (a tie: ties to even)"
        sign = "+" if self.sign > 0 else "-"
        ax.set_title(
            f"{self.fmt.name}: w = {w:g}, u = {sign}|w| / {self.ratio:g} = {self.update:.3g}: "
            f"the update is {verdict}",
            fontsize=10,
        )
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
        for side in ("left", "right", "top"):
            ax.spines[side].set_visible(False)
        return fig

    def html(self) -> str:
        """The figure and the step-by-step explanation."""
        ex = self.explanation()
        colour = "#c0392b" if ex.swallowed else "#2e8b57"
        text = html.escape(str(ex))
        return (
            figure_html(self.figure(), alt="the weight, its neighbours and w + u")
            + f'<pre style="border-left:4px solid {colour};padding-left:0.6em">{text}</pre>'
        )

    def __repr__(self) -> str:
        return str(self.explanation())

    def _controls(self) -> list[Any]:
        import ipywidgets as w

        weight = w.FloatText(value=self.weight, description="weight w", layout=w.Layout(width="14em"))
        ratio = w.FloatLogSlider(
            value=self.ratio,
            base=2,
            min=6,
            max=14,
            step=0.125,
            description="w / u",
            continuous_update=False,
            readout_format=".5g",
            layout=w.Layout(width="34em"),
        )
        fmt = w.Dropdown(options=["fp16", "bf16", "fp32", "tf32"], value=self.fmt.name, description="format")
        sign = w.ToggleButtons(
            options=[("u > 0", 1), ("u < 0", -1)],
            value=self.sign,
            description="update",
            style={"button_width": "5em"},
        )
        message = w.HTML("")

        def apply(**kw: Any) -> None:
            try:
                self.set(**kw)
            except ValueError as e:
                message.value = f'<span style="color:#b00020">{html.escape(str(e))}</span>'
            else:
                message.value = ""

        weight.observe(lambda c: apply(weight=c["new"]), names="value")
        ratio.observe(lambda c: apply(ratio=c["new"]), names="value")
        fmt.observe(lambda c: apply(fmt=c["new"]), names="value")
        sign.observe(lambda c: apply(sign=c["new"]), names="value")
        return [w.HBox([weight, fmt]), w.HBox([ratio, sign]), message]


# ---- lesson 05: slide the loss scale over a gradient histogram ------------------------------------
class ScaleExplorer(Interactive):
    """Slide a power-of-two loss scale over a gradient histogram and watch the values move
    between flushed, subnormal, normal and overflow (:func:`floatlab.plotting.plot_histogram`).

    >>> import numpy as np
    >>> from floatlab.gradhist import histogram
    >>> s = ScaleExplorer(histogram(np.array([2.0**-30, 2.0**-10, 1.0])), "fp16", log2_scale=0)
    >>> s.verdict().flushed, s.set_scale(8).flushed
    (1, 0)
    """

    def __init__(
        self, h: GradHistogram, fmt: FloatFormat | str = "fp16", *, log2_scale: int | None = None
    ) -> None:
        super().__init__()
        self.h = h
        self.fmt = get_format(fmt)
        self.log2_scale = self._check(
            h.recommend_scale(self.fmt).log2_scale if log2_scale is None else log2_scale
        )

    @staticmethod
    def _check(k: int) -> int:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not -64 <= k <= 64:
            raise ValueError(f"log2_scale={k!r}: expected an integer from -64 to 64")
        return int(k)

    def set_scale(self, log2_scale: int) -> Verdict:
        """Use the scale 2^log2_scale; return the new :meth:`verdict`."""
        self.log2_scale = self._check(log2_scale)
        self._refresh()
        return self.verdict()

    def verdict(self) -> Verdict:
        """What the format does to the scaled values (:meth:`GradHistogram.verdict`)."""
        return self.h.verdict(self.fmt, 2.0**self.log2_scale)

    def figure(self) -> Figure:
        """The histogram unscaled and at the current scale."""
        from floatlab.plotting import plot_histogram

        return plot_histogram(self.h, self.fmt, scale=2.0**self.log2_scale, recommend=False)

    def html(self) -> str:
        """The figure and the verdict in words."""
        return (
            figure_html(self.figure(), dpi=80, alt=f"histogram at scale 2^{self.log2_scale}")
            + f"<div><code>{html.escape(str(self.verdict()))}</code></div>"
        )

    def __repr__(self) -> str:
        return str(self.verdict())

    def _controls(self) -> list[Any]:
        import ipywidgets as w

        slider = w.IntSlider(
            value=self.log2_scale,
            min=-8,
            max=40,
            description="log2 scale",
            continuous_update=False,
            layout=w.Layout(width="34em"),
        )
        fmt = w.Dropdown(
            options=["fp16", "bf16", "float8_e5m2", "float8_e4m3fn"],
            value=self.fmt.name,
            description="format",
        )

        def on_format(change: dict[str, Any]) -> None:
            self.fmt = get_format(change["new"])
            self._refresh()

        slider.observe(lambda c: self.set_scale(c["new"]), names="value")
        fmt.observe(on_format, names="value")
        return [w.HBox([slider, fmt])]
