"""exp, log and tanh of float32 values, correctly rounded: the same bits on every CPU.

NumPy computes float32 ``exp``, ``log`` and ``tanh`` with vector code chosen for the CPU at run
time (AVX-512, AVX2, or the baseline), and the choices differ in the last bit: on one AMD EPYC,
1,000,000 values through ``np.exp`` gave other bits with ``NPY_DISABLE_CPU_FEATURES=X86_V3``
than without. :func:`exact_f32` returns the float32 nearest (ties to even) to the exact value
instead, which every machine agrees on:

1. the function is evaluated in float64 (any implementation within a few float64 ulps will do);
2. where the float64 values 16 ulps below and above it round to the same float32 value, that is
   the correct rounding (the error cannot carry the exact value across a boundary);
3. the rare value closer than that (about 1 in 30 million) is evaluated again with mpmath at
   200 bits and rounded exactly (``round_rational``). exp, log and tanh of a non-zero rational are
   irrational, so that value is never on the boundary itself.

>>> import numpy as np
>>> exact_f32("exp", np.float32([0.0, 1.0, -200.0, 100.0])).tolist()
[1.0, 2.7182817459106445, 0.0, inf]
>>> exact_f32("log", np.float32([1.0, 0.0, -1.0]))[:2].tolist()
[0.0, -inf]
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import NDArray

from floatlab.formats import FP32
from floatlab.rounding.spec import round_rational

__all__ = ["ELEMENTARY", "exact_f32"]

#: the functions :func:`exact_f32` evaluates
ELEMENTARY = ("exp", "log", "tanh")

# how far (in float64 ulps) the float64 evaluation may be from the exact value: NumPy's own
# float64 loops and the C library's are within 1 or 2
_SLACK = 16.0


def exact_f32(name: str, x: Any, out: NDArray[np.float32] | None = None) -> NDArray[np.float32]:
    """``name`` (``"exp"``, ``"log"`` or ``"tanh"``) of the float32 array ``x``, each value the
    float32 nearest to the exact result (ties to even; overflow to infinity as the IEEE rule
    rounds); ``out`` receives it when given (it may be ``x``).

    >>> import numpy as np
    >>> exact_f32("tanh", np.float32([0.5, -20.0])).tolist()
    [0.46211716532707214, -1.0]
    """
    if name not in ELEMENTARY:
        raise ValueError(f"function {name!r}: expected one of {', '.join(ELEMENTARY)}")
    x32 = np.asarray(x)
    if x32.dtype != np.float32:
        raise ValueError(f"exact_f32 of dtype {x32.dtype}: expected float32 values")
    from floatlab.rounding import _exact_kernels as kern  # (numba: on first use only)

    with np.errstate(all="ignore"):
        y: NDArray[np.float64] = getattr(np, name)(x32.astype(np.float64))
    r = np.empty(x32.shape, np.float32)
    if kern.round_settled(y.reshape(-1), r.reshape(-1), _SLACK):
        flat_x, flat_r, flat_y = x32.reshape(-1), r.reshape(-1), y.reshape(-1)
        for i in np.flatnonzero(np.isnan(flat_r) & ~np.isnan(flat_y)):
            flat_r[i] = _by_mpmath(name, float(flat_x[i]))
    if out is None:
        return r
    out[...] = r
    return out


def _by_mpmath(name: str, x: float) -> float:
    """The float32 nearest to ``name(x)``, from 200 bits of mpmath and exact rounding."""
    import mpmath  # (sympy's dependency: a rare path)

    with mpmath.workprec(200):
        sign, man, exp, _ = getattr(mpmath, name)(mpmath.mpf(x))._mpf_  # (-1)^sign man 2^exp
    exact = (-1) ** int(sign) * Fraction(int(man)) * (Fraction(2) ** int(exp))
    code, _ = round_rational(exact, FP32, "rne", negative_zero=exact < 0)
    return float(np.array([code], np.uint32).view(np.float32)[0])
