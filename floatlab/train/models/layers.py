"""The layers, each a pair of functions with precision at every storage point.

``*_forward(..., P)`` returns the output and what the backward pass needs; ``*_backward(dy, ...,
P)`` returns the input gradient (and the parameter gradients). ``P`` is a
:class:`~floatlab.train.precision.Precision`: activations are stored in the forward format,
gradients in the backward format, GEMMs run as on a tensor core, and the inner rounding points of
softmax, layer norm and the reductions follow the policy's fp32 switches.

>>> import numpy as np
>>> from floatlab.train.precision.precision import Precision
>>> x = np.array([[-1.0, 0.5]], np.float32)
>>> relu_forward(x), softmax_forward(np.zeros((1, 4), np.float32), Precision("fp32"))
(array([[0. , 0.5]], dtype=float32), array([[0.25, 0.25, 0.25, 0.25]], dtype=float32))
"""

from __future__ import annotations

import math

import numpy as np

from floatlab.backend import get_xp
from floatlab.train.hostmath import host_exp, host_log, host_tanh
from floatlab.train.models import fused
from floatlab.train.models.base import Cache
from floatlab.train.precision.precision import Array, Precision

__all__ = [
    "cross_entropy_backward",
    "cross_entropy_forward",
    "gelu_backward",
    "gelu_forward",
    "layer_norm_backward",
    "layer_norm_forward",
    "linear_backward",
    "linear_forward",
    "mean_pool_backward",
    "mean_pool_forward",
    "relu_backward",
    "relu_forward",
    "softmax_backward",
    "softmax_forward",
]


def linear_forward(x: Array, W: Array, b: Array | None, P: Precision, site: str | None = None) -> Array:
    """``x @ W + b`` on the tensor core, stored in the forward format (``x`` may be batched).
    ``site`` names the layer (its weight's parameter name) for the policy's per-layer GEMM
    treatment (an fp8 recipe's scaled operands, a narrow accumulator: see :meth:`Precision.linear`);
    without one the layer is an ordinary GEMM of the policy.

    >>> P = Precision("fp16")
    >>> W = P.act(np.full((3, 1), 0.1, np.float32))   # weights stored in fp16: 0.0999755859375
    >>> linear_forward(np.ones((1, 3), np.float32), W, None, P).tolist()   # 3 W, tie to even in fp16
    [[0.2998046875]]
    """
    return P.linear(site, x, "input", W, "weight", P.fwd, bias=b)


def linear_backward(
    dy: Array,
    x: Array,
    W: Array,
    P: Precision,
    *,
    bias: bool = True,
    input_grad: bool = True,
    site: str | None = None,
) -> tuple[Array | None, Array, Array | None]:
    """Gradients of :func:`linear_forward`: ``(dx, dW, db)``, each stored in the backward format;
    ``dx`` is None with ``input_grad=False`` (the first layer: nothing needs the data's gradient).

    >>> x, W, dy = np.ones((2, 3)), np.ones((3, 4)), np.ones((2, 4))
    >>> [a.shape for a in linear_backward(dy, x, W, Precision("fp64"))]
    [(2, 3), (3, 4), (4,)]
    """
    dx = P.linear(site, dy, "grad", W.T, "weight", P.bwd) if input_grad else None
    x2 = x.reshape(-1, x.shape[-1])
    dy2 = dy.reshape(-1, dy.shape[-1])
    dW = P.linear(site, x2.T, "input", dy2, "grad", P.bwd)
    db = None
    if bias:
        rs = P.rounder(P.bwd, "sum")
        db = rs.out(rs.sum(dy2, 0))
    return dx, dW, db


def relu_forward(x: Array) -> Array:
    """max(x, 0): exact in every format, so nothing to round.

    >>> relu_forward(np.array([-1.0, 2.0])).tolist()
    [0.0, 2.0]
    """
    return np.maximum(x, 0)


def relu_backward(dy: Array, x: Array) -> Array:
    """``dy`` where ``x > 0``, else 0: exact (an inf where ``x <= 0`` does not leak through).

    A bit mask selects the values (all ones where ``x > 0``, all zeros elsewhere): the same
    result as ``np.where(x > 0, dy, 0)``, several times faster on float arrays.

    >>> relu_backward(np.array([5.0, np.inf]), np.array([1.0, -1.0])).tolist()
    [5.0, 0.0]
    """
    xp = get_xp(dy)
    bits = np.dtype(f"u{dy.dtype.itemsize}")
    mask = xp.negative((x > 0).astype(bits))  # 0 - 1 wraps to all ones
    out: Array = (xp.ascontiguousarray(dy).view(bits) & mask).view(dy.dtype)
    return out


_GELU_C = math.sqrt(2.0 / math.pi)


