"""The compiled passes of the fp8 recipes against the NumPy passes they replace, bit for bit.

* :func:`floatlab.rounding.round_scaled` (the scaled cast and its counts in one pass) against
  ``round_array(x * s, fmt, saturate=True)`` with NumPy's float32 product, and the counts against
  :func:`~floatlab.train.recipes.scales.cast_shares` and hand-derived boundary values (E4M3's
  overflow threshold 464 = 448 + half its gap of 32, whose tie goes down to the even 448; E5M2's
  61440 = 57344 + 4096, whose tie goes up);
* :func:`floatlab.rounding.fma_sum` against the loop of :func:`floatlab.rounding.fma` calls that
  the block-scaled GEMM ran, and against exact rational arithmetic;
* the block-scaled casts (``tile_quantize``, ``block_quantize``) and GEMM against the NumPy
  formulas they ran before (reshape, ``x * scale``, ``saturating_cast``; slice GEMMs and FMAs), on
  ragged shapes, transposed views, zeros, infinities and NaNs;
* the per-tensor cast of :class:`~floatlab.train.recipes.OperandScaler` (values, statistics, and
  the reuse of a step's cast for a reshaped view) against the NumPy passes.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pytest

import floatlab as fl
from floatlab.rounding import ScaledRound, fma, fma_sum, fma_sum_flushed, round_flushed, round_scaled
from floatlab.train.hostmath import host_matmul
from floatlab.train.recipes import (
    E4M3,
    E5M2,
    Fp8Recipe,
    Fp8Scaling,
    OperandScaler,
    block_quantize,
    blockwise_matmul,
    current_scale,
    saturating_cast,
    tile_quantize,
)
from floatlab.train.recipes.scales import cast_shares

F32 = np.float32


def _a(values: Any) -> np.ndarray:
    return np.array(values, np.float32)


def _bits(a: Any) -> bytes:
    return np.ascontiguousarray(np.asarray(a, np.float32)).tobytes()


def _spread(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """float32 values over many binades, with zeros, subnormal-bound and huge ones."""
    x = (rng.standard_normal(shape) * np.exp2(rng.integers(-30, 12, shape))).astype(np.float32)
    x[rng.random(shape) < 0.05] = 0.0
    return x


def _oracle(x: np.ndarray, s: np.ndarray, fmt: fl.FloatFormat) -> tuple[np.ndarray, np.ndarray]:
    """The NumPy passes: the float32 product, then the rounding door (saturating finite values)."""
    xs = (x * s).astype(np.float32)
    return xs, fl.round_array(xs, fmt, saturate=True)


@pytest.mark.parametrize("fmt", [E4M3, E5M2, fl.FP16, fl.BF16])
@pytest.mark.parametrize(
    ("shape", "block"),
    [((37, 50), None), ((3, 5, 7), None), ((37, 50), (1, 16)), ((37, 50), (16, 1)), ((37, 50), (16, 16)),
     ((2, 9, 40), (1, 8)), ((2, 9, 40), (4, 1)), ((1, 1), (1, 1)), ((5, 300), (1, 128))],
)  # fmt: skip
def test_round_scaled_equals_the_product_then_the_door(
    fmt: fl.FloatFormat, shape: tuple[int, ...], block: tuple[int, int] | None
) -> None:
    rng = np.random.default_rng(len(shape) * 100 + shape[-1])
    x = _spread(rng, shape)
    if block is None:
        s = F32(2.0 ** rng.integers(-5, 20) * 1.37)
        full = s
    else:
        rows, cols = shape[-2:]
        sshape = (*shape[:-2], -(-rows // block[0]), -(-cols // block[1]))
        s = np.exp2(rng.integers(-5, 20, sshape)).astype(np.float32) * F32(1.37)
        full = np.repeat(np.repeat(s, block[0], axis=-2), block[1], axis=-1)[..., :rows, :cols]
    xs, want = _oracle(x, full, fmt)
    got = round_scaled(x, s, fmt, block, saturate=True)
    assert got.values.shape == x.shape
    assert got.values.flags.c_contiguous
    assert _bits(got.values) == _bits(want)
    # the counts: overflow where round to nearest even leaves the range (beyond fmt.max plus half
    # its gap; the tie too when fmt.max's last fraction bit is 1), zeros, subnormal results
    threshold = fmt.max + 2.0 ** (fmt.emax - fmt.mantissa_bits - 1)
    mag = np.abs(xs.astype(np.float64))
    over = mag >= threshold if fmt.max_code & 1 else mag > threshold
    assert got.overflow == int(np.count_nonzero(over))
    assert got.zeros_in == int(np.count_nonzero(x == 0))
    assert got.zeros_out == int(np.count_nonzero(want == 0))
    tiny = fmt.smallest_normal
    assert got.subnormal == int(np.count_nonzero((want != 0) & (np.abs(want.astype(np.float64)) < tiny)))


@pytest.mark.parametrize("block", [None, (1, 8), (8, 1), (8, 8)])
def test_round_scaled_reads_a_transposed_matrix_as_it_lies(block: tuple[int, int] | None) -> None:
    rng = np.random.default_rng(7)
    held = _spread(rng, (45, 70))  # C-contiguous; its transpose is the (70, 45) operand
    x = held.T
    assert not x.flags.c_contiguous
    if block is None:
        s: Any = F32(300.0)
    else:
        s = np.exp2(rng.integers(0, 12, (-(-70 // block[0]), -(-45 // block[1])))).astype(np.float32)
    copy = round_scaled(np.ascontiguousarray(x), s, E5M2, block, saturate=True)
    got = round_scaled(x, s, E5M2, block, saturate=True)
    assert got.values.flags.c_contiguous
    assert _bits(got.values) == _bits(copy.values)
    assert got[1:] == copy[1:]


def test_round_scaled_boundaries_derived_by_hand() -> None:
    # E4M3: 448 = 1.110b x 2^8, the gap there 32: 464 is the tie, which goes to the even 448
    # (no overflow); above it a plain cast leaves the range (480 is E4M3fn's NaN pattern)
    x = _a([448.0, 464.0, np.nextafter(F32(464.0), F32(1000.0)), 480.0, np.inf, -np.inf, np.nan, -0.0])
    r = round_scaled(x, F32(1.0), E4M3, saturate=True)
    assert r.values[:4].tolist() == [448.0, 448.0, 448.0, 448.0]
    assert np.isnan(r.values[6])
    assert r.values[7] == 0.0
    assert np.signbit(r.values[7])
    assert r.overflow == 4  # 464 + ulp, 480, +inf, -inf (a NaN is not counted)
    assert (r.zeros_in, r.zeros_out, r.subnormal) == (1, 1, 0)
    # E5M2: 57344 = 1.11b x 2^15, the gap 8192: the tie 61440 goes up to the odd side, out of range
    y = _a([57344.0, np.nextafter(F32(61440.0), F32(0.0)), 61440.0, 2.0**-16, 2.0**-18, 2.0**-17 * 1.5])
    r = round_scaled(y, F32(1.0), E5M2, saturate=True)
    assert r.overflow == 1
    assert r.values.tolist() == [57344.0, 57344.0, 57344.0, 2.0**-16, 0.0, 2.0**-16]
    # 2^-16 is E5M2's smallest subnormal; 2^-18 is below half of it (flushed); 1.5 x 2^-17 rounds up
    assert (r.zeros_in, r.zeros_out, r.subnormal) == (0, 1, 2)


@pytest.mark.parametrize("name", ["e4m3fn", "e5m2", "e3m2", "e2m1", "fp16", "bf16", "e4m3fnuz"])
def test_round_scaled_over_a_sweep_of_every_float32_binade(name: str) -> None:
    # round to nearest even with saturation has a loop of its own (rounding in float32's own bit
    # pattern); the door's loop is the oracle, on float32 patterns that step through every binade
    # of both signs with varied low bits (the ties, the subnormals, the overflow edge), then again
    # with infinities and NaNs among them (the array is then cast by the door's loop)
    fmt = fl.get_format(name)
    # (plus every pattern whose low 16 bits are 0, and its two neighbours: the ties of every
    # format with up to 6 fraction bits, in and below its normal range)
    top = np.arange(2**16, dtype=np.uint64) << np.uint64(16)
    swept = np.arange(0, 2**32, 4099, dtype=np.uint64)
    bits = (np.concatenate([swept, top, top + 1, top - 1]) % 2**32).astype(np.uint32)
    x = bits.view(np.float32)
    finite = np.ascontiguousarray(x[np.isfinite(x)])
    for values in (finite, x):
        got = round_scaled(values, F32(1.0), fmt, saturate=True)
        want = fl.round_array(values, fmt, saturate=True)
        assert _bits(got.values) == _bits(want)
        assert got.zeros_out == int(np.count_nonzero(want == 0))
        tiny = fmt.smallest_normal
        assert got.subnormal == int(np.count_nonzero((want != 0) & (np.abs(want) < tiny)))
    # and ml_dtypes' own casts where they saturate as the door does (finite values within range)
    dtype = {"e4m3fn": "float8_e4m3fn", "e3m2": "float6_e3m2fn", "e2m1": "float4_e2m1fn"}.get(name)
    if dtype is not None:
        import ml_dtypes

        inside = finite[np.abs(finite) <= fmt.max]
        cast = inside.astype(getattr(ml_dtypes, dtype)).astype(np.float32)
        assert _bits(round_scaled(inside, F32(1.0), fmt, saturate=True).values) == _bits(cast)


def test_round_scaled_counts_equal_cast_shares() -> None:
    rng = np.random.default_rng(3)
    x = _spread(rng, (64, 96))
    x[0, :3] = [np.inf, np.nan, -np.inf]
    for fmt in (E4M3, E5M2):
        s = F32(fmt.max / 2.0**8)  # large values overflow, small ones flush
        xs, q = _oracle(x, s, fmt)
        q = saturating_cast(xs, fmt)
        got = round_scaled(x, s, fmt, saturate=True)
        clipped = np.clip(got.values, -fmt.max, fmt.max)  # (saturating_cast also clamps infinities)
        assert _bits(clipped) == _bits(q)
        want = cast_shares(x, q, fmt, xs=xs)
        n = x.size
        shares = (got.overflow / n, max(got.zeros_out - got.zeros_in, 0) / n, got.subnormal / n)
        assert shares == tuple(want)


@pytest.mark.parametrize(
    ("x", "scale", "fmt", "block", "message"),
    [
        (np.ones(3), F32(1.0), E4M3, None, "expected a float32 array"),
        (np.ones((4, 4), np.float32)[:, ::2], F32(1.0), E4M3, None, "C-contiguous"),
        (np.ones(3, np.float32), np.float64(1.0), E4M3, None, "float32 scales"),
        (np.ones(3, np.float32), _a([1.0, 2.0]), E4M3, None, "one scale"),
        (np.ones((4, 4), np.float32), _a([[1.0]]), E4M3, (2, 2), r"expected \(2, 2\)"),
        (np.ones((4, 4), np.float32), _a([[1.0]]), E4M3, (0, 2), "two whole numbers"),
        (np.ones(4, np.float32), _a([[1.0]]), E4M3, (1, 2), "2-d array"),
        (np.ones(4, np.float32), F32(1.0), fl.FP64, None, "within fp32"),
    ],
)
def test_round_scaled_refuses_bad_input(
    x: Any, scale: Any, fmt: fl.FloatFormat, block: Any, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        round_scaled(x, scale, fmt, block)
    with pytest.raises(ValueError, match="deterministic"):
        round_scaled(np.ones(2, np.float32), F32(1.0), E4M3, rounding="stochastic")


# ---- fma_sum ---------------------------------------------------------------------------------
def _fma_loop(partials: np.ndarray, a_s: np.ndarray, b_s: np.ndarray) -> np.ndarray:
    """The loop the block-scaled GEMM ran: the first product in float32 plus 0, then one fma a term."""
    acc = None
    for t in range(partials.shape[0]):
        s = a_s[:, t : t + 1] * b_s[t : t + 1, :]
        if acc is None:
            acc = s * partials[t]
            acc += F32(0.0)
        else:
            acc = fma(s, partials[t], acc)
    assert acc is not None
    return np.asarray(acc, np.float32)


@pytest.mark.parametrize("shape", [(1, 5, 7), (4, 9, 13), (16, 3, 40)])
def test_fma_sum_equals_the_loop_of_fmas(shape: tuple[int, int, int]) -> None:
    rng = np.random.default_rng(shape[0])
    nt, m, n = shape
    # partial sums of fp8 products: values of many binades, cancelling one another
    partials = _spread(rng, shape) * F32(2.0**10)
    partials[0, 0, :3] = [np.inf, np.nan, -0.0]
    a_s = np.exp2(rng.integers(-12, 4, (m, nt))).astype(np.float32) * F32(1.1)
    b_s = np.exp2(rng.integers(-12, 4, (nt, n))).astype(np.float32) * F32(0.7)
    want = _fma_loop(partials, a_s, b_s)
    got = fma_sum(partials, a_s, b_s)
    assert got.shape == (m, n)
    assert _bits(got) == _bits(want)
    # scales that take the sums into float32's subnormals and beyond its top
    tiny = a_s * F32(2.0**-100)
    assert _bits(fma_sum(partials, tiny, b_s)) == _bits(_fma_loop(partials, tiny, b_s))
    huge = b_s * F32(2.0**100)
    assert _bits(fma_sum(partials, a_s, huge)) == _bits(_fma_loop(partials, a_s, huge))
    # in the partials' own memory: a single term is scaled there, more terms give a new array
    for scales in ((a_s, b_s), (tiny, b_s), (a_s, huge)):
        own = partials.copy()
        got = fma_sum(own, *scales, overwrite=True)
        assert _bits(got) == _bits(_fma_loop(partials, *scales))
        assert np.shares_memory(got, own) == (nt == 1)


def test_fma_sum_rounds_once_per_term() -> None:
    # 1 + 2^-24 + 2^-24: each fused step rounds the exact sum once; 1 + 2^-24 is a tie that goes
    # to the even 1, so the sum stays 1; with 3 x 2^-25 the exact 1 + 3 x 2^-25 rounds up to 1 + 2^-23
    ones = np.ones((1, 1), np.float32)
    parts = _a([[[1.0]], [[2.0**-24]], [[2.0**-24]]])
    assert fma_sum(parts, np.ones((1, 3), np.float32), np.ones((3, 1), np.float32)).item() == 1.0
    parts = _a([[[1.0]], [[3.0]]])
    got = fma_sum(parts, ones.repeat(2, 1), _a([[1.0], [2.0**-25]])).item()
    exact = Fraction(1) + Fraction(3, 2**25)
    assert got == 1.0 + 2.0**-23
    assert abs(Fraction(got) - exact) < Fraction(1, 2**24)


@pytest.mark.parametrize("shape", [(1, 5, 7), (4, 9, 13), (16, 3, 40)])
@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
def test_fma_sum_flushed_is_fma_sum_then_bias_then_the_store(shape: tuple[int, int, int], fmt: str) -> None:
    """The fused epilogue against its three steps: fma_sum, a float32 bias add, round_flushed;
    values of many binades (sums into both formats' subnormals, beyond fp16's top), specials."""
    rng = np.random.default_rng(shape[1])
    nt, m, n = shape
    partials = _spread(rng, shape) * F32(2.0**-20)
    partials[0, 0, :3] = [np.inf, np.nan, -0.0]
    partials[:, 1, :2] = 0.0  # a zero sum, and a zero sum that the bias moves
    a_s = np.exp2(rng.integers(-30, 30, (m, nt))).astype(np.float32) * F32(1.1)
    b_s = np.exp2(rng.integers(-30, 30, (nt, n))).astype(np.float32) * F32(0.7)
    a_s[2] = F32(2.0**-126)  # a row of sums down to float32's subnormals, below both formats'
    bias = _spread(rng, (n,)) * F32(2.0**-14)
    bias[0] = 0.0
    flushed = []
    for with_bias in (None, bias):
        want = fma_sum(partials, a_s, b_s)
        with np.errstate(over="ignore", invalid="ignore"):
            if with_bias is not None:
                want += with_bias
            ref = round_flushed(want, fmt)
        flushed.append(ref.flushed)
        for overwrite in (False, True):
            own = partials.copy()
            with np.errstate(over="ignore", invalid="ignore"):
                got = fma_sum_flushed(own, a_s, b_s, fmt, bias=with_bias, overwrite=overwrite)
            assert got is not None
            assert _bits(got.values) == _bits(ref.values)
            assert (got.nonzero, got.flushed) == (ref.nonzero, ref.flushed)
            assert np.shares_memory(got.values, own) == (overwrite and nt == 1)
    assert flushed[0] > 0  # (the data reach below the format's subnormals)


def test_fma_sum_flushed_leaves_other_stores_to_the_caller() -> None:
    parts, a_s, b_s = np.ones((2, 3, 4), np.float32), np.ones((3, 2), np.float32), np.ones((2, 4), np.float32)
    assert fma_sum_flushed(parts, a_s, b_s, "bf16") is not None
    for fmt, kw in (
        ("bf16", {"rounding": "rtz"}),
        ("bf16", {"saturate": True}),
        ("fp16", {"subnormals": False}),
        ("e4m3fn", {}),
        ("bf16", {"bias": np.ones(4)}),  # a float64 bias: NumPy's add would promote
        ("bf16", {"bias": np.ones(3, np.float32)}),
    ):
        assert fma_sum_flushed(parts, a_s, b_s, fmt, **kw) is None, (fmt, kw)
    with pytest.raises(ValueError, match=r"expected \(T, M, N\)"):
        fma_sum_flushed(parts, a_s.T, b_s, "bf16")


def test_a_block_scaled_layer_stores_its_gemm_in_the_epilogue() -> None:
    """Precision.linear under fp8-blockwise: the GEMM's scale-and-sum, the bias and the bf16 store
    (with the flush counts of a backward pass) in one pass, bit for bit the steps apart."""
    from floatlab.train.precision import Precision

    rng = np.random.default_rng(7)
    x, dy = _spread(rng, (2, 64, 256)), _spread(rng, (2, 64, 128))
    w, bias = _spread(rng, (256, 128)) * F32(0.01), _spread(rng, (128,))
    fused, apart = Precision("fp8-blockwise"), Precision("fp8-blockwise")
    y = fused.linear("fc", x, "input", w, "weight", fused.fwd, bias=bias)
    acc = apart.scaling.matmul("fc", x, "input", w, "weight")  # type: ignore[union-attr]
    acc += bias
    assert _bits(y) == _bits(apart.store(acc, apart.fwd, owned=True))
    with fused.counting_flushes():
        dx = fused.linear("fc", dy, "grad", w.T, "weight", fused.bwd)
    with apart.counting_flushes():
        want = apart.store(apart.scaling.matmul("fc", dy, "grad", w.T, "weight"), apart.bwd, owned=True)  # type: ignore[union-attr]
    assert _bits(dx) == _bits(want)
    assert (fused.grad_values, fused.grad_flushed) == (apart.grad_values, apart.grad_flushed)
    assert fused.grad_values == dx.size  # (bfloat16's range: the tile scales leave nothing to flush)


def test_fma_sum_refuses_bad_shapes() -> None:
    with pytest.raises(ValueError, match=r"expected \(T, M, N\)"):
        fma_sum(np.ones((2, 3, 4), np.float32), np.ones((3, 3), np.float32), np.ones((2, 4), np.float32))
    with pytest.raises(ValueError, match="3-d float32"):
        fma_sum(np.ones((3, 4)), np.ones((3, 1), np.float32), np.ones((1, 4), np.float32))


# ---- block scaling -----------------------------------------------------------------------------
def _tile_reference(x: np.ndarray, fmt: fl.FloatFormat, block: int, axis: int) -> tuple[Any, Any, float]:
    """tile_quantize's NumPy formula as it ran before: pad, reshape, amax, scale, product, cast."""
    n = x.shape[axis]
    nt = -(-n // block)
    shape = list(x.shape)
    shape[axis] = nt * block
    xp = np.zeros(shape, np.float32)
    xp[tuple(slice(0, k) for k in x.shape)] = x
    xt = xp.reshape((*xp.shape[:axis], nt, block, *xp.shape[axis + 1 :]))
    amax = np.maximum(xt.max(axis=axis + 1), -xt.min(axis=axis + 1))
    scale = current_scale(amax, fmt)
    xs = (xt * np.expand_dims(scale, axis + 1)).reshape(xp.shape)
    bound = fmt.max if bool(np.isfinite(amax).all()) else float("inf")
    q = saturating_cast(xs, fmt, bound=bound)[tuple(slice(0, k) for k in x.shape)]
    return q, scale, float(amax.max())


@pytest.mark.parametrize(
    ("shape", "axis", "transposed"),
    [((37, 300), 1, False), ((300, 37), 0, False), ((300, 37), 1, True), ((37, 300), 0, True),
     ((2, 130, 5), 1, False), ((3, 4, 257), 2, False), ((257,), 0, False), ((256, 128), 0, False)],
)  # fmt: skip
def test_tile_quantize_equals_the_numpy_formula(shape: tuple[int, ...], axis: int, transposed: bool) -> None:
    rng = np.random.default_rng(sum(shape))
    x = _spread(rng, shape[::-1] if transposed else shape)
    x.reshape(-1)[:1] = 0.0
    if transposed:
        x = x.T
    for zeros in (False, True):
        if zeros and x.ndim >= 2:
            x[(slice(0, 1),) * (x.ndim - 1) + (slice(0, 128),)] = 0.0  # an all-zero tile (or most of one)
        for fmt in (E4M3, E5M2):
            want_q, want_s, want_amax = _tile_reference(x, fmt, 128, axis)
            got = tile_quantize(x, fmt, 128, axis)
            assert _bits(got.values) == _bits(want_q)
            assert got.values.shape == x.shape
            assert _bits(got.scale) == _bits(want_s)
            assert got.scale.shape == want_s.shape
            assert got.amax == want_amax


def test_tile_quantize_with_infinities_and_nans() -> None:
    rng = np.random.default_rng(11)
    x = _spread(rng, (6, 260))
    x[1, 5], x[2, 200], x[3, 7] = np.inf, -np.inf, np.nan
    for axis in (0, 1):
        want_q, want_s, want_amax = _tile_reference(x, E5M2, 128, axis)
        got = tile_quantize(x, E5M2, 128, axis)
        assert _bits(got.values) == _bits(want_q)
        assert _bits(got.scale) == _bits(want_s)
        assert np.isnan(got.amax)
        assert np.isnan(want_amax)


@pytest.mark.parametrize(
    ("shape", "transposed"), [((384, 128), False), ((300, 130), False), ((128, 512), True)]
)
def test_block_quantize_equals_the_numpy_formula(shape: tuple[int, int], transposed: bool) -> None:
    rng = np.random.default_rng(shape[0])
    x = _spread(rng, shape[::-1] if transposed else shape)
    x = x.T if transposed else x
    x[:2, :2] = 0.0
    rows, cols = x.shape
    rt, ct = -(-rows // 128), -(-cols // 128)
    xp = np.zeros((rt * 128, ct * 128), np.float32)
    xp[:rows, :cols] = x
    xb = xp.reshape(rt, 128, ct, 128)
    amax = np.maximum(xb.max(axis=(1, 3)), -xb.min(axis=(1, 3)))
    scale = current_scale(amax, E4M3)
    want = saturating_cast((xb * scale[:, None, :, None]).reshape(xp.shape), E4M3, bound=E4M3.max)
    got = block_quantize(x, E4M3, 128)
    assert _bits(got.values) == _bits(want[:rows, :cols])
    assert _bits(got.scale) == _bits(scale)
    assert got.amax == float(amax.max())


def _blockwise_reference(a: np.ndarray, a_inv: np.ndarray, b: np.ndarray, b_inv: np.ndarray) -> np.ndarray:
    """The loop of slice GEMMs and FMAs the block-scaled GEMM ran, written out."""
    k = a.shape[1]
    acc = None
    for t in range(-(-k // 128)):
        lo, hi = 128 * t, min(128 * t + 128, k)
        partial = host_matmul(a[:, lo:hi], b[lo:hi])  # (the trainer's GEMM: BLAS in fixed blocks)
        s = a_inv[:, t : t + 1] * b_inv[t : t + 1, :]
        if acc is None:
            acc = s * partial
            acc += F32(0.0)
        else:
            acc = fma(s, partial, acc)
    assert acc is not None
    return np.asarray(acc, np.float32)


@pytest.mark.parametrize(("m", "k", "n"), [(64, 128, 48), (128, 2048, 96), (200, 512, 130), (33, 300, 20)])
def test_blockwise_matmul_equals_its_slice_loop(m: int, k: int, n: int) -> None:
    rng = np.random.default_rng(k)
    a = tile_quantize(_spread(rng, (m, k)), E4M3, 128, 1)
    b = tile_quantize(_spread(rng, (k, n)), E5M2, 128, 0)
    a_inv, b_inv = (1 / a.scale).astype(np.float32), (1 / b.scale).astype(np.float32)
    want = _blockwise_reference(a.values, a_inv, b.values, b_inv)
    got = blockwise_matmul(a.values, a_inv, b.values, b_inv, 128)
    assert _bits(got) == _bits(want)
    # a held transposed (F-contiguous, as the weight gradient's x^T): the batched path reads it
    # as it lies, and gives its slice loop's bits
    at = np.asfortranarray(a.values)
    assert _bits(blockwise_matmul(at, a_inv, b.values, b_inv, 128)) == _bits(
        _blockwise_reference(at, a_inv, b.values, b_inv)
    )


# ---- the per-tensor cast of an operand ---------------------------------------------------------------
@pytest.mark.parametrize("kind", ["tensorwise", "delayed"])
@pytest.mark.parametrize("role", ["input", "grad"])
def test_operand_cast_and_statistics_equal_the_numpy_passes(kind: str, role: str) -> None:
    rng = np.random.default_rng(5)
    recipe = Fp8Recipe(kind, amax_history=4) if kind == "delayed" else Fp8Recipe(kind)
    s = OperandScaler(recipe, role)
    for step in range(3):
        x = _spread(rng, (8, 16, 32)) * F32(10.0 ** (step - 1))
        if step == 2:
            x[0, 0, :2] = [np.inf, np.nan]
        scale = F32(s.scale) if kind == "delayed" else None
        q = s.quantize(x, 2)
        used = F32(q.scale)
        if scale is not None:
            assert used == scale
        xs = x * used
        want = saturating_cast(xs, s.fmt)
        assert _bits(q.values) == _bits(want)
        stats = s.end_step()
        shares = cast_shares(x, want, s.fmt, xs=xs)
        assert (stats.saturated, stats.flushed, stats.subnormal) == tuple(shares)
        finite = np.abs(x[~np.isnan(x)])
        want_amax = float(np.nanmax(np.abs(x))) if kind == "delayed" else float(np.max(np.abs(x)))
        if kind == "delayed" or not np.isnan(x).any():
            assert stats.amax == want_amax == float(finite.max())
        else:
            assert np.isnan(stats.amax)


def test_a_reshaped_view_reuses_the_steps_cast() -> None:
    # the weight gradient casts x.reshape(-1, d).T and dy.reshape(-1, n) after the forward cast of
    # x and the data gradient's cast of dy: the same memory, so the same values, no second cast
    rng = np.random.default_rng(2)
    x = _spread(rng, (4, 6, 8))
    s = OperandScaler(Fp8Recipe("tensorwise"), "input")
    first = s.quantize(x, 2)
    flat = s.quantize(x.reshape(-1, 8), 1)
    assert np.shares_memory(flat.values, first.values)
    again = s.quantize(x.reshape(-1, 8).T, 1)
    # a C-contiguous copy, as a cast of the transposed view comes out: BLAS may sum a matrix
    # held transposed in another order
    assert again.values.flags.c_contiguous
    assert _bits(again.values) == _bits(saturating_cast(x.reshape(-1, 8).T * F32(first.scale), E4M3))
    other = s.quantize(x[:, :3], 2)  # a slice, not the tensor: cast anew with the step's scale
    assert not np.shares_memory(other.values, first.values)
    assert _bits(other.values) == _bits(saturating_cast(x[:, :3] * F32(first.scale), E4M3))


@pytest.mark.parametrize("kind", ["tensorwise", "delayed", "blockwise"])
@pytest.mark.parametrize("shape", [(3, 50, 40, 70), (2, 64, 128, 256)])
def test_a_linear_layers_three_gemms_equal_the_numpy_passes(kind: str, shape: tuple[int, ...]) -> None:
    # forward, data gradient and weight gradient, against casts written with NumPy and GEMMs on
    # C-contiguous operands (as the casts always came out)
    n, t, d, h = shape
    rng = np.random.default_rng(d)
    x, dy = _spread(rng, (n, t, d)), _spread(rng, (n, t, h))
    w = _spread(rng, (d, h)) * F32(0.01)
    f = Fp8Scaling(Fp8Recipe(kind, amax_history=4) if kind == "delayed" else Fp8Recipe(kind))
    for _ in range(2):  # (delayed: the second step has scales from the first)
        got = [
            f.matmul("fc", x, "input", w, "weight"),
            f.matmul("fc", dy, "grad", w.T, "weight"),
            f.matmul("fc", x.reshape(-1, d).T, "input", dy.reshape(-1, h), "grad"),
        ]
        _ = f.end_step()
    if kind == "blockwise":
        # x^T is cast as it lies (its base along the other axis): the values of the C-contiguous
        # copy's cast, held transposed, and the slice GEMMs read them transposed (BLAS's order
        # for that layout, as the loop below has it too)
        a = tile_quantize(np.ascontiguousarray(x.reshape(-1, d).T), E4M3, 128, 1)
        held = tile_quantize(x.reshape(-1, d).T, E4M3, 128, 1)
        assert _bits(held.values) == _bits(a.values)
        assert held.values.T.flags.c_contiguous
        np.testing.assert_array_equal(held.scale, a.scale)
        b = tile_quantize(dy.reshape(-1, h), E5M2, 128, 0)
        a_inv, b_inv = (1 / a.scale).astype(np.float32), (1 / b.scale).astype(np.float32)
        want = _blockwise_reference(held.values, a_inv, b.values, b_inv)
    else:
        step = f.history["fc.input"]["scale"][-1], f.history["fc.grad"]["scale"][-1]
        sa, sg = F32(step[0]), F32(step[1])
        qa = np.ascontiguousarray(saturating_cast(np.ascontiguousarray(x.reshape(-1, d).T) * sa, E4M3))
        qg = saturating_cast(dy.reshape(-1, h) * sg, E5M2)
        want = host_matmul(qa, qg)
        want *= (F32(1) / sa) * (F32(1) / sg)
    assert _bits(got[2]) == _bits(want)


def test_scaled_round_result_type() -> None:
    r = round_scaled(_a([[1.0, 2.0]]), _a([[4.0]]), E4M3, (1, 2))
    assert isinstance(r, ScaledRound)
    assert r.values.dtype == np.float32


def _numpy_tiles(
    x: np.ndarray, tile: tuple[int, int], fmt: fl.FloatFormat, pow2: bool
) -> tuple[np.ndarray, ...]:
    """Current tile scaling written with NumPy: each tile's amax (a padded reshape's max of |x|),
    current_scale of it, and the door's saturating rounding of NumPy's float32 products."""
    br, bc = tile
    rows, cols = x.shape[-2:]
    nr, nc = -(-rows // br), -(-cols // bc)
    padded = np.zeros((*x.shape[:-2], nr * br, nc * bc), np.float32)
    padded[..., :rows, :cols] = np.abs(x)
    amax = padded.reshape(*x.shape[:-2], nr, br, nc, bc).max(axis=(-3, -1))
    scale = current_scale(amax, fmt, pow2)
    per_value = np.repeat(np.repeat(scale, br, axis=-2), bc, axis=-1)[..., :rows, :cols]
    xs, q = _oracle(x, per_value, fmt)
    return amax, scale, xs, q


@pytest.mark.parametrize("fmt", [E4M3, E5M2, fl.get_format("e2m1")])
@pytest.mark.parametrize("tile", [(1, 128), (128, 1), (1, 7), (5, 1)])
@pytest.mark.parametrize("pow2", [False, True])
def test_current_tiles_in_one_pass_equal_the_numpy_passes(
    fmt: Any, tile: tuple[int, int], pow2: bool
) -> None:
    """round_current_tiles (each tile's amax, scale and cast in one pass): the scales, the values,
    the largest amax and the counts of the NumPy passes, on ragged shapes, 3-d arrays, values
    over many binades, float32 subnormals, zeros and tiles of zeros (their scale from the floor
    1e-12)."""
    from floatlab.rounding import round_current_tiles

    rng = np.random.default_rng(sum(tile) + pow2)
    for shape in ((300, 260), (3, 130, 257), (1, 1)):
        x = _spread(rng, shape)
        x.reshape(-1)[::97] = np.float32(3e-42)  # (float32 subnormals)
        if x.size > 1000:
            x[..., :9, :11] = 0.0  # (whole tiles of zeros)
        got = round_current_tiles(x, fmt, tile, pow2=pow2)
        assert got is not None
        amax, scale, xs, q = _numpy_tiles(x, tile, fmt, pow2)
        assert _bits(got.scale) == _bits(scale)
        assert _bits(got.cast.values) == _bits(q)
        assert got.amax == float(amax.max())
        shares = cast_shares(x, q, fmt, xs=xs)
        n = x.size
        assert got.cast.overflow / n == shares.saturated
        assert (got.cast.zeros_out - got.cast.zeros_in) / n == shares.flushed
        assert got.cast.subnormal / n == shares.subnormal
        assert got.cast.zeros_in == np.count_nonzero(x == 0)


def test_current_tiles_leave_specials_and_other_layouts_to_the_caller() -> None:
    """None where the one pass does not decide: a tile holding an infinity or a NaN, an array of
    zeros alone, a format without an in-place rounding (fnuz), an array not C-contiguous; a tile
    that is neither a row nor a column segment is refused."""
    from floatlab.rounding import round_current_tiles

    x = _spread(np.random.default_rng(3), (64, 64))
    assert round_current_tiles(x, E4M3, (1, 16)) is not None
    for bad in (np.inf, -np.inf, np.nan):
        y = x.copy()
        y[40, 3] = bad
        assert round_current_tiles(y, E4M3, (1, 16)) is None
        assert round_current_tiles(y, E4M3, (16, 1)) is None
    assert round_current_tiles(np.zeros((4, 4), np.float32), E4M3, (1, 2)) is None
    assert round_current_tiles(x, fl.get_format("e4m3fnuz"), (1, 16)) is None
    assert round_current_tiles(x.T, E4M3, (1, 16)) is None
    assert round_current_tiles(x.astype(np.float64), E4M3, (1, 16)) is None
    with pytest.raises(ValueError, match=r"tile=\(4, 4\): expected \(1, k\) along the rows or \(k, 1\)"):
        round_current_tiles(x, E4M3, (4, 4))
