"""``floatlab formats [FMT]``: every registered format side by side, or one in detail.

>>> from floatlab.cli import main
>>> main(["formats", "fp16", "--json"]) == 0  # doctest: +ELLIPSIS
{
  "name": "fp16",
...
True
"""

from __future__ import annotations

import argparse
import math
from fractions import Fraction
from typing import Any

from floatlab.cli._common import UI, View, aligned, command_register
from floatlab.codec import decode, encode
from floatlab.formats import FORMATS, NAMING, FloatFormat, get_format
from floatlab.text import bold, dim, hex_code, table

__all__ = ["NAME", "block_format_view", "format_detail_view", "formats_table_view", "register", "run"]

NAME = "formats"

_HELP = "list the formats side by side, or show one in detail"
_DESCRIPTION = """\
Without FMT: a table of every registered format (layout, bias, range,
precision, special values), then the block formats (the OCP MX formats, NVFP4). With
FMT: all its properties and the codes of its landmark values (0, 1, max, smallest
normal and subnormal, inf, NaN), or a block format's element, block and scales."""
_EPILOG = """\
examples:
  floatlab formats
  floatlab formats bf16
  floatlab formats e4m3 --json
  floatlab formats nvfp4
"""

_ENCODING_WORDS = {
    "ieee": "IEEE 754 style: the top exponent holds +-inf and NaNs",
    "fn": "finite: no infinities",
    "fnuz": "finite, unsigned zero: no infinities, no -0; the code of -0 is the NaN",
}


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "fmt", nargs="?", metavar="FMT", help="a format name or alias (fp16, half, bfloat16, e4m3, ...)"
    )


def _g(x: float) -> str:
    """Compact float: whole numbers as they are, others to 4 significant digits."""
    if math.isfinite(x) and x == int(x) and x < 1e6:
        return str(int(x))
    return f"{x:.4g}"


def _encoding_words(fmt: FloatFormat) -> str:
    """The encoding in words, with P3109's infinities and an unsigned format's missing sign."""
    words = _ENCODING_WORDS[fmt.encoding]
    if fmt.extended:
        words = "P3109 extended: +-inf at the largest magnitude code, one NaN, no -0"
    elif fmt.encoding == "fnuz" and not fmt.signed:
        words = "P3109 finite: no infinities, one NaN"
    if not fmt.signed:
        words += "; unsigned: no sign bit, a negative value rounds to the NaN"
    if not fmt.has_zero:
        words += "; a scale format: powers of two, no zero"
    return words


def _nan_count(fmt: FloatFormat) -> int:
    """How many codes of ``fmt`` are NaN."""
    if not fmt.has_nan:
        return 0
    if not fmt.signed:
        return 1  # the all-ones code
    if fmt.encoding == "ieee":
        return 2 * ((1 << fmt.mantissa_bits) - 1)  # top exponent, any nonzero fraction, either sign
    # fn: all bits below the sign set, once per sign; fnuz: the code of -0 alone, so one in all
    return 2 if fmt.encoding == "fn" else 1


def _nan_word(fmt: FloatFormat) -> str:
    n = _nan_count(fmt)
    return "no" if n == 0 else "many" if fmt.encoding == "ieee" else str(n)


def _nan_detail(fmt: FloatFormat) -> str:
    n = _nan_count(fmt)
    if n == 0:
        return "no"
    if fmt.encoding == "ieee":
        return f"yes, {n:,} codes (the top exponent with a nonzero fraction, either sign)"
    nan = fmt.nan_code
    assert nan is not None
    if n == 2:
        return f"2 codes, one per sign ({hex_code(nan, fmt)} and {hex_code(nan | fmt.sign_mask, fmt)})"
    if not fmt.signed:
        return f"1 code in all ({hex_code(nan, fmt)}, all bits set)"
    return f"1 code in all ({hex_code(nan, fmt)}, the code of -0)"


def _pow2(k: int) -> str:
    return f"2^{k}"


def _exact_words(q: Fraction) -> str:
    """A value for the detail page: the float repr, and the power of two when it is one."""
    x = float(q)  # every registered landmark lies inside float64's range
    # 17 significant digits show a dyadic value exactly or nearly; "%g" drops trailing zeros
    text = str(int(x)) if x == int(x) and x < 1e17 else f"{x:.17g}"
    if q > 0 and q.numerator & (q.numerator - 1) == 0 and q.denominator & (q.denominator - 1) == 0:
        k = q.numerator.bit_length() - q.denominator.bit_length()
        text += f" = {_pow2(k)}"
    return text


