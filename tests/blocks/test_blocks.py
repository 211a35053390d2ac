"""MX block-scaled formats: scales and elements against gfloat's block quantizer, ml_dtypes' fp8
casts and the exact scalar reference; block layout, special values and errors."""

from __future__ import annotations

import math
import re
import zlib
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import floatlab as fl
from floatlab.blocks import (
    E8M0_BIAS,
    E8M0_NAN,
    MX_FORMATS,
    get_mx_format,
    mx_block_reference,
    mx_quantize,
    mx_round,
)
from floatlab.text import render

DETERMINISTIC = ("rne", "rna", "rtz", "rup", "rdown")


def _blocks(rng: np.random.Generator, n_blocks: int, k: int = 32) -> np.ndarray:
    """float32 blocks of many kinds: wide and narrow spreads, tiny and huge magnitudes, zeros,
    float32 subnormals, values one ulp below a power of two, exact ties."""
    out = []
    for i in range(n_blocks):
        kind = i % 6
        centre = rng.integers(-140, 120)
        if kind == 0:  # log-uniform over a few binades around a random centre
            b = rng.choice([-1.0, 1.0], k) * np.exp2(centre + rng.uniform(-6, 1, k))
        elif kind == 1:  # gaussian
            b = rng.standard_normal(k) * 2.0 ** float(rng.integers(-60, 60))
        elif kind == 2:  # a wide spread: many flush
            b = rng.choice([-1.0, 1.0], k) * np.exp2(rng.uniform(-40, 10, k))
        elif kind == 3:  # one ulp below powers of two (the shared exponent must not round up)
            b = np.exp2(rng.integers(-20, 20, k).astype(np.float64)) * (1 - 2.0**-24)
        elif kind == 4:  # zeros with a few values, some float32 subnormal
            b = np.zeros(k)
            b[rng.integers(0, k, 3)] = rng.standard_normal(3) * 2.0 ** float(rng.integers(-149, -100))
        else:  # halfway points of a coarse grid: ties in every element format
            b = (rng.integers(-64, 64, k) + 0.5) * 2.0 ** float(rng.integers(-8, 8))
        out.append(b)
    return np.asarray(out).astype(np.float32)


@pytest.mark.parametrize("name", list(MX_FORMATS))
@pytest.mark.parametrize("rounding", DETERMINISTIC)
def test_blocks_match_gfloat(name: str, rounding: str) -> None:
    pytest.importorskip("gfloat")
    import gfloat
    import gfloat.formats

    modes = {
        "rne": gfloat.RoundMode.TiesToEven,
        "rna": gfloat.RoundMode.TiesToAway,
        "rtz": gfloat.RoundMode.TowardZero,
        "rup": gfloat.RoundMode.TowardPositive,
        "rdown": gfloat.RoundMode.TowardNegative,
    }
    fi = getattr(gfloat.formats, f"format_info_{name}")
    blocks = _blocks(np.random.default_rng(zlib.crc32(f"{name} {rounding}".encode())), 60)
    ours = mx_round(blocks, name, rounding=rounding)
    for i, b in enumerate(blocks):
        # float64 values: gfloat takes the exponent from log2, which float32 arithmetic rounds up
        # for a value one ulp below a power of two
        want = gfloat.quantize_block(fi, b.astype(np.float64), gfloat.compute_scale_amax, modes[rounding])
        np.testing.assert_array_equal(ours[i], want.astype(np.float32), err_msg=f"block {i}: {b.tolist()}")


