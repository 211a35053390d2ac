"""The text of the experiments of :mod:`floatlab.simulate`: a tensor stored in a format
(:class:`~floatlab.simulate.UnderflowResult`), swallowed updates
(:class:`~floatlab.simulate.SwallowResult`), one addition explained
(:class:`~floatlab.simulate.AddExplanation`) and sums (:class:`~floatlab.simulate.AccumulationResult`,
:class:`~floatlab.simulate.AccumulationComparison`): the views :func:`floatlab.text.render`
finds in :data:`TEXT`.

>>> from floatlab.text import render
>>> import numpy as np
>>> from floatlab.simulate import accumulate, swallowed_updates
>>> print(render(swallowed_updates([1.0, 1.0], [1e-4, 1e-2], "fp16")).splitlines()[1])
  2 nonzero updates: 1 lost (50%)
>>> accumulation_note(accumulate(np.ones(3000), "fp16"))
'stops changing at term 2,048'
"""

from __future__ import annotations

import math
from collections.abc import Callable

from floatlab.rounding import MODE_DESCRIPTIONS
from floatlab.simulate.accumulation import AccumulationComparison, AccumulationResult
from floatlab.simulate.storage import UnderflowResult
from floatlab.simulate.updates import AddExplanation, SwallowResult
from floatlab.text import percent, table

__all__ = ["accumulation_findings", "accumulation_note"]


def _g(x: float) -> str:
    return f"{x:.10g}"


def _bars(bins: list[tuple[str, int]], top: int) -> str:
    """One row per bin: its label, its count and a bar of up to 30 characters."""
    rows = [[label, f"{c:,}", "#" * max(1, round(30 * c / top)) if c else ""] for label, c in bins]
    return table(None, rows, align="<>", indent=4, widths=(0, 12))


def _underflow_text(r: UnderflowResult) -> str:
    """A table of the classes and a histogram of the relative error.

    >>> from floatlab.text import render
    >>> from floatlab.simulate import underflow
    >>> print(render(underflow([1.0, 1e-5, 1e-8, 7e4], "fp16")).splitlines()[2])
        normal                  1      25%
    """
    f = r.fmt
    scale = "" if r.scale == 1.0 else f" (scaled by {r.scale:g})"
    lines = [
        f"{r.n:,} values into {f.name}{scale}, {MODE_DESCRIPTIONS[r.rounding]}",
        f"  {r.n_nonzero:,} nonzero finite inputs:",
    ]
    p = f.precision
    sub_note = ""
    if r.n_subnormal:
        sub_note = f"keep {p - r.mean_bits_lost:.3g} of {p} significant bits on average"
    over_note = ""
    if r.n_overflow:
        clamped = r.n_overflow - r.n_overflow_nonfinite
        dest = "inf" if f.has_inf else "NaN"
        parts = [f"{r.n_overflow_nonfinite:,} to {dest}"] if r.n_overflow_nonfinite else []
        parts += [f"{clamped:,} clamped to the largest finite value"] if clamped else []
        over_note = ", ".join(parts)
    classes = [
        ("normal", r.n_normal, ""),
        ("subnormal", r.n_subnormal, sub_note),
        ("flushed to 0", r.n_flushed, ""),
        ("overflow", r.n_overflow, over_note),
    ]
    rows = [[name, f"{count:,}", percent(r.share(count)), note] for name, count, note in classes]
    lines.append(table(None, rows, align="<>>", indent=4, widths=(12, 11, 7)))
    extra = []
    if r.n_zero_input:
        extra.append(f"{r.n_zero_input:,} zero inputs")
    if r.n_nonfinite_input:
        extra.append(f"{r.n_nonfinite_input:,} inf/NaN inputs")
    if extra:
        lines.append("  (" + ", ".join(extra) + " not counted)")
    n_err = r.n_exact + sum(r.error_counts)
    if n_err:
        lines.append(f"  relative error of the {n_err:,} finite nonzero results (log2 bins):")
        bins = [("exact", r.n_exact)] if r.n_exact else []
        bins += [(f"[2^{k}, 2^{k + 1})", c) for k, c in zip(r.error_exponents, r.error_counts, strict=True)]
        lines.append(_bars(bins, max([r.n_exact, *r.error_counts])))
        lines.append(f"  largest relative error {r.max_relative_error:.3g}")
    return "\n".join(lines)


