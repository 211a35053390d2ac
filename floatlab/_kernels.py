"""Compiled element loops behind encode_array, round_array and decode_array (private).

The scalar reference in :mod:`floatlab.rounding` is the specification; these loops must
give the same bits. They work on integer bit patterns only: the input is viewed as
unsigned integers (float64 as uint64, float32 as uint32, float16 and bfloat16 as uint16),
and every format, input or target, enters as runtime integers packed in a tuple. So one
compiled loop serves every format and rounding mode, and ``cache=True`` keeps it across
runs (numba honours ``NUMBA_CACHE_DIR``).

Arithmetic runs in "lanes": uint32 when the input and the codes fit in 32 bits (AVX-512
then holds 16 elements per register), uint64 otherwise. numba widens every integer
operation to 64 bits, so the loops spell their operations through small intrinsics
(:func:`_u`, :func:`_s`, :func:`_shl`, :func:`_shr`, :func:`_clz`) that keep the lane width.

numba is imported on first use only (``import floatlab`` must stay light): the element
functions below are plain Python until :func:`_compile` wraps them.

>>> import numpy as np, floatlab as fl
>>> decode_codes(np.array([0x3C00, 0x7BFF, 0xFC00], np.uint16), fl.FP16).tolist()
[1.0, 65504.0, -inf]
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import numpy as np

from floatlab.formats import FP64, FloatFormat

__all__ = [
    "DecodeParams",
    "EncodeParams",
    "code_dtype",
    "decode_codes",
    "decode_params",
    "encode_params",
    "run_decode",
    "run_encode",
    "run_full",
    "run_general",
    "run_mx",
    "run_round",
]

# Names bound to numba objects by _compile(); plain placeholders until then.
prange: Any = range
_u: Any = None
_s: Any = None
_shl: Any = None
_shr: Any = None
_clz: Any = None
_core: Any = None
_encode_one: Any = None
_decode_one: Any = None
_random32: Any = None
_mix32: Any = None
_half: Any = None
_unhalf: Any = None
_flags_one: Any = None
_bf16: Any = None
_prod_err: Any = None
_step: Any = None

_lock = threading.Lock()
_compiled: dict[str, Any] = {}

EncodeParams = tuple[int, ...]  # 34 integers, unpacked by name in _encode_one_py
DecodeParams = tuple[int, ...]  # 17 integers, unpacked by name in _decode_one_py
_P_KEY0 = 32  # where the stochastic key starts in EncodeParams
_D_SIGN_BIT = 3  # where the code's sign-bit position sits in DecodeParams


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


# ---- parameters: everything a loop needs to know about the formats, as integers -------------
def encode_params(
    src: FloatFormat,
    fmt: FloatFormat,
    mode: str,
    *,
    saturate: bool,
    subnormals: bool,
    random_bits: int,
    lanes: int,
    full: bool = False,
    key: tuple[int, int] = (0, 0),
    specials_from: FloatFormat | None = None,
) -> EncodeParams:
    """Integers describing "round values of the IEEE format ``src`` into ``fmt``".

    ``full`` asks for the loop that counts flags (it needs the true exponent of every
    subnormal input). ``specials_from`` (default ``fmt``) decides what infinities and NaNs
    become: the pass-through of round_array rounds into ``src`` itself with the specials
    of the wider format. ``key`` is the stochastic-rounding key (two uint32).

    >>> import floatlab as fl
    >>> p = encode_params(fl.FP32, fl.FP16, "rne", saturate=False, subnormals=True, random_bits=32, lanes=32)
    >>> len(p), p[7]  # 34 integers; the eighth is the target's mantissa width
    (34, 10)
    """
    # the format-dependent part is cached: deriving it costs more than rounding a small array
    base = _encode_params_base(
        src, fmt, mode, bool(saturate), bool(subnormals), int(random_bits), lanes, bool(full), specials_from
    )
    return (*base, key[0] & 0xFFFFFFFF, key[1] & 0xFFFFFFFF)


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
) -> tuple[int, ...]:
    """encode_params without the key (every entry but the last two)."""
    sp = fmt if specials_from is None else specials_from
    m_in, m_t = src.mantissa_bits, fmt.mantissa_bits
    # inf input: the target's inf, or its largest finite value, or its NaN (as round_scalar)
    if specials_from is None:
        if fmt.has_inf:
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
    # the random word's top random_bits bits, in place
    rmask = ((1 << random_bits) - 1) << (32 - random_bits)
    # one flag per mode, so that the per-element choice is branch-free
    return (
        m_in,
        (1 << src.exponent_bits) - 1,
        src.bias,
        src.bits,
        src.emin,
        # subnormal inputs need their true exponent when the target reaches below them
        int(full or fmt.emin < src.emin),
        int(not subnormals),
        m_t,
        fmt.emin,
        fmt.emax,
        fmt.max_code,
        min(m_in + 2, lanes - 1),
        fmt.bits - 1,
        int(mode == "rne"),
        int(mode == "rna"),
        int(mode == "rup"),
        int(mode == "rdown"),
        int(mode == "rodd"),
        int(mode == "stochastic"),
        int(saturate or mode in ("rtz", "rodd") or not fmt.has_nan),
        ovf_mag,
        inf_mag,
        nan_base,
        pmask,
        max(m_in - m_t, 0),
        max(m_t - m_in, 0),
        int(fmt.encoding == "fnuz"),
        int(not subnormals),
        rmask,
        1 << (m_in - 1),
        int(sp.has_nan),
        int(sp.has_inf),
    )


def _special_into(sp: FloatFormat, own: FloatFormat, what: str, saturate: bool) -> int:
    """Code, in the IEEE format ``own``, of what an inf or NaN becomes in ``sp``, brought back."""
    from fractions import Fraction

    from floatlab.rounding import round_rational

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


_NAN_IEEE, _NAN_FN, _NAN_FNUZ, _NAN_NONE = 0, 1, 2, 3


@functools.lru_cache(maxsize=256)
def decode_params(fmt: FloatFormat, out: FloatFormat, lanes: int) -> DecodeParams:
    """Integers describing "decode codes of ``fmt`` into the IEEE format ``out`` (rne)"."""
    if fmt.encoding == "ieee":
        nan_mode = _NAN_IEEE
    elif fmt.encoding == "fnuz":
        nan_mode = _NAN_FNUZ
    else:
        nan_mode = _NAN_FN if fmt.has_nan else _NAN_NONE
    m_a, m_b = fmt.mantissa_bits, out.mantissa_bits
    return (
        m_a,
        (1 << fmt.exponent_bits) - 1,
        fmt.bias,
        fmt.bits - 1,
        fmt.emin,
        nan_mode,
        m_b,
        out.emin,
        out.emax,
        out.max_code,
        min(m_a + 2, lanes - 1),
        out.bits - 1,
        out.exponent_mask | (1 << (m_b - 1)),
        out.exponent_mask,
        (1 << m_a) - 1 if fmt.encoding == "ieee" else 0,
        max(m_a - m_b, 0),
        max(m_b - m_a, 0),
    )


# ---- intrinsics: integer operations that keep the lane width ----------------------------------
def _u_typer(typingctx: Any, v: Any, z: Any) -> Any:
    """Cast ``v`` to the unsigned integer type as wide as ``z``."""
    from numba.core import types

    ut = types.Integer.from_bitwidth(z.bitwidth, signed=False)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        return context.cast(builder, args[0], sig.args[0], ut)

    return ut(v, z), codegen


def _s_typer(typingctx: Any, v: Any, z: Any) -> Any:
    """Cast ``v`` to the signed integer type as wide as ``z``."""
    from numba.core import types

    st = types.Integer.from_bitwidth(z.bitwidth, signed=True)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        return context.cast(builder, args[0], sig.args[0], st)

    return st(v, z), codegen


def _shl_typer(typingctx: Any, a: Any, n: Any) -> Any:
    """a << n in a's width; the callers keep 0 <= n < width (a wider shift is undefined)."""

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        k = context.cast(builder, args[1], sig.args[1], sig.args[0])
        return builder.shl(args[0], k)

    return a(a, n), codegen


