"""The block-scaling loops (numba source, private to :mod:`floatlab.rounding`): MX's E8M0 scales
and NVFP4's E4M3 scales over a tensor scale, on the element functions of
:mod:`floatlab.rounding._kernels`.

The array is a C-contiguous (outer, R, C) view; a block is br rows by bc columns of it (1 x k:
blocks along the last axis; k x 1: down a middle axis; k x k: square tiles). A work item is one
strip of br rows and ``chunk`` columns (whole blocks, about 4096 values, in the first-level
cache), done in passes that each run along contiguous memory: the columns' largest magnitudes,
the block scales (a scalar rule per block), the elements. The per-block numbers are spread over
per-column scratch, so that the element loop never asks which block a value is in.

What keeps the element loops vectorised (each point cost a factor of two or more, measured):

* every inner loop indexes a slice with its own counter: an index such as ``row + c`` could be
  negative for all numba knows, and its wrap-around check makes the loop scalar;
* a loop touches few arrays: LLVM checks at run time that the arrays written do not overlap the
  others, and past its limit of checks it leaves the loop scalar; so the codes-and-counts loop
  and the values loop are separate passes (``mx_round`` needs the values alone: one pass);
* the counts are summed in lane-wide integers (a 64-bit sum of a 32-bit lane's flags doubles
  the vector work), per work item;
* the loops are written out in the kernels, not in helpers.

The NVFP4 loop's per-value work is cut to what its float32 products need (about 1.5 times the
general element functions' speed for the values, 2 times for codes and counts, measured): an
element rounding for float32 alone (the deterministic modes as one addend), element values read
off the codes' bits by a shift and an add, exactness tested by a float32 fma instead of a
float64 product, E4M3 scales rounded by an integer add on their bits (a lane per block, no
encoder or decoder), and stochastic rounding compiled as a loop of its own.

numba's cache notices a change in the file of a loop, not in the files of the functions it
inlines: the kernels here are compiled under names that carry a fingerprint of the element
functions' file (:func:`fingerprint`), so that a change there compiles them anew.
"""

from __future__ import annotations

import hashlib
import types
from typing import Any

import numpy as np

from floatlab.rounding import _inplace, _kernels
from floatlab.rounding.params import EncodeParams

# Names bound to numba objects by compile_into(); plain placeholders until then.
prange: Any = range
_u: Any = None
_s: Any = None
_shl: Any = None
_shr: Any = None
_clz: Any = None
_encode_one: Any = None
_random32: Any = None
_float: Any = None
_f32: Any = None
_bits32: Any = None
_block_amax: Any = None
_tile: Any = None
_e8m0_rule: Any = None
_itof: Any = None
_value: Any = None
_fma32: Any = None
_round_f32: Any = None
_elem_f32: Any = None
_nearest: Any = None
_stochastic: Any = None
_rounded_f32: Any = None
_moved_round: Any = None
_nearest_code: Any = None
_e4m3_one: Any = None
_add5: Any = None
_moved: Any = None

#: the shift that marks a block with the NaN scale (one above the largest, so that shift + 127
#: is its E8M0 code, 255)
NAN_SHIFT = 128
#: values per work item: a strip of blocks that stays in the first-level cache
TILE = 4096
#: the E4M3-scaled loop rounds in place (True in its twins ``_rne``, to nearest even, and ``_sr``,
#: stochastic, only)
_IN_PLACE = False


def _float_typer(typingctx: Any, bits: Any) -> Any:
    """The float of ``bits``' width (float32 for a uint32, float64 for a uint64) with that bit
    pattern."""
    from llvmlite import ir
    from numba.core import types as nt

    ft = nt.float32 if bits.bitwidth == 32 else nt.float64

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        return builder.bitcast(args[0], ir.FloatType() if bits.bitwidth == 32 else ir.DoubleType())

    return ft(bits), codegen


