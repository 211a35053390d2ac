"""Exact float64 arithmetic in compiled loops: sums, quotients and roots rounded to odd, the
counted update, and the GEMM with a narrow accumulator (numba source, private to
:mod:`floatlab.rounding`).

A float64 result rounded to odd at 53 bits, then rounded once more to p <= 51 bits in any mode,
equals one rounding of the exact result (Boldo and Melquiond, IEEE Trans. Computers 57(4), 2008):
these loops give the simulators exact arithmetic for every format of up to 26 significand bits.
The accumulator's loop does that second rounding itself, for IEEE formats, with integer operations
on the float64 bits (:func:`_round_ieee64`), so that its loop over outputs vectorises; the
tests hold it to the rounding door.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import prange

from floatlab.rounding._intrinsics import element, parallel_loop, serial_loop
from floatlab.rounding.params import EncodeParams


@serial_loop
def add_count(w: Any, d: Any, out: Any) -> Any:
    """out = w + d in w's dtype (the hardware's rounding), with the counts of non-zero d, of
    elements whose value changed and of non-finite results: one pass where numpy needs four."""
    intended = 0
    changed = 0
    nonfinite = 0
    for i in range(w.size):
        s = w[i] + d[i]
        out[i] = s
        intended += 1 if d[i] != 0 else 0
        changed += 1 if s != w[i] else 0
        nonfinite += 0 if np.isfinite(s) else 1
    return intended, changed, nonfinite


@element
def _odd_sum_bits(a: Any, b: Any, rdown: Any) -> Any:
    """The bits of a + b rounded to odd at 53 bits (float64 as uint64): TwoSum gives the float64
    sum s and its exact error e; an inexact s with an even last bit steps one ulp toward e (adjacent
    doubles alternate in the last bit, across binades too). With ``rdown`` an exact zero sum is -0
    unless both operands are +0 (IEEE 754 6.3). Its conditions compile to selects, not branches,
    so that a loop of independent sums vectorises."""
    one = np.uint64(1)
    s = a + b
    bv = s - a
    av = s - bv
    e = (a - av) + (b - bv)
    u = np.float64(s).view(np.uint64)
    if np.isfinite(s) & (e != 0) & ((u & one) == 0):
        # e != 0 means s != 0; toward e is away from zero when e and s share a sign
        u = np.uint64(u + one) if (e > 0) == (s > 0) else np.uint64(u - one)
    if rdown & (s == 0) & ~((a == 0) & (b == 0) & ~np.signbit(a) & ~np.signbit(b)):
        u = np.uint64(1) << np.uint64(63)
    return u


@parallel_loop
def odd_sum(x: Any, y: Any, out: Any, out_bits: Any, rdown: Any) -> None:
    """out = x + y rounded to odd at 53 bits (float64; ``out_bits`` is the same memory as uint64)."""
    for i in prange(x.size):
        out_bits[i] = _odd_sum_bits(x[i], y[i], rdown)


@element
def _prod_err(a: Any, b: Any, p: Any) -> Any:
    """e with a * b = p + e exactly, p = fl(a * b) (Dekker's product with Veltkamp's splitting:
    no fused multiply-add needed; exact while nothing overflows or underflows)."""
    c = 134217729.0 * a  # 2^27 + 1 splits a double into two 26-bit halves
    ah = c - (c - a)
    al = a - ah
    c = 134217729.0 * b
    bh = c - (c - b)
    bl = b - bh
    return ((ah * bh - p) + ah * bl + al * bh) + al * bl


@parallel_loop
def odd_div(x: Any, y: Any, out: Any, out_bits: Any) -> None:
    """out = x / y rounded to odd at 53 bits (``out_bits`` is out's memory as uint64). The
    remainder x - q*y = (x - h) - e with q*y = h + e exactly; x - h is exact (Sterbenz), so the
    remainder's sign, times y's, says on which side of q the exact quotient lies."""
    for i in prange(x.size):
        a = x[i]
        b = y[i]
        q = a / b
        out[i] = q
        if np.isfinite(q) and q != 0 and (out_bits[i] & np.uint64(1)) == 0:
            h = q * b
            rest = (a - h) - _prod_err(q, b, h)
            if rest != 0:
                above = (rest > 0) == (b > 0)  # the exact quotient lies above q
                if above == (q > 0):
                    out_bits[i] += np.uint64(1)  # one ulp away from zero
                else:
                    out_bits[i] -= np.uint64(1)


@parallel_loop
def odd_sqrt(x: Any, out: Any, out_bits: Any) -> None:
    """out = sqrt(x) rounded to odd at 53 bits: sqrt(x) > r exactly when x > r*r = h + e."""
    for i in prange(x.size):
        a = x[i]
        r = np.sqrt(a)
        out[i] = r
        if np.isfinite(r) and r > 0 and (out_bits[i] & np.uint64(1)) == 0:
            h = r * r
            rest = (a - h) - _prod_err(r, r, h)
            if rest > 0:
                out_bits[i] += np.uint64(1)
            elif rest < 0:
                out_bits[i] -= np.uint64(1)


@element
def _round_ieee64(u: Any, p: Any) -> Any:
    """The float64 bit pattern ``u`` rounded into the IEEE format of ``p`` (deterministic mode,
    subnormals kept, at most 51 fraction bits, values within float64's range) and back, as float64
    bits: what the rounding door gives for the same value, in a few integer operations.

    A float64's bit pattern counts its magnitude's steps: dropping the pattern's low s bits
    (s = 52 - m_t in the target's normal range, more in its subnormal range) and adding the
    rounding increment rounds to a multiple of the target's gap there, the carry walking into the
    exponent field by itself."""
    one = np.uint64(1)
    m_t = p.mantissa_bits
    frac_mask = np.uint64((one << np.uint64(52)) - one)
    sign = u & (one << np.uint64(63))
    mag = u & np.uint64((one << np.uint64(63)) - one)
    ex = np.int64(mag >> np.uint64(52))
    e = max(ex, 1) - 1023  # a float64 subnormal counts as exponent -1022
    # beyond 53 dropped bits (below half the smallest subnormal) only "zero or not" matters
    s = min(52 - m_t + max(p.emin - e, 0), 54)
    su = np.uint64(s)
    sig = (mag & frac_mask) | (np.uint64(ex != 0) << np.uint64(52))
    kept = sig >> su
    rem = sig & np.uint64((one << su) - one)
    half = one << np.uint64(s - 1)
    neg = sign != 0
    odd = (kept & one) != 0
    up = (rem != 0) & (
        ((p.mode_rne != 0) & ((rem > half) | ((rem == half) & odd)))
        | ((p.mode_rna != 0) & (rem >= half))
        | ((p.mode_rup != 0) & ~neg)
        | ((p.mode_rdown != 0) & neg)
        | ((p.mode_rodd != 0) & ~odd)
    )
    if s <= 52:
        r = np.uint64((mag >> su) + np.uint64(up)) << su
    else:  # below the smallest subnormal 2^(emin - m_t): zero, or that subnormal
        r = np.uint64(p.emin - m_t + 1023) << np.uint64(52) if up else np.uint64(0)
    largest = (np.uint64(p.emax + 1023) << np.uint64(52)) | (
        np.uint64((one << np.uint64(m_t)) - one) << np.uint64(52 - m_t)
    )
    if r > largest:
        toward_zero = (p.overflow_to_max != 0) | ((p.mode_rup != 0) & neg) | ((p.mode_rdown != 0) & ~neg)
        r = largest if toward_zero else np.uint64(0x7FF) << np.uint64(52)
    if ex == 0x7FF:
        # an infinity stays; a NaN is made quiet and keeps the top payload bits the target holds
        drop = np.uint64(52 - m_t)
        r = mag if (mag & frac_mask) == 0 else ((mag | (one << np.uint64(51))) >> drop) << drop
    return np.uint64(sign | r)


@parallel_loop
def accumulate(a: Any, b: Any, out: Any, every: Any, rdown: Any, pt: Any, p32t: Any) -> None:
    """out[g, i, j] = the sum of a[g, i, k] * b[g, k, j] (b[0] when b holds one matrix) over k in
    order, every addition rounded once into the accumulator (``pt``: an IEEE format within fp32).
    With ``every`` > 0, after each ``every`` products and after the last, the accumulator is added
    into an fp32 total (``p32t``: round to nearest even) and restarts at zero. A task per output
    row; the row's sums advance side by side, so that the loop over them vectorises."""
    p = EncodeParams(*pt)
    p32 = EncodeParams(*p32t)
    nb, m, kk = a.shape
    n = b.shape[2]
    chunk = every if every > 0 else max(kk, 1)
    shared = b.shape[0] == 1
    for r in prange(nb * m):
        g = r // m
        i = r - g * m
        gb = 0 if shared else g
        acc = np.zeros(n)
        total = np.zeros(n)
        for lo in range(0, kk, chunk):
            for k in range(lo, min(lo + chunk, kk)):
                aik = np.float64(a[g, i, k])
                for j in range(n):
                    # two fp32 values: their product has at most 48 significant bits, exact here
                    u = _odd_sum_bits(acc[j], aik * np.float64(b[gb, k, j]), rdown)
                    acc[j] = np.uint64(_round_ieee64(u, p)).view(np.float64)
            if every > 0:
                for j in range(n):
                    u = _odd_sum_bits(total[j], acc[j], False)
                    total[j] = np.uint64(_round_ieee64(u, p32)).view(np.float64)
                    acc[j] = 0.0
        for j in range(n):
            out[g, i, j] = total[j] if every > 0 else acc[j]


@parallel_loop
def fma(x: Any, y: Any, z: Any, out: Any, pt: Any) -> None:
    """out = x * y + z for float32 x, y, z, rounded once by ``pt`` (an IEEE format within fp32):
    the product of two fp32 values is exact in float64, the sum is formed rounded to odd at 53
    bits, then rounded into the format: a fused multiply-add."""
    p = EncodeParams(*pt)
    for i in prange(x.size):
        u = _odd_sum_bits(np.float64(x[i]) * np.float64(y[i]), np.float64(z[i]), False)
        out[i] = np.uint64(_round_ieee64(u, p)).view(np.float64)
