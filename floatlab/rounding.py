"""Rounding: the one primitive that turns a real number into a low-precision one.

This module holds the readable scalar reference, :func:`round_rational` and
:func:`round_scalar`, written with exact rational arithmetic. It is the specification:
the compiled array kernels (:func:`round_array`, :func:`encode_array`) must give the
same bits for every input.

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

import difflib
import enum
import math
import struct
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike

from floatlab.backend import is_cupy
from floatlab.formats import BF16, FP16, FP32, FP64, FloatFormat, get_format

__all__ = [
    "ROUNDING_MODES",
    "Flags",
    "Rounding",
    "RoundingStats",
    "add_count",
    "check_rounding",
    "encode_array",
    "odd_div",
    "odd_sqrt",
    "odd_sum",
    "random_bits_at",
    "round_array",
    "round_rational",
    "round_scalar",
    "running_sums",
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
MODE_DESCRIPTIONS: dict[str, str] = {
    "rne": "round to nearest, ties to even",
    "rna": "round to nearest, ties away from zero",
    "rtz": "round toward zero",
    "rup": "round toward +infinity",
    "rdown": "round toward -infinity",
    "rodd": "round to odd",
    "stochastic": "stochastic rounding",
}

DEFAULT_RANDOM_BITS = 32


def check_rounding(rounding: str) -> Rounding:
    """Return the canonical mode name for ``rounding`` (aliases such as "floor" accepted).

    >>> check_rounding("floor")
    'rdown'
    """
    key = str(rounding).strip().lower().replace("-", "_")
    if key in MODE_INDEX:
        return ROUNDING_MODES[MODE_INDEX[key]]
    if key in _MODE_ALIASES:
        return _MODE_ALIASES[key]
    close = difflib.get_close_matches(key, [*ROUNDING_MODES, *_MODE_ALIASES], n=1)
    hint = f"did you mean {close[0]}? " if close else ""
    expected = ", ".join(ROUNDING_MODES)
    raise ValueError(f"unknown rounding mode {rounding!r}: {hint}(expected one of {expected})")


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
def _exponent_of(q: Fraction) -> int:
    """floor(log2(q)) for q > 0, exactly (no floating-point log)."""
    e = q.numerator.bit_length() - q.denominator.bit_length()
    # now 2^(e-1) < q < 2^(e+1); one comparison settles it
    if (q.numerator << max(-e, 0)) < (q.denominator << max(e, 0)):
        e -= 1
    return e


def _round_up(mode: str, r: int, den: int, kept: int, negative: bool, rand: int, random_bits: int) -> bool:
    """Whether to step from ``kept`` (the truncated significand) to ``kept + 1``.

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
    """Round mag to a multiple of 2^(exp - m); return (multiple, inexact)."""
    shift = fmt.mantissa_bits - exp  # mag * 2^shift, as num / den
    num, den = mag.numerator, mag.denominator
    if shift >= 0:
        num <<= shift
    else:
        den <<= -shift
    kept, r = divmod(num, den)
    return kept + _round_up(mode, r, den, kept, negative, rand, random_bits), r != 0


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
    if not 1 <= random_bits <= 32:
        raise ValueError(f"random_bits={random_bits!r}: expected an integer from 1 to 32")
    value = Fraction(value)
    negative = value < 0 or (value == 0 and negative_zero)
    sign = fmt.sign_mask if negative else 0
    mag = abs(value)
    m = fmt.mantissa_bits
    flags = Flags.NONE
    if mag == 0:
        return (sign if fmt.has_negative_zero else 0), flags

    e = _exponent_of(mag)
    te = max(e, fmt.emin)
    kept, inexact = _scaled_round(mag, te, fmt, mode, negative, rand, random_bits)
    # the carry out of the significand walks into the exponent field by itself
    code_mag = ((te - fmt.emin) << m) + kept
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
    sign = fmt.sign_mask if negative else 0
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
        if fmt.has_inf:
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


# ---- the array primitive: compiled kernels, checked against the reference above -----------------
@dataclass(frozen=True)
class RoundingStats:
    """How many elements of one array rounding raised each IEEE 754 flag.

    Counted per element with the semantics of :func:`round_scalar` (tininess detected
    after rounding; a flushed subnormal is inexact and underflows). ``total`` is the
    number of elements rounded.

    >>> import numpy as np, floatlab as fl
    >>> _, stats = fl.encode_array(np.array([1.0, 0.1, 1e-9, 1e9]), "fp16", flags=True)
    >>> stats
    RoundingStats(total=4, inexact=3, underflow=1, overflow=1, invalid=0)
    """

    total: int
    inexact: int
    underflow: int
    overflow: int
    invalid: int


