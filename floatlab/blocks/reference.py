"""The scalar reference: one block, the readable way, in exact rational arithmetic.

:func:`mx_block_reference` is the specification the compiled block loop
(:func:`floatlab.rounding.encode_blocks`, behind :func:`~floatlab.blocks.mx_quantize`) is tested
against: the scale from exact integer arithmetic on the block's largest magnitude, each element
rounded by the scalar :func:`floatlab.encode`; NVFP4's float32 arithmetic is spelled out
operation by operation, each one rounded to float32 by :func:`floatlab.rounding.round_rational`.
"""

from __future__ import annotations

import math
from fractions import Fraction

from floatlab.blocks.formats import E8M0_BIAS, E8M0_NAN, SCALE_MODES, BlockFormat, get_mx_format
from floatlab.codec import decode, encode
from floatlab.exact import floor_log2, pow2
from floatlab.formats import FP32, FloatFormat, get_format
from floatlab.rounding import E4M3_SCALE_RANGE, round_rational

__all__ = ["mx_block_reference"]

_E4M3 = get_format("float8_e4m3fn")


def _fl32(q: Fraction) -> Fraction:
    """``q`` rounded to float32 (nearest, ties to even): one float32 operation's result."""
    code, _ = round_rational(q, FP32)
    exact = decode(code, FP32).exact
    assert exact is not None  # (a finite rational rounds to a finite float32 or overflows to inf)
    return exact


def _element_codes(
    scaled: list[Fraction], values: list[float], element: FloatFormat, rounding: str
) -> list[int]:
    codes = [int(encode(q, element, rounding, saturate=True)) for q in scaled]
    # a Fraction has no -0: give a negative zero its sign back
    return [
        c | element.sign_mask if v == 0 and math.copysign(1.0, v) < 0 else c
        for c, v in zip(codes, values, strict=True)
    ]


def _e8m0_shared(amax: Fraction, f: BlockFormat, scale_mode: str) -> int | None:
    """The shared exponent of a block of largest magnitude ``amax``, or None for the NaN scale."""
    if amax == 0:
        return -E8M0_BIAS
    shared = floor_log2(amax) - f.element.emax
    if scale_mode == "rceil" and amax > f.element.max_exact * pow2(shared):
        shared += 1  # amax / max rounded up to a power of two: nothing saturates
    shared = max(shared, -E8M0_BIAS)
    if shared > E8M0_NAN - 1 - E8M0_BIAS:
        return None if scale_mode == "floor" else E8M0_NAN - 1 - E8M0_BIAS
    return shared


def mx_block_reference(
    values: list[float],
    fmt: BlockFormat | str,
    rounding: str = "rne",
    *,
    scale_mode: str = "floor",
    tensor_scale: float = 1.0,
) -> tuple[int, list[int]]:
    """One block, the readable way: its scale code and the element codes.

    MX formats (E8M0 scales): the shared exponent is floor(log2(amax)) - emax (``scale_mode=
    "floor"``, the OCP rule), one more under ``"rceil"`` when amax exceeds the element's max
    times that power of two; clamped to -127..127 (above: the NaN scale under "floor"), and each
    element is v / 2^shared rounded, saturating. NVFP4 (E4M3 scales, float32 arithmetic as
    torchao's ``nvfp4_quantize``): the values are taken as float32 numbers, the scale is the
    E4M3 rounding of fl(fl(amax / 6) / t) clamped to 2^-6..448, t the float32 ``tensor_scale``
    (1: one level of scaling), and each element is fl(v * fl(fl(1 / t) / scale)) rounded. A
    block holding an inf or NaN gets the NaN scale and zero codes.

    >>> mx_block_reference([1.0, -3.0, 0.0], "mxfp4_e2m1")    # max 3 in binade 2^1, E2M1's top is 2^2
    (126, [4, 15, 0])
    >>> mx_block_reference([7.0], "mxfp4_e2m1", scale_mode="rceil")   # 7 / 6 rounded up: 2^1
    (128, [6])
    >>> mx_block_reference([3.0, 1.0], "nvfp4")               # scale 3 / 6 = 0.5 (E4M3 0x30): 6 and 2
    (48, [7, 4])
    """
    f = get_mx_format(fmt)
    if scale_mode not in SCALE_MODES:
        raise ValueError(f"scale_mode={scale_mode!r}: expected one of {', '.join(SCALE_MODES)}")
    e = f.element
    if f.scale == "e4m3":
        v32 = [float(_fl32(Fraction(v))) if math.isfinite(v) else v for v in values]
        if any(not math.isfinite(v) for v in v32):
            return int(_E4M3.nan_code or 0), [0] * len(values)
        t = Fraction(tensor_scale)
        if _fl32(t) != t:
            raise ValueError(f"tensor_scale={tensor_scale!r}: expected a float32 number")
        amax = max((abs(Fraction(v)) for v in v32), default=Fraction(0))
        lo, hi = (Fraction(b) for b in E4M3_SCALE_RANGE)
        s = min(max(_fl32(_fl32(amax / e.max_exact) / t), lo), hi)
        scale_code = int(encode(s, _E4M3))
        s8 = decode(scale_code, _E4M3).exact
        assert s8 is not None
        rcp = _fl32(_fl32(1 / t) / s8)  # the recipe multiplies by the reciprocal scale
        return scale_code, _element_codes([_fl32(Fraction(v) * rcp) for v in v32], v32, e, rounding)
    if any(math.isnan(v) or math.isinf(v) for v in values):
        return E8M0_NAN, [0] * len(values)
    amax = max((abs(Fraction(v)) for v in values), default=Fraction(0))
    shared = _e8m0_shared(amax, f, scale_mode)
    if shared is None:
        return E8M0_NAN, [0] * len(values)
    scaled = [Fraction(v) / pow2(shared) for v in values]
    return shared + E8M0_BIAS, _element_codes(scaled, values, e, rounding)
