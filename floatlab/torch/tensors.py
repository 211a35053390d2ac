"""Torch tensors through floatlab's one rounding door: :func:`round_tensor` and :func:`encode_tensor`.

:func:`floatlab.round_array` and :func:`floatlab.encode_array` send a torch tensor here. The
tensor is rounded by the very code that rounds NumPy arrays (:func:`floatlab.rounding.round_array`),
on a view of its memory:

* a CPU tensor of float32, float64 or float16 is seen as a NumPy array without a copy
  (``tensor.numpy()``), a bfloat16 one through its bits (``tensor.view(torch.int16).numpy()``
  seen as ``ml_dtypes.bfloat16``); the result comes back as a tensor of the input's dtype that
  shares the memory of floatlab's result (``torch.from_numpy``), so the only copy is the rounding's
  own output. A tensor that is not C-contiguous is copied once first.
* a CUDA tensor goes to CuPy through DLPack (no copy) and is rounded on its GPU by floatlab's
  CUDA kernels, then comes back through DLPack; without CuPy, a ValueError says to install
  ``floatlab[gpu]``. CuPy has no bfloat16, so a CUDA bfloat16 tensor is widened to float32 on
  its device (exact), rounded, and narrowed back (exact: every result is a bfloat16 value).

Codes (:func:`encode_tensor`) come back as unsigned tensors of floatlab's own code width:
``torch.uint8`` for formats of up to 8 bits, ``torch.uint16`` for fp16 and bf16, ``torch.uint32``
and ``torch.uint64`` above; the values are the NumPy path's codes, and ``codes.view(torch.float16)``
(or ``torch.bfloat16``, ``torch.float8_e4m3fn``, ...) is torch's tensor of the same bits.

The result never carries autograd history (the input is read detached): for a rounding inside a
model that gradients flow through, see :func:`floatlab.torch.simulate`.

>>> import torch
>>> round_tensor(torch.tensor([0.1, 70000.0]), "fp16").tolist()
[0.0999755859375, inf]
>>> encode_tensor(torch.tensor([1.0, -2.0]), "fp16").tolist()
[15360, 49152]
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

import ml_dtypes
import numpy as np
import torch
from torch.utils.dlpack import from_dlpack

from floatlab.formats import BF16, FloatFormat, get_format
from floatlab.rounding import arrays
from floatlab.rounding.options import RNG
from floatlab.rounding.spec import DEFAULT_RANDOM_BITS

__all__ = ["CODE_DTYPES", "FLOAT_DTYPES", "encode_tensor", "is_tensor", "round_tensor"]

#: the tensor dtypes floatlab rounds from (the dtypes of its NumPy path)
FLOAT_DTYPES: tuple[torch.dtype, ...] = (torch.float64, torch.float32, torch.float16, torch.bfloat16)
#: the dtype of a code tensor, by the width of floatlab's NumPy codes
CODE_DTYPES: dict[int, torch.dtype] = {8: torch.uint8, 16: torch.uint16, 32: torch.uint32, 64: torch.uint64}


def is_tensor(x: object) -> bool:
    """True when ``x`` is a torch tensor (a Parameter or another subclass included), found out
    without importing torch: a program that never imported torch has no tensors.

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


def _to_numpy(x: torch.Tensor) -> np.ndarray:
    """A NumPy view of a CPU tensor's memory (bfloat16 through its bits)."""
    x = x.detach().resolve_neg()
    if x.dtype == torch.bfloat16:
        out: np.ndarray = x.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        return out
    return x.numpy()


def _from_numpy(a: np.ndarray) -> torch.Tensor:
    """A tensor sharing ``a``'s memory (bfloat16 through its bits)."""
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def _cupy(x: torch.Tensor) -> Any:
    """CuPy, or the one-line ValueError saying what to install for a CUDA tensor."""
    if importlib.util.find_spec("cupy") is None:
        raise ValueError(
            f"a CUDA tensor ({x.device}, {x.dtype}): floatlab rounds it on its GPU through CuPy, "
            "which is not installed: pip install 'floatlab[gpu]'"
        )
    from floatlab.backend import require_cupy

    return require_cupy()