def gelu_forward(x: Array, P: Precision) -> Array:
    """GELU (tanh form), computed in the wide precision as one fused kernel, stored once.

    >>> gelu_forward(np.array([0.0, 1.0], np.float32), Precision("bf16")).tolist()
    [0.0, 0.83984375]
    """
    if fused.fusable(x):
        return P.act(fused.gelu(x))
    t = x.dtype.type
    # 0.5 x (1 + tanh(c (x + 0.044715 x^3))) with c (x + 0.044715 x^3) as x (c + 0.044715 c x^2), in
    # place: x**3 is a pow call about fifty times slower than two products, and temporaries cost passes
    y = x * x
    y *= t(_GELU_C * 0.044715)
    y += t(_GELU_C)
    y *= x
    host_tanh(y, out=y)
    y += t(1.0)
    y *= x
    y *= t(0.5)
    return P.act(y)


def gelu_backward(dy: Array, x: Array, P: Precision) -> Array:
    """Gradient of :func:`gelu_forward`, one rounding to the backward format.

    >>> gelu_backward(np.ones(1), np.zeros(1), Precision("fp64")).tolist()   # GELU'(0) = 1/2
    [0.5]
    """
    if fused.fusable(dy, x) and dy.shape == x.shape:
        return P.grad(fused.gelu_grad(dy, x))
    t = x.dtype.type
    # d/dx = 0.5 (1 + th) + 0.5 x (1 - th^2) c (1 + 3 * 0.044715 x^2), th = tanh(c (x + 0.044715 x^3)),
    # in place as in gelu_forward
    x2 = x * x
    th = x2 * t(_GELU_C * 0.044715)
    th += t(_GELU_C)
    th *= x
    host_tanh(th, out=th)
    x2 *= t(3 * _GELU_C * 0.044715)
    x2 += t(_GELU_C)
    x2 *= x
    x2 *= t(0.5)
    d = th * th
    np.subtract(t(1.0), d, out=d)
    d *= x2
    th += t(1.0)
    th *= t(0.5)
    th += d
    th *= dy
    return P.grad(th)


def softmax_forward(s: Array, P: Precision) -> Array:
    """Softmax over the last axis; stepwise in the forward format unless "softmax" is kept in fp32.

    >>> softmax_forward(np.array([[0.0, np.log(3.0)]], np.float32), Precision("fp16")).tolist()
    [[0.25, 0.75]]
    """
    r = P.rounder(P.fwd, "softmax")
    if r.fp32 and fused.fusable(s):
        return r.out(fused.softmax(s))
    zs = r(s - s.max(axis=-1, keepdims=True))
    e = r(host_exp(zs), "exp")
    return r.out(e / r.sum(e, -1, keepdims=True))


def softmax_backward(dp: Array, p: Array, P: Precision) -> Array:
    """``p * (dp - sum(dp * p))`` along the last axis, in the backward format.

    >>> softmax_backward(np.ones((1, 2)), np.array([[0.25, 0.75]]), Precision("fp64")).tolist()
    [[0.0, 0.0]]
    """
    r = P.rounder(P.bwd, "softmax")
    if r.fp32 and fused.fusable(dp, p) and dp.shape == p.shape:
        return r.out(fused.softmax_grad(dp, p))
    dot = r.sum(r(dp * p), -1, keepdims=True)
    return r.out(p * r(dp - dot))


def cross_entropy_forward(
    logits: Array, y: Array, P: Precision, *, weight: float = 1.0
) -> tuple[float, Cache]:
    """Mean softmax cross-entropy of ``logits`` against integer labels ``y``.

    ``logits`` has the classes on its last axis and ``y`` the other axes: ``(n, classes)`` with
    ``(n,)`` labels, or a language model's ``(n, tokens, vocabulary)`` with ``(n, tokens)``
    next-token labels (the mean is then over every token). Returns the (unweighted) loss as a
    float and the cache for :func:`cross_entropy_backward`; ``weight`` multiplies the loss the
    gradients see (a weighted loss term).

    >>> loss, cache = cross_entropy_forward(np.zeros((2, 4), np.float32), np.array([0, 3]), Precision("fp32"))
    >>> round(loss, 6) == round(float(np.log(4)), 6)
    True
    >>> seq = np.zeros((2, 3, 4), np.float32)   # 2 examples of 3 tokens, 4 classes
    >>> loss, _ = cross_entropy_forward(seq, np.zeros((2, 3), int), Precision("fp32"))
    >>> round(loss, 6) == round(float(np.log(4)), 6)
    True
    """
    if y.shape != logits.shape[:-1]:
        raise ValueError(f"labels of shape {y.shape}: expected {logits.shape[:-1]} for logits {logits.shape}")
    shape = logits.shape
    logits = logits.reshape(-1, shape[-1])
    y = y.reshape(-1)
    n = logits.shape[0]
    r = P.rounder(P.fwd, P.policy.loss_op)
    zs = r(logits - logits.max(axis=1, keepdims=True))
    e = r(host_exp(zs), "exp")
    s = r.sum(e, 1, keepdims=True)
    logp = r(zs - r(host_log(s), "log"))
    p = r(e / s)
    nll = -logp[get_xp(logp).arange(n), y]
    rs = P.rounder(P.fwd, "sum")
    loss = rs(rs.sum(nll, 0) / nll.dtype.type(max(n, 1)))
    return float(loss), {"p": p, "y": y, "weight": weight, "shape": shape}


