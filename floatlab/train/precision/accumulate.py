"""A GEMM whose accumulator is narrower than fp32, with promotion of partial sums to fp32.

fp8 tensor cores do not accumulate in full fp32. DeepSeek-V3's report (arXiv 2412.19437,
section 3.3.2, "Increasing Accumulation Precision") measured that the fp8 GEMM of the H800 keeps
about 14 bits of the accumulator, and that a reduction of 4096 products loses up to about 2% that
way; their fix copies the tensor core's partial sum into an fp32 register of the CUDA cores every
N_C = 128 elements of the reduction and adds it there, in full fp32.

:func:`accumulate_matmul` simulates exactly that, one addition at a time:

* each product ``a[i, k] * b[k, j]`` enters the accumulator exactly (a product of two fp8, fp16 or
  bf16 values has at most 22 significant bits, exact in fp32; the products of fp32 inputs are kept
  exact too, in float64);
* the reduction runs in order, k = 0, 1, 2, ..., as a tensor core's chain of MMA instructions
  does, and every partial sum is rounded into the ``accumulate`` format after each addition;
* with ``promote_every=N``, after every N products (and after the partial last chunk when K is
  not a multiple of N) the chunk's partial sum is added into an fp32 running total (rounded to
  nearest even in fp32, as an fp32 add on the CUDA cores is) and the narrow accumulator restarts
  at zero.

:data:`ACC14` is the "14-bit" accumulator: 14 significant bits (13 fraction bits and the implicit
one) with fp32's 8 exponent bits, since the partial sums live in fp32 registers and only the
significand is cut short. The hardware's own rounding of the accumulator is not documented;
``rounding="rtz"`` (truncation) is the pessimistic choice, ``"rne"`` the default.

Two implementations give the same bits. :func:`accumulate_matmul_reference` is the readable
specification: one product index at a time over every output, each exact sum formed rounded to odd
at 53 bits (:func:`floatlab.rounding.odd_sum`, which equals one rounding of the exact sum for every
format within fp32, see :mod:`floatlab.simulate.arithmetic`) and rounded through
:func:`floatlab.round_array`. :func:`accumulate_matmul` runs the whole reduction in one compiled
loop of the rounding package (:func:`floatlab.rounding.accumulate_products`, parallel over the
output rows), a few hundred million products per second on one core
(``python benchmarks/bench_accumulate.py``); the tests hold the two to the same bits and both to an
exact rational oracle.

>>> import numpy as np
>>> a, b = np.full((1, 32768), 2.0**-3), np.full((32768, 1), 2.0**-3)   # 32768 products 2^-6
>>> float(accumulate_matmul(a, b)[0, 0])                     # fp32 accumulation: exact
512.0
>>> float(accumulate_matmul(a, b, accumulate=ACC14)[0, 0])   # stalls at 2^14 * 2^-6
256.0
>>> float(accumulate_matmul(a, b, accumulate=ACC14, promote_every=128)[0, 0])
512.0
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np
from numpy.typing import NDArray

from floatlab._signature import passing_on, spelled_out
from floatlab.backend import gemm_stacks
from floatlab.formats import FP32, FloatFormat, get_format
from floatlab.rounding import accumulate_products, check_rounding, odd_sum, round_array

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "ACC14",
    "ACCUMULATORS",
    "AccumulateOptions",
    "accumulate_matmul",
    "accumulate_matmul_reference",
    "accumulator_format",
    "check_promote_every",
]

#: The accumulator of an fp8 tensor core as DeepSeek-V3 measured it on the H800 (about 14 bits):
#: 14 significant bits (13 fraction bits) and fp32's 8-bit exponent
ACC14 = FloatFormat(
    exponent_bits=8,
    mantissa_bits=13,
    name="acc14",
    description="a 14-bit tensor-core accumulator: fp32's exponent, 13 fraction bits",
)

#: accumulator formats known by name besides the registered formats
ACCUMULATORS: dict[str, FloatFormat] = {"acc14": ACC14}


def accumulator_format(fmt: FloatFormat | str) -> FloatFormat:
    """The accumulator format named by ``fmt``: a :class:`~floatlab.FloatFormat`, a name of
    :data:`ACCUMULATORS` (``"acc14"``) or a registered format, whose values must all be fp32 values.

    >>> accumulator_format("acc14").precision, accumulator_format("bf16").name
    (14, 'bf16')
    >>> accumulator_format("fp64")
    Traceback (most recent call last):
    ...
    ValueError: accumulator format fp64: expected a format within fp32 (acc14, fp32, bf16, fp16, ...)
    """
    if isinstance(fmt, str) and fmt.strip().lower() in ACCUMULATORS:
        return ACCUMULATORS[fmt.strip().lower()]
    f = get_format(fmt)
    if not FP32.contains(f):
        raise ValueError(
            f"accumulator format {f.name or f}: expected a format within fp32 (acc14, fp32, bf16, fp16, ...)"
        )
    return f


def check_promote_every(promote_every: object) -> int | None:
    """``promote_every`` checked: None, or an integer of at least 1 (ValueError otherwise).

    >>> check_promote_every(128), check_promote_every(None)
    (128, None)
    >>> check_promote_every(0)
    Traceback (most recent call last):
    ...
    ValueError: promote_every=0: expected None or an integer of at least 1
    """
    if promote_every is None:
        return None
    bad = f"promote_every={promote_every!r}: expected None or an integer of at least 1"
    if isinstance(promote_every, bool) or not isinstance(promote_every, (int, np.integer)):
        raise ValueError(bad)
    if promote_every < 1:
        raise ValueError(bad)
    return int(promote_every)


def _operand(x: Any, name: str) -> NDArray[np.float32]:
    """``x`` as float32 (C-contiguous), its values rounded to nearest even into fp32 when wider."""
    arr = np.asarray(x)
    if arr.ndim < 2:
        raise ValueError(f"{name} of shape {arr.shape}: expected an array of 2 or more dimensions")
    if arr.dtype.kind not in "fiub":
        raise ValueError(f"{name} of dtype {arr.dtype}: expected real numbers")
    if arr.dtype != np.float32:
        # one rounding, straight from the input's values; the float32 copy of an fp32 value is exact
        arr = round_array(arr.astype(np.float64), FP32).astype(np.float32)
    out: NDArray[np.float32] = np.ascontiguousarray(arr)
    return out


class AccumulateOptions(TypedDict, total=False):
    """The keyword-only options of :func:`accumulate_matmul` and
    :func:`accumulate_matmul_reference`, typed once: both take them as
    ``**options: Unpack[AccumulateOptions]``, with the defaults that help() shows (fp32, no
    promotion, round to nearest even).

    >>> sorted(AccumulateOptions(accumulate="acc14", promote_every=128))
    ['accumulate', 'promote_every']
    """

    accumulate: FloatFormat | str
    promote_every: int | None
    rounding: str


def _checked(
    a: Any,
    b: Any,
    *,
    accumulate: FloatFormat | str = "fp32",
    promote_every: int | None = None,
    rounding: str = "rne",
) -> tuple[NDArray[np.float32], NDArray[np.float32], FloatFormat, int | None, str]:
    """The arguments of both implementations, checked (operands, format, promotion, mode), and the
    options' defaults."""
    f = accumulator_format(accumulate)
    n_every = check_promote_every(promote_every)
    mode = check_rounding(rounding)
    if mode == "stochastic":
        raise ValueError(
            f"rounding={rounding!r}: expected a deterministic mode (rne, rna, rtz, rup, rdown, rodd)"
        )
    a32, b32 = _operand(a, "a"), _operand(b, "b")
    if a32.shape[-1] != b32.shape[-2]:
        raise ValueError(f"accumulate_matmul of shapes {a32.shape} and {b32.shape}: inner dimensions differ")
    return a32, b32, f, n_every, mode


