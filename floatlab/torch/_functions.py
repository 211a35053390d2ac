"""The torch functions simulate rounds around (:data:`GEMMS`) and those it sees and leaves in
their own precision (:data:`LEFT`), each with its name in the report; the operands each rounds."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F


def _gemm_functions() -> dict[Any, str]:
    """The torch functions the mode rounds around, each with its name in the report."""
    ops: dict[Any, str] = {
        F.linear: "linear",
        F.conv1d: "conv1d",
        F.conv2d: "conv2d",
        F.embedding: "embedding",
        F.scaled_dot_product_attention: "scaled_dot_product_attention",
        F.multi_head_attention_forward: "multi_head_attention_forward",
        torch.einsum: "einsum",
        torch.linalg.matmul: "matmul",
    }
    for name in ("matmul", "bmm", "mm", "addmm", "baddbmm"):
        ops[getattr(torch, name)] = name
        ops[getattr(torch.Tensor, name)] = name
    ops[torch.Tensor.__matmul__] = "matmul"
    ops[torch.Tensor.__rmatmul__] = "matmul"
    return ops


def _left_functions() -> dict[Any, str]:
    """The products of tensors the mode sees and leaves in their own precision, each with its name
    in the report (:attr:`Simulation.left` counts their calls)."""
    ops: dict[Any, str] = {
        F.bilinear: "bilinear",
        F.conv3d: "conv3d",
        F.conv_transpose1d: "conv_transpose1d",
        F.conv_transpose2d: "conv_transpose2d",
        F.conv_transpose3d: "conv_transpose3d",
        torch.tensordot: "tensordot",
        torch.linalg.multi_dot: "multi_dot",
        torch.linalg.vecdot: "vecdot",
    }
    for name in ("mv", "dot", "vdot", "inner", "outer", "ger", "addbmm", "addmv", "addr", "chain_matmul"):
        for owner in (torch, torch.Tensor):
            if hasattr(owner, name):
                ops[getattr(owner, name)] = name
    for name in ("addmm_", "baddbmm_", "addbmm_", "addmv_", "addr_"):  # (in place: into fp32 storage)
        ops[getattr(torch.Tensor, name)] = name
    return ops


GEMMS = _gemm_functions()
LEFT = _left_functions()
#: the positional places and keywords of the operands each function's rounding reaches
OPERANDS = {
    "linear": ((0, 1, 2), ("input", "weight", "bias")),
    "conv1d": ((0, 1, 2), ("input", "weight", "bias")),
    "conv2d": ((0, 1, 2), ("input", "weight", "bias")),
    "embedding": ((1,), ("weight",)),  # (the indices are not values)
    "addmm": ((0, 1, 2), ("input", "mat1", "mat2")),
    "baddbmm": ((0, 1, 2), ("input", "batch1", "batch2")),
}
TWO = ((0, 1), ("input", "other", "mat2"))
SDPA_ARGS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal")
