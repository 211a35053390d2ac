"""Storing a tensor in a format: how many values flush to zero, turn subnormal, overflow or stay
normal, and how large the rounding error is (:func:`underflow`).

>>> r = underflow([1.0, 1e-5, 1e-8, 7e4], "fp16")
>>> r.n_normal, r.n_subnormal, r.n_flushed, r.n_overflow
(1, 1, 1, 1)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from floatlab.formats import FloatFormat, get_format
from floatlab.rounding import RNG, as_float64, check_rounding, round_array_with_flags
from floatlab.text import render

__all__ = ["UnderflowResult", "underflow"]


@dataclass(frozen=True)
class UnderflowResult:
    """Where the values of a tensor land when stored in a format (see :func:`underflow`).

    >>> r = underflow([1.0, 1e-5, 1e-8, 1e-9], "fp16")
    >>> r.n_normal, r.n_subnormal, r.n_flushed, r.share(r.n_flushed)
    (1, 1, 2, 0.5)
    """

    fmt: FloatFormat
    rounding: str
    scale: float
    saturate: bool
    subnormals: bool
    n: int
    """All inputs."""
    n_zero_input: int
    n_nonfinite_input: int
    n_flushed: int
    """Nonzero finite inputs stored as zero."""
    n_subnormal: int
    """Nonzero finite inputs stored as subnormals."""
    n_overflow: int
    """Finite inputs whose rounding overflowed (IEEE 754: the result with an unbounded exponent
    range is beyond the largest finite value); they became inf or NaN, or were clamped."""
    n_overflow_nonfinite: int
    """Of those, the ones stored as inf or NaN."""
    n_normal: int
    """Nonzero finite inputs stored as normal numbers without overflow."""
    n_underflow_flag: int
    """Inputs that raised IEEE 754's underflow flag (tiny after rounding and inexact)."""
    bits_lost: tuple[int, ...]
    """``bits_lost[k]``: subnormal results that keep k bits fewer than the format's precision."""
    error_exponents: tuple[int, ...]
    """Bin k holds the finite nonzero results with relative error in [2^k, 2^(k+1))."""
    error_counts: tuple[int, ...]
    n_exact: int
    """Finite nonzero results equal to their input."""
    max_relative_error: float

    @property
    def n_nonzero(self) -> int:
        """Nonzero finite inputs: the ones the shares are taken of."""
        return self.n - self.n_zero_input - self.n_nonfinite_input

    def share(self, count: int) -> float:
        """``count`` as a share of the nonzero finite inputs."""
        return count / self.n_nonzero if self.n_nonzero else 0.0

    @property
    def mean_bits_lost(self) -> float:
        """Bits of precision a subnormal result lacks, on average (0 when there is none)."""
        total = sum(self.bits_lost)
        return sum(k * c for k, c in enumerate(self.bits_lost)) / total if total else 0.0

    def to_dict(self) -> dict[str, Any]:
        """Counts, shares and histogram as JSON-ready values."""
        return {
            "format": self.fmt.name,
            "rounding": self.rounding,
            "scale": self.scale,
            "saturate": self.saturate,
            "subnormals": self.subnormals,
            "n": self.n,
            "n_zero_input": self.n_zero_input,
            "n_nonfinite_input": self.n_nonfinite_input,
            "n_nonzero": self.n_nonzero,
            "n_normal": self.n_normal,
            "n_subnormal": self.n_subnormal,
            "n_flushed": self.n_flushed,
            "n_overflow": self.n_overflow,
            "n_overflow_nonfinite": self.n_overflow_nonfinite,
            "n_underflow_flag": self.n_underflow_flag,
            "share_normal": self.share(self.n_normal),
            "share_subnormal": self.share(self.n_subnormal),
            "share_flushed": self.share(self.n_flushed),
            "share_overflow": self.share(self.n_overflow),
            "bits_lost": list(self.bits_lost),
            "mean_bits_lost": self.mean_bits_lost,
            "error_histogram": {
                "exact": self.n_exact,
                "log2_bins": list(self.error_exponents),
                "counts": list(self.error_counts),
            },
            "max_relative_error": self.max_relative_error,
        }

    def __str__(self) -> str:
        return render(self)


