"""The compiled rounding loops, as numba source (private to :mod:`floatlab.rounding`).

The scalar reference in :mod:`floatlab.rounding.spec` is the specification; these loops must
give the same bits. They work on integer bit patterns only: the input is viewed as unsigned
integers (float64 as uint64, float32 as uint32, float16 and bfloat16 as uint16), and every
format, input or target, enters as the named integers of
:class:`~floatlab.rounding.params.EncodeParams` and :class:`~floatlab.rounding.params.DecodeParams`.
So one compiled loop serves every format and rounding mode, and ``cache=True`` keeps it across
runs (numba honours ``NUMBA_CACHE_DIR``).

Arithmetic runs in "lanes": uint32 when the input and the codes fit in 32 bits (AVX-512 then
holds 16 elements per register), uint64 otherwise. numba widens every integer operation to 64
bits, so the loops spell their operations through small intrinsics (:func:`_u`, :func:`_s`,
:func:`_shl`, :func:`_shr`, :func:`_clz`) that keep the lane width.

The element functions (``_core``, ``_encode_one``, ``_decode_one``, ``_random32``,
``_flags_one``) are plain Python until :func:`compile_into` wraps them: for the CPU here, and
for CUDA by :mod:`floatlab.rounding.cuda`, which binds the same functions to device functions.
The loops and the element functions stay in this one file: numba's cache notices a change in
the file of a loop, not in the files of the functions it inlines.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from floatlab.rounding.params import DecodeParams, EncodeParams

# Names bound to numba objects by compile_into(); plain placeholders until then.
prange: Any = range
_u: Any = None
_s: Any = None
_shl: Any = None
_shr: Any = None
_clz: Any = None
_half: Any = None
_unhalf: Any = None
_core: Any = None
_encode_one: Any = None
_decode_one: Any = None
_random32: Any = None
_mix32: Any = None
_flags_one: Any = None
_bf16: Any = None
_step: Any = None
_f32: Any = None
_bits32: Any = None
_tile: Any = None
_e8m0_rule: Any = None

#: the element functions, bound per target (CPU here, CUDA in floatlab.rounding.cuda)
ELEMENT_FUNCTIONS = ("_core", "_encode_one", "_decode_one", "_mix32", "_random32", "_flags_one")
INTRINSICS = ("_u", "_s", "_shl", "_shr", "_clz")
#: the pieces of the block loops (CPU only)
BLOCK_FUNCTIONS = ("_tile", "_e8m0_rule")


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


def _f32_typer(typingctx: Any, bits: Any) -> Any:
    """The float32 whose bit pattern is ``bits`` (a uint32, or the low half of a wider lane)."""
    from llvmlite import ir
    from numba.core import types

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        b = context.cast(builder, args[0], sig.args[0], types.uint32)
        return builder.bitcast(b, ir.FloatType())

    return types.float32(bits), codegen


def _bits32_typer(typingctx: Any, f: Any) -> Any:
    """The bit pattern (uint32) of the float32 ``f``."""
    from llvmlite import ir
    from numba.core import types

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        return builder.bitcast(args[0], ir.IntType(32))

    return types.uint32(types.float32), codegen


def _clz_typer(typingctx: Any, a: Any) -> Any:
    """Count of leading zero bits; the full width for 0 (one AVX-512 instruction, vplzcnt)."""
    from numba.core import cgutils

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        return builder.ctlz(args[0], cgutils.false_bit)  # "false": ctlz(0) is defined

    return a(a), codegen


# ---- the element functions (plain Python until compile_into wraps them) -----------------------
# Conventions: bit patterns and codes are unsigned lane integers (the type of ``z``),
# exponents are signed lane integers, format parameters arrive as int64 fields, and
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


class Rounded(NamedTuple):
    """One element rounded by :func:`_encode_one_py`: the code and what the flag loops need."""

    code: Any  # the target code (sign included)
    sign: Any  # the input's sign bit
    special: Any  # the input is inf or NaN
    fraction: Any  # the input's fraction field
    significand: Any  # the input's significand (0 for a zero, or a subnormal under daz)
    exponent: Any  # the input's exponent (emin for subnormals)
    inexact: Any
    true_exponent: Any  # the exponent of the input's highest set bit (when p.true_exponent)
    overflow: Any
    flushed: Any  # a subnormal result flushed to zero


def _encode_one_py(u: Any, z: Any, rnd: Any, p: Any, shift: Any) -> Any:
    """Round the IEEE bit pattern ``u`` (format described by ``p``) to a code of the target.

    ``shift`` moves the target's exponent range (emin and emax) up by that many binades: MX
    block scaling rounds ``v`` into the element format scaled by the block's 2^shift without
    forming ``v / 2^shift``. It is 0 everywhere else.
    """
    one = _u(1, z)
    zero = _u(0, z)
    m_in = p.in_mantissa_bits
    emin_t = p.emin + shift
    sgn = _u(_shr(u, p.in_bits - 1) & one, z)
    ex = _u(_shr(u, m_in) & _u(p.in_exponent_mask, z), z)
    f = _u(u & _u(_shl(one, m_in) - one, z), z)
    normal = ex != 0
    sig = _u(f | _shl(_u(normal, z), m_in), z)
    if p.daz != 0 and not normal:
        sig = zero  # denormals-are-zero: a subnormal input counts as a zero of its sign
    e = _s(_s(max(ex, one), z) - _s(p.in_bias, z), z)
    mag, te, inexact, et = _core(
        sig, e, sgn, rnd, z, m_in, p.true_exponent, p.mantissa_bits, emin_t, p.shift_cap,
        p.mode_rne, p.mode_rna, p.mode_rup, p.mode_rdown, p.mode_rodd, p.mode_stochastic, p.random_mask,
    )  # fmt: skip
    if sig == 0:
        mag = zero
    # compare the exponent too: for a huge input the shifted code would wrap around
    ovf = (te > _s(p.emax + shift, z)) | (mag > _u(p.max_code, z))
    neg = sgn != 0
    if ovf:
        toward_zero = (p.overflow_to_max != 0) | ((p.mode_rup != 0) & neg) | ((p.mode_rdown != 0) & ~neg)
        mag = _u(p.max_code, z) if toward_zero else _u(p.overflow_mag, z)
    flushed = (p.ftz != 0) & (mag != 0) & (mag < _shl(one, p.mantissa_bits))
    if flushed:
        mag = zero
    special = ex == _u(p.in_exponent_mask, z)
    if special:
        if f == 0:
            mag = _u(p.inf_mag, z)
        else:
            payload = _shl(_shr(_u(f & _u(p.payload_mask, z), z), p.payload_shr), p.payload_shl)
            mag = _u(_u(p.nan_base, z) | payload, z)
    sbit = _shl(sgn, p.sign_bit)
    if p.fnuz != 0 and mag == 0:
        sbit = zero  # fnuz has no negative zero
    code = _u(sbit | mag, z)
    return Rounded(code, sgn, special, f, sig, e, inexact, et, ovf, flushed)


def _decode_one_py(c: Any, nan_sgn: Any, z: Any, d: Any, exact: Any = False) -> Any:
    """Bits, in the IEEE format described by ``d``, of the code ``c``.

    With ``exact`` (every value of the code's format is one of the output format) the value
    is re-encoded from its highest set bit; otherwise it is rounded to nearest even, an
    overflow giving inf. A NaN code gives a quiet NaN with sign ``nan_sgn`` and, from an
    IEEE code, the top bits of its payload.
    """
    one = _u(1, z)
    zero = _u(0, z)
    zs = _s(0, z)
    m_a = d.mantissa_bits
    m_b = d.out_mantissa_bits
    nan_mode = d.nan_mode
    sgn = _u(_shr(c, d.sign_bit) & one, z)
    mag_a = _u(c & _u(_shl(one, d.sign_bit) - one, z), z)
    ex = _u(_shr(mag_a, m_a), z)
    f = _u(mag_a & _u(_shl(one, m_a) - one, z), z)
    top = ex == _u(d.exponent_mask, z)
    is_nan = (
        ((nan_mode == 0) & top & (f != 0))
        | ((nan_mode == 1) & (mag_a == _u(_shl(one, d.sign_bit) - one, z)))
        | ((nan_mode == 2) & (sgn != 0) & (mag_a == 0))
    )
    is_inf = (nan_mode == 0) & top & (f == 0)
    normal = ex != 0
    sig = _u(f | _shl(_u(normal, z), m_a), z)
    if exact:
        # value = sig * 2^lsb; its top bit gives the exponent in the output format, where
        # it may be normal although the code was subnormal (fp8 -> float32, say)
        wm1 = _s(_clz(zero) - 1, z)
        lsb = _s(_s(max(ex, one), z) - _s(d.bias + m_a, z), z)
        ee = _s(max(_s(lsb + wm1 - _s(_clz(sig), z), z), _s(d.out_emin, z)), z)
        shift = _s(min(max(_s(lsb + _s(m_b, z) - ee, z), zs), wm1), z)
        mag = _u(_shl(_u(ee - _s(d.out_emin, z), z), m_b) + _shl(sig, shift), z)
    else:
        e = _s(_s(max(ex, one), z) - _s(d.bias, z), z)
        mag, te, _inexact, _et = _core(
            sig, e, sgn, np.uint32(0), z, m_a, 1, m_b, d.out_emin, d.shift_cap, 1, 0, 0, 0, 0, 0, 0
        )
        if (te > _s(d.out_emax, z)) | (mag > _u(d.out_max_code, z)):
            mag = _u(d.out_inf, z)  # beyond the output format: round to nearest overflows to inf
    if sig == 0:
        mag = zero
    if is_inf:
        mag = _u(d.out_inf, z)
    if is_nan:
        sgn = _u(nan_sgn, z)
        payload = _shl(_shr(_u(f & _u(d.payload_mask, z), z), d.payload_shr), d.payload_shl)
        mag = _u(_u(d.out_qnan, z) | payload, z)
    return _u(_shl(sgn, d.out_sign_bit) | mag, z)


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
def _encode_kernel_py(x: Any, out: Any, z: Any, pt: Any) -> None:
    """Deterministic modes: codes of x (bits) into out."""
    # the parameters come in as plain tuples (numba dispatches those 2 us faster than a NamedTuple)
    p = EncodeParams(*pt)
    for i in prange(x.size):
        out[i] = _encode_one(_u(x[i], z), z, np.uint32(0), p, 0).code


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


def _round_kernel_py(x: Any, out: Any, z: Any, pt: Any, dt: Any) -> None:
    """Deterministic modes: x (bits) rounded to the target and converted back to x's format."""
    p = EncodeParams(*pt)
    d = DecodeParams(*dt)
    for i in prange(x.size):
        r = _encode_one(_u(x[i], z), z, np.uint32(0), p, 0)
        out[i] = _decode_one(r.code, r.sign, z, d, True)


def _flags_one_py(xi: Any, i: Any, z: Any, p: Any) -> Any:
    """Element ``i`` (bits ``xi``) of the flag-counting loops, any mode: (code, sign, flags) with
    flags 1 inexact, 2 underflow, 4 overflow, 8 invalid (the CPU and GPU loops share it)."""
    key0 = _u(p.key0, np.uint32(0))
    key1 = _u(p.key1, np.uint32(0))
    st_mask = _u(0xFFFFFFFF if p.mode_stochastic != 0 else 0, np.uint32(0))
    rnd = _u(_random32(i, key0, key1) & st_mask, key0)
    r = _encode_one(_u(xi, z), z, rnd, p, 0)
    f = r.fraction
    invalid = r.special & (
        ((f != 0) & (((f & _u(p.quiet_bit, z)) == 0) | (p.has_nan == 0))) | ((f == 0) & (p.has_inf == 0))
    )
    finite = (not r.special) & (r.significand != 0)
    et = r.true_exponent
    tiny = False
    if r.inexact & (et < _s(p.emin, z)):
        # tininess after rounding: would the result, with an unbounded exponent range,
        # still be below 2^emin? Only an input one binade below can round up out of it.
        if et < _s(p.emin - 1, z):
            tiny = True
        else:
            unbounded = _core(
                r.significand, r.exponent, r.sign, rnd, z, p.in_mantissa_bits, p.true_exponent,
                p.mantissa_bits, et, p.shift_cap, p.mode_rne, p.mode_rna, p.mode_rup, p.mode_rdown,
                p.mode_rodd, p.mode_stochastic, p.random_mask,
            )[0]  # fmt: skip
            tiny = unbounded < _shl(_u(1, z), p.mantissa_bits + 1)
    flags = 0
    if finite & (r.inexact | r.overflow | r.flushed):
        flags |= 1
    if finite & ((r.inexact & tiny) | r.flushed):
        flags |= 2
    if finite & r.overflow:
        flags |= 4
    if invalid:
        flags |= 8
    return r.code, r.sign, flags


def _full_kernel_py(x: Any, out: Any, z: Any, pt: Any, dt: Any, to_input: bool) -> Any:
    """Every mode, stochastic included, with the IEEE flags counted; out has the lane type."""
    p = EncodeParams(*pt)
    d = DecodeParams(*dt)
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


def _general_kernel_py(x: Any, out: Any, z: Any, pt: Any, dt: Any, to_input: bool) -> None:
    """Any mode (stochastic above all) without flags: codes, or values back in x's format.

    out has the lane type; the random word is drawn for every mode and used by stochastic only.
    """
    p = EncodeParams(*pt)
    d = DecodeParams(*dt)
    key0 = _u(p.key0, np.uint32(0))
    key1 = _u(p.key1, np.uint32(0))
    for i in prange(x.size):
        r = _encode_one(_u(x[i], z), z, _random32(i, key0, key1), p, 0)
        out[i] = _decode_one(r.code, r.sign, z, d, True) if to_input else r.code


# ---- block scaling: a strip of blocks per work item --------------------------------------------
# The array is a C-contiguous (outer, R, C) view; a block is br rows by bc columns of it (1 x k:
# blocks along the last axis; k x 1: down a middle axis; k x k: 2-d tiles). A work item is one
# strip of br rows and ``chunk`` columns (whole blocks), done in passes that each run along
# contiguous memory: the columns' largest magnitudes, the block scales (a scalar rule per
# block), the elements, the values. The per-block numbers are spread over per-column scratch, so
# that the element loop never asks which block a value is in, and it touches three arrays only
# (more, and LLVM stops vectorising it: its checks that the arrays do not overlap grow past its
# limit). The loops are written out in the kernels (LLVM vectorises a loop of the compiled
# function itself, not one inlined from a helper), and every inner loop indexes a slice with
# its own counter: an index such as ``row + c`` could be negative for all numba knows, and its
# wrap-around check makes the loop scalar.
def _tile_py(it: Any, shape: Any, block: Any, chunk: Any) -> Any:
    """Work item ``it``: (its strip's first value, rows r0..r1, columns c0..c1, first scale)."""
    _, rows, cols = shape
    br, bc = block
    nbr = (rows + br - 1) // br
    nbc = (cols + bc - 1) // bc
    nch = (cols + chunk - 1) // chunk
    o = it // (nbr * nch)
    rest = it - o * (nbr * nch)
    bi = rest // nch
    c0 = (rest - bi * nch) * chunk
    r0 = bi * br
    return (
        o * rows * cols + c0,
        r0,
        min(r0 + br, rows),
        c0,
        min(c0 + chunk, cols),
        (o * nbr + bi) * nbc + c0 // bc,
    )


#: the shift that marks a block with the NaN scale (one above the largest, so that shift + 127
#: is its E8M0 code, 255)
NAN_SHIFT = 128


def _e8m0_rule_py(a: Any, z: Any, p: Any, rule: Any) -> Any:
    """The shared exponent of a block whose largest magnitude has the bits ``a``, or NAN_SHIFT
    (see the E8M0 loop)."""
    emax_e, rceil, max_frac = rule
    m_in = p.in_mantissa_bits
    ai = np.int64(a)
    ex = ai >> m_in
    # floor(log2(amax)) from the bit fields: the exponent, or a subnormal's highest set bit
    hb = np.int64(_s(_clz(_u(0, z)) - _clz(a), z)) - 1  # (ctlz(0) is the lane width)
    sub = ex == 0
    top = hb - (p.in_bias - 1 + m_in) if sub else ex - p.in_bias
    frac = ((ai << max(m_in - hb, 0)) if sub else ai) & ((1 << m_in) - 1)
    # rceil: one binade more when amax's significand exceeds the element max's, so that the
    # scale is amax / max rounded up to a power of two and nothing saturates
    s = top - emax_e + ((rceil != 0) & (frac > max_frac))
    s = -127 if ai == 0 else max(s, -127)
    special = ai >= np.int64(p.in_exponent_mask) << m_in  # an inf or NaN in the block
    # floor: a scale above 2^127 is the NaN scale; rceil saturates there
    return NAN_SHIFT if special | ((s > 127) & (rceil == 0)) else min(s, 127)


def _e8m0_blocks_kernel_py(
    x: Any, shape: Any, block: Any, chunk: Any, rule: Any, codes: Any, scales: Any, values: Any,
    table: Any, counts: Any, z: Any, pt: Any,
) -> None:  # fmt: skip
    """Block scaling with E8M0 (power-of-two) scales: the bits ``x`` (float32 or float64) of an
    (outer, R, C) array in blocks of ``block`` = (br, bc), ``chunk`` columns per work item.

    ``rule`` = (emax of the element, rceil, the element max's fraction in the input's fraction
    bits). A block's shared exponent is floor(log2(amax)) - emax (the OCP rule, "floor"), plus one
    under ``rceil`` when amax's significand exceeds the element max's; clamped below at -127;
    above 127 it is the NaN scale (floor) or 127 (rceil). A block holding an inf or NaN gets the
    NaN scale (255) and zero codes. Each value is rounded into the element format with its
    exponent range moved by the shared exponent (no ``v / 2^s`` is formed, so nothing rounds on
    the way). ``values`` (empty: not wanted) gets element value times scale from ``table`` (every
    element code's value, in values' dtype); ``counts[it]`` the item's nonzero, flushed,
    subnormal, inexact and saturated values over its finite blocks.
    """
    p = EncodeParams(*pt)
    cols = shape[2]
    bc = block[1]
    one = _u(1, z)
    mag_mask = _shr(_u(_u(0, z) - one, z), 1)
    code_mag = _u(_shl(one, p.sign_bit) - one, z)
    m_t = p.mantissa_bits
    stochastic = p.mode_stochastic != 0
    key0 = _u(p.key0, np.uint32(0))
    key1 = _u(p.key1, np.uint32(0))
    for it in prange(counts.shape[0]):
        base, r0, r1, c0, c1, s0 = _tile(it, shape, block, chunk)
        w = c1 - c0
        amax = np.zeros(w, x.dtype)
        for r in range(r0, r1):
            xs = x[base + r * cols : base + r * cols + w]
            for c in range(w):
                amax[c] = max(amax[c], _u(xs[c] & mag_mask, z))  # (a NaN above inf above all)
        nb = (w + bc - 1) // bc
        shift_b = np.empty(nb, np.int32)
        shift = np.empty(w, np.int32)
        for b in range(nb):
            seg = amax[b * bc : b * bc + bc]
            a = _u(0, z)
            for c in range(seg.size):
                a = max(a, seg[c])
            s = _e8m0_rule(a, z, p, rule)
            shift_b[b] = s
            scales[s0 + b] = s + 127  # (NAN_SHIFT + 127 is the NaN code, 255)
            shift[b * bc : b * bc + bc] = s
        n_nonzero = 0
        n_flushed = 0
        n_subnormal = 0
        n_inexact = 0
        n_saturated = 0
        for r in range(r0, r1):
            row = base + r * cols
            xs = x[row : row + w]
            cs = codes[row : row + w]
            for c in range(w):
                u = _u(xs[c], z)
                rnd = _random32(row + c, key0, key1) if stochastic else np.uint32(0)
                sh = shift[c]
                res = _encode_one(u, z, rnd, p, sh)
                ok = sh != NAN_SHIFT
                code = res.code if ok else _u(0, z)
                cs[c] = code
                mag = _u(code & code_mag, z)
                nonzero = ok & ((u & mag_mask) != 0)
                n_nonzero += nonzero
                n_flushed += nonzero & (mag == 0)
                n_subnormal += ok & (mag != 0) & (_shr(mag, m_t) == 0)
                n_inexact += ok & (res.inexact | res.overflow)
                n_saturated += ok & res.overflow
        counts[it, 0] = n_nonzero
        counts[it, 1] = n_flushed
        counts[it, 2] = n_subnormal
        counts[it, 3] = n_inexact
        counts[it, 4] = n_saturated
        if values.size > 0:
            scale = np.empty(w, values.dtype)
            for b in range(nb):
                s = shift_b[b]
                scale[b * bc : b * bc + bc] = np.ldexp(1.0, s) if s != NAN_SHIFT else np.nan
            for r in range(r0, r1):
                row = base + r * cols
                cs = codes[row : row + w]
                vs = values[row : row + w]
                for c in range(w):
                    vs[c] = table[cs[c]] * scale[c]


def _e4m3_blocks_kernel_py(
    x: Any, shape: Any, block: Any, chunk: Any, rule: Any, codes: Any, scales: Any, values: Any,
    table: Any, scale_table: Any, counts: Any, z: Any, pt: Any, ps: Any,
) -> None:  # fmt: skip
    """Block scaling with E4M3 scales over a float32 tensor scale (NVFP4), in float32 arithmetic
    as NVIDIA's recipe and torchao's ``nvfp4_quantize`` compute it: the float32 bits ``x`` of an
    (outer, R, C) array in blocks of ``block``, ``chunk`` columns per work item.

    ``rule`` = (tensor scale t, fl(1 / t), the element's max, the smallest and largest block
    scale), all float32. A block's scale is the E4M3 rounding (``ps``: float32 into E4M3, nearest
    even) of fl(fl(amax / max) / t) clamped to the two bounds; each value is fl(v * fl(fl(1 / t) /
    scale)) rounded into the element format (``pt``, saturating). A block holding an inf or NaN
    gets the NaN scale and zero codes. ``scale_table`` holds the float32 value of every E4M3 code
    (NaN for the NaN code), ``table`` the float64 value of every element code; ``values`` and
    ``counts`` as in the E8M0 loop, a value counting as inexact when element times block scale
    times t differs from it.
    """
    p = EncodeParams(*pt)
    q = EncodeParams(*ps)
    t, inv_t, elem_max, lo, hi = rule
    cols = shape[2]
    bc = block[1]
    one = _u(1, z)
    mag_mask = _shr(_u(_u(0, z) - one, z), 1)
    inf_bits = _u(_shl(_u(p.in_exponent_mask, z), p.in_mantissa_bits), z)
    code_mag = _u(_shl(one, p.sign_bit) - one, z)
    m_t = p.mantissa_bits
    stochastic = p.mode_stochastic != 0
    key0 = _u(p.key0, np.uint32(0))
    key1 = _u(p.key1, np.uint32(0))
    for it in prange(counts.shape[0]):
        base, r0, r1, c0, c1, s0 = _tile(it, shape, block, chunk)
        w = c1 - c0
        amax = np.zeros(w, x.dtype)
        for r in range(r0, r1):
            xs = x[base + r * cols : base + r * cols + w]
            for c in range(w):
                amax[c] = max(amax[c], _u(xs[c] & mag_mask, z))
        nb = (w + bc - 1) // bc
        rcp = np.empty(w, np.float32)
        scale = np.empty(w, np.float64)
        for b in range(nb):
            seg = amax[b * bc : b * bc + bc]
            a = _u(0, z)
            for c in range(seg.size):
                a = max(a, seg[c])
            # fl(amax / max) / t, clamped: the block's decode scale relative to the tensor's
            s = min(max((_f32(a) / elem_max) / t, lo), hi)
            code = _encode_one(_bits32(s), z, np.uint32(0), q, 0).code if a < inf_bits else q.nan_base
            scales[s0 + b] = code
            s8 = scale_table[code]
            r8 = inv_t / s8  # the recipe multiplies by this reciprocal, rounded once (NaN: a NaN block)
            f = np.float64(s8) * np.float64(t)  # (exact: 4 by 24 bits)
            rcp[b * bc : b * bc + bc] = r8
            scale[b * bc : b * bc + bc] = f
        n_nonzero = 0
        n_flushed = 0
        n_subnormal = 0
        n_inexact = 0
        n_saturated = 0
        for r in range(r0, r1):
            row = base + r * cols
            xs = x[row : row + w]
            cs = codes[row : row + w]
            for c in range(w):
                u = _u(xs[c], z)
                rnd = _random32(row + c, key0, key1) if stochastic else np.uint32(0)
                k = rcp[c]
                res = _encode_one(_bits32(_f32(u) * k), z, rnd, p, 0)
                ok = k == k
                code = res.code if ok else _u(0, z)
                cs[c] = code
                mag = _u(code & code_mag, z)
                nonzero = ok & ((u & mag_mask) != 0)
                n_nonzero += nonzero
                n_flushed += nonzero & (mag == 0)
                n_subnormal += ok & (mag != 0) & (_shr(mag, m_t) == 0)
                n_inexact += ok & (
                    table[code] * scale[c] != np.float64(_f32(u))
                )  # (exact: 2 by 4 by 24 bits)
                n_saturated += ok & res.overflow
        counts[it, 0] = n_nonzero
        counts[it, 1] = n_flushed
        counts[it, 2] = n_subnormal
        counts[it, 3] = n_inexact
        counts[it, 4] = n_saturated
        if values.size > 0:
            for r in range(r0, r1):
                row = base + r * cols
                cs = codes[row : row + w]
                vs = values[row : row + w]
                for c in range(w):
                    vs[c] = table[cs[c]] * scale[c]


def _finite_amax_kernel_py(x: Any, out: Any, z: Any, inf_bits: Any) -> None:
    """out[i] = the largest magnitude bit pattern below ``inf_bits`` (the largest finite
    magnitude) in chunk i of BLOCK_TILE values of ``x``: a tensor's amax, infinities and NaNs
    left out."""
    mag_mask = _shr(_u(_u(0, z) - _u(1, z), z), 1)
    top = _u(inf_bits, z)
    for i in prange(out.size):
        xs = x[i * 4096 : i * 4096 + 4096]
        m = _u(0, z)
        for c in range(xs.size):
            v = _u(xs[c] & mag_mask, z)
            m = max(m, v if v < top else _u(0, z))
        out[i] = m


def _decode_kernel_py(c: Any, out: Any, z: Any, dt: Any) -> None:
    """Codes c into out (the bits of the output format, usually float64 as uint64)."""
    d = DecodeParams(*dt)
    for i in prange(c.size):
        v = _u(c[i], z)
        out[i] = _decode_one(v, _u(_shr(v, d.sign_bit) & _u(1, z), z), z, d, False)


def _gather_kernel_py(c: Any, table: Any, out: Any) -> None:
    """out[i] = table[c[i]]: decoding 8- and 16-bit codes through a table of all their values."""
    for i in prange(c.size):
        out[i] = table[c[i]]


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
    r = _encode_one(ubuf[0], np.uint64(0), rnd, p, 0)
    ubuf[0] = _decode_one(r.code, r.sign, np.uint64(0), d)
    return fbuf[0]


def _sequential_kernel_py(
    t: Any, run: Any, key0: Any, key1: Any, stoch: Any, rdown: Any, pt: Any, dt: Any
) -> None:
    """Running sums of ``t`` into ``run``, each addition rounded once (step i uses random word i)."""
    p = EncodeParams(*pt)
    d = DecodeParams(*dt)
    fbuf = np.empty(1, np.float64)
    ubuf = fbuf.view(np.uint64)
    s = t[0]
    run[0] = s
    for i in range(1, t.size):
        s = _step(s, t[i], i, key0, key1, stoch, rdown, p, d, fbuf, ubuf)
        run[i] = s


def _kahan_kernel_py(
    t: Any, run: Any, comp: Any, key0: Any, key1: Any, stoch: Any, rdown: Any, pt: Any, dt: Any
) -> None:
    """Kahan's compensated running sums of ``t`` (into ``run``) and compensations (into ``comp``),
    every operation rounded once; rounding 4i + j of term i uses random word 4i + j."""
    p = EncodeParams(*pt)
    d = DecodeParams(*dt)
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


def compile_into(numba: Any, out: dict[str, Any]) -> None:
    """Wrap the element functions and compile the loops into ``out`` by name (once per process)."""
    from numba.extending import intrinsic

    g = globals()
    g["prange"] = numba.prange
    for name in (*INTRINSICS, "_half", "_unhalf", "_f32", "_bits32"):
        g[name] = intrinsic(g[name + "_typer"])
    # forceinline marks them LLVM "alwaysinline": left to its cost model LLVM keeps the big
    # element functions as calls, and a loop with a call does not vectorise
    helper = numba.njit(nogil=True, error_model="numpy", forceinline=True)
    for name in (*ELEMENT_FUNCTIONS, "_bf16", "_step", *BLOCK_FUNCTIONS):
        g[name] = helper(g[name + "_py"])
    parallel = numba.njit(parallel=True, cache=True, nogil=True, error_model="numpy")
    for name in (
        "encode",
        "round",
        "full",
        "general",
        "decode",
        "gather",
        "e8m0_blocks",
        "e4m3_blocks",
        "finite_amax",
    ):
        out[name] = parallel(g[f"_{name}_kernel_py"])
    # the hardware conversions run at memory speed on one core: no threads to wake; the running
    # sums are serial by nature
    serial = numba.njit(cache=True, nogil=True, error_model="numpy")
    for name in ("half_encode", "half_round", "bf16_encode", "bf16_round", "sequential", "kahan"):
        out[name] = serial(g[f"_{name}_kernel_py"])
