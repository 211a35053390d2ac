"""The E4M3-scaled block loop (numba source, private to :mod:`floatlab.rounding`): NVFP4's E4M3
block scales over a float32 tensor scale, in float32 arithmetic, on the tiling and block maxima of
:mod:`floatlab.rounding._block_kernels` (whose notes on what keeps a loop vectorised hold here).

The NVFP4 loop's per-value work is cut to what its float32 products need (about 1.5 times the
general element functions' speed for the values, 2 times for codes and counts, measured): an
element rounding for float32 alone (the deterministic modes as one addend), element values read
off the codes' bits by a shift and an add, exactness tested by a float32 fma instead of a
float64 product, E4M3 scales rounded by an integer add on their bits (a lane per block, no
encoder or decoder), and stochastic rounding compiled as a loop of its own.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import prange

from floatlab.rounding._block_kernels import _block_amax, _spread, _tile
from floatlab.rounding._inplace import _add5, _nearest, _nearest_code, _stochastic
from floatlab.rounding._intrinsics import (
    _bits32,
    _f32,
    _fma32,
    _itof,
    _s,
    _shl,
    _shr,
    _u,
    element,
    parallel_loop,
)
from floatlab.rounding._kernels import _random32
from floatlab.rounding.params import EncodeParams


@element
def _rounded_f32(a: Any, rnd: Any, p: Any, stochastic: Any) -> Any:
    """(the rounded magnitude's float32 bits, overflowed) of the float32 magnitude bits ``a`` (a
    number or an infinity) rounded in place into the element format of ``p`` (a format without
    flush-to-zero or fnuz zeros, saturating), stochastically with the random word ``rnd`` when
    ``stochastic`` (a constant of the compiled loop), else to nearest even."""
    m_t = p.mantissa_bits
    eb = _s(p.emin + 127, a)
    top_bits = _u(_shl(_u(p.max_code, a), 23 - m_t) + _u((p.emin + 126) << 23, a), a)
    if stochastic:
        return _stochastic(a, a, rnd, _u(p.random_mask, a), m_t, eb, top_bits)
    return _nearest(a, a, 23, m_t, eb, top_bits)


@element
def _round_f32(y: Any, rnd: Any, p: Any, stochastic: Any) -> Any:
    """(code, overflow) of the float32 bits ``y`` (a number or an infinity) rounded into the
    element format of ``p`` (float32 into it, 32 lanes, saturating, no true exponent): what
    :func:`floatlab.rounding._kernels._encode_one` gives for these at shift 0, in about half
    its operations. ``rnd`` is the random word of stochastic rounding, which ``stochastic``
    (a constant of the compiled loop: its work is left out of the other modes' loops) asks for.
    The loops that round in place call :func:`_rounded_f32` instead."""
    one = _u(1, y)
    zs = _s(0, y)
    m_t = p.mantissa_bits
    sgn = _shr(y, 31)
    a = _u(y & _u(0x7FFFFFFF, y), y)
    ex = _s(_shr(a, 23), y)
    sig = _u(_u(a & _u(0x7FFFFF, y), y) | _shl(_u(ex != zs, y), 23), y)
    if (p.daz != 0) & (ex == zs):
        sig = _u(0, y)  # denormals-are-zero: a subnormal input counts as a zero of its sign
    # biased exponents: the input's, and the result's (at least the element's emin)
    e = _s(max(ex, _s(1, y)), y)
    emin_b = _s(p.emin + 127, y)
    te = _s(max(e, emin_b), y)
    # the bits below the element's last place: at least 23 - m_t, clamped where only "below
    # half, not zero" is left to tell
    s = _s(te - e + _s(23 - m_t, y), y)
    rs = _s(min(s, _s(p.shift_cap, y)), y)
    p2 = _shl(one, rs)
    rem = _u(sig & _u(p2 - one, y), y)
    half = _shr(p2, 1)
    inexact = rem != 0
    odd = _u(_shr(sig, rs) & one, y)
    neg = sgn != 0
    # the deterministic modes as an addend that carries into the kept bits exactly when the
    # mode rounds up: rne half - 1 + the last kept bit, rna half, away from zero all ones below
    # the last place (rup, rdown by sign), toward zero nothing; round to odd sets the last bit
    dir_up = ((p.mode_rup != 0) & ~neg) | ((p.mode_rdown != 0) & neg)
    mode_add = _u(p2 - one, y) if dir_up else _u(0, y)
    add = _u(half - one + odd, y) if p.mode_rne != 0 else (half if p.mode_rna != 0 else mode_add)
    kept = _shr(_u(sig + add, y), rs)
    if (p.mode_rodd != 0) & inexact:
        kept = _u(kept | one, y)
    if stochastic:
        # as the element rounding: the remainder as a 32-bit fraction (from the unclamped s),
        # cut to random_bits, carries out of 32 bits with the random word's as many bits
        c32 = _s(32, y)
        up_sh = _s(min(max(c32 - s, zs), _s(31, y)), y)
        down_sh = _s(min(max(s - c32, zs), _s(31, y)), y)
        frac32 = _u(_shr(_shl(rem, up_sh), down_sh), y)
        rm = _u(p.random_mask, y)
        r = _u(rnd & rm, y)
        q = _u(frac32 & rm, y)
        st_up = _shr(_u(_shr(r, 1) + _shr(q, 1) + (r & q & one), y), 31) != 0
        kept = _u(kept + _u(inexact & st_up, y), y)
    # the carry out of kept walks into the exponent field by itself
    mag = _u(_shl(_u(te - emin_b, y), m_t) + kept, y)
    top = _u(p.max_code, y)
    ovf = (te > _s(p.emax + 127, y)) | (mag > top)
    mag = top if ovf else mag  # (saturating)
    if a == _u(0x7F800000, y):
        mag = _u(p.inf_mag, y)
    if (p.ftz != 0) & (mag != 0) & (mag < _shl(one, m_t)):
        mag = _u(0, y)
    sbit = _shl(sgn, p.sign_bit)
    if (p.fnuz != 0) & (mag == 0):
        sbit = _u(0, y)  # fnuz has no negative zero
    return _u(sbit | mag, y), ovf


@element
def _elem_f32(code: Any, p: Any, sub: Any) -> Any:
    """The float32 value of the element ``code`` (format of ``p``, at most 8 bits: every value
    is a float32), ``sub`` = 2^(emin - mantissa bits): a normal element's bits moved into
    float32's fields and its exponent rebiased by one add, a subnormal one's significand times
    ``sub``. The value the code's bits spell out (an infinity's too, as
    :func:`floatlab.rounding._block_kernels._value`)."""
    one = _u(1, code)
    mag = _u(code & _u(_shl(one, p.sign_bit) - one, code), code)
    m_t = p.mantissa_bits
    bits = _u(_shl(mag, 23 - m_t) + _u((p.emin + 126) << 23, code), code)
    v = _f32(bits) if mag >= _shl(one, m_t) else _itof(mag) * sub
    return _f32(_u(_bits32(v) | _shl(_shr(code, p.sign_bit), 31), code))


@element
def _e4m3_one(u: Any, k: Any, s8: Any, rnd: Any, p: Any, how: Any) -> Any:
    """One value of the E4M3-scaled loop: (its code, element x block scale, and the flags
    (nonzero, flushed, subnormal, inexact, saturated)) for the float32 bits ``u``, the block's
    reciprocal ``k`` (NaN for the NaN scale: then the code is 0 and nothing counts) and scale
    ``s8``; ``how`` = (stochastic, in_place, sub, t, exact32) as in the loop."""
    stochastic, in_place, sub, t, exact32 = how
    z = u
    y = _bits32(_f32(u) * k)
    ok = k == k
    nonzero = ok & ((u & _u(0x7FFFFFFF, z)) != 0)
    if in_place:
        # the element's value is the rounded float32 and its code is read off it: a caller that
        # takes no code (the values-and-counts pass) leaves the code's work out when this is
        # inlined
        rm, ovf = _rounded_f32(_u(y & _u(0x7FFFFFFF, z), z), rnd, p, stochastic)
        eb = _s(p.emin + 127, z)
        code = _u(_shl(_shr(y, 31), p.sign_bit) | _nearest_code(rm, z, 23, p.mantissa_bits, eb), z)
        code = code if ok else _u(0, z)
        pv = _f32(_u(rm | _u(y & _u(0x80000000, z), z), z)) * s8  # (exact: at most 8 by 4 bits)
        flushed = rm == _u(0, z)
        subnormal = (rm != _u(0, z)) & (rm < _shl(_u(eb, z), 23))
    else:
        code, ovf = _round_f32(y, rnd, p, stochastic)
        code = code if ok else _u(0, z)
        mag = _u(code & _u(_shl(_u(1, z), p.sign_bit) - _u(1, z), z), z)
        pv = _elem_f32(code, p, sub) * s8  # (exact: at most 8 by 4 bits)
        flushed = mag == 0
        subnormal = (mag != 0) & (_shr(mag, p.mantissa_bits) == 0)
    if exact32:
        changed = _fma32(pv, t, -_f32(u)) != np.float32(0)
    else:
        changed = np.float64(pv) * np.float64(t) != np.float64(_f32(u))  # (exact)
    flags = (nonzero, nonzero & flushed, ok & subnormal, ok & changed, ok & ovf)
    return code, pv, flags


@parallel_loop
def e4m3_blocks(
    x: Any, shape: Any, block: Any, chunk: Any, rule: Any, codes: Any, scales: Any, values: Any,
    counts: Any, z: Any, pt: Any, ps: Any, sr: Any, ip: Any,
) -> None:  # fmt: skip
    """Block scaling with E4M3 scales over a float32 tensor scale (NVFP4), in float32 arithmetic
    as NVIDIA's recipe and torchao's ``nvfp4_quantize`` compute it: the float32 bits ``x`` of an
    (outer, R, C) array in blocks of ``block``, ``chunk`` columns per work item.

    ``rule`` = (tensor scale t, fl(1 / t), the element's max, the smallest and largest block
    scale (normal E4M3 numbers), the factor the values are multiplied by last: t, or 1 to leave
    t to the caller), all float32. A block's scale is the E4M3 rounding (``ps``: float32 into
    E4M3, nearest even) of fl(fl(amax / max) / t) clamped to the two bounds; each value is
    fl(v * fl(fl(1 / t) / scale)) rounded into the element format (``pt``: float32 into it,
    saturating; ``sr`` None, or not None for stochastic rounding: a type, so that each kind of
    mode gets its own compiled loop). ``ip`` not None (a type too) rounds in place, for round to
    nearest even, and stochastic rounding, into a format without flush-to-zero or fnuz zeros
    (see :func:`floatlab.rounding._inplace._nearest` and ``_stochastic``; a flag read at run
    time inside the element loop kept it scalar, at two thirds of the speed). A block holding
    an inf or NaN gets the NaN scale and zero codes. ``codes``, ``values`` and ``counts`` as in
    the E8M0 loop, a value counting as inexact when element times block scale times t differs
    from it; with ``values`` and no ``codes`` a non-empty ``counts`` gets the counts from the
    values' pass. Values in values' dtype, (element x block scale) x the last factor, the first
    product exact, the second rounded once (to nearest).
    """
    p = EncodeParams(*pt)
    q = EncodeParams(*ps)
    t, inv_t, elem_max, lo, hi, vt = rule
    cols = shape[2]
    bc = block[1]
    one = _u(1, z)
    mag_mask = _shr(_u(_u(0, z) - one, z), 1)
    inf_bits = _u(0x7F800000, z)
    qnan = _f32(_u(0x7FC00000, z))
    m_t = p.mantissa_bits
    stochastic = sr is not None
    in_place = ip is not None  # (a constant of the compiled loop)
    key0 = _u(p.key0, np.uint32(0))
    key1 = _u(p.key1, np.uint32(0))
    # a normal float32 rounded to nearest even at E4M3's fraction bits, in place: float32's
    # fraction bits below E4M3's, and the difference of the two exponent biases in the code
    m_s = q.mantissa_bits
    cut = _s(23 - m_s, z)
    low = _u(_shl(one, cut) - one, z)
    bias_d = _u(_shl(_u(127 - (1 - q.emin), z), m_s), z)
    nan_code = _u(q.nan_base, z)
    # element x block scale x t equals v exactly when fma(element x block scale, t, -v) is 0 in
    # float32: the exact difference is a multiple of the smaller of v's spacing (2^-149) and the
    # product's (element's x the smallest block scale's x t's last place), and when that is not
    # below 2^-149, no nonzero difference rounds to 0; else the product is formed in float64
    t_exp = _s(_s(_shr(_bits32(t), 23), z) - _s(127, z), z)
    lo_exp = _s(_s(_shr(_bits32(lo), 23), z) - _s(127, z), z)
    exact32 = (p.emin - m_t) + (lo_exp - m_s) + (t_exp - 23) >= -149
    # values in values' dtype: (element x E4M3 scale) x the last factor, the first product exact
    # (at most 8 by 4 bits) in float32, the second rounded once, in float32 too: the correctly
    # rounded exact product
    tv = np.empty(1, values.dtype)
    tv[0] = vt
    vl = tv[0]
    sub = _f32(_u(_shl(_u(p.emin - m_t + 127, z), 23), z))  # 2^(emin - m_t), a normal float32
    for it in prange(counts.shape[0]):
        base, r0, r1, w, s0 = _tile(it, shape, block, chunk)
        nb = (w + bc - 1) // bc
        bmax = _block_amax(x, base, r0, r1, cols, w, bc, z, mag_mask)
        # the rule, one block per lane: the clamped scale is a normal E4M3 number's float32, so
        # its E4M3 rounding is an integer add on its bits (no encoder, no decoder, no lookup)
        sc = scales[s0 : s0 + nb]
        rcp_b = np.empty(nb, np.float32)
        s8_b = np.empty(nb, np.float32)
        for b in range(nb):
            a = bmax[b]
            # fl(amax / max) / t, clamped: the block's decode scale relative to the tensor's
            s = min(max((_f32(a) / elem_max) / t, lo), hi)
            sb = _bits32(s)
            # nearest even: add half an E4M3 place less one, plus the last kept bit, and cut
            r8 = _u(_u(sb + _u(_shr(low, 1) + (_shr(sb, cut) & one), z), z) & ~low, z)
            fin = a < inf_bits
            sc[b] = _u(_shr(r8, cut) - bias_d, z) if fin else nan_code
            s8 = _f32(r8) if fin else qnan
            s8_b[b] = s8
            rcp_b[b] = inv_t / s8  # the recipe multiplies by this reciprocal, rounded once
        # the reciprocals and scales spread over the columns
        rcp = _spread(rcp_b, bc, w)
        s8c = _spread(s8_b, bc, w)
        if codes.size > 0 or counts.shape[1] > 0:
            # the codes and the counts, or (no codes wanted) the values and the counts: the same
            # element work, written to one array each (a loop writing both was slower)
            n = np.zeros(5, np.int64)
            zero = _u(0, z)
            how = (stochastic, in_place, sub, t, exact32)
            for r in range(r0, r1):
                row = base + r * cols
                xs = x[row : row + w]
                cnt = (zero, zero, zero, zero, zero)  # (lane-wide, per row)
                if codes.size > 0:
                    cs = codes[row : row + w]
                    for c in range(w):
                        rnd = _random32(row + c, key0, key1) if stochastic else np.uint32(0)
                        code, _pv, f = _e4m3_one(_u(xs[c], z), rcp[c], s8c[c], rnd, p, how)
                        cs[c] = code
                        cnt = _add5(cnt, f)
                else:
                    vs = values[row : row + w]
                    for c in range(w):
                        rnd = _random32(row + c, key0, key1) if stochastic else np.uint32(0)
                        _code, pv, f = _e4m3_one(_u(xs[c], z), rcp[c], s8c[c], rnd, p, how)
                        vs[c] = pv * vl
                        cnt = _add5(cnt, f)
                for j in range(5):
                    n[j] += np.int64(cnt[j])
            counts[it, :] = n
            if codes.size > 0 and values.size > 0:
                for r in range(r0, r1):
                    row = base + r * cols
                    cs = codes[row : row + w]
                    vs = values[row : row + w]
                    for c in range(w):
                        vs[c] = (_elem_f32(_u(cs[c], z), p, sub) * s8c[c]) * vl
        elif values.size > 0:
            for r in range(r0, r1):
                row = base + r * cols
                xs = x[row : row + w]
                vs = values[row : row + w]
                for c in range(w):
                    rnd = _random32(row + c, key0, key1) if stochastic else np.uint32(0)
                    y = _bits32(_f32(xs[c]) * rcp[c])
                    if in_place:  # (the element's value is the rounded float32: no code)
                        ry, _ovf = _rounded_f32(_u(y & mag_mask, z), rnd, p, stochastic)
                        e = _f32(_u(ry | _u(y & ~mag_mask, z), z))
                    else:
                        code, _ovf = _round_f32(y, rnd, p, stochastic)
                        e = _elem_f32(code, p, sub)
                    vs[c] = (e * s8c[c]) * vl
