"""Torch tensors at floatlab's one rounding door: a tensor in as an array view, the result out as a tensor.

:func:`floatlab.round_array` and :func:`floatlab.encode_array` (and their ``*_with_flags``
twins, which also count the IEEE flags) take torch tensors. They round them with the very code
that rounds NumPy and CuPy arrays, on a view of the tensor's memory that
:func:`tensor_array` gives, and hand the result back as a tensor through :func:`array_tensor`
(this module converts; it rounds nothing itself):

* a CPU tensor of float32, float64 or float16 is seen as a NumPy array without a copy
  (``tensor.numpy()``), a bfloat16 one through its bits (``tensor.view(torch.int16).numpy()``
  seen as ``ml_dtypes.bfloat16``); the result comes back as a tensor of the input's dtype that
  shares the memory of floatlab's result (``torch.from_numpy``), so the only copy is the
  rounding's own output. A tensor that is not C-contiguous is copied once first.
* a CUDA tensor goes to CuPy through DLPack (no copy) and is rounded on its GPU by floatlab's
  CUDA kernels, then comes back through DLPack; without CuPy, a ValueError says to install
  ``floatlab[gpu]``. CuPy has no bfloat16, so a CUDA bfloat16 tensor is widened to float32 on
  its device (exact), rounded, and narrowed back (exact: every result is a bfloat16 value).

Codes (``encode_array`` of a tensor) come back as unsigned tensors of floatlab's own code width
(:data:`CODE_DTYPES`): ``torch.uint8`` for formats of up to 8 bits, ``torch.uint16`` for fp16 and
bf16, ``torch.uint32`` and ``torch.uint64`` above. The values are the NumPy path's codes, and
``codes.view(torch.float16)`` (or ``torch.bfloat16``, ``torch.float8_e4m3fn``, ...) is torch's
tensor of the same bits.

A result never carries autograd history (the input is read detached): for a rounding inside a
model that gradients flow through, see :func:`floatlab.torch.simulate`.

>>> import torch, floatlab as fl
>>> fl.round_array(torch.tensor([0.1, 70000.0]), "fp16").tolist()
[0.0999755859375, inf]
>>> codes = fl.encode_array(torch.tensor([1.0, -2.0]), "fp16")
>>> codes.dtype, codes.tolist()
(torch.uint16, [15360, 49152])
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

import ml_dtypes
import numpy as np
import torch
from torch.utils.dlpack import from_dlpack

from floatlab.backend import is_cupy, require_cupy
from floatlab.formats import BF16, FloatFormat, get_format

__all__ = ["CODE_DTYPES", "FLOAT_DTYPES", "array_tensor", "is_tensor", "tensor_array"]

#: the tensor dtypes floatlab rounds from (the dtypes of its NumPy path)
FLOAT_DTYPES: tuple[torch.dtype, ...] = (torch.float64, torch.float32, torch.float16, torch.bfloat16)
#: the dtype of a code tensor, by the width of floatlab's NumPy codes
CODE_DTYPES: dict[int, torch.dtype] = {8: torch.uint8, 16: torch.uint16, 32: torch.uint32, 64: torch.uint64}


def is_tensor(x: object) -> bool:
    """True when ``x`` is a torch tensor (a Parameter or another subclass included). It asks
    ``sys.modules``, as floatlab's rounding door does before it imports this module: a program
    that never imported torch has no tensors.

    >>> import torch
    >>> is_tensor(torch.zeros(1)), is_tensor(np.zeros(1)), is_tensor([1.0])
    (True, False, False)
    """
    t = sys.modules.get("torch")
    return t is not None and isinstance(x, t.Tensor)


def _check(x: torch.Tensor) -> None:
    """One-line ValueErrors for what floatlab cannot round: another layout, no data, another dtype."""
    if x.layout != torch.strided:
        raise ValueError(f"a tensor of layout {x.layout}: expected a dense (torch.strided) tensor")
    if x.device.type == "meta":
        raise ValueError(f"a meta tensor of dtype {x.dtype} holds no values: expected a CPU or CUDA tensor")
    if x.dtype not in FLOAT_DTYPES:
        raise ValueError(
            f"a tensor of dtype {x.dtype}: expected torch.float64, float32, float16 or bfloat16 "
            "(convert integers with .double() first)"
        )
    if x.device.type not in ("cpu", "cuda"):
        raise ValueError(f"a tensor on device {x.device}: expected a CPU or CUDA tensor")


def _cupy(x: torch.Tensor) -> Any:
    """CuPy, or the one-line ValueError saying what to install for a CUDA tensor."""
    if importlib.util.find_spec("cupy") is None:
        raise ValueError(
            f"a CUDA tensor ({x.device}, {x.dtype}): floatlab rounds it on its GPU through CuPy, "
            "which is not installed: pip install 'floatlab[gpu]'"
        )
    return require_cupy()


def tensor_array(x: torch.Tensor, fmt: FloatFormat | str, *, back: bool) -> Any:
    """The array floatlab's door rounds for the tensor ``x``: a NumPy view of a CPU tensor's memory
    (bfloat16 through its bits), a CuPy view of a CUDA tensor's (DLPack; bfloat16 widened to
    float32 on the device, which ``back``, the rounding of :func:`floatlab.round_array`, allows
    only into a format that bfloat16 holds or that holds bfloat16, as the NumPy path does).
    Tensors floatlab cannot take are refused here, in one line naming their dtype or layout.

    >>> import torch
    >>> x = torch.ones(3)
    >>> a = tensor_array(x, "bf16", back=True)
    >>> type(a).__name__, np.shares_memory(a, x.numpy())
    ('ndarray', True)
    >>> tensor_array(torch.ones(2, dtype=torch.int32), "fp16", back=True)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: a tensor of dtype torch.int32: expected torch.float64, float32, float16 or bfloat16 (...)
    """
    _check(x)
    t = x.detach().resolve_neg()
    if t.device.type == "cpu":
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        return t.numpy()
    cp = _cupy(t)
    if t.dtype == torch.bfloat16:  # CuPy has no bfloat16: float32 holds every bfloat16 value
        f = get_format(fmt)
        if back and not (BF16.contains(f) or f.contains(BF16)):
            raise ValueError(
                f"format {f.name} has values that bfloat16 cannot hold, so round_array would round "
                f"twice; use encode_array(x, {f.name!r}) and decode_array(codes, {f.name!r}) (float64)"
            )
        t = t.float()
    return cp.from_dlpack(t)


def array_tensor(a: Any, like: torch.Tensor) -> torch.Tensor:
    """The door's result ``a`` (a NumPy or CuPy array) as a tensor on ``like``'s device, sharing
    its memory: values in ``like``'s dtype (a CUDA bfloat16 tensor's float32 result narrowed
    back, exactly), codes in their unsigned dtype (:data:`CODE_DTYPES`).

    >>> import torch
    >>> x = torch.ones(2, dtype=torch.bfloat16)
    >>> array_tensor(tensor_array(x, "bf16", back=True), x).dtype
    torch.bfloat16
    >>> array_tensor(np.array([60, 0], np.uint8), x).dtype
    torch.uint8
    """
    if not is_cupy(a):
        a = np.asarray(a)
        if a.dtype == ml_dtypes.bfloat16:
            return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(a)
    out: torch.Tensor = from_dlpack(a)
    # (a float result of a bfloat16 tensor: float32 on the GPU, every value a bfloat16 value)
    return out.to(like.dtype) if out.is_floating_point() and out.dtype != like.dtype else out
