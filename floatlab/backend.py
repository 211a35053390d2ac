"""NumPy or CuPy: the one module that knows CuPy exists (a leaf: it knows no formats).

Everything else in floatlab works on arrays through this module: :func:`get_xp` says which
array library an array belongs to, :func:`to_numpy` brings an array to the host, and a
:class:`Backend` (``get_backend("numpy")`` or ``get_backend("cupy")``) allocates arrays on its
device. CuPy is imported only when a CuPy backend is asked for, or when an array that is
already a CuPy array is seen (then CuPy is loaded anyway). The GEMMs in a compute format
(fp16 and bf16 tensor cores, TF32) are :mod:`floatlab.train.precision.matmul`.

>>> import numpy as np
>>> be = get_backend("numpy")
>>> a = be.asarray(np.full((2, 3), 1 / 3, np.float32))
>>> get_xp(a) is np, is_cupy(a)
(True, False)
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

__all__ = [
    "BACKENDS",
    "Backend",
    "BackendUnavailable",
    "cuda_available",
    "gemm_stacks",
    "get_backend",
    "get_xp",
    "host_ints",
    "is_cupy",
    "require_cupy",
    "settle_allocator",
    "to_numpy",
    "tree_map_arrays",
]

BACKENDS: tuple[str, ...] = ("numpy", "cupy")

NO_CUDA = "no CUDA device is available"


class BackendUnavailable(ValueError):
    """The CuPy backend was asked for where CuPy or a CUDA device is missing (one line).

    >>> issubclass(BackendUnavailable, ValueError)   # the command line reports it in one line, status 2
    True
    """


# ---- arrays -------------------------------------------------------------------------------------
def is_cupy(x: Any) -> bool:
    """True when ``x`` is a CuPy array (CuPy is not imported to find out).

    >>> is_cupy(np.zeros(2)), is_cupy([1.0])
    (False, False)
    """
    cp = sys.modules.get("cupy")
    return cp is not None and isinstance(x, cp.ndarray)


def get_xp(*arrays: Any) -> ModuleType:
    """The array module (numpy or cupy) of ``arrays``: cupy if any of them is a CuPy array.

    >>> get_xp(np.ones(1), 2.0).__name__
    'numpy'
    """
    for a in arrays:
        if is_cupy(a):
            return sys.modules["cupy"]
    return np


def gemm_stacks(a: Any, b: Any) -> tuple[tuple[int, ...], Any, Any]:
    """``a @ b`` (shapes (..., M, K) and (..., K, N), leading axes broadcast) as one batched GEMM:
    the leading shape of the result, and the operands as stacks (B, M', K) and (B, K, N) whose
    product, reshaped to ``(*leading, M, N)``, is ``a @ b``. When ``b`` is one matrix the rows of
    every matrix of ``a`` are stacked into one (B = 1: one long GEMM instead of many short ones);
    otherwise both are broadcast to the leading shape. Views where the layout allows (callers
    that need C order make it so); NumPy or CuPy arrays alike.

    >>> lead, a3, b3 = gemm_stacks(np.ones((2, 3, 4, 5)), np.ones((5, 6)))
    >>> lead, a3.shape, b3.shape
    ((2, 3), (1, 24, 5), (1, 5, 6))
    >>> lead, a3, b3 = gemm_stacks(np.ones((3, 4, 5)), np.ones((2, 1, 5, 6)))
    >>> lead, a3.shape, b3.shape
    ((2, 3), (6, 4, 5), (6, 5, 6))
    """
    xp = get_xp(a, b)
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    # (the shapes are spelled out: a reshape to -1 of an empty array is refused)
    if b.ndim == 2:
        lead: tuple[int, ...] = tuple(a.shape[:-2])
        return lead, a.reshape(1, math.prod(lead) * m, k), b[None]
    lead = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    nb = math.prod(lead)
    return (
        lead,
        xp.broadcast_to(a, (*lead, m, k)).reshape(nb, m, k),
        xp.broadcast_to(b, (*lead, k, n)).reshape(nb, k, n),
    )


def to_numpy(x: Any) -> np.ndarray:
    """``x`` as a NumPy array on the host (a CuPy array is copied from its device).

    >>> to_numpy([1, 2]).tolist()
    [1, 2]
    """
    if is_cupy(x):
        out: np.ndarray = x.get()
        return out
    return np.asarray(x)


def host_ints(values: Sequence[Any]) -> list[int]:
    """Counts and flags (Python or NumPy numbers, or 0-d CuPy arrays) as Python ints, the device's
    in one transfer: each read-back waits for the device's queue to drain, so a step that reads
    several of them reads them together.

    >>> host_ints([np.int64(3), np.bool_(True), 2])
    [3, 1, 2]
    """
    if any(is_cupy(v) for v in values):
        cp = sys.modules["cupy"]
        return [int(v) for v in cp.stack([cp.asarray(v, dtype=cp.int64) for v in values]).get().tolist()]
    return [int(v) for v in values]


def tree_map_arrays(obj: Any, fn: Any) -> Any:
    """``obj`` with ``fn`` applied to every NumPy or CuPy array inside dicts, lists and tuples.

    >>> tree_map_arrays({"a": [np.ones(1)], "b": 3}, lambda a: a * 2)
    {'a': [array([2.])], 'b': 3}
    """
    if isinstance(obj, np.ndarray) or is_cupy(obj):
        return fn(obj)
    if isinstance(obj, dict):
        return {k: tree_map_arrays(v, fn) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(tree_map_arrays(v, fn) for v in obj)
    return obj


# ---- CuPy, loaded on demand ---------------------------------------------------------------------
def _load_cupy() -> tuple[ModuleType | None, str]:
    """CuPy and "" when it imports and sees a CUDA device; else None and the reason."""
    try:
        import cupy
    except Exception as e:  # ImportError, or a CUDA library that fails to load
        return None, f"CuPy is not installed or does not load ({type(e).__name__}): pip install floatlab[gpu]"
    try:
        n = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as e:  # no driver, or a driver that finds no device
        return None, f"the CUDA runtime reports {type(e).__name__}: {' '.join(str(e).split())[:120]}"
    if n < 1:
        return None, "the CUDA runtime sees 0 devices"
    return cupy, ""


def cuda_available() -> bool:
    """True when CuPy imports and sees at least one CUDA device (never raises).

    >>> isinstance(cuda_available(), bool)
    True
    """
    return _load_cupy()[0] is not None


def require_cupy() -> ModuleType:
    """The ``cupy`` module, or :class:`BackendUnavailable` saying in one line why not.

    >>> try:
    ...     cp = require_cupy()
    ... except BackendUnavailable as e:
    ...     print(str(e).startswith("no CUDA device is available"))
    ... else:
    ...     print(True)
    True
    """
    cp, why = _load_cupy()
    if cp is None:
        raise BackendUnavailable(f"{NO_CUDA} for --backend cupy: {why}")
    return cp


@dataclass(frozen=True)
class Backend:
    """Where the arrays live and how GEMMs run: ``"numpy"`` (host) or ``"cupy"`` (a CUDA GPU).

    ``tf32`` lets the fp32 GEMMs of the trainer run on TF32 tensor cores (off by default: the
    fp32 baseline is IEEE fp32); :meth:`matmul` with ``compute="tf32"`` asks for it directly.
    Build one with :func:`get_backend`.

    >>> get_backend("numpy").name, get_backend("numpy", tf32=True).fp32_gemm
    ('numpy', 'tf32')
    """

    name: str = "numpy"
    tf32: bool = False

    @property
    def xp(self) -> ModuleType:
        """The array module: numpy, or cupy.

        >>> get_backend("numpy").xp.__name__
        'numpy'
        """
        return require_cupy() if self.name == "cupy" else np

    @property
    def is_gpu(self) -> bool:
        """True for the CuPy backend.

        >>> get_backend("numpy").is_gpu
        False
        """
        return self.name == "cupy"

    @property
    def fp32_gemm(self) -> str:
        """The compute format of the trainer's fp32 GEMMs: ``"tf32"`` with :attr:`tf32`, else fp32."""
        return "tf32" if self.tf32 else "fp32"

    def asarray(self, x: Any, dtype: Any = None) -> Any:
        """``x`` on this backend's device (no copy when it is there already).

        >>> get_backend("numpy").asarray([1, 2], np.float32).dtype
        dtype('float32')
        """
        if self.name == "cupy":
            return self.xp.asarray(x, dtype=dtype)
        return np.asarray(to_numpy(x), dtype=dtype)

    def to_numpy(self, x: Any) -> np.ndarray:
        """``x`` on the host (see :func:`to_numpy`).

        >>> get_backend("numpy").to_numpy([0.5]).tolist()
        [0.5]
        """
        return to_numpy(x)

    def synchronize(self) -> None:
        """Wait for the device's queued work (a no-op on NumPy): call before reading a clock.

        >>> get_backend("numpy").synchronize()
        """
        if self.name == "cupy":
            self.xp.cuda.get_current_stream().synchronize()

    def device_name(self) -> str:
        """The GPU's name (``"NVIDIA H100 80GB HBM3"``), or the CPU's on NumPy.

        >>> isinstance(get_backend("numpy").device_name(), str)
        True
        """
        if self.name == "cupy":
            cp = self.xp
            props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
            name = props["name"]
            return name.decode() if isinstance(name, bytes) else str(name)
        return _cpu_name()

    def compute_capability(self) -> tuple[int, int] | None:
        """The GPU's compute capability, None on NumPy.

        >>> get_backend("numpy").compute_capability() is None
        True
        """
        if self.name != "cupy":
            return None
        cc = str(self.xp.cuda.Device().compute_capability)
        return int(cc[:-1]), int(cc[-1])


def _cpu_name() -> str:
    """The CPU's model name (Linux), or the platform's processor string."""
    import platform

    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"


def get_backend(backend: Backend | str | None = None, *, tf32: bool | None = None) -> Backend:
    """The backend named ``backend`` (``"numpy"``, the default, or ``"cupy"``).

    ``"cupy"`` checks at once that CuPy and a CUDA device are there
    (:class:`BackendUnavailable`, a ValueError, otherwise). ``tf32`` overrides the backend's
    TF32 switch.

    >>> get_backend().name, get_backend(get_backend("numpy")).name
    ('numpy', 'numpy')
    >>> get_backend("tpu")
    Traceback (most recent call last):
    ...
    ValueError: unknown backend 'tpu': expected numpy or cupy
    """
    if isinstance(backend, Backend):
        be = backend
    else:
        key = "numpy" if backend is None else str(backend).strip().lower()
        if key not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}: expected {' or '.join(BACKENDS)}")
        be = Backend(key)
    if tf32 is not None and tf32 != be.tf32:
        be = Backend(be.name, bool(tf32))
    if be.name == "cupy":
        require_cupy()
    return be


