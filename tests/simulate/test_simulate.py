"""The simulators, checked against independent oracles.

Oracles: exact Fraction arithmetic rounded by the scalar reference (round_rational); numpy's
float16 and float32 and ml_dtypes' bfloat16 arithmetic, which are correctly rounded for + - * /
and sqrt in round to nearest even (float16 and bfloat16 compute in float32 and round once more,
innocuous since 24 >= 2p + 2); np.add.accumulate, which sums left to right in the array's type;
math.fsum; np.frexp with the format's constants.
"""

from __future__ import annotations

import functools
import json
import math
import zlib
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import numpy.typing as npt
import pytest

import floatlab.cli as cli_pkg
from floatlab import simulate as sim
from floatlab.cli import simulate_cmds
from floatlab.formats import FloatFormat, get_format
from floatlab.rounding import (
    odd_div,
    odd_sqrt,
    odd_sum,
    random_bits_at,
    round_array,
    round_array_with_flags,
    round_rational,
    round_scalar,
)
from floatlab.simulate import accumulation
from floatlab.text import render
from floatlab.text.simulate import accumulation_note

F64 = npt.NDArray[np.float64]
Main = Callable[[list[str] | None], int]
DETERMINISTIC = ("rne", "rna", "rtz", "rup", "rdown", "rodd")
SMALL_FORMATS = (
    "fp16",
    "bf16",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3fnuz",
    "float6_e2m3fn",
    "float4_e2m1fn",
)


# ---- oracle helpers --------------------------------------------------------------------------------
def code_value(code: int, f: FloatFormat) -> float:
    """The float64 of a code, from the format's bit layout (inf, NaN and -0 included)."""
    negative = bool(code & f.sign_mask)
    if f.is_nan_code(code):
        return math.nan
    if f.has_inf and code & (f.sign_mask - 1) == f.inf_code:
        return -math.inf if negative else math.inf
    mag = float(f.code_magnitude(code))
    return -mag if negative else mag


def ref(q: Fraction, f: FloatFormat, mode: str, *, negative_zero: bool = False, **kw: Any) -> float:
    """The exact value ``q`` rounded once by the scalar reference."""
    return code_value(round_rational(q, f, mode, negative_zero=negative_zero, **kw)[0], f)


@functools.cache
def finite_values(f: FloatFormat) -> F64:
    """Every finite value of a format of at most 16 bits, both signs, as float64."""
    codes = [c for c in range(1 << f.bits) if not f.is_nan_code(c)]
    vals = np.array([code_value(c, f) for c in codes])
    out: F64 = vals[np.isfinite(vals)]
    return out


def sample(f: FloatFormat, n: int, rng: np.random.Generator) -> F64:
    """n values of the format: random codes, values with few significant bits (ties), boundaries."""
    if f.bits <= 16:
        pool = finite_values(f)
        vals = rng.choice(pool, n)
    else:  # fp32-like: random float32 bit patterns, cut to the format's fraction bits
        bits = rng.integers(0, 0x7F800000, n, dtype=np.uint32) & ~np.uint32((1 << (23 - f.mantissa_bits)) - 1)
        vals = bits.view(np.float32).astype(np.float64) * rng.choice([-1.0, 1.0], n)
    k = n // 3
    # few significant bits give exact results, ties and round-trips through the binade edges
    small = rng.integers(1, 16, k) * np.exp2(rng.integers(f.emin - 2, f.emax - 3, k).astype(np.float64))
    vals[:k] = np.where(rng.random(k) < 0.5, -small, small)
    stored = np.asarray(round_array(vals, f, "rne"))  # on the grid (saturating nothing)
    return np.where(np.isfinite(stored), stored, 1.0)


