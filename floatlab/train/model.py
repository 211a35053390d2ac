"""Models in NumPy with explicit forward and backward passes, precision at every storage point.

Each layer is a pair of functions: ``*_forward(..., P)`` returns the output and what the backward
pass needs; ``*_backward(dy, ..., P)`` returns the input gradient (and the parameter gradients).
``P`` is a :class:`~floatlab.train.precision.Precision`: activations are stored in the forward
format, gradients in the backward format, GEMMs run as on a tensor core, and the inner rounding
points of softmax, layer norm and the reductions follow the policy's fp32 switches.

Two models: :class:`MLP` (ReLU or GELU, softmax cross-entropy) and :class:`AttentionNet` (one
pre-norm self-attention block over the rows of the image, with layer norms and mean pooling),
where reductions matter.

>>> import numpy as np
>>> from floatlab.train.precision import Precision
>>> m = MLP(64, (32,), 10)
>>> w = m.init(np.random.default_rng(0))
>>> logits, cache = m.forward(w, np.zeros((2, 64), np.float32), Precision("fp32"))
>>> logits.shape, sorted(w)
((2, 10), ['W0', 'W1', 'b0', 'b1'])
"""

from __future__ import annotations

import importlib
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from floatlab.backend import get_xp
from floatlab.train import fused
from floatlab.train.hostmath import host_exp, host_log, host_tanh
from floatlab.train.precision import Array, Precision

__all__ = [
    "MODELS",
    "AttentionNet",
    "Model",
    "Params",
    "cross_entropy_backward",
    "cross_entropy_forward",
    "gelu_backward",
    "gelu_forward",
    "get_model",
    "layer_norm_backward",
    "layer_norm_forward",
    "linear_backward",
    "linear_forward",
    "mean_pool_backward",
    "mean_pool_forward",
    "model_class",
    "model_name",
    "relu_backward",
    "relu_forward",
    "softmax_backward",
    "softmax_forward",
]

Params = dict[str, Array]
Cache = dict[str, Any]


# ---- layers ---------------------------------------------------------------------------------------
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


# ---- models ---------------------------------------------------------------------------------------
def _uniform(rng: np.random.Generator, shape: tuple[int, ...], bound: float) -> Array:
    u = rng.random(shape, dtype=np.float32)
    out: Array = (u * np.float32(2.0) - np.float32(1.0)) * np.float32(bound)
    return out


class Model:
    """A model: ``init(rng)`` -> parameters; ``forward(w, x, P)`` -> (logits, cache);
    ``backward(w, cache, dlogits, P)`` -> gradients (same keys as the parameters).

    ``forward`` takes two keywords: ``train`` (False for evaluation: BatchNorm then uses its running
    statistics) and ``buffers``, the model's state that is not trained (BatchNorm's running mean
    and variance; :meth:`init_buffers` makes them, and a training forward pass updates them in
    place). :attr:`norm_params` names the parameters a policy with ``batchnorm_fp32`` keeps in
    fp32. Logits have the classes on their last axis: ``(n, classes)``, or ``(n, tokens,
    vocabulary)`` for a language model.

    >>> m = get_model("attention", 64, 10)
    >>> isinstance(m, Model), sorted(m.init(np.random.default_rng(0)))[:3], m.init_buffers()
    (True, ['Wc', 'We', 'Wo'], {})
    """

    name = "model"
    #: the parameters that belong to BatchNorm layers (kept in fp32 under ``batchnorm_fp32``)
    norm_params: frozenset[str] = frozenset()

    @property
    def linear_sites(self) -> tuple[str, ...]:
        """The linear layers whose GEMMs a recipe scales (named by their weights), in forward
        order: how a recipe finds the model's first and last."""
        return ()

    def init(self, rng: np.random.Generator) -> Params:
        raise NotImplementedError

    def init_buffers(self) -> Params:
        """The state that is not trained (running statistics), at its initial values."""
        return {}

    def forward(
        self, w: Params, x: Array, P: Precision, *, train: bool = True, buffers: Params | None = None
    ) -> tuple[Array, Cache]:
        raise NotImplementedError

    def backward(self, w: Params, cache: Cache, dlogits: Array, P: Precision) -> Params:
        raise NotImplementedError

    def config(self) -> dict[str, Any]:
        raise NotImplementedError

    def describe(self) -> str:
        """The model's shape in a few words (the training summary shows it)."""
        return self.name


