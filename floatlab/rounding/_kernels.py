"""The compiled rounding loops, as numba source (private to :mod:`floatlab.rounding`).

The scalar reference in :mod:`floatlab.rounding.spec` is the specification; these loops must
give the same bits. They work on integer bit patterns only: the input is viewed as unsigned
integers (float64 as uint64, float32 as uint32, float16 and bfloat16 as uint16), and every
format, input or target, enters as the named integers of
:class:`~floatlab.rounding.params.EncodeParams` and :class:`~floatlab.rounding.params.DecodeParams`.
So one compiled loop serves every format and rounding mode, and ``cache=True`` keeps it across
runs (numba honours ``NUMBA_CACHE_DIR``).

Arithmetic runs in lanes (:mod:`floatlab.rounding._intrinsics`): the element functions
(``_core``, ``_encode_one``, ``_decode_one``, ``_random32``, ``_flags_one``) keep the lane
width through its intrinsics. They are compiled here for the CPU and inlined into the loops;
:mod:`floatlab.rounding.cuda` compiles the same Python functions (their ``py_func``) for CUDA.
This module imports numba: it is imported on first use, by
:func:`floatlab.rounding._jit.kernels`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from numba import prange

from floatlab.rounding._intrinsics import (
    _clz,
    _half,
    _s,
    _shl,
    _shr,
    _u,
    _unhalf,
    element,
    parallel_loop,
    serial_loop,
)
from floatlab.rounding.params import DecodeParams, EncodeParams


# ---- the element functions ---------------------------------------------------------------------
# Conventions: bit patterns and codes are unsigned lane integers (the type of ``z``),
# exponents are signed lane integers, format parameters arrive as int64 fields, and
# every numba operation is cast back to the lane width (numba would widen it to 64 bits).
@element
def _core(
    sig: Any, e: Any, sgn: Any, rnd: Any, z: Any, m_in: Any, norm: Any, m_t: Any, emin_t: Any,
    cl: Any, c_rne: Any, c_rna: Any, c_dp: Any, c_dn: Any, c_odd: Any, c_st: Any, rmask: Any,
    c_cp: Any,
) -> Any:  # fmt: skip
    """Round sig * 2^(e - m_in), sig < 2^(m_in + 1), to m_t fraction bits at an exponent >= emin_t.

    Returns (code magnitude before overflow handling, its exponent te, inexact, the true
    exponent of the input). ``rnd`` is the 32-bit random word of stochastic rounding. ``c_cp``
    bit 0 set: "even" and "odd" are the parity of the whole lower code, not of the kept
    significand (they differ only without fraction bits: P3109's precision-1 formats); bit 1
    flips that parity (the flags' rounding with an unbounded exponent, whose code is that many
    binades above emin_t).
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
    parity = _u(_u(te - _s(emin_t, z), z) * _u(c_cp & 1, z) + _u(c_cp >> 1, z), z)
    odd = (_u(kept + parity, z) & one) != 0
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
    """One element rounded by :func:`_encode_one`: the code and what the flag loops need."""

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


@element
def _encode_one(u: Any, z: Any, rnd: Any, p: Any, shift: Any) -> Any:
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
        p.code_parity,
    )  # fmt: skip
    if sig == 0:
        mag = zero
    if (p.no_zero != 0) & (mag != zero):
        mag = _u(mag - one, z)  # a scale format's zero exponent field is 2^emin (below it: clamped)
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
    if p.unsigned != 0:
        # no sign: a negative value (not -0) is the NaN, and so is a zero where there is none
        if ((sgn != 0) & ((sig != 0) | special)) | ((p.no_zero != 0) & (sig == 0) & ~special):
            mag = _u(p.nan_base, z)
        sbit = zero
    code = _u(sbit | mag, z)
    return Rounded(code, sgn, special, f, sig, e, inexact, et, ovf, flushed)


