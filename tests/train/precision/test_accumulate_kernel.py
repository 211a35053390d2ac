"""The compiled narrow-accumulator loop (floatlab.rounding.accumulate_products, behind
accumulate_matmul and gemm(accumulate=...)): against the exact rational oracle on small hostile
shapes (accumulator overflow, zeros, cancellation, subnormal products, partial last chunks, K = 1),
against the readable NumPy reference bit for bit on medium shapes, and with hypothesis on random
fp32 operands."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracles import accumulate_oracle, same_float32_bits

import floatlab as fl
from floatlab.formats import FloatFormat, get_format
from floatlab.rounding import accumulate_products
from floatlab.train.precision.accumulate import ACC14, accumulate_matmul, accumulate_matmul_reference
from floatlab.train.precision.matmul import gemm

BF16, FP16 = get_format("bf16"), get_format("fp16")
MODES = ("rne", "rna", "rtz", "rup", "rdown", "rodd")


def _signed(rng: np.random.Generator, shape: tuple[int, ...], lo: float, hi: float) -> np.ndarray:
    """fp32 values of random sign with magnitudes 2^u, u uniform in [lo, hi), 15% zeros."""
    x = np.exp2(rng.uniform(lo, hi, shape)) * rng.choice([-1.0, 1.0], shape)
    x[rng.random(shape) < 0.15] = 0.0
    out: np.ndarray = fl.round_array(x, "fp32").astype(np.float32)
    return out


def _operands(kind: str, rng: np.random.Generator, m: int, k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Operands whose products exercise one part of the accumulator."""
    if kind == "e4m3":  # fp8 products, from fp16-subnormal (2^-18) to 448^2
        a = fl.round_array(rng.normal(0, 8, (m, k)), "e4m3fn")
        b = fl.round_array(rng.normal(0, 64, (k, n)), "e4m3fn")
        a[rng.random((m, k)) < 0.15] = 0.0
        return a.astype(np.float32), b.astype(np.float32)
    if kind == "tiny":  # products 2^-150 .. 2^-120: ACC14's subnormals and below fp32's smallest
        return _signed(rng, (m, k), -75, -60), _signed(rng, (k, n), -75, -60)
    if kind == "huge":  # products 2^120 .. 2^128: ACC14 and the fp32 total overflow, inf - inf
        return _signed(rng, (m, k), 60, 64), _signed(rng, (k, n), 60, 64)
    # integers: ties in a narrow accumulator and exact cancellation to zero are common
    a = rng.integers(-300, 301, (m, k)).astype(np.float32)
    b = rng.integers(-3, 4, (k, n)).astype(np.float32)
    a[0] = 257.0  # 257 * 1: a tie in bf16's 8 bits
    b[:, 0] = 1.0
    if m > 1:
        a[1, : k - k % 2] = np.tile([5.0, -5.0], k // 2)  # sums that return to exactly zero
    return a, b


@pytest.mark.parametrize("fmt", [ACC14, BF16, FP16])
@pytest.mark.parametrize("mode", ["rne", "rtz"])
@pytest.mark.parametrize("kind", ["e4m3", "tiny", "huge", "integers"])
@pytest.mark.parametrize(("k", "every"), [(1, None), (1, 4), (9, None), (9, 4), (13, 1), (13, 5)])
def test_the_kernel_equals_the_exact_oracle(
    fmt: FloatFormat, mode: str, kind: str, k: int, every: int | None
) -> None:
    rng = np.random.default_rng(1000 * k + (every or 0) + len(kind))
    a, b = _operands(kind, rng, 3, k, 4)
    got = accumulate_products(a[None], b[None], fmt, mode, promote_every=every)[0]
    assert got.dtype == np.float32
    want = accumulate_oracle(a, b, fmt, every, mode)
    assert same_float32_bits(got, want), (got, want)


def _value_pool(rng: np.random.Generator) -> np.ndarray:
    """fp32 values whose products (exact in float64) reach every corner of a rounding into a
    format within fp32: random bit patterns (subnormals too), low-precision values and integers
    (ties), powers of two, the largest values of the formats and their neighbours, specials."""
    bits = rng.integers(0, 0x7F800000, 600, dtype=np.uint32).view(np.float32)
    low = np.concatenate(
        [
            fl.round_array(rng.normal(0, 4, 200), "e4m3fn"),
            fl.round_array(rng.normal(0, 300, 200), "bf16"),
            rng.integers(-4097, 4098, 200).astype(np.float64),
            np.exp2(np.arange(-149.0, 128.0)),
            [65504.0, 65520.0, 65536.0, 3.3895313892515355e38, 3.4028234663852886e38, 2.0**-24, 2.0**-25],
            [1 + 2.0**-13, 1 + 2.0**-14, 1 + 3 * 2.0**-14, 1 - 2.0**-15, 1.5 * 2.0**-126, 2.0**-140],
            [np.inf, np.nan],
        ]
    ).astype(np.float32)
    pool = np.concatenate([bits, low])
    signed: np.ndarray = pool * rng.choice(np.array([-1.0, 1.0], np.float32), pool.size)
    return signed


IEEE_ACCUMULATORS = [
    ACC14,
    BF16,
    FP16,
    get_format("fp32"),
    get_format("tf32"),
    get_format("e5m2"),
    FloatFormat(exponent_bits=3, mantissa_bits=2),  # a tiny range: subnormal results and overflow everywhere
]


@pytest.mark.parametrize("fmt", IEEE_ACCUMULATORS, ids=lambda f: f.name)
@pytest.mark.parametrize("mode", MODES)
def test_one_product_is_rounded_as_the_rounding_door_rounds_it(fmt: FloatFormat, mode: str) -> None:
    # K = 1: each output is 0 + a product rounded once into the accumulator, by the lean integer
    # rounding of IEEE formats, which must give round_array's bits (NaN payloads included)
    rng = np.random.default_rng(len(mode) + fmt.bits)
    pool = _value_pool(rng)
    a, b = rng.choice(pool, (1, 2048, 1)), rng.choice(pool, (1, 1, 64))
    got = accumulate_products(a, b, fmt, mode)
    with np.errstate(invalid="ignore"):
        prod = a[0].astype(np.float64) * b[0].astype(np.float64)  # (2048, 64), exact
    # 0 + a zero product is +0, or -0 toward -inf when the product is -0
    zero = np.where(np.signbit(prod) & (mode == "rdown"), -0.0, 0.0)
    want = fl.round_array(np.where(prod == 0, zero, prod), fmt, mode).astype(np.float32)
    assert np.array_equal(got[0].view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("mode", ["rna", "rup", "rdown", "rodd"])
def test_the_other_deterministic_modes_equal_the_exact_oracle(mode: str) -> None:
    # rdown gives -0 to a sum that cancels exactly; rodd and rup never stall at a tie
    rng = np.random.default_rng(5)
    for fmt, kind in ((ACC14, "e4m3"), (BF16, "integers"), (FP16, "tiny"), (ACC14, "huge")):
        a, b = _operands(kind, rng, 3, 10, 3)
        for every in (None, 3):
            got = accumulate_products(a[None], b[None], fmt, mode, promote_every=every)[0]
            assert same_float32_bits(got, accumulate_oracle(a, b, fmt, every, mode)), (fmt.name, kind, every)


@pytest.mark.parametrize("fmt", [ACC14, BF16, FP16, get_format("fp32")], ids=lambda f: f.name)
def test_a_sum_that_float64_rounds_onto_a_midpoint_is_rounded_once(fmt: FloatFormat) -> None:
    # 1 + h(1 - 2^-46), h half the accumulator's ulp at 1, rounds in float64 onto the midpoint 1 + h.
    # The exact sum lies below it, so to nearest it is 1, while the float64 sum rounded again is a
    # tie (1 + 2h to away). Rounding to odd at 53 bits keeps the side.
    h = 2.0**-fmt.precision
    x = np.float32(2.0**-7 * (1 + 2.0**-23))
    y = np.float32(h / 2.0**-7 * (1 - 2.0**-23))  # x * y = h (1 - 2^-46), exact in float64
    a = np.array([[1.0, x], [-1.0, -x]], np.float32)
    b = np.array([[1.0], [y]], np.float32)
    for mode in ("rne", "rna", "rodd", "rup", "rdown"):
        got = accumulate_products(a[None], b[None], fmt, mode)[0]
        assert same_float32_bits(got, accumulate_oracle(a, b, fmt, None, mode)), mode
    assert accumulate_products(a[None], b[None], fmt, "rna")[0, :, 0].tolist() == [1.0, -1.0]


def test_a_sum_that_cancels_to_zero_has_ieee_signs() -> None:
    a = np.array([[5.0, -5.0], [-0.0, 0.0], [-0.0, -0.0]], np.float32)
    b = np.array([[1.0], [1.0]], np.float32)
    for mode, first in (("rne", False), ("rdown", True)):
        got = accumulate_products(a[None], b[None], ACC14, mode)[0, :, 0]
        # x - x is +0 (-0 toward -inf); -0 + +0 is +0 (-0 toward -inf); -0 + -0 stays -0
        assert np.signbit(got).tolist() == [first] * 3  # the accumulator starts at +0
    promoted = accumulate_products(a[None], b[None], ACC14, "rdown", promote_every=2)[0, :, 0]
    assert np.signbit(promoted).tolist() == [False, False, False]  # +0 total + -0, in rne


@pytest.mark.parametrize("fmt", [ACC14, BF16, FP16, get_format("fp32"), get_format("e5m2")])
@pytest.mark.parametrize("mode", MODES)
def test_the_kernel_equals_the_numpy_reference_on_medium_shapes(fmt: FloatFormat, mode: str) -> None:
    rng = np.random.default_rng(len(fmt.name) + len(mode))
    a = fl.round_array(rng.normal(0, 2, (2, 24, 300)), "e4m3fn")
    b = fl.round_array(rng.normal(0, 2, (300, 40)), "e4m3fn")
    a[0, 0, ::7] = 0.0
    for every in (None, 7, 128):
        kw: dict[str, Any] = {"accumulate": fmt, "promote_every": every, "rounding": mode}
        got = accumulate_matmul(a, b, **kw)
        assert got.shape == (2, 24, 40)
        assert same_float32_bits(got, accumulate_matmul_reference(a, b, **kw)), every


@pytest.mark.parametrize("name", ["e4m3fn", "e4m3fnuz"])
def test_accumulators_without_infinities_take_the_numpy_path(name: str) -> None:
    # no IEEE infinities: the compiled loop refuses them, accumulate_matmul sums them with NumPy
    fmt = get_format(name)
    rng = np.random.default_rng(6)
    a, b = _operands("integers", rng, 3, 9, 4)
    a[2] = 300.0  # the sums pass e4m3's largest value (448 fn, 240 fnuz): rtz holds them there
    b[:, 3] = 3.0
    for every in (None, 4):
        got = accumulate_matmul(a, b, accumulate=fmt, promote_every=every, rounding="rtz")
        assert same_float32_bits(got, accumulate_oracle(a, b, fmt, every, "rtz"))
    with pytest.raises(
        ValueError, match=f"accumulator format {fmt.name}: expected an IEEE format within fp32"
    ):
        accumulate_products(a[None], b[None], fmt)


def test_infinite_and_nan_operands_agree_with_the_reference() -> None:
    # inf * 0 is NaN, inf + -inf is NaN: the kernel's specials are the reference's
    rng = np.random.default_rng(3)
    a = fl.round_array(rng.normal(0, 2, (6, 20)), "e4m3fn").astype(np.float32)
    b = fl.round_array(rng.normal(0, 2, (20, 5)), "e4m3fn").astype(np.float32)
    a[0, 3], a[1, 4], a[2, 5], b[6, 1], b[7, 2] = np.inf, -np.inf, np.nan, 0.0, np.inf
    a[3, 7] = 0.0
    for every in (None, 4):
        got = accumulate_matmul(a, b, accumulate=FP16, promote_every=every)
        want = accumulate_matmul_reference(a, b, accumulate=FP16, promote_every=every)
        assert same_float32_bits(got, want)
        assert np.isnan(got).any()
        assert np.isinf(got).any()


def test_float32_2d_batched_and_strided_operands() -> None:
    rng = np.random.default_rng(4)
    a = fl.round_array(rng.normal(0, 1, (2, 3, 5, 17)), "bf16").astype(np.float32)
    b = np.asfortranarray(fl.round_array(rng.normal(0, 1, (17, 6)), "bf16").astype(np.float32))
    assert not b.flags.c_contiguous
    got = accumulate_matmul(a, b, accumulate=ACC14, promote_every=4)  # (..., M, K) @ (K, N)
    assert got.shape == (2, 3, 5, 6)
    for i in range(2):
        for j in range(3):
            assert same_float32_bits(got[i, j], accumulate_oracle(a[i, j], b, ACC14, 4, "rne"))
    at = np.ascontiguousarray(a[0, 0].T).T  # a transposed view
    assert same_float32_bits(
        accumulate_matmul(at, b, accumulate=ACC14), accumulate_oracle(at, b, ACC14, None, "rne")
    )
    # float16 and float64 operands: values of fp32 already, taken exactly
    h = a[0, 0].astype(np.float16)
    want = accumulate_oracle(h.astype(np.float32), b, BF16, None, "rtz")
    assert same_float32_bits(
        accumulate_matmul(h, b.astype(np.float64), accumulate=BF16, rounding="rtz"), want
    )


def test_float64_operands_are_rounded_once_into_fp32_first() -> None:
    x = np.array([[1 + 2.0**-30, 1.0]])  # 1 + 2^-30 is 1 in fp32
    got = accumulate_matmul(x, np.ones((2, 1)), accumulate="bf16")
    assert got.item() == 2.0


def test_empty_shapes() -> None:
    assert accumulate_products(
        np.ones((1, 2, 0), np.float32), np.ones((1, 0, 3), np.float32), ACC14
    ).tolist() == [[[0.0] * 3] * 2]
    assert accumulate_matmul(np.ones((0, 4)), np.ones((4, 3)), accumulate=ACC14).shape == (0, 3)
    assert accumulate_matmul(np.ones((2, 4)), np.ones((4, 0)), accumulate=ACC14, promote_every=2).shape == (
        2,
        0,
    )


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (
            (np.ones((1, 2, 3)), np.ones((1, 3, 2))),
            {},
            r"a of dtype float64 and shape \(1, 2, 3\): expected a 3-d float32",
        ),
        (
            (np.ones((2, 3), np.float32), np.ones((1, 3, 2), np.float32)),
            {},
            r"a of dtype float32 and shape \(2, 3\): expected",
        ),
        ((np.ones((1, 2, 3), np.float32), np.ones((1, 4, 2), np.float32)), {}, r"shapes \(1, 2, 3\) and"),
        ((np.ones((2, 2, 3), np.float32), np.ones((3, 3, 2), np.float32)), {}, "expected .B, M, K., .B or 1"),
        (
            (np.ones((1, 2, 3), np.float32), np.ones((1, 3, 2), np.float32)),
            {"promote_every": 0},
            "promote_every=0",
        ),
        (
            (np.ones((1, 2, 3), np.float32), np.ones((1, 3, 2), np.float32)),
            {"rounding": "stochastic"},
            "determin",
        ),
    ],
)
def test_the_building_block_refuses_bad_input_in_one_line(
    args: tuple[np.ndarray, np.ndarray], kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message) as info:
        accumulate_products(*args, ACC14, **kwargs)
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="accumulator format fp64: expected an IEEE format within fp32"):
        accumulate_products(np.ones((1, 2, 3), np.float32), np.ones((1, 3, 2), np.float32), "fp64")


