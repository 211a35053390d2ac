"""A small conv net with BatchNorm: 3x3 convolutions, BatchNorm, ReLU, 2x2 max pooling, a linear head.

Layers come in pairs as in :mod:`floatlab.train.models` (``*_forward(..., P)`` and
``*_backward(dy, ..., P)``, every storage point through ``P``). Images are NHWC arrays
``(n, height, width, channels)``. A convolution is one GEMM on the simulated tensor core: the
3x3 neighbourhoods of each pixel laid out as rows (im2col, ``(n*H*W, 9*C_in)``) times the
weights ``(3, 3, C_in, C_out)`` seen as a ``(9*C_in, C_out)`` matrix; its weight gradient is
the transposed GEMM, and its input gradient the convolution of the output gradient with the
flipped, transposed kernel (one GEMM too, one rounding per value, as cuDNN's dgrad).

BatchNorm and precision. BatchNorm is where mixed-precision recipes part ways, and the policy's
``batchnorm_fp32`` switch says which way:

* on (fp32, mixed-fp16, mixed-bf16, mixed-fp8): BatchNorm's statistics and normalisation are
  computed in fp32 with no rounding inside, its affine parameters and running statistics are
  fp32 (the trainer keeps the parameters named in :attr:`ConvNet.norm_params` in fp32 and does
  not cast them), its parameter gradients stay fp32; only its output is stored in the forward
  format and its input gradient in the backward format. This is Apex amp's O2
  (``keep_batchnorm_fp32=True``: it "casts the model weights to FP16 ... keeps batchnorms in FP32",
  https://nvidia.github.io/apex/amp.html; its older ``network_to_half`` did the same), fastai
  v1's ``to_fp16`` (``model2half``: every layer but BatchNorm converted to fp16,
  https://fastai1.fast.ai/callbacks.fp16.html) and
  MindSpore's amp level O2 (the network in float16, BatchNorm kept in float32,
  https://www.mindspore.cn/docs/en/r1.9/api_python/amp/mindspore.amp.build_train_network.html).
* off (pure fp16, pure bf16: Apex O3, MindSpore O3 with ``keep_batchnorm_fp32=False``):
  BatchNorm lives in the low format. Its inner steps round to the forward (backward) format
  unless the policy lists ``"norm"`` among its fp32 ops, its reductions follow the policy's
  reduction switch, its running statistics are rounded to the forward format each time they
  are updated, and its parameter gradients are stored in the backward format.

Training mode normalises with the batch statistics (biased variance) and moves the running
statistics by momentum 0.1 towards the batch mean and the *unbiased* variance; evaluation uses
the running statistics: exactly :class:`torch.nn.BatchNorm2d`.

>>> import numpy as np
>>> from floatlab.train.precision.precision import Precision
>>> m = ConvNet()
>>> w, buffers = m.init(np.random.default_rng(0)), m.init_buffers()
>>> logits, cache = m.forward(w, np.zeros((2, 64), np.float32), Precision("fp32"), buffers=buffers)
>>> logits.shape, m.describe(), sorted(m.norm_params)
((2, 10), 'convnet 16-32 channels on 8x8', ['bn0_b', 'bn0_g', 'bn1_b', 'bn1_g'])
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from floatlab.backend import get_xp
from floatlab.formats import FloatFormat
from floatlab.train.hostmath import host_matmul
from floatlab.train.models.base import Model
from floatlab.train.models.layers import (
    linear_backward,
    linear_forward,
    relu_backward,
    relu_forward,
    uniform_init,
)
from floatlab.train.precision.precision import Array, Params, Precision, Rounder

__all__ = [
    "BN_EPS",
    "BN_MOMENTUM",
    "ConvNet",
    "batch_norm_backward",
    "batch_norm_forward",
    "conv2d_backward",
    "conv2d_forward",
    "im2col3x3",
    "max_pool_backward",
    "max_pool_forward",
]

Cache = dict[str, Any]

#: torch.nn.BatchNorm2d's defaults
BN_EPS = 1e-5
BN_MOMENTUM = 0.1


# ---- convolution ----------------------------------------------------------------------------------
def im2col3x3(x: Array) -> Array:
    """The 3x3 neighbourhoods of every pixel of the NHWC images ``x`` (zero padding 1) as rows:
    shape ``(n*H*W, 9*C)``, columns ordered (kernel row, kernel column, channel).

    >>> x = np.arange(4.0).reshape(1, 2, 2, 1)   # one 2x2 image [[0, 1], [2, 3]]
    >>> im2col3x3(x)[0].tolist()                  # the top-left pixel's neighbourhood
    [0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 2.0, 3.0]
    """
    n, h, w, c = x.shape
    xp = get_xp(x)
    padded = xp.zeros((n, h + 2, w + 2, c), dtype=x.dtype)
    padded[:, 1:-1, 1:-1] = x
    cols = xp.empty((n, h, w, 3, 3, c), dtype=x.dtype)
    for i in range(3):  # nine shifted copies of the whole batch (a loop over the kernel, not the batch)
        for j in range(3):
            cols[:, :, :, i, j] = padded[:, i : i + h, j : j + w]
    out: Array = cols.reshape(n * h * w, 9 * c)
    return out


def conv2d_forward(x: Array, W: Array, b: Array | None, P: Precision) -> tuple[Array, Cache]:
    """3x3 convolution, stride 1, padding 1, of NHWC images ``x`` with weights ``W`` of shape
    ``(3, 3, C_in, C_out)`` (and an optional bias): one GEMM, its output stored in the forward
    format. Returns the output and the cache for :func:`conv2d_backward`.

    >>> x = np.ones((1, 3, 3, 1), np.float32)
    >>> y, _ = conv2d_forward(x, np.ones((3, 3, 1, 1), np.float32), None, Precision("fp32"))
    >>> y[0, :, :, 0].tolist()    # each output counts the pixels under the kernel
    [[4.0, 6.0, 4.0], [6.0, 9.0, 6.0], [4.0, 6.0, 4.0]]
    """
    n, h, w, c = x.shape
    if W.shape[:3] != (3, 3, c):
        raise ValueError(
            f"conv weights of shape {W.shape}: expected (3, 3, {c}, C_out) for {c} input channels"
        )
    cols = im2col3x3(x)
    y = P.matmul(cols, W.reshape(9 * c, -1), P.fwd, bias=b)
    return y.reshape(n, h, w, -1), {"cols": cols, "shape": x.shape, "bias": b is not None}


def conv2d_backward(
    dy: Array, cache: Cache, W: Array, P: Precision, *, input_grad: bool = True
) -> tuple[Array | None, Array, Array | None]:
    """Gradients of :func:`conv2d_forward`: ``(dx, dW, db)``, each stored in the backward format.
    ``dx`` is None with ``input_grad=False`` (the first layer), ``db`` when there was no bias.

    >>> P = Precision("fp64")
    >>> y, cache = conv2d_forward(np.ones((1, 3, 3, 1)), np.ones((3, 3, 1, 1)), None, P)
    >>> dx, dW, db = conv2d_backward(np.ones_like(y), cache, np.ones((3, 3, 1, 1)), P)
    >>> dx[0, :, :, 0].tolist()
    [[4.0, 6.0, 4.0], [6.0, 9.0, 6.0], [4.0, 6.0, 4.0]]
    >>> dW[:, :, 0, 0].tolist(), db
    ([[4.0, 6.0, 4.0], [6.0, 9.0, 6.0], [4.0, 6.0, 4.0]], None)
    """
    c_out = dy.shape[-1]
    dy2 = dy.reshape(-1, c_out)
    dW = P.matmul(cache["cols"].T, dy2, P.bwd).reshape(W.shape)
    db = None
    if cache["bias"]:
        rs = P.rounder(P.bwd, "sum")
        db = rs.out(_channel_sum(rs, dy2))
    dx = None
    if input_grad:
        # dx is dy convolved with the kernel turned by 180 degrees, inputs and outputs swapped:
        # dx[p, c] = sum over (i, j, o) of dy[p + (1 - i, 1 - j), o] * W[i, j, c, o]
        c_in = W.shape[2]
        flipped = W[::-1, ::-1].transpose(0, 1, 3, 2).reshape(9 * c_out, c_in)
        dx = P.matmul(im2col3x3(dy), flipped, P.bwd).reshape(cache["shape"])
    return dx, dW, db


# ---- batch norm -----------------------------------------------------------------------------------
def _bn_rounder(P: Precision, fmt: FloatFormat) -> Rounder:
    # BatchNorm in fp32 (no rounding inside), or in the low format following the "norm" switch
    return P.rounder(P.wide, "norm") if P.policy.batchnorm_fp32 else P.rounder(fmt, "norm")


def batch_norm_forward(
    x: Array,
    g: Array,
    b: Array,
    P: Precision,
    running: tuple[Array, Array] | None = None,
    *,
    train: bool = True,
    momentum: float = BN_MOMENTUM,
    eps: float = BN_EPS,
) -> tuple[Array, Cache, tuple[Array, Array] | None]:
    """BatchNorm over every axis but the last (the channels): ``(y, cache, running)``.

    Training normalises with the batch's mean and biased variance and, when ``running`` (the
    running mean and variance) is given, returns them moved by ``momentum`` towards the batch
    mean and the unbiased variance (stored in fp32 under ``batchnorm_fp32``, else in the forward
    format); ``train=False`` normalises with ``running`` and returns it unchanged. The output is
    stored in the forward format; see the module docstring for the precision inside.

    >>> P = Precision("fp64")
    >>> x = np.array([[1.0], [3.0]])          # two values of one channel: mean 2, variance 1
    >>> y, _, (mean, var) = batch_norm_forward(x, np.ones(1), np.zeros(1), P, (np.zeros(1), np.ones(1)))
    >>> np.round(y, 4).ravel().tolist(), mean.tolist(), var.tolist()   # var: 0.9 * 1 + 0.1 * 2
    ([-1.0, 1.0], [0.2], [1.1])
    """
    c = x.shape[-1]
    x2 = x.reshape(-1, c)
    m = x2.shape[0]
    r = _bn_rounder(P, P.fwd)
    t = x.dtype.type
    if train:
        if m < 2:
            raise ValueError(f"batch norm over {m} value per channel: expected at least 2 in training")
        inv_m = t(1.0 / m)
        mu = r(_channel_sum(r, x2) * inv_m)
        xc = r(x2 - mu)
        var = r(_channel_sum(r, r(xc * xc)) * inv_m)
    else:
        if running is None:
            raise ValueError("batch norm with train=False needs the running statistics (mean, var)")
        mu, var = running
        xc = r(x2 - mu)
    rstd = r(t(1.0) / np.sqrt(var + t(eps)))
    xhat = r(xc * rstd)
    # the affine step is one fused operation, stored once in the forward format
    y = P.act(xhat * g + b).reshape(x.shape)
    new = running
    if train and running is not None:
        keep = P.wide if P.policy.batchnorm_fp32 else P.fwd
        mom = t(momentum)
        unbiased = var * t(m / (m - 1))
        new = (
            P.cast((t(1.0) - mom) * running[0] + mom * mu, keep),
            P.cast((t(1.0) - mom) * running[1] + mom * unbiased, keep),
        )
    return y, {"xhat": xhat, "rstd": rstd, "train": train}, new


def batch_norm_backward(dy: Array, cache: Cache, g: Array, P: Precision) -> tuple[Array, Array, Array]:
    """Gradients of :func:`batch_norm_forward`: ``(dx, dgamma, dbeta)``. ``dx`` is stored in the
    backward format; ``dgamma`` and ``dbeta`` stay fp32 under ``batchnorm_fp32``, else they are
    stored in the backward format. In training the batch statistics depend on ``x`` too:
    ``dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))`` with ``dxhat = dy * gamma``.

    >>> P = Precision("fp64")
    >>> y, cache, _ = batch_norm_forward(np.array([[1.0], [3.0]]), np.ones(1), np.zeros(1), P)
    >>> [np.round(a, 4).ravel().tolist() for a in batch_norm_backward(np.ones((2, 1)), cache, np.ones(1), P)]
    [[0.0, 0.0], [0.0], [2.0]]
    """
    c = dy.shape[-1]
    dy2 = dy.reshape(-1, c)
    m = dy2.shape[0]
    t = dy.dtype.type
    r = _bn_rounder(P, P.bwd)
    rs = P.rounder(P.wide, "sum") if P.policy.batchnorm_fp32 else P.rounder(P.bwd, "sum")
    xhat, rstd = cache["xhat"], cache["rstd"]
    dg = rs.out(_channel_sum(rs, r(dy2 * xhat)))
    db = rs.out(_channel_sum(rs, dy2))
    dxhat = r(dy2 * g)
    if cache["train"]:
        inv_m = t(1.0 / m)
        a = r(_channel_sum(r, dxhat) * inv_m)
        k = r(_channel_sum(r, r(dxhat * xhat)) * inv_m)
        dx = rstd * r(r(dxhat - a) - r(xhat * k))
    else:  # frozen statistics: an affine map per channel
        dx = dxhat * rstd
    return P.grad(dx).reshape(dy.shape), dg, db


# ---- max pooling ----------------------------------------------------------------------------------
_WINDOW = ((0, 0), (0, 1), (1, 0), (1, 1))  # the 2x2 window in row-major order


def max_pool_forward(x: Array) -> tuple[Array, Array]:
    """2x2 max pooling, stride 2, of NHWC images: ``(y, where)``, ``where`` the position in the
    window (0..3, row-major) of each maximum, for :func:`max_pool_backward`. Exact in every
    format (it picks stored values), so nothing is rounded.

    Ties go to the first maximum in row-major order and a window holding a NaN to its last
    NaN, as torch's CPU kernel does (it takes a value when ``value > max or isnan(value)``).

    >>> x = np.array([1.0, 5.0, 5.0, 2.0]).reshape(1, 2, 2, 1)   # the window [[1, 5], [5, 2]]
    >>> y, where = max_pool_forward(x)
    >>> y.ravel().tolist(), where.ravel().tolist()   # the tie goes to the first 5
    ([5.0], [1])
    """
    h, w = x.shape[1:3]
    if h % 2 or w % 2:
        raise ValueError(f"max pooling of {h}x{w} images: expected an even height and width")
    win = [x[:, i::2, j::2] for i, j in _WINDOW]
    y = np.maximum(np.maximum(win[0], win[1]), np.maximum(win[2], win[3]))  # (a NaN propagates)
    # the first position holding the maximum: 0 if win0 == y, else 1 if win1 == y, else 2 if ...
    u = np.uint8
    n0, n1, n2 = ((wk != y).view(u) for wk in win[:3])
    where = n0 * (u(1) + n1 * (u(1) + n2))
    if bool(np.isnan(y).any()):
        for k in range(4):
            where[np.isnan(win[k])] = k
    return y, where


def max_pool_backward(dy: Array, where: Array) -> Array:
    """Gradient of :func:`max_pool_forward`: each ``dy`` goes to its window's maximum, the other
    three positions get 0 (exact: values are only moved).

    >>> dy, where = np.array([7.0]).reshape(1, 1, 1, 1), np.array([1], np.uint8).reshape(1, 1, 1, 1)
    >>> max_pool_backward(dy, where)[0, :, :, 0].tolist()
    [[0.0, 7.0], [0.0, 0.0]]
    """
    n, ho, wo, c = dy.shape
    dx = get_xp(dy).empty((n, ho, 2, wo, 2, c), dtype=dy.dtype)
    for k, (i, j) in enumerate(_WINDOW):
        dx[:, :, i, :, j] = _keep(where == k, dy)
    out: Array = dx.reshape(n, 2 * ho, 2 * wo, c)
    return out


def _keep(mask: Array, v: Array) -> Array:
    # v where mask, else +0 (an inf or NaN outside the mask does not leak), as a bitwise AND of
    # the bits: exact, and an order of magnitude faster than np.where on these machines
    bits = np.dtype(f"u{v.dtype.itemsize}")
    out: Array = (v.view(bits) & np.negative(mask.astype(bits))).view(v.dtype)
    return out


def _channel_sum(r: Rounder, x2: Array) -> Array:
    # the sum over the rows of (values, channels), as r.sum(x2, 0) computes it; an fp32 (wide)
    # accumulator runs as a GEMV with a ones vector (NumPy's axis-0 sum over a few channels
    # is some 20 times slower), a low-precision one as the rounder's tree of rounded sums
    if not r.fp32_acc:
        return r.sum(x2, 0)
    xp = get_xp(x2)
    ones = xp.ones(x2.shape[0], dtype=x2.dtype)
    s: Array = host_matmul(ones, x2) if xp is np else ones @ x2
    return s if r.fp32 else r.P.cast(s, r.fmt)


# ---- the model ------------------------------------------------------------------------------------
@dataclass
class ConvNet(Model):
    """Conv net on square single-channel images given as rows of ``n_in`` pixels.

    Each stage of ``channels``: 3x3 convolution (no bias: BatchNorm's mean subtraction would
    cancel it) -> BatchNorm -> ReLU -> 2x2 max pooling, halving the image side; then the
    pooled features, flattened in (row, column, channel) order, go through a linear head to
    ``n_out`` logits. Parameters: ``conv{i}_W`` of shape ``(3, 3, C_in, C_out)``, ``bn{i}_g``,
    ``bn{i}_b``, and the head's ``Wc``, ``bc``; buffers ``bn{i}_mean``, ``bn{i}_var``.

    >>> ConvNet(64, 10, channels=(16, 32)).n_params
    6138
    >>> ConvNet(36, 10)
    Traceback (most recent call last):
    ...
    ValueError: image side 6 (n_in=36): expected a multiple of 4 for 2 pooling stages
    """

    n_in: int = 64
    n_out: int = 10
    channels: Sequence[int] = (16, 32)
    name = "convnet"

    def __post_init__(self) -> None:
        chans: object = self.channels
        if isinstance(chans, (str, bytes)) or not isinstance(chans, Sequence) or not chans:
            raise ValueError(f"channels={chans!r}: expected a non-empty list of positive integers")
        if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 1 for v in chans):
            raise ValueError(f"channels={list(chans)!r}: expected positive integers")
        self.channels = tuple(int(v) for v in chans)
        if self.n_out < 1:
            raise ValueError(f"n_out={self.n_out}: expected a positive number of classes")
        side = math.isqrt(self.n_in) if self.n_in >= 1 else 0
        if side < 1 or side * side != self.n_in:
            raise ValueError(f"n_in={self.n_in}: expected a square number of pixels (64 for 8x8 images)")
        k = len(self.channels)
        if side % 2**k:
            raise ValueError(
                f"image side {side} (n_in={self.n_in}): expected a multiple of {2**k} for {k} pooling stages"
            )
        self.side = side
        self.norm_params = frozenset(f"bn{i}_{p}" for i in range(k) for p in ("g", "b"))

    @classmethod
    def build(cls, n_in: int, n_out: int, **kwargs: Any) -> ConvNet:
        return cls(n_in, n_out, **kwargs)

    @property
    def n_features(self) -> int:
        """The length of the flattened features the head sees."""
        s: int = self.side // 2 ** len(self.channels)
        return s * s * self.channels[-1]

    @property
    def n_params(self) -> int:
        ins = (1, *self.channels[:-1])
        convs = sum(9 * a * b + 2 * b for a, b in zip(ins, self.channels, strict=True))
        return convs + self.n_features * self.n_out + self.n_out

    def config(self) -> dict[str, Any]:
        return {"name": "convnet", "n_in": self.n_in, "n_out": self.n_out, "channels": list(self.channels)}

    def describe(self) -> str:
        return f"convnet {'-'.join(str(c) for c in self.channels)} channels on {self.side}x{self.side}"

    @property
    def linear_sites(self) -> tuple[str, ...]:
        """The linear head (the convolutions are GEMMs the recipes leave alone)."""
        return ("Wc",)

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        shapes: dict[str, tuple[int, ...]] = {}
        c_in = 1
        for i, c in enumerate(self.channels):
            shapes[f"conv{i}_W"], shapes[f"bn{i}_g"], shapes[f"bn{i}_b"] = (3, 3, c_in, c), (c,), (c,)
            c_in = c
        shapes["Wc"], shapes["bc"] = (self.n_features, self.n_out), (self.n_out,)
        return shapes

    def buffer_shapes(self) -> dict[str, tuple[int, ...]]:
        """BatchNorm's running mean and variance of each convolution.

        >>> ConvNet(channels=(4,)).buffer_shapes()
        {'bn0_mean': (4,), 'bn0_var': (4,)}
        """
        return {f"bn{i}_{s}": (c,) for i, c in enumerate(self.channels) for s in ("mean", "var")}

    def init(self, rng: np.random.Generator) -> Params:
        w: Params = {}
        c_in = 1
        for i, c in enumerate(self.channels):
            # torch's defaults: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) weights, BatchNorm gamma 1, beta 0
            w[f"conv{i}_W"] = uniform_init(rng, (3, 3, c_in, c), 1.0 / math.sqrt(9 * c_in))
            w[f"bn{i}_g"] = np.ones(c, np.float32)
            w[f"bn{i}_b"] = np.zeros(c, np.float32)
            c_in = c
        f = self.n_features
        w["Wc"] = uniform_init(rng, (f, self.n_out), 1.0 / math.sqrt(f))
        w["bc"] = uniform_init(rng, (self.n_out,), 1.0 / math.sqrt(f))
        return w

    def init_buffers(self) -> Params:
        """Running mean 0 and running variance 1 per BatchNorm channel (torch's start).

        >>> sorted(ConvNet(channels=(4,)).init_buffers().items(), key=lambda kv: kv[0])[0][1].tolist()
        [0.0, 0.0, 0.0, 0.0]
        """
        buf: Params = {}
        for i, c in enumerate(self.channels):
            buf[f"bn{i}_mean"] = np.zeros(c, np.float32)
            buf[f"bn{i}_var"] = np.ones(c, np.float32)
        return buf

    def forward(
        self, w: Params, x: Array, P: Precision, *, train: bool = True, buffers: Params | None = None
    ) -> tuple[Array, Cache]:
        """Logits for the rows ``x`` (``(n, n_in)``) and the cache for :meth:`backward`. In training
        BatchNorm uses the batch statistics and updates ``buffers`` in place when given; with
        ``train=False`` it uses ``buffers`` (required then)."""
        if not train and buffers is None:
            raise ValueError("convnet with train=False needs buffers (the running statistics): got None")
        if x.ndim != 2 or x.shape[1] != self.n_in:
            raise ValueError(f"input of shape {x.shape}: expected (n, {self.n_in})")
        n, s = x.shape[0], self.side
        h = P.act(x.astype(P.dtype, copy=False)).reshape(n, s, s, 1)
        stages = []
        for i in range(len(self.channels)):
            z, conv = conv2d_forward(h, w[f"conv{i}_W"], None, P)
            mk, vk = f"bn{i}_mean", f"bn{i}_var"
            running = (buffers[mk], buffers[vk]) if buffers is not None else None
            a, bn, new = batch_norm_forward(z, w[f"bn{i}_g"], w[f"bn{i}_b"], P, running, train=train)
            if train and buffers is not None and new is not None:
                buffers[mk], buffers[vk] = new
            h, where = max_pool_forward(relu_forward(a))
            stages.append({"conv": conv, "bn": bn, "h": h, "where": where})
        flat = h.reshape(n, -1)
        logits = linear_forward(flat, w["Wc"], w["bc"], P, site="Wc")
        return logits, {"stages": stages, "flat": flat, "pooled": h.shape}

    def backward(self, w: Params, cache: Cache, dlogits: Array, P: Precision) -> Params:
        g: Params = {}
        dflat, g["Wc"], db = linear_backward(dlogits, cache["flat"], w["Wc"], P, site="Wc")
        assert dflat is not None
        assert db is not None
        g["bc"] = db
        dh = dflat.reshape(cache["pooled"])
        for i in reversed(range(len(self.channels))):
            st = cache["stages"][i]
            # ReLU's gradient taken at the pooled output, 4 times smaller: h = max(a, 0) at the
            # position the gradient goes to, so h > 0 exactly where that a > 0 (the same values)
            da = max_pool_backward(relu_backward(dh, st["h"]), st["where"])
            dz, g[f"bn{i}_g"], g[f"bn{i}_b"] = batch_norm_backward(da, st["bn"], w[f"bn{i}_g"], P)
            dx, g[f"conv{i}_W"], _ = conv2d_backward(dz, st["conv"], w[f"conv{i}_W"], P, input_grad=i > 0)
            if dx is not None:
                dh = dx
        return {k: g[k] for k in w}