def _shr_typer(typingctx: Any, a: Any, n: Any) -> Any:
    """Logical a >> n in a's width; the callers keep 0 <= n < width."""

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        k = context.cast(builder, args[1], sig.args[1], sig.args[0])
        return builder.lshr(args[0], k)

    return a(a, n), codegen


def _half_typer(typingctx: Any, bits: Any) -> Any:
    """fp16 code (as uint16) of the float32 with bit pattern ``bits``: the CPU's own conversion.

    LLVM's ``fptrunc float to half`` is IEEE round-to-nearest-even with subnormals, inf and
    quiet NaNs (payload's top bits kept); on x86 with F16C it is one vector instruction
    (vcvtps2ph) that ignores MXCSR's flush-to-zero. The generic loops must give the same bits:
    a test compares the two on every float32.
    """
    from llvmlite import ir
    from numba.core import types

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        f = builder.bitcast(args[0], ir.FloatType())
        return builder.bitcast(builder.fptrunc(f, ir.HalfType()), ir.IntType(16))

    return types.uint16(bits), codegen


def _unhalf_typer(typingctx: Any, code: Any) -> Any:
    """float32 bit pattern (uint32) of the fp16 code ``code`` (exact: every fp16 is a float32)."""
    from llvmlite import ir
    from numba.core import types

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        h = builder.bitcast(args[0], ir.HalfType())
        return builder.bitcast(builder.fpext(h, ir.FloatType()), ir.IntType(32))

    return types.uint32(code), codegen


def _clz_typer(typingctx: Any, a: Any) -> Any:
    """Count of leading zero bits; the full width for 0 (one AVX-512 instruction, vplzcnt)."""
    from numba.core import cgutils

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        return builder.ctlz(args[0], cgutils.false_bit)  # "false": ctlz(0) is defined

    return a(a), codegen


# ---- the element functions (plain Python until _compile wraps them) ---------------------------
# Conventions: bit patterns and codes are unsigned lane integers (the type of ``z``),
# exponents are signed lane integers, format parameters arrive as int64 from a tuple, and
# every numba operation is cast back to the lane width (numba would widen it to 64 bits).
def _core_py(
    sig: Any, e: Any, sgn: Any, rnd: Any, z: Any, m_in: Any, norm: Any, m_t: Any, emin_t: Any,
    cl: Any, c_rne: Any, c_rna: Any, c_dp: Any, c_dn: Any, c_odd: Any, c_st: Any, rmask: Any,
) -> Any:  # fmt: skip
    """Round sig * 2^(e - m_in), sig < 2^(m_in + 1), to m_t fraction bits at an exponent >= emin_t.

    Returns (code magnitude before overflow handling, its exponent te, inexact, the true
    exponent of the input). ``rnd`` is the 32-bit random word of stochastic rounding.
    """
    one = _u(1, z)
    zs = _s(0, z)
    wm1 = _s(_clz(_u(0, z)) - 1, z)  # lane width - 1 (ctlz(0) is the width; a constant)
    et = e
    if norm != 0:
        # the true exponent of a subnormal input comes from its highest set bit
        et = _s(e - _s(m_in, z) + wm1 - _s(_clz(sig), z), z)
    te = _s(max(et, _s(emin_t, z)), z)
    s = _s(_s(m_in - m_t, z) + te - e, z)
    ls = _s(min(max(_s(-s, z), zs), wm1), z)
    # clamping the right shift at cl >= m_in + 2 keeps "below half, not zero" for any shift
    rs = _s(min(max(s, zs), _s(cl, z)), z)
    kept = _shr(_shl(sig, ls), rs)
    p2 = _shl(one, rs)
    rem = _u(sig & _u(p2 - one, z), z)
    half = _shr(p2, 1)
    inexact = rem != 0
    odd = (kept & one) != 0
    neg = sgn != 0
    # stochastic: floor(rem * 2^32 / 2^s), the remainder as a 32-bit fraction (s is not
    # clamped here: a huge s must give 0); cut to random_bits and added to the random word,
    # it carries out of 32 bits exactly when floor(rem * 2^k / 2^s) + rand >= 2^k
    c32 = _s(32, z)
    frac32 = _u(_shr(_shl(rem, _s(min(max(c32 - s, zs), wm1), z)), _s(min(max(s - c32, zs), wm1), z)), rnd)
    # (the carry of r + q is taken from halves that cannot overflow 32 bits: written as
    # "r + q < r", LLVM makes it an add-with-overflow intrinsic, which does not vectorise)
    rm = _u(rmask, rnd)
    r = _u(rnd & rm, rnd)
    q = _u(frac32 & rm, rnd)
    st_up = _shr(_u(_shr(r, 1) + _shr(q, 1) + (r & q & _u(1, rnd)), rnd), 31) != 0
    up = inexact & (
        ((c_rne != 0) & ((rem > half) | ((rem == half) & odd)))
        | ((c_rna != 0) & (rem >= half))
        | ((c_dp != 0) & ~neg)
        | ((c_dn != 0) & neg)
        | ((c_odd != 0) & ~odd)
        | ((c_st != 0) & st_up)
    )
    # the carry out of kept walks into the exponent field by itself
    mag = _u(_shl(_u(te - _s(emin_t, z), z), m_t) + kept + _u(up, z), z)
    return mag, te, inexact, et


