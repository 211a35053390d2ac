"""The text of floatlab's PyTorch bridge: a per-layer report (:class:`~floatlab.torch.LayerReport`)
and a policy run on a model (:class:`~floatlab.torch.Simulation`): the views
:func:`floatlab.text.render` finds in :data:`TEXT`. ``render(report, kind)`` shows one tensor
kind of a report.

>>> from floatlab.text import render
>>> from floatlab.torch import LayerReport, TensorShares
>>> rows = [TensorShares("fc", "Linear", "activation_grad", "fp16", 4, 0, 0, 0, 2.0**-26,
...                      2, 2, 0, 26, 0, 0, 0)]
>>> print(render(LayerReport(rows, formats=["fp16"], steps=1)).splitlines()[1])
activation_grad: the gradient of the loss with respect to each module's output
"""

from __future__ import annotations

from collections.abc import Callable

from floatlab.text import percent, table
from floatlab.torch.advice import ModelAdvice
from floatlab.torch.inspect import KINDS, LayerReport
from floatlab.torch.simulate import Simulation

__all__: list[str] = []

_KIND_TEXT = {
    "weight": "the parameters each module owns",
    "activation": "each module's output",
    "weight_grad": "the gradients of those parameters",
    "activation_grad": "the gradient of the loss with respect to each module's output",
}
_LAYER_COLUMNS = (
    "layer", "module", "format", "values", "amax", "nan", "inf", "flushed", "subnormal", "overflow",
    "scale", "lost at scale",
)  # fmt: skip


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def _layer_report_text(rep: LayerReport, kind: str | None = None) -> str:
    """The report as a text table, one block per kind found (or only ``kind``), one line per
    layer and format: amax, NaN and inf counts, the shares lost unscaled, the advised scale and
    what is still lost at it.

    >>> from floatlab.text import render
    >>> from floatlab.torch import TensorShares
    >>> rows = [TensorShares("fc", "Linear", "activation_grad", "fp16", 4, 0, 0, 0, 2.0**-26,
    ...                      2, 2, 0, 26, 0, 0, 0)]
    >>> lines = render(LayerReport(rows, formats=["fp16"], steps=1)).splitlines()
    >>> lines[2].split()[:8]
    ['layer', 'module', 'format', 'values', 'amax', 'nan', 'inf', 'flushed']
    >>> lines[3].split()
    ['fc', 'Linear', 'fp16', '4', '1.49e-08', '0', '0', '50%', '50%', '0%', '2^26', '0%']
    """
    lines = [
        f"{_plural(len(rep.layers), 'layer')} over {_plural(rep.steps, 'step')}, in "
        f"{', '.join(rep.formats)} ({rep.rounding}); shares of all values; scale: floatlab's advice, "
        f"{_plural(rep.headroom, 'binade')} of headroom"
    ]
    for k in KINDS if kind is None else (kind,):
        rows = rep.of_kind(k)
        if not rows and kind is None:
            continue  # (asked for the whole report: only the kinds the model has)
        lines.append(f"{k}: {_KIND_TEXT[k]}")
        if not rows:
            lines.append("  (no tensors of this kind)")
            continue
        cells = []
        previous = None
        for r in rows:
            first = r.layer != previous
            previous = r.layer
            layer = [(r.layer or "(model)"), r.module] if first else ["", ""]
            counts = [f"{r.values:,}", f"{r.amax:.3g}", f"{r.nan:,}", f"{r.inf:,}"] if first else [""] * 4
            shares = [percent(n, r.values) for n in (r.flushed, r.subnormal, r.overflow)]
            scaled = [f"2^{r.log2_scale}", percent(r.scaled_lost, r.values)]
            cells.append([*layer, r.format, *counts, *shares, *scaled])
        # layer, module and format read left-aligned, the numbers right-aligned
        lines.append(table(_LAYER_COLUMNS, cells, align="<<<" + ">" * 9))
    return "\n".join(lines)


def _gemm_text(sim: Simulation, gemm: str, reason: str) -> str:
    """What one layer's GEMMs get, in words."""
    p = sim.policy
    if gemm == "recipe":
        return f"{p.name} recipe (its three GEMMs)"
    if gemm == "own":
        return f"its own precision ({reason})"
    fmt = p.forward.name if p.forward == p.backward else f"{p.forward.name}, gradients {p.backward.name}"
    return f"{fmt} operands, fp32 GEMM" + (f" (not the recipe: {reason})" if reason else "")


