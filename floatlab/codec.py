"""The exact codec: bit patterns to values and back.

:func:`decode` takes a code (the bit pattern as an integer) and returns a :class:`Decoded`
holding its three fields, its class, its exact value as a :class:`~fractions.Fraction`, its
exact decimal expansion, its ulp and its neighbours; it shows itself as a terminal report,
as coloured bit boxes in a notebook and as a LaTeX formula. :func:`encode` rounds a value
(a float, an int, a Fraction or a string parsed exactly) into a format with the rounding
reference of :mod:`floatlab.rounding` and returns the code. :func:`decode_array` is the
vectorised twin of :func:`decode` for NumPy arrays of codes.

>>> d = decode(0x7BFF, "fp16")
>>> d.kind, d.decimal, hex(d.next_up)
('normal', '65504', '0x7c00')
>>> print(d.formula())
(-1)^0 x 2^(30 - 15) x (1 + 1023/1024)
>>> code = encode("0.1", "fp16")
>>> code == 0x2E66, code.decoded.decimal
(True, '0.0999755859375')
>>> decode_array([0x3C00, 0x7BFF, 0xFC00], "fp16").tolist()
[1.0, 65504.0, -inf]
"""

from __future__ import annotations

import decimal as _decimal
import html
import importlib
import math
import operator
import struct
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from floatlab.exact import parse_value
from floatlab.formats import FP64, FloatFormat, get_format
from floatlab.rounding import (
    DEFAULT_RANDOM_BITS,
    Flags,
    Rounding,
    check_rounding,
    random_bits_at,
    round_rational,
    round_scalar,
)

__all__ = [
    "Decoded",
    "Encoded",
    "Kind",
    "decode",
    "decode_array",
    "encode",
    "parse_value",
]

Kind = Literal["zero", "subnormal", "normal", "infinity", "nan"]

# float.exposed colours: sign, exponent, fraction (background, border) for HTML; ANSI for terminals
_HTML_COLOURS = {
    "sign": ("#cfe0ff", "#2f62c9"),
    "exponent": ("#cdf2d2", "#23873a"),
    "fraction": ("#ffd8cc", "#c8471f"),
}
_ANSI_COLOURS = {"sign": "\x1b[1;34m", "exponent": "\x1b[1;32m", "fraction": "\x1b[1;31m"}
_ANSI_RESET = "\x1b[0m"

_LONG_DECIMAL = 60  # exact decimals longer than this are shortened in reports (still in full in .decimal)
_SHORT_NEIGHBOUR = 30  # neighbours with longer decimals are shown as their float64 repr


# ---- small exact helpers -----------------------------------------------------------------------
def _pow2(k: int) -> Fraction:
    return Fraction(1 << k) if k >= 0 else Fraction(1, 1 << -k)


def _int_str(n: int) -> str:
    """``str(n)`` for an int of any size, in time close to linear: the binary halves are converted
    separately and joined with the decimal module's fast multiplication (``str(n)`` is limited to
    4,300 digits and quadratic beyond; so is ``Decimal(n)``).

    >>> _int_str(-(10**5000 + 7))[:3], _int_str(-(10**5000 + 7))[-4:], _int_str(10**6000 - 1) == "9" * 6000
    ('-10', '0007', True)
    """
    if n.bit_length() < 14_000:
        return str(n)
    ctx = _decimal.Context(prec=_decimal.MAX_PREC, Emax=_decimal.MAX_EMAX, Emin=_decimal.MIN_EMIN)
    powers: dict[int, _decimal.Decimal] = {}

    def convert(m: int, bits: int) -> _decimal.Decimal:
        if bits <= 4096:
            return _decimal.Decimal(m)
        half = bits >> 1
        hi, lo = m >> half, m & ((1 << half) - 1)
        if half not in powers:
            powers[half] = ctx.power(_decimal.Decimal(2), half)
        return ctx.add(ctx.multiply(convert(hi, bits - half), powers[half]), convert(lo, half))

    d = convert(abs(n), n.bit_length())
    return ("-" if n < 0 else "") + format(d, "f")


