"""Accumulation in a format: a sum of many terms, sequential, pairwise or compensated (Kahan),
in the terms' format or a wider accumulator; where the running sum stops changing or overflows.

>>> [r.sum for r in compare_accumulation(np.ones(3000), "fp16").results]
[2048.0, 3000.0, 3000.0, 3000.0]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from floatlab.exact import pow2
from floatlab.formats import FloatFormat, get_format
from floatlab.rounding import (
    DEFAULT_RANDOM_BITS,
    MAX_EXACT_INTEGERS,
    RNG,
    RoundingKnobs,
    as_float64,
    as_generator,
    round_array,
    round_integers,
    running_sums,
)
from floatlab.simulate.arithmetic import FloatArray, _Op
from floatlab.text import render

__all__ = [
    "MAX_EXACT_INTEGERS",
    "METHODS",
    "AccumulationComparison",
    "AccumulationResult",
    "accumulate",
    "compare_accumulation",
    "round_integers",
]

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]

#: The ways :func:`accumulate` sums: a running sum, a balanced tree, compensated summation.
METHODS: tuple[str, ...] = ("sequential", "pairwise", "kahan")
_TRAJECTORY_POINTS = 1001


def _exact_sum(t: FloatArray) -> Fraction:
    """The exact sum of finite float64 values, with integer arithmetic on their bit fields."""
    if t.size == 0:
        return Fraction(0)
    bits = np.ascontiguousarray(t, dtype=np.float64).view(np.uint64)
    efield = ((bits >> np.uint64(52)) & np.uint64(0x7FF)).astype(np.int64)
    sig = (bits & np.uint64((1 << 52) - 1)).astype(np.int64) | ((efield > 0).astype(np.int64) << 52)
    sig = np.where(bits >> np.uint64(63) != 0, -sig, sig)
    e = np.maximum(efield, 1) - 1075  # value = sig * 2^e, subnormals included
    # two 27/26-bit halves so that a million of them sum in int64 without overflow
    hi = sig >> 26
    lo = sig - (hi << 26)
    keys = np.concatenate([e + 26, e])
    vals = np.concatenate([hi, lo])
    base = int(keys.min())
    # one integer bin per power of two (a few thousand at most), added exactly in int64
    sums = np.zeros(int(keys.max()) - base + 1, dtype=np.int64)
    np.add.at(sums, keys - base, vals)
    total = sum(int(s) << k for k, s in enumerate(sums.tolist()) if s)
    return Fraction(total) * pow2(base)


@dataclass(frozen=True, eq=False)
class AccumulationResult:
    """A sum computed in a format (see :func:`accumulate`).

    >>> r = accumulate(np.ones(3000), "fp16")
    >>> r.sum, r.stagnation_index, round(r.relative_error, 4)
    (2048.0, 2048, 0.3173)
    """

    fmt: FloatFormat
    """The format the terms are stored in and the result is returned in."""
    accumulator: FloatFormat
    method: str
    rounding: str
    n: int
    sum: float
    """The result, in ``fmt``."""
    accumulator_sum: float
    """The result before its final conversion from the accumulator to ``fmt``."""
    exact: Fraction | None
    """The exact sum of the stored terms (None when a term is inf or NaN)."""
    relative_error: float
    """``|sum - exact| / |exact|`` (inf when only the exact sum is zero, NaN without an exact sum)."""
    trajectory_index: IntArray | None
    """Term indices of the recorded running sums (sequential and Kahan; at most ~1000 points)."""
    trajectory: FloatArray | None
    """The running sum (in the accumulator) after the term of the same position in ``trajectory_index``."""
    stagnation_index: int | None
    """The first term from which the running sum never changed again, although the terms from there
    on add up to at least one step of the format's grid at the sum (None in stochastic rounding,
    which moves on average)."""
    stagnation_value: float | None
    n_swallowed: int | None
    """Nonzero terms that left the running sum unchanged (sequential and Kahan)."""
    overflow_index: int | None
    """The first term after which the running sum was inf or NaN, all terms so far being finite."""
    overflow_exact: Fraction | None
    """The exact running sum at ``overflow_index``."""
    special_sum: float = math.nan
    """Without an exact sum: what IEEE arithmetic makes of the inf and NaN terms (+-inf when they
    are infinities of one sign, NaN otherwise)."""

    @property
    def exact_float(self) -> float:
        """The exact sum rounded to float64 (as math.fsum gives it); with inf or NaN terms, the
        IEEE sum of those (an inf term makes the exact sum inf, whatever the finite ones add)."""
        if self.exact is None:
            return self.special_sum
        try:
            return float(self.exact)
        except OverflowError:
            return math.copysign(math.inf, self.exact)

    def trajectory_value(self, index: int) -> float:
        """The recorded running sum after term ``index`` (NaN if it was not recorded)."""
        if self.trajectory is None or self.trajectory_index is None:
            return math.nan
        pos = np.searchsorted(self.trajectory_index, index)
        if pos < self.trajectory_index.size and self.trajectory_index[pos] == index:
            return float(self.trajectory[pos])
        return math.nan

    def to_dict(self) -> dict[str, Any]:
        """The results as JSON-ready values (the trajectory as two lists)."""
        return {
            "format": self.fmt.name,
            "accumulator": self.accumulator.name,
            "method": self.method,
            "rounding": self.rounding,
            "n": self.n,
            "sum": self.sum,
            "accumulator_sum": self.accumulator_sum,
            "exact": None if self.exact is None else str(self.exact),
            "exact_float": self.exact_float,
            "relative_error": self.relative_error,
            "stagnation_index": self.stagnation_index,
            "stagnation_value": self.stagnation_value,
            "n_swallowed": self.n_swallowed,
            "overflow_index": self.overflow_index,
            "overflow_exact": None if self.overflow_exact is None else str(self.overflow_exact),
            "trajectory_index": None if self.trajectory_index is None else self.trajectory_index.tolist(),
            "trajectory": None if self.trajectory is None else self.trajectory.tolist(),
        }

    def __str__(self) -> str:
        return render(self)


# The serial methods run in one compiled loop (floatlab.rounding.running_sums): each step forms the
# round-to-odd float64 result, as add() does, and rounds it as round_array does (the same bits, one
# element at a time, without a call into numpy per step).
def _serial_sum(t: FloatArray, op: _Op, method: str) -> tuple[FloatArray, FloatArray | None]:
    """Running sums (and Kahan's compensation) of the accumulator values ``t``."""
    return running_sums(t, op.fmt, op.mode, kahan=method == "kahan", **op.knobs)


def _pairwise(t: FloatArray, op: _Op) -> float:
    vals = t
    while vals.size > 1:
        odd = vals[-1:] if vals.size % 2 else vals[:0]
        even = vals.size - odd.size
        # one addition in the accumulator per pair, as add() does it
        pairs = op.apply(op.odd_add, vals[0:even:2], vals[1:even:2])
        vals = np.concatenate([pairs, odd])
    return float(vals[0])


def accumulate(
    x: npt.ArrayLike,
    fmt: FloatFormat | str,
    *,
    accumulator: FloatFormat | str | None = None,
    method: str = "sequential",
    rounding: str = "rne",
    rng: RNG = None,
    saturate: bool = False,
    subnormals: bool = True,
    random_bits: int | None = None,
) -> AccumulationResult:
    """Sum ``x`` in a format: the terms stored in ``fmt``, each addition rounded once in
    ``accumulator`` (default: ``fmt``), the result converted back to ``fmt``.

    ``method``: ``"sequential"`` (a running sum, left to right), ``"pairwise"`` (a balanced tree:
    (x0 + x1) + (x2 + x3), ...) or ``"kahan"`` (compensated summation, every operation in the
    accumulator). Terms are stored and the result converted with round to nearest even (an
    integer term once, by :func:`round_integers`, whatever its width); the additions use
    ``rounding``. Stochastic rounding draws from ``rng`` with ``random_bits`` bits
    (default: min(32, 52 - p) for an accumulator of precision p, which keeps each step exact).

    The sequential and Kahan sums are serial by nature: one compiled loop rounds each step with
    the kernels behind :func:`round_array`, a million terms in about a second (the first call in
    a fresh environment compiles the loop, a few seconds more; numba caches it). Up to 10^6 or
    10^7 terms is comfortable.

    >>> r = accumulate(np.ones(3000), "fp16")
    >>> r.sum, r.stagnation_index, float(r.exact)
    (2048.0, 2048, 3000.0)
    >>> accumulate(np.ones(3000), "fp16", accumulator="fp32").sum
    3000.0
    >>> accumulate(np.full(700, 100.0), "fp16").overflow_index  # 65440 + 100 rounds to inf in fp16
    678
    """
    f = get_format(fmt)
    acc_fmt = f if accumulator is None else get_format(accumulator)
    rng = as_generator(rng)  # an int seed draws once, then every rounding takes the next key
    if random_bits is None:
        # stochastic steps stay exact with p + random_bits <= 52 (see the notes in
        # floatlab.simulate.arithmetic): fp32 gets 28
        random_bits = min(DEFAULT_RANDOM_BITS, 52 - acc_fmt.precision)
    knobs: RoundingKnobs = {
        "rng": rng,
        "saturate": saturate,
        "subnormals": subnormals,
        "random_bits": random_bits,
    }
    op = _Op.make("accumulate", acc_fmt, rounding, knobs)
    if method not in METHODS:
        raise ValueError(f"method={method!r}: expected one of {', '.join(METHODS)}")
    ints = _integers(x)
    xs = ints if ints is not None else as_float64(x).reshape(-1)
    if xs.size == 0:
        raise ValueError("nothing to sum: expected at least one term")
    kw: dict[str, Any] = {"saturate": saturate, "subnormals": subnormals}
    # the terms as stored in fmt, each rounded once (an integer beyond 2^53 would be rounded twice
    # on its way through float64)
    if ints is not None:
        terms = round_integers(ints, f, "rne", **kw).array
    else:
        terms = np.asarray(round_array(xs, f, "rne", **kw), dtype=np.float64)
    # ... and as they enter the accumulator (exact when it holds every value of fmt)
    in_acc = np.asarray(round_array(terms, acc_fmt, "rne", **kw), dtype=np.float64)
    n = int(xs.size)

    run: FloatArray | None = None
    comp: FloatArray | None = None  # Kahan's compensation: a term it holds is not lost
    if method == "pairwise":
        acc_sum = _pairwise(in_acc, op)
    else:
        run, comp = _serial_sum(in_acc, op, method)
        acc_sum = float(run[-1])
    final = float(np.asarray(round_array(np.array([acc_sum]), f, "rne", **kw))[0])

    finite = np.isfinite(terms)
    exact = _exact_sum(terms) if finite.all() else None
    with np.errstate(invalid="ignore"):  # inf + -inf is NaN, as IEEE arithmetic says
        special = math.nan if exact is not None else float(np.sum(terms[~finite]))
    rel = _relative_error(final, exact, special)

    stagnation: int | None = None
    stag_value: float | None = None
    swallowed: int | None = None
    overflow: int | None = None
    overflow_exact: Fraction | None = None
    index: IntArray | None = None
    traj: FloatArray | None = None
    if run is not None:
        same = _unchanged(run)
        if comp is not None:
            same &= _unchanged(comp)
        same[0] = terms[0] == 0
        nonzero_term = in_acc != 0
        swallowed = int(np.count_nonzero(same & nonzero_term & np.isfinite(run)))
        changed = np.flatnonzero(~same)
        start = int(changed[-1]) + 1 if changed.size else 0
        # stagnation: the sum stood still while the terms after it add up to a step of its grid or
        # more (a few small last terms that round away are no stall; stochastic rounding never stalls)
        still = op.mode != "stochastic" and start < n and bool(np.isfinite(run[-1]))
        if still and abs(_exact_sum(in_acc[start:])) >= _gap(float(run[-1]), acc_fmt):
            stagnation, stag_value = start, float(run[-1])
        finite_terms = np.cumsum(~np.isfinite(in_acc)) == 0
        bad = np.flatnonzero(~np.isfinite(run) & finite_terms)
        if bad.size:
            overflow = int(bad[0])
            overflow_exact = _exact_sum(terms[: overflow + 1])
        index = np.unique(np.linspace(0, n - 1, min(n, _TRAJECTORY_POINTS)).round().astype(np.int64))
        marks = [i for i in (stagnation, overflow) if i is not None]
        if marks:
            index = np.union1d(index, np.array(marks, dtype=np.int64))
        traj = run[index]
    return AccumulationResult(
        fmt=f,
        accumulator=acc_fmt,
        method=method,
        rounding=op.mode,
        n=n,
        sum=final,
        accumulator_sum=acc_sum,
        exact=exact,
        special_sum=special,
        relative_error=rel,
        trajectory_index=index,
        trajectory=traj,
        stagnation_index=stagnation,
        stagnation_value=stag_value,
        n_swallowed=swallowed,
        overflow_index=overflow,
        overflow_exact=overflow_exact,
    )


def _integers(x: npt.ArrayLike) -> npt.NDArray[Any] | None:
    """``x`` flattened if it is an array of integers or booleans, else None."""
    try:
        a = np.asarray(x)
    except (ValueError, TypeError):  # ragged lists: as_float64 names the problem
        return None
    return a.reshape(-1) if a.dtype.kind in "biu" else None


def _gap(x: float, fmt: FloatFormat) -> Fraction:
    """The spacing of ``fmt`` at the finite value ``x`` (its ulp; the subnormal step near zero)."""
    e = math.frexp(x)[1] - 1 if x != 0 else fmt.emin
    return pow2(max(e, fmt.emin) - fmt.mantissa_bits)


def _unchanged(run: FloatArray) -> BoolArray:
    """Whether each step left the running value as it was (NaN staying NaN counts as unchanged)."""
    prev = np.concatenate([[0.0], run[:-1]])
    out: BoolArray = (run == prev) | (np.isnan(run) & np.isnan(prev))
    return out


def _relative_error(value: float, exact: Fraction | None, special: float = math.nan) -> float:
    if exact is None:
        return 0.0 if value == special else math.nan  # the right infinity is no error
    if math.isnan(value):
        return math.nan
    if math.isinf(value):
        return math.inf
    if exact == 0:
        return 0.0 if value == 0 else math.inf
    return float(abs(Fraction(value) - exact) / abs(exact))


@dataclass(frozen=True)
class AccumulationComparison:
    """The same terms summed several ways (see :func:`compare_accumulation`).

    >>> c = compare_accumulation(np.ones(3000), "fp16")
    >>> [(r.method, r.accumulator.name, r.sum) for r in c.results]  # doctest: +NORMALIZE_WHITESPACE
    [('sequential', 'fp16', 2048.0), ('pairwise', 'fp16', 3000.0), ('kahan', 'fp16', 3000.0),
     ('sequential', 'fp32', 3000.0)]
    """

    results: tuple[AccumulationResult, ...]

    def to_dict(self) -> dict[str, Any]:
        """Every result as JSON-ready values, trajectories left out."""
        out = []
        for r in self.results:
            d = r.to_dict()
            d.pop("trajectory")
            d.pop("trajectory_index")
            out.append(d)
        return {"results": out}

    def __str__(self) -> str:
        return render(self)


def compare_accumulation(
    x: npt.ArrayLike,
    fmt: FloatFormat | str = "fp16",
    *,
    wide: FloatFormat | str = "fp32",
    rounding: str = "rne",
    rng: RNG = None,
) -> AccumulationComparison:
    """Sum ``x`` stored in ``fmt`` four ways: sequential, pairwise and Kahan in ``fmt``, and
    sequential with a ``wide`` accumulator.

    >>> c = compare_accumulation(np.ones(3000), "fp16")
    >>> [r.sum for r in c.results]
    [2048.0, 3000.0, 3000.0, 3000.0]
    """
    rng = as_generator(rng)  # one generator for every method: each draws its own keys
    kw: dict[str, Any] = {"rounding": rounding, "rng": rng}
    results = (
        accumulate(x, fmt, method="sequential", **kw),
        accumulate(x, fmt, method="pairwise", **kw),
        accumulate(x, fmt, method="kahan", **kw),
        accumulate(x, fmt, accumulator=wide, method="sequential", **kw),
    )
    return AccumulationComparison(results)
