"""What :func:`floatlab.torch.simulate` refuses or warns about before anything runs, each in one
line naming the cause: a compiled model, parameters whose dtype cannot hold the policy's formats,
a model on the meta device, a model already attached to a simulation (:func:`refusal`); a frozen model
(:func:`cautions`). (A model without parameters is simulated as it is: its functional GEMMs are
rounded; simulate warns when a forward pass ran and it saw no GEMM at all.)

>>> import torch
>>> cautions(torch.nn.ReLU())
[]
"""

from __future__ import annotations

import sys

import torch

from floatlab.formats import BF16, FP16, FP32, FP64, FloatFormat
from floatlab.train.precision.policy import Policy

__all__ = ["FORMAT_OF_DTYPE", "cautions", "refusal"]

#: the floatlab format of each floating-point dtype a parameter can have
FORMAT_OF_DTYPE: dict[torch.dtype, FloatFormat] = {
    torch.float64: FP64,
    torch.float32: FP32,
    torch.float16: FP16,
    torch.bfloat16: BF16,
}


def refusal(model: torch.nn.Module, policy: Policy, attached: bool) -> str | None:
    """The one-line reason simulate refuses ``model`` under ``policy`` (``attached``: another
    simulation holds it now), or None.

    >>> import torch
    >>> from floatlab.train.precision.policy import get_policy
    >>> refusal(torch.nn.Linear(1, 1, device="meta"), get_policy("bf16"), False)[:40]
    'model on the meta device (parameter weig'
    """
    for name, t in (*model.named_parameters(), *model.named_buffers()):
        if t.device.type == "meta":
            return (
                f"model on the meta device (parameter {name} has a shape but no values): expected a model "
                "with values, on the CPU or a GPU (model.to_empty(device='cpu'), then its weights)"
            )
    if attached:
        return (
            "the model is already attached to a simulation (an open `with simulate(model, ...)` block): "
            "expected one simulation of a model at a time (its roundings would add up)"
        )
    return _compiled(model) or _dtype_refusal(model, policy)


def cautions(model: torch.nn.Module) -> list[str]:
    """What simulate warns about ``model`` (it runs all the same): every parameter frozen.

    >>> import torch
    >>> lin = torch.nn.Linear(1, 1).requires_grad_(False)
    >>> cautions(lin)[0][:45]
    'every parameter of the model is frozen (requi'
    """
    params = list(model.parameters())
    if params and not any(p.requires_grad for p in params):
        return [
            "every parameter of the model is frozen (requires_grad=False): backward computes no weight "
            "gradients, so no optimizer step changes the weights and none are stored in the policy's format"
        ]
    return []


def _compiled(model: torch.nn.Module) -> str | None:
    """A one-line reason when ``model`` or a module inside it is compiled (the rounding cannot run
    inside compiled code: dynamo retraces it at every call, and then fails), else None."""
    # (torch.compile's wrapper class lives in dynamo: a program that never imported it has none)
    dynamo = sys.modules.get("torch._dynamo.eval_frame")
    wrapper = getattr(dynamo, "OptimizedModule", None)
    for name, m in model.named_modules():
        where = "model" if not name else f"module {name!r} of the model"
        if wrapper is not None and isinstance(m, wrapper):
            orig = "model._orig_mod" if not name else f"the original module, {name}._orig_mod"
            return (
                f"the {where} is a compiled module (torch.compile): expected the module itself, pass {orig}"
            )
        if getattr(m, "_compiled_call_impl", None) is not None:
            return (
                f"the {where} was compiled in place (Module.compile()): expected a module that is not "
                "compiled (build it again without .compile() and simulate that)"
            )
    return None


def _dtype_refusal(model: torch.nn.Module, p: Policy) -> str | None:
    """A one-line reason when a parameter's dtype cannot hold what the policy stores (it would fail
    or round twice inside the first forward pass), else None."""
    masters = f"expected {p.wide.name} master parameters (model.{'double' if p.wide == FP64 else 'float'}())"
    for name, t in model.named_parameters():
        if not t.is_floating_point():
            continue
        src = FORMAT_OF_DTYPE.get(t.dtype)
        needs = [("forward format", p.forward), ("backward format", p.backward)]
        if p.master_weights:
            needs.append(("master weights' format", p.wide))
        for what, fmt in needs:
            if src is None or not src.contains(fmt):
                return (
                    f"parameter {name!r} of dtype {t.dtype} cannot hold the {what} {fmt.name} of "
                    f"policy {p.name}: {masters}"
                )
        if p.recipe is not None and t.dtype != torch.float32:
            return (
                f"parameter {name!r} of dtype {t.dtype}: the recipe of policy {p.name} runs its GEMMs "
                f"on float32 copies of the operands: {masters}"
            )
    return None
