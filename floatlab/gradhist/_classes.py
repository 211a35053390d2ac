"""What a rounding makes of a value, and where each outcome begins on the histogram's cells (private).

For one format, rounding mode and sign, the magnitudes that flush to zero, become subnormal, stay
normal or overflow are four intervals of the real line, in that order. :func:`_thresholds` finds
their ends exactly, by bisection with the exact scalar rounding, and :func:`_split` places an end
on the global order of the cells of :mod:`floatlab.gradhist._kernels`: for power-of-two scales
every end falls between two cells, so the class counts are exact.

>>> from floatlab.formats import FP16
>>> [(float(t), closed) for t, closed in _thresholds(FP16, "rne", False, True)]
[(2.9802322387695312e-08, False), (6.1005353927612305e-05, True), (65520.0, True)]
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction
from typing import Any

from floatlab.exact import floor_log2, pow2
from floatlab.formats import FloatFormat, get_format
from floatlab.gradhist import _kernels as hk
from floatlab.rounding import Flags, check_rounding, round_rational
from floatlab.text import SCALE_RANGE_TEXT, as_scale

NCELL = hk.NCELL
E_MIN = hk.E_MIN
E_MAX = hk.E_MAX


#: What a rounding does to a finite nonzero value, in increasing order of magnitude.
CLASSES: tuple[str, ...] = ("zero", "subnormal", "normal", "overflow")


def _as_scale(scale: Any, what: str = "scale") -> Fraction:
    """:func:`floatlab.text.as_scale`, naming the argument as ``what=...`` for text too."""
    try:
        return as_scale(scale, what)
    except ValueError:
        if not isinstance(scale, str):
            raise
        raise ValueError(
            f"{what}={scale!r}: expected a finite positive number {SCALE_RANGE_TEXT}, "
            "such as 1024, '2^10' or 0.5"
        ) from None


def _deterministic(rounding: str) -> str:
    mode = check_rounding(rounding)
    if mode == "stochastic":
        raise ValueError(
            "rounding='stochastic': a verdict needs a deterministic mode (rne, rna, rtz, rup, rdown, rodd); "
            "stochastic rounding flushes each small value only with some probability"
        )
    return mode


def _checked(fmt: FloatFormat | str, scale: Any, rounding: str) -> tuple[FloatFormat, str, Fraction]:
    """The format, the deterministic rounding mode and the exact scale a verdict asks for."""
    return get_format(fmt), _deterministic(rounding), _as_scale(scale)


def _class_of(mag: Fraction, fmt: FloatFormat, mode: str, negative: bool, subnormals: bool) -> int:
    """Index into CLASSES of what ``fmt`` makes of the value +-mag (mag > 0). A negative value in
    an unsigned format rounds to the NaN: it is lost, and counted with the overflows."""
    code, flags = round_rational(-mag if negative else mag, fmt, mode, subnormals=subnormals)
    if flags & (Flags.OVERFLOW | Flags.INVALID):
        return 3
    m = code & (fmt.sign_mask - 1)
    if not fmt.has_zero:  # a scale format (E8M0): every code is a normal power of two
        return 2
    if m == 0:
        return 0
    return 1 if m < 1 << fmt.mantissa_bits else 2


@functools.lru_cache(maxsize=256)
def _thresholds(
    fmt: FloatFormat, mode: str, negative: bool, subnormals: bool
) -> tuple[tuple[Fraction, bool], ...]:
    """For k = 1, 2, 3: the set of magnitudes y > 0 with class(y) >= k, as (t, closed): [t, inf)
    when closed, else (t, inf). Found by bisection with the exact scalar reference."""
    m, esub = fmt.mantissa_bits, fmt.emin - fmt.mantissa_bits
    # every class boundary is a representable value or a midpoint: in the binade [2^e, 2^(e+1))
    # a multiple of 2^(e-m-1), and of 2^(esub-1) below the normal range. On the grid of half that
    # spacing a class is constant between neighbours, so bisecting first over the binades, then
    # over the grid points of one binade, and last testing the middle of the final gap finds each
    # boundary exactly in O(exponent bits + m) roundings, whatever the format's range.
    e_lo, e_hi = esub - 2, fmt.emax + 2  # 2^e_lo flushes and 2^e_hi overflows in every mode

    @functools.cache
    def cls(q: Fraction) -> int:
        return _class_of(q, fmt, mode, negative, subnormals)

    out = []
    for k in (1, 2, 3):
        # the smallest binade top 2^j with class >= k: the boundary lies in (2^(j-1), 2^j]
        lo, hi = e_lo - 1, e_hi
        if cls(pow2(e_lo)) >= k:
            hi = e_lo
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if cls(pow2(mid)) >= k:
                hi = mid
            else:
                lo = mid
        step = pow2(max(hi - 1 - m - 2, e_lo))
        n_lo, n_hi = int(pow2(hi - 1) / step), int(pow2(hi) / step)  # cls(n_lo step) < k <= cls(n_hi step)
        if hi == e_lo:
            n_lo = 0
        while n_hi - n_lo > 1:
            mid = (n_lo + n_hi) // 2
            if cls(mid * step) >= k:
                n_hi = mid
            else:
                n_lo = mid
        t = n_hi * step
        out.append((t - step, False) if cls(t - step / 2) >= k else (t, True))
    return tuple(out)


def _split(t: Fraction, closed: bool) -> tuple[int, bool]:
    """Where the set [t, inf) (closed) or (t, inf) cuts the global cell order.

    Returns (g, straddles): cells before g lie wholly below the set; if ``straddles``, cell g has
    values on both sides and the cells after it lie wholly inside; otherwise cells from g on do.
    """
    if t <= 0:
        return 0, False
    e = floor_log2(t)
    if e < E_MIN:
        return 0, False
    if e > E_MAX:
        return hk.N_EXP * NCELL, False
    base = (e - E_MIN) * NCELL
    frac = t / pow2(e) - 1
    if frac == 0:
        return (base, False) if closed else (base + 1, False)
    j256 = frac * 256
    j = math.floor(j256)
    if j < 255:
        if j256 == j:  # t is the point 1 + j/256, a cell of its own
            return (base + 2 * j, False) if closed else (base + 2 * j + 1, False)
        return base + 2 * j + 1, True
    d = 1 - frac  # t = 2^e (2 - d) with 0 < d <= 2^-8: count the leading ones
    L = floor_log2(1 / d)
    if L >= 52:
        if d == pow2(-52):
            return (base + NCELL - 1, False) if closed else (base + NCELL, False)
        return base + NCELL, False  # between 2^e(2 - 2^-52) and 2^(e+1): no float64 there
    c = 510 + 2 * (L - 8)
    if d == pow2(-L):
        return (base + c, False) if closed else (base + c + 1, False)
    return base + c + 1, True


def _cell_sup(e: int, c: int) -> Fraction:
    """The largest value of cell c of binade e, or the upper end of an open cell."""
    return hk.cell_bounds(c)[1] * pow2(e)
