"""Shared pieces of the command line: the output object, colour choice, numbers and argument parsing.

Every command builds a :class:`View` (the terminal text and the JSON-ready data of one answer)
and hands it to :meth:`UI.show`, which prints one or the other. Commands that stream (a long
benchmark, say) may call :meth:`UI.write` several times instead.

>>> ui = UI(color=False, json=True)
>>> ui.dumps({"x": float("inf"), "q": Fraction(1, 3)})
'{\\n  "x": "inf",\\n  "q": "1/3"\\n}'
"""

from __future__ import annotations

import argparse
import decimal
import json
import math
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

from floatlab.exact import int_str, parse_value, shown
from floatlab.formats import FORMATS, FloatFormat, get_format
from floatlab.text import dim, hex_code

if TYPE_CHECKING:
    from floatlab.codec import Encoded
    from floatlab.rounding import Flags

    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]

__all__ = [
    "DEFAULT_FORMAT_BY_WIDTH",
    "UI",
    "View",
    "add_command",
    "add_common_options",
    "add_formats_option",
    "add_max_bytes_option",
    "add_saturation_options",
    "aligned",
    "check_number_text",
    "checked_number",
    "comma_names",
    "command_register",
    "encoded_data",
    "flag_names",
    "fraction_text",
    "parse_code",
    "parse_formats",
    "parse_number",
    "parse_size",
    "parse_sizes",
    "rounding_notes",
    "sci",
    "short_decimal",
    "want_color",
    "with_notes",
]


def want_color(
    flag: bool | None, stream: TextIO | None = None, environ: Mapping[str, str] | None = None
) -> bool:
    """Whether to colour the output: the explicit ``--color``/``--no-color`` flag wins; otherwise
    colour only when ``stream`` is a terminal and ``NO_COLOR`` is unset (or empty, as no-color.org
    asks).

    >>> import io
    >>> want_color(None, io.StringIO()), want_color(True, io.StringIO()), want_color(False)
    (False, True, False)
    """
    if flag is not None:
        return flag
    env = os.environ if environ is None else environ
    if env.get("NO_COLOR", ""):
        return False
    out = sys.stdout if stream is None else stream
    try:
        return out.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream is no terminal
        return False


def fraction_text(q: Fraction | int) -> str:
    """``str(q)`` without Python's 4300-digit limit on int-to-str conversion (an exact input such
    as 1e-99999 has a denominator of 100,000 digits).

    >>> fraction_text(Fraction(-1, 3)), len(fraction_text(Fraction(1, 10**5000)))
    ('-1/3', 5003)
    """
    q = Fraction(q)
    numerator = int_str(q.numerator)
    return numerator if q.denominator == 1 else f"{numerator}/{int_str(q.denominator)}"


# ---- output -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class View:
    """One answer of a command: ``text`` for the terminal, ``data`` for ``--json``.

    >>> View("65504", {"value": 65504.0}).text
    '65504'
    """

    text: str
    data: Any = field(default=None)


def _jsonable(obj: Any) -> Any:
    """Make ``obj`` strict JSON: non-finite floats and Fractions become strings."""
    if isinstance(obj, bool) or obj is None or isinstance(obj, (int, str)):
        return obj
    if isinstance(obj, float):
        # strict JSON has no inf/nan literals; their names keep the meaning
        return obj if math.isfinite(obj) else ("nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf"))
    if isinstance(obj, Fraction):
        return fraction_text(obj)
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if hasattr(obj, "item"):  # numpy scalars
        return _jsonable(obj.item())
    raise ValueError(f"cannot write {type(obj).__name__} value {obj!r} as JSON")


