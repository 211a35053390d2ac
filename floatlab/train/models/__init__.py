"""Models in NumPy with explicit forward and backward passes, precision at every storage point.

* ``layers``: each layer a ``*_forward`` / ``*_backward`` pair of functions;
* ``base``: what every model is (:class:`Model`) and the models by name (:func:`get_model`);
* ``mlp``, ``attention``, ``convnet``, ``transformer``: one model each (the last two, with
  ``seq_layers``, are imported when first asked for by name);
* ``fused``: compiled CPU kernels for the wide-precision GELU, layer norm and softmax.

>>> get_model("mlp", 64, 10, hidden=(16,)).describe(), MODELS
('mlp 64-16-10', ('mlp', 'attention', 'transformer', 'convnet'))
"""

from floatlab.train.models import attention, base, layers, mlp
from floatlab.train.models.attention import *  # noqa: F403
from floatlab.train.models.base import *  # noqa: F403
from floatlab.train.models.layers import *  # noqa: F403
from floatlab.train.models.mlp import *  # noqa: F403

__all__ = [*attention.__all__, *base.__all__, *layers.__all__, *mlp.__all__]
