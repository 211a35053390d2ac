"""Exact float64 arithmetic in compiled loops: sums, quotients and roots rounded to odd, and the
counted update (numba source, private to :mod:`floatlab.rounding`).

A float64 result rounded to odd at 53 bits, then rounded once more to p <= 51 bits in any mode,
equals one rounding of the exact result (Boldo and Melquiond, IEEE Trans. Computers 57(4), 2008):
these loops give the simulators exact arithmetic for every format of up to 26 significand bits.
"""

from __future__ import annotations

from typing import Any

import numpy as np

prange: Any = range
_prod_err: Any = None


def _add_count_kernel_py(w: Any, d: Any, out: Any) -> Any:
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


def _odd_sum_kernel_py(x: Any, y: Any, out: Any, out_bits: Any, rdown: Any) -> None:
    """out = x + y rounded to odd at 53 bits (float64; ``out_bits`` is the same memory as uint64):
    TwoSum gives the float64 sum s and its exact error e; an inexact s with an even last bit
    steps one ulp toward e (adjacent doubles alternate in the last bit, across binades too).
    With ``rdown`` an exact zero sum is -0 unless both operands are +0 (IEEE 754 6.3)."""
    for i in prange(x.size):
        a = x[i]
        b = y[i]
        s = a + b
        bv = s - a
        av = s - bv
        e = (a - av) + (b - bv)
        out[i] = s
        if np.isfinite(s) and e != 0 and (out_bits[i] & np.uint64(1)) == 0:
            # e != 0 means s != 0; toward e is away from zero when e and s share a sign
            if (e > 0) == (s > 0):
                out_bits[i] += np.uint64(1)
            else:
                out_bits[i] -= np.uint64(1)
        if rdown and s == 0 and not (a == 0 and b == 0 and not np.signbit(a) and not np.signbit(b)):
            out[i] = -0.0


def _prod_err_py(a: Any, b: Any, p: Any) -> Any:
    """e with a * b = p + e exactly, p = fl(a * b) (Dekker's product with Veltkamp's splitting:
    no fused multiply-add needed; exact while nothing overflows or underflows)."""
    c = 134217729.0 * a  # 2^27 + 1 splits a double into two 26-bit halves
    ah = c - (c - a)
    al = a - ah
    c = 134217729.0 * b
    bh = c - (c - b)
    bl = b - bh
    return ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _odd_div_kernel_py(x: Any, y: Any, out: Any, out_bits: Any) -> None:
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


def _odd_sqrt_kernel_py(x: Any, out: Any, out_bits: Any) -> None:
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


def compile_into(numba: Any, out: dict[str, Any]) -> None:
    """Compile the loops into ``out`` by name (once per process)."""
    g = globals()
    g["prange"] = numba.prange
    g["_prod_err"] = numba.njit(nogil=True, error_model="numpy", forceinline=True)(_prod_err_py)
    parallel = numba.njit(parallel=True, cache=True, nogil=True, error_model="numpy")
    for name in ("odd_sum", "odd_div", "odd_sqrt"):
        out[name] = parallel(g[f"_{name}_kernel_py"])
    out["add_count"] = numba.njit(cache=True, nogil=True, error_model="numpy")(_add_count_kernel_py)
