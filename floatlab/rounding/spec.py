"""The specification of rounding: the exact scalar reference and the random-bit rule.

:func:`round_rational` and :func:`round_scalar` are written with exact rational arithmetic,
to be read. They are the specification: the compiled array kernels behind
:func:`floatlab.rounding.round_array` and :func:`floatlab.rounding.encode_array` must give
the same bits for every input, and the tests check that they do.

Modes (IEEE 754 names in brackets):

* ``"rne"``  nearest, ties to even            [roundTiesToEven, the default]
* ``"rna"``  nearest, ties away from zero     [roundTiesToAway]
* ``"rtz"``  toward zero                      [roundTowardZero]
* ``"rup"``  toward +infinity                 [roundTowardPositive]
* ``"rdown"`` toward -infinity                [roundTowardNegative]
* ``"rodd"`` to odd: an inexact result gets an odd last bit (used to avoid double rounding)
* ``"stochastic"``: up with probability equal to the distance from the lower neighbour,
  in units of the gap, using ``random_bits`` uniform random bits

>>> from fractions import Fraction
>>> import floatlab as fl
>>> code, flags = round_rational(Fraction(1, 10), fl.FP16)
>>> hex(code), flags
('0x2e66', <Flags.INEXACT: 1>)
"""

from __future__ import annotations

import enum
import math
import struct
from fractions import Fraction
from typing import Literal

import numpy as np

from floatlab.exact import floor_log2
from floatlab.formats import FP64, FloatFormat, get_format
from floatlab.registry import Registry

__all__ = [
    "DEFAULT_RANDOM_BITS",
    "MODE_DESCRIPTIONS",
    "MODE_INDEX",
    "ROUNDING_MODES",
    "Flags",
    "Rounding",
    "check_random_bits",
    "check_rounding",
    "random_bits_at",
    "round_rational",
    "round_scalar",
]

Rounding = Literal["rne", "rna", "rtz", "rup", "rdown", "rodd", "stochastic"]
ROUNDING_MODES: tuple[Rounding, ...] = ("rne", "rna", "rtz", "rup", "rdown", "rodd", "stochastic")
MODE_INDEX: dict[str, int] = {m: i for i, m in enumerate(ROUNDING_MODES)}
_MODE_ALIASES: dict[str, Rounding] = {
    "nearest": "rne",
    "nearest_even": "rne",
    "ties_to_even": "rne",
    "rn": "rne",
    "nearest_away": "rna",
    "ties_away": "rna",
    "toward_zero": "rtz",
    "trunc": "rtz",
    "truncate": "rtz",
    "rz": "rtz",
    "toward_positive": "rup",
    "ceil": "rup",
    "ru": "rup",
    "toward_negative": "rdown",
    "floor": "rdown",
    "rd": "rdown",
    "odd": "rodd",
    "round_to_odd": "rodd",
    "sr": "stochastic",
    "stoch": "stochastic",
}
#: what each rounding mode does, by name: the registry :func:`check_rounding` reads (with the
#: aliases; case is ignored and ``-`` read as ``_``)
MODE_DESCRIPTIONS: Registry[str] = Registry(
    "rounding mode",
    {
        "rne": "round to nearest, ties to even",
        "rna": "round to nearest, ties away from zero",
        "rtz": "round toward zero",
        "rup": "round toward +infinity",
        "rdown": "round toward -infinity",
        "rodd": "round to odd",
        "stochastic": "stochastic rounding",
    },
    aliases=_MODE_ALIASES,
    alike="-",
    sep="_",
    listing=lambda names: f"(expected one of {', '.join(names)})",
)

DEFAULT_RANDOM_BITS = 32


def check_rounding(rounding: str) -> Rounding:
    """Return the canonical mode name for ``rounding`` (aliases such as "floor" accepted).

    >>> check_rounding("floor")
    'rdown'
    """
    return ROUNDING_MODES[MODE_INDEX[MODE_DESCRIPTIONS.name(rounding)]]


def check_random_bits(random_bits: object) -> int:
    """``random_bits`` as an int from 1 to 32 (the bits stochastic rounding reads), or ValueError.

    >>> check_random_bits(8)
    8
    """
    if isinstance(random_bits, bool) or not isinstance(random_bits, (int, np.integer)):
        raise ValueError(f"random_bits={random_bits!r}: expected an integer from 1 to 32")
    if not 1 <= random_bits <= 32:
        raise ValueError(f"random_bits={random_bits!r}: expected an integer from 1 to 32")
    return int(random_bits)


class Flags(enum.IntFlag):
    """IEEE 754 exception flags raised by a conversion (tininess detected after rounding).

    >>> round_scalar(1e-9, "fp16")[1]    # 1e-9 is below half fp16's smallest subnormal: it flushes
    <Flags.INEXACT|UNDERFLOW: 3>
    >>> Flags.OVERFLOW in round_scalar(1e6, "fp16")[1]
    True
    """

    NONE = 0
    INEXACT = 1
    UNDERFLOW = 2
    OVERFLOW = 4
    INVALID = 8


