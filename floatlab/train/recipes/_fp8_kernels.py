"""One compiled pass for the amax of every tile or block of an operand (the twin of the NumPy
reductions in :mod:`floatlab.train.recipes.blockwise`, which stay as its reference).

NumPy takes the largest and the smallest value of each tile in two reductions over a reshaped
view (a tile down the rows reduces over a middle axis); on a training step's operands that was a
sixth of the block-scaled recipe's step. The loop here takes the largest magnitude of each tile
from the bit patterns (a float32's magnitude orders as its bits with the sign cleared), one read
of the operand. numba is imported and the loop compiled on first use only.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
from numpy.typing import NDArray

_lock = threading.Lock()
_compiled: dict[str, Any] = {}
#: a float32 magnitude above this bit pattern is a NaN
_INF_BITS = 0x7F800000


def _tile_amax_kernel_py(bits: Any, shape: Any, block: Any, out: Any) -> None:
    # bits: the uint32 patterns of a C-contiguous (outer, R, C) array, flat; out: (outer, nbr,
    # nbc) uint32, zeros on entry. A task per row of tiles; a tile down the rows (bc == 1) keeps
    # one running maximum per column, so that the loop over a row runs along memory.
    outer, rows, cols = shape
    br, bc = block
    nbr = (rows + br - 1) // br
    nbc = (cols + bc - 1) // bc
    mask = np.uint32(0x7FFFFFFF)
    for task in range(outer * nbr):
        o = task // nbr
        tr = task - o * nbr
        acc = out[o, tr]
        for r in range(tr * br, min(tr * br + br, rows)):
            row = bits[(o * rows + r) * cols : (o * rows + r) * cols + cols]
            if bc == 1:
                for c in range(cols):
                    acc[c] = max(acc[c], row[c] & mask)
            else:
                for b in range(nbc):
                    seg = row[b * bc : b * bc + bc]
                    m = acc[b]
                    for c in range(seg.size):
                        m = max(m, seg[c] & mask)
                    acc[b] = m


#: the side of the squares the transposed copy moves at once (16 float32: a cache line)
SQUARE = 16


def _transpose_kernel_py(a: Any, out: Any) -> None:
    # out = a.T for a C-contiguous (R, C) a and (C, R) out, in squares whose cache lines stay in
    # the first-level cache (NumPy's copy of a transposed view walks a column at a time)
    rows, cols = a.shape
    for r0 in range(0, rows, SQUARE):
        r1 = min(r0 + SQUARE, rows)
        for c0 in range(0, cols, SQUARE):
            c1 = min(c0 + SQUARE, cols)
            for c in range(c0, c1):
                dst = out[c, r0:r1]
                for r in range(r1 - r0):
                    dst[r] = a[r0 + r, c]


def _kernel(name: str = "tile_amax") -> Any:
    if not _compiled:
        with _lock:
            if not _compiled:
                import numba

                jit = numba.njit(nogil=True, cache=True)
                _compiled["transpose"] = jit(_transpose_kernel_py)
                _compiled["tile_amax"] = jit(_tile_amax_kernel_py)
    return _compiled[name]


def transposed_copy(a: NDArray[np.float32]) -> NDArray[np.float32]:
    """``np.ascontiguousarray(a.T)`` of a C-contiguous float32 matrix, the same values, moved in
    squares of SQUARE x SQUARE (several times faster than NumPy's copy of a transposed view).

    >>> transposed_copy(np.float32([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])).tolist()
    [[1.0, 4.0], [2.0, 5.0], [3.0, 6.0]]
    """
    if a.dtype != np.float32 or a.ndim != 2 or not a.flags.c_contiguous:
        out: NDArray[np.float32] = np.ascontiguousarray(a.T)
        return out
    moved = np.empty((a.shape[1], a.shape[0]), np.float32)
    _kernel("transpose")(a, moved)
    return moved


def tile_amax(x: NDArray[np.float32], block: tuple[int, int]) -> NDArray[np.float32] | None:
    """The largest magnitude of each ``block`` = (br, bc) block of the last two axes of the
    C-contiguous float32 array ``x`` (shorter last blocks where the sizes do not divide), of shape
    ``(*x.shape[:-2], ceil(R / br), ceil(C / bc))``; None when a block is all zeros or holds a NaN
    (the NumPy reduction then decides the sign of a zero and which NaN, as it always did) or when
    ``x`` is empty or not a float32 array of two or more dimensions that is C-contiguous.

    >>> tile_amax(np.float32([[1.0, -3.0, 2.0], [0.5, 4.0, -np.inf]]), (1, 2)).tolist()
    [[3.0, 2.0], [4.0, inf]]
    >>> tile_amax(np.float32([[1.0, 0.0]]), (1, 1)) is None      # a tile of zeros
    True
    """
    if x.dtype != np.float32 or not x.flags.c_contiguous or x.ndim < 2 or x.size == 0:
        return None
    rows, cols = x.shape[-2:]
    outer = x.size // (rows * cols)
    br, bc = block
    nbr, nbc = -(-rows // br), -(-cols // bc)
    out = np.zeros((outer, nbr, nbc), np.uint32)
    _kernel()(x.reshape(-1).view(np.uint32), (outer, rows, cols), (br, bc), out)
    if not out.all() or int(out.max()) > _INF_BITS:
        return None
    amax: NDArray[np.float32] = out.view(np.float32).reshape((*x.shape[:-2], nbr, nbc))
    return amax
