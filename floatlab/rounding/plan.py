"""The host prologue of an array rounding, shared by the CPU and the CUDA executor.

From the input's format, the target format, the options and what the caller wants back (codes
or values, with or without flag counts), :func:`make_plan` picks the loop and derives its
parameters. The executors (:mod:`floatlab.rounding.cpu`, :mod:`floatlab.rounding.cuda`) then
differ only in where the loop runs.

>>> import floatlab as fl
>>> plan = make_plan(fl.FP32, fl.FP16, RoundingOptions(), back=False, flags=False)
>>> plan.loop, plan.lanes, plan.out_dtype
('encode', 32, dtype('uint16'))
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import numpy as np

from floatlab.formats import BF16, FP16, FP32, FloatFormat
from floatlab.rounding.options import RoundingKnobs, RoundingOptions
from floatlab.rounding.params import DecodeParams, EncodeParams, code_dtype, decode_params, encode_params
from floatlab.rounding.spec import check_rounding

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["UINT_OF_BITS", "Plan", "make_plan", "plain_cast_plan", "round_target", "widen16"]

UINT_OF_BITS: dict[int, type[np.unsignedinteger[Any]]] = {16: np.uint16, 32: np.uint32, 64: np.uint64}


class Plan(NamedTuple):
    """Which loop rounds the input's bit patterns, with which parameters, into what.

    ``loop`` is "encode" or "round" (deterministic modes, no flags: codes, or values back in
    the input's format), "general" (any mode, stochastic above all) or "full" (any mode, with
    the flag counts). The last two read 32- or 64-bit patterns: a 16-bit input is widened to
    float32 first (``widen``), exactly.

    >>> import floatlab as fl
    >>> plan = make_plan(fl.FP16, fl.FP64, RoundingOptions(), back=False, flags=True)
    >>> plan.loop, plan.widen, plan.lanes, plan.result_dtype
    ('full', True, 64, dtype('uint64'))
    """

    loop: Literal["encode", "round", "general", "full"]
    src: FloatFormat
    target: FloatFormat
    specials: FloatFormat | None  # whose infinities and NaNs apply, when not the target's
    options: RoundingOptions
    back: bool  # values back in the input's format (round_array), rather than codes (encode_array)
    lanes: int
    widen: bool
    p: EncodeParams
    d: DecodeParams
    out_dtype: np.dtype[Any]  # what the loop writes
    result_dtype: np.dtype[Any]  # what the caller gets: codes, or the input's bit patterns
    #: "fp32->fp16" or "fp32->bf16" when the plan is a plain round-to-nearest-even cast (no flags,
    #: subnormals kept, overflow to inf) that an executor may do its own way, with the same bits
    cast: str = ""

    def with_key(self, options: RoundingOptions) -> Plan:
        """This plan for ``options``, whose stochastic key it takes (the rest must agree)."""
        p = self.p._replace(key0=options.key[0] & 0xFFFFFFFF, key1=options.key[1] & 0xFFFFFFFF)
        return self._replace(options=options, p=p)


def round_target(src: FloatFormat, fmt: FloatFormat, dtype: object) -> tuple[FloatFormat, FloatFormat | None]:
    """Where round_array rounds values of ``src`` for ``fmt``: into ``fmt`` when ``src`` holds all
    of fmt's values; into ``src`` itself (the identity on finite values) with fmt's infinities
    and NaNs when ``fmt`` holds all of src's; ValueError otherwise (it would round twice).

    >>> from floatlab.formats import FP16, FP32, get_format
    >>> round_target(FP32, FP16, "float32")[0].name, round_target(FP16, FP32, "float16")[1].name
    ('fp16', 'fp32')
    >>> round_target(FP16, get_format("bf16"), "float16")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: format bf16 has values that float16 cannot hold, so round_array would round twice; ...
    """
    if src.contains(fmt):
        return fmt, None
    if fmt.contains(src):
        return src, fmt
    raise ValueError(
        f"format {fmt.name} has values that {dtype} cannot hold, so round_array would round "
        f"twice; use encode_array(x, {fmt.name!r}) and decode_array(codes, {fmt.name!r}) (float64)"
    )


def make_plan(
    src: FloatFormat,
    target: FloatFormat,
    options: RoundingOptions,
    *,
    back: bool,
    flags: bool,
    specials: FloatFormat | None = None,
) -> Plan:
    """The plan for rounding values of ``src`` into ``target``: codes, or with ``back`` the rounded
    values as bit patterns of ``src``; with ``flags`` the loop that counts the IEEE flags.

    >>> import floatlab as fl
    >>> make_plan(fl.FP32, fl.BF16, RoundingOptions(), back=True, flags=False).loop
    'round'
    >>> make_plan(fl.FP32, fl.BF16, RoundingOptions.make("stochastic", rng=0), back=True, flags=False).loop
    'general'
    """
    if options.key == (0, 0):
        return _plan(src, target, options, back, flags, specials)
    # the plan without the key is cached (a training step plans the same roundings over and over)
    return _plan(src, target, options.without_key(), back, flags, specials).with_key(options)


@functools.lru_cache(maxsize=1024)
def _plan(
    src: FloatFormat,
    target: FloatFormat,
    options: RoundingOptions,
    back: bool,
    flags: bool,
    specials: FloatFormat | None,
) -> Plan:
    """make_plan for options whose stochastic key is (0, 0)."""
    udt = np.dtype(UINT_OF_BITS[src.bits])
    cdt = code_dtype(target)
    result = udt if back else cdt
    lanes = 64 if max(src.bits, target.bits) > 32 else 32
    fast = not options.stochastic and not flags and (back or src.bits == 64 or cdt.itemsize * 8 <= src.bits)
    if fast:
        # the lean loops: deterministic modes, no flags, one compiled loop per dtype pair
        p = encode_params(src, target, options, lanes=lanes, specials_from=specials)
        d = decode_params(target, src, lanes)  # (read when back)
        loop: Literal["encode", "round", "general", "full"] = "round" if back else "encode"
        plain = options.mode == "rne" and options.subnormals and not options.saturate and specials is None
        cast = f"{src.name}->{target.name}" if plain and src == FP32 and target in (FP16, BF16) else ""
        return Plan(loop, src, target, specials, options, back, lanes, False, p, d, result, result, cast)
    # the general loops (stochastic rounding, flag counts, 16/32-bit input to 64-bit codes)
    # take 32- and 64-bit inputs only: 16-bit ones are widened first, exactly
    wide = FP32 if src.bits == 16 else src
    lanes = 64 if max(wide.bits, target.bits) > 32 else 32
    p = encode_params(wide, target, options, lanes=lanes, full=flags, specials_from=specials)
    d = decode_params(target, src, lanes)
    lane_dtype = np.dtype(np.uint32 if lanes == 32 else np.uint64)
    loop = "full" if flags else "general"
    return Plan(loop, src, target, specials, options, back, lanes, src.bits == 16, p, d, lane_dtype, result)


def widen16(bits: Any, src: FloatFormat, subnormals: bool, xp: Any) -> Any:
    """float32 bit patterns of fp16 or bfloat16 bit patterns ``bits``, exact, NaN payloads kept;
    with ``subnormals=False`` subnormal inputs become zeros of their sign first
    (denormals-are-zero). ``xp`` is numpy or cupy.

    >>> from floatlab.formats import FP16
    >>> bits = np.array([0x3C00, 0x0001, 0x7E01], np.uint16)   # 1, the smallest subnormal, a NaN
    >>> [hex(b) for b in widen16(bits, FP16, True, np)]
    ['0x3f800000', '0x33800000', '0x7fc02000']
    >>> [hex(b) for b in widen16(bits, FP16, False, np)][1]
    '0x0'
    """
    udt = bits.dtype
    if not subnormals:
        zeroed = bits & udt.type(src.sign_mask)
        bits = xp.where((bits & udt.type(src.exponent_mask)) == 0, zeroed, bits).astype(udt)
    if src == BF16:
        return bits.astype(xp.uint32) << xp.uint32(16)  # bfloat16 is the top half of a float32
    wide = bits.view(xp.float16).astype(xp.float32).view(xp.uint32)  # every fp16 is a float32: exact
    if xp is np:
        return wide  # numpy's conversion keeps NaN payloads as they are
    # a GPU's conversion instruction may quieten a NaN: rebuild infinities and NaNs from the bits
    h = bits.astype(xp.uint32)
    special = (h & xp.uint32(0x7C00)) == xp.uint32(0x7C00)
    sign = (h >> xp.uint32(15)) << xp.uint32(31)
    nan_inf = sign | xp.uint32(0x7F800000) | ((h & xp.uint32(0x3FF)) << xp.uint32(13))
    return xp.where(special, nan_inf, wide)


def plain_cast_plan(
    x: Any, f: FloatFormat, rounding: str, *, contiguous: bool = True, **knobs: Unpack[RoundingKnobs]
) -> Plan | None:
    """The plan of rounding ``x`` (a float32 NumPy array, C-contiguous unless ``contiguous`` is
    False) into ``f`` and back to nearest even: the stores whose plain float32 to bfloat16 or
    fp16 casts (``plan.cast``) the CPU runs in one pass, fused with counting, summing or a GEMM's
    epilogue; None for another ``x`` or mode (only nearest even: a stochastic mode would draw its
    key here and again in the door, moving ``rng`` on twice). The knobs are the door's, checked
    as it checks them.

    >>> from floatlab.formats import BF16
    >>> plain_cast_plan(np.zeros(2, np.float32), BF16, "rne").cast
    'fp32->bf16'
    >>> plain_cast_plan(np.zeros(2, np.float64), BF16, "rne", saturate=True) is None
    True
    """
    if check_rounding(rounding) != "rne" or type(x) is not np.ndarray:
        return None
    if x.dtype != np.float32 or (contiguous and not x.flags.c_contiguous):
        return None
    options = RoundingOptions.make(rounding, **knobs)
    target, specials = round_target(FP32, f, x.dtype)
    return make_plan(FP32, target, options, back=True, flags=False, specials=specials)
