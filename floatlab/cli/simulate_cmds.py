"""``floatlab add``, ``round``, ``underflow`` and ``accumulate``: the simulators on the command line.

One module, four commands: each has its ``*_view`` function (a :class:`~floatlab.cli._common.View`
from plain arguments, used by tests and the demo) and a ``run_*`` that prints it. The library
(:mod:`floatlab.simulate`, :mod:`floatlab.rounding`) is imported inside the functions, so that
loading the command line stays light.

>>> from floatlab.cli import main
>>> main(["add", "1", "0.0001", "--json"]) == 0  # doctest: +ELLIPSIS
{...
True
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

from floatlab._signature import passing_on, spelled_out
from floatlab.cli import demo
from floatlab.cli._common import (
    UI,
    View,
    add_saturation_options,
    check_number_text,
    command_register,
    encoded_data,
    flag_names,
    fraction_text,
    rounding_notes,
    sci,
    with_notes,
)
from floatlab.exact import shown
from floatlab.formats import FloatFormat, get_format
from floatlab.io import check_outputs, read_npy, same_file, save_npy
from floatlab.rounding import MODE_DESCRIPTIONS, ROUNDING_MODES, check_rounding
from floatlab.text import SCALE_RANGE_TEXT, as_scale, bold, hex_code, parse_scale, percent, render, safe

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    from typing_extensions import Unpack

    from floatlab.cli._common import Subparsers

__all__ = [
    "MAX_TERMS",
    "NAME",
    "NAMES",
    "SimulatorOptions",
    "accumulate_view",
    "add_view",
    "register",
    "round_array_view",
    "round_value_view",
    "underflow_view",
]

NAMES: tuple[str, ...] = ("add", "round", "underflow", "accumulate")
# this module registers several commands; the command list prints their names together
NAME = ", ".join(NAMES)
MAX_TERMS = 10_000_000

_MODES_HELP = f"rounding mode: {', '.join(ROUNDING_MODES)} (default: rne)"
_FORMAT_HELP = "the format: fp16, bf16, e4m3, ... (default: fp16)"
_SEED_HELP = "seed for stochastic rounding (needed with -r stochastic)"


# ---- shared -------------------------------------------------------------------------------------
class SimulatorOptions(TypedDict, total=False):
    """The keyword options of the views of ``add``, ``round`` and ``underflow``, typed once: the
    seed of stochastic rounding, what rounding does at the ends of the range, and colour (help()
    shows them spelled out, with their defaults).

    >>> sorted(SimulatorOptions(seed=1, saturate=True))
    ['saturate', 'seed']
    """

    seed: int | None
    saturate: bool
    subnormals: bool
    color: bool


@dataclass(frozen=True, kw_only=True)
class _Options:
    """:class:`SimulatorOptions` with their defaults."""

    seed: int | None = None
    saturate: bool = False
    subnormals: bool = True
    color: bool = False

    def knobs(self, mode: str) -> dict[str, Any]:
        """The ``rng``, ``saturate`` and ``subnormals`` of the library's rounding in ``mode``."""
        return {"rng": _rng(mode, self.seed), "saturate": self.saturate, "subnormals": self.subnormals}

    def text(self, report: str, mode: str, header: str | None = None) -> str:
        """``report`` (a library report, as it is) under a bold ``header`` line, and the notes for
        these options below it.

        >>> print(_Options(saturate=True).text("report", "rne", header="g.npy"))
        g.npy:
        report
          (overflow saturates to the largest finite value)
        """
        notes = rounding_notes(self.saturate, self.subnormals, self.seed if mode == "stochastic" else None)
        top = bold(f"{safe(header)}:", self.color) + "\n" if header else ""  # (a file name: escaped)
        return top + with_notes(report, notes, self.color)


def _rounding_args(args: argparse.Namespace, ui: UI) -> SimulatorOptions:
    """The options of :func:`_rounding_options` (and the colour) as a view's keyword arguments."""
    return {"seed": args.seed, "saturate": args.saturate, "subnormals": args.subnormals, "color": ui.color}


def _format_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("-f", "--format", dest="fmt", metavar="FMT", default="fp16", help=_FORMAT_HELP)
    p.add_argument("-r", "--rounding", metavar="MODE", default="rne", help=_MODES_HELP)
    p.add_argument("--seed", type=int, metavar="N", help=_SEED_HELP)


def _rounding_options(p: argparse.ArgumentParser) -> None:
    _format_options(p)
    add_saturation_options(p)


