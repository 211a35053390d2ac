"""Floating-point formats described as data.

A :class:`FloatFormat` holds only the primary parameters of a binary format: how many
exponent and mantissa (fraction) bits it has and how it spends its special codes on
infinities, NaNs and negative zero. Every other property (bias, exponent range, largest
finite value, epsilon, ...) is derived from those, so a new format needs one line.

>>> import floatlab as fl
>>> fl.FP16.max, fl.FP16.smallest_normal, fl.FP16.smallest_subnormal
(65504.0, 6.103515625e-05, 5.960464477539063e-08)
>>> fl.get_format("bfloat16") is fl.BF16
True
>>> FloatFormat(exponent_bits=6, mantissa_bits=9).bias
31
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal, get_args

from floatlab.exact import pow2
from floatlab.registry import Registry

__all__ = [
    "BF16",
    "FORMATS",
    "FP16",
    "FP32",
    "FP64",
    "TF32",
    "Encoding",
    "FloatFormat",
    "format_names",
    "get_format",
    "register_format",
]

Encoding = Literal["ieee", "fn", "fnuz"]
_ENCODINGS: tuple[str, ...] = get_args(Encoding)


@dataclass(frozen=True)
class FloatFormat:
    """A binary floating-point format: 1 sign bit, ``exponent_bits``, ``mantissa_bits``.

    ``encoding`` says how the special values are stored:

    * ``"ieee"``: the all-ones exponent holds +-inf (fraction 0) and NaNs (fraction != 0),
      as in IEEE 754 binary16/32/64, bfloat16 and float8_e5m2.
    * ``"fn"``: finite only, no infinities. With ``has_nan=True`` the single code with all
      exponent and fraction bits set is NaN (float8_e4m3fn); with ``has_nan=False`` every
      code is a finite number (float6_e2m3fn, float4_e2m1fn).
    * ``"fnuz"``: finite, unsigned zero: no infinities, no negative zero, and the code of
      "negative zero" (sign bit alone) is the one NaN (float8_e4m3fnuz). The bias is one
      larger than IEEE's.

    >>> f = FloatFormat(exponent_bits=4, mantissa_bits=3, encoding="fn")
    >>> f.max, f.emax, f.bias
    (448.0, 8, 7)
    """

    exponent_bits: int
    mantissa_bits: int
    encoding: Encoding = "ieee"
    has_nan: bool = True
    name: str = field(default="", compare=False)
    description: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        e, m = self.exponent_bits, self.mantissa_bits
        if not isinstance(e, int) or isinstance(e, bool) or not 1 <= e <= 15:
            raise ValueError(f"exponent_bits={e!r}: expected an integer from 1 to 15")
        if not isinstance(m, int) or isinstance(m, bool) or not 0 <= m <= 63 - e:
            raise ValueError(f"mantissa_bits={m!r}: expected an integer from 0 to {63 - e}")
        if self.encoding not in _ENCODINGS:
            raise ValueError(f"encoding={self.encoding!r}: expected one of {', '.join(_ENCODINGS)}")
        if self.encoding != "fn" and not self.has_nan:
            raise ValueError(f"has_nan=False needs encoding 'fn', not {self.encoding!r}")
        if self.encoding == "ieee" and (e < 2 or m < 1):
            raise ValueError(
                f"an 'ieee' format needs at least 2 exponent bits and 1 mantissa bit (for its NaNs), "
                f"not e{e}m{m}"
            )
        if self.encoding == "fn" and self.has_nan and e + m < 2:
            raise ValueError("an 'fn' format with a NaN needs at least 2 exponent+mantissa bits")
        if not isinstance(self.name, str) or not isinstance(self.description, str):
            raise ValueError(f"name={self.name!r}, description={self.description!r}: expected strings")
        if not self.name:
            suffix = {"ieee": "", "fn": "fn", "fnuz": "fnuz"}[self.encoding]
            object.__setattr__(self, "name", f"e{e}m{m}{suffix}")

    # ---- layout ---------------------------------------------------------------------------
    @property
    def bits(self) -> int:
        """Total width in bits: sign + exponent + mantissa."""
        return 1 + self.exponent_bits + self.mantissa_bits

    @property
    def precision(self) -> int:
        """Significand bits including the implicit leading bit (p in IEEE 754)."""
        return self.mantissa_bits + 1

    @property
    def sign_mask(self) -> int:
        return 1 << (self.bits - 1)

    @property
    def exponent_mask(self) -> int:
        """The exponent field, in place (shifted left by ``mantissa_bits``)."""
        return ((1 << self.exponent_bits) - 1) << self.mantissa_bits

    @property
    def mantissa_mask(self) -> int:
        return (1 << self.mantissa_bits) - 1

    @property
    def code_mask(self) -> int:
        """All ``bits`` bits set: codes are integers in ``range(code_mask + 1)``."""
        return (1 << self.bits) - 1

    # ---- special values -------------------------------------------------------------------
    @property
    def has_inf(self) -> bool:
        return self.encoding == "ieee"

    @property
    def has_negative_zero(self) -> bool:
        return self.encoding != "fnuz"

    @property
    def bias(self) -> int:
        """Exponent bias: 2^(e-1) - 1, one more for "fnuz" formats."""
        return (1 << (self.exponent_bits - 1)) - (0 if self.encoding == "fnuz" else 1)

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal number: 1 - bias."""
        return 1 - self.bias

    @property
    def emax(self) -> int:
        """Exponent of the largest finite number (IEEE formats reserve the top exponent)."""
        top = (1 << self.exponent_bits) - 1
        return top - self.bias - (1 if self.encoding == "ieee" else 0)

    @property
    def max_code(self) -> int:
        """Code of the largest finite positive value."""
        if self.encoding == "ieee":
            return self.inf_code - 1
        if self.encoding == "fn" and self.has_nan:
            return (self.sign_mask - 1) - 1  # all ones below the sign is the NaN
        return self.sign_mask - 1

    @property
    def inf_code(self) -> int:
        """Code of +inf; only IEEE formats have one."""
        if not self.has_inf:
            raise ValueError(f"{self.name} has no infinity")
        return self.exponent_mask

    @property
    def nan_code(self) -> int | None:
        """The canonical (quiet, positive) NaN code, or None where there is no NaN."""
        if not self.has_nan:
            return None
        if self.encoding == "ieee":
            return self.exponent_mask | (1 << max(self.mantissa_bits - 1, 0))
        if self.encoding == "fn":
            return self.sign_mask - 1
        return self.sign_mask  # fnuz: the code of "negative zero"

    def is_nan_code(self, code: int) -> bool:
        """True when ``code`` encodes a NaN in this format."""
        mag = code & ~self.sign_mask & self.code_mask
        if self.encoding == "ieee":
            return (mag & self.exponent_mask) == self.exponent_mask and (mag & self.mantissa_mask) != 0
        if self.encoding == "fn":
            return self.has_nan and mag == self.sign_mask - 1
        return code == self.sign_mask

    # ---- derived numbers (exact, as Fractions, and as floats; each computed once per format) -----
    @functools.cached_property
    def max_exact(self) -> Fraction:
        """Largest finite value, exactly."""
        return self.code_magnitude(self.max_code)

    @functools.cached_property
    def smallest_normal_exact(self) -> Fraction:
        return pow2(self.emin)

    @functools.cached_property
    def smallest_subnormal_exact(self) -> Fraction:
        return pow2(self.emin - self.mantissa_bits)

    @functools.cached_property
    def max(self) -> float:
        """Largest finite value (``numpy.finfo(...).max``); inf when above float64's range."""
        return _to_float(self.max_exact)

    @functools.cached_property
    def smallest_normal(self) -> float:
        """Smallest positive normal value, 2^emin (``finfo.smallest_normal``, ``finfo.tiny``)."""
        return _to_float(self.smallest_normal_exact)

    @functools.cached_property
    def smallest_subnormal(self) -> float:
        """Smallest positive subnormal value, 2^(emin - mantissa_bits)."""
        return _to_float(self.smallest_subnormal_exact)

    @property
    def eps(self) -> float:
        """Machine epsilon: the gap between 1 and the next larger value, 2^-mantissa_bits."""
        return math.ldexp(1.0, -self.mantissa_bits)

    @property
    def unit_roundoff(self) -> float:
        """Largest relative error of round-to-nearest in the normal range: eps / 2."""
        return math.ldexp(1.0, -self.mantissa_bits - 1)

    @property
    def decimal_digits(self) -> int:
        """Decimal digits always carried, floor(mantissa_bits * log10(2)) (``finfo.precision``)."""
        # exact integer test instead of a float log: 10^d <= 2^m  <=>  d digits are safe
        d = 0
        while 10 ** (d + 1) <= 1 << self.mantissa_bits:
            d += 1
        return d

    @property
    def dynamic_range_log2(self) -> int:
        """log2(max / smallest subnormal), rounded down: how many binades the format spans."""
        return self.emax - (self.emin - self.mantissa_bits)

    def code_magnitude(self, code: int) -> Fraction:
        """Exact magnitude of a finite (non-NaN, non-inf) code, ignoring its sign bit."""
        mag = code & (self.sign_mask - 1)
        efield = mag >> self.mantissa_bits
        frac = mag & self.mantissa_mask
        if efield == 0:
            return Fraction(frac) * pow2(self.emin - self.mantissa_bits)
        return Fraction(frac + (1 << self.mantissa_bits)) * pow2(efield - self.bias - self.mantissa_bits)

    def contains(self, other: FloatFormat) -> bool:
        """True when every finite value of ``other`` is also a value of this format.

        >>> FP32.contains(BF16), BF16.contains(FP16), FP16.contains(FP8_E4M3FN)
        (True, False, True)
        """
        return _contains(self, other)

    def summary(self) -> str:
        """One line: name, bit layout, range and precision."""
        return (
            f"{self.name}: 1+{self.exponent_bits}+{self.mantissa_bits} bits, "
            f"max {self.max:.6g}, smallest normal {self.smallest_normal:.6g}, "
            f"smallest subnormal {self.smallest_subnormal:.6g}, eps {self.eps:.6g}"
        )

    def __str__(self) -> str:
        return self.name


