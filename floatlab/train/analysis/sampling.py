"""Text from a trained character model: what it learned, in its own words.

:func:`sample` runs the trainer's model forward in the trainer's precision policy (the weights as
a training step's forward pass sees them, BatchNorm on its running statistics), one character at
a time: the model reads the last ``context`` characters, its logits for the next one are divided
by the temperature and turned into probabilities (softmax, in float64: drawing a character is not
part of the simulated training), a character is drawn, and it joins the text the model reads next.

>>> from floatlab.train.data.text import load_text
>>> from floatlab.train.trainer import Trainer
>>> from floatlab.train.models import MLP
>>> data = load_text(context=4)
>>> mlp = Trainer(MLP(4, (8,), data.n_classes), data, "fp32")   # (not a language model)
>>> sample(mlp, "In the")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: the model gives (1, 72) logits for (1, 4) characters: expected (1, 4, 72), one prediction ...
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from floatlab.backend import to_numpy
from floatlab.train.data.text import decode, encode
from floatlab.train.hostmath import deterministic

if TYPE_CHECKING:
    from floatlab.train.trainer import Trainer

__all__ = ["MAX_CHARS", "sample"]

#: the most characters :func:`sample` writes in one call: a forward pass of the model each (about
#: a millisecond for the default transformer, so up to a few minutes), about thirty pages of text
MAX_CHARS = 100_000


def sample(
    trainer: Trainer, prompt: str = "", n_chars: int = 200, temperature: float = 1.0, seed: int = 0
) -> str:
    """``n_chars`` characters that the trainer's model writes after ``prompt`` (the prompt itself
    is not part of the result). ``temperature`` divides the logits: 1 draws from the model's own
    probabilities, below 1 sharpens them, 0 always takes the likeliest character (deterministic);
    ``seed`` (an integer >= 0) fixes the draws; at most :data:`MAX_CHARS` characters are written,
    more are refused before the first. An empty prompt starts the text at a line's beginning (after a
    newline, when the vocabulary has one). The trainer is left as it was (its random generators
    included).

    A character of the prompt that the model does not know, a model that does not give one
    prediction per character, or logits that are not finite (a diverged run) is one ValueError,
    and so is a model trained on data that is not text.

    >>> from floatlab.train.trainer import Trainer, TrainConfig
    >>> sample(Trainer.from_config(TrainConfig(data="underflow", hidden=(4,))), "In")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: the model was trained on 'underflow', not on text: sampling needs a character model ...
    """
    vocab = trainer.data.vocab
    if not vocab:
        raise ValueError(
            f"the model was trained on {trainer.data.name!r}, not on text: sampling needs a character "
            "model (trained with data 'text')"
        )
    if (
        isinstance(n_chars, bool)
        or not isinstance(n_chars, (int, np.integer))
        or not 0 <= n_chars <= MAX_CHARS
    ):
        raise ValueError(f"n_chars={str(n_chars)[:40]}: expected an integer from 0 to {MAX_CHARS:,}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed={str(seed)[:40]}: expected an integer >= 0")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float, np.floating)):
        raise ValueError(f"temperature={temperature!r}: expected a number >= 0")
    if not (0.0 <= float(temperature) < math.inf):
        raise ValueError(f"temperature={temperature!r}: expected a finite number >= 0")
    if not isinstance(prompt, str):
        raise ValueError(f"prompt={prompt!r}: expected text")
    ids = [int(i) for i in encode(prompt, vocab)]
    if not ids:
        ids = [vocab.index("\n") if "\n" in vocab else 0]
    context = trainer.data.n_features
    rng = np.random.default_rng(seed)
    P, model = trainer.P, trainer.model
    out: list[int] = []
    # (the forward pass may draw random bits, stochastic rounding: inference() puts the trainer's
    # generator back afterwards; a deterministic run's checkpoint samples as it trained)
    with (
        np.errstate(over="ignore", invalid="ignore", divide="ignore"),
        P.inference(),
        deterministic(trainer.deterministic),
    ):
        w = P.weights(trainer.params, model.norm_params)
        for _ in range(int(n_chars)):
            x = np.array([ids[-context:]], dtype=np.int64)
            logits, _ = model.forward(w, trainer.backend.asarray(x), P, train=False, buffers=trainer.buffers)
            shape = tuple(logits.shape)
            if shape != (*x.shape, len(vocab)):
                raise ValueError(
                    f"the model gives {shape} logits for {x.shape} characters: expected "
                    f"{(*x.shape, len(vocab))}, one prediction per character (a language model "
                    "such as the transformer)"
                )
            nxt = _draw(np.asarray(to_numpy(logits), dtype=np.float64)[0, -1], float(temperature), rng)
            if nxt < 0:
                raise ValueError(
                    f"the model's logits are not finite (inf or NaN) at character {len(out) + 1}: its "
                    "weights have diverged, there is nothing to sample"
                )
            ids.append(nxt)
            out.append(nxt)
    return decode(np.array(out, dtype=np.int64), vocab)


def _draw(
    logits: np.ndarray[tuple[int], np.dtype[np.float64]], temperature: float, rng: np.random.Generator
) -> int:
    """The next character: the likeliest at temperature 0, else drawn from softmax(logits / T);
    -1 when the logits are not finite."""
    if not np.isfinite(logits).all():
        return -1
    if temperature == 0.0:
        return int(np.argmax(logits))
    p = np.exp((logits - logits.max()) / temperature)  # (shifted first: a tiny T cannot make inf - inf)
    p /= p.sum()
    return int(rng.choice(len(p), p=p))