def _f32_typer(typingctx: Any, bits: Any) -> Any:
    """The float32 whose bit pattern is ``bits`` (a uint32)."""
    from llvmlite import ir
    from numba.core import types as nt

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        b = context.cast(builder, args[0], sig.args[0], nt.uint32)
        return builder.bitcast(b, ir.FloatType())

    return nt.float32(bits), codegen


def _bits32_typer(typingctx: Any, f: Any) -> Any:
    """The bit pattern (uint32) of the float32 ``f``."""
    from llvmlite import ir
    from numba.core import types as nt

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        return builder.bitcast(args[0], ir.IntType(32))

    return nt.uint32(nt.float32), codegen


def _fma32_typer(typingctx: Any, a: Any, b: Any, c: Any) -> Any:
    """fl(a x b + c) in float32, rounded once (LLVM's fma: the CPU's instruction where it has one)."""
    from llvmlite import ir
    from numba.core import types as nt

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        vals = [context.cast(builder, v, ty, nt.float32) for v, ty in zip(args, sig.args, strict=True)]
        f32 = ir.FloatType()
        fn = builder.module.declare_intrinsic("llvm.fma", [f32], ir.FunctionType(f32, [f32, f32, f32]))
        return builder.call(fn, vals)

    return nt.float32(a, b, c), codegen


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


def _itof_typer(typingctx: Any, v: Any) -> Any:
    """The unsigned integer ``v`` as a float of its width (float32 for 32 bits), exactly for
    values below 2^24."""
    from llvmlite import ir
    from numba.core import types as nt

    ft = nt.float32 if v.bitwidth == 32 else nt.float64

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        return builder.uitofp(args[0], ir.FloatType() if v.bitwidth == 32 else ir.DoubleType())

    return ft(v), codegen


def _value_py(code: Any, shift: Any, z: Any, p: Any) -> Any:
    """The element ``code`` times 2^shift as a float of z's width (the input's format of ``p``),
    NaN for NAN_SHIFT. Exact: every such value is one of the input format's (from a float64
    input, or a float32 one: MX scales reach down to 2^-127, elements' bits to 2^-9). The
    significand (at most 4 bits) converted to a float times a power of two built from its bits:
    cheaper than the general decoder, and no table lookup (a gather keeps a loop scalar)."""
    one = _u(1, z)
    m_t = p.mantissa_bits
    mag = _u(code & _u(_shl(one, p.sign_bit) - one, z), z)
    e = _s(_shr(mag, m_t), z)
    sig = _u(_u(mag & _u(_shl(one, m_t) - one, z), z) | _shl(_u(e != 0, z), m_t), z)
    # the exponent of sig's last bit (a subnormal element, e == 0, has the exponent of e == 1)
    ex = _s(_s(max(e, _s(1, z)) + _s(p.emin - 1 - m_t, z), z) + _s(shift, z), z)
    m = p.in_mantissa_bits
    biased = _s(ex + _s(p.in_bias, z), z)
    zero = _s(0, z)
    # 2^ex: a normal power of two, or below the input's normal range a subnormal one
    bits = _shl(_u(biased, z), m) if biased > zero else _shl(one, _s(max(_s(m - 1, z) + biased, zero), z))
    v = _itof(sig) * _float(bits)
    v = -v if _shr(code, p.sign_bit) != 0 else v
    return v if shift != NAN_SHIFT else _float(_u(_shl(_u(p.in_exponent_mask, z), m) | _shl(one, m - 1), z))


def _rounded_f32_py(a: Any, rnd: Any, p: Any, stochastic: Any) -> Any:
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


def _round_f32_py(y: Any, rnd: Any, p: Any, stochastic: Any) -> Any:
    """(code, overflow) of the float32 bits ``y`` (a number or an infinity) rounded into the
    element format of ``p`` (float32 into it, 32 lanes, saturating, no true exponent): what
    :func:`floatlab.rounding._kernels._encode_one_py` gives for these at shift 0, in about half
    its operations. ``rnd`` is the random word of stochastic rounding, which ``stochastic``
    (a constant of the compiled loop: its work is left out of the other modes' loops) asks for.
    The loops that round in place call :func:`_rounded_f32_py` instead."""
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


