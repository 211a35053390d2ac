"""The frameworks' mixed-precision recipes as presets: a precision policy and a loss scaler each.

A :class:`Preset` is data: a name, the source it follows (a framework's file, or the talk), and the
:class:`~floatlab.train.precision.policy.Policy` that says which formats the step uses, whether there are
fp32 master weights, which ops and BatchNorm stay in fp32, which loss scaler runs and where the
framework keeps the weights and gradients (``memory_layout``). The policy names its scaler through
``loss_scaling``, ``scaler`` (a :data:`~floatlab.train.precision.scaler.SCALER_PRESETS` entry) and
``static_scale``, so a preset *is* a policy: its name is a policy name wherever one is taken
(:func:`~floatlab.train.precision.policy.get_policy`, the one lookup, knows it), and
``Trainer(model, data, "apex-O2")`` trains the way the framework does, as far as floatlab's op set
can say it (the docs page "Framework presets" lists what is simulated and what is not). The
policies themselves are :data:`~floatlab.train.precision.policy.PRESET_POLICIES`; this module adds each one's
title, source and notes.

>>> [p.name for p in presets()][:4]
['torch-amp', 'keras', 'tf2-keras', 'tf1-static-128']
>>> p = get_preset("apex-O2")
>>> p.make_policy().master_weights, p.make_policy().batchnorm_fp32, p.make_scaler().max_scale == 2.0**24
(True, True, True)
>>> preset_overrides(p, p.make_policy().replace(master_weights=False))
['master weights off (apex-O2: on)']
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

from floatlab.registry import Registry
from floatlab.train.precision.policy import PRESET_POLICIES, Policy, get_policy
from floatlab.train.precision.scaler import LossScaler, make_scaler

__all__ = [
    "BATCHNORM_KINDS",
    "PRESETS",
    "Preset",
    "PresetScaler",
    "get_preset",
    "preset_names",
    "preset_overrides",
    "presets",
    "resolve_policy",
]


#: what a framework's BatchNorm keeps for the backward pass when its parameters stay fp32 (a
#: preset's ``batchnorm``; the memory ledger counts it so): ``"fp32"``, BatchNorm upcasts its
#: 16-bit input and computes in fp32, so what it keeps is fp32 (Keras 3's
#: ``BatchNormalization.call`` casts its input to ``result_type(input, "float32")``; MindSpore
#: O2's black list keeps the cell in fp32; floatlab's own policies compute it so); ``"input"``,
#: BatchNorm reads its 16-bit input with fp32 parameters, returns 16 bits and keeps that 16-bit
#: input plus fp32 per-channel mean and 1/std (PyTorch autocast lists ``batch_norm`` in neither
#: of its cast lists; Apex O1 leaves it unpatched, "batch_norm ... correctly handles fp16 in/out
#: with fp32 weights", apex/amp/lists/functional_overrides.py; Apex O2's ``convert_network`` and
#: fastai v1's ``model2half`` keep BatchNorm's parameters fp32 and never cast its input)
BATCHNORM_KINDS: dict[str, str] = {
    "fp32": "BatchNorm upcasts its 16-bit input and keeps fp32 values for the backward pass",
    "input": "BatchNorm reads its 16-bit input with fp32 parameters and keeps that input",
}


class PresetScaler(NamedTuple):
    """A preset's loss scaler in numbers: ``kind`` ``"none"``, ``"static"`` or ``"dynamic"``;
    ``min_scale`` and ``max_scale`` are None where there is no floor or no cap, and
    ``growth_interval`` None where the scale never grows; ``skips_overflow`` says whether a step
    whose gradients overflow is skipped.

    >>> get_preset("torch-amp").scaler.growth_interval
    2000
    """

    kind: str
    name: str
    init_scale: float
    growth_factor: float
    backoff_factor: float
    growth_interval: int | None
    min_scale: float | None
    max_scale: float | None
    skips_overflow: bool
    fp32_scale: bool
    limit_rule: str


@dataclass(frozen=True)
class Preset:
    """One framework's recipe: ``policy`` holds all of it (formats, master weights, fp32 ops,
    BatchNorm, loss scaler); ``source`` cites what it follows (the framework's file and version);
    ``notes`` says what floatlab simulates of it and what it does not. ``batchnorm``
    (:data:`BATCHNORM_KINDS`) says what the framework's fp32-parameter BatchNorm keeps for the
    backward pass, ``memory_source`` where that and the optimizer state's format are read; only
    the memory ledger reads them.

    >>> get_preset("mindspore-O3").make_policy().describe()  # doctest: +ELLIPSIS
    'mindspore-O3: forward fp16, backward fp16, fp32 master weights, no loss scaling, ...'
    """

    name: str
    title: str
    source: str
    policy: Policy
    notes: str = ""
    batchnorm: str = "fp32"
    memory_source: str = ""

    def __post_init__(self) -> None:
        if self.batchnorm not in BATCHNORM_KINDS:
            raise ValueError(f"batchnorm={self.batchnorm!r}: expected one of {', '.join(BATCHNORM_KINDS)}")

    def make_policy(self) -> Policy:
        """The precision policy (named after the preset) to train with.

        >>> get_preset("fastai").make_policy().name
        'fastai'
        """
        return self.policy

    def make_scaler(self) -> LossScaler:
        """A fresh loss scaler with the framework's rules (what the policy's scaler fields ask for).

        >>> s = get_preset("mindspore-fixed-128-nodrop").make_scaler()
        >>> s.scale, s.is_dynamic, s.skips_nonfinite
        (128.0, False, False)
        """
        return make_scaler(self.policy)

    @property
    def scaler(self) -> PresetScaler:
        """The loss scaler's settings in numbers (see :class:`PresetScaler`).

        >>> get_preset("apex-O3").scaler.kind
        'none'
        """
        s = self.make_scaler()
        if not s.enabled:
            return PresetScaler("none", "none", 1.0, 1.0, 1.0, None, None, None, False, True, "clamp")
        if not s.is_dynamic:
            return PresetScaler(
                "static",
                s.name,
                s.scale,
                1.0,
                1.0,
                None,
                None,
                None,
                s.skips_nonfinite,
                s.fp32_scale,
                "clamp",
            )
        return PresetScaler(
            "dynamic",
            s.name,
            s.scale,
            s.growth_factor,
            s.backoff_factor,
            s.growth_interval,
            s.min_scale if s.min_scale > 0 else None,
            s.max_scale if math.isfinite(s.max_scale) else None,
            s.skips_nonfinite,
            s.fp32_scale,
            s.limit_rule,
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data: the formats, master weights, BatchNorm, fp32 reductions and ops,
        the memory layout, the scaler's settings (None for no floor, no cap, no growth) and the
        whole policy.

        >>> d = get_preset("apex-O2").to_dict()
        >>> d["forward"], d["scaler"]["kind"], d["scaler"]["max_scale"], d["scaler"]["min_scale"]
        ('fp16', 'dynamic', 16777216.0, None)
        """
        p = self.policy
        return {
            "name": self.name,
            "title": self.title,
            "source": self.source,
            "forward": p.forward.name,
            "backward": p.backward.name,
            "master_weights": p.master_weights,
            "batchnorm_fp32": p.batchnorm_fp32,
            "fp32_reductions": p.fp32_reductions,
            "fp32_ops": sorted(p.fp32_ops),
            "memory_layout": p.memory_layout,
            "batchnorm": self.batchnorm,
            "memory_source": self.memory_source,
            "scaler": self.scaler._asdict(),
            "notes": self.notes,
            "policy": p.to_dict(),
        }


