"""Interactive controls for the lessons, each with a static view that reads well without a kernel.

Every control here is a plain Python object that holds its state (a format, a code, a value, a
loss scale), changes it through ordinary methods, and shows it in two ways:

* **static**: ``_repr_html_`` (and ``text/plain``) draws the current state: bit boxes and the
  decoded value, a number line, a histogram. That is what a rendered page (the docs, a
  notebook viewer) shows, and what a notebook without ipywidgets shows.
* **live**: in a running Jupyter kernel with ipywidgets installed, displaying the object shows
  an ipywidgets control (buttons, sliders) next to the same drawing, redrawn on every change.
  :meth:`Interactive.widget` builds it (ipywidgets is imported there, never at module level).

Set the environment variable ``FLOATLAB_WIDGETS=static`` to get the static view even in a live
kernel (for a docs build that executes the notebooks but keeps no widget state).

>>> t = BitToggler("fp16", 0x3C00)
>>> t.decoded.value, t.toggle(14).value, t.hex
(1.0, inf, '0x7C00')
>>> t.set_format("bf16").hex       # inf is inf in every format that has it
'0x7F80'
"""

from __future__ import annotations

import base64
import html
import io
import math
import os
import sys
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from floatlab.codec import Decoded, decode, decode_array, encode
from floatlab.formats import FloatFormat, get_format
from floatlab.rounding import MODE_DESCRIPTIONS, ROUNDING_MODES

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from floatlab.gradhist import GradHistogram, Verdict
    from floatlab.simulate import AddExplanation

__all__ = [
    "LESSON_FORMATS",
    "BitToggler",
    "Interactive",
    "RoundingExplorer",
    "ScaleExplorer",
    "UpdateExplorer",
    "figure_html",
    "is_live",
]

#: The formats the bit toggler offers: the four of lesson 01 and the other fp8.
LESSON_FORMATS: tuple[str, ...] = ("fp32", "fp16", "bf16", "float8_e4m3fn", "float8_e5m2")

# sign, exponent, fraction: (background, border), the colours of Decoded's HTML bit boxes
_FIELD_COLOURS = {
    "sign": ("#cfe0ff", "#2f62c9"),
    "exponent": ("#cdf2d2", "#23873a"),
    "fraction": ("#ffd8cc", "#c8471f"),
}
_STATIC_NOTE = (
    '<div style="font-size:0.8em;color:#777;margin-top:0.3em">'
    "Static view: run the notebook to change it interactively.</div>"
)


def is_live() -> bool:
    """True when displaying a control should show the ipywidgets version: inside a running
    Jupyter kernel, with ipywidgets installed and ``FLOATLAB_WIDGETS`` not set to ``static``.

    >>> is_live()   # a plain interpreter (or a doctest) has no kernel
    False
    """
    if os.environ.get("FLOATLAB_WIDGETS", "").strip().lower() == "static":
        return False
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    shell = ipython.get_ipython()
    if shell is None or getattr(shell, "kernel", None) is None:
        return False
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return True


def figure_html(fig: Figure, *, dpi: int = 100, alt: str = "") -> str:
    """``fig`` as an ``<img>`` tag holding a base64 PNG: a drawing that needs no kernel to show.

    >>> from matplotlib.figure import Figure
    >>> fig = Figure(figsize=(1, 1)); _ = fig.subplots().plot([0, 1])
    >>> figure_html(fig, alt="a line").startswith('<img alt="a line" src="data:image/png;base64,')
    True
    """
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}" style="max-width:100%">'