def _elem_f32_py(code: Any, p: Any, sub: Any) -> Any:
    """The float32 value of the element ``code`` (format of ``p``, at most 8 bits: every value
    is a float32), ``sub`` = 2^(emin - mantissa bits): a normal element's bits moved into
    float32's fields and its exponent rebiased by one add, a subnormal one's significand times
    ``sub``. The value the code's bits spell out (an infinity's too, as :func:`_value_py`)."""
    one = _u(1, code)
    mag = _u(code & _u(_shl(one, p.sign_bit) - one, code), code)
    m_t = p.mantissa_bits
    bits = _u(_shl(mag, 23 - m_t) + _u((p.emin + 126) << 23, code), code)
    v = _f32(bits) if mag >= _shl(one, m_t) else _itof(mag) * sub
    return _f32(_u(_bits32(v) | _shl(_shr(code, p.sign_bit), 31), code))


def _block_amax_py(
    x: Any, base: Any, r0: Any, r1: Any, cols: Any, w: Any, bc: Any, z: Any, mag_mask: Any
) -> Any:
    """Each block's largest magnitude, as bits (a NaN's bits above an infinity's above every
    number's), over rows r0..r1 and ``w`` columns from ``base``, blocks ``bc`` wide: a strip of one
    row straight from the values, a taller one through its columns' maxima."""
    nb = (w + bc - 1) // bc
    bmax = np.zeros(nb, x.dtype)
    if r1 - r0 == 1:
        xs = x[base + r0 * cols : base + r0 * cols + w]
        for b in range(nb):
            seg = xs[b * bc : b * bc + bc]
            a = _u(0, z)
            for c in range(seg.size):
                a = max(a, _u(seg[c] & mag_mask, z))
            bmax[b] = a
    else:
        amax = np.zeros(w, x.dtype)
        for r in range(r0, r1):
            xs = x[base + r * cols : base + r * cols + w]
            for c in range(w):
                amax[c] = max(amax[c], _u(xs[c] & mag_mask, z))
        for b in range(nb):
            seg = amax[b * bc : b * bc + bc]
            a = _u(0, z)
            for c in range(seg.size):
                a = max(a, seg[c])
            bmax[b] = a
    return bmax


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


def _moved_round_py(u: Any, sh: Any, i: Any, z: Any, p: Any, lo_bias: Any, how: Any) -> Any:
    """(magnitude bits, the moved smallest normal, the rounded magnitude, overflowed) of the
    input bits ``u`` (flat index ``i``) in a block of shift ``sh``, rounded in place by the E8M0
    loop's fast path: stochastically (float32 rows) with the random word of ``i``, or to nearest
    even. ``how`` = (stochastic, the two key words, the random mask, the magnitude mask)."""
    stochastic, key0, key1, rmask, mag_mask = how
    eb, top = _moved(sh, z, p, lo_bias)
    a = _u(u & mag_mask, z)
    if stochastic:
        rm, over = _stochastic(a, z, _random32(i, key0, key1), rmask, p.mantissa_bits, eb, top)
    else:
        rm, over = _nearest(a, z, p.in_mantissa_bits, p.mantissa_bits, eb, top)
    return a, eb, rm, over


