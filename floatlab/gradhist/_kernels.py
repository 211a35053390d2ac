"""Counting loops behind :mod:`floatlab.gradhist` (private).

Every finite nonzero value is binned by its exponent ``E = floor(log2|x|)``, read from the bit
fields (a subnormal input is normalised through its leading one), and by a *cell* of its
significand ``s = |x| / 2^E`` in ``[1, 2)``. The 599 cells of a binade, in increasing order:

* ``c = 2j`` (j = 0..254): the single point ``s = 1 + j/256`` (j = 0 is the exact power of two);
* ``c = 2j + 1``: the open interval ``(1 + j/256, 1 + (j+1)/256)``;
* ``c = 510 + 2(L-8)`` (L = 8..51): the point ``s = 2 - 2^-L`` (L leading one bits, then zeros);
* ``c = 511 + 2(L-8)``: the open interval ``(2 - 2^-L, 2 - 2^-(L+1))``;
* ``c = 598``: the point ``s = 2 - 2^-52`` (all 52 fraction bits set).

So a cell is either one number or an open interval between two numbers, and the boundaries of
every class of a rounding (flush to zero, subnormal, normal, overflow) fall on cell boundaries
or points for power-of-two scales: the class counts are exact. Cells are defined on the real
line, not per dtype, so histograms of float64, float32, float16 and bfloat16 data merge.

:func:`cells_numpy` is the readable vectorised reference; :func:`count32` and :func:`count64`
are the compiled loops (numba, imported on first use only) for large float32 and float64
arrays, launched as the rounding loops are (:func:`floatlab.rounding.threads.loop_threads`: on
one thread below two million values). Both return a :class:`Counts`.

>>> import numpy as np
>>> from floatlab.formats import FP32
>>> x = np.array([1.0, 1.5, -0.0, np.inf, 2.0**-149], np.float32)
>>> kind, sign, e, c = cells_numpy(x.view(np.uint32).astype(np.uint64), FP32)
>>> kind.tolist(), e[kind == 0].tolist(), c[kind == 0].tolist()
([0, 0, 1, 2, 0], [0, 0, -149], [0, 256, 0])
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from floatlab.formats import FloatFormat
from floatlab.rounding.bound import compile_bound
from floatlab.rounding.threads import loop_threads

__all__ = [
    "E_MAX",
    "E_MIN",
    "NCELL",
    "Counts",
    "cell_bounds",
    "cells_numpy",
    "count32",
    "count64",
    "count_codes",
    "count_numpy",
]

NCELL = 599
E_MIN = -1074  # floor(log2) of float64's smallest subnormal: the bottom of the global axis
E_MAX = 1023
N_EXP = E_MAX - E_MIN + 1

# kinds returned by cells_numpy
FINITE, ZERO, INF, NAN = 0, 1, 2, 3

_M44 = (1 << 44) - 1
_M52 = (1 << 52) - 1


@dataclass
class Counts:
    """What one pass over an array found: ``block[sign, E - e0, cell]`` and the special values.

    ``zeros`` and ``inf`` are indexed by sign (0 positive, 1 negative); ``subnormal`` counts the
    inputs that were subnormal in their own format.

    >>> from floatlab.formats import FP16
    >>> c = count_numpy(np.array([0x3C00, 0x8000, 0x0001], np.uint16), FP16)
    >>> c.e0, c.block.shape, c.zeros.tolist(), c.subnormal
    (-24, (2, 25, 599), [0, 1], 1)
    """

    e0: int
    block: npt.NDArray[np.int64]
    zeros: npt.NDArray[np.int64]
    inf: npt.NDArray[np.int64]
    nan: int
    subnormal: int


def cell_bounds(c: int) -> tuple[Fraction, Fraction, bool]:
    """The significand interval of cell ``c``: (lo, hi, is_point).

    A point cell holds only ``lo`` (= ``hi``); any other cell is the open interval (lo, hi).

    >>> cell_bounds(0), cell_bounds(1)
    ((Fraction(1, 1), Fraction(1, 1), True), (Fraction(1, 1), Fraction(257, 256), False))
    """
    if not 0 <= c < NCELL:
        raise ValueError(f"cell {c!r}: expected an integer from 0 to {NCELL - 1}")
    if c < 510:
        j = c // 2
        lo = Fraction(256 + j, 256)
        return (lo, lo, True) if c % 2 == 0 else (lo, Fraction(257 + j, 256), False)
    if c == NCELL - 1:
        p = 2 - Fraction(1, 2**52)
        return p, p, True
    L = 8 + (c - 510) // 2
    lo = 2 - Fraction(1, 2**L)
    return (lo, lo, True) if c % 2 == 0 else (lo, 2 - Fraction(1, 2 ** (L + 1)), False)


# ---- the vectorised reference ---------------------------------------------------------------
def _msb(v: npt.NDArray[np.uint64]) -> npt.NDArray[np.int64]:
    """Index of the leading one of each (nonzero, < 2^53) integer."""
    # below 2^53 the float64 conversion is exact, so frexp's exponent is the bit length
    e: npt.NDArray[np.int64] = np.frexp(v.astype(np.float64))[1].astype(np.int64)
    return e - 1


def _cell52(f52: npt.NDArray[np.uint64]) -> npt.NDArray[np.int64]:
    """Cell of each 52-bit fraction (left-aligned significand bits below the leading one)."""
    t8 = (f52 >> np.uint64(44)).astype(np.int64)
    c: npt.NDArray[np.int64] = 2 * t8 + ((f52 & np.uint64(_M44)) != 0)
    top = t8 == 255
    if top.any():
        f = f52[top]
        inv = ~f & np.uint64(_M52)
        ones = inv == 0
        msb = _msb(np.where(ones, np.uint64(1), inv))
        below = (f & ((np.uint64(1) << msb.astype(np.uint64)) - np.uint64(1))) != 0
        L = 51 - msb
        c[top] = np.where(ones, NCELL - 1, 510 + 2 * (L - 8) + below)
    return c


def cells_numpy(
    bits: npt.NDArray[np.uint64], fmt: FloatFormat
) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.int8], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """(kind, sign, E, cell) of each bit pattern of ``fmt`` (kind: 0 finite nonzero, 1 zero,
    2 infinity, 3 NaN; E and cell are meaningful for kind 0 only)."""
    p, eb = fmt.mantissa_bits, fmt.exponent_bits
    bits = np.asarray(bits, np.uint64)
    sign = ((bits >> np.uint64(p + eb)) & np.uint64(1)).astype(np.int8)
    mag = bits & np.uint64((1 << (p + eb)) - 1)
    e = (mag >> np.uint64(p)).astype(np.int64)
    f = mag & np.uint64((1 << p) - 1)
    top = (1 << eb) - 1
    if fmt.encoding == "ieee":
        nan = (e == top) & (f != 0)
        inf = (e == top) & (f == 0)
    elif fmt.encoding == "fn":
        nan = (mag == np.uint64(fmt.sign_mask - 1)) if fmt.has_nan else np.zeros(bits.shape, bool)
        inf = np.zeros(bits.shape, bool)
    else:  # fnuz: the code of "negative zero" is the NaN
        nan = bits == np.uint64(fmt.sign_mask)
        inf = np.zeros(bits.shape, bool)
    zero = (mag == 0) & ~nan
    kind = np.full(bits.shape, FINITE, np.int8)
    kind[zero], kind[inf], kind[nan] = ZERO, INF, NAN
    sub = (e == 0) & (f != 0)
    E = e - fmt.bias
    f52 = f << np.uint64(52 - p)
    if sub.any():
        fs = f[sub]
        q = _msb(fs)
        E[sub] = fmt.emin - p + q
        f52[sub] = (fs ^ (np.uint64(1) << q.astype(np.uint64))) << (52 - q).astype(np.uint64)
    c = _cell52(f52)
    return kind, sign, E, c


def _fold(
    kind: npt.NDArray[np.int8],
    sign: npt.NDArray[np.int8],
    E: npt.NDArray[np.int64],
    c: npt.NDArray[np.int64],
    weight: npt.NDArray[np.int64] | None,
    subnormal: int,
) -> Counts:
    """Counts from per-value (or, with ``weight``, per-code) classifications."""
    w = np.ones(kind.shape, np.int64) if weight is None else weight

    def total(mask: npt.NDArray[np.bool_]) -> int:
        return int(w[mask].sum())

    zeros = np.array([total((kind == ZERO) & (sign == s)) for s in (0, 1)], np.int64)
    inf = np.array([total((kind == INF) & (sign == s)) for s in (0, 1)], np.int64)
    fin = (kind == FINITE) & (w != 0)
    if fin.any():
        e0 = int(E[fin].min())
        n = int(E[fin].max()) - e0 + 1
        flat = (sign[fin].astype(np.int64) * n + (E[fin] - e0)) * NCELL + c[fin]
        if weight is None:
            block = np.bincount(flat, minlength=2 * n * NCELL).astype(np.int64)
        else:  # np.add.at keeps int64 counts exact (bincount's weights are float64)
            block = np.zeros(2 * n * NCELL, np.int64)
            np.add.at(block, flat, w[fin])
        block = block.reshape(2, n, NCELL)
    else:
        e0, block = 0, np.zeros((2, 0, NCELL), np.int64)
    return Counts(e0, block, zeros, inf, total(kind == NAN), subnormal)


def count_numpy(bits: npt.NDArray[Any], fmt: FloatFormat) -> Counts:
    """Counts of the bit patterns ``bits`` of ``fmt`` with the vectorised reference.

    >>> from floatlab.formats import FP32
    >>> count_numpy(np.array([1.0, 3.0], np.float32).view(np.uint32), FP32).block.sum()
    np.int64(2)
    """
    b = np.asarray(bits).reshape(-1).astype(np.uint64)
    kind, sign, E, c = cells_numpy(b, fmt)
    e_field = (b >> np.uint64(fmt.mantissa_bits)) & np.uint64((1 << fmt.exponent_bits) - 1)
    sub = int(np.count_nonzero((kind == FINITE) & (e_field == 0)))
    return _fold(kind, sign, E, c, None, sub)


_CODE_TABLES: dict[FloatFormat, tuple[npt.NDArray[Any], ...]] = {}


def count_codes(codes: npt.NDArray[Any], fmt: FloatFormat) -> Counts:
    """Counts of an array of 8- or 16-bit codes: a count per code, then one table lookup.

    >>> from floatlab.formats import BF16
    >>> count_codes(np.array([0x3F80, 0x7F80, 0xFFC0], np.uint16), BF16).inf.tolist()
    [1, 0]
    """
    flat = np.asarray(codes).reshape(-1)
    ncodes = 1 << fmt.bits
    per_code = np.zeros(ncodes, np.int64)
    step = 1 << 22  # bincount widens to intp: bounded chunks keep the temporary small
    for i in range(0, flat.size, step):
        chunk = flat[i : i + step]
        if fmt.bits < chunk.dtype.itemsize * 8:  # 6- and 4-bit codes sit in the low bits of a byte
            chunk = chunk & np.array(ncodes - 1, chunk.dtype)
        per_code += np.bincount(chunk, minlength=ncodes)[:ncodes]
    table = _CODE_TABLES.get(fmt)
    if table is None:
        all_codes = np.arange(ncodes, dtype=np.uint64)
        kind, sign, E, c = cells_numpy(all_codes, fmt)
        is_sub = (kind == FINITE) & ((all_codes & np.uint64(fmt.exponent_mask)) == 0)
        table = _CODE_TABLES[fmt] = (kind, sign, E, c, is_sub)
    kind, sign, E, c, is_sub = table
    return _fold(kind, sign, E, c, per_code, int(per_code[is_sub].sum()))


# ---- the compiled loops: plain Python, compiled against each other by _compile -----------------
prange: Any = range  # (numba's prange in the compiled loops)

_U32 = np.uint32
_F32 = _U32(0x7FFFFF)
_T32 = _U32(15)
_L32 = _U32(0x7FFF)
_ABS32 = _U32(0x7FFFFFFF)
_255_32 = _U32(255)
_1_32 = _U32(1)
_S17_32 = _U32(17)
_S31_32 = _U32(31)

# spec slots of the per-thread counters
_SP_ZERO, _SP_INF, _SP_NAN, _SP_SUB = 0, 2, 4, 5


def _cell52_one(f52: Any) -> Any:
    """Cell of one 52-bit fraction (int64); the scalar twin of :func:`_cell52`."""
    t8 = f52 >> 44
    if t8 < 255:
        return 2 * t8 + np.int64((f52 & _M44) != 0)
    inv = ~f52 & _M52
    if inv == 0:
        return np.int64(NCELL - 1)
    msb = np.int64(math.frexp(np.float64(inv))[1] - 1)
    return 510 + 2 * (51 - msb - 8) + np.int64((f52 & ((np.int64(1) << msb) - 1)) != 0)


def _rare(
    s: Any, mag: Any, p: Any, eb: Any, bias: Any, e_lo: Any, n_e: Any, det: Any, touched: Any, spec: Any
) -> None:
    """One value off the fast path: a subnormal, a top-of-binade significand, inf or NaN.

    ``mag`` is the int64 magnitude (sign bit cleared); rows of ``det`` are zeroed on first use.
    """
    e = mag >> p
    f = mag & ((np.int64(1) << p) - 1)
    if e == (np.int64(1) << eb) - 1:
        if f == 0:
            spec[_SP_INF + s] += 1
        else:
            spec[_SP_NAN] += 1
        return
    if e == 0:
        if f == 0:
            spec[_SP_ZERO + s] += 1
            return
        spec[_SP_SUB] += 1
        q = np.int64(math.frexp(np.float64(f))[1] - 1)
        E = 1 - bias - p + q
        f52 = (f ^ (np.int64(1) << q)) << (52 - q)
    else:
        E = e - bias
        f52 = f << (52 - p)
    row = s * n_e + (E - e_lo)
    if touched[row] == 0:
        det[row * NCELL : (row + 1) * NCELL] = 0
        touched[row] = 1
    det[row * NCELL + _cell52_one(f52)] += 1


def _run32(bits: Any, lo: Any, hi: Any, h: Any, d: Any, tc: Any, sp: Any) -> None:
    """float32 bit patterns ``bits[lo:hi]`` into one thread's counters: ``h``, a 2^18 table of
    (point?, sign, exponent, top 8 bits), and the rows ``d`` of the rare values."""
    for i in range(lo, hi):
        b = bits[i]
        f = b & _F32
        # off the fast path: the top 8 fraction bits all set (the leading-ones cells need
        # the lower bits) and nonzero subnormals (they are renormalised). |x| - 1 < 2^23 - 1
        # in uint32 picks the subnormals alone: zero wraps around to the top and stays on it
        if ((f >> _T32) == _255_32) | (((b & _ABS32) - _1_32) < _F32):
            _rare(np.int64(b >> _S31_32), np.int64(b & _ABS32), 23, 8, 127, -149, 277, d, tc, sp)
        else:
            # bit 17 marks a point: nothing set below the top 8 fraction bits
            h[(b >> _T32) | (_U32((b & _L32) == 0) << _S17_32)] += _1_32


def _run64(bits: Any, lo: Any, hi: Any, ebase: Any, h: Any, d: Any, tc: Any, sp: Any) -> None:
    """float64 bit patterns ``bits[lo:hi]`` into one thread's counters: the fast table ``h``
    covers the exponent fields ebase+1 .. ebase+255."""
    for i in range(lo, hi):
        b = np.int64(bits[i])  # a reinterpretation: the sign lands in bit 63
        s = (b >> 63) & 1
        mag = b & 0x7FFFFFFFFFFFFFFF
        f = b & _M52
        t8 = f >> 44
        er = (mag >> 52) - ebase
        if mag == 0:
            er = 0  # zeros use row 0 of the window, kept free for them
        if (t8 == 255) | ((mag != 0) & ((er < 1) | (er > 255))):
            _rare(s, mag, 52, 11, 1023, -1074, 2098, d, tc, sp)
        else:
            pt = np.int64((f & _M44) == 0)
            h[(pt << 17) | (s << 16) | (er << 8) | t8] += _1_32


def _part(t: Any, n: Any, nth: Any) -> tuple[Any, Any]:
    """The elements [lo, hi) of n that thread t of nth counts."""
    chunk = (n + nth - 1) // nth
    lo = t * chunk
    return lo, min(n, lo + chunk)


def _count32(bits: Any, hot: Any, det: Any, touched: Any, spec: Any) -> None:
    """float32 bit patterns, a part per thread, each into the thread's own counters."""
    for t in prange(hot.shape[0]):
        lo, hi = _part(t, bits.size, hot.shape[0])
        _run32(bits, lo, hi, hot[t], det[t], touched[t], spec[t])