@dataclass
class MLP(Model):
    """Fully connected net ``n_in -> hidden... -> n_out`` with ReLU or GELU.

    >>> MLP(784, (256, 256), 10).n_params
    269322
    """

    n_in: int
    hidden: Sequence[int]
    n_out: int
    activation: str = "relu"
    name = "mlp"

    def __post_init__(self) -> None:
        self.hidden = tuple(int(h) for h in self.hidden)
        if self.activation not in ("relu", "gelu"):
            raise ValueError(f"activation={self.activation!r}: expected relu or gelu")
        if min((self.n_in, self.n_out, *self.hidden)) < 1:
            raise ValueError(
                f"layer sizes {(self.n_in, *self.hidden, self.n_out)}: expected positive integers"
            )

    @property
    def sizes(self) -> tuple[int, ...]:
        return (self.n_in, *self.hidden, self.n_out)

    @property
    def n_params(self) -> int:
        s = self.sizes
        return sum(a * b + b for a, b in itertools.pairwise(s))

    def config(self) -> dict[str, Any]:
        return {
            "name": "mlp",
            "n_in": self.n_in,
            "hidden": list(self.hidden),
            "n_out": self.n_out,
            "activation": self.activation,
        }

    def init(self, rng: np.random.Generator) -> Params:
        w: Params = {}
        s = self.sizes
        for i, (a, b) in enumerate(itertools.pairwise(s)):
            bound = 1.0 / math.sqrt(a)  # torch.nn.Linear's default
            w[f"W{i}"] = _uniform(rng, (a, b), bound)
            w[f"b{i}"] = _uniform(rng, (b,), bound)
        return w

    def describe(self) -> str:
        return "mlp " + "-".join(str(v) for v in self.sizes)

    @property
    def linear_sites(self) -> tuple[str, ...]:
        """``W0``, ``W1``, ...: every layer.

        >>> MLP(4, (8, 8), 2).linear_sites
        ('W0', 'W1', 'W2')
        """
        return tuple(f"W{i}" for i in range(len(self.sizes) - 1))

    def forward(
        self, w: Params, x: Array, P: Precision, *, train: bool = True, buffers: Params | None = None
    ) -> tuple[Array, Cache]:
        n = len(self.sizes) - 1
        h = P.act(x.astype(P.dtype, copy=False))
        inputs, pre = [], []
        for i in range(n):
            inputs.append(h)
            z = linear_forward(h, w[f"W{i}"], w[f"b{i}"], P, site=f"W{i}")
            pre.append(z)
            if i < n - 1:
                h = relu_forward(z) if self.activation == "relu" else gelu_forward(z, P)
        return pre[-1], {"inputs": inputs, "pre": pre}

    def backward(self, w: Params, cache: Cache, dlogits: Array, P: Precision) -> Params:
        n = len(self.sizes) - 1
        grads: Params = {}
        dz = dlogits
        for i in reversed(range(n)):
            dh, grads[f"W{i}"], db = linear_backward(
                dz, cache["inputs"][i], w[f"W{i}"], P, input_grad=i > 0, site=f"W{i}"
            )
            grads[f"b{i}"] = _some(db)
            if i > 0:
                z = cache["pre"][i - 1]
                dh = _some(dh)
                dz = relu_backward(dh, z) if self.activation == "relu" else gelu_backward(dh, z, P)
        return {k: grads[k] for k in w}


