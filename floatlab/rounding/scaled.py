"""Scaled casts in one compiled pass: the fp8 recipes' multiply-by-the-scale-and-round
(:func:`round_scaled`), the block-scaled GEMM's scale-and-accumulate (:func:`fma_sum`) and that
GEMM's whole epilogue with its bias and its store (:func:`fma_sum_flushed`).

Both give exactly the bits of the NumPy passes they replace (a float32 product, then
:func:`~floatlab.rounding.round_array`, with the counts of what the cast did: through the
rounding core's own element routines; a chain of :func:`~floatlab.rounding.fma`: through the
CPU's float32 fused multiply-add, which rounds once, to nearest even, as the door's does).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from floatlab.formats import FP32, FloatFormat, get_format
from floatlab.rounding import cpu
from floatlab.rounding.flushed import Flushed
from floatlab.rounding.options import RoundingOptions
from floatlab.rounding.plan import make_plan, plain_cast_plan
from floatlab.rounding.spec import check_rounding

__all__ = ["ScaledRound", "TileScaled", "fma_sum", "fma_sum_flushed", "round_current_tiles", "round_scaled"]


def _fma_operands(
    partials: ArrayLike, a_scale: ArrayLike, b_scale: ArrayLike
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The operands of :func:`fma_sum`, checked and C-contiguous."""
    arrays = []
    for name, v, nd in (("partials", partials, 3), ("a_scale", a_scale, 2), ("b_scale", b_scale, 2)):
        arr = np.asarray(v)
        if arr.dtype != np.float32 or arr.ndim != nd:
            raise ValueError(f"fma_sum operand {name} of {arr.dtype} {arr.shape}: expected {nd}-d float32")
        arrays.append(np.ascontiguousarray(arr))
    pa, sa, sb = arrays
    nt, m, n = pa.shape
    if nt < 1 or sa.shape != (m, nt) or sb.shape != (nt, n):
        raise ValueError(
            f"fma_sum of partials {pa.shape}, scales {sa.shape} and {sb.shape}: expected (T, M, N) with "
            "T >= 1, (M, T) and (T, N)"
        )
    return pa, sa, sb


def fma_sum(
    partials: ArrayLike, a_scale: ArrayLike, b_scale: ArrayLike, *, overwrite: bool = False
) -> np.ndarray:
    """The scale-and-accumulate of a block-scaled GEMM's partial products: for float32
    ``partials`` (T, M, N) and scales ``a_scale`` (M, T), ``b_scale`` (T, N), the float32 (M, N)
    sum over t of ``s * partials[t]`` with ``s = a_scale[:, t] * b_scale[t, :]`` in float32, the
    first term the float32 product ``s * partials[0]`` (plus +0, so a -0 becomes +0) and each
    later one added in order by :func:`fma` (fp32, round to nearest even): bit for bit the loop
    ``acc = fma(s_t, partials[t], acc)``, in one compiled pass. With ``overwrite``, a single term
    (T = 1) that is a C-contiguous float32 array is scaled in its own memory and returned as
    ``partials[0]`` (the caller gives it up: a block GEMM's fresh product); otherwise the result
    is a new array either way.

    >>> parts = np.float32([[[1.0, 2.0]], [[3.0, 1e-8]]])             # T = 2, M = 1, N = 2
    >>> fma_sum(parts, np.float32([[1.0, 1.0]]), np.float32([[1.0, 1.0], [1.0, 1.0]])).tolist()
    [[4.0, 2.0]]
    """
    pa, sa, sb = _fma_operands(partials, a_scale, b_scale)
    if overwrite and pa.shape[0] == 1 and pa is partials and pa.flags.writeable:
        return cpu.run_fma_one(pa[0], sa, sb)
    return cpu.run_fma_sum(pa, sa, sb)


def fma_sum_flushed(
    partials: ArrayLike,
    a_scale: ArrayLike,
    b_scale: ArrayLike,
    fmt: FloatFormat | str,
    rounding: str = "rne",
    *,
    bias: ArrayLike | None = None,
    saturate: bool = False,
    subnormals: bool = True,
    overwrite: bool = False,
) -> Flushed | None:
    """A block-scaled GEMM's epilogue in one pass: ``fma_sum(partials, a_scale, b_scale)``, plus
    ``bias`` (float32, one value per column; a float32 add), stored in ``fmt`` with the counts
    :func:`~floatlab.rounding.round_flushed` gives, each output row finished while it is in the
    cache. Bit for bit those three steps, where the store is one of the plain casts (float32 into
    bfloat16 or fp16, nearest even, no saturation, subnormals kept:
    :func:`~floatlab.rounding.plan.plain_cast_plan`); None for any other store or bias (the
    caller then takes the three steps). ``overwrite`` as in :func:`fma_sum`.

    >>> ones = np.float32([[1.0, 1.0]])
    >>> got = fma_sum_flushed(np.float32([[[1.0, 1e-41]]]), np.float32([[1.0]]), ones, "bf16")
    >>> got.values.tolist(), got.nonzero, got.flushed       # 1e-41 is below bfloat16's subnormals
    ([[1.0, 0.0]], 2, 1)
    """
    pa, sa, sb = _fma_operands(partials, a_scale, b_scale)
    plan = plain_cast_plan(pa, get_format(fmt), rounding, saturate=saturate, subnormals=subnormals)
    b = None if bias is None else np.asarray(bias)
    if plan is None or (b is not None and (b.dtype != np.float32 or b.shape != (pa.shape[2],))):
        return None
    in_place = overwrite and pa.shape[0] == 1 and pa is partials and pa.flags.writeable
    got = cpu.run_fma_store(pa, sa, sb, None if b is None else np.ascontiguousarray(b), plan, in_place)
    if got is None:
        return None
    values, nonzero, kept = got
    return Flushed(values, nonzero, nonzero - kept)