def same(a: float, b: float) -> bool:
    """Equal as floats with the same sign of zero; NaN equals NaN."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def assert_same(got: npt.ArrayLike, want: list[float], what: str) -> None:
    g = np.asarray(got, dtype=np.float64).reshape(-1).tolist()
    bad = [(i, x, y) for i, (x, y) in enumerate(zip(g, want, strict=True)) if not same(x, y)]
    assert not bad, f"{what}: {len(bad)} mismatches, first {bad[:3]}"


def exact_sqrt(q: Fraction) -> Fraction:
    """sqrt(q) when it is rational, else a rational strictly inside a bracket finer than any
    rounding boundary of the formats tested, so it rounds as sqrt(q) does in every mode."""
    n, d = q.numerator, q.denominator  # d is a power of two
    big = n * d * 4**400
    s = math.isqrt(big)
    if s * s == big:
        return Fraction(s, d * 2**400)
    return Fraction(2 * s + 1, 2 * d * 2**400)


def zero_sum_negative(x: float, y: float, mode: str) -> bool:
    """IEEE 754 6.3: the sign of an exact zero sum."""
    if x == 0 and y == 0 and math.copysign(1, x) == math.copysign(1, y):
        return math.copysign(1, x) < 0
    return mode == "rdown"


def ref_binary(op: str, x: float, y: float, f: FloatFormat, mode: str, **kw: Any) -> float:
    fx, fy = Fraction(x), Fraction(y)
    if op == "add":
        return ref(fx + fy, f, mode, negative_zero=zero_sum_negative(x, y, mode), **kw)
    if op == "sub":
        return ref(fx - fy, f, mode, negative_zero=zero_sum_negative(x, -y, mode), **kw)
    neg = (math.copysign(1, x) < 0) != (math.copysign(1, y) < 0)
    if op == "mul":
        return ref(fx * fy, f, mode, negative_zero=neg, **kw)
    assert op == "div"
    return ref(fx / fy, f, mode, negative_zero=neg, **kw)


OPS: dict[str, Callable[..., F64]] = {"add": sim.add, "sub": sim.sub, "mul": sim.mul, "div": sim.div}


# ---- correctly rounded arithmetic --------------------------------------------------------------------
@pytest.mark.parametrize("fmt", [*SMALL_FORMATS, "tf32", "fp32"])
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
def test_binary_ops_round_the_exact_result_once_in_every_mode(fmt: str, op: str) -> None:
    f = get_format(fmt)
    rng = np.random.default_rng(zlib.crc32(f"{fmt} {op}".encode()))  # str hash() varies per process
    a, b = sample(f, 240, rng), sample(f, 240, rng)
    if op == "add":  # updates half an ulp and a quarter ulp away: ties and near-ties
        e = np.frexp(a[:40])[1].astype(np.float64) - 1 - f.mantissa_bits
        b[:40] = np.exp2(np.maximum(e - rng.integers(1, 3, 40), f.emin - f.mantissa_bits)) * np.sign(
            a[:40] + 0.5
        )
    if op == "div":
        b = np.where(b == 0, 1.0, b)
    for mode in DETERMINISTIC:
        got = OPS[op](a, b, f, mode)
        want = [ref_binary(op, x, y, f, mode) for x, y in zip(a.tolist(), b.tolist(), strict=True)]
        assert_same(got, want, f"{op} {fmt} {mode}")


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "float8_e5m2", "tf32", "fp32"])
def test_fma_rounds_once(fmt: str) -> None:
    f = get_format(fmt)
    rng = np.random.default_rng(7)
    a, b, c = sample(f, 200, rng), sample(f, 200, rng), sample(f, 200, rng)
    c[:50] = -np.asarray(sim.mul(a[:50], b[:50], f, "rtz"))  # near-cancellation: the fused sum keeps the tail
    for mode in DETERMINISTIC:
        got = sim.fma(a, b, c, f, mode)
        want = []
        for x, y, z in zip(a.tolist(), b.tolist(), c.tolist(), strict=True):
            p = (
                math.copysign(0.0, x) * math.copysign(1.0, y) if x * y == 0 else x * y
            )  # exact (<= 26+26 bits)
            q = Fraction(x) * Fraction(y) + Fraction(z)
            want.append(ref(q, f, mode, negative_zero=zero_sum_negative(p, z, mode)))
        assert_same(got, want, f"fma {fmt} {mode}")


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "float8_e4m3fn", "tf32", "fp32"])
def test_sqrt_rounds_once(fmt: str) -> None:
    f = get_format(fmt)
    rng = np.random.default_rng(11)
    a = np.abs(sample(f, 300, rng))
    a[:20] = np.array([k * k for k in range(1, 21)], dtype=np.float64)  # exact roots
    a = np.asarray(round_array(a, f, "rne"))
    for mode in DETERMINISTIC:
        got = sim.sqrt(a, f, mode)
        want = [x if x == 0 else ref(exact_sqrt(Fraction(x)), f, mode) for x in a.tolist()]
        assert_same(got, want, f"sqrt {fmt} {mode}")


def _all_fp16_pairs(
    n: int, rng: np.random.Generator
) -> tuple[npt.NDArray[np.float16], npt.NDArray[np.float16]]:
    codes = rng.integers(0, 1 << 16, (2, n), dtype=np.uint16)
    return codes[0].view(np.float16), codes[1].view(np.float16)


def assert_bits_equal(got: npt.ArrayLike, want: npt.ArrayLike, what: str) -> None:
    g = np.asarray(got, dtype=np.float64)
    w = np.asarray(want, dtype=np.float64)
    both_nan = np.isnan(g) & np.isnan(w)
    ok = both_nan | ((g == w) & (np.signbit(g) == np.signbit(w)))
    assert ok.all(), f"{what}: {np.count_nonzero(~ok)} mismatches, e.g. got {g[~ok][:3]} want {w[~ok][:3]}"


def test_fp16_nearest_even_matches_numpy_float16_on_random_codes() -> None:
    a, b = _all_fp16_pairs(60_000, np.random.default_rng(1))  # zeros, subnormals, inf and NaN included
    with np.errstate(all="ignore"):
        assert_bits_equal(sim.add(a, b, "fp16"), a + b, "add")
        assert_bits_equal(sim.sub(a, b, "fp16"), a - b, "sub")
        assert_bits_equal(sim.mul(a, b, "fp16"), a * b, "mul")
        assert_bits_equal(sim.div(a, b, "fp16"), a / b, "div")
        assert_bits_equal(sim.sqrt(a, "fp16"), np.sqrt(a), "sqrt")


def test_bf16_nearest_even_matches_ml_dtypes() -> None:
    rng = np.random.default_rng(2)
    codes = rng.integers(0, 1 << 16, (2, 40_000), dtype=np.uint16)
    a, b = codes[0].view(ml_dtypes.bfloat16), codes[1].view(ml_dtypes.bfloat16)
    with np.errstate(all="ignore"):
        assert_bits_equal(sim.add(a, b, "bf16"), a + b, "add")
        assert_bits_equal(sim.mul(a, b, "bf16"), a * b, "mul")
        assert_bits_equal(sim.div(a, b, "bf16"), a / b, "div")
        assert_bits_equal(sim.sqrt(a, "bf16"), np.sqrt(a), "sqrt")


def test_fp32_nearest_even_matches_numpy_float32() -> None:
    rng = np.random.default_rng(3)
    bits = rng.integers(0, 1 << 32, (2, 40_000), dtype=np.uint64).astype(np.uint32)
    a, b = bits[0].view(np.float32), bits[1].view(np.float32)
    with np.errstate(all="ignore"):  # signalling NaNs among the random patterns
        b[:5000] = a[:5000] * np.float32(1e-7)  # wide exponent gaps: TwoSum's work
        assert_bits_equal(sim.add(a, b, "fp32"), a + b, "add")
        assert_bits_equal(sim.sub(a, b, "fp32"), a - b, "sub")
        assert_bits_equal(sim.mul(a, b, "fp32"), a * b, "mul")
        assert_bits_equal(sim.div(a, b, "fp32"), a / b, "div")
        assert_bits_equal(sim.sqrt(a, "fp32"), np.sqrt(a), "sqrt")


def test_inputs_are_stored_with_nearest_even_first() -> None:
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal(300), rng.standard_normal(300) * 1e-3
    a16, b16 = a.astype(np.float16), b.astype(np.float16)  # numpy's float64 -> float16 cast rounds once
    assert_bits_equal(sim.add(a, b, "fp16"), a16 + b16, "add of float64 inputs")
    f = get_format("bf16")
    for mode in ("rtz", "rup"):
        got = sim.add(a, b, f, mode, saturate=True, subnormals=False)
        want = []
        for x, y in zip(a.tolist(), b.tolist(), strict=True):
            xs = code_value(round_scalar(x, f, "rne", saturate=True, subnormals=False)[0], f)
            ys = code_value(round_scalar(y, f, "rne", saturate=True, subnormals=False)[0], f)
            want.append(ref(Fraction(xs) + Fraction(ys), f, mode, saturate=True, subnormals=False))
        assert_same(got, want, f"stored inputs, {mode}")


def test_signed_zeros_and_specials() -> None:
    assert math.copysign(1, float(sim.add(1.0, -1.0, "fp16"))) == 1.0
    assert math.copysign(1, float(sim.add(1.0, -1.0, "fp16", "rdown"))) == -1.0
    assert math.copysign(1, float(sim.add(-0.0, -0.0, "fp16", "rup"))) == -1.0
    assert math.copysign(1, float(sim.add(0.0, 0.0, "fp16", "rdown"))) == 1.0
    assert math.copysign(1, float(sim.sub(0.0, 0.0, "fp16", "rdown"))) == -1.0
    assert math.copysign(1, float(sim.fma(2.0, 3.0, -6.0, "bf16", "rdown"))) == -1.0
    assert math.isnan(float(sim.add(np.inf, -np.inf, "fp16")))
    assert float(sim.add(65504.0, 16.0, "fp16")) == math.inf  # the tie 65520 goes to even: inf
    assert float(sim.add(65504.0, 16.0, "fp16", "rtz")) == 65504.0
    assert math.isnan(float(sim.mul(300.0, 300.0, "float8_e4m3fn")))  # no inf in e4m3fn: NaN
    assert float(sim.mul(30.0, 30.0, "float8_e4m3fn", saturate=True)) == 448.0
    assert float(sim.div(1.0, -0.0, "fp16")) == -math.inf
    assert math.isnan(float(sim.sqrt(-4.0, "fp16")))


def test_broadcasting_and_shapes() -> None:
    out = sim.add(np.ones((2, 3)), np.array([0.0, 2.0**-11, 2.0**-10]), "fp16")
    assert out.shape == (2, 3)
    assert out.dtype == np.float64
    assert out[1].tolist() == [1.0, 1.0, 1.0 + 2.0**-10]
    assert sim.mul(2.0, 3.0, "fp16").shape == ()


def stochastic_key(seed: int) -> tuple[int, int]:
    """The key round_array documents: the first two uint32 the Generator draws."""
    k = np.random.default_rng(seed).integers(0, 2**32, size=2, dtype=np.uint64)
    return int(k[0]), int(k[1])


@pytest.mark.parametrize(("fmt", "bits"), [("fp16", 32), ("bf16", 32), ("tf32", 32), ("fp32", 20)])
def test_stochastic_add_and_mul_use_round_arrays_random_bits(fmt: str, bits: int) -> None:
    f = get_format(fmt)
    rng = np.random.default_rng(5)
    a, b = sample(f, 200, rng), sample(f, 200, rng) * 2.0**-6
    b = np.asarray(round_array(b, f, "rne"))
    key = stochastic_key(99)
    for op in ("add", "mul"):
        got = OPS[op](a, b, f, "stochastic", rng=np.random.default_rng(99), random_bits=bits)
        want = [
            ref_binary(op, x, y, f, "stochastic", rand=random_bits_at(key, i, bits), random_bits=bits)
            for i, (x, y) in enumerate(zip(a.tolist(), b.tolist(), strict=True))
        ]
        assert_same(got, want, f"stochastic {op} {fmt}")


def test_stochastic_rounding_is_unbiased_where_nearest_swallows() -> None:
    n = 40_000
    out = sim.add(np.ones(n), np.full(n, 2.0**-13), "fp16", "stochastic", rng=np.random.default_rng(0))
    up = np.count_nonzero(out == 1 + 2.0**-10)
    assert set(np.unique(out).tolist()) == {1.0, 1 + 2.0**-10}
    # P(up) = 2^-13 / 2^-10 = 1/8: 5,000 expected, standard deviation about 66
    assert abs(up - n / 8) < 5 * math.sqrt(n * (1 / 8) * (7 / 8))


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda: sim.add(1.0, 1.0, "fp64"), "fp64 arithmetic is numpy's own"),
        (lambda: sim.fma(1.0, 1.0, 1.0, FloatFormat(8, 30)), "at most 26 significand bits"),
        (lambda: sim.mul(1.0, 1.0, FloatFormat(10, 5)), "too wide"),
        (lambda: sim.add(1.0, 1.0, "fp32", "stochastic", rng=np.random.default_rng(0)), "random_bits <= 28"),
        (lambda: sim.add(1.0, 1.0, "fp16", "nearest_odd"), "unknown rounding mode"),
        (lambda: sim.add(1.0, 1.0, "fp61"), "unknown format"),
    ],
)
def test_arithmetic_errors_name_the_problem(call: Callable[[], object], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        call()


# ---- swallowed updates ---------------------------------------------------------------------------
def test_threshold_ratio_is_where_numpy_starts_to_swallow() -> None:
    one16, one32 = np.float16(1), np.float32(1)
    bf = ml_dtypes.bfloat16
    # 1 + 2^-(m+1) is a tie that goes back to 1; the next value up survives
    assert one16 + np.float16(2.0**-11) == one16
    assert one16 + np.nextafter(np.float16(2.0**-11), np.float16(1)) != one16
    assert bf(1) + bf(2.0**-8) == bf(1)
    assert one32 + np.float32(2.0**-24) == one32
    assert (sim.threshold_ratio("fp16"), sim.threshold_ratio("bf16"), sim.threshold_ratio("fp32")) == (
        2048,
        256,
        2**24,
    )


def test_threshold_bounds_hold_for_every_fp16_weight() -> None:
    w = np.arange(0x3400, 0x7BFF, dtype=np.uint16).view(np.float16)  # every weight from 0.25 up
    r = sim.threshold_ratio("fp16")
    never = np.nextafter(w / np.float16(r), np.float16(np.inf))  # just above |w| / 2048
    always = np.nextafter(w / np.float16(2 * r), np.float16(0))  # just below |w| / 4096
    with np.errstate(over="ignore"):
        assert np.all(w + never != w)
        assert np.all(w - never != w)
        assert np.all(w + always == w)
        assert np.all(w - always == w)
    # both bounds are tight: some weights keep an update just above |w| / 4096 (toward zero from a
    # power of two, where the gap below is half an ulp), some lose one of exactly |w| / 2048 (a tie)
    assert np.any(w - np.nextafter(w / np.float16(2 * r), np.float16(np.inf)) != w)
    assert np.any(w + w / np.float16(r) == w)


def test_swallowed_updates_match_numpy_float16() -> None:
    rng = np.random.default_rng(6)
    n = 20_000
    w = rng.standard_normal(n) * rng.choice([1.0, 100.0], n)
    u = w * np.exp2(-rng.uniform(6, 16, n)) * rng.choice([-1.0, 1.0], n)
    u[:100] = 1e-9  # these underflow to zero when stored
    u[100:200] = 0.0
    res = sim.swallowed_updates(w, u, "fp16")
    w16, u16 = w.astype(np.float16), u.astype(np.float16)
    lost = (u != 0) & np.isfinite(w16) & (w16 + u16 == w16)
    assert np.array_equal(res.lost, lost)
    assert res.n_lost == np.count_nonzero(lost)
    assert res.n_updates == n - 100
    assert res.n_underflowed == np.count_nonzero((u != 0) & (u16 == 0)) >= 100
    assert res.share_lost == pytest.approx(np.count_nonzero(lost) / (n - 100))
    assert np.array_equal(res.sums, (w16 + u16).astype(np.float64))
    assert "nonzero updates" in str(res)
    assert "4,096" in render(res)
    # the weights and updates as stored keep the sign of a zero, as a cast does
    zeros = sim.swallowed_updates([-0.0, 0.0, 1.0], [1e-3, -0.0, -0.0], "fp16")
    assert np.signbit(zeros.weights).tolist() == [True, False, False]
    assert np.signbit(zeros.updates).tolist() == [False, True, True]
    assert res.to_dict()["n_lost"] == res.n_lost


def test_swallowed_updates_in_bf16_match_ml_dtypes() -> None:
    rng = np.random.default_rng(8)
    w = rng.standard_normal(5000).astype(np.float32)  # float32 inputs: one rounding into bf16
    u = (w * np.exp2(-rng.uniform(4, 12, 5000))).astype(np.float32)
    res = sim.swallowed_updates(w, u, "bf16")
    wb, ub = w.astype(ml_dtypes.bfloat16), u.astype(ml_dtypes.bfloat16)
    assert np.array_equal(res.lost, (u != 0) & (wb + ub == wb))


# ---- explain_add ---------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["fp16", "bf16", "float8_e5m2"])
def test_explain_add_agrees_with_add(fmt: str) -> None:
    rng = np.random.default_rng(9)
    f = get_format(fmt)
    a, b = sample(f, 40, rng), sample(f, 40, rng) * 2.0**-8
    for mode in DETERMINISTIC:
        sums = sim.add(a, b, f, mode).tolist()
        for x, y, s in zip(a.tolist(), b.tolist(), sums, strict=True):
            e = sim.explain_add(x, y, f, mode)
            assert same(e.sum_value, s), (x, y, mode)
            assert e.swallowed == (y != 0 and e.sum_code == e.a_code)


def test_explain_add_text_and_values() -> None:
    e = sim.explain_add("1", "0.0001", "fp16")
    assert e.b_code == int(np.float16(0.0001).view(np.uint16)) == 0x068E
    assert e.sum_code == 0x3C00
    assert e.swallowed
    # exponent field 1 is emin = -14, so the code read as an integer counts units of 2^-24
    assert e.exact_sum == 1 + Fraction(0x068E, 2**24)
    assert "0x068E = 0.00010001659393310546875 (exact)" in render(e)
    assert "2048 times smaller" in render(e)
    # an exactly stored operand gets no "stored as" line
    assert not any(line.startswith("1 is stored") for line in e.lines)
    below = sim.explain_add("1", "-0.0003", "fp16")
    assert "the gap below 1 is 2^-11" in render(below)
    assert "4096 times smaller" in render(below)
    assert not below.swallowed
    assert below.sum_value == float(np.float16(1) - np.float16(0.0003))
    up = sim.explain_add("1", "0.0001", "bf16", "rup")
    assert up.sum_value == 1 + 2.0**-7
    assert "never swallows" in render(up)
    tz = sim.explain_add("3", "0.0003", "bf16", "rtz")
    assert tz.swallowed
    assert "192 times smaller" in render(tz)
    lost = sim.explain_add("1", "1e-9", "fp16")
    assert lost.swallowed
    assert "lost when it was stored" in render(lost)
    d = e.to_dict()
    assert d["sum_hex"] == "0x3C00"
    assert d["exact_sum"] == "1.00010001659393310546875"
    json.dumps(d)


def test_explain_add_names_the_tie_and_the_neighbour_that_wins() -> None:
    # the weight of lesson 04 where fp16 descent freezes: 1.05078125 = 1 + 52/1024 (a last bit of
    # 0) plus 2^-11, exactly half its ulp 2^-10: the exact sum lies halfway between two fp16 values
    w, u = Fraction(1076, 1024), Fraction(1, 2048)
    assert float(w) == 1.05078125
    e = sim.explain_add("1.05078125", "0.00048828125", "fp16")
    # numpy: the float32 sum is exact (12 significant bits), the cast to float16 the one rounding
    assert np.float16(np.float32(w) + np.float32(u)) == np.float16(w)
    assert e.tie
    assert e.swallowed
    assert e.sum_value == float(w)
    assert e.exact_sum == w + u
    text = render(e)
    assert "1.05126953125 is exactly halfway between 1.05078125 (0x3C34) and 1.0517578125 (0x3C35)" in text
    assert "Ties go to the neighbour whose last bit is 0 (ties to even): 1.05078125 (0x3C34)." in text
    assert "the update is exactly half an ulp, so the tie rule decided" in text
    assert "anything below half an ulp vanishes" not in text
    assert e.to_dict()["tie"] is True
    # ties away from zero send the same sum up: w + 2^-10
    away = sim.explain_add("1.05078125", "0.00048828125", "fp16", "rna")
    assert away.tie
    assert not away.swallowed
    assert away.sum_value == float(w + 2 * u)
    assert "Ties go to the neighbour farther from zero (ties away from zero): 1.0517578125 (0x3C35)." in (
        render(away)
    )
    # one code up the last bit is 1: the same half-ulp update moves the weight on, to the even code
    odd = sim.explain_add("1.0517578125", "0.00048828125", "fp16")
    assert odd.tie
    assert not odd.swallowed
    assert odd.sum_value == float(np.float16(np.float32(w + 2 * u) + np.float32(u))) == float(w + 4 * u)
    # below a power of two the gap is 2^-11: the tie is a downward update of 2^-12
    down = sim.explain_add("1", -(2.0**-12), "fp16")
    assert down.tie
    assert down.swallowed
    assert "0.999755859375 is exactly halfway between 0.99951171875 (0x3BFF) and 1 (0x3C00)" in render(down)
    assert "the gap below 1 is 2^-11; the update is exactly half that gap" in render(down)
    # a tie at the top of the range: 65520 lies halfway between 65504 and 2^16, which overflows
    over = sim.explain_add("65504", "16", "fp16")
    with np.errstate(over="ignore"):
        assert np.isinf(np.float16(np.float32(65520)))
    assert over.tie
    assert over.sum_value == math.inf
    assert "65520 is exactly halfway between 65504 (0x7BFF) and 65536 (beyond the range of fp16)" in (
        render(over)
    )
    assert "(ties to even): 65536, out of range: the sum becomes inf (0x7C00)." in render(over)
    # e4m3fn has no 480: the tie 464 goes back to the even 448 (ml_dtypes rounds the same)
    e4 = sim.explain_add("448", "16", "float8_e4m3fn")
    assert e4.tie
    assert e4.sum_value == 448 == float(np.float32(464).astype(ml_dtypes.float8_e4m3fn))
    assert "(ties to even): 448 (0x7E)." in render(e4)
    # not ties: an update below half an ulp, and an exact sum
    assert not sim.explain_add("1", "0.0001", "fp16").tie
    assert not sim.explain_add("1", "0.5", "fp16").tie


@pytest.mark.parametrize("fmt", ["fp16", "bf16"])
def test_explain_add_finds_every_tie(fmt: str) -> None:
    """A sum is a tie exactly when it is the midpoint of its neighbours in the sorted list of values."""
    f = get_format(fmt)
    values = np.unique(finite_values(f))
    rng = np.random.default_rng(21)
    w = rng.choice(values[(np.abs(values) > 2.0**-8) & (np.abs(values) < 2.0**8)], 300)
    _, e = np.frexp(np.abs(w))  # |w| = m 2^e with m in [0.5, 1): ulp 2^(e - 1 - m) (all normal)
    ulp = np.ldexp(1.0, e - 1 - f.mantissa_bits)
    # half an ulp (a tie except below a power of two), a quarter of one (a tie below a power of
    # two) and three eighths (never a tie), of either sign
    u = ulp * rng.choice([0.5, 0.25, 0.375], 300) * rng.choice([-1.0, 1.0], 300)
    ties = 0
    for wi, ui in zip(w.tolist(), u.tolist(), strict=True):
        s = wi + ui  # exact in float64
        i = int(np.searchsorted(values, s))
        lo, hi = values[i - 1], values[i]
        expected = bool(lo < s < hi and s - lo == hi - s)
        ties += expected
        for mode in ("rne", "rna"):
            ex = sim.explain_add(wi, ui, f, mode)
            assert ex.tie == expected, (wi, ui)
            assert any("a tie." in line for line in ex.lines) == expected
            assert ex.sum_value == ref(Fraction(s), f, mode)
    assert 50 < ties < 250


def test_explain_add_specials_and_stochastic() -> None:
    inf = sim.explain_add("inf", "-inf", "fp16")
    assert math.isnan(inf.sum_value)
    assert inf.exact_sum is None
    z = sim.explain_add(1.0, -1.0, "fp16", "rdown")
    assert z.sum_value == 0
    assert math.copysign(1, z.sum_value) == -1
    s = sim.explain_add("1", "0.0001", "fp16", "stochastic", rng=np.random.default_rng(3))
    assert s.sum_value in (1.0, 1 + 2.0**-10)
    assert "probability" in render(s)
    with pytest.raises(ValueError, match="needs rng"):
        sim.explain_add("1", "0.0001", "fp16", "stochastic")
    with pytest.raises(ValueError, match="cannot parse"):
        sim.explain_add("1", "one", "fp16")


# ---- underflow -----------------------------------------------------------------------------------
# round to nearest even: values up to half the smallest subnormal flush (the tie goes to even 0),
# values from smallest normal - half a subnormal step round up to normal, and a value overflows from
# max + half an ulp (fp16: the tie 65520 goes to the even 2^16, beyond the format; e4m3fn: the tie
# 464 goes back to the even 448)
UNDERFLOW_RNE: dict[str, tuple[float, float, float, bool]] = {
    # format: (smallest subnormal, smallest normal, max + ulp/2, does the tie overflow)
    "fp16": (2.0**-24, 2.0**-14, 65520.0, True),
    "bf16": (2.0**-133, 2.0**-126, (2 - 2.0**-7) * 2.0**127 + 2.0**119, True),
    "float8_e4m3fn": (2.0**-9, 2.0**-6, 464.0, False),
}


def log_uniform(n: int, lo: int, hi: int, rng: np.random.Generator) -> F64:
    x: F64 = np.exp2(rng.uniform(lo, hi, n)) * rng.choice([-1.0, 1.0], n)
    return x


@pytest.mark.parametrize("fmt", list(UNDERFLOW_RNE))
def test_underflow_classes_match_an_independent_classification(fmt: str) -> None:
    f = get_format(fmt)
    sub, tiny, over, tie_overflows = UNDERFLOW_RNE[fmt]
    rng = np.random.default_rng(10)
    x = log_uniform(20_000, f.emin - f.mantissa_bits - 4, f.emax + 3, rng)
    edges = [sub / 2, np.nextafter(sub / 2, 1), tiny - sub / 2, np.nextafter(tiny - sub / 2, 0), over]
    x = np.concatenate([x, edges, np.negative(edges), [np.nextafter(over, 0), 0.0, -0.0, np.inf, np.nan]])
    r = sim.underflow(x, f)
    ax = np.abs(x)
    finite = np.isfinite(x) & (x != 0)
    flushed = finite & (ax <= sub / 2)
    subnormal = finite & (ax > sub / 2) & (ax < tiny - sub / 2)
    overflow = finite & ((ax >= over) if tie_overflows else (ax > over))
    assert r.n_flushed == np.count_nonzero(flushed)
    assert r.n_subnormal == np.count_nonzero(subnormal)
    assert r.n_overflow == np.count_nonzero(overflow)
    assert r.n_normal == np.count_nonzero(finite) - r.n_flushed - r.n_subnormal - r.n_overflow
    assert (r.n_zero_input, r.n_nonfinite_input, r.n) == (2, 2, x.size)
    # precision: a subnormal result with leading bit 2^e keeps e - (emin - m) + 1 bits
    rounded = np.asarray(round_array(x, f))
    rs = np.abs(rounded[subnormal])
    kept = np.frexp(rs)[1] - 1 - (f.emin - f.mantissa_bits) + 1
    assert r.bits_lost == tuple(np.bincount(f.precision - kept, minlength=f.precision).tolist())
    assert 0 < r.mean_bits_lost < f.mantissa_bits


def test_underflow_in_round_toward_zero() -> None:
    x = np.array([2.0**-24 * 0.99, 2.0**-24, 2.0**-14 * 0.999, 65535.0, 65536.0, 1e6, -1e6])
    r = sim.underflow(x, "fp16", rounding="rtz")
    # toward zero nothing reaches inf: values from 2^16 (unbounded rounding beyond max) are clamped
    assert (r.n_flushed, r.n_subnormal, r.n_normal, r.n_overflow, r.n_overflow_nonfinite) == (1, 2, 1, 3, 0)
    assert "clamped" in render(r)


def test_underflow_counts_agree_with_round_array_flags() -> None:
    f = get_format("fp16")
    rng = np.random.default_rng(12)
    x = log_uniform(30_000, -30, 18, rng)
    # keep out of the narrow window below 2^emin where a value is tiny yet rounds to a normal
    x = x[(np.abs(x) < 2.0**-14 * (1 - 2.0**-11)) | (np.abs(x) >= 2.0**-14)]
    for mode, sat in (("rne", False), ("rup", True), ("rodd", False)):
        r = sim.underflow(x, f, rounding=mode, saturate=sat)
        _, stats = round_array_with_flags(x, f, mode, saturate=sat)
        assert r.n_overflow == stats.overflow
        assert r.n_flushed + r.n_subnormal == stats.underflow == r.n_underflow_flag  # all inexact here


def test_underflow_error_histogram_is_exact() -> None:
    f = get_format("bf16")
    rng = np.random.default_rng(13)
    x = log_uniform(3000, -140, 20, rng)
    x[:10] = 1.0  # exact
    r = sim.underflow(x, f)
    rounded = np.asarray(round_array(x, f))
    counts: dict[int, int] = {}
    for xi, ri in zip(x.tolist(), rounded.tolist(), strict=True):
        if ri == 0 or xi == ri:
            continue
        q = abs(Fraction(ri) - Fraction(xi)) / abs(Fraction(xi))
        k = q.numerator.bit_length() - q.denominator.bit_length()
        k = k - 1 if q < Fraction(2) ** k else k  # floor(log2(q)), exactly
        counts[k] = counts.get(k, 0) + 1
    got = {k: c for k, c in zip(r.error_exponents, r.error_counts, strict=True) if c}
    assert got == counts
    assert r.n_exact == 10
    assert r.max_relative_error <= 1.0
    assert "relative error" in render(r)


def test_underflow_scale_is_a_loss_scale() -> None:
    rng = np.random.default_rng(14)
    g = log_uniform(5000, -34, -10, rng)
    plain, scaled = sim.underflow(g, "fp16"), sim.underflow(g, "fp16", scale=2.0**10)
    assert scaled.to_dict() | {"scale": 1.0} == sim.underflow(g * 2.0**10, "fp16").to_dict() | {"scale": 1.0}
    assert scaled.n_flushed < plain.n_flushed
    with pytest.raises(ValueError, match="scale"):
        sim.underflow(g, "fp16", scale=0.0)


# ---- accumulation ----------------------------------------------------------------------------------
def np_accumulate(x: npt.NDArray[Any]) -> F64:
    """Running sums, left to right, in the array's own type (numpy's oracle)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.add.accumulate(x).astype(np.float64)


