"""Attention written out as its GEMMs, for simulate to round and inspect to watch:
:func:`attend` (``F.scaled_dot_product_attention``'s math) and :func:`multi_head_attention`
(``F.multi_head_attention_forward``, the function ``nn.MultiheadAttention`` calls).

Both call back at each storage point: ``on(tensor, role) -> tensor`` for ``"query"``, ``"key"``,
``"value"``, ``"scores"`` (``q @ k^T * scale``), ``"softmax"`` (its probabilities) and
``"output"`` (``p @ v``); :func:`multi_head_attention` also takes ``linear(x, weight, bias,
role)`` for its projections (``"q_proj"``, ``"k_proj"``, ``"v_proj"``, ``"out_proj"``). Simulate
rounds there; inspect counts there. The math is torch's own reference (the documentation of
``scaled_dot_product_attention``, and ``multi_head_attention_forward``'s body): the scores, the
mask and the softmax in the inputs' precision, ``aten._safe_softmax`` (a query that sees no key
gets zeros), dropout from torch's generator (not the same mask as a fused kernel).

:func:`multi_head_attention` covers what ``nn.MultiheadAttention`` does in training and in
evaluation (packed or separate projections, batched or not, ``key_padding_mask``, ``attn_mask``,
``need_weights``, ``average_attn_weights``, dropout) and returns None for the options it does not
write out (``bias_k``/``bias_v``, ``add_zero_attn``, ``static_k``/``static_v``): the caller then
runs torch's function as it is and says so.

>>> import torch
>>> _ = torch.manual_seed(0)
>>> mha = torch.nn.MultiheadAttention(8, 2)
>>> x = torch.randn(5, 3, 8)
>>> ref, _ = mha(x, x, x, need_weights=False)
>>> args = (x, x, x, 8, 2, mha.in_proj_weight, mha.in_proj_bias, None, None, False, 0.0,
...         mha.out_proj.weight, mha.out_proj.bias)
>>> out, _ = multi_head_attention(args, {"need_weights": False})
>>> torch.allclose(out, ref, atol=1e-6)
True
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

__all__ = ["MHA_ARGS", "PARTS", "AttentionWatch", "attend", "multi_head_attention"]

Store = Callable[[torch.Tensor, str], torch.Tensor]
Linear = Callable[[torch.Tensor, torch.Tensor, "torch.Tensor | None", str], torch.Tensor]

#: the parameters of ``F.multi_head_attention_forward``, in order
MHA_ARGS: tuple[str, ...] = (
    "query", "key", "value", "embed_dim_to_check", "num_heads", "in_proj_weight", "in_proj_bias",
    "bias_k", "bias_v", "add_zero_attn", "dropout_p", "out_proj_weight", "out_proj_bias", "training",
    "key_padding_mask", "need_weights", "attn_mask", "use_separate_proj_weight", "q_proj_weight",
    "k_proj_weight", "v_proj_weight", "static_k", "static_v", "average_attn_weights", "is_causal",
)  # fmt: skip


def _same(t: torch.Tensor, _role: str) -> torch.Tensor:
    return t


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    mask: torch.Tensor | None = None,
    causal: bool = False,
    scale: float | None = None,
    dropout: float = 0.0,
    gqa: bool = False,
    on: Store = _same,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``softmax(q @ k^T * scale + mask) @ v`` and the probabilities (after dropout), with
    ``on`` at each storage point (see the module). ``mask`` is SDPA's: boolean (True: attend)
    or added to the scores.

    >>> import torch
    >>> q = k = v = torch.eye(2).reshape(1, 2, 2)
    >>> out, p = attend(q, k, v)
    >>> torch.allclose(out, torch.nn.functional.scaled_dot_product_attention(q, k, v))
    True
    """
    if mask is not None and causal:
        raise ValueError(
            "scaled_dot_product_attention with attn_mask and is_causal=True: expected one of them"
        )
    q, k, v = on(q, "query"), on(k, "key"), on(v, "value")
    factor = 1 / math.sqrt(q.size(-1)) if scale is None else scale
    if gqa:  # key and value heads shared by groups of query heads
        k = k.repeat_interleave(q.size(-3) // k.size(-3), -3)
        v = v.repeat_interleave(q.size(-3) // v.size(-3), -3)
    s = on(torch.matmul(q, k.transpose(-2, -1)) * factor, "scores")
    if causal:
        seen = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=s.device).tril()
        s = s.masked_fill(~seen, float("-inf"))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask
    p = torch.ops.aten._safe_softmax(s, -1)
    if dropout > 0:
        p = torch.dropout(p, dropout, train=True)
    p = on(p, "softmax")
    return on(torch.matmul(p, v), "output"), p


def _additive(mask: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor | None:
    """MHA's mask (boolean: True masks out; or added) as an additive float mask."""
    if mask is None:
        return None
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=like.dtype, device=like.device).masked_fill(mask, float("-inf"))
    return mask.to(like.dtype)


def _plain_linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, _role: str) -> torch.Tensor:
    return F.linear(x, w, b)


