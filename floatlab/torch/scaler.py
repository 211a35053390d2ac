"""A policy's loss scaling on a torch model, with ``torch.amp.GradScaler``'s interface:
:class:`PolicyScaler` (what :meth:`floatlab.torch.Simulation.scaler` returns).

Its rule is floatlab's :class:`~floatlab.train.precision.scaler.LossScaler` for the policy
(``torch.amp.GradScaler``'s for ``"mixed-fp16"``; a framework preset's for ``"apex-O2"``; a
static scale, or none), so the run on a torch model scales, skips and grows as floatlab's NumPy
trainer does. :func:`scaler_for` builds that scaler with torch's knobs (``init_scale``,
``growth_factor``, ``backoff_factor``, ``growth_interval``) in place of the preset's.

The loop is GradScaler's::

    scaler = sim.scaler()
    scaler.scale(loss).backward()
    scaler.step(opt)        # unscales (fp32), skips the step when a gradient is not finite
    scaler.update()         # grows or backs off the scale; records it for sim.to_pandas()

>>> import torch
>>> s = PolicyScaler(scaler_for("mixed-fp16", growth_interval=1))
>>> s.get_scale()
65536.0
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from floatlab.train.precision.policy import Policy, get_policy
from floatlab.train.precision.scaler import LossScaler, make_scaler

__all__ = ["PolicyScaler", "scaler_for"]


def _checked_knobs(
    init_scale: float | None,
    growth_factor: float | None,
    backoff_factor: float | None,
    growth_interval: int | None,
) -> None:
    def number(x: object) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool)

    if init_scale is not None and not (number(init_scale) and 0 < init_scale < math.inf):
        raise ValueError(f"init_scale={init_scale!r}: expected a finite number > 0")
    if growth_factor is not None and not (number(growth_factor) and 1 <= growth_factor < math.inf):
        raise ValueError(f"growth_factor={growth_factor!r}: expected a finite number >= 1")
    if backoff_factor is not None and not (number(backoff_factor) and 0 < backoff_factor < 1):
        raise ValueError(f"backoff_factor={backoff_factor!r}: expected a number in (0, 1)")
    if growth_interval is not None and not (
        isinstance(growth_interval, int) and not isinstance(growth_interval, bool) and growth_interval >= 1
    ):
        raise ValueError(f"growth_interval={growth_interval!r}: expected a whole number of steps >= 1")


def scaler_for(
    policy: Policy | str,
    *,
    init_scale: float | None = None,
    growth_factor: float | None = None,
    backoff_factor: float | None = None,
    growth_interval: int | None = None,
) -> LossScaler:
    """The loss scaler ``policy`` asks for (:func:`~floatlab.train.precision.scaler.make_scaler`),
    with each knob given (torch's names) in place of its preset's. The knobs need a policy with
    dynamic loss scaling; a growth interval below 1, a growth factor below 1 or a backoff factor
    outside (0, 1) is refused in one line.

    >>> s = scaler_for("mixed-fp16", init_scale=1024.0, growth_interval=100)
    >>> s.scale, s.growth_interval, s.growth_factor
    (1024.0, 100, 2.0)
    >>> scaler_for("mixed-fp16", growth_interval=0)
    Traceback (most recent call last):
    ...
    ValueError: growth_interval=0: expected a whole number of steps >= 1
    """
    p = get_policy(policy)
    knobs = {
        "init_scale": init_scale,
        "growth_factor": growth_factor,
        "backoff_factor": backoff_factor,
        "growth_interval": growth_interval,
    }
    _checked_knobs(init_scale, growth_factor, backoff_factor, growth_interval)
    base = make_scaler(p)
    given = {k: v for k, v in knobs.items() if v is not None}
    if not given:
        return base
    if p.loss_scaling != "dynamic":
        first = next(iter(given))
        raise ValueError(
            f"{first}={given[first]!r}: policy {p.name} has no dynamic loss scaling (loss_scaling "
            f"{p.loss_scaling!r}); expected a policy that has it, such as mixed-fp16"
        )
    return LossScaler(
        given.get("init_scale", base.scale),
        given.get("growth_factor", base.growth_factor),
        given.get("backoff_factor", base.backoff_factor),
        int(given.get("growth_interval", base.growth_interval)),
        min_scale=base.min_scale,
        max_scale=base.max_scale,
        name=base.name,
        skips_nonfinite=base.skips_nonfinite,
        fp32_scale=base.fp32_scale,
        limit_rule=base.limit_rule,
    )


class PolicyScaler:
    """``torch.amp.GradScaler``'s interface (:meth:`scale`, :meth:`unscale_`, :meth:`step`,
    :meth:`update`, :meth:`get_scale`) over floatlab's :class:`~floatlab.train.precision.scaler.LossScaler`
    ``rule``. Unscaling multiplies each gradient by the fp32 ``1/scale``, as GradScaler does; a
    step with a gradient that is not finite is skipped when the rule skips such steps.
    ``on_update(scale, skipped)`` is called at each :meth:`update` with the scale the step used.

    >>> import torch
    >>> lin = torch.nn.Linear(1, 1)
    >>> opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    >>> s = PolicyScaler(scaler_for("mixed-fp16"))
    >>> s.scale(lin(torch.tensor([[float("inf")]])).sum()).backward()
    >>> s.step(opt) is None, s.update(), s.get_scale(), s.rule.skipped_steps
    (True, None, 32768.0, 1)
    """

    def __init__(self, rule: LossScaler, on_update: Callable[[float, bool], None] | None = None) -> None:
        self.rule = rule
        self.on_update = on_update
        self._unscaled: dict[int, bool] = {}  # per optimizer this step: whether a gradient is not finite

    def get_scale(self) -> float:
        """The current scale."""
        return self.rule.scale

    def is_enabled(self) -> bool:
        """Whether the rule scales at all (GradScaler's method)."""
        return self.rule.enabled

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        """``loss`` times the scale (an fp32 multiply)."""
        return loss * torch.tensor(self.rule.scale, dtype=torch.float32, device=loss.device)

    def unscale_(self, optimizer: Any) -> None:
        """Divide the optimizer's gradients by the scale (multiply by the fp32 ``1/scale``) and note
        whether one of them is not finite; once per optimizer and step."""
        if id(optimizer) in self._unscaled:
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update()")
        inv = self.rule.inv_scale
        bad = []
        with torch.no_grad():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        if inv != 1.0:
                            p.grad.mul_(torch.tensor(inv, dtype=torch.float32, device=p.grad.device))
                        bad.append(~torch.isfinite(p.grad).all())
        # (one read-back for all the gradients)
        self._unscaled[id(optimizer)] = bool(torch.stack(bad).any().item()) if bad else False

    def step(self, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        """Unscale (unless done), then ``optimizer.step()``, or nothing when a gradient is not
        finite and the rule skips such steps."""
        if id(optimizer) not in self._unscaled:
            self.unscale_(optimizer)
        if self._unscaled[id(optimizer)] and self.rule.skips_nonfinite:
            return None
        return optimizer.step(*args, **kwargs)

    def update(self) -> None:
        """Grow or back off the scale after the step (the rule's update), and record it."""
        found_inf = any(self._unscaled.values())
        used = self.rule.scale
        skipped_before = self.rule.skipped_steps
        self.rule.update(found_inf)
        self._unscaled = {}
        if self.on_update is not None:
            self.on_update(used, self.rule.skipped_steps > skipped_before)