@spelled_out(_checked)
def accumulate_matmul(a: Any, b: Any, **options: Unpack[AccumulateOptions]) -> NDArray[np.float32]:
    """``a @ b`` (shapes (..., M, K) and (..., K, N), leading axes broadcast) with the sum over k
    done in order, k = 0, 1, ..., each partial sum rounded into ``accumulate``; float32 result.

    The products enter exactly; with ``promote_every=N`` every N products (and the partial last
    chunk when N does not divide K) the partial sum is added into an fp32 total (round to nearest
    even) and the accumulator restarts at zero. ``rounding`` is the accumulator's rounding mode (any
    deterministic one); operands holding values outside fp32 are first rounded to nearest even into
    fp32 (float32 operands are taken as they are). With the defaults (fp32, no promotion) the
    result is a sequential fp32 accumulation. For an IEEE accumulator (acc14, fp32, tf32, bf16,
    fp16, e5m2, ...) one compiled loop does the whole reduction, with the bits of the readable
    :func:`accumulate_matmul_reference`; the formats without infinities (e4m3fn, the fnuz ones)
    take the reference's NumPy path.

    A reduction of 4096 products of fp8 (E4M3) values from [0, 1): the largest relative error of
    a 14-bit accumulator, rounding to nearest and truncating, then with promotion every 128:

    >>> import floatlab as fl
    >>> rng = np.random.default_rng(0)
    >>> a = fl.round_array(rng.uniform(0, 1, (4, 4096)), "e4m3fn")
    >>> b = fl.round_array(rng.uniform(0, 1, (4096, 4)), "e4m3fn")
    >>> exact = a @ b   # every partial sum has at most 29 significant bits: exact in float64
    >>> for every in (None, 128):
    ...     errors = [np.abs(accumulate_matmul(a, b, accumulate=ACC14, promote_every=every, rounding=r)
    ...                      - exact).max() / exact.max() for r in ("rne", "rtz")]
    ...     print(f"promote_every={every}: " + ", ".join(f"{e:.1e}" for e in errors))
    promote_every=None: 4.5e-03, 6.6e-02
    promote_every=128: 4.9e-05, 6.8e-04
    """
    a32, b32, f, n_every, mode = passing_on(_checked, a, b, **options)
    if f.encoding != "ieee":
        return _numpy_sums(a32, b32, f, n_every, mode)
    lead, a3, b3 = gemm_stacks(a32, b32)
    out = accumulate_products(
        np.ascontiguousarray(a3), np.ascontiguousarray(b3), f, mode, promote_every=n_every
    )
    return out.reshape(*lead, a32.shape[-2], b32.shape[-1])


