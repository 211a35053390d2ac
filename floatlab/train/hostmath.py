"""The NumPy trainer's host arithmetic whose bits could depend on the machine: GEMMs, exp, log, tanh.

Every float32 GEMM of a training step on the host (the layers' GEMMs, the fp8 and microscaling
recipes' scaled GEMMs, the Hadamard transform, BatchNorm's channel sums) goes through
:func:`host_matmul`, and every exp, log and tanh through :func:`host_exp`, :func:`host_log` and
:func:`host_tanh`, in one of two modes:

* **default**: BLAS's sgemm (NumPy's OpenBLAS), each call on one BLAS thread. A large GEMM is cut
  into row blocks that depend on its shape alone, run side by side on a small pool of threads.
  OpenBLAS picks its loop blocking by its own thread count, so a plain call gives other bits on
  two threads than on one (every shape from 2048 x 64 x 64 up, measured with OpenBLAS 0.3.31);
  here the thread count changes only the speed. The bits still depend on the BLAS kernel that
  the CPU selects (Haswell, SkylakeX, ...), which adds the products in its own order.
  exp, log and tanh are NumPy's vector code, which NumPy picks for the CPU (AVX-512, AVX2 or
  its baseline), each with its own last bits.
* **deterministic** (``with deterministic():``, ``TrainConfig(deterministic=True)``, ``--deterministic``):
  :func:`floatlab.rounding.exact_gemm.exact_matmul`, the exact sum of the exact products
  rounded once to nearest even, and :func:`floatlab.rounding.elementary.exact_f32`, the
  correctly rounded exp, log and tanh. Nothing is left to the machine's choice of order or code,
  so the bits are the same on any CPU, BLAS build and thread count, at the cost of a float64
  GEMM (about 2x an sgemm), float64 elementary functions and a pass over each output.

>>> import numpy as np
>>> a = np.float32([[1.0, 2.0**-24, 2.0**-24]]); b = np.ones((3, 1), np.float32)
>>> with deterministic():
...     host_matmul(a, b).item() == 1 + 2.0**-23   # the exact sum, rounded once
True
>>> host_matmul(a, b).item() in (1.0, 1 + 2.0**-23)   # BLAS: as its kernel orders the additions
True
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import numpy as np
from numpy.typing import NDArray

from floatlab.backend import gemm_stacks, get_xp
from floatlab.rounding.elementary import exact_f32
from floatlab.rounding.exact_gemm import exact_matmul

__all__ = ["deterministic", "host_exp", "host_log", "host_matmul", "host_tanh", "is_deterministic"]

Array = NDArray[Any]

_EXACT: ContextVar[bool] = ContextVar("floatlab_exact_gemms", default=False)

#: a GEMM with fewer multiply-adds than this runs in one piece; a larger one in row blocks of
#: about this much work each (at most _MAX_BLOCKS), whatever the number of threads
_BLOCK_WORK = 1 << 21
_MAX_BLOCKS = 8


@contextmanager
def deterministic(on: bool = True) -> Iterator[None]:
    """Run every :func:`host_matmul` inside the block exactly (``on``) or through BLAS.

    >>> with deterministic():
    ...     is_deterministic()
    True
    >>> is_deterministic()
    False
    """
    token = _EXACT.set(bool(on))
    try:
        yield
    finally:
        _EXACT.reset(token)


def is_deterministic() -> bool:
    """Whether :func:`host_matmul` sums exactly here (inside :func:`deterministic`).

    >>> with deterministic(False):
    ...     is_deterministic()
    False
    """
    return _EXACT.get()


def host_matmul(a: Array, b: Array, out: Array | None = None) -> Array:
    """``np.matmul(a, b)`` of float32 arrays with bits that depend only on the values and the
    shapes (and, outside :func:`deterministic`, the BLAS kernel).

    >>> import numpy as np
    >>> host_matmul(np.ones((2, 3), np.float32), np.ones((3, 2), np.float32)).tolist()
    [[3.0, 3.0], [3.0, 3.0]]
    """
    exact = _EXACT.get()
    if a.dtype != np.float32 or b.dtype != np.float32 or a.ndim < 2 or b.ndim < 2:
        with _blas_one_thread():  # (a GEMV or another dtype: one call)
            if not exact:
                return np.matmul(a, b, out=out)
            return _into(exact_matmul(a, b), out)
    gemm = _exact_into if exact else np.matmul
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    if b.ndim == 2:
        # a stack of matrices times one matrix: blocks of the stacked rows
        batch: tuple[int, ...] = a.shape[:-2]
        rows = math.prod(batch) * m
        if out is None:
            out = np.empty((*batch, m, n), np.float32)
        blocks = _blocks(rows, rows * k * n, 16)
        with _blas_one_thread():
            if len(blocks) == 1:
                return gemm(a, b, out=out)
            a2, o2 = np.ascontiguousarray(a).reshape(rows, k), out.reshape(rows, n)
            _pool().map_all(gemm, [(a2[lo:hi], b, o2[lo:hi]) for lo, hi in blocks])
        return out
    # a stack of GEMMs: blocks of the stack
    batch = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    stack = math.prod(batch)
    if out is None:
        out = np.empty((*batch, m, n), np.float32)
    blocks = _blocks(stack, stack * m * k * n, 1)
    with _blas_one_thread():
        if len(blocks) == 1:
            return gemm(a, b, out=out)
        _, a3, b3 = gemm_stacks(a, b)
        o3 = out.reshape(stack, m, n)
        _pool().map_all(gemm, [(a3[lo:hi], b3[lo:hi], o3[lo:hi]) for lo, hi in blocks])
    return out


def _into(x: Array, out: Array | None) -> Array:
    if out is None:
        return x
    out[...] = x
    return out


def _exact_into(a: Array, b: Array, out: Array) -> Array:
    return _into(exact_matmul(a, b), out)


def host_exp(x: Array, out: Array | None = None) -> Array:
    """``np.exp(x, out=out)``; correctly rounded for float32 inside :func:`deterministic`.

    >>> with deterministic():
    ...     host_exp(np.float32([1.0])).tolist()
    [2.7182817459106445]
    """
    return _elementary("exp", x, out)


def host_log(x: Array, out: Array | None = None) -> Array:
    """``np.log(x, out=out)``; correctly rounded for float32 inside :func:`deterministic`.

    >>> host_log(np.float32([1.0])).tolist()
    [0.0]
    """
    return _elementary("log", x, out)


def host_tanh(x: Array, out: Array | None = None) -> Array:
    """``np.tanh(x, out=out)``; correctly rounded for float32 inside :func:`deterministic`.

    >>> host_tanh(np.float32([0.0])).tolist()
    [0.0]
    """
    return _elementary("tanh", x, out)


def _elementary(name: str, x: Array, out: Array | None) -> Array:
    if _EXACT.get() and isinstance(x, np.ndarray) and x.dtype == np.float32:
        return exact_f32(name, x, out)
    result: Array = getattr(get_xp(x), name)(x, out=out)
    return result


def _blocks(length: int, work: int, align: int) -> list[tuple[int, int]]:
    """Cut ``length`` rows (or matrices of a stack) into blocks of about ``_BLOCK_WORK``
    multiply-adds each, ``align`` rows at a time: a function of the GEMM's shape alone, so that
    the thread count cannot change the bits.

    >>> _blocks(2048, 2048 * 128 * 64, 16)
    [(0, 256), (256, 512), (512, 768), (768, 1024), (1024, 1280), (1280, 1536), (1536, 1792), (1792, 2048)]
    >>> _blocks(64, 64 * 64 * 64, 16)
    [(0, 64)]
    """
    parts = min(_MAX_BLOCKS, work // _BLOCK_WORK, length // align)
    if parts <= 1:
        return [(0, length)]
    per_part = -(-length // parts)
    step = -(-per_part // align) * align
    return [(lo, min(lo + step, length)) for lo in range(0, length, step)]


class _Pool:
    """A few threads that run a GEMM on blocks (NumPy releases the GIL inside BLAS, and the
    exact GEMM's loops run without it)."""

    def __init__(self, workers: int) -> None:
        self._executor = (
            ThreadPoolExecutor(workers, thread_name_prefix="floatlab-gemm") if workers > 1 else None
        )

    def map_all(self, gemm: Callable[..., Any], jobs: list[tuple[Array, Array, Array]]) -> None:
        if self._executor is None:
            for a, b, o in jobs:
                gemm(a, b, out=o)
            return
        futures = [self._executor.submit(gemm, a, b, out=o) for a, b, o in jobs[1:]]
        gemm(*jobs[0][:2], out=jobs[0][2])  # (the caller's thread takes the first block)
        for f in futures:
            f.result()


_state_lock = threading.Lock()
_the_pool: _Pool | None = None
_blas: Any = None


def _pool() -> _Pool:
    global _the_pool
    if _the_pool is None:
        with _state_lock:
            if _the_pool is None:
                _the_pool = _Pool(_blas_controller().threads)
    return _the_pool


class _BlasThreads:
    """NumPy's BLAS libraries (threadpoolctl finds them) and the thread count they started with."""

    def __init__(self) -> None:
        from threadpoolctl import ThreadpoolController

        self.libs = [c for c in ThreadpoolController().select(user_api="blas").lib_controllers]
        self.threads = max([c.num_threads for c in self.libs] + [1])
        self.threads = min(self.threads, os.cpu_count() or 1)


def _blas_controller() -> _BlasThreads:
    global _blas
    if _blas is None:
        with _state_lock:
            if _blas is None:
                _blas = _BlasThreads()
    return _blas  # type: ignore[no-any-return]


@contextmanager
def _blas_one_thread() -> Iterator[None]:
    """BLAS on one thread inside the block (a setting of the process: restored on leaving)."""
    libs = _blas_controller().libs
    before = [c.get_num_threads() for c in libs]
    for c, t in zip(libs, before, strict=True):
        if t != 1:
            c.set_num_threads(1)
    try:
        yield
    finally:
        for c, t in zip(libs, before, strict=True):
            if t != 1:
                c.set_num_threads(t)
