"""Block-scaled formats: the OCP Microscaling (MX) formats, where a block of 32 small floats
shares one power-of-two scale.

An fp8 number alone has a narrow range (E4M3: 2^-9 to 448); MX formats widen it by giving every
block of ``k`` consecutive values (``k = 32``) its own scale, stored once in E8M0, an 8-bit
exponent with no sign and no fraction (codes 0..254 are 2^-127..2^127, 255 is NaN). The OCP
Microscaling Formats (MX) v1.0 specification defines five floating-point kinds, named by their
element format:

=============  ==================  ===========================
MX format      element             bits per value (k = 32)
=============  ==================  ===========================
mxfp8_e5m2     float8_e5m2         8.25
mxfp8_e4m3     float8_e4m3fn       8.25
mxfp6_e3m2     float6_e3m2fn       6.25
mxfp6_e2m3     float6_e2m3fn       6.25
mxfp4_e2m1     float4_e2m1fn       4.25
=============  ==================  ===========================

Quantizing a block (:func:`mx_quantize`) follows the conversion of the specification, as its
reference implementation (microsoft/microxcaling) computes it:

1. the shared exponent is ``floor(log2(max |v|)) - emax``, where ``emax`` is the exponent of the
   element format's largest normal value, so that the largest value of the block lands in the
   element format's top binade; it is read from the bit fields of the largest magnitude, never
   from ``log2``;
2. it is clamped below at -127 (a block of zeros, or of values too small for any scale, gets the
   smallest scale); a shared exponent above 127, or a block holding a NaN or an infinity, gets the
   NaN scale, and every value of that block decodes as NaN;
3. each ``v / 2^shared`` is rounded into the element format, saturating: the values between the
   largest element and the top of the binade (E4M3: 448 to 512) clamp to the largest element. The
   rounding is the element function of the one rounding primitive (the loop behind
   :func:`floatlab.encode_array`), applied to ``v`` itself with the element format's exponent range
   shifted by ``shared``: the same code, with no scaled value ever formed, so nothing can underflow
   on the way. One compiled pass does a whole array, block by block.

The element rounding takes every rounding mode of floatlab (the specification leaves the mode to
the implementation; microxcaling's default rounds ties away from zero, floatlab's ``"rna"``).

>>> import numpy as np
>>> q = mx_quantize([1.0, 0.1, 1e-4, 300.0], "mxfp8_e4m3")
>>> int(q.scale_codes[0]) - 127          # max 300 is in binade 2^8, E4M3's top binade is 2^8
0
>>> q.dequantize().tolist()              # 1e-4 is below E4M3's smallest subnormal 2^-9: flushed
[1.0, 0.1015625, 0.0, 288.0]

Not covered: MXINT8 (integer elements), and the two-level scaled formats (NVFP4: blocks of 16
with an E4M3 scale and a per-tensor fp32 scale).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from floatlab.codec import decode_array
from floatlab.exact import floor_log2, pow2
from floatlab.formats import FloatFormat, get_format
from floatlab.rounding import as_float_array, check_rounding, encode_blocks
from floatlab.text import percent

__all__ = [
    "E8M0_BIAS",
    "E8M0_NAN",
    "MX_FORMATS",
    "MXArray",
    "MXFormat",
    "get_mx_format",
    "mx_block_reference",
    "mx_quantize",
    "mx_round",
]

#: the bias of the E8M0 scale: code ``c`` (0..254) is the scale 2^(c - 127)
E8M0_BIAS = 127
#: the E8M0 code of the NaN scale
E8M0_NAN = 255
_SCALE_MIN, _SCALE_MAX = -E8M0_BIAS, E8M0_NAN - 1 - E8M0_BIAS  # -127 .. 127


@dataclass(frozen=True)
class MXFormat:
    """A block-scaled format: blocks of ``block_size`` values in ``element`` sharing one E8M0
    scale.

    >>> f = get_mx_format("mxfp4_e2m1")
    >>> f.element.name, f.block_size, f.bits_per_value
    ('float4_e2m1fn', 32, 4.25)
    """

    name: str
    element: FloatFormat
    block_size: int = 32

    def __post_init__(self) -> None:
        if not (
            isinstance(self.block_size, int)
            and not isinstance(self.block_size, bool)
            and self.block_size >= 1
        ):
            raise ValueError(f"block_size={self.block_size!r}: expected a whole number >= 1")

    @property
    def bits_per_value(self) -> float:
        """Storage per value: the element's bits plus the block's 8 scale bits shared out.

        >>> get_mx_format("mxfp8_e4m3").bits_per_value
        8.25
        """
        return self.element.bits + 8 / self.block_size

    @property
    def range_log2(self) -> tuple[int, int]:
        """The binades a block-scaled value can reach: from the element's smallest subnormal
        under the smallest scale to the element's largest binade under the largest scale.

        >>> get_mx_format("mxfp8_e4m3").range_log2    # 2^-9 * 2^-127 .. 448 * 2^127
        (-136, 135)
        """
        e = self.element
        return e.emin - e.mantissa_bits + _SCALE_MIN, e.emax + _SCALE_MAX

    def describe(self) -> str:
        """One line about the format.

        >>> print(get_mx_format("mxfp8_e5m2").describe())
        mxfp8_e5m2: 32 x float8_e5m2 (max 57344) + one E8M0 scale 2^-127..2^127, 8.25 bits per value
        """
        e = self.element
        return (
            f"{self.name}: {self.block_size} x {e.name} (max {e.max:g}) + one E8M0 scale "
            f"2^{_SCALE_MIN}..2^{_SCALE_MAX}, {self.bits_per_value:g} bits per value"
        )


#: the MX formats of the OCP Microscaling v1.0 specification (floating-point elements), by name
MX_FORMATS: dict[str, MXFormat] = {
    name: MXFormat(name, get_format(element))
    for name, element in (
        ("mxfp8_e5m2", "float8_e5m2"),
        ("mxfp8_e4m3", "float8_e4m3fn"),
        ("mxfp6_e3m2", "float6_e3m2fn"),
        ("mxfp6_e2m3", "float6_e2m3fn"),
        ("mxfp4_e2m1", "float4_e2m1fn"),
    )
}


def get_mx_format(fmt: MXFormat | str, block_size: int | None = None) -> MXFormat:
    """The MX format named ``fmt`` (``"mxfp8_e4m3"``, ...; case and ``-`` are ignored), with
    another ``block_size`` when one is given.

    >>> get_mx_format("MXFP6-E2M3", block_size=16).block_size
    16
    >>> get_mx_format("mxfp16")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: unknown MX format 'mxfp16': expected one of mxfp8_e5m2, mxfp8_e4m3, ..., mxfp4_e2m1
    """
    if isinstance(fmt, MXFormat):
        f = fmt
    else:
        key = str(fmt).strip().lower().replace("-", "_")
        if key not in MX_FORMATS:
            raise ValueError(f"unknown MX format {fmt!r}: expected one of {', '.join(MX_FORMATS)}")
        f = MX_FORMATS[key]
    if block_size is not None and block_size != f.block_size:
        f = MXFormat(f.name, f.element, block_size)
    return f


# ---- the scalar reference -----------------------------------------------------------------------
def mx_block_reference(
    values: list[float], fmt: MXFormat | str, rounding: str = "rne"
) -> tuple[int, list[int]]:
    """One block, the readable way: the E8M0 scale code and the element codes, with the shared
    exponent from exact integer arithmetic and each element rounded by the scalar
    :func:`floatlab.encode` (the reference :func:`mx_quantize` is tested against).

    >>> mx_block_reference([1.0, -3.0, 0.0], "mxfp4_e2m1")    # max 3 in binade 2^1, E2M1's top is 2^2
    (126, [4, 15, 0])
    """
    from fractions import Fraction

    from floatlab.codec import encode

    f = get_mx_format(fmt)
    if any(math.isnan(v) or math.isinf(v) for v in values):
        return E8M0_NAN, [0] * len(values)
    amax = max((Fraction(abs(v)) for v in values), default=Fraction(0))
    shared = _SCALE_MIN if amax == 0 else max(floor_log2(amax) - f.element.emax, _SCALE_MIN)
    if shared > _SCALE_MAX:
        return E8M0_NAN, [0] * len(values)
    scale = pow2(shared)
    codes = [int(encode(Fraction(v) / scale, f.element, rounding, saturate=True)) for v in values]
    # a Fraction has no -0: give a negative zero its sign back
    codes = [
        c | f.element.sign_mask if v == 0 and math.copysign(1.0, v) < 0 else c
        for c, v in zip(codes, values, strict=True)
    ]
    return shared + E8M0_BIAS, codes


# ---- the vectorised twin ------------------------------------------------------------------------
@dataclass(frozen=True)
class MXArray:
    """An array in an MX format: the E8M0 scale code of every block and the element code of every
    value, bit for bit as an MX tensor stores them (one code per array element, not packed).

    ``scale_codes`` has the shape of the input with the blocked axis cut into blocks;
    ``element_codes`` the shape of the input. Of the ``nonzero`` inputs in blocks with a finite
    scale, ``flushed`` counts those whose element rounded to zero, ``subnormal`` those whose element
    is subnormal; ``clamped`` counts the values that saturation held at the element's largest value
    (they would have overflowed), ``inexact`` those the rounding changed, ``nan_blocks`` the blocks
    with the NaN scale.

    >>> q = mx_quantize(np.arange(64.0).reshape(2, 32), "mxfp8_e4m3")
    >>> q.scale_codes.shape, q.element_codes.shape, q.nbytes
    ((2, 1), (2, 32), 66)
    """

    format: MXFormat
    axis: int
    scale_codes: npt.NDArray[np.uint8]
    element_codes: npt.NDArray[np.uint8]
    nonzero: int
    inexact: int
    flushed: int
    subnormal: int
    clamped: int
    nan_blocks: int
    rounding: str = "rne"

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape of the array (as the input's)."""
        return tuple(self.element_codes.shape)

    @property
    def nbytes(self) -> int:
        """The storage of the MX tensor: the elements packed at their bit width, one byte per
        block scale."""
        return -(-self.element_codes.size * self.format.element.bits // 8) + self.scale_codes.size

    def scales(self) -> npt.NDArray[np.float64]:
        """The scale of each block, 2^(code - 127), NaN for the NaN scale.

        >>> mx_quantize([1.0, 2.0], "mxfp8_e4m3").scales().tolist()   # max 2 is 2^1, E4M3's top is 2^8
        [0.0078125]
        """
        c = self.scale_codes.astype(np.int64)
        out = np.ldexp(1.0, c - E8M0_BIAS)
        out[c == E8M0_NAN] = np.nan
        return out

    def elements(self) -> npt.NDArray[np.float64]:
        """The element values (before the block's scale is applied)."""
        return decode_array(self.element_codes, self.format.element)

    def _per_value(self, block_values: npt.NDArray[Any]) -> npt.NDArray[Any]:
        k = self.format.block_size
        n = self.element_codes.shape[self.axis]
        return np.moveaxis(
            np.repeat(np.moveaxis(block_values, self.axis, -1), k, axis=-1)[..., :n], -1, self.axis
        )

    def dequantize(self) -> npt.NDArray[np.float64]:
        """The values the MX tensor stands for: element times its block's scale (float64, exact);
        every value of a NaN-scale block is NaN.

        >>> mx_quantize([3.0, 0.3, float("nan")], "mxfp6_e2m3").dequantize().tolist()
        [nan, nan, nan]
        """
        codes = self.scale_codes.astype(np.int64)
        shared = self._per_value(codes)
        out = np.ldexp(self.elements(), np.where(shared == E8M0_NAN, 0, shared - E8M0_BIAS))
        out[shared == E8M0_NAN] = np.nan
        return out

    def report(self) -> str:
        """What quantizing did, in words.

        >>> print(mx_quantize([1.0, 2.0**-12, 500.0, 0.0], "mxfp8_e4m3").report())
        mxfp8_e4m3 (rne): 4 values in 1 block of 32, 5 bytes (8.25 bits per value)
          of the 3 nonzero values: 33.3% flush to zero, 0% turn subnormal, 33.3% saturate
        """
        nz = max(self.nonzero, 1)
        blocks = self.scale_codes.size
        lines = [
            f"{self.format.name} ({self.rounding}): {self.element_codes.size:,} values in {blocks:,} "
            f"block{'s' if blocks != 1 else ''} of {self.format.block_size}, {self.nbytes:,} bytes "
            f"({self.format.bits_per_value:g} bits per value)",
            f"  of the {self.nonzero:,} nonzero values: {percent(self.flushed / nz)} flush to zero, "
            f"{percent(self.subnormal / nz)} turn subnormal, {percent(self.clamped / nz)} saturate",
        ]
        if self.nan_blocks:
            lines.append(f"  {self.nan_blocks:,} blocks hold a NaN or an infinity: all their values are NaN")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.report()


def _check_axis(axis: int, ndim: int) -> int:
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise ValueError(f"axis={axis!r}: expected a whole number")
    if ndim == 0 or not -ndim <= axis < ndim:
        raise ValueError(
            f"axis={axis}: expected an axis of an array of {ndim} dimensions, -{ndim} to {ndim - 1}"
        )
    return int(axis) % ndim


def mx_quantize(
    x: npt.ArrayLike,
    fmt: MXFormat | str,
    *,
    axis: int = -1,
    rounding: str = "rne",
    rng: np.random.Generator | int | None = None,
    block_size: int | None = None,
) -> MXArray:
    """``x`` in the MX format ``fmt``, in blocks of ``block_size`` (32) consecutive values along
    ``axis`` (the last block of a row may be shorter): the scale and element codes, and what the
    quantization flushed and clamped. See the module notes for the rule.

    >>> g = np.array([2.0**-30, 2.0**-31, 3 * 2.0**-34, 0.0])      # gradients far below fp8's range
    >>> mx_quantize(g, "mxfp8_e4m3").dequantize().tolist() == g.tolist()   # the block scale keeps them
    True
    >>> q = mx_quantize(np.linspace(-1, 1, 64).reshape(2, 32), "mxfp4_e2m1", axis=0)
    >>> q.scale_codes.shape      # blocks run down the columns: one block (of 2 values) per column
    (1, 32)
    """
    q, _ = _quantize(as_float_array(x)[0], fmt, axis, rounding, rng, block_size, values=False)
    return q


def _quantize(
    x: npt.NDArray[Any],
    fmt: MXFormat | str,
    axis: int,
    rounding: str,
    rng: np.random.Generator | int | None,
    block_size: int | None,
    values: bool,
) -> tuple[MXArray, npt.NDArray[np.float64] | None]:
    """The work of :func:`mx_quantize` (and, with ``values``, the dequantized values) in one
    compiled pass over the blocks."""
    f = get_mx_format(fmt, block_size)
    mode = check_rounding(rounding)
    a = np.atleast_1d(x.astype(np.float64))
    ax = _check_axis(axis, a.ndim)
    rows = np.ascontiguousarray(np.moveaxis(a, ax, -1))
    n = rows.shape[-1]
    b = encode_blocks(rows, f.element, f.block_size, mode, rng=rng, values=values)
    codes, scales, out = b.element_codes, b.scale_codes, b.values
    nblocks = -(-n // f.block_size)
    scale_codes = scales.reshape(*rows.shape[:-1], nblocks)
    q = MXArray(
        format=f,
        axis=ax,
        scale_codes=np.ascontiguousarray(np.moveaxis(scale_codes, -1, ax)),
        element_codes=np.ascontiguousarray(np.moveaxis(codes.reshape(rows.shape), -1, ax)),
        inexact=b.inexact,
        nonzero=b.nonzero,
        flushed=b.flushed,
        subnormal=b.subnormal,
        clamped=b.overflow,
        nan_blocks=int(np.count_nonzero(scales == E8M0_NAN)),
        rounding=mode,
    )
    back = None if out is None else np.moveaxis(out.reshape(rows.shape), -1, ax)
    return q, back


def mx_round(
    x: npt.ArrayLike,
    fmt: MXFormat | str,
    *,
    axis: int = -1,
    rounding: str = "rne",
    rng: np.random.Generator | int | None = None,
    block_size: int | None = None,
) -> npt.NDArray[Any]:
    """``x`` quantized to ``fmt`` and back ("fake quantization"): :meth:`MXArray.dequantize` of
    :func:`mx_quantize`, in ``x``'s float dtype (float64 for integers), as a cast would give it
    (float16 cannot hold every MX value below its range; float32 and float64 can).

    >>> mx_round(np.array([1.0, 0.3, 7.0], np.float32), "mxfp4_e2m1")   # E2M1: 0, 0.5, 1, 1.5, 2, 3, 4, 6
    array([1. , 0.5, 6. ], dtype=float32)
    """
    a, _ = as_float_array(x)  # integers and booleans become float64
    _, out = _quantize(a, fmt, axis, rounding, rng, block_size, values=True)
    assert out is not None
    return out.reshape(a.shape).astype(a.dtype)
