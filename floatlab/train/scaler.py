"""Loss scaling: multiply the loss so that small gradients survive a narrow backward format.

:class:`LossScaler` follows ``torch.amp.GradScaler`` exactly: the scale is an fp32 number; a step
whose gradients hold an inf or NaN is skipped, the scale is multiplied by ``backoff_factor`` and
the run of clean steps restarts; after ``growth_interval`` clean steps in a row the scale is
multiplied by ``growth_factor`` (unless that overflows fp32). Presets give the defaults of the
other frameworks, and static scaling.

>>> s = LossScaler(init_scale=8.0, growth_interval=2)
>>> for found_inf in (False, False, True, False):
...     s.update(found_inf)
>>> s.scale, s.skipped_steps, [e.scale for e in s.log]
(8.0, 1, [8.0, 8.0, 16.0, 8.0])
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from floatlab.formats import FP32
from floatlab.rounding import round_array
from floatlab.train._checks import (
    shown,
    want_bool,
    want_dict,
    want_fp32_scale,
    want_int,
    want_real,
    want_real_or_none,
    want_str,
)

__all__ = ["FP32_SCALE_LIMIT", "SCALER_PRESETS", "SCALE_COLLAPSE", "LossScaler", "ScalerEvent"]

#: the largest power of two in fp32: a scale that would grow past it stays where it is
FP32_SCALE_LIMIT = 2.0**127
#: fp32's smallest normal number: a scale below it has collapsed (its reciprocal, the unscaling
#: factor, is within a factor of four of overflowing fp32; from 2^-129 on it is inf and every
#: later step is skipped, as torch's GradScaler does all the way down to a scale of 0)
SCALE_COLLAPSE = 2.0**-126


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


# name -> (init_scale, growth_factor, backoff_factor, growth_interval, min_scale, max_scale)
SCALER_PRESETS: dict[str, tuple[float, float, float, int, float, float]] = {
    # torch.amp.GradScaler
    "torch": (2.0**16, 2.0, 0.5, 2000, 0.0, math.inf),
    # keras.mixed_precision.LossScaleOptimizer (Keras 3, TensorFlow 2): initial_scale 2^15
    "keras": (2.0**15, 2.0, 0.5, 2000, 0.0, math.inf),
    # tf.compat.v1 DynamicLossScale: 2^15, and the scale never drops below 1
    "tf1": (2.0**15, 2.0, 0.5, 2000, 1.0, math.inf),
    # NVIDIA Apex amp LossScaler("dynamic"): 2^16, capped at 2^24
    "apex": (2.0**16, 2.0, 0.5, 2000, 0.0, 2.0**24),
    # MindSpore DynamicLossScaleManager: 2^24, factor 2, window 2000, never below 1
    "mindspore": (2.0**24, 2.0, 0.5, 2000, 1.0, math.inf),
}
_PRESET_ALIASES = {
    "pytorch": "torch",
    "gradscaler": "torch",
    "tensorflow": "keras",
    "tf": "keras",
    "tf2": "keras",
}


class LossScaler:
    """Dynamic loss scaling with ``torch.amp.GradScaler``'s semantics.

    ``min_scale`` and ``max_scale`` bound the scale (the Apex, MindSpore and TF1 presets use
    them; torch leaves them open: its scale halves on every overflow, down to 0, where training
    stops for good). ``min_scale=1.0`` is the floor of TensorFlow 1's and MindSpore's dynamic scalers.
    ``growth_factor=1`` and ``backoff_factor=1`` make a static scale. With ``enabled=False`` the
    scale is 1, never changes and no step is skipped: a run without loss scaling, whose
    non-finite gradients reach the weights.

    Two faults are detected: :attr:`collapsed` (the scale fell below fp32's smallest normal,
    :data:`SCALE_COLLAPSE`) and :attr:`at_limit` (the last update wanted to grow the scale but
    that would overflow fp32, so it stayed at the limit).

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
    ) -> None:
        want_fp32_scale("init_scale", init_scale)
        if not (isinstance(growth_factor, (int, float)) and 1.0 <= growth_factor < math.inf):
            raise ValueError(f"growth_factor={shown(growth_factor)}: expected a finite number >= 1")
        if not (isinstance(backoff_factor, (int, float)) and 0.0 < backoff_factor <= 1.0):
            raise ValueError(f"backoff_factor={shown(backoff_factor)}: expected a number in (0, 1]")
        if isinstance(growth_interval, bool) or not isinstance(growth_interval, int) or growth_interval < 1:
            raise ValueError(f"growth_interval={shown(growth_interval)}: expected an integer >= 1")
        if not 0.0 <= min_scale <= max_scale:
            raise ValueError(
                f"min_scale={shown(min_scale)}, max_scale={shown(max_scale)}: expected 0 <= min <= max"
            )
        self.growth_factor = float(growth_factor)
        self.backoff_factor = float(backoff_factor)
        self.growth_interval = growth_interval
        self.min_scale = float(min_scale)
        self.max_scale = float(max_scale)
        self.enabled = enabled
        self.name = name
        self._init_scale = float(init_scale)
        self._scale = _fp32(init_scale) if enabled else 1.0
        self._growth_tracker = 0
        self._inv, self._inv_for = math.nan, math.nan
        self._at_limit = False
        self.steps = 0
        self.skipped_steps = 0
        self.log: list[ScalerEvent] = []

    # ---- constructors ------------------------------------------------------------------------
    @classmethod
    def preset(cls, name: str) -> LossScaler:
        """The default dynamic scaler of ``"torch"``, ``"keras"`` (also TensorFlow 2), ``"tf1"``,
        ``"apex"`` or ``"mindspore"``.

        >>> LossScaler.preset("apex").max_scale == 2.0**24
        True
        """
        key = _PRESET_ALIASES.get(name.strip().lower(), name.strip().lower())
        if key not in SCALER_PRESETS:
            raise ValueError(
                f"unknown loss-scaler preset {shown(name)}: expected one of {', '.join(SCALER_PRESETS)}"
            )
        init, grow, back, interval, lo, hi = SCALER_PRESETS[key]
        return cls(init, grow, back, interval, min_scale=lo, max_scale=hi, name=key)

    @classmethod
    def static(cls, scale: float = 2.0**10) -> LossScaler:
        """A fixed scale; a step with a non-finite gradient is still skipped (as MindSpore's
        FixedLossScaleManager does by default).

        >>> s = LossScaler.static(128.0); s.update(True); s.scale
        128.0
        """
        return cls(scale, 1.0, 1.0, 1, name="static")

    @classmethod
    def disabled(cls) -> LossScaler:
        """No loss scaling: scale 1, no skipped steps.

        >>> LossScaler.disabled().skips_nonfinite
        False
        """
        return cls(enabled=False, name="none")

    # ---- state ---------------------------------------------------------------------------------
    @property
    def scale(self) -> float:
        """The current scale (an fp32 value)."""
        return self._scale

    @property
    def inv_scale(self) -> float:
        """1/scale rounded to fp32, the factor GradScaler multiplies the gradients by to unscale.

        >>> LossScaler(init_scale=3.0).inv_scale == float(np.float32(1 / 3))
        True
        """
        if self._inv_for != self._scale:
            # GradScaler takes the reciprocal in double and rounds it to fp32
            self._inv = _fp32(1.0 / self._scale) if self._scale != 0.0 else math.inf
            self._inv_for = self._scale
        return self._inv

    @property
    def growth_tracker(self) -> int:
        """Clean steps in a row since the scale last changed."""
        return self._growth_tracker

    @property
    def skips_nonfinite(self) -> bool:
        """Whether a step with an inf or NaN gradient is skipped (every enabled scaler)."""
        return self.enabled

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
        grown scale would overflow fp32 (the scale sticks at the float32 limit).

        >>> s = LossScaler(init_scale=2.0**127, growth_interval=1); s.update(False)
        >>> s.scale == 2.0**127, s.at_limit
        (True, True)
        """
        return self._at_limit

    def update(self, found_inf: bool, *, underflow: float | None = None) -> None:
        """Record one step: ``found_inf`` says whether its gradients held an inf or NaN (the step
        was skipped); ``underflow`` is the share of its gradients that were flushed to zero.

        >>> s = LossScaler(init_scale=4.0, growth_interval=1); s.update(False); s.scale
        8.0
        """
        self.steps += 1
        self._at_limit = False
        skipped = bool(found_inf) and self.enabled
        self.log.append(ScalerEvent(self._scale, skipped, underflow))
        if not self.enabled:
            return
        if found_inf:
            self.skipped_steps += 1
            new = _fp32(self._scale * self.backoff_factor)
            self._scale = max(new, self.min_scale)
            self._growth_tracker = 0
            return
        # a clean step: count it first, then compare with the interval (GradScaler's order)
        successful = self._growth_tracker + 1
        if successful == self.growth_interval:
            grown = _fp32(self._scale * self.growth_factor)
            # never grow the scale past fp32's range to inf (GradScaler keeps it as it is)
            if math.isfinite(grown):
                self._scale = min(grown, self.max_scale)
            else:
                self._at_limit = True
            self._growth_tracker = 0
        else:
            self._growth_tracker = successful

    def report(self) -> dict[str, Any]:
        """Steps, skipped steps, the scale range and the mean underflow share.

        >>> LossScaler.static(2.0).report()["skipped_steps"]
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
        ``_growth_tracker``) and this scaler's own.

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