def test_sequential_fp16_matches_numpy_accumulate() -> None:
    x = np.random.default_rng(15).standard_normal(5000) * 3
    r = sim.accumulate(x, "fp16")
    want = np_accumulate(x.astype(np.float16))
    assert r.sum == want[-1]
    assert r.trajectory is not None
    assert r.trajectory_index is not None
    assert np.array_equal(r.trajectory, want[r.trajectory_index])
    assert r.exact == sum(
        (Fraction(v) for v in x.astype(np.float16).astype(np.float64).tolist()), Fraction(0)
    )
    assert r.exact_float == math.fsum(x.astype(np.float16).astype(np.float64))
    assert r.relative_error == float(abs(Fraction(r.sum) - r.exact) / abs(r.exact))


def test_exact_sum_over_the_whole_float64_range() -> None:
    rng = np.random.default_rng(22)
    x = np.exp2(rng.uniform(-1074, 1023, 3000)) * rng.choice([-1.0, 1.0], 3000)
    x[:4] = [5e-324, -3 * 5e-324, 1.7e308, -0.0]
    assert accumulation._exact_sum(x) == sum((Fraction(v) for v in x.tolist()), Fraction(0))


def test_summing_ones_in_fp16_stagnates_at_2048() -> None:
    r = sim.accumulate(np.ones(3000), "fp16")
    want = np_accumulate(np.ones(3000, np.float16))
    first_stuck = int(np.flatnonzero(want == want[-1])[0]) + 1
    assert (
        (r.sum, r.stagnation_index, r.stagnation_value)
        == (2048.0, first_stuck, 2048.0)
        == (2048.0, 2048, 2048.0)
    )
    assert r.n_swallowed == 3000 - 2048
    assert r.overflow_index is None
    assert "stopped changing at term 2,048" in render(r)
    bf = sim.accumulate(np.ones(1000), "bf16")
    assert bf.sum == float(np_accumulate(np.ones(1000, ml_dtypes.bfloat16))[-1]) == 256.0