def _rng(mode: str, seed: int | None) -> np.random.Generator | None:
    if mode != "stochastic":
        return None
    if seed is None:
        raise ValueError("rounding 'stochastic' needs --seed N: its random draws must be reproducible")
    if seed < 0:
        raise ValueError(f"--seed {seed}: expected a non-negative integer")
    import numpy as np

    return np.random.default_rng(seed)


def _is_array_file(arg: str) -> bool:
    # (a FIFO or a device is a file too, for the reader to refuse, not a number to parse)
    return arg.lower().endswith(".npy") or os.path.exists(arg)


def _load(path: str) -> npt.NDArray[Any]:
    import numpy as np

    arr = read_npy(path)
    if arr.dtype.kind not in "fiub":
        raise ValueError(
            f"{path!r} holds dtype {arr.dtype}: expected a .npy array of numbers (float, int or bool)"
        )
    result: npt.NDArray[Any] = np.asarray(arr)
    return result


# ---- add ----------------------------------------------------------------------------------------
@spelled_out(_Options)
def add_view(
    a: str, b: str, fmt: str = "fp16", rounding: str = "rne", **options: Unpack[SimulatorOptions]
) -> View:
    """``a + b`` in ``fmt``, explained (:func:`floatlab.simulate.explain_add`).

    >>> add_view("1", "0.0001").data["swallowed"]
    True
    """
    from floatlab.simulate import explain_add

    o = passing_on(_Options, **options)
    mode = check_rounding(rounding)
    e = explain_add(a, b, fmt, mode, **o.knobs(mode))
    return View(o.text(render(e), mode), e.to_dict())


def run_add(args: argparse.Namespace, ui: UI) -> int:
    """Print the explained sum."""
    ui.show(add_view(args.a, args.b, args.fmt, args.rounding, **_rounding_args(args, ui)))
    return 0


# ---- round --------------------------------------------------------------------------------------
@spelled_out(_Options)
def round_value_view(
    value: str, fmt: str = "fp16", rounding: str = "rne", **options: Unpack[SimulatorOptions]
) -> View:
    """One value (parsed exactly) rounded into ``fmt``: its code, stored value and error.

    >>> v = round_value_view("0.1")
    >>> v.data["hex"], v.data["value"]
    ('0x2E66', 0.0999755859375)
    """
    from floatlab.codec import encode, parse_value

    o = passing_on(_Options, **options)
    check_number_text(value)
    f = get_format(fmt)
    mode = check_rounding(rounding)
    enc = encode(parse_value(value), f, mode, **o.knobs(mode))
    d = enc.decoded
    err, rel = enc.error, enc.relative_error
    flags = flag_names(enc.flags)
    title = f"{value.strip()} in {f.name}, {MODE_DESCRIPTIONS[mode]}"
    lines = [bold(title, o.color), f"  stored as {hex_code(int(enc), f)} = {d.decimal}"]
    if err is not None:
        lines.append(f"  error {sci(err)} (relative {sci(rel)})" if err else "  exact: no rounding error")
    lines.append(f"  flags: {', '.join(flags) or 'none'}")
    data = {
        "input": value.strip(),
        **encoded_data(enc, f, mode),
        "error": None if err is None else fraction_text(err),
        "relative_error": None if rel is None else fraction_text(rel),
        "flags": flags,
    }
    return View(o.text("\n".join(lines), mode), data)


