"""Reading gradient dumps larger than memory: many shards, chunk by chunk (private).

A source is a folder, a glob pattern, a list of files (``.npy``, ``.npz``: every entry) or a Zarr
array (a folder holding ``.zarray`` or ``zarr.json``). Every shard's header is read first, so that
a shard that is not a float array, or whose data is shorter than its header says (a truncated
file), is named in the error before any counting; nothing is ever written. The values of a ``.npy``
file are then memory-mapped ``chunk`` values at a time (:mod:`floatlab.gradhist._mapped`: no
copy), the others read into reused buffers of ``chunk`` values, so the memory held stays about two
chunks whatever the data size. :meth:`floatlab.gradhist.GradHistogram.from_files` counts them: counting is
order-free, so the result equals the in-memory histogram of all the values, bin for bin.

>>> import numpy as np, tempfile, os
>>> folder = tempfile.mkdtemp()
>>> x = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
>>> for i in range(4):
...     np.save(os.path.join(folder, f"g{i}.npy"), x[250 * i : 250 * (i + 1)])
>>> sum(a.size for a in read_shards(shard_plan(folder), chunk=64))
1000
"""

from __future__ import annotations

import contextlib
import glob
import math
import os
import queue
import threading
import zipfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Any

import numpy as np

from floatlab.gradhist._inputs import _format_of_dtype
from floatlab.gradhist._mapped import mapped_chunks

__all__ = ["CHUNK", "Shard", "read_shard", "read_shards", "shard_plan"]

#: values per read: 16 Mi values (64 MiB of float32; two such buffers while counting)
CHUNK = 1 << 24
_SUFFIXES = (".npy", ".npz")


@dataclass(frozen=True)
class Shard:
    """One array on disk: a ``.npy`` file, an entry of a ``.npz`` archive or a Zarr array; its dtype,
    its number of values and where they start (the byte offset; -1 for Zarr).

    >>> Shard("g.npy", "", np.dtype(np.float32), 10, 128).label
    'g.npy'
    """

    path: str
    entry: str
    dtype: np.dtype[Any]
    count: int
    offset: int

    @property
    def label(self) -> str:
        return f"{self.path}:{self.entry}" if self.entry else self.path


def _is_zarr(path: str) -> bool:
    return os.path.isdir(path) and any(
        os.path.exists(os.path.join(path, m)) for m in (".zarray", "zarr.json")
    )