class ScaledRound(NamedTuple):
    """What :func:`round_scaled` gives: the values and the counts of what the cast did.

    >>> r = round_scaled(np.float32([1.0, 0.0]), np.float32(2.0), "e4m3fn")
    >>> r.values.tolist(), r.zeros_in, r.zeros_out
    ([2.0, 0.0], 1, 1)
    """

    values: np.ndarray  # float32, the shape of the input
    overflow: int  # values beyond the format's range before saturation (infinities too, NaNs not)
    zeros_in: int  # zeros among the inputs
    zeros_out: int  # zeros among the results (a non-zero input that became 0 was flushed)
    subnormal: int  # results below the format's smallest normal, not 0


def round_scaled(
    x: np.ndarray,
    scale: ArrayLike,
    fmt: FloatFormat | str,
    block: tuple[int, int] | None = None,
    *,
    rounding: str = "rne",
    saturate: bool = False,
) -> ScaledRound:
    """``fl(x * scale)`` rounded into ``fmt``, one float32 scale per block, with the counts of
    what the cast did, in one compiled pass: exactly ``round_array(x * s, fmt, rounding,
    saturate=saturate)`` with ``x * s`` the float32 product of each value and its block's scale
    (NumPy's, element by element), where NumPy needs a pass for the product, one for the
    rounding and more for the counts.

    ``x`` is a C-contiguous float32 array, or the transpose of a C-contiguous matrix (read as it
    lies, with no transposed copy first); the values come back C-contiguous, of x's shape.
    ``fmt`` is a format within fp32, ``rounding`` a deterministic mode. With ``block=None``
    ``scale`` is one number for the whole array; with ``block=(br, bc)`` the blocks are br rows
    by bc columns of x's last two axes (1 x k: tiles along the last axis; k x 1: tiles down the
    rows; shorter last blocks where k does not divide), and ``scale`` has shape
    ``(*x.shape[:-2], ceil(R / br), ceil(C / bc))``.

    >>> x = np.float32([[1.0, 2.0, 3.0], [0.5, 600.0, 1e-9]])
    >>> r = round_scaled(x, np.float32([[1.0, 0.5]]), "e4m3fn", (2, 2), saturate=True)
    >>> r.values.tolist(), r.overflow, r.zeros_out
    ([[1.0, 2.0, 1.5], [0.5, 448.0, 0.0]], 1, 1)
    """
    f = get_format(fmt)
    if not isinstance(x, np.ndarray) or x.dtype != np.float32:
        what = f"{x.dtype} {x.shape}" if isinstance(x, np.ndarray) else type(x).__name__
        raise ValueError(f"x: expected a float32 array, got {what}")
    # a matrix held transposed (the transpose of a C-contiguous one) is read as it lies
    transposed = x.ndim == 2 and not x.flags.c_contiguous and x.T.flags.c_contiguous
    if not x.flags.c_contiguous and not transposed:
        raise ValueError(f"x of shape {x.shape}: expected a C-contiguous array or a transposed matrix")
    if not FP32.contains(f):
        raise ValueError(f"format {f.name or f}: expected a format within fp32 (its values float32 values)")
    if check_rounding(rounding) == "stochastic":
        raise ValueError(
            f"rounding={rounding!r}: expected a deterministic mode (rne, rna, rtz, rup, rdown, rodd)"
        )
    s = np.asarray(scale)
    if s.dtype != np.float32:
        raise ValueError(f"scale of dtype {s.dtype}: expected float32 scales")
    if block is None:
        if s.size != 1:
            raise ValueError(f"scale of shape {s.shape}: expected one scale without a block")
        cols = x.shape[-1] if x.ndim else 1
        shape = (1, x.size // cols if cols else 0, cols)
        br_bc = (max(shape[1], 1), max(cols, 1))
    else:
        if (
            not isinstance(block, tuple)
            or len(block) != 2
            or any(isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1 for k in block)
        ):
            raise ValueError(f"block={block!r}: expected None or two whole numbers >= 1")
        if x.ndim < 2:
            raise ValueError(f"block={block!r}: blocks of rows and columns need a 2-d array, got {x.ndim}-d")
        rows, cols = x.shape[-2:]
        br_bc = (int(block[0]), int(block[1]))
        want = (*x.shape[:-2], -(-rows // br_bc[0]), -(-cols // br_bc[1]))
        if s.shape != want:
            raise ValueError(f"scale of shape {s.shape}: expected {want} for blocks of {block} of {x.shape}")
        shape = (int(np.prod(x.shape[:-2])), rows, cols)
    options = RoundingOptions.make(rounding, saturate=saturate)
    plan = make_plan(FP32, f, options, back=True, flags=False)
    values, (over, zx, zq, sub) = cpu.run_scaled_round(
        x.T.reshape(-1) if transposed else x.reshape(-1),
        np.ascontiguousarray(s).reshape(-1),
        shape,
        br_bc,
        plan.p,
        plan.d,
        f.smallest_normal,
        transposed,
    )
    return ScaledRound(values.reshape(x.shape), over, zx, zq, sub)


class TileScaled(NamedTuple):
    """What :func:`round_current_tiles` gives: the cast (values and counts), each tile's scale and
    the largest tile amax.

    >>> t = round_current_tiles(np.float32([[1.0, -2.0, 0.5, 0.0]]), "e4m3fn", (1, 2))
    >>> t.cast.values.tolist(), t.scale.tolist(), t.amax
    ([[224.0, -448.0, 448.0, 0.0]], [[224.0, 896.0]], 2.0)
    """

    cast: ScaledRound
    scale: np.ndarray  # float32, (*x.shape[:-2], ceil(R / br), ceil(C / bc))
    amax: float  # the largest tile amax


def round_current_tiles(
    x: np.ndarray, fmt: FloatFormat | str, tile: tuple[int, int], *, eps: float = 1e-12, pow2: bool = False
) -> TileScaled | None:
    """Current tile scaling's cast in one pass, reading each tile once: every tile of ``tile`` =
    (1, k) values along the last axis of the C-contiguous float32 array ``x`` (or (k, 1) down its
    rows; shorter last tiles where k does not divide) gets the scale float32(fmt.max / max(amax,
    eps)) of its own amax, divided in float64 and rounded once (torchao's ``amax_to_scale``;
    with ``pow2`` its fraction bits cleared: rounded down to a power of two), and is cast while
    it is in the cache: exactly :func:`round_scaled` of ``x`` with those scales, to nearest even,
    saturating.

    None where that one pass does not apply, and the caller's general path decides: a format
    with flush-to-zero, fnuz zeros or more than fp32's bits; ``x`` not a C-contiguous float32
    array of two or more dimensions, or empty; a tile whose amax is an infinity or a NaN (the
    recipes give it another scale, and saturate the whole array otherwise); an ``x`` of zeros
    alone (the sign of its zero amax is NumPy's to decide).

    >>> x = np.float32([[3.0, 1.0], [0.25, 0.5]])
    >>> t = round_current_tiles(x, "e4m3fn", (2, 1))          # a tile per column
    >>> t.scale.tolist(), t.cast.values.tolist()              # 448 / 3 and 448 / 1
    ([[149.3333282470703, 448.0]], [[448.0, 448.0], [36.0, 224.0]])
    >>> round_current_tiles(np.float32([[np.inf, 1.0]]), "e4m3fn", (1, 2)) is None
    True
    """
    f = get_format(fmt)
    if (
        not isinstance(x, np.ndarray)
        or x.dtype != np.float32
        or not x.flags.c_contiguous
        or x.ndim < 2
        or x.size == 0
        or not FP32.contains(f)
    ):
        return None
    br, bc = (int(tile[0]), int(tile[1]))
    if min(br, bc) != 1 or br < 1 or bc < 1:
        raise ValueError(f"tile={tile!r}: expected (1, k) along the rows or (k, 1) down them, k >= 1")
    rows, cols = x.shape[-2:]
    shape = (x.size // (rows * cols), rows, cols)
    plan = make_plan(FP32, f, RoundingOptions.make("rne", saturate=True), back=True, flags=False)
    keep = 0xFF800000 if pow2 else 0xFFFFFFFF
    got = cpu.run_tile_cast(
        x.reshape(-1), shape, (br, bc), (f.max, eps, keep), plan.p, plan.d, f.smallest_normal
    )
    if got is None:
        return None
    values, scales, (over, zx, zq, sub), top, ok = got
    if not ok or top == 0:
        return None
    scale = scales.reshape(*x.shape[:-2], -(-rows // br), -(-cols // bc))
    amax = float(np.uint32(top).view(np.float32))
    return TileScaled(ScaledRound(values.reshape(x.shape), over, zx, zq, sub), scale, amax)