class Interactive:
    """Base of the lesson controls: a static HTML view of the current state, and an ipywidgets
    control built on demand that redraws that view whenever the state changes.

    A subclass implements :meth:`html` (the drawing), :meth:`_controls` (the ipywidgets inputs
    that change the state) and :meth:`__repr__` (the plain-text view).

    >>> t = BitToggler("fp16", 0x3C00)   # a subclass: the bits of 1.0 in fp16
    >>> isinstance(t, Interactive), t.html().startswith("<div"), t.toggle(14).description
    (True, True, 'infinity (positive)')
    """

    def __init__(self) -> None:
        self._widget: Any = None
        self._view: Any = None

    # ---- the views -----------------------------------------------------------------------------
    def html(self) -> str:
        """The current state drawn as HTML (no kernel needed to show it)."""
        raise NotImplementedError

    def _repr_html_(self) -> str:
        return self._static(self.html())

    def _static(self, drawn: str) -> str:
        return f'<div class="floatlab-static">{drawn}{_STATIC_NOTE}</div>'

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        """Static HTML and text always; the ipywidgets view as well when :func:`is_live`.

        A front end that can show widgets (JupyterLab, Notebook 7, VS Code) picks the widget;
        one that cannot (a docs page, GitHub's viewer) picks the HTML.
        """
        drawn = self.html()  # drawn once, for both views (a figure takes a while to render)
        bundle: dict[str, Any] = {"text/plain": repr(self), "text/html": self._static(drawn)}
        if is_live():
            widget_bundle = self._build(drawn)._repr_mimebundle_()
            bundle.update({k: v for k, v in widget_bundle.items() if k != "text/plain"})
        return bundle

    # ---- the live control ----------------------------------------------------------------------
    def widget(self) -> Any:
        """The ipywidgets control (built once): the inputs, then the drawing of the state."""
        return self._build(None)

    def _build(self, drawn: str | None) -> Any:
        if self._widget is None:
            import ipywidgets as w

            self._view = w.HTML(self.html() if drawn is None else drawn)
            self._view.add_class("floatlab-view")
            self._widget = w.VBox([*self._controls(), self._view])
            self._widget.add_class(f"floatlab-{type(self).__name__.lower()}")
        return self._widget

    def _controls(self) -> list[Any]:
        raise NotImplementedError

    def _refresh(self) -> None:
        """Redraw the live view after a change of state (nothing to do when there is none)."""
        if self._view is not None:
            self._view.value = self.html()


