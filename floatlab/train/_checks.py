"""Type checks for the values a config, a policy or a checkpoint hands the trainer.

A value of the wrong type is one ValueError naming it and what was expected, at the door, not a
TypeError deep inside a training step.

>>> want_int("epochs", 3), want_real("lr", 1), want_ints("hidden", [8, 4], lo=1)
(3, 1.0, (8, 4))
>>> want_int("epochs", "3")
Traceback (most recent call last):
...
ValueError: epochs='3': expected an integer >= 0
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any

from floatlab.registry import Registry, shown

__all__ = [
    "shown",
    "want_bool",
    "want_dict",
    "want_fields",
    "want_int",
    "want_ints",
    "want_real",
    "want_real_or_none",
    "want_scaler_knob",
    "want_str",
]


def want_str(name: str, v: Any) -> str:
    """``v`` if it is a string."""
    if not isinstance(v, str):
        raise ValueError(f"{name}={shown(v)}: expected a string")
    return v


def want_bool(name: str, v: Any) -> bool:
    """``v`` as a bool if it is one (numpy's included)."""
    if not isinstance(v, bool) and type(v).__name__ != "bool_":
        raise ValueError(f"{name}={shown(v)}: expected true or false")
    return bool(v)


def want_int(name: str, v: Any, lo: int = 0) -> int:
    """``v`` as an int if it is an integer (not a bool, not a float) and at least ``lo``."""
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < lo:
        raise ValueError(f"{name}={shown(v)}: expected an integer >= {lo}")
    return int(v)


def want_real(name: str, v: Any) -> float:
    """``v`` as a float if it is a real number (ranges are the caller's to check)."""
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise ValueError(f"{name}={shown(v)}: expected a number")
    return float(v)


def want_fp32_scale(name: str, v: Any) -> float:
    """``v`` as a float if it is a loss scale fp32 can hold: a number whose fp32 rounding is
    neither zero nor infinite (the scale multiplies the loss in fp32, as GradScaler's tensor does:
    1e300 would be inf and 1e-50 zero, and every step would then be skipped or learn nothing).

    >>> want_fp32_scale("static_scale", 2.0**16)
    65536.0
    >>> want_fp32_scale("static_scale", 1e300)
    Traceback (most recent call last):
    ...
    ValueError: static_scale=1e+300: expected a loss scale fp32 can hold, from 2^-149 to below 2^128
    """
    x = want_real(name, v)
    # fp32's smallest subnormal is 2^-149; half of it and less round to zero, 2^128 less half an
    # ulp and more round to inf
    if not (2.0**-150 < x < 2.0**128 - 2.0**103):
        raise ValueError(
            f"{name}={shown(v)}: expected a loss scale fp32 can hold, from 2^-149 to below 2^128"
        )
    return x


def want_scaler_knob(name: str, v: Any) -> float | int:
    """``v`` if it is a loss scaler's ``growth_factor`` (a finite number >= 1), ``backoff_factor``
    (a number in (0, 1]), ``growth_interval`` (an integer >= 1) or ``init_scale`` (a loss scale fp32
    can hold): the one check of the knobs, for the scaler and the policies that set them.

    >>> want_scaler_knob("growth_interval", 10)
    10
    >>> want_scaler_knob("growth_interval", 0)
    Traceback (most recent call last):
    ...
    ValueError: growth_interval=0: expected an integer >= 1
    """
    if name == "init_scale":
        return want_fp32_scale(name, v)
    if name == "growth_interval":
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"growth_interval={shown(v)}: expected an integer >= 1")
        return v
    real = isinstance(v, (int, float)) and not isinstance(v, bool)
    if name == "growth_factor":
        if not (real and 1.0 <= v < math.inf):
            raise ValueError(f"growth_factor={shown(v)}: expected a finite number >= 1")
        return float(v)
    if name == "backoff_factor":
        if not (real and 0.0 < v <= 1.0):
            raise ValueError(f"backoff_factor={shown(v)}: expected a number in (0, 1]")
        return float(v)
    knobs = "init_scale, growth_factor, backoff_factor or growth_interval"
    raise ValueError(f"scaler knob {shown(name)}: expected {knobs}")


def want_real_or_none(name: str, v: Any) -> float | None:
    """None, or ``v`` as a float if it is a real number."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise ValueError(f"{name}={shown(v)}: expected a number or None")
    return float(v)


def want_ints(name: str, v: Any, lo: int = 0) -> tuple[int, ...]:
    """``v`` as a tuple of ints, each at least ``lo`` (a list, a tuple or a 1-d array in)."""
    if isinstance(v, (list, tuple, range)) or (type(v).__name__ == "ndarray" and getattr(v, "ndim", 0) == 1):
        return tuple(want_int(f"{name}[{i}]", x, lo) for i, x in enumerate(v))
    raise ValueError(f"{name}={shown(v)}: expected a list of integers >= {lo}")


def want_dict(name: str, v: Any) -> dict[str, Any]:
    """``v`` if it is a dict with string keys."""
    if not isinstance(v, dict) or not all(isinstance(k, str) for k in v):
        raise ValueError(f"{name}={shown(v)}: expected a mapping of names to values")
    return v


def want_fields(what: str, d: Any, cls: type) -> dict[str, Any]:
    """``d`` if it is a dict whose keys all name fields of the dataclass ``cls`` (what a
    ``from_dict`` builds ``cls`` from): an unknown key is refused, with the closest field's name.

    >>> from floatlab.train.recipes import Fp8Recipe
    >>> want_fields("fp8 recipe", {"kind": "delayed", "margin": 1}, Fp8Recipe)
    {'kind': 'delayed', 'margin': 1}
    >>> want_fields("fp8 recipe", {"kind": "delayed", "margn": 1}, Fp8Recipe)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: unknown fp8 recipe key 'margn': did you mean margin? (fp8 recipe fields: kind, ...)
    """
    checked = want_dict(what, d)
    names = {f.name: f.name for f in dataclasses.fields(cls)}
    fields = Registry(f"{what} key", names, listing=lambda n: f"({what} fields: {', '.join(n)})")
    for k in checked:
        if k not in fields:
            raise fields.unknown(k)
    return checked