@spelled_out(_Options, before="out")
def round_array_view(
    path: str,
    fmt: str = "fp16",
    rounding: str = "rne",
    *,
    out: str | None = None,
    force: bool = False,
    **options: Unpack[SimulatorOptions],
) -> View:
    """Round the array in ``path`` (a .npy file) into ``fmt``; write it to ``out`` if given.

    The result keeps the input's float dtype (integers become float64). ``out`` may not be the
    input file unless ``force`` is true.
    """
    import numpy as np

    from floatlab.rounding import round_array_with_flags

    o = passing_on(_Options, **options)
    f = get_format(fmt)
    mode = check_rounding(rounding)
    if out is not None and not force and same_file(path, out):
        raise ValueError(f"-o {out!r} is the input file: expected another name (or --force to overwrite it)")
    # (with --force the output may replace the input: the new file is renamed over it only
    # once it is complete, so a failed write leaves the input as it was)
    check_outputs([("-o", out)])
    x = _load(path)
    kw = o.knobs(mode)
    if x.dtype.kind in "biu":
        from floatlab.simulate.accumulation import round_integers

        # each integer rounded once (through float64, one beyond 2^53 would be rounded twice)
        rounded, stats = round_integers(x, f, mode, **kw)
    else:
        rounded, stats = round_array_with_flags(x, f, mode, **kw)
    counts = {k: int(getattr(stats, k)) for k in ("inexact", "underflow", "overflow", "invalid")}
    hi, lo = _exact_parts(x)
    x64 = hi + lo
    r64 = np.asarray(rounded, dtype=np.float64).reshape(-1)
    ok = np.isfinite(x64) & (x64 != 0) & np.isfinite(r64)
    with np.errstate(all="ignore"):
        rel = np.abs((r64[ok] - hi[ok]) - lo[ok]) / np.abs(x64[ok])
    max_rel = float(rel.max()) if rel.size else 0.0
    if out is not None:
        save_npy(out, rounded)
    n = int(x.size)
    lines = [
        bold(
            f"{safe(path)}: {n:,} values ({x.dtype}) rounded into {f.name}, {MODE_DESCRIPTIONS[mode]}",
            o.color,
        ),
        *(f"  {k:<10}{v:>12,}  {percent(v, n)}" for k, v in counts.items()),
        f"  largest relative error {max_rel:.3g} (over {int(ok.sum()):,} finite nonzero values)",
    ]
    if out is not None:
        lines.append(f"  written to {safe(out)} ({np.asarray(rounded).dtype})")
    data = {
        "input": path,
        "format": f.name,
        "rounding": mode,
        "n": n,
        "dtype": str(x.dtype),
        **counts,
        "max_relative_error": max_rel,
        "output": out,
    }
    return View(o.text("\n".join(lines), mode), data)


def _exact_parts(x: npt.NDArray[Any]) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """``x`` (flat) as two float64 arrays that add up to it exactly: a 64-bit integer is its
    multiple of 2^11 (at most 53 significant bits) and the rest (0 to 2047); anything else is
    widened whole, the second part zero.

    >>> import numpy as np
    >>> hi, lo = _exact_parts(np.array([2**63 - 1]))
    >>> int(hi[0]) + int(lo[0]) == 2**63 - 1
    True
    """
    import numpy as np

    flat = x.reshape(-1)
    if flat.dtype.kind in "iu" and flat.dtype.itemsize == 8:
        high = (flat >> flat.dtype.type(11)) << flat.dtype.type(11)
        return high.astype(np.float64), (flat - high).astype(np.float64)
    with np.errstate(invalid="ignore"):  # widening quietens a signalling NaN: no warning for that
        return flat.astype(np.float64), np.zeros(flat.size)


def run_round(args: argparse.Namespace, ui: UI) -> int:
    """Print the rounded value, or the summary of the rounded array."""
    common = _rounding_args(args, ui)
    if _is_array_file(args.value):
        view = round_array_view(args.value, args.fmt, args.rounding, out=args.out, force=args.force, **common)
    else:
        if args.out is not None:
            raise ValueError(f"-o {args.out!r} needs an array: expected VALUE to be a .npy file")
        view = round_value_view(args.value, args.fmt, args.rounding, **common)
    ui.show(view)
    return 0


# ---- underflow ----------------------------------------------------------------------------------
@spelled_out(_Options)
def underflow_view(
    path: str,
    fmt: str = "fp16",
    rounding: str = "rne",
    *,
    scale: str | float = 1.0,
    **options: Unpack[SimulatorOptions],
) -> View:
    """Where the values of the array in ``path`` land in ``fmt`` (:func:`floatlab.simulate.underflow`)."""
    from floatlab.simulate import underflow

    o = passing_on(_Options, **options)
    mode = check_rounding(rounding)
    s = _scale(scale)
    knobs = o.knobs(mode)
    r = underflow(_load(path), fmt, scale=s, rounding=mode, **knobs)
    return View(o.text(render(r), mode, header=path), {"input": path, **r.to_dict()})


def _scale(scale: str | float) -> float:
    """A loss scale in the one scale grammar (:func:`floatlab.text.parse_scale`: ``1024``,
    ``2^10``, ``2**10``, ``0.5``, ``1/8``), or the negative of one: any finite nonzero float.

    >>> _scale("2^10"), _scale("-0.5"), _scale(3.0)
    (1024.0, -0.5, 3.0)
    """
    try:
        if isinstance(scale, str):
            text = scale.strip()
            negative = text.startswith("-")
            q = parse_scale(text[1:] if negative else text, "--scale")
        else:
            negative = scale < 0
            q = as_scale(-scale if negative else scale, "--scale")
    except (TypeError, ValueError):
        raise ValueError(
            f"--scale {shown(str(scale))}: expected a finite nonzero number such as 1024, 2^10 or 0.5, "
            f"in magnitude {SCALE_RANGE_TEXT}"
        ) from None
    return -float(q) if negative else float(q)


