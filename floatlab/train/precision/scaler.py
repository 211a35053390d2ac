"""Loss scaling: multiply the loss so that small gradients survive a narrow backward format.

:class:`LossScaler` follows ``torch.amp.GradScaler`` exactly: the scale is an fp32 number; a step
whose gradients hold an inf or NaN is skipped, the scale is multiplied by ``backoff_factor`` and
the run of clean steps restarts; after ``growth_interval`` clean steps in a row the scale is
multiplied by ``growth_factor`` (unless that overflows fp32). Presets give the rules of the other
frameworks, each checked step for step against the framework or its published source
(``tests/train/precision/test_scaler.py``), and static scaling.

>>> s = LossScaler(init_scale=8.0, growth_interval=2)
>>> for found_inf in (False, False, True, False):
...     s.update(found_inf)
>>> s.scale, s.skipped_steps, [e.scale for e in s.log]
(8.0, 1, [8.0, 8.0, 16.0, 8.0])
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from floatlab.formats import FP32
from floatlab.registry import Registry
from floatlab.rounding import round_array
from floatlab.train._checks import (
    shown,
    want_bool,
    want_dict,
    want_int,
    want_real,
    want_real_or_none,
    want_scaler_knob,
    want_str,
)

if TYPE_CHECKING:
    from floatlab.train.precision.policy import Policy

__all__ = [
    "FP32_SCALE_LIMIT",
    "LIMIT_RULES",
    "SCALER_PRESETS",
    "SCALER_RULES",
    "SCALE_COLLAPSE",
    "LossScaler",
    "ScalerEvent",
    "ScalerRules",
    "ScalerSettings",
    "make_scaler",
]

#: the largest power of two in fp32: a scale that would grow past it stays where it is
FP32_SCALE_LIMIT = 2.0**127
#: fp32's smallest normal number: a scale below it has collapsed (its reciprocal, the unscaling
#: factor, is within a factor of four of overflowing fp32; from 2^-129 on it is inf and every
#: later step is skipped, as torch's GradScaler does all the way down to a scale of 0)
SCALE_COLLAPSE = 2.0**-126
#: how ``min_scale`` and ``max_scale`` act: ``"clamp"`` clips the new scale into them (torch, TF,
#: Apex, MindSpore); ``"guard"`` backs off only while the scale is above ``min_scale`` and grows
#: only while it is below ``max_scale`` (fastai v1): at or below the floor an overflowing step is
#: not caught at all, it is taken and counted as a clean one
LIMIT_RULES: tuple[str, ...] = ("clamp", "guard")


def _fp32(value: float) -> float:
    """``value`` rounded to fp32 (the scale is an fp32 number, as GradScaler's tensor is)."""
    return float(round_array(np.array([value], dtype=np.float64), FP32)[0])


@dataclass(frozen=True)
class ScalerEvent:
    """One step as the scaler saw it: the scale the loss was multiplied by, whether the step was
    skipped, and the share of the non-zero gradients that underflowed to zero (when reported).

    >>> s = LossScaler(init_scale=8.0); s.update(True, underflow=0.25); s.log[0]
    ScalerEvent(scale=8.0, skipped=True, underflow=0.25)
    """

    scale: float
    skipped: bool
    underflow: float | None = None


class ScalerSettings(NamedTuple):
    """The numbers of a scaler preset (a named tuple: it unpacks in this order).

    >>> init, growth, backoff, interval, floor, cap = SCALER_PRESETS["apex"]
    >>> SCALER_PRESETS["apex"].max_scale == cap == 2.0**24
    True
    """

    init_scale: float
    growth_factor: float
    backoff_factor: float
    growth_interval: int
    min_scale: float
    max_scale: float


class ScalerRules(NamedTuple):
    """How a scaler preset behaves beyond its numbers; the defaults are torch's GradScaler.

    ``skips_nonfinite``: whether a step with an inf or NaN gradient is caught (skipped, and the
    scale backed off); ``fp32_scale``: whether the scale is an fp32 number (else a Python float,
    float64); ``limit_rule``: how ``min_scale`` and ``max_scale`` act (see :data:`LIMIT_RULES`).

    >>> SCALER_RULES["fastai"].limit_rule, ScalerRules().skips_nonfinite
    ('guard', True)
    """

    skips_nonfinite: bool = True
    fp32_scale: bool = True
    limit_rule: str = "clamp"


# Each entry cites the file its numbers come from; tests/train/precision/test_scaler.py runs each rule
# step for step against the framework itself (torch, Keras 3) or against that source written out in
# Python.
#: the loss scalers of the frameworks by name (case is ignored; ``"pytorch"``, ``"gradscaler"``,
#: ``"keras3"``, ``"tensorflow"``, ``"tf"`` and ``"tf.keras"`` are other names)
SCALER_PRESETS: Registry[ScalerSettings] = Registry(
    "loss-scaler preset",
    {
        # torch/amp/grad_scaler.py, GradScaler.__init__ (and aten's _amp_update_scale_ kernel)
        "torch": ScalerSettings(2.0**16, 2.0, 0.5, 2000, 0.0, math.inf),
        # keras/src/optimizers/loss_scale_optimizer.py (Keras 3): initial_scale 2^15,
        # dynamic_growth_steps 2000, the scale halved on overflow with no floor, an fp32 variable
        "keras": ScalerSettings(2.0**15, 2.0, 0.5, 2000, 0.0, math.inf),
        # keras/mixed_precision/loss_scale_optimizer.py (tf.keras of TensorFlow 2.4-2.15),
        # _DynamicLossScaleState.update: tf.maximum(scale / multiplier, 1), a floor of 1
        "tf2": ScalerSettings(2.0**15, 2.0, 0.5, 2000, 1.0, math.inf),
        # tensorflow/python/training/experimental/loss_scale.py, tf.compat.v1 DynamicLossScale:
        # 2^15, increment_period 2000, multiplier 2, never below 1
        "tf1": ScalerSettings(2.0**15, 2.0, 0.5, 2000, 1.0, math.inf),
        # NVIDIA/apex apex/amp/scaler.py LossScaler("dynamic"): init_scale 2^16, scale_factor 2,
        # scale_window 2000, min_loss_scale None, max_loss_scale 2^24 (amp.initialize's default)
        "apex": ScalerSettings(2.0**16, 2.0, 0.5, 2000, 0.0, 2.0**24),
        # fastai v1 fastai/callbacks/fp16.py MixedPrecision with to_fp16's defaults (fastai/train.py):
        # loss_scale 2^16, max_noskip 1000, max_scale 2^24; halves only while the scale is above 1
        "fastai": ScalerSettings(2.0**16, 2.0, 0.5, 1000, 1.0, 2.0**24),
        # mindspore/python/mindspore/train/loss_scale_manager.py DynamicLossScaleManager (2^24,
        # scale_factor 2, scale_window 2000) run by nn.DynamicLossScaleUpdateCell: never below 1
        "mindspore": ScalerSettings(2.0**24, 2.0, 0.5, 2000, 1.0, math.inf),
        # static scales (growth and backoff 1): FixedLossScaleManager(128) skips an overflowing step,
        # FixedLossScaleManager(128, drop_overflow_update=False) takes it; the 2018 TF1 recipe
        # multiplies the loss by a constant and divides the gradients with no check at all
        "mindspore-fixed": ScalerSettings(128.0, 1.0, 1.0, 1, 0.0, math.inf),
        "mindspore-fixed-nodrop": ScalerSettings(128.0, 1.0, 1.0, 1, 0.0, math.inf),
        "tf1-static": ScalerSettings(128.0, 1.0, 1.0, 1, 0.0, math.inf),
    },
    aliases={
        "pytorch": "torch",
        "gradscaler": "torch",
        "keras3": "keras",
        "tensorflow": "tf2",
        "tf": "tf2",
        "tf.keras": "tf2",
    },
    kind="a name such as 'torch'",
)
# the presets whose rules are not torch's
SCALER_RULES: dict[str, ScalerRules] = {
    # apex and fastai hold the scale in a Python float and unscale by a Python scalar
    "apex": ScalerRules(fp32_scale=False),
    "fastai": ScalerRules(fp32_scale=False, limit_rule="guard"),
    "mindspore-fixed-nodrop": ScalerRules(skips_nonfinite=False),
    "tf1-static": ScalerRules(skips_nonfinite=False),
}


class LossScaler:
    """Dynamic loss scaling with ``torch.amp.GradScaler``'s semantics, and the other frameworks'
    rules through a few settings.

    ``min_scale`` and ``max_scale`` bound the scale (the Apex, fastai, MindSpore and TensorFlow
    presets use them; torch leaves them open: its scale halves on every overflow, down to 0, where
    training stops for good); ``limit_rule`` says how they act (:data:`LIMIT_RULES`).
    ``growth_factor=1`` and ``backoff_factor=1`` make a static scale. ``skips_nonfinite=False``
    makes a scaler that never looks at the gradients: an overflowing step is taken (MindSpore's
    ``FixedLossScaleManager(drop_overflow_update=False)``). ``fp32_scale=False`` holds the scale in
    a Python float (Apex, fastai) instead of fp32. With ``enabled=False`` the scale is 1, never
    changes and no step is skipped: a run without loss scaling, whose non-finite gradients reach
    the weights.

    Two faults are detected: :attr:`collapsed` (the scale fell below fp32's smallest normal,
    :data:`SCALE_COLLAPSE`) and :attr:`at_limit` (the last update wanted to grow the scale but
    that would overflow, so it stayed at the limit).

    >>> s = LossScaler.preset("keras")
    >>> s.scale, s.growth_interval
    (32768.0, 2000)
    """

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        *,
        min_scale: float = 0.0,
        max_scale: float = math.inf,
        enabled: bool = True,
        name: str = "torch",
        skips_nonfinite: bool = True,
        fp32_scale: bool = True,
        limit_rule: str = "clamp",
    ) -> None:
        for knob, value in (
            ("init_scale", init_scale),
            ("growth_factor", growth_factor),
            ("backoff_factor", backoff_factor),
            ("growth_interval", growth_interval),
        ):
            want_scaler_knob(knob, value)
        if not 0.0 <= min_scale <= max_scale:
            raise ValueError(
                f"min_scale={shown(min_scale)}, max_scale={shown(max_scale)}: expected 0 <= min <= max"
            )
        if limit_rule not in LIMIT_RULES:
            raise ValueError(f"limit_rule={shown(limit_rule)}: expected one of {', '.join(LIMIT_RULES)}")
        self.growth_factor = float(growth_factor)
        self.backoff_factor = float(backoff_factor)
        self.growth_interval = growth_interval
        self.min_scale = float(min_scale)
        self.max_scale = float(max_scale)
        self.enabled = want_bool("enabled", enabled)
        self.name = name
        self.fp32_scale = want_bool("fp32_scale", fp32_scale)
        self.limit_rule = limit_rule
        self._skips = want_bool("skips_nonfinite", skips_nonfinite)
        self._init_scale = float(init_scale)
        self._scale = self._held(init_scale) if enabled else 1.0
        self._growth_tracker = 0
        self._inv, self._inv_for = math.nan, math.nan
        self._at_limit = False
        self.steps = 0
        self.skipped_steps = 0
        self.log: list[ScalerEvent] = []

    # ---- constructors ------------------------------------------------------------------------
    @classmethod
    def preset(cls, name: str) -> LossScaler:
        """The scaler of a :data:`SCALER_PRESETS` entry: ``"torch"``, ``"keras"`` (Keras 3),
        ``"tf2"`` (tf.keras), ``"tf1"``, ``"apex"``, ``"fastai"``, ``"mindspore"``, or a static one.

        >>> LossScaler.preset("apex").max_scale == 2.0**24
        True
        >>> LossScaler.preset("mindspore-fixed-nodrop").skips_nonfinite
        False
        """
        key = SCALER_PRESETS.name(name)
        init, grow, back, interval, lo, hi = SCALER_PRESETS[key]
        rules = SCALER_RULES.get(key, ScalerRules())
        return cls(
            init,
            grow,
            back,
            interval,
            min_scale=lo,
            max_scale=hi,
            name=key,
            skips_nonfinite=rules.skips_nonfinite,
            fp32_scale=rules.fp32_scale,
            limit_rule=rules.limit_rule,
        )

    @classmethod
    def static(
        cls, scale: float = 2.0**10, *, skips_nonfinite: bool = True, name: str = "static"
    ) -> LossScaler:
        """A fixed scale; a step with a non-finite gradient is still skipped (as MindSpore's
        FixedLossScaleManager does by default), unless ``skips_nonfinite=False``.

        >>> s = LossScaler.static(128.0); s.update(True); s.scale, s.skipped_steps
        (128.0, 1)
        """
        return cls(scale, 1.0, 1.0, 1, name=name, skips_nonfinite=skips_nonfinite)

    @classmethod
    def disabled(cls) -> LossScaler:
        """No loss scaling: scale 1, no skipped steps.

        >>> LossScaler.disabled().skips_nonfinite
        False
        """
        return cls(enabled=False, name="none")

    @classmethod
    def for_policy(
        cls, loss_scaling: str, scaler: str = "torch", static_scale: float = 2.0**10
    ) -> LossScaler:
        """The scaler a precision policy's three fields ask for: ``loss_scaling`` ``"none"``,
        ``"static"`` (``static_scale``, skipping an overflowing step unless the preset ``scaler``
        names takes it) or ``"dynamic"`` (the preset ``scaler`` names).

        >>> LossScaler.for_policy("static", "tf1-static", 128.0).skips_nonfinite
        False
        >>> LossScaler.for_policy("dynamic", "fastai").growth_interval
        1000
        """
        if loss_scaling == "dynamic":
            return cls.preset(scaler)
        if loss_scaling == "static":
            key = SCALER_PRESETS.name(scaler)
            rules = SCALER_RULES.get(key, ScalerRules())
            static_preset = SCALER_PRESETS[key].growth_factor == SCALER_PRESETS[key].backoff_factor == 1.0
            return cls.static(
                static_scale, skips_nonfinite=rules.skips_nonfinite, name=key if static_preset else "static"
            )
        if loss_scaling == "none":
            return cls.disabled()
        raise ValueError(f"loss_scaling={shown(loss_scaling)}: expected one of none, static, dynamic")

    # ---- state ---------------------------------------------------------------------------------
    def _held(self, value: float) -> float:
        """``value`` as the scale is held: rounded to fp32, or a Python float (float64)."""
        return _fp32(value) if self.fp32_scale else float(value)

    @property
    def scale(self) -> float:
        """The current scale (an fp32 value unless ``fp32_scale=False``)."""
        return self._scale

    @property
    def inv_scale(self) -> float:
        """1/scale rounded to fp32, the factor GradScaler multiplies the gradients by to unscale.

        >>> LossScaler(init_scale=3.0).inv_scale == float(np.float32(1 / 3))
        True
        """
        if self._inv_for != self._scale:
            # GradScaler takes the reciprocal in double and rounds it to fp32 (Apex and fastai
            # multiply or divide fp32 gradients by a Python float: the same for powers of two)
            self._inv = _fp32(1.0 / self._scale) if self._scale != 0.0 else math.inf
            self._inv_for = self._scale
        return self._inv

    @property
    def growth_tracker(self) -> int:
        """Clean steps in a row since the scale last changed."""
        return self._growth_tracker

    @property
    def skips_nonfinite(self) -> bool:
        """Whether a step with an inf or NaN gradient is skipped (every enabled scaler, unless
        made with ``skips_nonfinite=False``)."""
        return self.enabled and self._skips

    @property
    def catches_overflow(self) -> bool:
        """Whether a step with an inf or NaN gradient at the current scale is skipped and the scale
        backed off: :attr:`skips_nonfinite`, except at or below the floor of a ``"guard"`` scaler
        (fastai takes such a step and counts it as clean).

        >>> s = LossScaler(2.0, min_scale=1.0, limit_rule="guard"); s.update(True)
        >>> s.scale, s.catches_overflow
        (1.0, False)
        """
        if not self.skips_nonfinite:
            return False
        return not (self.limit_rule == "guard" and self._scale <= self.min_scale)

    @property
    def is_dynamic(self) -> bool:
        """Whether the scale can change."""
        return self.enabled and (self.growth_factor != 1.0 or self.backoff_factor != 1.0)

    @property
    def collapsed(self) -> bool:
        """Whether the scale has collapsed below fp32's smallest normal (:data:`SCALE_COLLAPSE`),
        as after a long run of overflowing steps with no ``min_scale`` floor.

        >>> s = LossScaler(init_scale=2.0**-120, growth_interval=10)
        >>> for _ in range(7):
        ...     s.update(True)
        >>> s.scale == 2.0**-127, s.collapsed
        (True, True)
        """
        return self.enabled and self._scale < SCALE_COLLAPSE

    @property
    def at_limit(self) -> bool:
        """Whether the last update was due to grow the scale but left it where it was, because the
        grown scale would overflow (the scale sticks at the float32 limit).

        >>> s = LossScaler(init_scale=2.0**127, growth_interval=1); s.update(False)
        >>> s.scale == 2.0**127, s.at_limit
        (True, True)
        """
        return self._at_limit

    def update(self, found_inf: bool, *, underflow: float | None = None) -> None:
        """Record one step: ``found_inf`` says whether its gradients held an inf or NaN (the step
        was skipped if :attr:`catches_overflow`); ``underflow`` is the share of its gradients that
        were flushed to zero.

        >>> s = LossScaler(init_scale=4.0, growth_interval=1); s.update(False); s.scale
        8.0
        """
        self.steps += 1
        self._at_limit = False
        caught = bool(found_inf) and self.catches_overflow
        self.log.append(ScalerEvent(self._scale, caught, underflow))
        if not self.enabled:
            return
        if caught:
            self.skipped_steps += 1
            new = self._held(self._scale * self.backoff_factor)
            self._scale = max(new, self.min_scale) if self.limit_rule == "clamp" else new
            self._growth_tracker = 0
            return
        # a clean step (or an overflow the scaler does not catch): count it first, then compare
        # with the interval (GradScaler's order)
        successful = self._growth_tracker + 1
        if self.limit_rule == "guard":
            # fastai: `noskip >= max_noskip and loss_scale < max_scale`, the count runs on at the cap
            if successful >= self.growth_interval and self._scale < self.max_scale:
                self._grow(cap=False)
            else:
                self._growth_tracker = successful
        elif successful == self.growth_interval:
            self._grow(cap=True)
        else:
            self._growth_tracker = successful

    def _grow(self, *, cap: bool) -> None:
        grown = self._held(self._scale * self.growth_factor)
        # never grow the scale past its format's range to inf (GradScaler keeps it as it is)
        if math.isfinite(grown):
            self._scale = min(grown, self.max_scale) if cap else grown
        else:
            self._at_limit = True
        self._growth_tracker = 0

    def summary(self) -> dict[str, Any]:
        """Steps, skipped steps, the scale range and the mean underflow share.

        >>> LossScaler.static(2.0).summary()["skipped_steps"]
        0
        """
        scales = [e.scale for e in self.log] or [self._scale]
        under = [e.underflow for e in self.log if e.underflow is not None]
        return {
            "name": self.name,
            "steps": self.steps,
            "skipped_steps": self.skipped_steps,
            "skip_rate": self.skipped_steps / self.steps if self.steps else 0.0,
            "scale": self._scale,
            "scale_min": min(scales),
            "scale_max": max(scales),
            "mean_underflow": sum(under) / len(under) if under else None,
        }

    def state_dict(self) -> dict[str, Any]:
        """GradScaler's keys (``scale``, ``growth_factor``, ``backoff_factor``, ``growth_interval``,
        ``_growth_tracker``) and this scaler's own (a state without the newer rule keys loads with
        torch's rules).

        >>> LossScaler().state_dict()["_growth_tracker"]
        0
        """
        return {
            "scale": self._scale,
            "growth_factor": self.growth_factor,
            "backoff_factor": self.backoff_factor,
            "growth_interval": self.growth_interval,
            "_growth_tracker": self._growth_tracker,
            "min_scale": self.min_scale,
            "max_scale": self.max_scale,
            "enabled": self.enabled,
            "name": self.name,
            "skips_nonfinite": self._skips,
            "fp32_scale": self.fp32_scale,
            "limit_rule": self.limit_rule,
            "init_scale": self._init_scale,
            "steps": self.steps,
            "skipped_steps": self.skipped_steps,
            "log": [[e.scale, e.skipped, e.underflow] for e in self.log],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (a GradScaler state dict loads too).

        >>> a = LossScaler(init_scale=4.0); a.update(True)
        >>> b = LossScaler(); b.load_state_dict(a.state_dict()); b.scale
        2.0
        """
        want_dict("loss-scaler state", state)
        missing = {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"} - set(
            state
        )
        if missing:
            raise ValueError(f"loss-scaler state lacks {sorted(missing)}")
        scale = want_real("scale", state["scale"])
        if not 0.0 <= scale < math.inf:  # (0: a collapsed scale, which is a state, not an error)
            raise ValueError(f"scale={shown(scale)}: expected a finite number >= 0")
        init = want_real("init_scale", state.get("init_scale", scale if scale > 0 else 2.0**16))
        # the constructor checks the settings; the counters and the log are checked here
        checked = LossScaler(
            init_scale=init,
            growth_factor=want_real("growth_factor", state["growth_factor"]),
            backoff_factor=want_real("backoff_factor", state["backoff_factor"]),
            growth_interval=want_int("growth_interval", state["growth_interval"], 1),
            min_scale=want_real("min_scale", state.get("min_scale", 0.0)),
            max_scale=want_real("max_scale", state.get("max_scale", math.inf)),
            enabled=want_bool("enabled", state.get("enabled", True)),
            name=want_str("name", state.get("name", self.name)),
            skips_nonfinite=want_bool("skips_nonfinite", state.get("skips_nonfinite", True)),
            fp32_scale=want_bool("fp32_scale", state.get("fp32_scale", True)),
            limit_rule=want_str("limit_rule", state.get("limit_rule", "clamp")),
        )
        tracker = want_int("_growth_tracker", state["_growth_tracker"])
        steps = want_int("steps", state.get("steps", 0))
        skipped = want_int("skipped_steps", state.get("skipped_steps", 0))
        log_in = state.get("log", [])
        if not isinstance(log_in, list) or not all(
            isinstance(e, (list, tuple)) and len(e) == 3 for e in log_in
        ):
            raise ValueError(
                f"loss-scaler log={shown(log_in)}: expected a list of [scale, skipped, underflow]"
            )
        log = [
            ScalerEvent(
                want_real("log scale", s),
                want_bool("log skipped", k),
                want_real_or_none("log underflow", u),
            )
            for s, k, u in log_in
        ]
        self.__dict__.update(checked.__dict__)
        self._scale, self._growth_tracker = scale, tracker
        self.steps, self.skipped_steps, self.log = steps, skipped, log

    def __repr__(self) -> str:
        return (
            f"LossScaler(scale={self._scale:g}, growth_factor={self.growth_factor:g}, "
            f"backoff_factor={self.backoff_factor:g}, growth_interval={self.growth_interval}, "
            f"name={self.name!r})"
        )


def make_scaler(policy: Policy) -> LossScaler:
    """A fresh loss scaler with the rules ``policy`` asks for through its ``loss_scaling``,
    ``scaler`` and ``static_scale`` (:meth:`LossScaler.for_policy`): what the trainer starts with,
    and what a framework preset's :meth:`~floatlab.train.precision.presets.Preset.make_scaler` gives.

    >>> from floatlab.train.precision.policy import get_policy
    >>> make_scaler(get_policy("mixed-fp16")).scale, make_scaler(get_policy("fp16")).enabled
    (65536.0, False)
    >>> s = make_scaler(get_policy("tf1-static-128"))
    >>> s.scale, s.is_dynamic, s.skips_nonfinite
    (128.0, False, False)

    The policy's scaler knobs override the preset's numbers:

    >>> s = make_scaler(get_policy("apex-O2").replace(growth_interval=10, init_scale=2.0**8))
    >>> s.scale, s.growth_interval, s.max_scale == 2.0**24
    (256.0, 10, True)
    """
    scaler = LossScaler.for_policy(policy.loss_scaling, policy.scaler, policy.static_scale)
    knobs = policy.scaler_knobs
    if not knobs or policy.loss_scaling != "dynamic":  # (the knobs are the dynamic scaler's)
        return scaler
    state = scaler.state_dict()
    state.update(knobs)
    if "init_scale" in knobs:
        state["scale"] = knobs["init_scale"]
    scaler.load_state_dict(state)  # (its checks: an interval >= 1, a growth factor >= 1, ...)
    return scaler
