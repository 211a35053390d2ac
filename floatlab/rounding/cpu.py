"""The CPU executor: the compiled loops of :mod:`floatlab.rounding._kernels`, run over the cores.

:func:`execute` runs a :class:`~floatlab.rounding.plan.Plan` on numpy bit patterns. Beside the
plan's loop it knows two shortcuts that give the same bits faster: the CPU's own float32 -> fp16
conversion (x86 F16C, AArch64) and float32 -> bfloat16 in integer arithmetic. The other entry
points are the building blocks the public door offers: decoding codes, the block-scaling loops, the
running sums of the accumulation simulator and the exact float64 arithmetic of the simulators.

>>> import numpy as np, floatlab as fl
>>> decode_codes(np.array([0x3C00, 0x7BFF, 0xFC00], np.uint16), fl.FP16).tolist()
[1.0, 65504.0, -inf]
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from floatlab.formats import FP64, FloatFormat
from floatlab.rounding._jit import kernels
from floatlab.rounding.params import TILE, DecodeParams, EncodeParams, code_dtype, decode_params
from floatlab.rounding.plan import Plan, widen16
from floatlab.rounding.threads import loop_threads

__all__ = [
    "add_count",
    "decode_codes",
    "execute",
    "finite_amax",
    "half_hardware",
    "in_place",
    "odd_div",
    "odd_sqrt",
    "odd_sum",
    "run_accumulate",
    "run_bf16",
    "run_blocks",
    "run_counting_nonzero",
    "run_fma_one",
    "run_fma_sum",
    "run_half",
    "run_running_sums",
    "run_scaled_round",
    "run_tile_cast",
    "run_tree_sum",
]


#: the value of a loop's choice argument (``sr``, ``ip``, ``rne``, ``bf16``) that turns it on; None
#: turns it off. The choice is a type, so that each is a compiled loop of its own.
_ON = np.uint8(1)


def _bf16_marker(cast: str) -> Any:
    """The ``bf16`` argument of the loops that round into bfloat16 or fp16 for the plan's cast."""
    return _ON if cast == "fp32->bf16" else None


def zero(lanes: int) -> Any:
    """The zero whose type tells a loop its lane width."""
    return np.uint32(0) if lanes == 32 else np.uint64(0)


def _one_pass(plan: Plan) -> str:
    """The plan's cast when it has a one-pass loop of its own ("fp32->fp16", "fp32->bf16"), else
    "": the commonest casts of mixed precision. fp16 is the CPU's own conversion, where it has
    one; bfloat16 is float32's top half, so its rounding is one integer add (same bits, tested)."""
    if plan.cast == "fp32->fp16":
        return plan.cast if half_hardware() else ""
    return plan.cast


def execute(
    bits: np.ndarray, plan: Plan, *, shortcuts: bool = True
) -> tuple[np.ndarray, tuple[int, int, int, int]]:
    """Run ``plan`` on the 1-d contiguous bit patterns ``bits`` of the input: the codes (or the
    rounded values' bit patterns) in ``plan.result_dtype``, and the flag counts (inexact,
    underflow, overflow, invalid; zeros unless the plan counts them). ``shortcuts=False`` runs
    the plan's own loop where a shortcut would give the same bits faster (the tests compare them).

    >>> from floatlab.rounding.options import RoundingOptions
    >>> from floatlab.formats import FP16, FP32
    >>> from floatlab.rounding.plan import make_plan
    >>> plan = make_plan(FP32, FP16, RoundingOptions(), back=False, flags=True)
    >>> codes, counts = execute(np.array([1.0, 1e-9], np.float32).view(np.uint32), plan)
    >>> codes.tolist(), counts      # 1e-9 flushes: inexact and underflow
    ([15360, 0], (1, 1, 0, 0))
    """
    none = (0, 0, 0, 0)
    cast = _one_pass(plan) if shortcuts else ""
    if cast == "fp32->fp16":
        return run_half(bits, plan.back), none
    if cast == "fp32->bf16":
        return run_bf16(bits, plan.back), none
    z = zero(plan.lanes)
    n = bits.size
    out = np.empty(n, plan.out_dtype)
    k = kernels()
    if plan.loop == "encode":
        with loop_threads(n):
            k.encode(bits, out, z, tuple(plan.p))
        return out, none
    if plan.loop == "round":
        with loop_threads(n):
            k.round_back(bits, out, z, tuple(plan.p), tuple(plan.d))
        return out, none
    if plan.widen:
        bits = widen16(bits, plan.src, plan.options.subnormals, np)
    with loop_threads(n):
        if plan.loop == "full":
            c = k.full(bits, out, z, tuple(plan.p), tuple(plan.d), plan.back)
            counts = (int(c[0]), int(c[1]), int(c[2]), int(c[3]))
        else:
            k.general(bits, out, z, tuple(plan.p), tuple(plan.d), plan.back)
            counts = none
    return out.astype(plan.result_dtype, copy=False), counts


