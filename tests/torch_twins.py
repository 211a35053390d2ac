"""What the torch twins of floatlab's models share (imported by the torch tests only, after their
``pytest.importorskip("torch")``)."""

from __future__ import annotations

from typing import Any

import torch


class StoredSoftmax(torch.autograd.Function):
    """Softmax whose backward uses its stored output ``p`` (rounded into the forward format by
    ``store``), as floatlab's :func:`~floatlab.train.models.softmax_backward` does with the cached
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


class Raising(torch.nn.Module):
    """A layer whose forward pass raises an exception of the given kind (KeyboardInterrupt too)."""

    def __init__(self, kind: type[BaseException]) -> None:
        super().__init__()
        self.kind = kind

    def forward(self, x: Any) -> Any:
        raise self.kind("stop")


def model_state(model: torch.nn.Module) -> dict[str, Any]:
    """What simulate or inspect could leave behind on a model or in torch: each module's hooks and
    instance attributes, the parameters' and buffers' values and dtypes, and torch's stack of
    function modes (compare two with :func:`same_state`)."""
    return {
        "modes": torch._C._len_torch_function_stack(),
        "modules": [
            (
                name,
                sorted(vars(m)),
                [
                    list(getattr(m, hooks))
                    for hooks in (
                        "_forward_pre_hooks",
                        "_forward_hooks",
                        "_backward_pre_hooks",
                        "_backward_hooks",
                    )
                ],
            )
            for name, m in model.named_modules()
        ],
        "tensors": {k: v.detach().clone() for k, v in model.state_dict(keep_vars=True).items()},
    }


def same_state(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two :func:`model_state` snapshots agree: the same hooks, attributes and mode stack, and
    every tensor equal in value (NaN where NaN) and dtype."""
    if a["modes"] != b["modes"] or a["modules"] != b["modules"] or a["tensors"].keys() != b["tensors"].keys():
        return False
    return all(
        x.dtype == y.dtype and torch.equal(x.isnan(), y.isnan()) and torch.equal(x[~x.isnan()], y[~y.isnan()])
        for x, y in ((a["tensors"][k], b["tensors"][k]) for k in a["tensors"])
    )
