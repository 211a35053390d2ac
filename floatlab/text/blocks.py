"""The text of an array in a block format (:class:`~floatlab.blocks.BlockArray`): the view
:func:`floatlab.text.render` finds in :data:`TEXT`.

>>> from floatlab.text import render
>>> from floatlab.blocks import mx_quantize
>>> print(render(mx_quantize([1.0, 2.0**-12, 500.0, 0.0], "mxfp8_e4m3")))
mxfp8_e4m3 (rne): 4 values in 1 block of 32, 5 bytes (8.25 bits per value)
  of the 3 nonzero values: 33.3% flush to zero, 0% turn subnormal, 33.3% saturate
"""

from __future__ import annotations

from collections.abc import Callable

from floatlab.blocks.arrays import BlockArray
from floatlab.text import percent

__all__: list[str] = []


def _block_array_text(q: BlockArray) -> str:
    """What quantizing did, in words."""
    nz = max(q.nonzero, 1)
    blocks = q.scale_codes.size
    k = q.format.block_size
    size = f"{k}x{k}" if isinstance(q.axis, tuple) else f"{k}"
    how = q.rounding if q.scale_mode in ("floor", "e4m3") else f"{q.rounding}, {q.scale_mode} scales"
    lines = [
        f"{q.format.name} ({how}): {q.element_codes.size:,} values in {blocks:,} "
        f"block{'s' if blocks != 1 else ''} of {size}, {q.nbytes:,} bytes "
        f"({q.format.bits_per_value:g} bits per value)",
        f"  of the {q.nonzero:,} nonzero values: {percent(q.flushed / nz)} flush to zero, "
        f"{percent(q.subnormal / nz)} turn subnormal, {percent(q.clamped / nz)} saturate",
    ]
    if q.format.tensor_scale:
        lines.append(f"  tensor scale {q.tensor_scale:.6g} (float32), block scales in E4M3")
    held = q.nan_blocks - q.overflowed_blocks
    if held:
        lines.append(f"  {held:,} blocks hold a NaN or an infinity: all their values are NaN")
    if q.overflowed_blocks:
        lines.append(
            f"  {q.overflowed_blocks:,} blocks of finite values overflowed the largest scale: "
            "all their values are NaN"
        )
    return "\n".join(lines)


#: the text view of each result type of this module
TEXT: dict[type, Callable[..., str]] = {BlockArray: _block_array_text}
