"""Numbers as people read them: percentages, codes in hex, loss scales.

The one home of the small formatters and parsers that reports, the CLI, the plots and the
widgets share, so that a share prints the same way and a scale is typed the same way
everywhere. It depends only on :mod:`floatlab.exact` and the formats.

>>> percent(0.25), percent(0), percent(3e-7)
('25%', '0%', '<0.01%')
>>> parse_scale("2^10"), scale_text(parse_scale("2**-3"))
(Fraction(1024, 1), '2^-3')
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

from floatlab.exact import floor_log2, parse_value, pow2
from floatlab.formats import FloatFormat

__all__ = [
    "ECHO_LIMIT",
    "SCALE_RANGE_TEXT",
    "as_scale",
    "hex_code",
    "parse_scale",
    "percent",
    "safe",
    "scale_text",
]


#: the most characters of one name or value from the input that a message echoes
ECHO_LIMIT = 200


def safe(text: object, limit: int = ECHO_LIMIT) -> str:
    r"""``text`` (a file or array name, a value: anything taken from the input) made safe to
    print on a terminal: every character that is not printable (ESC, a newline, a tab, DEL, C1
    controls, bidirectional overrides) is written as its escape (``\x1b``, ``\n``,
    ``\u202e``), so that a file cannot clear the screen or forge a line; and text longer than
    ``limit`` characters is cut in the middle, its length said.

    >>> safe("grads\x1b[2J\nfloatlab: error: forged")
    'grads\\x1b[2J\\nfloatlab: error: forged'
    >>> safe("x" * 1000, limit=20)
    'xxxxxxxxxx...xxxxx (1,000 characters)'
    >>> safe("conv1.weight"), safe("été")
    ('conv1.weight', 'été')
    """
    s = str(text)
    if len(s) > limit:
        s = f"{s[: limit // 2]}...{s[-(limit // 4) :]} ({len(s):,} characters)"
    if s.isprintable():
        return s
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in s)


def percent(share: float, total: int | None = None) -> str:
    """A share as a percentage with three significant digits: ``0%`` for none, ``<0.01%`` for
    a share too small to show. With ``total``, ``share`` is a count out of ``total``.

    >>> percent(0.123456), percent(1, 3), percent(2, 0)
    ('12.3%', '33.3%', '0%')
    """
    if total is not None:
        share = share / total if total else 0.0
    if share == 0:
        return "0%"
    if abs(share) < 1e-4:
        return "<0.01%"
    return f"{100 * share:.3g}%"


def hex_code(code: int, fmt: FloatFormat) -> str:
    """``code`` in hex, zero-padded to the width of ``fmt``.

    >>> from floatlab.formats import FP16
    >>> hex_code(0x3C00, FP16), hex_code(1, FP16)
    ('0x3C00', '0x0001')
    """
    return f"0x{code:0{(fmt.bits + 3) // 4}X}"


def scale_text(q: Fraction | int) -> str:
    """A loss scale as people write it: ``2^k`` for a power of two, else a short decimal.

    >>> scale_text(Fraction(1, 1024)), scale_text(1), scale_text(Fraction(3, 2))
    ('2^-10', '1', '1.5')
    """
    q = Fraction(q)
    if q > 0 and (q.numerator == 1 or q.denominator == 1):
        k = floor_log2(q)
        if q == pow2(k):
            return "1" if k == 0 else f"2^{k}"
    return f"{float(q):g}"


#: the scales floatlab takes: the verdicts report a scale as a float64
SCALE_RANGE_TEXT = "from 2^-1074 to below 2^1024"
_POWER = re.compile(r"2(?:\^|\*\*)([+-]?\d{1,5})", re.ASCII)


def as_scale(scale: Any, what: str = "scale") -> Fraction:
    """``scale`` (a number, a Fraction or text such as ``"2^10"``) as an exact positive Fraction
    inside float64's range; ValueError naming ``what`` otherwise.

    >>> as_scale(1024), as_scale("0.5")
    (Fraction(1024, 1), Fraction(1, 2))
    """
    if isinstance(scale, str):
        return parse_scale(scale, what)
    try:
        q = Fraction(scale)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{what}={_echo(scale)}: expected a finite positive number") from None
    if q <= 0 or q >= 2**1024 or q < Fraction(1, 2**1074):
        raise ValueError(f"{what}={_echo(scale)}: expected a finite positive number {SCALE_RANGE_TEXT}")
    return q


def _echo(x: Any) -> str:
    """``repr(x)`` for a message, cut; a number too long for Python's repr is described."""
    try:
        text = repr(x)
    except ValueError:  # Python refuses int-to-str conversions over 4300 digits
        if isinstance(x, (int, Fraction)) and x > 0 and x == pow2(floor_log2(x)):
            return f"2^{floor_log2(x)}"
        return "a number of over 4300 digits"
    return safe(text, limit=60)


def parse_scale(text: str, what: str = "--scale") -> Fraction:
    """A loss scale as typed: ``1024``, ``2^10``, ``2**10``, ``0.5``, ``1/8``, ``1e3``.

    >>> parse_scale("2^10"), parse_scale("2**-3"), parse_scale("1e3"), parse_scale("1/8")
    (Fraction(1024, 1), Fraction(1, 8), Fraction(1000, 1), Fraction(1, 8))
    """
    t = text.strip().replace(" ", "")
    m = _POWER.fullmatch(t)
    shown = repr(text[:40])
    try:
        # parse_value bounds the exponent, where Fraction("1e999999999") would compute 10^999999999
        v = pow2(int(m.group(1))) if m else parse_value(t)
    except ValueError:
        v = Fraction(-1)
    q = v if isinstance(v, Fraction) else Fraction(-1)  # inf, nan and -0 are no scales
    if q <= 0:
        raise ValueError(f"{what} {shown}: expected a positive number such as 1024, 2^10 or 0.5")
    if q >= 2**1024 or q < Fraction(1, 2**1074):
        raise ValueError(f"{what} {shown}: expected a scale {SCALE_RANGE_TEXT}")
    return q
