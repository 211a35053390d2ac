"""What the torch twins of floatlab's models share (imported by the torch tests only, after their
``pytest.importorskip("torch")``)."""

from __future__ import annotations

from typing import Any

import torch


class StoredSoftmax(torch.autograd.Function):
    """Softmax whose backward uses its stored output ``p`` (rounded into the forward format by
    ``store``), as floatlab's :func:`~floatlab.train.model.softmax_backward` does with the cached
    ``p``; torch's own softmax keeps its fp32 output (a difference of the models, not of simulate)."""

    @staticmethod
    def forward(ctx: Any, s: Any, store: Any) -> Any:
        p = store(torch.softmax(s, -1))
        ctx.save_for_backward(p)
        return p

    @staticmethod
    def backward(ctx: Any, dp: Any) -> Any:
        (p,) = ctx.saved_tensors
        return p * (dp - (dp * p).sum(-1, keepdim=True)), None
