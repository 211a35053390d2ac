"""Arithmetic in a format: :func:`add`, :func:`sub`, :func:`mul`, :func:`fma`, :func:`div` and
:func:`sqrt`, each result rounded once into the format.

How the arithmetic stays exact
------------------------------
:func:`add`, :func:`sub`, :func:`mul`, :func:`fma`, :func:`div` and :func:`sqrt` give each result
one rounding of the exact mathematical result, in every rounding mode. Their inputs are first
stored in the format (round to nearest even, as a cast does; ``saturate`` and ``subnormals`` apply).
The exact result is then formed in float64:

* a product of two values with at most 26 significand bits needs at most 52 bits: float64 holds it
  exactly, so :func:`mul` rounds once;
* a sum (:func:`add`, :func:`sub`, the addition in :func:`fma`) is computed with TwoSum, which
  gives the float64 sum ``s`` and its exact error ``e``; a quotient or square root with Dekker's
  exact product, which gives the sign of the remainder;
* from ``s`` and the sign of what float64 dropped, the float64 result is turned into the exact
  value *rounded to odd* at 53 bits (an inexact result gets an odd last bit: step one ulp toward
  the dropped part when the last bit is even). Each of these runs as one compiled pass over the
  elements (``floatlab.rounding.odd_sum``, ``odd_div``, ``odd_sqrt``).

Rounding to odd at p' bits and then rounding to p bits equals one rounding to p bits, for every
rounding mode, when p' >= p + 2 (Boldo and Melquiond, "Emulation of FMA and correctly rounded
sums: proved algorithms using rounding to odd", IEEE Trans. Computers 57(4), 2008); with p' = 53
that covers p <= 51. Stochastic rounding with k random bits reads the exact value down to p + k
bits, which the odd result keeps when p + k <= 52. The binding limit is the exact product:
formats with more than 26 significand bits (fp64) raise ValueError; fp64 arithmetic is numpy's own.

>>> float(add(1.0, 0.0001, "fp16")), float(add(1.0, 0.0001, "fp16", "rup"))
(1.0, 1.0009765625)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from floatlab.formats import FloatFormat, get_format
from floatlab.rounding import (
    DEFAULT_RANDOM_BITS,
    RNG,
    RoundingKnobs,
    as_float64,
    check_rounding,
    knob_signature,
    odd_div,
    odd_sqrt,
    odd_sum,
    round_array,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["MAX_PRECISION", "add", "div", "fma", "mul", "sqrt", "sub"]

FloatArray = npt.NDArray[np.float64]

#: The most significand bits (implicit bit included) a format may have for the simulated
#: arithmetic to be exact: a product of two such values fits float64's 53 bits.
MAX_PRECISION = 26
# exponents of every operand, product, quotient and Dekker partial product stay far inside
# float64's normal range when the format's values lie within 2^-255 .. 2^256
_MAX_EXPONENT = 255


def _zero_sum_is_negative(mode: str, a_negative: bool, b_negative: bool) -> bool:
    """Whether an exact zero sum ``a + b`` is -0 (IEEE 754 6.3): it is +0, or -0 when rounding
    toward -infinity; but ``x + x`` keeps the sign of ``x``, so two zeros of one sign keep it.

    >>> _zero_sum_is_negative("rne", False, True), _zero_sum_is_negative("rdown", False, True)
    (False, True)
    >>> _zero_sum_is_negative("rdown", False, False), _zero_sum_is_negative("rne", True, True)
    (False, True)
    """
    return a_negative if a_negative == b_negative else mode == "rdown"


@dataclass(frozen=True)
class _Op:
    """The settings of one simulated operation and the checks that keep it exact."""

    name: str
    fmt: FloatFormat
    mode: str
    knobs: RoundingKnobs

    @classmethod
    def make(cls, name: str, fmt: FloatFormat | str, rounding: str, knobs: RoundingKnobs) -> _Op:
        f = get_format(fmt)
        mode = check_rounding(rounding)
        if f.precision > MAX_PRECISION:
            hint = "; fp64 arithmetic is numpy's own float64 arithmetic" if f.precision == 53 else ""
            raise ValueError(
                f"{name} in {f.name}: simulated arithmetic is exact for formats of at most "
                f"{MAX_PRECISION} significand bits, {f.name} has {f.precision}{hint}"
            )
        if f.emax > _MAX_EXPONENT or f.emin - f.mantissa_bits < -_MAX_EXPONENT:
            raise ValueError(
                f"{name} in {f.name}: exponents from {f.emin - f.mantissa_bits} to {f.emax} are too wide "
                f"for exact float64 intermediates: expected values within 2^-{_MAX_EXPONENT} .. "
                f"2^{_MAX_EXPONENT}"
            )
        random_bits = knobs.get("random_bits", DEFAULT_RANDOM_BITS)
        if mode == "stochastic" and f.precision + random_bits > 52:
            raise ValueError(
                f"stochastic {name} in {f.name} with random_bits={random_bits}: exact only when "
                f"precision + random_bits <= 52: expected random_bits <= {52 - f.precision}"
            )
        return cls(name, f, mode, knobs)

    def apply(self, exact: Callable[..., FloatArray], *operands: npt.ArrayLike) -> FloatArray:
        """The body of every operation: broadcast the operands and store each in the format
        (nearest even, as a cast), form ``exact`` of them (the float64 result rounded to odd at
        53 bits), and round that once into the format with the operation's mode and ``rng``."""
        arrays = np.broadcast_arrays(*(as_float64(x) for x in operands))
        shape = arrays[0].shape
        stored = [self._round(np.ascontiguousarray(x).reshape(-1), "rne", None) for x in arrays]
        # IEEE 754's special results, without a warning: inf - inf, 0 * inf and 0 / 0 are NaN
        with np.errstate(all="ignore"):
            return self._round(exact(*stored), self.mode, self.knobs.get("rng")).reshape(shape)

    def odd_add(self, x: FloatArray, y: FloatArray) -> FloatArray:
        """x + y rounded to odd at 53 bits, with IEEE 754's sign for an exact zero (one compiled pass)."""
        # the kernel takes the sign that the rule gives an exact zero sum of operands of opposite signs
        opposite_negative = _zero_sum_is_negative(self.mode, False, True)
        out: FloatArray = odd_sum(
            np.ascontiguousarray(x, np.float64), np.ascontiguousarray(y, np.float64), opposite_negative
        )
        return out

    def _round(self, x: FloatArray, mode: str, rng: RNG) -> FloatArray:
        knobs: RoundingKnobs = {**self.knobs, "rng": rng}
        out: FloatArray = round_array(x, self.fmt, mode, **knobs)
        return out


