"""Format tables and bit diagrams, computed from the format registry at build time.

``{floatlab-format} fp16`` draws the bit layout of a format (an SVG of its fields, filled with the
bits of one of its values) and the table of its derived properties; ``{floatlab-formats-table}``
lays every registered format side by side; ``{floatlab-decode} 0x7BFF fp16`` embeds the rich view
that a notebook shows for :func:`floatlab.decode`. Nothing here is typed by hand: a new format, or
a fix to a derived property, changes these pages on the next build.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from fractions import Fraction
from typing import Any, ClassVar

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.util.docutils import SphinxDirective

from floatlab.codec import decode
from floatlab.formats import FORMATS, FloatFormat, get_format
from floatlab.text.codec import FIELD_COLOURS
from floatlab_sphinx.commands import note_floatlab_sources

_SHORT = 22  # exact decimals up to this length are shown in full


def pow2_text(q: Fraction) -> str:
    """``2^k`` when ``q`` is a power of two, else ``(2 - 2^-m) x 2^k`` style for a max value."""
    if q > 0 and q.numerator & (q.numerator - 1) == 0 and q.denominator & (q.denominator - 1) == 0:
        k = q.numerator.bit_length() - q.denominator.bit_length()
        return f"2^{k}"
    return ""


def exact_decimal(q: Fraction) -> str:
    """The exact decimal expansion of a non-negative ``q`` whose denominator is a power of two.

    >>> exact_decimal(Fraction(3, 8)), exact_decimal(Fraction(65504))
    ('0.375', '65504')
    """
    k = q.denominator.bit_length() - 1
    if q < 0 or q.denominator != 1 << k:
        raise ValueError(f"{q}: expected a non-negative fraction with a power-of-two denominator")
    if k == 0:
        return str(q.numerator)
    digits = str(q.numerator * 5**k).rjust(k + 1, "0")  # n / 2^k = n * 5^k / 10^k
    return f"{digits[:-k]}.{digits[-k:]}".rstrip("0").rstrip(".")


def value_text(q: Fraction) -> str:
    """An exact value for a table: the exact decimal when short, else 6 significant digits, with
    its power of two when it is one.

    >>> value_text(Fraction(1, 1024)), value_text(Fraction(65504))
    ('0.0009765625 = 2^-10', '65504')
    """
    dec = exact_decimal(q)
    shown = dec if len(dec) <= _SHORT else f"≈ {float(q):.6g}"
    p = pow2_text(q)
    return f"{shown} = {p}" if p and p != shown else shown


def _hex(code: int, fmt: FloatFormat) -> str:
    return f"0x{code:0{(fmt.bits + 3) // 4}X}"


def _encoding_text(fmt: FloatFormat) -> str:
    if fmt.encoding == "ieee":
        return "IEEE 754 style: the all-ones exponent holds ±inf (fraction 0) and NaNs"
    if fmt.encoding == "fn":
        if fmt.has_nan:
            return "finite (fn): no infinities; the all-ones code below the sign bit is NaN"
        return "finite (fn): no infinities, no NaN; every code is a number"
    return "finite, unsigned zero (fnuz): no infinities, no -0; the code of -0 is the one NaN"


def properties(fmt: FloatFormat) -> list[tuple[str, str]]:
    """The rows of a format's property table, every one derived from the format."""
    e, m = fmt.exponent_bits, fmt.mantissa_bits
    rows = [
        ("layout", f"{fmt.bits} bits: 1 sign, {e} exponent, {m} fraction"),
        ("encoding", _encoding_text(fmt)),
        ("exponent bias", f"{fmt.bias}"),
        ("exponent range", f"{fmt.emin} to {fmt.emax} (normal numbers)"),
        ("largest finite", f"{value_text(fmt.max_exact)} ({_hex(fmt.max_code, fmt)})"),
        (
            "smallest normal",
            f"{value_text(fmt.smallest_normal_exact)} ({_hex(1 << m, fmt)})",
        ),
        (
            "smallest subnormal",
            f"{value_text(fmt.smallest_subnormal_exact)} ({_hex(1, fmt)})"
            if m
            else "none (no fraction bits)",
        ),
        ("machine epsilon", f"{value_text(Fraction(1, 1 << m))}: the gap above 1"),
        ("unit roundoff", f"{value_text(Fraction(1, 1 << (m + 1)))}: the largest relative error of rounding"),
        ("decimal digits", f"{fmt.decimal_digits} always carried ({fmt.precision} significant bits)"),
        ("dynamic range", f"{fmt.dynamic_range_log2} binades, smallest subnormal to largest finite"),
    ]
    specials = []
    if fmt.has_inf:
        specials.append(f"+inf {_hex(fmt.inf_code, fmt)}")
    if fmt.nan_code is not None:
        specials.append(f"NaN {_hex(fmt.nan_code, fmt)}")
    specials.append(f"-0 {_hex(fmt.sign_mask, fmt)}" if fmt.has_negative_zero else "no -0")
    rows.append(("special codes", ", ".join(specials)))
    return rows


ROW_BITS = 32  # wider formats (fp64) wrap onto a second row, so that every box stays legible


