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

Every rounding goes through :func:`floatlab.round_array`. Each exact sum is first formed rounded
to odd at 53 bits (:func:`floatlab.rounding.odd_sum`), which equals one rounding of the exact sum
for every format within fp32 (see :mod:`floatlab.simulate.arithmetic`).

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

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from floatlab.formats import FP32, FloatFormat, get_format
from floatlab.rounding import check_rounding, odd_sum, round_array, running_sums

__all__ = ["ACC14", "ACCUMULATORS", "accumulate_matmul", "accumulator_format"]

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

# below this many outputs per chunk the reduction runs per output in one compiled serial loop
# (floatlab.rounding.running_sums), which does the same roundings without a numpy call per product
_SERIAL_OUTPUTS = 8


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


def _check_promote_every(promote_every: object) -> int | None:
    if promote_every is None:
        return None
    bad = f"promote_every={promote_every!r}: expected None or an integer of at least 1"
    if isinstance(promote_every, bool) or not isinstance(promote_every, (int, np.integer)):
        raise ValueError(bad)
    if promote_every < 1:
        raise ValueError(bad)
    return int(promote_every)


def _operand(x: Any, name: str) -> NDArray[np.float64]:
    """``x`` as float64 values of fp32 (rounded to nearest even when it holds wider values)."""
    arr = np.asarray(x)
    if arr.ndim < 2:
        raise ValueError(f"{name} of shape {arr.shape}: expected an array of 2 or more dimensions")
    if arr.dtype.kind not in "fiub":
        raise ValueError(f"{name} of dtype {arr.dtype}: expected real numbers")
    # fp32 values: the product of two of them has at most 48 significant bits, exact in float64
    out: NDArray[np.float64] = round_array(arr.astype(np.float64), FP32)
    return out


def accumulate_matmul(
    a: Any,
    b: Any,
    *,
    accumulate: FloatFormat | str = "fp32",
    promote_every: int | None = None,
    rounding: str = "rne",
) -> NDArray[np.float32]:
    """``a @ b`` (shapes (..., M, K) and (..., K, N), leading axes broadcast) with the sum over k
    done in order, k = 0, 1, ..., each partial sum rounded into ``accumulate``; float32 result.

    The products enter exactly; with ``promote_every=N`` every N products (and the partial last
    chunk when N does not divide K) the partial sum is added into an fp32 total (round to nearest
    even) and the accumulator restarts at zero. ``rounding`` is the accumulator's rounding mode (any
    deterministic one); operands holding values outside fp32 are first rounded to nearest even into
    fp32. With the defaults (fp32, no promotion) the result is a sequential fp32 accumulation.

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
    f = accumulator_format(accumulate)
    n_every = _check_promote_every(promote_every)
    mode = check_rounding(rounding)
    if mode == "stochastic":
        raise ValueError(
            f"rounding={rounding!r}: expected a deterministic mode (rne, rna, rtz, rup, rdown, rodd)"
        )
    a64, b64 = _operand(a, "a"), _operand(b, "b")
    if a64.shape[-1] != b64.shape[-2]:
        raise ValueError(f"accumulate_matmul of shapes {a64.shape} and {b64.shape}: inner dimensions differ")
    m, k, n = a64.shape[-2], a64.shape[-1], b64.shape[-1]
    batch = tuple(np.broadcast_shapes(a64.shape[:-2], b64.shape[:-2]))
    nb = math.prod(batch)  # (spelled out: a reshape to -1 of an empty array is refused)
    a3 = np.broadcast_to(a64, (*batch, m, k)).reshape(nb, m, k)
    b3 = np.broadcast_to(b64, (*batch, k, n)).reshape(nb, k, n)
    chunk = k if n_every is None else n_every
    bounds = [(s, min(s + chunk, k)) for s in range(0, k, max(chunk, 1))]
    outputs = a3.shape[0] * m * n
    if outputs < _SERIAL_OUTPUTS:
        sums = _serial_chunks(a3, b3, bounds, f, mode)
    else:
        sums = _vector_chunks(a3, b3, bounds, f, mode)
    if n_every is None:
        total = sums[0] if sums else np.zeros(outputs)
    else:
        total = np.zeros(outputs)
        for s in sums:  # the promotions: fp32 additions on the CUDA cores
            total = round_array(odd_sum(total, s, False), FP32)
    out: NDArray[np.float32] = total.astype(np.float32).reshape(*batch, m, n)
    return out


def _vector_chunks(
    a3: NDArray[np.float64], b3: NDArray[np.float64], bounds: list[tuple[int, int]], f: FloatFormat, mode: str
) -> list[NDArray[np.float64]]:
    """Each chunk's partial sums of all outputs (flat), one product index at a time."""
    at = np.ascontiguousarray(np.moveaxis(a3, -1, 0))  # (K, B, M): at[k] is column k of every a
    bt = np.ascontiguousarray(np.moveaxis(b3, -2, 0))  # (K, B, N)
    rdown = mode == "rdown"
    sums = []
    for lo, hi in bounds:
        acc = np.zeros(a3.shape[0] * a3.shape[1] * b3.shape[2])
        for k in range(lo, hi):
            prod = (at[k][:, :, None] * bt[k][:, None, :]).reshape(-1)  # exact in float64
            acc = round_array(odd_sum(acc, prod, rdown), f, mode)
        sums.append(acc)
    return sums


def _serial_chunks(
    a3: NDArray[np.float64], b3: NDArray[np.float64], bounds: list[tuple[int, int]], f: FloatFormat, mode: str
) -> list[NDArray[np.float64]]:
    """:func:`_vector_chunks` for a few outputs: each output's chunk in one compiled serial loop."""
    prods = a3[:, :, None, :] * np.swapaxes(b3, -1, -2)[:, None, :, :]  # (B, M, N, K), exact
    rows = prods.reshape(a3.shape[0] * a3.shape[1] * b3.shape[2], a3.shape[2])
    sums = []
    for lo, hi in bounds:
        # a leading zero term: the accumulator starts at +0 and the first product is rounded too
        terms = [np.concatenate(([0.0], row[lo:hi])) for row in rows]
        sums.append(np.array([running_sums(t, f, mode)[0][-1] for t in terms]).reshape(-1))
    return sums
