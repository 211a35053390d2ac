"""The block-scaling loops (numba source, private to :mod:`floatlab.rounding`): MX's E8M0 scales,
on the element functions of :mod:`floatlab.rounding._kernels`, and the tiling and block maxima
that the E4M3-scaled loop shares.

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
* a helper that holds loops is inlined into the kernel (:func:`~floatlab.rounding._intrinsics.element`),
  and where a work item chooses between two roundings (in place or general) each is a copy of
  the passes of its own, picked by a type (None or not), never a flag read inside an element loop.

The E4M3-scaled loop (NVFP4) is in :mod:`floatlab.rounding._e4m3_kernels`, on the tiling and the
block maxima here. Every loop carries the fingerprint of the kernel files in its name
(:data:`floatlab.rounding._intrinsics.STAMP`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import prange

from floatlab.rounding._inplace import _add5, _moved, _nearest, _nearest_code, _stochastic
from floatlab.rounding._intrinsics import _clz, _float, _itof, _s, _shl, _shr, _u, element, parallel_loop
from floatlab.rounding._kernels import _encode_one, _random32
from floatlab.rounding.params import TILE, EncodeParams

#: the shift that marks a block with the NaN scale (one above the largest, so that shift + 127
#: is its E8M0 code, 255)
NAN_SHIFT = 128


@element
def _tile(it: Any, shape: Any, block: Any, chunk: Any) -> Any:
    """Work item ``it``: (its strip's first value, rows r0..r1, its width in columns, first scale)."""
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
        min(c0 + chunk, cols) - c0,
        (o * nbr + bi) * nbc + c0 // bc,
    )


@element
def _spread(per_block: Any, bc: Any, w: Any) -> Any:
    """The per-block numbers ``per_block`` spread over a strip's ``w`` columns, blocks ``bc``
    wide (for bc == 1, ``per_block`` itself)."""
    if bc == 1:
        return per_block
    out = np.empty(w, per_block.dtype)
    for b in range(per_block.size):
        out[b * bc : b * bc + bc] = per_block[b]
    return out