def _to_float(q: Fraction) -> float:
    try:
        return float(q)
    except OverflowError:
        return math.inf


# ---- the registry ---------------------------------------------------------------------------
#: every registered format by name (case, ``-`` and spaces are read as ``_``), with its aliases:
#: :func:`get_format` looks a name up here, :func:`register_format` adds one
FORMATS: Registry[FloatFormat] = Registry(
    "format",
    alike="- ",
    sep="_",
    listing=lambda names: f"(known: {', '.join(names[:5])}, ...)",
    kind="a format name or a FloatFormat",
)


def register_format(fmt: FloatFormat, *aliases: str, replace: bool = False) -> FloatFormat:
    """Add ``fmt`` to the registry under its name and ``aliases`` (case-insensitive).

    A name or alias that already means another format is refused: every later caller of
    ``get_format`` would silently get the new one. ``replace=True`` takes it over, except for
    the built-in formats' names and aliases, which always keep their meaning. Registering the
    same format again is harmless.

    >>> e6m9 = register_format(FloatFormat(exponent_bits=6, mantissa_bits=9), "my-e6m9")
    >>> get_format("MY-E6M9") is e6m9, e6m9.name
    (True, 'e6m9')
    >>> register_format(FloatFormat(5, 2, name="FP16"))
    Traceback (most recent call last):
    ...
    ValueError: format name 'FP16' is the built-in fp16: expected a name of its own
    >>> FORMATS.remove("e6m9")  # (undo, for other examples)
    """
    if not isinstance(fmt, FloatFormat):
        raise ValueError(f"register_format({fmt!r}): expected a FloatFormat")
    if not isinstance(replace, bool):
        raise ValueError(f"replace={replace!r}: expected True or False")
    for name in (fmt.name, *aliases):
        if not isinstance(name, str) or not FORMATS.key(name):
            raise ValueError(f"format name {name!r}: expected a non-empty string")
        taken = FORMATS.find(name)
        if taken is None or (taken == fmt.name and FORMATS[taken] == fmt):
            continue
        if taken in _BUILTIN_ALIASES:
            raise ValueError(f"format name {name!r} is the built-in {taken}: expected a name of its own")
        if not replace:
            raise ValueError(
                f"format name {name!r} is already {FORMATS[taken]!r}: expected a new name (or replace=True)"
            )
    FORMATS.add(fmt.name, fmt, aliases=aliases)
    return fmt


