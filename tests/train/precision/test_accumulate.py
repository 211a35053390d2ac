"""The limited-precision accumulator GEMM against an exact oracle: the same sequential algorithm in
rational arithmetic, each step rounded by the specification (round_rational / round_scalar; see
oracles.accumulate_oracle). The compiled loop against the oracle on hostile values and against the
NumPy reference: test_train_accumulate_kernel.py."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from oracles import accumulate_oracle as oracle
from oracles import same_float32_bits as _same

import floatlab as fl
from floatlab.formats import FloatFormat, get_format
from floatlab.train.precision.accumulate import (
    ACC14,
    accumulate_matmul,
    accumulate_matmul_reference,
    accumulator_format,
)


def _e4m3(rng: np.random.Generator, shape: tuple[int, ...], scale: float = 4.0) -> np.ndarray:
    x = rng.normal(0, scale, shape)
    x[rng.random(shape) < 0.15] = 0.0
    out: np.ndarray = fl.round_array(x, "e4m3fn")
    return out


CASES = [
    # (accumulator, promote_every, mode, integers): integers make ties in a narrow accumulator common
    (ACC14, None, "rne", False),
    (ACC14, 4, "rne", False),
    (ACC14, 3, "rtz", True),
    (get_format("bf16"), 5, "rne", True),
    (get_format("bf16"), None, "rna", True),
    (get_format("fp16"), None, "rup", False),
    (get_format("fp16"), 4, "rdown", True),
    (get_format("fp32"), None, "rne", False),
    (get_format("fp32"), 1, "rne", False),
    (FloatFormat(exponent_bits=4, mantissa_bits=5), 3, "rne", True),  # range below the products
]


@pytest.mark.parametrize(("fmt", "every", "mode", "integers"), CASES)
@pytest.mark.parametrize("k", [1, 7, 11])
def test_equals_the_exact_sequential_oracle(
    fmt: FloatFormat, every: int | None, mode: str, integers: bool, k: int
) -> None:
    rng = np.random.default_rng(k * 101 + (every or 0))
    if integers:
        a = rng.integers(-300, 301, (3, k)).astype(np.float64)
        b = rng.integers(-3, 4, (k, 4)).astype(np.float64)
        a[0] = 257.0  # 257 * 1: a tie in bf16 (8 bits) ...
        b[:, 0] = 1.0
    else:
        a, b = _e4m3(rng, (3, k), 8.0), _e4m3(rng, (k, 4), 64.0)
        a[1] = 448.0  # the largest E4M3 values: their products overflow fp16 and the small format
        b[:, 1] = 448.0
    got = accumulate_matmul(a, b, accumulate=fmt, promote_every=every, rounding=mode)
    want = oracle(a, b, fmt, every, mode)
    assert got.dtype == np.float32
    assert _same(got, want), (got, want)


def test_an_overflowed_accumulator_stays_infinite() -> None:
    # fp16's largest value is 65504; 448 * 448 = 200704 overflows it, and inf - 200704 is inf
    a = np.array([[-448.0, 448.0, 448.0, -448.0, -448.0], [1.0, 448.0, -448.0, -1.0, 1.0]])
    b = np.full((5, 1), 448.0)
    got = accumulate_matmul(a, b, accumulate="fp16")
    want = oracle(a, b, get_format("fp16"), None, "rne")
    assert _same(got, want)
    assert got.ravel().tolist() == [-math.inf, math.inf]


def test_the_compiled_loop_and_the_numpy_reference_agree_output_by_output() -> None:
    # the whole GEMM at once, one output at a time, and the readable reference: the same roundings
    rng = np.random.default_rng(7)
    a, b = _e4m3(rng, (3, 300)), _e4m3(rng, (300, 4))
    for every in (None, 7, 128):
        kw = {"accumulate": ACC14, "promote_every": every, "rounding": "rtz"}
        whole = accumulate_matmul(a, b, **kw)  # type: ignore[arg-type]
        one_by_one = np.array(
            [[accumulate_matmul(a[i : i + 1], b[:, j : j + 1], **kw)[0, 0] for j in range(4)]  # type: ignore[arg-type]
             for i in range(3)]
        )  # fmt: skip
        assert _same(whole, one_by_one)
        assert _same(whole, accumulate_matmul_reference(a, b, **kw))  # type: ignore[arg-type]
    assert _same(accumulate_matmul(a[:1], b[:, :1]), oracle(a[:1], b[:, :1], fl.FP32, None, "rne"))


def test_fp32_without_promotion_is_numpys_sequential_float32_loop() -> None:
    rng = np.random.default_rng(1)
    a = fl.round_array(rng.normal(0, 1, (16, 300)), "bf16").astype(np.float32)
    b = fl.round_array(rng.normal(0, 1, (300, 12)), "bf16").astype(np.float32)
    acc = np.zeros((16, 12), np.float32)
    for k in range(300):
        acc = acc + a[:, k : k + 1] * b[k : k + 1, :]  # a bf16 product is exact in float32
    assert _same(accumulate_matmul(a, b), acc)
    assert _same(accumulate_matmul(a, b, accumulate="fp32", promote_every=None), acc)


def test_batched_leading_axes_broadcast_like_matmul() -> None:
    rng = np.random.default_rng(2)
    a, b = _e4m3(rng, (2, 1, 3, 9)), _e4m3(rng, (3, 9, 4))
    got = accumulate_matmul(a, b, accumulate=ACC14, promote_every=4)
    assert got.shape == (2, 3, 3, 4)
    for i in range(2):
        for j in range(3):
            assert _same(got[i, j], oracle(a[i, 0], b[j], ACC14, 4, "rne"))
    flat = accumulate_matmul(a[0], b[0], accumulate=ACC14)  # a stack times one matrix
    assert _same(accumulate_matmul(a[:, 0], b[0], accumulate=ACC14)[0], flat[0])


def test_a_14_bit_accumulator_stalls_and_promotion_fixes_it() -> None:
    # 2^15 products 2^-6: the partial sum grows exactly up to 2^14 * 2^-6 = 256, where the
    # product is half an ulp (ulp 2^-5 in [256, 512)), a tie that goes to the even 256: a stall
    k = 2**15
    a, b = np.full((1, k), 2.0**-3), np.full((k, 1), 2.0**-3)
    assert float(accumulate_matmul(a, b, accumulate=ACC14)[0, 0]) == 256.0
    assert float(accumulate_matmul(a, b, accumulate=ACC14, rounding="rtz")[0, 0]) == 256.0
    # every 128 products: each chunk sums exactly to 2, and the fp32 total to the exact 512
    assert float(accumulate_matmul(a, b, accumulate=ACC14, promote_every=128)[0, 0]) == 512.0
    # in 4096 of them nothing is lost: 14 bits hold every multiple of 2^-6 up to 256
    assert float(accumulate_matmul(a[:, :4096], b[:4096], accumulate=ACC14)[0, 0]) == 64.0


def test_4096_products_drift_and_promotion_brings_the_error_below_2_to_the_minus_13() -> None:
    # the same product 1.125 = 1.001b four thousand times: from 2048 on (ulp 2^-2) each addition
    # rounds, from 4096 on (ulp 2^-1) 1.125 becomes 1 (2.25 ulps rounded to 2)
    k = 4096
    a, b = np.full((1, k), 1.125), np.ones((k, 1))
    exact = Fraction(9, 8) * k
    drifted = accumulate_matmul(a, b, accumulate=ACC14)
    assert _same(drifted, oracle(a, b, ACC14, None, "rne"))
    assert abs(Fraction(float(drifted[0, 0])) - exact) / exact > Fraction(1, 20)
    promoted = accumulate_matmul(a, b, accumulate=ACC14, promote_every=128)
    assert Fraction(float(promoted[0, 0])) == exact  # each chunk's 144 is exact in 14 bits
    # random fp8 products: the exact oracle, and the error against the exact sum below 2^-13
    rng = np.random.default_rng(3)
    a = fl.round_array(rng.uniform(0, 1, (1, k)), "e4m3fn")
    b = fl.round_array(rng.uniform(0, 1, (k, 2)), "e4m3fn")
    exact_sums = [sum(map(Fraction, (a[0] * b[:, j]).tolist())) for j in range(2)]  # exact products
    for every, bound in ((None, None), (128, Fraction(1, 2**13))):
        got = accumulate_matmul(a, b, accumulate=ACC14, promote_every=every)
        assert _same(got, oracle(a, b, ACC14, every, "rne"))
        errors = [abs(Fraction(float(got[0, j])) - e) / e for j, e in enumerate(exact_sums)]
        if bound is None:
            assert max(errors) > Fraction(1, 2**10)
        else:
            assert max(errors) < bound


def test_a_partial_last_chunk_is_promoted_too() -> None:
    a, b = np.ones((1, 10)), np.ones((10, 1))
    assert float(accumulate_matmul(a, b, accumulate="e4m3fn", promote_every=4)[0, 0]) == 10.0  # 4 + 4 + 2
    assert float(accumulate_matmul(a, b, accumulate="e4m3fn")[0, 0]) == 10.0
    assert float(accumulate_matmul(np.ones((1, 20)), np.ones((20, 1)), accumulate="e4m3fn")[0, 0]) == 16.0


def test_empty_reduction_and_named_accumulators() -> None:
    assert accumulate_matmul(np.ones((2, 0)), np.ones((0, 3)), promote_every=4).tolist() == [[0.0] * 3] * 2
    assert accumulator_format("ACC14") is ACC14
    assert accumulator_format(FloatFormat(exponent_bits=8, mantissa_bits=13)) == ACC14


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"promote_every": 0}, "promote_every=0: expected None or an integer of at least 1"),
        ({"promote_every": True}, "promote_every=True"),
        ({"promote_every": 1.5}, "promote_every=1.5"),
        ({"accumulate": "fp64"}, "accumulator format fp64: expected a format within fp32"),
        ({"accumulate": "nope"}, "nope"),
        ({"rounding": "stochastic"}, "expected a deterministic mode"),
        ({"rounding": "up"}, "up"),
    ],
)
def test_bad_arguments_are_one_line_errors(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        accumulate_matmul(np.ones((2, 3)), np.ones((3, 2)), **kwargs)  # type: ignore[arg-type]
    assert "\n" not in str(info.value)


def test_bad_shapes_are_one_line_errors() -> None:
    with pytest.raises(ValueError, match="inner dimensions differ"):
        accumulate_matmul(np.ones((2, 3)), np.ones((4, 2)))
    with pytest.raises(ValueError, match="expected an array of 2 or more dimensions"):
        accumulate_matmul(np.ones(3), np.ones((3, 2)))