def _swallow_text(r: SwallowResult) -> str:
    lines = [
        f"w + u in {r.fmt.name}, {MODE_DESCRIPTIONS[r.rounding]}",
        f"  {r.n_updates:,} nonzero updates: {r.n_lost:,} lost ({percent(r.share_lost)})",
    ]
    if r.n_underflowed:
        were = "was" if r.n_underflowed == 1 else "were"
        lines.append(f"  {r.n_underflowed:,} of them {were} already zero once stored in {r.fmt.name}")
    if r.rounding in ("rne", "rna"):
        k = r.threshold_ratio
        lines.append(
            f"  an update more than {2 * k:,} times smaller than its weight is always lost; "
            f"one less than {k:,} times smaller never is (normal weights)"
        )
    return "\n".join(lines)


def _explanation_text(e: AddExplanation) -> str:
    """The explanation's lines, indented.

    >>> from floatlab.text import render
    >>> from floatlab.simulate import explain_add
    >>> print(render(explain_add("1", "0.0001", "fp16")).splitlines()[0])
      1 + 0.0001 in fp16, round to nearest, ties to even
    """
    return "\n".join("  " + line for line in e.lines)


def accumulation_note(r: AccumulationResult) -> str:
    """One phrase on what went wrong with a sum (stagnation, overflow), or "".

    >>> import numpy as np
    >>> from floatlab.simulate import accumulate
    >>> accumulation_note(accumulate(np.full(10, 3e4), "fp16"))
    'overflows at term 2'
    """
    if r.overflow_index is not None:
        return f"overflows at term {r.overflow_index:,}"
    if r.stagnation_index is not None:
        return f"stops changing at term {r.stagnation_index:,}"
    if r.method == "kahan" and math.isnan(r.sum) and math.isinf(r.special_sum):
        return "NaN: the correction computes inf - inf"
    return ""


def accumulation_findings(r: AccumulationResult) -> list[str]:
    """The lines of a sum's text that explain what happened to the running sum (where it
    overflowed, where it stopped changing, how many terms it swallowed), or none.

    >>> import numpy as np
    >>> from floatlab.simulate import accumulate
    >>> accumulation_findings(accumulate(np.ones(3000), "fp16"))[0].split(":")[0]
    '  the running sum stopped changing at term 2,048 (at 2048)'
    """
    lines: list[str] = []
    if r.overflow_index is not None:
        exact = ""
        if r.overflow_exact is not None:
            exact = f" (exact running sum {_g(float(r.overflow_exact))})"
        lines.append(
            f"  the running sum became {_g(r.trajectory_value(r.overflow_index))} at term "
            f"{r.overflow_index:,}{exact}: {r.accumulator.name} holds nothing beyond {r.accumulator.max:g}"
        )
    if r.stagnation_index is not None and r.stagnation_value is not None:
        later = r.n - r.stagnation_index
        lines.append(
            f"  the running sum stopped changing at term {r.stagnation_index:,} (at "
            f"{_g(r.stagnation_value)}): the {later:,} terms from there on were swallowed"
        )
    if r.n_swallowed:
        lines.append(f"  {r.n_swallowed:,} nonzero terms left the running sum unchanged")
    return lines


def _accumulation_text(r: AccumulationResult) -> str:
    lines = [
        f"sum of {r.n:,} terms stored in {r.fmt.name}: {r.method}, "
        f"{r.accumulator.name} accumulator, {MODE_DESCRIPTIONS[r.rounding]}",
        f"  result {_g(r.sum)}; exact {_g(r.exact_float)}; relative error {r.relative_error:.3g}",
    ]
    return "\n".join(lines + accumulation_findings(r))


def _comparison_text(c: AccumulationComparison) -> str:
    """A table: method, accumulator, result, relative error and what went wrong."""
    first = c.results[0]
    head = (
        f"sum of {first.n:,} terms stored in {first.fmt.name} (exact sum {_g(first.exact_float)}), "
        f"{MODE_DESCRIPTIONS[first.rounding]}"
    )
    rows = [
        [r.method, r.accumulator.name, _g(r.sum), f"{r.relative_error:.3g}", accumulation_note(r)]
        for r in c.results
    ]
    return head + "\n" + table(["method", "accumulator", "result", "rel error", ""], rows, align="<<>>")


#: the text view of each result type of this module
TEXT: dict[type, Callable[..., str]] = {
    UnderflowResult: _underflow_text,
    SwallowResult: _swallow_text,
    AddExplanation: _explanation_text,
    AccumulationResult: _accumulation_text,
    AccumulationComparison: _comparison_text,
}