def test_fp16_sum_overflows_past_65504() -> None:
    x = np.full(1000, 100.0)
    r = sim.accumulate(x, "fp16")
    want = np_accumulate(x.astype(np.float16))
    assert r.overflow_index == int(np.flatnonzero(np.isinf(want))[0])
    assert r.sum == math.inf
    assert r.relative_error == math.inf
    assert r.overflow_exact == 100 * (r.overflow_index + 1)
    assert r.stagnation_index is None
    assert "became inf" in render(r)
    wide = sim.accumulate(x, "fp16", accumulator="fp32")
    assert wide.accumulator_sum == 100_000.0
    assert wide.sum == math.inf


def test_wide_accumulator_matches_numpy_float32() -> None:
    x = np.random.default_rng(16).standard_normal(4000)
    r = sim.accumulate(x, "fp16", accumulator="fp32")
    run = np_accumulate(x.astype(np.float16).astype(np.float32))
    assert r.accumulator_sum == run[-1]
    assert r.sum == float(np.float32(run[-1]).astype(np.float16))


def test_pairwise_matches_a_float16_tree() -> None:
    x = np.random.default_rng(17).standard_normal(1001).astype(np.float16)
    level = list(x)
    while len(level) > 1:
        nxt = [level[i] + level[i + 1] for i in range(0, len(level) - 1, 2)]
        level = nxt + ([level[-1]] if len(level) % 2 else [])
    r = sim.accumulate(x.astype(np.float64), "fp16", method="pairwise")
    assert r.sum == float(level[0])
    assert r.trajectory is None
    assert r.stagnation_index is None


