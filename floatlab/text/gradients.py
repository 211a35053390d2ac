"""The text of :mod:`floatlab.torch_hooks`: what a :class:`~floatlab.torch_hooks.GradientRecorder`
recorded (``render(recorder, fmt, headroom=2, rounding="rne")``) and the loss scale it advises for
both kinds of gradient (:class:`~floatlab.torch_hooks.CombinedAdvice`): the views
:func:`floatlab.text.render` finds in :data:`TEXT`.

>>> from floatlab.text import render
>>> from floatlab.torch_hooks import GradientRecorder
>>> print(render(GradientRecorder(model=None), "fp16").splitlines()[0])
gradients of 0 parameters over 0 steps, in fp16 unscaled:
"""

from __future__ import annotations

from collections.abc import Callable

from floatlab.formats import FloatFormat, get_format
from floatlab.gradhist import GradHistogram, Verdict
from floatlab.text import percent, table
from floatlab.torch_hooks import CombinedAdvice, GradientRecorder

__all__: list[str] = []


def _lost(v: Verdict) -> str:
    return f"{percent(v.flushed, v.total)} flushed, {percent(v.subnormal, v.total)} subnormal"


def _combined_advice_text(c: CombinedAdvice) -> str:
    text = (
        f"scale 2^{c.log2_scale}, the largest under which neither the parameter nor the "
        f"activation gradients exceed {c.format}'s max / 2^{c.headroom}: parameter "
        f"gradients {_lost(c.parameters)}, activation gradients {_lost(c.activations)}"
    )
    for kind, other in (("activation", "parameter"), ("parameter", "activation")):
        own = c.advice[kind + "s"]
        if own.log2_scale > c.log2_scale:
            text += (
                f"; the {kind} gradients' own advice, 2^{own.log2_scale}, would push the "
                f"{other} gradients past that limit"
            )
    return text + "."


def _histograms(label: str, hists: dict[str, GradHistogram], f: FloatFormat, rounding: str) -> list[str]:
    """A table of one family of histograms: per name, the share of values ``f`` flushes to
    zero, makes subnormal or overflows unscaled."""
    if not hists:
        return []
    rows = []
    for name, h in hists.items():
        v = h.verdict(f, 1, rounding)
        shares = [percent(n, v.total) for n in (v.flushed, v.subnormal, v.overflow)]
        rows.append([name, f"{v.total:,}", *shares])
    header = [label, "values", "flushed", "subnormal", "overflow"]
    return [table(header, rows, align="<>>>>", widths=(0, 12, 8, 9, 8))]


def _recorder_text(
    rec: GradientRecorder, fmt: FloatFormat | str = "fp16", *, headroom: int = 2, rounding: str = "rne"
) -> str:
    """A table: per parameter, the share of gradient values that ``fmt`` flushes to zero, makes
    subnormal or overflows unscaled, then the advice for all gradients together; and, when hooks
    recorded any, the same for the activation gradients, apart, then one scale for both kinds
    (:meth:`~floatlab.torch_hooks.GradientRecorder.combined_advice`: a loss scale multiplies both).
    """
    f = get_format(fmt)
    lines = [f"gradients of {len(rec.layers)} parameters over {rec.steps} steps, in {f.name} unscaled:"]
    lines += _histograms("parameter", rec.layers, f, rounding)
    advice = rec.total.recommend_scale(f, headroom=headroom, rounding=rounding)
    lines.append(f"all gradients: {advice.before}")
    lines.append(f"advice: scale 2^{advice.log2_scale}. {advice.reason}")
    if rec.activation_grads:
        n = len(rec.activation_grads)
        lines.append("")
        lines.append(f"activation gradients of {n} modules over {rec.steps} steps, in {f.name} unscaled:")
        lines += _histograms("module output", rec.activation_grads, f, rounding)
        advice = rec.activation_total.recommend_scale(f, headroom=headroom, rounding=rounding)
        lines.append(f"all activation gradients: {advice.before}")
        lines.append(f"advice: scale 2^{advice.log2_scale}. {advice.reason}")
        lines.append("")
        combined = rec.combined_advice(f, headroom=headroom, rounding=rounding)
        lines.append(f"both kinds, one loss scale: {combined}")
    return "\n".join(lines)


#: the text view of each result type of this module
TEXT: dict[type, Callable[..., str]] = {
    CombinedAdvice: _combined_advice_text,
    GradientRecorder: _recorder_text,
}