@pytest.mark.parametrize("name", list(MX_FORMATS))
def test_codes_match_the_exact_reference_in_every_mode(name: str) -> None:
    rng = np.random.default_rng(7)
    blocks = _blocks(rng, 24).astype(np.float64)
    # float64 extremes: values that underflow float64 when scaled, and blocks too large for E8M0
    blocks[0, :4] = [2.0**-1070, -(2.0**-1074), 2.0**-1000, 0.0]
    blocks[1, 0] = 2.0**300
    blocks[2, 5] = math.inf
    blocks[3, 7] = math.nan
    for rounding in DETERMINISTIC:
        q = mx_quantize(blocks, name, rounding=rounding)
        for i, b in enumerate(blocks):
            scale, codes = mx_block_reference(b.tolist(), name, rounding)
            assert int(q.scale_codes[i, 0]) == scale, (rounding, i)
            if scale != E8M0_NAN:
                assert q.element_codes[i].tolist() == codes, (rounding, i)
    assert [int(c) for c in mx_quantize(blocks[:4], name).scale_codes[:, 0]][1:] == [E8M0_NAN] * 3


def test_the_scale_is_the_max_exponent_less_emax_from_the_bits() -> None:
    rng = np.random.default_rng(3)
    blocks = _blocks(rng, 300)
    q = mx_quantize(blocks, "mxfp8_e4m3")
    bits = np.abs(blocks).view(np.uint32)
    for i, row in enumerate(bits):
        top = int(row.max())
        if top == 0:
            want = -127
        else:
            exp_field = top >> 23
            floor_log2 = exp_field - 127 if exp_field else top.bit_length() - 1 - 149  # subnormal
            want = max(floor_log2 - 8, -127)
        assert int(q.scale_codes[i, 0]) - E8M0_BIAS == want, i


def test_e4m3_elements_are_ml_dtypes_casts_of_the_scaled_values() -> None:
    rng = np.random.default_rng(11)
    blocks = _blocks(rng, 400)
    q = mx_quantize(blocks, "mxfp8_e4m3")
    scaled = np.ldexp(blocks.astype(np.float64), -(q.scale_codes.astype(np.int64) - E8M0_BIAS))
    inside = np.abs(scaled) <= 448  # ml_dtypes' cast does not saturate: compare where none is needed
    want = scaled.astype(np.float32).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    np.testing.assert_array_equal(q.element_codes[inside], want[inside])
    # above 448 (up to 512, the top of the binade) the element saturates to 448, code 0x7E
    assert set((q.element_codes[~inside] & 0x7F).tolist()) <= {0x7E}


def test_counts_against_the_reference_codes() -> None:
    rng = np.random.default_rng(5)
    blocks = _blocks(rng, 120).astype(np.float64)
    blocks[0, 0] = math.nan
    f = get_mx_format("mxfp8_e4m3")
    q = mx_quantize(blocks, f, rounding="rtz")
    nonzero = flushed = subnormal = 0
    for b in blocks:
        scale, codes = mx_block_reference(b.tolist(), f, "rtz")
        if scale == E8M0_NAN:
            continue
        for v, c in zip(b, codes, strict=True):
            if v != 0:
                nonzero += 1
                flushed += c & 0x7F == 0
                subnormal += (c & 0x78) == 0 and (c & 0x7F) != 0
    assert (q.nonzero, q.flushed, q.subnormal, q.nan_blocks) == (nonzero, flushed, subnormal, 1)
    finite = np.isfinite(q.dequantize())
    assert q.inexact == np.count_nonzero(q.dequantize()[finite] != blocks[finite])
    # saturated: the values that would round above 448 with the exponent unbounded (the overflow
    # flag): toward zero from 480 = 1.875 * 2^8 on, to nearest above the midpoint 464 (464 itself
    # is a tie that goes to the even 448)
    scaled = np.abs(np.ldexp(blocks, -(q.scale_codes.astype(np.int64) - E8M0_BIAS)))[1:]
    assert q.clamped == np.count_nonzero(scaled >= 480) > 0
    assert mx_quantize(blocks, f).clamped == np.count_nonzero(scaled > 464)
    big = np.array([449.0, 463.9, 464.0, 464.1, 511.0, 1.0])
    assert mx_quantize(big, f).clamped == 2