def _summary(fmt: FloatFormat) -> dict[str, Any]:
    return {
        "name": fmt.name,
        "kind": "float",
        "description": fmt.description,
        "bits": fmt.bits,
        "exponent_bits": fmt.exponent_bits,
        "mantissa_bits": fmt.mantissa_bits,
        "encoding": fmt.encoding,
        "bias": fmt.bias,
        "emin": fmt.emin,
        "emax": fmt.emax,
        "smallest_subnormal": fmt.smallest_subnormal,
        "smallest_normal": fmt.smallest_normal,
        "max": fmt.max,
        "eps": fmt.eps,
        "unit_roundoff": fmt.unit_roundoff,
        "decimal_digits": fmt.decimal_digits,
        "has_inf": fmt.has_inf,
        "has_nan": fmt.has_nan,
        "nan_codes": _nan_count(fmt),
        "has_negative_zero": fmt.has_negative_zero,
    }


def formats_table_view(*, color: bool = False) -> View:
    """The side-by-side table of every registered format.

    >>> v = formats_table_view()
    >>> v.data[0]["name"], v.data[0]["max"]
    ('fp64', 1.7976931348623157e+308)
    """
    header = [
        "format",
        "bits",
        "e",
        "m",
        "bias",
        "min subnormal",
        "min normal",
        "max",
        "eps",
        "digits",
        "inf",
        "NaN",
    ]
    rows = [
        [
            f.name,
            str(f.bits),
            str(f.exponent_bits),
            str(f.mantissa_bits),
            str(f.bias),
            _g(f.smallest_subnormal),
            _g(f.smallest_normal),
            _g(f.max),
            _g(f.eps),
            str(f.decimal_digits),
            "yes" if f.has_inf else "no",
            _nan_word(f),
        ]
        for f in FORMATS.values()
    ]
    text = table(header, rows, align="<>>>>>>>>><<", color=color)
    note = (
        "  digits: decimal digits always kept\n"
        "  NaN: how many codes are NaN: 2, one per sign; 1, one in all (the code of -0, or all ones "
        "when unsigned); many (IEEE)\n\n"
        "  families: IEEE 754 (fp64 ... fp16), bfloat16, TF32, OCP fp8 (E5M2, E4M3), the FNUZ fp8 "
        "(Graphcore/AMD), fp8 E3M4, OCP MX fp6/fp4 and the E8M0 scale, IEEE P3109 (by name)\n"
        "  any other format by its name: " + NAMING + "\n"
        "  explain one: floatlab formats e6m9, floatlab formats p3109_k8p3se"
    )
    blocks_text, blocks_data = _block_formats_table(color)
    return View(
        text + "\n" + dim(note, color) + "\n\n" + blocks_text,
        [_summary(f) for f in FORMATS.values()] + blocks_data,
    )


def _block_summary(f: Any) -> dict[str, Any]:
    low, high = f.range_log2
    return {
        "name": f.name,
        "kind": "block",
        "element": f.element.name,
        "block_size": f.block_size,
        "scale": f.scale,
        "tensor_scale": f.tensor_scale,
        "bits_per_value": f.bits_per_value,
        "element_max": f.element.max,
        "range_log2": [low, high],
        "description": f.describe(),
    }


def _block_formats_table(color: bool) -> tuple[str, list[dict[str, Any]]]:
    """The block formats (MX, NVFP4) in a table of their own, and their data."""
    from floatlab.blocks import BLOCK_FORMATS

    rows = []
    for f in BLOCK_FORMATS.values():
        low, high = f.range_log2
        scale = "E4M3 + fp32 per tensor" if f.tensor_scale else "E8M0 (power of two)"
        rows.append(
            [f.name, f.element.name, str(f.block_size), scale, f"{f.bits_per_value:g}", f"2^{low}..2^{high}"]
        )
    header = ["block format", "element", "block", "scale per block", "bits/value", "range"]
    text = table(header, rows, align="<<><><", color=color)
    note = "  range: smallest subnormal to top binade with the block scales (NVFP4's times its tensor scale)"
    return text + "\n" + dim(note, color), [_block_summary(f) for f in BLOCK_FORMATS.values()]


def block_format_view(fmt: Any, *, color: bool = False) -> View:
    """One block format (an MX format or NVFP4): its element, block and scales.

    >>> v = block_format_view("nvfp4")
    >>> v.data["block_size"], v.data["scale"], v.data["bits_per_value"]
    (16, 'e4m3', 4.5)
    """
    from floatlab.blocks import get_mx_format

    f = get_mx_format(fmt)
    e = f.element
    if f.tensor_scale:
        scale = (
            "an E4M3 number per block (2^-6..448 as torchao clamps it), over one float32 scale per "
            "tensor: amax / (6 x 448)"
        )
    else:
        scale = "a power of two per block, E8M0: codes 0..254 are 2^-127..2^127, 255 is NaN"
    low, high = f.range_log2
    props = [
        ("element", f"{e.name} ({e.bits} bits, max {e.max:g}, smallest subnormal {e.smallest_subnormal:g})"),
        ("block", f"{f.block_size} values"),
        ("scale", scale),
        ("storage", f"{f.bits_per_value:g} bits per value"),
        ("range", f"2^{low} .. 2^{high}" + (" times the tensor scale" if f.tensor_scale else "")),
        ("quantize", "floatlab blockquant FILE.npy -f " + f.name),
    ]
    lines = [bold(f.describe(), color), "", *aligned(props)]
    return View("\n".join(lines), _block_summary(f))