def cross_entropy_backward(cache: Cache, P: Precision, seed: float = 1.0) -> Array:
    """``d(seed * weight * loss) / d logits`` stored in the backward format (shaped as the logits).

    ``seed`` is where the loss scale enters: backward starts from d(S * loss) = S.

    >>> _, cache = cross_entropy_forward(np.zeros((1, 2), np.float32), np.array([0]), Precision("fp16"))
    >>> cross_entropy_backward(cache, Precision("fp16"), seed=1024.0).tolist()   # (p - y) * S
    [[-512.0, 512.0]]
    """
    p, y = cache["p"], cache["y"]
    n = p.shape[0]
    r = P.rounder(P.bwd, P.policy.loss_op)
    diff = p.copy()
    diff[get_xp(p).arange(n), y] -= p.dtype.type(1.0)
    # the seed gradient S * weight / n is formed in the wide precision, as a float32 loss does
    c = p.dtype.type(seed * cache["weight"] / max(n, 1))
    out: Array = P.grad(r(diff) * c).reshape(cache.get("shape", p.shape))
    return out


def layer_norm_forward(x: Array, g: Array, b: Array, P: Precision, eps: float = 1e-5) -> tuple[Array, Cache]:
    """Layer norm over the last axis; its statistics follow the "norm" switch.

    >>> y, _ = layer_norm_forward(np.array([[1.0, 3.0]]), np.ones(2), np.zeros(2), Precision("fp64"))
    >>> np.round(y, 4).tolist()
    [[-1.0, 1.0]]
    """
    r = P.rounder(P.fwd, "norm")
    if r.fp32 and fused.fusable(x, g, b) and g.shape == b.shape == x.shape[-1:]:
        y, xhat, rstd = fused.layer_norm(x, g, b, eps)
        return r.out(y), {"xhat": xhat, "rstd": rstd}
    t = x.dtype.type
    inv_d = t(1.0 / x.shape[-1])
    mu = r(r.sum(x, -1, keepdims=True) * inv_d)
    xc = r(x - mu)
    var = r(r.sum(r(xc * xc), -1, keepdims=True) * inv_d)
    rstd = r(t(1.0) / np.sqrt(var + t(eps)))
    xhat = r(xc * rstd)
    return r.out(xhat * g + b), {"xhat": xhat, "rstd": rstd}


def layer_norm_backward(dy: Array, cache: Cache, g: Array, P: Precision) -> tuple[Array, Array, Array]:
    """Gradients of :func:`layer_norm_forward`: ``(dx, dgamma, dbeta)``.

    >>> P = Precision("fp64")
    >>> y, cache = layer_norm_forward(np.array([[1.0, 3.0]]), np.ones(2), np.zeros(2), P)
    >>> [np.round(a, 4).tolist() for a in layer_norm_backward(np.ones((1, 2)), cache, np.ones(2), P)]
    [[[0.0, 0.0]], [-1.0, 1.0], [1.0, 1.0]]
    """
    r = P.rounder(P.bwd, "norm")
    rs = P.rounder(P.bwd, "sum")
    xhat, rstd = cache["xhat"], cache["rstd"]
    d = dy.shape[-1]
    t = dy.dtype.type
    inv_d = t(1.0 / d)
    dg = rs.out(rs.sum(r(dy * xhat).reshape(-1, d), 0))
    db = rs.out(rs.sum(dy.reshape(-1, d), 0))
    if r.fp32 and fused.fusable(dy, xhat, rstd, g) and xhat.shape == dy.shape and g.shape == (d,):
        return r.out(fused.layer_norm_grad(dy, xhat, rstd, g)), dg, db
    dxhat = r(dy * g)
    a = r(r.sum(dxhat, -1, keepdims=True) * inv_d)
    c = r(r.sum(r(dxhat * xhat), -1, keepdims=True) * inv_d)
    dx = r.out(rstd * r(r(dxhat - a) - r(xhat * c)))
    return dx, dg, db


def mean_pool_forward(x: Array, P: Precision) -> Array:
    """Mean over axis 1 (the tokens), a reduction under the "sum" switch.

    >>> mean_pool_forward(np.arange(6.0).reshape(1, 3, 2), Precision("fp64")).tolist()
    [[2.0, 3.0]]
    """
    r = P.rounder(P.fwd, "sum")
    return r.out(r.sum(x, 1) * x.dtype.type(1.0 / x.shape[1]))


def mean_pool_backward(dy: Array, n_tokens: int, P: Precision) -> Array:
    """Gradient of :func:`mean_pool_forward`: ``dy / n`` broadcast over the tokens.

    >>> mean_pool_backward(np.array([[3.0]]), 3, Precision("fp64")).tolist()
    [[[1.0], [1.0], [1.0]]]
    """
    per = dy * dy.dtype.type(1.0 / n_tokens)
    return P.grad(np.repeat(per[:, None, :], n_tokens, axis=1))


def uniform_init(rng: np.random.Generator, shape: tuple[int, ...], bound: float) -> Array:
    u = rng.random(shape, dtype=np.float32)
    out: Array = (u * np.float32(2.0) - np.float32(1.0)) * np.float32(bound)
    return out


def required(a: Array | None) -> Array:
    assert a is not None
    return a
