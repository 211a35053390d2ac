"""NVFP4 and the rceil E8M0 scale against the exact scalar reference (rational arithmetic, every
float32 operation of the recipe rounded by round_rational) and against numpy's float32
arithmetic: block scales, codes, counts, the tensor scale, special values, input dtypes."""

from __future__ import annotations

import math
import re
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import floatlab as fl
from floatlab.blocks import E8M0_BIAS, MX_FORMATS, NVFP4, mx_block_reference, mx_quantize, mx_round
from floatlab.text import render

DETERMINISTIC = ("rne", "rna", "rtz", "rup", "rdown")
E2M1_VALUES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def _tensor(rng: np.random.Generator, rows: int, k: int = 16) -> np.ndarray:
    """float32 rows of very different sizes, with exact ties, zeros and float32 subnormals."""
    x = rng.standard_normal((rows, k)) * np.exp2(rng.uniform(-30, 10, (rows, 1)))
    x[::7] = (rng.integers(-12, 12, (len(x[::7]), k)) + 0.5) * 2.0 ** float(rng.integers(-4, 4))
    x[3::11, : k // 2] = 0.0
    x[5, :3] = [2.0**-149, -(2.0**-140), 2.0**-130]
    return x.astype(np.float32)


@pytest.mark.parametrize("rounding", DETERMINISTIC)
@pytest.mark.parametrize("tensor_scale", [None, 1.0, 3e-4])
def test_nvfp4_equals_the_exact_reference(rounding: str, tensor_scale: float | None) -> None:
    x = _tensor(np.random.default_rng(len(rounding)), 160)
    q = mx_quantize(x, "nvfp4", rounding=rounding, tensor_scale=tensor_scale)
    if tensor_scale is None:  # amax / (6 x 448) in float32: numpy's float32 division
        assert q.tensor_scale == float(np.abs(x).max() / np.float32(2688.0))
    for i, row in enumerate(x):
        scale, codes = mx_block_reference(row.tolist(), "nvfp4", rounding, tensor_scale=q.tensor_scale)
        assert int(q.scale_codes[i, 0]) == scale, i
        assert q.element_codes[i].tolist() == codes, i


def test_nvfp4_scale_arithmetic_in_numpy_float32() -> None:
    """The recipe's operations, one numpy float32 operation each (an independent oracle)."""
    x = _tensor(np.random.default_rng(1), 400)
    q = mx_quantize(x, "nvfp4")
    t = np.float32(q.tensor_scale)
    s = np.clip(np.abs(x).max(axis=1) / np.float32(6) / t, np.float32(2.0**-6), np.float32(448))
    s8 = s.astype(ml_dtypes.float8_e4m3fn)  # round to nearest even, within range
    np.testing.assert_array_equal(q.scale_codes[:, 0], s8.view(np.uint8))
    rcp = (np.float32(1) / t) / s8.astype(np.float32)
    y = x * rcp[:, None]  # float32
    want = np.clip(y, -6, 6).astype(ml_dtypes.float4_e2m1fn).view(np.uint8) & 0xF
    np.testing.assert_array_equal(q.element_codes, want)
    # the dequantized values are element x block scale x tensor scale, exactly
    e = np.asarray(E2M1_VALUES)[q.element_codes & 7] * np.where(q.element_codes & 8, -1, 1)
    np.testing.assert_array_equal(q.dequantize(), e * s8.astype(np.float64)[:, None] * float(t))
    # counts: a value saturates when it would round to 8 (|y| >= 7, 7 being a tie that goes to
    # the even 8), flushes when nonzero with a zero element, is subnormal at 0.5
    assert q.clamped == np.count_nonzero(np.abs(y) >= 7)
    assert q.flushed == np.count_nonzero((x != 0) & ((q.element_codes & 7) == 0))
    assert q.subnormal == np.count_nonzero((q.element_codes & 7) == 1)
    assert q.nonzero == np.count_nonzero(x)
    assert q.inexact == np.count_nonzero(q.dequantize() != x)


def test_one_level_nvfp4_is_tensor_scale_one_and_the_largest_block_gets_448() -> None:
    x = _tensor(np.random.default_rng(2), 64)
    q = mx_quantize(x, "nvfp4")
    top = int(np.argmax(np.abs(x).max(axis=1)))
    # amax / 6 / (amax / 2688) is 448 up to two float32 roundings: E4M3's 448
    assert q.scale_codes[top, 0] == 0x7E
    one = mx_quantize(x, "nvfp4", tensor_scale=1.0)
    assert one.tensor_scale == 1.0
    assert one.nbytes == q.nbytes
    assert "tensor scale 1 (float32)" in render(one)


def test_float64_float16_and_bfloat16_inputs_take_the_float32_path() -> None:
    x = _tensor(np.random.default_rng(3), 50)
    want = mx_quantize(x, "nvfp4")
    for a in (x.astype(np.float64), x.astype(np.float16), x.astype(ml_dtypes.bfloat16)):
        x32 = a.astype(np.float32)
        got, ref = mx_quantize(a, "nvfp4"), mx_quantize(x32, "nvfp4")
        np.testing.assert_array_equal(got.element_codes, ref.element_codes)
        np.testing.assert_array_equal(got.scale_codes, ref.scale_codes)
    np.testing.assert_array_equal(mx_quantize(x.astype(np.float64), "nvfp4").scale_codes, want.scale_codes)
    # float64 values between float32 ones are rounded to float32 (nearest even) first
    near = x.astype(np.float64) * (1 + 2.0**-30)
    np.testing.assert_array_equal(mx_quantize(near, "nvfp4").element_codes, want.element_codes)
    # mx_round: float64 in, the exact float64 products out; float32 in, rounded to float32
    np.testing.assert_array_equal(mx_round(x.astype(np.float64), "nvfp4"), want.dequantize())
    np.testing.assert_array_equal(mx_round(x, "nvfp4"), want.dequantize().astype(np.float32))


@pytest.mark.parametrize("name", list(MX_FORMATS))
def test_rceil_equals_the_exact_reference_and_never_saturates(name: str) -> None:
    rng = np.random.default_rng(len(name))
    f = MX_FORMATS[name]
    x = rng.standard_normal((120, 32)) * np.exp2(rng.uniform(-60, 60, (120, 1)))
    # block maxima at the element max times a power of two, and one float64 ulp above it
    x[::3, 0] = f.element.max * np.exp2(rng.integers(-40, 40, len(x[::3])).astype(np.float64))
    x[1::3, 0] = np.nextafter(f.element.max * 2.0**5, np.inf)
    x[2, :4] = [2.0**-1070, 0, 0, 0]
    x[2, 4:] = 0
    x[5, 0] = 2.0**300  # too large for any E8M0 scale: rceil saturates at 2^127
    for rounding in DETERMINISTIC:
        q = mx_quantize(x, name, rounding=rounding, scale_mode="rceil")
        for i, b in enumerate(x):
            scale, codes = mx_block_reference(b.tolist(), name, rounding, scale_mode="rceil")
            assert int(q.scale_codes[i, 0]) == scale, (rounding, i)
            assert q.element_codes[i].tolist() == codes, (rounding, i)
    q = mx_quantize(x, name, scale_mode="rceil")
    assert q.scale_codes[5, 0] == 254
    assert q.clamped > 0
    assert mx_quantize(np.delete(x, 5, axis=0), name, scale_mode="rceil").clamped == 0
    # rceil is floor or one above: one above exactly when amax exceeds max x 2^floor
    floor = mx_quantize(x, name).scale_codes[:, 0].astype(int)
    ceil = q.scale_codes[:, 0].astype(int)
    amax = np.abs(x).max(axis=1)
    above = amax > f.element.max * np.exp2(floor - E8M0_BIAS)
    ok = (floor > 0) & (floor < 254)
    np.testing.assert_array_equal((ceil - floor)[ok], above[ok].astype(int))


def test_nvfp4_blocks_with_nan_or_infinity_are_nan_and_counted() -> None:
    x = np.random.default_rng(4).standard_normal((3, 16)).astype(np.float32)
    x[0, 0] = np.inf
    x[2, 5] = np.nan
    q = mx_quantize(x, "nvfp4")
    assert q.scale_codes[:, 0].tolist()[0::2] == [0x7F, 0x7F]
    assert q.nan_blocks == 2
    assert q.nonzero == 16
    back = q.dequantize()
    assert np.isnan(back[0::2]).all()
    assert np.isfinite(back[1]).all()
    assert "2 blocks hold a NaN or an infinity" in render(q)
    assert math.isnan(q.scales()[0, 0])


def test_stochastic_nvfp4_picks_a_neighbour_and_is_reproducible() -> None:
    x = _tensor(np.random.default_rng(6), 256)
    down = mx_round(x, "nvfp4", rounding="rdown")
    up = mx_round(x, "nvfp4", rounding="rup")
    s1 = mx_round(x, "nvfp4", rounding="stochastic", rng=3)
    np.testing.assert_array_equal(s1, mx_round(x, "nvfp4", rounding="stochastic", rng=3))
    assert np.all((s1 == down) | (s1 == up))
    differ = down != up
    assert 0.2 < np.mean(s1[differ] == up[differ]) < 0.8


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: mx_quantize([1.0], "nvfp4", scale_mode="rceil"), "scale_mode='rceil': nvfp4's block scales"),
        (lambda: mx_quantize([1.0], "mxfp8_e4m3", scale_mode="ceil"), "scale_mode='ceil': expected one of"),
        (lambda: mx_quantize([1.0], "mxfp8_e4m3", tensor_scale=1.0), "mxfp8_e4m3 has no tensor scale"),
        (lambda: mx_quantize([1.0], "nvfp4", tensor_scale=0.0), "tensor_scale=0.0: expected a number from"),
        (lambda: mx_quantize([1.0], "nvfp4", tensor_scale=math.inf), "tensor_scale=inf"),
        (lambda: mx_quantize([1.0], "nvfp4", tensor_scale="big"), "tensor_scale='big'"),  # type: ignore[arg-type]
        (lambda: mx_block_reference([1.0], "nvfp4", tensor_scale=0.1), "expected a float32 number"),
    ],
)
def test_bad_block_options_are_one_value_error(call: Any, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)) as e:
        call()
    assert "\n" not in str(e.value)


