"""The loops of :func:`floatlab.rounding.exact_gemm.exact_matmul`, compiled by numba (this module
is imported on first use: ``import floatlab`` stays light).

``grow`` and ``sign_minus`` are exact expansion arithmetic (Shewchuk, Discrete Comput. Geom. 18,
1997); ``round_expansion`` rounds an expansion to nearest even float32; ``settle`` decides every
output whose float64 interval rounds to one float32 value, ``resolve`` sums the others exactly.
"""

from __future__ import annotations

import math
from typing import Any

import numba
import numpy as np

f32 = np.float32

# components an expansion of float32 products can need: one per bit position that the sum of up
# to 2^40 products of two float32 values can occupy, from 2^-298 (the product of two smallest
# subnormals) to 2^297 (2^40 products of two largest values), with room to spare
EXPANSION = 640
# the grain of a row or column with no non-zero value: far above any sum's 2^53 window
NO_GRAIN = 1 << 20
# the trailing zeros of a 32-bit power of two 2^t from the top five bits of 2^t x 0x077CB531
DEBRUIJN = np.zeros(32, np.int64)
for _t in range(32):
    DEBRUIJN[((0x077CB531 << _t) & 0xFFFFFFFF) >> 27] = _t


@numba.njit(cache=True, nogil=True)
def grow(buf: Any, n: int, q: float) -> int:
    # Shewchuk's Grow-Expansion with zero elimination: buf[:n] (non-overlapping, increasing
    # magnitude) plus q, exactly; two-sum's error term is exact in round-to-nearest
    m = 0
    for i in range(n):
        e = buf[i]
        s = q + e
        bv = s - q
        err = (q - (s - bv)) + (e - bv)
        q = s
        if err != 0.0:
            buf[m] = err
            m += 1
    if q != 0.0:
        buf[m] = q
        m += 1
    return m


@numba.njit(cache=True, nogil=True)
def sign_minus(buf: Any, n: int, scratch: Any, v: float) -> int:
    # the sign of (sum of buf[:n]) - v, exactly: the largest component of a non-overlapping
    # expansion outweighs all the others together
    for i in range(n):
        scratch[i] = buf[i]
    m = grow(scratch, n, -v)
    if m == 0:
        return 0
    return 1 if scratch[m - 1] > 0.0 else -1


@numba.njit(cache=True, nogil=True)
def wide(r: Any) -> float:
    # a float32 value in float64; an infinity stands for +-2^128, where float32's next binade
    # would start (the midpoint between the largest value and it is the overflow threshold)
    if np.isinf(r):
        return 2.0**128 if r > 0 else -(2.0**128)
    return float(r)


@numba.njit(cache=True, nogil=True)
def is_even(r: Any) -> bool:
    # the float32 significand's last bit, from the gap below |r| (toward zero): |r| is an integer
    # multiple of it, exactly, in float64; 2^128 (an infinity here) counts as even, the largest
    # finite value (2^24 - 1) x 2^104 as odd
    if np.isinf(r):
        return True
    x = abs(float(r))
    if x == 0.0:
        return True
    gap = x - float(np.nextafter(f32(x), f32(0.0)))
    return (x / gap) % 2.0 == 0.0


@numba.njit(cache=True, nogil=True)
def round_expansion(buf: Any, n: int, scratch: Any) -> Any:
    # the float32 nearest (ties to even) to the exact sum of buf[:n]
    if n == 0:
        return f32(0.0)
    s = 0.0
    for i in range(n):  # smallest first: within a few float64 ulps of the exact sum
        s += buf[i]
    r = f32(s)
    v = wide(r)
    up = np.nextafter(r, f32(np.inf))
    if not np.isinf(r) or r < 0:
        mid = 0.5 * (v + wide(up))  # exact: 25 significant bits
        c = sign_minus(buf, n, scratch, mid)
        if c > 0 or (c == 0 and is_even(up)):
            return up
    down = np.nextafter(r, f32(-np.inf))
    if not np.isinf(r) or r > 0:
        mid = 0.5 * (v + wide(down))
        c = sign_minus(buf, n, scratch, mid)
        if c < 0 or (c == 0 and is_even(down)):
            return down
    return r


@numba.njit(cache=True, nogil=True)
def exact_dot(x: Any, y: Any, buf: Any, scratch: Any) -> Any:
    n = 0
    for t in range(x.shape[0]):
        p = x[t] * y[t]  # exact: 24 x 24 significant bits fit in float64's 53
        if p != 0.0:
            n = grow(buf, n, p)
    return round_expansion(buf, n, scratch)