_FP32_VALUES = st.floats(width=32, allow_nan=False, allow_infinity=False, allow_subnormal=True)


@settings(max_examples=60, deadline=None)
@given(
    m=st.integers(1, 3),
    k=st.integers(0, 24),
    n=st.integers(1, 3),
    fmt=st.sampled_from([ACC14, BF16, FP16, get_format("fp32")]),
    mode=st.sampled_from(MODES),
    every=st.one_of(st.none(), st.integers(1, 9)),
    data=st.data(),
)
def test_hypothesis_fp32_operands_equal_the_exact_oracle(
    m: int, k: int, n: int, fmt: FloatFormat, mode: str, every: int | None, data: st.DataObject
) -> None:
    a = np.array(data.draw(st.lists(_FP32_VALUES, min_size=m * k, max_size=m * k)), np.float32).reshape(m, k)
    b = np.array(data.draw(st.lists(_FP32_VALUES, min_size=k * n, max_size=k * n)), np.float32).reshape(k, n)
    got = accumulate_matmul(a, b, accumulate=fmt, promote_every=every, rounding=mode)
    assert same_float32_bits(got, accumulate_oracle(a, b, fmt, every, mode))


# ---- gemm(accumulate=..., promote_every=...) ------------------------------------------------------
def test_gemm_with_a_narrow_accumulator_equals_the_oracle_on_fp16_inputs() -> None:
    rng = np.random.default_rng(8)
    a, b = rng.normal(0, 1, (5, 70)), rng.normal(0, 1, (70, 6))
    a16, b16 = a.astype(np.float16), b.astype(np.float16)  # numpy's own float64 -> fp16 rounding
    for every in (None, 32):
        want = accumulate_oracle(a16.astype(np.float32), b16.astype(np.float32), ACC14, every, "rne")
        got = gemm(a, b, "fp16", "fp32", accumulate="acc14", promote_every=every)
        assert same_float32_bits(got, want)
    # the epilogue as without an accumulator: scale and bias in fp32, one rounding of the output
    bias = rng.normal(0, 1, 6).astype(np.float32)
    acc = accumulate_oracle(a16.astype(np.float32), b16.astype(np.float32), BF16, 16, "rne").astype(
        np.float32
    )
    want16 = (acc * np.float32(0.5) + bias).astype(np.float16)
    got16 = gemm(a, b, "fp16", bias=bias, alpha=0.5, accumulate="bf16", promote_every=16)
    assert same_float32_bits(got16, want16)