def _encode_one_py(u: Any, z: Any, rnd: Any, p: Any) -> Any:
    """Round the IEEE bit pattern ``u`` (format described by ``p``) to a code of the target."""
    (m_in, emask_in, bias_in, w_in, _emin_in, norm, daz, m_t, emin_t, emax_t, maxc, cl, sb,
     c_rne, c_rna, c_dp, c_dn, c_odd, c_st, sat, ovf_mag, inf_mag, nan_base, pmask, psr, psl,
     fnuz, ftz, rmask, _quiet, _has_nan, _has_inf, _k0, _k1) = p  # fmt: skip
    one = _u(1, z)
    zero = _u(0, z)
    sgn = _u(_shr(u, w_in - 1) & one, z)
    ex = _u(_shr(u, m_in) & _u(emask_in, z), z)
    f = _u(u & _u(_shl(one, m_in) - one, z), z)
    normal = ex != 0
    sig = _u(f | _shl(_u(normal, z), m_in), z)
    if daz != 0 and not normal:
        sig = zero  # denormals-are-zero: a subnormal input counts as a zero of its sign
    e = _s(_s(max(ex, one), z) - _s(bias_in, z), z)
    mag, te, inexact, et = _core(
        sig, e, sgn, rnd, z, m_in, norm, m_t, emin_t, cl, c_rne, c_rna, c_dp, c_dn, c_odd, c_st, rmask
    )
    if sig == 0:
        mag = zero
    # compare the exponent too: for a huge input the shifted code would wrap around
    ovf = (te > _s(emax_t, z)) | (mag > _u(maxc, z))
    neg = sgn != 0
    if ovf:
        toward_zero = (sat != 0) | ((c_dp != 0) & neg) | ((c_dn != 0) & ~neg)
        mag = _u(maxc, z) if toward_zero else _u(ovf_mag, z)
    flushed = (ftz != 0) & (mag != 0) & (mag < _shl(one, m_t))
    if flushed:
        mag = zero
    special = ex == _u(emask_in, z)
    if special:
        if f == 0:
            mag = _u(inf_mag, z)
        else:
            mag = _u(_u(nan_base, z) | _shl(_shr(_u(f & _u(pmask, z), z), psr), psl), z)
    sbit = _shl(sgn, sb)
    if fnuz != 0 and mag == 0:
        sbit = zero  # fnuz has no negative zero
    code = _u(sbit | mag, z)
    return code, sgn, special, f, sig, e, inexact, et, ovf, flushed


def _decode_one_py(c: Any, nan_sgn: Any, z: Any, d: Any, exact: Any = False) -> Any:
    """Bits, in the IEEE format described by ``d``, of the code ``c``.

    With ``exact`` (every value of the code's format is one of the output format) the value
    is re-encoded from its highest set bit; otherwise it is rounded to nearest even, an
    overflow giving inf. A NaN code gives a quiet NaN with sign ``nan_sgn`` and, from an
    IEEE code, the top bits of its payload.
    """
    (m_a, emask_a, bias_a, sb_a, _emin_a, nan_mode, m_b, emin_b, emax_b, maxc_b, cl, sb_b,
     qnan_b, inf_b, pmask, psr, psl) = d  # fmt: skip
    one = _u(1, z)
    zero = _u(0, z)
    zs = _s(0, z)
    sgn = _u(_shr(c, sb_a) & one, z)
    mag_a = _u(c & _u(_shl(one, sb_a) - one, z), z)
    ex = _u(_shr(mag_a, m_a), z)
    f = _u(mag_a & _u(_shl(one, m_a) - one, z), z)
    top = ex == _u(emask_a, z)
    is_nan = (
        ((nan_mode == 0) & top & (f != 0))
        | ((nan_mode == 1) & (mag_a == _u(_shl(one, sb_a) - one, z)))
        | ((nan_mode == 2) & (sgn != 0) & (mag_a == 0))
    )
    is_inf = (nan_mode == 0) & top & (f == 0)
    normal = ex != 0
    sig = _u(f | _shl(_u(normal, z), m_a), z)
    if exact:
        # value = sig * 2^lsb; its top bit gives the exponent in the output format, where
        # it may be normal although the code was subnormal (fp8 -> float32, say)
        wm1 = _s(_clz(zero) - 1, z)
        lsb = _s(_s(max(ex, one), z) - _s(bias_a + m_a, z), z)
        ee = _s(max(_s(lsb + wm1 - _s(_clz(sig), z), z), _s(emin_b, z)), z)
        shift = _s(min(max(_s(lsb + _s(m_b, z) - ee, z), zs), wm1), z)
        mag = _u(_shl(_u(ee - _s(emin_b, z), z), m_b) + _shl(sig, shift), z)
    else:
        e = _s(_s(max(ex, one), z) - _s(bias_a, z), z)
        mag, te, _inexact, _et = _core(
            sig, e, sgn, np.uint32(0), z, m_a, 1, m_b, emin_b, cl, 1, 0, 0, 0, 0, 0, 0
        )
        if (te > _s(emax_b, z)) | (mag > _u(maxc_b, z)):
            mag = _u(inf_b, z)  # beyond the output format: round to nearest overflows to inf
    if sig == 0:
        mag = zero
    if is_inf:
        mag = _u(inf_b, z)
    if is_nan:
        sgn = _u(nan_sgn, z)
        mag = _u(_u(qnan_b, z) | _shl(_shr(_u(f & _u(pmask, z), z), psr), psl), z)
    return _u(_shl(sgn, sb_b) | mag, z)


