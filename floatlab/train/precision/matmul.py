"""GEMMs in a compute format: the simulated tensor-core GEMM on NumPy and cuBLAS's on CuPy.

:func:`matmul` takes a *compute format*: the inputs are rounded to nearest even into it and the
products are accumulated in fp32, the result returned in float32:

* ``"fp32"``: plain fp32 (on a GPU with TF32 off: SIMT cores, IEEE products);
* ``"tf32"``: inputs rounded to TensorFloat-32 (on Ampere and later, TF32 tensor cores);
* ``"fp16"`` and ``"bf16"``: half-precision inputs on tensor cores (compute capability 7.0 and
  later for fp16, 8.0 for bf16), as cuBLAS's ``cublasGemmEx`` with fp32 compute type.

On NumPy the same contract is kept with OpenBLAS: the inputs are rounded into the compute
format and multiplied as float32 (a product of two fp16, bf16 or tf32 values has at most 22
significant bits, so it is exact in fp32: only the order of the fp32 additions differs).
:func:`gemm` adds the epilogue (scale, bias, one rounding of the output) of the simulated
tensor-core GEMM the trainer's policies use.

>>> import numpy as np
>>> a = np.full((2, 3), 1 / 3, np.float32)
>>> matmul(a, np.ones((3, 1), np.float32), "fp16").ravel().tolist()   # 3 * fp16(1/3)
[0.999755859375, 0.999755859375]
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from floatlab.backend import Backend, gemm_stacks, get_backend
from floatlab.formats import BF16, FP16, FP32, FP64, TF32, FloatFormat, get_format
from floatlab.rounding import round_array
from floatlab.train.hostmath import host_matmul
from floatlab.train.precision.accumulate import accumulate_matmul, accumulator_format, check_promote_every

__all__ = [
    "GEMM_FORMATS",
    "TENSOR_CORE_SINCE",
    "check_gemm_support",
    "cublas_gemm_args",
    "cupy_matmul",
    "gemm",
    "gemm_format",
    "gemm_prepared",
    "matmul",
    "to_gemm_input",
]

#: the compute formats of :func:`matmul`, narrowest first after fp32's own
GEMM_FORMATS: tuple[str, ...] = ("fp32", "tf32", "fp16", "bf16", "fp64")

# cuBLAS constants (cudaDataType_t, cublasComputeType_t, cublasOperation_t, cublasGemmAlgo_t)
_CUDA_R_32F, _CUDA_R_16F, _CUDA_R_16BF = 0, 2, 14
_CUBLAS_COMPUTE_32F, _CUBLAS_COMPUTE_32F_FAST_TF32 = 68, 77
_CUBLAS_OP_N, _CUBLAS_GEMM_DEFAULT = 0, -1

Array = NDArray[Any]


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


def matmul(a: Any, b: Any, compute: FloatFormat | str = "fp32", backend: Backend | str | None = None) -> Any:
    """``a @ b`` on ``backend`` (NumPy broadcasting rules) with inputs rounded to nearest even into
    ``compute`` and fp32 accumulation; float32 result (float64 for ``"fp64"``).

    On CuPy, fp32/tf32/fp16/bf16 GEMMs are ``cublasGemmEx`` (strided-batched for stacks of
    matrices) with fp32 output and compute type ``CUBLAS_COMPUTE_32F`` (TF32 off) or
    ``CUBLAS_COMPUTE_32F_FAST_TF32``; fp16 and bf16 inputs run on tensor cores.

    >>> x = np.array([[1 + 2**-12, 1.0]], np.float32)
    >>> [matmul(x, np.ones((2, 1), np.float32), c).item() for c in ("fp32", "tf32", "bf16")]
    [2.000244140625, 2.0, 2.0]
    """
    f = _compute_format(compute)
    be = get_backend(backend)
    if be.is_gpu:
        key = (int(be.xp.cuda.Device().id), f.name)
        if key not in _GEMM_SUPPORTED:  # asked once per device and format
            check_gemm_support(f, be.compute_capability(), be.device_name())
            _GEMM_SUPPORTED.add(key)
        return cupy_matmul(be.xp, a, b, f)
    if f == FP64:
        out64: np.ndarray = np.matmul(np.asarray(a, np.float64), np.asarray(b, np.float64))
        return out64
    a32, b32 = _round_inputs(np.asarray(a), f), _round_inputs(np.asarray(b), f)
    out: np.ndarray = host_matmul(a32, b32)
    return out


def _round_inputs(x: Any, f: FloatFormat) -> Any:
    """``x`` rounded to nearest even into ``f`` and held in float32 (exact: f is within fp32)."""
    if f == FP32:
        return x.astype(np.float32, copy=False)
    # a float64 input rounds once, straight to f; the float32 copy of the result is exact
    return round_array(x, f).astype(np.float32, copy=False)


def cupy_matmul(cp: Any, a: Any, b: Any, f: FloatFormat, gemm: Any = None) -> Any:
    """The cuBLAS GEMM behind :func:`matmul` on CuPy: ``a @ b`` (NumPy broadcasting, 2 or more
    dimensions) as one strided-batched GEMM. ``gemm`` runs it (default :func:`gemm_prepared`);
    with ``cp`` numpy and a stand-in for cuBLAS taking the same arguments, the batching, the
    reshapes and the input conversions run on the host (the tests do).

    >>> def host_gemm(cp, a_in, a_type, b_in, b_type, out, f):   # a stand-in for cuBLAS
    ...     out[:] = np.matmul(a_in.astype(np.float32), b_in.astype(np.float32))
    >>> cupy_matmul(np, np.full((2, 1, 3), 1 / 3), np.ones((3, 1)), FP16, host_gemm).ravel().tolist()
    [0.999755859375, 0.999755859375]
    """
    gemm = gemm_prepared if gemm is None else gemm
    a = cp.asarray(a)
    b = cp.asarray(b)
    if f == FP64:
        return cp.matmul(a.astype(cp.float64, copy=False), b.astype(cp.float64, copy=False))
    if a.ndim < 2 or b.ndim < 2:
        raise ValueError(f"matmul of shapes {a.shape} and {b.shape}: expected arrays of 2 or more dimensions")
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"matmul of shapes {a.shape} and {b.shape}: inner dimensions differ")
    lead, a3, b3 = gemm_stacks(a, b)
    return _gemm_ex(cp, a3, b3, f, gemm).reshape(*lead, a.shape[-2], b.shape[-1])


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


def to_gemm_input(cp: Any, x: Any, f: FloatFormat) -> tuple[Any, int]:
    """``x`` as a C-contiguous buffer of the GEMM input type and its cudaDataType. ``cp`` is the
    array module (cupy; numpy shows the same buffers on the host).

    >>> buf, dtype = to_gemm_input(np, np.array([[1 + 2**-8, 3.0]], np.float32), BF16)
    >>> buf.tolist(), buf.dtype, dtype      # bfloat16 bits (the tie goes to even), CUDA_R_16BF
    ([[16256, 16448]], dtype('uint16'), 14)
    """
    if f in (FP32, TF32):
        # TF32 rounding of the inputs is the tensor core's own business (compute type FAST_TF32)
        return cp.ascontiguousarray(x, dtype=cp.float32), _CUDA_R_32F
    if f == FP16:
        return cp.ascontiguousarray(x.astype(cp.float16)), _CUDA_R_16F  # astype rounds to nearest even
    # bf16: round to nearest even (the GPU rounding kernel), then keep the top half of each float32
    r = round_array(cp.ascontiguousarray(x, dtype=cp.float32), BF16)
    return cp.ascontiguousarray((r.view(cp.uint32) >> 16).astype(cp.uint16)), _CUDA_R_16BF


def _gemm_ex(cp: Any, a: Any, b: Any, f: FloatFormat, gemm: Any) -> Any:
    """Batched row-major ``a (B, M, K) @ b (B or 1, K, N)`` -> float32 (B, M, N) by ``gemm``."""
    nb, m, k = a.shape
    n = b.shape[-1]
    out = cp.empty((nb, m, n), cp.float32)
    if out.size == 0:
        return out
    if k == 0:
        out.fill(0)
        return out
    a_in, a_type = to_gemm_input(cp, a, f)
    b_in, b_type = to_gemm_input(cp, b, f)
    gemm(cp, a_in, a_type, b_in, b_type, out, f)
    return out


def cublas_gemm_args(
    a_in: Any, a_type: int, b_in: Any, b_type: int, out: Any, f: FloatFormat
) -> tuple[Any, ...]:
    """The arguments of ``cublasGemmStridedBatchedEx`` after the handle for ``out[:] = a_in @ b_in``
    (row-major, shapes (B, M, K), (B or 1, K, N) and (B, M, N)), with the arrays and alpha and beta
    (float32 scalars) in place of their pointers: transa, transb, m, n, k, alpha, A, Atype, lda,
    strideA, B, Btype, ldb, strideB, beta, C, Ctype, ldc, strideC, batchCount, computeType, algo.

    cuBLAS is column-major: row-major ``C = A B`` is column-major ``C^T = B^T A^T``, the same
    buffers with the operands swapped; a single right-hand matrix is shared by stride 0.

    >>> a, b = np.ones((3, 2, 4), np.float32), np.ones((1, 4, 5), np.float32)
    >>> args = cublas_gemm_args(a, 0, b, 0, np.empty((3, 2, 5), np.float32), FP32)
    >>> args[2:5], args[8:10], args[12:14], args[17:]   # n, m, k; ldb, strideB; lda, strideA; ...
    ((5, 2, 4), (5, 0), (4, 8), (5, 10, 3, 68, -1))
    """
    nb, m, k = a_in.shape
    n = b_in.shape[-1]
    compute = _CUBLAS_COMPUTE_32F_FAST_TF32 if f == TF32 else _CUBLAS_COMPUTE_32F
    stride_b = 0 if b_in.shape[0] == 1 and nb > 1 else k * n
    one, zero = np.float32(1.0), np.float32(0.0)
    return (
        _CUBLAS_OP_N, _CUBLAS_OP_N, n, m, k, one, b_in, b_type, n, stride_b, a_in, a_type, k, m * k,
        zero, out, _CUDA_R_32F, n, m * n, nb, compute, _CUBLAS_GEMM_DEFAULT,
    )  # fmt: skip


def gemm_prepared(cp: Any, a_in: Any, a_type: int, b_in: Any, b_type: int, out: Any, f: FloatFormat) -> None:
    """``out[:] = a_in @ b_in`` on cuBLAS for inputs already in their GEMM type (the benchmark's
    entry: nothing but the GEMM itself). Shapes (B, M, K), (B or 1, K, N) and (B, M, N); the
    arguments are :func:`cublas_gemm_args`.

    With a GPU (skipped here):

    >>> import cupy as cp                                    # doctest: +SKIP
    >>> a, t = to_gemm_input(cp, cp.ones((1, 2, 3)), FP16)   # doctest: +SKIP
    >>> out = cp.empty((1, 2, 2), cp.float32)                # doctest: +SKIP
    >>> gemm_prepared(cp, a, t, *to_gemm_input(cp, cp.ones((1, 3, 2)), FP16), out, FP16)  # doctest: +SKIP
    >>> out.tolist()                                         # doctest: +SKIP
    [[[3.0, 3.0], [3.0, 3.0]]]
    """
    from cupy.cuda import cublas

    args = list(cublas_gemm_args(a_in, a_type, b_in, b_type, out, f))
    # alpha and beta by host pointer (the handle's default pointer mode), the arrays by device pointer
    alpha, beta = np.array(args[5], np.float32), np.array(args[14], np.float32)
    args[5], args[14] = alpha.ctypes.data, beta.ctypes.data
    for i in (6, 10, 15):  # B, A, C
        args[i] = args[i].data.ptr
    cublas.gemmStridedBatchedEx(cp.cuda.device.get_cublas_handle(), *args)


def gemm(
    a: Array,
    b: Array,
    compute: FloatFormat | str = "fp16",
    out: FloatFormat | str | None = None,
    *,
    bias: Array | None = None,
    alpha: float | None = None,
    rounding: str = "rne",
    rng: np.random.Generator | None = None,
    accumulate: FloatFormat | str | None = None,
    promote_every: int | None = None,
) -> NDArray[np.float32]:
    """Simulated tensor-core GEMM ``round_out(alpha * round_in(a) @ round_in(b) + bias)``.

    The inputs are rounded to ``compute``; the products and their accumulation run in fp32
    through a float32 BLAS call (a product of two fp16 or bf16 values has at most 22
    significant bits, so it is exact in fp32, as in the hardware); ``bias`` is added in fp32
    (the epilogue) and the result rounded once to ``out`` (default: ``compute``).

    ``accumulate`` (a format within fp32 or a name: ``"acc14"``, ``"bf16"``, ...) narrows the
    accumulator as an fp8 tensor core does: the exact products are added in order, k = 0, 1, ...,
    each partial sum rounded to nearest even into that format, and with ``promote_every=N`` each
    chunk of N products is added into an fp32 total (DeepSeek-V3, arXiv 2412.19437, section
    3.3.2); see :func:`floatlab.train.precision.accumulate.accumulate_matmul`, which runs it (other rounding
    modes of the accumulator are there). A 14-bit accumulator stalls where the product is half an
    ulp of the sum (2^14 x 2^-6 = 256), and promotion every 128 products avoids it:

    >>> a = np.full((1, 4096), 1.0, dtype=np.float32)
    >>> b = np.full((4096, 1), 1e-4, dtype=np.float32)
    >>> float(gemm(a, b, "fp16")[0, 0])     # fp32 accumulation: 4096 * fp16(1e-4), rounded once
    0.40966796875
    >>> x = np.full((1, 32768), 0.125, np.float32)   # 32768 products 2^-6: 512
    >>> [float(gemm(x, x.T, "fp16", accumulate=acc, promote_every=n)[0, 0])
    ...  for acc, n in ((None, None), ("acc14", None), ("acc14", 128))]
    [512.0, 256.0, 512.0]
    """
    cf = get_format(compute)
    of = cf if out is None else get_format(out)
    if not FP32.contains(cf) or not FP32.contains(of):
        raise ValueError(f"gemm formats {cf.name}, {of.name}: expected formats that fit in fp32")
    acc_f = None if accumulate is None else accumulator_format(accumulate)
    every = check_promote_every(promote_every)
    if acc_f is None and every is not None:
        raise ValueError(
            f"promote_every={promote_every!r} needs an accumulator format (accumulate='acc14', say); "
            "without one the GEMM accumulates in fp32"
        )
    sr = rng if rounding == "stochastic" else None
    # round in the input's own dtype first: a float64 input then rounds once, straight to `cf`,
    # and the float32 copy of the rounded value is exact
    a32 = round_array(np.asarray(a), cf, rounding, rng=sr).astype(np.float32, copy=False)
    b32 = round_array(np.asarray(b), cf, rounding, rng=sr).astype(np.float32, copy=False)
    if acc_f is None:
        acc = host_matmul(a32, b32)
    else:
        acc = accumulate_matmul(a32, b32, accumulate=acc_f, promote_every=every)
    if alpha is not None:
        acc *= np.float32(alpha)
    if bias is not None:
        acc += round_array(np.asarray(bias), FP32).astype(np.float32, copy=False)
    result: NDArray[np.float32] = round_array(acc, of, rounding, rng=sr)
    return result
