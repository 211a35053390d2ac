"""The scaled-cast loop (numba source, private to :mod:`floatlab.rounding`): float32 values
multiplied by one float32 scale per block and rounded into a format, on the element functions of
:mod:`floatlab.rounding._kernels`, with the counts of what the cast did, in one pass.

The array is a C-contiguous (outer, R, C) view; a block is br rows by bc columns of it, each with
its own scale (1 x C: one scale per row or per tensor; 1 x k: tiles along the last axis; k x 1:
tiles down a middle axis; k x k: square blocks). A task is one row: its scales are one row of the
scale array, read one per block (bc > 1) or one per column (bc == 1), so that the element loop
never asks which block a value is in.

Beside them, the reduction of a low-precision policy: a tree of pairwise sums, each rounded to
nearest even into bfloat16 or fp16 (:func:`floatlab.rounding.pairwise_sums`).

Each format and each rounding routine is a loop of its own, chosen by the type of an argument
(``rne``, ``bf16``: None or a number): a choice read at run time would keep the element loop from
vectorising.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import prange

from floatlab.rounding._inplace import _add5, _nearest
from floatlab.rounding._intrinsics import _bits32, _f32, _fma32, _s, _shl, _u, element, parallel_loop
from floatlab.rounding._kernels import _cast16, _decode_one, _encode_one, _nonzero
from floatlab.rounding.params import DecodeParams, EncodeParams


@element
def _cast_one_door(v: Any, z: Any, p: Any, d: Any, tiny: Any) -> Any:
    """The float32 ``v`` (already scaled) rounded by ``p`` and decoded back by ``d``, exactly as
    the door's round loop does; with the flags (overflowed, not NaN), (result 0), (result
    subnormal: 0 < |q| < ``tiny``)."""
    r = _encode_one(_bits32(v), z, np.uint32(0), p, 0)
    q = _f32(_decode_one(r.code, r.sign, z, d, True))
    # the rounding overflowed (a plain cast would leave the range; saturation held it): an
    # infinity counts, a NaN (an all-ones exponent with a fraction) does not
    over = r.overflow & ~(r.special & (r.fraction != _u(0, z)))
    return q, over, q == 0, (q != 0) & (q > -tiny) & (q < tiny), False


@element
def _cast_one_rne(v: Any, z: Any, p: Any, d: Any, tiny: Any) -> Any:
    """:func:`_cast_one_door` for round to nearest even with saturation into a format without
    flush-to-zero or fnuz zeros, for a finite ``v``: rounded in place in float32's bit pattern
    (:func:`floatlab.rounding._inplace._nearest`), in about a quarter of the operations.
    The fifth flag says ``v`` was an infinity or a NaN, whose results here are not the door's:
    the caller then casts the whole array again by :func:`_cast_one_door`. ``tiny`` is unused:
    the smallest normal's bits come from ``p``."""
    m_t = p.mantissa_bits
    yb = _bits32(v)
    a = _u(yb & _u(0x7FFFFFFF, z), z)
    ebias = _s(p.emin + 127, z)
    # the largest finite magnitude's float32 bits (a normal code: its fields moved over, rebiased)
    top = _u(_shl(_u(p.max_code, z), 23 - m_t) + _u((p.emin + 126) << 23, z), z)
    r, over = _nearest(a, z, 23, m_t, ebias, top)
    q = _f32(_u(r | _u(yb & _u(0x80000000, z), z), z))
    return q, over, r == _u(0, z), (r != _u(0, z)) & (r < _shl(_u(ebias, z), 23)), a >= _u(0x7F800000, z)


@element
def _cast_one(v: Any, z: Any, p: Any, d: Any, tiny: Any, rne: Any) -> Any:
    """:func:`_cast_one_rne` when ``rne`` is not None, else :func:`_cast_one_door`: ``rne`` is a
    type, so that each is a loop of its own."""
    if rne is not None:
        return _cast_one_rne(v, z, p, d, tiny)
    return _cast_one_door(v, z, p, d, tiny)


@element
def _cast_row(
    xs: Any, qs: Any, srow: Any, bc: Any, nbc: Any, z: Any, p: Any, d: Any, tiny: Any, rne: Any
) -> Any:
    """One row: ``qs = round(xs * scale of its block)``, the scales ``srow`` one per block (bc > 1)
    or one per column (bc == 1), rounded by :func:`_cast_one`; the row's counts in lane-wide
    integers (overflowed, zero inputs, zero results, subnormal results, infinities and NaNs among
    the products)."""
    zero = _u(0, z)
    cnt = (zero, zero, zero, zero, zero)
    if bc == 1:
        for c in range(xs.size):
            xv = xs[c]
            q, over, zq, sub, sp = _cast_one(xv * srow[c], z, p, d, tiny, rne)
            qs[c] = q
            cnt = _add5(cnt, (over, xv == 0, zq, sub, sp))
    else:
        for b in range(nbc):
            s = srow[b]
            seg = xs[b * bc : b * bc + bc]
            qseg = qs[b * bc : b * bc + bc]
            for c in range(seg.size):
                xv = seg[c]
                q, over, zq, sub, sp = _cast_one(xv * s, z, p, d, tiny, rne)
                qseg[c] = q
                cnt = _add5(cnt, (over, xv == 0, zq, sub, sp))
    return cnt


