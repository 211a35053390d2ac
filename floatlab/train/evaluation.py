"""Evaluation is a measurement: the model runs in its policy's precision, the ruler is fp32.

The forward pass of an evaluation is the model as the policy stores and computes it (weights,
activations and GEMMs in their formats), since that is the model being judged. The loss that
measures it is a different matter: computed in the policy's own format, pure bf16's validation
losses would come out as 3.0625, 3.0, 2.90625 - bf16 values, 2^-7 of a unit apart, a ruler too
coarse for the gaps of a few thousandths it is asked to measure. So :func:`evaluate` computes the
softmax cross-entropy of the policy's logits in fp32 (``loss``) whatever the policy, and keeps the
loss as the policy computes it beside it (``loss_in_format``); the history records them as
``test_loss`` and ``test_loss_in_format``. For a wide policy (fp32, the fp64 reference) they are
one number.

>>> import ml_dtypes, numpy as np
>>> from floatlab.train.models.base import get_model
>>> from floatlab.train.precision.precision import Precision
>>> m = get_model("mlp", n_in=4, n_out=3, hidden=(8,))
>>> params = {k: np.asarray(v, np.float32) for k, v in m.init(np.random.default_rng(0)).items()}
>>> x, y = np.random.default_rng(1).normal(size=(32, 4)).astype(np.float32), np.arange(32) % 3
>>> e = evaluate(m, Precision("bf16"), params, {}, x, y)
>>> def in_bf16(v): return float(np.float32(v).astype(ml_dtypes.bfloat16)) == v
>>> in_bf16(e.loss_in_format), in_bf16(e.loss), abs(e.loss - e.loss_in_format) < 2.0**-6
(True, False, True)
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from floatlab.train.models.base import Model
from floatlab.train.models.layers import cross_entropy_forward
from floatlab.train.precision.precision import Array, Params, Precision

__all__ = ["Evaluation", "evaluate"]


class Evaluation(NamedTuple):
    """What one evaluation measured: the mean loss per example (per token for a language model)
    computed in fp32 from the policy's logits, the share of correct predictions, and the loss as
    the policy's format computes it.

    >>> e = Evaluation(loss=2.3027, accuracy=0.1, loss_in_format=2.3125)
    >>> loss, accuracy, _ = e; (loss, accuracy)
    (2.3027, 0.1)
    """

    loss: float
    accuracy: float
    loss_in_format: float


def evaluate(
    model: Model,
    P: Precision,
    params: Params,
    buffers: Params,
    x: Array,
    y: Array,
    batch_size: int = 1024,
) -> Evaluation:
    """Loss and accuracy of ``model`` with ``params`` on ``(x, y)``: the forward pass in ``P``'s
    precision (inference mode: the caller chooses its random stream), the loss measured in fp32
    and in the policy's format (see the module's text), ``batch_size`` examples at a time.

    >>> from floatlab.train.models.base import get_model
    >>> m = get_model("mlp", n_in=2, n_out=2, hidden=(4,))
    >>> params = {k: np.asarray(v, np.float32) for k, v in m.init(np.random.default_rng(0)).items()}
    >>> x, y = np.ones((8, 2), np.float32), np.zeros(8, int)
    >>> e = evaluate(m, Precision("fp32"), params, {}, x, y)
    >>> e.loss == e.loss_in_format, e.accuracy in (0.0, 1.0)   # fp32: one ruler; 8 equal inputs
    (True, True)
    """
    ruler = P if P.policy.is_wide else Precision("fp32", backend=P.backend)
    w = P.weights(params, model.norm_params)
    measured = in_format = 0.0
    correct = 0
    for i in range(0, len(y), batch_size):
        xb, yb = P.backend.asarray(x[i : i + batch_size]), P.backend.asarray(y[i : i + batch_size])
        logits, _ = model.forward(w, xb, P, train=False, buffers=buffers)
        loss, _ = cross_entropy_forward(logits, yb, P)
        fp32_loss = loss if ruler is P else cross_entropy_forward(logits, yb, ruler)[0]
        in_format += loss * len(yb)
        measured += fp32_loss * len(yb)
        correct += int(np.sum(np.argmax(logits, axis=-1) == yb))
    n = max(len(y), 1)
    # (each batch's loss is a mean over its examples' tokens; every example has as many)
    per_example = int(np.prod(y.shape[1:])) if y.ndim > 1 else 1
    return Evaluation(measured / n, correct / (n * per_example), in_format / n)