def bit_diagram_svg(fmt: FloatFormat, code: int, caption: str) -> str:
    """An SVG of the three fields of ``fmt`` holding ``code``: one box per bit, the bit numbers of
    each field's ends above, the field names below; at most ``ROW_BITS`` boxes per row."""
    cell, gap, top, row_height = 22, 2, 20, 80
    e, m = fmt.exponent_bits, fmt.mantissa_bits
    bits = f"{code:0{fmt.bits}b}"
    fields = [("sign", 0, 1), ("exponent", 1, 1 + e), ("fraction", 1 + e, 1 + e + m)]
    # cut each field at the row boundaries: (name, lo, hi, first piece of the field?)
    pieces = []
    for name, lo, hi in fields:
        start = lo
        while start < hi:
            stop = min(hi, (start // ROW_BITS + 1) * ROW_BITS)
            pieces.append((name, start, stop, start == lo))
            start = stop
    rows = (fmt.bits + ROW_BITS - 1) // ROW_BITS
    per_row = min(fmt.bits, ROW_BITS)
    width = per_row * (cell + gap) + 6 * gap + 2
    height = rows * row_height - 16
    parts = [
        f'<svg class="floatlab-bits" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}" role="img" aria-label="{html.escape(caption)}">'
    ]
    labels = {"sign": "s", "exponent": f"exponent ({e})", "fraction": f"fraction ({m})"}
    row, x = -1, 1
    for name, lo, hi, first_piece in pieces:
        if lo // ROW_BITS != row:
            row, x = lo // ROW_BITS, 1
        y = top + row * row_height
        fill, stroke = FIELD_COLOURS[name]
        x0 = x
        for i in range(lo, hi):
            parts.append(
                f'<rect x="{x}" y="{y}" width="{cell}" height="{cell}" rx="2" fill="{fill}" '
                f'stroke="{stroke}"/><text x="{x + cell / 2}" y="{y + cell * 0.72}" '
                f'text-anchor="middle" class="bit">{bits[i]}</text>'
            )
            x += cell + gap
        x1 = x - gap
        high, low = fmt.bits - 1 - lo, fmt.bits - hi  # bit numbers of the piece's ends
        parts.append(f'<text x="{x0 + cell / 2}" y="{y - 6}" text-anchor="middle" class="pos">{high}</text>')
        if low != high:
            parts.append(
                f'<text x="{x1 - cell / 2}" y="{y - 6}" text-anchor="middle" class="pos">{low}</text>'
            )
        label = labels[name] if first_piece else f"{name} (continued)"
        parts.append(
            f'<text x="{(x0 + x1) / 2}" y="{y + cell + 17}" text-anchor="middle" class="field" '
            f'fill="{stroke}">{html.escape(label)}</text>'
        )
        x += 2 * gap
    parts.append("</svg>")
    return "".join(parts)


def diagram_html(fmt: FloatFormat, code: int | None = None) -> str:
    """The bit diagram of ``fmt`` filled with ``code`` (default: its largest finite value), with a
    caption saying which value it shows."""
    code = fmt.max_code if code is None else code
    d = decode(code, fmt)
    what = "the largest finite value" if code == fmt.max_code else "the value"
    caption = f"{fmt.name}: {what} {d.decimal if len(d.decimal) <= _SHORT else d.value!r}, code {d.hex}"
    return (
        f'<figure class="floatlab-bit-diagram">{bit_diagram_svg(fmt, code, caption)}'
        f"<figcaption>{html.escape(caption)}; {html.escape(d.formula())}</figcaption></figure>"
    )


def table_node(header: list[str], rows: list[list[str]], classes: list[str] | None = None) -> nodes.table:
    """A docutils table of plain-text cells."""
    table = nodes.table(classes=classes or [])
    group = nodes.tgroup(cols=len(header))
    table += group
    for _ in header:
        group += nodes.colspec(colwidth=1)
    thead = nodes.thead()
    group += thead
    row = nodes.row()
    for h in header:
        row += nodes.entry("", nodes.paragraph(text=h))
    thead += row
    tbody = nodes.tbody()
    group += tbody
    for cells in rows:
        row = nodes.row()
        for c in cells:
            row += nodes.entry("", nodes.paragraph(text=c))
        tbody += row
    return table


class FormatDirective(SphinxDirective):
    """``{floatlab-format} NAME``: the bit diagram and property table of one format."""

    required_arguments = 1
    option_spec: ClassVar[dict[str, Callable[[str], Any]]] = {"code": directives.unchanged}

    def run(self) -> list[nodes.Node]:
        note_floatlab_sources(self.env)
        try:
            fmt = get_format(self.arguments[0])
            code = int(self.options["code"], 0) if "code" in self.options else None
            svg = diagram_html(fmt, code)
        except ValueError as e:
            raise self.error(str(e)) from e
        rows = [[k, v] for k, v in properties(fmt)]
        return [
            nodes.raw("", svg, format="html"),
            table_node(["property", fmt.name], rows, ["floatlab-format-table"]),
        ]


class FormatsTableDirective(SphinxDirective):
    """``{floatlab-formats-table}``: every registered format side by side."""

    def run(self) -> list[nodes.Node]:
        note_floatlab_sources(self.env)
        header = ["format", "bits (s+e+m)", "max", "min normal", "min subnormal", "eps"]
        rows = [
            [
                fmt.name,
                f"{fmt.bits} ({int(fmt.signed)}+{fmt.exponent_bits}+{fmt.mantissa_bits})",
                f"{fmt.max:.6g}",
                f"{fmt.smallest_normal:.3g}",
                f"{fmt.smallest_subnormal:.3g}",
                f"{fmt.eps:.3g}",
            ]
            for fmt in FORMATS.values()
        ]
        return [table_node(header, rows, ["floatlab-formats-table"])]


class DecodeDirective(SphinxDirective):
    """``{floatlab-decode} CODE FORMAT``: the notebook view of :func:`floatlab.decode`."""

    required_arguments = 2

    def run(self) -> list[nodes.Node]:
        note_floatlab_sources(self.env)
        try:
            d = decode(int(self.arguments[0], 0), self.arguments[1])
        except ValueError as e:
            raise self.error(str(e)) from e
        return [nodes.raw("", f'<div class="floatlab-decoded">{d._repr_html_()}</div>', format="html")]
