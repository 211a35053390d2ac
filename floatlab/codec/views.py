"""How a decoded code is drawn: its three fields in their colours, as terminal text or as HTML.

A :class:`CodeView` holds what :class:`~floatlab.codec.Decoded` shows, already in words (data
in); :meth:`CodeView.text` lays it out for a terminal and :meth:`CodeView.html` as coloured bit
boxes for a notebook (text out). The colours are those of float.exposed: blue sign, green
exponent, red fraction.

>>> from floatlab.codec import decode
>>> view = decode(0x3C00, "fp16")._view()
>>> [f.bits for f in view.fields], view.ulp
(['0', '01111', '0000000000'], '0.0009765625 = 2^-10')
>>> print(view.text().splitlines()[3])
  0     01111     0000000000
"""

from __future__ import annotations

import html
from dataclasses import dataclass

__all__ = ["FIELD_COLOURS", "CodeView", "Field"]

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
    >>> decode(0x3C00, "fp16")._view().fields[1]
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
    >>> view = decode(0x3C00, "fp16")._view()
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
