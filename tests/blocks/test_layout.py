"""Where the blocks lie: along any axis, as square tiles over two axes, in arrays that do not
divide into blocks (the last block is shorter, the same as padding with zeros), in arrays large
enough to be cut into many work items; every block checked against the exact scalar reference."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

from floatlab.blocks import get_mx_format, mx_block_reference, mx_quantize, mx_round

FORMATS = [("mxfp8_e4m3", "floor"), ("mxfp4_e2m1", "rceil"), ("mxfp6_e3m2", "floor"), ("nvfp4", None)]


def _data(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    x = rng.standard_normal(shape) * np.exp2(rng.uniform(-12, 12, shape[:1] + (1,) * (len(shape) - 1)))
    return x.astype(np.float32)


def _check_block(
    q: object, values: np.ndarray, scale: int, codes: np.ndarray, name: str, mode: str | None
) -> None:
    kw = {"tensor_scale": q.tensor_scale} if mode is None else {"scale_mode": mode}  # type: ignore[attr-defined]
    want_scale, want_codes = mx_block_reference(values.tolist(), name, **kw)
    assert (int(scale), codes.tolist()) == (want_scale, want_codes)


@pytest.mark.parametrize(("name", "mode"), FORMATS)
def test_blocks_along_every_axis_equal_the_reference(name: str, mode: str | None) -> None:
    rng = np.random.default_rng(1)
    x = _data(rng, (3, 70, 5))
    for axis in (0, 1, 2, -1):
        q = mx_quantize(x, name, axis=axis, scale_mode=mode)
        k = q.format.block_size
        ax = axis % 3
        assert q.element_codes.shape == x.shape
        assert q.scale_codes.shape == tuple(-(-n // k) if i == ax else n for i, n in enumerate(x.shape))
        for idx in itertools.product(*(range(n) for n in q.scale_codes.shape)):
            sl = tuple(slice(i * k, i * k + k) if d == ax else i for d, i in enumerate(idx))
            _check_block(q, x[sl], q.scale_codes[idx], q.element_codes[sl], name, mode)


@pytest.mark.parametrize(("name", "mode"), FORMATS)
def test_square_tiles_over_two_axes_equal_the_reference(name: str, mode: str | None) -> None:
    x = _data(np.random.default_rng(2), (2, 40, 36))
    for axes in ((1, 2), (0, 1), (2, 0)):
        q = mx_quantize(x, name, axis=axes, scale_mode=mode, block_size=16)
        i, j = sorted(axes)
        assert q.axis == (i, j)
        assert q.scale_codes.shape == tuple(-(-n // 16) if d in (i, j) else n for d, n in enumerate(x.shape))
        for idx in itertools.product(*(range(n) for n in q.scale_codes.shape)):
            sl = tuple(slice(b * 16, b * 16 + 16) if d in (i, j) else b for d, b in enumerate(idx))
            _check_block(
                q, x[sl].reshape(-1), q.scale_codes[idx], q.element_codes[sl].reshape(-1), name, mode
            )
        back = q.dequantize()  # each value times its own tile's scale
        scales = q.scales()
        for d in (i, j):
            scales = np.repeat(scales, 16, axis=d).take(np.arange(x.shape[d]), axis=d)
        np.testing.assert_array_equal(back, q.elements() * scales)


def test_a_gemm_operand_and_its_transpose_are_blocked_along_their_own_reduction() -> None:
    """x @ W reduces over W's rows: W in blocks down its columns (axis 0) is W.T in blocks
    along its rows; square tiles are the same tiles, transposed."""
    w = _data(np.random.default_rng(3), (96, 48))
    for name in ("mxfp8_e4m3", "nvfp4"):
        down = mx_quantize(w, name, axis=0)
        along = mx_quantize(np.ascontiguousarray(w.T), name, axis=1)
        np.testing.assert_array_equal(down.element_codes, along.element_codes.T)
        np.testing.assert_array_equal(down.scale_codes, along.scale_codes.T)
        tiles = mx_quantize(w, name, axis=(0, 1))
        tiles_t = mx_quantize(np.ascontiguousarray(w.T), name, axis=(0, 1))
        np.testing.assert_array_equal(tiles.element_codes, tiles_t.element_codes.T)
        np.testing.assert_array_equal(tiles.scale_codes, tiles_t.scale_codes.T)


@pytest.mark.parametrize(("name", "mode"), FORMATS)
def test_a_dimension_that_does_not_divide_is_padded_with_zeros(name: str, mode: str | None) -> None:
    rng = np.random.default_rng(4)
    x = _data(rng, (20, 70))
    padded = np.zeros((32, 96), np.float32)
    padded[:20, :70] = x
    for axis in (-1, (0, 1)):
        q = mx_quantize(x, name, axis=axis, scale_mode=mode, block_size=16)
        p = mx_quantize(padded, name, axis=axis, scale_mode=mode, block_size=16)
        np.testing.assert_array_equal(q.element_codes, p.element_codes[:20, :70])
        cut = q.scale_codes.shape
        np.testing.assert_array_equal(q.scale_codes, p.scale_codes[: cut[0], : cut[1]])
        assert q.tensor_scale == p.tensor_scale
        assert (q.nonzero, q.flushed, q.clamped) == (p.nonzero, p.flushed, p.clamped)


def test_large_arrays_cut_into_many_work_items_equal_the_reference() -> None:
    rng = np.random.default_rng(5)
    x = _data(rng, (1024, 1030))  # over a million values: parallel, rows that do not divide by 32
    for name, mode in FORMATS:
        for axis in (1, 0, (0, 1)):
            q = mx_quantize(x, name, axis=axis, scale_mode=mode)
            k = q.format.block_size
            for _ in range(40):
                idx = tuple(int(rng.integers(n)) for n in q.scale_codes.shape)
                ax = (axis,) if isinstance(axis, int) else axis
                sl = tuple(slice(i * k, i * k + k) if d in ax else i for d, i in enumerate(idx))
                _check_block(
                    q, x[sl].reshape(-1), q.scale_codes[idx], q.element_codes[sl].reshape(-1), name, mode
                )
            assert q.nonzero == np.count_nonzero(x)


def test_empty_and_scalar_inputs() -> None:
    for name in ("mxfp8_e4m3", "nvfp4"):
        q = mx_quantize(np.zeros((3, 0), np.float32), name)
        assert q.element_codes.shape == (3, 0)
        assert q.scale_codes.shape == (3, 0)
        assert q.nonzero == 0
        assert mx_quantize(np.zeros((0, 5)), name, axis=0).scale_codes.shape == (0, 5)
        assert mx_round(np.float32(3.0), name).shape == ()


@pytest.mark.parametrize(
    ("axis", "message"),
    [
        ((0, 0), "axis=(0, 0): expected two different axes"),
        ((0, 1, 2), "axis=(0, 1, 2): expected one axis, or two for square blocks"),
        ((0, 5), "axis=5: expected an axis of an array of 2 dimensions"),
        ("0", "axis='0': expected a whole number, or two of them"),
    ],
)
def test_bad_axes_are_one_value_error(axis: object, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        mx_quantize(np.ones((4, 4)), "mxfp8_e4m3", axis=axis)  # type: ignore[arg-type]


@pytest.mark.parametrize(("name", "mode"), [*FORMATS, ("mxfp8_e5m2", "rceil"), ("mxfp6_e2m3", None)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fake_quantization_equals_the_dequantized_codes(name: str, mode: str | None, dtype: type) -> None:
    """mx_round's one pass (no codes) and encode_blocks' values pass give the values that the
    codes and scales stand for (decode_array times the scales, in float64), NaN blocks included."""
    from floatlab.rounding import encode_blocks, round_blocks

    rng = np.random.default_rng(7)
    x: np.ndarray = _data(rng, (6, 40, 33)).astype(dtype)
    x[0, 3, 4] = np.nan
    x[2, 0, 0] = -np.inf
    x[4, :, :] *= 2.0**-120  # tiny blocks: scales near the bottom of E8M0
    for axis in (-1, 1, (1, 2)):
        for rounding, seed in (("rne", None), ("rtz", None), ("stochastic", 5)):
            kw = {"scale_mode": mode, "rounding": rounding, "rng": seed, "axis": axis}
            q = mx_quantize(x, name, **kw)  # type: ignore[arg-type]
            want: np.ndarray = q.dequantize().astype(dtype)
            np.testing.assert_array_equal(mx_round(x, name, **kw), want)  # type: ignore[arg-type]
    f = get_mx_format(name)
    rule = "e4m3" if f.scale == "e4m3" else mode or "floor"
    b = encode_blocks(np.ascontiguousarray(x), f.element, f.block_size, "rup", values=True, scale=rule)
    assert b.values is not None
    np.testing.assert_array_equal(b.values, round_blocks(x, f.element, f.block_size, "rup", scale=rule))
