"""Arrays in a block format: :func:`mx_quantize` (codes and scales, :class:`MXArray`) and
:func:`mx_round` (quantize and dequantize), over the rounding door's block loop
(:func:`floatlab.rounding.encode_blocks`).

Blocks run along one axis (``axis=1``: the rows of a matrix, ``axis=0``: its columns), so that
a GEMM operand and its transpose can each be blocked along their own reduction dimension, or
over two axes as square tiles (``axis=(0, 1)``: block_size x block_size tiles, NVIDIA's 16 x 16
NVFP4 weight blocks). A dimension that does not divide into blocks ends in a shorter block,
which is the same as padding it with zeros (a zero never changes a block's largest magnitude,
and the padding is not stored); the counts cover the real values only.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, TypedDict, TypeVar

import numpy as np
import numpy.typing as npt

from floatlab._signature import passing_on, spelled_out
from floatlab.blocks.formats import E8M0_BIAS, E8M0_NAN, SCALE_MODES, BlockFormat, get_mx_format
from floatlab.codec import decode_array
from floatlab.formats import MXINT8_ELEMENT, get_format
from floatlab.rounding import as_float_array, check_rounding, encode_blocks, round_array, round_blocks
from floatlab.text import render

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["BlockArray", "MXArray", "QuantError", "mx_quantize", "mx_round"]

_E4M3 = get_format("float8_e4m3fn")
Axis = int | tuple[int, int]
T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


class QuantError(NamedTuple):
    """How far dequantized values are from the values that were quantized, over the values of
    the blocks with a finite scale: the relative RMS error sqrt(sum (q - x)^2 / sum x^2), the
    signal-to-noise ratio -20 log10 of it in dB, and the largest absolute error. When a block of
    finite values lost them all (its scale overflowed, :attr:`BlockArray.overflowed_blocks`),
    the errors are infinite and the SNR is -inf.

    >>> QuantError(0.01, 40.0, 0.5).snr_db
    40.0
    """

    rel_rms: float
    snr_db: float
    max_abs: float


@dataclass(frozen=True)
class BlockArray:
    """An array in a block format: the scale code of every block and the element code of every
    value, bit for bit as the format stores them (one code per array element, not packed).

    ``scale_codes`` has the shape of the input with the blocked axis (or both blocked axes) cut
    into blocks; ``element_codes`` the shape of the input. The scale codes are E8M0 codes for
    the MX formats (255: NaN) and E4M3 codes for NVFP4 (0x7F: NaN), whose blocks also share the
    float32 ``tensor_scale`` (1 for the MX formats). ``scale_mode`` is the rule that chose the
    scales: ``"floor"`` or ``"rceil"`` (E8M0), ``"e4m3"`` (NVFP4). Of the ``nonzero`` inputs in
    blocks with a finite scale, ``flushed`` counts those whose element rounded to zero,
    ``subnormal`` those whose element is subnormal; ``clamped`` counts the values that
    saturation held at the element's largest value (they would have overflowed), ``inexact``
    those the quantization changed, ``nan_blocks`` the blocks with the NaN scale: a block
    holding an inf or NaN, or one of finite values whose scale overflowed (a float64 amax beyond
    the largest scale: 1e300 in an MX format, or beyond float32 in NVFP4), which
    ``overflowed_blocks`` counts apart: their finite values are lost (NaN).

    >>> q = mx_quantize(np.arange(64.0).reshape(2, 32), "mxfp8_e4m3")
    >>> q.scale_codes.shape, q.element_codes.shape, q.nbytes
    ((2, 1), (2, 32), 66)
    """

    format: BlockFormat
    axis: Axis
    scale_codes: npt.NDArray[np.uint8]
    element_codes: npt.NDArray[np.uint8]
    nonzero: int
    inexact: int
    flushed: int
    subnormal: int
    clamped: int
    nan_blocks: int
    rounding: str = "rne"
    scale_mode: str = "floor"
    tensor_scale: float = 1.0
    overflowed_blocks: int = 0

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape of the array (as the input's)."""
        return tuple(self.element_codes.shape)

    @property
    def nbytes(self) -> int:
        """The storage of the tensor: the elements packed at their bit width, one byte per block
        scale, four for a tensor scale."""
        packed = -(-self.element_codes.size * self.format.element.bits // 8)
        return packed + self.scale_codes.size + (4 if self.format.tensor_scale else 0)

    def scales(self) -> npt.NDArray[np.float64]:
        """The scale of each block (for NVFP4 the E4M3 block scale times the tensor scale),
        NaN for the NaN scale.

        >>> mx_quantize([1.0, 2.0], "mxfp8_e4m3").scales().tolist()   # max 2 is 2^1, E4M3's top is 2^8
        [0.0078125]
        >>> mx_quantize(np.float32([3.0, 1.0]), "nvfp4", tensor_scale=1.0).scales().tolist()
        [0.5]
        """
        if self.format.scale == "e4m3":
            scaled: npt.NDArray[np.float64] = decode_array(self.scale_codes, _E4M3) * self.tensor_scale
            return scaled  # (exact: 4 by 24 bits)
        c = self.scale_codes.astype(np.int64)
        out = np.ldexp(1.0, np.where(c == E8M0_NAN, 0, c - E8M0_BIAS))
        out[c == E8M0_NAN] = np.nan
        return out

    def elements(self) -> npt.NDArray[np.float64]:
        """The element values (before the block's scale is applied); MXINT8's codes are two's
        complement integers k, its elements k / 64."""
        if self.format.element is MXINT8_ELEMENT:
            out: npt.NDArray[np.float64] = self.element_codes.view(np.int8) / 64.0
            return out
        return decode_array(self.element_codes, self.format.element)

    def _per_value(self, block_values: npt.NDArray[Any]) -> npt.NDArray[Any]:
        k = self.format.block_size
        out = block_values
        for ax in (self.axis,) if isinstance(self.axis, int) else self.axis:
            n = self.element_codes.shape[ax]
            out = np.take(np.repeat(out, k, axis=ax), np.arange(n), axis=ax)
        return out

    def dequantize(self) -> npt.NDArray[np.float64]:
        """The values the tensor stands for: element times its block's scale (float64, exact);
        every value of a NaN-scale block is NaN.

        >>> mx_quantize([3.0, 0.3, float("nan")], "mxfp6_e2m3").dequantize().tolist()
        [nan, nan, nan]
        """
        out: npt.NDArray[np.float64] = self.elements() * self._per_value(self.scales())
        return out

    def error(self, x: npt.ArrayLike) -> QuantError:
        """The error of the dequantized values against ``x``, the array that was quantized (the
        blocks that hold an inf or NaN left out; a relative error of 0 and an SNR of inf for an
        array of zeros). A block of finite values whose scale overflowed lost them: the errors
        are inf, the SNR -inf.

        >>> e = mx_quantize([1.0, 0.3, 7.0], "mxfp4_e2m1").error([1.0, 0.3, 7.0])
        >>> round(e.rel_rms, 4), e.max_abs                       # 0.3 -> 0.5, 7 -> 6
        (0.1441, 1.0)
        >>> mx_quantize([1e300, 1.0], "mxfp8_e4m3").error([1e300, 1.0])   # 2^996: no E8M0 scale
        QuantError(rel_rms=inf, snr_db=-inf, max_abs=inf)
        """
        if self.overflowed_blocks:
            return QuantError(math.inf, -math.inf, math.inf)
        want = np.asarray(x, dtype=np.float64).reshape(self.shape)
        got = self.dequantize()
        keep = np.isfinite(got)
        diff = got[keep] - want[keep]
        big = float(np.max(np.abs(want[keep]), initial=0.0)) or 1.0  # (divided by: no square overflows)
        signal = float(np.sum(np.square(want[keep] / big)))
        noise = float(np.sum(np.square(diff / big)))
        rel = math.sqrt(noise / signal) if signal > 0 else (0.0 if noise == 0 else math.inf)
        snr = 0.0 - 20 * math.log10(rel) if rel > 0 else math.inf  # (0.0 -: no "-0.0" dB)
        return QuantError(rel, snr, float(np.max(np.abs(diff))) if diff.size else 0.0)

    def __str__(self) -> str:
        return render(self)


#: the name the array of an MX format had first
MXArray = BlockArray


def _one_axis(axis: object, ndim: int) -> int:
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise ValueError(f"axis={axis!r}: expected a whole number, or two of them")
    if ndim == 0 or not -ndim <= axis < ndim:
        raise ValueError(
            f"axis={axis}: expected an axis of an array of {ndim} dimensions, -{ndim} to {ndim - 1}"
        )
    return int(axis) % ndim


def _check_axis(axis: object, ndim: int) -> Axis:
    """``axis`` as an axis of an ``ndim``-d array, or a sorted pair of two different axes."""
    if not isinstance(axis, (tuple, list)):
        return _one_axis(axis, ndim)
    if len(axis) != 2:
        raise ValueError(f"axis={axis!r}: expected one axis, or two for square blocks")
    a, b = (_one_axis(v, ndim) for v in axis)
    if a == b:
        raise ValueError(f"axis={axis!r}: expected two different axes")
    return (min(a, b), max(a, b))


def _scale_rule(f: BlockFormat, scale_mode: str | None, tensor_scale: float | None) -> str:
    """The rule of :func:`floatlab.rounding.encode_blocks` for ``f`` and the caller's choices."""
    if f.scale == "e4m3":
        if scale_mode is not None:
            raise ValueError(
                f"scale_mode={scale_mode!r}: {f.name}'s block scales are E4M3 numbers, rounded to "
                "nearest; the scale modes choose the E8M0 scales of the MX formats"
            )
        return "e4m3"
    if tensor_scale is not None:
        raise ValueError(f"tensor_scale={tensor_scale!r}: {f.name} has no tensor scale (NVFP4 has)")
    mode = "floor" if scale_mode is None else scale_mode
    if mode not in SCALE_MODES:
        raise ValueError(f"scale_mode={scale_mode!r}: expected one of {', '.join(SCALE_MODES)}")
    return mode


class BlockOptions(TypedDict, total=False):
    """The keyword-only options of :func:`mx_quantize` and :func:`mx_round`, typed once: each takes
    them as ``**options: Unpack[BlockOptions]`` and hands them to the blocks' layout, whose
    defaults they have (:func:`_block_signature` spells them out for help() and the API reference).

    >>> sorted(BlockOptions(axis=0, rounding="rtz"))
    ['axis', 'rounding']
    """

    axis: Axis
    rounding: str
    rng: np.random.Generator | int | None
    block_size: int | None
    scale_mode: str | None
    tensor_scale: float | None


class _Layout:
    """How the blocks of ``fmt`` along ``axis`` lie over the last axes of a view of ``x``: the
    view (float32 or float64), the block shape, the rounding and the scale rule for
    :func:`floatlab.rounding.encode_blocks`, and the way back to x's layout. Its keyword-only
    parameters are the options of :func:`mx_quantize` and :func:`mx_round`, with their defaults."""

    def __init__(
        self,
        x: npt.ArrayLike,
        fmt: BlockFormat | str,
        *,
        axis: Axis = -1,
        rounding: str = "rne",
        rng: np.random.Generator | int | None = None,
        block_size: int | None = None,
        scale_mode: str | None = None,
        tensor_scale: float | None = None,
    ) -> None:
        a = np.atleast_1d(as_float_array(x)[0])
        self.format = f = get_mx_format(fmt, block_size)
        self.rule = _scale_rule(f, scale_mode, tensor_scale)
        self.axis = ax = _check_axis(axis, a.ndim)
        self.work = work = a if a.dtype in (np.float32, np.float64) else a.astype(np.float32)  # (exact)
        self.shape = shape = a.shape
        k = f.block_size
        self.block: int | tuple[int, int]
        if isinstance(ax, int):
            lead, n, inner = math.prod(shape[:ax]), shape[ax], math.prod(shape[ax + 1 :])
            self.view = work.reshape(lead, n) if inner == 1 else work.reshape(lead, n, inner)
            self.block = k if inner == 1 else (k, 1)
        else:
            last_two = ax == (a.ndim - 2, a.ndim - 1)
            self.view = work if last_two else np.ascontiguousarray(np.moveaxis(work, ax, (-2, -1)))
            self.block = (k, k)
        self.mode = check_rounding(rounding)
        self.rng = rng
        self.tensor_scale = tensor_scale

    def blocks(self, kernel: Callable[..., T]) -> T:
        """``kernel`` (:func:`~floatlab.rounding.encode_blocks` or
        :func:`~floatlab.rounding.round_blocks`) over the view, with these blocks' element format,
        shape, rounding, scale rule and tensor scale."""
        element, mode, tensor_scale = self.format.element, self.mode, self.tensor_scale
        return kernel(
            self.view, element, self.block, mode, rng=self.rng, scale=self.rule, tensor_scale=tensor_scale
        )

    def nonfinite_blocks(self) -> int:
        """How many blocks hold an inf or a NaN: the NaN-scale blocks of a marker array (NaN
        where the view is not finite, 0 elsewhere), which no scale can overflow."""
        finite = np.isfinite(self.view)
        if finite.all():
            return 0
        marks = np.where(finite, 0.0, np.nan).astype(self.view.dtype)
        b = encode_blocks(marks, self.format.element, self.block, "rne", scale="floor")
        return int(np.count_nonzero(b.scale_codes == E8M0_NAN))

    def back(self, arr: npt.NDArray[Any], cut: int) -> npt.NDArray[Any]:
        """``arr`` (laid out as the view, its blocked axes cut into ``cut``-sized blocks) in x's
        layout."""
        ax, shape = self.axis, self.shape
        if isinstance(ax, int):
            return arr.reshape(*shape[:ax], -(-shape[ax] // cut), *shape[ax + 1 :])
        moved = arr if self.view is self.work else np.moveaxis(arr, (-2, -1), ax)
        return np.ascontiguousarray(moved)


#: mx_quantize's and mx_round's ``**options``, shown as the layout's keyword-only parameters
_block_signature = spelled_out(_Layout)


@_block_signature
def mx_quantize(x: npt.ArrayLike, fmt: BlockFormat | str, **options: Unpack[BlockOptions]) -> BlockArray:
    """``x`` in the block format ``fmt`` (an MX format or ``"nvfp4"``): the scale and element
    codes, and what the quantization flushed and clamped.

    Blocks hold ``block_size`` (the format's: 32, NVFP4 16) consecutive values along ``axis``,
    or are ``block_size`` x ``block_size`` tiles over the two axes of ``axis=(i, j)``; a
    dimension that does not divide ends in a shorter block (as if padded with zeros). The MX
    formats' E8M0 scales follow ``scale_mode``: ``"floor"`` (default, the OCP specification) or
    ``"rceil"`` (NVIDIA's hardware: amax / max rounded up to a power of two, so nothing
    saturates). NVFP4's E4M3 block scales sit over a float32 ``tensor_scale``: by default
    amax / (6 x 448) over the tensor's finite values; 1.0 gives one level of scaling only.
    Elements take every rounding mode (``rng`` for stochastic rounding: value i of ``x`` in C
    order draws random word i, as :func:`floatlab.encode_array` does; for tiles over two axes
    other than the last two, i counts in ``x`` with those axes moved last). See
    :func:`floatlab.rounding.encode_blocks` for the arithmetic and the package notes for the
    sources.

    >>> g = np.array([2.0**-30, 2.0**-31, 3 * 2.0**-34, 0.0])      # gradients far below fp8's range
    >>> mx_quantize(g, "mxfp8_e4m3").dequantize().tolist() == g.tolist()   # the block scale keeps them
    True
    >>> q = mx_quantize(np.linspace(-1, 1, 64).reshape(2, 32), "mxfp4_e2m1", axis=0)
    >>> q.scale_codes.shape      # blocks run down the columns: one block (of 2 values) per column
    (1, 32)
    >>> mx_quantize(np.ones((32, 48)), "nvfp4", axis=(0, 1)).scale_codes.shape   # 16 x 16 tiles
    (2, 3)
    """
    lay = passing_on(_Layout, x, fmt, **options)
    f = lay.format
    b = lay.blocks(encode_blocks)
    scales = lay.back(b.scale_codes, f.block_size)
    nan_code = (_E4M3.nan_code or 0) if f.scale == "e4m3" else E8M0_NAN
    nan_blocks = int(np.count_nonzero(scales == nan_code))
    return BlockArray(
        format=f,
        axis=lay.axis,
        scale_codes=scales,
        element_codes=lay.back(b.element_codes, 1),
        inexact=b.inexact,
        nonzero=b.nonzero,
        flushed=b.flushed,
        subnormal=b.subnormal,
        clamped=b.overflow,
        nan_blocks=nan_blocks,
        rounding=lay.mode,
        scale_mode=lay.rule,
        tensor_scale=b.tensor_scale,
        overflowed_blocks=nan_blocks - lay.nonfinite_blocks() if nan_blocks else 0,
    )


@_block_signature
def mx_round(x: npt.ArrayLike, fmt: BlockFormat | str, **options: Unpack[BlockOptions]) -> npt.NDArray[Any]:
    """``x`` quantized to ``fmt`` and back ("fake quantization"): :meth:`BlockArray.dequantize`
    of :func:`mx_quantize` (same options), in ``x``'s float dtype (float64 for integers),
    rounded to nearest where that dtype cannot hold a value (float16 below its range; NVFP4's
    two-level products in float32).

    >>> mx_round(np.array([1.0, 0.3, 7.0], np.float32), "mxfp4_e2m1")   # E2M1: 0, 0.5, 1, 1.5, 2, 3, 4, 6
    array([1. , 0.5, 6. ], dtype=float32)
    >>> mx_round(np.array([1.0, 0.3, 7.0], np.float32), "mxfp4_e2m1", scale_mode="rceil")  # scale 2
    array([1., 0., 8.], dtype=float32)
    """
    a, src = as_float_array(x)  # integers and booleans become float64
    lay = passing_on(_Layout, a, fmt, **options)
    values = lay.blocks(round_blocks)
    out = lay.back(values, 1).reshape(a.shape)
    if out.dtype != a.dtype:  # float16 or bfloat16: the float32 values rounded into it, as a cast
        out = round_array(out, src).astype(a.dtype)
    return out