def multi_head_attention(
    args: tuple[Any, ...], kwargs: dict[str, Any], *, linear: Linear = _plain_linear, on: Store = _same
) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """``F.multi_head_attention_forward(*args, **kwargs)`` written out (see the module), or None
    for an option it does not write out.

    >>> import torch
    >>> w = torch.eye(6, 2)
    >>> args = (torch.ones(1, 2), torch.ones(1, 2), torch.ones(1, 2), 2, 1, w, None, torch.ones(1, 1, 2),
    ...         None, False, 0.0, torch.eye(2), None)
    >>> multi_head_attention(args, {}) is None     # bias_k: torch's own function runs
    True
    """
    a = {**dict(zip(MHA_ARGS, args, strict=False)), **kwargs}
    if a.get("bias_k") is not None or a.get("bias_v") is not None or a.get("add_zero_attn"):
        return None
    if a.get("static_k") is not None or a.get("static_v") is not None:
        return None
    query, key, value = a["query"], a["key"], a["value"]
    heads = int(a["num_heads"])
    batched = query.dim() == 3
    kpm = a.get("key_padding_mask")
    mask = a.get("attn_mask")
    if not batched:
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
        kpm = kpm.unsqueeze(0) if kpm is not None else None
    length, batch, embed = query.shape
    hd = embed // heads
    if a.get("use_separate_proj_weight"):
        ws = (a["q_proj_weight"], a["k_proj_weight"], a["v_proj_weight"])
    else:
        ws = tuple(a["in_proj_weight"].chunk(3))
    b = a.get("in_proj_bias")
    bs: tuple[Any, ...] = (None, None, None) if b is None else tuple(b.chunk(3))
    q = linear(query, ws[0], bs[0], "q_proj")
    k = linear(key, ws[1], bs[1], "k_proj")
    v = linear(value, ws[2], bs[2], "v_proj")
    q = q.reshape(length, batch * heads, hd).transpose(0, 1)
    k = k.reshape(k.shape[0], batch * heads, hd).transpose(0, 1)
    v = v.reshape(v.shape[0], batch * heads, hd).transpose(0, 1)
    s_len = k.shape[1]
    add = _additive(mask, q)
    if add is not None and add.dim() == 2:
        add = add.unsqueeze(0)
    if kpm is not None:
        pad = _additive(kpm, q)
        assert pad is not None
        pad = pad.view(batch, 1, 1, s_len).expand(-1, heads, -1, -1).reshape(batch * heads, 1, s_len)
        add = pad if add is None else add + pad
    training = a.get("training", True)
    dropout = float(a.get("dropout_p", 0.0)) if training else 0.0
    out, p = attend(q, k, v, mask=add, dropout=dropout, on=on)
    out = out.transpose(0, 1).reshape(length * batch, embed)
    out = linear(out, a["out_proj_weight"], a.get("out_proj_bias"), "out_proj").view(length, batch, embed)
    weights = None
    if a.get("need_weights", True):
        weights = p.view(batch, heads, length, s_len)
        if a.get("average_attn_weights", True):
            weights = weights.mean(dim=1)
        if not batched:
            weights = weights.squeeze(0)
    if not batched:
        out = out.squeeze(1)
    return out, weights