@numba.njit(cache=True, nogil=True)
def lowest_bit(u: Any) -> int:
    # the exponent of the lowest set bit of the float32 value with bits u (NO_GRAIN for a zero,
    # an infinity or a NaN): its biased exponent, less 150, plus the significand's trailing zeros
    e = (u >> 23) & 0xFF
    m = u & 0x7FFFFF
    if e == 0xFF or (e == 0 and m == 0):
        return NO_GRAIN
    if e != 0:
        m |= 0x800000
    low = m & (~m + 1)  # the lowest set bit alone: 2^tz, tz below 24
    tz = DEBRUIJN[((low * 0x077CB531) & 0xFFFFFFFF) >> 27]  # (a de Bruijn sequence's lookup)
    return int(max(e, 1)) - 150 + int(tz)


@numba.njit(cache=True, nogil=True)
def grains(bits: Any, axis: int) -> Any:
    # per row (axis 2) or column (axis 1) of the stack of float32 bits (B, R, C): the exponent of
    # the lowest set bit over its non-zero finite values (every product with them is a multiple
    # of 2^that)
    nb, r, c = bits.shape
    out = np.full((nb, c if axis == 1 else r), NO_GRAIN, np.int64)
    for b in range(nb):
        for i in range(r):
            for j in range(c):
                g = lowest_bit(bits[b, i, j])
                t = j if axis == 1 else i
                if g < out[b, t]:
                    out[b, t] = g
    return out


@numba.njit(cache=True, nogil=True)
def settle(c: Any, na: Any, nb: Any, xa: Any, xb: Any, g: float, out: Any, unsure: Any) -> int:
    # c (B, M, N): the float64 GEMM; na (B, M) and nb (B, N): the rows' and columns' 2-norms;
    # xa and xb: the norms over their grains' 2^53 window (see exact_matmul). Returns how many
    # outputs it left unsure.
    nbatch, m, n = c.shape
    left = 0
    for bi in range(nbatch):
        xb_max, cols_finite = 0.0, True
        for j in range(n):
            xb_max = max(xb_max, xb[bi, j])
            cols_finite = cols_finite and np.isfinite(nb[bi, j])
        for i in range(m):
            if cols_finite and np.isfinite(na[bi, i]) and xa[bi, i] * xb_max < 1.0:
                # the whole row is the exact case below (+ 0.0 makes an exact zero sum +0)
                for j in range(n):
                    out[bi, i, j] = f32(c[bi, i, j] + 0.0)
                continue
            for j in range(n):
                v = c[bi, i, j]
                if not np.isfinite(v):
                    out[bi, i, j] = f32(np.nan) if np.isnan(v) else f32(v)
                    continue
                norms = na[bi, i] * nb[bi, j]
                if norms == 0.0:  # a zero row or column: every product is zero, and so is the sum
                    out[bi, i, j] = f32(0.0)
                elif xa[bi, i] * xb[bi, j] < 1.0:
                    # every product is a multiple of 2^(ga + gb), and their magnitudes add up to
                    # less than 2^53 of those: each partial sum, in any order, is exact in
                    # float64, so v is the exact sum (the case of most low-precision operands)
                    out[bi, i, j] = f32(v + 0.0)
                else:
                    e = g * norms
                    lo, hi = f32(v - e), f32(v + e)
                    if lo == hi and (lo != 0.0 or math.copysign(1.0, lo) == math.copysign(1.0, hi)):
                        out[bi, i, j] = lo
                    else:
                        unsure[bi, i, j] = True
                        left += 1
    return left


@numba.njit(cache=True, nogil=True)
def resolve(a: Any, b: Any, bi: Any, ii: Any, jj: Any, out: Any) -> None:
    buf = np.empty(EXPANSION, np.float64)
    scratch = np.empty(EXPANSION, np.float64)
    for t in range(bi.shape[0]):
        k = bi[t]
        out[k, ii[t], jj[t]] = exact_dot(a[k, ii[t], :], b[k, :, jj[t]], buf, scratch)


@numba.njit(cache=True, nogil=True)
def round_settled(y: Any, out: Any, slack: float) -> int:
    # y (flat float64): a function's values, each within `slack` float64 ulps of the exact one;
    # out (flat float32): their float32 rounding where no rounding boundary is that close (the
    # rounding of y - t and of y + t agree), NaN where one is (returned: how many). A zero, an
    # infinity and a NaN are exact (tanh(-0) is -0, log(1) is 0)
    left = 0
    for i in range(y.shape[0]):
        v = y[i]
        t = slack * abs(v) * 2.0**-52  # (at least `slack` ulps of v; 0 for 0, inf for inf)
        lo, hi = f32(v - t), f32(v + t)
        if v == 0.0 or not np.isfinite(v) or (lo == hi and math.copysign(1.0, lo) == math.copysign(1.0, hi)):
            out[i] = f32(v)
        else:
            out[i] = np.nan
            left += 1
    return left