_FLOAT_FORMATS: dict[str, FloatFormat] = {"float64": FP64, "float32": FP32, "float16": FP16, "bfloat16": BF16}
_UINT_OF_BITS = {16: np.uint16, 32: np.uint32, 64: np.uint64}
_FORMAT_OF_DTYPE: dict[np.dtype[Any], FloatFormat] = {}  # (filled on first sight of each dtype)


def _as_float_array(x: ArrayLike) -> tuple[np.ndarray, FloatFormat]:
    """x as a native-endian, C-contiguous float64/32/16 or bfloat16 array, with its format."""
    try:
        a = np.asarray(x)
    except (ValueError, TypeError) as e:  # ragged nested lists, objects numpy cannot take
        raise ValueError(f"x: expected an array of numbers ({e})") from None
    kind = a.dtype.kind
    if kind in "biu":
        a = a.astype(np.float64)  # integers and booleans are taken as float64 values
    fmt = _FORMAT_OF_DTYPE.get(a.dtype)
    if fmt is None:
        name = a.dtype.name if kind != "V" else str(a.dtype)
        if name not in _FLOAT_FORMATS:
            raise ValueError(
                f"x has dtype {a.dtype}: expected float64, float32, float16 or bfloat16 "
                "(integers and booleans are converted to float64)"
            )
        fmt = _FORMAT_OF_DTYPE[a.dtype] = _FLOAT_FORMATS[name]
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))  # a byte swap, no float conversion
    return (a if a.flags.c_contiguous else np.ascontiguousarray(a)), fmt  # (keeps a 0-d array 0-d)


def _stochastic_key(rng: np.random.Generator | int | None, mode: str) -> tuple[int, int]:
    """The key of the counter-based random bits: two uint32 drawn from ``rng``."""
    if rng is None:
        if mode == "stochastic":
            raise ValueError("rounding='stochastic' needs rng: a numpy Generator or an int seed")
        return 0, 0
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool) and rng >= 0:
        rng = np.random.default_rng(int(rng))
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng={rng!r}: expected a numpy Generator or a non-negative int seed")
    if mode != "stochastic":
        return 0, 0  # only stochastic rounding consumes random numbers
    k = rng.integers(0, 2**32, size=2, dtype=np.uint64)
    return int(k[0]), int(k[1])


def _options(saturate: bool, subnormals: bool, random_bits: int) -> dict[str, Any]:
    if isinstance(random_bits, bool) or not isinstance(random_bits, (int, np.integer)):
        raise ValueError(f"random_bits={random_bits!r}: expected an integer from 1 to 32")
    if not 1 <= random_bits <= 32:
        raise ValueError(f"random_bits={random_bits!r}: expected an integer from 1 to 32")
    return {"saturate": bool(saturate), "subnormals": bool(subnormals), "random_bits": int(random_bits)}


def _run(
    a: np.ndarray,
    src: FloatFormat,
    target: FloatFormat,
    mode: str,
    key: tuple[int, int],
    opts: dict[str, Any],
    *,
    flags: bool,
    back: bool,
    specials: FloatFormat | None = None,
) -> tuple[np.ndarray, tuple[int, int, int, int]]:
    """Round the elements of ``a`` (format ``src``) into ``target``.

    Returns the codes, or with ``back`` the bit patterns converted back into ``src``, and
    the flag counts (inexact, underflow, overflow, invalid; zeros unless ``flags``).
    """
    from floatlab import _kernels as k

    udt = _UINT_OF_BITS[src.bits]
    bits = a.reshape(-1).view(udt)
    cdt = k.code_dtype(target)
    lanes = 64 if max(src.bits, target.bits) > 32 else 32
    fast = mode != "stochastic" and not flags and (back or src.bits == 64 or cdt.itemsize * 8 <= src.bits)
    if (
        fast
        and src == FP32
        and target == FP16
        and mode == "rne"
        and specials is None
        and opts["subnormals"]
        and not opts["saturate"]
        and k.half_hardware()
    ):
        # the commonest cast of mixed precision: the CPU's own conversion (same bits, tested)
        return k.run_half(bits, back), (0, 0, 0, 0)
    if (
        fast
        and src == FP32
        and target == BF16
        and mode == "rne"
        and specials is None
        and opts["subnormals"]
        and not opts["saturate"]
    ):
        # bfloat16 is float32's top half: rounding is one integer add (same bits, tested)
        return k.run_bf16(bits, back), (0, 0, 0, 0)
    if fast:
        # the lean loops: deterministic modes, no flags, one compiled loop per dtype pair
        p = k.encode_params(src, target, mode, lanes=lanes, specials_from=specials, **opts)
        if back:
            return k.run_round(bits, lanes, p, k.decode_params(target, src, lanes)), (0, 0, 0, 0)
        return k.run_encode(bits, cdt, lanes, p), (0, 0, 0, 0)
    # the general loops (stochastic rounding, flag counts, 16/32-bit input to 64-bit codes)
    # take 32- and 64-bit inputs only: 16-bit ones are widened first, exactly (float16 ->
    # float32 keeps every value and NaN payload), with denormals-are-zero applied before
    wide = src
    if src.bits == 16:
        if not opts["subnormals"]:
            bits = np.where((bits & src.exponent_mask) == 0, bits & src.sign_mask, bits).astype(udt)
        if src == BF16:
            bits = bits.astype(np.uint32) << np.uint32(16)  # bfloat16 is the top half of a float32
        else:
            bits = bits.view(np.float16).astype(np.float32).view(np.uint32)
        wide = FP32
    lanes = 64 if max(wide.bits, target.bits) > 32 else 32
    p = k.encode_params(wide, target, mode, lanes=lanes, full=flags, key=key, specials_from=specials, **opts)
    d = k.decode_params(target, src, lanes)
    counts = (0, 0, 0, 0)
    if flags:
        out, counts = k.run_full(bits, lanes, p, d, back)
    else:
        out = k.run_general(bits, lanes, p, d, back)
    return out.astype(udt if back else cdt, copy=False), counts


