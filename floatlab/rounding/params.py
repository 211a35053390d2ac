"""What a compiled loop needs to know about the formats, derived from the formats as named integers.

One compiled loop serves every format and rounding mode because the formats enter as runtime
integers: :class:`EncodeParams` ("round values of the IEEE format ``src`` into ``fmt``") and
:class:`DecodeParams` ("decode codes of ``fmt`` into the IEEE format ``out``"). Both are
NamedTuples of ints, which the JIT compiler passes by value and reads by field name; every
field is derived from the two :class:`~floatlab.formats.FloatFormat` objects and the options.

>>> import floatlab as fl
>>> p = encode_params(fl.FP32, fl.FP16, RoundingOptions(), lanes=32)
>>> p.mantissa_bits, p.emin, p.emax, hex(p.max_code), p.mode_rne
(10, -14, 15, '0x7bff', 1)
"""

from __future__ import annotations

import functools
from fractions import Fraction
from typing import Any, NamedTuple

import numpy as np

from floatlab.formats import FloatFormat
from floatlab.rounding.options import RoundingOptions
from floatlab.rounding.spec import round_rational

__all__ = ["DecodeParams", "EncodeParams", "code_dtype", "decode_params", "encode_params"]

#: values per work item of the block loops and of their tensor amax: a strip of blocks that stays
#: in the first-level cache
TILE = 4096


class EncodeParams(NamedTuple):
    """Round bit patterns of an IEEE input format into a target format (all fields are ints).

    >>> import floatlab as fl
    >>> p = encode_params(fl.FP64, fl.get_format("e4m3fn"), RoundingOptions.make("rtz"), lanes=64)
    >>> p.in_mantissa_bits, p.mantissa_bits, p.max_code, p.overflow_to_max
    (52, 3, 126, 1)
    """

    in_mantissa_bits: int
    in_exponent_mask: int  # the all-ones exponent field of the input, unshifted
    in_bias: int
    in_bits: int
    in_emin: int
    true_exponent: int  # 1: a subnormal input's true exponent is needed (flags, wider target)
    daz: int  # 1: denormals-are-zero, a subnormal input counts as a zero of its sign
    mantissa_bits: int  # the target's
    emin: int
    emax: int
    max_code: int  # the largest finite magnitude code
    shift_cap: int  # a right shift clamped here still tells "below half, not zero"
    sign_bit: int  # the position of the target's sign bit
    mode_rne: int  # one 0/1 flag per mode, so that the per-element choice is branch-free
    mode_rna: int
    mode_rup: int
    mode_rdown: int
    mode_rodd: int
    mode_stochastic: int
    overflow_to_max: int  # 1: an overflow gives the largest finite value (saturate, rtz, rodd, no NaN)
    overflow_mag: int  # otherwise this magnitude: inf, else the NaN
    inf_mag: int  # what an infinite input becomes
    nan_base: int  # what a NaN input becomes, before its payload is added
    payload_mask: int  # the input NaN payload bits that are kept
    payload_shr: int
    payload_shl: int
    fnuz: int  # 1: no negative zero
    ftz: int  # 1: flush subnormal results to zero
    random_mask: int  # the random word's top random_bits bits, in place
    quiet_bit: int  # the input's quiet-NaN bit
    has_nan: int  # of the format whose specials apply
    has_inf: int
    key0: int  # the stochastic-rounding key
    key1: int
    unsigned: int  # 1: no sign bit; a negative value is the NaN
    no_zero: int  # 1: a scale format (E8M0): no zero, its zero exponent field is 2^emin
    code_parity: int  # 1: ties to the even code (no fraction bits: P3109 precision 1), not significand


class DecodeParams(NamedTuple):
    """Decode codes of a format into the bit patterns of an IEEE output format (ints).

    >>> import floatlab as fl
    >>> d = decode_params(fl.get_format("e4m3fnuz"), fl.FP64, 64)
    >>> d.nan_mode == NAN_FNUZ, d.bias, d.out_mantissa_bits
    (True, 8, 52)
    """

    mantissa_bits: int  # the code's format
    exponent_mask: int
    bias: int
    sign_bit: int
    emin: int
    nan_mode: int  # NAN_IEEE, NAN_FN, NAN_FNUZ or NAN_NONE
    out_mantissa_bits: int
    out_emin: int
    out_emax: int
    out_max_code: int
    shift_cap: int
    out_sign_bit: int
    out_qnan: int  # the output's quiet NaN, without sign and payload
    out_inf: int
    payload_mask: int
    payload_shr: int
    payload_shl: int
    inf_mag: int  # a non-IEEE format's infinity magnitude code (P3109 extended), else 0
    no_zero: int  # 1: a scale format (E8M0), its zero exponent field a binade (bias one up)