@dataclass
class UI:
    """Where and how a command prints: colour on or off, text or JSON, and the stream.

    >>> import io
    >>> buf = io.StringIO()
    >>> UI(json=False, stream=buf).show(View("hello", {"greeting": "hello"}))
    >>> buf.getvalue()
    'hello\\n'
    """

    color: bool = False
    json: bool = False
    stream: TextIO | None = None

    @property
    def out(self) -> TextIO:
        """The output stream (``sys.stdout`` at the time of the call unless one was given); a
        ValueError when standard output is closed (Python's ``sys.stdout`` is None then)."""
        out = sys.stdout if self.stream is None else self.stream
        if out is None:
            raise ValueError("standard output is closed: the answer could not be written")
        return out

    def write(self, text: str) -> None:
        """Print ``text`` and a newline."""
        self.out.write(text + "\n")

    def dumps(self, data: Any) -> str:
        """``data`` as indented strict JSON."""
        return json.dumps(_jsonable(data), indent=2, allow_nan=False)

    def show(self, view: View) -> None:
        """Print the view: its JSON data with ``--json``, its text otherwise."""
        self.write(self.dumps(view.data) if self.json else view.text)
        self.out.flush()


def aligned(props: Sequence[tuple[str, str]]) -> list[str]:
    """``props`` (name, value) as indented lines, the values in one column.

    >>> aligned([("bias", "15"), ("max", "65504")])
    ['  bias  15', '  max   65504']
    """
    width = max(len(k) for k, _ in props)
    return [f"  {k.ljust(width)}  {v}" for k, v in props]


def with_notes(text: str, notes: Sequence[str], color: bool) -> str:
    """``text`` and, when there are any, the ``notes`` dimmed in parentheses on a line below.

    >>> with_notes("report", ["ftz", "seed 1"], False), with_notes("report", [], False)
    ('report\\n  (ftz; seed 1)', 'report')
    """
    return text + ("\n" + dim("  (" + "; ".join(notes) + ")", color) if notes else "")


# a negative number in any notation the value parser takes (-1e-5, -.5, -inf, -Infinity, -NaN,
# -0x1p-3) is an argument, not an option
_NEGATIVE_VALUE = re.compile(r"^-(\d|\.\d|inf|nan|0x|0b)", re.IGNORECASE)