@dataclass
class AttentionNet(Model):
    """One pre-norm self-attention block over ``tokens`` rows of ``n_in / tokens`` features.

    embed (+ position) -> LN -> single-head attention (fused QKV) -> residual -> LN -> mean over
    tokens -> linear classifier. Softmax, both layer norms and the pooling are reductions.

    >>> AttentionNet(64, 10, tokens=8, d_model=32).n_params
    5130
    """

    n_in: int
    n_out: int
    tokens: int = 8
    d_model: int = 32
    name = "attention"

    def __post_init__(self) -> None:
        if self.tokens < 1 or self.n_in % self.tokens:
            raise ValueError(f"tokens={self.tokens}: expected a divisor of n_in={self.n_in}")
        if self.d_model < 1 or self.n_out < 1:
            raise ValueError(f"d_model={self.d_model}, n_out={self.n_out}: expected positive integers")

    @property
    def n_params(self) -> int:
        f, d, t, c = self.n_in // self.tokens, self.d_model, self.tokens, self.n_out
        return f * d + d + t * d + 2 * d + 3 * d * d + d * d + d + 2 * d + d * c + c

    def config(self) -> dict[str, Any]:
        return {
            "name": "attention",
            "n_in": self.n_in,
            "n_out": self.n_out,
            "tokens": self.tokens,
            "d_model": self.d_model,
        }

    @classmethod
    def build(cls, n_in: int, n_out: int, **kwargs: Any) -> AttentionNet:
        return cls(n_in, n_out, **kwargs)

    def init(self, rng: np.random.Generator) -> Params:
        f, d, t, c = self.n_in // self.tokens, self.d_model, self.tokens, self.n_out
        return {
            "We": _uniform(rng, (f, d), 1.0 / math.sqrt(f)),
            "be": _uniform(rng, (d,), 1.0 / math.sqrt(f)),
            "pos": _uniform(rng, (t, d), 0.1),
            "ln1_g": np.ones(d, np.float32),
            "ln1_b": np.zeros(d, np.float32),
            "Wqkv": _uniform(rng, (d, 3 * d), 1.0 / math.sqrt(d)),
            "Wo": _uniform(rng, (d, d), 1.0 / math.sqrt(d)),
            "bo": _uniform(rng, (d,), 1.0 / math.sqrt(d)),
            "ln2_g": np.ones(d, np.float32),
            "ln2_b": np.zeros(d, np.float32),
            "Wc": _uniform(rng, (d, c), 1.0 / math.sqrt(d)),
            "bc": _uniform(rng, (c,), 1.0 / math.sqrt(d)),
        }

    def describe(self) -> str:
        return f"attention {self.tokens} tokens x {self.d_model}"

    @property
    def linear_sites(self) -> tuple[str, ...]:
        """The embedding projection, the attention's two projections, the classifier.

        >>> get_model("attention", 64, 10).linear_sites
        ('We', 'Wqkv', 'Wo', 'Wc')
        """
        return ("We", "Wqkv", "Wo", "Wc")

    def forward(
        self, w: Params, x: Array, P: Precision, *, train: bool = True, buffers: Params | None = None
    ) -> tuple[Array, Cache]:
        n, t, d = x.shape[0], self.tokens, self.d_model
        xt = P.act(x.astype(P.dtype, copy=False)).reshape(n, t, -1)
        # the position table rides in the GEMM epilogue with the bias, added in fp32
        h0 = P.linear("We", xt, "input", w["We"], "weight", P.fwd, bias=w["be"] + w["pos"])
        a, ln1 = layer_norm_forward(h0, w["ln1_g"], w["ln1_b"], P)
        qkv = linear_forward(a, w["Wqkv"], None, P, site="Wqkv")
        q, k, v = qkv[..., :d], qkv[..., d : 2 * d], qkv[..., 2 * d :]
        alpha = 1.0 / math.sqrt(d)
        s = P.matmul(q, k.transpose(0, 2, 1), P.fwd, alpha=alpha)
        p = softmax_forward(s, P)
        o = P.matmul(p, v, P.fwd)
        h1 = P.act(h0 + linear_forward(o, w["Wo"], w["bo"], P, site="Wo"))
        c, ln2 = layer_norm_forward(h1, w["ln2_g"], w["ln2_b"], P)
        m = mean_pool_forward(c, P)
        logits = linear_forward(m, w["Wc"], w["bc"], P, site="Wc")
        cache = {
            "xt": xt,
            "a": a,
            "ln1": ln1,
            "q": q,
            "k": k,
            "v": v,
            "p": p,
            "o": o,
            "ln2": ln2,
            "m": m,
            "alpha": alpha,
        }
        return logits, cache

    def backward(self, w: Params, cache: Cache, dlogits: Array, P: Precision) -> Params:
        t, d = self.tokens, self.d_model
        g: Params = {}
        dm, g["Wc"], db = linear_backward(dlogits, cache["m"], w["Wc"], P, site="Wc")
        g["bc"] = _some(db)
        dc = mean_pool_backward(_some(dm), t, P)
        dh1, g["ln2_g"], g["ln2_b"] = layer_norm_backward(dc, cache["ln2"], w["ln2_g"], P)
        do_, g["Wo"], db = linear_backward(dh1, cache["o"], w["Wo"], P, site="Wo")
        g["bo"] = _some(db)
        do = _some(do_)
        p, q, k, v, alpha = cache["p"], cache["q"], cache["k"], cache["v"], cache["alpha"]
        dp = P.matmul(do, v.transpose(0, 2, 1), P.bwd)
        dv = P.matmul(p.transpose(0, 2, 1), do, P.bwd)
        ds = softmax_backward(dp, p, P)
        dq = P.matmul(ds, k, P.bwd, alpha=alpha)
        dk = P.matmul(ds.transpose(0, 2, 1), q, P.bwd, alpha=alpha)
        dqkv = np.concatenate([dq, dk, dv], axis=-1)
        da, g["Wqkv"], _ = linear_backward(dqkv, cache["a"], w["Wqkv"], P, bias=False, site="Wqkv")
        dln1, g["ln1_g"], g["ln1_b"] = layer_norm_backward(_some(da), cache["ln1"], w["ln1_g"], P)
        # the residual stream's gradient: the skip path plus the attention path
        dh0 = P.grad(dh1 + dln1)
        _, g["We"], _ = linear_backward(dh0, cache["xt"], w["We"], P, bias=False, input_grad=False, site="We")
        rs = P.rounder(P.bwd, "sum")
        g["be"] = rs.out(rs.sum(dh0.reshape(-1, d), 0))
        g["pos"] = rs.out(rs.sum(dh0, 0))
        return {k_: g[k_] for k_ in w}


