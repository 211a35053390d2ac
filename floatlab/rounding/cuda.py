"""The CUDA executor: the CPU kernels' own element functions, compiled for CUDA.

:func:`floatlab.rounding.encode_array` and :func:`~floatlab.rounding.round_array` hand CuPy
arrays here, with the same :class:`~floatlab.rounding.plan.Plan` the CPU executor runs. The
element functions of :mod:`floatlab.rounding._kernels` (``_encode_one``,
``_decode_one``, ``_core``, ``_random32`` and their lane-width intrinsics) are the
specification of every bit; this module does not restate them. It compiles the same Python
functions (each one's ``py_func``), looked up in a globals table of their own, to CUDA device
functions, and launches one thread
per element: numba-cuda compiles each kernel to PTX for the launch's argument types, once per
process, and CuPy loads it and launches it on its current stream (:func:`flat_args` lays the
arguments out as numba's calling convention has them; numba-cuda's own launcher cost about
0.25 ms of host time a launch). Because the stochastic random word depends only on the key and
the element's index, the GPU draws the same bits as the CPU's threads.

The per-element bodies below (``_encode_at`` ...) are compiled twice: for CUDA, each wrapped in
a kernel, and for the CPU, each wrapped in a serial loop. The CPU build runs the whole GPU code
path (host-side dispatch included, with numpy standing in for cupy) on machines without a GPU,
so the tests check it bit for bit against the CPU kernels everywhere; on a GPU the CUDA build
is checked the same way.

Under numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1`` before numba.cuda is imported) the
CUDA build runs on the CPU too: the kernels, the launch geometry and the bounds check, one
Python thread per CUDA thread, with NumPy arrays (``xp=np``). The lane-width intrinsics,
which only a compiler can lower, are then the plain Python functions :func:`sim_intrinsics`
gives. The suite runs it that way (tests/rounding/test_cuda.py).

>>> import numpy as np, floatlab as fl
>>> x = np.array([0.1, 1e-8, 70000.0, -2.5], np.float32)
>>> codes, _ = run_array(x, fl.FP16, RoundingOptions(), xp=np, target="cpu")
>>> codes.tolist() == fl.encode_array(x, "fp16").tolist()
True
"""

from __future__ import annotations

import os
import re
import tempfile
import threading
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from floatlab.backend import is_cupy
from floatlab.formats import FP16, FP32, FP64, FloatFormat
from floatlab.rounding import _kernels as k
from floatlab.rounding._intrinsics import _half, _shl, _shr, _u, _unhalf
from floatlab.rounding._kernels import _bf16, _decode_one, _encode_one, _flags_one, _random32
from floatlab.rounding.bound import compile_bound, rebind
from floatlab.rounding.cpu import zero
from floatlab.rounding.options import FORMAT_OF_DTYPE_NAME, RoundingOptions, RoundingStats
from floatlab.rounding.params import decode_params, encode_params
from floatlab.rounding.plan import UINT_OF_BITS, make_plan, round_target, widen16

__all__ = [
    "THREADS_PER_BLOCK",
    "GpuKernels",
    "compile_ptx",
    "flat_args",
    "kernel_ptx",
    "kernels",
    "launch_args",
    "ptx_entry",
    "run_array",
    "sim_intrinsics",
    "simulated",
]

THREADS_PER_BLOCK = 256

# numba.cuda in the CUDA target's globals table (_bind), where the element functions below stand
# for their compiled selves
cuda: Any = None


# ---- one element (the loop bodies of floatlab.rounding._kernels, written per index) ------------
def _encode_at(i: Any, x: Any, out: Any, z: Any, p: Any) -> None:
    """Deterministic modes: the code of x[i]."""
    out[i] = _encode_one(_u(x[i], z), z, np.uint32(0), p, 0).code


def _round_at(i: Any, x: Any, out: Any, z: Any, p: Any, d: Any) -> None:
    """Deterministic modes: x[i] rounded to the target and back into x's format."""
    r = _encode_one(_u(x[i], z), z, np.uint32(0), p, 0)
    out[i] = _decode_one(r.code, r.sign, z, d, True)


