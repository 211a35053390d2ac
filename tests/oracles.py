"""What the tests share: the independent oracles they compare floatlab with (numpy and ml_dtypes types
holding each format's bits, gfloat's description of a format, central finite differences in float64,
the narrow-accumulator GEMM in exact rational arithmetic) and the benchmark scripts they sample."""

from __future__ import annotations

import importlib.util
import math
import sys
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from types import ModuleType
from typing import Any

import ml_dtypes
import numpy as np
from gfloat.types import Domain, FormatInfo

from floatlab.codec import decode
from floatlab.formats import FP32, FloatFormat
from floatlab.rounding import round_rational, round_scalar

# format name -> the numpy / ml_dtypes scalar type with the same bits
ORACLE_TYPES: dict[str, Any] = {
    "fp64": np.float64,
    "fp32": np.float32,
    "fp16": np.float16,
    "bf16": ml_dtypes.bfloat16,
    "float8_e5m2": ml_dtypes.float8_e5m2,
    "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
    "float8_e4m3fnuz": ml_dtypes.float8_e4m3fnuz,
    "float8_e5m2fnuz": ml_dtypes.float8_e5m2fnuz,
    "float6_e2m3fn": ml_dtypes.float6_e2m3fn,
    "float6_e3m2fn": ml_dtypes.float6_e3m2fn,
    "float4_e2m1fn": ml_dtypes.float4_e2m1fn,
}

# the formats whose only independent array implementation is ml_dtypes
ML_DTYPES: dict[str, Any] = {k: v for k, v in ORACLE_TYPES.items() if k not in ("fp64", "fp32", "fp16")}


def gfloat_info(fmt: FloatFormat) -> FormatInfo:
    """gfloat's FormatInfo for ``fmt``, built from the primary parameters only."""
    high_nans = {"ieee": (1 << fmt.mantissa_bits) - 1, "fn": int(fmt.has_nan), "fnuz": 0}[fmt.encoding]
    return FormatInfo(
        name=fmt.name,
        k=fmt.bits,
        precision=fmt.precision,
        bias=(1 << (fmt.exponent_bits - 1)) - (0 if fmt.encoding == "fnuz" else 1),
        is_signed=True,
        domain=Domain.Extended if fmt.encoding == "ieee" else Domain.Finite,
        has_nz=fmt.encoding != "fnuz",
        num_high_nans=high_nans,
        has_subnormals=True,
        is_twos_complement=False,
    )


def benchmark_script(name: str) -> ModuleType:
    """The script benchmarks/<name>.py as a module (the exhaustive check and the CLI fuzz run
    there at full size; the suite imports them to run samples)."""
    path = Path(__file__).resolve().parent.parent / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"floatlab_{name}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (dataclasses look their module up by name)
    spec.loader.exec_module(module)
    return module