def _mix32_py(x: Any) -> Any:
    """The "lowbias32" integer hash, as floatlab.rounding._mix32, in uint32 arithmetic."""
    x = _u(x ^ _shr(x, 16), x)
    x = _u(x * _u(0x7FEB352D, x), x)
    x = _u(x ^ _shr(x, 15), x)
    x = _u(x * _u(0x846CA68B, x), x)
    return _u(x ^ _shr(x, 16), x)


def _random32_py(i: Any, k0: Any, k1: Any) -> Any:
    """The 32-bit word whose top bits are random_bits_at(key, i, k) (counter-based, any order)."""
    lo = _u(i, k0)
    hi = _u(i >> 32, k0)
    h = _mix32(_u(lo ^ k0, k0))
    return _mix32(_u(h + _u(hi * _u(0x9E3779B9, k0), k0) + k1, k0))


# ---- the loops ---------------------------------------------------------------------------------
def _encode_kernel_py(x: Any, out: Any, z: Any, p: Any) -> None:
    """Deterministic modes: codes of x (bits) into out."""
    for i in prange(x.size):
        out[i] = _encode_one(_u(x[i], z), z, np.uint32(0), p)[0]


def _half_encode_kernel_py(x: Any, out: Any) -> None:
    """float32 bits to fp16 codes, round to nearest even (the hardware conversion)."""
    for i in prange(x.size):
        out[i] = _half(x[i])


def _half_round_kernel_py(x: Any, out: Any) -> None:
    """float32 bits rounded to fp16 and back, round to nearest even (the hardware conversion)."""
    for i in prange(x.size):
        out[i] = _unhalf(_half(x[i]))


def _bf16_py(u: Any) -> Any:
    """bfloat16 code of the float32 with bit pattern ``u``, round to nearest even, in integer
    arithmetic: bfloat16 is the top half of a float32, so adding 0x7FFF plus the kept half's
    lowest bit and dropping the low half rounds to nearest even, subnormals and the overflow to
    inf included; a NaN keeps its sign and top payload bits and is made quiet."""
    z = np.uint32(0)
    if (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000):
        return np.uint16(_shr(u, np.uint32(16)) | np.uint32(0x40))
    return np.uint16(
        _shr(_u(u + np.uint32(0x7FFF) + (_shr(u, np.uint32(16)) & np.uint32(1)), z), np.uint32(16))
    )


def _bf16_encode_kernel_py(x: Any, out: Any) -> None:
    """float32 bits to bfloat16 codes, round to nearest even (integer arithmetic)."""
    for i in prange(x.size):
        out[i] = _bf16(x[i])


def _bf16_round_kernel_py(x: Any, out: Any) -> None:
    """float32 bits rounded to bfloat16 and back, round to nearest even (integer arithmetic)."""
    for i in prange(x.size):
        out[i] = np.uint32(_bf16(x[i])) << np.uint32(16)


def _round_kernel_py(x: Any, out: Any, z: Any, p: Any, d: Any) -> None:
    """Deterministic modes: x (bits) rounded to the target and converted back to x's format."""
    for i in prange(x.size):
        r = _encode_one(_u(x[i], z), z, np.uint32(0), p)
        out[i] = _decode_one(r[0], r[1], z, d, True)


def _flags_one_py(xi: Any, i: Any, z: Any, p: Any) -> Any:
    """Element ``i`` (bits ``xi``) of the flag-counting loops, any mode: (code, sign, flags) with
    flags 1 inexact, 2 underflow, 4 overflow, 8 invalid (the CPU and GPU loops share it)."""
    (m_in, _emask_in, _bias_in, _w_in, _emin_in, norm, _daz, m_t, emin_t, _emax_t, _maxc, cl, _sb,
     c_rne, c_rna, c_dp, c_dn, c_odd, c_st, _sat, _ovf_mag, _inf_mag, _nan_base, _pmask, _psr, _psl,
     _fnuz, _ftz, rmask, quiet_in, has_nan, has_inf, k0, k1) = p  # fmt: skip
    key0 = _u(k0, np.uint32(0))
    key1 = _u(k1, np.uint32(0))
    st_mask = _u(0xFFFFFFFF if c_st != 0 else 0, np.uint32(0))
    rnd = _u(_random32(i, key0, key1) & st_mask, key0)
    code, sgn, special, f, sig, e, inexact, et, ovf, flushed = _encode_one(_u(xi, z), z, rnd, p)
    invalid = special & (
        ((f != 0) & (((f & _u(quiet_in, z)) == 0) | (has_nan == 0))) | ((f == 0) & (has_inf == 0))
    )
    finite = (not special) & (sig != 0)
    tiny = False
    if inexact & (et < _s(emin_t, z)):
        # tininess after rounding: would the result, with an unbounded exponent range,
        # still be below 2^emin? Only an input one binade below can round up out of it.
        if et < _s(emin_t - 1, z):
            tiny = True
        else:
            unbounded = _core(
                sig, e, sgn, rnd, z, m_in, norm, m_t, et, cl, c_rne, c_rna, c_dp, c_dn, c_odd, c_st, rmask
            )[0]
            tiny = unbounded < _shl(_u(1, z), m_t + 1)
    flags = 0
    if finite & (inexact | ovf | flushed):
        flags |= 1
    if finite & ((inexact & tiny) | flushed):
        flags |= 2
    if finite & ovf:
        flags |= 4
    if invalid:
        flags |= 8
    return code, sgn, flags


def _full_kernel_py(x: Any, out: Any, z: Any, p: Any, d: Any, to_input: bool) -> Any:
    """Every mode, stochastic included, with the IEEE flags counted; out has the lane type."""
    n_inexact = 0
    n_underflow = 0
    n_overflow = 0
    n_invalid = 0
    for i in prange(x.size):
        code, sgn, flags = _flags_one(x[i], i, z, p)
        n_inexact += flags & 1
        n_underflow += (flags >> 1) & 1
        n_overflow += (flags >> 2) & 1
        n_invalid += flags >> 3
        if to_input:
            out[i] = _decode_one(code, sgn, z, d, True)
        else:
            out[i] = code
    return n_inexact, n_underflow, n_overflow, n_invalid


