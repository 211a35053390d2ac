"""Fused CPU kernels for the trainer's wide-precision GELU, layer norm and softmax.

NumPy computes these ops as a chain of whole-array passes on one core; here each is one pass over
its rows (layer norm, softmax: one row per token) or over the flat array (GELU). They apply only
where nothing is rounded inside the op (the caller checks that): each kernel does the arithmetic of
the NumPy code step for step in the array's own dtype (float32 arithmetic on float32 input, no
fused multiply-adds), sums a row in the same order as NumPy's pairwise sum (eight running sums,
then a tree), and leaves ``exp`` and ``tanh`` to NumPy's vector code (the C library's scalar ones
are several times slower), so the results are NumPy's bit for bit.

The kernels run on the calling thread. Cutting the rows across threads (each thread running the
whole op on its slice) was measured and dropped: on a step of the default transformer on 2 cores
it saved nothing (123 ms against 120 ms), because between the GEMMs the BLAS threads still spin
on the second core; numba's own parallel loops (OpenMP) were worse still (300 ms), their
spinning threads and the BLAS threads taking turns on the same cores.

numba is imported and the kernels compiled on first use only (``import floatlab`` stays light).

>>> import numpy as np
>>> gelu(np.array([0.0, 1.0], np.float32)).tolist()
[0.0, 0.8411920070648193]
"""

from __future__ import annotations

import math
import threading
from typing import Any

import numpy as np

from floatlab.train.hostmath import host_exp, host_tanh
from floatlab.train.precision.precision import Array

__all__ = [
    "fusable",
    "gelu",
    "gelu_grad",
    "layer_norm",
    "layer_norm_grad",
    "softmax",
    "softmax_grad",
]

#: sqrt(2 / pi), the constant of GELU's tanh form
GELU_C = math.sqrt(2.0 / math.pi)

_lock = threading.Lock()
_compiled: dict[str, Any] = {}


def fusable(*arrays: Any) -> bool:
    """True when every array is a C-contiguous NumPy float32 or float64 array of the same dtype.

    >>> fusable(np.zeros((2, 3), np.float32), np.ones(3, np.float32))
    True
    >>> fusable(np.zeros((2, 3), np.float32).T)
    False
    """
    first = arrays[0]
    if type(first) is not np.ndarray or first.dtype not in (np.float32, np.float64):
        return False
    return all(type(a) is np.ndarray and a.dtype == first.dtype and a.flags.c_contiguous for a in arrays)