def _files(source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[str]:
    """The shards' paths a source names, sorted within a folder or a pattern."""
    items = [source] if isinstance(source, (str, os.PathLike)) else list(source)
    out: list[str] = []
    for item in items:
        p = os.fspath(item)
        if _is_zarr(p):
            out.append(p)
        elif os.path.isdir(p):
            found = sorted(
                os.path.join(p, n)
                for n in os.listdir(p)
                if n.lower().endswith(_SUFFIXES) or _is_zarr(os.path.join(p, n))
            )
            if not found:
                raise ValueError(f"folder {p!r} holds no .npy, .npz or Zarr shards: expected gradient dumps")
            out.extend(found)
        elif glob.has_magic(p):
            found = sorted(glob.glob(p))
            if not found:
                raise ValueError(f"pattern {p!r} matches no file: expected .npy, .npz or Zarr shards")
            out.extend(found)
        else:
            out.append(p)
    return out


def _header(fh: IO[bytes], label: str) -> tuple[np.dtype[Any], int, int]:
    """The dtype and value count of the .npy stream ``fh``, and the header's length."""
    fmt = np.lib.format
    try:
        version = fmt.read_magic(fh)
        if version == (1, 0):
            shape, _, dtype = fmt.read_array_header_1_0(fh)
        else:  # 2.0 and 3.0 differ from 1.0 in the header length's width only
            shape, _, dtype = fmt.read_array_header_2_0(fh)
    except (ValueError, OSError, EOFError) as e:
        raise ValueError(f"shard {label!r} is not a .npy array: {e}") from None
    if dtype.hasobject or _format_of_dtype(dtype.name) is None:
        raise ValueError(
            f"shard {label!r} holds {dtype} values: expected a float array (float64, float32, float16, ...)"
        )
    return dtype, math.prod(shape), fh.tell()


def _check_size(label: str, have: int, dtype: np.dtype[Any], count: int) -> None:
    need = count * dtype.itemsize
    if have < need:
        raise ValueError(
            f"shard {label!r} is truncated: {have} bytes of data, expected {need} ({count} values)"
        )


def shard_plan(source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[Shard]:
    """Every shard of ``source``, its header checked (a missing file, a non-float array or a
    truncated one is one ValueError naming it); no value is read.

    >>> shard_plan("no/such/*.npy")
    Traceback (most recent call last):
    ...
    ValueError: pattern 'no/such/*.npy' matches no file: expected .npy, .npz or Zarr shards
    """
    from floatlab.io import first_bytes

    plan: list[Shard] = []
    for path in _files(source):
        if _is_zarr(path):
            arr = _zarr(path)
            if _format_of_dtype(arr.dtype.name) is None:
                raise ValueError(f"shard {path!r} holds {arr.dtype} values: expected a float array")
            plan.append(Shard(path, "", np.dtype(arr.dtype), math.prod(arr.shape), -1))
            continue
        first_bytes(path, "a .npy, .npz or Zarr shard")  # missing, a folder, a FIFO: one clear error
        if path.lower().endswith(".npz"):
            try:
                zf = zipfile.ZipFile(path)
            except (zipfile.BadZipFile, OSError) as e:
                raise ValueError(f"shard {path!r} is not a .npz archive: {e}") from None
            with zf:
                for info in zf.infolist():
                    label = f"{path}:{info.filename}"
                    with zf.open(info) as fh:
                        dtype, count, head = _header(fh, label)
                    _check_size(label, info.file_size - head, dtype, count)
                    plan.append(Shard(path, info.filename, dtype, count, head))
        elif path.lower().endswith(".npy"):
            with open(path, "rb") as fh:
                dtype, count, head = _header(fh, path)
            _check_size(path, os.path.getsize(path) - head, dtype, count)
            plan.append(Shard(path, "", dtype, count, head))
        else:
            raise ValueError(f"shard {path!r}: expected a .npy or .npz file, or a Zarr array")
    return plan


def _zarr(path: str) -> Any:
    try:
        import zarr  # type: ignore[import-untyped,unused-ignore]
    except ImportError as e:
        raise ValueError(f"shard {path!r} is a Zarr array: pip install 'floatlab[scale]' to read it") from e
    try:
        return zarr.open_array(path, mode="r")
    except Exception as e:  # zarr raises many kinds for a broken store
        raise ValueError(f"shard {path!r} is not a readable Zarr array: {e}") from None


def _read_into(fh: IO[bytes], view: memoryview, label: str) -> None:
    got = 0
    while got < len(view):
        n = fh.readinto(view[got:])  # type: ignore[attr-defined]
        if not n:
            raise ValueError(f"shard {label!r} is truncated: it ended while being read")
        got += n


def _zarr_blocks(shard: Shard, chunk: int) -> Iterator[np.ndarray[Any, Any]]:
    """A Zarr array's values, a whole number of rows (along the first axis) at a time."""
    arr = _zarr(shard.path)
    if arr.ndim == 0:
        yield np.asarray(arr[...]).reshape(1)
        return
    row = max(1, math.prod(arr.shape[1:]))
    step = max(1, chunk // row)
    for start in range(0, arr.shape[0], step):
        yield np.asarray(arr[start : start + step])


def _fill(
    shard: Shard, chunk: int, take: Callable[[], np.ndarray[Any, Any]]
) -> Iterator[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]]:
    """The values of a .npy shard or .npz entry, ``chunk`` at a time, each read into a buffer from
    ``take()``: the values and their buffer (the caller hands it back when counted)."""
    size = shard.dtype.itemsize
    zf = zipfile.ZipFile(shard.path) if shard.entry else None
    try:
        fh: IO[bytes] = zf.open(shard.entry) if zf is not None else open(shard.path, "rb")  # noqa: SIM115
        with fh:
            if zf is not None:
                fh.read(shard.offset)  # (a compressed entry cannot seek)
            else:
                fh.seek(shard.offset)
            for start in range(0, shard.count, chunk):
                n = min(chunk, shard.count - start)
                raw = take()
                view = memoryview(raw)[: n * size]  # type: ignore[arg-type,unused-ignore]
                _read_into(fh, view, shard.label)
                yield np.frombuffer(view, shard.dtype), raw
    finally:
        if zf is not None:
            zf.close()


def _mapped(shard: Shard, chunk: int) -> Iterator[np.ndarray[Any, Any]]:
    return mapped_chunks(shard.path, shard.dtype, shard.count, shard.offset, chunk, shard.label)


def read_shard(shard: Shard, chunk: int = CHUNK) -> Iterator[np.ndarray[Any, Any]]:
    """The values of one shard, ``chunk`` at a time, mapped from a ``.npy`` file or read into one
    reused buffer (each array is valid until the next is asked for); first an empty array of the
    shard's dtype, so that an empty shard still names its dtype.

    >>> import tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "g.npy")
    >>> np.save(p, np.arange(5, dtype=np.float32))
    >>> [a.tolist() for a in read_shard(shard_plan(p)[0], chunk=2)]
    [[], [0.0, 1.0], [2.0, 3.0], [4.0]]
    """
    yield np.zeros(0, shard.dtype)
    if shard.offset < 0:
        yield from _zarr_blocks(shard, chunk)
        return
    if not shard.entry:
        yield from _mapped(shard, chunk)
        return
    buf = np.empty(min(chunk, max(shard.count, 1)) * shard.dtype.itemsize, np.uint8)
    for values, _ in _fill(shard, chunk, lambda: buf):
        yield values


def read_shards(plan: Sequence[Shard], chunk: int = CHUNK) -> Iterator[np.ndarray[Any, Any]]:
    """The values of every shard in turn, ``chunk`` at a time, the next chunk mapped or read from
    disk (a thread) while the caller works on this one (the counting loops release the GIL): two
    chunks of ``chunk`` values in all (mapped windows, or buffers made when a shard that cannot be
    mapped needs one), each array valid until the next is asked for. An empty array of each shard's
    dtype comes first.

    >>> import tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "g.npy")
    >>> np.save(p, np.arange(3, dtype=np.float16))
    >>> [a.tolist() for a in read_shards(shard_plan([p, p]), chunk=2)]
    [[], [], [0.0, 1.0], [2.0], [0.0, 1.0], [2.0]]
    """
    for shard in plan:
        yield np.zeros(0, shard.dtype)
    width = max((s.dtype.itemsize for s in plan if s.offset >= 0), default=0)
    # two places for chunks in flight; a place gets a read buffer once a shard needs one
    free: queue.Queue[np.ndarray[Any, Any] | None] = queue.Queue()
    for _ in range(2):
        free.put(None)
    ready: queue.Queue[Any] = queue.Queue()
    stop = threading.Event()

    def place() -> np.ndarray[Any, Any] | None:
        while not stop.is_set():
            with contextlib.suppress(queue.Empty):
                return free.get(timeout=0.1)
        raise _Stopped

    def take() -> np.ndarray[Any, Any]:
        buffer = place()
        return np.empty(chunk * width, np.uint8) if buffer is None else buffer

    def placed(blocks: Iterator[np.ndarray[Any, Any]]) -> None:
        """Each block made (a Zarr block read, a window mapped) once a place is free for it."""
        while True:
            where = place()
            block = next(blocks, None)
            if block is None:
                free.put(where)
                return
            ready.put((block, where))
            del block  # (a window is unmapped once the caller is done with it)

    def produce() -> None:
        try:
            for shard in plan:
                if shard.offset < 0:  # a Zarr block or a mapped window holds a place: two in flight
                    placed(_zarr_blocks(shard, chunk))
                elif not shard.entry:  # a .npy file
                    placed(_mapped(shard, chunk))
                else:  # (a chunk's buffer goes back to `free` once the caller is done with it)
                    for values_and_buffer in _fill(shard, chunk, take):
                        ready.put(values_and_buffer)
            ready.put(None)
        except _Stopped:
            pass
        except BaseException as e:  # handed to the caller's side, which raises it
            ready.put(e)

    reader = threading.Thread(target=produce, name="floatlab-shard-reader", daemon=True)
    reader.start()
    try:
        while (item := ready.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            values, buffer = item
            yield values
            free.put(buffer)  # used: its place (and buffer) is free for the next chunk
            del values, item
    finally:
        stop.set()
        reader.join()


class _Stopped(Exception):
    """The caller stopped (an error, or it had enough): the reader ends too."""