def _run(x: torch.Tensor, fmt: FloatFormat | str, back: bool, knobs: dict[str, Any]) -> torch.Tensor:
    """round_array (``back``) or encode_array of a tensor, on its device."""
    _check(x)
    f = get_format(fmt)
    door = arrays.round_array if back else arrays.encode_array
    if x.device.type == "cpu":
        return _from_numpy(np.asarray(door(_to_numpy(x), f, **knobs)))
    cp = _cupy(x)
    t = x.detach()
    if t.dtype == torch.bfloat16:  # CuPy has no bfloat16: float32 holds every bfloat16 value
        if back and not (BF16.contains(f) or f.contains(BF16)):
            raise ValueError(
                f"round_array of a bfloat16 tensor into {f.name}: not every {f.name} value is a "
                "bfloat16 value (expected a format within bfloat16, or one that holds it)"
            )
        out = from_dlpack(door(cp.from_dlpack(t.float()), f, **knobs))
        return out.to(torch.bfloat16) if back else out
    return from_dlpack(door(cp.from_dlpack(t), f, **knobs))


def round_tensor(
    x: torch.Tensor,
    fmt: FloatFormat | str,
    rounding: str = "rne",
    *,
    rng: RNG = None,
    saturate: bool = False,
    subnormals: bool = True,
    random_bits: int = DEFAULT_RANDOM_BITS,
) -> torch.Tensor:
    """:func:`floatlab.round_array` of a torch tensor: every element rounded into ``fmt`` and
    kept in x's dtype, on x's device, with the bits the NumPy path gives (stochastic rounding
    draws the same key from ``rng``, so a seeded generator gives the same result through both).

    Float8 formats round as torch's casts do when ``saturate`` matches: torch's
    ``.to(torch.float8_e4m3fn)`` does not saturate (overflow is NaN, E4M3 having no infinity).
    Integer, complex, bool, float8, sparse and meta tensors are refused with a ValueError.

    >>> import torch
    >>> x = torch.tensor([1 / 3, 500.0])
    >>> round_tensor(x, "e4m3fn").tolist(), round_tensor(x, "e4m3fn", saturate=True).tolist()
    ([0.34375, nan], [0.34375, 448.0])
    >>> round_tensor(torch.ones(2, dtype=torch.int32), "fp16")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: a tensor of dtype torch.int32: expected torch.float64, float32, float16 or bfloat16 (...)
    """
    knobs = {
        "rounding": rounding,
        "rng": rng,
        "saturate": saturate,
        "subnormals": subnormals,
        "random_bits": random_bits,
    }
    return _run(x, fmt, True, knobs)


def encode_tensor(
    x: torch.Tensor,
    fmt: FloatFormat | str,
    rounding: str = "rne",
    *,
    rng: RNG = None,
    saturate: bool = False,
    subnormals: bool = True,
    random_bits: int = DEFAULT_RANDOM_BITS,
) -> torch.Tensor:
    """:func:`floatlab.encode_array` of a torch tensor: the codes of ``fmt`` as an unsigned tensor
    on x's device (``torch.uint8`` up to 8 bits, ``uint16``, ``uint32``, ``uint64``: see
    :data:`CODE_DTYPES`), the NumPy path's codes.

    >>> import torch
    >>> c = encode_tensor(torch.tensor([1.0, 1e-9], dtype=torch.float64), "bf16")
    >>> c.dtype, c.tolist(), c.view(torch.bfloat16).tolist()
    (torch.uint16, [16256, 12425], [1.0, 9.968061931431293e-10])
    """
    knobs = {
        "rounding": rounding,
        "rng": rng,
        "saturate": saturate,
        "subnormals": subnormals,
        "random_bits": random_bits,
    }
    return _run(x, fmt, False, knobs)
