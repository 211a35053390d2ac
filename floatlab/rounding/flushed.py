"""A rounding and what it flushed: :func:`round_flushed`, the door's :func:`round_array` with the
number of non-zero values it turned into zeros, counted in the same pass where the cast is one of
the trainer's plain stores (float32 into bfloat16 or fp16, to nearest even); and, on the same plain
casts, a pure policy's reduction in its own format (:func:`pairwise_sums`).

A training step's gradient stores ask this of every gradient (the share flushed by underflow);
counted apart, the two counts read the input and the result once more each, as long as the
rounding itself, which runs at memory speed.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from floatlab._signature import unexpected_keyword
from floatlab.backend import get_xp, host_ints
from floatlab.formats import FloatFormat, get_format
from floatlab.rounding import cpu
from floatlab.rounding.arrays import round_array
from floatlab.rounding.options import RoundingKnobs, knob_signature
from floatlab.rounding.plan import plain_cast_plan

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["Flushed", "pairwise_sums", "round_flushed", "round_owned"]


class Flushed(NamedTuple):
    """What :func:`round_flushed` gives.

    >>> round_flushed(np.float32([1e-40, 2.0, 0.0]), "fp16")
    Flushed(values=array([0., 2., 0.], dtype=float32), nonzero=2, flushed=1)
    """

    values: Any  # round_array's result
    nonzero: int  # the non-zero inputs (a NaN is one; -0 is a zero)
    flushed: int  # the non-zero inputs whose result is a zero


def _one_pass(
    x: ArrayLike,
    f: FloatFormat,
    rounding: str,
    knobs: RoundingKnobs,
    *,
    overwrite: bool,
    owned: bool,
) -> Flushed | None:
    """The one-pass cast and count of :func:`round_flushed` (with ``overwrite``, in x's own memory
    where x is writeable), or None where it does not apply; with ``owned``, None too where x is
    not writeable (:func:`round_owned` then rounds through the door)."""
    try:
        plan = plain_cast_plan(x, f, rounding, **knobs)
    except TypeError as e:  # a misspelt knob (inline, not passing_on: the hot path)
        raise unexpected_keyword(e) from None
    if plan is None:
        return None
    a = np.asarray(x)
    if owned and not a.flags.writeable:
        return None
    overwrite = overwrite and a.flags.writeable  # (a read-only array is copied as always)
    got = cpu.run_counting_nonzero(a.reshape(-1).view(np.uint32), plan, overwrite)
    if got is None:
        return None
    out, nx, nr = got
    return Flushed(a if overwrite else out.view(np.float32).reshape(a.shape), nx, nx - nr)


@knob_signature
def round_flushed(
    x: ArrayLike,
    fmt: FloatFormat | str,
    rounding: str = "rne",
    *,
    overwrite: bool = False,
    **knobs: Unpack[RoundingKnobs],
) -> Flushed:
    """``round_array(x, fmt, rounding, ...)`` and how many of x's non-zero values became zeros
    (rounding keeps a zero a zero, so these are the values underflow flushed). A C-contiguous
    float32 array rounded to nearest even into bfloat16 or fp16 (the door's one-pass casts) is
    rounded and counted in one pass; anything else is rounded by the door and counted after.
    With ``overwrite`` the caller gives ``x`` up: where the one-pass cast applies and x is
    writeable, x is rounded in its own memory and is the values (no new array; the loop is faster
    too); elsewhere x is left as it was.

    >>> r = round_flushed(np.float32([1e-45, 3e-39, 1.0, -0.0]), "bf16")
    >>> r.nonzero, r.flushed          # 1e-45 is below bfloat16's smallest, 2^-133
    (3, 1)
    >>> x = np.float32([1 / 3, 1e-45])
    >>> r = round_flushed(x, "bf16", overwrite=True)
    >>> r.values is x, x.tolist(), r.flushed
    (True, [0.333984375, 0.0], 1)
    """
    f = get_format(fmt)
    got = _one_pass(x, f, rounding, knobs, overwrite=overwrite, owned=False)
    if got is not None:
        return got
    r = round_array(x, f, rounding, **knobs)
    xp = get_xp(x)
    nonzero, kept = host_ints([xp.count_nonzero(x), xp.count_nonzero(r)])
    return Flushed(r, nonzero, nonzero - kept)


@knob_signature
def round_owned(
    x: ArrayLike,
    fmt: FloatFormat | str,
    rounding: str = "rne",
    **knobs: Unpack[RoundingKnobs],
) -> Any:
    """``round_array(x, fmt, rounding, ...)`` for a caller that owns ``x`` and gives it up (a
    GEMM's fresh output, stored in its format): where the one-pass cast applies (as in
    :func:`round_flushed`) and x is writeable, x is rounded in its own memory and returned, with
    no new array; anything else goes through the door, x left as it was.

    >>> x = np.float32([1 / 3, 70000.0])
    >>> round_owned(x, "fp16") is x, x.tolist()
    (True, [0.333251953125, inf])
    """
    f = get_format(fmt)
    got = _one_pass(x, f, rounding, knobs, overwrite=True, owned=True)
    if got is not None:
        return got.values
    return round_array(x, f, rounding, **knobs)


def pairwise_sums(
    x: ArrayLike,
    axis: int,
    fmt: FloatFormat | str,
    rounding: str = "rne",
    *,
    saturate: bool = False,
    subnormals: bool = True,
) -> np.ndarray | None:
    """The sums of ``x`` along ``axis`` in an accumulator of ``fmt``, ``x`` being a float32 array of
    values of ``fmt``: a tree of pairwise sums, as a GPU reduction adds its partial sums
    (``s[i] += s[i + h]``): at a level of m values, value i < m // 2 and value i + m // 2 are
    added in float32 and rounded into ``fmt``, which is their correctly rounded sum (24 >= 2p + 2
    bits: no double rounding), and an odd level's last value is carried to the next. One
    compiled serial pass; float32, ``x``'s shape without ``axis`` (an axis of one value gives
    that value, of none zeros). None where the door's one-pass cast does not apply (as in
    :func:`round_flushed`: a float32 NumPy array into bfloat16 or fp16, to nearest even, no
    saturation, subnormals kept; fp16 where the CPU has its own conversion).

    >>> pairwise_sums(np.float32([256.0, 1.0, 1.0, 1.0]), 0, "bf16").tolist()  # 257 -> 256, + 2
    258.0
    >>> pairwise_sums(np.float32([[1.0, 2.0, 4.0]]), 1, "bf16").tolist()        # (1 + 4) + 2
    [7.0]
    >>> pairwise_sums(np.float32([1.0, 2.0]), 0, "bf16", "rtz") is None
    True
    """
    f = get_format(fmt)
    plan = plain_cast_plan(x, f, rounding, contiguous=False, saturate=saturate, subnormals=subnormals)
    if plan is None or not plan.cast:
        return None
    a: np.ndarray = np.asarray(x)
    axis = int(axis) % max(a.ndim, 1)
    shape = a.shape[:axis] + a.shape[axis + 1 :]
    n, pre, post = a.shape[axis], math.prod(a.shape[:axis]), math.prod(shape[axis:])
    # a copy, which the tree works in (an empty axis: a level of one zero)
    w = np.array(a, order="C").reshape(pre, n, post) if n else np.zeros((pre, 1, post), np.float32)
    sums = cpu.run_tree_sum(w, plan)
    return None if sums is None else np.ascontiguousarray(sums).reshape(shape)
