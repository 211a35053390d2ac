"""How a decoded code is drawn: its three fields in their colours, as terminal text or as HTML.

:func:`code_view` puts what a :class:`~floatlab.codec.Decoded` shows into words, a
:class:`CodeView` (data in); :meth:`CodeView.text` lays it out for a terminal and
:meth:`CodeView.html` as coloured bit boxes for a notebook (text out): the views that
:func:`floatlab.text.render` and :func:`floatlab.text.render_html` find in :data:`TEXT` and
:data:`HTML` (``render(d, color=True)`` colours the fields). The colours are those of float.exposed: blue
sign, green exponent, red fraction.

>>> from floatlab.text import render
>>> from floatlab.codec import decode
>>> view = code_view(decode(0x3C00, "fp16"))
>>> [f.bits for f in view.fields], view.ulp
(['0', '01111', '0000000000'], '0.0009765625 = 2^-10')
>>> print(view.text().splitlines()[3])
  0     01111     0000000000
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass

from floatlab.codec.decoded import LONG_DECIMAL, SHORT_DECIMAL, Decoded, decode
from floatlab.exact import approx, exact_decimal, floor_log2, scientific

__all__ = ["FIELD_COLOURS", "CodeView", "Field", "code_view"]

#: sign, exponent, fraction: (background, border) of their bit boxes, as on float.exposed
FIELD_COLOURS: dict[str, tuple[str, str]] = {
    "sign": ("#cfe0ff", "#2f62c9"),
    "exponent": ("#cdf2d2", "#23873a"),
    "fraction": ("#ffd8cc", "#c8471f"),
}
_ANSI_COLOURS = {"sign": "\x1b[1;34m", "exponent": "\x1b[1;32m", "fraction": "\x1b[1;31m"}
_ANSI_RESET = "\x1b[0m"


@dataclass(frozen=True)
class Field:
    """One field of a code: its name, its bits as a string, what they mean, and the number of
    its first (leftmost) bit in the code.

    >>> from floatlab.codec import decode
    >>> code_view(decode(0x3C00, "fp16")).fields[1]
    Field(name='exponent', bits='01111', meaning='15 - 15', top_bit=14)
    """

    name: str
    bits: str
    meaning: str
    top_bit: int


@dataclass(frozen=True)
class CodeView:
    """What a decoded code shows, in words: the header, the three fields and four rows.

    ``value`` may run over several lines; ``digits`` holds every digit of a value that
    ``value`` shortens (the HTML view offers them folded away), else None.

    >>> from floatlab.codec import decode
    >>> view = code_view(decode(0x3C00, "fp16"))
    >>> view.value, view.up
    ('(-1)^0 x 2^(15 - 15) x (1 + 0/1024) = 1 (exact)', '1.0009765625 (0x3C01)')
    """

    header: str
    fields: tuple[Field, Field, Field]
    value: str
    digits: str | None
    description: str
    ulp: str
    up: str
    down: str

    def text(self, color: bool = False) -> str:
        """The plain multi-line terminal view; ``color=True`` colours the three fields (ANSI)."""
        names = tuple(f.name for f in self.fields)
        widths = [max(len(f.name), len(f.bits), len(f.meaning)) + 2 for f in self.fields]

        def row(cells: tuple[str, ...], paint: bool = False) -> str:
            out = []
            for name, cell, width in zip(names, cells, widths, strict=True):
                pad = " " * (width - len(cell))
                out.append(f"{_ANSI_COLOURS[name]}{cell}{_ANSI_RESET}{pad}" if paint and cell else cell + pad)
            return ("  " + "".join(out)).rstrip()

        lines = [
            self.header,
            "",
            row(names),
            row(tuple(f.bits for f in self.fields), paint=color),
            row(tuple(f.meaning for f in self.fields)),
            "",
            f"  value   {self.value}",
            f"  class   {self.description}",
            f"  ulp     {self.ulp}",
            f"  next    up {self.up}   down {self.down}",
        ]
        return "\n".join(lines)

    def html(self) -> str:
        """The view as HTML: the fields as coloured bit boxes (each titled with its bit number)
        above a table of the value, class, ulp and neighbours."""
        esc = html.escape
        groups = []
        for field in self.fields:
            if not field.bits:
                continue
            background, border = FIELD_COLOURS[field.name]
            boxes = "".join(
                f'<span style="display:inline-block;min-width:1.05em;margin:0 1px;padding:1px 2px;'
                f"text-align:center;font-family:monospace;color:#111;background:{background};"
                f'border:1px solid {border};border-radius:2px" title="bit {field.top_bit - i}">{b}</span>'
                for i, b in enumerate(field.bits)
            )
            groups.append(
                '<div style="display:inline-block;vertical-align:top;margin:0 0.7em 0.3em 0;'
                'text-align:center">'
                f"<div>{boxes}</div>"
                f'<div style="font-size:0.85em;color:{border}"><b>{field.name}</b><br>'
                f"{esc(field.meaning)}</div></div>"
            )
        value = esc(self.value).replace("\n", "<br>")
        if self.digits is not None:
            value += (
                f'<details><summary>all digits</summary><code style="word-break:break-all">'
                f"{esc(self.digits)}</code></details>"
            )
        cell = 'style="text-align:left;padding:1px 0.8em 1px 0;vertical-align:top"'
        rows = [
            ("value", value),
            ("class", esc(self.description)),
            ("ulp", esc(self.ulp)),
            ("next", f"up {esc(self.up)} &nbsp; down {esc(self.down)}"),
        ]
        table = "".join(f"<tr><th {cell}>{k}</th><td {cell}>{v}</td></tr>" for k, v in rows)
        return (
            '<div style="font-family:sans-serif;line-height:1.4">'
            f'<div style="margin-bottom:0.4em"><b>{esc(self.header)}</b></div>'
            f"<div>{''.join(groups)}</div>"
            f'<table style="border-collapse:collapse;margin-top:0.3em">{table}</table></div>'
        )


# ---- a decoded code in words ----------------------------------------------------------------------
def _field_meanings(d: Decoded) -> tuple[str, str, str]:
    fmt = d.fmt
    sign = "-" if d.sign else "+"
    if d.kind == "nan":
        if fmt.encoding == "fnuz":
            return "(NaN)", str(d.exponent), "0: NaN, not -0"
        if fmt.encoding == "fn":
            return sign, str(d.exponent), "all ones: NaN"
        return sign, f"{d.exponent} (all ones)", "nonzero: NaN"
    if d.kind == "infinity":
        return sign, f"{d.exponent} (all ones)", "0: infinity"
    lead, efield = (1, d.exponent) if d.kind == "normal" else (0, 1)
    return sign, f"{efield} - {fmt.bias}", f"{lead} + {d.fraction}/{1 << fmt.mantissa_bits}"


def _header(d: Decoded) -> str:
    fmt = d.fmt
    what = fmt.description or f"{fmt.encoding} encoding"
    sep = "; " if ":" in what else ": "
    e, m = fmt.exponent_bits, fmt.mantissa_bits
    return f"{d.hex} as {fmt.name} ({what}{sep}1 sign, {e} exponent, {m} fraction bit{'' if m == 1 else 's'})"


def _value_text(d: Decoded) -> str:
    if d.kind == "nan":
        return "NaN: not a number, it has no value"
    if d.kind == "infinity":
        return d.formula()
    dec = d.decimal
    if len(dec) <= LONG_DECIMAL:
        return f"{d.formula()} = {dec} (exact)"
    short, ndigits = scientific(dec)
    return (
        f"{d.formula()}\n          = {short}\n          "
        f"(exact: {ndigits} significant digits, all in .decimal; float64 {d.value!r})"
    )


def _ulp_text(d: Decoded) -> str:
    ulp = d.ulp
    if ulp is None:
        return "none (not a finite number)"
    k = floor_log2(ulp)  # (an ulp is a power of two)
    dec = exact_decimal(ulp, False)
    return f"{dec} = 2^{k}" if len(dec) <= SHORT_DECIMAL else f"2^{k} (about {approx(ulp)})"


def _neighbour_text(code: int | None, d: Decoded) -> str:
    if code is None:
        return "none"
    n = decode(code, d.fmt)
    dec = n.decimal
    if dec in ("inf", "-inf"):
        dec = "+inf" if dec == "inf" else dec
    elif len(dec) > SHORT_DECIMAL:
        dec = f"~{approx(n.exact)}" if n.exact else dec
    return f"{dec} ({n.hex})"


def code_view(d: Decoded) -> CodeView:
    """Everything the views of ``d`` show, in words.

    >>> from floatlab.codec import decode
    >>> code_view(decode(0x3C00, "fp16")).description
    'normal, exactly 1'
    """
    fmt = d.fmt
    sign, exponent, fraction = _field_meanings(d)
    long = d.exact is not None and len(d.decimal) > LONG_DECIMAL
    return CodeView(
        header=_header(d),
        fields=(
            Field("sign", d.sign_bits, sign, fmt.bits - 1),
            Field("exponent", d.exponent_bits, exponent, fmt.bits - 2),
            Field("fraction", d.fraction_bits, fraction, fmt.mantissa_bits - 1),
        ),
        value=_value_text(d),
        digits=d.decimal if long else None,
        description=d.description,
        ulp=_ulp_text(d),
        up=_neighbour_text(d.next_up, d),
        down=_neighbour_text(d.next_down, d),
    )


def _decoded_text(d: Decoded, color: bool = False) -> str:
    """The terminal view of a decoded code; ``color=True`` colours the three fields (ANSI).

    >>> from floatlab.text import render
    >>> from floatlab.codec import decode
    >>> print(render(decode(0x7BFF, "fp16")))
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
    return code_view(d).text(color)


def _decoded_html(d: Decoded) -> str:
    return code_view(d).html()


#: the text view of each result type of this module
TEXT: dict[type, Callable[..., str]] = {Decoded: _decoded_text}
#: the HTML view of each result type of this module
HTML: dict[type, Callable[..., str]] = {Decoded: _decoded_html}