def encode_array(
    x: ArrayLike,
    fmt: FloatFormat | str,
    rounding: str = "rne",
    *,
    rng: np.random.Generator | int | None = None,
    saturate: bool = False,
    subnormals: bool = True,
    random_bits: int = DEFAULT_RANDOM_BITS,
    flags: bool = False,
) -> Any:
    """Round every element of ``x`` into ``fmt`` and return the codes (unsigned integers).

    ``x`` may be float64, float32, float16 or bfloat16 (integers and booleans are taken
    as float64), of any shape. The codes have the shape of ``x`` and the smallest unsigned
    dtype that holds ``fmt.bits``. Every element gets exactly the bits of
    :func:`round_scalar`; a float64 input is rounded once, never through float32.

    ``saturate`` clamps overflows to the largest finite value; ``subnormals=False`` treats
    subnormal inputs as zero and flushes subnormal results to zero. Stochastic rounding
    needs ``rng`` (a numpy Generator or an int seed): its key is
    ``rng.integers(0, 2**32, size=2, dtype=np.uint64)`` and element ``i`` (flat C order)
    uses ``random_bits_at(key, i, random_bits)``. With ``flags=True`` the result is
    ``(codes, RoundingStats)``.

    >>> import numpy as np, floatlab as fl
    >>> [hex(c) for c in fl.encode_array(np.array([1.0, 0.1, -65520.0]), "fp16")]
    ['0x3c00', '0x2e66', '0xfc00']
    >>> fl.encode_array([448.0, 500.0, 1e6], "e4m3fn", saturate=True).tolist()
    [126, 126, 126]
    """
    if is_cupy(x):  # a CuPy array: the same element functions, compiled for its GPU
        from floatlab._gpu_kernels import run_array

        opts: dict[str, Any] = {"saturate": saturate, "subnormals": subnormals, "random_bits": random_bits}
        return run_array(x, fmt, rounding, back=False, rng=rng, flags=flags, **opts)
    f = get_format(fmt)
    mode = check_rounding(rounding)
    opts = _options(saturate, subnormals, random_bits)
    key = _stochastic_key(rng, mode)
    a, src = _as_float_array(x)
    codes, counts = _run(a, src, f, mode, key, opts, flags=flags, back=False)
    codes = codes.reshape(a.shape)
    return (codes, RoundingStats(a.size, *counts)) if flags else codes