def _e8m0_blocks_kernel_py(
    x: Any, shape: Any, block: Any, chunk: Any, rule: Any, codes: Any, scales: Any, values: Any,
    counts: Any, z: Any, pt: Any, sr: Any,
) -> None:  # fmt: skip
    """Block scaling with E8M0 (power-of-two) scales: the bits ``x`` (float32 or float64) of an
    (outer, R, C) array in blocks of ``block`` = (br, bc), ``chunk`` columns per work item.

    ``rule`` = (emax of the element, rceil, the element max's fraction in the input's fraction
    bits). A block's shared exponent is floor(log2(amax)) - emax (the OCP rule, "floor"), plus one
    under ``rceil`` when amax's significand exceeds the element max's; clamped below at -127;
    above 127 it is the NaN scale (floor) or 127 (rceil). A block holding an inf or NaN gets the
    NaN scale (255) and zero codes. Each value is rounded into the element format with its
    exponent range moved by the shared exponent (no ``v / 2^s`` is formed, so nothing rounds on
    the way). When ``codes`` is not empty it gets the element codes and ``counts[it]`` the item's
    nonzero, flushed, subnormal, inexact and saturated values over its finite blocks; when
    ``values`` is not empty it gets element value times scale (exact, in the input's format).
    ``sr`` is None, or not None for stochastic rounding (a type: each kind of mode gets its own
    compiled loop, and the random words cost the other modes nothing).
    """
    p = EncodeParams(*pt)
    cols = shape[2]
    bc = block[1]
    one = _u(1, z)
    mag_mask = _shr(_u(_u(0, z) - one, z), 1)
    code_mag = _u(_shl(one, p.sign_bit) - one, z)
    m_t = p.mantissa_bits
    stochastic = sr is not None
    key0 = _u(p.key0, np.uint32(0))
    key1 = _u(p.key1, np.uint32(0))
    m_in = p.in_mantissa_bits
    rmask = _u(p.random_mask, z)
    # round to nearest even, or stochastically from float32 rows, saturating, into a plain format:
    # the values rounded in place (the rule of floatlab.rounding.cpu.in_place, read off p here)
    plain = (p.ftz == 0) & (p.fnuz == 0) & (p.daz == 0)
    nearest = plain & ((m_in == 23) if stochastic else (p.mode_rne != 0))
    how = (stochastic, key0, key1, rmask, mag_mask)
    sign_mask = _u(~mag_mask, z)
    lo_bias = _s(p.emin + p.in_bias, z)  # the element's smallest normal, biased, at shift 0
    nan_value = _float(_u(_shl(_u(p.in_exponent_mask, z), m_in) | _shl(one, m_in - 1), z))
    zero = _u(0, z)
    for it in prange(counts.shape[0]):
        base, r0, r1, c0, c1, s0 = _tile(it, shape, block, chunk)
        w = c1 - c0
        nb = (w + bc - 1) // bc
        bmax = _block_amax(x, base, r0, r1, cols, w, bc, z, mag_mask)
        # the rule, one block per lane; the scales; the shifts spread over the columns
        shift_b = np.empty(nb, np.int32)
        for b in range(nb):
            shift_b[b] = _e8m0_rule(bmax[b], z, p, rule)
        sc = scales[s0 : s0 + nb]
        for b in range(nb):
            sc[b] = shift_b[b] + 127  # (NAN_SHIFT + 127 is the NaN code, 255)
        shift = shift_b if bc == 1 else np.empty(w, np.int32)
        if bc > 1:
            for b in range(nb):
                shift[b * bc : b * bc + bc] = shift_b[b]
        # in place where each block's moved element range lies in the input's normal numbers
        # (its smallest normal and its largest value; a block of zeros or the NaN scale passes)
        fast = nearest
        for b in range(nb):
            sb = np.int64(shift_b[b])
            inside = (sb + p.emin + p.in_bias >= 1) & (sb + p.emax + p.in_bias <= 2 * p.in_bias)
            fast = fast & ((sb == NAN_SHIFT) | (bmax[b] == 0) | inside)
        if fast:
            if codes.size > 0:
                cnt = (zero, zero, zero, zero, zero)
                for r in range(r0, r1):
                    row = base + r * cols
                    xs = x[row : row + w]
                    cs = codes[row : row + w]
                    for c in range(w):
                        u = _u(xs[c], z)
                        sh = shift[c]
                        ok = sh != NAN_SHIFT
                        a, eb, rm, over = _moved_round(u, sh, row + c, z, p, lo_bias, how)
                        neg = _u((u & sign_mask) != zero, z)
                        code = _u(_nearest_code(rm, z, m_in, m_t, eb) | _shl(neg, p.sign_bit), z)
                        cs[c] = code if ok else zero
                        nonzero = ok & (a != zero)
                        below = (rm != zero) & (rm < _shl(_u(eb, z), m_in))  # (below the moved range)
                        cnt = _add5(
                            cnt, (nonzero, nonzero & (rm == zero), ok & below, ok & (rm != a), ok & over)
                        )
                for j in range(5):
                    counts[it, j] = cnt[j]
            if values.size > 0:
                for r in range(r0, r1):
                    row = base + r * cols
                    xs = x[row : row + w]
                    vs = values[row : row + w]
                    for c in range(w):
                        u = _u(xs[c], z)
                        sh = shift[c]
                        _a, _eb, rm, _over = _moved_round(u, sh, row + c, z, p, lo_bias, how)
                        v = _float(_u(rm | _u(u & sign_mask, z), z))
                        vs[c] = v if sh != NAN_SHIFT else nan_value
        elif codes.size > 0:
            cnt = (zero, zero, zero, zero, zero)
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
                    code = res.code if ok else zero
                    cs[c] = code
                    mag = _u(code & code_mag, z)
                    nonzero = ok & ((u & mag_mask) != 0)
                    flags = (
                        nonzero,
                        nonzero & (mag == 0),
                        ok & (mag != 0) & (_shr(mag, m_t) == 0),
                        ok & (res.inexact | res.overflow),
                        ok & res.overflow,
                    )
                    cnt = _add5(cnt, flags)
            for j in range(5):
                counts[it, j] = cnt[j]
            if values.size > 0:
                for r in range(r0, r1):
                    row = base + r * cols
                    cs = codes[row : row + w]
                    vs = values[row : row + w]
                    for c in range(w):
                        vs[c] = _value(_u(cs[c], z), shift[c], z, p)
        elif values.size > 0:
            for r in range(r0, r1):
                row = base + r * cols
                xs = x[row : row + w]
                vs = values[row : row + w]
                for c in range(w):
                    rnd = _random32(row + c, key0, key1) if stochastic else np.uint32(0)
                    sh = shift[c]
                    vs[c] = _value(_encode_one(_u(xs[c], z), z, rnd, p, sh).code, sh, z, p)


