"""Round to nearest even in place, in the input's own bit pattern (numba source, private to
:mod:`floatlab.rounding`): the element routine of the scaled casts' and the block loops' fast
paths, and two small helpers of those loops, compiled to be inlined
(:data:`floatlab.rounding._intrinsics.element`); the loops that inline them carry a fingerprint
of this file in their names (:data:`floatlab.rounding._intrinsics.STAMP`), so that a change here
compiles them anew.
"""

from __future__ import annotations

from typing import Any

from floatlab.rounding._intrinsics import _s, _shl, _shr, _u, element


@element
def _nearest(a: Any, z: Any, m_in: Any, m_t: Any, ebias: Any, top: Any) -> Any:
    """(the rounded magnitude's bits, overflowed) of the magnitude bits ``a`` (a number, of an
    IEEE input format with ``m_in`` fraction bits) rounded to nearest even into an element format
    with ``m_t`` fraction bits whose smallest normal number has the input's biased exponent
    ``ebias`` >= 1 (a lane-signed integer: the element's emin, moved by a block's shift, plus the
    input's bias), saturating at the bits ``top`` (the element's largest finite magnitude, moved).

    The value is rounded in place, in the input's own bit pattern: the bits below the element's
    last place (m_in - m_t of them in its normal range, one more per binade below it) are cut
    with round to nearest even's addend, and a carry walks into the exponent field by itself, so
    the result is the rounded value in the input's format, with no code formed and no decoding.
    An input's subnormal pattern is a multiple of the same quantum as the binade above it, so it
    rounds in place too; a place above the implicit bit (``a`` below the element's smallest
    subnormal q) leaves 0 or q. About a quarter of the general element routine's operations."""
    one = _u(1, z)
    ex = _s(_shr(a, m_in), z)
    s = _s(_s(m_in - m_t, z) + _s(max(_s(ebias - _s(max(ex, _s(1, z)), z), z), _s(0, z)), z), z)
    sc = _s(min(s, _s(m_in, z)), z)
    p2 = _shl(one, sc)
    # the last kept bit (at the place m_in it is the implicit bit, not the exponent's last one)
    odd = _u(_shr(_u(a | _shl(_u(ex != _s(0, z), z), m_in), z), sc) & one, z)
    r = _u(_u(a + _u(_u(_shr(p2, 1) - one, z) + odd, z), z) & ~_u(p2 - one, z), z)
    # (ebias - m_t < 2 never leaves the place m_in: the clamp only keeps the shift defined)
    qexp = _s(max(_s(ebias - _s(m_t, z), z), _s(1, z)), z)
    q = _shl(_u(qexp, z), m_in)
    r = r if s <= _s(m_in, z) else (q if a > _shl(_u(qexp - _s(1, z), z), m_in) else _u(0, z))
    over = r > top
    return (top if over else r), over


@element
def _stochastic(a: Any, z: Any, rnd: Any, rm: Any, m_t: Any, ebias: Any, top: Any) -> Any:
    """(the rounded magnitude's bits, overflowed) of the float32 magnitude bits ``a`` (a number
    or an infinity) rounded stochastically into an element format with ``m_t`` fraction bits,
    as :func:`_nearest` rounds to nearest even (same ``ebias`` and ``top``), in float32's own
    bit pattern, and with the door's rule for the random word ``rnd`` (uint32): the bits below
    the element's last place read as a 32-bit fraction of it, both cut to the mask ``rm`` (the
    word's top random_bits bits), and the value rounds up when the two add up to one place or
    more. A place above the implicit bit (``a`` below the element's smallest subnormal q) leaves
    0 or q, the fraction then being a / q's."""
    one = _u(1, z)
    zs = _s(0, z)
    ex = _s(_shr(a, 23), z)
    s = _s(_s(23 - m_t, z) + _s(max(_s(ebias - _s(max(ex, _s(1, z)), z), z), zs), z), z)
    # the significand (the implicit bit too), and the bits of it below the last place
    sig = _u(_u(a & _u(0x7FFFFF, z), z) | _shl(_u(ex != zs, z), 23), z)
    sc = _s(min(s, _s(24, z)), z)
    p2 = _shl(one, sc)
    rem = _u(sig & _u(p2 - one, z), z)
    up_sh = _s(min(max(_s(32, z) - s, zs), _s(31, z)), z)
    down_sh = _s(min(max(s - _s(32, z), zs), _s(31, z)), z)
    q = _u(_u(_shr(_shl(rem, up_sh), down_sh), z) & rm, z)
    r = _u(rnd & rm, z)
    # (r + q carries out of 32 bits)
    up = _shr(_u(_shr(r, 1) + _shr(q, 1) + (r & q & one), z), 31)
    kept = _u(_u(a & ~_u(p2 - one, z), z) + _shl(up, sc), z)
    qexp = _s(max(_s(ebias - _s(m_t, z), z), _s(1, z)), z)
    below = _shl(_u(qexp, z), 23) if up != 0 else _u(0, z)
    res = kept if s <= _s(23, z) else below
    over = res > top
    return (top if over else res), over


@element
def _nearest_code(r: Any, z: Any, m_in: Any, m_t: Any, ebias: Any) -> Any:
    """The element code's magnitude of a magnitude ``r`` that :func:`_nearest` rounded (same
    ``m_in``, ``m_t`` and ``ebias``): a normal element's fields read off r's by a shift and a
    rebias, a subnormal one's significand shifted down to its quantum."""
    one = _u(1, z)
    ex = _s(_shr(r, m_in), z)
    normal = r >= _shl(_u(ebias, z), m_in)
    sig = _u(_u(r & _u(_shl(one, m_in) - one, z), z) | _shl(_u(ex != _s(0, z), z), m_in), z)
    down = _s(min(_s(_s(m_in - m_t, z) + ebias - _s(max(ex, _s(1, z)), z), z), _s(m_in + 1, z)), z)
    low = _shr(sig, down)
    high = _u(_shr(r, _s(m_in - m_t, z)) - _shl(_u(ebias - _s(1, z), z), m_t), z)
    return high if normal else low


@element
def _moved(sh: Any, z: Any, p: Any, lo_bias: Any) -> Any:
    """(the element's smallest normal and its largest finite magnitude's bits) moved by the block
    shift ``sh``, for :func:`_nearest` (``lo_bias``: the element's emin plus the input's bias;
    a shift that moves the range below the input's normals is clamped: its blocks are zeros)."""
    eb = _s(max(_s(lo_bias + _s(sh, z), z), _s(1, z)), z)
    m_in = p.in_mantissa_bits
    top = _u(_shl(_u(p.max_code, z), m_in - p.mantissa_bits) + _shl(_u(eb - _s(1, z), z), m_in), z)
    return eb, top


@element
def _add5(c: Any, f: Any) -> Any:
    """Five lane-wide counters ``c`` plus five flags ``f``."""
    z = c[0]
    return (
        _u(c[0] + f[0], z), _u(c[1] + f[1], z), _u(c[2] + f[2], z), _u(c[3] + f[3], z), _u(c[4] + f[4], z)
    )  # fmt: skip