@element
def _decode_one(c: Any, nan_sgn: Any, z: Any, d: Any, exact: Any = False) -> Any:
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
    # a scale format's zero exponent field is a binade: read one up, against a bias one up
    ex = _u(_shr(mag_a, m_a) + _u(d.no_zero, z), z)
    f = _u(mag_a & _u(_shl(one, m_a) - one, z), z)
    top = ex == _u(d.exponent_mask, z)
    is_nan = (
        ((nan_mode == 0) & top & (f != 0))
        | ((nan_mode == 1) & (mag_a == _u(_shl(one, d.sign_bit) - one, z)))
        | ((nan_mode == 2) & (sgn != 0) & (mag_a == 0))
    )
    is_inf = ((nan_mode == 0) & top & (f == 0)) | ((d.inf_mag != 0) & (mag_a == _u(d.inf_mag, z)))
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
            sig, e, sgn, np.uint32(0), z, m_a, 1, m_b, d.out_emin, d.shift_cap, 1, 0, 0, 0, 0, 0, 0, 0
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


@element
def _mix32(x: Any) -> Any:
    """The "lowbias32" integer hash, as floatlab.rounding._mix32, in uint32 arithmetic."""
    x = _u(x ^ _shr(x, 16), x)
    x = _u(x * _u(0x7FEB352D, x), x)
    x = _u(x ^ _shr(x, 15), x)
    x = _u(x * _u(0x846CA68B, x), x)
    return _u(x ^ _shr(x, 16), x)


@element
def _random32(i: Any, k0: Any, k1: Any) -> Any:
    """The 32-bit word whose top bits are random_bits_at(key, i, k) (counter-based, any order)."""
    lo = _u(i, k0)
    hi = _u(i >> 32, k0)
    h = _mix32(_u(lo ^ k0, k0))
    return _mix32(_u(h + _u(hi * _u(0x9E3779B9, k0), k0) + k1, k0))


# ---- the loops ---------------------------------------------------------------------------------
@parallel_loop
def encode(x: Any, out: Any, z: Any, pt: Any) -> None:
    """Deterministic modes: codes of x (bits) into out."""
    # the parameters come in as plain tuples (numba dispatches those 2 us faster than a NamedTuple)
    p = EncodeParams(*pt)
    for i in prange(x.size):
        out[i] = _encode_one(_u(x[i], z), z, np.uint32(0), p, 0).code


@element
def _bf16(u: Any) -> Any:
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


#: values a counting cast handles at a time: their non-zeros counted, rounded, their results'
#: non-zeros counted, in three loops over a block that stays in the cache (one loop doing all
#: three is not vectorised: it ran at about half the speed)
_CHUNK = 1024


@element
def _nonzero(u: Any) -> int:
    """The non-zero values among the float32 bit patterns ``u`` (a NaN is one, -0 is a zero)."""
    n = 0
    for j in range(u.size):
        n += (u[j] & np.uint32(0x7FFFFFFF)) != 0
    return n


@element
def _cast16(u: Any, bf16: Any) -> Any:
    """The float32 bits ``u`` rounded to nearest even into bfloat16 (``bf16`` not None: integer
    arithmetic) or fp16 (``bf16`` None: the CPU's conversion) and back, as float32 bits. ``bf16``
    is a type, None or a number: each format is a loop of its own (a format read at run time
    would keep the loop from vectorising)."""
    if bf16 is not None:
        return np.uint32(np.uint32(_bf16(u)) << np.uint32(16))
    return _unhalf(_half(u))


@element
def _code16(u: Any, bf16: Any, back: Any) -> Any:
    """The bfloat16 (``bf16`` not None) or fp16 (None) code of the float32 bits ``u``, rounded to
    nearest even as :func:`_cast16` rounds; with ``back`` not None, :func:`_cast16`'s float32
    bits of its value. Both are types: each cast is a loop of its own."""
    if back is not None:
        return _cast16(u, bf16)
    if bf16 is not None:
        return _bf16(u)
    return _half(u)


@serial_loop
def cast16(x: Any, out: Any, bf16: Any, back: Any) -> None:
    """float32 bits to bfloat16 (``bf16`` not None: integer arithmetic) or fp16 (None: the CPU's
    conversion) codes, round to nearest even; with ``back`` not None, the rounded values' float32
    bits (:func:`_code16`)."""
    for i in prange(x.size):
        out[i] = _code16(x[i], bf16, back)


