"""Checkpoints: one ``.npz`` file, written atomically.

A checkpoint is a nested dict whose leaves are numpy arrays or JSON values (numbers, strings,
lists, None; non-finite floats too). Arrays go into the archive under their path
(``params/W0``); everything else into one JSON document. The file is written to a temporary
name in the same directory, flushed to disk, and renamed over the target, so that a crash
leaves either the old checkpoint or the new one, never half of one.

>>> import tempfile, os, numpy as np
>>> with tempfile.TemporaryDirectory() as d:
...     p = save_checkpoint(os.path.join(d, "ck.npz"), {"params": {"w": np.arange(3.0)}, "step": 7,
...                                                     "scale": float("inf")})
...     back = load_checkpoint(p)
...     os.listdir(d)   # no temporary file left behind
['ck.npz']
>>> back["params"]["w"].tolist(), back["step"], back["scale"]
([0.0, 1.0, 2.0], 7, inf)
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from floatlab.io import MAX_BYTES, check_archive, write_atomic

__all__ = ["load_checkpoint", "save_checkpoint"]

_ARRAY = "__array__"
_FLOAT = "__float__"
_META = "__meta__"


def _split(tree: Any, prefix: str, arrays: dict[str, np.ndarray[Any, Any]]) -> Any:
    """Replace the arrays of ``tree`` by references, collecting them in ``arrays``."""
    if isinstance(tree, np.ndarray):
        arrays[prefix] = tree
        return {_ARRAY: prefix}
    if isinstance(tree, dict):
        out = {}
        for k, v in tree.items():
            if not isinstance(k, str) or "/" in k or k.startswith("__"):
                raise ValueError(f"checkpoint key {k!r}: expected a string without '/' or a leading '__'")
            out[k] = _split(v, f"{prefix}/{k}" if prefix else k, arrays)
        return out
    if isinstance(tree, (list, tuple)):
        return [_split(v, f"{prefix}/{i}", arrays) for i, v in enumerate(tree)]
    if isinstance(tree, np.generic):
        return _split(tree.item(), prefix, arrays)
    if isinstance(tree, float) and not math.isfinite(tree):
        return {_FLOAT: repr(tree)}
    if tree is None or isinstance(tree, (bool, int, float, str)):
        return tree
    raise ValueError(f"checkpoint value at {prefix!r}: cannot store a {type(tree).__name__}")


def _join(tree: Any, arrays: Any) -> Any:
    if isinstance(tree, dict):
        if set(tree) == {_ARRAY}:
            if tree[_ARRAY] not in arrays:
                raise ValueError(f"the checkpoint refers to an array {tree[_ARRAY]!r} that it does not hold")
            return np.array(arrays[tree[_ARRAY]])
        if set(tree) == {_FLOAT}:
            return float(tree[_FLOAT])
        return {k: _join(v, arrays) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_join(v, arrays) for v in tree]
    return tree


def save_checkpoint(path: str | os.PathLike[str], state: dict[str, Any]) -> Path:
    """Write ``state`` to ``path`` (a ``.npz`` name) atomically; return the path.

    >>> import tempfile, os
    >>> with tempfile.TemporaryDirectory() as d:
    ...     save_checkpoint(os.path.join(d, "ck.npz"), {"w": np.zeros(2)}).name
    'ck.npz'
    """
    p = Path(path)
    if p.suffix != ".npz":
        raise ValueError(f"checkpoint file {str(p)!r}: expected a .npz name")
    arrays: dict[str, np.ndarray[Any, Any]] = {}
    meta = _split(state, "", arrays)
    arrays[_META] = np.array(json.dumps(meta, allow_nan=False))
    write_atomic(p, lambda fh: np.savez(fh, **arrays))  # type: ignore[arg-type]
    return p


def load_checkpoint(path: str | os.PathLike[str], *, max_bytes: int = MAX_BYTES) -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint`.

    A missing, truncated or foreign file is one ValueError naming it (never a half-read state);
    so is anything but a regular file (a FIFO would block the read) and an archive whose members
    would inflate past ``max_bytes`` (checked before anything is inflated, see
    :func:`floatlab.io.check_archive`).

    >>> import tempfile, os
    >>> with tempfile.TemporaryDirectory() as d:
    ...     load_checkpoint(save_checkpoint(os.path.join(d, "ck.npz"), {"step": 3, "opt": {"t": 1}}))
    {'step': 3, 'opt': {'t': 1}}
    """
    p = Path(path)
    name = str(p)
    if not p.is_file():
        what = "a directory" if p.is_dir() else "no such file" if not p.exists() else "not a regular file"
        raise ValueError(f"checkpoint {name!r}: {what} (expected a .npz file written by save_checkpoint)")
    # the file is opened (and closed) here: np.load leaks its own handle when the zip is damaged
    with open(p, "rb") as fh:
        try:
            z = np.load(fh, allow_pickle=False)
        except Exception as e:  # zipfile, zlib and numpy raise several kinds for a damaged file
            raise ValueError(
                f"checkpoint {name!r} cannot be read (damaged or not a .npz file): {e}"
            ) from None
        if not isinstance(z, np.lib.npyio.NpzFile):
            raise ValueError(
                f"checkpoint {name!r} holds a single array: expected a .npz written by save_checkpoint"
            )
        # np.load read only the zip's directory: check what the members would inflate to first
        try:
            check_archive(name, max_bytes)
        except ValueError as e:
            z.close()
            raise ValueError(f"checkpoint {name!r} cannot be read: {e}") from None
        with z:
            if _META not in z.files:
                raise ValueError(f"{name!r} is not a floatlab checkpoint (no {_META} entry)")
            try:
                meta = json.loads(str(z[_META]))
                arrays = {k: z[k] for k in z.files if k != _META}
            except Exception as e:  # a damaged entry: bad CRC, truncated data, invalid JSON
                raise ValueError(f"checkpoint {name!r} is damaged: {e}") from None
    out = _join(meta, arrays)
    if not isinstance(out, dict):
        raise ValueError(f"{name!r}: expected a dict at the top of the checkpoint")
    return out