def test_kahan_matches_float16_compensated_loop() -> None:
    x = np.random.default_rng(18).standard_normal(1500).astype(np.float16)
    s, c = x[0], np.float16(0)
    run = [float(s)]
    for t in x[1:]:
        y = t - c
        nxt = s + y
        c = (nxt - s) - y
        s = nxt
        run.append(float(s))
    r = sim.accumulate(x.astype(np.float64), "fp16", method="kahan")
    assert r.trajectory is not None
    assert r.trajectory_index is not None
    assert r.trajectory.tolist() == [run[i] for i in r.trajectory_index.tolist()]
    ones = sim.accumulate(np.ones(3000), "fp16", method="kahan")
    assert ones.sum == 3000.0
    assert ones.stagnation_index is None


def reference_sequential(x: F64, f: FloatFormat, mode: str, seed: int | None = None) -> list[float]:
    """Left to right, each exact sum rounded by round_rational (random bits as round_array's)."""
    key = stochastic_key(seed) if seed is not None else (0, 0)
    s = x[0]
    run = [s]
    for i in range(1, x.size):
        q = Fraction(s) + Fraction(x[i])
        s = ref(q, f, mode, negative_zero=zero_sum_negative(s, x[i], mode), rand=random_bits_at(key, i))
        run.append(s)
    return run


