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
import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal, get_args

from floatlab.exact import pow2
from floatlab.registry import Registry, shown

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
      larger than IEEE's. These are also the IEEE P3109 binary formats: ``extended=True``
      gives them +-inf at the largest magnitude code (``p3109_k8p3se``), and an unsigned one
      (``signed=False``) has its one NaN at the all-ones code (``p3109_k8p3ue``).

    ``signed=False`` drops the sign bit ("fnuz", or "fn" with a NaN, whose NaN is then the
    all-ones code); a negative value rounds to the NaN. ``has_subnormals=False`` (an "fn"
    format without fraction bits) makes the zero exponent field a normal binade: a scale
    format with no zero, OCP's E8M0 (float8_e8m0fnu).

    >>> f = FloatFormat(exponent_bits=4, mantissa_bits=3, encoding="fn")
    >>> f.max, f.emax, f.bias
    (448.0, 8, 7)
    >>> g = FloatFormat(5, 2, "fnuz", signed=False, extended=True)
    >>> g.name, g.bits, hex(g.inf_code), hex(g.nan_code or 0), g.max
    ('p3109_k7p3ue', 7, '0x7e', '0x7f', 40960.0)
    """

    exponent_bits: int
    mantissa_bits: int
    encoding: Encoding = "ieee"
    has_nan: bool = True
    signed: bool = True
    extended: bool = False
    has_subnormals: bool = True
    name: str = field(default="", compare=False)
    description: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        e, m = self.exponent_bits, self.mantissa_bits
        for flag in ("has_nan", "signed", "extended", "has_subnormals"):
            if not isinstance(getattr(self, flag), bool):
                raise ValueError(f"{flag}={getattr(self, flag)!r}: expected True or False")
        if not isinstance(e, int) or isinstance(e, bool) or not 1 <= e <= 15:
            raise ValueError(f"exponent_bits={e!r}: expected an integer from 1 to 15")
        room = 63 + (not self.signed) - e  # 64 bits in all
        if not isinstance(m, int) or isinstance(m, bool) or not 0 <= m <= room:
            raise ValueError(f"mantissa_bits={m!r}: expected an integer from 0 to {room} (64 bits in all)")
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
        if self.extended and self.encoding != "fnuz":
            raise ValueError(f"extended=True (P3109 infinities) needs encoding 'fnuz', not {self.encoding!r}")
        if not self.signed and not (self.encoding == "fnuz" or (self.encoding == "fn" and self.has_nan)):
            raise ValueError("signed=False needs encoding 'fnuz', or 'fn' with a NaN")
        if not self.has_subnormals and (self.encoding != "fn" or m != 0 or self.signed or not self.has_nan):
            raise ValueError(
                "has_subnormals=False needs an unsigned 'fn' format with a NaN and no fraction bits"
            )
        if self.max_code < 1 << m:
            raise ValueError(f"e{e}m{m}: too few codes for a normal number beside the special values")
        if not isinstance(self.name, str) or not isinstance(self.description, str):
            raise ValueError(f"name={self.name!r}, description={self.description!r}: expected strings")
        if not self.name:
            object.__setattr__(self, "name", _default_name(self))

    # ---- layout ---------------------------------------------------------------------------
    @property
    def bits(self) -> int:
        """Total width in bits: sign (when signed) + exponent + mantissa."""
        return int(self.signed) + self.exponent_bits + self.mantissa_bits

    @property
    def precision(self) -> int:
        """Significand bits including the implicit leading bit (p in IEEE 754)."""
        return self.mantissa_bits + 1

    @property
    def sign_bit(self) -> int:
        """Position of the sign bit; an unsigned format's is just above its code."""
        return self.bits - 1 if self.signed else self.bits

    @property
    def sign_mask(self) -> int:
        """The sign bit, in place (0 is no code's: an unsigned format's is above its code)."""
        return 1 << self.sign_bit

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
        return self.encoding == "ieee" or self.extended

    @property
    def has_negative_zero(self) -> bool:
        return self.encoding != "fnuz" and self.signed

    @property
    def has_zero(self) -> bool:
        """False for a scale format (E8M0), whose zero exponent field is a normal binade."""
        return self.has_subnormals

    @property
    def bias(self) -> int:
        """Exponent bias: 2^(e-1) - 1, one more for "fnuz" (and P3109) formats."""
        return (1 << (self.exponent_bits - 1)) - (0 if self.encoding == "fnuz" else 1)

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal number: 1 - bias (-bias without subnormals)."""
        return int(self.has_subnormals) - self.bias

    @property
    def emax(self) -> int:
        """Exponent of the largest finite number (the binade of :attr:`max_code`)."""
        return (self.max_code >> self.mantissa_bits) - self.bias

    @property
    def max_code(self) -> int:
        """Code of the largest finite positive value."""
        if self.encoding == "ieee":
            return self.inf_code - 1
        top = self.sign_mask - 1  # all ones below the sign
        if self.encoding == "fn" and self.has_nan:
            return top - 1  # all ones is the NaN
        if self.signed:  # fnuz (P3109 signed): the NaN is the code of -0
            return top - int(self.extended)
        return top - 1 - int(self.extended)  # P3109 unsigned: the NaN is all ones, inf below it

    @property
    def inf_code(self) -> int:
        """Code of +inf: IEEE formats' top exponent, P3109 extended formats' largest code."""
        if not self.has_inf:
            raise ValueError(f"{self.name} has no infinity")
        if self.extended:
            return self.max_code + 1
        return self.exponent_mask

    @property
    def nan_code(self) -> int | None:
        """The canonical (quiet, positive) NaN code, or None where there is no NaN."""
        if not self.has_nan:
            return None
        if self.encoding == "ieee":
            return self.exponent_mask | (1 << max(self.mantissa_bits - 1, 0))
        if self.encoding == "fn" or not self.signed:
            return self.sign_mask - 1  # all ones below the sign (an unsigned format's all ones)
        return self.sign_mask  # fnuz: the code of "negative zero"

    def is_nan_code(self, code: int) -> bool:
        """True when ``code`` encodes a NaN in this format."""
        mag = code & ~self.sign_mask & self.code_mask
        if self.encoding == "ieee":
            return (mag & self.exponent_mask) == self.exponent_mask and (mag & self.mantissa_mask) != 0
        if self.encoding == "fn":
            return self.has_nan and mag == self.sign_mask - 1
        return code == self.nan_code

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
        """2^(emin - mantissa_bits); without subnormals, the smallest normal."""
        return pow2(self.emin - self.mantissa_bits * self.has_subnormals)

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
        return self.emax - (self.emin - self.mantissa_bits * self.has_subnormals)

    def code_magnitude(self, code: int) -> Fraction:
        """Exact magnitude of a finite (non-NaN, non-inf) code, ignoring its sign bit."""
        mag = code & (self.sign_mask - 1)
        efield = mag >> self.mantissa_bits
        frac = mag & self.mantissa_mask
        if not self.has_subnormals:
            return pow2(efield - self.bias)
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
            f"{self.name}: {int(self.signed)}+{self.exponent_bits}+{self.mantissa_bits} bits, "
            f"max {self.max:.6g}, smallest normal {self.smallest_normal:.6g}, "
            f"smallest subnormal {self.smallest_subnormal:.6g}, eps {self.eps:.6g}"
        )

    def __str__(self) -> str:
        return self.name


def _default_name(f: FloatFormat) -> str:
    """``eXmY`` with its suffix (fn, fnuz, fnu), or the P3109 name of an unsigned or extended one."""
    e, m = f.exponent_bits, f.mantissa_bits
    if f.encoding == "fnuz" and (f.extended or not f.signed):
        return p3109_name(f.bits, m + 1, signed=f.signed, extended=f.extended)
    suffix = {"ieee": "", "fn": "fn", "fnuz": "fnuz"}[f.encoding]
    return f"e{e}m{m}{suffix}{'' if f.signed else 'u'}"


def p3109_name(k: int, p: int, *, signed: bool = True, extended: bool = True) -> str:
    """gfloat's name of the IEEE P3109 format with ``k`` bits and precision ``p``.

    >>> p3109_name(8, 3), p3109_name(8, 4, signed=False, extended=False)
    ('p3109_k8p3se', 'p3109_k8p4uf')
    """
    return f"p3109_k{k}p{p}{'s' if signed else 'u'}{'e' if extended else 'f'}"


def p3109_format(k: int, p: int, *, signed: bool = True, extended: bool = True) -> FloatFormat:
    """The IEEE P3109 binary format with ``k`` bits and precision ``p`` (Interim Report v3, as
    gfloat's ``format_info_p3109``): ``k - p`` exponent bits when signed, one more when unsigned;
    bias 2^(exponent bits - 1); no negative zero; one NaN, the code of -0 (signed) or the all-ones
    code (unsigned); extended formats have +-inf at their largest magnitude code.

    :data:`P3109_LIMITS` states the ``k`` and ``p`` taken.

    >>> f = p3109_format(8, 3)
    >>> f.name, f.bias, f.max, hex(f.inf_code), hex(f.nan_code or 0)
    ('p3109_k8p3se', 16, 49152.0, '0x7f', '0x80')
    >>> p3109_format(8, 8)
    Traceback (most recent call last):
    ...
    ValueError: p3109_k8p8se: expected K from 3 to 16 and P from 1 to K-1 (signed) or to K (unsigned)
    """
    name = p3109_name(k, p, signed=signed, extended=extended)
    lo, hi = P3109_LIMITS
    if not (lo <= k <= hi and 1 <= p <= k - int(signed)):
        raise ValueError(
            f"{name}: expected K from {lo} to {hi} and P from 1 to K-1 (signed) or to K (unsigned)"
        )
    e = k - p + int(not signed)
    kind = f"{'signed' if signed else 'unsigned'}, {'extended (+-inf)' if extended else 'finite'}"
    return FloatFormat(
        e, p - 1, "fnuz", signed=signed, extended=extended, name=name,
        description=f"IEEE P3109 binary{k}p{p}, {kind}",
    )  # fmt: skip


#: the widths ``K`` a P3109 name may have (the report's formats are defined from K = 3; the codes of
#: floatlab hold up to 16 bits for them)
P3109_LIMITS: tuple[int, int] = (3, 16)


def _to_float(q: Fraction) -> float:
    try:
        return float(q)
    except OverflowError:
        return math.inf


# ---- names built by rule: eXmY and P3109 ---------------------------------------------------------
# (three digits at most: a longer number names no format, and int() of thousands of digits fails)
_EXMY = re.compile(r"(?:float(\d{1,3})_)?e(\d{1,3})m(\d{1,3})(fn|fnuz)?")
_P3109 = re.compile(r"p3109_k(\d{1,3})p(\d{1,3})([su])([ef])")
_ANY_P3109 = re.compile(r"p3109(_.*)?")

#: how a custom format is named (the grammar that :func:`format_from_name` reads)
NAMING = (
    "eXmY (X exponent bits from 1 to 15, Y fraction bits, 1 sign bit, 64 bits in all): IEEE style "
    "with inf and NaN; eXmYfn: finite, NaN at all ones (OCP E4M3); eXmYfnuz: finite, one NaN at -0, "
    "bias one higher; floatN_eXmY...: the same with its width N checked; "
    "p3109_kKpP[s|u][e|f]: IEEE P3109, K bits (3 to 16), precision P (1 to K-1 signed, to K "
    "unsigned), signed or unsigned, extended (+-inf) or finite"
)


def format_from_name(key: str) -> FloatFormat | None:
    """The format that the name ``key`` builds by the naming rule (:data:`NAMING`), None when it is
    not such a name; ValueError, one line, when it is one that cannot be built. A built-in name
    (``e5m2``, ``e4m3``) is the registry's and never reaches here.

    >>> format_from_name("e6m9").bias, format_from_name("e5m10") == FP16, format_from_name("half")
    (31, True, None)
    >>> format_from_name("e12m60")
    Traceback (most recent call last):
    ...
    ValueError: format e12m60: mantissa_bits=60: expected an integer from 0 to 51 (64 bits in all)
    """
    return _from_name(key.strip().lower().replace("-", "_").replace(" ", "_"))


@functools.lru_cache(maxsize=256)
def _from_name(key: str) -> FloatFormat | None:
    m = _EXMY.fullmatch(key)
    if m is not None:
        width, e, mb, suffix = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4) or "ieee"
        try:
            fmt = FloatFormat(e, mb, suffix)  # type: ignore[arg-type]
        except ValueError as err:
            raise ValueError(f"format {key}: {err}") from None
        if width is not None and int(width) != fmt.bits:
            raise ValueError(f"format {key}: e{e}m{mb} has {fmt.bits} bits, not {width}")
        # a layout that is a registered format is that format (e5m10 is fp16, e8m7 bf16)
        return next((f for f in FORMATS.values() if f == fmt), fmt)
    p = _P3109.fullmatch(key)
    if p is not None:
        return p3109_format(
            int(p.group(1)), int(p.group(2)), signed=p.group(3) == "s", extended=p.group(4) == "e"
        )
    if _ANY_P3109.fullmatch(key):
        raise ValueError(f"format {shown(key)}: expected p3109_kKpP[s|u][e|f], as p3109_k8p3se")
    return None


# ---- the registry ---------------------------------------------------------------------------
#: every registered format by name (case, ``-`` and spaces are read as ``_``), with its aliases,
#: and the names built by rule (eXmY, P3109: :func:`format_from_name`): :func:`get_format` looks a
#: name up here, :func:`register_format` adds one
FORMATS: Registry[FloatFormat] = Registry(
    "format",
    alike="- ",
    sep="_",
    listing=lambda names: f"(known: {', '.join(names[:5])}, ...; or a custom eXmY, e.g. e6m9)",
    kind="a format name or a FloatFormat",
    rule=format_from_name,
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
    "float8_e3m4": "fp8_e3m4 e3m4 f8e3m4",
    "float8_e8m0fnu": "fp8_e8m0fnu e8m0fnu e8m0 f8e8m0fnu fp8_e8m0",
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
FP8_E3M4 = _builtin(
    FloatFormat(3, 4, name="float8_e3m4", description="fp8 E3M4 (IEEE-style inf and NaN; ml_dtypes)")
)
FP8_E8M0FNU = _builtin(
    FloatFormat(
        8, 0, "fn", signed=False, has_subnormals=False, name="float8_e8m0fnu",
        description="OCP MX scale E8M0: powers of two 2^-127..2^127, one NaN, no zero, no sign",
    )
)  # fmt: skip
FP6_E2M3FN = _builtin(
    FloatFormat(2, 3, "fn", has_nan=False, name="float6_e2m3fn", description="OCP MX fp6 E2M3: all finite")
)
FP6_E3M2FN = _builtin(
    FloatFormat(3, 2, "fn", has_nan=False, name="float6_e3m2fn", description="OCP MX fp6 E3M2: all finite")
)
FP4_E2M1FN = _builtin(
    FloatFormat(2, 1, "fn", has_nan=False, name="float4_e2m1fn", description="OCP MX fp4 E2M1: all finite")
)


#: the element of OCP MXINT8 (Microscaling v1.0): an 8-bit two's complement integer k with an
#: implicit scale 2^-6, the values k/64 for k from -128 to 127 (as gfloat's ``format_info_ocp_int8``).
#: As a FloatFormat it is the sign-magnitude grid k/64, ``abs(k) <= 127`` (one exponent bit, bias 1: the
#: values below 1 are its "subnormals"), which the rounding kernels round into; the block door
#: (:func:`floatlab.rounding.encode_blocks`) adds -2.0 (k = -128) and writes two's complement codes.
#: It is not registered: a block element, not a format of its own.
MXINT8_ELEMENT = FloatFormat(
    1, 6, "fnuz", name="int8", description="MXINT8 element: 8-bit two's complement k / 64, k in -128..127"
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