def _general_at(i: Any, x: Any, out: Any, z: Any, p: Any, d: Any, to_input: Any) -> None:
    """Any mode without flags; the random word of element i (used by stochastic only)."""
    key0 = _u(p.key0, np.uint32(0))
    key1 = _u(p.key1, np.uint32(0))
    r = _encode_one(_u(x[i], z), z, _random32(i, key0, key1), p, 0)
    if to_input:
        out[i] = _decode_one(r.code, r.sign, z, d, True)
    else:
        out[i] = r.code


def _full_at(i: Any, x: Any, out: Any, fl: Any, z: Any, p: Any, d: Any, to_input: Any) -> None:
    """Any mode with the IEEE flags of element i in fl[i]: 1 inexact, 2 underflow, 4 overflow,
    8 invalid (the per-element terms that the CPU's flag loop adds up)."""
    code, sgn, flags = _flags_one(x[i], i, z, p)
    fl[i] = flags
    if to_input:
        out[i] = _decode_one(code, sgn, z, d, True)
    else:
        out[i] = code


# the plain casts of mixed precision (float32 to fp16 or bfloat16, nearest even, no flags), which
# the CPU runs in loops of their own: one short element function each, not the general one
def _half_code(u: Any) -> Any:
    """The fp16 code of the float32 with bit pattern ``u``: the target's own conversion (IEEE
    nearest even, subnormals kept, overflow to inf), and a NaN as the CPU's conversion gives it
    (sign kept, made quiet, the payload's top bits kept), which a GPU does not promise."""
    if (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000):
        top = _shr(u, np.uint32(13)) & np.uint32(0x3FF)
        return np.uint16((_shr(u, np.uint32(16)) & np.uint32(0x8000)) | np.uint32(0x7E00) | top)
    return _half(u)


def _half_bits(c: Any) -> Any:
    """The float32 bit pattern of the fp16 code ``c`` (exact), a NaN made quiet, payload kept."""
    c32 = np.uint32(c)
    if (c32 & np.uint32(0x7FFF)) > np.uint32(0x7C00):
        payload = _shl(c32 & np.uint32(0x3FF), np.uint32(13))
        return _shl(c32 & np.uint32(0x8000), np.uint32(16)) | np.uint32(0x7FC00000) | payload
    return _unhalf(c)


def _cast_code_at(i: Any, x: Any, out: Any, bf16: Any) -> None:
    """The fp16 or bfloat16 code of x[i] (float32 bits), nearest even."""
    out[i] = _bf16(x[i]) if bf16 else _half_code(x[i])


def _cast_round_at(i: Any, x: Any, out: Any, bf16: Any) -> None:
    """x[i] (float32 bits) rounded to fp16 or bfloat16, nearest even, and back (float32 bits)."""
    if bf16:
        out[i] = _shl(np.uint32(_bf16(x[i])), np.uint32(16))
    else:
        out[i] = _half_bits(_half_code(x[i]))


# ---- the launchers: a CUDA kernel or a CPU loop around each element ----------------------------
def _cast_code_cuda_py(x: Any, out: Any, bf16: Any) -> None:
    i = np.int64(cuda.grid(1))
    if i < x.size:
        _cast_code_at(i, x, out, bf16)


def _cast_round_cuda_py(x: Any, out: Any, bf16: Any) -> None:
    i = np.int64(cuda.grid(1))
    if i < x.size:
        _cast_round_at(i, x, out, bf16)


def _cast_code_cpu_py(x: Any, out: Any, bf16: Any) -> None:
    for i in range(x.size):
        _cast_code_at(i, x, out, bf16)


def _cast_round_cpu_py(x: Any, out: Any, bf16: Any) -> None:
    for i in range(x.size):
        _cast_round_at(i, x, out, bf16)


def _encode_cuda_py(x: Any, out: Any, z: Any, p: Any) -> None:
    i = np.int64(cuda.grid(1))
    if i < x.size:
        _encode_at(i, x, out, z, p)


def _round_cuda_py(x: Any, out: Any, z: Any, p: Any, d: Any) -> None:
    i = np.int64(cuda.grid(1))
    if i < x.size:
        _round_at(i, x, out, z, p, d)


def _general_cuda_py(x: Any, out: Any, z: Any, p: Any, d: Any, to_input: Any) -> None:
    i = np.int64(cuda.grid(1))
    if i < x.size:
        _general_at(i, x, out, z, p, d, to_input)


def _full_cuda_py(x: Any, out: Any, fl: Any, z: Any, p: Any, d: Any, to_input: Any) -> None:
    i = np.int64(cuda.grid(1))
    if i < x.size:
        _full_at(i, x, out, fl, z, p, d, to_input)