# ---- the presets ----------------------------------------------------------------------------------
def _preset(
    name: str, title: str, source: str, notes: str, batchnorm: str = "fp32", memory: str = ""
) -> Preset:
    return Preset(name, title, source, PRESET_POLICIES[name], notes, batchnorm, memory)


# where the ledger's facts about torch come from (checked against torch 2.13 on CPU in
# tests/train/analysis/test_memory.py: saved tensors by dtype, optimizer.state's dtypes)
_TORCH_MEMORY = (
    "torch 2.13 (checked on CPU in the tests): autocast casts batch_norm to neither dtype, so "
    "BatchNorm reads its 16-bit input and keeps it with save_mean and save_invstd; an optimizer "
    "makes its state like the parameter it updates (torch/optim/sgd.py: grad.detach().clone(); "
    "adam.py, which AdamW extends: zeros_like)"
)


_APEX = "NVIDIA/apex apex/amp/frontend.py class {0}; apex/amp/scaler.py LossScaler"
_MS = "MindSpore 2.x mindspore/python/mindspore/train/amp.py _config_level['{0}']"
# (not checkable here: Apex needs CUDA; the tests emulate it in torch as these sources say)
_APEX_MEMORY = (
    "apex/amp/_initialize.py: O2 calls convert_network (apex/fp16_utils/fp16util.py), which keeps "
    "BatchNorm's parameters fp32 and casts no BatchNorm input; O3 calls model.to(fp16); O1 leaves "
    "batch_norm unpatched (apex/amp/lists/functional_overrides.py: it 'correctly handles fp16 in/out "
    "with fp32 weights'); without master weights the torch optimizer keeps its state like the fp16 "
    "parameters. " + _TORCH_MEMORY
)
_MS_MEMORY = (
    "MindSpore 2.x train/amp.py AMP_BLACK_LIST (BatchNorm1d/2d/3d, LayerNorm): the cell stays fp32 "
    "and its input is cast to fp32 (not checked here: MindSpore is not installed)"
)