def test_nvfp4_format_data() -> None:
    assert (NVFP4.block_size, NVFP4.scale, NVFP4.element.name, NVFP4.bits_per_value) == (
        16,
        "e4m3",
        "float4_e2m1fn",
        4.5,
    )
    q = mx_quantize(np.ones(40, np.float32), "nvfp4")
    assert q.scale_codes.shape == (3,)
    assert q.nbytes == 20 + 3 + 4
    assert fl.decode_array(q.scale_codes, "e4m3fn").tolist() == [448.0] * 3


def test_nvfp4_tensor_scale_is_the_scale_encode_blocks_finds() -> None:
    """nvfp4_tensor_scale(amax) is the tensor scale encode_blocks computes from the finite values
    itself (numpy's float32 amax / 2688 here), down to the floor of the scale range and for a
    tensor of zeros; a caller passing it gets the same codes. An amax that is not a finite
    magnitude is refused."""
    from floatlab.rounding import TENSOR_SCALE_RANGE, encode_blocks, nvfp4_tensor_scale

    e2m1 = fl.get_format("e2m1")
    rng = np.random.default_rng(4)
    floored = False
    for x in (_tensor(rng, 40), _tensor(rng, 40) * np.float32(2.0**-125), np.zeros((2, 16), np.float32)):
        x[0, 0] = np.inf if x.any() else 0.0  # (an infinity does not count: the finite amax)
        finite = np.abs(x[np.isfinite(x)])
        amax = float(finite.max())
        t = nvfp4_tensor_scale(amax, e2m1)
        own = encode_blocks(x, e2m1, 16, scale="e4m3")
        assert own.tensor_scale == t
        floored = t == TENSOR_SCALE_RANGE[0] or floored
        assert t == (
            max(float(np.float32(amax) / np.float32(2688.0)), TENSOR_SCALE_RANGE[0]) if amax else 1.0
        )
        given = encode_blocks(x, e2m1, 16, scale="e4m3", tensor_scale=t)
        np.testing.assert_array_equal(given.element_codes, own.element_codes)
        np.testing.assert_array_equal(given.scale_codes, own.scale_codes)
    for bad in (math.inf, math.nan, -1.0):
        with pytest.raises(ValueError, match=re.escape(f"amax={bad!r}: expected a finite magnitude")):
            nvfp4_tensor_scale(bad, e2m1)
    assert floored
