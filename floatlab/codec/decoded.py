"""Codes into values: :func:`decode` takes a code (the bit pattern as an integer) of a format apart.

The :class:`Decoded` it returns holds the three fields, the class, the exact value as a
:class:`~fractions.Fraction`, the exact decimal expansion, the ulp and the neighbours; it prints
as a terminal report and shows as coloured bit boxes in a notebook (both drawn by
:mod:`floatlab.text.codec`), and as a LaTeX formula.

>>> d = decode(0x7BFF, "fp16")
>>> d.kind, d.decimal, hex(d.next_up)
('normal', '65504', '0x7c00')
>>> print(d.formula())
(-1)^0 x 2^(30 - 15) x (1 + 1023/1024)
"""

from __future__ import annotations

import math
import operator
import struct
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

from floatlab.exact import approx, exact_decimal, pow2
from floatlab.formats import FloatFormat, get_format
from floatlab.text import hex_code, render, render_html

__all__ = ["Decoded", "Kind", "decode"]

Kind = Literal["zero", "subnormal", "normal", "infinity", "nan"]

#: the longest exact decimal shown in full; a longer one is shortened (still in full in .decimal)
LONG_DECIMAL = 60
#: the longest decimal of a neighbour or an ulp shown in full; a longer one is shown approximately
SHORT_DECIMAL = 30


def _nan_bits64(sign: int, fraction: int, fmt: FloatFormat) -> int:
    """The float64 bit pattern a NaN code widens to: a quiet NaN (IEEE 754 conversions deliver
    quiet NaNs) with the code's sign and, for IEEE formats, the top bits of its payload."""
    quiet = (sign << 63) | (0x7FF << 52) | (1 << 51)
    if fmt.encoding != "ieee":
        return quiet
    m = fmt.mantissa_bits
    return quiet | (fraction << (52 - m) if m <= 52 else fraction >> (m - 52))


def _float_from_bits(bits: int) -> float:
    value: float = struct.unpack("<d", struct.pack("<Q", bits))[0]
    return value


