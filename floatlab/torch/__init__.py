"""floatlab's formats on your own PyTorch model (torch is optional: ``import floatlab`` never
imports this package, and this package imports torch only when a function runs).

:func:`inspect` runs a few training passes of a model and reports, per layer and tensor kind,
what fp16, bf16, fp8 or any floatlab format would flush, make subnormal or overflow, and the
power-of-two scale that saves them (:class:`LayerReport`: text, DataFrame, heat map). Without
torch installed, calling it raises an ImportError that says what to install.

>>> from floatlab.torch import KINDS
>>> KINDS
('weight', 'activation', 'weight_grad', 'activation_grad')
"""

from floatlab.torch.inspect import DEFAULT_FORMATS, KINDS, LayerReport, TensorShares, inspect

__all__ = ["DEFAULT_FORMATS", "KINDS", "LayerReport", "TensorShares", "inspect"]