@pytest.mark.parametrize("mode", ["rtz", "rup", "rdown", "rna", "rodd", "stochastic"])
def test_sequential_in_other_modes_matches_the_exact_reference(mode: str) -> None:
    f = get_format("bf16")
    x = np.asarray(round_array(np.random.default_rng(19).standard_normal(400) + 0.5, f))
    seed = 21 if mode == "stochastic" else None
    rng = None if seed is None else np.random.default_rng(seed)
    r = sim.accumulate(x, f, rounding=mode, rng=rng)
    want = reference_sequential(x, f, mode, seed)
    assert r.trajectory is not None
    assert r.trajectory_index is not None
    assert r.trajectory.tolist() == [want[i] for i in r.trajectory_index.tolist()]
    assert r.sum == want[-1]


def test_stochastic_accumulation_does_not_stagnate() -> None:
    r = sim.accumulate(np.ones(10_000), "fp16", rounding="stochastic", rng=np.random.default_rng(0))
    assert r.stagnation_index is None
    assert abs(r.sum - 10_000) < 400  # unbiased steps: the error is a random walk, not a wall at 2048
    again = sim.accumulate(np.ones(10_000), "fp16", rounding="stochastic", rng=np.random.default_rng(0))
    assert again.sum == r.sum
    with pytest.raises(ValueError, match="needs rng"):
        sim.accumulate(np.ones(3), "fp16", rounding="stochastic")
    # an fp32 accumulator draws 28 random bits by default (24 + 28 <= 52 keeps each step exact)
    wide = sim.accumulate(
        np.ones(100), "fp16", accumulator="fp32", rounding="stochastic", rng=np.random.default_rng(0)
    )
    assert wide.sum == 100.0
    with pytest.raises(ValueError, match="random_bits <= 28"):
        sim.accumulate(
            np.ones(3), "fp32", rounding="stochastic", rng=np.random.default_rng(0), random_bits=32
        )