def test_the_block_scale_rescues_what_a_per_value_cast_flushes() -> None:
    g = np.random.default_rng(0).standard_normal(4096) * 2.0**-20  # small gradients
    plain = fl.round_array(g, "float8_e4m3fn", saturate=True)
    mx = mx_round(g, "mxfp8_e4m3")
    assert np.count_nonzero(plain == 0) > 0.9 * g.size
    assert np.count_nonzero(mx == 0) < 0.01 * g.size
    rel = np.abs(mx - g) / np.abs(g)
    assert np.median(rel) < 2.0**-4  # three fraction bits: at most 2^-4 relative, except subnormals


def test_representable_blocks_come_back_exactly_except_e4m3s_top() -> None:
    rng = np.random.default_rng(2)
    for name, f in MX_FORMATS.items():
        e = f.element
        codes = rng.integers(0, 2**e.bits, (50, 32)).astype(np.uint8)
        values = fl.decode_array(codes, e)
        values[~np.isfinite(values)] = 0.0
        values *= np.exp2(rng.integers(-100, 100, (50, 1)).astype(np.float64))
        back = mx_round(values, name)
        if name != "mxfp8_e4m3":
            np.testing.assert_array_equal(back, values, err_msg=name)
            continue
        # E4M3's top binade stops at 448 = 1.75 * 2^8 (480 is NaN): a block whose largest value
        # has the significand 1.875 is scaled onto 480 and saturates to 448, losing 1/15 of it
        m, _ = np.frexp(np.abs(values).max(axis=1))
        top = m == 0.9375
        assert top.any()
        assert (~top).any()
        np.testing.assert_array_equal(back[~top], values[~top])
        wrong = back[top] != values[top]
        np.testing.assert_array_equal(back[top][wrong] / values[top][wrong], 14 / 15)


def test_axis_partial_blocks_and_shapes() -> None:
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 70, 5)).astype(np.float32)
    q = mx_quantize(x, "mxfp6_e3m2", axis=1)
    assert q.scale_codes.shape == (3, 3, 5)  # 70 values: blocks of 32, 32 and 6
    assert q.element_codes.shape == x.shape
    moved = mx_quantize(np.moveaxis(x, 1, -1), "mxfp6_e3m2")
    np.testing.assert_array_equal(np.moveaxis(moved.scale_codes, -1, 1), q.scale_codes)
    np.testing.assert_array_equal(
        mx_round(x, "mxfp6_e3m2", axis=1), np.moveaxis(mx_round(np.moveaxis(x, 1, -1), "mxfp6_e3m2"), -1, 1)
    )
    # the short last block is a block of its own values only
    row = x[0, 64:, 0]
    scale, codes = mx_block_reference(row.tolist(), "mxfp6_e3m2")
    assert int(q.scale_codes[0, 2, 0]) == scale
    assert q.element_codes[0, 64:, 0].tolist() == codes
    assert q.nbytes == math.ceil(x.size * 6 / 8) + 45
    assert mx_quantize(x, "mxfp6_e3m2", block_size=7, axis=1).scale_codes.shape == (3, 10, 5)
    assert mx_round(3.0, "mxfp4_e2m1").shape == ()


def test_nan_and_infinity_make_the_whole_block_nan() -> None:
    x = np.ones(64)
    x[3] = math.inf
    x[40] = math.nan
    q = mx_quantize(x, "mxfp8_e5m2")
    assert q.scale_codes.tolist() == [E8M0_NAN, E8M0_NAN]
    assert np.isnan(q.dequantize()).all()
    assert (q.nan_blocks, q.nonzero) == (2, 0)
    assert "2 blocks hold a NaN or an infinity" in render(q)
    assert math.isnan(q.scales()[0])


