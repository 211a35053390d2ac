"""Block formats against torchao (torchao/prototype/mx_formats): the MX scales and codes of
``to_mx`` in both scale modes (FLOOR, RCEIL) and NVFP4's block scales and codes of
``nvfp4_quantize`` with and without a per-tensor scale, bit for bit; where torchao departs from
the formats' definitions (blocks of the smallest scale, infinities) the departure is pinned down."""

from __future__ import annotations

import math
import zlib
from typing import Any

import numpy as np
import pytest

from floatlab.blocks import E8M0_NAN, MX_FORMATS, mx_quantize

pytest.importorskip("torchao")
torch = pytest.importorskip("torch")

from torchao.prototype.mx_formats.config import ScaleCalculationMode  # noqa: E402
from torchao.prototype.mx_formats.constants import DTYPE_FP6_E2M3, DTYPE_FP6_E3M2  # noqa: E402
from torchao.prototype.mx_formats.kernels import unpack_uint4  # noqa: E402
from torchao.prototype.mx_formats.mx_tensor import to_mx  # noqa: E402
from torchao.prototype.mx_formats.nvfp4_tensor import (  # noqa: E402
    nvfp4_quantize,
    per_tensor_amax_to_scale,
)

ELEMENT_DTYPES: dict[str, Any] = {
    "mxfp8_e5m2": torch.float8_e5m2,
    "mxfp8_e4m3": torch.float8_e4m3fn,
    "mxfp6_e3m2": DTYPE_FP6_E3M2,
    "mxfp6_e2m3": DTYPE_FP6_E2M3,
    "mxfp4_e2m1": torch.float4_e2m1fn_x2,
}
E4M3_NAN = 0x7F


def blocks(rng: np.random.Generator, n_blocks: int, k: int) -> np.ndarray:
    """float32 blocks of many kinds: gaussian and log-uniform at scales from 2^-120 to 2^100,
    wide spreads (many flush), values just below powers of two and just above an element max
    times a power of two (where floor and rceil part), exact ties, zeros with float32
    subnormals, all-zero blocks."""
    out = []
    maxima = (6.0, 7.5, 28.0, 448.0, 57344.0)
    for i in range(n_blocks):
        kind = i % 8
        e = float(rng.integers(-120, 100))
        if kind == 0:
            b = rng.standard_normal(k) * 2.0**e
        elif kind == 1:
            b = rng.choice([-1.0, 1.0], k) * np.exp2(e + rng.uniform(-8, 1, k))
        elif kind == 2:
            b = rng.choice([-1.0, 1.0], k) * np.exp2(rng.uniform(-40, 10, k))
        elif kind == 3:
            b = np.exp2(rng.integers(-20, 20, k).astype(np.float64)) * (1 - 2.0**-24)
        elif kind == 4:  # the largest value one float32 ulp above (or at) an element max
            b = rng.standard_normal(k) * 2.0 ** (e - 3)
            top = maxima[i % len(maxima)] * 2.0 ** float(rng.integers(-20, 20))
            b[rng.integers(k)] = top * (1 + float(rng.integers(0, 2)) * 2.0**-22)
        elif kind == 5:
            b = (rng.integers(-64, 64, k) + 0.5) * 2.0 ** float(rng.integers(-8, 8))
        elif kind == 6:
            b = np.zeros(k)
            b[rng.integers(0, k, 3)] = rng.standard_normal(3) * 2.0 ** float(rng.integers(-149, -110))
        else:
            b = np.zeros(k) if i % 16 == 7 else rng.standard_normal(k)
        out.append(b)
    return np.asarray(out).astype(np.float32)


def _codes(data: Any, shape: tuple[int, ...]) -> np.ndarray:
    """torchao's element data as one uint8 code per value (fp4 comes packed two per byte)."""
    if data.dtype in (torch.uint8, torch.float4_e2m1fn_x2) and data.numel() * 2 == math.prod(shape):
        data = unpack_uint4(data.view(torch.uint8))
    return np.asarray(data.view(torch.uint8).numpy()).reshape(shape)