def run_underflow(args: argparse.Namespace, ui: UI) -> int:
    """Print the underflow report."""
    view = underflow_view(args.file, args.fmt, args.rounding, scale=args.scale, **_rounding_args(args, ui))
    ui.show(view)
    return 0


# ---- accumulate ---------------------------------------------------------------------------------
def _terms(source: str, value: str, fmt: FloatFormat) -> tuple[npt.NDArray[Any], str]:
    """The terms to sum and a phrase naming them: N copies of ``value`` or an array file (its
    integers kept as integers: the simulator rounds each once into the format)."""
    import numpy as np

    if _is_array_file(source):
        x = _load(source).reshape(-1)
        if x.dtype.kind in "biu":
            return x, source
        with np.errstate(invalid="ignore"):  # widening quietens a signalling NaN: no warning for that
            return np.asarray(x, dtype=np.float64), source
    text = source.strip().replace("_", "")
    if not (text.isascii() and text.isdigit()):
        raise ValueError(f"{source!r}: expected a count N (such as 10000) or a .npy file")
    n = int(text)
    if not 1 <= n <= MAX_TERMS:
        raise ValueError(f"N={n:,}: expected 1 to {MAX_TERMS:,} terms")
    from floatlab.codec import encode, parse_value

    # the value is stored in the format exactly as the codec rounds it (no detour through float64)
    stored = encode(parse_value(value), fmt, "rne").decoded.value
    return np.full(n, stored, dtype=np.float64), f"{n:,} x {value.strip()}"


def accumulate_view(
    source: str,
    fmt: str = "fp16",
    rounding: str = "rne",
    *,
    value: str = "1.0",
    method: str | None = None,
    accumulator: str | None = None,
    wide: str = "fp32",
    seed: int | None = None,
    color: bool = False,
) -> View:
    """Sum N copies of ``value`` (or the array in a .npy file) in ``fmt``.

    Without ``method`` and ``accumulator``: sequential, pairwise and Kahan in ``fmt`` and
    sequential with a ``wide`` accumulator side by side, then the sequential sum in detail.

    >>> v = accumulate_view("3000")
    >>> [r["sum"] for r in v.data["results"]]
    [2048.0, 3000.0, 3000.0, 3000.0]
    """
    from floatlab.simulate import accumulate, compare_accumulation
    from floatlab.text.simulate import accumulation_findings

    f = get_format(fmt)
    mode = check_rounding(rounding)
    x, what = _terms(source, value, f)
    rng = _rng(mode, seed)
    o = _Options(seed=seed, color=color)
    if method is None and accumulator is None:
        cmp = compare_accumulation(x, f, wide=wide, rounding=mode, rng=rng)
        # the sequential run's findings (the table above already shows its result)
        detail = accumulation_findings(cmp.results[0])
        text = "\n".join([render(cmp), *(["", f"  sequential in {f.name}:", *detail] if detail else [])])
        return View(o.text(text, mode, header=what), {"terms": what, **cmp.to_dict()})
    r = accumulate(x, f, accumulator=accumulator, method=method or "sequential", rounding=mode, rng=rng)
    return View(o.text(render(r), mode, header=what), {"terms": what, **r.to_dict()})


def run_accumulate(args: argparse.Namespace, ui: UI) -> int:
    """Print the accumulation report."""
    options = {k: getattr(args, k) for k in ("value", "method", "accumulator", "wide", "seed")}
    ui.show(accumulate_view(args.source, args.fmt, args.rounding, **options, color=ui.color))
    return 0