def _encode_cpu_py(x: Any, out: Any, z: Any, p: Any) -> None:
    for i in range(x.size):
        _encode_at(i, x, out, z, p)


def _round_cpu_py(x: Any, out: Any, z: Any, p: Any, d: Any) -> None:
    for i in range(x.size):
        _round_at(i, x, out, z, p, d)


def _general_cpu_py(x: Any, out: Any, z: Any, p: Any, d: Any, to_input: Any) -> None:
    for i in range(x.size):
        _general_at(i, x, out, z, p, d, to_input)


def _full_cpu_py(x: Any, out: Any, fl: Any, z: Any, p: Any, d: Any, to_input: Any) -> None:
    for i in range(x.size):
        _full_at(i, x, out, fl, z, p, d, to_input)


# ---- the lane-width intrinsics in plain Python, for the CUDA simulator -----------------------
_UNSIGNED: dict[int, Any] = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}
_SIGNED: dict[int, Any] = {8: np.int8, 16: np.int16, 32: np.int32, 64: np.int64}


def _bits_of(z: Any) -> int:
    return int(np.asarray(z).dtype.itemsize) * 8


def _u_sim(v: Any, z: Any) -> Any:
    """``v`` as the unsigned integer as wide as ``z`` (truncated, or extended by v's signedness)."""
    return np.asarray(v).astype(_UNSIGNED[_bits_of(z)])[()]


def _s_sim(v: Any, z: Any) -> Any:
    """``v`` as the signed integer as wide as ``z``."""
    return np.asarray(v).astype(_SIGNED[_bits_of(z)])[()]


def _shl_sim(a: Any, n: Any) -> Any:
    """a << n in a's width (0 <= n < width)."""
    arr = np.asarray(a)
    return (arr << np.asarray(n).astype(arr.dtype))[()]


def _shr_sim(a: Any, n: Any) -> Any:
    """Logical a >> n in a's width (0 <= n < width), for signed ``a`` too."""
    arr = np.asarray(a)
    u = arr.view(_UNSIGNED[_bits_of(arr)])
    return (u >> np.asarray(n).astype(u.dtype)).view(arr.dtype)[()]


def _clz_sim(a: Any) -> Any:
    """Count of leading zero bits of ``a`` in its width (the width for 0), in a's type."""
    arr = np.asarray(a)
    w = _bits_of(arr)
    return arr.dtype.type(w - int(arr.view(_UNSIGNED[w])).bit_length())


def _half_sim(u: Any) -> Any:
    """fp16 code of the float32 bits ``u`` (not a NaN): NumPy's conversion, nearest even."""
    return np.asarray(u, np.uint32).view(np.float32).astype(np.float16).view(np.uint16)[()]


def _unhalf_sim(c: Any) -> Any:
    """float32 bits of the fp16 code ``c`` (not a NaN)."""
    return np.asarray(c, np.uint16).view(np.float16).astype(np.float32).view(np.uint32)[()]


def sim_intrinsics() -> dict[str, Callable[..., Any]]:
    """The lane-width intrinsics of :mod:`floatlab.rounding._kernels` (``_u``, ``_s``, ``_shl``,
    ``_shr``, ``_clz``) and the fp16 conversions (``_half``, ``_unhalf``) as Python functions
    on NumPy integer scalars: what the element functions call under the CUDA simulator, where
    no compiler lowers them.

    >>> f = sim_intrinsics()
    >>> f["_u"](-1, np.uint32(0)), f["_shr"](np.int32(-8), 28), f["_clz"](np.uint64(1))
    (np.uint32(4294967295), np.int32(15), np.uint64(63))
    >>> int(f["_half"](np.float32(1 / 3).view(np.uint32)))   # 0x3555
    13653
    """
    return {
        "_u": _u_sim,
        "_s": _s_sim,
        "_shl": _shl_sim,
        "_shr": _shr_sim,
        "_clz": _clz_sim,
        "_half": _half_sim,
        "_unhalf": _unhalf_sim,
    }


