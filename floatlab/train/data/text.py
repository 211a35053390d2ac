"""Character-level text: a corpus shipped with floatlab, its vocabulary, and examples for a language model.

The corpus is the first five books of the King James Bible (1611, public domain; see
``floatlab/data/README.md`` for its source and the command that extracted it): 817,449 ASCII
characters, 72 distinct ones. It is read from the package, so every machine trains on the same
bytes with no download, and its sha256 is checked on every load.

:func:`load_text` splits the text by position, the last ``val_fraction`` of it being the
validation part (no window of one part reaches into the other), and cuts each part into windows
of ``context + 1`` characters: the input is the first ``context`` characters, the labels are the
next character at every position (the input shifted by one). Training windows are laid end to end
from a seeded offset, so one epoch reads every training character about once; validation windows
are :data:`VAL_WINDOWS` non-overlapping windows spread evenly over the validation part, the same
for every seed, so that evaluation is quick and runs compare on the same characters.

A language model's loss is the mean cross-entropy per character in nats; divided by ln 2 it is
in bits per character (:func:`~floatlab.train.history.bits_per_char`), the unit text models are
compared in. On this corpus a uniform guess over the 72 characters costs 6.17 bits, the
characters' frequencies alone 4.35, the previous character 3.19 (a bigram model at its best);
good character models of English reach well under 2.

>>> d = load_text(context=32)
>>> d.kind, d.n_classes, d.x_train.shape[1], d.y_test.shape
('text', 72, 32, (256, 32))
>>> decode(d.x_test[0, :20], d.vocab), decode(d.y_test[0, :20], d.vocab)   # y is x shifted by one
('u carefully hearken ', ' carefully hearken u')
"""

from __future__ import annotations

import hashlib
import os
from importlib import resources

import numpy as np

from floatlab.train.data.datasets import Dataset, data_name
from floatlab.train.models.base import model_name
from floatlab.train.precision.precision import Array

__all__ = [
    "CORPUS",
    "CORPUS_SHA256",
    "LANGUAGE_MODELS",
    "MAX_TEXT_BYTES",
    "VAL_WINDOWS",
    "check_model_and_data",
    "decode",
    "encode",
    "load_text",
    "read_text",
    "vocabulary",
    "window_starts",
]

#: the corpus that ships with floatlab (in the package's ``data`` folder)
CORPUS = "kjv-pentateuch.txt"
#: its sha256, checked on every load
CORPUS_SHA256 = "3862626722182e8f91f8798c11103339256643f0bc8b0c865c1bce5b66baf47f"
#: the most validation windows a text data set keeps (evaluation stays quick: 256 x 64 characters)
VAL_WINDOWS = 256
#: the largest text file :func:`read_text` reads (a character model of more is beyond this trainer)
MAX_TEXT_BYTES = 64 << 20
#: the models that read text (one prediction per character), and the only ones that can
LANGUAGE_MODELS: tuple[str, ...] = ("transformer",)


def check_model_and_data(model: str, data: str) -> None:
    """Refuse, before any work, a model that cannot read the data set: text needs a language model
    (:data:`LANGUAGE_MODELS`), and a language model reads only text. An unknown model or data set
    is refused too, naming the choices.

    >>> check_model_and_data("transformer", "text")
    >>> check_model_and_data("mlp", "text")
    Traceback (most recent call last):
    ...
    ValueError: data 'text' needs a language model (transformer): mlp predicts one class per example
    """
    kind, name = model_name(model), data_name(data)
    if name == "text" and kind not in LANGUAGE_MODELS:
        raise ValueError(
            f"data 'text' needs a language model ({', '.join(LANGUAGE_MODELS)}): {kind} predicts one "
            "class per example"
        )
    if name != "text" and kind in LANGUAGE_MODELS:
        raise ValueError(f"model {kind!r} is a language model: it reads data 'text', not {data!r}")


def read_text(
    path: str | os.PathLike[str] | None = None, *, sha256: str | None = None, max_bytes: int = MAX_TEXT_BYTES
) -> str:
    """The text of the corpus that ships with floatlab (``path=None``), or of the UTF-8 file at
    ``path``; checked against ``sha256`` when given (the shipped corpus always is, against
    :data:`CORPUS_SHA256`). Anything wrong is one ValueError naming the file: missing, not a
    regular file, over ``max_bytes``, not UTF-8, empty, or failing its checksum.

    >>> len(read_text()), read_text()[:9]
    (817449, 'Genesis 1')
    >>> read_text("/nonexistent.txt")
    Traceback (most recent call last):
    ...
    ValueError: text file '/nonexistent.txt': no such file
    """
    if path is None:
        name = f"floatlab/data/{CORPUS}"
        data = resources.files("floatlab").joinpath("data").joinpath(CORPUS).read_bytes()
        expected: str | None = CORPUS_SHA256  # (read here: a test may replace the constant)
    else:
        name = os.fspath(path)
        data = _read_file(name, max_bytes)
        expected = sha256
    if expected is not None:
        digest = hashlib.sha256(data).hexdigest()
        if digest != expected.strip().lower():
            raise ValueError(f"corpus file {name!r} fails its checksum: sha256 {digest}, expected {expected}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(
            f"text file {name!r} is not UTF-8: byte 0x{data[e.start]:02X} at offset {e.start} ({e.reason})"
        ) from None
    if len(text) < 2:
        raise ValueError(f"text file {name!r} holds {len(text)} characters: expected some text")
    return text