NAN_IEEE, NAN_FN, NAN_FNUZ, NAN_NONE = 0, 1, 2, 3


def code_dtype(fmt: FloatFormat) -> np.dtype[Any]:
    """The smallest unsigned integer dtype that holds a code of ``fmt``.

    >>> import floatlab as fl
    >>> code_dtype(fl.FP16), code_dtype(fl.get_format("fp8")), code_dtype(fl.TF32)
    (dtype('uint16'), dtype('uint8'), dtype('uint32'))
    """
    for dt in (np.uint8, np.uint16, np.uint32, np.uint64):
        if fmt.bits <= 8 * np.dtype(dt).itemsize:
            return np.dtype(dt)
    raise ValueError(f"format {fmt.name} has {fmt.bits} bits: expected at most 64")  # pragma: no cover


def encode_params(
    src: FloatFormat,
    fmt: FloatFormat,
    options: RoundingOptions,
    *,
    lanes: int,
    full: bool = False,
    specials_from: FloatFormat | None = None,
) -> EncodeParams:
    """The parameters of "round values of the IEEE format ``src`` into ``fmt``".

    ``full`` asks for the loop that counts flags (it needs the true exponent of every
    subnormal input). ``specials_from`` (default ``fmt``) decides what infinities and NaNs
    become: the pass-through of round_array rounds into ``src`` itself with the specials
    of the wider format. ``lanes`` (32 or 64) is the loop's integer width.

    >>> import floatlab as fl
    >>> sr8 = RoundingOptions.make("stochastic", rng=1, random_bits=8)
    >>> p = encode_params(fl.FP32, fl.BF16, sr8, lanes=32)
    >>> p.mode_stochastic, hex(p.random_mask), p.key0 != 0
    (1, '0xff000000', True)
    """
    # the format-dependent part is cached: deriving it costs more than rounding a small array
    base = _encode_params_base(
        src, fmt, options.mode, options.saturate, options.subnormals, options.random_bits, lanes, full,
        specials_from,
    )  # fmt: skip
    return base._replace(key0=options.key[0] & 0xFFFFFFFF, key1=options.key[1] & 0xFFFFFFFF)


@functools.lru_cache(maxsize=512)
def _encode_params_base(
    src: FloatFormat,
    fmt: FloatFormat,
    mode: str,
    saturate: bool,
    subnormals: bool,
    random_bits: int,
    lanes: int,
    full: bool,
    specials_from: FloatFormat | None,
) -> EncodeParams:
    """encode_params with a zero key."""
    sp = fmt if specials_from is None else specials_from
    m_in, m_t = src.mantissa_bits, fmt.mantissa_bits
    # inf input: the target's inf, or its largest finite value, or its NaN (as round_scalar)
    if specials_from is None:
        if fmt.has_inf and not (saturate and fmt.extended):  # P3109 saturation clamps inf too
            inf_mag = fmt.inf_code
        elif saturate or not fmt.has_nan:
            inf_mag = fmt.max_code
        else:
            inf_mag = fmt.nan_code or 0
    else:
        inf_mag = _special_into(sp, fmt, "inf", saturate)
    # NaN input: quiet NaN carrying the top payload bits (IEEE), the one NaN, or zero
    if sp.encoding == "ieee":
        nan_base = fmt.exponent_mask | (1 << max(m_t - 1, 0))
        pmask = (1 << max(m_in - 1, 0)) - 1
    else:
        nan_base = (fmt.nan_code or 0) if specials_from is None else _special_into(sp, fmt, "nan", saturate)
        pmask = 0
    # overflow of a finite value that is not rounded toward zero
    if fmt.has_inf:
        ovf_mag = fmt.inf_code
    elif fmt.has_nan:
        ovf_mag = fmt.nan_code or 0
    else:
        ovf_mag = fmt.max_code
    return _int64_fields(
        EncodeParams(
            in_mantissa_bits=m_in,
            in_exponent_mask=(1 << src.exponent_bits) - 1,
            in_bias=src.bias,
            in_bits=src.bits,
            in_emin=src.emin,
            # subnormal inputs need their true exponent when the target reaches below them
            true_exponent=int(full or fmt.emin < src.emin),
            daz=int(not subnormals),
            mantissa_bits=m_t,
            emin=fmt.emin,
            emax=fmt.emax,
            max_code=fmt.max_code,
            shift_cap=min(m_in + 2, lanes - 1),
            sign_bit=fmt.sign_bit,
            mode_rne=int(mode == "rne"),
            mode_rna=int(mode == "rna"),
            mode_rup=int(mode == "rup"),
            mode_rdown=int(mode == "rdown"),
            mode_rodd=int(mode == "rodd"),
            mode_stochastic=int(mode == "stochastic"),
            overflow_to_max=int(saturate or mode in ("rtz", "rodd") or not fmt.has_nan),
            overflow_mag=ovf_mag,
            inf_mag=inf_mag,
            nan_base=nan_base,
            payload_mask=pmask,
            payload_shr=max(m_in - m_t, 0),
            payload_shl=max(m_t - m_in, 0),
            fnuz=int(fmt.encoding == "fnuz"),
            ftz=int(not subnormals),
            random_mask=((1 << random_bits) - 1) << (32 - random_bits),
            quiet_bit=1 << (m_in - 1),
            has_nan=int(sp.has_nan),
            has_inf=int(sp.has_inf and not (saturate and sp.extended)),  # (P3109: inf clamps, invalid)
            key0=0,
            key1=0,
            unsigned=int(not fmt.signed),
            no_zero=int(not fmt.has_zero),
            code_parity=int(fmt.mantissa_bits == 0 and fmt.has_zero),
        )
    )