# ---- lesson 01: the bit toggler -------------------------------------------------------------------
class BitToggler(Interactive):
    """Click the bits of a code and watch its value, class and neighbours change.

    ``code`` (an integer bit pattern) or ``value`` (a number or a numeric string, rounded to
    nearest even) sets the start; the default is 1. :meth:`toggle` flips one bit (bit 0 is the
    last fraction bit), :meth:`set_format` converts the value into another format,
    :meth:`next_up` and :meth:`next_down` step to the neighbours.

    >>> t = BitToggler("fp16", value="65504")
    >>> t.hex, t.decoded.description
    ('0x7BFF', 'normal, the largest finite fp16')
    >>> t.toggle(0).value, t.next_up().value
    (65472.0, 65504.0)
    >>> BitToggler("fp16").toggle(16)
    Traceback (most recent call last):
    ...
    ValueError: bit 16 does not exist in fp16: expected a bit index from 0 to 15
    """

    def __init__(
        self,
        fmt: FloatFormat | str = "fp16",
        code: int | None = None,
        *,
        value: float | str | Fraction | None = None,
        formats: Sequence[str] = LESSON_FORMATS,
    ) -> None:
        super().__init__()
        self.fmt = get_format(fmt)
        self.formats = tuple(get_format(f).name for f in formats)
        if code is not None and value is not None:
            raise ValueError("BitToggler: give code= or value=, not both")
        if code is None:
            code = int(encode(1 if value is None else value, self.fmt))
        self.code = decode(code, self.fmt).code  # checks that the code fits the format
        self._bits: list[Any] = []
        self._bit_row: Any = None
        self._format_menu: Any = None
        self._value_box: Any = None
        self._message: Any = None

    @property
    def decoded(self) -> Decoded:
        """The current code taken apart (:func:`floatlab.decode`)."""
        return decode(self.code, self.fmt)

    @property
    def value(self) -> float:
        """The current value as a float64."""
        return self.decoded.value

    @property
    def hex(self) -> str:
        """The current code in hexadecimal."""
        return self.decoded.hex

    def toggle(self, bit: int) -> Decoded:
        """Flip ``bit`` (0 = the last fraction bit, ``bits - 1`` = the sign) and return the result.

        >>> BitToggler("fp16", 0x3C00).toggle(15).value
        -1.0
        """
        n = self.fmt.bits
        if isinstance(bit, bool) or not isinstance(bit, (int, np.integer)) or not 0 <= bit < n:
            raise ValueError(
                f"bit {bit!r} does not exist in {self.fmt.name}: expected a bit index from 0 to {n - 1}"
            )
        return self._set(self.code ^ (1 << int(bit)))

    def set_code(self, code: int) -> Decoded:
        """Show ``code`` (checked to fit the format).

        >>> BitToggler("bf16").set_code(0x3F80).value
        1.0
        """
        return self._set(decode(code, self.fmt).code)

    def set_value(self, value: float | str | Fraction) -> Decoded:
        """Store ``value`` in the current format (round to nearest even) and show it.

        >>> BitToggler("fp16").set_value("0.1").decimal
        '0.0999755859375'
        """
        return self._set(int(encode(value, self.fmt)))

    def set_format(self, fmt: FloatFormat | str) -> Decoded:
        """Switch to ``fmt``, carrying the current value over (round to nearest even; a NaN stays NaN).

        >>> BitToggler("fp32", value="0.1").set_format("fp16").decimal
        '0.0999755859375'
        """
        new = get_format(fmt)
        d = self.decoded
        if d.kind == "nan":
            code = new.nan_code
            if code is None:
                raise ValueError(
                    f"format {new.name} has no NaN: expected a format that can hold the NaN shown"
                )
        else:
            code = int(encode(d.exact if d.exact is not None else d.value, new))
        self.fmt = new
        return self._set(code)

    def next_up(self) -> Decoded:
        """Step to the next larger value (IEEE nextUp); stay put where there is none.

        >>> BitToggler("fp16", 0x7BFF).next_up().value
        inf
        """
        up = self.decoded.next_up
        return self._set(self.code if up is None else up)

    def next_down(self) -> Decoded:
        """Step to the next smaller value (IEEE nextDown); stay put where there is none.

        >>> BitToggler("fp16", 0x0000).next_down().hex
        '0x8001'
        """
        down = self.decoded.next_down
        return self._set(self.code if down is None else down)

    def _set(self, code: int) -> Decoded:
        self.code = code
        self._refresh()
        return self.decoded

    # ---- views ---------------------------------------------------------------------------------
    def html(self) -> str:
        """The decoded code: coloured bit boxes, the value with its formula, class, ulp and neighbours.

        >>> "65504" in BitToggler("fp16", 0x7BFF).html()
        True
        """
        return f'<div class="floatlab-decoded">{self.decoded._repr_html_()}</div>'

    def __repr__(self) -> str:
        return self.decoded.report()

    def _field_of(self, bit: int) -> str:
        m = self.fmt.mantissa_bits
        if bit == self.fmt.bits - 1:
            return "sign"
        return "fraction" if bit < m else "exponent"

    def _controls(self) -> list[Any]:
        import ipywidgets as w

        self._format_menu = w.Dropdown(
            options=list(dict.fromkeys([*self.formats, self.fmt.name])),
            value=self.fmt.name,
            description="format",
            layout=w.Layout(width="16em"),
        )
        self._format_menu.observe(self._on_format, names="value")
        self._value_box = w.Text(
            value="",
            placeholder="type a number, press Enter",
            description="value",
            continuous_update=False,
            layout=w.Layout(width="20em"),
        )
        self._value_box.observe(self._on_value, names="value")
        down = w.Button(
            description="next down", tooltip="the next smaller value", layout=w.Layout(width="7em")
        )
        up = w.Button(description="next up", tooltip="the next larger value", layout=w.Layout(width="7em"))
        down.add_class("floatlab-next-down")
        up.add_class("floatlab-next-up")
        down.on_click(lambda _b: self.next_down())
        up.on_click(lambda _b: self.next_up())
        self._message = w.HTML("")
        self._bit_row = w.HBox(layout=w.Layout(flex_flow="row wrap"))
        self._build_bits()
        head = w.HBox([self._format_menu, self._value_box, down, up])
        return [head, self._message, self._bit_row]

    def _build_bits(self) -> None:
        import ipywidgets as w

        buttons = []
        for bit in range(self.fmt.bits - 1, -1, -1):
            field = self._field_of(bit)
            b = w.Button(
                tooltip=f"bit {bit} ({field}): click to flip",
                layout=w.Layout(width="2.1em", height="2.2em", padding="0", margin="1px"),
            )
            b.style.button_color = _FIELD_COLOURS[field][0]
            b.add_class("floatlab-bit")
            b.add_class(f"floatlab-bit-{bit}")
            b.on_click(self._flipper(bit))
            buttons.append(b)
        self._bits = buttons[::-1]  # self._bits[k] is bit k
        self._bit_row.children = tuple(buttons)
        self._paint_bits()

    def _flipper(self, bit: int) -> Callable[[Any], None]:
        def flip(_button: Any) -> None:
            self.toggle(bit)

        return flip

    def _paint_bits(self) -> None:
        for bit, b in enumerate(self._bits):
            on = (self.code >> bit) & 1
            b.description = str(on)
            b.style.font_weight = "bold" if on else "normal"

    def _refresh(self) -> None:
        if self._format_menu is not None:
            if len(self._bits) != self.fmt.bits:
                self._build_bits()
            else:
                self._paint_bits()
            if self._format_menu.value != self.fmt.name:
                self._format_menu.value = self.fmt.name
        super()._refresh()

    def _on_format(self, change: dict[str, Any]) -> None:
        if change["new"] != self.fmt.name:
            self._try(lambda: self.set_format(change["new"]))

    def _on_value(self, change: dict[str, Any]) -> None:
        text = str(change["new"]).strip()
        if text:
            self._try(lambda: self.set_value(text))

    def _try(self, action: Callable[[], object]) -> None:
        """Run ``action``; a bad input shows its message instead of raising into the front end."""
        try:
            action()
        except ValueError as e:
            self._message.value = f'<span style="color:#b00020">{html.escape(str(e))}</span>'
        else:
            self._message.value = ""


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
    """A weight ``w`` and an update ``u = w / ratio``: is ``w + u`` still ``w`` in the format?

    >>> e = UpdateExplorer(1.0, 2048, "fp16")
    >>> e.update, e.lost              # 1 + 2^-11 is a tie, and the tie goes to the even 1
    (0.00048828125, True)
    >>> e.set(weight=1.5).lost        # the same ratio next to 1.5 survives
    False
    """

    def __init__(self, weight: float = 1.0, ratio: float = 2048.0, fmt: FloatFormat | str = "fp16") -> None:
        super().__init__()
        self.fmt = get_format(fmt)
        self.weight = 1.0
        self.ratio = 2048.0
        self._apply(weight, ratio)

    def _apply(self, weight: float | None, ratio: float | None) -> None:
        w = self.weight if weight is None else float(weight)
        r = self.ratio if ratio is None else float(ratio)
        if not (math.isfinite(w) and w != 0):
            raise ValueError(f"weight={weight!r}: expected a finite nonzero number")
        if not (math.isfinite(r) and r >= 1):
            raise ValueError(f"ratio={ratio!r}: expected a finite number >= 1 (weight / update)")
        self.weight, self.ratio = w, r

    def set(
        self, *, weight: float | None = None, ratio: float | None = None, fmt: str | None = None
    ) -> UpdateExplorer:
        """Change any of the three and redraw; returns self."""
        if fmt is not None:
            self.fmt = get_format(fmt)
        self._apply(weight, ratio)
        self._refresh()
        return self

    @property
    def update(self) -> float:
        """The update, weight / ratio (in float64)."""
        return self.weight / self.ratio

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
        ax.set_title(
            f"{self.fmt.name}: w = {w:g}, u = w / {self.ratio:g} = {self.update:.3g}: "
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
        text = html.escape(ex.report())
        return (
            figure_html(self.figure(), alt="the weight, its neighbours and w + u")
            + f'<pre style="border-left:4px solid {colour};padding-left:0.6em">{text}</pre>'
        )

    def __repr__(self) -> str:
        return self.explanation().report()

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
        return [w.HBox([weight, fmt]), ratio, message]


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