def underflow(
    x: npt.ArrayLike,
    fmt: FloatFormat | str,
    *,
    scale: float = 1.0,
    rounding: str = "rne",
    rng: RNG = None,
    saturate: bool = False,
    subnormals: bool = True,
) -> UnderflowResult:
    """Store ``x * scale`` in ``fmt`` and count the values that flush to zero, turn subnormal,
    overflow or stay normal, with a histogram of the relative rounding error.

    ``scale`` (a loss scale, say) multiplies in float64, which is exact for a power of two.

    >>> r = underflow([1.0, 1e-5, 1e-8, 7e4, 0.0], "fp16")
    >>> r.n_normal, r.n_subnormal, r.n_flushed, r.n_overflow, r.n_zero_input
    (1, 1, 1, 1, 1)
    >>> underflow([1e-8], "fp16", scale=1024).n_subnormal
    1
    """
    f = get_format(fmt)
    mode = check_rounding(rounding)
    if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale != 0):
        raise ValueError(f"scale={scale!r}: expected a finite nonzero number")
    xs = as_float64(x).reshape(-1)
    if scale != 1.0:
        with np.errstate(over="ignore"):  # a value scaled past float64's range is an overflow to report
            xs = xs * float(scale)
    r, stats = round_array_with_flags(xs, f, mode, rng=rng, saturate=saturate, subnormals=subnormals)
    r = np.asarray(r, dtype=np.float64)
    finite_in = np.isfinite(xs)
    nonzero_in = finite_in & (xs != 0)
    finite_out = np.isfinite(r)
    ar = np.abs(r)
    flushed = nonzero_in & (r == 0)
    tiny = float(f.smallest_normal_exact)
    subnormal = nonzero_in & (ar > 0) & (ar < tiny)
    n_overflow = stats.overflow
    n_overflow_nonfinite = int(np.count_nonzero(finite_in & ~finite_out))
    finite_normal = nonzero_in & finite_out & (ar >= tiny)
    # an overflow clamped to the largest finite value looks normal: take it out of the normal class
    n_normal = int(np.count_nonzero(finite_normal)) - (n_overflow - n_overflow_nonfinite)

    # precision of a subnormal result: it keeps the bits from its leading one down to 2^(emin - m)
    _, e_sub = np.frexp(ar[subnormal])
    lost = f.emin - (e_sub.astype(np.int64) - 1)
    bits_lost = np.bincount(lost, minlength=f.mantissa_bits + 1) if lost.size else np.zeros(f.precision)

    both = nonzero_in & finite_out & (r != 0)
    xv, rv = xs[both], r[both]
    # r and x lie within a factor 2 of each other (Sterbenz), so the difference is exact
    d = np.abs(rv - xv)
    exact = d == 0
    dm, de = np.frexp(d[~exact])
    xm, xe = np.frexp(np.abs(xv[~exact]))
    # floor(log2(d / |x|)) from the frexp fields: the ratio of the mantissas is in (1/2, 2)
    k = de.astype(np.int64) - xe.astype(np.int64) - (dm < xm)
    exps: tuple[int, ...] = ()
    counts: tuple[int, ...] = ()
    if k.size:
        lo = int(k.min())
        c = np.bincount(k - lo)
        exps = tuple(range(lo, lo + c.size))
        counts = tuple(int(v) for v in c)
    max_rel = float(np.max(d / np.abs(xv))) if d.size else 0.0
    return UnderflowResult(
        fmt=f,
        rounding=mode,
        scale=float(scale),
        saturate=saturate,
        subnormals=subnormals,
        n=int(xs.size),
        n_zero_input=int(np.count_nonzero(xs == 0)),
        n_nonfinite_input=int(np.count_nonzero(~finite_in)),
        n_flushed=int(np.count_nonzero(flushed)),
        n_subnormal=int(np.count_nonzero(subnormal)),
        n_overflow=n_overflow,
        n_overflow_nonfinite=n_overflow_nonfinite,
        n_normal=n_normal,
        n_underflow_flag=stats.underflow,
        bits_lost=tuple(int(v) for v in bits_lost),
        error_exponents=exps,
        error_counts=counts,
        n_exact=int(np.count_nonzero(exact)),
        max_relative_error=max_rel,
    )
