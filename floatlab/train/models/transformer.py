"""A decoder-only transformer language model in NumPy, precision at every storage point.

:class:`TransformerLM` is GPT-2's shape at a small size: token and learned position embeddings,
``layers`` pre-LayerNorm blocks (multi-head causal self-attention, a GELU MLP of width 4 d,
residual adds), a final LayerNorm, and logits from the token embedding itself (tied weights).
The layers live in :mod:`floatlab.train.models.seq_layers` and reuse :mod:`floatlab.train.models`'s, so
softmax, the LayerNorm statistics and the loss follow the policy's fp32-op list as in the
frameworks, and every GEMM runs on the simulated tensor core.

>>> import numpy as np
>>> from floatlab.train.precision.precision import Precision
>>> m = TransformerLM(context=16, vocab=27, layers=2, d_model=32, heads=4)
>>> m.describe(), m.n_params
('transformer 2 layers x 32, 4 heads, context 16', 26848)
>>> w = m.init(np.random.default_rng(0))
>>> x = np.random.default_rng(1).integers(0, 27, (3, 16))      # 3 sequences of 16 tokens
>>> logits, cache = m.forward(w, x, Precision("mixed-bf16"))
>>> logits.shape
(3, 16, 27)
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np

from floatlab.train.models.base import Model
from floatlab.train.models.layers import layer_norm_backward, layer_norm_forward
from floatlab.train.models.seq_layers import (
    BLOCK_PARAMS,
    block_backward,
    block_forward,
    block_shapes,
    embedding_backward,
    embedding_forward,
)
from floatlab.train.precision.precision import Array, Params, Precision

__all__ = ["TransformerLM"]

Cache = dict[str, Any]


def _positive(name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
        raise ValueError(f"{name}={v!r}: expected a positive integer")
    return int(v)


@dataclass
class TransformerLM(Model):
    """Decoder-only transformer: ``context`` tokens of a ``vocab``-symbol alphabet in, next-token
    logits ``(n, t, vocab)`` out.

    Parameters (float32, names as in :meth:`init`): ``tok`` ``(vocab, d)``, ``pos``
    ``(context, d)``; per block ``i`` the :data:`~floatlab.train.models.seq_layers.BLOCK_PARAMS` with
    the prefix ``h{i}.`` (LayerNorms ``ln1``/``ln2``, the fused QKV projection ``Wqkv`` with its
    bias ``bqkv``, as GPT-2's ``c_attn``, the output projection ``Wo, bo``, the MLP ``W1, b1``
    ``(d, 4d)`` and ``W2, b2``); the final LayerNorm ``lnf_g, lnf_b``.

    The output layer is tied to the token embedding: ``logits = LN_f(h) @ tok^T`` (GPT-2's and
    nanoGPT's choice: ``vocab * d`` fewer weights, and the table learns from both ends), so
    ``tok``'s gradient is the sum of the embedding's scatter-add and the logits GEMM's.

    Initialisation as GPT-2: normal(0, 0.02) weights and embeddings, the two projections that
    end a residual branch (``Wo``, ``W2``) scaled down by ``1 / sqrt(2 * layers)``, LayerNorm
    gains 1 and shifts 0, biases 0.

    >>> TransformerLM(64, 65).describe()
    'transformer 4 layers x 128, 4 heads, context 64'
    >>> TransformerLM(64, 65, d_model=100, heads=3)
    Traceback (most recent call last):
    ...
    ValueError: d_model=100 is not divisible by heads=3: expected a width that splits evenly into heads
    """

    context: int
    vocab: int
    layers: int = 4
    d_model: int = 128
    heads: int = 4
    name = "transformer"

    def __post_init__(self) -> None:
        for name in ("context", "vocab", "layers", "d_model", "heads"):
            setattr(self, name, _positive(name, getattr(self, name)))
        if self.d_model % self.heads:
            raise ValueError(
                f"d_model={self.d_model} is not divisible by heads={self.heads}: "
                "expected a width that splits evenly into heads"
            )

    @classmethod
    def build(cls, n_in: int, n_out: int, **kwargs: Any) -> TransformerLM:
        """The model :func:`~floatlab.train.models.get_model` asks for: ``n_in`` is the context
        length, ``n_out`` the vocabulary size; ``kwargs``: ``layers``, ``d_model``, ``heads``.

        >>> TransformerLM.build(32, 65, layers=1, d_model=16, heads=2).config()["layers"]
        1
        """
        return cls(n_in, n_out, **kwargs)

    @property
    def n_params(self) -> int:
        d = self.d_model
        block = sum(math.prod(shape) for shape in block_shapes(d).values())
        return self.vocab * d + self.context * d + self.layers * block + 2 * d

    def config(self) -> dict[str, Any]:
        return {
            "name": "transformer",
            "context": self.context,
            "vocab": self.vocab,
            "layers": self.layers,
            "d_model": self.d_model,
            "heads": self.heads,
        }

    def describe(self) -> str:
        shape = f"{self.layers} layers x {self.d_model}, {self.heads} heads, context {self.context}"
        return f"transformer {shape}"

    @property
    def linear_sites(self) -> tuple[str, ...]:
        """Each block's QKV and output projections and its MLP's two layers, block by block (the
        tied logits GEMM and the embedding are not linear layers a recipe scales).

        >>> TransformerLM(8, 10, layers=2).linear_sites[-2:]
        ('h1.W1', 'h1.W2')
        """
        return tuple(f"h{i}.{k}" for i in range(self.layers) for k in ("Wqkv", "Wo", "W1", "W2"))

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        d = self.d_model
        shapes: dict[str, tuple[int, ...]] = {"tok": (self.vocab, d), "pos": (self.context, d)}
        for i in range(self.layers):
            shapes.update({f"h{i}.{k}": shape for k, shape in block_shapes(d).items()})
        shapes["lnf_g"], shapes["lnf_b"] = (d,), (d,)
        return shapes

    def init(self, rng: np.random.Generator) -> Params:
        d, f32 = self.d_model, np.float32

        def normal(shape: tuple[int, ...], std: float) -> Array:
            out: Array = rng.standard_normal(shape, dtype=f32) * f32(std)
            return out

        # the branch-ending projections add into the residual stream 2 * layers times
        proj_std = 0.02 / math.sqrt(2 * self.layers)
        w: Params = {"tok": normal((self.vocab, d), 0.02), "pos": normal((self.context, d), 0.02)}
        for i in range(self.layers):
            for k, shape in block_shapes(d).items():
                if k in ("Wqkv", "W1"):
                    w[f"h{i}.{k}"] = normal(shape, 0.02)
                elif k in ("Wo", "W2"):
                    w[f"h{i}.{k}"] = normal(shape, proj_std)
                else:  # LayerNorm gains 1, shifts and biases 0
                    w[f"h{i}.{k}"] = np.full(shape, 1.0 if k.endswith("_g") else 0.0, f32)
        w["lnf_g"], w["lnf_b"] = np.ones(d, f32), np.zeros(d, f32)
        return w

    def check_tokens(self, x: Any) -> Array:
        """``x`` as an integer array of token ids ``(n, t)``, ``1 <= t <= context``, each in
        ``[0, vocab)``; anything else is a one-line ValueError.

        >>> TransformerLM(4, 10).check_tokens(np.zeros((2, 5), int))
        Traceback (most recent call last):
        ...
        ValueError: tokens of shape (2, 5): expected (n, t) integer token ids with 1 <= t <= context=4
        """
        x = x if hasattr(x, "ndim") else np.asarray(x)
        if x.ndim != 2 or x.shape[0] < 1 or not 1 <= x.shape[1] <= self.context:
            raise ValueError(
                f"tokens of shape {x.shape}: expected (n, t) integer token ids "
                f"with 1 <= t <= context={self.context}"
            )
        if x.dtype.kind not in "iu":
            raise ValueError(f"tokens of dtype {x.dtype}: expected integer token ids")
        lo, hi = int(x.min()), int(x.max())
        if lo < 0 or hi >= self.vocab:
            bad = lo if lo < 0 else hi
            raise ValueError(f"token id {bad}: expected ids in [0, {self.vocab}) (the vocabulary size)")
        out: Array = x
        return out

    def forward(
        self, w: Params, x: Array, P: Precision, *, train: bool = True, buffers: Params | None = None
    ) -> tuple[Array, Cache]:
        x = self.check_tokens(x)
        n, t = x.shape
        h = embedding_forward(w["tok"], w["pos"], x, P)
        blocks = []
        for i in range(self.layers):
            h, c = block_forward(h, self._block(w, i), (n, t), self.heads, P, prefix=f"h{i}.")
            blocks.append(c)
        hf, lnf = layer_norm_forward(h, w["lnf_g"], w["lnf_b"], P)
        # tied output: the logits GEMM multiplies by the token table itself (its transpose, a view)
        logits = P.matmul(hf, w["tok"].T, P.fwd)
        cache = {"x": x, "blocks": blocks, "hf": hf, "lnf": lnf}
        return logits.reshape(n, t, self.vocab), cache

    def backward(self, w: Params, cache: Cache, dlogits: Array, P: Precision) -> Params:
        x, hf = cache["x"], cache["hf"]
        dl = dlogits.reshape(-1, self.vocab)
        g: Params = {}
        dhf = P.matmul(dl, w["tok"], P.bwd)
        dh, g["lnf_g"], g["lnf_b"] = layer_norm_backward(dhf, cache["lnf"], w["lnf_g"], P)
        for i in reversed(range(self.layers)):
            dh, bg = block_backward(dh, self._block(w, i), cache["blocks"][i], P)
            g.update({f"h{i}.{k}": v for k, v in bg.items()})
        demb, g["pos"] = embedding_backward(dh, x, self.vocab, self.context, P)
        # the tied table's gradient: the logits GEMM accumulates onto the stored embedding
        # gradient in its epilogue (C = A B + C, one rounding), as a fused GEMM with beta = 1
        # does; PyTorch's autograd instead rounds each use's gradient and adds the two (one
        # rounding more: tests/torch/test_torch_transformer.py bounds the difference by an ulp)
        g["tok"] = P.matmul(dl.T, hf, P.bwd, bias=demb)
        return {k: g[k] for k in w}

    def _block(self, w: Params, i: int) -> Params:
        return {k: w[f"h{i}.{k}"] for k in BLOCK_PARAMS}