_PRESETS: tuple[Preset, ...] = (
    _preset(
        "torch-amp",
        "PyTorch autocast + GradScaler",
        "torch 2.x autocast op lists (docs: amp, 'CUDA Ops that can autocast to float32'); "
        "torch/amp/grad_scaler.py GradScaler",
        "GEMMs in fp16 with fp32 accumulation; autocast's fp32 list (softmax, log_softmax, layer_norm, "
        "exp, log, pow, sum, losses) in fp32; fp32 weights cast per op. floatlab stores every activation "
        "in fp16 where autocast keeps an fp32-list op's output (and the residual stream) in fp32. "
        "BatchNorm is on neither list: it reads its fp16 input with fp32 parameters and returns fp16.",
        batchnorm="input",
        memory=_TORCH_MEMORY,
    ),
    _preset(
        "keras",
        "Keras 3 mixed_float16 + LossScaleOptimizer",
        "Keras 3 (3.15) keras/src/optimizers/loss_scale_optimizer.py; keras/src/layers/normalization/*.py; "
        "TensorFlow mixed precision guide (final softmax with dtype='float32')",
        "Layers compute in fp16 on fp32 variables; LayerNormalization and BatchNormalization compute in "
        "fp32; the final softmax and the loss in fp32; attention's softmax in fp16. Keras 3's scale has "
        "no floor and may grow to inf in fp32 (floatlab stops it at 2^127).",
        memory="Keras 3.15 keras/src/layers/normalization/batch_normalization.py BatchNormalization.call: "
        "compute_dtype = backend.result_type(inputs.dtype, 'float32'), the input cast to it, the output "
        "cast back (checked in the tests with Keras's torch backend); optimizer variables are made like "
        "the fp32 variables",
    ),
    _preset(
        "tf2-keras",
        "TensorFlow 2 tf.keras mixed_float16 + LossScaleOptimizer",
        "keras/mixed_precision/loss_scale_optimizer.py (TF 2.4-2.15) _DynamicLossScaleState",
        "As keras, with tf.keras's scaler: 2^15, x2 after 2000 clean steps, /2 on overflow, never below 1.",
        memory="counted as Keras 3 (BatchNorm upcast to fp32); tf.keras's own BatchNormalization is not "
        "checked here (TensorFlow is not installed)",
    ),
    _preset(
        "tf1-static-128",
        "NVIDIA 2018 recipe in TensorFlow 1, static loss scale 128",
        "NVIDIA GTC 2018 S81012 'Training Neural Networks with Mixed Precision: Real Examples'; "
        "NVIDIA Mixed Precision Training guide (float32_variable_storage_getter, loss * loss_scale)",
        "fp16 compute on fp32 variables (a custom getter), reductions and softmax in fp32, the loss "
        "multiplied by 128 and the gradients divided by 128 with no overflow check: an overflowing step "
        "reaches the weights.",
        memory="not checked (TensorFlow 1 is not installed): BatchNorm counted as computing in fp32",
    ),
    _preset(
        "apex-O0",
        "NVIDIA Apex amp O0: pure fp32",
        _APEX.format("O0"),
        "fp32 throughout; loss_scale 1.0 is a static scale whose overflow is never checked: no scaling.",
        batchnorm="input",
        memory=_APEX_MEMORY,
    ),
    _preset(
        "apex-O1",
        "NVIDIA Apex amp O1: patched function lists",
        _APEX.format("O1") + "; apex/amp/lists/{functional,torch}_overrides.py",
        "FP16_FUNCS (linear, conv, matmul) in fp16, FP32_FUNCS (softmax, log_softmax, layer_norm, exp, "
        "log, pow, sum, norm, losses) in fp32, fp32 model weights; floatlab's op set stands for the "
        "full lists and, unlike O1, stores every op output in fp16.",
        batchnorm="input",
        memory=_APEX_MEMORY,
    ),
    _preset(
        "apex-O2",
        "NVIDIA Apex amp O2: fp16 model, fp32 BatchNorm and master weights",
        _APEX.format("O2") + "; apex/amp/_initialize.py (output cast to fp32)",
        "model.half() except BatchNorm; fp32 master weights; the model's output is cast to fp32, so the "
        "loss is fp32; softmax and layer norm inside the model in fp16.",
        batchnorm="input",
        memory=_APEX_MEMORY,
    ),
    _preset(
        "apex-O3",
        "NVIDIA Apex amp O3: pure fp16",
        _APEX.format("O3") + "; apex/amp/_initialize.py (output cast to fp32)",
        "model.half() with BatchNorm; no master weights; loss_scale 1.0 (unchecked: no scaling); the "
        "output is cast to fp32 before the loss.",
        batchnorm="input",
        memory=_APEX_MEMORY,
    ),
    _preset(
        "fastai",
        "fastai v1 to_fp16 (MixedPrecision callback)",
        "fastai v1 fastai/callbacks/fp16.py MixedPrecision; fastai/train.py to_fp16; "
        "fastai/torch_core.py model2half",
        "model2half: every parameter fp16 except BatchNorm's; fp32 master copies; output to fp32 before "
        "the loss (loss_fp32). Scale 2^16, /2 on overflow while above 1, x2 after 1000 clean steps "
        "while below 2^24; at scale 1 an overflowing step is applied. fastai still calls the optimizer "
        "on an overflowing step with zero gradients (momentum and weight decay act); floatlab skips it. "
        "fastai v1's callback is its own and never imports Apex. (fastai v2's MixedPrecision of 2020, "
        "now NonNativeMixedPrecision in fastai/callback/fp16.py, starts at max_loss_scale 2^24 with "
        "scale_wait=500; today's fastai v2 to_fp16 is PyTorch's autocast and GradScaler: torch-amp.)",
        batchnorm="input",
        memory="fastai v1 fastai/torch_core.py model2half keeps BatchNorm's parameters fp32; the batch is "
        "cast to fp16 (batch_to_half) and BatchNorm reads it as it comes. " + _TORCH_MEMORY,
    ),
    _preset(
        "mindspore-O0",
        "MindSpore amp O0: fp32",
        _MS.format("O0"),
        "No cast, no loss scale manager.",
        memory=_MS_MEMORY,
    ),
    _preset(
        "mindspore-O1",
        "MindSpore amp O1: white-list ops in fp16",
        _MS.format("O1") + "; AMP_WHITE_LIST",
        "Dense, MatMul, BatchMatMul, Conv and ReLU cells in fp16 (outputs cast back to fp32), the rest in "
        "fp32; parameters fp32; no loss scale manager. floatlab stores every activation in fp16.",
        memory=_MS_MEMORY,
    ),
    _preset(
        "mindspore-O2",
        "MindSpore amp O2: fp16 network, BatchNorm and LayerNorm fp32, dynamic loss scale",
        _MS.format("O2") + "; AMP_BLACK_LIST; train/loss_scale_manager.py DynamicLossScaleManager",
        "network.to_float(fp16) except the black list (BatchNorm1d/2d/3d, LayerNorm); parameters stay "
        "fp32 (cast at use); the loss in fp32 (WithLossCell casts the output). The scale is not capped: "
        "in MindSpore it could grow to inf in fp32, floatlab stops it at 2^127.",
        memory=_MS_MEMORY,
    ),
    _preset(
        "mindspore-O3",
        "MindSpore amp O3: fp16 network, BatchNorm too",
        _MS.format("O3"),
        "network.to_float(fp16) with keep_batchnorm_fp32=False; parameters stay fp32 (MindSpore casts "
        "them at use: fp32 master weights); the loss in fp32; no loss scale manager.",
        memory=_MS_MEMORY,
    ),
    _preset(
        "mindspore-fixed-128",
        "MindSpore O2 with FixedLossScaleManager(128)",
        "mindspore/python/mindspore/train/loss_scale_manager.py FixedLossScaleManager "
        "(drop_overflow_update=True); nn.FixedLossScaleUpdateCell",
        "O2's policy with a fixed scale of 128: an overflowing step is dropped, the scale never changes.",
        memory=_MS_MEMORY,
    ),
    _preset(
        "mindspore-fixed-128-nodrop",
        "MindSpore O2 with FixedLossScaleManager(128, drop_overflow_update=False)",
        "mindspore/python/mindspore/train/loss_scale_manager.py FixedLossScaleManager.get_update_cell "
        "(None); amp.build_train_network (TrainOneStepCell with sens=128)",
        "O2's policy with a fixed scale of 128 and no overflow check: an overflowing step is applied.",
        memory=_MS_MEMORY,
    ),
)
#: the presets by name (case is ignored and ``_`` read as ``-``), in :func:`presets` order
PRESETS: Registry[Preset] = Registry(
    "preset",
    {p.name: p for p in _PRESETS},
    alike="_",
    sep="-",
    listing=lambda names: f"(known: {', '.join(names)})",
    kind="a preset name such as 'apex-O2'",
)