def _dyadic_decimal(q: Fraction, negative: bool) -> str:
    """Exact decimal expansion of ``q`` whose denominator is a power of two."""
    n, d = abs(q.numerator), q.denominator
    k = d.bit_length() - 1
    if d != 1 << k:
        raise ValueError(f"{q}: expected a fraction whose denominator is a power of two")
    if k == 0:
        body = _int_str(n)
    else:
        # n / 2^k = n * 5^k / 10^k: a terminating expansion with exactly k decimals, and as
        # n is odd (the fraction is reduced) the last of them is a 5, never a trailing zero
        digits = _int_str(n * 5**k).rjust(k + 1, "0")
        body = f"{digits[:-k]}.{digits[-k:]}"
    return ("-" if negative else "") + body


def _scientific(dec: str, keep: int = 40) -> tuple[str, int]:
    """Shorten an exact decimal string to ``keep`` significant digits; also return the digit count."""
    negative = dec.startswith("-")
    whole, _, part = dec.lstrip("-").partition(".")
    digits = whole + part
    first = len(digits) - len(digits.lstrip("0"))
    if first == len(digits):
        return dec, 1
    exp10 = len(whole) - first - 1
    significant = digits[first:].rstrip("0")
    text = significant[0] + ("." + significant[1:keep] if len(significant) > 1 else "")
    if len(significant) > keep:
        text += "..."
    return f"{'-' if negative else ''}{text}e{exp10:+d}", len(significant)


def _approx(q: Fraction) -> str:
    """A short approximation of a non-zero dyadic ``q``: its float64 repr, or, outside float64's
    range, 17 significant digits in scientific notation."""
    # int / int is correctly rounded (0.0 below float64's range); above it, it would raise
    small = q.numerator.bit_length() - q.denominator.bit_length() < 1000
    x = q.numerator / q.denominator if small else math.inf
    if x != 0 and math.isfinite(x):
        return repr(x)
    short, _ = _scientific(_dyadic_decimal(q, negative=q < 0), keep=17)
    return short.replace("...", "")


