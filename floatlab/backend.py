"""NumPy or CuPy: the one module that knows CuPy exists.

Everything else in floatlab works on arrays through this module: :func:`get_xp` says which
array library an array belongs to, :func:`to_numpy` brings an array to the host, and a
:class:`Backend` (``get_backend("numpy")`` or ``get_backend("cupy")``) allocates arrays on its
device and runs the GEMMs of the trainer. CuPy is imported only when a CuPy backend is asked
for, or when an array that is already a CuPy array is seen (then CuPy is loaded anyway).

GEMMs (:meth:`Backend.matmul`) take a *compute format*: the inputs are rounded to nearest even
into it and the products are accumulated in fp32, the result returned in float32:

* ``"fp32"``: plain fp32 (on a GPU with TF32 off: SIMT cores, IEEE products);
* ``"tf32"``: inputs rounded to TensorFloat-32 (on Ampere and later, TF32 tensor cores);
* ``"fp16"`` and ``"bf16"``: half-precision inputs on tensor cores (compute capability 7.0 and
  later for fp16, 8.0 for bf16), as cuBLAS's ``cublasGemmEx`` with fp32 compute type.

On NumPy the same contract is kept with OpenBLAS: the inputs are rounded into the compute
format and multiplied as float32 (a product of two fp16, bf16 or tf32 values has at most 22
significant bits, so it is exact in fp32: only the order of the fp32 additions differs).

>>> import numpy as np
>>> be = get_backend("numpy")
>>> a = be.asarray(np.full((2, 3), 1 / 3, np.float32))
>>> be.matmul(a, np.ones((3, 1), np.float32), "fp16").ravel().tolist()   # 3 * fp16(1/3)
[0.999755859375, 0.999755859375]
>>> get_xp(a) is np, is_cupy(a)
(True, False)
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from floatlab.formats import BF16, FP16, FP32, FP64, TF32, FloatFormat, get_format

__all__ = [
    "BACKENDS",
    "GEMM_FORMATS",
    "TENSOR_CORE_SINCE",
    "Backend",
    "BackendUnavailable",
    "check_gemm_support",
    "cuda_available",
    "gemm_format",
    "get_backend",
    "get_xp",
    "is_cupy",
    "require_cupy",
    "to_numpy",
    "tree_map_arrays",
]

BACKENDS: tuple[str, ...] = ("numpy", "cupy")
#: the compute formats of :meth:`Backend.matmul`, narrowest first after fp32's own
GEMM_FORMATS: tuple[str, ...] = ("fp32", "tf32", "fp16", "bf16", "fp64")

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


def to_numpy(x: Any) -> np.ndarray:
    """``x`` as a NumPy array on the host (a CuPy array is copied from its device).

    >>> to_numpy([1, 2]).tolist()
    [1, 2]
    """
    if is_cupy(x):
        out: np.ndarray = x.get()
        return out
    return np.asarray(x)


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


# ---- the compute format of a GEMM ---------------------------------------------------------------
def gemm_format(*formats: FloatFormat | str) -> FloatFormat:
    """The narrowest hardware GEMM input format that holds every value of ``formats``:
    fp16, else bf16, else fp32 (fp64 when a format is wider than fp32).

    This is where a simulated policy meets the tensor core: fp16 and the fp8 formats enter an
    fp16 GEMM exactly, bf16 a bf16 GEMM, anything else an fp32 one.

    >>> [gemm_format(f).name for f in ("fp16", "e4m3fn", "bf16", "fp32", "fp64")]
    ['fp16', 'fp16', 'bf16', 'fp32', 'fp64']
    >>> gemm_format("fp16", "bf16").name   # fp16's precision and bf16's range: only fp32 holds both
    'fp32'
    """
    fmts = [get_format(f) for f in formats]
    for candidate in (FP16, BF16, FP32):
        if all(candidate.contains(f) for f in fmts):
            return candidate
    return FP64


def _compute_format(compute: FloatFormat | str) -> FloatFormat:
    f = get_format(compute)
    if f not in (FP32, TF32, FP16, BF16, FP64):
        raise ValueError(f"GEMM compute format {f.name!r}: expected one of {', '.join(GEMM_FORMATS)}")
    return f


# cuBLAS constants (cudaDataType_t, cublasComputeType_t, cublasOperation_t, cublasGemmAlgo_t)
_CUDA_R_32F, _CUDA_R_16F, _CUDA_R_16BF = 0, 2, 14
_CUBLAS_COMPUTE_32F, _CUBLAS_COMPUTE_32F_FAST_TF32 = 68, 77
_CUBLAS_OP_N, _CUBLAS_GEMM_DEFAULT = 0, -1


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

    # ---- GEMM ----------------------------------------------------------------------------------
    def matmul(self, a: Any, b: Any, compute: FloatFormat | str = "fp32") -> Any:
        """``a @ b`` (NumPy broadcasting rules) with inputs rounded to nearest even into
        ``compute`` and fp32 accumulation; float32 result (float64 for ``"fp64"``).

        On CuPy, fp32/tf32/fp16/bf16 GEMMs are ``cublasGemmEx`` (strided-batched for stacks of
        matrices) with fp32 output and compute type ``CUBLAS_COMPUTE_32F`` (TF32 off) or
        ``CUBLAS_COMPUTE_32F_FAST_TF32``; fp16 and bf16 inputs run on tensor cores.

        >>> be = get_backend("numpy")
        >>> x = np.array([[1 + 2**-12, 1.0]], np.float32)
        >>> [be.matmul(x, np.ones((2, 1), np.float32), c).item() for c in ("fp32", "tf32", "bf16")]
        [2.000244140625, 2.0, 2.0]
        """
        f = _compute_format(compute)
        if self.name == "cupy":
            key = (int(self.xp.cuda.Device().id), f.name)
            if key not in _GEMM_SUPPORTED:  # asked once per device and format
                check_gemm_support(f, self.compute_capability(), self.device_name())
                _GEMM_SUPPORTED.add(key)
            return _cupy_matmul(self.xp, a, b, f)
        if f == FP64:
            out64: np.ndarray = np.matmul(np.asarray(a, np.float64), np.asarray(b, np.float64))
            return out64
        a32, b32 = _round_inputs(np.asarray(a), f), _round_inputs(np.asarray(b), f)
        out: np.ndarray = np.matmul(a32, b32)
        return out


def _round_inputs(x: Any, f: FloatFormat) -> Any:
    """``x`` rounded to nearest even into ``f`` and held in float32 (exact: f is within fp32)."""
    from floatlab.rounding import round_array

    if f == FP32:
        return x.astype(np.float32, copy=False)
    # a float64 input rounds once, straight to f; the float32 copy of the result is exact
    return round_array(x, f).astype(np.float32, copy=False)


def _cupy_matmul(cp: Any, a: Any, b: Any, f: FloatFormat) -> Any:
    """The cuBLAS GEMM behind :meth:`Backend.matmul` on CuPy."""
    a = cp.asarray(a)
    b = cp.asarray(b)
    if f == FP64:
        return cp.matmul(a.astype(cp.float64, copy=False), b.astype(cp.float64, copy=False))
    if a.ndim < 2 or b.ndim < 2:
        raise ValueError(f"matmul of shapes {a.shape} and {b.shape}: expected arrays of 2 or more dimensions")
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"matmul of shapes {a.shape} and {b.shape}: inner dimensions differ")
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    if b.ndim == 2:
        # a stack of row blocks times one matrix is one GEMM on the stacked rows
        batch: tuple[int, ...] = a.shape[:-2]
        a2 = a.reshape(-1, k)
        out = _gemm_ex(cp, a2[None], b[None], f).reshape(*batch, m, n)
        return out
    batch = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    a3 = cp.broadcast_to(a, (*batch, m, k)).reshape(-1, m, k)
    b3 = cp.broadcast_to(b, (*batch, k, n)).reshape(-1, k, n)
    return _gemm_ex(cp, a3, b3, f).reshape(*batch, m, n)


#: the first compute capability whose tensor cores take each GEMM input format
TENSOR_CORE_SINCE: dict[str, tuple[int, int]] = {"fp16": (7, 0), "bf16": (8, 0), "tf32": (8, 0)}
_GEMM_SUPPORTED: set[tuple[int, str]] = set()  # (device, format) pairs already checked


def check_gemm_support(
    f: FloatFormat | str, capability: tuple[int, int] | None, device: str = "this GPU"
) -> None:
    """Raise a one-line ValueError when a GPU of compute capability ``capability`` has no
    tensor-core GEMM for ``f`` (cuBLAS would fail with CUBLAS_STATUS_NOT_SUPPORTED, or, for
    tf32, silently compute in fp32). None (no GPU) and fp32/fp64 always pass.

    >>> check_gemm_support("bf16", (9, 0)); check_gemm_support("fp16", (7, 0))
    >>> check_gemm_support("bf16", (7, 5), "Tesla T4")
    Traceback (most recent call last):
    ...
    ValueError: bf16 GEMMs need compute capability 8.0 or later (Ampere); Tesla T4 has 7.5
    """
    name = get_format(f).name
    since = TENSOR_CORE_SINCE.get(name)
    if capability is None or since is None or capability >= since:
        return
    arch = {(7, 0): "Volta", (8, 0): "Ampere"}[since]
    raise ValueError(
        f"{name} GEMMs need compute capability {since[0]}.{since[1]} or later ({arch}); "
        f"{device} has {capability[0]}.{capability[1]}"
    )


def _to_gemm_input(cp: Any, x: Any, f: FloatFormat) -> tuple[Any, int]:
    """``x`` as a C-contiguous buffer of the GEMM input type and its cudaDataType."""
    if f in (FP32, TF32):
        # TF32 rounding of the inputs is the tensor core's own business (compute type FAST_TF32)
        return cp.ascontiguousarray(x, dtype=cp.float32), _CUDA_R_32F
    if f == FP16:
        return cp.ascontiguousarray(x.astype(cp.float16)), _CUDA_R_16F  # astype rounds to nearest even
    # bf16: round to nearest even (the GPU rounding kernel), then keep the top half of each float32
    from floatlab.rounding import round_array

    r = round_array(cp.ascontiguousarray(x, dtype=cp.float32), BF16)
    return cp.ascontiguousarray((r.view(cp.uint32) >> 16).astype(cp.uint16)), _CUDA_R_16BF


def _gemm_ex(cp: Any, a: Any, b: Any, f: FloatFormat) -> Any:
    """Batched row-major ``a (B, M, K) @ b (B or 1, K, N)`` -> float32 (B, M, N) on cuBLAS."""
    nb, m, k = a.shape
    n = b.shape[-1]
    out = cp.empty((nb, m, n), cp.float32)
    if out.size == 0:
        return out
    if k == 0:
        out.fill(0)
        return out
    a_in, a_type = _to_gemm_input(cp, a, f)
    b_in, b_type = _to_gemm_input(cp, b, f)
    _gemm_prepared(cp, a_in, a_type, b_in, b_type, out, f)
    return out


def _gemm_prepared(cp: Any, a_in: Any, a_type: int, b_in: Any, b_type: int, out: Any, f: FloatFormat) -> None:
    """``out[:] = a_in @ b_in`` on cuBLAS for inputs already in their GEMM type (the benchmark's
    entry: nothing but the GEMM itself). Shapes (B, M, K), (B or 1, K, N) and (B, M, N)."""
    from cupy.cuda import cublas

    nb, m, k = a_in.shape
    n = b_in.shape[-1]
    compute = _CUBLAS_COMPUTE_32F_FAST_TF32 if f == TF32 else _CUBLAS_COMPUTE_32F
    one = np.array(1.0, np.float32)
    zero = np.array(0.0, np.float32)
    handle = cp.cuda.device.get_cublas_handle()
    # row-major C = A B is column-major C^T = B^T A^T: the same buffers, operands swapped
    stride_b = 0 if b_in.shape[0] == 1 and nb > 1 else k * n
    cublas.gemmStridedBatchedEx(
        handle,
        _CUBLAS_OP_N,
        _CUBLAS_OP_N,
        n,
        m,
        k,
        one.ctypes.data,
        b_in.data.ptr,
        b_type,
        n,
        stride_b,
        a_in.data.ptr,
        a_type,
        k,
        m * k,
        zero.ctypes.data,
        out.data.ptr,
        _CUDA_R_32F,
        n,
        m * n,
        nb,
        compute,
        _CUBLAS_GEMM_DEFAULT,
    )


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
