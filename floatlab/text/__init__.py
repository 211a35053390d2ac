"""The presentation layer: numbers as people read them, tables, and the text of every result.

Results carry data; this package turns them into text, once, for the command line, the notebooks
and ``print``. Its parts:

* here, the small formatters and parsers that every view shares, so that a share prints the same
  way and a scale is typed the same way everywhere: :func:`percent`, :func:`hex_code`,
  :func:`scale_text`, :func:`parse_scale`, :func:`safe`; the terminal styles :func:`style`,
  :func:`bold`, :func:`dim`; and the one column renderer, :func:`table`;
* :func:`render`, the text of a result object, and :func:`render_html`, its HTML. The views
  live beside this module, one module per package of results: ``floatlab.text.codec`` for
  :class:`~floatlab.codec.Decoded`, ``floatlab.text.simulate`` for the results of
  :mod:`floatlab.simulate`, ``floatlab.text.blocks``, ``floatlab.text.torch`` and
  ``floatlab.text.gradients`` for :mod:`floatlab.torch_hooks`. A result finds its view in two
  steps: :data:`VIEWS` names the view module of the package that defines its type, and that
  module's ``TEXT`` (or ``HTML``) table maps the type to its view function. A view module is
  imported the first time a result of its package is rendered, so that ``import floatlab`` and
  ``floatlab decode`` load only what they show; the result modules import nothing of this
  layer but :func:`render`, and a result's ``__str__`` is ``render(self)``. Options of a view
  (``color=`` of a decoded code, the format of a gradient recorder, the tensor kind of a layer
  report) follow the object.

This module depends only on :mod:`floatlab.exact` and the formats.

>>> percent(0.25), percent(0), percent(3e-7), percent(0.5, digits=2)
('25%', '0%', '<0.01%', '50.00 %')
>>> parse_scale("2^10"), scale_text(parse_scale("2**-3"))
(Fraction(1024, 1), '2^-3')
>>> print(table(["format", "max"], [["fp16", "65504"], ["bf16", "3.39e+38"]], align="<>"))
  format       max
  fp16       65504
  bf16    3.39e+38
>>> from floatlab import decode
>>> print(render(decode(0x3C00, "fp16")).splitlines()[0])
0x3C00 as fp16 (IEEE 754 binary16 (half): 1 sign, 5 exponent, 10 fraction bits)
"""

from __future__ import annotations

import importlib
import math
import re
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

from floatlab.exact import floor_log2, parse_value, pow2
from floatlab.formats import FloatFormat

__all__ = [
    "ECHO_LIMIT",
    "SCALE_RANGE_TEXT",
    "VIEWS",
    "as_scale",
    "bold",
    "dim",
    "hex_code",
    "parse_scale",
    "percent",
    "render",
    "render_html",
    "safe",
    "scale_text",
    "style",
    "table",
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


def percent(share: float | None, total: int | None = None, *, digits: int | None = None) -> str:
    """A share as a percentage. By default three significant digits: ``0%`` for none, ``<0.01%``
    for a share too small to show. With ``digits``, that many decimals and a space before the
    sign, so that a column of shares lines up (the training tables). With ``total``, ``share``
    is a count out of ``total``. None or NaN is ``-``.

    >>> percent(0.123456), percent(1, 3), percent(2, 0), percent(None)
    ('12.3%', '33.3%', '0%', '-')
    >>> percent(0.5, digits=2), percent(0.0123, digits=1)
    ('50.00 %', '1.2 %')
    """
    if share is None or (isinstance(share, float) and math.isnan(share)):
        return "-"
    if total is not None:
        share = share / total if total else 0.0
    if digits is not None:
        return f"{100 * share:.{digits}f} %"
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


# ---- terminal styles and tables ------------------------------------------------------------------
_ANSI = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "blue": "34", "cyan": "36"}


def style(text: str, *names: str, color: bool = True) -> str:
    """Wrap ``text`` in the ANSI codes ``names`` (bold, dim, red, ...) when ``color`` is true.

    >>> style("x", "bold", color=False), style("x", "bold", "red")
    ('x', '\\x1b[1;31mx\\x1b[0m')
    """
    if not color or not names or not text:
        return text
    return f"\x1b[{';'.join(_ANSI[n] for n in names)}m{text}\x1b[0m"