def numeric_grad(
    f: Callable[[], float], x: np.ndarray[Any, Any], n_max: int = 40, seed: int = 0, h: float = 1e-6
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Central differences ``(f(x + h) - f(x - h)) / 2h`` of ``f`` with respect to (a seeded sample of at
    most ``n_max``) entries of the float64 array ``x``, perturbed in place and restored; returns the flat
    indices and the differences: the oracle for the trainer's hand-written backward passes."""
    flat = x.reshape(-1)
    rng = np.random.default_rng(seed)
    idx = np.arange(flat.size) if flat.size <= n_max else rng.choice(flat.size, n_max, replace=False)
    out = np.empty(len(idx))
    for j, i in enumerate(idx):
        old = flat[i]
        flat[i] = old + h
        up = f()
        flat[i] = old - h
        down = f()
        flat[i] = old
        out[j] = (up - down) / (2 * h)
    return idx, out


def _value(code: int, fmt: FloatFormat) -> float:
    """The value of a code, from the codec's exact scalar decoder (no compiled loop)."""
    return float(decode(code, fmt).value)


def _add_exact(acc: float, term: Fraction, term_negative: bool, fmt: FloatFormat, mode: str) -> float:
    """acc + term rounded once into fmt by the specification (IEEE 754: specials, and the sign of an
    exact zero)."""
    if not math.isfinite(acc):
        return _value(round_scalar(acc, fmt, mode)[0], fmt)  # inf + finite = inf; NaN stays NaN
    exact = Fraction(acc) + term
    negative_zero = False
    if exact == 0:
        acc_negative = math.copysign(1.0, acc) < 0
        if acc == 0 and term == 0 and acc_negative == term_negative:
            negative_zero = acc_negative
        else:
            negative_zero = mode == "rdown"
    return _value(round_rational(exact, fmt, mode, negative_zero=negative_zero)[0], fmt)


def _add_float(acc: float, other: float, fmt: FloatFormat, mode: str) -> float:
    if not (math.isfinite(acc) and math.isfinite(other)):
        return _value(round_scalar(acc + other, fmt, mode)[0], fmt)
    return _add_exact(acc, Fraction(other), math.copysign(1.0, other) < 0, fmt, mode)


def accumulate_oracle(
    a: np.ndarray[Any, Any], b: np.ndarray[Any, Any], fmt: FloatFormat, promote_every: int | None, mode: str
) -> np.ndarray[Any, Any]:
    """The narrow-accumulator GEMM of the 2-d arrays ``a`` and ``b`` (finite values of fp32), one
    output at a time in exact rational arithmetic: each product exact, each partial sum rounded into
    ``fmt`` by :func:`~floatlab.rounding.round_rational`, each chunk of ``promote_every`` products
    added into an fp32 total rounded to nearest even."""
    m, k = a.shape
    n = b.shape[1]
    out = np.empty((m, n))
    chunk = k if promote_every is None else promote_every
    for i in range(m):
        for j in range(n):
            partials = []
            for lo in range(0, k, max(chunk, 1)):
                acc = 0.0
                for kk in range(lo, min(lo + chunk, k)):
                    x, y = float(a[i, kk]), float(b[kk, j])
                    negative = math.copysign(1.0, x) * math.copysign(1.0, y) < 0
                    acc = _add_exact(acc, Fraction(x) * Fraction(y), negative, fmt, mode)
                partials.append(acc)
            total = 0.0
            if promote_every is None:
                total = partials[0] if partials else 0.0
            else:
                for part in partials:
                    total = _add_float(total, part, FP32, "rne")
            out[i, j] = total
    return out


def same_float32_bits(x: np.ndarray[Any, Any], y: np.ndarray[Any, Any]) -> bool:
    """Bit for bit as float32 (zeros with their sign), any NaN equal to any NaN."""
    x32, y32 = np.asarray(x, np.float32), np.asarray(y, np.float32)
    both_nan = np.isnan(x32) & np.isnan(y32)
    return bool(np.all(both_nan | (x32.view(np.uint32) == y32.view(np.uint32))))


# ---- exact float32 ------------------------------------------------------------------------------
def f32(x: Any) -> np.ndarray:
    return np.array(x, dtype=np.float32)


def nearest_f32(x: Fraction) -> np.ndarray:
    """The float32 nearest to ``x``, ties to even, by integer arithmetic alone (the oracle)."""
    if x == 0:
        return f32(0.0)
    sign, mag = (-1 if x < 0 else 1), abs(x)
    e = mag.numerator.bit_length() - mag.denominator.bit_length()  # 2^e <= mag < 2^(e+2)
    if Fraction(2) ** (e + 1) <= mag:
        e += 1
    e = max(e, -126)  # below float32's normals the gap stays 2^-149
    q = mag / Fraction(2) ** (e - 23)  # the significand in units of the gap
    n, rest = divmod(q.numerator, q.denominator)
    if 2 * rest > q.denominator or (2 * rest == q.denominator and n % 2):
        n += 1
    value = Fraction(n) * Fraction(2) ** (e - 23)
    if value >= Fraction(2) ** 128:
        return f32(sign * np.inf)
    return f32(sign * float(value))  # (exact: value has at most 24 significant bits)


def same_bits(x: np.ndarray, y: np.ndarray) -> bool:
    return x.shape == y.shape and bool((np.asarray(x).view(np.uint32) == np.asarray(y).view(np.uint32)).all())


def other_blas_kernel() -> str:
    """An OpenBLAS kernel other than Haswell's that this CPU can run: SkylakeX's (AVX-512) where
    the CPU has AVX-512, else SandyBridge's (AVX), whose sgemm adds in another order."""
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    return "SkylakeX" if " avx512f" in flags else "SandyBridge"


#: the lessons floatlab ships, in order (the lessons command and the notebook suite hold it to this list)
LESSONS = (
    "01-anatomy-of-a-float",
    "02-rounding-and-ulps",
    "03-range-underflow-subnormals",
    "04-swallowed-updates-and-master-weights",
    "05-gradient-histograms-and-loss-scaling",
    "06-mixed-precision-training",
    "07-tensor-cores",
    "08-checking-the-claims",
    "09-precision-in-a-language-model",
    "10-framework-recipes-side-by-side",
    "11-fp8-training",
    "12-4bit-training",
    "13-your-own-model",
)