# ---- Decoded -----------------------------------------------------------------------------------
@dataclass(frozen=True, repr=False)
class Decoded:
    """One code of a format, taken apart: fields, class, exact value, ulp and neighbours.

    Build it with :func:`decode`. ``exact`` is None for infinities and NaNs; ``quiet`` is
    None except for NaNs (the single NaN of "fn"/"fnuz" formats counts as quiet).

    >>> d = decode(0x0001, "fp16")
    >>> d.kind, d.exact, d.description
    ('subnormal', Fraction(1, 16777216), 'subnormal, the smallest positive fp16')
    >>> d.exponent_bits, d.fraction_bits, d.unbiased_exponent
    ('00000', '0000000001', -14)
    """

    fmt: FloatFormat
    code: int
    sign: int
    exponent: int
    fraction: int
    kind: Kind
    quiet: bool | None
    exact: Fraction | None

    # ---- the fields as bit strings --------------------------------------------------------------
    @property
    def sign_bits(self) -> str:
        """The sign bit as a string, ``"0"`` or ``"1"`` (empty for an unsigned format)."""
        return str(self.sign) if self.fmt.signed else ""

    @property
    def exponent_bits(self) -> str:
        """The exponent field as a string of ``exponent_bits`` binary digits."""
        return format(self.exponent, f"0{self.fmt.exponent_bits}b")

    @property
    def fraction_bits(self) -> str:
        """The fraction (trailing significand) field as binary digits; empty when it has no bits."""
        m = self.fmt.mantissa_bits
        return format(self.fraction, f"0{m}b") if m else ""

    @property
    def bits(self) -> str:
        """All the bits of the code, sign first."""
        return self.sign_bits + self.exponent_bits + self.fraction_bits

    @property
    def hex(self) -> str:
        """The code in hexadecimal, zero-padded to the format's width (``"0x7BFF"``)."""
        return hex_code(self.code, self.fmt)

    # ---- the value ------------------------------------------------------------------------------
    @property
    def value(self) -> float:
        """The value as a float64: exact for every format float64 contains (fp64 itself included).

        Values beyond float64's range become +-inf or +-0. A NaN becomes a quiet float64 NaN
        with the code's sign and, for IEEE formats, its payload, as in :func:`decode_array`.

        >>> decode(0xFC00, "fp16").value, decode(0x8000, "fp16").value
        (-inf, -0.0)
        """
        if self.kind == "nan":
            return _float_from_bits(_nan_bits64(self.sign, self.fraction, self.fmt))
        if self.exact is None:
            return -math.inf if self.sign else math.inf
        if self.exact == 0:
            return -0.0 if self.sign else 0.0
        try:
            return float(self.exact)  # int / int true division: correctly rounded
        except OverflowError:
            return -math.inf if self.sign else math.inf

    @property
    def decimal(self) -> str:
        """The exact decimal expansion; every binary float has a finite one.

        >>> decode(0x068E, "fp16").decimal, decode(0x8000, "fp16").decimal
        ('0.00010001659393310546875', '-0')
        >>> len(decode(1, "fp64").decimal)   # 2^-1074: 1074 decimals, 751 significant digits
        1076
        """
        if self.kind == "nan":
            return "nan"
        if self.exact is None:
            return "-inf" if self.sign else "inf"
        return exact_decimal(self.exact, bool(self.sign))

    @property
    def unbiased_exponent(self) -> int | None:
        """The exponent e - bias; emin for subnormals and zeros; None for infinities and NaNs."""
        if self.kind == "normal":
            return self.exponent - self.fmt.bias
        if self.kind in ("subnormal", "zero"):
            return self.fmt.emin
        return None

    @property
    def ulp(self) -> Fraction | None:
        """Unit in the last place, 2^(max(e, emin) - m); the smallest subnormal for zeros.

        >>> decode(0x7BFF, "fp16").ulp, decode(0x3C00, "fp16").ulp
        (Fraction(32, 1), Fraction(1, 1024))
        """
        e = self.unbiased_exponent
        return None if e is None else pow2(e - self.fmt.mantissa_bits)

    @property
    def next_up(self) -> int | None:
        """Code of IEEE 754 nextUp (the next larger value), or None where there is none.

        Both zeros step up to the smallest positive subnormal; -inf to the most negative
        finite value; +inf, NaNs and the maximum of a format without infinity have none.

        >>> hex(decode(0x8001, "fp16").next_up), decode(0x7C00, "fp16").next_up
        ('0x8000', None)
        """
        return _next_up_code(self.fmt, self.code)

    @property
    def next_down(self) -> int | None:
        """Code of IEEE 754 nextDown (the next smaller value): nextDown(x) = -nextUp(-x).

        >>> hex(decode(0x0000, "fp16").next_down)
        '0x8001'
        """
        if self.kind == "nan":
            return None
        if not self.fmt.signed:  # no negative values: one code down, none below the smallest
            mag, f = self.code, self.fmt
            if f.has_inf and mag == f.inf_code:
                return f.max_code
            return mag - 1 if mag > 0 else None
        up = _next_up_code(self.fmt, _negate_code(self.fmt, self.code))
        return None if up is None else _negate_code(self.fmt, up)

    # ---- words ----------------------------------------------------------------------------------
    @property
    def description(self) -> str:
        """The class in words, with the landmark it is, if any.

        >>> decode(0x7BFF, "fp16").description
        'normal, the largest finite fp16'
        >>> decode(0x7E00, "fp16").description, decode(0x8000, "fp16").description
        ('quiet NaN', 'zero (negative)')
        """
        fmt, name, sign = self.fmt, self.fmt.name, self.sign
        mag = self.code & (fmt.sign_mask - 1)
        if self.kind == "nan":
            if not fmt.signed:
                return f"NaN (all bits set: the one NaN of {name}, which has no sign)"
            if fmt.encoding == "fnuz":
                infs = "" if fmt.has_inf else " and no infinities"
                return f"NaN (the pattern of -0: {name} has no negative zero{infs})"
            if fmt.encoding == "fn":
                return f"NaN (all exponent and fraction bits set; {name} has no infinities)"
            text = "quiet NaN" if self.quiet else "signalling NaN"
            payload = self.fraction & ((1 << (fmt.mantissa_bits - 1)) - 1)
            if sign:
                text += ", sign bit set"
            return text + (f", payload {payload:#x}" if payload else "")
        if self.kind == "infinity":
            return "infinity (negative)" if sign else "infinity (positive)"
        if self.kind == "zero":
            if not fmt.has_negative_zero:
                return f"zero (the only zero: {name} has no negative zero)"
            return "zero (negative)" if sign else "zero (positive)"
        notes: list[str] = []
        if mag == fmt.max_code:
            notes.append(f"the most negative finite {name}" if sign else f"the largest finite {name}")
        small = "smallest-magnitude negative" if sign else "smallest positive"
        if mag == 1:
            notes.append(f"the {small} {name}")
        if self.kind == "subnormal" and mag == fmt.mantissa_mask and mag != 1:
            notes.append(f"the {'most negative' if sign else 'largest'} subnormal {name}")
        if self.kind == "normal" and mag == 1 << fmt.mantissa_bits and mag != 1:
            notes.append(f"the {small} normal {name}")
        if self.exact is not None and abs(self.exact) == 1:
            notes.append(f"exactly {'-1' if sign else '1'}")
        return ", ".join([self.kind, *notes])

    def formula(self) -> str:
        """The value as the IEEE 754 formula, with the numbers filled in.

        >>> decode(0x0003, "fp16").formula()
        '(-1)^0 x 2^(1 - 15) x (0 + 3/1024)'
        """
        if self.kind == "nan":
            return "NaN"
        if self.kind == "infinity":
            return "-inf" if self.sign else "+inf"
        fmt = self.fmt
        lead, efield = (1, self.exponent) if self.kind == "normal" else (0, 1)
        # subnormals and zeros share the smallest normal exponent, 1 - bias, without the implicit 1
        return (
            f"(-1)^{self.sign} x 2^({efield} - {fmt.bias}) x "
            f"({lead} + {self.fraction}/{1 << fmt.mantissa_bits})"
        )

    def sympy(self) -> Any:
        """The formula as an unevaluated sympy expression (``.doit()`` gives the exact value).

        >>> decode(0x3E00, "fp16").sympy().doit()
        3/2
        """
        import sympy

        if self.kind == "nan":
            return sympy.nan
        if self.kind == "infinity":
            return -sympy.oo if self.sign else sympy.oo
        fmt, num = self.fmt, sympy.Integer
        lead, efield = (1, self.exponent) if self.kind == "normal" else (0, 1)
        sign = sympy.Pow(num(-1), num(self.sign), evaluate=False)
        scale = sympy.Pow(num(2), sympy.Add(num(efield), num(-fmt.bias), evaluate=False), evaluate=False)
        frac = sympy.Mul(
            num(self.fraction),
            sympy.Pow(num(1 << fmt.mantissa_bits), num(-1), evaluate=False),
            evaluate=False,
        )
        significand = sympy.Add(num(lead), frac, evaluate=False)
        return sympy.Mul(sign, scale, significand, evaluate=False)

    # ---- displays ----------------------------------------------------------------------------
    def _repr_html_(self) -> str:
        return render_html(self)

    def _repr_latex_(self) -> str:
        import sympy

        lhs = sympy.latex(self.sympy(), order="none", mul_symbol="times")
        if self.exact is None:
            return f"${lhs}$"
        dec = self.decimal
        if len(dec) <= LONG_DECIMAL:
            return f"${lhs} = {dec}$"
        mantissa, _, exp10 = approx(self.exact).partition("e")
        near = f"{mantissa} \\times 10^{{{int(exp10)}}}" if exp10 else mantissa
        return f"${lhs} \\approx {near}$"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary of everything the printed view shows.

        >>> decode(0x3C00, "fp16").to_dict()["next_up"]
        {'code': '0x3C01', 'decimal': '1.0009765625'}
        """

        def neighbour(code: int | None) -> dict[str, str] | None:
            if code is None:
                return None
            return {"code": hex_code(code, self.fmt), "decimal": decode(code, self.fmt).decimal}

        ulp = self.ulp
        return {
            "format": self.fmt.name,
            "code": self.hex,
            "bits": self.bits,
            "sign": self.sign,
            "exponent": self.exponent,
            "fraction": self.fraction,
            "sign_bits": self.sign_bits,
            "exponent_bits": self.exponent_bits,
            "fraction_bits": self.fraction_bits,
            "kind": self.kind,
            "quiet": self.quiet,
            "description": self.description,
            "formula": self.formula(),
            "exact": None if self.exact is None else str(self.exact),
            "decimal": self.decimal,
            "value": repr(self.value),
            "unbiased_exponent": self.unbiased_exponent,
            "ulp": None if ulp is None else str(ulp),
            "next_up": neighbour(self.next_up),
            "next_down": neighbour(self.next_down),
        }

    def __str__(self) -> str:
        return render(self)

    def __repr__(self) -> str:
        dec = self.decimal
        if len(dec) > SHORT_DECIMAL and self.exact:
            dec = f"~{approx(self.exact)}"
        return f"Decoded({self.fmt.name} {self.hex} = {dec}, {self.kind})"


def _negate_code(fmt: FloatFormat, code: int) -> int:
    """The code of -x (for a non-NaN code of a signed format); "fnuz" zero is its own negative."""
    if fmt.encoding == "fnuz" and code == 0:
        return 0
    return code ^ fmt.sign_mask


def _next_up_code(fmt: FloatFormat, code: int) -> int | None:
    if fmt.is_nan_code(code):
        return None
    negative = bool(code & fmt.sign_mask)
    mag = code & (fmt.sign_mask - 1)
    if fmt.has_inf and mag == fmt.inf_code:
        return None if not negative else fmt.sign_mask | fmt.max_code
    if mag == 0 and fmt.has_zero:  # both zeros step to the smallest positive subnormal
        return 1
    if not negative:
        if mag < fmt.max_code:
            return mag + 1
        return fmt.inf_code if fmt.has_inf else None
    # negative: the magnitude shrinks towards (negative) zero
    if mag > 1:
        return fmt.sign_mask | (mag - 1)
    return fmt.sign_mask if fmt.has_negative_zero else 0


def decode(code: int, fmt: FloatFormat | str) -> Decoded:
    """Take the code (bit pattern) of ``fmt`` apart: see :class:`Decoded`.

    >>> decode(0x7BFF, "fp16").exact
    Fraction(65504, 1)
    >>> decode(0x80, "float8_e4m3fnuz").kind
    'nan'
    >>> decode(0x1_0000, "fp16")
    Traceback (most recent call last):
    ...
    ValueError: code 0x10000 does not fit fp16: expected an integer from 0x0 to 0xffff (16 bits)
    """
    f = get_format(fmt)
    if isinstance(code, bool):
        raise ValueError(f"code {code!r}: expected an integer bit pattern, not a bool")
    try:
        c = operator.index(code)
    except TypeError:
        raise ValueError(f"code {code!r}: expected an integer bit pattern") from None
    if not 0 <= c <= f.code_mask:
        shown = hex(c) if c >= 0 else str(c)
        raise ValueError(
            f"code {shown} does not fit {f.name}: "
            f"expected an integer from 0x0 to {f.code_mask:#x} ({f.bits} bits)"
        )
    m = f.mantissa_bits
    sign = (c >> f.sign_bit) & 1
    efield = (c >> m) & ((1 << f.exponent_bits) - 1)
    frac = c & f.mantissa_mask
    kind: Kind
    quiet: bool | None = None
    exact: Fraction | None = None
    if f.is_nan_code(c):
        kind = "nan"
        # IEEE: the top fraction bit is the quiet bit; the lone NaN of fn/fnuz formats is quiet
        quiet = bool((frac >> (m - 1)) & 1) if f.encoding == "ieee" else True
    elif f.has_inf and (c & (f.sign_mask - 1)) == f.inf_code:
        kind = "infinity"
    else:
        kind = "normal" if efield or not f.has_zero else ("subnormal" if frac else "zero")
        mag = f.code_magnitude(c)
        exact = -mag if sign else mag
    return Decoded(f, c, sign, efield, frac, kind, quiet, exact)