@knob_signature
def add(
    a: npt.ArrayLike,
    b: npt.ArrayLike,
    fmt: FloatFormat | str,
    rounding: str = "rne",
    **knobs: Unpack[RoundingKnobs],
) -> FloatArray:
    """a + b in ``fmt``, rounded once: the values of ``fmt`` as float64 (broadcast shape).

    The inputs are first stored in ``fmt`` (round to nearest even); "How the arithmetic stays
    exact" in ``floatlab.simulate.arithmetic`` says why the one rounding is exact in every mode.

    >>> add(1.0, 2.0**-11, "fp16"), add(1.0, 2.0**-11, "fp16", "rup")
    (array(1.), array(1.00097656))
    >>> add([65504.0, 1.0], [16.0, -1.0], "fp16", "rdown").tolist()   # a tie; an exact zero is -0
    [65504.0, -0.0]
    """
    op = _Op.make("add", fmt, rounding, knobs)
    return op.apply(op.odd_add, a, b)


@knob_signature
def sub(
    a: npt.ArrayLike,
    b: npt.ArrayLike,
    fmt: FloatFormat | str,
    rounding: str = "rne",
    **knobs: Unpack[RoundingKnobs],
) -> FloatArray:
    """a - b in ``fmt``, rounded once (the inputs first stored in ``fmt``).

    >>> sub(1.0, 2.0**-12, "fp16"), sub(1.0, 2.0**-12 + 2.0**-20, "fp16")
    (array(1.), array(0.99951172))
    """
    op = _Op.make("sub", fmt, rounding, knobs)
    return op.apply(lambda x, y: op.odd_add(x, -y), a, b)


@knob_signature
def mul(
    a: npt.ArrayLike,
    b: npt.ArrayLike,
    fmt: FloatFormat | str,
    rounding: str = "rne",
    **knobs: Unpack[RoundingKnobs],
) -> FloatArray:
    """a * b in ``fmt``, rounded once (the inputs first stored in ``fmt``).

    >>> mul(300.0, 300.0, "fp16"), mul(300.0, 300.0, "fp16", saturate=True)
    (array(inf), array(65504.))
    """
    op = _Op.make("mul", fmt, rounding, knobs)
    # two significands of at most 26 bits: the float64 product is exact
    return op.apply(np.multiply, a, b)


@knob_signature
def fma(
    a: npt.ArrayLike,
    b: npt.ArrayLike,
    c: npt.ArrayLike,
    fmt: FloatFormat | str,
    rounding: str = "rne",
    **knobs: Unpack[RoundingKnobs],
) -> FloatArray:
    """a * b + c in ``fmt`` with one rounding (fused multiply-add; inputs first stored in ``fmt``).

    >>> a = 1 + 2.0**-9
    >>> fma(a, a, -1.0, "fp16"), sub(mul(a, a, "fp16"), 1.0, "fp16")  # the fused one keeps 2^-18
    (array(0.00391006), array(0.00390625))
    """
    op = _Op.make("fma", fmt, rounding, knobs)
    # the product is exact (see mul); the sum of it and c is rounded to odd, then once into fmt
    return op.apply(lambda x, y, z: op.odd_add(x * y, z), a, b, c)


@knob_signature
def div(
    a: npt.ArrayLike,
    b: npt.ArrayLike,
    fmt: FloatFormat | str,
    rounding: str = "rne",
    **knobs: Unpack[RoundingKnobs],
) -> FloatArray:
    """a / b in ``fmt``, rounded once (the inputs first stored in ``fmt``).

    >>> div(1.0, 3.0, "fp16", "rtz"), div(1.0, 3.0, "fp16", "rup")
    (array(0.33325195), array(0.33349609))
    """
    op = _Op.make("div", fmt, rounding, knobs)
    # x/0 is inf, 0/0 NaN, as IEEE 754 asks; the quotient is rounded to odd in one compiled pass
    return op.apply(odd_div, a, b)


@knob_signature
def sqrt(
    a: npt.ArrayLike,
    fmt: FloatFormat | str,
    rounding: str = "rne",
    **knobs: Unpack[RoundingKnobs],
) -> FloatArray:
    """The square root of ``a`` in ``fmt``, rounded once (the input first stored in ``fmt``).

    >>> sqrt(2.0, "bf16", "rtz"), sqrt(2.0, "bf16", "rup"), sqrt(-0.0, "fp16")
    (array(1.4140625), array(1.421875), array(-0.))
    """
    op = _Op.make("sqrt", fmt, rounding, knobs)
    # the root of a negative number is NaN; the root is rounded to odd in one compiled pass
    return op.apply(odd_sqrt, a)