def _count64(bits: Any, ebase: Any, hot: Any, det: Any, touched: Any, spec: Any) -> None:
    """float64 bit patterns, a part per thread, each into the thread's own counters."""
    for t in prange(hot.shape[0]):
        lo, hi = _part(t, bits.size, hot.shape[0])
        _run64(bits, lo, hi, ebase, hot[t], det[t], touched[t], spec[t])


_lock = threading.Lock()
_compiled: dict[str, Any] = {}


def _compile() -> dict[str, Any]:
    """Import numba and compile the loops, each against the others' compiled selves (once per
    process; cached on disk)."""
    with _lock:
        if _compiled:
            return _compiled
        import numba

        table = dict(globals(), prange=numba.prange)
        helper = numba.njit(nogil=True, error_model="numpy", cache=True)
        compile_bound(table, ("_cell52_one", "_rare", "_run32", "_run64", "_part"), helper)
        loop = numba.njit(parallel=True, nogil=True, error_model="numpy", cache=True)
        compile_bound(table, ("_count32", "_count64"), loop)
        _compiled["32"] = table["_count32"]
        _compiled["64"] = table["_count64"]
        return _compiled


# at most this many elements per call: each thread's uint32 counters then cannot wrap
_MAX_CALL = 1 << 31


def _det_arrays(nth: int, n_e: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.uint8]]:
    # np.empty: the rare-value rows are zeroed by the loop on first use, so untouched rows
    # (almost all of them) cost no memory traffic
    return np.empty((nth, 2 * n_e * NCELL), np.int64), np.zeros((nth, 2 * n_e), np.uint8)


