"""Experiments on the rounding primitive: arithmetic in a format, swallowed updates, underflow
and accumulation.

Nothing here rounds by itself. Every conversion to a lower precision goes through
:func:`floatlab.rounding.round_array` (or, for one explained value, the scalar reference
:func:`floatlab.rounding.round_rational`); this module forms exact results, hands them to the
primitive and counts what it did to them.

>>> import floatlab.simulate as sim
>>> float(sim.add(1.0, 0.0001, "fp16"))      # the update vanishes: 1 + 0.0001 is 1 in fp16
1.0
>>> sim.threshold_ratio("fp16"), sim.threshold_ratio("bf16")
(2048, 256)

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
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from floatlab.codec import Decoded, decode, encode, parse_value
from floatlab.formats import FloatFormat, get_format
from floatlab.rounding import (
    DEFAULT_RANDOM_BITS,
    MODE_DESCRIPTIONS,
    check_rounding,
    odd_div,
    odd_sqrt,
    odd_sum,
    round_array,
    running_sums,
)

__all__ = [
    "MAX_PRECISION",
    "METHODS",
    "AccumulationComparison",
    "AccumulationResult",
    "AddExplanation",
    "SwallowResult",
    "UnderflowResult",
    "accumulate",
    "add",
    "compare_accumulation",
    "div",
    "explain_add",
    "fma",
    "mul",
    "sqrt",
    "sub",
    "swallowed_updates",
    "threshold_ratio",
    "underflow",
]

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

#: The most significand bits (implicit bit included) a format may have for the simulated
#: arithmetic to be exact: a product of two such values fits float64's 53 bits.
MAX_PRECISION = 26
# exponents of every operand, product, quotient and Dekker partial product stay far inside
# float64's normal range when the format's values lie within 2^-255 .. 2^256
_MAX_EXPONENT = 255
_NEEDS_RNG = (
    "rounding 'stochastic' needs rng=np.random.default_rng(seed): its random draws must be reproducible"
)


# ---- arithmetic in a format ----------------------------------------------------------------------
@dataclass(frozen=True)
class _Op:
    """The settings of one simulated operation and the checks that keep it exact."""

    name: str
    fmt: FloatFormat
    mode: str
    saturate: bool
    subnormals: bool
    random_bits: int

    @classmethod
    def make(
        cls,
        name: str,
        fmt: FloatFormat | str,
        rounding: str,
        saturate: bool,
        subnormals: bool,
        random_bits: int,
    ) -> _Op:
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
        if mode == "stochastic" and f.precision + random_bits > 52:
            raise ValueError(
                f"stochastic {name} in {f.name} with random_bits={random_bits}: exact only when "
                f"precision + random_bits <= 52: expected random_bits <= {52 - f.precision}"
            )
        return cls(name, f, mode, saturate, subnormals, random_bits)

    def store(self, *operands: npt.ArrayLike) -> tuple[tuple[int, ...], list[FloatArray]]:
        """Broadcast the operands and store each in the format (nearest even, as a cast)."""
        arrays = np.broadcast_arrays(*(np.asarray(x, dtype=np.float64) for x in operands))
        shape = arrays[0].shape
        stored = [self._round(np.ascontiguousarray(x).reshape(-1), "rne", None) for x in arrays]
        return shape, stored

    def finish(self, y: FloatArray, shape: tuple[int, ...], rng: np.random.Generator | None) -> FloatArray:
        """Round the round-to-odd float64 result into the format with the operation's mode."""
        return self._round(y, self.mode, rng).reshape(shape)

    def _round(self, x: FloatArray, mode: str, rng: np.random.Generator | None) -> FloatArray:
        out: FloatArray = round_array(
            x,
            self.fmt,
            mode,
            rng=rng,
            saturate=self.saturate,
            subnormals=self.subnormals,
            random_bits=self.random_bits,
        )
        return out


def _odd_sum(x: FloatArray, y: FloatArray, mode: str) -> FloatArray:
    """x + y rounded to odd at 53 bits, with IEEE 754's sign for an exact zero (one compiled pass)."""
    out: FloatArray = odd_sum(
        np.ascontiguousarray(x, np.float64), np.ascontiguousarray(y, np.float64), mode == "rdown"
    )
    return out


def add(
    a: npt.ArrayLike,
    b: npt.ArrayLike,
    fmt: FloatFormat | str,
    rounding: str = "rne",
    *,
    rng: np.random.Generator | None = None,
    saturate: bool = False,
    subnormals: bool = True,
    random_bits: int = DEFAULT_RANDOM_BITS,
) -> FloatArray:
    """a + b in ``fmt``, rounded once: the values of ``fmt`` as float64 (broadcast shape).

    The inputs are first stored in ``fmt`` (round to nearest even); see the module notes for why
    the one rounding is exact in every mode.

    >>> add(1.0, 2.0**-11, "fp16"), add(1.0, 2.0**-11, "fp16", "rup")
    (array(1.), array(1.00097656))
    >>> add([65504.0, 1.0], [16.0, -1.0], "fp16", "rdown").tolist()   # a tie; an exact zero is -0
    [65504.0, -0.0]
    """
    op = _Op.make("add", fmt, rounding, saturate, subnormals, random_bits)
    shape, (x, y) = op.store(a, b)
    with np.errstate(all="ignore"):  # inf - inf is NaN, as IEEE 754 asks
        return op.finish(_odd_sum(x, y, op.mode), shape, rng)


def sub(
    a: npt.ArrayLike,
    b: npt.ArrayLike,
    fmt: FloatFormat | str,
    rounding: str = "rne",
    *,
    rng: np.random.Generator | None = None,
    saturate: bool = False,
    subnormals: bool = True,
    random_bits: int = DEFAULT_RANDOM_BITS,
) -> FloatArray:
    """a - b in ``fmt``, rounded once (the inputs first stored in ``fmt``).

    >>> sub(1.0, 2.0**-12, "fp16"), sub(1.0, 2.0**-12 + 2.0**-20, "fp16")
    (array(1.), array(0.99951172))
    """
    op = _Op.make("sub", fmt, rounding, saturate, subnormals, random_bits)
    shape, (x, y) = op.store(a, b)
    with np.errstate(all="ignore"):
        return op.finish(_odd_sum(x, -y, op.mode), shape, rng)


def mul(
    a: npt.ArrayLike,
    b: npt.ArrayLike,
    fmt: FloatFormat | str,
    rounding: str = "rne",
    *,
    rng: np.random.Generator | None = None,
    saturate: bool = False,
    subnormals: bool = True,
    random_bits: int = DEFAULT_RANDOM_BITS,
) -> FloatArray:
    """a * b in ``fmt``, rounded once (the inputs first stored in ``fmt``).

    >>> mul(300.0, 300.0, "fp16"), mul(300.0, 300.0, "fp16", saturate=True)
    (array(inf), array(65504.))
    """
    op = _Op.make("mul", fmt, rounding, saturate, subnormals, random_bits)
    shape, (x, y) = op.store(a, b)
    with np.errstate(all="ignore"):  # 0 * inf is NaN
        # two significands of at most 26 bits: the float64 product is exact
        return op.finish(x * y, shape, rng)