def _to_mx(x: np.ndarray, name: str, mode: str) -> tuple[np.ndarray, np.ndarray]:
    scale, data = to_mx(torch.from_numpy(x), ELEMENT_DTYPES[name], 32, ScaleCalculationMode(mode))
    return scale.view(torch.uint8).numpy().reshape(x.shape[0], -1), _codes(data, x.shape)


@pytest.mark.parametrize("name", list(MX_FORMATS))
@pytest.mark.parametrize("mode", ["floor", "rceil"])
def test_mx_codes_and_scales_equal_torchao_to_mx(name: str, mode: str) -> None:
    x = blocks(np.random.default_rng(zlib.crc32(f"{name} {mode}".encode())), 800, 32)
    scale, codes = _to_mx(x, name, mode)
    q = mx_quantize(x, name, scale_mode=mode)
    low = np.zeros(len(x), bool)
    if mode == "rceil":
        # torchao's eager RCEIL takes ceil(log2(descale)) with a float32 log2, which rounds to the
        # integer k for a descale = amax / max just above 2^k (within about 2^-21 of it): one
        # binade below the hardware's round-up (cvt.rp), which floatlab follows, and the block's
        # largest value saturates there. Exactly those blocks differ, by one.
        descale = np.abs(x).max(axis=1) / np.float32(MX_FORMATS[name].element.max)  # float32, as torchao
        log2 = torch.log2(torch.from_numpy(descale)).numpy()
        low = (log2 == np.round(log2)) & ((descale.view(np.uint32) & 0x7FFFFF) != 0) & (descale > 2.0**-126)
        assert low.any()
        np.testing.assert_array_equal(q.scale_codes[low, 0], scale[low, 0] + 1)
    np.testing.assert_array_equal(q.scale_codes[~low], scale[~low])
    # torchao departs from the scale 2^-127 (code 0) too: FLOOR divides by 2^-126 there (its
    # float32 scale is clamped to the smallest normal for triton's sake) and RCEIL multiplies
    # by 1 (TransformerEngine's reciprocal of code 0); the elements of those blocks differ
    smallest = q.scale_codes[:, 0] == 0
    assert 0 < np.count_nonzero(smallest) < len(x) // 4
    same = ~smallest & ~low
    np.testing.assert_array_equal(q.element_codes[same], codes[same])


@pytest.mark.parametrize("name", ["mxfp8_e4m3", "mxfp4_e2m1"])
def test_mx_bfloat16_input_equals_torchao(name: str) -> None:
    x = blocks(np.random.default_rng(5), 200, 32)
    xb = torch.from_numpy(x).to(torch.bfloat16)
    for mode in ("floor", "rceil"):
        scale, data = to_mx(xb, ELEMENT_DTYPES[name], 32, ScaleCalculationMode(mode))
        q = mx_quantize(xb.float().numpy(), name, scale_mode=mode)
        keep = q.scale_codes[:, 0] != 0
        np.testing.assert_array_equal(q.scale_codes, scale.view(torch.uint8).numpy().reshape(-1, 1))
        np.testing.assert_array_equal(q.element_codes[keep], _codes(data, x.shape)[keep])


def test_mx_nan_and_infinity_blocks_against_torchao() -> None:
    x = np.ones((3, 32), np.float32)
    x[0, 4] = np.nan
    x[1, 9] = np.inf
    floor_scale, _ = _to_mx(x, "mxfp8_e4m3", "floor")
    rceil_scale, rceil_codes = _to_mx(x, "mxfp8_e4m3", "rceil")
    for mode in ("floor", "rceil"):
        q = mx_quantize(x, "mxfp8_e4m3", scale_mode=mode)
        assert q.scale_codes[:2, 0].tolist() == [E8M0_NAN, E8M0_NAN]
        assert (q.nan_blocks, q.nonzero) == (2, 32)
    # torchao gives a NaN's block the NaN scale, and an infinity's block a finite one (floatlab
    # follows the MX specification: the NaN scale): FLOOR reads the infinity's exponent field as
    # 2^128, hence 2^(128 - 8), RCEIL saturates as the hardware's conversion does, at 2^127;
    # the infinity itself becomes the largest element
    assert floor_scale[:2, 0].tolist() == [E8M0_NAN, 128 - 8 + 127]
    assert rceil_scale[:2, 0].tolist() == [E8M0_NAN, 254]
    assert rceil_codes[1, 9] == 0x7E


