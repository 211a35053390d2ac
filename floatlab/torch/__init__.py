"""floatlab on PyTorch models: round tensors, and run a precision policy on a model (needs torch).

``import floatlab`` never imports torch; this package does, and says what to install when it
is missing. :func:`floatlab.round_array` and :func:`floatlab.encode_array` round torch tensors themselves,
through the conversions of :mod:`floatlab.torch.tensors` (no need to import this package for them);
:func:`simulate` (:mod:`floatlab.torch.simulate`) runs a model's GEMMs and embeddings as a
:class:`~floatlab.train.policy.Policy` says.

>>> import torch, floatlab as fl
>>> fl.round_array(torch.tensor([0.1]), "bf16").item()
0.10009765625
"""

from __future__ import annotations

try:
    import torch  # noqa: F401  (the package's one hard requirement)
except ImportError as e:  # pragma: no cover - exercised in a subprocess without torch
    raise ImportError(
        f"floatlab.torch needs PyTorch, which does not import ({e}): pip install 'floatlab[torch]'"
    ) from e

from floatlab.torch.simulate import Simulation, simulate
from floatlab.torch.tensors import array_tensor, is_tensor, tensor_array

__all__ = ["Simulation", "array_tensor", "is_tensor", "simulate", "tensor_array"]