#: the tensors :class:`AttentionWatch` shows inside a ``MultiheadAttention`` named ``attn``:
#: ``attn.<part>``, in the order they are computed (``attn.out_proj`` is the layer's own module)
PARTS: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "scores", "softmax", "attention", "out_proj")


class _MhaMode(TorchFunctionMode):
    def __init__(self, watch: AttentionWatch) -> None:
        super().__init__()
        self.watch = watch

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = dict(kwargs or {})
        if func is not F.multi_head_attention_forward or not self.watch.names:
            return func(*args, **kwargs)
        name, see = self.watch.names[-1], self.watch.see

        def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, role: str) -> torch.Tensor:
            return see(f"{name}.{role}", F.linear(x, w, b))

        def on(t: torch.Tensor, role: str) -> torch.Tensor:
            part = {"scores": "scores", "softmax": "softmax", "output": "attention"}.get(role)
            return see(f"{name}.{part}", t) if part else t

        out = multi_head_attention(args, kwargs, linear=linear, on=on)
        if out is None:
            self.watch.unseen[name] = (
                "bias_k, bias_v, add_zero_attn or static keys: torch's fused function runs"
            )
            return func(*args, **kwargs)
        return out


class AttentionWatch:
    """Shows the tensors inside every ``nn.MultiheadAttention`` of ``model`` (:data:`PARTS`) to
    ``see(name, tensor) -> tensor`` while attached (a context manager): the layer's function runs
    written out (:func:`multi_head_attention`), and torch's fused fast paths
    (``MultiheadAttention``'s and ``TransformerEncoderLayer``'s, in evaluation without gradients)
    are switched off meanwhile, so that none of them hides the tensors. :attr:`unseen` names the
    layers whose tensors could not be shown, and why.

    >>> import torch
    >>> mha = torch.nn.MultiheadAttention(4, 1)
    >>> seen = []
    >>> with AttentionWatch(mha, lambda name, t: seen.append(name) or t):
    ...     _ = mha(torch.ones(2, 1, 4), torch.ones(2, 1, 4), torch.ones(2, 1, 4))
    >>> seen == [f".{p}" for p in PARTS]
    True
    """

    def __init__(self, model: torch.nn.Module, see: Callable[[str, torch.Tensor], torch.Tensor]) -> None:
        self.model = model
        self.see = see
        self.names: list[str] = []
        self.unseen: dict[str, str] = {}
        self._handles: list[Any] = []
        self._modes: list[_MhaMode] = []
        self._fastpath: bool | None = None

    def _enter(self, name: str) -> Callable[..., None]:
        def hook(*_: Any) -> None:
            self.names.append(name)
            mode = _MhaMode(self)
            mode.__enter__()  # type: ignore[no-untyped-call]
            self._modes.append(mode)

        return hook

    def _leave(self, *_: Any) -> None:
        if self._modes:
            mode = self._modes.pop()
            if torch.overrides._get_current_function_mode() is mode:  # type: ignore[no-untyped-call]
                mode.__exit__(None, None, None)
        if self.names:
            self.names.pop()

    def __enter__(self) -> AttentionWatch:
        self._fastpath = torch.backends.mha.get_fastpath_enabled()
        torch.backends.mha.set_fastpath_enabled(False)
        for name, m in self.model.named_modules():
            if isinstance(m, torch.nn.MultiheadAttention):
                self._handles.append(m.register_forward_pre_hook(self._enter(name)))
                self._handles.append(m.register_forward_hook(self._leave, always_call=True))
        return self

    def __exit__(self, *_: Any) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
        while self._modes:
            self._leave()
        if self._fastpath is not None:
            torch.backends.mha.set_fastpath_enabled(self._fastpath)
            self._fastpath = None