def half_hardware() -> bool:
    """True when this CPU converts float32 to fp16 in hardware (x86 F16C, or AArch64), so that
    the float32 -> fp16 round-to-nearest-even loops can use the CPU's own conversion.

    >>> isinstance(half_hardware(), bool)
    True
    """
    global _half_hw
    if _half_hw is None:
        import platform

        from llvmlite import binding

        machine = platform.machine().lower()
        features = binding.get_host_cpu_features() if machine in ("x86_64", "amd64") else None
        _half_hw = machine in ("aarch64", "arm64") or bool(features and features.get("f16c"))
    return _half_hw


_half_hw: bool | None = None


def run_half(bits: np.ndarray, back: bool) -> np.ndarray:
    """float32 bit patterns (uint32) to fp16 codes, or with ``back`` to float32 bit patterns of
    the rounded values: round to nearest even, subnormals kept, overflow to inf, no flags.
    Call only where :func:`half_hardware` is true.

    >>> bits = np.array([1.0, 65520.0], np.float32).view(np.uint32)
    >>> run_half(bits, False).tolist() if half_hardware() else [15360, 31744]   # 65520 overflows
    [15360, 31744]
    """
    out = np.empty(bits.size, np.uint32 if back else np.uint16)
    kernels().cast16(bits, out, None, _ON if back else None)
    return out


def run_bf16(bits: np.ndarray, back: bool) -> np.ndarray:
    """float32 bit patterns (uint32) to bfloat16 codes, or with ``back`` to float32 bit patterns
    of the rounded values: round to nearest even, subnormals kept, overflow to inf, no flags.

    >>> x = np.array([1 + 2**-8, 1 + 3 * 2**-8, 3.4e38, -np.inf], np.float32)
    >>> run_bf16(x.view(np.uint32), True).view(np.float32).tolist()   # ties go to even
    [1.0, 1.015625, inf, -inf]
    """
    out = np.empty(bits.size, np.uint32 if back else np.uint16)
    kernels().cast16(bits, out, _ON, _ON if back else None)
    return out


def in_place(p: EncodeParams, stochastic: bool = False) -> bool:
    """True when ``p`` rounds to nearest even (with ``stochastic``: stochastically) into a format
    without flush-to-zero, denormals-are-zero or fnuz zeros: what the loops that round in place
    (in the input's own bit pattern, :mod:`floatlab.rounding._inplace`) handle. The E8M0 block
    loop reads the same rule off ``p`` itself; only the E4M3-scaled block loop has a stochastic
    twin.

    >>> from floatlab.formats import FP32, get_format
    >>> from floatlab.rounding.options import RoundingOptions
    >>> from floatlab.rounding.params import encode_params
    >>> plain = encode_params(FP32, get_format("e4m3fn"), RoundingOptions(), lanes=32)
    >>> fnuz = encode_params(FP32, get_format("e4m3fnuz"), RoundingOptions(), lanes=32)
    >>> in_place(plain), in_place(fnuz)
    (True, False)
    """
    mode = p.mode_stochastic if stochastic else p.mode_rne
    return bool(mode and not (p.ftz or p.fnuz or p.daz))