def _fold_det(
    det: npt.NDArray[np.int64], touched: npt.NDArray[np.uint8], block: npt.NDArray[np.int64]
) -> None:
    rows_all = block.reshape(-1, NCELL)
    for t in range(det.shape[0]):
        rows = np.flatnonzero(touched[t])
        if rows.size:
            rows_all[rows] += det[t].reshape(-1, NCELL)[rows]


def _spec_counts(spec: npt.NDArray[np.int64], block: npt.NDArray[np.int64], e_lo: int) -> Counts:
    s = spec.sum(axis=0)
    return Counts(
        e_lo,
        block,
        s[_SP_ZERO : _SP_ZERO + 2].copy(),
        s[_SP_INF : _SP_INF + 2].copy(),
        int(s[_SP_NAN]),
        int(s[_SP_SUB]),
    )


def count32(bits: npt.NDArray[np.uint32]) -> Counts:
    """Counts of 1-d contiguous float32 bit patterns (the compiled loop).

    >>> int(count32(np.array([1.0, 2.0**-140, 0.0], np.float32).view(np.uint32)).block.sum())
    2
    """
    kern = _compile()["32"]
    # a small array runs on one thread, as the rounding loops do, with one set of counters
    with loop_threads(bits.size) as nth:
        n_e = 277  # float32 exponents -149 .. 127
        block = np.zeros((2, n_e, NCELL), np.int64)
        spec_total = np.zeros((1, 8), np.int64)
        for start in range(0, max(bits.size, 1), _MAX_CALL):
            part = bits[start : start + _MAX_CALL]
            hot = np.zeros((nth, 1 << 18), np.uint32)
            det, touched = _det_arrays(nth, n_e)
            spec = np.zeros((nth, 8), np.int64)
            kern(part, hot, det, touched, spec)
            h = hot.sum(axis=0, dtype=np.int64).reshape(2, 2, 256, 256)  # [point, sign, e field, top 8]
            # normal exponent fields 1..254 are E = e - 127, rows 23..276 (row = E + 149)
            block[:, 23:, 0:510:2] += h[1, :, 1:255, 0:255]
            block[:, 23:, 1:510:2] += h[0, :, 1:255, 0:255]
            spec[0, _SP_ZERO : _SP_ZERO + 2] += h[1, :, 0, 0]
            inf = h[1, :, 255, 0]
            spec[0, _SP_INF : _SP_INF + 2] += inf
            spec[0, _SP_NAN] += int(h[:, :, 255, :].sum() - inf.sum())
            _fold_det(det, touched, block)
            spec_total += spec.sum(axis=0)
    return _spec_counts(spec_total, block, -149)


