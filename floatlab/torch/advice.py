"""One verdict per format for a whole model: :class:`ModelAdvice` (:meth:`floatlab.torch.LayerReport.advice`).

A loss scale multiplies every gradient of backward, so a model gets one: the largest power of two
under which neither the parameter gradients nor the activation gradients of any layer exceed
``format.max / 2^headroom`` (:class:`~floatlab.torch_hooks.CombinedAdvice`, the rule of
:class:`~floatlab.torch_hooks.GradientRecorder`). What that scale cannot save stays in a wider
format: a layer whose weights or activations (which the loss scale does not touch) lose more than
``tolerance`` of their values in the format (flushed to zero or overflowed), or whose gradients
still lose more than that at the model's scale. ``headroom_binades`` is the room left between
the largest scaled gradient (the histogram's bound on it) and the format's largest value (log2
of their ratio).

>>> import numpy as np
>>> from floatlab.gradhist import histogram
>>> hists = {("fc", "activation_grad"): histogram(np.float32([2.0**-30, 2.0**-4])),
...          ("fc", "activation"): histogram(np.float32([1e6, 1.0]))}
>>> adv = ModelAdvice.of(hists, "fp16", headroom=2)
>>> adv.log2_scale, [(k.layer, k.kind, k.cause) for k in adv.keep]
(17, [('fc', 'activation', 'overflow')])
>>> print(adv)  # doctest: +NORMALIZE_WHITESPACE
fp16: loss scale 2^17 for the whole model (2 binades of headroom);
keep fc (activation: 50% overflow) in a wider format
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from floatlab.exact import pow2
from floatlab.formats import FloatFormat, get_format
from floatlab.gradhist import GradHistogram
from floatlab.text import render
from floatlab.torch_hooks import CombinedAdvice

__all__ = ["KeepWide", "ModelAdvice"]

_FORWARD = ("weight", "activation")
_GRADS = ("weight_grad", "activation_grad")


@dataclass(frozen=True)
class KeepWide:
    """A layer to keep in a wider format: the tensor kind that loses values, the cause
    (``"overflow"`` or ``"flush"``), the share lost and the scale it was judged at (1 for
    weights and activations, the model's loss scale for gradients).

    >>> KeepWide("fc", "activation", "overflow", 0.5, 0).layer
    'fc'
    """

    layer: str
    kind: str
    cause: str
    share: float
    log2_scale: int


@dataclass(frozen=True)
class ModelAdvice:
    """The verdict for one format (see the module): ``log2_scale`` (the loss scale, a power of
    two), ``keep`` (the layers to keep wide, each with its reason, in the model's order),
    ``headroom`` (the binades asked for) and ``headroom_binades`` (those left; None without
    gradients), and ``combined`` (the two gradient kinds' advice).

    >>> ModelAdvice.of({}, "bf16").log2_scale
    0
    """

    format: str
    log2_scale: int
    keep: tuple[KeepWide, ...]
    headroom: int
    headroom_binades: float | None
    combined: CombinedAdvice

    @property
    def scale(self) -> float:
        """The loss scale, 2^log2_scale."""
        return math.ldexp(1.0, self.log2_scale)

    @property
    def layers(self) -> list[str]:
        """The names of the layers to keep wide, once each, in order."""
        return list(dict.fromkeys(k.layer for k in self.keep))

    @classmethod
    def of(
        cls,
        histograms: Mapping[tuple[str, str], GradHistogram],
        fmt: FloatFormat | str,
        *,
        headroom: int = 2,
        rounding: str = "rne",
        tolerance: float = 1e-3,
    ) -> ModelAdvice:
        """The advice from each (layer, kind)'s histogram of values (see the module).

        >>> ModelAdvice.of({}, "fp16", tolerance=2.0)
        Traceback (most recent call last):
        ...
        ValueError: tolerance=2.0: expected a share from 0 to 1
        """
        if not (isinstance(tolerance, (int, float)) and 0 <= tolerance <= 1):
            raise ValueError(f"tolerance={tolerance!r}: expected a share from 0 to 1")
        f = get_format(fmt)
        params, acts = GradHistogram(), GradHistogram()
        for (_, kind), h in histograms.items():
            if kind == "weight_grad":
                params += h
            elif kind == "activation_grad":
                acts += h
        combined = CombinedAdvice.of(params, acts, f, headroom=headroom, rounding=rounding)
        k = combined.log2_scale
        keep: list[KeepWide] = []
        for (layer, kind), h in histograms.items():
            at = k if kind in _GRADS else 0
            v = h.verdict(f, pow2(at), combined.rounding)
            if not v.total:
                continue
            for cause, n in (("overflow", v.overflow), ("flush", v.flushed)):
                if n / v.total > tolerance:
                    keep.append(KeepWide(layer, kind, cause, n / v.total, at))
        amax = max(
            (h.max_abs_bound for (_, kind), h in histograms.items() if kind in _GRADS and h.finite),
            default=0.0,
        )
        room = math.log2(f.max / (amax * math.ldexp(1.0, k))) if amax > 0 else None
        return cls(f.name, k, tuple(keep), headroom, room, combined)

    def __str__(self) -> str:
        return render(self)