def simulated() -> bool:
    """True when numba's CUDA target is its simulator (``NUMBA_ENABLE_CUDASIM=1`` was set
    before numba.cuda was first imported); False where numba-cuda is missing. Imports numba.cuda.

    >>> isinstance(simulated(), bool)
    True
    """
    try:
        numba_cuda = _numba_cuda()
    except ImportError:  # numba without its CUDA target (the gpu or dev extra)
        return False
    return bool(getattr(getattr(numba_cuda, "config", None), "ENABLE_CUDASIM", False))


class GpuKernels(NamedTuple):
    """The launchers of one target (:func:`kernels`), each a field: the deterministic modes' codes
    (``encode``) and values (``round``), any mode without flags (``general``) and with them
    (``full``), and the plain fp16 and bfloat16 casts (``cast_code``, ``cast_round``).

    >>> GpuKernels._fields[:4]
    ('encode', 'round', 'general', 'full')
    """

    encode: Any
    round: Any
    general: Any
    full: Any
    cast_code: Any
    cast_round: Any


_NAMES = GpuKernels._fields
#: this module's element functions, compiled for each target beside floatlab.rounding._kernels' own
_ELEMENTS = ("_half_code", "_half_bits", *(f"_{name}_at" for name in _NAMES))
_lock = threading.Lock()
_built: dict[str, GpuKernels] = {}


def _numba() -> Any:
    import numba

    return numba


def _numba_cuda() -> Any:
    from numba import cuda as numba_cuda

    return numba_cuda


def _bind(target: str) -> dict[str, Any]:
    """A globals table where the element functions are compiled for ``target`` ("cuda", "cpu")."""
    numba = _numba()
    table = dict(vars(k))
    table.update({fn.__name__: fn.py_func for fn in k.ELEMENT_FUNCTIONS})
    table.update({name: globals()[name] for name in _ELEMENTS})
    table["np"] = np
    table["k"] = k
    if target == "cuda" and simulated():
        table.update(sim_intrinsics())  # the simulator runs the element functions as Python
    if target == "cuda":
        numba_cuda = _numba_cuda()
        table["cuda"] = numba_cuda
        device = numba_cuda.jit(device=True, inline=True)
    else:
        device = numba.njit(nogil=True, error_model="numpy", forceinline=True)
    return compile_bound(table, [*(fn.__name__ for fn in k.ELEMENT_FUNCTIONS), *_ELEMENTS], device)


def kernels(target: str = "cuda") -> GpuKernels:
    """The launchers (encode, round, general, full; cast_code and cast_round, the plain fp16
    and bfloat16 casts) for ``target``, built once per process.

    ``"cuda"`` gives numba-cuda kernels (compiled on first launch, per argument types);
    ``"cpu"`` gives serial numba loops around the same element functions.

    >>> kernels("cpu")._fields
    ('encode', 'round', 'general', 'full', 'cast_code', 'cast_round')
    """
    if target not in ("cuda", "cpu"):
        raise ValueError(f"kernel target {target!r}: expected cuda or cpu")
    with _lock:
        if target in _built:
            return _built[target]
        table = _bind(target)
        wrap = _numba_cuda().jit if target == "cuda" else _numba().njit(nogil=True, error_model="numpy")
        _built[target] = GpuKernels(
            *(wrap(rebind(globals()[f"_{name}_{target}_py"], table)) for name in _NAMES)
        )
        return _built[target]


def compile_ptx(
    cc: tuple[int, int] = (7, 0), names: tuple[str, ...] = _NAMES, *, lanes: int = 32
) -> dict[str, str]:
    """PTX of the CUDA kernels ``names`` for compute capability ``cc``, every mode: what a GPU
    would run. ``lanes=32`` compiles them for float32 input and fp16 codes (32-bit lanes),
    ``lanes=64`` for float64 input (64-bit lanes). Needs numba-cuda and its NVVM (the dev and
    gpu extras install them), not a GPU; about a second a kernel.

    >>> ptx = compile_ptx((9, 0), ("encode",))
    >>> ".target sm_90" in ptx["encode"] and "call.uni" not in ptx["encode"]
    True
    """
    unknown = sorted(set(names) - set(_NAMES))
    if unknown or lanes not in (32, 64):
        raise ValueError(
            f"compile_ptx({names!r}, lanes={lanes}): expected kernels among {_NAMES}, lanes 32 or 64"
        )
    if simulated():
        raise RuntimeError("compile_ptx needs numba's CUDA compiler: NUMBA_ENABLE_CUDASIM is set")
    return {name: kernel_ptx(name, launch_args(name, lanes), cc)[0] for name in names}


