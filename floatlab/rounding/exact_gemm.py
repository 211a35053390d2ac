"""The fp32 GEMM every machine agrees on: exact products, summed exactly, rounded once.

``exact_matmul(a, b)`` returns, for float32 ``a`` and ``b``, each output as the exact sum of the
exact products ``a[i, k] * b[k, j]``, rounded once to nearest even float32. No order of additions
is involved, so the bits depend on neither the CPU, the BLAS build nor the thread count: this is
what ``TrainConfig(deterministic=True)`` runs every GEMM of the NumPy trainer through.

It models an accumulator wider than any real one: a tensor core adds its products in an order and
a width the hardware fixes, and BLAS in the order its kernel blocks the loops. The exact sum is
the one answer all of them approximate, each within a few units in the last place of fp32.

How, at about the cost of a float64 GEMM:

1. The product of two float32 values has at most 48 significant bits: float64 holds it exactly,
   so ``c = float64(a) @ float64(b)`` (BLAS, any order, any thread count) differs from the exact
   sum ``s`` only by float64 rounding: ``|c - s| <= (K - 1) 2^-53 sum_k |a_k b_k|`` (Higham,
   *Accuracy and Stability of Numerical Algorithms*, 2nd ed., eq. 4.4), and by Cauchy-Schwarz
   ``sum_k |a_k b_k| <= |a_i|_2 |b_j|_2``.
2. Rounding to nearest is monotone: where ``c - e`` and ``c + e`` (``e`` four times that bound,
   for the rounding of the norms themselves) round to the same float32, so does ``s``.
3. The rare output whose interval holds a float32 rounding boundary (a few in a million for
   random data) is summed exactly: the products are added into a floating-point expansion
   (Shewchuk's Grow-Expansion, Discrete Comput. Geom. 18, 1997: a list of float64 values whose
   sum is exact), and the expansion is rounded to nearest even by comparing it exactly with the
   midpoints around its float32 approximation.

An exact zero sum is +0. An output with an infinite or NaN input among its terms is the float64
GEMM's, rounded (infinities and NaNs do not depend on the order; a NaN comes out as float32's
quiet NaN 0x7FC00000).

>>> import numpy as np
>>> a = np.float32([[1.0, 2.0**-24, 2.0**-24]])
>>> b = np.float32([[1.0], [1.0], [1.0]])
>>> exact_matmul(a, b).item() == 1 + 2.0**-23      # float32 from left to right: 1.0
True
>>> exact_matmul(np.float32([[2.0**100, 1.0, -(2.0**100)]]), b).item()
1.0
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from floatlab.backend import gemm_stacks

__all__ = ["exact_matmul"]


def _as_float32(x: Any, name: str) -> NDArray[np.float32]:
    arr = np.asarray(x)
    if arr.dtype not in (np.float32, np.float16):
        raise ValueError(f"exact_matmul's {name} of dtype {arr.dtype}: expected float32 (or float16) values")
    return arr.astype(np.float32, copy=False)


def exact_matmul(a: Any, b: Any) -> NDArray[np.float32]:
    """``a @ b`` (NumPy's broadcasting rules) with every output the exact sum of the exact
    products, rounded once to nearest even float32 (see the module's docstring for how).

    >>> import numpy as np
    >>> x = np.float32([[0.1, 0.2, 0.3]])
    >>> exact_matmul(x, x.T).item() == float(np.float32(sum(float(v) ** 2 for v in x[0])))
    True
    """
    a32, b32 = _as_float32(a, "a"), _as_float32(b, "b")
    if a32.ndim == 0 or b32.ndim == 0:
        raise ValueError(
            f"exact_matmul of shapes {a32.shape} and {b32.shape}: expected arrays of 1 or more dimensions"
        )
    a2 = a32[None] if a32.ndim == 1 else a32
    b2 = b32[:, None] if b32.ndim == 1 else b32
    if a2.shape[-1] != b2.shape[-2]:
        raise ValueError(f"exact_matmul of shapes {a32.shape} and {b32.shape}: inner dimensions differ")
    lead, a3, b3 = gemm_stacks(a2, b2)
    out = _exact_3d(a3, b3).reshape(*lead, a2.shape[-2], b2.shape[-1])
    if a32.ndim == 1:
        out = out[..., 0, :]
    if b32.ndim == 1:
        out = out[..., 0]
    return out


def _exact_3d(a: NDArray[np.float32], b: NDArray[np.float32]) -> NDArray[np.float32]:
    """The exact GEMM of the stacks ``a`` (B, M, K) and ``b`` (B, K, N)."""
    from floatlab.rounding import _exact_kernels as kern  # (numba: on first use only)

    k = a.shape[2]
    a64 = a.astype(np.float64)  # (in the layout a has: BLAS reads a transposed operand as it lies)
    b64 = b.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):  # (infinite and NaN inputs: see above)
        c = np.ascontiguousarray(np.matmul(a64, b64))
    na = np.sqrt(np.einsum("bmk,bmk->bm", a64, a64))
    nb = np.sqrt(np.einsum("bkn,bkn->bn", b64, b64))
    # eight times the bound (K - 1) 2^-53 |a| |b|: the margin also covers the rounding of the
    # norms, of e itself and of c -+ e (each a few float64 ulps; K = 1 and 2 included)
    g = float(k + 2) * 2.0**-50
    # the exact case: every product of row i and column j is a multiple of 2^(ga_i + gb_j) (the
    # grains: the lowest set bits), and |a_i| |b_j| bounds their magnitudes' sum; below 2^53 such
    # multiples, every partial sum is exact in float64 (xa_i xb_j < 1, with the margin g)
    ga, gb = kern.grains(_bits(a), 2), kern.grains(_bits(b), 1)
    xa = np.ldexp(na * (1.0 + g), -(ga + 53))
    xb = np.ldexp(nb, -gb)
    out = np.empty(c.shape, np.float32)
    unsure = np.zeros(c.shape, np.bool_)
    if kern.settle(c, na, nb, xa, xb, g, out, unsure):
        bi, ii, jj = np.nonzero(unsure)
        kern.resolve(a64, b64, bi, ii, jj, out)
    return out


def _bits(x: NDArray[np.float32]) -> NDArray[np.uint32]:
    """The bit patterns of ``x``, a view (any strides: the item size stays 4 bytes)."""
    bits: NDArray[np.uint32] = x.view(np.uint32)
    return bits