# ---- the random bits of stochastic rounding ---------------------------------------------------
# A counter-based generator: the random bits for element i depend only on (key, i), so the
# compiled kernels, running over cores in any order, and this scalar reference draw the same
# bits, and a seeded numpy Generator (which supplies the key) makes every run reproducible.
_M32 = 0xFFFFFFFF


def _mix32(x: int) -> int:
    """A 32-bit integer hash with good avalanche (the "lowbias32" finaliser)."""
    x &= _M32
    x ^= x >> 16
    x = (x * 0x7FEB352D) & _M32
    x ^= x >> 15
    x = (x * 0x846CA68B) & _M32
    x ^= x >> 16
    return x


def random_bits_at(key: tuple[int, int], index: int, random_bits: int = DEFAULT_RANDOM_BITS) -> int:
    """The ``random_bits``-bit uniform integer that stochastic rounding uses for element ``index``.

    >>> 0 <= random_bits_at((1, 2), 0, 8) < 256
    True
    """
    lo, hi = index & _M32, (index >> 32) & _M32
    h = _mix32(lo ^ key[0])
    h = _mix32((h + ((hi * 0x9E3779B9) & _M32) + key[1]) & _M32)
    return h >> (32 - random_bits)


# ---- the scalar reference -----------------------------------------------------------------------
def _round_up(mode: str, r: int, den: int, kept: int, negative: bool, rand: int, random_bits: int) -> bool:
    """Whether to step from ``kept`` (the truncated significand, or the lower code whose parity
    decides: see :func:`round_rational`) to ``kept + 1``.

    The exact value lies ``r / den`` (in [0, 1)) of the gap beyond ``kept``; integers only,
    so that a value with a 300,000-bit numerator costs one division, not a Fraction's gcds.
    """
    if r == 0:
        return False
    if mode == "rne":
        return 2 * r > den or (2 * r == den and kept % 2 == 1)
    if mode == "rna":
        return 2 * r >= den
    if mode == "rtz":
        return False
    if mode == "rup":
        return not negative
    if mode == "rdown":
        return negative
    if mode == "rodd":
        return kept % 2 == 0
    # stochastic: add the random bits to the top `random_bits` bits of the remainder and
    # round up on a carry, as hardware does; P(up) = floor(rem * 2^k) / 2^k
    scaled = (r << random_bits) // den
    return scaled + rand >= 1 << random_bits


def _scaled_round(
    mag: Fraction, exp: int, fmt: FloatFormat, mode: str, negative: bool, rand: int, random_bits: int
) -> tuple[int, bool]:
    """Round mag to a multiple of 2^(exp - m); return (multiple, inexact).

    Without fraction bits (and with a zero) "even" is the parity of the lower code, as
    P3109 and gfloat read it; elsewhere that of the significand (the same parity when m > 0).
    """
    shift = fmt.mantissa_bits - exp  # mag * 2^shift, as num / den
    num, den = mag.numerator, mag.denominator
    if shift >= 0:
        num <<= shift
    else:
        den <<= -shift
    kept, r = divmod(num, den)
    parity = kept + (exp - fmt.emin if fmt.mantissa_bits == 0 and fmt.has_zero else 0)
    return kept + _round_up(mode, r, den, parity, negative, rand, random_bits), r != 0