# ---- registration -------------------------------------------------------------------------------
_HELP = {
    "add": "explain a + b in a format: stored operands, exact sum, what rounding kept",
    "round": "round a value, or a .npy array, into a format",
    "underflow": "count the values of a .npy array that flush, turn subnormal or overflow in a format",
    "accumulate": "sum N copies of a value (or a .npy array) in a format: stagnation and overflow",
}
_DESCRIPTION = {
    "add": "Add A and B (parsed exactly) in a format, one rounding of the exact sum of the stored "
    "operands, and explain why a small update next to a large weight vanishes.",
    "round": "Round VALUE (parsed exactly) into a format and show the stored code, value and error; "
    "or round every value of a .npy array and summarise the flags and the largest error.",
    "underflow": "Store every value of a .npy array (times --scale, a loss scale) in a format and count "
    "the ones that flush to zero, turn subnormal, overflow or stay normal, with a histogram of the "
    "relative rounding error.",
    "accumulate": "Sum the terms in a format: sequentially, pairwise, with Kahan's compensation, and with "
    "a wider accumulator. Shows where a running sum stops changing (1.0 in fp16 stops at 2048) "
    "and where it overflows. Sequential sums are serial: up to a million terms take seconds.",
}
_EPILOG = {
    "add": """\
examples:
  floatlab add 1 0.0001                  the update is swallowed in fp16
  floatlab add 1 0.0001 -f bf16 -r rup   ... unless rounding up
  floatlab add 1 -0.0003                 a negative update: the gap below 1 is half an ulp
""",
    "round": """\
examples:
  floatlab round 0.1 -f bf16
  floatlab round grads.npy -f e4m3 --saturate -o grads_e4m3.npy
  floatlab round w.npy -f bf16 -r stochastic --seed 0 -o w_bf16.npy
""",
    "underflow": """\
examples:
  floatlab underflow grads.npy -f fp16
  floatlab underflow grads.npy -f fp16 --scale 1024     with a loss scale of 2^10
""",
    "accumulate": """\
examples:
  floatlab accumulate 10000              1.0 ten thousand times in fp16
  floatlab accumulate 1000 --value 100   past 65504 an fp16 sum is inf
  floatlab accumulate 10000 -f bf16 -r stochastic --seed 0
  floatlab accumulate losses.npy -f bf16 --method kahan
""",
}


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("a", metavar="A", help="the first operand (the weight): 1, 0.1, 1/3, 0x1.8p-3, ...")
    p.add_argument("b", metavar="B", help="the second operand (the update)")
    _rounding_options(p)


def _round_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("value", metavar="VALUE|FILE.npy", help="a number, or a .npy file of numbers")
    _rounding_options(p)
    p.add_argument("-o", "--out", metavar="OUT.npy", help="write the rounded array here (the input's dtype)")
    p.add_argument("--force", action="store_true", help="allow -o to name the input file and overwrite it")


def _underflow_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE.npy", help="a .npy file of numbers")
    _rounding_options(p)
    p.add_argument(
        "--scale",
        default="1",
        metavar="S",
        help="multiply by S first: 1024 or 2^10 (exact for powers of two)",
    )


def _accumulate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("source", metavar="N|FILE.npy", help="how many copies of --value, or a .npy file of terms")
    _format_options(p)
    p.add_argument("--value", default="1.0", metavar="V", help="the term to repeat N times (default: 1.0)")
    p.add_argument(
        "--method", choices=("sequential", "pairwise", "kahan"), help="one method only (default: compare all)"
    )
    p.add_argument("--accumulator", metavar="FMT", help="accumulate in this format (default: -f FMT itself)")
    p.add_argument(
        "--wide", default="fp32", metavar="FMT", help="the wider accumulator to compare (default: fp32)"
    )


def register(subparsers: Subparsers) -> argparse.ArgumentParser:
    """Add ``add``, ``round``, ``underflow`` and ``accumulate`` to ``subparsers``; return the last."""
    for name, run, arguments in (
        ("add", run_add, _add_arguments),
        ("round", run_round, _round_arguments),
        ("underflow", run_underflow, _underflow_arguments),
        ("accumulate", run_accumulate, _accumulate_arguments),
    ):
        texts = _HELP[name], _DESCRIPTION[name], _EPILOG[name]
        p = command_register(name, *texts, run, arguments, negative_numbers=True)(subparsers)
    return p


# ---- the tour -----------------------------------------------------------------------------------
def _demo_add(color: bool) -> View:
    return add_view("1", "0.0001", "fp16", color=color)


def _demo_accumulate(color: bool) -> View:
    return accumulate_view("3000", "fp16", color=color)


def _add_demo_sections() -> None:
    anchor = "Encoding 0.1"
    after = anchor if any(s.title.startswith(anchor) for s in demo.SECTIONS) else None
    first = demo.Section("A swallowed update: 1 + 0.0001 in fp16", _demo_add)
    demo.add_section(first, after=after)
    demo.add_section(demo.Section("Summing 1.0 in fp16 stops at 2048", _demo_accumulate), after=first.title)


_add_demo_sections()