def _general_kernel_py(x: Any, out: Any, z: Any, p: Any, d: Any, to_input: bool) -> None:
    """Any mode (stochastic above all) without flags: codes, or values back in x's format.

    out has the lane type; the random word is drawn for every mode and used by stochastic only.
    """
    key0 = _u(p[_P_KEY0], np.uint32(0))
    key1 = _u(p[_P_KEY0 + 1], np.uint32(0))
    for i in prange(x.size):
        r = _encode_one(_u(x[i], z), z, _random32(i, key0, key1), p)
        out[i] = _decode_one(r[0], r[1], z, d, True) if to_input else r[0]


_P_EMIN_T, _P_EMAX_T = 8, 9  # where the target's exponent range sits in EncodeParams
_tuple_setitem: Any = None


def _mx_kernel_py(
    x: Any, row: Any, k: Any, emax_e: Any, codes: Any, scales: Any, table: Any, values: Any, z: Any, p: Any
) -> Any:
    """MX quantization of float64 bit patterns ``x``, rows of ``row`` values cut into blocks of
    ``k``: the E8M0 code of each block into ``scales``, the element codes into ``codes`` and,
    when ``values`` is not empty, element value times block scale into ``values``.

    A block's value ``v / 2^s`` is never formed: rounding ``v`` into the element format with its
    exponent range shifted by ``s`` gives the same code, exactly, whatever the magnitude (the
    target's emin and emax are runtime parameters). Returns the counts (nonzero, flushed,
    subnormal, inexact, overflow) over the blocks with a finite scale.
    """
    per_row = (row + k - 1) // k
    nb = scales.size
    want_values = values.size > 0
    mag_mask = _u(0x7FFFFFFFFFFFFFFF, z)
    n_nonzero = 0
    n_flushed = 0
    n_subnormal = 0
    n_inexact = 0
    n_overflow = 0
    m_t = p[7]
    stochastic = p[18] != 0
    key0 = _u(p[_P_KEY0], np.uint32(0))
    key1 = _u(p[_P_KEY0 + 1], np.uint32(0))
    code_mag = _u((1 << p[12]) - 1, z)  # the code without its sign bit
    for b in prange(nb):
        r = b // per_row
        j0 = r * row + (b - r * per_row) * k
        j1 = min(j0 + k, r * row + row)
        amax = _u(0, z)
        special = False
        for j in range(j0, j1):
            m = _u(x[j] & mag_mask, z)
            special |= _shr(m, 52) == _u(0x7FF, z)
            amax = max(amax, m)
        ex = _s(_shr(amax, 52), z)
        # floor(log2(amax)) from the bit fields: the exponent, or a subnormal's highest set bit
        top = _s(ex - 1023, z) if ex != 0 else _s(_s(63, z) - _s(_clz(amax), z) - 1074, z)
        shared = -127 if amax == 0 else max(top - emax_e, -127)
        if special or shared > 127:
            scales[b] = 255
            for j in range(j0, j1):
                codes[j] = 0
                if want_values:
                    values[j] = np.nan
            continue
        scales[b] = shared + 127
        q = _tuple_setitem(
            _tuple_setitem(p, _P_EMIN_T, p[_P_EMIN_T] + shared), _P_EMAX_T, p[_P_EMAX_T] + shared
        )
        scale = np.ldexp(1.0, shared)
        for j in range(j0, j1):
            rnd = _random32(j, key0, key1) if stochastic else np.uint32(0)
            res = _encode_one(_u(x[j], z), z, rnd, q)
            code = res[0]
            codes[j] = code
            nonzero = _u(x[j] & mag_mask, z) != 0
            mag = _u(code & code_mag, z)
            n_nonzero += nonzero
            n_flushed += nonzero & (mag == 0)
            n_subnormal += (mag != 0) & (_shr(mag, m_t) == 0)
            n_inexact += res[6]
            n_overflow += res[8]
            if want_values:
                values[j] = table[code] * scale
    return n_nonzero, n_flushed, n_subnormal, n_inexact, n_overflow


def _decode_kernel_py(c: Any, out: Any, z: Any, d: Any) -> None:
    """Codes c into out (the bits of the output format, usually float64 as uint64)."""
    for i in prange(c.size):
        v = _u(c[i], z)
        out[i] = _decode_one(v, _u(_shr(v, d[_D_SIGN_BIT]) & _u(1, z), z), z, d, False)


def _gather_kernel_py(c: Any, table: Any, out: Any) -> None:
    """out[i] = table[c[i]]: decoding 8- and 16-bit codes through a table of all their values."""
    for i in prange(c.size):
        out[i] = table[c[i]]


def _add_count_kernel_py(w: Any, d: Any, out: Any) -> Any:
    """out = w + d in w's dtype (the hardware's rounding), with the counts of non-zero d, of
    elements whose value changed and of non-finite results: one pass where numpy needs four."""
    intended = 0
    changed = 0
    nonfinite = 0
    for i in range(w.size):
        s = w[i] + d[i]
        out[i] = s
        intended += 1 if d[i] != 0 else 0
        changed += 1 if s != w[i] else 0
        nonfinite += 0 if np.isfinite(s) else 1
    return intended, changed, nonfinite


def _odd_sum_kernel_py(x: Any, y: Any, out: Any, out_bits: Any, rdown: Any) -> None:
    """out = x + y rounded to odd at 53 bits (float64; ``out_bits`` is the same memory as uint64):
    TwoSum gives the float64 sum s and its exact error e; an inexact s with an even last bit
    steps one ulp toward e (adjacent doubles alternate in the last bit, across binades too).
    With ``rdown`` an exact zero sum is -0 unless both operands are +0 (IEEE 754 6.3)."""
    for i in prange(x.size):
        a = x[i]
        b = y[i]
        s = a + b
        bv = s - a
        av = s - bv
        e = (a - av) + (b - bv)
        out[i] = s
        if np.isfinite(s) and e != 0 and (out_bits[i] & np.uint64(1)) == 0:
            # e != 0 means s != 0; toward e is away from zero when e and s share a sign
            if (e > 0) == (s > 0):
                out_bits[i] += np.uint64(1)
            else:
                out_bits[i] -= np.uint64(1)
        if rdown and s == 0 and not (a == 0 and b == 0 and not np.signbit(a) and not np.signbit(b)):
            out[i] = -0.0