def _nvfp4(x: np.ndarray, two_level: bool) -> tuple[np.ndarray, np.ndarray, float | None]:
    t = torch.from_numpy(x)
    pts = per_tensor_amax_to_scale(torch.max(torch.abs(t))) if two_level else None
    scale, data = nvfp4_quantize(t, 16, pts)
    scales = scale.view(torch.uint8).numpy().reshape(x.shape[0], -1)
    return scales, _codes(data, x.shape), None if pts is None else float(pts)


@pytest.mark.parametrize("two_level", [False, True])
@pytest.mark.parametrize("spread", [0, 24])
def test_nvfp4_codes_and_scales_equal_torchao(two_level: bool, spread: int) -> None:
    rng = np.random.default_rng(spread + two_level)
    if spread:  # blocks of very different sizes in one tensor: many block scales clamp at 2^-6
        x = (rng.standard_normal((400, 16)) * np.exp2(rng.uniform(-spread, 0, (400, 1)))).astype(np.float32)
    else:
        x = blocks(rng, 600, 16)
    scale, codes, pts = _nvfp4(x, two_level)
    q = mx_quantize(x, "nvfp4", tensor_scale=None if two_level else 1.0)
    if pts is not None:
        assert q.tensor_scale == pts  # amax / (6 x 448) in float32
    np.testing.assert_array_equal(q.scale_codes, scale)
    np.testing.assert_array_equal(q.element_codes, codes)


def test_nvfp4_of_bfloat16_and_of_a_given_tensor_scale_equal_torchao() -> None:
    rng = np.random.default_rng(9)
    xb = torch.from_numpy(rng.standard_normal((64, 48)).astype(np.float32)).to(torch.bfloat16)
    for given in (0.001, 0.37, 2.0**-20):
        pts = torch.tensor(given, dtype=torch.float32)
        scale, data = nvfp4_quantize(xb, 16, pts)
        q = mx_quantize(xb.float().numpy(), "nvfp4", tensor_scale=given)
        assert q.tensor_scale == float(pts)
        np.testing.assert_array_equal(q.scale_codes, scale.view(torch.uint8).numpy().reshape(64, 3))
        np.testing.assert_array_equal(q.element_codes, _codes(data, (64, 48)))


def test_nvfp4_nan_block_against_torchao_and_infinity() -> None:
    x = np.random.default_rng(3).standard_normal((4, 16)).astype(np.float32)
    x[1, 2] = np.nan
    x[2, 7] = -np.inf
    scale, codes, _ = _nvfp4(x, False)
    q = mx_quantize(x, "nvfp4", tensor_scale=1.0)
    assert scale[1, 0] == E4M3_NAN  # torchao: a NaN makes its block scale NaN too
    assert scale[2, 0] == 0x7E  # ... an infinity's block gets 448 and saturates
    assert q.scale_codes[1:3, 0].tolist() == [E4M3_NAN, E4M3_NAN]
    assert q.nan_blocks == 2
    assert np.isnan(q.dequantize()[1:3]).all()
    for i in (0, 3):
        assert q.scale_codes[i, 0] == scale[i, 0]
        np.testing.assert_array_equal(q.element_codes[i], codes[i])
    # the tensor scale is the finite values' amax: the other blocks are as without the inf
    clean = np.where(np.isfinite(x), x, 0)
    assert mx_quantize(x, "nvfp4").tensor_scale == mx_quantize(clean, "nvfp4").tensor_scale
