"""A rounding and what it flushed: :func:`round_flushed`, the door's :func:`round_array` with the
number of non-zero values it turned into zeros, counted in the same pass where the cast is one of
the trainer's plain stores (float32 into bfloat16 or fp16, to nearest even).

A training step's gradient stores ask this of every gradient (the share flushed by underflow);
counted apart, the two counts read the input and the result once more each, as long as the
rounding itself, which runs at memory speed.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from floatlab.backend import is_cupy
from floatlab.formats import FloatFormat, get_format
from floatlab.rounding import cpu
from floatlab.rounding.arrays import round_array
from floatlab.rounding.options import RNG, RoundingOptions, as_float_array
from floatlab.rounding.plan import UINT_OF_BITS, make_plan, round_target
from floatlab.rounding.spec import check_rounding

__all__ = ["Flushed", "round_flushed"]


class Flushed(NamedTuple):
    """What :func:`round_flushed` gives.

    >>> round_flushed(np.float32([1e-40, 2.0, 0.0]), "fp16")
    Flushed(values=array([0., 2., 0.], dtype=float32), nonzero=2, flushed=1)
    """

    values: Any  # round_array's result
    nonzero: int  # the non-zero inputs (a NaN is one; -0 is a zero)
    flushed: int  # the non-zero inputs whose result is a zero


def round_flushed(
    x: ArrayLike,
    fmt: FloatFormat | str,
    rounding: str = "rne",
    *,
    rng: RNG = None,
    saturate: bool = False,
    subnormals: bool = True,
) -> Flushed:
    """``round_array(x, fmt, rounding, ...)`` and how many of x's non-zero values became zeros
    (rounding keeps a zero a zero, so these are the values underflow flushed). A C-contiguous
    float32 array rounded to nearest even into bfloat16 or fp16 (the door's one-pass casts) is
    rounded and counted in one pass; anything else is rounded by the door and counted after.

    >>> r = round_flushed(np.float32([1e-45, 3e-39, 1.0, -0.0]), "bf16")
    >>> r.nonzero, r.flushed          # 1e-45 is below bfloat16's smallest, 2^-133
    (3, 1)
    """
    f = get_format(fmt)
    # (nearest even only: another mode never has a one-pass cast, and a stochastic one would
    # draw its key here and again in the door, moving ``rng`` on twice)
    plain = check_rounding(rounding) == "rne"
    if plain and type(x) is np.ndarray and x.dtype == np.float32 and x.flags.c_contiguous:
        options = RoundingOptions.make(rounding, saturate=saturate, subnormals=subnormals)
        a, src = as_float_array(x)
        target, specials = round_target(src, f, a.dtype)
        plan = make_plan(src, target, options, back=True, flags=False, specials=specials)
        got = cpu.run_counting_nonzero(a.reshape(-1).view(UINT_OF_BITS[src.bits]), plan)
        if got is not None:
            out, nx, nr = got
            return Flushed(out.view(np.float32).reshape(a.shape), nx, nx - nr)
    r = round_array(x, f, rounding, rng=rng, saturate=saturate, subnormals=subnormals)
    xp: Any = np
    if is_cupy(x):
        import cupy

        xp = cupy
    nonzero = int(xp.count_nonzero(xp.asarray(x) != 0))
    return Flushed(r, nonzero, nonzero - int(xp.count_nonzero(r != 0)))