def _prod_err_py(a: Any, b: Any, p: Any) -> Any:
    """e with a * b = p + e exactly, p = fl(a * b) (Dekker's product with Veltkamp's splitting:
    no fused multiply-add needed; exact while nothing overflows or underflows)."""
    c = 134217729.0 * a  # 2^27 + 1 splits a double into two 26-bit halves
    ah = c - (c - a)
    al = a - ah
    c = 134217729.0 * b
    bh = c - (c - b)
    bl = b - bh
    return ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _odd_div_kernel_py(x: Any, y: Any, out: Any, out_bits: Any) -> None:
    """out = x / y rounded to odd at 53 bits (``out_bits`` is out's memory as uint64). The
    remainder x - q*y = (x - h) - e with q*y = h + e exactly; x - h is exact (Sterbenz), so the
    remainder's sign, times y's, says on which side of q the exact quotient lies."""
    for i in prange(x.size):
        a = x[i]
        b = y[i]
        q = a / b
        out[i] = q
        if np.isfinite(q) and q != 0 and (out_bits[i] & np.uint64(1)) == 0:
            h = q * b
            rest = (a - h) - _prod_err(q, b, h)
            if rest != 0:
                above = (rest > 0) == (b > 0)  # the exact quotient lies above q
                if above == (q > 0):
                    out_bits[i] += np.uint64(1)  # one ulp away from zero
                else:
                    out_bits[i] -= np.uint64(1)


def _odd_sqrt_kernel_py(x: Any, out: Any, out_bits: Any) -> None:
    """out = sqrt(x) rounded to odd at 53 bits: sqrt(x) > r exactly when x > r*r = h + e."""
    for i in prange(x.size):
        a = x[i]
        r = np.sqrt(a)
        out[i] = r
        if np.isfinite(r) and r > 0 and (out_bits[i] & np.uint64(1)) == 0:
            h = r * r
            rest = (a - h) - _prod_err(r, r, h)
            if rest > 0:
                out_bits[i] += np.uint64(1)
            elif rest < 0:
                out_bits[i] -= np.uint64(1)


def _step_py(x: Any, y: Any, i: Any, key0: Any, key1: Any, stoch: Any, rdown: Any, p: Any, d: Any,
             fbuf: Any, ubuf: Any) -> Any:  # fmt: skip
    """One simulated addition x + y (float64 values of the target), rounded once into the target
    described by ``p`` and decoded back by ``d``; ``i`` numbers the random word of stochastic
    rounding. ``fbuf`` and ``ubuf`` are one float64 seen as a float and as bits."""
    s = x + y
    if s == 0.0:
        # IEEE 754 6.3: two zeros of one sign keep it; any other exact zero is +0 (-0 toward -inf)
        same_zeros = x == 0.0 and y == 0.0 and np.signbit(x) == np.signbit(y)
        s = x if same_zeros else (-0.0 if rdown else 0.0)
    elif np.isfinite(s):
        bv = s - x
        e = (x - (s - bv)) + (y - bv)
        fbuf[0] = s
        # round to odd: an inexact float64 sum becomes the odd one of its two neighbours
        if e != 0.0 and (ubuf[0] & np.uint64(1)) == 0:
            s = np.nextafter(s, np.inf if e > 0.0 else -np.inf)
    fbuf[0] = s
    rnd = _random32(i, key0, key1) if stoch else np.uint32(0)
    r = _encode_one(ubuf[0], np.uint64(0), rnd, p)
    ubuf[0] = _decode_one(r[0], r[1], np.uint64(0), d)
    return fbuf[0]


def _sequential_kernel_py(
    t: Any, run: Any, key0: Any, key1: Any, stoch: Any, rdown: Any, p: Any, d: Any
) -> None:
    """Running sums of ``t`` into ``run``, each addition rounded once (step i uses random word i)."""
    fbuf = np.empty(1, np.float64)
    ubuf = fbuf.view(np.uint64)
    s = t[0]
    run[0] = s
    for i in range(1, t.size):
        s = _step(s, t[i], i, key0, key1, stoch, rdown, p, d, fbuf, ubuf)
        run[i] = s


def _kahan_kernel_py(
    t: Any, run: Any, comp: Any, key0: Any, key1: Any, stoch: Any, rdown: Any, p: Any, d: Any
) -> None:
    """Kahan's compensated running sums of ``t`` (into ``run``) and compensations (into ``comp``),
    every operation rounded once; rounding 4i + j of term i uses random word 4i + j."""
    fbuf = np.empty(1, np.float64)
    ubuf = fbuf.view(np.uint64)
    s = t[0]
    c = 0.0
    run[0] = s
    comp[0] = c
    for i in range(1, t.size):
        j = 4 * i  # four roundings per term, each with its own random word
        y = _step(t[i], -c, j, key0, key1, stoch, rdown, p, d, fbuf, ubuf)  # the term less the lost part
        nxt = _step(s, y, j + 1, key0, key1, stoch, rdown, p, d, fbuf, ubuf)
        hi = _step(nxt, -s, j + 2, key0, key1, stoch, rdown, p, d, fbuf, ubuf)
        c = _step(hi, -y, j + 3, key0, key1, stoch, rdown, p, d, fbuf, ubuf)  # what this addition lost
        s = nxt
        run[i] = s
        comp[i] = c