def test_gemm_without_an_accumulator_is_unchanged() -> None:
    rng = np.random.default_rng(9)
    a, b = rng.normal(0, 1, (4, 33)).astype(np.float32), rng.normal(0, 1, (33, 3)).astype(np.float32)
    want = (a.astype(np.float16).astype(np.float32) @ b.astype(np.float16).astype(np.float32)).astype(
        np.float16
    )
    assert same_float32_bits(gemm(a, b, "fp16"), want)


def test_gemm_accumulator_stall() -> None:
    a = np.full((1, 32768), 0.125, np.float32)
    b = np.full((32768, 1), 0.125, np.float32)
    assert gemm(a, b, "fp16", "fp32").item() == 512.0
    assert gemm(a, b, "fp16", "fp32", accumulate="acc14").item() == 256.0
    assert gemm(a, b, "fp16", "fp32", accumulate=ACC14, promote_every=128).item() == 512.0
    assert math.isinf(gemm(np.full((1, 3), 256.0), np.full((3, 1), 256.0), "fp32", accumulate="fp16").item())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"accumulate": "nope"}, "nope"),
        ({"accumulate": "fp64"}, "accumulator format fp64"),
        (
            {"accumulate": "acc14", "promote_every": 0},
            "promote_every=0: expected None or an integer of at least 1",
        ),
        ({"accumulate": "acc14", "promote_every": 1.5}, "promote_every=1.5"),
        ({"accumulate": "acc14", "promote_every": "128"}, "promote_every='128'"),
        ({"accumulate": "acc14", "promote_every": True}, "promote_every=True"),
        ({"promote_every": 128}, "promote_every=128 needs an accumulator format"),
    ],
)
def test_gemm_refuses_bad_accumulator_options_in_one_line(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        gemm(np.ones((2, 3)), np.ones((3, 2)), "fp16", **kwargs)
    assert "\n" not in str(info.value)