def fma(
    a: npt.ArrayLike,
    b: npt.ArrayLike,
    c: npt.ArrayLike,
    fmt: FloatFormat | str,
    rounding: str = "rne",
    *,
    rng: np.random.Generator | None = None,
    saturate: bool = False,
    subnormals: bool = True,
    random_bits: int = DEFAULT_RANDOM_BITS,
) -> FloatArray:
    """a * b + c in ``fmt`` with one rounding (fused multiply-add; inputs first stored in ``fmt``).

    >>> a = 1 + 2.0**-9
    >>> fma(a, a, -1.0, "fp16"), sub(mul(a, a, "fp16"), 1.0, "fp16")  # the fused one keeps 2^-18
    (array(0.00391006), array(0.00390625))
    """
    op = _Op.make("fma", fmt, rounding, saturate, subnormals, random_bits)
    shape, (x, y, z) = op.store(a, b, c)
    with np.errstate(all="ignore"):
        return op.finish(_odd_sum(x * y, z, op.mode), shape, rng)


def div(
    a: npt.ArrayLike,
    b: npt.ArrayLike,
    fmt: FloatFormat | str,
    rounding: str = "rne",
    *,
    rng: np.random.Generator | None = None,
    saturate: bool = False,
    subnormals: bool = True,
    random_bits: int = DEFAULT_RANDOM_BITS,
) -> FloatArray:
    """a / b in ``fmt``, rounded once (the inputs first stored in ``fmt``).

    >>> div(1.0, 3.0, "fp16", "rtz"), div(1.0, 3.0, "fp16", "rup")
    (array(0.33325195), array(0.33349609))
    """
    op = _Op.make("div", fmt, rounding, saturate, subnormals, random_bits)
    shape, (x, y) = op.store(a, b)
    # x/0 is inf, 0/0 NaN, as IEEE 754 asks; the quotient is rounded to odd in one compiled pass
    return op.finish(odd_div(x, y), shape, rng)


def sqrt(
    a: npt.ArrayLike,
    fmt: FloatFormat | str,
    rounding: str = "rne",
    *,
    rng: np.random.Generator | None = None,
    saturate: bool = False,
    subnormals: bool = True,
    random_bits: int = DEFAULT_RANDOM_BITS,
) -> FloatArray:
    """The square root of ``a`` in ``fmt``, rounded once (the input first stored in ``fmt``).

    >>> sqrt(2.0, "bf16", "rtz"), sqrt(2.0, "bf16", "rup"), sqrt(-0.0, "fp16")
    (array(1.4140625), array(1.421875), array(-0.))
    """
    op = _Op.make("sqrt", fmt, rounding, saturate, subnormals, random_bits)
    shape, (x,) = op.store(a)
    # the root of a negative number is NaN; the root is rounded to odd in one compiled pass
    return op.finish(odd_sqrt(x), shape, rng)


# ---- swallowed updates ---------------------------------------------------------------------------
def threshold_ratio(fmt: FloatFormat | str) -> int:
    """2^(m+1) for a format with m fraction bits: the weight-to-update ratio where updates start to vanish.

    In round to nearest (either tie rule) and for a normal weight ``w``, half the gap from ``w`` to
    its neighbour is at most ``|w| / 2^(m+1)`` and at least ``|w| / 2^(m+2)``, so:

    * an update with ``|u| > |w| / 2^(m+1)`` is never lost (for ``w = 1`` and ``u > 0`` this is the
      exact boundary: 1 + 2^-11 is a tie that goes back to 1 in fp16);
    * an update with ``|u| < |w| / 2^(m+2)`` is always lost;
    * in between it depends on where ``w`` sits in its binade and on the sign of ``u``.

    >>> threshold_ratio("fp16"), threshold_ratio("bf16"), threshold_ratio("fp32") == 2**24
    (2048, 256, True)
    """
    return 1 << (get_format(fmt).mantissa_bits + 1)


@dataclass(frozen=True, eq=False)
class SwallowResult:
    """What happened to the updates ``w + u`` in a format (see :func:`swallowed_updates`).

    >>> r = swallowed_updates([1.0, 1.0], [1e-4, 1e-2], "fp16")
    >>> r.n_lost, r.share_lost, r.sums.tolist()
    (1, 0.5, [1.0, 1.009765625])
    """

    fmt: FloatFormat
    rounding: str
    weights: FloatArray
    """The weights as stored in the format."""
    updates: FloatArray
    """The updates as stored in the format."""
    sums: FloatArray
    """w + u, rounded once into the format."""
    lost: BoolArray
    """A nonzero update left its (finite) weight unchanged."""
    n_updates: int
    """Nonzero updates (before storing)."""
    n_lost: int
    n_underflowed: int
    """Nonzero updates that were already zero once stored in the format (counted in ``n_lost``)."""
    threshold_ratio: int

    @property
    def share_lost(self) -> float:
        """n_lost / n_updates (0 when there is no nonzero update)."""
        return self.n_lost / self.n_updates if self.n_updates else 0.0

    def report(self) -> str:
        """A few lines of plain text."""
        lines = [
            f"w + u in {self.fmt.name}, {MODE_DESCRIPTIONS[self.rounding]}",
            f"  {self.n_updates:,} nonzero updates: {self.n_lost:,} lost ({_pct(self.share_lost)})",
        ]
        if self.n_underflowed:
            were = "was" if self.n_underflowed == 1 else "were"
            lines.append(
                f"  {self.n_underflowed:,} of them {were} already zero once stored in {self.fmt.name}"
            )
        if self.rounding in ("rne", "rna"):
            r = self.threshold_ratio
            lines.append(
                f"  an update more than {2 * r:,} times smaller than its weight is always lost; "
                f"one less than {r:,} times smaller never is (normal weights)"
            )
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """The counts as plain numbers (no arrays)."""
        return {
            "format": self.fmt.name,
            "rounding": self.rounding,
            "n_updates": self.n_updates,
            "n_lost": self.n_lost,
            "n_underflowed": self.n_underflowed,
            "share_lost": self.share_lost,
            "threshold_ratio": self.threshold_ratio,
        }

    def __str__(self) -> str:
        return self.report()


