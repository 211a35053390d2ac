"""The block formats as data: an element format, a block size and what the block scale is.

Two kinds of scale, one class (:class:`BlockFormat`, also named :class:`MXFormat`):

* ``"e8m0"``, the OCP Microscaling (MX) formats: a power of two per block, stored in E8M0, an
  8-bit exponent with no sign and no fraction (codes 0..254 are 2^-127..2^127, 255 is NaN);
* ``"e4m3"``, NVIDIA's NVFP4: an E4M3 number per block (E4M3's positive values, 2^-9 to 448,
  and its NaN), over one float32 scale for the whole tensor.

>>> get_mx_format("nvfp4").describe()
'nvfp4: 16 x float4_e2m1fn (max 6) + one E4M3 scale per block + one fp32 scale per tensor, 4.5 bits per value'
"""

from __future__ import annotations

from dataclasses import dataclass

from floatlab.exact import floor_log2
from floatlab.formats import MXINT8_ELEMENT, FloatFormat, get_format
from floatlab.registry import Registry

__all__ = [
    "BLOCK_FORMATS",
    "E8M0_BIAS",
    "E8M0_NAN",
    "MAX_BLOCK_SIZE",
    "MXINT8",
    "MX_FORMATS",
    "NVFP4",
    "SCALE_MODES",
    "BlockFormat",
    "MXFormat",
    "get_mx_format",
]

#: the bias of the E8M0 scale: code ``c`` (0..254) is the scale 2^(c - 127)
E8M0_BIAS = 127
#: the E8M0 code of the NaN scale
E8M0_NAN = 255
#: the longest block: 2^31 values, more than any axis of an array the command line reads (its
#: 1 GiB cap holds 2^28 float32 values), so that a block this long is one scale per axis, while
#: the block loop's indices (a tile's 2^62 values) stay within int64
MAX_BLOCK_SIZE = 1 << 31
#: the two ways of choosing an E8M0 scale, by torchao's names (``ScaleCalculationMode``):
#: "floor", the OCP specification's 2^(floor(log2 amax) - emax), and "rceil", NVIDIA's
#: amax / max rounded up to a power of two
SCALE_MODES = ("floor", "rceil")
SCALE_KINDS = ("e8m0", "e4m3")
_SCALE_MIN, _SCALE_MAX = -E8M0_BIAS, E8M0_NAN - 1 - E8M0_BIAS  # -127 .. 127


