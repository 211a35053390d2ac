"""The scaled fp8 cast of the recipes in one compiled pass (:func:`floatlab.rounding.round_scaled`):
``x * scale`` (one scale per tensor, tile or block), the saturating cast and the counts of
:func:`~floatlab.train.recipes.scales.cast_shares`, where NumPy takes a pass for the product, one
for the cast and one for the counts. The NumPy passes (:func:`~floatlab.train.recipes.scales.
saturating_cast` of ``x * scale``, :func:`~floatlab.train.recipes.scales.cast_shares`) stay as
the reference and as the path for arrays that do not lie C-contiguous in memory.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from floatlab.formats import FloatFormat
from floatlab.rounding import ScaledRound, round_scaled
from floatlab.train.recipes.scales import CastShares


def scaled_cast(
    x: NDArray[np.float32],
    scale: NDArray[np.float32] | np.float32,
    fmt: FloatFormat,
    bound: float,
    block: tuple[int, int] | None = None,
) -> tuple[NDArray[np.float32], ScaledRound] | None:
    """``saturating_cast(x * scale, fmt, bound)`` and the cast's counts, for a float32 ``x`` that is
    not empty and C-contiguous or a transposed C-contiguous matrix (None otherwise: the caller
    takes the NumPy path). ``block`` and the
    shape of ``scale`` as in :func:`floatlab.rounding.round_scaled`.

    >>> from floatlab.train.recipes.scales import E5M2
    >>> q, counted = scaled_cast(np.float32([1.0, np.inf, 0.0]), np.float32(2.0), E5M2, math.inf)
    >>> q.tolist(), counted.overflow, counted.zeros_in
    ([2.0, 57344.0, 0.0], 1, 1)
    """
    held = x.flags.c_contiguous or (x.ndim == 2 and x.T.flags.c_contiguous)  # (or a transposed matrix)
    if x.dtype != np.float32 or not held or x.size == 0:
        return None
    counted = round_scaled(x, np.asarray(scale, np.float32), fmt, block, saturate=True)
    q = counted.values
    if fmt.has_inf and bound == math.inf:
        # the rounding door saturates finite overflows only; an infinity is clamped as
        # torchao's clamp and CUDA's __NV_SATFINITE do (saturating_cast's rule)
        np.clip(q, -fmt.max, fmt.max, out=q)
    return q, counted


def shares_of(counted: ScaledRound, n: int, saturated: bool) -> CastShares:
    """The :class:`~floatlab.train.recipes.scales.CastShares` of a cast of ``n`` values from its
    counts; ``saturated=False`` counts none saturated (as ``cast_shares`` without ``xs``).

    >>> shares_of(ScaledRound(np.zeros(4, np.float32), 1, 1, 2, 1), 4, True)
    CastShares(saturated=0.25, flushed=0.25, subnormal=0.25)
    """
    sat = counted.overflow if saturated else 0
    # x == 0 gives q == 0 (the scales are finite); a NaN is non-zero on both sides
    flushed = max(counted.zeros_out - counted.zeros_in, 0)
    return CastShares(sat / n, flushed / n, counted.subnormal / n)