def test_compare_accumulation_and_errors() -> None:
    c = sim.compare_accumulation(np.ones(3000), "fp16")
    assert [(r.method, r.accumulator.name, r.sum) for r in c.results] == [
        ("sequential", "fp16", 2048.0),
        ("pairwise", "fp16", 3000.0),
        ("kahan", "fp16", 3000.0),
        ("sequential", "fp32", 3000.0),
    ]
    text = render(c)
    assert "stops changing at term 2,048" in text
    assert "exact sum 3000" in text
    json.dumps(c.to_dict())
    with pytest.raises(ValueError, match="method"):
        sim.accumulate(np.ones(3), "fp16", method="tree")
    with pytest.raises(ValueError, match="at least one term"):
        sim.accumulate([], "fp16")


def test_long_trajectories_are_downsampled() -> None:
    r = sim.accumulate(np.ones(200_000), "bf16", accumulator="fp32")
    assert r.trajectory is not None
    assert r.trajectory_index is not None
    assert r.trajectory.size <= 1002
    assert r.trajectory_index[-1] == 199_999
    assert r.sum == 199_680.0 == float(ml_dtypes.bfloat16(200_000.0))  # exact in fp32, then rounded


# ---- the command line -----------------------------------------------------------------------------
@pytest.fixture
def main(monkeypatch: pytest.MonkeyPatch) -> Main:
    """floatlab's main() with the simulator commands registered."""
    if simulate_cmds not in cli_pkg.COMMANDS:
        monkeypatch.setattr(cli_pkg, "COMMANDS", (*cli_pkg.COMMANDS, simulate_cmds))
    return cli_pkg.main