@dataclass(frozen=True)
class BlockFormat:
    """A block-scaled format: blocks of ``block_size`` values in ``element`` sharing one scale,
    an E8M0 power of two (``scale="e8m0"``, the MX formats) or an E4M3 number over a float32
    scale per tensor (``scale="e4m3"``, NVFP4).

    >>> f = get_mx_format("mxfp4_e2m1")
    >>> f.element.name, f.block_size, f.bits_per_value
    ('float4_e2m1fn', 32, 4.25)
    """

    name: str
    element: FloatFormat
    block_size: int = 32
    scale: str = "e8m0"

    def __post_init__(self) -> None:
        if not (
            isinstance(self.block_size, int)
            and not isinstance(self.block_size, bool)
            and 1 <= self.block_size <= MAX_BLOCK_SIZE
        ):
            raise ValueError(
                f"block_size={self.block_size!r:.40}: expected a whole number from 1 to "
                f"{MAX_BLOCK_SIZE:,} (2^31)"
            )
        if self.scale not in SCALE_KINDS:
            raise ValueError(f"scale={self.scale!r}: expected one of {', '.join(SCALE_KINDS)}")

    @property
    def tensor_scale(self) -> bool:
        """Whether the format has a float32 scale per tensor above its block scales (NVFP4).

        >>> NVFP4.tensor_scale, get_mx_format("mxfp8_e4m3").tensor_scale
        (True, False)
        """
        return self.scale == "e4m3"

    @property
    def bits_per_value(self) -> float:
        """Storage per value: the element's bits plus the block's 8 scale bits shared out (a
        tensor scale's 32 bits are left out: they are shared by the whole tensor).

        >>> get_mx_format("mxfp8_e4m3").bits_per_value, NVFP4.bits_per_value
        (8.25, 4.5)
        """
        return self.element.bits + 8 / self.block_size

    @property
    def range_log2(self) -> tuple[int, int]:
        """The binades a block-scaled value can reach: from the element's smallest subnormal
        under the smallest scale to the element's largest binade under the largest scale (for
        NVFP4, relative to the tensor scale, with block scales from 2^-6 to 448 as torchao
        clamps them).

        >>> get_mx_format("mxfp8_e4m3").range_log2    # 2^-9 * 2^-127 .. 448 * 2^127
        (-136, 135)
        >>> NVFP4.range_log2                          # 0.5 * 2^-6 .. 6 * 448
        (-7, 11)
        """
        e = self.element
        low = e.emin - e.mantissa_bits
        if self.scale == "e4m3":
            return low - 6, floor_log2(e.max_exact * 448)
        return low + _SCALE_MIN, e.emax + _SCALE_MAX

    def describe(self) -> str:
        """One line about the format.

        >>> print(get_mx_format("mxfp8_e5m2").describe())
        mxfp8_e5m2: 32 x float8_e5m2 (max 57344) + one E8M0 scale 2^-127..2^127, 8.25 bits per value
        """
        e = self.element
        if e is MXINT8_ELEMENT:
            return (
                f"{self.name}: {self.block_size} x int8 (k / 64, -2 to 1.984375) + one E8M0 scale "
                f"2^{_SCALE_MIN}..2^{_SCALE_MAX}, {self.bits_per_value:g} bits per value"
            )
        scale = (
            "one E4M3 scale per block + one fp32 scale per tensor"
            if self.scale == "e4m3"
            else f"one E8M0 scale 2^{_SCALE_MIN}..2^{_SCALE_MAX}"
        )
        return (
            f"{self.name}: {self.block_size} x {e.name} (max {e.max:g}) + {scale}, "
            f"{self.bits_per_value:g} bits per value"
        )


#: the name the MX formats had first (one class serves every block format)
MXFormat = BlockFormat

#: the MX formats of the OCP Microscaling v1.0 specification (floating-point elements), by name
MX_FORMATS: dict[str, BlockFormat] = {
    name: BlockFormat(name, get_format(element))
    for name, element in (
        ("mxfp8_e5m2", "float8_e5m2"),
        ("mxfp8_e4m3", "float8_e4m3fn"),
        ("mxfp6_e3m2", "float6_e3m2fn"),
        ("mxfp6_e2m3", "float6_e2m3fn"),
        ("mxfp4_e2m1", "float4_e2m1fn"),
    )
}
#: OCP MX's MXINT8: 8-bit two's complement integers k / 64 (k from -128 to 127), blocks of 32, an
#: E8M0 scale (its element's emax is 0: the scale is 2^floor(log2 amax))
MXINT8 = BlockFormat("mxint8", MXINT8_ELEMENT)
#: NVIDIA's NVFP4: E2M1 elements in blocks of 16, an E4M3 scale per block, an fp32 scale per tensor
NVFP4 = BlockFormat("nvfp4", get_format("float4_e2m1fn"), 16, "e4m3")
#: every block format by name, the MX formats and NVFP4 (case is ignored and ``-`` read as ``_``)
BLOCK_FORMATS: Registry[BlockFormat] = Registry(
    "MX format",
    {**MX_FORMATS, MXINT8.name: MXINT8, NVFP4.name: NVFP4},
    alike="-",
    sep="_",
    kind="a block format name",
)


def get_mx_format(fmt: BlockFormat | str, block_size: int | None = None) -> BlockFormat:
    """The block format named ``fmt`` (``"mxfp8_e4m3"``, ..., ``"nvfp4"``; case and ``-`` are
    ignored), with another ``block_size`` when one is given.

    >>> get_mx_format("MXFP6-E2M3", block_size=16).block_size
    16
    >>> get_mx_format("mxfp16")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: unknown MX format 'mxfp16': did you mean mxfp6_e3m2? expected one of mxfp8_e5m2, ..., nvfp4
    """
    f = fmt if isinstance(fmt, BlockFormat) else BLOCK_FORMATS.lookup(fmt)
    if block_size is not None and block_size != f.block_size:
        f = BlockFormat(f.name, f.element, block_size, f.scale)
    return f