@element
def _block_amax(
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


@element
def _value(code: Any, shift: Any, z: Any, p: Any) -> Any:
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
    return v if shift != NAN_SHIFT else _nan_value(z, p)


@element
def _nan_value(z: Any, p: Any) -> Any:
    """The value of a block with the NaN scale: the input format's quiet NaN, a float of z's width."""
    m = p.in_mantissa_bits
    one = _u(1, z)
    return _float(_u(_shl(_u(p.in_exponent_mask, z), m) | _shl(one, m - 1), z))


@element
def _e8m0_rule(a: Any, z: Any, p: Any, rule: Any) -> Any:
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


@element
def _moved_round(u: Any, sh: Any, i: Any, z: Any, p: Any, lo_bias: Any, how: Any) -> Any:
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


@element
def _e8m0_code(u: Any, sh: Any, i: Any, z: Any, p: Any, lo_bias: Any, how: Any, ip: Any) -> Any:
    """(the element code, the flags (nonzero, flushed, subnormal, inexact, saturated)) of the input
    bits ``u`` (flat index ``i``) in a block of shift ``sh`` in the E8M0 loop: rounded in place
    (``ip`` not None, the fast path; see :func:`_moved_round`) or by the general element rounding
    (``ip`` None, a type: each is a loop of its own). The NaN scale gives code 0 and no flags."""
    stochastic, key0, key1, _rmask, mag_mask = how
    zero = _u(0, z)
    one = _u(1, z)
    m_in = p.in_mantissa_bits
    m_t = p.mantissa_bits
    ok = sh != NAN_SHIFT
    if ip is not None:
        a, eb, rm, over = _moved_round(u, sh, i, z, p, lo_bias, how)
        neg = _u((u & _u(~mag_mask, z)) != zero, z)
        code = _u(_nearest_code(rm, z, m_in, m_t, eb) | _shl(neg, p.sign_bit), z)
        nonzero = ok & (a != zero)
        below = (rm != zero) & (rm < _shl(_u(eb, z), m_in))  # (below the moved range)
        flags = (nonzero, nonzero & (rm == zero), ok & below, ok & (rm != a), ok & over)
        return (code if ok else zero), flags
    rnd = _random32(i, key0, key1) if stochastic else np.uint32(0)
    res = _encode_one(u, z, rnd, p, sh)
    code = res.code if ok else zero
    mag = _u(code & _u(_shl(one, p.sign_bit) - one, z), z)
    nonzero = ok & ((u & mag_mask) != 0)
    flags = (
        nonzero,
        nonzero & (mag == 0),
        ok & (mag != 0) & (_shr(mag, m_t) == 0),
        ok & (res.inexact | res.overflow),
        ok & res.overflow,
    )
    return code, flags


@element
def _e8m0_value(u: Any, sh: Any, i: Any, z: Any, p: Any, lo_bias: Any, how: Any, ip: Any) -> Any:
    """The element value times 2^sh (in the input's format) of the input bits ``u`` (flat index
    ``i``) in the E8M0 loop, rounded as :func:`_e8m0_code` rounds."""
    stochastic, key0, key1, _rmask, mag_mask = how
    if ip is not None:
        _a, _eb, rm, _over = _moved_round(u, sh, i, z, p, lo_bias, how)
        v = _float(_u(rm | _u(u & _u(~mag_mask, z), z), z))
        return v if sh != NAN_SHIFT else _nan_value(z, p)
    rnd = _random32(i, key0, key1) if stochastic else np.uint32(0)
    return _value(_encode_one(u, z, rnd, p, sh).code, sh, z, p)


@element
def _e8m0_passes(
    x: Any, codes: Any, values: Any, counts: Any, it: Any, base: Any, r0: Any, r1: Any, cols: Any,
    w: Any, shift: Any, z: Any, p: Any, lo_bias: Any, how: Any, ip: Any,
) -> None:  # fmt: skip
    """The element passes of work item ``it`` of the E8M0 loop, its shifts spread over the
    columns, rounded as ``ip`` says (:func:`_e8m0_code`): the codes and counts, then the values,
    read off the codes where the general routine made them, else rounded from the input."""
    zero = _u(0, z)
    if codes.size > 0:
        cnt = (zero, zero, zero, zero, zero)
        for r in range(r0, r1):
            row = base + r * cols
            xs = x[row : row + w]
            cs = codes[row : row + w]
            for c in range(w):
                code, flags = _e8m0_code(_u(xs[c], z), shift[c], row + c, z, p, lo_bias, how, ip)
                cs[c] = code
                cnt = _add5(cnt, flags)
        for j in range(5):
            counts[it, j] = cnt[j]
    if values.size > 0:
        from_codes = (ip is None) & (codes.size > 0)
        for r in range(r0, r1):
            row = base + r * cols
            vs = values[row : row + w]
            if from_codes:
                cs = codes[row : row + w]
                for c in range(w):
                    vs[c] = _value(_u(cs[c], z), shift[c], z, p)
            else:
                xs = x[row : row + w]
                for c in range(w):
                    vs[c] = _e8m0_value(_u(xs[c], z), shift[c], row + c, z, p, lo_bias, how, ip)


@parallel_loop
def e8m0_blocks(
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
    lo_bias = _s(p.emin + p.in_bias, z)  # the element's smallest normal, biased, at shift 0
    for it in prange(counts.shape[0]):
        base, r0, r1, w, s0 = _tile(it, shape, block, chunk)
        nb = (w + bc - 1) // bc
        bmax = _block_amax(x, base, r0, r1, cols, w, bc, z, mag_mask)
        # the rule, one block per lane; the scales; the shifts spread over the columns
        shift_b = np.empty(nb, np.int32)
        for b in range(nb):
            shift_b[b] = _e8m0_rule(bmax[b], z, p, rule)
        sc = scales[s0 : s0 + nb]
        for b in range(nb):
            sc[b] = shift_b[b] + 127  # (NAN_SHIFT + 127 is the NaN code, 255)
        shift = _spread(shift_b, bc, w)
        # in place where each block's moved element range lies in the input's normal numbers
        # (its smallest normal and its largest value; a block of zeros or the NaN scale passes)
        fast = nearest
        for b in range(nb):
            sb = np.int64(shift_b[b])
            inside = (sb + p.emin + p.in_bias >= 1) & (sb + p.emax + p.in_bias <= 2 * p.in_bias)
            fast = fast & ((sb == NAN_SHIFT) | (bmax[b] == 0) | inside)
        if fast:
            _e8m0_passes(x, codes, values, counts, it, base, r0, r1, cols, w, shift, z, p, lo_bias, how, 1)
        else:
            _e8m0_passes(x, codes, values, counts, it, base, r0, r1, cols, w, shift, z, p, lo_bias, how, None)


@parallel_loop
def finite_amax(x: Any, out: Any, z: Any, inf_bits: Any) -> None:
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