def _compile() -> dict[str, Any]:
    """Import numba and wrap the element functions and loops (once per process)."""
    with _lock:
        if _compiled:
            return _compiled
        import numba
        from numba.extending import intrinsic

        g = globals()
        g["prange"] = numba.prange
        from numba.cpython.unsafe.tuple import tuple_setitem

        g["_tuple_setitem"] = tuple_setitem
        for name in ("_u", "_s", "_shl", "_shr", "_clz", "_half", "_unhalf"):
            g[name] = intrinsic(g[name + "_typer"])
        # forceinline marks them LLVM "alwaysinline": left to its cost model LLVM keeps the big
        # element functions as calls, and a loop with a call does not vectorise
        helper = numba.njit(nogil=True, error_model="numpy", forceinline=True)
        for name in (
            "_core",
            "_encode_one",
            "_decode_one",
            "_mix32",
            "_random32",
            "_flags_one",
            "_bf16",
            "_prod_err",
            "_step",
        ):
            g[name] = helper(g[name + "_py"])
        loop = numba.njit(parallel=True, cache=True, nogil=True, error_model="numpy")
        for name in (
            "encode",
            "round",
            "full",
            "general",
            "decode",
            "gather",
            "odd_sum",
            "odd_div",
            "odd_sqrt",
            "mx",
        ):
            _compiled[name] = loop(g[f"_{name}_kernel_py"])
        # the hardware conversion runs at memory speed on one core: no threads to wake
        serial = numba.njit(cache=True, nogil=True, error_model="numpy")
        for name in (
            "half_encode",
            "half_round",
            "bf16_encode",
            "bf16_round",
            "add_count",
            "sequential",
            "kahan",
        ):
            _compiled[name] = serial(g[f"_{name}_kernel_py"])
        return _compiled


# ---- entry points ------------------------------------------------------------------------------
#: arrays smaller than this run on one thread. Waking the other cores costs more than they save
#: on a small array, and worse, between the GEMMs of a training step the BLAS threads and the
#: loop threads (OpenMP's spin-wait) then take turns on the same cores, which costs milliseconds.
SERIAL_BELOW = 1 << 18


def _launch(name: str, n: int, *args: Any) -> Any:
    """Run compiled loop ``name`` over ``n`` elements: on one thread when ``n`` is small."""
    loop = _compiled.get(name) or _compile()[name]
    if n >= SERIAL_BELOW:
        return loop(*args)
    import numba

    threads = numba.get_num_threads()
    if threads == 1:
        return loop(*args)
    numba.set_num_threads(1)  # per calling thread, so concurrent callers do not interfere
    try:
        return loop(*args)
    finally:
        numba.set_num_threads(threads)


def _zero(lanes: int) -> Any:
    """The zero whose type tells a loop its lane width."""
    return np.uint32(0) if lanes == 32 else np.uint64(0)


def run_encode(bits: np.ndarray, out_dtype: np.dtype[Any], lanes: int, p: EncodeParams) -> np.ndarray:
    """Codes of the 1-d contiguous bit patterns ``bits`` (deterministic modes only)."""
    out = np.empty(bits.size, out_dtype)
    _launch("encode", bits.size, bits, out, _zero(lanes), p)
    return out


def half_hardware() -> bool:
    """True when this CPU converts float32 to fp16 in hardware (x86 F16C, or AArch64), so that
    the float32 -> fp16 round-to-nearest-even loops can use the CPU's own conversion."""
    global _half_hw
    if _half_hw is None:
        import platform

        from llvmlite import binding

        machine = platform.machine().lower()
        features = binding.get_host_cpu_features() if machine in ("x86_64", "amd64") else None
        _half_hw = machine in ("aarch64", "arm64") or bool(features and features.get("f16c"))
    return _half_hw


_half_hw: bool | None = None


def run_half(bits: np.ndarray, back: bool) -> np.ndarray:
    """float32 bit patterns (uint32) to fp16 codes, or with ``back`` to float32 bit patterns of
    the rounded values: round to nearest even, subnormals kept, overflow to inf, no flags.
    Call only where :func:`half_hardware` is true."""
    out = np.empty(bits.size, np.uint32 if back else np.uint16)
    loop = _compiled.get("half_round") or _compile()["half_round"]
    (loop if back else _compiled["half_encode"])(bits, out)
    return out


def run_bf16(bits: np.ndarray, back: bool) -> np.ndarray:
    """float32 bit patterns (uint32) to bfloat16 codes, or with ``back`` to float32 bit patterns
    of the rounded values: round to nearest even, subnormals kept, overflow to inf, no flags.

    >>> x = np.array([1 + 2**-8, 1 + 3 * 2**-8, 3.4e38, -np.inf], np.float32)
    >>> run_bf16(x.view(np.uint32), True).view(np.float32).tolist()   # ties go to even
    [1.0, 1.015625, inf, -inf]
    """
    out = np.empty(bits.size, np.uint32 if back else np.uint16)
    loop = _compiled.get("bf16_round") or _compile()["bf16_round"]
    (loop if back else _compiled["bf16_encode"])(bits, out)
    return out


def odd_sum(x: np.ndarray, y: np.ndarray, rdown: bool) -> np.ndarray:
    """x + y (1-d contiguous float64 arrays of one size) rounded to odd at 53 bits, with IEEE 754's
    sign for an exact zero sum (-0 under ``rdown``, round toward -inf). Rounding this to p <= 51
    bits in any mode equals one rounding of the exact sum (see :mod:`floatlab.simulate`).

    >>> odd_sum(np.array([1.0, 1.0, 1.0]), np.array([2.0**-60, -(2.0**-60), -1.0]), True).tolist()
    [1.0000000000000002, 0.9999999999999999, -0.0]
    """
    out = np.empty_like(x)
    _launch("odd_sum", x.size, x, y, out, out.view(np.uint64), bool(rdown))
    return out


