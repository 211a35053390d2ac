"""Block scaling as DeepSeek-V3 trains with it: one fp32 scale per small tile, and a GEMM that
applies the scales tile by tile along the reduction.

DeepSeek-V3 Technical Report (arXiv 2412.19437), section 3.3.2, "Fine-Grained Quantization":
activations (and the output gradients) are scaled per 1x128 tile, "per token per 128 channels",
weights per 128x128 block, "per 128 input channels per 128 output channels"; "Online
Quantization": each scale comes from the tile's own current amax. The tiles run along the GEMM's
reduction dimension K, so that in "Increasing Accumulation Precision" the partial product of each
128-wide slice of K can be multiplied by its two scales when it is promoted from the tensor core
to fp32 registers on the CUDA cores. An operand used again with another reduction axis (the
activations in the weight-gradient GEMM) is quantized again along that axis: its 1x128 tiles
become 128x1 tiles (the same section, on the backward pass).

Here:

* :func:`tile_quantize`: tiles of ``block`` consecutive values along one axis;
  :func:`block_quantize`: ``block`` x ``block`` blocks of a matrix. A length that is not a
  multiple of ``block`` gets a shorter last tile (or block): its amax is taken over the values it
  has, as the zero padding of DeepGEMM's ``per_block_cast_to_fp8`` and torchao's masked loads do.
* Each scale is :func:`~floatlab.train.recipes.scales.current_scale` of the tile's amax, the
  arithmetic of torchao's blockwise fp8 training (``torchao/prototype/blockwise_fp8_training/
  kernels.py``: ``float32(fp8_max / max(amax, 1e-12))`` divided in float64); the values are the
  saturating cast of ``x * scale``.
* :func:`blockwise_matmul`: for each K-slice of ``block`` the exact fp8 products are summed in
  fp32 (a float32 BLAS call), then promoted as DeepGEMM does (``fp8_gemm.cuh``, "Promote with
  scales"): ``s = scale_a_inv * scale_b_inv`` in fp32, then ``acc += s * partial``, one fused
  multiply-add (compiled with nvcc's default ``--fmad=true``): the product enters the sum
  exactly and is rounded once with it.

>>> import numpy as np
>>> x = np.float32([[1.0, 2.0, 100.0, 0.5, 0.25]])          # one row, K = 5, tiles of 4
>>> t = tile_quantize(x, E4M3, 4, axis=1)
>>> t.scale.tolist()                                         # 448/100 and 448/0.25
[[4.480000019073486, 1792.0]]
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

from floatlab.formats import FloatFormat
from floatlab.rounding import ScaledRound, fma, fma_sum, round_current_tiles
from floatlab.train.hostmath import host_matmul
from floatlab.train.precision.accumulate import accumulate_matmul
from floatlab.train.recipes._fp8_cast import scaled_cast
from floatlab.train.recipes._fp8_kernels import tile_amax
from floatlab.train.recipes.scales import AMAX_EPS, E4M3, current_scale, saturating_cast

__all__ = [
    "E4M3",
    "Finish",
    "TileCast",
    "block_cast",
    "block_quantize",
    "blockwise_matmul",
    "expand_scales",
    "tile_cast",
    "tile_quantize",
]


class TileCast(NamedTuple):
    """An operand cast tile by tile: the fp8 values (float32, the operand's shape), one scale per
    tile or block, and the largest tile amax (NaN when a tile holds a NaN).

    >>> tile_quantize(np.float32([[3.0, -6.0]]), E4M3, 2, axis=1).values.tolist()
    [[224.0, -448.0]]
    """

    values: NDArray[np.float32]
    scale: NDArray[np.float32]
    amax: float


def _ceil_div(n: int, d: int) -> int:
    return -(-n // d)


def _padded(x: NDArray[np.float32], axes: tuple[int, ...], block: int) -> NDArray[np.float32]:
    """``x`` with zeros appended along ``axes`` up to a multiple of ``block`` (itself if none)."""
    shape = list(x.shape)
    for ax in axes:
        shape[ax] = _ceil_div(shape[ax], block) * block
    if tuple(shape) == x.shape:
        return x
    out = np.zeros(shape, np.float32)
    out[tuple(slice(0, n) for n in x.shape)] = x
    return out


def _amax_over(xt: NDArray[np.float32], axes: tuple[int, ...]) -> NDArray[np.float32]:
    """``max(|v|)`` over ``axes``, a NaN propagating (``torch.abs(x).amax``), without an abs copy."""
    hi: NDArray[np.float32] = np.maximum(xt.max(axis=axes), -xt.min(axis=axes))
    return hi


def tile_quantize(
    x: NDArray[np.float32], fmt: FloatFormat, block: int, axis: int, pow2: bool = False
) -> TileCast:
    """Cast the float32 array ``x`` into ``fmt`` with one scale per tile of ``block`` values along
    ``axis`` (DeepSeek-V3's 1x128 tiles when ``axis`` is the last); the scales have ``x``'s shape
    with ``axis`` cut to the number of tiles. The last tile is shorter when ``block`` does not
    divide the length.

    >>> x = np.float32([[1.0, 8.0], [2.0, 2.0], [4.0, 0.0]])  # three rows; tiles of 2 down axis 0
    >>> t = tile_quantize(x, E4M3, 2, axis=0)
    >>> t.scale.tolist(), t.values[:, 1].tolist()           # the second tile is the last row alone
    ([[224.0, 56.0], [112.0, 447999985582080.0]], [448.0, 112.0, 0.0])
    """
    return tile_cast(x, fmt, block, axis, pow2)[0]


def tile_cast(
    x: NDArray[np.float32], fmt: FloatFormat, block: int, axis: int, pow2: bool = False
) -> tuple[TileCast, ScaledRound | None]:
    """:func:`tile_quantize`, and the cast's counts when it ran as one compiled pass (a matrix as it
    lies; another array as a C-contiguous copy where it is not one); None when ``x`` is empty.
    A transposed matrix (``x.T`` C-contiguous, as the weight gradient's ``x^T``) is cast as its
    C-contiguous base, along the other axis, and its values are that cast's transpose: the
    same values, laid out as the input (the block GEMM reads them so, without a copy).

    >>> cast, counts = tile_cast(np.float32([[3.0, -6.0]]), E4M3, 2, axis=1)
    >>> cast.values.tolist(), counts is not None
    ([[224.0, -448.0]], True)
    """
    if x.ndim == 2 and not x.flags.c_contiguous and x.T.flags.c_contiguous and x.size:
        base, counted = tile_cast(x.T, fmt, block, 1 - axis, pow2)
        return TileCast(base.values.T, base.scale.T, base.amax), counted
    n = x.shape[axis]
    nt = _ceil_div(n, block)
    tiled = (*x.shape[:axis], nt, *x.shape[axis + 1 :])  # the scales' shape
    pre, post = math.prod(x.shape[:axis]), math.prod(x.shape[axis + 1 :])
    if x.ndim == 2:
        # a matrix as it lies (a transposed one was cast as its base, above)
        view, tiles, by_view = x, ((1, block) if axis == 1 else (block, 1)), tiled
    else:
        # the tiles as blocks of a 3-d view: (1, rows, n) in 1 x block tiles along the last
        # axis, (pre, n, post) in block x 1 tiles down the middle one
        last = post == 1
        view = np.ascontiguousarray(x).reshape((1, pre, n) if last else (pre, n, post))
        tiles = (1, block) if last else (block, 1)
        by_view = (1, pre, nt) if last else (pre, nt, post)
    # each tile's amax, scale and cast in one pass, while the tile is in the cache (where no tile
    # holds an inf or a NaN and not every value is 0: else the passes below decide those)
    fused = round_current_tiles(view, fmt, tiles, eps=AMAX_EPS, pow2=pow2) if x.size else None
    if fused is not None:
        values = fused.cast.values.reshape(x.shape)
        return TileCast(values, fused.scale.reshape(tiled), fused.amax), fused.cast
    found = tile_amax(view, tiles) if x.size else None
    amax = found.reshape(tiled) if found is not None else _amax_over(_tiled(x, axis, block, nt), (axis + 1,))
    scale = current_scale(amax, fmt, pow2)
    top = _top(amax)
    bound = _bound(top, fmt)
    fast = scaled_cast(view, scale.reshape(by_view), fmt, bound, tiles) if x.size else None
    if fast is not None:
        q, counted = fast
        return TileCast(q.reshape(x.shape), scale, top), counted
    xp = _padded(x, (axis,), block)
    xs = (_tiled(x, axis, block, nt) * np.expand_dims(scale, axis + 1)).reshape(xp.shape)
    q = saturating_cast(xs, fmt, bound=bound)
    if xp is not x:
        q = np.ascontiguousarray(q[tuple(slice(0, s) for s in x.shape)])
    return TileCast(q, scale, top), None


def _tiled(x: NDArray[np.float32], axis: int, block: int, nt: int) -> NDArray[np.float32]:
    """``x`` zero-padded along ``axis`` to ``nt`` tiles and viewed with the tiles as an axis."""
    xp = _padded(x, (axis,), block)
    return xp.reshape((*xp.shape[:axis], nt, block, *xp.shape[axis + 1 :]))


def _top(amax: NDArray[np.float32]) -> float:
    """The largest of the tiles' amaxes (NaN when one is NaN; 0 for none)."""
    return float(amax.max()) if amax.size else 0.0


def _bound(top: float, fmt: FloatFormat) -> float:
    # each tile's scale maps a finite amax to fmt.max (to within a rounding): nothing overflows;
    # a tile with an inf or NaN (then the largest amax is one) has the scale 1, and its
    # infinities meet the cast's clamp
    return fmt.max if math.isfinite(top) else float("inf")


def block_quantize(x: NDArray[np.float32], fmt: FloatFormat, block: int, pow2: bool = False) -> TileCast:
    """Cast the float32 matrix ``x`` into ``fmt`` with one scale per ``block`` x ``block`` block
    (DeepSeek-V3's weight blocks); the scales have shape (ceil(rows/block), ceil(cols/block)), the
    blocks of the last row and column of blocks are smaller when ``block`` does not divide.

    >>> t = block_quantize(np.float32([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]]), E4M3, 2)
    >>> t.scale.tolist()                                    # amax 5, 6, 8, 9
    [[89.5999984741211, 74.66666412353516], [56.0, 49.77777862548828]]
    """
    return block_cast(x, fmt, block, pow2)[0]


def block_cast(
    x: NDArray[np.float32], fmt: FloatFormat, block: int, pow2: bool = False
) -> tuple[TileCast, ScaledRound | None]:
    """:func:`block_quantize`, and the cast's counts when it ran as one compiled pass (a
    C-contiguous copy of ``x`` where it is not one; None when ``x`` is empty).

    >>> cast, _ = block_cast(np.float32([[3.0, -6.0], [0.5, 1.0]]), E4M3, 2)
    >>> cast.values.tolist(), cast.scale.shape
    ([[224.0, -448.0], [36.0, 72.0]], (1, 1))
    """
    if x.ndim != 2:
        raise ValueError(f"a weight of shape {x.shape}: expected a matrix for {block}x{block} blocks")
    rows, cols = x.shape
    xp = _padded(x, (0, 1), block)
    rt, ct = xp.shape[0] // block, xp.shape[1] // block
    xb = xp.reshape(rt, block, ct, block)
    xc = np.ascontiguousarray(x)
    found = tile_amax(xc, (block, block))
    amax = found if found is not None else _amax_over(xb, (1, 3))
    scale = current_scale(amax, fmt, pow2)
    top = _top(amax)
    bound = _bound(top, fmt)
    fast = scaled_cast(xc, scale, fmt, bound, (block, block))
    if fast is not None:
        q, counted = fast
        return TileCast(q, scale, top), counted
    xs = (xb * scale[:, None, :, None]).reshape(xp.shape)
    q = saturating_cast(xs, fmt, bound=bound)
    if xp is not x:
        q = np.ascontiguousarray(q[:rows, :cols])
    return TileCast(q, scale, top), None


def expand_scales(scale: NDArray[np.float32], block: int, axis: int, length: int) -> NDArray[np.float32]:
    """Block scales repeated ``block`` times along ``axis`` and cut to ``length``: the scales of
    128x128 weight blocks as one scale per row (or column) of the matrix and K-tile.

    >>> expand_scales(np.float32([[1.0, 2.0]]), 2, 1, 3).tolist()
    [[1.0, 1.0, 2.0]]
    """
    out: NDArray[np.float32] = np.repeat(scale, block, axis=axis)
    return out[:, :length] if axis == 1 else out[:length]


#: a block GEMM's epilogue: (partials (T, M, N), a_inv (M, T), b_inv (T, N), fresh) -> (M, N)
Finish = Callable[[NDArray[np.float32], NDArray[np.float32], NDArray[np.float32], bool], NDArray[np.float32]]

_SCRATCH = threading.local()


def _scratch(n: int) -> NDArray[np.float32]:
    """A float32 buffer of ``n`` values for the partial products, this thread's own and kept
    between calls (grown to the largest asked for): a fresh array of that size each GEMM would
    be returned to the system when freed, and its pages faulted in again the next time (a few
    milliseconds a step). Its contents are the caller's until it calls again."""
    buf: NDArray[np.float32] | None = getattr(_SCRATCH, "buf", None)
    if buf is None or buf.size < n:
        buf = np.empty(n, np.float32)
        _SCRATCH.buf = buf
    return buf[:n]


def blockwise_matmul(
    a: NDArray[np.float32],
    a_inv: NDArray[np.float32],
    b: NDArray[np.float32],
    b_inv: NDArray[np.float32],
    block: int,
    accumulate: FloatFormat | str | None = None,
    finish: Finish | None = None,
) -> NDArray[np.float32]:
    """The block-scaled GEMM ``a @ b`` of fp8 values ``a`` (M, K) and ``b`` (K, N), held in float32,
    with inverse scales ``a_inv`` (M, ceil(K/block)) and ``b_inv`` (ceil(K/block), N): for each
    slice of ``block`` along K, the partial product in fp32 (exact fp8 products, a float32 BLAS
    sum), then ``acc = fma(a_inv[:, t] * b_inv[t, :], partial, acc)`` in fp32, one rounding.
    With ``accumulate`` (a narrow tensor-core accumulator such as ``"acc14"``) each slice's
    partial sum is accumulated in that format, product by product, and the fp32 FMA is its
    promotion: DeepSeek-V3's promotion every 128 elements, which is the tile.

    Where the slices are one batched GEMM (no narrow accumulator, ``block`` dividing K), its
    partial products and scales go to ``finish(partials, a_inv, b_inv, fresh)`` in place of
    :func:`~floatlab.rounding.fma_sum` (``fresh``: the one partial is this GEMM's own and may be
    overwritten): a caller that stores the result fuses its epilogue there
    (:func:`~floatlab.rounding.fma_sum_flushed`).

    >>> a, b = np.float32([[1.0, 1.0, 1.0]]), np.float32([[1.0], [1.0], [1.0]])
    >>> blockwise_matmul(a, np.float32([[0.5, 4.0]]), b, np.float32([[2.0], [1.0]]), 2).tolist()
    [[6.0]]
    """
    m, k = a.shape
    n = b.shape[1]
    if k == 0:
        return np.zeros((m, n), np.float32)
    if (
        accumulate is None
        and k % block == 0
        and b.flags.c_contiguous
        and (a.flags.c_contiguous or a.T.flags.c_contiguous)
    ):
        # the same slice GEMMs as the loop below (each batch is the view a[:, lo:hi] of the
        # same memory, and b[lo:hi]), as one batched call, then the same FMAs in one pass; a
        # transposed a (the weight gradient's x^T, cast as it lies) as the transposes of its
        # base's row slices, which BLAS reads transposed
        nt = k // block
        if nt == 1:
            # one slice: the GEMM itself, then its scales applied in the product's own memory (the
            # same bits as through the partials buffer, one pass over it fewer)
            one = host_matmul(a, b)[None]
            return finish(one, a_inv, b_inv, True) if finish else fma_sum(one, a_inv, b_inv, overwrite=True)
        if a.flags.c_contiguous:
            slices = a.reshape(m, nt, block).transpose(1, 0, 2)
        else:
            slices = a.T.reshape(nt, block, m).transpose(0, 2, 1)
        partials = _scratch(nt * m * n).reshape(nt, m, n)
        host_matmul(slices, b.reshape(nt, block, n), out=partials)
        # (fma_sum makes the scales C-contiguous)
        return finish(partials, a_inv, b_inv, False) if finish else fma_sum(partials, a_inv, b_inv)
    acc: NDArray[np.float32] | None = None
    for t in range(_ceil_div(k, block)):
        lo, hi = t * block, min((t + 1) * block, k)
        if accumulate is None:
            partial = host_matmul(a[:, lo:hi], b[lo:hi])  # the tensor core's slice: fp32 sums
        else:
            partial = accumulate_matmul(a[:, lo:hi], b[lo:hi], accumulate=accumulate)
        s = a_inv[:, t : t + 1] * b_inv[t : t + 1, :]  # DeepGEMM's scale_a * scale_b, in fp32
        if acc is None:
            # fma(s, partial, +0) is the product rounded once: a float32 multiply (and + 0 makes
            # a -0 product +0, as the FMA's sum does)
            acc = s * partial
            acc += np.float32(0.0)
        else:
            acc = fma(s, partial, acc)  # DeepGEMM's FMA on the CUDA cores: one fp32 rounding
    assert acc is not None
    return acc