def _hex_code(code: int, fmt: FloatFormat) -> str:
    return f"0x{code:0{(fmt.bits + 3) // 4}X}"


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
        """The sign bit as a string, ``"0"`` or ``"1"``."""
        return str(self.sign)

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
        return _hex_code(self.code, self.fmt)

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
        return _dyadic_decimal(self.exact, negative=bool(self.sign))

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
        return None if e is None else _pow2(e - self.fmt.mantissa_bits)

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
            if fmt.encoding == "fnuz":
                return f"NaN (the pattern of -0: {name} has no negative zero and no infinities)"
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

    # ---- displays -------------------------------------------------------------------------------
    def _field_meanings(self) -> tuple[str, str, str]:
        fmt = self.fmt
        sign = "-" if self.sign else "+"
        if self.kind == "nan":
            if fmt.encoding == "fnuz":
                return "(NaN)", str(self.exponent), "0: NaN, not -0"
            if fmt.encoding == "fn":
                return sign, str(self.exponent), "all ones: NaN"
            return sign, f"{self.exponent} (all ones)", "nonzero: NaN"
        if self.kind == "infinity":
            return sign, f"{self.exponent} (all ones)", "0: infinity"
        lead, efield = (1, self.exponent) if self.kind == "normal" else (0, 1)
        return sign, f"{efield} - {fmt.bias}", f"{lead} + {self.fraction}/{1 << fmt.mantissa_bits}"

    def _header(self) -> str:
        fmt = self.fmt
        what = fmt.description or f"{fmt.encoding} encoding"
        sep = "; " if ":" in what else ": "
        e, m = fmt.exponent_bits, fmt.mantissa_bits
        return (
            f"{self.hex} as {fmt.name} ({what}{sep}1 sign, {e} exponent, "
            f"{m} fraction bit{'' if m == 1 else 's'})"
        )

    def _value_text(self) -> str:
        if self.kind == "nan":
            return "NaN: not a number, it has no value"
        if self.kind == "infinity":
            return self.formula()
        dec = self.decimal
        if len(dec) <= _LONG_DECIMAL:
            return f"{self.formula()} = {dec} (exact)"
        short, ndigits = _scientific(dec)
        return (
            f"{self.formula()}\n          = {short}\n          "
            f"(exact: {ndigits} significant digits, all in .decimal; float64 {self.value!r})"
        )

    def _ulp_text(self) -> str:
        ulp = self.ulp
        if ulp is None:
            return "none (not a finite number)"
        k = ulp.numerator.bit_length() - ulp.denominator.bit_length()
        dec = _dyadic_decimal(ulp, negative=False)
        return f"{dec} = 2^{k}" if len(dec) <= _SHORT_NEIGHBOUR else f"2^{k} (about {_approx(ulp)})"

    def _neighbour_text(self, code: int | None) -> str:
        if code is None:
            return "none"
        d = decode(code, self.fmt)
        dec = d.decimal
        if dec in ("inf", "-inf"):
            dec = "+inf" if dec == "inf" else dec
        elif len(dec) > _SHORT_NEIGHBOUR:
            dec = f"~{_approx(d.exact)}" if d.exact else dec
        return f"{dec} ({d.hex})"

    def report(self, color: bool = False) -> str:
        """The plain multi-line terminal view; ``color=True`` colours the three fields (ANSI).

        >>> print(decode(0x7BFF, "fp16").report())
        0x7BFF as fp16 (IEEE 754 binary16 (half): 1 sign, 5 exponent, 10 fraction bits)
        <BLANKLINE>
          sign  exponent  fraction
          0     11110     1111111111
          +     30 - 15   1 + 1023/1024
        <BLANKLINE>
          value   (-1)^0 x 2^(30 - 15) x (1 + 1023/1024) = 65504 (exact)
          class   normal, the largest finite fp16
          ulp     32 = 2^5
          next    up +inf (0x7C00)   down 65472 (0x7BFE)
        """
        names = ("sign", "exponent", "fraction")
        bits = (self.sign_bits, self.exponent_bits, self.fraction_bits)
        meanings = self._field_meanings()
        widths = [max(len(n), len(b), len(t)) + 2 for n, b, t in zip(names, bits, meanings, strict=True)]

        def row(cells: tuple[str, ...], paint: bool = False) -> str:
            out = []
            for name, cell, width in zip(names, cells, widths, strict=True):
                pad = " " * (width - len(cell))
                out.append(f"{_ANSI_COLOURS[name]}{cell}{_ANSI_RESET}{pad}" if paint and cell else cell + pad)
            return ("  " + "".join(out)).rstrip()

        lines = [
            self._header(),
            "",
            row(names),
            row(bits, paint=color),
            row(meanings),
            "",
            f"  value   {self._value_text()}",
            f"  class   {self.description}",
            f"  ulp     {self._ulp_text()}",
            f"  next    up {self._neighbour_text(self.next_up)}"
            f"   down {self._neighbour_text(self.next_down)}",
        ]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        esc = html.escape
        groups = []
        for name, bits, meaning in zip(
            ("sign", "exponent", "fraction"),
            (self.sign_bits, self.exponent_bits, self.fraction_bits),
            self._field_meanings(),
            strict=True,
        ):
            if not bits:
                continue
            background, border = _HTML_COLOURS[name]
            position = {
                "sign": self.fmt.bits - 1,
                "exponent": self.fmt.bits - 2,
                "fraction": self.fmt.mantissa_bits - 1,
            }[name]
            boxes = "".join(
                f'<span style="display:inline-block;min-width:1.05em;margin:0 1px;padding:1px 2px;'
                f"text-align:center;font-family:monospace;color:#111;background:{background};"
                f'border:1px solid {border};border-radius:2px" title="bit {position - i}">{b}</span>'
                for i, b in enumerate(bits)
            )
            groups.append(
                '<div style="display:inline-block;vertical-align:top;margin:0 0.7em 0.3em 0;'
                'text-align:center">'
                f"<div>{boxes}</div>"
                f'<div style="font-size:0.85em;color:{border}"><b>{name}</b><br>{esc(meaning)}</div></div>'
            )
        value = esc(self._value_text()).replace("\n", "<br>")
        if self.exact is not None and len(self.decimal) > _LONG_DECIMAL:
            value += (
                f'<details><summary>all digits</summary><code style="word-break:break-all">'
                f"{esc(self.decimal)}</code></details>"
            )
        cell = 'style="text-align:left;padding:1px 0.8em 1px 0;vertical-align:top"'
        rows = [
            ("value", value),
            ("class", esc(self.description)),
            ("ulp", esc(self._ulp_text())),
            (
                "next",
                f"up {esc(self._neighbour_text(self.next_up))} &nbsp; "
                f"down {esc(self._neighbour_text(self.next_down))}",
            ),
        ]
        table = "".join(f"<tr><th {cell}>{k}</th><td {cell}>{v}</td></tr>" for k, v in rows)
        return (
            '<div style="font-family:sans-serif;line-height:1.4">'
            f'<div style="margin-bottom:0.4em"><b>{esc(self._header())}</b></div>'
            f"<div>{''.join(groups)}</div>"
            f'<table style="border-collapse:collapse;margin-top:0.3em">{table}</table></div>'
        )

    def _repr_latex_(self) -> str:
        import sympy

        lhs = sympy.latex(self.sympy(), order="none", mul_symbol="times")
        if self.exact is None:
            return f"${lhs}$"
        dec = self.decimal
        if len(dec) <= _LONG_DECIMAL:
            return f"${lhs} = {dec}$"
        mantissa, _, exp10 = _approx(self.exact).partition("e")
        approx = f"{mantissa} \\times 10^{{{int(exp10)}}}" if exp10 else mantissa
        return f"${lhs} \\approx {approx}$"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary of everything shown in the report.

        >>> decode(0x3C00, "fp16").to_dict()["next_up"]
        {'code': '0x3C01', 'decimal': '1.0009765625'}
        """

        def neighbour(code: int | None) -> dict[str, str] | None:
            if code is None:
                return None
            return {"code": _hex_code(code, self.fmt), "decimal": decode(code, self.fmt).decimal}

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
        return self.report()

    def __repr__(self) -> str:
        dec = self.decimal
        if len(dec) > _SHORT_NEIGHBOUR and self.exact:
            dec = f"~{_approx(self.exact)}"
        return f"Decoded({self.fmt.name} {self.hex} = {dec}, {self.kind})"


def _negate_code(fmt: FloatFormat, code: int) -> int:
    """The code of -x (for a non-NaN code); "fnuz" zero is its own negative."""
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
    if mag == 0:  # both zeros step to the smallest positive subnormal
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
    sign = c >> (f.bits - 1)
    efield = (c >> m) & ((1 << f.exponent_bits) - 1)
    frac = c & f.mantissa_mask
    kind: Kind
    quiet: bool | None = None
    exact: Fraction | None = None
    if f.is_nan_code(c):
        kind = "nan"
        # IEEE: the top fraction bit is the quiet bit; the lone NaN of fn/fnuz formats is quiet
        quiet = bool((frac >> (m - 1)) & 1) if f.encoding == "ieee" else True
    elif f.has_inf and efield == (1 << f.exponent_bits) - 1:
        kind = "infinity"
    else:
        kind = "normal" if efield else ("subnormal" if frac else "zero")
        mag = f.code_magnitude(c)
        exact = -mag if sign else mag
    return Decoded(f, c, sign, efield, frac, kind, quiet, exact)


# ---- encode ------------------------------------------------------------------------------------
class Encoded(int):
    """The code :func:`encode` returns: an ``int`` (compare it, format it, index with it) that
    also remembers how it came about.

    >>> e = encode("0.1", "fp16")
    >>> e, f"{e:#06x}", e.error, e.flags
    (11878, '0x2e66', Fraction(-1, 40960), <Flags.INEXACT: 1>)
    """

    fmt: FloatFormat
    rounding: Rounding
    input_exact: Fraction | None
    flags: Flags

    def __new__(
        cls, code: int, fmt: FloatFormat, rounding: Rounding, input_exact: Fraction | None, flags: Flags
    ) -> Encoded:
        self = super().__new__(cls, code)
        object.__setattr__(self, "fmt", fmt)
        object.__setattr__(self, "rounding", rounding)
        object.__setattr__(self, "input_exact", input_exact)
        object.__setattr__(self, "flags", flags)
        return self

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Encoded is immutable: cannot set {name!r}")

    def __getnewargs__(self) -> tuple[int, FloatFormat, Rounding, Fraction | None, Flags]:  # type: ignore[override]
        return int(self), self.fmt, self.rounding, self.input_exact, self.flags

    @cached_property
    def decoded(self) -> Decoded:
        """The stored code taken apart (:func:`decode`)."""
        return decode(int(self), self.fmt)

    @property
    def error(self) -> Fraction | None:
        """Stored value minus input, exactly; None when either is not finite."""
        stored = self.decoded.exact
        if stored is None or self.input_exact is None:
            return None
        return stored - self.input_exact

    @property
    def relative_error(self) -> Fraction | None:
        """``error`` divided by the input; None when it is not finite or is zero."""
        err = self.error
        if err is None or self.input_exact is None or self.input_exact == 0:
            return None
        return err / abs(self.input_exact)


def _random_word(rng: np.random.Generator | int | None, random_bits: int) -> int:
    """The random bits of one stochastic rounding, drawn as :func:`encode_array` draws them for
    element 0 (a two-word key from ``rng``, then the counter-based bits), so that a scalar and a
    one-element array rounded with the same seed agree."""
    if rng is None:
        raise ValueError("rounding='stochastic' needs rng: a numpy.random.Generator or an integer seed")
    if (
        isinstance(rng, bool)
        or not isinstance(rng, (np.random.Generator, int, np.integer))
        or (not isinstance(rng, np.random.Generator) and rng < 0)
    ):
        raise ValueError(f"rng={rng!r}: expected a numpy.random.Generator or a non-negative integer seed")
    gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(int(rng))
    key = gen.integers(0, 2**32, size=2, dtype=np.uint64)
    return random_bits_at((int(key[0]), int(key[1])), 0, random_bits)


def encode(
    value: float | int | Fraction | str,
    fmt: FloatFormat | str,
    rounding: str = "rne",
    *,
    saturate: bool = False,
    subnormals: bool = True,
    rng: np.random.Generator | int | None = None,
) -> Encoded:
    """Round ``value`` into ``fmt`` and return its code (an :class:`Encoded`, which is an int).

    Strings are parsed exactly (:func:`parse_value`), so "0.1" is one tenth in every format,
    fp64 included. Floats keep their signed zero, infinity and NaN; with ``subnormals=False``
    a float input that is subnormal in its own type counts as zero and subnormal results
    flush to zero. ``saturate=True`` clamps overflow to the largest finite value.
    ``"stochastic"`` rounding draws its random bits from ``rng`` (a Generator or a seed).

    >>> hex(encode("0.1", "fp16")), hex(encode(70000, "fp16")), hex(encode(70000, "fp16", saturate=True))
    ('0x2e66', '0x7c00', '0x7bff')
    >>> encode("0.1", "fp64") == encode(0.1, "fp64")
    True
    >>> encode(1 + 2**-11, "fp16", "rup").decoded.decimal
    '1.0009765625'
    """
    f = get_format(fmt)
    mode = check_rounding(rounding)
    rand = _random_word(rng, DEFAULT_RANDOM_BITS) if mode == "stochastic" else 0
    x: object = parse_value(value) if isinstance(value, str) else value
    common: dict[str, Any] = {"saturate": saturate, "subnormals": subnormals, "rand": rand}
    if isinstance(x, (bool, np.bool_)):
        raise ValueError(f"value {value!r}: expected a number, not a bool")
    if isinstance(x, (int, np.integer, Fraction)):
        exact = Fraction(int(x)) if not isinstance(x, Fraction) else x
        code, flags = round_rational(exact, f, mode, **common)
        return Encoded(code, f, mode, exact, flags)
    if isinstance(x, np.longdouble) and np.finfo(np.longdouble).nmant > 52 and np.isfinite(x) and x != 0:
        # wider than float64: its exact ratio, not float(x), which would round first
        exact = Fraction(*x.as_integer_ratio())
        code, flags = round_rational(exact, f, mode, **common)
        return Encoded(code, f, mode, exact, flags)
    if isinstance(x, float) or (isinstance(x, np.generic) and x.dtype.kind in "fV"):
        try:
            xf = float(x)  # exact: every float16/32/64 and ml_dtypes value is a float64 value
        except (TypeError, ValueError):
            raise ValueError(f"value {value!r}: expected a real number") from None
        input_format = FP64
        if isinstance(x, np.generic):
            try:  # denormals-are-zero looks at the input's own type
                input_format = get_format(x.dtype.name)
            except ValueError:
                input_format = FP64
        code, flags = round_scalar(xf, f, mode, input_format=input_format, **common)
        exact_in = Fraction(xf) if math.isfinite(xf) else None
        return Encoded(code, f, mode, exact_in, flags)
    raise ValueError(f"value {value!r}: expected a float, an int, a Fraction or a numeric string")


# ---- decode_array ------------------------------------------------------------------------------
_TABLES: dict[FloatFormat, npt.NDArray[np.float64]] = {}
_TABLE_MAX_BITS = 16
_KERNEL_MIN_SIZE = 1 << 16
_NATIVE: dict[tuple[int, int], tuple[type[np.unsignedinteger[Any]], type[np.floating[Any]]]] = {
    (8, 23): (np.uint32, np.float32),
    (11, 52): (np.uint64, np.float64),
}


def _decode_vectorised(codes: npt.NDArray[np.integer[Any]], f: FloatFormat) -> npt.NDArray[np.float64]:
    """Integer/bit arithmetic on uint64: the vectorised twin of :func:`decode` (float64-contained formats)."""
    c = codes.astype(np.uint64, copy=False)
    m = np.uint64(f.mantissa_bits)
    mag = c & np.uint64(f.sign_mask - 1)
    efield = mag >> m
    frac = mag & np.uint64(f.mantissa_mask)
    normal = efield != 0
    significand = frac | (normal.astype(np.uint64) << m)
    # subnormals share the exponent of the smallest normal; int32 holds every exponent here
    scale = np.maximum(efield, np.uint64(1)).astype(np.int32) - np.int32(f.bias + f.mantissa_bits)
    # exact: the significand has at most 53 bits and the result lies in float64's range (the all-ones
    # exponent of IEEE formats may overflow here: those codes are inf/NaN and are rewritten below)
    with np.errstate(over="ignore"):
        out: npt.NDArray[np.float64] = np.ldexp(significand.astype(np.float64), scale)
    negative = (c >> np.uint64(f.bits - 1)).astype(bool)
    np.negative(out, out=out, where=negative)
    _patch_specials(out, c, f)
    return out


def _patch_specials(out: npt.NDArray[np.float64], c: npt.NDArray[np.uint64], f: FloatFormat) -> None:
    """Write infinities and NaNs (with the bits of :func:`_nan_bits64`) into ``out`` in place."""
    sign = c >> np.uint64(f.bits - 1)
    mag = c & np.uint64(f.sign_mask - 1)
    if f.encoding == "ieee":
        top = (mag >> np.uint64(f.mantissa_bits)) == np.uint64((1 << f.exponent_bits) - 1)
        frac = mag & np.uint64(f.mantissa_mask)
        inf = top & (frac == 0)
        out[inf] = np.where(sign[inf] != 0, -np.inf, np.inf)
        nan = top & (frac != 0)
        shift = np.uint64(52 - f.mantissa_bits)
        payload = frac[nan] << shift
    elif f.has_nan:
        nan = (c == np.uint64(f.sign_mask)) if f.encoding == "fnuz" else (mag == np.uint64(f.sign_mask - 1))
        payload = np.full(int(np.count_nonzero(nan)), 1 << 51, dtype=np.uint64)
    else:
        return
    if nan.any():
        bits = (sign[nan] << np.uint64(63)) | np.uint64((0x7FF << 52) | (1 << 51)) | payload
        out.view(np.uint64)[nan] = bits


def _table(f: FloatFormat) -> npt.NDArray[np.float64]:
    table = _TABLES.get(f)
    if table is None:
        table = _decode_vectorised(np.arange(1 << f.bits, dtype=np.uint64), f)
        table.flags.writeable = False
        _TABLES[f] = table
    return table


def _check_codes(arr: npt.NDArray[Any], f: FloatFormat) -> None:
    if arr.dtype.kind not in "ui":
        raise ValueError(f"codes of dtype {arr.dtype}: expected an integer array of {f.name} codes")
    if arr.size == 0 or (arr.dtype.kind == "u" and arr.dtype.itemsize * 8 <= f.bits):
        return  # every value of this dtype fits
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi > f.code_mask:
        bad = lo if lo < 0 else hi
        raise ValueError(
            f"code {bad} does not fit {f.name}: expected integers from 0 to {f.code_mask} ({f.bits} bits)"
        )


def decode_array(codes: npt.ArrayLike, fmt: FloatFormat | str) -> npt.NDArray[np.float64]:
    """Decode an array of codes (any integer dtype) into their exact float64 values.

    The vectorised twin of :func:`decode` (its ``.value``, NaN bits included). fp32 and
    fp64 codes go through NumPy's own cast; for other formats a large array (2^16 codes or
    more) goes through the compiled kernel, a smaller one through a lookup table built once
    per format (at most 16 bits) or bit arithmetic. A format with values float64 cannot
    hold is refused.

    >>> decode_array(np.array([[0x00, 0x01], [0x7E, 0x7F]], dtype=np.uint8), "float8_e4m3fn").tolist()
    [[0.0, 0.001953125], [448.0, nan]]
    """
    f = get_format(fmt)
    if not FP64.contains(f):
        raise ValueError(
            f"format {f.name}: decode_array returns float64, which cannot hold all its values; "
            "expected a format within float64's range and precision (use decode() for exact values)"
        )
    given = np.asarray(codes)
    if given.size == 0 and given.dtype.kind not in "ui":
        return np.zeros(given.shape, dtype=np.float64)
    _check_codes(given, f)
    return _decode_flat(given.reshape(-1), f).reshape(given.shape)


def _decode_flat(arr: npt.NDArray[Any], f: FloatFormat) -> npt.NDArray[np.float64]:
    native = _NATIVE.get((f.exponent_bits, f.mantissa_bits)) if f.encoding == "ieee" else None
    if native is not None:
        # fp32 and fp64: NumPy's own arithmetic runs at memory speed, faster than any kernel here.
        # The widening cast (fp32) and the multiplication by 1 (fp64, exact, keeps -0) are IEEE
        # operations: they turn a signalling NaN into the quiet NaN with the same sign and
        # payload, which is what decode gives, and raise "invalid" for it, which is expected
        utype, ftype = native
        c = arr.astype(utype, copy=False)
        with np.errstate(invalid="ignore"):
            if ftype is np.float32:
                out: npt.NDArray[np.float64] = c.view(np.float32).astype(np.float64)
            else:
                out = np.multiply(c.view(np.float64), 1.0)
        return out
    if arr.size >= _KERNEL_MIN_SIZE:
        # the compiled kernel (parallel over cores) when it is there; the NumPy paths below otherwise
        try:
            kernels = importlib.import_module("floatlab._kernels")
        except ImportError:
            kernels = None
        decode_codes = getattr(kernels, "decode_codes", None)
        if decode_codes is not None:
            result: npt.NDArray[np.float64] = decode_codes(arr, f)
            return result
    if f.bits <= _TABLE_MAX_BITS:
        values: npt.NDArray[np.float64] = _table(f)[arr]
        return values
    return _decode_vectorised(arr, f)