def round_rational(
    value: Fraction | int,
    fmt: FloatFormat | str,
    rounding: str = "rne",
    *,
    negative_zero: bool = False,
    saturate: bool = False,
    subnormals: bool = True,
    rand: int = 0,
    random_bits: int = DEFAULT_RANDOM_BITS,
) -> tuple[int, Flags]:
    """Round the exact rational ``value`` into ``fmt``: return (code, IEEE flags).

    This is the specification every other rounding in floatlab must match.
    ``negative_zero`` gives a zero ``value`` its sign. ``rand`` is the uniform
    ``random_bits``-bit integer that ``"stochastic"`` consumes.

    >>> import floatlab as fl
    >>> code, flags = round_rational(Fraction(65520), fl.FP16)   # half an ulp above 65504: overflows
    >>> code, flags == Flags.OVERFLOW | Flags.INEXACT
    (31744, True)
    >>> round_rational(Fraction(65520), fl.FP16, saturate=True)[0] == 0x7BFF
    True
    """
    fmt = get_format(fmt)
    mode = check_rounding(rounding)
    check_random_bits(random_bits)
    value = Fraction(value)
    negative = value < 0 or (value == 0 and negative_zero)
    sign = fmt.sign_mask if negative and fmt.signed else 0
    mag = abs(value)
    m = fmt.mantissa_bits
    flags = Flags.NONE
    if (value < 0 and not fmt.signed) or (mag == 0 and not fmt.has_zero):
        # no sign (a negative value) or no zero (E8M0): the NaN
        assert fmt.nan_code is not None
        return fmt.nan_code, Flags.INVALID
    if mag == 0:
        return (sign if fmt.has_negative_zero else 0), flags

    e = floor_log2(mag)
    te = max(e, fmt.emin)
    kept, inexact = _scaled_round(mag, te, fmt, mode, negative, rand, random_bits)
    # the carry out of the significand walks into the exponent field by itself
    code_mag = ((te - fmt.emin) << m) + kept
    if not fmt.has_zero:  # a scale format: its zero exponent field is 2^emin; below it, the smallest
        code_mag = max(code_mag - 1, 0)
    if inexact:
        flags |= Flags.INEXACT
        # tininess after rounding: would the result be below 2^emin with an unbounded exponent?
        if e < fmt.emin:
            unbounded, _ = _scaled_round(mag, e, fmt, mode, negative, rand, random_bits)
            if unbounded < 1 << (m + 1) or e < fmt.emin - 1:
                flags |= Flags.UNDERFLOW

    if code_mag > fmt.max_code:
        flags |= Flags.OVERFLOW | Flags.INEXACT
        toward_zero = (
            mode in ("rtz", "rodd") or (mode == "rup" and negative) or (mode == "rdown" and not negative)
        )
        if toward_zero or saturate or not fmt.has_nan:
            code_mag = fmt.max_code
        elif fmt.has_inf:
            code_mag = fmt.inf_code
        else:
            nan = fmt.nan_code
            assert nan is not None
            return (nan if fmt.encoding == "fnuz" else sign | nan), flags
    elif code_mag < 1 << m and code_mag != 0 and not subnormals:
        # flush to zero: a subnormal result becomes a zero of the same sign
        code_mag = 0
        flags |= Flags.UNDERFLOW | Flags.INEXACT
    if code_mag == 0 and not fmt.has_negative_zero:
        sign = 0
    return sign | code_mag, flags


def _float_bits(x: float) -> int:
    return int.from_bytes(struct.pack("<d", x), "little")


def round_scalar(
    x: float,
    fmt: FloatFormat | str,
    rounding: str = "rne",
    *,
    saturate: bool = False,
    subnormals: bool = True,
    rand: int = 0,
    random_bits: int = DEFAULT_RANDOM_BITS,
    input_format: FloatFormat = FP64,
) -> tuple[int, Flags]:
    """Round a Python float (or any value of ``input_format``, held in a float) into ``fmt``.

    Handles what a Fraction cannot hold: signed zeros, infinities and NaNs (their sign
    and the top bits of their payload are kept; a signalling NaN is quietened and raises
    INVALID). With ``subnormals=False`` an input that is subnormal in ``input_format``
    counts as zero (denormals-are-zero) and subnormal results flush to zero.

    >>> import floatlab as fl
    >>> [hex(round_scalar(v, fl.FP16)[0]) for v in (1.0, -0.0, float("inf"), 1e-8)]
    ['0x3c00', '0x8000', '0x7c00', '0x0']
    """
    fmt = get_format(fmt)
    negative = math.copysign(1.0, x) < 0
    sign = fmt.sign_mask if negative and fmt.signed else 0
    if not fmt.signed and negative and math.isinf(x):
        return round_rational(Fraction(-1), fmt)  # -inf, as every negative value, is the NaN
    if math.isnan(x):
        bits = _float_bits(x)
        quiet_in = (bits >> 51) & 1
        flags = Flags.NONE if quiet_in else Flags.INVALID
        if fmt.encoding == "ieee":
            # the 51 payload bits below the quiet bit, aligned to fmt's mantissa_bits - 1
            # (shifted left when fmt has more than 52 fraction bits)
            low, drop = bits & ((1 << 51) - 1), 51 - (fmt.mantissa_bits - 1)
            payload = low >> drop if drop >= 0 else low << -drop
            return sign | fmt.exponent_mask | (1 << (fmt.mantissa_bits - 1)) | payload, flags
        if not fmt.has_nan:  # no NaN to give: a zero of the same sign, and INVALID
            return sign, Flags.INVALID
        nan = fmt.nan_code
        assert nan is not None
        return (nan if fmt.encoding == "fnuz" else sign | nan), flags
    if math.isinf(x):
        if fmt.has_inf and not (saturate and fmt.extended):  # P3109 saturation clamps inf too
            return sign | fmt.inf_code, Flags.NONE
        if saturate or not fmt.has_nan:
            return sign | fmt.max_code, Flags.INVALID
        nan = fmt.nan_code
        assert nan is not None
        return (nan if fmt.encoding == "fnuz" else sign | nan), Flags.INVALID
    value = Fraction(x)
    if not subnormals and 0 < abs(value) < input_format.smallest_normal_exact:
        value = Fraction(0)
    return round_rational(
        value,
        fmt,
        rounding,
        negative_zero=negative,
        saturate=saturate,
        subnormals=subnormals,
        rand=rand,
        random_bits=random_bits,
    )