def swallowed_updates(
    w: npt.ArrayLike,
    u: npt.ArrayLike,
    fmt: FloatFormat | str,
    rounding: str = "rne",
    *,
    rng: np.random.Generator | None = None,
    saturate: bool = False,
    subnormals: bool = True,
) -> SwallowResult:
    """Apply the updates ``u`` to the weights ``w`` in ``fmt`` and count the ones that vanish.

    An update is lost when it is nonzero and ``w + u``, rounded once into ``fmt``, equals the
    stored (finite) ``w``; that includes updates that were already zero once stored.

    >>> r = swallowed_updates([1.0, 1.0, 1.0], [1e-4, 1e-3, 1e-9], "fp16")
    >>> r.lost.tolist(), r.n_underflowed, r.threshold_ratio
    ([True, False, True], 1, 2048)
    """
    f = get_format(fmt)
    mode = check_rounding(rounding)
    w_in, u_in = np.broadcast_arrays(np.asarray(w, dtype=np.float64), np.asarray(u, dtype=np.float64))
    kw: dict[str, Any] = {"saturate": saturate, "subnormals": subnormals}
    ws = np.asarray(add(w_in, 0.0, f, **kw))  # adding +0 stores w and keeps -0 as -0
    us = np.asarray(add(u_in, 0.0, f, **kw))
    sums = add(ws, us, f, mode, rng=rng, **kw)
    nonzero = u_in != 0
    lost = nonzero & np.isfinite(ws) & (sums == ws)
    underflowed = nonzero & (us == 0)
    return SwallowResult(
        fmt=f,
        rounding=mode,
        weights=ws,
        updates=us,
        sums=sums,
        lost=lost,
        n_updates=int(np.count_nonzero(nonzero)),
        n_lost=int(np.count_nonzero(lost)),
        n_underflowed=int(np.count_nonzero(underflowed)),
        threshold_ratio=threshold_ratio(f),
    )


# ---- one addition explained ----------------------------------------------------------------------
def _hex(code: int, fmt: FloatFormat) -> str:
    return f"0x{code:0{(fmt.bits + 3) // 4}X}"


def _exact_decimal(q: Fraction) -> str:
    """The exact decimal expansion of a dyadic rational (every sum of two floats has one).

    >>> _exact_decimal(Fraction(-3, 8)), _exact_decimal(Fraction(10))
    ('-0.375', '10')
    """
    den = q.denominator
    k = den.bit_length() - 1
    if den != 1 << k:
        raise ValueError(f"{q} is not dyadic: expected a denominator that is a power of two")
    digits = str(abs(q.numerator) * 5**k)
    sign = "-" if q < 0 else ""
    if k == 0:
        return sign + digits
    digits = digits.rjust(k + 1, "0")
    return f"{sign}{digits[:-k]}.{digits[-k:]}"


def _log2_exact(q: Fraction) -> int:
    """floor(log2(q)) for q > 0, from bit lengths and one exact comparison (no float log)."""
    e = q.numerator.bit_length() - q.denominator.bit_length()
    # now 2^(e-1) < q < 2^(e+1)
    return e - 1 if q < Fraction(2) ** e else e


def _operand(x: float | str | Fraction | int) -> tuple[str, Fraction | float]:
    """The text to show and the exact value of an operand (a float for -0, inf and NaN)."""
    if isinstance(x, str):
        return x.strip(), parse_value(x)
    if isinstance(x, bool) or not isinstance(x, (float, int, Fraction)):
        raise ValueError(f"operand {x!r}: expected a number or a string such as '0.0001'")
    if isinstance(x, float):
        text = repr(x)
        text = text[:-2] if text.endswith(".0") else text
        return text, Fraction(x) if math.isfinite(x) and x != 0 else x
    return str(x), Fraction(x)


