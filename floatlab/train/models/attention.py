"""A small attention classifier: one pre-norm self-attention block over the rows of an image,
where the reductions (softmax, layer norms, mean pooling) matter."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from floatlab.train.models.base import Cache, Model
from floatlab.train.models.layers import (
    layer_norm_backward,
    layer_norm_forward,
    linear_backward,
    linear_forward,
    mean_pool_backward,
    mean_pool_forward,
    required,
    softmax_backward,
    softmax_forward,
    uniform_init,
)
from floatlab.train.precision.precision import Array, Params, Precision

__all__ = ["AttentionNet"]


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

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        f, d, t, c = self.n_in // self.tokens, self.d_model, self.tokens, self.n_out
        return {
            "We": (f, d), "be": (d,), "pos": (t, d), "ln1_g": (d,), "ln1_b": (d,), "Wqkv": (d, 3 * d),
            "Wo": (d, d), "bo": (d,), "ln2_g": (d,), "ln2_b": (d,), "Wc": (d, c), "bc": (c,),
        }  # fmt: skip

    def init(self, rng: np.random.Generator) -> Params:
        f, d, t, c = self.n_in // self.tokens, self.d_model, self.tokens, self.n_out
        return {
            "We": uniform_init(rng, (f, d), 1.0 / math.sqrt(f)),
            "be": uniform_init(rng, (d,), 1.0 / math.sqrt(f)),
            "pos": uniform_init(rng, (t, d), 0.1),
            "ln1_g": np.ones(d, np.float32),
            "ln1_b": np.zeros(d, np.float32),
            "Wqkv": uniform_init(rng, (d, 3 * d), 1.0 / math.sqrt(d)),
            "Wo": uniform_init(rng, (d, d), 1.0 / math.sqrt(d)),
            "bo": uniform_init(rng, (d,), 1.0 / math.sqrt(d)),
            "ln2_g": np.ones(d, np.float32),
            "ln2_b": np.zeros(d, np.float32),
            "Wc": uniform_init(rng, (d, c), 1.0 / math.sqrt(d)),
            "bc": uniform_init(rng, (c,), 1.0 / math.sqrt(d)),
        }

    def describe(self) -> str:
        return f"attention {self.tokens} tokens x {self.d_model}"

    @property
    def linear_sites(self) -> tuple[str, ...]:
        """The embedding projection, the attention's two projections, the classifier.

        >>> AttentionNet(64, 10).linear_sites
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
        g["bc"] = required(db)
        dc = mean_pool_backward(required(dm), t, P)
        dh1, g["ln2_g"], g["ln2_b"] = layer_norm_backward(dc, cache["ln2"], w["ln2_g"], P)
        do_, g["Wo"], db = linear_backward(dh1, cache["o"], w["Wo"], P, site="Wo")
        g["bo"] = required(db)
        do = required(do_)
        p, q, k, v, alpha = cache["p"], cache["q"], cache["k"], cache["v"], cache["alpha"]
        dp = P.matmul(do, v.transpose(0, 2, 1), P.bwd)
        dv = P.matmul(p.transpose(0, 2, 1), do, P.bwd)
        ds = softmax_backward(dp, p, P)
        dq = P.matmul(ds, k, P.bwd, alpha=alpha)
        dk = P.matmul(ds.transpose(0, 2, 1), q, P.bwd, alpha=alpha)
        dqkv = np.concatenate([dq, dk, dv], axis=-1)
        da, g["Wqkv"], _ = linear_backward(dqkv, cache["a"], w["Wqkv"], P, bias=False, site="Wqkv")
        dln1, g["ln1_g"], g["ln1_b"] = layer_norm_backward(required(da), cache["ln1"], w["ln1_g"], P)
        # the residual stream's gradient: the skip path plus the attention path
        dh0 = P.grad(dh1 + dln1)
        _, g["We"], _ = linear_backward(dh0, cache["xt"], w["We"], P, bias=False, input_grad=False, site="We")
        rs = P.rounder(P.bwd, "sum")
        g["be"] = rs.out(rs.sum(dh0.reshape(-1, d), 0))
        g["pos"] = rs.out(rs.sum(dh0, 0))
        return {k_: g[k_] for k_ in w}