def run_counting_nonzero(
    bits: np.ndarray, plan: Plan, overwrite: bool = False
) -> tuple[np.ndarray, int, int] | None:
    """The rounded values' bit patterns of a plain float32 to fp16 or bfloat16 plan that rounds
    back (:func:`execute`'s shortcuts), and the non-zero values of the input and of the result,
    in one pass; None for any other plan. With ``overwrite`` the values are written over
    ``bits`` (1-d, contiguous), which is returned.

    >>> from floatlab.formats import BF16, FP32
    >>> from floatlab.rounding.options import RoundingOptions
    >>> from floatlab.rounding.plan import make_plan
    >>> plan = make_plan(FP32, BF16, RoundingOptions(), back=True, flags=False)
    >>> out, nx, nr = run_counting_nonzero(np.float32([1.0, 1e-45, -0.0]).view(np.uint32), plan)
    >>> out.view(np.float32).tolist(), nx, nr      # 2^-149 is below bfloat16's 2^-133
    ([1.0, 0.0, -0.0], 2, 1)
    """
    cast = _one_pass(plan)
    if not plan.back or not cast:
        return None
    bf16 = _bf16_marker(cast)
    if overwrite:
        nx, nr = kernels().round_count_inplace(bits, bf16)
        return bits, int(nx), int(nr)
    out = np.empty(bits.size, np.uint32)
    nx, nr = kernels().round_count(bits, out, bf16)
    return out, int(nx), int(nr)


def odd_sum(x: np.ndarray, y: np.ndarray, rdown: bool) -> np.ndarray:
    """x + y (1-d contiguous float64 arrays of one size) rounded to odd at 53 bits, with IEEE 754's
    sign for an exact zero sum (-0 under ``rdown``, round toward -inf). Rounding this to p <= 51
    bits in any mode equals one rounding of the exact sum (see :mod:`floatlab.simulate`).

    >>> odd_sum(np.array([1.0, 1.0, 1.0]), np.array([2.0**-60, -(2.0**-60), -1.0]), True).tolist()
    [1.0000000000000002, 0.9999999999999999, -0.0]
    """
    out = np.empty_like(x)
    with loop_threads(x.size):
        kernels().odd_sum(x, y, out, out.view(np.uint64), bool(rdown))
    return out