_MOVED = {
    name: "floatlab.train.precision.matmul"
    for name in ("GEMM_FORMATS", "TENSOR_CORE_SINCE", "check_gemm_support", "gemm_format")
}


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        raise AttributeError(f"floatlab.backend.{name} is now {_MOVED[name]}.{name}")
    raise AttributeError(f"module 'floatlab.backend' has no attribute {name!r}")


_allocator_settled = False


def settle_allocator() -> None:
    """Free one block of 31 MiB, once per process, so that the C allocator keeps a step's arrays.

    glibc's malloc gives a block above its mmap threshold fresh pages from the kernel, and hands
    the top of its heap back when more than twice that threshold lies free there. The threshold
    starts at 128 KiB and rises to the size of the largest such block freed so far, up to 32 MiB.
    A training step allocates and frees arrays of about a megabyte (weight casts, updates): with
    a small data set nothing larger was ever freed, and every step page-faulted its arrays back in
    (measured on the 784-256-256-10 benchmark MLP: 180 faults, 0.4 ms of a 2.4 ms mixed-fp16 step).
    A step whose temporaries add up to more (the default transformer under fp8-blockwise: its
    tile casts, slice partials and stores) freed more than twice 16 MiB at a time, the heap's
    top went back to the kernel, and the step faulted about 7,000 pages in again (241 ms a step
    against 231 ms). After one block just under the 32 MiB cap is freed, the threshold is 31 MiB
    and up to 62 MiB stay in the heap, and those arrays are reused. The block is never touched, so
    it costs no page faults; elsewhere than glibc it is one short-lived allocation. The NumPy
    trainer calls it.

    >>> settle_allocator(); settle_allocator()   # (the second call does nothing)
    """
    global _allocator_settled
    if not _allocator_settled:
        np.empty(31 << 20, np.uint8)
        _allocator_settled = True
