"""A ``.npy`` file's values memory-mapped a window at a time, instead of read into a buffer (private).

The files of a gradient dump are usually in the page cache: reading them copies every byte once
more into a buffer, which on a few cores costs about as much as counting them. A window of
``chunk`` values mapped from the file is counted where it lies, with no copy and no allocation;
its pages are mapped with the window (``MAP_POPULATE``, by the reader's thread, so that the
counting loop takes no fault per page), and unmapped when the last array on it goes, so that
memory stays about two windows whatever the data size.

>>> import os, tempfile
>>> p = os.path.join(tempfile.mkdtemp(), "g.npy")
>>> np.save(p, np.arange(5, dtype=np.float32))
>>> start = np.load(p, mmap_mode="r").offset
>>> [a.tolist() for a in mapped_chunks(p, np.dtype(np.float32), 5, start, chunk=2)]
[[0.0, 1.0], [2.0, 3.0], [4.0]]
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = ["mapped_chunks"]

# the pages mapped at once where the platform can (Linux): one pass over the page table instead
# of a fault per page in the loop that reads them
_FLAGS = getattr(mmap, "MAP_SHARED", 0) | getattr(mmap, "MAP_POPULATE", 0)


def _window(fileno: int, start: int, length: int) -> mmap.mmap:
    if hasattr(mmap, "MAP_SHARED"):
        return mmap.mmap(fileno, length, flags=_FLAGS, prot=mmap.PROT_READ, offset=start)
    return mmap.mmap(fileno, length, access=mmap.ACCESS_READ, offset=start)  # pragma: no cover - Windows


def mapped_chunks(
    path: str, dtype: np.dtype[Any], count: int, offset: int, chunk: int, label: str = ""
) -> Iterator[np.ndarray[Any, Any]]:
    """The ``count`` values of ``dtype`` that start ``offset`` bytes into the file ``path``, ``chunk``
    at a time, each a read-only array on a window of the file mapped for it (valid as long as it
    is referenced: the window goes with its last array). A file shorter than that is one
    ValueError naming it (``label``, default the path).

    >>> import os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "g.npy")
    >>> np.save(p, np.zeros(3, np.float16))
    >>> list(mapped_chunks(p, np.dtype(np.float16), 4, 128, chunk=8))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: shard '...g.npy' is truncated: 6 bytes of data, expected 8 (4 values)
    """
    size = dtype.itemsize
    gran = mmap.ALLOCATIONGRANULARITY
    with open(path, "rb") as fh:
        have = os.fstat(fh.fileno()).st_size
        for start in range(0, count, chunk):
            n = min(chunk, count - start)
            first = offset + start * size  # the window starts on a mapping boundary at or below it
            base = first - first % gran
            if have < first + n * size:  # (a mapping past the end would fault when read)
                raise ValueError(
                    f"shard {label or path!r} is truncated: {have - offset} bytes of data, "
                    f"expected {count * size} ({count} values)"
                )
            window = _window(fh.fileno(), base, first - base + n * size)
            values = np.frombuffer(window, dtype, count=n, offset=first - base)
            del window  # (the array holds the mapping now: it is unmapped with the array)
            yield values