def presets() -> list[Preset]:
    """Every preset, PyTorch first, then Keras/TensorFlow, Apex, fastai, MindSpore.

    >>> len(presets()), presets()[0].name
    (15, 'torch-amp')
    """
    return list(PRESETS.values())


def preset_names() -> list[str]:
    """The presets' names, in :func:`presets` order.

    >>> preset_names()[-1]
    'mindspore-fixed-128-nodrop'
    """
    return list(PRESETS)


def get_preset(name: str | Preset) -> Preset:
    """A preset's record (title, source, notes and policy) by name, read as
    :func:`~floatlab.train.precision.policy.get_policy` reads it (any case: ``"apex-o2"`` is ``"apex-O2"``); a
    :class:`Preset` is returned as is. For the policy alone, ``get_policy(name)`` takes the name too.

    >>> get_preset("APEX-o2").name
    'apex-O2'
    >>> get_preset("apex-O4")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: unknown preset 'apex-O4': did you mean apex-O3? (known: torch-amp, keras, ...)
    """
    return name if isinstance(name, Preset) else PRESETS.lookup(name)


#: another name of :func:`~floatlab.train.precision.policy.get_policy`, which knows the presets' names
resolve_policy = get_policy


def _onoff(v: bool) -> str:
    return "on" if v else "off"