def _read_file(name: str, max_bytes: int) -> bytes:
    if not os.path.exists(name):
        raise ValueError(f"text file {name!r}: no such file")
    if not os.path.isfile(name):  # a FIFO would block the read, a device never end it
        what = "a directory" if os.path.isdir(name) else "not a regular file"
        raise ValueError(f"text file {name!r} is {what}: expected a UTF-8 text file")
    size = os.path.getsize(name)
    if size > max_bytes:
        raise ValueError(
            f"text file {name!r} holds {size:,} bytes, over the cap of {max_bytes:,}: refused "
            "(a character model of more text is beyond this trainer)"
        )
    try:
        with open(name, "rb") as fh:
            data = fh.read(max_bytes + 1)  # (no more than the cap, should the file grow meanwhile)
    except OSError as e:
        raise ValueError(f"cannot read text file {name!r}: {e.strerror or e}") from None
    if len(data) > max_bytes:
        raise ValueError(f"text file {name!r} holds more than {max_bytes:,} bytes: refused")
    return data


def vocabulary(text: str) -> str:
    """The distinct characters of ``text``, sorted: the id of a character is its index.

    >>> vocabulary("hello world")
    ' dehlorw'
    """
    return "".join(sorted(set(text)))


def encode(text: str, vocab: str) -> Array:
    """The ids of the characters of ``text`` (int64); a character not in ``vocab`` is a ValueError
    naming it.

    >>> encode("hello", " dehlorw").tolist()
    [3, 2, 4, 4, 5]
    >>> encode("Hi!", " dehlorw")
    Traceback (most recent call last):
    ...
    ValueError: characters 'H', 'i', '!' are not in the vocabulary (8 characters: ' dehlorw')
    """
    index = {c: i for i, c in enumerate(vocab)}
    try:
        return np.array([index[c] for c in text], dtype=np.int64)
    except KeyError:
        unknown = list(dict.fromkeys(c for c in text if c not in index))
        shown = ", ".join(repr(c) for c in unknown[:20]) + (", ..." if len(unknown) > 20 else "")
        raise ValueError(
            f"characters {shown} are not in the vocabulary ({len(vocab)} characters: {vocab!r})"
        ) from None


def decode(ids: Array, vocab: str) -> str:
    """The text of the ids ``ids`` (any integer array), inverse of :func:`encode`.

    >>> decode(np.array([3, 2, 4, 4, 5]), " dehlorw")
    'hello'
    """
    flat = np.asarray(ids).reshape(-1)
    if flat.size and (int(flat.min()) < 0 or int(flat.max()) >= len(vocab)):
        raise ValueError(f"ids from {int(flat.min())} to {int(flat.max())}: expected 0 to {len(vocab) - 1}")
    return "".join(vocab[int(i)] for i in flat)


def window_starts(start: int, stop: int, length: int, *, step: int, count: int | None = None) -> Array:
    """Where windows of ``length`` characters begin inside ``[start, stop)``: every ``step``-th
    position from ``start``, each window ending by ``stop``; with ``count``, at most that many,
    spread evenly over them.

    >>> window_starts(0, 10, 3, step=3).tolist(), window_starts(10, 30, 5, step=5, count=2).tolist()
    ([0, 3, 6], [10, 25])
    """
    starts = np.arange(start, stop - length + 1, step, dtype=np.int64)
    if count is not None and len(starts) > count:
        starts = starts[np.linspace(0, len(starts) - 1, count).round().astype(np.int64)]
    return starts


def _windows(ids: Array, starts: Array, context: int) -> tuple[Array, Array]:
    """Inputs ``ids[s : s + context]`` and their next-character labels ``ids[s + 1 : s + context + 1]``."""
    rows = starts[:, None] + np.arange(context + 1, dtype=np.int64)[None, :]
    win = ids[rows]
    return np.ascontiguousarray(win[:, :-1]), np.ascontiguousarray(win[:, 1:])


def load_text(
    *,
    context: int = 64,
    val_fraction: float = 0.1,
    seed: int = 0,
    path: str | os.PathLike[str] | None = None,
    sha256: str | None = None,
) -> Dataset:
    """A character-level data set: the shipped corpus (``path=None``) or the UTF-8 text at ``path``
    (checked against ``sha256`` when given), split by position and cut into windows (see the
    module's text). ``seed`` sets where the training windows start (an offset below ``context``).

    >>> d = load_text(context=8, seed=1)
    >>> d.x_train.dtype, d.x_train.shape[1:], bool((d.x_train[:, 1:] == d.y_train[:, :-1]).all())
    (dtype('int64'), (8,), True)
    >>> load_text(context=0)
    Traceback (most recent call last):
    ...
    ValueError: context=0: expected an integer >= 1
    """
    if isinstance(context, bool) or not isinstance(context, (int, np.integer)) or context < 1:
        raise ValueError(f"context={context!r}: expected an integer >= 1")
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction={val_fraction!r}: expected a number in (0, 1)")
    context = int(context)
    text = read_text(path, sha256=sha256)
    vocab = vocabulary(text)
    ids = encode(text, vocab)
    split = round(len(ids) * (1.0 - val_fraction))
    length = context + 1
    if min(split, len(ids) - split) < length:
        raise ValueError(
            f"context={context}: each part of the text (train {split:,} characters, validation "
            f"{len(ids) - split:,}) must hold a window of context + 1 characters"
        )
    offset = int(np.random.default_rng([seed, 3]).integers(0, min(context, split - length + 1)))
    x_train, y_train = _windows(ids, window_starts(offset, split, length, step=length - 1), context)
    starts = window_starts(split, len(ids), length, step=length, count=VAL_WINDOWS)
    x_val, y_val = _windows(ids, starts, context)
    source = CORPUS if path is None else os.path.basename(os.fspath(path))
    return Dataset(
        "text",
        x_train,
        y_train,
        x_val,
        y_val,
        len(vocab),
        f"the characters of {source}: {split:,} for training, {len(ids) - split:,} for validation "
        f"({len(y_val)} windows of {context})",
        vocab=vocab,
    )
