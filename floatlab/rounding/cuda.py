"""The CUDA executor: the CPU kernels' own element functions, compiled for CUDA.

:func:`floatlab.rounding.encode_array` and :func:`~floatlab.rounding.round_array` hand CuPy
arrays here, with the same :class:`~floatlab.rounding.plan.Plan` the CPU executor runs. The
element functions of :mod:`floatlab.rounding._kernels` (``_encode_one``,
``_decode_one``, ``_core``, ``_random32`` and their lane-width intrinsics) are the
specification of every bit; this module does not restate them. It binds the same Python
functions, through a fresh globals table, to CUDA device functions (numba-cuda reads CuPy
arrays through ``__cuda_array_interface__``) and launches one thread per element. Because the
stochastic random word depends only on the key and the element's index, the GPU draws the
same bits as the CPU's threads.

The per-element bodies below (``_encode_at`` ...) are compiled twice: for CUDA, each wrapped in
a kernel, and for the CPU, each wrapped in a serial loop. The CPU build runs the whole GPU code
path (host-side dispatch included, with numpy standing in for cupy) on machines without a GPU,
so the tests check it bit for bit against the CPU kernels everywhere; on a GPU the CUDA build
is checked the same way.

Under numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1`` before numba.cuda is imported) the
CUDA build runs on the CPU too: the kernels, the launch geometry and the bounds check, one
Python thread per CUDA thread, with NumPy arrays (``xp=np``). The lane-width intrinsics,
which only a compiler can lower, are then the plain Python functions :func:`sim_intrinsics`
gives. The suite runs it that way (tests/test_cuda_sim.py).

>>> import numpy as np, floatlab as fl
>>> x = np.array([0.1, 1e-8, 70000.0, -2.5], np.float32)
>>> codes, _ = run_array(x, fl.FP16, RoundingOptions(), xp=np, target="cpu")
>>> codes.tolist() == fl.encode_array(x, "fp16").tolist()
True
"""

from __future__ import annotations

import threading
import types
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from floatlab.formats import FP16, FP32, FP64, FloatFormat
from floatlab.rounding import _kernels as k
from floatlab.rounding.cpu import zero
from floatlab.rounding.options import FORMAT_OF_DTYPE_NAME, RoundingOptions, RoundingStats
from floatlab.rounding.params import decode_params, encode_params
from floatlab.rounding.plan import UINT_OF_BITS, make_plan, round_target, widen16

__all__ = ["THREADS_PER_BLOCK", "compile_ptx", "kernels", "run_array", "sim_intrinsics", "simulated"]

THREADS_PER_BLOCK = 256

# Names bound by _bind() in each target's globals table; placeholders here.
_u: Any = None
_s: Any = None
_shr: Any = None
_shl: Any = None
_core: Any = None
_encode_one: Any = None
_decode_one: Any = None
_random32: Any = None
_flags_one: Any = None
cuda: Any = None
_encode_at: Any = None
_round_at: Any = None
_general_at: Any = None
_full_at: Any = None


# ---- one element (the loop bodies of floatlab.rounding._kernels, written per index) ------------
def _encode_at_py(i: Any, x: Any, out: Any, z: Any, p: Any) -> None:
    """Deterministic modes: the code of x[i]."""
    out[i] = _encode_one(_u(x[i], z), z, np.uint32(0), p, 0).code


def _round_at_py(i: Any, x: Any, out: Any, z: Any, p: Any, d: Any) -> None:
    """Deterministic modes: x[i] rounded to the target and back into x's format."""
    r = _encode_one(_u(x[i], z), z, np.uint32(0), p, 0)
    out[i] = _decode_one(r.code, r.sign, z, d, True)


def _general_at_py(i: Any, x: Any, out: Any, z: Any, p: Any, d: Any, to_input: Any) -> None:
    """Any mode without flags; the random word of element i (used by stochastic only)."""
    key0 = _u(p.key0, np.uint32(0))
    key1 = _u(p.key1, np.uint32(0))
    r = _encode_one(_u(x[i], z), z, _random32(i, key0, key1), p, 0)
    if to_input:
        out[i] = _decode_one(r.code, r.sign, z, d, True)
    else:
        out[i] = r.code


def _full_at_py(i: Any, x: Any, out: Any, fl: Any, z: Any, p: Any, d: Any, to_input: Any) -> None:
    """Any mode with the IEEE flags of element i in fl[i]: 1 inexact, 2 underflow, 4 overflow,
    8 invalid (the per-element terms that the CPU's flag loop adds up)."""
    code, sgn, flags = _flags_one(x[i], i, z, p)
    fl[i] = flags
    if to_input:
        out[i] = _decode_one(code, sgn, z, d, True)
    else:
        out[i] = code


# ---- the launchers: a CUDA kernel or a CPU loop around each element ----------------------------
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


def sim_intrinsics() -> dict[str, Callable[..., Any]]:
    """The lane-width intrinsics of :mod:`floatlab.rounding._kernels` (``_u``, ``_s``, ``_shl``,
    ``_shr``, ``_clz``) as Python functions on NumPy integer scalars: what the element
    functions call under the CUDA simulator, where no compiler lowers them.

    >>> f = sim_intrinsics()
    >>> f["_u"](-1, np.uint32(0)), f["_shr"](np.int32(-8), 28), f["_clz"](np.uint64(1))
    (np.uint32(4294967295), np.int32(15), np.uint64(63))
    """
    return {"_u": _u_sim, "_s": _s_sim, "_shl": _shl_sim, "_shr": _shr_sim, "_clz": _clz_sim}


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


