"""Exact numbers: powers of two, exact binary logarithms and exact decimal text.

Every value of a binary floating-point format is a dyadic rational (a fraction whose
denominator is a power of two), so it has a finite decimal expansion and an exact binary
logarithm floor. This module is the one home of those small exact tools; the codec, the
rounding specification, the simulators and the histograms all use it. It imports nothing
of floatlab's, so any layer may.

>>> floor_log2(Fraction(3, 8)), pow2(-3), exact_decimal(Fraction(-3, 8))
(-2, Fraction(1, 8), '-0.375')
"""

from __future__ import annotations

import decimal as _decimal
import math
import re
from fractions import Fraction

__all__ = [
    "approx",
    "exact_decimal",
    "floor_log2",
    "int_str",
    "parse_value",
    "pow2",
    "scientific",
    "shown",
]


def pow2(k: int) -> Fraction:
    """2^k as an exact Fraction, for any integer k.

    >>> pow2(10), pow2(-2)
    (Fraction(1024, 1), Fraction(1, 4))
    """
    return Fraction(1 << k) if k >= 0 else Fraction(1, 1 << -k)


def floor_log2(q: Fraction | int) -> int:
    """floor(log2(q)) for q > 0, exactly: from bit lengths and one integer comparison.

    Never from ``math.log2``, which rounds (a value just below a power of two would land
    on it).

    >>> floor_log2(Fraction(1, 3)), floor_log2(8), floor_log2(Fraction(2**53 - 1, 2**53))
    (-2, 3, -1)
    """
    q = Fraction(q)
    if q <= 0:
        raise ValueError(f"floor_log2({q}): expected a positive number")
    e = q.numerator.bit_length() - q.denominator.bit_length()
    # now 2^(e-1) < q < 2^(e+1): one comparison settles it
    if (q.numerator << max(-e, 0)) < (q.denominator << max(e, 0)):
        e -= 1
    return e