# ---- the kernels (plain Python here; compiled by numba in _loops) ---------------------------------
def _pairwise_block_py(a: Any, lo: int, n: int) -> Any:
    # NumPy's pairwise sum (umath loops_utils) of at most 128 values: under 8 a plain loop, else
    # eight running sums over the blocks of 8, a tree of them, then the rest one by one
    if n < 8:
        res = a[lo]
        for i in range(lo + 1, lo + n):
            res += a[i]
        return res
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    i = lo + 8
    end = lo + n - n % 8
    while i < end:
        r0 += a[i]
        r1 += a[i + 1]
        r2 += a[i + 2]
        r3 += a[i + 3]
        r4 += a[i + 4]
        r5 += a[i + 5]
        r6 += a[i + 6]
        r7 += a[i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < lo + n:
        res += a[i]
        i += 1
    return res


def _pairwise_py(a: Any, lo: int, n: int) -> Any:
    # above 128 values NumPy sums the halves (cut at a multiple of 8) separately, recursively; here
    # the same tree walked with an explicit stack (numba's cache mishandles recursive functions)
    if n <= 128:
        return _pairwise_block(a, lo, n)
    los = np.empty(64, np.int64)
    ns = np.empty(64, np.int64)
    state = np.zeros(64, np.int64)
    vals = np.empty(64, a.dtype)
    top, vtop = 0, 0
    los[0], ns[0] = lo, n
    while top >= 0:
        m = ns[top]
        if m <= 128:
            vals[vtop] = _pairwise_block(a, los[top], m)
            vtop += 1
            top -= 1
            continue
        h = m // 2
        h -= h % 8
        if state[top] == 0:
            state[top] = 1
            los[top + 1], ns[top + 1], state[top + 1] = los[top], h, 0
            top += 1
        elif state[top] == 1:
            state[top] = 2
            los[top + 1], ns[top + 1], state[top + 1] = los[top] + h, m - h, 0
            top += 1
        else:
            vals[vtop - 2] = vals[vtop - 2] + vals[vtop - 1]
            vtop -= 1
            top -= 1
    return vals[0]


_pairwise_block = _pairwise_block_py
_pairwise = _pairwise_py


def _gelu_arg_kernel_py(x: Any, u: Any, c0: Any, c1: Any) -> None:
    # tanh's argument c (x + 0.044715 x^3), as x (c + 0.044715 c x^2)
    for i in range(x.size):
        xi = x[i]
        u[i] = (xi * xi * c1 + c0) * xi


def _gelu_kernel_py(x: Any, th: Any, one: Any, half: Any) -> None:
    # in place over th = tanh(...): 0.5 x (1 + th)
    for i in range(x.size):
        th[i] = (th[i] + one) * x[i] * half


def _gelu_grad_kernel_py(dy: Any, x: Any, th: Any, c0: Any, c3: Any, one: Any, half: Any) -> None:
    # in place over th: dy (0.5 (1 + th) + (1 - th^2) 0.5 x (c + 3 0.044715 c x^2))
    for i in range(x.size):
        xi = x[i]
        t = th[i]
        x2 = (xi * xi * c3 + c0) * xi * half
        d = (one - t * t) * x2
        th[i] = ((t + one) * half + d) * dy[i]


def _layer_norm_kernel_py(
    x: Any, g: Any, b: Any, y: Any, xhat: Any, rstd: Any, inv_d: Any, eps: Any, one: Any
) -> None:
    n, d = x.shape
    for i in range(n):
        xr, yr, hr = x[i], y[i], xhat[i]
        mu = _pairwise(xr, 0, d) * inv_d
        for j in range(d):
            c = xr[j] - mu
            hr[j] = c
            yr[j] = c * c
        rs = one / math.sqrt(_pairwise(yr, 0, d) * inv_d + eps)
        rstd[i, 0] = rs
        for j in range(d):
            h = hr[j] * rs
            hr[j] = h
            yr[j] = h * g[j] + b[j]


def _layer_norm_grad_kernel_py(dy: Any, xhat: Any, rstd: Any, g: Any, dx: Any, inv_d: Any) -> None:
    n, d = dy.shape
    for i in range(n):
        dyr, hr, out = dy[i], xhat[i], dx[i]
        for j in range(d):
            out[j] = dyr[j] * g[j]
        a = _pairwise(out, 0, d) * inv_d
        for j in range(d):
            out[j] = (dyr[j] * g[j]) * hr[j]
        c = _pairwise(out, 0, d) * inv_d
        rs = rstd[i, 0]
        for j in range(d):
            out[j] = rs * ((dyr[j] * g[j] - a) - hr[j] * c)


def _softmax_shift_kernel_py(s: Any, z: Any) -> None:
    n, d = s.shape
    for i in range(n):
        sr, zr = s[i], z[i]
        m = sr[0]
        for j in range(1, d):
            if sr[j] > m:
                m = sr[j]
        for j in range(d):
            zr[j] = sr[j] - m


def _softmax_kernel_py(e: Any) -> None:
    # in place over e = exp(s - max): e / sum(e)
    n, d = e.shape
    for i in range(n):
        er = e[i]
        total = _pairwise(er, 0, d)
        for j in range(d):
            er[j] = er[j] / total


def _softmax_grad_kernel_py(dp: Any, p: Any, ds: Any) -> None:
    n, d = p.shape
    for i in range(n):
        dr, pr, out = dp[i], p[i], ds[i]
        for j in range(d):
            out[j] = dr[j] * pr[j]
        dot = _pairwise(out, 0, d)
        for j in range(d):
            out[j] = pr[j] * (dr[j] - dot)


_KERNELS = (
    "gelu_arg",
    "gelu",
    "gelu_grad",
    "softmax_shift",
    "layer_norm",
    "layer_norm_grad",
    "softmax",
    "softmax_grad",
)


def _loops() -> dict[str, Any]:
    if _compiled:
        return _compiled
    with _lock:
        if not _compiled:
            import numba

            g = globals()
            serial = numba.njit(nogil=True, cache=True, fastmath=False)
            g["_pairwise_block"] = serial(_pairwise_block_py)
            g["_pairwise"] = serial(_pairwise_py)
            _compiled.update({name: serial(g[f"_{name}_kernel_py"]) for name in _KERNELS})
        return _compiled


# ---- the ops ---------------------------------------------------------------------------------------
def gelu(x: Array) -> Array:
    """GELU (tanh form) of a :func:`fusable` array, in its dtype, unrounded.

    >>> gelu(np.zeros(3)).tolist()
    [0.0, 0.0, 0.0]
    """
    t = x.dtype.type
    k = _loops()
    flat = x.reshape(-1)
    th = np.empty_like(flat)
    c0, c1, one, half = t(GELU_C), t(GELU_C * 0.044715), t(1.0), t(0.5)

    k["gelu_arg"](flat, th, c0, c1)
    host_tanh(th, out=th)  # NumPy's vector tanh: the C library's is several times slower
    k["gelu"](flat, th, one, half)
    return th.reshape(x.shape)


def gelu_grad(dy: Array, x: Array) -> Array:
    """``dy * GELU'(x)`` for :func:`fusable` arrays of one shape, unrounded.

    >>> gelu_grad(np.ones(1), np.zeros(1)).tolist()
    [0.5]
    """
    t = x.dtype.type
    k = _loops()
    flat, dflat = x.reshape(-1), dy.reshape(-1)
    th = np.empty_like(flat)
    c0, c1, c3, one, half = t(GELU_C), t(GELU_C * 0.044715), t(3 * GELU_C * 0.044715), t(1.0), t(0.5)

    k["gelu_arg"](flat, th, c0, c1)
    host_tanh(th, out=th)
    k["gelu_grad"](dflat, flat, th, c0, c3, one, half)
    return th.reshape(x.shape)


def layer_norm(x: Array, g: Array, b: Array, eps: float = 1e-5) -> tuple[Array, Array, Array]:
    """Layer norm over the last axis: ``(y, xhat, rstd)``, ``rstd`` with a last axis of 1.

    >>> y, xhat, rstd = layer_norm(np.array([[1.0, 3.0]]), np.ones(2), np.zeros(2))
    >>> np.round(y, 4).tolist(), rstd.shape
    ([[-1.0, 1.0]], (1, 1))
    """
    t = x.dtype.type
    k = _loops()
    d = x.shape[-1]
    x2 = x.reshape(-1, d)
    y, xhat = np.empty_like(x2), np.empty_like(x2)
    rstd = np.empty((x2.shape[0], 1), x.dtype)
    inv_d, teps, one = t(1.0 / d), t(eps), t(1.0)

    k["layer_norm"](x2, g, b, y, xhat, rstd, inv_d, teps, one)
    return y.reshape(x.shape), xhat.reshape(x.shape), rstd.reshape(*x.shape[:-1], 1)


def layer_norm_grad(dy: Array, xhat: Array, rstd: Array, g: Array) -> Array:
    """The input gradient of :func:`layer_norm`: ``rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat))``.

    >>> y, xhat, rstd = layer_norm(np.array([[1.0, 3.0]]), np.ones(2), np.zeros(2))
    >>> np.round(layer_norm_grad(np.ones((1, 2)), xhat, rstd, np.ones(2)), 4).tolist()
    [[0.0, 0.0]]
    """
    k = _loops()
    d = dy.shape[-1]
    dx = np.empty_like(dy)
    dy2, xh2, dx2 = dy.reshape(-1, d), xhat.reshape(-1, d), dx.reshape(-1, d)
    rstd2 = rstd.reshape(-1, 1)
    inv_d = dy.dtype.type(1.0 / d)

    k["layer_norm_grad"](dy2, xh2, rstd2, g, dx2, inv_d)
    return dx


def softmax(s: Array) -> Array:
    """Softmax over the last axis; -inf entries (a mask) get exactly 0 where the row has a finite max.

    >>> softmax(np.array([[0.0, np.log(3.0), -np.inf]])).round(6).tolist()
    [[0.25, 0.75, 0.0]]
    """
    k = _loops()
    d = s.shape[-1]
    p = np.empty_like(s)
    s2, p2 = s.reshape(-1, d), p.reshape(-1, d)

    k["softmax_shift"](s2, p2)
    host_exp(p2, out=p2)  # NumPy's vector exp: the C library's is slower
    k["softmax"](p2)
    return p


def softmax_grad(dp: Array, p: Array) -> Array:
    """``p * (dp - sum(dp * p))`` along the last axis.

    >>> softmax_grad(np.ones((1, 2)), np.array([[0.25, 0.75]])).tolist()
    [[0.0, 0.0]]
    """
    k = _loops()
    d = p.shape[-1]
    ds = np.empty_like(p)
    dp2, p2, ds2 = dp.reshape(-1, d), p.reshape(-1, d), ds.reshape(-1, d)

    k["softmax_grad"](dp2, p2, ds2)
    return ds