def bold(text: str, color: bool) -> str:
    """``text`` in bold when ``color`` is true.

    >>> bold("title", False)
    'title'
    """
    return style(text, "bold", color=color)


def dim(text: str, color: bool) -> str:
    """``text`` dimmed when ``color`` is true.

    >>> dim("note", False)
    'note'
    """
    return style(text, "dim", color=color)


def table(
    header: Sequence[str] | None,
    rows: Sequence[Sequence[str]],
    *,
    align: str = "",
    color: bool = False,
    indent: int = 2,
    widths: Sequence[int] = (),
) -> str:
    """Lay ``rows`` out in columns under ``header`` (None: no header line), two spaces apart,
    each line indented by ``indent`` and stripped at its end; ``align`` holds '<' or '>' per
    column (left by default), ``widths`` the least width of the first columns; with ``color``
    the header is bold.

    >>> print(table(["a", "bb"], [["1", "22"], ["333", "4"]], align="<>"))
      a    bb
      1    22
      333   4
    >>> table(None, [["ulp", "2^-10"]], widths=(6,))
    '  ulp     2^-10'
    """
    lines = [] if header is None else [header]
    n = len(lines[0]) if lines else len(rows[0]) if rows else 0
    for row in rows:
        if len(row) != n:
            raise ValueError(f"table row {list(row)!r} has {len(row)} cells: expected {n}")
    lines += rows
    least = [*widths, *[0] * (n - len(widths))][:n]
    width = [max([w, *(len(r[i]) for r in lines)]) for i, w in enumerate(least)]
    pad = " " * indent

    def line(cells: Sequence[str]) -> str:
        parts = [
            c.rjust(w) if i < len(align) and align[i] == ">" else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, width, strict=True))
        ]
        return (pad + "  ".join(parts)).rstrip()

    out = [line(r) for r in lines]
    if header is not None and color:
        out[0] = bold(out[0], color)
    return "\n".join(out)


# ---- the views of result objects ----------------------------------------------------------------
#: the module that holds the views of each package's results, imported when one is first rendered
VIEWS: dict[str, str] = {
    "floatlab.codec": "floatlab.text.codec",
    "floatlab.simulate": "floatlab.text.simulate",
    "floatlab.blocks": "floatlab.text.blocks",
    "floatlab.torch": "floatlab.text.torch",
    "floatlab.torch_hooks": "floatlab.text.gradients",
}


def _view(obj: object, table: str, what: str) -> Callable[..., str]:
    """The view of ``obj`` in the table ``table`` (``TEXT`` or ``HTML``) of the view module of
    its package; a TypeError naming ``what`` when there is none."""
    module = type(obj).__module__
    for package, name in VIEWS.items():
        if module == package or module.startswith(package + "."):
            views: dict[type, Callable[..., str]] = getattr(importlib.import_module(name), table, {})
            for kind in type(obj).__mro__:
                if kind in views:
                    return views[kind]
    raise TypeError(f"{type(obj).__name__}: no view renders it as {what}")


def render(obj: object, *args: Any, **options: Any) -> str:
    """The text of a result object (a decoded code, an experiment's result, a layer report): what
    ``print(obj)`` shows. ``args`` and ``options`` go to the view (``color=True`` colours a
    decoded code's fields; a gradient recorder takes the format, ``headroom`` and ``rounding``;
    a layer report the tensor kind).

    >>> from floatlab import decode
    >>> render(decode(0x7BFF, "fp16")) == str(decode(0x7BFF, "fp16"))
    True
    >>> render(1.5)
    Traceback (most recent call last):
    ...
    TypeError: float: no view renders it as text
    """
    return _view(obj, "TEXT", "text")(obj, *args, **options)


def render_html(obj: object, *args: Any, **options: Any) -> str:
    """The HTML of a result object, for a notebook (a decoded code: its bits as coloured boxes).

    >>> from floatlab import decode
    >>> render_html(decode(0x3C00, "fp16")).startswith("<div")
    True
    """
    return _view(obj, "HTML", "HTML")(obj, *args, **options)
