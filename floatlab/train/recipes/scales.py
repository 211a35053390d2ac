"""The scale arithmetic of the fp8 recipes, each rule as its source computes it.

* :func:`current_scale`: a scale from the tensor's own amax (torchao's ``amax_to_scale`` in
  ``torchao/float8/float8_utils.py``): ``float32(fp8_max / max(amax, 1e-12))``, the division in
  float64 then rounded to float32, as torchao does for eager and compiled code alike;
* :func:`round_down_pow2`: the scale rounded down to a power of two by clearing its fraction bits
  (Transformer Engine's ``compute_scale_from_amax`` in ``common/recipe/recipe_common.cuh``);
* :func:`delayed_update`: Transformer Engine's delayed-scaling update of an amax history and a
  scale (``kernel_bulk`` in ``common/recipe/delayed_scaling.cu``, the default fused path);
* :func:`saturating_cast`: ``x * scale`` cast into fp8 with saturation, as torchao's
  ``to_fp8_saturated`` (clamp, then cast) and CUDA's ``__NV_SATFINITE`` conversion do: values
  beyond the largest finite value, infinities included, become +-fp8_max; NaN stays NaN.

Every conversion into fp8 goes through :func:`floatlab.round_array`, and so does every
conversion into fp32 but the scales' own: :func:`current_scale` rounds its float64 quotients to
float32 by NumPy's conversion (to nearest even, as the door; a test compares the two), which
costs nothing per call on the few numbers a step has.

>>> s = current_scale(3.5, E4M3)
>>> float(s), float(round_down_pow2(s))
(128.0, 128.0)
>>> saturating_cast(np.array([1.0, 500.0, -np.inf], np.float32), E4M3).tolist()
[1.0, 448.0, -448.0]
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from floatlab.formats import FP32, FloatFormat, get_format
from floatlab.rounding import round_array
from floatlab.train.recipes._counting import cast_counts
from floatlab.train.recipes._fp8_kernels import tile_amax

__all__ = [
    "AMAX_EPS",
    "E4M3",
    "E5M2",
    "CastShares",
    "amax_of",
    "cast_shares",
    "cast_threshold",
    "current_scale",
    "delayed_update",
    "round_down_pow2",
    "saturating_cast",
    "to_float32",
]

#: fp8 E4M3 as the recipes use it (OCP "fn": no infinities, one NaN; largest finite 448)
E4M3: FloatFormat = get_format("float8_e4m3fn")
#: fp8 E5M2 (IEEE-like: infinities and NaNs; largest finite 57344)
E5M2: FloatFormat = get_format("float8_e5m2")
#: the floor under an amax before it divides (torchao.float8.float8_utils.EPS)
AMAX_EPS = 1e-12
_FP32_MAX = np.float32(np.finfo(np.float32).max)


def to_float32(x: ArrayLike) -> NDArray[np.float32]:
    """``x`` as a float32 array (itself when it is one); wider values rounded to nearest even.

    >>> to_float32(np.array([0.1])).tolist()      # the float32 nearest 0.1
    [0.10000000149011612]
    """
    arr = np.asarray(x)
    if arr.dtype == np.float32:
        return arr
    # float64 rounds once, straight to fp32; float16 and bfloat16 pass through exactly
    out: NDArray[np.float32] = round_array(arr, FP32).astype(np.float32)
    return out


def amax_of(x: NDArray[np.float32], nan: str) -> float:
    """``max(|x|)`` of a float32 array (0 when empty). ``nan="propagate"``: a NaN makes the amax NaN
    (``torch.max(torch.abs(x))``, torchao); ``nan="ignore"``: NaNs are skipped (Transformer
    Engine's cast kernels take ``fmaxf(fabsf(v), amax)``, and fmaxf drops a NaN operand).

    >>> x = np.array([1.0, np.nan, -3.0], np.float32)
    >>> amax_of(x, "propagate"), amax_of(x, "ignore")
    (nan, 3.0)
    """
    if x.size == 0:
        return 0.0
    # max and min are one read each and allocate nothing, unlike np.abs(x).max()
    hi, lo = x.max(), x.min()
    amax = float(np.maximum(hi, -lo))  # np.maximum keeps a NaN
    if amax != amax and nan == "ignore":
        return float(np.fmax.reduce(np.abs(x).ravel(), initial=0.0))
    return amax


def tensor_amax(x: NDArray[np.float32], nan: str) -> float:
    """:func:`amax_of` in one compiled pass for a C-contiguous tensor that is not all zeros and
    holds no NaN (the same number: the largest magnitude); the NumPy reductions otherwise (they
    decide the sign of a zero amax and which NaN, as before).

    >>> tensor_amax(np.float32([[1.0, -3.0], [2.0, 0.5]]), "propagate")
    3.0
    """
    if x.flags.c_contiguous and x.size:
        found = tile_amax(x.reshape(1, -1), (1, x.size))
        if found is not None:
            return float(found[0, 0])
    return amax_of(x, nan)


def round_down_pow2(scale: ArrayLike) -> NDArray[np.float32]:
    """Each float32 scale rounded down to a power of two: its fraction bits cleared, as Transformer
    Engine's ``compute_scale_from_amax`` does with ``scale_bits & 0xFF800000``. 0, inf and NaN stay.

    torchao's ``_round_scale_down_to_power_of_2`` computes ``exp2(floor(log2(scale)))`` in float32
    instead; its log2 rounds to the integer k for a scale within a few ulps below 2^k (``|k| >= 8``),
    and so returns 2^k, above the scale. Clearing the bits is exact.

    >>> round_down_pow2(np.float32([448.0, 3.0, 2.0**16 - 2.0**-8, 0.0])).tolist()
    [256.0, 2.0, 32768.0, 0.0]
    """
    s = np.asarray(scale, dtype=np.float32)
    cleared = (s.view(np.uint32) & np.uint32(0xFF800000)).view(np.float32)
    # a NaN's cleared fraction would read as inf: keep the NaN
    out: NDArray[np.float32] = np.where(np.isnan(s), s, cleared)
    return out


def current_scale(amax: ArrayLike, fmt: FloatFormat, pow2: bool = False) -> NDArray[np.float32]:
    """The scale of current scaling for each amax: ``float32(fmt.max / max(amax, AMAX_EPS))``,
    divided in float64 and rounded once to float32 (torchao's ``amax_to_scale``), and with
    ``pow2`` rounded down to a power of two. An amax of 0 meets the floor 1e-12 (a finite scale).
    An infinite or NaN amax gives the scale 1, as Transformer Engine's current scaling does
    (``compute_scale_from_amax`` in ``transformer_engine/common/recipe/recipe_common.cuh``): torchao
    would give 0 and NaN there, and a NaN scale would turn every value of the tensor into NaN.

    >>> current_scale(np.float32([448.0, 0.0, np.inf, np.nan]), E4M3).tolist()
    [1.0, 447999985582080.0, 1.0, 1.0]
    >>> float(current_scale(0.3, E5M2, pow2=True))          # 57344 / 0.3 = 191146.7 -> 2^17
    131072.0
    """
    if isinstance(amax, (float, np.floating)):
        # one amax (a per-tensor recipe's, each step): the same arithmetic on scalars, where the
        # array path's fixed costs took 0.16 ms
        with np.errstate(over="ignore"):  # (an amax beyond float32's range is inf, as the door gives)
            a32 = np.float32(amax)
        one = np.float32(fmt.max / max(float(a32), AMAX_EPS)) if math.isfinite(a32) else np.float32(1.0)
        return round_down_pow2(one) if pow2 else np.asarray(one, np.float32)
    a = to_float32(amax)
    # the float64 division then one rounding to float32: torchao's arithmetic, step for step
    # (NumPy's conversion rounds to nearest even, as the door does: a test checks the scales
    # against the door; at most fmt.max / 1e-12, the ratio never leaves float32's range)
    ratio = fmt.max / np.maximum(a.astype(np.float64), AMAX_EPS)
    scale: NDArray[np.float32] = np.where(np.isfinite(a), ratio.astype(np.float32), np.float32(1.0))
    return round_down_pow2(scale) if pow2 else scale


def delayed_update(
    history: ArrayLike, scale: float, fp8_max: float, margin: int = 0, algo: str = "max"
) -> tuple[NDArray[np.float32], np.float32]:
    """One Transformer Engine delayed-scaling update: ``(new_history, new_scale)``.

    ``history[0]`` holds the amax of the step just ended (TE's cast kernels write it there). The
    rule is ``kernel_bulk`` in ``transformer_engine/common/recipe/delayed_scaling.cu`` (TE 1.6 to
    2.x, the default fused path of ``FP8GlobalStateManager.reduce_and_update_fp8_tensors``):

    1. when that amax is not 0, the history rolls by -1 (``torch.roll(h, -1)``: the step's amax
       moves to the last slot, the oldest entry leaves) and slot 0 is zeroed for the next step;
       a step whose amax is 0 (the operand was not used) leaves the history alone (TE PR #825);
    2. the amax to use is the largest entry of the history (``"max"``, NaN entries ignored as
       fmaxf does) or the step's own (``"most_recent"``);
    3. ``scale = float32(fp8_max * 2^-margin) / amax`` in float32 when that amax is finite and
       above 0, else the previous scale is kept; an infinite quotient (a tiny amax) becomes
       float32's largest value.

    The unfused Python path (``NVTE_UNFUSED_FP8_UPDATE=1``: ``_default_get_amax_and_update_history``
    and ``_default_sf_compute`` in ``transformer_engine/pytorch/quantization.py``) differs only
    there: it rolls on a zero amax too, and its ``torch.max`` lets a NaN entry through, which then
    keeps the previous scale.

    >>> h, s = delayed_update(np.float32([2.0, 0.0, 0.0, 0.0]), 1.0, 448.0)
    >>> h.tolist(), float(s)                         # 448 / 2
    ([0.0, 0.0, 0.0, 2.0], 224.0)
    >>> h, s = delayed_update(np.float32([0.0, 0.0, 0.0, 2.0]), 224.0, 448.0)
    >>> h.tolist(), float(s)                         # a zero amax: nothing moves
    ([0.0, 0.0, 0.0, 2.0], 224.0)
    >>> float(delayed_update(np.float32([np.inf]), 224.0, 448.0)[1])   # keeps the previous scale
    224.0
    """
    h = to_float32(np.array(history, ndmin=1))  # (a copy: the caller's history stays as it was)
    last = h[0]
    amax = np.float32(0.0)
    if last != 0:  # (a NaN amax is not 0: it rolls)
        rolled = np.roll(h, -1)
        # fmaxf over the whole window from 0: a NaN entry never wins
        amax = np.fmax.reduce(rolled, initial=np.float32(0.0))
        rolled[0] = 0.0
        h = rolled
    if algo == "most_recent":
        amax = last
    old = np.float32(scale)
    # std::pow(2.f, -margin) times the float fp8_max: exact for any sensible margin
    scaled_max = np.float32(fp8_max) * np.float32(2.0**-margin)
    if np.isfinite(amax) and amax > 0:
        with np.errstate(over="ignore"):
            new = np.float32(scaled_max / np.float32(amax))
    else:
        new = old
    if np.isinf(new):
        new = _FP32_MAX
    return h.astype(np.float32), np.float32(new)


def saturating_cast(
    xs: NDArray[np.float32], fmt: FloatFormat, bound: float | None = None
) -> NDArray[np.float32]:
    """``xs`` (float32) cast to nearest even into ``fmt`` with saturation: beyond +-fmt.max,
    infinities included, the value is +-fmt.max; NaN stays NaN. ``bound`` is ``max(|xs|)`` over the
    non-NaN values when the caller knows it (it saves a pass where no infinity can occur).

    >>> saturating_cast(np.float32([57344.0, 70000.0, np.inf, np.nan]), E5M2).tolist()
    [57344.0, 57344.0, 57344.0, nan]
    """
    q: NDArray[np.float32] = round_array(xs, fmt, saturate=True)
    if fmt.has_inf and (bound is None or bound == np.inf):
        # the rounding door saturates finite overflows only; an infinity is clamped as
        # torchao's clamp and CUDA's __NV_SATFINITE do
        np.clip(q, -fmt.max, fmt.max, out=q)
    return q


class CastShares(NamedTuple):
    """The shares (0..1) of a cast's values: saturated, flushed to zero, subnormal in fp8.

    >>> CastShares(0.0, 0.25, 0.5).flushed
    0.25
    """

    saturated: float
    flushed: float
    subnormal: float


def cast_threshold(fmt: FloatFormat) -> float:
    """The magnitude from which a round-to-nearest-even cast into ``fmt`` overflows (the tie itself
    overflows when fmt.max's last fraction bit is 1): a cast whose ``max(|x * scale|)`` stays below
    it saturates nothing.

    >>> cast_threshold(E4M3), cast_threshold(E5M2)
    (464.0, 61440.0)
    """
    return _overflow_threshold(fmt)[0]


def _overflow_threshold(fmt: FloatFormat) -> tuple[float, bool]:
    """The magnitude from which a round-to-nearest-even cast overflows, and whether the tie itself
    does: the midpoint between fmt.max and the next value the exponent range would have; a tie
    goes to the even neighbour, fmt.max when its last fraction bit is 0 (E4M3's 448 = 1.110b x 2^8),
    the next binade's value when it is 1 (E5M2's 57344 = 1.11b x 2^15)."""
    half_ulp = 2.0 ** (fmt.emax - fmt.mantissa_bits - 1)
    return fmt.max + half_ulp, bool(fmt.max_code & 1)


def cast_shares(
    x: NDArray[np.float32],
    q: NDArray[np.float32],
    fmt: FloatFormat,
    xs: NDArray[np.float32] | None = None,
    bound: float = float("inf"),
) -> CastShares:
    """The shares of the values of ``x`` whose saturating cast ``q`` (of ``xs = x * scale``)
    saturated, flushed to zero (``x`` not 0, ``q`` 0) or is subnormal in ``fmt`` (``0 < |q| <`` its
    smallest normal). Saturated means that a plain cast would have overflowed: ``|xs|`` beyond the
    overflow threshold (464 for E4M3, 61440 for E5M2, where round to nearest even leaves the
    range); without ``xs`` none is counted. ``bound``, when known, is ``max(|xs|)`` over the non-NaN
    values: below the threshold nothing saturated and ``xs`` is not read. NaNs count in none.

    >>> x = np.float32([1e-6, 0.01, 2.0, 600.0])
    >>> q = saturating_cast(x, E4M3)
    >>> cast_shares(x, q, E4M3, xs=x, bound=600.0)
    CastShares(saturated=0.25, flushed=0.25, subnormal=0.25)
    """
    n = x.size
    if n == 0:
        return CastShares(0.0, 0.0, 0.0)
    threshold, tie_overflows = _overflow_threshold(fmt)
    counted = cast_counts(
        x, q, xs if bound >= threshold else None, threshold, tie_overflows, fmt.smallest_normal
    )
    if counted is not None:  # the compiled twin of the counts below, in one pass
        sat, zeros_x, zeros_q, sub = counted
        return CastShares(sat / n, max(zeros_q - zeros_x, 0) / n, sub / n)
    saturated = 0
    if bound >= threshold and xs is not None:
        t = np.float32(threshold)
        if tie_overflows:
            saturated = int(np.count_nonzero(xs >= t)) + int(np.count_nonzero(xs <= -t))
        else:
            saturated = int(np.count_nonzero(xs > t)) + int(np.count_nonzero(xs < -t))
    zeros_q = n - int(np.count_nonzero(q))
    # x == 0 gives q == 0 (the scales are finite); a NaN is non-zero on both sides
    flushed = zeros_q - (n - int(np.count_nonzero(x)))
    tiny = np.float32(fmt.smallest_normal)
    below = int(np.count_nonzero(q < tiny)) - int(np.count_nonzero(q <= -tiny))  # -tiny < q < tiny
    return CastShares(saturated / n, max(flushed, 0) / n, (below - zeros_q) / n)