def run_json(main: Main, capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_cli_add(main: Main, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["add", "1", "0.0001", "--no-color"]) == 0
    out = capsys.readouterr().out
    assert "exact sum 1.00010001659393310546875 -> 1 (0x3C00): the update was swallowed" in out
    data = run_json(main, capsys, "add", "1", "-0.0003", "-f", "fp16")
    assert data["sum_value"] == float(np.float16(1) - np.float16(0.0003))
    assert not data["swallowed"]
    data = run_json(main, capsys, "add", "1", "0.0001", "-f", "bf16", "-r", "rup")
    assert data["sum_value"] == 1 + 2.0**-7


def test_cli_round_a_value(main: Main, capsys: pytest.CaptureFixture[str]) -> None:
    data = run_json(main, capsys, "round", "0.1", "-f", "fp16")
    assert data["code"] == int(np.float16(0.1).view(np.uint16))
    assert data["flags"] == ["inexact"]
    data = run_json(main, capsys, "round", "-70000", "-f", "fp16", "--saturate")
    assert data["value"] == -65504.0


def test_cli_round_an_array(main: Main, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    x = np.concatenate([np.random.default_rng(20).standard_normal(1000) * 1e3, [1e5, 1e-9, 0.5]])
    src, dst = tmp_path / "x.npy", tmp_path / "y"
    np.save(src, x)
    data = run_json(main, capsys, "round", str(src), "-f", "fp16", "-o", str(dst))
    y = np.load(dst)
    assert y.dtype == np.float64
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)
    assert np.array_equal(y, want.astype(np.float64))
    assert data["overflow"] == 1
    assert data["underflow"] == 1
    assert data["n"] == x.size
    assert data["inexact"] == np.count_nonzero(want.astype(np.float64) != x)
    # the input is never overwritten unless asked
    assert main(["round", str(src), "-o", str(src)]) == 2
    assert "--force" in capsys.readouterr().err
    assert np.array_equal(np.load(src), x)
    assert main(["round", str(src), "-o", str(src), "--force"]) == 0
    assert np.array_equal(np.load(src), want.astype(np.float64))


def test_cli_underflow(main: Main, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    g = np.array([1e-3, 1e-6, 1e-9, 7e4, 0.0], dtype=np.float32)
    path = tmp_path / "g.npy"
    np.save(path, g)
    data = run_json(main, capsys, "underflow", str(path), "-f", "fp16")
    assert (data["n_normal"], data["n_subnormal"], data["n_flushed"], data["n_overflow"]) == (1, 1, 1, 1)
    for scale in ("1024", "2^10"):
        data = run_json(main, capsys, "underflow", str(path), "-f", "fp16", "--scale", scale)
        assert (data["n_normal"], data["n_subnormal"], data["n_flushed"], data["n_overflow"]) == (2, 1, 0, 1)
    assert main(["underflow", str(path), "--no-color"]) == 0
    assert "subnormal" in capsys.readouterr().out


def test_cli_accumulate(main: Main, capsys: pytest.CaptureFixture[str]) -> None:
    data = run_json(main, capsys, "accumulate", "3000")
    assert [r["sum"] for r in data["results"]] == [2048.0, 3000.0, 3000.0, 3000.0]
    data = run_json(main, capsys, "accumulate", "1000", "--value", "100", "--method", "sequential")
    want = np_accumulate(np.full(1000, 100, np.float16))
    assert data["overflow_index"] == int(np.flatnonzero(np.isinf(want))[0])
    assert main(["accumulate", "3000", "--no-color"]) == 0
    out = capsys.readouterr().out
    assert "stopped changing at term 2,048" in out
    assert "kahan" in out


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["accumulate", "many"], "expected a count N"),
        (["accumulate", "0"], "expected 1 to"),
        (["round", "0.1", "-r", "stochastic"], "--seed"),
        (["add", "1", "one"], "cannot parse"),
        (["underflow", "no-such-file.npy"], "no-such-file"),
        (["accumulate", "10", "-f", "fp64"], "numpy's own"),
    ],
)
def test_cli_errors_are_one_line(
    main: Main, capsys: pytest.CaptureFixture[str], argv: list[str], words: str
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert words in err


def test_demo_shows_the_swallowed_update(main: Main, capsys: pytest.CaptureFixture[str]) -> None:
    titles = [s.title for s in cli_pkg.demo.SECTIONS]
    assert "A swallowed update: 1 + 0.0001 in fp16" in titles
    view = simulate_cmds._demo_add(False)
    assert "2048 times smaller" in view.text
    assert "2048" in simulate_cmds._demo_accumulate(False).text


def _assert_rounded_to_odd(got: np.ndarray, exact: list[Fraction]) -> None:
    """Rounding to odd keeps an exact float64 result and otherwise gives the one of its two float64
    neighbours whose last bit is 1 (oracle: Fraction arithmetic)."""
    for r, q in zip(got.tolist(), exact, strict=True):
        if Fraction(float(q)) == q:
            assert r == float(q), q
            continue
        lo = float(q) if Fraction(float(q)) < q else math.nextafter(float(q), -math.inf)
        hi = math.nextafter(lo, math.inf)
        assert Fraction(lo) < q < Fraction(hi)
        assert r == (lo if np.float64(lo).view(np.uint64) & np.uint64(1) else hi), q


def _wide_operands(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n) * 2.0 ** rng.integers(-60, 60, n)
    y = rng.standard_normal(n) * 2.0 ** rng.integers(-60, 60, n)
    return x, y


def test_the_compiled_odd_sum_is_the_exact_sum_rounded_to_odd() -> None:
    x, y = _wide_operands(20_000, 11)
    rng = np.random.default_rng(12)
    y[:2000] = -x[:2000] * (1 + rng.integers(-3, 4, 2000) * 2.0**-52)  # cancellations
    y[2000:2100] = -x[2000:2100]  # exact zeros
    exact = [Fraction(a) + Fraction(b) for a, b in zip(x.tolist(), y.tolist(), strict=True)]
    _assert_rounded_to_odd(odd_sum(x, y, False), exact)
    # the sign of an exact zero: -0 only when rounding down, +0 for (+0) + (+0) even then
    zeros = odd_sum(np.array([1.0, 0.0, -0.0]), np.array([-1.0, 0.0, 0.0]), True)
    assert np.signbit(zeros).tolist() == [True, False, True]
    assert np.signbit(odd_sum(np.array([1.0]), np.array([-1.0]), False)).tolist() == [False]


def test_the_compiled_odd_quotient_and_root_are_exact_results_rounded_to_odd() -> None:
    x, y = _wide_operands(20_000, 13)
    y[:1000] = x[:1000] * 2.0 ** np.random.default_rng(14).integers(-20, 20, 1000)  # exact quotients
    exact = [Fraction(a) / Fraction(b) for a, b in zip(x.tolist(), y.tolist(), strict=True)]
    _assert_rounded_to_odd(odd_div(x, y), exact)
    r = np.abs(x)
    r[:500] = (np.arange(500) + 1.0) ** 2  # exact roots
    got = odd_sqrt(r)
    for v, a in zip(got.tolist(), r.tolist(), strict=True):
        # compare r's position against sqrt(a) through squares: v^2 < a < next^2 decides it
        lo = v if Fraction(v) ** 2 <= Fraction(a) else math.nextafter(v, 0.0)
        if Fraction(lo) ** 2 == Fraction(a):
            assert v == lo
            continue
        hi = math.nextafter(lo, math.inf)
        assert Fraction(lo) ** 2 < Fraction(a) < Fraction(hi) ** 2
        assert v == (lo if np.float64(lo).view(np.uint64) & np.uint64(1) else hi), a


def test_accumulating_infinite_terms_reports_the_ieee_sum() -> None:
    # an inf term makes the exact sum inf (numpy's float64 sum agrees); inf + -inf is NaN
    r = sim.compare_accumulation(np.full(100, np.inf), "fp16")
    assert math.isinf(r.results[0].exact_float)
    assert r.results[0].exact_float == float(np.sum(np.full(100, np.inf)))
    rows = {(x.method, x.accumulator.name): x for x in r.results}
    assert rows[("sequential", "fp16")].relative_error == 0.0  # the right infinity is no error
    kahan = rows[("kahan", "fp16")]
    assert math.isnan(kahan.sum)  # compensated summation really computes inf - inf in its correction
    assert accumulation_note(kahan) == "NaN: the correction computes inf - inf"
    assert "exact sum inf" in render(r)
    mixed = sim.accumulate(np.array([np.inf, 1.0, -np.inf]), "fp16")
    assert math.isnan(mixed.exact_float)
    assert math.isnan(mixed.relative_error)


def test_every_simulator_takes_an_int_seed_as_default_rng_of_it() -> None:
    # one rng story: rng=7 means np.random.default_rng(7), drawn once, then key after key
    x = np.linspace(0.1, 3.0, 257)
    for method in ("pairwise", "sequential", "kahan"):
        by_seed = sim.accumulate(x, "fp16", method=method, rounding="stochastic", rng=7).sum
        by_gen = sim.accumulate(x, "fp16", method=method, rounding="stochastic", rng=np.random.default_rng(7))
        assert by_seed == by_gen.sum, method
    a = sim.add(x, x / 3, "bf16", "stochastic", rng=3)
    np.testing.assert_array_equal(a, sim.add(x, x / 3, "bf16", "stochastic", rng=np.random.default_rng(3)))
    with pytest.raises(ValueError, match="rng=-1: expected a numpy Generator or a non-negative int seed"):
        sim.accumulate(x, "fp16", rounding="stochastic", rng=-1)