def round_array(
    x: ArrayLike,
    fmt: FloatFormat | str,
    rounding: str = "rne",
    *,
    rng: np.random.Generator | int | None = None,
    saturate: bool = False,
    subnormals: bool = True,
    random_bits: int = DEFAULT_RANDOM_BITS,
    flags: bool = False,
) -> Any:
    """Round every element of ``x`` to a value of ``fmt`` (per ``rounding``), kept in x's dtype.

    The result has x's dtype and shape: each element is rounded into ``fmt`` exactly as
    :func:`encode_array` does and converted back, which is exact because every value of
    ``fmt`` must be a value of x's dtype (otherwise ValueError: use encode_array and
    decode_array, whose float64 holds them). When x's dtype is the narrower one (float16
    into fp32, say) the values pass through, zeroed if subnormal with ``subnormals=False``.
    NaN results are quiet NaNs of x's dtype with the sign of the input. Options as in
    :func:`encode_array`; ``flags=True`` returns ``(values, RoundingStats)``.

    >>> import numpy as np, floatlab as fl
    >>> y = fl.round_array(np.array([0.1, 1000.0, 1e-3], np.float32), "bf16")
    >>> y.dtype, y.tolist()
    (dtype('float32'), [0.10009765625, 1000.0, 0.00099945068359375])
    >>> fl.round_array(np.float32(1 + 2**-9), "bf16", "rup").item()
    1.0078125
    """
    if is_cupy(x):  # a CuPy array: the same element functions, compiled for its GPU
        from floatlab._gpu_kernels import run_array

        opts: dict[str, Any] = {"saturate": saturate, "subnormals": subnormals, "random_bits": random_bits}
        return run_array(x, fmt, rounding, back=True, rng=rng, flags=flags, **opts)
    f = get_format(fmt)
    mode = check_rounding(rounding)
    opts = _options(saturate, subnormals, random_bits)
    key = _stochastic_key(rng, mode)
    a, src = _as_float_array(x)
    if src.contains(f):
        target, specials = f, None
    elif f.contains(src):
        # every value of x is a value of fmt: round into x's own format (the identity on
        # finite values), with fmt's treatment of infinities and NaNs
        target, specials = src, f
    else:
        raise ValueError(
            f"format {f.name} has values that {a.dtype} cannot hold, so round_array would round "
            f"twice; use encode_array(x, {f.name!r}) and decode_array(codes, {f.name!r}) (float64)"
        )
    out, counts = _run(a, src, target, mode, key, opts, flags=flags, back=True, specials=specials)
    values = out.view(a.dtype).reshape(a.shape)
    return (values, RoundingStats(a.size, *counts)) if flags else values


def running_sums(
    terms: ArrayLike,
    fmt: FloatFormat | str,
    rounding: str = "rne",
    *,
    kahan: bool = False,
    rng: np.random.Generator | int | None = None,
    saturate: bool = False,
    subnormals: bool = True,
    random_bits: int = DEFAULT_RANDOM_BITS,
) -> tuple[np.ndarray, np.ndarray | None]:
    """The running sums of ``terms`` (float64 values of ``fmt``) with every addition rounded
    once into ``fmt``, left to right, in one compiled serial loop; with ``kahan`` Kahan's
    compensated sums, every one of its four operations a term rounded once.

    Returns ``(sums, compensations)`` as float64 arrays (``compensations`` is None without
    ``kahan``). Each exact sum is formed rounded to odd at 53 bits first, which equals one
    rounding for formats of up to 51 bits of precision. Stochastic rounding draws its key as
    :func:`encode_array` does; addition i (Kahan: operation 4i + j) uses random word i (4i + j).

    >>> import numpy as np
    >>> running_sums(np.ones(4), "fp16")[0].tolist()
    [1.0, 2.0, 3.0, 4.0]
    >>> float(running_sums(np.ones(3000), "fp16")[0][-1])      # fp16's gap at 2048 is 2
    2048.0
    """
    from floatlab import _kernels as k

    f = get_format(fmt)
    mode = check_rounding(rounding)
    opts = _options(saturate, subnormals, random_bits)
    key = _stochastic_key(rng, mode)
    t = np.ascontiguousarray(terms, dtype=np.float64).reshape(-1)
    p = k.encode_params(FP64, f, mode, lanes=64, key=key, **opts)
    d = k.decode_params(f, FP64, 64)
    return k.run_running_sums(t, kahan, key, mode == "stochastic", mode == "rdown", p, d)


def odd_sum(x: np.ndarray, y: np.ndarray, rdown: bool) -> np.ndarray:
    """x + y rounded to odd at 53 bits (1-d float64 arrays of one size); see the kernels' notes.

    >>> odd_sum(np.array([1.0, 1.0, 1.0]), np.array([2.0**-60, -(2.0**-60), -1.0]), True).tolist()
    [1.0000000000000002, 0.9999999999999999, -0.0]
    """
    from floatlab import _kernels as k

    return k.odd_sum(x, y, rdown)


def odd_div(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """x / y rounded to odd at 53 bits (1-d float64 arrays of one size)."""
    from floatlab import _kernels as k

    return k.odd_div(x, y)


def odd_sqrt(x: np.ndarray) -> np.ndarray:
    """sqrt(x) rounded to odd at 53 bits (1-d float64)."""
    from floatlab import _kernels as k

    return k.odd_sqrt(x)


def add_count(w: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, int, int, int]:
    """``(w + d, count of d != 0, count of w + d != w, count of non-finite w + d)`` in one pass."""
    from floatlab import _kernels as k

    return k.add_count(w, d)
