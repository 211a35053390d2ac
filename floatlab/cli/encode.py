"""``floatlab encode VALUE [-f FMT ...] [--rounding MODE]``: how a number is stored.

>>> from floatlab.cli import main
>>> main(["encode", "0.1", "-f", "fp16", "--rounding", "rne"])  # doctest: +NORMALIZE_WHITESPACE
0.1 = 1/10 in fp16
  rounding  code    value            abs error  rel error  flags
  rne       0x2E66  0.0999755859375  2.44e-05   2.44e-04   inexact
0
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from floatlab.cli._common import (
    UI,
    View,
    add_formats_option,
    add_saturation_options,
    command_register,
    encoded_data,
    flag_names,
    fraction_text,
    parse_formats,
    parse_number,
    rounding_notes,
    sci,
    short_decimal,
    with_notes,
)
from floatlab.codec import Encoded, encode
from floatlab.formats import FloatFormat
from floatlab.rounding import MODE_DESCRIPTIONS, ROUNDING_MODES, check_rounding
from floatlab.text import bold, hex_code, table

__all__ = ["DEFAULT_FORMATS", "NAME", "encode_view", "register", "run"]

NAME = "encode"
DEFAULT_FORMATS: tuple[str, ...] = ("fp64", "fp32", "fp16", "bf16", "float8_e4m3fn", "float8_e5m2")

_HELP = "show how a value is stored in one or more formats"
_DESCRIPTION = """\
Encode VALUE (parsed exactly) into each format: the stored code, its exact
value and the rounding error. With a single -f and no --rounding: one row per
rounding mode."""
_EPILOG = """\
examples:
  floatlab encode 0.1                      fp64, fp32, fp16, bf16 and two fp8 formats
  floatlab encode 0.1 -f fp16              one format: a row for each rounding mode
  floatlab encode 1/3 -f bf16 --seed 7     ... and a stochastic rounding draw
  floatlab encode 500 -f e4m3 --saturate   clamp to the largest finite value, not NaN
  floatlab encode -1e-5 -f fp16,bf16 -r rtz
values are parsed exactly: decimals (0.1, -1e-5), fractions (1/3), hex floats
(0x1.8p-3), inf, -inf, nan.
"""


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("value", metavar="VALUE", help="the number: 0.1, -2.5e-3, 1/3, 0x1.8p-3, inf, nan")
    add_formats_option(
        p, f"a target format; repeat or separate by commas (default: {', '.join(DEFAULT_FORMATS)})"
    )
    p.add_argument(
        "-r",
        "--rounding",
        metavar="MODE",
        help=f"rounding mode: {', '.join(ROUNDING_MODES)} (default: rne; with one -f, every mode)",
    )
    p.add_argument("--seed", type=int, metavar="N", help="seed for stochastic rounding (adds its row)")
    add_saturation_options(p)


def _float(q: Any) -> float:
    try:
        return float(q)
    except OverflowError:  # an error beyond float64's range (inputs such as 1e400 are exact)
        return math.inf if q > 0 else -math.inf


def _row_data(enc: Encoded, fmt: FloatFormat, mode: str) -> dict[str, Any]:
    err, rel = enc.error, enc.relative_error
    return {
        **encoded_data(enc, fmt, mode),
        "error": None if err is None else _float(err),
        "error_exact": None if err is None else fraction_text(err),
        "abs_error": None if err is None else _float(abs(err)),
        "relative_error": None if rel is None else _float(abs(rel)),
        "flags": flag_names(enc.flags),
        "decoded": enc.decoded.to_dict(),
    }


def _row_cells(enc: Encoded, fmt: FloatFormat) -> list[str]:
    d = enc.decoded
    err = enc.error
    return [
        hex_code(int(enc), fmt),
        short_decimal(d.decimal, d.exact),
        sci(None if err is None else abs(Fraction(err))),
        sci(None if enc.relative_error is None else abs(Fraction(enc.relative_error))),
        ",".join(flag_names(enc.flags)) or ("exact" if err == 0 else "-"),
    ]


def encode_view(
    value: str,
    fmts: Sequence[str] | None = None,
    rounding: str | None = None,
    *,
    seed: int | None = None,
    saturate: bool = False,
    subnormals: bool = True,
    color: bool = False,
) -> View:
    """Encode ``value`` (a string, parsed exactly) into ``fmts``; one row per format, or, with one
    format and no ``rounding``, one row per deterministic mode (and stochastic with a ``seed``).

    >>> v = encode_view("0.1", ["fp16", "bf16"])
    >>> [row["hex"] for row in v.data["rows"]]
    ['0x2E66', '0x3DCD']
    """
    x = parse_number(value)
    formats = parse_formats(fmts, default=DEFAULT_FORMATS)
    mode = None if rounding is None else check_rounding(rounding)
    if mode == "stochastic" and seed is None:
        raise ValueError("rounding 'stochastic' needs --seed N: its random draw must be reproducible")

    if len(formats) == 1 and mode is None:
        modes = [m for m in ROUNDING_MODES if m != "stochastic" or seed is not None]
        jobs = [(formats[0], m) for m in modes]
    else:
        jobs = [(f, mode or "rne") for f in formats]

    rows, cells = [], []
    for f, m in jobs:
        # each stochastic row draws from a generator freshly seeded with `seed`: reproducible alone
        rng = seed if m == "stochastic" else None
        enc = encode(x, f, m, saturate=saturate, subnormals=subnormals, rng=rng)
        rows.append(_row_data(enc, f, m))
        cells.append([m if len(formats) == 1 else f.name, *_row_cells(enc, f)])

    shown = value.strip()
    exact = x if isinstance(x, Fraction) else None
    # show the exact fraction when it says something the input did not (1/3 stays 1/3)
    exact_text = None if exact is None else fraction_text(exact)
    title = (
        shown
        if exact_text is None or exact_text == shown or len(exact_text) > 40
        else f"{shown} = {exact_text}"
    )
    if len(formats) == 1:
        title += f" in {formats[0].name}"
        first = "rounding"
    else:
        title += f", {MODE_DESCRIPTIONS[mode or 'rne']}"
        first = "format"
    header = [first, "code", "value", "abs error", "rel error", "flags"]
    drawn = seed if any(m == "stochastic" for _, m in jobs) else None
    notes = rounding_notes(saturate, subnormals, drawn)
    text = with_notes(bold(title, color) + "\n" + table(header, cells, color=color), notes, color)
    data = {
        "input": shown,
        "input_exact": exact_text,
        "saturate": saturate,
        "subnormals": subnormals,
        "seed": seed,
        "rows": rows,
    }
    return View(text, data)


def run(args: argparse.Namespace, ui: UI) -> int:
    """Print the encodings of ``args.value``."""
    view = encode_view(
        args.value,
        args.fmts,
        args.rounding,
        seed=args.seed,
        saturate=args.saturate,
        subnormals=args.subnormals,
        color=ui.color,
    )
    ui.show(view)
    return 0


register = command_register(NAME, _HELP, _DESCRIPTION, _EPILOG, run, _arguments, negative_numbers=True)
