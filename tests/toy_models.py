"""Models small enough for exact float64 oracles, that the tests put in a real model's place."""

from __future__ import annotations

from typing import Any

import numpy as np

from floatlab.train.models import Model, Params
from floatlab.train.precision import Array, Precision


class BigramLM(Model):
    """The next character's logits are the row of ``E`` of the current one: ``logits = E[x]``."""

    name = "bigram"

    def __init__(self, context: int, vocab: int) -> None:
        self.context, self.vocab = context, vocab

    @classmethod
    def build(cls, n_in: int, n_out: int, **kwargs: Any) -> BigramLM:
        return cls(n_in, n_out)  # (a transformer's settings, when it stands in for one, are ignored)

    def init(self, rng: np.random.Generator) -> Params:
        return {"E": (0.1 * rng.standard_normal((self.vocab, self.vocab))).astype(np.float32)}

    def config(self) -> dict[str, Any]:
        return {"name": "bigram", "context": self.context, "vocab": self.vocab}

    def describe(self) -> str:
        return f"bigram {self.vocab} x {self.vocab}"

    def forward(
        self, w: Params, x: Array, P: Precision, *, train: bool = True, buffers: Params | None = None
    ) -> tuple[Array, dict[str, Any]]:
        return w["E"][x], {"x": x}

    def backward(self, w: Params, cache: dict[str, Any], dlogits: Array, P: Precision) -> Params:
        dE = np.zeros_like(w["E"])
        np.add.at(dE, cache["x"].reshape(-1), dlogits.reshape(-1, self.vocab))
        return {"E": P.grad(dE)}
