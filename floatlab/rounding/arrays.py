"""The one door to rounding arrays: everything in floatlab that rounds an array comes through here.

:func:`round_array` and :func:`encode_array` (and their twins that also count the IEEE flags)
round every element exactly as the scalar reference :func:`~floatlab.rounding.round_scalar`
does, on the CPU or, for a CuPy array, on its GPU. :func:`decode_array`'s kernel
(:func:`decode_codes`), the block-scaling loop of the MX formats and NVFP4
(:func:`encode_blocks`, :func:`round_blocks`), the running sums of the accumulation simulator
(:func:`running_sums`), the sums of a GEMM with a narrow accumulator
(:func:`accumulate_products`) and the exact float64 arithmetic of the simulators
(:func:`odd_sum`, :func:`odd_div`, :func:`odd_sqrt`, :func:`add_count`) are offered here as
public building blocks, so that no other module compiles or calls the kernels itself.

All take the same keyword-only knobs, checked in one place (:class:`RoundingOptions`):
``rng`` (a numpy Generator or a non-negative int seed; stochastic rounding needs it),
``saturate``, ``subnormals`` and ``random_bits``.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from floatlab._signature import passing_on, unexpected_keyword
from floatlab.backend import is_cupy
from floatlab.exact import pow2
from floatlab.formats import FP32, FP64, MXINT8_ELEMENT, FloatFormat, get_format
from floatlab.rounding import cpu
from floatlab.rounding.cpu import add_count, decode_codes, odd_div, odd_sqrt, odd_sum
from floatlab.rounding.int8 import mxint8_blocks
from floatlab.rounding.options import (
    RNG,
    RoundingKnobs,
    RoundingOptions,
    RoundingStats,
    as_float_array,
    knob_signature,
)
from floatlab.rounding.params import EncodeParams, decode_params, encode_params
from floatlab.rounding.plan import UINT_OF_BITS, make_plan, round_target
from floatlab.rounding.spec import check_rounding

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "BLOCK_SCALES",
    "E4M3_SCALE_RANGE",
    "TENSOR_SCALE_RANGE",
    "BlockCodes",
    "Counted",
    "accumulate_products",
    "add_count",
    "decode_codes",
    "encode_array",
    "encode_array_with_flags",
    "encode_blocks",
    "fma",
    "nvfp4_tensor_scale",
    "odd_div",
    "odd_sqrt",
    "odd_sum",
    "round_array",
    "round_array_with_flags",
    "round_blocks",
    "round_blocks_split",
    "running_sums",
]


class Counted(NamedTuple):
    """An array rounding's result and its IEEE flag counts (unpacks as ``values, stats``).

    >>> import floatlab as fl
    >>> fl.round_array_with_flags(np.array([0.1]), "bf16").stats.inexact
    1
    """

    array: Any
    stats: RoundingStats


def _door(
    x: ArrayLike, fmt: FloatFormat | str, options: RoundingOptions, *, back: bool, flags: bool
) -> tuple[Any, RoundingStats]:
    """The work of the four public functions: check, plan, execute (CPU or GPU)."""
    f = get_format(fmt)
    if is_cupy(x):  # a CuPy array: the same element functions, compiled for its GPU
        from floatlab.rounding.cuda import run_array

        return run_array(x, f, options, back=back, flags=flags)
    a, src = as_float_array(x)
    target, specials = round_target(src, f, a.dtype) if back else (f, None)
    plan = make_plan(src, target, options, back=back, flags=flags, specials=specials)
    out, counts = cpu.execute(a.reshape(-1).view(UINT_OF_BITS[src.bits]), plan)
    result = out.view(a.dtype).reshape(a.shape) if back else out.reshape(a.shape)
    return result, RoundingStats(a.size, *counts)


def _no_flags(flags: object, name: str) -> None:
    """A flag never changes a return type: the flag counts have their own function."""
    if flags is not False:
        raise TypeError(
            f"{name}(..., flags={flags!r}) is now {name}_with_flags(...): it returns (array, stats)"
        )


def _is_tensor(x: Any) -> bool:
    torch = sys.modules.get("torch")  # (a program that never imported torch has no tensors)
    return torch is not None and isinstance(x, torch.Tensor)


def _through_tensor(door: Any, x: Any, fmt: Any, back: bool, rounding: str, knobs: RoundingKnobs) -> Any:
    """``door`` (one of this module's four public doors) on a view of the tensor's memory, and
    its result as a tensor of the input's dtype and device again (with the flag counts of a
    ``*_with_flags`` door beside it)."""
    from floatlab.torch.tensors import array_tensor, tensor_array

    y = door(tensor_array(x, fmt, back=back), fmt, rounding, **knobs)
    if isinstance(y, Counted):
        return Counted(array_tensor(y.array, x), y.stats)
    return array_tensor(y, x)


def _public_door(
    door: Any, x: Any, fmt: FloatFormat | str, rounding: str, knobs: RoundingKnobs, *, back: bool, flags: bool
) -> Any:
    """The body of the four public doors (``door`` is the caller): a torch tensor through a view
    of its memory; anything else checked, planned and executed, with the flag counts (a
    :class:`Counted`) when ``flags``."""
    if _is_tensor(x):
        return _through_tensor(door, x, fmt, back, rounding, knobs)
    try:
        options = RoundingOptions.make(rounding, **knobs)
    except TypeError as e:  # a misspelt knob (inline, not passing_on: the hot path)
        raise unexpected_keyword(e) from None
    result, stats = _door(x, fmt, options, back=back, flags=flags)
    return Counted(result, stats) if flags else result


@knob_signature
def encode_array(
    x: ArrayLike,
    fmt: FloatFormat | str,
    rounding: str = "rne",
    *,
    flags: Literal[False] = False,
    **knobs: Unpack[RoundingKnobs],
) -> Any:
    """Round every element of ``x`` into ``fmt`` and return the codes (unsigned integers).

    ``x`` may be float64, float32, float16 or bfloat16 (integers of up to 53 bits and booleans
    are taken as float64), of any shape. The codes have the shape of ``x`` and the smallest
    unsigned dtype that holds ``fmt.bits``. Every element gets exactly the bits of
    :func:`~floatlab.rounding.round_scalar`; a float64 input is rounded once, never through float32.

    ``saturate`` clamps overflows to the largest finite value; ``subnormals=False`` treats
    subnormal inputs as zero and flushes subnormal results to zero. Stochastic rounding
    needs ``rng`` (a numpy Generator or an int seed): its key is
    ``rng.integers(0, 2**32, size=2, dtype=np.uint64)`` and element ``i`` (flat C order)
    uses ``random_bits_at(key, i, random_bits)``. :func:`encode_array_with_flags` also counts
    the IEEE flags. A torch tensor gives its codes as an unsigned tensor on its device
    (see :mod:`floatlab.torch.tensors`).

    >>> import numpy as np, floatlab as fl
    >>> [hex(c) for c in fl.encode_array(np.array([1.0, 0.1, -65520.0]), "fp16")]
    ['0x3c00', '0x2e66', '0xfc00']
    >>> fl.encode_array([448.0, 500.0, 1e6], "e4m3fn", saturate=True).tolist()
    [126, 126, 126]
    """
    _no_flags(flags, "encode_array")  # (before the key is drawn: a refused call leaves rng as it was)
    return _public_door(encode_array, x, fmt, rounding, knobs, back=False, flags=False)


@knob_signature
def encode_array_with_flags(
    x: ArrayLike,
    fmt: FloatFormat | str,
    rounding: str = "rne",
    **knobs: Unpack[RoundingKnobs],
) -> Counted:
    """:func:`encode_array`, with how many elements raised each IEEE flag: ``(codes, stats)``.

    A torch tensor is taken as :func:`encode_array` takes it (any of its float dtypes, bfloat16
    included; a tensor that requires grad is read detached) and its codes come back as an
    unsigned tensor on its device.

    >>> import numpy as np, floatlab as fl
    >>> codes, stats = fl.encode_array_with_flags(np.array([1.0, 1e-9]), "fp16")
    >>> codes.tolist(), stats.underflow
    ([15360, 0], 1)
    """
    counted: Counted = _public_door(encode_array_with_flags, x, fmt, rounding, knobs, back=False, flags=True)
    return counted


@knob_signature
def round_array(
    x: ArrayLike,
    fmt: FloatFormat | str,
    rounding: str = "rne",
    *,
    flags: Literal[False] = False,
    **knobs: Unpack[RoundingKnobs],
) -> Any:
    """Round every element of ``x`` to a value of ``fmt`` (per ``rounding``), kept in x's dtype.

    The result has x's dtype and shape: each element is rounded into ``fmt`` exactly as
    :func:`encode_array` does and converted back, which is exact because every value of
    ``fmt`` must be a value of x's dtype (otherwise ValueError: use encode_array and
    decode_array, whose float64 holds them). When x's dtype is the narrower one (float16
    into fp32, say) the values pass through, zeroed if subnormal with ``subnormals=False``.
    NaN results are quiet NaNs of x's dtype with the sign of the input. Options as in
    :func:`encode_array`; :func:`round_array_with_flags` also counts the IEEE flags. A torch
    tensor is rounded by this same code on a view of its memory and comes back as a tensor of
    its dtype and device (see :mod:`floatlab.torch.tensors`).

    >>> import numpy as np, floatlab as fl
    >>> y = fl.round_array(np.array([0.1, 1000.0, 1e-3], np.float32), "bf16")
    >>> y.dtype, y.tolist()
    (dtype('float32'), [0.10009765625, 1000.0, 0.00099945068359375])
    >>> fl.round_array(np.float32(1 + 2**-9), "bf16", "rup").item()
    1.0078125
    """
    _no_flags(flags, "round_array")  # (before the key is drawn: a refused call leaves rng as it was)
    return _public_door(round_array, x, fmt, rounding, knobs, back=True, flags=False)


@knob_signature
def round_array_with_flags(
    x: ArrayLike,
    fmt: FloatFormat | str,
    rounding: str = "rne",
    **knobs: Unpack[RoundingKnobs],
) -> Counted:
    """:func:`round_array`, with how many elements raised each IEEE flag: ``(values, stats)``.

    A torch tensor is taken as :func:`round_array` takes it (any of its float dtypes, bfloat16
    included; a tensor that requires grad, a Parameter, is read detached, so the values carry no
    autograd history) and its values come back as a tensor of its dtype on its device.

    >>> import numpy as np, floatlab as fl
    >>> values, stats = fl.round_array_with_flags(np.array([1.0, 1e6], np.float32), "fp16")
    >>> values.tolist(), stats.overflow
    ([1.0, inf], 1)
    """
    counted: Counted = _public_door(round_array_with_flags, x, fmt, rounding, knobs, back=True, flags=True)
    return counted


@knob_signature
def running_sums(
    terms: ArrayLike,
    fmt: FloatFormat | str,
    rounding: str = "rne",
    *,
    kahan: bool = False,
    **knobs: Unpack[RoundingKnobs],
) -> tuple[np.ndarray, np.ndarray | None]:
    """The running sums of ``terms`` (float64 values of ``fmt``) with every addition rounded
    once into ``fmt``, left to right, in one compiled serial loop; with ``kahan`` Kahan's
    compensated sums, every one of its four operations a term rounded once.

    Returns ``(sums, compensations)`` as float64 arrays (``compensations`` is None without
    ``kahan``). Each exact sum is formed rounded to odd at 53 bits first, which equals one
    rounding for formats of up to 51 bits of precision. Stochastic rounding draws its key as
    :func:`encode_array` does; addition i (Kahan: operation 4i + j) uses random word i (4i + j).

    >>> running_sums(np.ones(4), "fp16")[0].tolist()
    [1.0, 2.0, 3.0, 4.0]
    >>> float(running_sums(np.ones(3000), "fp16")[0][-1])      # fp16's gap at 2048 is 2
    2048.0
    """
    f = get_format(fmt)
    options = passing_on(RoundingOptions.make, rounding, **knobs)
    t = np.ascontiguousarray(terms, dtype=np.float64).reshape(-1)
    p = encode_params(FP64, f, options, lanes=64)
    d = decode_params(f, FP64, 64)
    return cpu.run_running_sums(t, kahan, options.key, options.stochastic, options.mode == "rdown", p, d)


def accumulate_products(
    a: np.ndarray,
    b: np.ndarray,
    fmt: FloatFormat | str,
    rounding: str = "rne",
    *,
    promote_every: int | None = None,
) -> np.ndarray:
    """The sums of a GEMM whose accumulator is ``fmt``: for each output, the products
    ``a[g, i, k] * b[g, k, j]`` added in order, k = 0, 1, ..., every addition rounded once into
    ``fmt`` (an IEEE format within fp32: with infinities and NaNs, subnormals kept) in a
    deterministic ``rounding`` mode.

    ``a`` and ``b`` are float32 arrays of shapes (B, M, K) and (B, K, N), or (1, K, N) for one
    matrix shared by the batch; the product of two fp32 values (at most 48 significant bits)
    enters the sum exactly. With ``promote_every=N``, after every N products and after the last,
    the partial sum is added into an fp32 total (round to nearest even) and restarts at zero.
    Returns float32 (B, M, N). One compiled loop, parallel over the output rows; each exact sum
    is formed rounded to odd at 53 bits first, which equals one rounding for formats within fp32,
    then rounded into ``fmt`` with integer operations on the float64 bits, with the bits of
    :func:`round_array`.

    >>> ones = np.ones((1, 1, 3000), np.float32)
    >>> accumulate_products(ones, ones.reshape(1, 3000, 1), "fp16").item()   # fp16's gap at 2048 is 2
    2048.0
    >>> accumulate_products(ones, ones.reshape(1, 3000, 1), "fp16", promote_every=1000).item()
    3000.0
    """
    f = get_format(fmt)
    if not FP32.contains(f) or f.encoding != "ieee":
        raise ValueError(
            f"accumulator format {f.name or f}: expected an IEEE format within fp32 "
            "(acc14, fp32, tf32, bf16, fp16, e5m2, ...)"
        )
    if check_rounding(rounding) == "stochastic":
        raise ValueError(
            f"rounding={rounding!r}: expected a deterministic mode (rne, rna, rtz, rup, rdown, rodd)"
        )
    options = RoundingOptions.make(rounding)
    if promote_every is not None and (
        isinstance(promote_every, bool)
        or not isinstance(promote_every, (int, np.integer))
        or promote_every < 1
    ):
        raise ValueError(f"promote_every={promote_every!r}: expected None or an integer of at least 1")
    for name, x in (("a", a), ("b", b)):
        if not isinstance(x, np.ndarray) or x.dtype != np.float32 or x.ndim != 3:
            what = f"dtype {x.dtype} and shape {x.shape}" if isinstance(x, np.ndarray) else type(x).__name__
            raise ValueError(f"{name} of {what}: expected a 3-d float32 numpy array")
    if a.shape[2] != b.shape[1] or b.shape[0] not in (1, a.shape[0]):
        raise ValueError(
            f"accumulate_products of shapes {a.shape} and {b.shape}: expected (B, M, K), (B or 1, K, N)"
        )
    every = 0 if promote_every is None else int(promote_every)
    return cpu.run_accumulate(
        np.ascontiguousarray(a),
        np.ascontiguousarray(b),
        every,
        options.mode == "rdown",  # the sign of an exact zero sum
        encode_params(FP64, f, options, lanes=64),
        encode_params(FP64, FP32, RoundingOptions(), lanes=64),  # the promotion: fp32, nearest even
    )


def fma(
    x: ArrayLike, y: ArrayLike, z: ArrayLike, fmt: FloatFormat | str = "fp32", rounding: str = "rne"
) -> np.ndarray:
    """The fused multiply-add ``x * y + z`` of float32 values, rounded once into ``fmt`` (an IEEE
    format within fp32, default fp32; a deterministic mode): what an FMA unit computes, where
    ``x * y + z`` in NumPy rounds twice. The arrays broadcast; the result is float32.

    >>> x = np.float32(1 + 2.0**-12)
    >>> float(fma(x, x, np.float32(-1 - 2.0**-11)))   # the exact answer, 2^-24
    5.960464477539063e-08
    >>> float(x * x + np.float32(-1 - 2.0**-11))      # x * x rounded first: 0
    0.0
    """
    f = get_format(fmt)
    if not FP32.contains(f) or f.encoding != "ieee":
        raise ValueError(
            f"fma format {f.name or f}: expected an IEEE format within fp32 (fp32, bf16, fp16, ...)"
        )
    if check_rounding(rounding) == "stochastic":
        raise ValueError(
            f"rounding={rounding!r}: expected a deterministic mode (rne, rna, rtz, rup, rdown, rodd)"
        )
    arrays = []
    for name, v in (("x", x), ("y", y), ("z", z)):
        arr = np.asarray(v)
        if arr.dtype != np.float32:
            raise ValueError(f"fma operand {name} of dtype {arr.dtype}: expected float32 values")
        arrays.append(arr)
    bx, by, bz = np.broadcast_arrays(*arrays)
    shape = bx.shape
    fx, fy, fz = (np.ascontiguousarray(a).reshape(-1) for a in (bx, by, bz))
    out = cpu.run_fma(fx, fy, fz, encode_params(FP64, f, RoundingOptions.make(rounding), lanes=64))
    return out.reshape(shape)


#: the block-scale rules of :func:`encode_blocks`: E8M0 powers of two by the OCP rule ("floor") or
#: rounded up ("rceil", NVIDIA's), or E4M3 numbers over a float32 tensor scale ("e4m3", NVFP4's)
BLOCK_SCALES = ("floor", "rceil", "e4m3")
#: an E4M3 block scale lies between E4M3's smallest normal and its largest value, as torchao
#: clamps it (``nvfp4_quantize``)
E4M3_SCALE_RANGE = (2.0**-6, 448.0)
#: a tensor scale lies here: at least 2^-121, so that 1 / (tensor scale x smallest block scale)
#: is still a float32
TENSOR_SCALE_RANGE = (2.0**-121, 2.0**127)
_E4M3 = get_format("float8_e4m3fn")


class BlockCodes(NamedTuple):
    """What :func:`encode_blocks` gives: codes, block scales, values, counts and the tensor scale.

    >>> import floatlab as fl
    >>> b = encode_blocks(np.array([[2.0**-30, 0.0]]), fl.get_format("e4m3fn"), 32, values=True)
    >>> b.scale_codes.tolist(), b.values.tolist(), b.nonzero, b.flushed
    ([[89]], [[9.313225746154785e-10, 0.0]], 1, 0)
    """

    element_codes: np.ndarray  # uint8, the shape of the input (empty under element_codes=False)
    scale_codes: np.ndarray  # uint8, one per block: E8M0 (255: the NaN scale) or E4M3 (0x7F: NaN)
    values: np.ndarray | None  # element value times block scale (times tensor scale), when asked for
    nonzero: int  # counted over the blocks with a finite scale
    flushed: int
    subnormal: int
    inexact: int
    overflow: int  # values that saturation held at the element format's largest value
    tensor_scale: float = 1.0  # the float32 scale of the whole tensor (the "e4m3" rule)


def _block_shape(block_size: int | tuple[int, int], rows: np.ndarray) -> tuple[int, int]:
    """(rows, columns) of a block over the last two axes: an int k is 1 x k."""
    sizes = (1, block_size) if not isinstance(block_size, tuple) else block_size
    if len(sizes) != 2 or any(
        isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1 for k in sizes
    ):
        raise ValueError(f"block_size={block_size!r}: expected a whole number >= 1, or two of them")
    if isinstance(block_size, tuple) and rows.ndim < 2:
        raise ValueError(
            f"block_size={block_size!r}: a block of rows and columns needs a 2-d array, got {rows.ndim}-d"
        )
    return int(sizes[0]), int(sizes[1])


def nvfp4_tensor_scale(amax: float, element: FloatFormat) -> float:
    """The "e4m3" rule's tensor scale of a tensor whose largest finite magnitude is ``amax``:
    NVIDIA's per-tensor scale as torchao's ``per_tensor_amax_to_scale`` computes it, fl(amax /
    (element max x 448)) in float32, at least TENSOR_SCALE_RANGE's low end; 1 when ``amax`` is 0.
    What :func:`encode_blocks` uses when it is given no tensor scale (``amax`` then over the
    finite values): a caller that has the amax already passes this and saves that pass.

    >>> import floatlab as fl
    >>> nvfp4_tensor_scale(2688.0, fl.get_format("e2m1")), nvfp4_tensor_scale(0.0, fl.get_format("e2m1"))
    (1.0, 1.0)
    """
    a = np.float32(amax)
    if not np.isfinite(a) or a < 0:
        raise ValueError(f"amax={amax!r}: expected a finite magnitude (the largest finite |value|)")
    if a == 0:
        return 1.0
    t = float(a / np.float32(element.max * _E4M3.max))
    return max(t, TENSOR_SCALE_RANGE[0])


def _tensor_scale(bits32: np.ndarray, element: FloatFormat, tensor_scale: float | None) -> float:
    """The float32 tensor scale: :func:`nvfp4_tensor_scale` of the finite values' amax, or
    ``tensor_scale`` rounded to float32; within TENSOR_SCALE_RANGE."""
    lo, hi = TENSOR_SCALE_RANGE
    if tensor_scale is None:
        return nvfp4_tensor_scale(np.uint32(cpu.finite_amax(bits32, FP32)).view(np.float32), element)
    if isinstance(tensor_scale, bool) or not isinstance(tensor_scale, (int, float, np.floating, np.integer)):
        raise ValueError(f"tensor_scale={tensor_scale!r}: expected None or a number")
    t = float(round_array(np.float64(tensor_scale), FP32))
    if not lo <= t <= hi:
        raise ValueError(f"tensor_scale={tensor_scale!r}: expected a number from 2^-121 to 2^127")
    return t


def encode_blocks(
    rows: np.ndarray,
    element: FloatFormat,
    block_size: int | tuple[int, int],
    rounding: str = "rne",
    *,
    rng: RNG = None,
    values: bool = False,
    scale: str = "floor",
    tensor_scale: float | None = None,
    split_tensor_scale: bool = False,
    element_codes: bool = True,
) -> BlockCodes:
    """Block-scaled encoding of the C-contiguous float64 or float32 array ``rows``: the element
    codes of ``element`` (at most 8 bits), one scale code per block and what it did, in one
    compiled pass over the blocks (parallel over the cores).

    ``block_size`` k makes blocks of k values along the last axis (the last block of a row may
    be shorter: the same as padding with zeros); a pair (r, c) makes r x c blocks over the last
    two axes (one block down a column: (k, 1); a 2-d tile: (16, 16)). ``scale`` is the rule:

    * ``"floor"`` (the OCP Microscaling specification): the E8M0 scale 2^s with
      s = floor(log2(amax)) - element.emax, clamped below at -127; s > 127 is the NaN scale;
    * ``"rceil"`` (NVIDIA's hardware, cuBLAS' "Computing scaling and conversion factors for FP8
      with UE8M0 scales"): amax / element.max rounded up to a power of two, so that no value
      saturates, at most 2^127;
    * ``"e4m3"`` (NVFP4, NVIDIA's recipe as torchao's ``nvfp4_quantize`` computes it, in float32
      arithmetic: float64 rows are rounded to float32 first): the E4M3 code of
      fl(fl(amax / element.max) / t) clamped to :data:`E4M3_SCALE_RANGE`, where t is the tensor
      scale, ``tensor_scale`` or by default fl(amax / (element.max x 448)) over the tensor's
      finite values (1 for a tensor of zeros); each value is fl(v x fl(fl(1 / t) / scale))
      rounded into ``element``.

    Under the E8M0 rules each value is rounded into ``element`` with its exponent range moved by
    s, which equals rounding v / 2^s exactly, and v / 2^s is never formed, so nothing rounds on
    the way. Elements saturate. A block holding an inf or NaN gets the NaN scale and zero codes.
    Stochastic rounding draws its key as :func:`encode_array` does; value i (flat C order of
    ``rows``) uses random word i. ``values`` asks for the dequantized values (in rows' dtype:
    exact for the E8M0 rules, rounded to nearest under "e4m3" for float32 rows);
    ``split_tensor_scale`` leaves the tensor scale out of them (element x block scale, exact),
    for a GEMM that multiplies by the two tensor scales in its epilogue, as NVFP4 GEMMs do.
    ``element_codes=False`` (with ``values``) leaves the element codes out (an empty array): the
    values, the scales and the counts of a cast whose codes nobody reads, as a training recipe's
    recorded operand; under the "e4m3" rule that is one pass that forms no codes.

    >>> import floatlab as fl
    >>> b = encode_blocks(np.array([[1.0, -3.0, 0.0]]), fl.get_format("e2m1"), 32)
    >>> b.scale_codes.tolist(), b.element_codes.tolist()
    ([[126]], [[4, 15, 0]])
    >>> encode_blocks(np.array([7.0]), fl.get_format("e2m1"), 32, scale="rceil").scale_codes.tolist()
    [128]
    >>> b = encode_blocks(np.array([3.0, 1.0], np.float32), fl.get_format("e2m1"), 16, scale="e4m3")
    >>> round(b.tensor_scale * 2688, 6), fl.decode_array(b.scale_codes, "e4m3fn").tolist()   # 448 = 2688 / 6
    (3.0, [448.0])
    """
    run = _run_blocks(
        rows,
        element,
        block_size,
        rounding,
        rng,
        scale,
        tensor_scale,
        values=values,
        codes=True,
        split=split_tensor_scale,
        count_only=values and not element_codes,
    )
    codes, scales, vals, (nonzero, flushed, subnormal, inexact, overflow), t, scale_shape = run
    back = None if vals is None else vals.reshape(rows.shape)
    return BlockCodes(
        codes.reshape(rows.shape) if codes is not None and element_codes else np.empty(0, np.uint8),
        scales.reshape(scale_shape),
        back,
        nonzero,
        flushed,
        subnormal,
        inexact,
        overflow,
        t,
    )


def round_blocks(
    rows: np.ndarray,
    element: FloatFormat,
    block_size: int | tuple[int, int],
    rounding: str = "rne",
    *,
    rng: RNG = None,
    scale: str = "floor",
    tensor_scale: float | None = None,
) -> np.ndarray:
    """The values of :func:`encode_blocks` alone (quantized and dequantized: "fake quantization"),
    in rows' dtype, in one compiled pass that forms no codes and counts nothing: the same values,
    as fast as the loop can go. Arguments as :func:`encode_blocks`.

    >>> import floatlab as fl
    >>> round_blocks(np.array([1.0, 0.3, 7.0], np.float32), fl.get_format("e2m1"), 32).tolist()
    [1.0, 0.5, 6.0]
    >>> round_blocks(np.array([1.0, 0.3, 7.0], np.float32), fl.get_format("e2m1"), 32, scale="rceil").tolist()
    [1.0, 0.0, 8.0]
    """
    run = _run_blocks(rows, element, block_size, rounding, rng, scale, tensor_scale, values=True, codes=False)
    vals: np.ndarray = run[2]
    return vals.reshape(rows.shape)


def round_blocks_split(
    rows: np.ndarray,
    element: FloatFormat,
    block_size: int | tuple[int, int],
    rounding: str = "rne",
    *,
    rng: RNG = None,
    scale: str = "floor",
    tensor_scale: float | None = None,
) -> tuple[np.ndarray, float]:
    """:func:`round_blocks` with the tensor scale left out of the values (element x block scale,
    exact), and the tensor scale: a block-scaled GEMM's operand, whose two tensor scales the GEMM
    applies in its epilogue (``encode_blocks(..., split_tensor_scale=True)`` without codes or
    counts, in the one pass of :func:`round_blocks`). Under the E8M0 rules the tensor scale is 1.

    >>> import floatlab as fl
    >>> v, t = round_blocks_split(np.float32([3.0, 1.0]), fl.get_format("e2m1"), 16, scale="e4m3")
    >>> v.tolist(), round(t * 2688, 6)                           # 448 x 6 = 2688: t = 3 / 2688
    ([2688.0, 896.0], 3.0)
    """
    run = _run_blocks(
        rows, element, block_size, rounding, rng, scale, tensor_scale, values=True, codes=False, split=True
    )
    vals: np.ndarray = run[2]
    return vals.reshape(rows.shape), float(run[4])


def _run_blocks(
    rows: np.ndarray,
    element: FloatFormat,
    block_size: int | tuple[int, int],
    rounding: str,
    rng: RNG,
    scale: str,
    tensor_scale: float | None,
    *,
    values: bool,
    codes: bool,
    split: bool = False,
    count_only: bool = False,
) -> tuple[Any, ...]:
    """Check, plan and run the block loop: (codes, scales, values, counts, tensor scale, the
    scales' shape). ``count_only``: the codes are not wanted, only the counts (the "e4m3" loop
    then forms no codes)."""
    options = RoundingOptions.make(rounding, rng=rng, saturate=True)
    if not isinstance(rows, np.ndarray) or rows.dtype not in (np.float64, np.float32) or rows.ndim < 1:
        what = f"{rows.dtype} {rows.shape}" if isinstance(rows, np.ndarray) else type(rows).__name__
        raise ValueError(f"rows: expected a C-contiguous float64 or float32 array, got {what}")
    if not rows.flags.c_contiguous or not rows.dtype.isnative:
        raise ValueError(f"rows: expected a C-contiguous native-endian array, got {rows.dtype} {rows.shape}")
    if element.bits > 8 or not element.signed:
        raise ValueError(f"element format {element.name}: expected a signed format of at most 8 bits")
    if scale not in BLOCK_SCALES:
        raise ValueError(f"scale={scale!r}: expected one of {', '.join(BLOCK_SCALES)}")
    if scale == "e4m3" and element is MXINT8_ELEMENT:
        raise ValueError("scale='e4m3': MXINT8 elements take an E8M0 scale, 'floor' or 'rceil'")
    if scale != "e4m3" and tensor_scale is not None:
        raise ValueError(f"tensor_scale={tensor_scale!r}: only the 'e4m3' rule has a tensor scale")
    br, bc = _block_shape(block_size, rows)
    two_d = isinstance(block_size, tuple)
    shape = rows.shape
    lead = shape[:-2] if two_d else shape[:-1]
    r, c = (shape[-2], shape[-1]) if two_d else (1, shape[-1])
    outer = int(np.prod(lead))
    scale_shape = (*lead, -(-r // br), -(-c // bc)) if two_d else (*lead, -(-c // bc))
    t = 1.0
    rule: tuple[Any, ...]
    ps: EncodeParams | None  # the E4M3 scales' rounding; None: E8M0 scales
    if scale == "e4m3":
        bits = (
            rows.reshape(-1).view(np.uint32)
            if rows.dtype == np.float32
            else encode_array(rows.reshape(-1), FP32)
        )
        t = _tensor_scale(bits, element, tensor_scale)
        t32 = np.float32(t)
        lo, hi = (np.float32(v) for v in E4M3_SCALE_RANGE)
        rule = (t32, np.float32(1) / t32, np.float32(element.max), lo, hi, np.float32(1) if split else t32)
        p = encode_params(FP32, element, options, lanes=32)
        ps = encode_params(FP32, _E4M3, RoundingOptions(), lanes=32)
        form_codes, count = codes and not count_only, count_only
    else:
        src = FP32 if rows.dtype == np.float32 else FP64
        # the element max's significand, as a fraction in the input's fraction bits (rceil's test)
        max_frac = int((element.max_exact / pow2(element.emax) - 1) * 2**src.mantissa_bits)
        rule = (element.emax, int(scale == "rceil"), max_frac)
        # (the moved exponent range reaches below the input's: subnormal inputs need their true exponent)
        p = encode_params(src, element, options, lanes=src.bits, full=True)
        bits = rows.reshape(-1).view(np.uint32 if src is FP32 else np.uint64)
        ps = None
        form_codes, count = codes, False  # the E8M0 loop counts as it forms codes (no count-only pass)
    out = cpu.run_blocks(
        bits,
        (outer, r, c),
        (br, bc),
        rule,
        p,
        rows.dtype if values else None,
        codes=form_codes,
        ps=ps,
        count=count,
    )
    if element is MXINT8_ELEMENT:  # -2.0 and the two's complement codes (E8M0 scales only)
        out = mxint8_blocks(rows, out, (br, bc), scale_shape, options)
    return (*out, t, scale_shape)
