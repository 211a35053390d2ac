"""A Linear layer's three GEMMs under a policy's recipe (simulate's autograd function)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def host(t: torch.Tensor) -> np.ndarray[Any, Any]:
    """A float32 NumPy array of ``t``'s values (a view for a CPU float32 tensor)."""
    out: np.ndarray[Any, Any] = t.detach().to("cpu", torch.float32).numpy()
    return out


class RecipeLinear(torch.autograd.Function):
    """``F.linear`` under a recipe: the forward GEMM ``x @ W^T``, and backward the data gradient
    ``dy @ W`` and the weight gradient ``dy^T x``, each through the simulation's scaling, exactly
    as :func:`floatlab.train.models.linear_forward` and ``linear_backward`` call
    :meth:`~floatlab.train.precision.Precision.linear`: operands stored in the policy's formats
    (inputs and weights forward, gradients backward), the bias added in the epilogue, the output
    stored in the forward format and the gradients sent on in the backward format."""

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        sim: Any,
        site: str,
        record: bool,
    ) -> torch.Tensor:
        assert sim.scaling is not None
        fwd = sim.policy.forward
        xs = host(sim.round(x, fwd)).reshape(-1, x.shape[-1])
        w = host(sim.round(weight, fwd))  # (out, in): W = w.T, as floatlab's (in, out) weight
        y = sim.scaling.matmul(site, xs, "input", w.T, "weight", record=record)
        if bias is not None:
            y = y + host(sim.round(bias, fwd))
        ctx.sim, ctx.site, ctx.record = sim, site, record
        ctx.shape, ctx.has_bias = x.shape, bias is not None
        ctx.xs, ctx.w = xs, w
        out = torch.from_numpy(np.ascontiguousarray(y)).reshape(*x.shape[:-1], w.shape[0])
        stored: torch.Tensor = sim.round(out.to(x.dtype), fwd)
        return stored

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        sim: Any = ctx.sim
        assert sim.scaling is not None
        bwd = sim.policy.backward
        g = host(sim.round(dy, bwd)).reshape(-1, ctx.w.shape[0])
        dx = sim.scaling.matmul(ctx.site, g, "grad", ctx.w, "weight", record=ctx.record)
        dw = sim.scaling.matmul(ctx.site, ctx.xs.T, "input", g, "grad", record=ctx.record)
        db = torch.from_numpy(g.sum(axis=0)) if ctx.has_bias else None  # (an fp32 reduction)

        def sent(a: np.ndarray[Any, Any] | torch.Tensor, shape: Any) -> torch.Tensor:
            t = a if isinstance(a, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(a))
            back: torch.Tensor = sim.round(t.reshape(shape).to(dy.dtype), bwd)
            return back

        return (
            sent(dx, ctx.shape),
            sent(dw.T, ctx.w.shape),
            None if db is None else sent(db, (ctx.w.shape[0],)),
            None,
            None,
            None,
        )
