"""The layers of a decoder-only transformer, as forward/backward pairs with precision at every
storage point: token and position embedding, multi-head causal self-attention, and the pre-norm
block that joins attention and a GELU MLP with residual adds.

They follow :mod:`floatlab.train.models` and reuse its layers (linear, layer norm, softmax,
GELU): activations are stored in the forward format, gradients in the backward format, GEMMs
run on the simulated tensor core, and softmax and layer-norm statistics follow the policy's
fp32-op list. Token-wise layers take their tokens flattened to rows ``(n * t, d)`` (one GEMM
per weight); attention views the rows as ``(n, heads, t, d_head)`` for its batched GEMMs.

>>> import numpy as np
>>> from floatlab.train.precision.precision import Precision
>>> P = Precision("fp32")
>>> rng = np.random.default_rng(0)
>>> a = rng.standard_normal((2 * 3, 8), dtype=np.float32)         # 2 sequences of 3 tokens
>>> Wqkv, Wo = np.eye(8, 24, 16, dtype=np.float32), np.eye(8, dtype=np.float32)   # v = a
>>> y, cache = attention_forward(a, Wqkv, None, Wo, None, (2, 3), 2, P)
>>> y.shape, bool(np.allclose(y[0], a[0]))   # the first token sees only itself: its own value
((6, 8), True)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from floatlab.train.models.layers import (
    gelu_backward,
    gelu_forward,
    layer_norm_backward,
    layer_norm_forward,
    linear_backward,
    linear_forward,
    softmax_backward,
    softmax_forward,
)
from floatlab.train.precision.precision import Array, Params, Precision

__all__ = [
    "BLOCK_PARAMS",
    "attention_backward",
    "attention_forward",
    "block_backward",
    "block_forward",
    "block_shapes",
    "causal_mask",
    "embedding_backward",
    "embedding_forward",
    "scatter_rows",
]

Cache = dict[str, Any]

#: the parameters of one block, as named in :func:`block_forward`'s ``w`` (after a prefix)
BLOCK_PARAMS: tuple[str, ...] = (
    "ln1_g", "ln1_b", "Wqkv", "bqkv", "Wo", "bo", "ln2_g", "ln2_b", "W1", "b1", "W2", "b2",
)  # fmt: skip


def block_shapes(d: int) -> dict[str, tuple[int, ...]]:
    """The shape of each of :data:`BLOCK_PARAMS` for width ``d`` (the MLP is 4 d wide).

    >>> block_shapes(8)["Wqkv"], block_shapes(8)["b1"]
    ((8, 24), (32,))
    """
    return {
        "ln1_g": (d,), "ln1_b": (d,), "Wqkv": (d, 3 * d), "bqkv": (3 * d,), "Wo": (d, d), "bo": (d,),
        "ln2_g": (d,), "ln2_b": (d,), "W1": (d, 4 * d), "b1": (4 * d,), "W2": (4 * d, d), "b2": (d,),
    }  # fmt: skip


# ---- embedding ------------------------------------------------------------------------------------
def embedding_forward(tok: Array, pos: Array, x: Array, P: Precision) -> Array:
    """Rows ``(n * t, d)``: token ``x[i, j]``'s row of ``tok`` plus row ``j`` of ``pos``.

    The gather is exact (the tables are already in the forward format); the sum of the two
    rows is stored once in the forward format.

    >>> tok, pos = np.eye(3, 2, dtype=np.float32), np.full((4, 2), 0.5, np.float32)
    >>> embedding_forward(tok, pos, np.array([[1, 0]]), Precision("fp32")).tolist()
    [[0.5, 1.5], [1.5, 0.5]]
    """
    n, t = x.shape
    e = np.take(tok, x, axis=0)  # (n, t, d), a fresh array: the position rows are added in place
    e += pos[:t]
    return P.act(e.reshape(n * t, -1))


def scatter_rows(idx: Array, rows: Array, n_rows: int) -> Array:
    """``out[idx[i]] += rows[i]`` into ``n_rows`` zero rows, accumulated in the rows' precision.

    The embedding's gradient: a scatter-add, done as one sort and one segmented sum
    (``np.add.reduceat``), which is several times faster than ``np.add.at`` and, unlike a
    one-hot GEMM, costs the same for any vocabulary size.

    >>> scatter_rows(np.array([2, 0, 2]), np.array([[1.0], [2.0], [3.0]]), 4).ravel().tolist()
    [2.0, 0.0, 4.0, 0.0]
    """
    out = np.zeros((n_rows, rows.shape[-1]), rows.dtype)
    if idx.size == 0:
        return out
    order = np.argsort(idx, kind="stable")
    si = idx[order]
    starts = np.flatnonzero(np.concatenate(([True], si[1:] != si[:-1])))
    out[si[starts]] = np.add.reduceat(rows[order], starts, axis=0)
    return out


def embedding_backward(dh: Array, x: Array, vocab: int, context: int, P: Precision) -> tuple[Array, Array]:
    """Gradients of :func:`embedding_forward` for the rows' gradient ``dh`` ``(n * t, d)``:
    ``(dtok, dpos)``, shaped as the tables ``(vocab, d)`` and ``(context, d)``.

    ``dtok`` is a scatter-add accumulated in the holding precision (fp32, as a GPU's atomic adds
    into a float32 buffer) and stored once in the backward format; ``dpos`` sums over the
    sequences under the "sum" switch (rows past ``t`` get zero).

    >>> dtok, dpos = embedding_backward(np.ones((2, 1)), np.array([[1, 1]]), 3, 4, Precision("fp32"))
    >>> dtok.ravel().tolist(), dpos.ravel().tolist()
    ([0.0, 2.0, 0.0], [1.0, 1.0, 0.0, 0.0])
    """
    n, t = x.shape
    d = dh.shape[-1]
    rs = P.rounder(P.bwd, "sum")
    dtok = rs.out(scatter_rows(x.reshape(-1), dh, vocab))
    dpos = np.zeros((context, d), dh.dtype)
    dpos[:t] = rs.out(rs.sum(dh.reshape(n, t, d), 0))
    return dtok, dpos


# ---- multi-head causal self-attention -------------------------------------------------------------
_MASKS: dict[tuple[int, Any], Array] = {}


def causal_mask(t: int, dtype: Any) -> Array:
    """The additive causal mask ``(t, t)``: 0 on and below the diagonal, -inf above (the future).

    >>> causal_mask(3, np.float32).tolist()
    [[0.0, -inf, -inf], [0.0, 0.0, -inf], [0.0, 0.0, 0.0]]
    """
    key = (t, np.dtype(dtype))
    if key not in _MASKS:
        m = np.triu(np.full((t, t), -np.inf, dtype), 1)
        m.flags.writeable = False  # shared by every call
        _MASKS[key] = m
    return _MASKS[key]


def _split_heads(qkv: Array, n: int, t: int, heads: int) -> tuple[Array, Array, Array]:
    """Views ``(n, heads, t, d_head)`` of q, k and v in the fused projection's rows (no copy: each
    head's matrix has unit column stride, so BLAS multiplies it in place)."""
    d = qkv.shape[-1] // 3
    v5 = qkv.reshape(n, t, 3, heads, d // heads)
    q, k, v = (v5[:, :, j].transpose(0, 2, 1, 3) for j in range(3))
    return q, k, v


def attention_forward(
    a: Array,
    Wqkv: Array,
    bqkv: Array | None,
    Wo: Array,
    bo: Array | None,
    shape: tuple[int, int],
    heads: int,
    P: Precision,
    prefix: str = "",
) -> tuple[Array, Cache]:
    """Multi-head causal self-attention of the rows ``a`` ``(n * t, d)`` of ``shape = (n, t)``.
    The two projections are linear layers named ``prefix + "Wqkv"`` and ``prefix + "Wo"``.

    One fused projection ``a @ Wqkv + bqkv`` gives q, k and v; each head's scores
    ``q k^T / sqrt(d_head)`` come from a batched GEMM (stored in the forward format), the future
    is masked, the softmax weights the values, and the heads, joined again, go through the
    output projection ``@ Wo + bo``.

    The mask is applied to the stored scores in the holding precision, as a fused attention
    kernel applies it inside its fp32 softmax: a masked score is -inf, never a value stored in
    the forward format, so it is -inf in every policy, and ``exp`` makes it exactly 0. The
    diagonal is never masked, so every row has a finite maximum and a sum of at least 1. (A
    policy that computed softmax in a format without infinities, such as fp8 e4m3, would
    round the -inf to NaN: every named policy keeps softmax in fp32 or uses fp16/bf16.)

    >>> P = Precision("fp32")
    >>> a = np.arange(8, dtype=np.float32).reshape(4, 2)
    >>> y, _ = attention_forward(a, np.eye(2, 6, 4, dtype=np.float32), None,
    ...                          np.eye(2, dtype=np.float32), None, (1, 4), 1, P)
    >>> y[:, 0].tolist()   # q = k = 0: each token averages the values of itself and its past
    [0.0, 1.0, 2.0, 3.0]
    """
    n, t = shape
    d = a.shape[-1]
    qkv = linear_forward(a, Wqkv, bqkv, P, site=prefix + "Wqkv")
    q, k, v = _split_heads(qkv, n, t, heads)
    alpha = 1.0 / math.sqrt(d // heads)
    s = P.matmul(q, k.transpose(0, 1, 3, 2), P.fwd, alpha=alpha)
    np.add(s, causal_mask(t, s.dtype), out=s)
    p = softmax_forward(s, P)
    o = P.matmul(p, v, P.fwd)  # (n, heads, t, d_head)
    oc = o.transpose(0, 2, 1, 3).reshape(n * t, d)  # heads joined: the one copy of the layer
    y = linear_forward(oc, Wo, bo, P, site=prefix + "Wo")
    cache = {"a": a, "qkv": qkv, "p": p, "oc": oc, "shape": shape, "heads": heads, "alpha": alpha}
    cache["prefix"] = prefix
    return y, cache


def attention_backward(
    dy: Array, cache: Cache, Wqkv: Array, Wo: Array, P: Precision, *, bias: bool = True
) -> tuple[Array, Params]:
    """Gradients of :func:`attention_forward`: ``(da, grads)`` with ``grads`` keyed
    ``Wqkv, bqkv, Wo, bo`` (the biases only with ``bias=True``), all in the backward format.

    The masked scores need no care: their softmax weights are exactly 0, so their gradients
    ``p * (dp - sum(dp * p))`` are too.

    >>> P = Precision("fp64")
    >>> a = np.random.default_rng(0).standard_normal((4, 2))
    >>> Wqkv, Wo = np.ones((2, 6)), np.eye(2)
    >>> y, cache = attention_forward(a, Wqkv, None, Wo, None, (1, 4), 2, P)
    >>> da, g = attention_backward(np.ones((4, 2)), cache, Wqkv, Wo, P, bias=False)
    >>> da.shape, sorted(g)
    ((4, 2), ['Wo', 'Wqkv'])
    """
    n, t = cache["shape"]
    heads, alpha = cache["heads"], cache["alpha"]
    qkv, p = cache["qkv"], cache["p"]
    d = Wo.shape[0]
    dh_ = d // heads
    grads: Params = {}
    prefix = cache["prefix"]
    doc, grads["Wo"], dbo = linear_backward(dy, cache["oc"], Wo, P, bias=bias, site=prefix + "Wo")
    assert doc is not None
    do = doc.reshape(n, t, heads, dh_).transpose(0, 2, 1, 3)
    q, k, v = _split_heads(qkv, n, t, heads)
    dp = P.matmul(do, v.transpose(0, 1, 3, 2), P.bwd)
    dv = P.matmul(p.transpose(0, 1, 3, 2), do, P.bwd)
    ds = softmax_backward(dp, p, P)
    dq = P.matmul(ds, k, P.bwd, alpha=alpha)
    dk = P.matmul(ds.transpose(0, 1, 3, 2), q, P.bwd, alpha=alpha)
    # the three gradients go back into the fused projection's layout (n, t, 3, heads, d_head)
    dqkv = np.empty((n, t, 3, heads, dh_), dq.dtype)
    for j, g in enumerate((dq, dk, dv)):
        dqkv[:, :, j] = g.transpose(0, 2, 1, 3)
    da, grads["Wqkv"], dbqkv = linear_backward(
        dqkv.reshape(n * t, 3 * d), cache["a"], Wqkv, P, bias=bias, site=prefix + "Wqkv"
    )
    assert da is not None
    if bias:
        assert dbqkv is not None
        assert dbo is not None
        grads["bqkv"], grads["bo"] = dbqkv, dbo
    return da, grads


# ---- one pre-norm block ---------------------------------------------------------------------------
def block_forward(
    h: Array, w: Params, shape: tuple[int, int], heads: int, P: Precision, prefix: str = ""
) -> tuple[Array, Cache]:
    """One pre-LayerNorm block on the residual stream's rows ``h`` ``(n * t, d)``::

        h1 = h + attention(LN1(h))          # multi-head causal self-attention
        h2 = h1 + W2 gelu(W1 LN2(h1))       # MLP, hidden width 4 d

    ``w`` holds :data:`BLOCK_PARAMS`. Each residual sum is stored in the forward format. The
    linear layers are named by ``prefix`` and their weight (``prefix + "W1"``, ...).

    >>> P, d = Precision("fp32"), 4
    >>> w = {k: np.zeros(shape, np.float32) for k, shape in block_shapes(d).items()}
    >>> h = np.ones((2 * 3, d), np.float32)
    >>> y, _ = block_forward(h, w, (2, 3), 2, P)   # zero weights: both branches add nothing
    >>> bool((y == h).all())
    True
    """
    a, ln1 = layer_norm_forward(h, w["ln1_g"], w["ln1_b"], P)
    att, acache = attention_forward(a, w["Wqkv"], w["bqkv"], w["Wo"], w["bo"], shape, heads, P, prefix)
    att += h  # the residual add, in place on the fresh projection output, stored once
    h1 = P.act(att)
    b, ln2 = layer_norm_forward(h1, w["ln2_g"], w["ln2_b"], P)
    u = linear_forward(b, w["W1"], w["b1"], P, site=prefix + "W1")
    g = gelu_forward(u, P)
    m = linear_forward(g, w["W2"], w["b2"], P, site=prefix + "W2")
    m += h1
    h2 = P.act(m)
    return h2, {"ln1": ln1, "att": acache, "ln2": ln2, "b": b, "u": u, "g": g, "prefix": prefix}


def block_backward(dh2: Array, w: Params, cache: Cache, P: Precision) -> tuple[Array, Params]:
    """Gradients of :func:`block_forward`: ``(dh, grads)``, ``grads`` keyed by :data:`BLOCK_PARAMS`.
    Each residual sum of gradients (skip path plus branch) is stored in the backward format.

    >>> P, d = Precision("fp64"), 4
    >>> rng = np.random.default_rng(0)
    >>> w = {k: rng.standard_normal(shape) for k, shape in block_shapes(d).items()}
    >>> y, cache = block_forward(rng.standard_normal((6, d)), w, (2, 3), 2, P)
    >>> dh, g = block_backward(np.ones((6, d)), w, cache, P)
    >>> dh.shape, sorted(g) == sorted(BLOCK_PARAMS)
    ((6, 4), True)
    """
    grads: Params = {}
    prefix = cache["prefix"]
    dg, grads["W2"], db2 = linear_backward(dh2, cache["g"], w["W2"], P, site=prefix + "W2")
    assert dg is not None
    assert db2 is not None
    du = gelu_backward(dg, cache["u"], P)
    db_, grads["W1"], db1 = linear_backward(du, cache["b"], w["W1"], P, site=prefix + "W1")
    assert db_ is not None
    assert db1 is not None
    grads["b2"], grads["b1"] = db2, db1
    dln2, grads["ln2_g"], grads["ln2_b"] = layer_norm_backward(db_, cache["ln2"], w["ln2_g"], P)
    dln2 += dh2  # the skip path's gradient joins the branch's, in place, stored once
    dh1 = P.grad(dln2)
    da, ag = attention_backward(dh1, cache["att"], w["Wqkv"], w["Wo"], P)
    grads.update(ag)
    dln1, grads["ln1_g"], grads["ln1_b"] = layer_norm_backward(da, cache["ln1"], w["ln1_g"], P)
    dln1 += dh1
    dh = P.grad(dln1)
    return dh, grads