def odd_div(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """x / y (1-d contiguous float64 arrays of one size) rounded to odd at 53 bits.

    >>> odd_div(np.array([1.0, 6.0]), np.array([10.0, 3.0])).tolist()  # the double nearest 0.1 is even
    [0.09999999999999999, 2.0]
    """
    out = np.empty_like(x)
    _launch("odd_div", x.size, x, y, out, out.view(np.uint64))
    return out


def odd_sqrt(x: np.ndarray) -> np.ndarray:
    """The square roots of ``x`` (1-d contiguous float64) rounded to odd at 53 bits.

    >>> odd_sqrt(np.array([3.0, 4.0, -0.0, -1.0])).tolist()
    [1.7320508075688774, 2.0, -0.0, nan]
    """
    out = np.empty_like(x)
    _launch("odd_sqrt", x.size, x, out, out.view(np.uint64))
    return out


def add_count(w: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, int, int, int]:
    """``(w + d, count of d != 0, count of w + d != w, count of non-finite w + d)`` for
    float32/float64 arrays of one shape and dtype, in one compiled pass (the trainer's update
    with its swallowed-update counts and its check that the new weights are finite).

    >>> w = np.array([1.0, 1.0, 2.0, 3e38], np.float32)
    >>> new, intended, changed, nonfinite = add_count(w, np.array([1e-8, 0.5, 0.0, 3e38], np.float32))
    >>> new.tolist(), intended, changed, nonfinite   # 1e-8 is below half an ulp of 1: swallowed
    ([1.0, 1.5, 2.0, inf], 3, 2, 1)
    """
    wc, dc = np.ascontiguousarray(w).reshape(-1), np.ascontiguousarray(d, dtype=w.dtype).reshape(-1)
    out = np.empty_like(wc)
    loop = _compiled.get("add_count") or _compile()["add_count"]
    intended, changed, nonfinite = loop(wc, dc, out)
    return out.reshape(w.shape), int(intended), int(changed), int(nonfinite)


def run_round(bits: np.ndarray, lanes: int, p: EncodeParams, d: DecodeParams) -> np.ndarray:
    """Bit patterns of ``bits`` rounded to the target and back (deterministic modes only)."""
    out = np.empty_like(bits)
    _launch("round", bits.size, bits, out, _zero(lanes), p, d)
    return out


def run_full(
    bits: np.ndarray, lanes: int, p: EncodeParams, d: DecodeParams, to_input: bool
) -> tuple[np.ndarray, tuple[int, int, int, int]]:
    """Any mode, with the flag counts (inexact, underflow, overflow, invalid).

    The result has the lane type (uint32 or uint64): codes, or with ``to_input`` the bit
    patterns rounded back into the input's format.
    """
    z = _zero(lanes)
    out = np.empty(bits.size, z.dtype)
    counts = _launch("full", bits.size, bits, out, z, p, d, to_input)
    return out, (int(counts[0]), int(counts[1]), int(counts[2]), int(counts[3]))


def run_general(bits: np.ndarray, lanes: int, p: EncodeParams, d: DecodeParams, to_input: bool) -> np.ndarray:
    """Any mode without flag counts (stochastic rounding, 16/32-bit input to 64-bit codes).

    The result has the lane type, as for run_full.
    """
    z = _zero(lanes)
    out = np.empty(bits.size, z.dtype)
    _launch("general", bits.size, bits, out, z, p, d, to_input)
    return out


def run_mx(
    bits: np.ndarray, row: int, block: int, emax: int, p: EncodeParams, table: np.ndarray, values: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, tuple[int, ...]]:
    """MX quantization of the float64 bit patterns ``bits`` (rows of ``row`` values, blocks of
    ``block``) into the element format of ``p`` (built for float64 input, 64 lanes):
    element codes, E8M0 scale codes, the dequantized values when ``values`` asks for them (from
    ``table``, every element value as float64) and the counts of :func:`_mx_kernel_py`."""
    rows = bits.size // row if row else 0
    scales = np.empty(rows * -(-row // block), np.uint8)
    codes = np.empty(bits.size, np.uint8)
    out = np.empty(bits.size if values else 0, np.float64)
    counts = _launch("mx", bits.size, bits, row, block, emax, codes, scales, table, out, np.uint64(0), p)
    return codes, scales, out if values else None, tuple(int(c) for c in counts)


def run_running_sums(
    t: np.ndarray,
    kahan: bool,
    key: tuple[int, int],
    stochastic: bool,
    rdown: bool,
    p: EncodeParams,
    d: DecodeParams,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Running sums of the float64 terms ``t`` (and Kahan's compensations), one rounding a step."""
    loops = _compiled if "sequential" in _compiled else _compile()
    args = (np.uint32(key[0]), np.uint32(key[1]), stochastic, rdown, p, d)
    run = np.empty_like(t)
    if not kahan:
        loops["sequential"](t, run, *args)
        return run, None
    comp = np.empty_like(t)
    loops["kahan"](t, run, comp, *args)
    return run, comp


def run_decode(codes: np.ndarray, d: DecodeParams, lanes: int = 64) -> np.ndarray:
    """Output-format bit patterns (uint64 for 64 lanes) of the 1-d contiguous ``codes``."""
    z = _zero(lanes)
    out = np.empty(codes.size, z.dtype)
    _launch("decode", codes.size, codes, out, z, d)
    return out


_tables: dict[tuple[FloatFormat, int], np.ndarray] = {}


def _decode_table(fmt: FloatFormat, width: int) -> np.ndarray:
    """float64 value of every ``width``-bit code of ``fmt`` (bits above fmt.bits are ignored)."""
    key = (fmt, width)
    table = _tables.get(key)
    if table is None:
        codes = np.arange(1 << width, dtype=np.uint64)
        table = run_decode(codes, decode_params(fmt, FP64, 64)).view(np.float64)
        with _lock:
            _tables[key] = table
    return table


def decode_codes(codes: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    """float64 values of the codes of ``fmt`` (any shape; bits above ``fmt.bits`` are ignored).

    Exact whenever fmt's values are float64 values (every format with at most 11 exponent
    and 52 fraction bits); wider formats round to nearest even (overflowing to inf). A NaN
    code gives a quiet float64 NaN with the code's sign and, for IEEE formats, the top
    bits of its payload. Codes of up to 16 bits are looked up in a table of all their
    values, built on first use.

    >>> import floatlab as fl
    >>> decode_codes(np.array([[0x01, 0x7E], [0x80, 0xFF]], np.uint8), fl.get_format("e4m3fn")).tolist()
    [[0.001953125, 448.0], [-0.0, nan]]
    """
    a = np.asarray(codes)
    if a.dtype.kind not in "ui":
        raise ValueError(f"codes of dtype {a.dtype}: expected unsigned integer codes")
    cdt = code_dtype(fmt)
    c = np.ascontiguousarray(a.astype(cdt, copy=False)).reshape(-1)
    if cdt.itemsize <= 2:
        out = np.empty(c.size, np.float64)
        _launch("gather", c.size, c, _decode_table(fmt, 8 * cdt.itemsize), out)
        return out.reshape(a.shape)
    bits = run_decode(c, decode_params(fmt, FP64, 64))
    return bits.view(np.float64).reshape(a.shape)