def add_command(
    subparsers: Subparsers,
    name: str,
    *,
    help: str,
    description: str,
    epilog: str | None = None,
    run: Callable[[argparse.Namespace, UI], int] | None = None,
    output_options: bool = False,
    negative_numbers: bool = False,
) -> argparse.ArgumentParser:
    """Add the command ``name``: ``help`` in the command list, ``description`` and the examples of
    ``epilog`` printed as written, ``run`` the function that runs it; ``output_options`` adds
    ``--json`` and ``--color``/``--no-color``; with ``negative_numbers``, arguments such as
    ``-1e-5`` or ``-inf`` are values, not options.

    >>> p = argparse.ArgumentParser()
    >>> sub = add_command(p.add_subparsers(), "x", help="h", description="d", negative_numbers=True)
    >>> sub.add_argument("value") and None
    >>> sub.parse_args(["-Infinity"]).value
    '-Infinity'
    """
    p = subparsers.add_parser(
        name,
        help=help,
        description=description,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    if negative_numbers:
        p._negative_number_matcher = _NEGATIVE_VALUE  # argparse would take "-1e-5" for an option
    if output_options:
        add_common_options(p)
    if run is not None:
        p.set_defaults(run=run)
    return p


def command_register(
    name: str,
    help: str,
    description: str,
    epilog: str | None,
    run: Callable[[argparse.Namespace, UI], int],
    arguments: Callable[[argparse.ArgumentParser], None] | None = None,
    *,
    negative_numbers: bool = False,
) -> Callable[[Subparsers], argparse.ArgumentParser]:
    """The ``register(subparsers)`` of a command module (see :mod:`floatlab.cli`) whose command
    prints one answer: it adds the command ``name`` with :func:`add_command` (with ``--json`` and
    ``--color``/``--no-color``, ``run`` its default), then its ``arguments``, and returns its parser.

    >>> def arguments(p: argparse.ArgumentParser) -> None:
    ...     p.add_argument("n")
    >>> register = command_register("x", "h", "d", None, lambda args, ui: 0, arguments)
    >>> args = register(argparse.ArgumentParser().add_subparsers()).parse_args(["7", "--json"])
    >>> args.n, args.json, register.__doc__
    ('7', True, 'Add the ``x`` command to ``subparsers``.')
    """

    def register(subparsers: Subparsers) -> argparse.ArgumentParser:
        p = add_command(
            subparsers,
            name,
            help=help,
            description=description,
            epilog=epilog,
            run=run,
            output_options=True,
            negative_numbers=negative_numbers,
        )
        if arguments is not None:
            arguments(p)
        return p

    register.__doc__ = f"Add the ``{name}`` command to ``subparsers``."
    return register


def add_common_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--json`` and ``--color``/``--no-color`` to ``parser``.

    The defaults are suppressed so that the options may stand before or after the command
    name without the subcommand's defaults overwriting what was given before it.

    >>> p = argparse.ArgumentParser()
    >>> add_common_options(p)
    >>> vars(p.parse_args(["--json", "--no-color"]))
    {'json': True, 'color': False}
    """
    group = parser.add_argument_group("output")
    group.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print JSON instead of text"
    )
    add_color_options(group)


def add_color_options(group: argparse._ArgumentGroup) -> None:
    """Add ``--color``/``--no-color`` (defaults suppressed, as in :func:`add_common_options`).

    >>> p = argparse.ArgumentParser()
    >>> add_color_options(p.add_argument_group("output"))
    >>> vars(p.parse_args(["--color"]))
    {'color': True}
    """
    for flag, action, text in (
        ("--color", "store_true", "colour the output even when it is not a terminal"),
        ("--no-color", "store_false", "never colour (also: set NO_COLOR); default: colour on a terminal"),
    ):
        group.add_argument(flag, dest="color", action=action, default=argparse.SUPPRESS, help=text)


def add_formats_option(parser: argparse.ArgumentParser, help: str, dest: str = "fmts") -> None:
    """Add ``-f``/``--format FMT`` into ``dest``: formats named in repeated options, each possibly
    a comma-separated list (as :func:`parse_formats` reads them).

    >>> p = argparse.ArgumentParser(); add_formats_option(p, "the formats")
    >>> p.parse_args(["-f", "fp16,bf16", "--format", "e4m3"]).fmts
    ['fp16,bf16', 'e4m3']
    """
    parser.add_argument("-f", "--format", dest=dest, metavar="FMT", action="append", help=help)


def add_saturation_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--saturate`` and ``--no-subnormals`` (dest ``subnormals``): what rounding does at the
    ends of a format's range.

    >>> p = argparse.ArgumentParser(); add_saturation_options(p)
    >>> vars(p.parse_args(["--no-subnormals"]))
    {'saturate': False, 'subnormals': False}
    """
    parser.add_argument("--saturate", action="store_true", help="overflow to the largest finite value")
    parser.add_argument(
        "--no-subnormals", dest="subnormals", action="store_false", help="flush subnormals to zero"
    )


_N = TypeVar("_N", int, float)


def checked_number(text: str, convert: Callable[[str], _N], ok: Callable[[_N], bool], error: str) -> _N:
    """``convert(text)`` when it converts and passes ``ok`` (NaN passes no check); an argparse
    error saying ``error`` otherwise.

    >>> checked_number("8", int, lambda n: n >= 1, "'8': expected N >= 1")
    8
    >>> checked_number("nan", float, lambda v: v >= 0, "'nan': expected a number >= 0")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: 'nan': expected a number >= 0
    """
    try:
        value = convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(error) from None
    if value != value or not ok(value):  # (NaN; an int too wide for a float is compared as it is)
        raise argparse.ArgumentTypeError(error)
    return value


def parse_sizes(text: str, expected: str) -> tuple[int, ...]:
    """Positive sizes separated by commas or ``x`` (``128,128``, ``8x8``); an argparse error
    saying ``expected`` (such as "layer sizes such as 128,128") otherwise.

    >>> parse_sizes("128,64", "sizes such as 8,8"), parse_sizes("8x8", "sizes such as 8,8")
    ((128, 64), (8, 8))
    >>> parse_sizes("0", "sizes such as 8,8")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: '0': expected positive sizes such as 8,8
    """
    try:
        sizes = tuple(int(s) for s in text.replace("x", ",").split(",") if s.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected {expected}") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected positive {expected}")
    return sizes


def comma_names(
    items: Sequence[str] | None, what: str, expected: str = "names separated by commas"
) -> list[str]:
    """The names of repeated options, each possibly a comma-separated list; a ValueError naming
    ``what`` (a format name, a scale mode) when one is empty.

    >>> comma_names(["fp16,bf16", "e4m3"], "format name"), comma_names(None, "format name")
    (['fp16', 'bf16', 'e4m3'], [])
    >>> comma_names(["floor,"], "scale mode")
    Traceback (most recent call last):
    ...
    ValueError: empty scale mode in 'floor,': expected names separated by commas
    """
    names = [n.strip() for item in items or () for n in item.split(",")]
    if any(not n for n in names):
        raise ValueError(f"empty {what} in {', '.join(items or ())!r}: expected {expected}")
    return names


# ---- sizes ---------------------------------------------------------------------------------------
_SIZE = re.compile(r"(\d{1,15})\s*(|b|k|kb|kib|m|mb|mib|g|gb|gib|t|tb|tib)", re.IGNORECASE | re.ASCII)
_UNITS = {"": 0, "k": 10, "m": 20, "g": 30, "t": 40}


def parse_size(text: str) -> int:
    """A byte count as typed: ``1000000``, ``64MiB``, ``2G`` (units are powers of 1024).

    >>> parse_size("4096"), parse_size("64MiB"), parse_size("2g")
    (4096, 67108864, 2147483648)
    """
    m = _SIZE.fullmatch(text.strip())
    if m is None or int(m.group(1)) == 0:
        raise argparse.ArgumentTypeError(
            f"{text[:40]!r}: expected a positive number of bytes such as 1000000, 512MiB or 4GiB"
        )
    return int(m.group(1)) << _UNITS[m.group(2)[:1].lower()]


def add_max_bytes_option(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """Add ``--max-bytes N``: the most an input archive (.npz, a checkpoint, a torch .pt file) may
    inflate or expand to.

    >>> p = argparse.ArgumentParser(); add_max_bytes_option(p)
    >>> p.parse_args([]).max_bytes, p.parse_args(["--max-bytes", "4GiB"]).max_bytes
    (1073741824, 4294967296)
    """
    from floatlab.io import MAX_BYTES

    parser.add_argument(
        "--max-bytes",
        type=parse_size,
        default=MAX_BYTES,
        metavar="N",
        help="the most an input archive (.npz, .pt) may inflate or expand to; refused beyond (default 1GiB)",
    )


# ---- numbers ------------------------------------------------------------------------------------
def _to_decimal(q: Fraction | int | float, digits: int) -> decimal.Decimal:
    """``q`` rounded half-even to ``digits`` significant decimal digits, exactly, in integer
    arithmetic: 2^-1074, 2^1024 and 10^100000 keep their scale (float(q) would underflow or
    overflow), and a 300,000-bit numerator costs a few big-int products, not a Decimal division."""
    q = Fraction(q)
    if q == 0:
        return decimal.Decimal(0)
    n, d = abs(q.numerator), q.denominator
    # k estimates floor(log10(q)) from the bit lengths (off by at most one); the loop settles it
    k = math.floor((n.bit_length() - d.bit_length()) * math.log10(2))
    while True:
        shift = digits - 1 - k  # the coefficient is q * 10^shift, in [10^(digits-1), 10^digits)
        num, den = (n * 10**shift, d) if shift >= 0 else (n, d * 10**-shift)
        c, r = divmod(num, den)
        if c >= 10**digits:
            k += 1
        elif c < 10 ** (digits - 1):
            k -= 1
        else:
            break
    if 2 * r > den or (2 * r == den and c % 2 == 1):
        c += 1
        if c == 10**digits:  # 9.99... rounded up to 10.0
            c, k = c // 10, k + 1
    return decimal.Decimal(f"{'-' if q < 0 else ''}{c}e{k - digits + 1}")


def sci(q: Fraction | int | float | None, digits: int = 3) -> str:
    """``q`` in scientific notation with ``digits`` significant digits, computed exactly
    (no float overflow or underflow); "-" for None.

    >>> sci(Fraction(1, 3)), sci(Fraction(1, 2**1100)), sci(0), sci(None)
    ('3.33e-01', '7.36e-332', '0', '-')
    """
    if q is None:
        return "-"
    if isinstance(q, float) and not math.isfinite(q):
        return str(q)
    if q == 0:
        return "0"
    d = _to_decimal(q, digits)
    mant, _, exp = f"{d:.{digits - 1}e}".partition("e")
    return f"{mant}e{int(exp):+03d}"


def short_decimal(exact: str, q: Fraction | None, width: int = 28) -> str:
    """The exact decimal string when it fits in ``width`` characters, else ``q`` rounded to 20
    significant digits and marked with "...".

    >>> short_decimal("0.0999755859375", Fraction(1638, 16384))
    '0.0999755859375'
    >>> short_decimal("0.1000000000000000055511151231257827021181583404541015625",
    ...               Fraction(3602879701896397, 2**55))
    '0.10000000000000000555...'
    """
    if len(exact) <= width or q is None:
        return exact
    d = _to_decimal(q, 20)
    text = f"{d:f}" if d == 0 or 1e-6 <= abs(d) < 1e21 else f"{d:e}"
    return text + "..."


# ---- encoded values -----------------------------------------------------------------------------
def encoded_data(enc: Encoded, fmt: FloatFormat, mode: str) -> dict[str, Any]:
    """The JSON fields every command gives for a stored value: format, rounding, code, hex,
    value and exact decimal.

    >>> from floatlab.codec import encode
    >>> encoded_data(encode(0.1, "fp16"), get_format("fp16"), "rne")["hex"]
    '0x2E66'
    """
    d = enc.decoded
    return {
        "format": fmt.name,
        "rounding": mode,
        "code": int(enc),
        "hex": hex_code(int(enc), fmt),
        "value": d.value,
        "exact": d.decimal,
    }


def check_number_text(value: object) -> None:
    """Refuse an empty (or non-string) value before any other check of the command's input."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"empty value {value!r}: expected a number such as 0.1, 1/3 or 0x1.8p-3")


def parse_number(value: str) -> float | Fraction:
    """``value`` as typed, parsed exactly (:func:`floatlab.exact.parse_value`); an empty one is
    refused with what a number looks like.

    >>> parse_number("0.1")
    Fraction(1, 10)
    """
    check_number_text(value)
    return parse_value(value)


def rounding_notes(saturate: bool, subnormals: bool, seed: int | None) -> list[str]:
    """The notes under a report for the rounding options that change it; ``seed`` is the seed
    of the stochastic rounding drawn, None when none was.

    >>> rounding_notes(True, False, 3)  # doctest: +NORMALIZE_WHITESPACE
    ['overflow saturates to the largest finite value', 'subnormal results flush to zero',
     'stochastic rounding drawn with seed 3']
    """
    notes = []
    if saturate:
        notes.append("overflow saturates to the largest finite value")
    if not subnormals:
        notes.append("subnormal results flush to zero")
    if seed is not None:
        notes.append(f"stochastic rounding drawn with seed {seed}")
    return notes


def flag_names(flags: Flags) -> list[str]:
    """The names of the IEEE flags raised, lower case.

    >>> from floatlab.rounding import Flags
    >>> flag_names(Flags.INEXACT | Flags.UNDERFLOW)
    ['inexact', 'underflow']
    """
    return [str(f.name).lower() for f in type(flags) if f and f in flags]


# ---- codes --------------------------------------------------------------------------------------
DEFAULT_FORMAT_BY_WIDTH: dict[int, str] = {16: "fp16", 32: "fp32", 64: "fp64"}
_EXPECTED = "expected hex (0x7BFF), binary (0b0111101111111111) or, with -f FMT, a decimal integer"


_MAX_CODE_DIGITS = 1000  # the digits of a code (a 64-bit format's code has at most 64)


def _candidates(width: int, hex_digits: bool) -> list[str]:
    def fits(f: FloatFormat) -> bool:
        return (f.bits + 3) // 4 * 4 == width if hex_digits else f.bits == width

    return [f.name for f in FORMATS.values() if fits(f)]


def parse_code(text: str, fmt: FloatFormat | str | None = None) -> tuple[int, FloatFormat]:
    """Parse a code written as hex, binary or (with a format) decimal; return (code, format).

    Without a format the width of the literal chooses one: 4 hex digits or 16 bits are fp16,
    8 hex digits or 32 bits fp32, 16 hex digits or 64 bits fp64. Other widths (2 hex digits
    could be any 8-bit format) need the format named.

    >>> parse_code("0x7bff")[0], parse_code("0x7bff")[1].name
    (31743, 'fp16')
    >>> parse_code("0b0_01111_0000000000")[1].name
    'fp16'
    >>> parse_code("56", "e4m3")[0]
    56
    >>> parse_code("0x38")
    Traceback (most recent call last):
    ...
    ValueError: code '0x38' has 2 hex digits (8 bits): that could be float8_e5m2, float8_e4m3fn, \
float8_e4m3fnuz, float8_e5m2fnuz, float8_e3m4, float8_e8m0fnu, float6_e2m3fn, float6_e3m2fn; name the \
format with -f FMT
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"empty code {text!r}: {_EXPECTED}")
    body = text.strip().replace("_", "")
    low = body.lower()
    if low.startswith("0x"):
        digits, base, bits_per_digit, charset = low[2:], 16, 4, "0123456789abcdef"
    elif low.startswith("0b"):
        digits, base, bits_per_digit, charset = low[2:], 2, 1, "01"
    else:
        digits, base, bits_per_digit, charset = low, 10, 0, "0123456789"
    if not digits or any(ch not in charset for ch in digits) or text.strip().endswith("_"):
        raise ValueError(f"not a code: {shown(text)}: {_EXPECTED}")
    if len(digits) > _MAX_CODE_DIGITS:
        # (int() refuses decimal strings over 4300 digits; no format has codes that wide)
        raise ValueError(
            f"code {shown(text.strip())} has {len(digits):,} digits: too wide for any format "
            f"(expected at most {_MAX_CODE_DIGITS:,})"
        )
    code = int(digits, base)
    if fmt is not None:
        f = get_format(fmt)
    elif base == 10:
        raise ValueError(
            f"decimal code {shown(text)} needs its format: add -f FMT, or write it in hex ({code:#x}) "
            "so that its width tells the format"
        )
    else:
        width = len(digits) * bits_per_digit
        name = DEFAULT_FORMAT_BY_WIDTH.get(width)
        if name is None:
            unit = f"{len(digits)} hex digits" if base == 16 else f"{len(digits)} binary digits"
            cands = _candidates(width, base == 16)
            what = f"that could be {', '.join(cands)}" if cands else "no format has that width"
            raise ValueError(
                f"code {shown(text)} has {unit} ({width} bits): {what}; name the format with -f FMT"
                if cands
                else f"code {shown(text)} has {unit} ({width} bits): {what}; expected 4, 8 or 16 hex digits "
                "(fp16, fp32, fp64) or 16, 32 or 64 binary digits, or name the format with -f FMT"
            )
        f = get_format(name)
    if code > f.code_mask:
        raise ValueError(
            f"code {shown(text)} is too wide for {f.name}: "
            f"expected {f.bits} bits, 0 to {hex_code(f.code_mask, f)}"
        )
    return code, f


def parse_formats(items: Sequence[str] | None, default: Sequence[str] = ()) -> list[FloatFormat]:
    """The formats named by repeated ``-f`` options, each possibly a comma-separated list;
    ``default`` when none was given.

    >>> [f.name for f in parse_formats(["fp16,bf16", "e4m3"])]
    ['fp16', 'bf16', 'float8_e4m3fn']
    >>> [f.name for f in parse_formats(None, default=["fp32"])]
    ['fp32']
    """
    names = comma_names(items, "format name", "names such as fp16,bf16") if items else default
    return [get_format(n) for n in names]
