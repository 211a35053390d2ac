"""``floatlab decode CODE [CODE ...] [-f FMT]``: what a bit pattern means.

>>> from floatlab.cli import main
>>> main(["decode", "0x3C00", "--json"]) == 0  # doctest: +ELLIPSIS
[...
True
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from floatlab.cli._common import UI, View, add_formats_option, command_register, parse_code, parse_formats
from floatlab.codec import decode
from floatlab.formats import FloatFormat, get_format
from floatlab.text import render

__all__ = ["NAME", "decode_view", "register", "run"]

NAME = "decode"

_HELP = "show what one or more codes (bit patterns) mean"
_DESCRIPTION = """\
Decode codes (bit patterns) into sign, exponent, fraction and exact value.
Without -f the width of a hex or binary literal picks the format: 4 hex digits
(16 binary digits) fp16, 8 fp32, 16 fp64; other widths need -f."""
_EPILOG = """\
examples:
  floatlab decode 0x7bff                 largest finite fp16 (4 hex digits: fp16)
  floatlab decode 0x3f800000 0x00000001  fp32: one, and the smallest subnormal
  floatlab decode 0x7e -f e4m3           8-bit codes need the format named
  floatlab decode 0b0011110000000000     binary: 16 digits is fp16
  floatlab decode 15360 -f bf16          a decimal code, with its format
  floatlab decode 0x7bff -f e5m10        any eXmY layout (e5m10 is fp16's: 65504)
  floatlab decode 0x7bff -f fp16,bf16    one code read in several formats
  floatlab decode 0x7f -f p3109_k8p3se   an IEEE P3109 format (this code is +inf)
"""


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "codes", nargs="+", metavar="CODE", help="hex (0x7bff), binary (0b...) or, with -f, decimal"
    )
    add_formats_option(
        p,
        "the format of every CODE (fp16, bf16, e4m3, e6m9, p3109_k8p3se, ...); repeat or separate "
        "by commas to read the codes in each",
    )


def decode_view(
    codes: Sequence[str | int],
    fmt: FloatFormat | str | Sequence[FloatFormat | str] | None = None,
    *,
    color: bool = False,
) -> View:
    """Decode ``codes`` (strings as typed on the command line, or ints with ``fmt``) into one view;
    ``fmt`` may be several formats: each code is read in each, code by code.

    >>> print(decode_view(["0x3C00"]).data[0]["value"])
    1.0
    >>> [float(d["value"]) for d in decode_view(["0x7bff"], ["fp16", "bf16"]).data]
    [65504.0, 2.648071397852762e+36]
    """
    if fmt is None:
        formats: list[FloatFormat | None] = [None]
    elif isinstance(fmt, (str, FloatFormat)):
        formats = [get_format(fmt)]
    else:
        formats = [get_format(f) for f in fmt]
    decoded = []
    for c in codes:
        for f in formats:
            if isinstance(c, int):
                if f is None:
                    raise ValueError(f"code {c!r} is an integer: name its format")
                code, cf = parse_code(str(c), f)
            else:
                code, cf = parse_code(c, f)
            decoded.append(decode(code, cf))
    text = "\n\n".join(render(d, color=color) for d in decoded)
    return View(text, [d.to_dict() for d in decoded])


def run(args: argparse.Namespace, ui: UI) -> int:
    """Print the decoded ``args.codes``."""
    formats = parse_formats(args.fmts) if args.fmts else None
    ui.show(decode_view(args.codes, formats, color=ui.color))
    return 0


register = command_register(NAME, _HELP, _DESCRIPTION, _EPILOG, run, _arguments)