def test_stochastic_rounding_picks_a_neighbour_and_is_reproducible() -> None:
    x = np.random.default_rng(8).standard_normal((64, 32))
    down = mx_round(x, "mxfp4_e2m1", rounding="rdown")
    up = mx_round(x, "mxfp4_e2m1", rounding="rup")
    s1 = mx_round(x, "mxfp4_e2m1", rounding="stochastic", rng=1)
    s2 = mx_round(x, "mxfp4_e2m1", rounding="stochastic", rng=1)
    np.testing.assert_array_equal(s1, s2)
    assert np.all((s1 == down) | (s1 == up))
    assert 0.2 < np.mean(s1 == up) < 0.8


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: mx_quantize([1.0], "mxfp16"), "unknown MX format 'mxfp16'"),
        (
            lambda: mx_quantize([1.0], "mxfp8_e4m3", block_size=0),
            "block_size=0: expected a whole number from 1 to 2,147,483,648",
        ),
        (
            lambda: mx_quantize([1.0], "mxfp8_e4m3", axis=2),
            "axis=2: expected an axis of an array of 1 dimensions",
        ),
        (
            lambda: mx_quantize(["a"], "mxfp8_e4m3"),
            "x has dtype <U1: expected float64, float32, float16 or bfloat16",
        ),
        (lambda: mx_quantize([1.0], "mxfp8_e4m3", rounding="up"), "'up'"),
        (lambda: mx_quantize([[1.0], [1.0, 2.0]], "mxfp8_e4m3"), "x: expected an array of numbers"),
    ],
)
def test_bad_input_is_one_value_error(call: Any, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)) as e:
        call()
    assert "\n" not in str(e.value)


def test_bfloat16_input() -> None:
    x = np.array([1.0, 0.3, -2.5], ml_dtypes.bfloat16)
    assert mx_round(x, "mxfp8_e4m3").dtype == x.dtype
    np.testing.assert_array_equal(
        mx_round(x, "mxfp8_e4m3"), mx_round(x.astype(np.float32), "mxfp8_e4m3").astype(x.dtype)
    )


def test_a_block_whose_scale_overflows_is_counted_and_its_error_is_infinite() -> None:
    x = np.ones(96)
    x[3] = math.inf  # block 0: holds an infinity (left out of the errors, as the MX rule says)
    x[40] = 1e300  # block 1: finite values, but 2^(996 - 8) is beyond E8M0's largest scale 2^127
    q = mx_quantize(x, "mxfp8_e4m3")
    assert q.scale_codes.tolist() == [E8M0_NAN, E8M0_NAN, E8M0_BIAS - 8]
    assert (q.nan_blocks, q.overflowed_blocks, q.nonzero) == (2, 1, 32)
    assert q.error(x) == (math.inf, -math.inf, math.inf)
    assert "1 blocks hold a NaN or an infinity" in render(q)
    assert "1 blocks of finite values overflowed the largest scale" in render(q)
    # without the overflowing block, the error is that of the finite-scale block alone: 0 for ones
    x[40] = 1.0
    q = mx_quantize(x, "mxfp8_e4m3")
    assert (q.nan_blocks, q.overflowed_blocks) == (1, 0)
    assert q.error(x) == (0.0, math.inf, 0.0)
    # float32 values never overflow an E8M0 scale: amax < 2^128, so the exponent is at most 127 - emax
    big = np.full(32, np.finfo(np.float32).max, np.float32)
    assert mx_quantize(big, "mxfp8_e4m3").overflowed_blocks == 0


def test_block_sizes_up_to_the_limit() -> None:
    from floatlab.blocks import MAX_BLOCK_SIZE, BlockFormat

    x = np.random.default_rng(3).standard_normal((5, 7)).astype(np.float32)
    whole = mx_quantize(x, "mxfp8_e4m3", block_size=7)  # one block per row
    longest = mx_quantize(x, "mxfp8_e4m3", block_size=MAX_BLOCK_SIZE)
    np.testing.assert_array_equal(longest.element_codes, whole.element_codes)
    np.testing.assert_array_equal(longest.scale_codes, whole.scale_codes)
    for bad in (0, MAX_BLOCK_SIZE + 1, 10**30, 2.5, True):
        with pytest.raises(ValueError, match="expected a whole number from 1 to 2,147,483,648"):
            BlockFormat("x", fl.get_format("e4m3fn"), bad)  # type: ignore[arg-type]