def _window_base(bits: npt.NDArray[np.uint64]) -> int:
    """An exponent-field base whose 255-wide window likely holds most of the data."""
    sample = bits[:: max(1, bits.size // 4096)]
    e = ((sample >> np.uint64(52)) & np.uint64(0x7FF)).astype(np.int64)
    e = e[(e > 0) & (e < 0x7FF)]
    centre = int(np.median(e)) if e.size else 1023
    return min(max(centre - 128, 0), 0x7FF - 256)


def count64(bits: npt.NDArray[np.uint64]) -> Counts:
    """Counts of 1-d contiguous float64 bit patterns (the compiled loop).

    >>> int(count64(np.array([1.0, 2.0**-1074, 0.0]).view(np.uint64)).block.sum())
    2
    """
    kern = _compile()["64"]
    with loop_threads(bits.size) as nth:
        n_e = N_EXP
        block = np.zeros((2, n_e, NCELL), np.int64)
        spec_total = np.zeros((1, 8), np.int64)
        for start in range(0, max(bits.size, 1), _MAX_CALL):
            part = bits[start : start + _MAX_CALL]
            ebase = _window_base(part)
            hot = np.zeros((nth, 1 << 18), np.uint32)
            det, touched = _det_arrays(nth, n_e)
            spec = np.zeros((nth, 8), np.int64)
            kern(part, np.int64(ebase), hot, det, touched, spec)
            h = hot.sum(axis=0, dtype=np.int64).reshape(2, 2, 256, 256)  # [point, sign, window row, top 8]
            # window row r (1..255) is the exponent field ebase + r: E = ebase + r - 1023, row E + 1074
            r0 = ebase + 1 + 51
            block[:, r0 : r0 + 255, 0:510:2] += h[1, :, 1:, 0:255]
            block[:, r0 : r0 + 255, 1:510:2] += h[0, :, 1:, 0:255]
            spec[0, _SP_ZERO : _SP_ZERO + 2] += h[1, :, 0, 0]
            _fold_det(det, touched, block)
            spec_total += spec.sum(axis=0)
    return _spec_counts(spec_total, block, E_MIN)