def int_str(n: int) -> str:
    """``str(n)`` for an int of any size, in time close to linear: the binary halves are
    converted separately and joined with the decimal module's fast multiplication (``str(n)`` is
    limited to 4,300 digits and quadratic beyond; so is ``Decimal(n)``).

    >>> int_str(-(10**5000 + 7))[:3], int_str(-(10**5000 + 7))[-4:], int_str(10**6000 - 1) == "9" * 6000
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


def exact_decimal(q: Fraction, negative: bool | None = None) -> str:
    """The exact decimal expansion of a dyadic rational ``q`` (every float value has one).

    ``negative`` overrides the sign shown (a negative zero is a zero Fraction).

    >>> exact_decimal(Fraction(-3, 8)), exact_decimal(Fraction(10)), exact_decimal(Fraction(0), True)
    ('-0.375', '10', '-0')
    """
    n, d = abs(q.numerator), q.denominator
    k = d.bit_length() - 1
    if d != 1 << k:
        raise ValueError(f"{q} is not dyadic: expected a denominator that is a power of two")
    if k == 0:
        body = int_str(n)
    else:
        # n / 2^k = n * 5^k / 10^k: a terminating expansion with exactly k decimals, and as
        # n is odd (the fraction is reduced) the last of them is a 5, never a trailing zero
        digits = int_str(n * 5**k).rjust(k + 1, "0")
        body = f"{digits[:-k]}.{digits[-k:]}"
    return ("-" if (q < 0 if negative is None else negative) else "") + body


def scientific(dec: str, keep: int = 40) -> tuple[str, int]:
    """Shorten an exact decimal string to ``keep`` significant digits; also return its digit count.

    >>> scientific("0.000123456", keep=3)
    ('1.23...e-4', 6)
    """
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


def approx(q: Fraction) -> str:
    """A short approximation of a non-zero dyadic ``q``: its float64 repr, or, outside float64's
    range, 17 significant digits in scientific notation.

    >>> approx(Fraction(1, 10)), approx(pow2(-1100))
    ('0.1', '7.3621518290228626e-332')
    """
    # int / int is correctly rounded (0.0 below float64's range); above it, it would raise
    small = q.numerator.bit_length() - q.denominator.bit_length() < 1000
    x = q.numerator / q.denominator if small else math.inf
    if x != 0 and math.isfinite(x):
        return repr(x)
    short, _ = scientific(exact_decimal(q), keep=17)
    return short.replace("...", "")


# ---- exact numbers from text ------------------------------------------------------------------
_MAX_EXPONENT = 100_000
_MAX_DIGITS = 100_000
# ASCII digits only: "\d" alone would also take the digits of other scripts
_DECIMAL_RE = re.compile(r"([-+]?)(?:(\d+)(?:\.(\d*))?|\.(\d+))(?:e([-+]?\d+))?", re.IGNORECASE | re.ASCII)
_HEX_RE = re.compile(
    r"([-+]?)0x(?:([0-9a-f]+)(?:\.([0-9a-f]*))?|\.([0-9a-f]+))(?:p([-+]?\d+))?", re.IGNORECASE | re.ASCII
)
_RATIO_RE = re.compile(r"([-+]?)(\d+)\s*/\s*(\d+)", re.ASCII)
_SPECIALS = {"inf": math.inf, "infinity": math.inf, "nan": math.nan}


def _int10(digits: str, s: str) -> int:
    """A decimal digit string as an int, without Python's 4300-digit limit on ``int(str)``
    (exact decimals of wide formats run to thousands of digits) but within ``_MAX_DIGITS``."""
    if len(digits) > _MAX_DIGITS:
        raise ValueError(
            f"{shown(s)} has {len(digits):,} digits: expected at most {_MAX_DIGITS:,} in a number"
        )
    if len(digits) < 4000:
        return int(digits)
    return int(_decimal.Decimal(digits))  # Decimal converts without the limit (quadratic, so capped above)


def shown(s: str) -> str:
    """``s`` for an error message: repr'd, and shortened when it is long.

    >>> shown("0.1"), shown("9" * 100)[:14]
    ("'0.1'", "'9999999999999")
    """
    return repr(s) if len(s) <= 60 else f"{s[:30]!r}...{s[-10:]!r} ({len(s):,} characters)"


def _exponent(text: str | None, s: str) -> int:
    if not text:
        return 0
    # a long digit string is out of range whatever it says (and int() refuses over 4300 digits)
    if len(text.lstrip("+-").lstrip("0")) > len(str(_MAX_EXPONENT)) or abs(int(text)) > _MAX_EXPONENT:
        cut = text if len(text) <= 12 else f"{text[:10]}..."
        raise ValueError(
            f"exponent {cut} in {shown(s)} is out of range: expected at most {_MAX_EXPONENT} in magnitude"
        )
    return int(text)


def parse_value(s: str) -> float | Fraction:
    """Parse a number exactly: decimals, fractions ``p/q``, hex floats, +-0, +-inf, nan.

    Finite non-zero values come back as exact Fractions ("0.1" is 1/10, not the float
    nearest to it); a negative zero, infinities and NaN come back as floats.

    >>> parse_value("0.1"), parse_value("1e-5"), parse_value("-1/3"), parse_value("0x1.8p3")
    (Fraction(1, 10), Fraction(1, 100000), Fraction(-1, 3), Fraction(12, 1))
    >>> parse_value("-0"), parse_value("-inf")
    (-0.0, -inf)
    """
    if not isinstance(s, str):
        raise ValueError(f"{s!r}: expected a string holding a number")
    text = s.strip()
    negative = text.startswith("-")
    special = _SPECIALS.get((text[1:] if text[:1] in "+-" else text).lower())
    if special is not None:
        return -special if negative else special
    value: Fraction
    if match := _DECIMAL_RE.fullmatch(text):
        whole, part, part_only, exp = match.group(2, 3, 4, 5)
        fraction_digits = part_only if part_only is not None else part or ""
        shift = _exponent(exp, s) - len(fraction_digits)
        value = Fraction(_int10((whole or "") + fraction_digits, s)) * (Fraction(10) ** shift)
    elif match := _HEX_RE.fullmatch(text):
        whole, part, part_only, exp = match.group(2, 3, 4, 5)
        fraction_digits = part_only if part_only is not None else part or ""
        digits = (whole or "") + fraction_digits
        if len(digits) > _MAX_DIGITS:  # the same limit as decimal input
            raise ValueError(
                f"{shown(s)} has {len(digits):,} hex digits: expected at most {_MAX_DIGITS:,} in a number"
            )
        value = Fraction(int(digits, 16)) * pow2(_exponent(exp, s) - 4 * len(fraction_digits))
    elif match := _RATIO_RE.fullmatch(text):
        numerator, denominator = _int10(match.group(2), s), _int10(match.group(3), s)
        if denominator == 0:
            raise ValueError(f"{shown(s)}: the denominator is zero")
        value = Fraction(numerator, denominator)
    else:
        raise ValueError(
            f"cannot parse {shown(s)} as a number: expected a decimal ('0.1', '-2.5e-3'), "
            "a fraction ('1/3'), a hex float ('0x1.8p3'), 'inf', '-inf' or 'nan'"
        )
    if value == 0:
        return -0.0 if negative else Fraction(0)
    return -value if negative else value