def _e4m3_blocks_kernel_py(
    x: Any, shape: Any, block: Any, chunk: Any, rule: Any, codes: Any, scales: Any, values: Any,
    counts: Any, z: Any, pt: Any, ps: Any, sr: Any,
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
    mode gets its own compiled loop). Round to nearest even, and stochastic rounding, into a
    format without flush-to-zero or fnuz zeros are loops of their own too, ``e4m3_blocks_rne``
    and ``e4m3_blocks_sr``, compiled with the global ``_IN_PLACE`` True (rounded in place: see
    :func:`floatlab.rounding._inplace._nearest_py` and ``_stochastic_py``; a flag read at run
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
    in_place = _IN_PLACE  # (a global: a constant of the compiled loop)
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
        base, r0, r1, c0, c1, s0 = _tile(it, shape, block, chunk)
        w = c1 - c0
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
        rcp = rcp_b if bc == 1 else np.empty(w, np.float32)
        s8c = s8_b if bc == 1 else np.empty(w, np.float32)
        if bc > 1:
            for b in range(nb):
                rcp[b * bc : b * bc + bc] = rcp_b[b]
                s8c[b * bc : b * bc + bc] = s8_b[b]
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


def _e4m3_one_py(u: Any, k: Any, s8: Any, rnd: Any, p: Any, how: Any) -> Any:
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


def _finite_amax_kernel_py(x: Any, out: Any, z: Any, inf_bits: Any) -> None:
    """out[i] = the largest magnitude bit pattern below ``inf_bits`` (the largest finite
    magnitude) in chunk i of TILE values of ``x``: a tensor's amax, infinities and NaNs left out."""
    mag_mask = _shr(_u(_u(0, z) - _u(1, z), z), 1)
    top = _u(inf_bits, z)
    for i in prange(out.size):
        xs = x[i * TILE : i * TILE + TILE]
        m = _u(0, z)
        for c in range(xs.size):
            v = _u(xs[c] & mag_mask, z)
            m = max(m, v if v < top else _u(0, z))
        out[i] = m


def fingerprint() -> str:
    """A short hash of the element functions' files (:mod:`floatlab.rounding._kernels`,
    :mod:`floatlab.rounding._inplace`) and this one, whose functions the loops here and the
    scaled-cast loops inline.

    >>> len(fingerprint())
    12
    """
    h = hashlib.sha256()
    for path in (_kernels.__file__, _inplace.__file__, __file__):
        with open(path, "rb") as fh:
            h.update(fh.read())
    return h.hexdigest()[:12]


def compile_into(numba: Any, out: dict[str, Any]) -> None:
    """Compile the block loops into ``out`` by name, on the element functions and intrinsics that
    :func:`floatlab.rounding._kernels.compile_into` has bound (it runs first)."""
    from numba.extending import intrinsic

    g = globals()
    g["prange"] = numba.prange
    for name in (*_kernels.INTRINSICS, "_encode_one", "_random32"):
        g[name] = getattr(_kernels, name)
    g["_float"] = intrinsic(_float_typer)
    g["_f32"] = intrinsic(_f32_typer)
    g["_bits32"] = intrinsic(_bits32_typer)
    g["_fma32"] = intrinsic(_fma32_typer)
    helper = numba.njit(nogil=True, error_model="numpy", forceinline=True)
    g["_tile"] = helper(_tile_py)
    g["_e8m0_rule"] = helper(_e8m0_rule_py)
    g["_block_amax"] = helper(_block_amax_py)
    g["_itof"] = intrinsic(_itof_typer)
    g["_value"] = helper(_value_py)
    g["_round_f32"] = helper(_round_f32_py)
    g["_elem_f32"] = helper(_elem_f32_py)
    for name in _kernels.INTRINSICS:
        setattr(_inplace, name, getattr(_kernels, name))
    g["_nearest"] = helper(_inplace._nearest_py)
    g["_stochastic"] = helper(_inplace._stochastic_py)
    g["_rounded_f32"] = helper(_rounded_f32_py)
    g["_moved_round"] = helper(_moved_round_py)
    g["_nearest_code"] = helper(_inplace._nearest_code_py)
    g["_e4m3_one"] = helper(_e4m3_one_py)
    g["_add5"] = helper(_inplace._add5_py)
    g["_moved"] = helper(_inplace._moved_py)
    parallel = numba.njit(parallel=True, cache=True, nogil=True, error_model="numpy")
    stamp = fingerprint()
    for name, fn_name, bound in (
        ("e8m0_blocks", "e8m0_blocks", g),
        ("e4m3_blocks", "e4m3_blocks", g),
        ("e4m3_blocks_rne", "e4m3_blocks", {**g, "_IN_PLACE": True}),
        ("e4m3_blocks_sr", "e4m3_blocks", {**g, "_IN_PLACE": True}),
        ("finite_amax", "finite_amax", g),
    ):
        fn = g[f"_{fn_name}_kernel_py"]
        # numba's cache files are named after the function: the fingerprint in the name makes a
        # changed element function a new name, so the loop is compiled anew
        stamped = types.FunctionType(fn.__code__, bound, fn.__name__, fn.__defaults__, fn.__closure__)
        stamped.__qualname__ = f"{fn.__name__}{name[len(fn_name) :]}_{stamp}"
        out[name] = parallel(stamped)