def format_names() -> list[str]:
    """Registered format names, widest first.

    >>> format_names()[:5]
    ['fp64', 'fp32', 'tf32', 'fp16', 'bf16']
    """
    return list(FORMATS)


def get_format(fmt: str | FloatFormat) -> FloatFormat:
    """Look a format up by name or alias; a :class:`FloatFormat` is returned as is.

    >>> get_format("half").name
    'fp16'
    >>> get_format("flaot16")
    Traceback (most recent call last):
    ...
    ValueError: unknown format 'flaot16': did you mean fp16? (known: fp64, fp32, tf32, fp16, bf16, ...)
    """
    if isinstance(fmt, FloatFormat):
        return fmt
    return FORMATS.lookup(fmt)


#: the other names of the built-in formats (get_format takes any of them, in any case)
_BUILTIN_ALIASES: dict[str, str] = {
    "fp64": "float64 double binary64 f64",
    "fp32": "float32 single binary32 f32 float",
    "tf32": "tensorfloat32 tensorfloat_32",
    "fp16": "float16 half binary16 f16",
    "bf16": "bfloat16 brain_float brainfloat16",
    "float8_e5m2": "fp8_e5m2 e5m2 fp8e5m2 f8e5m2",
    "float8_e4m3fn": "fp8_e4m3fn e4m3fn fp8_e4m3 e4m3 f8e4m3fn fp8",
    "float8_e4m3fnuz": "fp8_e4m3fnuz e4m3fnuz f8e4m3fnuz",
    "float8_e5m2fnuz": "fp8_e5m2fnuz e5m2fnuz f8e5m2fnuz",
    "float6_e2m3fn": "fp6_e2m3fn e2m3fn fp6_e2m3 e2m3",
    "float6_e3m2fn": "fp6_e3m2fn e3m2fn fp6_e3m2 e3m2",
    "float4_e2m1fn": "fp4_e2m1fn e2m1fn fp4_e2m1 e2m1 fp4",
}