@serial_loop
def round_count(x: Any, out: Any, bf16: Any) -> tuple[int, int]:
    """:func:`cast16`'s rounded values (fp16 for ``bf16`` None, bfloat16 for a number) and the
    non-zero values of its input and of its result (a NaN is non-zero, -0 a zero), counted while
    each block is in the cache: what a rounding flushed."""
    nx = 0
    nr = 0
    for lo in range(0, x.size, _CHUNK):
        xs = x[lo : lo + _CHUNK]
        rs = out[lo : lo + _CHUNK]
        nx += _nonzero(xs)
        for i in range(xs.size):
            rs[i] = _cast16(xs[i], bf16)
        nr += _nonzero(rs)
    return nx, nr


@serial_loop
def round_count_inplace(x: Any, bf16: Any) -> tuple[int, int]:
    """:func:`round_count` in the input's own memory: ``x`` is overwritten by its rounded values
    (one array: a second one that is the same memory keeps the loop scalar; and one loop for
    both would type a read-only input's chunk as the values' too)."""
    nx = 0
    nr = 0
    for lo in range(0, x.size, _CHUNK):
        xs = x[lo : lo + _CHUNK]
        nx += _nonzero(xs)
        for i in range(xs.size):
            xs[i] = _cast16(xs[i], bf16)
        nr += _nonzero(xs)
    return nx, nr


@parallel_loop
def round_back(x: Any, out: Any, z: Any, pt: Any, dt: Any) -> None:
    """Deterministic modes: x (bits) rounded to the target and converted back to x's format."""
    p = EncodeParams(*pt)
    d = DecodeParams(*dt)
    for i in prange(x.size):
        r = _encode_one(_u(x[i], z), z, np.uint32(0), p, 0)
        out[i] = _decode_one(r.code, r.sign, z, d, True)


@element
def _flags_one(xi: Any, i: Any, z: Any, p: Any) -> Any:
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
                p.code_parity | (((et - p.emin) & 1) << 1) * p.code_parity,
            )[0]  # fmt: skip
            tiny = unbounded < _shl(_u(1, z), p.mantissa_bits + 1)
    flags = 0
    # an unsigned format's NaN for a negative value (or a scale format's for a zero): invalid alone
    nan_in = r.special & (f != 0)
    no_value = (
        (p.unsigned != 0)
        & ~nan_in
        & (((r.sign != 0) & ((r.significand != 0) | r.special)) | ((p.no_zero != 0) & (r.significand == 0)))
    )
    if no_value:
        finite = False
        invalid = True
    if finite & (r.inexact | r.overflow | r.flushed):
        flags |= 1
    if finite & ((r.inexact & tiny) | r.flushed):
        flags |= 2
    if finite & r.overflow:
        flags |= 4
    if invalid:
        flags |= 8
    return r.code, r.sign, flags


@parallel_loop
def full(x: Any, out: Any, z: Any, pt: Any, dt: Any, to_input: bool) -> Any:
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


@parallel_loop
def general(x: Any, out: Any, z: Any, pt: Any, dt: Any, to_input: bool) -> None:
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


@parallel_loop
def decode(c: Any, out: Any, z: Any, dt: Any) -> None:
    """Codes c into out (the bits of the output format, usually float64 as uint64)."""
    d = DecodeParams(*dt)
    for i in prange(c.size):
        v = _u(c[i], z)
        out[i] = _decode_one(v, _u(_shr(v, d.sign_bit) & _u(1, z), z), z, d, False)


@parallel_loop
def gather(c: Any, table: Any, out: Any) -> None:
    """out[i] = table[c[i]]: decoding 8- and 16-bit codes through a table of all their values."""
    for i in prange(c.size):
        out[i] = table[c[i]]


@element
def _step(x: Any, y: Any, i: Any, key0: Any, key1: Any, stoch: Any, rdown: Any, p: Any, d: Any,
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


@serial_loop
def sequential(t: Any, run: Any, key0: Any, key1: Any, stoch: Any, rdown: Any, pt: Any, dt: Any) -> None:
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


@serial_loop
def kahan(
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


#: the element functions that :mod:`floatlab.rounding.cuda` compiles for CUDA too
ELEMENT_FUNCTIONS: tuple[Any, ...] = (_core, _encode_one, _decode_one, _mix32, _random32, _flags_one, _bf16)
