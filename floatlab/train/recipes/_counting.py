"""One compiled pass that counts what an fp8 cast did to a tensor (the twin of the NumPy counts in
:func:`floatlab.train.recipes.scales.cast_shares`, which stay as its reference).

The NumPy counts read the tensor and its cast five times and allocate a boolean array each time;
on the operands of a training step (a million values for a gradient) that was a tenth of an fp8
recipe's step. numba is imported and the loop compiled on first use only.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
from numpy.typing import NDArray

_lock = threading.Lock()
_compiled: dict[str, Any] = {}


def _count_kernel_py(
    x: Any, q: Any, xs: Any, has_xs: bool, t: Any, tie_overflows: bool, tiny: Any
) -> tuple[int, int, int, int]:
    # (saturated, zeros of x, zeros of q, subnormal q): NaN compares false everywhere, so a NaN
    # is counted in none, as in the NumPy counts
    sat, zx, zq, sub = 0, 0, 0, 0
    for i in range(x.size):
        if has_xs:
            v = xs[i]
            if tie_overflows:
                if v >= t or v <= -t:
                    sat += 1
            elif v > t or v < -t:
                sat += 1
        if x[i] == 0:
            zx += 1
        qi = q[i]
        if qi == 0:
            zq += 1
        elif -tiny < qi < tiny:
            sub += 1
    return sat, zx, zq, sub


def _kernel() -> Any:
    if not _compiled:
        with _lock:
            if not _compiled:
                import numba

                _compiled["count"] = numba.njit(nogil=True, cache=True)(_count_kernel_py)
    return _compiled["count"]


def cast_counts(
    x: NDArray[np.float32],
    q: NDArray[np.float32],
    xs: NDArray[np.float32] | None,
    threshold: float,
    tie_overflows: bool,
    tiny: float,
) -> tuple[int, int, int, int] | None:
    """``(saturated, zeros of x, zeros of q, subnormal q)`` in one pass, when the arrays lie alike
    in memory (all C-contiguous float32 of one shape); None otherwise (the caller counts with NumPy).

    >>> x = np.float32([0.0, 1e-6, 2.0, 600.0]); q = np.float32([0.0, 0.0, 2.0, 448.0])
    >>> cast_counts(x, q, x, 464.0, False, 2.0**-6)
    (1, 1, 2, 0)
    """
    arrays = [x, q] if xs is None else [x, q, xs]
    if any(a.dtype != np.float32 or not a.flags.c_contiguous or a.shape != x.shape for a in arrays):
        return None
    flat_x, flat_q = x.reshape(-1), q.reshape(-1)
    flat_xs = flat_x if xs is None else xs.reshape(-1)
    f = np.float32
    sat, zx, zq, sub = _kernel()(
        flat_x, flat_q, flat_xs, xs is not None, f(threshold), tie_overflows, f(tiny)
    )
    return int(sat), int(zx), int(zq), int(sub)
