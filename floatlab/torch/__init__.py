"""floatlab on PyTorch models: round tensors, run a precision policy on a model, and report what
each format does to each layer (needs torch).

``import floatlab`` never imports torch; this package does, and says what to install when it
is missing. :func:`floatlab.round_array` and :func:`floatlab.encode_array` round torch tensors
themselves, through the conversions of :mod:`floatlab.torch.tensors` (no need to import this
package for them); :func:`simulate` (:mod:`floatlab.torch.simulate`) runs a model's GEMMs and
embeddings as a :class:`~floatlab.train.precision.policy.Policy` says; :func:`inspect`
(:mod:`floatlab.torch.inspect`) runs a few training passes and reports, per layer and tensor
kind, what fp16, bf16, fp8 or any floatlab format would flush, make subnormal or overflow, and
the power-of-two scale that saves them (:class:`LayerReport`: text, DataFrame, heat map; one
verdict per format, :meth:`LayerReport.advice`). Beside them: what each layer's GEMMs get
(:mod:`~floatlab.torch.plan`), attention written out as its GEMMs (:mod:`~floatlab.torch.attention`),
weights stored in their format (:mod:`~floatlab.torch.weights`), the policy's loss scaling
(:mod:`~floatlab.torch.scaler`), the per-step record (:mod:`~floatlab.torch.records`) and the
refusals (:mod:`~floatlab.torch.checks`).

>>> import torch, floatlab as fl
>>> fl.round_array(torch.tensor([0.1]), "bf16").item()
0.10009765625
>>> KINDS
('weight', 'activation', 'weight_grad', 'activation_grad')
"""

from __future__ import annotations

try:
    import torch  # noqa: F401  (the package's one hard requirement)
except ImportError as e:  # pragma: no cover - exercised in a subprocess without torch
    raise ImportError(
        f"floatlab.torch needs PyTorch, which does not import ({e}): pip install 'floatlab[torch]'"
    ) from e

from floatlab.torch.inspect import DEFAULT_FORMATS, KINDS, LayerReport, TensorShares, inspect
from floatlab.torch.simulate import Simulation, SimulationWarning, simulate
from floatlab.torch.tensors import array_tensor, is_tensor, tensor_array

__all__ = [
    "DEFAULT_FORMATS",
    "KINDS",
    "LayerReport",
    "Simulation",
    "SimulationWarning",
    "TensorShares",
    "array_tensor",
    "inspect",
    "is_tensor",
    "simulate",
    "tensor_array",
]
