"""The E4M3-scaled (NVFP4) block loop's own arithmetic against independent oracles: its float32
element rounding against the general rounding door (``encode_array``) on the recipe's float32
products, in every mode and element format; its float32 inexact test against exact float64
products, on both sides of the tensor scale below which it falls back to float64; the values of
``encode_blocks(split_tensor_scale=True)`` against ml_dtypes' decoding of the codes."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

import floatlab as fl
from floatlab.rounding import encode_blocks, round_blocks_split

MODES = ("rne", "rna", "rtz", "rup", "rdown", "rodd", "stochastic")
#: ml_dtypes types of the element formats (to decode their codes)
ELEMENTS = {
    "float4_e2m1fn": ml_dtypes.float4_e2m1fn,
    "float6_e2m3fn": ml_dtypes.float6_e2m3fn,
    "float6_e3m2fn": ml_dtypes.float6_e3m2fn,
    "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
    "float8_e4m3fnuz": ml_dtypes.float8_e4m3fnuz,
    "float8_e5m2": ml_dtypes.float8_e5m2,
    "float8_e5m2fnuz": ml_dtypes.float8_e5m2fnuz,
}


def _data(rng: np.random.Generator, rows: int, k: int = 16) -> np.ndarray:
    """float32 rows of very different sizes, exact ties, zeros and float32 subnormals."""
    x = rng.standard_normal((rows, k)) * np.exp2(rng.uniform(-40, 20, (rows, 1)))
    x[::5] = (rng.integers(-16, 16, (len(x[::5]), k)) + 0.5) * 2.0 ** float(rng.integers(-6, 6))
    x[3::9, : k // 2] = 0.0
    x[4, :3] = [2.0**-149, -(2.0**-140), 2.0**-130]
    return x.astype(np.float32)


def _decode(codes: np.ndarray, name: str) -> np.ndarray:
    """float64 values of the element codes of ``name`` (ml_dtypes' decoding)."""
    out: np.ndarray = np.asarray(codes, np.uint8).view(ELEMENTS[name]).astype(np.float64)
    return out


def _scales(codes: np.ndarray) -> np.ndarray:
    """float32 values of E4M3 scale codes (ml_dtypes' decoding)."""
    out: np.ndarray = np.asarray(codes, np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    return out


@pytest.mark.parametrize("name", sorted(ELEMENTS))
@pytest.mark.parametrize("mode", MODES)
def test_elements_are_the_rounding_doors_codes_of_the_recipes_products(name: str, mode: str) -> None:
    """Each element is fl(v x fl(fl(1 / t) / scale)), numpy float32 arithmetic, rounded into the
    element format by encode_array (same mode, same random words, saturating)."""
    x = _data(np.random.default_rng(len(name) + len(mode)), 96)
    element = fl.get_format(name)
    rng = 11 if mode == "stochastic" else None
    b = encode_blocks(x, element, 16, mode, rng=rng, scale="e4m3", tensor_scale=None)
    t = np.float32(b.tensor_scale)
    rcp = (np.float32(1) / t) / _scales(b.scale_codes)  # float32, one rounding each
    y = x * rcp  # (one block per row)
    want = fl.encode_array(y, element, mode, rng=rng, saturate=True)
    np.testing.assert_array_equal(b.element_codes, want)
    # saturated: |y| beyond the largest element, rounded in this mode (the door's overflow flag)
    _, flags = fl.encode_array_with_flags(y.reshape(-1), element, mode, rng=rng, saturate=True)
    assert b.overflow == flags.overflow


@pytest.mark.parametrize(
    "tensor_scale", [(1 + 2.0**-23) * 2.0**-121, 3 * 2.0**-118, 2.0**-100, 0.37, 2.0**90]
)
def test_inexact_counts_against_exact_products(tensor_scale: float) -> None:
    """A value is inexact when element x block scale x t (exact in float64) differs from it; the
    loop's float32 test holds above a tensor scale of about 2^-116 and falls back below it."""
    t32 = float(np.float32(tensor_scale))
    rng = np.random.default_rng(5)
    # blocks around t x the smallest block scale x the elements: products near float32's bottom
    x = (rng.standard_normal((200, 16)) * t32 * 2.0 ** rng.integers(-8, 12, (200, 1))).astype(np.float32)
    x[7] = np.float32(2.0**-128)  # (1 + 2^-23) 2^-121: element 0.5 x 2^-6 x t is 2^-151 off 2^-128
    x[8, :4] = [2.0**-149, 0.0, -(2.0**-149), 2.0**-126]
    b = encode_blocks(x, fl.get_format("e2m1"), 16, "rne", scale="e4m3", tensor_scale=tensor_scale)
    product = _decode(b.element_codes, "float4_e2m1fn") * _scales(b.scale_codes).astype(np.float64) * t32
    assert b.inexact == np.count_nonzero(product != x.astype(np.float64))
    assert b.inexact > 0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("block", [16, (16, 1), (16, 16)])
def test_split_tensor_scale_values_are_element_times_block_scale(
    dtype: Any, block: int | tuple[int, int]
) -> None:
    """split_tensor_scale=True: each value is the element (ml_dtypes' float4_e2m1fn) times its
    block's E4M3 scale (ml_dtypes' float8_e4m3fn), exactly; without it, that times t rounded
    once into the rows' dtype."""
    x: np.ndarray = _data(np.random.default_rng(9), 64, 32).astype(dtype)
    element = fl.get_format("e2m1")
    split = encode_blocks(x, element, block, "rne", values=True, scale="e4m3", split_tensor_scale=True)
    whole = encode_blocks(x, element, block, "rne", values=True, scale="e4m3")
    np.testing.assert_array_equal(split.element_codes, whole.element_codes)
    np.testing.assert_array_equal(split.scale_codes, whole.scale_codes)
    assert split.tensor_scale == whole.tensor_scale
    br, bc = (1, block) if isinstance(block, int) else block
    s8 = _scales(split.scale_codes).astype(np.float64)
    per_value = np.repeat(np.repeat(s8, br, axis=0), bc, axis=1)[: x.shape[0], : x.shape[1]]
    exact = _decode(split.element_codes, "float4_e2m1fn") * per_value  # (exact: 2 by 4 bits)
    assert split.values is not None
    assert whole.values is not None
    assert split.values.dtype == dtype
    np.testing.assert_array_equal(split.values.astype(np.float64), exact)
    # with t: the exact float64 product (at most 30 bits) rounded once into the dtype
    np.testing.assert_array_equal(whole.values, (exact * whole.tensor_scale).astype(dtype))
    # the values alone (the pass that forms no codes, and rounds to nearest even in place)
    alone, t = round_blocks_split(x, element, block, "rne", scale="e4m3")
    np.testing.assert_array_equal(alone, split.values)
    assert t == split.tensor_scale


@pytest.mark.parametrize("name", sorted(ELEMENTS))
@pytest.mark.parametrize("mode", ["rne", "rtz", "stochastic"])
def test_e4m3_values_alone_are_the_codes_values(name: str, mode: str) -> None:
    """round_blocks_split's one pass (in place for nearest even) gives the values that
    encode_blocks reads off its codes, in every element format."""
    x = _data(np.random.default_rng(len(name) * 3 + len(mode)), 200, 32)
    element = fl.get_format(name)
    rng = 5 if mode == "stochastic" else None
    enc = encode_blocks(x, element, 16, mode, rng=rng, values=True, scale="e4m3", split_tensor_scale=True)
    alone, _ = round_blocks_split(x, element, 16, mode, rng=rng, scale="e4m3")
    assert enc.values is not None
    np.testing.assert_array_equal(alone, enc.values)


def _e8m0_data(rng: np.random.Generator, rows: int, k: int) -> np.ndarray:
    """float64 rows for the E8M0 loops: every kind of _data's, blocks spread from float32's
    subnormals to its top (where a moved element range leaves float32's normal numbers and the
    loop takes its general path), a block with an infinity and one with a NaN."""
    x = _data(rng, rows, k).astype(np.float64)
    x[1::7] *= np.exp2(rng.integers(-110, 100, (len(x[1::7]), 1)).astype(np.float64))
    x[2] = rng.standard_normal(k) * 2.0**-140  # (tiny shifts: the general path)
    x[5] = rng.standard_normal(k) * 2.0**126  # (the largest shifts)
    x[6, 1] = np.inf
    x[10, 2] = np.nan
    return x


@pytest.mark.parametrize("name", sorted(ELEMENTS))
@pytest.mark.parametrize("scale", ["floor", "rceil"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mode", ["rne", "stochastic"])
def test_e8m0_blocks_are_the_doors_rounding_of_the_moved_values(
    name: str, scale: str, dtype: Any, mode: str
) -> None:
    """E8M0 blocks rounded to nearest even, or stochastically (float32 rows only), in place in
    the input's bits where each block's moved range allows, by the general routine elsewhere:
    every element is encode_array of v / 2^s (exact in float64) into the element format,
    saturating, in the same mode and with the same random words; the values are those elements
    times 2^s, the counts follow from the codes, and the values alone are the same."""
    element = fl.get_format(name)
    rng = np.random.default_rng(len(name) * 7 + len(scale))
    # every kind of _e8m0_data's blocks (some take the general routine, and so does the whole
    # work item they are in); then blocks that all allow the in-place rounding, with values
    # from the block's top down 48 binades (below the element's smallest subnormal)
    spread = rng.standard_normal((96, 32)) * np.exp2(rng.uniform(-20, 20, (96, 1)))
    spread *= np.exp2(-rng.integers(0, 48, (96, 32)))
    rows = np.concatenate([_e8m0_data(rng, 120, 32), spread]).astype(dtype)
    seed = 9 if mode == "stochastic" else None
    b = encode_blocks(rows, element, 32, mode, rng=seed, values=True, scale=scale)
    finite = b.scale_codes[:, 0] != 255
    assert not finite[6]
    assert not finite[10]
    shift = np.where(finite[:, None], b.scale_codes.astype(np.int64) - 127, 0)
    moved = np.ldexp(np.where(finite[:, None], rows.astype(np.float64), 0.0), -shift)
    want = fl.encode_array(moved, element, mode, rng=seed, saturate=True)  # (the same words)
    np.testing.assert_array_equal(b.element_codes[finite], want[finite])
    assert not b.element_codes[~finite].any()
    values = np.ldexp(_decode(want, name), shift)[finite]
    assert b.values is not None
    np.testing.assert_array_equal(b.values[finite], values.astype(dtype))
    assert np.isnan(b.values[~finite]).all()
    nonzero = rows[finite] != 0
    magnitude = want[finite] & ~np.uint8(1 << (element.bits - 1))
    assert b.nonzero == np.count_nonzero(nonzero)
    assert b.flushed == np.count_nonzero(nonzero & (magnitude == 0))
    assert b.subnormal == np.count_nonzero((magnitude != 0) & (magnitude < (1 << element.mantissa_bits)))
    assert b.inexact == np.count_nonzero(values != rows[finite])
    # the values alone (the pass that forms no codes) are the same
    alone = fl.rounding.round_blocks(rows, element, 32, mode, rng=seed, scale=scale)
    np.testing.assert_array_equal(alone, b.values)


@pytest.mark.parametrize("scale", ["e4m3", "floor", "rceil"])
@pytest.mark.parametrize("mode", ["rne", "rtz", "stochastic"])
@pytest.mark.parametrize("name", ["float4_e2m1fn", "float8_e4m3fn", "float8_e4m3fnuz"])
def test_counts_without_codes_are_the_codes_counts(scale: str, mode: str, name: str) -> None:
    """encode_blocks(element_codes=False): the same values, scales and counts as with the codes
    (under "e4m3" from the values' own pass, which forms no codes), and an empty codes array."""
    x = _data(np.random.default_rng(len(scale) + len(mode) + len(name)), 150, 32)
    x[6, 1] = np.inf
    element = fl.get_format(name)
    rng = 3 if mode == "stochastic" else None
    how: dict[str, Any] = {"values": True, "scale": scale, "split_tensor_scale": scale == "e4m3"}
    full = encode_blocks(x, element, 16, mode, rng=rng, **how)
    bare = encode_blocks(x, element, 16, mode, rng=rng, element_codes=False, **how)
    assert bare.element_codes.size == 0
    assert full.values is not None
    assert bare.values is not None
    np.testing.assert_array_equal(bare.values, full.values)
    np.testing.assert_array_equal(bare.scale_codes, full.scale_codes)
    assert bare[3:] == full[3:]
    assert full.flushed > 0
    assert full.inexact > 0


def _binade_sweep(rng: np.random.Generator) -> np.ndarray:
    """Blocks of 16 whose first value pins the scale and whose other 15 lie 0 to 180 binades
    below it, of both signs, with random fractions: after the scale, products in every float32
    binade from the element's top down through the element's subnormals, below its smallest
    subnormal, and into float32's subnormals and zeros."""
    k = np.arange(181, dtype=np.float64)
    frac = 1 + rng.random((k.size, 15))
    sign = rng.choice([-1.0, 1.0], (k.size, 15))
    rows = np.empty((k.size, 16))
    rows[:, 0] = 6.0 * 2.0**20
    rows[:, 1:] = sign * frac * 2.0 ** (20 - k[:, None])
    rows[::3, 1] = 6.0 * 2.0**20 * (1 - 2.0**-9)  # (just under the pin: rounds up to the top or not)
    return np.repeat(rows, 3, axis=0).astype(np.float32)  # each row thrice: other random words


PLAIN = ["float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn", "float8_e4m3fn", "float8_e5m2"]


@pytest.mark.parametrize("name", PLAIN)
def test_stochastic_in_place_over_every_float32_binade(name: str) -> None:
    """Stochastic rounding in place (the E4M3-scaled loop's ``_sr`` twin, for formats without
    flush-to-zero or fnuz zeros) against the door's stochastic rounding of the same products
    with the same random words, over products in every float32 binade, subnormals included; the
    values alone, the values with the counts and the codes all agree."""
    x = _binade_sweep(np.random.default_rng(len(name)))
    element = fl.get_format(name)
    how: dict[str, Any] = {"rng": 17, "values": True, "scale": "e4m3", "split_tensor_scale": True}
    b = encode_blocks(x, element, 16, "stochastic", **how)
    rcp = (np.float32(1) / np.float32(b.tensor_scale)) / _scales(b.scale_codes)
    y = x * rcp
    assert (np.abs(y[y != 0]) < 2.0**-126).any()  # (the sweep reaches float32's subnormals)
    want, flags = fl.encode_array_with_flags(y.reshape(-1), element, "stochastic", rng=17, saturate=True)
    np.testing.assert_array_equal(b.element_codes.reshape(-1), want)
    assert b.overflow == flags.overflow
    magnitude = want & ~np.uint8(1 << (element.bits - 1))
    nonzero = x.reshape(-1) != 0
    assert b.flushed == np.count_nonzero(nonzero & (magnitude == 0))
    assert b.subnormal == np.count_nonzero((magnitude != 0) & (magnitude < (1 << element.mantissa_bits)))
    assert b.flushed > 0
    assert b.subnormal > 0
    exact = _decode(b.element_codes, name) * np.repeat(_scales(b.scale_codes).astype(np.float64), 16, axis=1)
    assert b.values is not None
    np.testing.assert_array_equal(b.values.astype(np.float64), exact)
    alone, _ = round_blocks_split(x, element, 16, "stochastic", rng=17, scale="e4m3")
    np.testing.assert_array_equal(alone, b.values)
    bare = encode_blocks(x, element, 16, "stochastic", element_codes=False, **how)
    assert bare.values is not None
    np.testing.assert_array_equal(bare.values, b.values)
    assert bare[3:] == b[3:]
