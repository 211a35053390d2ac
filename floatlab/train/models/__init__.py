"""Models in NumPy with explicit forward and backward passes, precision at every storage point.

* ``layers``: each layer a ``*_forward`` / ``*_backward`` pair of functions;
* ``base``: what every model is (:class:`Model`) and the models by name (:func:`get_model`);
* ``mlp``, ``attention``, ``convnet``, ``transformer``: one model each (the last two, with
  ``seq_layers``, are imported when first asked for by name);
* ``fused``: compiled CPU kernels for the wide-precision GELU, layer norm and softmax.

>>> get_model("mlp", 64, 10, hidden=(16,)).describe(), MODELS
('mlp 64-16-10', ('mlp', 'attention', 'transformer', 'convnet'))
"""

from floatlab.train.models.attention import AttentionNet
from floatlab.train.models.base import MODELS, Model, Params, get_model, model_class, model_name
from floatlab.train.models.layers import (
    Cache,
    cross_entropy_backward,
    cross_entropy_forward,
    gelu_backward,
    gelu_forward,
    layer_norm_backward,
    layer_norm_forward,
    linear_backward,
    linear_forward,
    mean_pool_backward,
    mean_pool_forward,
    relu_backward,
    relu_forward,
    softmax_backward,
    softmax_forward,
)
from floatlab.train.models.mlp import MLP

__all__ = [
    "MLP",
    "MODELS",
    "AttentionNet",
    "Cache",
    "Model",
    "Params",
    "cross_entropy_backward",
    "cross_entropy_forward",
    "gelu_backward",
    "gelu_forward",
    "get_model",
    "layer_norm_backward",
    "layer_norm_forward",
    "linear_backward",
    "linear_forward",
    "mean_pool_backward",
    "mean_pool_forward",
    "model_class",
    "model_name",
    "relu_backward",
    "relu_forward",
    "softmax_backward",
    "softmax_forward",
]
