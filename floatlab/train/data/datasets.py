"""Data sets that need no download: scikit-learn's handwritten digits, a synthetic task tuned
so that pure fp16 training fails through gradient underflow, and character-level text (a corpus
shipped with the package: see :mod:`floatlab.train.data.text`).

>>> d = make_underflow_task(n_train=200, n_test=100, seed=0)
>>> d.x_train.shape, d.x_train.dtype, d.n_classes, d.loss_weight == 2.0**-20
((200, 64), dtype('float32'), 10, True)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from floatlab.registry import Registry
from floatlab.train.precision.precision import Array

__all__ = [
    "DATASETS",
    "DATA_LOADERS",
    "Dataset",
    "data_name",
    "get_data",
    "load_digits",
    "make_underflow_task",
]


@dataclass(frozen=True)
class Dataset:
    """Inputs (one row per example), integer labels, and how to train on them.

    ``loss_weight`` multiplies the loss the gradients see; ``lr_scale`` is the factor the
    learning rate needs for the weighted loss to train at the pace of the unweighted one (an
    SGD step moves by ``lr * weight * gradient``).

    A text data set has token ids for inputs, ``(n, context)`` integers, and the next token at
    every position for labels, also ``(n, context)``; ``vocab`` holds its characters (the id of
    a character is its index) and ``n_classes`` is their number. Other data sets have float32
    features and one label per example, and an empty ``vocab``.

    >>> x = np.zeros((4, 2), np.float32)
    >>> Dataset("toy", x, np.zeros(4, np.int64), x, np.zeros(4, np.int64), 2).info()["n_train"]
    4
    """

    name: str
    x_train: Array
    y_train: Array
    x_test: Array
    y_test: Array
    n_classes: int
    description: str = ""
    loss_weight: float = 1.0
    vocab: str = ""

    @property
    def n_features(self) -> int:
        """Features per example (a text data set: its context, the tokens per example)."""
        return int(self.x_train.shape[1])

    @property
    def kind(self) -> str:
        """``"text"`` (token ids, one label per token) or ``"classes"`` (one label per example)."""
        return "text" if self.vocab else "classes"

    @property
    def lr_scale(self) -> float:
        return 1.0 / self.loss_weight

    def info(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "n_train": len(self.y_train),
            "n_test": len(self.y_test),
            "n_features": self.n_features,
            "n_classes": self.n_classes,
            "loss_weight": self.loss_weight,
            "kind": self.kind,
            "vocab_size": len(self.vocab) if self.vocab else None,
        }


def _split(n: int, n_test: int, rng: np.random.Generator) -> tuple[Array, Array]:
    perm = rng.permutation(n)
    return perm[n_test:], perm[:n_test]


def load_digits(*, test_fraction: float = 0.2, seed: int = 0) -> Dataset:
    """The 1,797 8x8 handwritten digits that ship inside scikit-learn, scaled to [0, 1].

    The split into train and test is a seeded permutation (stratification is not needed at
    this size). Pixels are integers 0..16, so ``/ 16`` is exact in float32.

    >>> d = load_digits()
    >>> d.x_train.shape, d.x_test.shape, float(d.x_train.max())
    ((1438, 64), (359, 64), 1.0)
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction={test_fraction!r}: expected a number in (0, 1)")
    try:
        from sklearn.datasets import load_digits as _sk_digits  # type: ignore[import-untyped,unused-ignore]
    except ImportError as e:  # pragma: no cover - scikit-learn ships with the bench extra
        raise ValueError("the digits data set needs scikit-learn: pip install scikit-learn") from e
    bunch = _sk_digits()
    x = (np.asarray(bunch.data, dtype=np.float32) / np.float32(16.0)).astype(np.float32)
    y = np.asarray(bunch.target, dtype=np.int64)
    n_test = round(len(y) * test_fraction)
    tr, te = _split(len(y), n_test, np.random.default_rng(seed))
    return Dataset("digits", x[tr], y[tr], x[te], y[te], 10, "scikit-learn's 8x8 handwritten digits")


def make_underflow_task(
    *,
    n_train: int = 2048,
    n_test: int = 500,
    n_features: int = 64,
    n_classes: int = 10,
    loss_weight: float = 2.0**-20,
    noise: float = 1.0,
    seed: int = 0,
) -> Dataset:
    """Gaussian clusters, classified under a loss weighted by ``loss_weight`` (2^-20).

    The weight stands for what makes gradients tiny in real training (a loss term with a small
    coefficient, a sum divided by a huge token count). With a batch of 64 the output gradients
    are about ``2^-20 / 64 * |p - y|``, i.e. 2^-33 to 2^-26, all below half of fp16's smallest
    subnormal (2^-25): pure fp16 stores them as zero and learns nothing, while a loss scale of
    2^16 lifts them into fp16's normal range. In fp32 the weight is exact (a power of two) and
    changes nothing but the size of the gradients.

    >>> make_underflow_task(n_train=100, n_test=50).lr_scale == 2.0**20
    True
    """
    if not (0 < loss_weight <= 1):
        raise ValueError(f"loss_weight={loss_weight!r}: expected a number in (0, 1]")
    if min(n_train, n_test, n_features) < 1 or n_classes < 2:
        raise ValueError(
            f"sizes n_train={n_train}, n_test={n_test}, n_features={n_features}, "
            f"n_classes={n_classes}: expected positive sizes and at least 2 classes"
        )
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((n_classes, n_features), dtype=np.float32)
    n = n_train + n_test
    y = rng.integers(0, n_classes, size=n)
    x = centers[y] + np.float32(noise) * rng.standard_normal((n, n_features), dtype=np.float32)
    tr, te = np.arange(n_train), np.arange(n_train, n)
    return Dataset(
        "underflow",
        x[tr],
        y[tr].astype(np.int64),
        x[te],
        y[te].astype(np.int64),
        n_classes,
        f"Gaussian clusters under a loss weighted by {loss_weight:g}",
        float(loss_weight),
    )


def _digits(*, seed: int, context: int) -> Dataset:
    return load_digits(seed=seed)


def _underflow(*, seed: int, context: int) -> Dataset:
    return make_underflow_task(seed=seed)


#: what makes each data set from a seed and a context length (text only), by name: the text's
#: loader lives in its own module, imported when first asked for (case is ignored;
#: ``"synthetic"`` and ``"chars"`` are other names)
DATA_LOADERS: Registry[Callable[..., Dataset]] = Registry(
    "data set",
    {"digits": _digits, "underflow": _underflow},
    homes={"text": "floatlab.train.data.text:load_text"},
    aliases={"synthetic": "underflow", "chars": "text"},
)
DATASETS: tuple[str, ...] = DATA_LOADERS.names


def data_name(name: str) -> str:
    """The canonical name of a data set (``"synthetic"`` -> ``"underflow"``), checked.

    >>> data_name(" Text ")
    'text'
    >>> data_name("mnist")
    Traceback (most recent call last):
    ...
    ValueError: unknown data set 'mnist': expected one of digits, underflow, text
    """
    return DATA_LOADERS.name(name)


def get_data(name: str, *, seed: int = 0, context: int = 64) -> Dataset:
    """``"digits"``, ``"underflow"`` (the synthetic task) or ``"text"`` (the characters of the
    corpus that ships with floatlab, see :func:`floatlab.train.data.text.load_text`) with its default
    size; ``context`` is the length of a text data set's examples (the others ignore it).

    >>> get_data("underflow").name, get_data("text", context=32).x_train.shape[1]
    ('underflow', 32)
    """
    found: Dataset = DATA_LOADERS.lookup(name)(seed=seed, context=context)
    return found