def odd_div(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """x / y (1-d contiguous float64 arrays of one size) rounded to odd at 53 bits.

    >>> odd_div(np.array([1.0, 6.0]), np.array([10.0, 3.0])).tolist()  # the double nearest 0.1 is even
    [0.09999999999999999, 2.0]
    """
    out = np.empty_like(x)
    with loop_threads(x.size):
        kernels().odd_div(x, y, out, out.view(np.uint64))
    return out


def odd_sqrt(x: np.ndarray) -> np.ndarray:
    """The square roots of ``x`` (1-d contiguous float64) rounded to odd at 53 bits.

    >>> odd_sqrt(np.array([3.0, 4.0, -0.0, -1.0])).tolist()
    [1.7320508075688774, 2.0, -0.0, nan]
    """
    out = np.empty_like(x)
    with loop_threads(x.size):
        kernels().odd_sqrt(x, out, out.view(np.uint64))
    return out


def add_count(w: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, int, int, int]:
    """``(w + d, count of d != 0, count of w + d != w, count of non-finite w + d)`` for
    float32/float64 arrays of one shape and dtype, in one compiled pass (the trainer's update
    with its swallowed-update counts and its check that the new weights are finite).

    >>> w = np.array([1.0, 1.0, 2.0, 3e38], np.float32)
    >>> new, intended, changed, nonfinite = add_count(w, np.array([1e-8, 0.5, 0.0, 3e38], np.float32))
    >>> new.tolist(), intended, changed, nonfinite   # 1e-8 is below half an ulp of 1: swallowed
    ([1.0, 1.5, 2.0, inf], 3, 2, 1)
    """
    wc, dc = np.ascontiguousarray(w).reshape(-1), np.ascontiguousarray(d, dtype=w.dtype).reshape(-1)
    out = np.empty_like(wc)
    intended, changed, nonfinite = kernels().add_count(wc, dc, out)
    return out.reshape(w.shape), int(intended), int(changed), int(nonfinite)


def run_blocks(
    bits: np.ndarray,
    shape: tuple[int, int, int],
    block: tuple[int, int],
    rule: tuple[Any, ...],
    p: EncodeParams,
    values: Any = None,
    *,
    codes: bool = True,
    ps: EncodeParams | None = None,
    count: bool = False,
) -> tuple[np.ndarray | None, np.ndarray, np.ndarray | None, tuple[int, int, int, int, int]]:
    """Block scaling of the bit patterns ``bits`` (float32 as uint32, float64 as uint64) of a
    C-contiguous array of ``shape`` (outer, R, C) in blocks of ``block`` (br rows, bc columns):
    element codes (uint8, flat), scale codes (uint8, flat over (outer, ceil(R / br),
    ceil(C / bc))), the dequantized values in the dtype ``values`` (None: not wanted) and the
    counts (nonzero, flushed, subnormal, inexact, saturated) over the blocks with a finite scale;
    without ``codes``, the values alone (no codes, zero counts: one pass, for fake quantization),
    or with ``count`` (E4M3 scales only) the values and the counts in that one pass.

    Without ``ps`` the scales are E8M0 and ``rule`` is (element emax, rceil, the element max's
    fraction); with ``ps`` (float32 into E4M3, nearest even) they are E4M3 codes over a tensor
    scale, ``p`` rounds float32 (32 lanes) and ``rule`` holds six float32 numbers (see
    :mod:`floatlab.rounding._block_kernels`). ``p`` rounds the input format into the element
    format (saturating, with the true exponent of subnormal inputs).

    >>> from floatlab.formats import FP64, get_format
    >>> from floatlab.rounding.options import RoundingOptions
    >>> from floatlab.rounding.params import encode_params
    >>> e2m1 = get_format("e2m1")
    >>> p = encode_params(FP64, e2m1, RoundingOptions(saturate=True), lanes=64, full=True)
    >>> x = np.array([1.0, -3.0, 0.0]).view(np.uint64)
    >>> codes, scales, _, counts = run_blocks(x, (1, 1, 3), (1, 32), (2, 0, 0), p)
    >>> codes.tolist(), scales.tolist(), counts
    ([4, 15, 0], [126], (2, 0, 0, 0, 0))
    """
    outer, rows, cols = shape
    br, bc = block
    if br == 1 and cols % bc == 0:
        outer, rows, cols = 1, 1, outer * rows * cols  # no block crosses a row: one long row
    nbr, nbc = -(-rows // br), -(-cols // bc)
    chunk = max(1, TILE // (br * bc)) * bc
    items = outer * nbr * -(-cols // chunk)
    element_codes = np.empty(bits.size if codes else 0, np.uint8)
    scales = np.empty(outer * nbr * nbc, np.uint8)
    out = np.empty(bits.size if values is not None else 0, np.float64 if values is None else values)
    counts = np.zeros((items, 5 if codes or count else 0), np.int64)
    z = zero(8 * bits.itemsize)
    args = ((outer, rows, cols), (br, bc), chunk, rule, element_codes, scales, out)
    # (stochastic rounding is compiled apart: its random words cost the other modes nothing)
    sr = _ON if p.mode_stochastic else None
    k = kernels()
    with loop_threads(bits.size):
        if ps is None:
            k.e8m0_blocks(bits, *args, counts, z, tuple(p), sr)
        else:
            # (stochastic codes come faster from the general routine than read off the in-place
            # value: measured 580 against 550 M values/s; the values, and values with counts, in place)
            sr_in_place = in_place(p, True) and not (codes and not count)
            ip = _ON if in_place(p) or sr_in_place else None
            k.e4m3_blocks(bits, *args, counts, z, tuple(p), tuple(ps), sr, ip)
    total = counts.sum(axis=0)
    n = [int(c) for c in total] if counts.shape[1] else [0] * 5
    back = out if values is not None else None
    return element_codes if codes else None, scales, back, (n[0], n[1], n[2], n[3], n[4])


def finite_amax(bits: np.ndarray, fmt: FloatFormat) -> int:
    """The bit pattern of the largest finite magnitude among the 1-d contiguous bit patterns
    ``bits`` of the IEEE format ``fmt`` (float32 as uint32, float64 as uint64); 0 for none.

    >>> from floatlab.formats import FP32
    >>> finite_amax(np.array([1.0, -3.0, np.inf, np.nan], np.float32).view(np.uint32), FP32) == 0x40400000
    True
    """
    out = np.zeros(-(-bits.size // TILE), bits.dtype)
    z = zero(8 * bits.itemsize)
    with loop_threads(bits.size):
        kernels().finite_amax(bits, out, z, fmt.exponent_mask)
    return int(out.max()) if out.size else 0


def run_running_sums(
    t: np.ndarray,
    kahan: bool,
    key: tuple[int, int],
    stochastic: bool,
    rdown: bool,
    p: EncodeParams,
    d: DecodeParams,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Running sums of the float64 terms ``t`` (and Kahan's compensations), one rounding a step.

    >>> from floatlab.rounding.options import RoundingOptions
    >>> from floatlab.rounding.params import encode_params
    >>> from floatlab.formats import FP16
    >>> p, d = encode_params(FP64, FP16, RoundingOptions(), lanes=64), decode_params(FP16, FP64, 64)
    >>> run_running_sums(np.ones(3000), False, (0, 0), False, False, p, d)[0][-1]   # stalls at 2048
    np.float64(2048.0)
    """
    args = (np.uint32(key[0]), np.uint32(key[1]), stochastic, rdown, tuple(p), tuple(d))
    run = np.empty_like(t)
    if not kahan:
        kernels().sequential(t, run, *args)
        return run, None
    comp = np.empty_like(t)
    kernels().kahan(t, run, comp, *args)
    return run, comp


def run_tree_sum(w: np.ndarray, plan: Plan) -> np.ndarray | None:
    """Sum the float32 values ``w`` (C-contiguous (pre, n, post), n >= 1, values of the plan's
    format) down the middle axis as a tree of pairwise sums, each rounded by ``plan``, a plain
    float32 to fp16 or bfloat16 cast (as :func:`run_counting_nonzero` runs), in ``w``'s own
    memory: the sums, float32 (pre, post); None for any other plan.

    >>> from floatlab.formats import FP16, FP32
    >>> from floatlab.rounding.options import RoundingOptions
    >>> from floatlab.rounding.plan import make_plan
    >>> plan = make_plan(FP32, FP16, RoundingOptions(), back=True, flags=False)
    >>> w = np.float32([2048.0, 1.0, 1.0, 1.0]).reshape(1, 4, 1)
    >>> run_tree_sum(w, plan).tolist() if half_hardware() else [[2050.0]]  # (2048 + 1) + (1 + 1)
    [[2050.0]]
    """
    cast = _one_pass(plan)
    if not cast:
        return None
    pre, n, post = w.shape
    bf16 = _bf16_marker(cast)
    with loop_threads(w.size):
        if post == 1:
            kernels().tree_rows(w.reshape(pre, n), bf16)
        else:
            kernels().tree_cols(w, bf16)
    out: np.ndarray = w[:, 0, :]
    return out


def run_fma(x: np.ndarray, y: np.ndarray, z: np.ndarray, p: EncodeParams) -> np.ndarray:
    """``x * y + z`` of 1-d contiguous float32 arrays of one size, rounded once by ``p`` (float64
    into an IEEE format within fp32, deterministic): float32.

    >>> from floatlab.formats import FP32
    >>> from floatlab.rounding.options import RoundingOptions
    >>> from floatlab.rounding.params import encode_params
    >>> p = encode_params(FP64, FP32, RoundingOptions(), lanes=64)
    >>> x = np.float32([1 + 2.0**-12]); z = np.float32([-1 - 2.0**-11])
    >>> run_fma(x, x, z, p).tolist()   # (1 + 2^-12)^2 - (1 + 2^-11) = 2^-24, which fp32's product loses
    [5.960464477539063e-08]
    """
    out = np.empty(x.size, np.float64)
    with loop_threads(x.size):
        kernels().fma(x, y, z, out, tuple(p))
    return out.astype(np.float32)  # (exact: the values are fp32 values)


def run_fma_sum(partials: np.ndarray, a_scale: np.ndarray, b_scale: np.ndarray) -> np.ndarray:
    """The scaled sum of the float32 ``partials`` (T, M, N) with float32 scales ``a_scale``
    (M, T) and ``b_scale`` (T, N): float32 (M, N), the first term a float32 product, each later
    one added by a float32 FMA (rounded once, to nearest even).

    >>> parts = np.float32([[[1.0]], [[3.0]]])
    >>> run_fma_sum(parts, np.float32([[2.0, 0.5]]), np.float32([[1.0], [1.0]])).tolist()
    [[3.5]]
    """
    nt, m, n = partials.shape
    out = np.empty((m, n), np.float32)
    with loop_threads(nt * m * n):
        kernels().fma_sum(partials, a_scale, b_scale, out)
    return out


def run_fma_one(partial: np.ndarray, a_scale: np.ndarray, b_scale: np.ndarray) -> np.ndarray:
    """:func:`run_fma_sum` of one term (T = 1), in the C-contiguous float32 ``partial`` (M, N)'s
    own memory: ``partial`` itself, each value multiplied by its float32 scale product (+0).

    >>> p = np.float32([[3.0, -0.0]])
    >>> run_fma_one(p, np.float32([[2.0]]), np.float32([[0.5, 1.0]])) is p, p.tolist()
    (True, [[3.0, 0.0]])
    """
    with loop_threads(partial.size):
        kernels().fma_one(partial, a_scale, b_scale)
    return partial


def run_fma_store(
    partials: np.ndarray,
    a_scale: np.ndarray,
    b_scale: np.ndarray,
    bias: np.ndarray | None,
    plan: Plan,
    overwrite: bool,
) -> tuple[np.ndarray, int, int] | None:
    """:func:`run_fma_sum` (or, with ``overwrite`` and one term, :func:`run_fma_one` in the term's
    own memory), then ``bias`` (float32 (N,), or None) added and each value rounded by ``plan``, a
    plain float32 to fp16 or bfloat16 cast (as :func:`run_counting_nonzero` runs), row by row
    while the row is in the cache: the values, the non-zero values before the rounding and after
    it; None for any other plan.

    >>> from floatlab.formats import BF16, FP32
    >>> from floatlab.rounding.options import RoundingOptions
    >>> from floatlab.rounding.plan import make_plan
    >>> plan = make_plan(FP32, BF16, RoundingOptions(), back=True, flags=False)
    >>> parts = np.float32([[[1.0, 1e-39]], [[2.0 ** -9, 0.0]]])          # T = 2, M = 1, N = 2
    >>> ones = np.float32([[1.0, 1.0]])
    >>> q, nz, kept = run_fma_store(parts, ones, np.ones((2, 2), np.float32), None, plan, False)
    >>> q.tolist(), nz, kept          # 1 + 2^-9 ties to 1 in bfloat16; 1e-39 stays (a subnormal)
    ([[1.0, 1.0101904577379033e-39]], 2, 2)
    """
    cast = _one_pass(plan)
    if not cast:
        return None
    bf16 = _bf16_marker(cast)
    nt, m, n = partials.shape
    counts = np.empty((m, 2), np.int64)
    b = bias if bias is not None else np.empty(0, np.float32)
    if overwrite and nt == 1:
        out: np.ndarray = partials[0]
        with loop_threads(out.size):
            kernels().fma_one_store(out, a_scale, b_scale, b, counts, bf16)
    else:
        out = np.empty((m, n), np.float32)
        with loop_threads(nt * m * n):
            kernels().fma_sum_store(partials, a_scale, b_scale, out, b, counts, bf16)
    nonzero, kept = (int(c) for c in counts.sum(axis=0))
    return out, nonzero, kept


def run_scaled_round(
    x: np.ndarray,
    scales: np.ndarray,
    shape: tuple[int, int, int],
    block: tuple[int, int],
    p: EncodeParams,
    d: DecodeParams,
    tiny: float,
    transposed: bool = False,
) -> tuple[np.ndarray, tuple[int, int, int, int]]:
    """The float32 values ``x`` (flat, C order over ``shape`` = (outer, R, C)) times their block's
    scale (``scales`` flat over (outer, ceil(R / br), ceil(C / bc)) for ``block`` = (br, bc)),
    rounded by ``p`` and decoded back by ``d`` (float32 into a format within fp32, 32 lanes): the
    values, and the counts (overflowed, zero inputs, zero results, results with
    ``0 < abs(q) < tiny``). With ``transposed`` (outer 1), ``x`` holds the (C, R) transpose of the
    array, C order, and the values come back in the (R, C) array's C order.

    >>> from floatlab.formats import FP32, get_format
    >>> from floatlab.rounding.options import RoundingOptions
    >>> from floatlab.rounding.params import decode_params, encode_params
    >>> e4m3 = get_format("e4m3fn")
    >>> p = encode_params(FP32, e4m3, RoundingOptions(saturate=True), lanes=32)
    >>> d = decode_params(e4m3, FP32, 32)
    >>> x = np.float32([1.0, 0.0, 300.0, 1e-4])
    >>> q, n = run_scaled_round(x, np.float32([2.0]), (1, 1, 4), (1, 4), p, d, 2.0**-6)
    >>> q.tolist(), n
    ([2.0, 0.0, 448.0, 0.0], (1, 1, 2, 0))
    """
    out = np.empty(x.size, np.float32)
    loop = kernels().scaled_round
    args = (x, scales, shape, block, out, zero(32), tuple(p), tuple(d), np.float32(tiny))
    tr = _ON if transposed else None
    # round to nearest even with saturation (the fp8 recipes' cast) has a loop of its own, four
    # times as fast, whose results are the door's for every finite product: where a product is
    # an infinity or a NaN (a step that overflowed), the array is cast again by the door's loop
    nearest = in_place(p) and p.overflow_to_max and p.in_bits == 32
    with loop_threads(x.size):
        counts = loop(*args, _ON, tr) if nearest else (0, 0, 0, 0, 1)
        if counts[4]:
            counts = loop(*args, None, tr)
    return out, (int(counts[0]), int(counts[1]), int(counts[2]), int(counts[3]))


def run_tile_cast(
    x: np.ndarray,
    shape: tuple[int, int, int],
    block: tuple[int, int],
    rule: tuple[float, float, int],
    p: EncodeParams,
    d: DecodeParams,
    tiny: float,
) -> tuple[np.ndarray, np.ndarray, tuple[int, int, int, int], int, bool] | None:
    """Current tile scaling's cast in one pass: the float32 values ``x`` (flat, C order over
    ``shape`` = (outer, R, C)) in tiles of ``block`` (1 x k along the rows or k x 1 down them),
    each times float32(fmax / max(amax, eps)) of its own amax (``rule`` = (fmax, eps, a mask for
    the scale's bits)) and rounded by ``p`` (to nearest even with saturation, in place: None
    for another ``p``): the values, the scales (flat over (outer, ceil(R / br), ceil(C / bc))),
    the counts as :func:`run_scaled_round`'s, the bits of the largest tile amax, and whether
    every product was finite and every amax a number (False: the values are not the recipe's).

    >>> from floatlab.formats import FP32, get_format
    >>> from floatlab.rounding.options import RoundingOptions
    >>> from floatlab.rounding.plan import make_plan
    >>> plan = make_plan(FP32, get_format("e4m3fn"), RoundingOptions(saturate=True), back=True, flags=False)
    >>> x, rule = np.float32([1.0, -2.0, 0.5, 0.0]), (448.0, 1e-12, 0xFFFFFFFF)
    >>> q, s, n, top, ok = run_tile_cast(x, (1, 1, 4), (1, 2), rule, plan.p, plan.d, 2.0**-6)
    >>> q.tolist(), s.tolist(), n, ok                       # scales 448 / 2 and 448 / 0.5
    ([224.0, -448.0, 448.0, 0.0], [224.0, 896.0], (0, 1, 1, 0), True)
    """
    if not (in_place(p) and p.overflow_to_max and p.in_bits == 32):
        return None
    outer, rows, cols = shape
    br, bc = block
    out = np.empty(x.size, np.float32)
    scales = np.empty(outer * -(-rows // br) * -(-cols // bc), np.float32)
    # per task (a row, or a strip of br rows): five counts, the largest amax's bits, bad tiles
    counts = np.empty((outer * (rows if br == 1 else -(-rows // br)), 7), np.int64)
    args = (x, shape, block, (float(rule[0]), float(rule[1]), np.uint32(rule[2])), out, scales, counts)
    with loop_threads(x.size):
        kernels().tile_cast(*args, zero(32), tuple(p), tuple(d), np.float32(tiny), _ON)
    over, zx, zq, sub, sp, _, bad = (int(c) for c in counts.sum(axis=0))
    top = int(counts[:, 5].max()) if counts.size else 0
    return out, scales, (over, zx, zq, sub), top, not (sp or bad)


def run_accumulate(
    a: np.ndarray, b: np.ndarray, every: int, rdown: bool, p: EncodeParams, p32: EncodeParams
) -> np.ndarray:
    """The accumulated products of the float32 arrays ``a`` (B, M, K) and ``b`` (B or 1, K, N):
    float32 (B, M, N), each output's sum over k in order, every addition rounded once by ``p``
    (float64 into an IEEE accumulator within fp32: deterministic, subnormals kept, no saturation);
    ``every`` > 0 promotes the sum into an fp32 total (``p32``, round to nearest even) after each
    ``every`` products. A call of fewer than :data:`~floatlab.rounding.threads.SERIAL_BELOW` products
    runs on one thread.

    >>> from floatlab.formats import FP16, FP32
    >>> from floatlab.rounding.options import RoundingOptions
    >>> from floatlab.rounding.params import encode_params
    >>> p, p32 = (encode_params(FP64, f, RoundingOptions(), lanes=64) for f in (FP16, FP32))
    >>> ones = np.ones((1, 1, 3000), np.float32)
    >>> run_accumulate(ones, ones.reshape(1, 3000, 1), 0, False, p, p32).item()  # stalls at 2048
    2048.0
    """
    nb, m, k = a.shape
    n = b.shape[2]
    out = np.empty((nb, m, n), np.float32)
    with loop_threads(nb * m * n * k):
        kernels().accumulate(a, b, out, every, rdown, tuple(p), tuple(p32))
    return out


def run_decode(codes: np.ndarray, d: DecodeParams, lanes: int = 64) -> np.ndarray:
    """Output-format bit patterns (uint64 for 64 lanes) of the 1-d contiguous ``codes``."""
    z = zero(lanes)
    out = np.empty(codes.size, z.dtype)
    with loop_threads(codes.size):
        kernels().decode(codes, out, z, tuple(d))
    return out


_tables: dict[tuple[FloatFormat, int], np.ndarray] = {}
_lock = threading.Lock()


def _decode_table(fmt: FloatFormat, width: int) -> np.ndarray:
    """float64 value of every ``width``-bit code of ``fmt`` (bits above fmt.bits are ignored)."""
    key = (fmt, width)
    table = _tables.get(key)
    if table is None:
        codes = np.arange(1 << width, dtype=np.uint64)
        table = run_decode(codes, decode_params(fmt, FP64, 64)).view(np.float64)
        with _lock:
            _tables[key] = table
    return table


def decode_codes(codes: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    """float64 values of the codes of ``fmt`` (any shape; bits above ``fmt.bits`` are ignored).

    Exact whenever fmt's values are float64 values (every format with at most 11 exponent
    and 52 fraction bits); wider formats round to nearest even (overflowing to inf). A NaN
    code gives a quiet float64 NaN with the code's sign and, for IEEE formats, the top
    bits of its payload. Codes of up to 16 bits are looked up in a table of all their
    values, built on first use.

    >>> import floatlab as fl
    >>> decode_codes(np.array([[0x01, 0x7E], [0x80, 0xFF]], np.uint8), fl.get_format("e4m3fn")).tolist()
    [[0.001953125, 448.0], [-0.0, nan]]
    """
    a = np.asarray(codes)
    if a.dtype.kind not in "ui":
        raise ValueError(f"codes of dtype {a.dtype}: expected unsigned integer codes")
    cdt = code_dtype(fmt)
    c = np.ascontiguousarray(a.astype(cdt, copy=False)).reshape(-1)
    if cdt.itemsize <= 2:
        out = np.empty(c.size, np.float64)
        table = _decode_table(fmt, 8 * cdt.itemsize)
        with loop_threads(c.size):
            kernels().gather(c, table, out)
        return out.reshape(a.shape)
    bits = run_decode(c, decode_params(fmt, FP64, 64))
    return bits.view(np.float64).reshape(a.shape)
