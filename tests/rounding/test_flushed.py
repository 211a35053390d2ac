"""round_flushed: the door's values and the count of non-zero values it flushed, against
round_array and NumPy's counts, on every float32 class (random bit patterns: NaNs, infinities,
subnormals, -0), in the one-pass casts (float32 into bfloat16 and fp16 to nearest even) and in
the door's other paths (other formats, modes, dtypes, layouts)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import floatlab as fl
from floatlab.rounding import round_flushed


def _patterns(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    x: np.ndarray = bits.view(np.float32).copy()
    # many values near bfloat16's and fp16's bottoms, where the flushes are
    x[: n // 3] = (rng.standard_normal(n // 3) * np.exp2(rng.uniform(-150, -100, n // 3))).astype(np.float32)
    x[n // 3 : n // 2] = (rng.standard_normal(n // 2 - n // 3) * 2.0**-24).astype(np.float32)
    x[:8] = [0.0, -0.0, np.nan, np.inf, -np.inf, 2.0**-134, 2.0**-133, 2.0**-25]
    return x


@pytest.mark.parametrize(
    ("fmt", "knobs"),
    [
        ("bf16", {}),
        ("fp16", {}),
        ("bf16", {"saturate": True}),
        ("fp16", {"subnormals": False}),
        ("bf16", {"rounding": "rtz"}),
        ("fp16", {"rounding": "stochastic", "rng": 7}),
        ("bf16", {"rounding": "stochastic", "rng": 7, "random_bits": 3}),
        ("e4m3fn", {"saturate": True}),
        ("e5m2", {}),
    ],
)
def test_values_and_flushed_equal_the_door_and_numpy_counts(fmt: str, knobs: dict[str, Any]) -> None:
    x = _patterns(20_000, len(fmt) + len(knobs))
    got = round_flushed(x, fmt, **knobs)
    want = fl.round_array(x, fmt, **knobs)
    assert got.values.dtype == np.float32
    assert got.values.tobytes() == want.tobytes()
    nonzero = np.count_nonzero(x != 0)
    assert got.nonzero == nonzero
    assert got.flushed == nonzero - np.count_nonzero(want != 0)
    assert got.flushed > 0


@pytest.mark.parametrize("layout", ["float64", "transposed", "2-d"])
def test_other_dtypes_and_layouts(layout: str) -> None:
    x = _patterns(4_096, 3).reshape(64, 64)
    x[np.isnan(x)] = np.nan  # (quiet NaNs: a signalling one raises NumPy's invalid in a cast)
    arr: Any = {"float64": x.astype(np.float64), "transposed": x.T, "2-d": x}[layout]
    got = round_flushed(arr, "bf16")
    want = fl.round_array(arr, "bf16")
    assert got.values.shape == arr.shape
    assert got.values.tobytes() == want.tobytes()
    assert got.flushed == np.count_nonzero(arr != 0) - np.count_nonzero(want != 0)


@pytest.mark.parametrize("mode", ["stochastic", "rne"])
def test_a_generator_moves_on_as_in_the_door(mode: str) -> None:
    # a training step passes its own generator: round_flushed must draw from it exactly what
    # round_array draws (one key for a stochastic rounding, nothing otherwise)
    x = _patterns(4_096, 5)
    ours, theirs = np.random.default_rng(11), np.random.default_rng(11)
    got = round_flushed(x, "fp16", mode, rng=ours)
    want = fl.round_array(x, "fp16", mode, rng=theirs)
    assert got.values.tobytes() == want.tobytes()
    assert ours.integers(2**62) == theirs.integers(2**62)


def test_bad_input_is_the_doors_error() -> None:
    from floatlab.rounding import round_owned

    with pytest.raises(ValueError, match="rounding"):
        round_flushed(np.ones(3, np.float32), "bf16", "upward")
    with pytest.raises(ValueError, match="format"):
        round_flushed(np.ones(3, np.float32), "bf17")
    # the knobs are the door's, checked as the door checks them, in the one-pass cast too
    for f in (round_flushed, round_owned):
        with pytest.raises(ValueError, match="saturate"):
            f(np.ones(3, np.float32), "bf16", saturate=1)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="random_bits"):
            f(np.ones(3, np.float32), "bf16", random_bits=0)


@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
def test_overwrite_rounds_a_given_up_array_in_its_own_memory(fmt: str) -> None:
    """overwrite=True (a GEMM's fresh output stored in its format): the one-pass casts round x in
    its own memory, with the door's values and the same counts, and return x itself; round_owned
    likewise. Elsewhere (another format, mode, dtype or layout) x is left as it was and the
    values are a new array, the door's."""
    from floatlab.rounding import round_owned

    x = _patterns(20_000, len(fmt)).reshape(100, 200)
    x[np.isnan(x)] = np.nan  # (quiet NaNs: a signalling one raises NumPy's invalid in a cast)
    want = fl.round_array(x, fmt)
    kept = round_flushed(x, fmt)
    owned = x.copy()
    got = round_flushed(owned, fmt, overwrite=True)
    assert got.values is owned
    assert owned.tobytes() == want.tobytes()
    assert (got.nonzero, got.flushed) == (kept.nonzero, kept.flushed)
    again = x.copy()
    assert round_owned(again, fmt) is again
    assert again.tobytes() == want.tobytes()
    for arr, knobs in (
        (x.T, {}),
        (x.astype(np.float64), {}),
        (x, {"rounding": "rtz"}),
        (x, {"rounding": "stochastic", "rng": 3}),
    ):
        before = arr.copy()
        other = round_flushed(arr, fmt, overwrite=True, **knobs)
        assert other.values is not arr
        np.testing.assert_array_equal(arr, before)
        assert other.values.tobytes() == fl.round_array(before, fmt, **knobs).tobytes()
        assert round_owned(arr, fmt, **knobs) is not arr
        np.testing.assert_array_equal(arr, before)
    frozen = x.copy()
    frozen.setflags(write=False)  # (read-only: copied as without overwrite)
    got_frozen = round_flushed(frozen, fmt, overwrite=True)
    assert got_frozen.values is not frozen
    assert got_frozen.values.tobytes() == want.tobytes()
    assert round_owned(frozen, fmt).tobytes() == want.tobytes()
    np.testing.assert_array_equal(frozen, x)
    fp8 = x.copy()
    assert (
        round_owned(fp8, "e4m3fn", saturate=True).tobytes()
        == fl.round_array(x, "e4m3fn", saturate=True).tobytes()
    )
    np.testing.assert_array_equal(fp8, x)