@dataclass(frozen=True)
class AddExplanation:
    """One addition ``a + b`` in a format, step by step (see :func:`explain_add`).

    >>> e = explain_add("1", "0.0001", "fp16")
    >>> e.swallowed, e.sum_value, hex(e.b_code)
    (True, 1.0, '0x68e')
    """

    fmt: FloatFormat
    rounding: str
    a_text: str
    b_text: str
    a_code: int
    """a as stored in the format (round to nearest even)."""
    b_code: int
    sum_code: int
    """The sum of the stored operands, rounded once with ``rounding``."""
    exact_sum: Fraction | None
    """The sum of the stored operands, exactly (None when one of them is inf or NaN)."""
    swallowed: bool
    """b was nonzero and the sum is the stored a."""
    lines: tuple[str, ...]

    @property
    def a_value(self) -> float:
        """a as stored, as a float."""
        return _decode(self.a_code, self.fmt).value

    @property
    def b_value(self) -> float:
        """b as stored, as a float."""
        return _decode(self.b_code, self.fmt).value

    @property
    def sum_value(self) -> float:
        """The rounded sum as a float."""
        return _decode(self.sum_code, self.fmt).value

    def report(self) -> str:
        """The explanation as indented plain text."""
        return "\n".join("  " + line for line in self.lines)

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON-ready values."""
        return {
            "format": self.fmt.name,
            "rounding": self.rounding,
            "a": self.a_text,
            "b": self.b_text,
            "a_code": self.a_code,
            "a_hex": _hex(self.a_code, self.fmt),
            "a_value": self.a_value,
            "b_code": self.b_code,
            "b_hex": _hex(self.b_code, self.fmt),
            "b_value": self.b_value,
            "exact_sum": None if self.exact_sum is None else _exact_decimal(self.exact_sum),
            "sum_code": self.sum_code,
            "sum_hex": _hex(self.sum_code, self.fmt),
            "sum_value": self.sum_value,
            "swallowed": self.swallowed,
            "text": list(self.lines),
        }

    def __str__(self) -> str:
        return self.report()


def _decode(code: int, fmt: FloatFormat) -> Decoded:
    return decode(code, fmt)


def _gaps(w: Fraction, fmt: FloatFormat) -> tuple[Fraction, Fraction]:
    """(ulp, gap toward zero) at the nonzero finite format value ``w``; the gap away from zero is the ulp."""
    mag = abs(w)
    e = max(_log2_exact(mag), fmt.emin)
    ulp = Fraction(2) ** (e - fmt.mantissa_bits)
    # just below a power of two the spacing halves (not below the smallest normal: subnormals keep it)
    toward = ulp / 2 if mag == Fraction(2) ** e and e > fmt.emin else ulp
    return ulp, toward


def _ratio_text(r: Fraction) -> str:
    return str(r.numerator) if r.denominator == 1 else f"{float(r):.6g}"


def _pow2_text(q: Fraction) -> str:
    return f"2^{_log2_exact(q)}"


def _stored_exactly(given: Fraction | float, stored: Fraction | None, value: float) -> bool:
    """Whether storing changed nothing (a NaN stays a NaN, -0 stays -0)."""
    if isinstance(given, Fraction):
        return stored == given
    if math.isnan(given):
        return math.isnan(value)
    return value == given and math.copysign(1.0, value) == math.copysign(1.0, given)


def _threshold_lines(
    w: Fraction, u: Fraction, w_code: int, fmt: FloatFormat, mode: str, w_text: str
) -> list[str]:
    """Why an update of this size and sign survives or vanishes next to this weight."""
    ulp, toward = _gaps(w, fmt)
    outward = (u > 0) == (w > 0)
    gap = ulp if outward else toward
    head = f"ulp({w_text}) = {_pow2_text(ulp)}"
    if gap != ulp:
        head += f", but the gap below {w_text} is {_pow2_text(gap)}"
    if mode in ("rne", "rna"):
        r0 = threshold_ratio(fmt)
        r = _ratio_text(abs(w) / (gap / 2))
        if gap == ulp:
            lines = [
                f"{head}; anything below half an ulp vanishes, so an update more than",
                f"{r} times smaller than the weight is always lost.",
            ]
        else:
            lines = [
                f"{head}; anything below half that gap",
                f"vanishes, so an update more than {r} times smaller than the weight is always lost.",
            ]
        if abs(w) >= fmt.smallest_normal_exact:
            lines += [
                f"For any normal weight in {fmt.name}: more than {2 * r0:,} times smaller is always lost,",
                f"less than {r0:,} times smaller never is.",
            ]
        return lines
    full = _ratio_text(abs(w) / gap)
    if mode == "stochastic":
        p = min(abs(u) / gap, Fraction(1))
        return [
            f"{head}; stochastic rounding moves the sum to the next value with probability",
            f"|update| / gap = {float(p):.4g}, so the update survives on average.",
        ]
    if mode == "rodd":
        if w_code % 2 == 0:
            return [
                f"{head}; {w_text} has an even last bit,",
                "which round to odd never gives an inexact sum.",
            ]
        return [
            f"{head}; round to odd keeps {w_text} (an odd last bit) for anything below the gap, so an",
            f"update more than {full} times smaller than the weight is always lost.",
        ]
    up = u > 0
    keeps = (mode == "rtz" and outward) or (mode == "rup" and not up) or (mode == "rdown" and up)
    if keeps:
        return [
            f"{head}; {MODE_DESCRIPTIONS[mode]} keeps {w_text} until the sum reaches the next value,",
            f"so an update more than {full} times smaller than the weight is always lost.",
        ]
    return [f"{head};", f"{MODE_DESCRIPTIONS[mode]} never swallows an update in this direction."]


def explain_add(
    a: float | str | Fraction | int,
    b: float | str | Fraction | int,
    fmt: FloatFormat | str = "fp16",
    rounding: str = "rne",
    *,
    rng: np.random.Generator | None = None,
    saturate: bool = False,
    subnormals: bool = True,
) -> AddExplanation:
    """Explain ``a + b`` in ``fmt``: how each operand is stored, the exact sum, what rounding kept.

    Strings are parsed exactly ("0.1" is one tenth, not the float nearest to it). The operands are
    stored with round to nearest even, as :func:`add` does; their sum is rounded once with
    ``rounding`` by the scalar reference (stochastic rounding draws its bits from ``rng``).

    >>> print(explain_add("1", "0.0001", "fp16"))
      1 + 0.0001 in fp16, round to nearest, ties to even
      0.0001 is stored as 0x068E = 0.00010001659393310546875 (exact)
      exact sum 1.00010001659393310546875 -> 1 (0x3C00): the update was swallowed
      ulp(1) = 2^-10; anything below half an ulp vanishes, so an update more than
      2048 times smaller than the weight is always lost.
      For any normal weight in fp16: more than 4,096 times smaller is always lost,
      less than 2,048 times smaller never is.
    """
    f = get_format(fmt)
    mode = check_rounding(rounding)
    if mode == "stochastic" and rng is None:
        raise ValueError(_NEEDS_RNG)
    a_text, a_in = _operand(a)
    b_text, b_in = _operand(b)
    store: dict[str, Any] = {"saturate": saturate, "subnormals": subnormals}
    a_code, b_code = int(encode(a_in, f, "rne", **store)), int(encode(b_in, f, "rne", **store))
    a_dec, b_dec = _decode(a_code, f), _decode(b_code, f)
    a_q: Fraction | None = a_dec.exact
    b_q: Fraction | None = b_dec.exact
    exact: Fraction | None = None
    total: Fraction | float
    if a_q is not None and b_q is not None:
        exact = a_q + b_q
        if exact != 0:
            total = exact
        else:
            a_neg, b_neg = bool(a_dec.sign), bool(b_dec.sign)
            # IEEE 754 6.3: two zeros of one sign keep it; otherwise an exact zero sum is +0, or -0
            # when rounding toward -inf
            both_zero = a_q == 0 and b_q == 0
            negative = (a_neg and b_neg) or (mode == "rdown" and not (both_zero and not a_neg and not b_neg))
            total = -0.0 if negative else 0.0
    else:
        with np.errstate(all="ignore"):
            total = float(np.float64(a_dec.value) + np.float64(b_dec.value))  # inf - inf is NaN
    s_code = int(encode(total, f, mode, rng=rng, **store))
    s_dec = _decode(s_code, f)
    s_q: Fraction | None = s_dec.exact
    b_nonzero = not (isinstance(b_in, float) and (b_in == 0 or math.isnan(b_in)))
    swallowed = bool(b_nonzero and a_q is not None and s_code == a_code)

    lines = [f"{a_text} + {b_text} in {f.name}, {MODE_DESCRIPTIONS[mode]}"]
    for text, given, code, q, dec in ((a_text, a_in, a_code, a_q, a_dec), (b_text, b_in, b_code, b_q, b_dec)):
        if not _stored_exactly(given, q, dec.value):
            lines.append(f"{text} is stored as {_hex(code, f)} = {dec.decimal} (exact)")
    result = f"{s_dec.decimal} ({_hex(s_code, f)})"
    if exact is None:
        lines.append(f"{a_dec.decimal} + {b_dec.decimal} -> {result}")
    elif swallowed and b_q == 0:
        lines.append(f"exact sum {_exact_decimal(exact)} -> {result}: the update was lost when it was stored")
    elif swallowed:
        lines.append(f"exact sum {_exact_decimal(exact)} -> {result}: the update was swallowed")
    elif s_q == exact:
        lines.append(f"exact sum {_exact_decimal(exact)} = {result}: no rounding needed")
    else:
        lines.append(f"exact sum {_exact_decimal(exact)} -> {result}")
    if a_q is not None and b_q is not None and a_q != 0 and b_q != 0 and abs(b_q) < abs(a_q):
        w_text = a_text if isinstance(a_in, Fraction) and a_q == a_in else a_dec.decimal
        lines += _threshold_lines(a_q, b_q, a_code, f, mode, w_text)
    return AddExplanation(
        fmt=f,
        rounding=mode,
        a_text=a_text,
        b_text=b_text,
        a_code=a_code,
        b_code=b_code,
        sum_code=s_code,
        exact_sum=exact,
        swallowed=swallowed,
        lines=tuple(lines),
    )


def _pct(share: float) -> str:
    return f"{100 * share:.3g}%"


# ---- underflow and overflow of a tensor ----------------------------------------------------------
@dataclass(frozen=True)
class UnderflowResult:
    """Where the values of a tensor land when stored in a format (see :func:`underflow`).

    >>> r = underflow([1.0, 1e-5, 1e-8, 1e-9], "fp16")
    >>> r.n_normal, r.n_subnormal, r.n_flushed, r.share(r.n_flushed)
    (1, 1, 2, 0.5)
    """

    fmt: FloatFormat
    rounding: str
    scale: float
    saturate: bool
    subnormals: bool
    n: int
    """All inputs."""
    n_zero_input: int
    n_nonfinite_input: int
    n_flushed: int
    """Nonzero finite inputs stored as zero."""
    n_subnormal: int
    """Nonzero finite inputs stored as subnormals."""
    n_overflow: int
    """Finite inputs whose rounding overflowed (IEEE 754: the result with an unbounded exponent
    range is beyond the largest finite value); they became inf or NaN, or were clamped."""
    n_overflow_nonfinite: int
    """Of those, the ones stored as inf or NaN."""
    n_normal: int
    """Nonzero finite inputs stored as normal numbers without overflow."""
    n_underflow_flag: int
    """Inputs that raised IEEE 754's underflow flag (tiny after rounding and inexact)."""
    bits_lost: tuple[int, ...]
    """``bits_lost[k]``: subnormal results that keep k bits fewer than the format's precision."""
    error_exponents: tuple[int, ...]
    """Bin k holds the finite nonzero results with relative error in [2^k, 2^(k+1))."""
    error_counts: tuple[int, ...]
    n_exact: int
    """Finite nonzero results equal to their input."""
    max_relative_error: float

    @property
    def n_nonzero(self) -> int:
        """Nonzero finite inputs: the ones the shares are taken of."""
        return self.n - self.n_zero_input - self.n_nonfinite_input

    def share(self, count: int) -> float:
        """``count`` as a share of the nonzero finite inputs."""
        return count / self.n_nonzero if self.n_nonzero else 0.0

    @property
    def mean_bits_lost(self) -> float:
        """Bits of precision a subnormal result lacks, on average (0 when there is none)."""
        total = sum(self.bits_lost)
        return sum(k * c for k, c in enumerate(self.bits_lost)) / total if total else 0.0

    def report(self) -> str:
        """A table of the classes and a histogram of the relative error, as plain text."""
        f = self.fmt
        scale = "" if self.scale == 1.0 else f" (scaled by {self.scale:g})"
        lines = [f"{self.n:,} values into {f.name}{scale}, {MODE_DESCRIPTIONS[self.rounding]}"]
        lines.append(f"  {self.n_nonzero:,} nonzero finite inputs:")
        p = f.precision
        sub_note = ""
        if self.n_subnormal:
            sub_note = f"keep {p - self.mean_bits_lost:.3g} of {p} significant bits on average"
        over_note = ""
        if self.n_overflow:
            clamped = self.n_overflow - self.n_overflow_nonfinite
            dest = "inf" if f.has_inf else "NaN"
            parts = [f"{self.n_overflow_nonfinite:,} to {dest}"] if self.n_overflow_nonfinite else []
            parts += [f"{clamped:,} clamped to the largest finite value"] if clamped else []
            over_note = ", ".join(parts)
        rows = [
            ("normal", self.n_normal, ""),
            ("subnormal", self.n_subnormal, sub_note),
            ("flushed to 0", self.n_flushed, ""),
            ("overflow", self.n_overflow, over_note),
        ]
        for name, count, note in rows:
            lines.append(f"    {name:<13}{count:>12,}  {_pct(self.share(count)):>7}  {note}".rstrip())
        extra = []
        if self.n_zero_input:
            extra.append(f"{self.n_zero_input:,} zero inputs")
        if self.n_nonfinite_input:
            extra.append(f"{self.n_nonfinite_input:,} inf/NaN inputs")
        if extra:
            lines.append("  (" + ", ".join(extra) + " not counted)")
        n_err = self.n_exact + sum(self.error_counts)
        if n_err:
            lines.append(f"  relative error of the {n_err:,} finite nonzero results (log2 bins):")
            top = max([self.n_exact, *self.error_counts])
            bins = [("exact", self.n_exact)] if self.n_exact else []
            bins += [
                (f"[2^{k}, 2^{k + 1})", c)
                for k, c in zip(self.error_exponents, self.error_counts, strict=True)
            ]
            width = max(len(label) for label, _ in bins)
            for label, c in bins:
                bar = "#" * max(1, round(30 * c / top)) if c else ""
                lines.append(f"    {label:<{width}}  {c:>12,}  {bar}".rstrip())
            lines.append(f"  largest relative error {self.max_relative_error:.3g}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """Counts, shares and histogram as JSON-ready values."""
        return {
            "format": self.fmt.name,
            "rounding": self.rounding,
            "scale": self.scale,
            "saturate": self.saturate,
            "subnormals": self.subnormals,
            "n": self.n,
            "n_zero_input": self.n_zero_input,
            "n_nonfinite_input": self.n_nonfinite_input,
            "n_nonzero": self.n_nonzero,
            "n_normal": self.n_normal,
            "n_subnormal": self.n_subnormal,
            "n_flushed": self.n_flushed,
            "n_overflow": self.n_overflow,
            "n_overflow_nonfinite": self.n_overflow_nonfinite,
            "n_underflow_flag": self.n_underflow_flag,
            "share_normal": self.share(self.n_normal),
            "share_subnormal": self.share(self.n_subnormal),
            "share_flushed": self.share(self.n_flushed),
            "share_overflow": self.share(self.n_overflow),
            "bits_lost": list(self.bits_lost),
            "mean_bits_lost": self.mean_bits_lost,
            "error_histogram": {
                "exact": self.n_exact,
                "log2_bins": list(self.error_exponents),
                "counts": list(self.error_counts),
            },
            "max_relative_error": self.max_relative_error,
        }

    def __str__(self) -> str:
        return self.report()


def _stat(stats: Any, name: str) -> int:
    """One count from the statistics :func:`round_array` returns with ``flags=True``."""
    value = stats[name] if isinstance(stats, dict) else getattr(stats, name)
    return int(value)


def underflow(
    x: npt.ArrayLike,
    fmt: FloatFormat | str,
    *,
    scale: float = 1.0,
    rounding: str = "rne",
    rng: np.random.Generator | None = None,
    saturate: bool = False,
    subnormals: bool = True,
) -> UnderflowResult:
    """Store ``x * scale`` in ``fmt`` and count the values that flush to zero, turn subnormal,
    overflow or stay normal, with a histogram of the relative rounding error.

    ``scale`` (a loss scale, say) multiplies in float64, which is exact for a power of two.

    >>> r = underflow([1.0, 1e-5, 1e-8, 7e4, 0.0], "fp16")
    >>> r.n_normal, r.n_subnormal, r.n_flushed, r.n_overflow, r.n_zero_input
    (1, 1, 1, 1, 1)
    >>> underflow([1e-8], "fp16", scale=1024).n_subnormal
    1
    """
    f = get_format(fmt)
    mode = check_rounding(rounding)
    if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale != 0):
        raise ValueError(f"scale={scale!r}: expected a finite nonzero number")
    with np.errstate(invalid="ignore"):  # widening quietens a signalling NaN: no warning for that
        xs = np.asarray(x, dtype=np.float64).reshape(-1)
    if scale != 1.0:
        with np.errstate(over="ignore"):  # a value scaled past float64's range is an overflow to report
            xs = xs * float(scale)
    r, stats = round_array(xs, f, mode, rng=rng, saturate=saturate, subnormals=subnormals, flags=True)
    r = np.asarray(r, dtype=np.float64)
    finite_in = np.isfinite(xs)
    nonzero_in = finite_in & (xs != 0)
    finite_out = np.isfinite(r)
    ar = np.abs(r)
    flushed = nonzero_in & (r == 0)
    tiny = float(f.smallest_normal_exact)
    subnormal = nonzero_in & (ar > 0) & (ar < tiny)
    n_overflow = _stat(stats, "overflow")
    n_overflow_nonfinite = int(np.count_nonzero(finite_in & ~finite_out))
    finite_normal = nonzero_in & finite_out & (ar >= tiny)
    # an overflow clamped to the largest finite value looks normal: take it out of the normal class
    n_normal = int(np.count_nonzero(finite_normal)) - (n_overflow - n_overflow_nonfinite)

    # precision of a subnormal result: it keeps the bits from its leading one down to 2^(emin - m)
    _, e_sub = np.frexp(ar[subnormal])
    lost = f.emin - (e_sub.astype(np.int64) - 1)
    bits_lost = np.bincount(lost, minlength=f.mantissa_bits + 1) if lost.size else np.zeros(f.precision)

    both = nonzero_in & finite_out & (r != 0)
    xv, rv = xs[both], r[both]
    # r and x lie within a factor 2 of each other (Sterbenz), so the difference is exact
    d = np.abs(rv - xv)
    exact = d == 0
    dm, de = np.frexp(d[~exact])
    xm, xe = np.frexp(np.abs(xv[~exact]))
    # floor(log2(d / |x|)) from the frexp fields: the ratio of the mantissas is in (1/2, 2)
    k = de.astype(np.int64) - xe.astype(np.int64) - (dm < xm)
    exps: tuple[int, ...] = ()
    counts: tuple[int, ...] = ()
    if k.size:
        lo = int(k.min())
        c = np.bincount(k - lo)
        exps = tuple(range(lo, lo + c.size))
        counts = tuple(int(v) for v in c)
    max_rel = float(np.max(d / np.abs(xv))) if d.size else 0.0
    return UnderflowResult(
        fmt=f,
        rounding=mode,
        scale=float(scale),
        saturate=saturate,
        subnormals=subnormals,
        n=int(xs.size),
        n_zero_input=int(np.count_nonzero(xs == 0)),
        n_nonfinite_input=int(np.count_nonzero(~finite_in)),
        n_flushed=int(np.count_nonzero(flushed)),
        n_subnormal=int(np.count_nonzero(subnormal)),
        n_overflow=n_overflow,
        n_overflow_nonfinite=n_overflow_nonfinite,
        n_normal=n_normal,
        n_underflow_flag=_stat(stats, "underflow"),
        bits_lost=tuple(int(v) for v in bits_lost),
        error_exponents=exps,
        error_counts=counts,
        n_exact=int(np.count_nonzero(exact)),
        max_relative_error=max_rel,
    )


# ---- accumulation ----------------------------------------------------------------------------
METHODS: tuple[str, ...] = ("sequential", "pairwise", "kahan")
_TRAJECTORY_POINTS = 1001
IntArray = npt.NDArray[np.int64]


def _exact_sum(t: FloatArray) -> Fraction:
    """The exact sum of finite float64 values, with integer arithmetic on their bit fields."""
    if t.size == 0:
        return Fraction(0)
    bits = np.ascontiguousarray(t, dtype=np.float64).view(np.uint64)
    efield = ((bits >> np.uint64(52)) & np.uint64(0x7FF)).astype(np.int64)
    sig = (bits & np.uint64((1 << 52) - 1)).astype(np.int64) | ((efield > 0).astype(np.int64) << 52)
    sig = np.where(bits >> np.uint64(63) != 0, -sig, sig)
    e = np.maximum(efield, 1) - 1075  # value = sig * 2^e, subnormals included
    # two 27/26-bit halves so that a million of them sum in int64 without overflow
    hi = sig >> 26
    lo = sig - (hi << 26)
    keys = np.concatenate([e + 26, e])
    vals = np.concatenate([hi, lo])
    base = int(keys.min())
    # one integer bin per power of two (a few thousand at most), added exactly in int64
    sums = np.zeros(int(keys.max()) - base + 1, dtype=np.int64)
    np.add.at(sums, keys - base, vals)
    total = sum(int(s) << k for k, s in enumerate(sums.tolist()) if s)
    return Fraction(total) * Fraction(2) ** base


@dataclass(frozen=True, eq=False)
class AccumulationResult:
    """A sum computed in a format (see :func:`accumulate`).

    >>> r = accumulate(np.ones(3000), "fp16")
    >>> r.sum, r.stagnation_index, round(r.relative_error, 4)
    (2048.0, 2048, 0.3173)
    """

    fmt: FloatFormat
    """The format the terms are stored in and the result is returned in."""
    accumulator: FloatFormat
    method: str
    rounding: str
    n: int
    sum: float
    """The result, in ``fmt``."""
    accumulator_sum: float
    """The result before its final conversion from the accumulator to ``fmt``."""
    exact: Fraction | None
    """The exact sum of the stored terms (None when a term is inf or NaN)."""
    relative_error: float
    """``|sum - exact| / |exact|`` (inf when only the exact sum is zero, NaN without an exact sum)."""
    trajectory_index: IntArray | None
    """Term indices of the recorded running sums (sequential and Kahan; at most ~1000 points)."""
    trajectory: FloatArray | None
    """The running sum (in the accumulator) after the term of the same position in ``trajectory_index``."""
    stagnation_index: int | None
    """The first term from which the running sum never changed again, although the terms from there
    on add up to at least one step of the format's grid at the sum (None in stochastic rounding,
    which moves on average)."""
    stagnation_value: float | None
    n_swallowed: int | None
    """Nonzero terms that left the running sum unchanged (sequential and Kahan)."""
    overflow_index: int | None
    """The first term after which the running sum was inf or NaN, all terms so far being finite."""
    overflow_exact: Fraction | None
    """The exact running sum at ``overflow_index``."""

    @property
    def exact_float(self) -> float:
        """The exact sum rounded to float64 (as math.fsum gives it)."""
        if self.exact is None:
            return math.nan
        try:
            return float(self.exact)
        except OverflowError:
            return math.copysign(math.inf, self.exact)

    def note(self) -> str:
        """One phrase on what went wrong (stagnation, overflow), or ""."""
        if self.overflow_index is not None:
            return f"overflows at term {self.overflow_index:,}"
        if self.stagnation_index is not None:
            return f"stops changing at term {self.stagnation_index:,}"
        return ""

    def report(self) -> str:
        """A few lines of plain text."""
        lines = [
            f"sum of {self.n:,} terms stored in {self.fmt.name}: {self.method}, "
            f"{self.accumulator.name} accumulator, {MODE_DESCRIPTIONS[self.rounding]}",
            f"  result {_g(self.sum)}; exact {_g(self.exact_float)}; "
            f"relative error {self.relative_error:.3g}",
        ]
        if self.overflow_index is not None:
            exact = ""
            if self.overflow_exact is not None:
                exact = f" (exact running sum {_g(float(self.overflow_exact))})"
            lines.append(
                f"  the running sum became {_g(self.trajectory_value(self.overflow_index))} at term "
                f"{self.overflow_index:,}{exact}: {self.accumulator.name} holds nothing beyond "
                f"{self.accumulator.max:g}"
            )
        if self.stagnation_index is not None and self.stagnation_value is not None:
            later = self.n - self.stagnation_index
            lines.append(
                f"  the running sum stopped changing at term {self.stagnation_index:,} (at "
                f"{_g(self.stagnation_value)}): the {later:,} terms from there on were swallowed"
            )
        if self.n_swallowed:
            lines.append(f"  {self.n_swallowed:,} nonzero terms left the running sum unchanged")
        return "\n".join(lines)

    def trajectory_value(self, index: int) -> float:
        """The recorded running sum after term ``index`` (NaN if it was not recorded)."""
        if self.trajectory is None or self.trajectory_index is None:
            return math.nan
        pos = np.searchsorted(self.trajectory_index, index)
        if pos < self.trajectory_index.size and self.trajectory_index[pos] == index:
            return float(self.trajectory[pos])
        return math.nan

    def to_dict(self) -> dict[str, Any]:
        """The results as JSON-ready values (the trajectory as two lists)."""
        return {
            "format": self.fmt.name,
            "accumulator": self.accumulator.name,
            "method": self.method,
            "rounding": self.rounding,
            "n": self.n,
            "sum": self.sum,
            "accumulator_sum": self.accumulator_sum,
            "exact": None if self.exact is None else str(self.exact),
            "exact_float": self.exact_float,
            "relative_error": self.relative_error,
            "stagnation_index": self.stagnation_index,
            "stagnation_value": self.stagnation_value,
            "n_swallowed": self.n_swallowed,
            "overflow_index": self.overflow_index,
            "overflow_exact": None if self.overflow_exact is None else str(self.overflow_exact),
            "trajectory_index": None if self.trajectory_index is None else self.trajectory_index.tolist(),
            "trajectory": None if self.trajectory is None else self.trajectory.tolist(),
        }

    def __str__(self) -> str:
        return self.report()


def _g(x: float) -> str:
    return f"{x:.10g}"


# The serial methods run in one compiled loop: each step forms the round-to-odd float64 result,
# as add() does, and rounds it with the element functions of the kernels behind round_array
# (the same bits, one element at a time, without a call into numpy per step).
def _serial_sum(
    t: FloatArray, op: _Op, method: str, rng: np.random.Generator | None
) -> tuple[FloatArray, FloatArray | None]:
    """Running sums (and Kahan's compensation) of the accumulator values ``t``."""
    if op.mode == "stochastic" and rng is None:
        raise ValueError(_NEEDS_RNG)
    return running_sums(
        t,
        op.fmt,
        op.mode,
        kahan=method == "kahan",
        rng=rng,
        saturate=op.saturate,
        subnormals=op.subnormals,
        random_bits=op.random_bits,
    )


def _pairwise(t: FloatArray, op: _Op, rng: np.random.Generator | None) -> float:
    vals = t
    while vals.size > 1:
        odd = vals[-1:] if vals.size % 2 else vals[:0]
        pairs = add(
            vals[0 : vals.size - odd.size : 2],
            vals[1 : vals.size - odd.size : 2],
            op.fmt,
            op.mode,
            rng=rng,
            saturate=op.saturate,
            subnormals=op.subnormals,
            random_bits=op.random_bits,
        )
        vals = np.concatenate([pairs, odd])
    return float(vals[0])


def accumulate(
    x: npt.ArrayLike,
    fmt: FloatFormat | str,
    *,
    accumulator: FloatFormat | str | None = None,
    method: str = "sequential",
    rounding: str = "rne",
    rng: np.random.Generator | None = None,
    saturate: bool = False,
    subnormals: bool = True,
    random_bits: int | None = None,
) -> AccumulationResult:
    """Sum ``x`` in a format: the terms stored in ``fmt``, each addition rounded once in
    ``accumulator`` (default: ``fmt``), the result converted back to ``fmt``.

    ``method``: ``"sequential"`` (a running sum, left to right), ``"pairwise"`` (a balanced tree:
    (x0 + x1) + (x2 + x3), ...) or ``"kahan"`` (compensated summation, every operation in the
    accumulator). Terms are stored and the result converted with round to nearest even; the
    additions use ``rounding``. Stochastic rounding draws from ``rng`` with ``random_bits`` bits
    (default: min(32, 52 - p) for an accumulator of precision p, which keeps each step exact).

    The sequential and Kahan sums are serial by nature: one compiled loop rounds each step with
    the kernels behind :func:`round_array`, a million terms in about a second (the first call in
    a fresh environment compiles the loop, a few seconds more; numba caches it). Up to 10^6 or
    10^7 terms is comfortable.

    >>> r = accumulate(np.ones(3000), "fp16")
    >>> r.sum, r.stagnation_index, float(r.exact)
    (2048.0, 2048, 3000.0)
    >>> accumulate(np.ones(3000), "fp16", accumulator="fp32").sum
    3000.0
    >>> accumulate(np.full(700, 100.0), "fp16").overflow_index  # 65440 + 100 rounds to inf in fp16
    678
    """
    f = get_format(fmt)
    acc_fmt = f if accumulator is None else get_format(accumulator)
    if random_bits is None:
        # stochastic steps stay exact with p + random_bits <= 52 (see the module notes): fp32 gets 28
        random_bits = min(DEFAULT_RANDOM_BITS, 52 - acc_fmt.precision)
    op = _Op.make("accumulate", acc_fmt, rounding, saturate, subnormals, random_bits)
    if method not in METHODS:
        raise ValueError(f"method={method!r}: expected one of {', '.join(METHODS)}")
    xs = np.asarray(x, dtype=np.float64).reshape(-1)
    if xs.size == 0:
        raise ValueError("nothing to sum: expected at least one term")
    kw: dict[str, Any] = {"saturate": saturate, "subnormals": subnormals}
    terms = np.asarray(round_array(xs, f, "rne", **kw), dtype=np.float64)  # the terms as stored in fmt
    # ... and as they enter the accumulator (exact when it holds every value of fmt)
    in_acc = np.asarray(round_array(terms, acc_fmt, "rne", **kw), dtype=np.float64)
    n = int(xs.size)

    run: FloatArray | None = None
    comp: FloatArray | None = None  # Kahan's compensation: a term it holds is not lost
    if method == "pairwise":
        acc_sum = _pairwise(in_acc, op, rng)
    else:
        run, comp = _serial_sum(in_acc, op, method, rng)
        acc_sum = float(run[-1])
    final = float(np.asarray(round_array(np.array([acc_sum]), f, "rne", **kw))[0])

    all_finite = bool(np.all(np.isfinite(terms)))
    exact = _exact_sum(terms) if all_finite else None
    rel = _relative_error(final, exact)

    stagnation: int | None = None
    stag_value: float | None = None
    swallowed: int | None = None
    overflow: int | None = None
    overflow_exact: Fraction | None = None
    index: IntArray | None = None
    traj: FloatArray | None = None
    if run is not None:
        same = _unchanged(run)
        if comp is not None:
            same &= _unchanged(comp)
        same[0] = terms[0] == 0
        nonzero_term = in_acc != 0
        swallowed = int(np.count_nonzero(same & nonzero_term & np.isfinite(run)))
        changed = np.flatnonzero(~same)
        start = int(changed[-1]) + 1 if changed.size else 0
        # stagnation: the sum stood still while the terms after it add up to a step of its grid or
        # more (a few small last terms that round away are no stall; stochastic rounding never stalls)
        still = op.mode != "stochastic" and start < n and bool(np.isfinite(run[-1]))
        if still and abs(_exact_sum(in_acc[start:])) >= _gap(float(run[-1]), acc_fmt):
            stagnation, stag_value = start, float(run[-1])
        finite_terms = np.cumsum(~np.isfinite(in_acc)) == 0
        bad = np.flatnonzero(~np.isfinite(run) & finite_terms)
        if bad.size:
            overflow = int(bad[0])
            overflow_exact = _exact_sum(terms[: overflow + 1])
        index = np.unique(np.linspace(0, n - 1, min(n, _TRAJECTORY_POINTS)).round().astype(np.int64))
        marks = [i for i in (stagnation, overflow) if i is not None]
        if marks:
            index = np.union1d(index, np.array(marks, dtype=np.int64))
        traj = run[index]
    return AccumulationResult(
        fmt=f,
        accumulator=acc_fmt,
        method=method,
        rounding=op.mode,
        n=n,
        sum=final,
        accumulator_sum=acc_sum,
        exact=exact,
        relative_error=rel,
        trajectory_index=index,
        trajectory=traj,
        stagnation_index=stagnation,
        stagnation_value=stag_value,
        n_swallowed=swallowed,
        overflow_index=overflow,
        overflow_exact=overflow_exact,
    )


def _gap(x: float, fmt: FloatFormat) -> Fraction:
    """The spacing of ``fmt`` at the finite value ``x`` (its ulp; the subnormal step near zero)."""
    e = math.frexp(x)[1] - 1 if x != 0 else fmt.emin
    return Fraction(2) ** (max(e, fmt.emin) - fmt.mantissa_bits)


def _unchanged(run: FloatArray) -> BoolArray:
    """Whether each step left the running value as it was (NaN staying NaN counts as unchanged)."""
    prev = np.concatenate([[0.0], run[:-1]])
    out: BoolArray = (run == prev) | (np.isnan(run) & np.isnan(prev))
    return out


def _relative_error(value: float, exact: Fraction | None) -> float:
    if exact is None or math.isnan(value):
        return math.nan
    if math.isinf(value):
        return math.inf
    if exact == 0:
        return 0.0 if value == 0 else math.inf
    return float(abs(Fraction(value) - exact) / abs(exact))


@dataclass(frozen=True)
class AccumulationComparison:
    """The same terms summed several ways (see :func:`compare_accumulation`).

    >>> c = compare_accumulation(np.ones(3000), "fp16")
    >>> [(r.method, r.accumulator.name, r.sum) for r in c.results]  # doctest: +NORMALIZE_WHITESPACE
    [('sequential', 'fp16', 2048.0), ('pairwise', 'fp16', 3000.0), ('kahan', 'fp16', 3000.0),
     ('sequential', 'fp32', 3000.0)]
    """

    results: tuple[AccumulationResult, ...]

    def report(self) -> str:
        """A table: method, accumulator, result, relative error and what went wrong."""
        first = self.results[0]
        head = (
            f"sum of {first.n:,} terms stored in {first.fmt.name} (exact sum {_g(first.exact_float)}), "
            f"{MODE_DESCRIPTIONS[first.rounding]}"
        )
        rows = [("method", "accumulator", "result", "rel error", "")]
        for r in self.results:
            rows.append((r.method, r.accumulator.name, _g(r.sum), f"{r.relative_error:.3g}", r.note()))
        widths = [max(len(row[i]) for row in rows) for i in range(5)]
        lines = [head]
        for row in rows:
            cells = [
                c.rjust(w) if i in (2, 3) else c.ljust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            ]
            lines.append(("  " + "  ".join(cells)).rstrip())
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """Every result as JSON-ready values, trajectories left out."""
        out = []
        for r in self.results:
            d = r.to_dict()
            d.pop("trajectory")
            d.pop("trajectory_index")
            out.append(d)
        return {"results": out}

    def __str__(self) -> str:
        return self.report()


def compare_accumulation(
    x: npt.ArrayLike,
    fmt: FloatFormat | str = "fp16",
    *,
    wide: FloatFormat | str = "fp32",
    rounding: str = "rne",
    rng: np.random.Generator | None = None,
) -> AccumulationComparison:
    """Sum ``x`` stored in ``fmt`` four ways: sequential, pairwise and Kahan in ``fmt``, and
    sequential with a ``wide`` accumulator.

    >>> c = compare_accumulation(np.ones(3000), "fp16")
    >>> [r.sum for r in c.results]
    [2048.0, 3000.0, 3000.0, 3000.0]
    """
    kw: dict[str, Any] = {"rounding": rounding, "rng": rng}
    results = (
        accumulate(x, fmt, method="sequential", **kw),
        accumulate(x, fmt, method="pairwise", **kw),
        accumulate(x, fmt, method="kahan", **kw),
        accumulate(x, fmt, accumulator=wide, method="sequential", **kw),
    )
    return AccumulationComparison(results)