_NAMES = ("encode", "round", "general", "full")
_lock = threading.Lock()
_built: dict[str, dict[str, Any]] = {}


def _rebind(fn: Callable[..., Any], table: dict[str, Any]) -> Callable[..., Any]:
    """``fn`` with its global names looked up in ``table`` (the same code, another binding)."""
    out = types.FunctionType(fn.__code__, table, fn.__name__, fn.__defaults__, fn.__closure__)
    out.__doc__ = fn.__doc__
    return out


def _numba() -> Any:
    import numba

    return numba


def _numba_cuda() -> Any:
    from numba import cuda as numba_cuda

    return numba_cuda


def _bind(target: str) -> dict[str, Any]:
    """A globals table where the element functions are compiled for ``target`` ("cuda", "cpu")."""
    import importlib

    numba = _numba()
    intrinsic = importlib.import_module("numba.extending").intrinsic
    table = dict(vars(k))
    table.update({name: obj for name, obj in globals().items() if name.endswith("_py")})
    table["np"] = np
    table["k"] = k
    for name in k.INTRINSICS:
        table[name] = intrinsic(getattr(k, name + "_typer"))
    if target == "cuda" and simulated():
        table.update(sim_intrinsics())  # the simulator runs the element functions as Python
    if target == "cuda":
        numba_cuda = _numba_cuda()
        table["cuda"] = numba_cuda
        device = numba_cuda.jit(device=True, inline=True)
    else:
        device = numba.njit(nogil=True, error_model="numpy", forceinline=True)
    for name in k.ELEMENT_FUNCTIONS:
        table[name] = device(_rebind(getattr(k, name + "_py"), table))
    for name in _NAMES:
        table[f"_{name}_at"] = device(_rebind(globals()[f"_{name}_at_py"], table))
    return table


def kernels(target: str = "cuda") -> dict[str, Any]:
    """The four launchers (encode, round, general, full) for ``target``, built once per process.

    ``"cuda"`` gives numba-cuda kernels (compiled on first launch, per argument types);
    ``"cpu"`` gives serial numba loops around the same element functions.

    >>> sorted(kernels("cpu"))
    ['encode', 'full', 'general', 'round']
    """
    if target not in ("cuda", "cpu"):
        raise ValueError(f"kernel target {target!r}: expected cuda or cpu")
    with _lock:
        if target in _built:
            return _built[target]
        table = _bind(target)
        wrap = _numba_cuda().jit if target == "cuda" else _numba().njit(nogil=True, error_model="numpy")
        _built[target] = {name: wrap(_rebind(globals()[f"_{name}_{target}_py"], table)) for name in _NAMES}
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
    numba_cuda = _numba_cuda()
    nt = _numba().types
    table = _bind("cuda")
    src = FP32 if lanes == 32 else FP64
    p = encode_params(src, FP16, RoundingOptions(), lanes=lanes)
    d = decode_params(FP16, src, lanes)
    pt, dt = _numba().typeof(p), _numba().typeof(d)
    word = nt.uint32 if lanes == 32 else nt.uint64
    w = word[::1]
    sigs = {
        "encode": (w, nt.uint16[::1], word, pt),
        "round": (w, w, word, pt, dt),
        "general": (w, w, word, pt, dt, nt.boolean),
        "full": (w, w, nt.uint8[::1], word, pt, dt, nt.boolean),
    }
    out: dict[str, str] = {}
    for name in names:
        ptx, _ = numba_cuda.compile_ptx(_rebind(globals()[f"_{name}_cuda_py"], table), sigs[name], cc=cc)
        out[name] = ptx
    return out


# ---- host side: the plan of floatlab.rounding.plan, launched on the device --------------------
def _launch(name: str, n: int, args: tuple[Any, ...], xp: Any, target: str) -> None:
    kern = kernels(target)[name]
    if n == 0:
        return
    if target == "cpu":
        kern(*args)
        return
    blocks = (n + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK
    if xp is np:
        # NumPy arrays: the CUDA simulator, or numba-cuda copying host arrays to the device
        # and back around the launch (synchronous, on the default stream)
        with warnings.catch_warnings():
            # under the simulator the lane integers are NumPy scalars, whose wrap-around (the
            # modular arithmetic the kernels mean) NumPy reports as an overflow
            warnings.filterwarnings("ignore", "overflow encountered", RuntimeWarning)
            kern[blocks, THREADS_PER_BLOCK](*args)
        return
    numba_cuda = _numba_cuda()
    # launch on CuPy's current stream, so that the kernel is ordered with CuPy's own work
    stream = numba_cuda.external_stream(xp.cuda.get_current_stream().ptr)
    kern[blocks, THREADS_PER_BLOCK, stream](*args)


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
    if plan.loop == "encode":
        _launch("encode", n, (bits, out, z, plan.p), xp, target)
    elif plan.loop == "round":
        _launch("round", n, (bits, out, z, plan.p, plan.d), xp, target)
    else:
        if plan.widen:
            bits = widen16(bits, src, options.subnormals, xp)
        if plan.loop == "full":
            fl = xp.empty(n, xp.uint8)
            _launch("full", n, (bits, out, fl, z, plan.p, plan.d, back), xp, target)
            c = [int(xp.count_nonzero(fl & xp.uint8(1 << j))) for j in range(4)]
            counts = (c[0], c[1], c[2], c[3])
        else:
            _launch("general", n, (bits, out, z, plan.p, plan.d, back), xp, target)
        out = out.astype(plan.result_dtype, copy=False)
    result = out.view(a.dtype).reshape(shape) if back else out.reshape(shape)
    return result, RoundingStats(int(a.size), *counts)