def _builtin(fmt: FloatFormat) -> FloatFormat:
    """Register a built-in format under its name and its :data:`_BUILTIN_ALIASES`."""
    return register_format(fmt, *_BUILTIN_ALIASES[fmt.name].split())


FP64 = _builtin(FloatFormat(11, 52, name="fp64", description="IEEE 754 binary64 (double)"))
FP32 = _builtin(FloatFormat(8, 23, name="fp32", description="IEEE 754 binary32 (single)"))
TF32 = _builtin(
    FloatFormat(8, 10, name="tf32", description="NVIDIA TensorFloat-32: fp32 range, fp16 precision")
)
FP16 = _builtin(FloatFormat(5, 10, name="fp16", description="IEEE 754 binary16 (half)"))
BF16 = _builtin(FloatFormat(8, 7, name="bf16", description="bfloat16: fp32 range, 8-bit precision"))
FP8_E5M2 = _builtin(
    FloatFormat(5, 2, name="float8_e5m2", description="OCP fp8 E5M2 (IEEE-style inf and NaN)")
)
FP8_E4M3FN = _builtin(
    FloatFormat(4, 3, "fn", name="float8_e4m3fn", description="OCP fp8 E4M3: no inf, one NaN")
)
FP8_E4M3FNUZ = _builtin(
    FloatFormat(4, 3, "fnuz", name="float8_e4m3fnuz", description="fp8 E4M3 FNUZ (Graphcore/AMD)")
)
FP8_E5M2FNUZ = _builtin(
    FloatFormat(5, 2, "fnuz", name="float8_e5m2fnuz", description="fp8 E5M2 FNUZ (Graphcore/AMD)")
)
FP6_E2M3FN = _builtin(
    FloatFormat(2, 3, "fn", has_nan=False, name="float6_e2m3fn", description="OCP MX fp6 E2M3: all finite")
)
FP6_E3M2FN = _builtin(
    FloatFormat(3, 2, "fn", has_nan=False, name="float6_e3m2fn", description="OCP MX fp6 E3M2: all finite")
)
FP4_E2M1FN = _builtin(
    FloatFormat(2, 1, "fn", has_nan=False, name="float4_e2m1fn", description="OCP MX fp4 E2M1: all finite")
)


@functools.lru_cache(maxsize=256)
def _contains(big: FloatFormat, small: FloatFormat) -> bool:
    # with at least as many fraction bits, a finer-or-equal subnormal step and a larger
    # max, every binade of `small` sits on a grid at least as fine in `big` (cached: the
    # exact maxima are Fractions, and round_array asks on every call)
    return (
        small.mantissa_bits <= big.mantissa_bits
        and small.emin - small.mantissa_bits >= big.emin - big.mantissa_bits
        and small.max_exact <= big.max_exact
    )