@spelled_out(_checked)
def accumulate_matmul_reference(a: Any, b: Any, **options: Unpack[AccumulateOptions]) -> NDArray[np.float32]:
    """:func:`accumulate_matmul` written out in NumPy, the specification its compiled loop is
    tested against: one product index k at a time over every output, the exact sum rounded to odd
    at 53 bits, then rounded into the accumulator through :func:`floatlab.round_array`.

    Same arguments, same bits; a NumPy call per product index (and per chunk), so it is slow for
    few outputs and long reductions.

    >>> a, b = np.full((1, 4096), 2.0**-3), np.full((4096, 1), 2.0**-3)
    >>> float(accumulate_matmul_reference(a, b, accumulate=ACC14, promote_every=128)[0, 0])
    64.0
    """
    return _numpy_sums(*passing_on(_checked, a, b, **options))


def _numpy_sums(
    a32: NDArray[np.float32], b32: NDArray[np.float32], f: FloatFormat, n_every: int | None, mode: str
) -> NDArray[np.float32]:
    """The reference's work, on checked arguments."""
    m, n = a32.shape[-2], b32.shape[-1]
    lead, a32s, b32s = gemm_stacks(a32, b32)
    nb, rows, k = a32s.shape
    a3, b3 = a32s.astype(np.float64), b32s.astype(np.float64)
    at = np.ascontiguousarray(np.moveaxis(a3, -1, 0))  # (K, B, M'): at[k] is column k of every a
    bt = np.ascontiguousarray(np.moveaxis(b3, -2, 0))  # (K, B, N)
    chunk = k if n_every is None else n_every
    total = np.zeros(nb * rows * n)
    for lo in range(0, k, max(chunk, 1)):
        acc = np.zeros(nb * rows * n)
        for kk in range(lo, min(lo + chunk, k)):
            # two fp32 values: their product has at most 48 significant bits, exact in float64
            # (inf * 0 is NaN, as in the hardware: not a warning)
            with np.errstate(invalid="ignore"):
                prod = (at[kk][:, :, None] * bt[kk][:, None, :]).reshape(-1)
            acc = round_array(odd_sum(acc, prod, mode == "rdown"), f, mode)
        # the promotion: an fp32 addition on the CUDA cores (without it, the one chunk is the sum)
        total = acc if n_every is None else round_array(odd_sum(total, acc, False), FP32)
    out: NDArray[np.float32] = total.astype(np.float32).reshape(*lead, m, n)
    return out
