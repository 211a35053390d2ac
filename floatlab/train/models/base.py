"""What every model is: :class:`Model`, and the registry of models by name.

A model holds no weights: ``init(rng)`` makes them, ``forward(w, x, P)`` and ``backward(w, cache,
dlogits, P)`` run them at the precision ``P`` (a :class:`~floatlab.train.precision.Precision`).
The models live one to a module (:mod:`~floatlab.train.models.mlp`,
:mod:`~floatlab.train.models.attention`, :mod:`~floatlab.train.models.convnet`,
:mod:`~floatlab.train.models.transformer`) and are imported when first asked for by name.

>>> import numpy as np
>>> from floatlab.train.precision.precision import Precision
>>> m = get_model("mlp", 64, 10, hidden=(32,))
>>> w = m.init(np.random.default_rng(0))
>>> logits, cache = m.forward(w, np.zeros((2, 64), np.float32), Precision("fp32"))
>>> logits.shape, sorted(w)
((2, 10), ['W0', 'W1', 'b0', 'b1'])
"""

from __future__ import annotations

from typing import Any

import numpy as np

from floatlab.registry import Registry
from floatlab.train.precision.precision import Array, Params, Precision

__all__ = ["MODELS", "MODEL_CLASSES", "Cache", "Model", "Params", "get_model", "model_class", "model_name"]

#: what a forward pass keeps for its backward pass, by name
Cache = dict[str, Any]


class Model:
    """A model: ``init(rng)`` -> parameters; ``forward(w, x, P)`` -> (logits, cache);
    ``backward(w, cache, dlogits, P)`` -> gradients (same keys as the parameters).

    ``forward`` takes two keywords: ``train`` (False for evaluation: BatchNorm then uses its running
    statistics) and ``buffers``, the model's state that is not trained (BatchNorm's running mean
    and variance; :meth:`init_buffers` makes them, and a training forward pass updates them in
    place). :attr:`norm_params` names the parameters a policy with ``batchnorm_fp32`` keeps in
    fp32. Logits have the classes on their last axis: ``(n, classes)``, or ``(n, tokens,
    vocabulary)`` for a language model.

    >>> m = get_model("attention", 64, 10)
    >>> isinstance(m, Model), sorted(m.init(np.random.default_rng(0)))[:3], m.init_buffers()
    (True, ['Wc', 'We', 'Wo'], {})
    """

    name = "model"
    #: the parameters that belong to BatchNorm layers (kept in fp32 under ``batchnorm_fp32``)
    norm_params: frozenset[str] = frozenset()

    @property
    def linear_sites(self) -> tuple[str, ...]:
        """The linear layers whose GEMMs a recipe scales (named by their weights), in forward
        order: how a recipe finds the model's first and last."""
        return ()

    @classmethod
    def build(cls, n_in: int, n_out: int, **kwargs: Any) -> Model:
        """The model for ``n_in`` inputs and ``n_out`` outputs, with its own settings as keywords
        (what :func:`get_model` calls)."""
        raise NotImplementedError

    def init(self, rng: np.random.Generator) -> Params:
        raise NotImplementedError

    def init_buffers(self) -> Params:
        """The state that is not trained (running statistics), at its initial values."""
        return {}

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        """The shape of each parameter, by name, in the order of :meth:`init`, from the
        configuration alone: nothing is allocated, so a model of billions of weights costs
        nothing to describe (the memory ledger reads it)."""
        raise NotImplementedError

    def buffer_shapes(self) -> dict[str, tuple[int, ...]]:
        """The shape of each buffer, as :meth:`init_buffers` makes them, from the configuration
        alone."""
        return {}

    def forward(
        self, w: Params, x: Array, P: Precision, *, train: bool = True, buffers: Params | None = None
    ) -> tuple[Array, Cache]:
        raise NotImplementedError

    def backward(self, w: Params, cache: Cache, dlogits: Array, P: Precision) -> Params:
        raise NotImplementedError

    def config(self) -> dict[str, Any]:
        raise NotImplementedError

    def describe(self) -> str:
        """The model's shape in a few words (the training summary shows it)."""
        return self.name


#: the model classes by name, each imported from its module when first asked for (case is
#: ignored; ``"attn"``, ``"mlp-relu"``, ``"lm"`` and ``"cnn"`` are other names)
MODEL_CLASSES: Registry[type[Model]] = Registry(
    "model",
    homes={
        "mlp": "floatlab.train.models.mlp:MLP",
        "attention": "floatlab.train.models.attention:AttentionNet",
        "transformer": "floatlab.train.models.transformer:TransformerLM",
        "convnet": "floatlab.train.models.convnet:ConvNet",
    },
    aliases={"attn": "attention", "mlp-relu": "mlp", "lm": "transformer", "cnn": "convnet"},
)
MODELS: tuple[str, ...] = MODEL_CLASSES.names


def model_name(name: str) -> str:
    """The canonical name of a model (``"attn"`` -> ``"attention"``), checked.

    >>> model_name(" LM ")
    'transformer'
    """
    return MODEL_CLASSES.name(name)


def model_class(name: str) -> type[Model]:
    """The class of the model called ``name`` (one of :data:`MODELS`).

    >>> model_class("mlp").__name__
    'MLP'
    >>> model_class("resnet")
    Traceback (most recent call last):
    ...
    ValueError: unknown model 'resnet': expected one of mlp, attention, transformer, convnet
    """
    return MODEL_CLASSES.lookup(name)


def get_model(name: str, n_in: int, n_out: int, **kwargs: Any) -> Model:
    """The model ``name`` for ``n_in`` inputs (features, or a language model's context length)
    and ``n_out`` classes (or vocabulary size); ``kwargs`` are the model's own settings:
    ``"mlp"`` (``hidden=(128, 128)``, ``activation="relu"``), ``"attention"`` (``tokens=8``,
    ``d_model=32``), ``"transformer"`` and ``"convnet"`` (see their classes).

    >>> get_model("mlp", 64, 10, hidden=(16,)).sizes
    (64, 16, 10)
    """
    return model_class(name).build(n_in, n_out, **kwargs)