def _landmarks(fmt: FloatFormat) -> list[tuple[str, int | None, str]]:
    """(name, code or None, note) for 0, 1, max, smallest normal/subnormal, inf and NaN."""
    marks: list[tuple[str, int | None, str]] = [
        ("zero", 0, "") if fmt.has_zero else ("zero", None, "none: a scale format"),
        ("one", int(encode(1.0, fmt)), ""),
        ("max", fmt.max_code, ""),
        ("smallest normal", 1 << fmt.mantissa_bits if fmt.has_zero else 0, ""),
    ]
    if not fmt.has_zero:
        marks.append(("smallest subnormal", None, "none: no subnormals"))
    elif fmt.mantissa_bits > 0:
        marks.append(("smallest subnormal", 1, ""))
    else:
        marks.append(("smallest subnormal", None, "none: no fraction bits"))
    if fmt.has_inf:
        marks.append(("+inf", fmt.inf_code, ""))
    else:
        marks.append(
            ("+inf", None, "none: overflow gives NaN or saturates" if fmt.has_nan else "none: saturates")
        )
    nan = fmt.nan_code
    marks.append(("NaN", nan, "" if nan is not None else "none: every code is a number"))
    return marks


def format_detail_view(fmt: FloatFormat | str, *, color: bool = False) -> View:
    """All properties of one format and the codes of its landmark values.

    >>> v = format_detail_view("bf16")
    >>> v.data["bias"], v.data["codes"]["one"]["hex"]
    (127, '0x3F80')
    """
    f = get_format(fmt)
    lines = [bold(f"{f.name}: {f.description}" if f.description else f.name, color), ""]
    props = [
        (
            "layout",
            f"{'1 sign + ' if f.signed else 'no sign + '}{f.exponent_bits} exponent + {f.mantissa_bits} "
            f"fraction bits = {f.bits} bits",
        ),
        ("encoding", f"{f.encoding} ({_encoding_words(f)})"),
        ("bias", str(f.bias)),
        ("exponents", f"emin {f.emin}, emax {f.emax}"),
        (
            "precision",
            f"{f.precision} bits ({f.mantissa_bits} stored + 1 implicit), {f.decimal_digits} decimal digits",
        ),
        ("eps", _exact_words(Fraction(2) ** -f.mantissa_bits)),
        ("unit roundoff", _exact_words(Fraction(2) ** (-f.mantissa_bits - 1))),
        ("max", _exact_words(f.max_exact)),
        ("smallest normal", _exact_words(f.smallest_normal_exact)),
        ("smallest subnormal", _exact_words(f.smallest_subnormal_exact) if f.mantissa_bits else "none"),
        ("dynamic range", f"{f.dynamic_range_log2} binades"),
        ("infinities", "yes" if f.has_inf else "no"),
        ("NaN", _nan_detail(f)),
        ("negative zero", "yes" if f.has_negative_zero else "no"),
    ]
    lines += aligned(props)
    lines.append("")

    rows: list[list[str]] = []
    codes: dict[str, dict[str, Any] | None] = {}
    for name, code, note in _landmarks(f):
        if code is None:
            rows.append([name, "-", "", note])
            codes[name] = None
            continue
        d = decode(code, f)
        bits = " ".join(b for b in (d.sign_bits, d.exponent_bits, d.fraction_bits) if b)
        rows.append([name, hex_code(code, f), bits, d.decimal if len(d.decimal) <= 24 else repr(d.value)])
        codes[name] = {"code": code, "hex": hex_code(code, f), "bits": bits, "value": d.value}
    lines.append(table(["value", "code", "sign exponent fraction", "is"], rows, color=color))
    data = _summary(f)
    data.update(
        precision=f.precision,
        dynamic_range_log2=f.dynamic_range_log2,
        max_exact=str(f.max_exact),
        smallest_normal_exact=str(f.smallest_normal_exact),
        smallest_subnormal_exact=str(f.smallest_subnormal_exact),
        codes=codes,
    )
    return View("\n".join(lines), data)


def run(args: argparse.Namespace, ui: UI) -> int:
    """Print the formats table, or the detail of ``args.fmt``."""
    from floatlab.blocks import BLOCK_FORMATS

    if args.fmt is None:
        ui.show(formats_table_view(color=ui.color))
    elif BLOCK_FORMATS.find(args.fmt) is not None:
        ui.show(block_format_view(args.fmt, color=ui.color))
    else:
        ui.show(format_detail_view(args.fmt, color=ui.color))
    return 0


register = command_register(NAME, _HELP, _DESCRIPTION, _EPILOG, run, _arguments)