def launch_args(name: str, lanes: int = 32, n: int = 1) -> tuple[Any, ...]:
    """Arguments of a launch of kernel ``name`` on ``n`` values (NumPy arrays, an fp16 plan with
    ``lanes``-bit lanes), as :func:`run_array` passes them: for compiling, and for laying out.

    >>> [type(a).__name__ for a in launch_args("round")]
    ['ndarray', 'ndarray', 'uint32', 'EncodeParams', 'DecodeParams']
    """
    src = FP32 if lanes == 32 else FP64
    p = encode_params(src, FP16, RoundingOptions(), lanes=lanes)
    d = decode_params(FP16, src, lanes)
    w = np.zeros(n, UINT_OF_BITS[lanes])
    z = zero(lanes)
    w32 = np.zeros(n, np.uint32)  # (the casts take float32 bits whatever the lanes)
    return {
        "encode": (w, np.zeros(n, np.uint16), z, p),
        "round": (w, w, z, p, d),
        "general": (w, w, z, p, d, True),
        "full": (w, w, np.zeros(n, np.uint8), z, p, d, True),
        "cast_code": (w32, np.zeros(n, np.uint16), False),
        "cast_round": (w32, w32, False),
    }[name]


# ---- the launch: numba-cuda compiles, CuPy launches ---------------------------------------------
# numba-cuda's own launcher re-derives the argument types and flattens every field of the plan's
# parameter tuples on each call: about 0.25 ms of host time a launch, measured on an H200, which
# made a training step wait on Python rather than on the GPU. So numba-cuda only compiles here
# (the kernel for the launch's argument types, to PTX, once per process), and CuPy loads the PTX
# and launches it with the arguments already laid out as numba's calling convention has them.
_loaded: dict[tuple[Any, ...], Any] = {}


def _is_array(a: Any) -> bool:
    return isinstance(a, np.ndarray) or is_cupy(a)


def _scalar(v: Any) -> Any:
    """A scalar argument as the kernel receives it: a bool one byte, a Python int an int64 (as
    numba types it), a NumPy scalar itself."""
    if isinstance(v, (bool, np.bool_)):
        return np.bool_(v)
    if isinstance(v, int):
        return np.int64(v)
    return v


_flat_tuples: dict[tuple[type, tuple[Any, ...]], tuple[list[Any], tuple[type, ...]]] = {}


def _flat_tuple(t: tuple[Any, ...]) -> tuple[list[Any], tuple[type, ...]]:
    """A parameter tuple's fields as kernel parameters, and their types (kept per value: a plan's
    tuples recur from launch to launch)."""
    key = (type(t), t)
    got = _flat_tuples.get(key)
    if got is None:
        flat = flat_args(tuple(t))
        got = (flat, tuple(type(v) for v in flat))
        if len(_flat_tuples) >= 1024:
            _flat_tuples.clear()
        _flat_tuples[key] = got
    return got


def _layout(args: tuple[Any, ...]) -> tuple[tuple[Any, ...], list[Any]]:
    """A key of the argument types (which kernel build serves this launch) and the parameters."""
    key: list[Any] = []
    out: list[Any] = []
    for a in args:
        if isinstance(a, tuple):
            flat, types_ = _flat_tuple(a)
            key.append((type(a), types_))
            out += flat
        elif _is_array(a):
            key.append(a.dtype)
            n, size = np.int64(a.size), np.int64(a.dtype.itemsize)
            pointer = a.ctypes.data if isinstance(a, np.ndarray) else a.data.ptr
            out += [np.uint64(0), np.uint64(0), n, size, np.uint64(pointer), n, size]
        else:
            v = _scalar(a)
            key.append(type(v))
            out.append(v)
    return tuple(key), out