def _ops(ops: frozenset[str]) -> str:
    return ", ".join(sorted(ops)) if ops else "none"


def _scaling(p: Policy) -> str:
    if p.loss_scaling == "dynamic":
        return f"dynamic ({p.scaler})"
    if p.loss_scaling == "static":
        return f"static {p.static_scale:g} ({p.scaler})"
    return "none"


def _recipe(p: Policy) -> str:
    return "none" if p.recipe is None else p.recipe.describe()


def _accumulator(p: Policy) -> str:
    if not p.accumulate:
        return "fp32"
    return p.accumulate + (f", promoted every {p.promote_every}" if p.promote_every else "")


def preset_overrides(preset: Preset | str, policy: Policy) -> list[str]:
    """What ``policy`` changes of ``preset``'s policy, one phrase per changed setting (empty when
    nothing changed): the words a run's description shows after the preset's name, so that an
    override (``--preset apex-O3 --master-weights on``) is reported, never silently dropped.

    >>> p = get_preset("apex-O3")
    >>> preset_overrides(p, p.make_policy().replace(master_weights=True, loss_scaling="dynamic"))
    ['master weights on (apex-O3: off)', 'loss scaling dynamic (torch) (apex-O3: none)']
    >>> preset_overrides(p, p.make_policy())
    []
    """
    pre = get_preset(preset)
    a, b = pre.policy, policy
    words: list[tuple[str, str, str]] = [
        ("forward", a.forward.name, b.forward.name),
        ("backward", a.backward.name, b.backward.name),
        ("master weights", _onoff(a.master_weights), _onoff(b.master_weights)),
        ("loss scaling", _scaling(a), _scaling(b)),
        ("fp32 reductions", _onoff(a.fp32_reductions), _onoff(b.fp32_reductions)),
        ("fp32 ops", _ops(a.fp32_ops), _ops(b.fp32_ops)),
        ("BatchNorm in fp32", _onoff(a.batchnorm_fp32), _onoff(b.batchnorm_fp32)),
        ("rounding", a.rounding, b.rounding),
        ("update rounding", a.update_rounding, b.update_rounding),
        ("update compensation", _onoff(a.update_compensation), _onoff(b.update_compensation)),
        ("saturating casts", _onoff(a.saturate), _onoff(b.saturate)),
        ("subnormals", _onoff(a.subnormals), _onoff(b.subnormals)),
        ("fp8 recipe", _recipe(a), _recipe(b)),
        ("accumulator", _accumulator(a), _accumulator(b)),
        ("memory layout", a.memory_layout, b.memory_layout),
    ]
    return [f"{label} {new} ({pre.name}: {old})" for label, old, new in words if old != new]