def _int64_fields(p: EncodeParams) -> EncodeParams:
    """``p`` with every field an int64: a 64-bit code at or above 2^63 (the NaN of a 64-bit fnuz
    format is the sign bit alone) is stored as the int64 with the same bits. The loops read each
    such field through a cast to their unsigned lane type, which restores it; an int above int64's
    range would make the compiled loop's argument a uint64, which numba converts back to an already
    compiled int64 signature, and overflows."""
    return EncodeParams(*(v - (1 << 64) if v >= 1 << 63 else v for v in p))


def _special_into(sp: FloatFormat, own: FloatFormat, what: str, saturate: bool) -> int:
    """Code, in the IEEE format ``own``, of what an inf or NaN becomes in ``sp``, brought back."""
    qnan = own.exponent_mask | (1 << (own.mantissa_bits - 1))
    if what == "nan":
        return qnan if sp.has_nan else 0
    if sp.has_inf:
        return own.inf_code
    if saturate or not sp.has_nan:
        # the wider format's largest value, rounded into own (it may overflow to inf there)
        code, _ = round_rational(Fraction(sp.max_exact), own)
        return code
    return qnan


@functools.lru_cache(maxsize=256)
def decode_params(fmt: FloatFormat, out: FloatFormat, lanes: int) -> DecodeParams:
    """The parameters of "decode codes of ``fmt`` into the IEEE format ``out`` (rne)"."""
    if fmt.encoding == "ieee":
        nan_mode = NAN_IEEE
    elif fmt.encoding == "fnuz" and fmt.signed:
        nan_mode = NAN_FNUZ
    else:
        nan_mode = NAN_FN if fmt.has_nan else NAN_NONE  # an unsigned format's NaN: all ones
    m_a, m_b = fmt.mantissa_bits, out.mantissa_bits
    return DecodeParams(
        mantissa_bits=m_a,
        exponent_mask=(1 << fmt.exponent_bits) - 1,
        bias=fmt.bias + int(not fmt.has_zero),
        sign_bit=fmt.sign_bit,
        emin=fmt.emin,
        nan_mode=nan_mode,
        out_mantissa_bits=m_b,
        out_emin=out.emin,
        out_emax=out.emax,
        out_max_code=out.max_code,
        shift_cap=min(m_a + 2, lanes - 1),
        out_sign_bit=out.bits - 1,
        out_qnan=out.exponent_mask | (1 << (m_b - 1)),
        out_inf=out.exponent_mask,
        payload_mask=(1 << m_a) - 1 if fmt.encoding == "ieee" else 0,
        payload_shr=max(m_a - m_b, 0),
        payload_shl=max(m_b - m_a, 0),
        inf_mag=fmt.inf_code if fmt.has_inf and fmt.encoding != "ieee" else 0,
        no_zero=int(not fmt.has_zero),
    )