def _argtypes(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """numba's types of a launch's arguments, as :func:`flat_args` lays them out: 1-d
    C-contiguous arrays, lane words, parameter tuples (Python ints as int64) and booleans."""
    numba = _numba()
    out = []
    for a in args:
        if _is_array(a):
            out.append(numba.types.Array(numba.from_dtype(np.dtype(a.dtype)), 1, "C"))
        elif isinstance(a, tuple):
            fields = [_scalar(f) for f in a]
            out.append(numba.typeof(type(a)(*fields) if hasattr(a, "_fields") else tuple(fields)))
        else:
            out.append(numba.typeof(_scalar(a)))
    return tuple(out)


def flat_args(args: tuple[Any, ...]) -> list[Any]:
    """A launch's arguments as the kernel's parameters, in numba's calling convention: an array
    (1-d, C-contiguous) is seven words (meminfo and parent, both null; its length and item size;
    its data pointer; its shape and stride), a tuple is its fields in order, a scalar is itself
    (a bool one byte, a Python int an int64). These are what the PTX entry declares, one by one.

    >>> x = np.zeros(5, np.float32)
    >>> [int(v) for v in flat_args((x, np.uint32(7), True))[2:4]], len(flat_args((x, (1.0, 2.0), True)))
    ([5, 4], 10)
    """
    return _layout(args)[1]


def kernel_ptx(name: str, args: tuple[Any, ...], cc: tuple[int, int]) -> tuple[str, str]:
    """The PTX of kernel ``name`` (encode, round, general, full) compiled by numba-cuda for the
    types of ``args`` and compute capability ``cc``, and its entry's name.

    >>> x = np.zeros(3, np.uint32)
    >>> p = encode_params(FP32, FP16, RoundingOptions(), lanes=32)
    >>> ptx, entry = kernel_ptx("encode", (x, np.zeros(3, np.uint16), np.uint32(0), p), (9, 0))
    >>> entry in ptx and ".target sm_90" in ptx
    True
    """
    return _ptx(getattr(kernels("cuda"), name), args, cc)


def _ptx(kernel: Any, args: tuple[Any, ...], cc: tuple[int, int]) -> tuple[str, str]:
    """The PTX of the CUDA launcher ``kernel`` (a field of :func:`kernels`) for the types of
    ``args`` and compute capability ``cc``, and its entry's name."""
    ptx, _ = _numba_cuda().compile_ptx(kernel.py_func, _argtypes(args), cc=cc)
    return ptx, ptx_entry(ptx)[0]


def ptx_entry(ptx: str) -> tuple[str, list[int]]:
    """The name of a PTX module's one kernel entry, and the width in bytes of each parameter.

    >>> ptx_entry(".visible .entry k(\\n .param .u64 k_param_0,\\n .param .u8 k_param_1\\n)")
    ('k', [8, 1])
    """
    m = re.search(r"\.entry\s+([\w$]+)\s*\((.*?)\)", ptx, re.S)
    if m is None:
        raise RuntimeError("numba-cuda's PTX has no kernel entry")
    widths = [int(bits) // 8 for bits in re.findall(r"\.param\s+\.[bsuf](\d+)\s", m.group(2))]
    return m.group(1), widths


def _cupy_kernel(kernel: Any, key: tuple[Any, ...], args: tuple[Any, ...], xp: Any) -> Any:
    """CuPy's handle on the CUDA launcher ``kernel`` compiled for the argument types ``key`` (of
    ``args``) and the current GPU, loaded once per process and device. Its parameters are checked
    against the launch's layout when it is loaded."""
    device = int(xp.cuda.runtime.getDevice())
    name = kernel.py_func.__name__
    fn = _loaded.get((name, key, device))
    if fn is not None:
        return fn
    with _lock:
        cc_text = str(xp.cuda.Device(device).compute_capability)
        ptx, entry = _ptx(kernel, args, (int(cc_text[:-1]), int(cc_text[-1])))
        want = [np.asarray(v).dtype.itemsize for v in flat_args(args)]
        if ptx_entry(ptx)[1] != want:
            raise RuntimeError(
                f"kernel {name}: its PTX declares parameters of {ptx_entry(ptx)[1]} bytes, the launch "
                f"lays out {want}: numba-cuda's calling convention has changed"
            )
        fd, path = tempfile.mkstemp(suffix=".ptx")
        try:
            with os.fdopen(fd, "w", encoding="ascii") as fh:
                fh.write(ptx)
            fn = xp.RawModule(path=path).get_function(entry)  # (loaded now, while the file is there)
        finally:
            os.unlink(path)
        _loaded[(name, key, device)] = fn
        return fn


def _launch(kernel: Any, n: int, args: tuple[Any, ...], xp: Any, target: str) -> None:
    """Run the launcher ``kernel`` (a field of :func:`kernels` for ``target``) over ``n``
    elements: a CPU loop as it is, a CUDA kernel one thread per element."""
    if n == 0:
        return
    if target == "cpu":
        kernel(*args)
        return
    blocks = (n + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK
    if xp is np:
        # NumPy arrays: the CUDA simulator, or numba-cuda copying host arrays to the device
        # and back around the launch (synchronous, on the default stream)
        with warnings.catch_warnings():
            # under the simulator the lane integers are NumPy scalars, whose wrap-around (the
            # modular arithmetic the kernels mean) NumPy reports as an overflow
            warnings.filterwarnings("ignore", "overflow encountered", RuntimeWarning)
            kernel[blocks, THREADS_PER_BLOCK](*args)
        return
    # CuPy arrays: on CuPy's current stream, ordered with CuPy's own work
    key, params = _layout(args)
    _cupy_kernel(kernel, key, args, xp)((blocks,), (THREADS_PER_BLOCK,), tuple(params))


def run_array(
    x: Any,
    fmt: FloatFormat,
    options: RoundingOptions,
    *,
    back: bool = False,
    flags: bool = False,
    xp: Any = None,
    target: str = "cuda",
) -> tuple[Any, RoundingStats]:
    """encode_array (``back=False``) or round_array (``back=True``) of a device array, and the
    flag counts (zeros unless ``flags``).

    Same contract and bits as :func:`floatlab.rounding.encode_array` and
    :func:`floatlab.rounding.round_array`, for float64, float32 and float16 CuPy arrays (CuPy
    has no bfloat16 dtype). ``xp`` and ``target`` choose the array module and the kernels:
    cupy and ``"cuda"`` (the default), or numpy and ``"cpu"`` to run this very code path on the
    host (see the module's docstring); numpy and ``"cuda"`` launches the CUDA kernels on NumPy
    arrays (under the CUDA simulator, or copied to a GPU and back).

    >>> x = np.array([0.1, 1e6])
    >>> codes, stats = run_array(x, FP16, RoundingOptions(), flags=True, xp=np, target="cpu")
    >>> codes.tolist(), stats.overflow
    ([11878, 31744], 1)
    """
    if xp is None:
        from floatlab.backend import require_cupy

        xp = require_cupy()
    a = xp.asarray(x)
    if a.dtype.kind in "biu":
        a = a.astype(xp.float64)  # integers and booleans are taken as float64 values
    src = FORMAT_OF_DTYPE_NAME.get(a.dtype.name) if a.dtype.name != "bfloat16" else None
    if src is None:
        raise ValueError(
            f"x has dtype {a.dtype}: expected float64, float32 or float16 on the GPU "
            "(integers and booleans are converted to float64)"
        )
    shape = a.shape  # (ascontiguousarray gives a 0-d array one dimension)
    a = xp.ascontiguousarray(a)
    tgt, specials = round_target(src, fmt, a.dtype) if back else (fmt, None)
    plan = make_plan(src, tgt, options, back=back, flags=flags, specials=specials)
    bits = a.reshape(-1).view(UINT_OF_BITS[src.bits])
    n = bits.size
    z = zero(plan.lanes)
    out = xp.empty(n, plan.out_dtype)
    counts = (0, 0, 0, 0)
    ks = kernels(target)
    if plan.cast:  # float32 to fp16 or bfloat16, nearest even, no flags: a loop of its own
        _launch(
            ks.cast_round if back else ks.cast_code, n, (bits, out, plan.cast == "fp32->bf16"), xp, target
        )
    elif plan.loop == "encode":
        _launch(ks.encode, n, (bits, out, z, plan.p), xp, target)
    elif plan.loop == "round":
        _launch(ks.round, n, (bits, out, z, plan.p, plan.d), xp, target)
    else:
        if plan.widen:
            bits = widen16(bits, src, options.subnormals, xp)
        if plan.loop == "full":
            fl = xp.empty(n, xp.uint8)
            _launch(ks.full, n, (bits, out, fl, z, plan.p, plan.d, back), xp, target)
            c = [int(xp.count_nonzero(fl & xp.uint8(1 << j))) for j in range(4)]
            counts = (c[0], c[1], c[2], c[3])
        else:
            _launch(ks.general, n, (bits, out, z, plan.p, plan.d, back), xp, target)
        out = out.astype(plan.result_dtype, copy=False)
    result = out.view(a.dtype).reshape(shape) if back else out.reshape(shape)
    return result, RoundingStats(int(a.size), *counts)
