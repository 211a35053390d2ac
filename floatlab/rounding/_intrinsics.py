"""What the compiled loops are built from (numba source, private to :mod:`floatlab.rounding`): the
lane-width integer intrinsics, the float bit casts, and the decorators that compile an element
function or a loop.

This module imports numba; so do the kernel modules that import it (:mod:`._kernels`,
:mod:`._inplace`, :mod:`._block_kernels`, :mod:`._e4m3_kernels`, :mod:`._scaled_kernels`,
:mod:`._fp64_kernels`). None of them is imported by ``import floatlab``: the typed table of
compiled loops, :func:`floatlab.rounding._jit.kernels`, imports them on first use.

numba widens every integer operation to 64 bits, so the loops spell their operations through
small intrinsics (:func:`_u`, :func:`_s`, :func:`_shl`, :func:`_shr`, :func:`_clz`) that keep
the lane width: uint32 lanes when the input and the codes fit in 32 bits (AVX-512 then holds 16
elements per register), uint64 otherwise.

numba's on-disk cache (``cache=True``; it honours ``NUMBA_CACHE_DIR``) notices a change in the
file of a loop, not in the files of the functions it inlines. Every loop is therefore compiled
under a name that carries a fingerprint of all the kernel files (:data:`STAMP`), so that a change
in any of them compiles the loops anew.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import numba
from llvmlite import ir
from numba import extending
from numba.core import cgutils, types

__all__ = ["STAMP", "element", "parallel_loop", "serial_loop"]

F = TypeVar("F", bound=Callable[..., Any])

#: the files whose functions the loops inline (this one too)
KERNEL_FILES = (
    "_intrinsics.py", "_kernels.py", "_inplace.py", "_block_kernels.py", "_e4m3_kernels.py",
    "_scaled_kernels.py", "_fp64_kernels.py",
)  # fmt: skip


def fingerprint() -> str:
    """A short hash of the kernel files (:data:`KERNEL_FILES`).

    >>> len(fingerprint())
    12
    """
    h = hashlib.sha256()
    for name in KERNEL_FILES:
        h.update(Path(__file__).with_name(name).read_bytes())
    return h.hexdigest()[:12]


#: the fingerprint every compiled loop's name carries
STAMP = fingerprint()


def element(fn: F) -> F:
    """``fn`` compiled as an element function or a helper of the loops, inlined where it is
    called: forceinline marks it LLVM "alwaysinline" (left to its cost model LLVM keeps a big
    function as a call, and a loop with a call does not vectorise)."""
    return cast(F, numba.njit(nogil=True, error_model="numpy", forceinline=True)(fn))


def intrinsic(typer: Callable[..., Any]) -> Any:
    """``typer`` (numba's typing context, then the argument types; it gives the signature and the
    code generator) as an intrinsic: a function whose LLVM code the generator writes."""
    return extending.intrinsic(typer)


def _stamped(fn: F) -> F:
    # numba's cache files are named after the function's qualified name: the fingerprint in it
    # makes a change in an inlined function's file a new name, so the loop is compiled anew
    fn.__qualname__ = f"{fn.__qualname__}_{STAMP}"
    return fn


def parallel_loop(fn: F) -> F:
    """``fn`` compiled as a loop over the cores (its ``prange``), cached on disk."""
    return cast(F, numba.njit(parallel=True, cache=True, nogil=True, error_model="numpy")(_stamped(fn)))


def serial_loop(fn: F) -> F:
    """``fn`` compiled as a loop on the calling thread, cached on disk: the hardware conversions,
    which run at memory speed on one core (no threads to wake), and the serial running sums."""
    return cast(F, numba.njit(cache=True, nogil=True, error_model="numpy")(_stamped(fn)))


# ---- intrinsics: integer operations that keep the lane width, and the float bit casts ----------
def _cast_to(target: Any, *arg_types: Any) -> Any:
    """The signature ``target(*arg_types)`` and the code that casts the first argument to
    ``target`` (numba's own integer cast)."""

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        return context.cast(builder, args[0], sig.args[0], target)

    return target(*arg_types), codegen


def _shift(a: Any, n: Any, op: str) -> Any:
    """The signature ``a(a, n)`` and the code of the LLVM shift ``op`` (``shl``, ``lshr``) of the
    first argument by the second, cast to the first's width."""

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        k = context.cast(builder, args[1], sig.args[1], sig.args[0])
        return getattr(builder, op)(args[0], k)

    return a(a, n), codegen


def _lane_float(v: Any, op: str) -> Any:
    """The signature and the code of the LLVM conversion ``op`` (``bitcast``: the same bits,
    ``uitofp``: the same value) of the integer ``v`` to the float of its width (float32 for 32
    bits, float64 for 64)."""

    ft, lt = (types.float32, ir.FloatType()) if v.bitwidth == 32 else (types.float64, ir.DoubleType())

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        return getattr(builder, op)(args[0], lt)

    return ft(v), codegen


def _through_floats(code: Any, result: Any, op: str, source: Any, target: Any) -> Any:
    """The signature ``result(code)`` and the code that reads ``code``'s bits as the LLVM float
    ``source``, converts that by ``op`` (``fptrunc``, ``fpext``) to ``target`` and gives its bits."""

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        f = getattr(builder, op)(builder.bitcast(args[0], source), target)
        return builder.bitcast(f, ir.IntType(result.bitwidth))

    return result(code), codegen


@intrinsic
def _u(typingctx: Any, v: Any, z: Any) -> Any:
    """Cast ``v`` to the unsigned integer type as wide as ``z``."""
    return _cast_to(types.Integer.from_bitwidth(z.bitwidth, signed=False), v, z)


@intrinsic
def _s(typingctx: Any, v: Any, z: Any) -> Any:
    """Cast ``v`` to the signed integer type as wide as ``z``."""
    return _cast_to(types.Integer.from_bitwidth(z.bitwidth, signed=True), v, z)


@intrinsic
def _shl(typingctx: Any, a: Any, n: Any) -> Any:
    """a << n in a's width; the callers keep 0 <= n < width (a wider shift is undefined)."""
    return _shift(a, n, "shl")


@intrinsic
def _shr(typingctx: Any, a: Any, n: Any) -> Any:
    """Logical a >> n in a's width; the callers keep 0 <= n < width."""
    return _shift(a, n, "lshr")


@intrinsic
def _clz(typingctx: Any, a: Any) -> Any:
    """Count of leading zero bits; the full width for 0 (one AVX-512 instruction, vplzcnt)."""

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        return builder.ctlz(args[0], cgutils.false_bit)  # "false": ctlz(0) is defined

    return a(a), codegen


@intrinsic
def _half(typingctx: Any, bits: Any) -> Any:
    """fp16 code (as uint16) of the float32 with bit pattern ``bits``: the CPU's own conversion.

    LLVM's ``fptrunc float to half`` is IEEE round-to-nearest-even with subnormals, inf and
    quiet NaNs (payload's top bits kept); on x86 with F16C it is one vector instruction
    (vcvtps2ph) that ignores MXCSR's flush-to-zero. The generic loops must give the same bits:
    a test compares the two on every float32.
    """
    return _through_floats(bits, types.uint16, "fptrunc", ir.FloatType(), ir.HalfType())


@intrinsic
def _unhalf(typingctx: Any, code: Any) -> Any:
    """float32 bit pattern (uint32) of the fp16 code ``code`` (exact: every fp16 is a float32)."""
    return _through_floats(code, types.uint32, "fpext", ir.HalfType(), ir.FloatType())


@intrinsic
def _float(typingctx: Any, bits: Any) -> Any:
    """The float of ``bits``' width (float32 for a uint32, float64 for a uint64) with that bit
    pattern."""
    return _lane_float(bits, "bitcast")


@intrinsic
def _f32(typingctx: Any, bits: Any) -> Any:
    """The float32 whose bit pattern is ``bits`` (a uint32)."""

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        b = context.cast(builder, args[0], sig.args[0], types.uint32)
        return builder.bitcast(b, ir.FloatType())

    return types.float32(bits), codegen


@intrinsic
def _bits32(typingctx: Any, f: Any) -> Any:
    """The bit pattern (uint32) of the float32 ``f``."""

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        return builder.bitcast(args[0], ir.IntType(32))

    return types.uint32(types.float32), codegen


@intrinsic
def _fma32(typingctx: Any, a: Any, b: Any, c: Any) -> Any:
    """fl(a x b + c) in float32, rounded once (LLVM's fma: the CPU's instruction where it has one)."""

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        vals = [context.cast(builder, v, ty, types.float32) for v, ty in zip(args, sig.args, strict=True)]
        f32 = ir.FloatType()
        fn = builder.module.declare_intrinsic("llvm.fma", [f32], ir.FunctionType(f32, [f32, f32, f32]))
        return builder.call(fn, vals)

    return types.float32(a, b, c), codegen


@intrinsic
def _itof(typingctx: Any, v: Any) -> Any:
    """The unsigned integer ``v`` as a float of its width (float32 for 32 bits), exactly for
    values below 2^24."""
    return _lane_float(v, "uitofp")
