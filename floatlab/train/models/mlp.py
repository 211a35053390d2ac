"""The multilayer perceptron: ``n_in -> hidden... -> n_out`` with ReLU or GELU."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from floatlab.train.models.base import Cache, Model
from floatlab.train.models.layers import (
    gelu_backward,
    gelu_forward,
    linear_backward,
    linear_forward,
    relu_backward,
    relu_forward,
    required,
    uniform_init,
)
from floatlab.train.precision.precision import Array, Params, Precision

__all__ = ["MLP"]


@dataclass
class MLP(Model):
    """Fully connected net ``n_in -> hidden... -> n_out`` with ReLU or GELU.

    >>> MLP(784, (256, 256), 10).n_params
    269322
    """

    n_in: int
    hidden: Sequence[int]
    n_out: int
    activation: str = "relu"
    name = "mlp"

    def __post_init__(self) -> None:
        self.hidden = tuple(int(h) for h in self.hidden)
        if self.activation not in ("relu", "gelu"):
            raise ValueError(f"activation={self.activation!r}: expected relu or gelu")
        if min((self.n_in, self.n_out, *self.hidden)) < 1:
            raise ValueError(
                f"layer sizes {(self.n_in, *self.hidden, self.n_out)}: expected positive integers"
            )

    @classmethod
    def build(cls, n_in: int, n_out: int, **kwargs: Any) -> MLP:
        """``hidden`` (default ``(128, 128)``) and ``activation`` as keywords."""
        hidden = kwargs.pop("hidden", (128, 128))
        return cls(n_in, tuple(hidden), n_out, **kwargs)

    @property
    def sizes(self) -> tuple[int, ...]:
        return (self.n_in, *self.hidden, self.n_out)

    @property
    def n_params(self) -> int:
        s = self.sizes
        return sum(a * b + b for a, b in itertools.pairwise(s))

    def config(self) -> dict[str, Any]:
        return {
            "name": "mlp",
            "n_in": self.n_in,
            "hidden": list(self.hidden),
            "n_out": self.n_out,
            "activation": self.activation,
        }

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        """``W{i}`` ``(fan_in, fan_out)`` and ``b{i}`` for each layer.

        >>> MLP(4, (3,), 2).param_shapes()
        {'W0': (4, 3), 'b0': (3,), 'W1': (3, 2), 'b1': (2,)}
        """
        shapes: dict[str, tuple[int, ...]] = {}
        for i, (a, b) in enumerate(itertools.pairwise(self.sizes)):
            shapes[f"W{i}"], shapes[f"b{i}"] = (a, b), (b,)
        return shapes

    def init(self, rng: np.random.Generator) -> Params:
        w: Params = {}
        s = self.sizes
        for i, (a, b) in enumerate(itertools.pairwise(s)):
            bound = 1.0 / math.sqrt(a)  # torch.nn.Linear's default
            w[f"W{i}"] = uniform_init(rng, (a, b), bound)
            w[f"b{i}"] = uniform_init(rng, (b,), bound)
        return w

    def describe(self) -> str:
        return "mlp " + "-".join(str(v) for v in self.sizes)

    @property
    def linear_sites(self) -> tuple[str, ...]:
        """``W0``, ``W1``, ...: every layer.

        >>> MLP(4, (8, 8), 2).linear_sites
        ('W0', 'W1', 'W2')
        """
        return tuple(f"W{i}" for i in range(len(self.sizes) - 1))

    def forward(
        self, w: Params, x: Array, P: Precision, *, train: bool = True, buffers: Params | None = None
    ) -> tuple[Array, Cache]:
        n = len(self.sizes) - 1
        h = P.act(x.astype(P.dtype, copy=False))
        inputs, pre = [], []
        for i in range(n):
            inputs.append(h)
            z = linear_forward(h, w[f"W{i}"], w[f"b{i}"], P, site=f"W{i}")
            pre.append(z)
            if i < n - 1:
                h = relu_forward(z) if self.activation == "relu" else gelu_forward(z, P)
        return pre[-1], {"inputs": inputs, "pre": pre}

    def backward(self, w: Params, cache: Cache, dlogits: Array, P: Precision) -> Params:
        n = len(self.sizes) - 1
        grads: Params = {}
        dz = dlogits
        for i in reversed(range(n)):
            dh, grads[f"W{i}"], db = linear_backward(
                dz, cache["inputs"][i], w[f"W{i}"], P, input_grad=i > 0, site=f"W{i}"
            )
            grads[f"b{i}"] = required(db)
            if i > 0:
                z = cache["pre"][i - 1]
                dh = required(dh)
                dz = relu_backward(dh, z) if self.activation == "relu" else gelu_backward(dh, z, P)
        return {k: grads[k] for k in w}