def _simulation_text(sim: Simulation) -> str:
    """What each layer's GEMMs got, what was left in its own precision, and what else the policy
    asks of the run, in words.

    >>> from floatlab.text import render
    >>> import torch
    >>> from floatlab.torch import simulate
    >>> model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2))
    >>> print(render(simulate(model, "mixed-fp16")))  # doctest: +NORMALIZE_WHITESPACE
    simulate mixed-fp16 on Sequential: forward fp16, backward fp16, rounding rne; no GEMM recipe
      0 (Linear): fp16 operands, fp32 GEMM
      1 (BatchNorm1d): its own precision (not a GEMM)
      simulated (1): 0 (Linear); calls rounded so far: none
      left in their own precision (1): 1 (BatchNorm1d) (a torch.matmul, bmm or @ of theirs is
      rounded all the same)
      left to the model: softmax, norms, reductions and the loss in its own precision (the policy's
      fp32 ops); dynamic loss scaling: sim.scaler() (torch rules, scale 65536); fp32 master
      weights: the optimizer updates the model's own parameters
    """
    p = sim.policy
    calls = ", ".join(f"{k} {v}" for k, v in sorted(sim.calls.items())) or "none"
    on_recipe = sum(lp.gemm == "recipe" for lp in sim.plan)
    linears = sum(lp.module.endswith("Linear") for lp in sim.plan)
    recipe = "no GEMM recipe"
    if p.recipe is not None:
        recipe = f"recipe {p.recipe.describe()}, on {on_recipe} of {linears} Linear layers"
    lines = [
        f"simulate {p.name} on {type(sim.model).__name__}: forward {p.forward.name}, "
        f"backward {p.backward.name}, rounding {p.rounding}"
        + (", saturating" if p.saturate else "")
        + ("" if p.subnormals else ", subnormals flushed")
        + f"; {recipe}",
    ]
    if p.recipe is not None and not on_recipe:
        lines.append(
            f"  WARNING: the recipe reaches no layer: this run is plain {p.forward.name}, not {p.name}"
        )
    lines += [f"  {lp.name} ({lp.module}): {_gemm_text(sim, lp.gemm, lp.reason)}" for lp in sim.plan]
    lines += [
        f"  simulated ({len(sim.simulated)}): {', '.join(sim.simulated) or 'none'}; "
        f"calls rounded so far: {calls}",
        f"  left in their own precision ({len(sim.skipped)}): {', '.join(sim.skipped) or 'none'}"
        + (" (a torch.matmul, bmm or @ of theirs is rounded all the same)" if sim.skipped else ""),
    ]
    if sim.left:
        left_calls = ", ".join(f"{k} {v}" for k, v in sorted(sim.left.items()))
        lines.append(f"  GEMM calls left in their own precision so far: {left_calls}")
    left = []
    low_ops = sorted({"softmax", "norm", "sum", "exp", "log", "loss"} - set(p.fp32_ops))
    if p.is_wide or not low_ops:
        left.append("softmax, norms, reductions and the loss in its own precision (the policy's fp32 ops)")
    else:
        left.append(
            f"softmax, norms, reductions and the loss in its own precision (the policy computes "
            f"{', '.join(low_ops)} in {p.forward.name}: not simulated)"
        )
    rule = sim.scaler().rule
    if p.loss_scaling == "dynamic":
        left.append(f"dynamic loss scaling: sim.scaler() ({rule.name} rules, scale {rule.scale:g})")
    elif p.loss_scaling == "static":
        left.append(f"static loss scale {p.static_scale:g}: sim.scaler()")
    if p.master_weights:
        left.append(f"{p.wide.name} master weights: the optimizer updates the model's own parameters")
    elif sim.weights.params:
        swallowed = sum(c.swallowed for c in sim.weights.steps)
        updates = sum(c.updates for c in sim.weights.steps)
        left.append(
            f"weights stored in {p.weight_format.name} at each optimizer step "
            f"({p.update_rounding or p.rounding}"
            + (", Kahan-compensated" if p.update_compensation else "")
            + f"): {_plural(len(sim.weights.steps), 'step')} so far, {percent(swallowed, updates)} of "
            "the updates swallowed"
        )
    lines.append(f"  left to the model: {'; '.join(left)}")
    return "\n".join(lines)


def _advice_text(adv: ModelAdvice) -> str:
    """The verdict in one line: the loss scale, the layers to keep wide and why.

    >>> from floatlab.text import render
    >>> from floatlab.torch.advice import ModelAdvice
    >>> render(ModelAdvice.of({}, "fp16"))
    'fp16: loss scale 2^0 for the whole model (2 binades of headroom); no layer needs a wider format'
    """
    reasons: dict[str, list[str]] = {}
    for k in adv.keep:
        at = f" at 2^{k.log2_scale}" if k.log2_scale else ""
        reasons.setdefault(k.layer, []).append(f"{k.kind}: {percent(k.share)} {k.cause}{at}")
    keep = "; ".join(f"{layer or '(model)'} ({', '.join(r)})" for layer, r in reasons.items())
    return (
        f"{adv.format}: loss scale 2^{adv.log2_scale} for the whole model ({_plural(adv.headroom, 'binade')} "
        "of headroom); " + (f"keep {keep} in a wider format" if keep else "no layer needs a wider format")
    )


#: the text view of each result type of this module
TEXT: dict[type, Callable[..., str]] = {
    LayerReport: _layer_report_text,
    Simulation: _simulation_text,
    ModelAdvice: _advice_text,
}
