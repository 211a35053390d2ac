"""Precision policies: which format each tensor of a training step is stored in.

A :class:`Policy` is data. It names the format of the forward pass (activations, and the
weights as the GEMMs see them) and of the backward pass (gradients), and holds one switch per
technique of mixed-precision training:

* ``master_weights``: keep an fp32 copy of the weights that the optimizer updates; without it
  the weights live in the forward format and small updates are swallowed.
* ``loss_scaling``: ``"none"``, ``"static"`` or ``"dynamic"``: multiply the loss so that small
  gradients stay above the format's underflow threshold.
* ``fp32_reductions``: accumulate sums (softmax denominators, norm statistics, bias gradients,
  the loss) in fp32 instead of in the working format.
* ``fp32_ops``: the operations computed in fp32 with one rounding at their output, as
  autocast's fp32 list: ``"softmax"``, ``"log"``, ``"exp"``, ``"sum"``, ``"norm"``, and ``"loss"``,
  the loss alone (its softmax and log), as frameworks that cast the model's output to fp32
  before the loss do (Apex O2, fastai, MindSpore O2/O3, Keras); ``"softmax"`` covers the loss's
  softmax too (see :attr:`Policy.loss_op`).
* ``batchnorm_fp32``: keep BatchNorm's affine parameters and running statistics in fp32 and
  compute it in fp32 ("all parameters except batchnorm are converted to fp16", the rule of Apex
  O2 and fastai); off, BatchNorm lives in the forward format like every other layer.
* ``update_compensation``: add each update to the weights with Kahan's compensated summation,
  carrying what the rounding of the sum lost in a buffer stored in the weight format (Zamirai
  et al., "Revisiting BFloat16 Training", 2020; see :mod:`floatlab.train.precision.update`). Only weights
  stored below the holding precision have anything to compensate: with fp32 master weights
  (and for BatchNorm's parameters under ``batchnorm_fp32``) it does nothing.
* ``recipe``: the scaled low-precision GEMMs of the linear layers: an fp8 training recipe
  (:class:`~floatlab.train.recipes.Fp8Recipe`: per-tensor current scaling, delayed scaling, or
  DeepSeek-V3's block scaling), each operand scaled into the fp8 format's range before it is
  rounded and the product scaled back; or a microscaling recipe
  (:class:`~floatlab.train.recipes.MicroRecipe`: MXFP8, MXFP6, MXFP4, NVFP4), each operand
  quantized in blocks that share a scale. Everything else follows the policy's formats (bf16
  for the named recipes). :attr:`Policy.fp8` is the recipe when it is an fp8 one.
* ``accumulate`` and ``promote_every``: the accumulator of the linear layers' GEMMs, a format
  narrower than fp32 (``"acc14"``: the 14 bits DeepSeek-V3 measured on an fp8 tensor core),
  its partial sums promoted into an fp32 total every ``promote_every`` products (0: never);
  ``""`` is exact fp32 accumulation, the default.
* ``memory_layout``: where the framework keeps the weights and gradients of a step, for the
  memory ledger (:mod:`floatlab.train.analysis.memory`); no value computed depends on it (see
  :data:`MEMORY_LAYOUTS`).

The named policies are the ones users know; the frameworks' recipes are policies too
(:data:`PRESET_POLICIES`, whose sources and notes :mod:`floatlab.train.precision.presets` holds), and
:func:`get_policy` is the one lookup of them all:

>>> [p for p in policy_names()]  # doctest: +NORMALIZE_WHITESPACE
['fp32', 'fp16', 'bf16', 'mixed-fp16', 'mixed-bf16', 'mixed-fp8', 'fp8-tensorwise', 'fp8-delayed',
 'fp8-blockwise', 'mxfp8', 'mxfp6', 'mxfp4', 'mxint8', 'nvfp4', 'fp64']
>>> print(get_policy("mixed-fp16").describe())  # doctest: +NORMALIZE_WHITESPACE
mixed-fp16: forward fp16, backward fp16, fp32 master weights, dynamic loss scaling (torch),
fp32 reductions, fp32 ops exp, log, loss, norm, softmax, sum, BatchNorm in fp32
>>> get_policy("mixed-fp16").replace(loss_scaling="none").name
'mixed-fp16*'
>>> get_policy("apex-O2").describe()  # doctest: +ELLIPSIS
'apex-O2: forward fp16, backward fp16, fp32 master weights, dynamic loss scaling (apex), ...'
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import numpy as np

from floatlab.formats import BF16, FP16, FP32, FP64, FloatFormat, get_format
from floatlab.registry import Registry
from floatlab.rounding import check_rounding
from floatlab.train._checks import (
    shown,
    want_bool,
    want_dict,
    want_fields,
    want_fp32_scale,
    want_scaler_knob,
    want_str,
)
from floatlab.train.precision.accumulate import accumulator_format
from floatlab.train.recipes import MICRO_KINDS, RECIPES, Fp8Recipe, MicroRecipe

__all__ = [
    "ALL_POLICIES",
    "FP32_OPS",
    "LOSS_SCALING",
    "MEMORY_LAYOUTS",
    "POLICIES",
    "PRESET_POLICIES",
    "SCALER_KNOBS",
    "LossScaling",
    "MemoryLayout",
    "Policy",
    "get_policy",
    "policy_names",
]

LossScaling = Literal["none", "static", "dynamic"]
LOSS_SCALING: tuple[str, ...] = get_args(LossScaling)
MemoryLayout = Literal["apex-o2", "autocast"]
#: where a framework keeps the weights and gradients of a mixed-precision step (a policy's
#: ``memory_layout``; the memory ledger counts them so). ``"apex-o2"``: the model's weights in the
#: forward format and its gradients in the backward format, with fp32 master copies of both beside
#: them: Apex O2 and O3 run ``model.half()`` and, with master weights, ``_process_optimizer.py``
#: gives the optimizer fp32 copies of the fp16 parameters, each with an fp32 ``.grad`` that the
#: unscaled gradients are copied into (fastai v1's ``model2half`` and ``get_master`` do the same);
#: floatlab's named policies follow it. ``"autocast"``: the model keeps fp32 weights and each op
#: casts those it reads to the forward format (the casts are held for the backward pass), and the
#: gradients reach the fp32 weights in fp32, since a ``.grad`` has its weight's dtype: torch
#: autocast (its cast cache), Apex O1's patched functions, Keras's ``AutoCastVariable``, the TF1
#: recipe's ``float32_variable_storage_getter`` and MindSpore's ``Cell.to_float``, which casts the
#: fp32 parameters at use. With nothing cast (an fp32 policy) the two layouts store the same bytes.
MEMORY_LAYOUTS: dict[str, str] = {
    "apex-o2": "Apex O2: low-precision model weights and gradients, fp32 master copies of both",
    "autocast": "autocast: fp32 weights and gradients, low-precision casts of the weights for the step",
}
#: the dynamic loss scaler's numbers a policy may set (torch.amp.GradScaler's names), with what each
#: must be
SCALER_KNOBS: dict[str, str] = {
    "init_scale": "the first scale, a positive fp32 number",
    "growth_factor": "what the scale is multiplied by after growth_interval clean steps, >= 1",
    "backoff_factor": "what the scale is multiplied by on an overflow, in (0, 1]",
    "growth_interval": "the clean steps in a row before the scale grows, an integer >= 1",
}
# the ops a policy may keep in fp32 (autocast's fp32 list, as far as these models have them);
# "loss" is the loss's softmax and log alone (a model output cast to fp32 before the loss)
FP32_OPS: frozenset[str] = frozenset({"softmax", "log", "exp", "sum", "norm", "loss"})


@dataclass(frozen=True)
class Policy:
    """Where each tensor of a training step is stored, and which techniques are switched on.

    ``forward`` and ``backward`` accept any registered format (name or :class:`FloatFormat`).
    ``rounding`` is the rounding mode of every cast; ``update_rounding`` that of the weight
    update when the weights are stored in a low-precision format (``"stochastic"`` there is
    the classic cure for swallowed updates). ``saturate`` clamps overflowing casts to the
    largest finite value; ``subnormals=False`` flushes subnormal results to zero.

    ``memory_layout`` (:data:`MEMORY_LAYOUTS`) says where the framework the policy follows keeps
    the weights and gradients; only the memory ledger reads it.

    ``init_scale``, ``growth_factor``, ``backoff_factor`` and ``growth_interval`` (torch's
    ``GradScaler`` names; :data:`SCALER_KNOBS`) override the dynamic loss scaler's numbers (None:
    those of the ``scaler`` preset), so that the scale's growth and back-off show within a few
    hundred steps (``growth_interval=10``) instead of the frameworks' 2000. A policy without
    dynamic loss scaling keeps them unused (so that one setting can go to several policies).

    >>> p = Policy("custom", forward="e4m3", backward="e5m2", loss_scaling="dynamic")
    >>> p.forward.name, p.backward.name, p.weight_format.name
    ('float8_e4m3fn', 'float8_e5m2', 'fp32')
    """

    name: str
    forward: FloatFormat = FP32
    backward: FloatFormat = FP32
    master_weights: bool = True
    loss_scaling: LossScaling = "none"
    scaler: str = "torch"
    static_scale: float = 2.0**10
    fp32_reductions: bool = True
    fp32_ops: frozenset[str] = field(default=FP32_OPS)
    batchnorm_fp32: bool = True
    rounding: str = "rne"
    update_rounding: str = ""
    saturate: bool = False
    subnormals: bool = True
    update_compensation: bool = False
    recipe: Fp8Recipe | MicroRecipe | None = None
    accumulate: str = ""
    promote_every: int = 0
    memory_layout: MemoryLayout = "apex-o2"
    init_scale: float | None = None
    growth_factor: float | None = None
    backoff_factor: float | None = None
    growth_interval: int | None = None

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        want_str("policy name", self.name)
        for name in (
            "master_weights",
            "fp32_reductions",
            "batchnorm_fp32",
            "saturate",
            "subnormals",
            "update_compensation",
        ):
            set_(self, name, want_bool(name, getattr(self, name)))
        for name in ("scaler", "rounding", "update_rounding"):
            want_str(name, getattr(self, name))
        ops_in: object = self.fp32_ops  # (from a file: anything)
        if isinstance(ops_in, (str, bytes)) or not isinstance(ops_in, Iterable):
            raise ValueError(f"fp32_ops={shown(self.fp32_ops)}: expected a list of operation names")
        for name in ("forward", "backward"):
            fmt = getattr(self, name)
            if not isinstance(fmt, (str, FloatFormat)):
                raise ValueError(f"{name}={shown(fmt)}: expected a format name such as 'fp16'")
        set_(self, "forward", get_format(self.forward))
        set_(self, "backward", get_format(self.backward))
        if self.loss_scaling not in LOSS_SCALING:
            raise ValueError(
                f"loss_scaling={shown(self.loss_scaling)}: expected one of {', '.join(LOSS_SCALING)}"
            )
        ops = frozenset(want_str("fp32_ops entry", op) for op in self.fp32_ops)
        unknown = sorted(ops - FP32_OPS)
        if unknown:
            raise ValueError(f"fp32_ops {unknown}: expected names from {', '.join(sorted(FP32_OPS))}")
        set_(self, "fp32_ops", ops)
        set_(self, "rounding", check_rounding(self.rounding))
        set_(self, "update_rounding", check_rounding(self.update_rounding or self.rounding))
        want_fp32_scale("static_scale", self.static_scale)
        recipe_in: object = self.recipe  # (from a caller: anything)
        if recipe_in is not None and not isinstance(recipe_in, (Fp8Recipe, MicroRecipe)):
            kinds = ", ".join(RECIPES + MICRO_KINDS)
            raise ValueError(
                f"recipe={shown(recipe_in)}: expected an Fp8Recipe or a MicroRecipe ({kinds}) or None"
            )
        if isinstance(self.recipe, MicroRecipe) and (self.accumulate or self.promote_every):
            raise ValueError(
                f"accumulate={shown(self.accumulate)}: the microscaling GEMMs accumulate in fp32 "
                "(a narrow accumulator is simulated for the fp8 recipes only)"
            )
        want_str("accumulate", self.accumulate)
        if self.accumulate:
            set_(self, "accumulate", accumulator_format(self.accumulate).name)
        every: object = self.promote_every
        if isinstance(every, bool) or not isinstance(every, int) or every < 0:
            raise ValueError(
                f"promote_every={shown(every)}: expected a number of products >= 1, or 0 for never"
            )
        fp8 = self.fp8
        if every and fp8 is not None and fp8.kind == "blockwise" and every != fp8.block:
            raise ValueError(
                f"promote_every={every}: block scaling promotes once a tile (expected 0 or {fp8.block})"
            )
        if every and not self.accumulate:
            raise ValueError(
                f"promote_every={every}: promotion needs a narrow accumulator (accumulate, e.g. 'acc14')"
            )
        layout: object = self.memory_layout  # (from a file: anything)
        if not isinstance(layout, str) or layout not in MEMORY_LAYOUTS:
            raise ValueError(
                f"memory_layout={shown(self.memory_layout)}: expected one of {', '.join(MEMORY_LAYOUTS)}"
            )
        self._check_scaler_knobs()
        if (self.forward == FP64) != (self.backward == FP64):
            raise ValueError("the fp64 reference policy needs fp64 for both forward and backward")
        for f in (self.forward, self.backward):
            if f != FP64 and not FP32.contains(f):
                raise ValueError(
                    f"format {f.name} does not fit in fp32 (values are held in float32 arrays): "
                    "expected a format with at most 8 exponent and 23 fraction bits"
                )

    def _check_scaler_knobs(self) -> None:
        # a knob is refused for its value, never for the policy it is given to (one without dynamic
        # loss scaling keeps it unused), so that one setting can go to several policies at once
        for name in SCALER_KNOBS:
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, want_scaler_knob(name, value))

    # ---- derived --------------------------------------------------------------------------------
    @property
    def scaler_knobs(self) -> dict[str, float | int]:
        """The loss scaler's numbers this policy sets itself (:data:`SCALER_KNOBS`), by name.

        >>> get_policy("mixed-fp16").replace(growth_interval=10).scaler_knobs
        {'growth_interval': 10}
        """
        return {k: v for k in SCALER_KNOBS if (v := getattr(self, k)) is not None}

    @property
    def fp8(self) -> Fp8Recipe | None:
        """The recipe when it is an fp8 one (None otherwise).

        >>> get_policy("fp8-delayed").fp8.kind, get_policy("nvfp4").fp8
        ('delayed', None)
        """
        return self.recipe if isinstance(self.recipe, Fp8Recipe) else None

    @property
    def dtype(self) -> np.dtype[Any]:
        """The numpy dtype that holds every value: float64 for the fp64 reference, else float32."""
        return np.dtype(np.float64) if self.forward == FP64 else np.dtype(np.float32)

    @property
    def wide(self) -> FloatFormat:
        """The format of the holding arrays (fp32, or fp64 for the reference policy)."""
        return FP64 if self.forward == FP64 else FP32

    @property
    def weight_format(self) -> FloatFormat:
        """Where the weights the optimizer updates are stored: the master copy, or the forward format."""
        return self.wide if self.master_weights else self.forward

    def param_format(self, norm: bool = False) -> FloatFormat:
        """Where a parameter the optimizer updates is stored; ``norm`` for BatchNorm's parameters,
        which stay in the wide format under ``batchnorm_fp32``.

        >>> pure = get_policy("fp16")
        >>> pure.param_format().name, pure.replace(batchnorm_fp32=True).param_format(norm=True).name
        ('fp16', 'fp32')
        """
        return self.wide if norm and self.batchnorm_fp32 else self.weight_format

    @property
    def is_wide(self) -> bool:
        """True when nothing is ever rounded below the holding arrays' precision (fp32, fp64)."""
        return self.forward == self.wide and self.backward == self.wide

    def keeps_fp32(self, op: str) -> bool:
        """Whether ``op`` is computed in fp32 with one rounding at its output."""
        return op in self.fp32_ops

    @property
    def loss_op(self) -> str:
        """The op whose fp32 switch the loss (softmax cross-entropy) follows: ``"loss"`` when it is
        listed, else ``"softmax"`` (which covers every softmax, the loss's included, as it did
        before ``"loss"`` existed).

        >>> get_policy("fp16").replace(fp32_ops=frozenset({"loss"})).loss_op, get_policy("fp16").loss_op
        ('loss', 'softmax')
        """
        return "loss" if "loss" in self.fp32_ops else "softmax"

    def replace(self, **changes: Any) -> Policy:
        """A copy with ``changes``; its name gets a ``*`` unless a new ``name`` is given. The fields
        of the recipe (fp8: ``fp8_format``, ``amax_history``, ``margin``, ...; microscaling:
        ``hadamard``, ``gradient_rounding``, ``keep_bf16``, ...) change the recipe.

        >>> get_policy("fp16").replace(master_weights=True).master_weights
        True
        >>> get_policy("fp8-delayed").replace(amax_history=16).fp8.amax_history
        16
        >>> get_policy("nvfp4").replace(hadamard=False).recipe.hadamard
        False
        """
        recipe_changes = {k: changes.pop(k) for k in list(changes) if k in _RECIPE_FIELDS | _MICRO_FIELDS}
        if recipe_changes:
            recipe = changes.get("recipe", self.recipe)
            own = _RECIPE_FIELDS if isinstance(recipe, Fp8Recipe) else _MICRO_FIELDS
            for k, v in recipe_changes.items():
                if recipe is None or k not in own:
                    fp8 = k in _RECIPE_FIELDS  # (a field of one kind of recipe, not the other)
                    what, names = (
                        ("an fp8", ["fp8-" + r for r in RECIPES]) if fp8 else ("a microscaling", MICRO_KINDS)
                    )
                    raise ValueError(
                        f"{k}={shown(v)}: policy {self.name} has no {what.split()[-1]} recipe "
                        f"(expected {what} recipe: {', '.join(names)})"
                    )
            assert recipe is not None
            changes["recipe"] = dataclasses.replace(recipe, **recipe_changes)
        if "name" not in changes:
            changes["name"] = self.name if self.name.endswith("*") else self.name + "*"
        return dataclasses.replace(self, **changes)

    def describe(self) -> str:
        """One line: formats and switches, in words.

        >>> kahan = get_policy("bf16").replace(update_compensation=True)
        >>> print(kahan.describe())  # doctest: +NORMALIZE_WHITESPACE
        bf16*: forward bf16, backward bf16, no master weights, no loss scaling, low-precision reductions,
        no fp32 ops, BatchNorm in bf16, compensated updates (Kahan, buffer in bf16)
        """
        parts = [f"forward {self.forward.name}", f"backward {self.backward.name}"]
        parts.append(f"{self.wide.name} master weights" if self.master_weights else "no master weights")
        knobs = "".join(f", {k} {v:g}" for k, v in self.scaler_knobs.items())
        if self.loss_scaling == "dynamic":
            parts.append(f"dynamic loss scaling ({self.scaler}{knobs})")
        elif self.loss_scaling == "static":
            # a static scale follows the overflow rule of the scaler preset it names (skip or take)
            rule = "" if self.scaler == "torch" else f" ({self.scaler})"
            parts.append(f"static loss scale {self.static_scale:g}{rule}")
        else:
            parts.append("no loss scaling")
        if not self.is_wide:
            parts.append("fp32 reductions" if self.fp32_reductions else "low-precision reductions")
            parts.append(f"fp32 ops {', '.join(sorted(self.fp32_ops))}" if self.fp32_ops else "no fp32 ops")
            parts.append("BatchNorm in fp32" if self.batchnorm_fp32 else f"BatchNorm in {self.forward.name}")
            if self.rounding != "rne" or self.update_rounding != "rne":
                parts.append(f"rounding {self.rounding}, updates {self.update_rounding}")
        if self.fp8 is not None:
            parts.append(f"linear GEMMs in fp8: {self.fp8.describe()}")
        elif self.recipe is not None:
            parts.append(f"linear GEMMs in {self.recipe.describe()}")
        elif min(self.forward.bits, self.backward.bits) <= 8:
            parts.append("fp8 values rounded unscaled (no per-tensor scaling)")
        if self.accumulate:
            every = f", promoted to fp32 every {self.promote_every}" if self.promote_every else ""
            parts.append(f"linear GEMMs accumulate in {self.accumulate}{every}")
        if self.update_compensation:
            parts.append(
                f"compensated updates (Kahan, buffer in {self.weight_format.name})"
                if self.weight_format != self.wide
                else f"compensated updates (nothing to compensate: {self.wide.name} weights)"
            )
        return f"{self.name}: {', '.join(parts)}"

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON-ready); :meth:`from_dict` inverts it.

        >>> Policy.from_dict(get_policy("mixed-bf16").to_dict()) == get_policy("mixed-bf16")
        True
        >>> kahan = get_policy("bf16").replace(update_compensation=True)
        >>> Policy.from_dict(kahan.to_dict()).update_compensation
        True
        """
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["forward"], d["backward"] = self.forward.name, self.backward.name
        d["fp32_ops"] = sorted(self.fp32_ops)
        d["recipe"] = None if self.recipe is None else self.recipe.to_dict()
        for k in SCALER_KNOBS:  # (written only when set: the preset's numbers otherwise)
            if d[k] is None:
                del d[k]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Policy:
        """The policy :meth:`to_dict` wrote. A dict written before a switch existed gets its
        default (``update_compensation`` off: such runs added their updates uncompensated; no fp8
        recipe and fp32 accumulation), and one without ``memory_layout`` the layout of the policy
        or preset it is named after (``"torch-amp*"``: torch-amp's), else ``"apex-o2"``.

        >>> p = get_policy("fp8-blockwise").replace(accumulate="acc14", promote_every=128)
        >>> Policy.from_dict(p.to_dict()) == p
        True
        """
        want_dict("policy", d)
        if "fp8" in d and "recipe" not in d:  # written when the field held fp8 recipes only
            d = {k: v for k, v in d.items() if k != "fp8"} | {"recipe": d["fp8"]}
        d = want_fields("policy", d, cls)
        if "name" not in d:
            raise ValueError("policy lacks its name")
        if "batchnorm_fp32" not in d:
            # written before the switch existed (no model had BatchNorm): the named policy's value
            base = POLICIES.get(str(d["name"]).rstrip("*"))
            d = {**d, "batchnorm_fp32": base.batchnorm_fp32 if base is not None else True}
        if "memory_layout" not in d:
            named = ALL_POLICIES.find(str(d["name"]).rstrip("*"))
            d = {**d, "memory_layout": ALL_POLICIES[named].memory_layout if named is not None else "apex-o2"}
        if d.get("recipe") is not None:
            r = want_dict("policy recipe", d["recipe"])
            kind = r.get("kind")
            d = {**d, "recipe": MicroRecipe.from_dict(r) if kind in MICRO_KINDS else Fp8Recipe.from_dict(r)}
        return cls(**d)


def _pure(name: str, fmt: FloatFormat) -> Policy:
    # everything in one format: weights, activations, gradients, updates, reductions
    return Policy(
        name,
        forward=fmt,
        backward=fmt,
        master_weights=False,
        loss_scaling="none",
        fp32_reductions=False,
        fp32_ops=frozenset(),
        batchnorm_fp32=False,
    )


def _mixed(
    name: str, forward: FloatFormat | str, backward: FloatFormat | str, scaling: LossScaling
) -> Policy:
    return Policy(
        name,
        forward=get_format(forward),
        backward=get_format(backward),
        master_weights=True,
        loss_scaling=scaling,
        fp32_reductions=True,
        fp32_ops=FP32_OPS,
    )


def _fp8(kind: str) -> Policy:
    # as Transformer Engine and torchao run fp8: the model in bf16 with fp32 master weights, the
    # linear layers' GEMM operands scaled into fp8, no loss scaling (each tensor has its own scale)
    return dataclasses.replace(_mixed(f"fp8-{kind}", BF16, BF16, "none"), recipe=Fp8Recipe(kind))


def _micro(kind: str) -> Policy:
    # as torchao's MX training and Transformer Engine's MXFP8 and NVFP4 recipes run: the model in
    # bf16 with fp32 master weights, the linear layers' GEMM operands in blocks, no loss scaling
    return dataclasses.replace(_mixed(kind, BF16, BF16, "none"), recipe=MicroRecipe(kind))


#: the fields of a recipe that :meth:`Policy.replace` passes on to it
_RECIPE_FIELDS = frozenset(f.name for f in dataclasses.fields(Fp8Recipe)) - {"kind"}
_MICRO_FIELDS = frozenset(f.name for f in dataclasses.fields(MicroRecipe)) - {"kind"}

POLICIES: dict[str, Policy] = {
    p.name: p
    for p in (
        Policy("fp32"),
        _pure("fp16", FP16),
        _pure("bf16", BF16),
        _mixed("mixed-fp16", FP16, FP16, "dynamic"),
        _mixed("mixed-bf16", BF16, BF16, "none"),  # bf16 has fp32's range: no scaling needed
        _mixed("mixed-fp8", "float8_e4m3fn", "float8_e5m2", "dynamic"),
        *(_fp8(kind) for kind in RECIPES),
        *(_micro(kind) for kind in MICRO_KINDS),
        Policy("fp64", forward=FP64, backward=FP64),
    )
}


def _framework(
    name: str,
    forward: FloatFormat = FP16,
    *,
    master: bool = True,
    ops: frozenset[str] | set[str] = FP32_OPS,
    batchnorm_fp32: bool = True,
    scaling: LossScaling = "none",
    scaler: str = "torch",
    static_scale: float = 2.0**10,
    layout: MemoryLayout = "apex-o2",
) -> Policy:
    # fp32 reductions are on in every preset: the frameworks' fp16 kernels (softmax, norms, sums,
    # GEMMs) accumulate in fp32 and round once at their output
    return Policy(
        name,
        forward=forward,
        backward=forward,
        master_weights=master,
        loss_scaling=scaling,
        scaler=scaler,
        static_scale=static_scale,
        fp32_reductions=True,
        fp32_ops=frozenset(ops),
        batchnorm_fp32=batchnorm_fp32,
        memory_layout=layout,
    )


# the fp32 ops of Keras and MindSpore O2 (norms and the loss), and of a model output cast to fp32
_NORM_LOSS, _LOSS = {"norm", "loss"}, {"loss"}
#: the policies of the frameworks' recipes, in :func:`~floatlab.train.precision.presets.presets` order (each
#: one's source, and what floatlab simulates of it, are in :mod:`floatlab.train.precision.presets`); the
#: layout is "autocast" where the framework keeps fp32 weights and casts them at use
#: (:data:`MEMORY_LAYOUTS`)
PRESET_POLICIES: dict[str, Policy] = {
    p.name: p
    for p in (
        _framework("torch-amp", scaling="dynamic", scaler="torch", layout="autocast"),
        _framework("keras", ops=_NORM_LOSS, scaling="dynamic", scaler="keras", layout="autocast"),
        _framework("tf2-keras", ops=_NORM_LOSS, scaling="dynamic", scaler="tf2", layout="autocast"),
        _framework(
            "tf1-static-128", scaling="static", scaler="tf1-static", static_scale=128.0, layout="autocast"
        ),
        # O0: nothing is cast, the model's own weights are updated (no separate master copy)
        _framework("apex-O0", FP32, master=False),
        _framework("apex-O1", scaling="dynamic", scaler="apex", layout="autocast"),
        _framework("apex-O2", ops=_LOSS, scaling="dynamic", scaler="apex"),
        _framework("apex-O3", master=False, ops=_LOSS, batchnorm_fp32=False),
        _framework("fastai", ops=_LOSS, scaling="dynamic", scaler="fastai"),
        _framework("mindspore-O0", FP32, master=False),
        _framework("mindspore-O1", layout="autocast"),
        _framework("mindspore-O2", ops=_NORM_LOSS, scaling="dynamic", scaler="mindspore", layout="autocast"),
        _framework("mindspore-O3", ops=_LOSS, batchnorm_fp32=False, layout="autocast"),
        *(
            _framework(
                name,
                ops=_NORM_LOSS,
                scaling="static",
                scaler=scaler,
                static_scale=128.0,
                layout="autocast",
            )
            for name, scaler in (
                ("mindspore-fixed-128", "mindspore-fixed"),
                ("mindspore-fixed-128-nodrop", "mindspore-fixed-nodrop"),
            )
        ),
    )
}
#: other names of the named policies
_ALIASES = {
    "float32": "fp32",
    "float16": "fp16",
    "half": "fp16",
    "bfloat16": "bf16",
    "amp": "mixed-fp16",
    "mixed": "mixed-fp16",
    "float64": "fp64",
    "mixed-float16": "mixed-fp16",
    "mixed-bfloat16": "mixed-bf16",
}


#: every name :func:`get_policy` knows: the named policies, the presets' and the aliases (case is
#: ignored and ``_`` read as ``-``)
ALL_POLICIES: Registry[Policy] = Registry(
    "precision policy or preset",
    {**POLICIES, **PRESET_POLICIES},
    aliases=_ALIASES,
    alike="_",
    sep="-",
    listing=lambda names: f"(policies: {', '.join(POLICIES)}; presets: {', '.join(PRESET_POLICIES)})",
)


def policy_names() -> list[str]:
    """The named policies, simplest first (the presets' are
    :func:`~floatlab.train.precision.presets.preset_names`).

    >>> policy_names()[:3]
    ['fp32', 'fp16', 'bf16']
    """
    return list(POLICIES)


def get_policy(policy: str | Policy) -> Policy:
    """The one lookup of precision policies: a named policy (``"mixed-fp16"``, ``"bf16"``), a framework
    preset's (``"apex-O2"``) or an alias (``"amp"``, ``"half"``), in any case and with ``_`` for ``-``;
    a :class:`Policy` is returned as is. The trainer, :class:`~floatlab.train.precision.Precision`,
    :meth:`~floatlab.train.config.TrainConfig.make_policy`, the memory ledger, the command line and
    :func:`floatlab.torch.simulate` all take a name through it.

    >>> get_policy("amp").name, get_policy("APEX_o2").name, get_policy("apex-O2").batchnorm_fp32
    ('mixed-fp16', 'apex-O2', True)
    >>> get_policy("mixed-fp61")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: unknown precision policy or preset 'mixed-fp61': did you mean mixed-fp16? (policies: fp32, ...
    """
    if isinstance(policy, Policy):
        return policy
    if not isinstance(policy, str):
        raise ValueError(f"precision policy {shown(policy)}: expected a policy or preset name, or a Policy")
    return ALL_POLICIES.lookup(policy)


def parse_fp32_ops(text: str | Iterable[str]) -> frozenset[str]:
    """``"softmax,log"`` or ``"all"`` or ``"none"`` -> a set of op names (from :data:`FP32_OPS`).

    >>> sorted(parse_fp32_ops("softmax, norm"))
    ['norm', 'softmax']
    >>> parse_fp32_ops("none")
    frozenset()
    """
    if isinstance(text, str):
        t = text.strip().lower()
        if t == "all":
            return FP32_OPS
        if t in ("none", ""):
            return frozenset()
        names = [s.strip() for s in t.split(",") if s.strip()]
    else:
        names = list(text)
    unknown = sorted(set(names) - FP32_OPS)
    if unknown:
        raise ValueError(
            f"fp32 ops {unknown}: expected names from {', '.join(sorted(FP32_OPS))}, 'all' or 'none'"
        )
    return frozenset(names)