def _some(a: Array | None) -> Array:
    assert a is not None
    return a


#: the models by name, and where the larger ones live (imported when first asked for)
_MODEL_HOMES: dict[str, str] = {
    "mlp": "floatlab.train.model:MLP",
    "attention": "floatlab.train.model:AttentionNet",
    "transformer": "floatlab.train.transformer:TransformerLM",
    "convnet": "floatlab.train.convnet:ConvNet",
}
MODELS: tuple[str, ...] = tuple(_MODEL_HOMES)
_MODEL_ALIASES = {"attn": "attention", "mlp-relu": "mlp", "lm": "transformer", "cnn": "convnet"}


def model_name(name: str) -> str:
    """The canonical name of a model (``"attn"`` -> ``"attention"``), checked.

    >>> model_name(" LM ")
    'transformer'
    """
    if not isinstance(name, str):
        raise ValueError(f"model {name!r}: expected a name, one of {', '.join(MODELS)}")
    key = name.strip().lower()
    key = _MODEL_ALIASES.get(key, key)
    if key not in _MODEL_HOMES:
        raise ValueError(f"unknown model {name!r}: expected one of {', '.join(MODELS)}")
    return key


def model_class(name: str) -> type[Model]:
    """The class of the model called ``name`` (one of :data:`MODELS`).

    >>> model_class("mlp").__name__
    'MLP'
    >>> model_class("resnet")
    Traceback (most recent call last):
    ...
    ValueError: unknown model 'resnet': expected one of mlp, attention, transformer, convnet
    """
    module, cls = _MODEL_HOMES[model_name(name)].split(":")
    found: type[Model] = getattr(importlib.import_module(module), cls)
    return found


def get_model(name: str, n_in: int, n_out: int, **kwargs: Any) -> Model:
    """The model ``name`` for ``n_in`` inputs (features, or a language model's context length)
    and ``n_out`` classes (or vocabulary size); ``kwargs`` are the model's own settings:
    ``"mlp"`` (``hidden=(128, 128)``, ``activation="relu"``), ``"attention"`` (``tokens=8``,
    ``d_model=32``), ``"transformer"`` and ``"convnet"`` (see their classes).

    >>> get_model("mlp", 64, 10, hidden=(16,)).sizes
    (64, 16, 10)
    """
    cls = model_class(name)
    if cls is MLP:
        hidden = kwargs.pop("hidden", (128, 128))
        return MLP(n_in, tuple(hidden), n_out, **kwargs)
    built: Model = cls.build(n_in, n_out, **kwargs)  # type: ignore[attr-defined]
    return built