#: rows of the result a task of the transposed loop gathers at once (16 float32: a cache line)
GROUP = 16


@element
def _scaled_task(
    g: Any, x: Any, scales: Any, shape: Any, block: Any, out: Any, z: Any, p: Any, d: Any, tiny: Any,
    rne: Any, tr: Any,
) -> Any:  # fmt: skip
    """Task ``g`` of :func:`scaled_round`: its rows cast by :func:`_cast_row`, and their counts in
    lane-wide integers. ``tr`` None: row g of the (outer, R, C) array; not None: GROUP rows of the
    (R, C) array whose transpose ``x`` holds, gathered into scratch a cache line at a time."""
    _, rows, cols = shape
    br, bc = block
    nbr = (rows + br - 1) // br
    nbc = (cols + bc - 1) // bc
    if tr is None:
        o = g // rows
        s0 = (o * nbr + (g - o * rows) // br) * nbc
        xs = x[g * cols : g * cols + cols]
        qs = out[g * cols : g * cols + cols]
        return _cast_row(xs, qs, scales[s0 : s0 + nbc], bc, nbc, z, p, d, tiny, rne)
    r0 = g * GROUP
    nr = min(GROUP, rows - r0)
    buf = np.empty((nr, cols), np.float32)
    # in squares of GROUP x GROUP, whose cache lines stay in the first-level cache
    for c0 in range(0, cols, GROUP):
        c1 = min(c0 + GROUP, cols)
        for k in range(nr):
            dst = buf[k, c0:c1]
            for c in range(c1 - c0):
                dst[c] = x[(c0 + c) * rows + r0 + k]
    zero = _u(0, z)
    cnt = (zero, zero, zero, zero, zero)
    for k in range(nr):
        r = r0 + k
        s0 = (r // br) * nbc
        qs = out[r * cols : r * cols + cols]
        cnt = _add5(cnt, _cast_row(buf[k], qs, scales[s0 : s0 + nbc], bc, nbc, z, p, d, tiny, rne))
    return cnt


@parallel_loop
def scaled_round(
    x: Any, scales: Any, shape: Any, block: Any, out: Any, z: Any, pt: Any, dt: Any, tiny: Any,
    rne: Any, tr: Any,
) -> Any:  # fmt: skip
    """out = round(x * scale of its block) for the float32 values ``x`` of an (outer, R, C) array
    (flat), ``scales`` flat over (outer, ceil(R / br), ceil(C / bc)); returns the counts
    (overflowed, zero inputs, zero results, subnormal results, infinities and NaNs among the
    products). A task is one row. With ``tr`` not None (a type: a loop of its own) the array is
    an (R, C) one held transposed: ``x`` is its (C, R) transpose, C-contiguous (flat), and
    ``out`` gets the (R, C) values C-contiguous; a task is GROUP rows of the result, gathered
    from x, so that no transposed copy of the whole input is made first."""
    p = EncodeParams(*pt)
    d = DecodeParams(*dt)
    outer, rows, _ = shape
    tasks = outer * rows if tr is None else (rows + GROUP - 1) // GROUP
    n_over = 0
    n_zx = 0
    n_zq = 0
    n_sub = 0
    n_sp = 0
    for g in prange(tasks):
        # (per task in lane-wide integers: a 64-bit sum of 32-bit lanes' flags halves the vector work)
        c_over, c_zx, c_zq, c_sub, c_sp = _scaled_task(
            g, x, scales, shape, block, out, z, p, d, tiny, rne, tr
        )
        n_over += np.int64(c_over)
        n_zx += np.int64(c_zx)
        n_zq += np.int64(c_zq)
        n_sub += np.int64(c_sub)
        n_sp += np.int64(c_sp)
    return n_over, n_zx, n_zq, n_sub, n_sp


@element
def _tile_scale(m: Any, z: Any, fmax: Any, eps: Any, keep: Any) -> Any:
    """The current scale of a tile whose largest magnitude has the bits ``m``:
    float32(fmax / max(float64 amax, eps)), the division in float64 and one rounding to float32
    (torchao's ``amax_to_scale``; NumPy's conversion rounds to nearest even, as LLVM's does),
    its bits then masked by ``keep`` (all ones, or the sign and exponent: rounded down to a power
    of two)."""
    a = np.float64(_f32(m))
    return _f32(_u(_bits32(np.float32(fmax / max(a, eps))) & keep, z))


@parallel_loop
def tile_cast(
    x: Any, shape: Any, block: Any, rule: Any, out: Any, scales: Any, counts: Any, z: Any, pt: Any, dt: Any,
    tiny: Any, rne: Any,
) -> None:  # fmt: skip
    """The scaled cast of current tile scaling in one pass: each tile of the float32 values ``x``
    of a C-contiguous (outer, R, C) array (flat) gets the scale of its own amax
    (:func:`_tile_scale`, ``rule`` = (fmax, eps, keep)), written to ``scales`` (flat over
    (outer, ceil(R / br), ceil(C / bc))), and is cast as the scaled_round loop casts, while it is
    still in the cache: tiles of 1 x bc along the rows (br == 1, a task per row) or br x 1 down
    them (bc == 1, a task per strip of br rows, one running maximum per column). Each task's row
    of ``counts`` gets the scaled_round loop's five counts, its largest tile amax's bits and the
    number of its tiles whose amax is an infinity or a NaN (their scale is not the recipe's: the
    caller casts again)."""
    p = EncodeParams(*pt)
    d = DecodeParams(*dt)
    _, rows, cols = shape
    br, bc = block
    fmax, eps, keep = rule
    nbr = (rows + br - 1) // br
    nbc = (cols + bc - 1) // bc
    mask = _u(0x7FFFFFFF, z)
    inf = _u(0x7F800000, z)
    for task in prange(counts.shape[0]):
        zero = _u(0, z)
        cnt = (zero, zero, zero, zero, zero)
        tmax = 0
        bad = 0
        if br == 1:
            xs = x[task * cols : task * cols + cols]
            qs = out[task * cols : task * cols + cols]
            srow = scales[task * nbc : task * nbc + nbc]
            for b in range(nbc):
                seg = xs[b * bc : b * bc + bc]
                m = _u(0, z)
                for c in range(seg.size):
                    m = max(m, _u(_bits32(seg[c]) & mask, z))
                tmax = max(tmax, np.int64(m))
                bad += np.int64(m >= inf)
                srow[b] = _tile_scale(m, z, fmax, eps, keep)
            cnt = _cast_row(xs, qs, srow, bc, nbc, z, p, d, tiny, rne)
        else:
            o = task // nbr
            r0 = (task - o * nbr) * br
            r1 = min(r0 + br, rows)
            colmax = np.zeros(cols, np.uint32)
            for r in range(r0, r1):
                xs = x[(o * rows + r) * cols : (o * rows + r) * cols + cols]
                for c in range(cols):
                    colmax[c] = max(colmax[c], _u(_bits32(xs[c]) & mask, z))
            srow = scales[task * cols : task * cols + cols]
            for c in range(cols):
                m = _u(colmax[c], z)
                tmax = max(tmax, np.int64(m))
                bad += np.int64(m >= inf)
                srow[c] = _tile_scale(m, z, fmax, eps, keep)
            for r in range(r0, r1):
                at = (o * rows + r) * cols
                cnt = _add5(
                    cnt, _cast_row(x[at : at + cols], out[at : at + cols], srow, 1, cols, z, p, d, tiny, rne)
                )
        for j in range(5):
            counts[task, j] = cnt[j]
        counts[task, 5] = tmax
        counts[task, 6] = bad


@element
def _fma_row(partials: Any, a_scale: Any, b_scale: Any, i: Any, acc: Any) -> None:
    """Output row i of :func:`fma_sum` into ``acc``."""
    a0 = a_scale[i, 0]
    b0 = b_scale[0]
    p0 = partials[0, i]
    for j in range(acc.size):
        acc[j] = np.float32(np.float32(a0 * b0[j]) * p0[j]) + np.float32(0.0)
    for t in range(1, partials.shape[0]):
        at = a_scale[i, t]
        bt = b_scale[t]
        pt_ = partials[t, i]
        for j in range(acc.size):
            acc[j] = _fma32(np.float32(at * bt[j]), pt_[j], acc[j])


@element
def _scale_row(row: Any, a0: Any, b0: Any) -> None:
    """A row of a single term scaled in its own memory (:func:`fma_one`)."""
    for j in range(row.size):
        row[j] = np.float32(np.float32(a0 * b0[j]) * row[j]) + np.float32(0.0)


@parallel_loop
def fma_sum(partials: Any, a_scale: Any, b_scale: Any, out: Any) -> None:
    """out[i, j] = the sum over t of s * partials[t, i, j], s = a_scale[i, t] * b_scale[t, j] in
    float32: the first term the float32 product (plus +0, as an FMA's sum of it and +0 gives),
    each later one added by a float32 fused multiply-add (LLVM's fma: rounded once, to nearest
    even, subnormals kept), in order of t. A task per output row; its sums advance side by side."""
    for i in prange(partials.shape[1]):
        _fma_row(partials, a_scale, b_scale, i, out[i])


@parallel_loop
def fma_one(partial: Any, a_scale: Any, b_scale: Any) -> None:
    """:func:`fma_sum` for one term (T = 1), in the partial's own memory:
    partial[i, j] = float32(a_scale[i, 0] * b_scale[0, j]) * partial[i, j] + 0 in float32 (one array:
    a second one that is the same memory would keep the loop from vectorising)."""
    b0 = b_scale[0]
    for i in prange(partial.shape[0]):
        _scale_row(partial[i], a_scale[i, 0], b0)


@element
def _finish_row(acc: Any, bias: Any, bf16: Any) -> tuple[int, int]:
    """A GEMM's output row, finished while it is in the cache: ``bias`` added (float32; an empty
    ``bias`` adds nothing), each value rounded in place to nearest even into bfloat16 (``bf16``
    not None) or fp16 (None); (the values that were not zero before the rounding, those not zero
    after it: a NaN is not a zero)."""
    if bias.size:
        for j in range(acc.size):
            acc[j] = acc[j] + bias[j]
    # three loops over the row (in the cache), each vectorised: one doing all three is not
    u = acc.view(np.uint32)
    nonzero = _nonzero(u)
    for j in range(acc.size):
        acc[j] = _f32(_cast16(_bits32(acc[j]), bf16))
    return nonzero, _nonzero(u)


@parallel_loop
def fma_sum_store(
    partials: Any, a_scale: Any, b_scale: Any, out: Any, bias: Any, counts: Any, bf16: Any
) -> None:
    """:func:`fma_sum`, then each output row finished by ``_finish_row`` (bias, the
    store's rounding); counts[i] = its two counts of row i."""
    for i in prange(partials.shape[1]):
        acc = out[i]
        _fma_row(partials, a_scale, b_scale, i, acc)
        counts[i, 0], counts[i, 1] = _finish_row(acc, bias, bf16)


@parallel_loop
def fma_one_store(partial: Any, a_scale: Any, b_scale: Any, bias: Any, counts: Any, bf16: Any) -> None:
    """:func:`fma_one`, then each row finished by ``_finish_row``, in the partial's own
    memory; counts[i] = its two counts of row i."""
    b0 = b_scale[0]
    for i in prange(partial.shape[0]):
        row = partial[i]
        _scale_row(row, a_scale[i, 0], b0)
        counts[i, 0], counts[i, 1] = _finish_row(row, bias, bf16)


@element
def _sum16(a: Any, b: Any, bf16: Any) -> Any:
    """fl(a + b) in float32, rounded to nearest even into bfloat16 (``bf16`` not None) or fp16
    (None), as float32: the correctly rounded sum of two values of the format (24 >= 2p + 2
    bits, no double rounding)."""
    return _f32(_cast16(_bits32(a + b), bf16))


@parallel_loop
def tree_rows(w: Any, bf16: Any) -> None:
    """Sum each row of the C-contiguous float32 (pre, n) ``w`` (n >= 1, values of bfloat16, ``bf16``
    not None, or of fp16, None) as a tree of pairwise sums: at a level of m values, value i < m // 2
    becomes ``_sum16(v[i], v[i + m // 2], bf16)``, and an odd level's last value moves to place
    m // 2; the sums land in ``w[:, 0]``. A task per row."""
    pre, n = w.shape
    for a in prange(pre):
        v = w[a]
        m = n
        while m > 1:
            h = m // 2
            for i in range(h):
                v[i] = _sum16(v[i], v[i + h], bf16)
            if m % 2:
                v[h] = v[2 * h]
            m = h + m % 2


@parallel_loop
def tree_cols(w: Any, bf16: Any) -> None:
    """:func:`tree_rows` down the middle axis of the C-contiguous (pre, n, post) ``w``,
    the post columns side by side; the sums land in ``w[:, 0, :]``. A task per outer index."""
    pre, n, post = w.shape
    for a in prange(pre):
        m = n
        while m > 1:
            h = m // 2
            for i in range(h):
                x = w[a, i]
                y = w[a, i + h]
                for j in range(post):
                    x[j] = _sum16(x[j], y[j], bf16)
            if m % 2:
                w[a, h] = w[a, 2 * h]
            m = h + m % 2
