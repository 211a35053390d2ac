"""The exact fp32 GEMM (every output the exact sum of the exact products, rounded once to nearest
even) against exact rational arithmetic, and the trainer's host GEMMs against it and against BLAS's
thread count and kernel choice (in child processes, where OpenBLAS reads its settings)."""

from __future__ import annotations

import hashlib
import itertools
import os
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest
from oracles import f32, nearest_f32, other_blas_kernel, same_bits

from floatlab.rounding import exact_matmul
from floatlab.train.hostmath import _blocks, deterministic, host_matmul, is_deterministic


def exact_reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = np.empty((a.shape[0], b.shape[1]), np.float32)
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            s = sum(
                (Fraction(float(a[i, t])) * Fraction(float(b[t, j])) for t in range(a.shape[1])), Fraction(0)
            )
            out[i, j] = nearest_f32(s)
    return out


def test_the_oracle_itself() -> None:
    # against NumPy's float64 -> float32 cast, which rounds once, where the value is a float64
    rng = np.random.default_rng(0)
    with np.errstate(over="ignore"):
        for v in rng.standard_normal(200) * 2.0 ** rng.integers(-160, 130, 200):
            assert same_bits(f32(v), nearest_f32(Fraction(float(v))))


def _spread(rng: np.random.Generator, shape: tuple[int, ...], lo: int, hi: int) -> np.ndarray:
    # float32 values over many binades, subnormals included
    return (rng.standard_normal(shape) * 2.0 ** rng.integers(lo, hi, shape)).astype(np.float32)


@pytest.mark.parametrize("seed", range(6))
def test_random_products_over_the_whole_range(seed: int) -> None:
    rng = np.random.default_rng(seed)
    m, k, n = (int(v) for v in rng.integers(1, 7, 3))
    k = int(rng.integers(1, 48))
    a, b = _spread(rng, (m, k), -75, 60), _spread(rng, (k, n), -75, 60)
    assert same_bits(exact_matmul(a, b), exact_reference(a, b))


@pytest.mark.parametrize("seed", range(6))
def test_cancelling_sums_take_the_exact_path(seed: int) -> None:
    # pairs of products that cancel leave a small remainder that float64 cannot place exactly
    rng = np.random.default_rng(100 + seed)
    a, b = _spread(rng, (4, 12), -20, 20), _spread(rng, (12, 3), -20, 20)
    a[:, 6:] = a[:, :6]
    b[6:] = -b[:6] * np.float32(1 + 2.0**-20)
    a[:, -1] = np.float32(2.0**-60)
    assert same_bits(exact_matmul(a, b), exact_reference(a, b))


@pytest.mark.parametrize("fmt", ["bfloat16", "float16"])
def test_low_precision_operands(fmt: str) -> None:
    # a mixed-precision GEMM's operands: their sums are often exact in float64, and often ties
    import ml_dtypes

    dtype = ml_dtypes.bfloat16 if fmt == "bfloat16" else np.float16
    rng = np.random.default_rng(7)
    a = rng.standard_normal((9, 64)).astype(dtype).astype(np.float32)
    b = rng.standard_normal((64, 5)).astype(dtype).astype(np.float32)
    assert same_bits(exact_matmul(a, b), exact_reference(a, b))


def test_ties_go_to_even_and_a_sticky_bit_breaks_them() -> None:
    one = np.ones((3, 1), np.float32)
    assert exact_matmul(f32([[1.0, 2.0**-24, 0.0]]), one).item() == 1.0  # tie: to even
    up = np.nextafter(np.float32(1), np.float32(2))
    assert exact_matmul(f32([[1.0, 2.0**-24, 2.0**-100]]), one).item() == up  # just above
    assert exact_matmul(f32([[up, 2.0**-24, 0.0]]), one).item() == np.float32(1 + 2.0**-22)  # odd: up
    # left to right in float32, 1 + 2^-24 + 2^-24 is 1; exactly it is 1 + 2^-23
    assert exact_matmul(f32([[1.0, 2.0**-24, 2.0**-24]]), one).item() == up


def test_overflow_underflow_and_zeros() -> None:
    big = np.finfo(np.float32).max
    one2, one3 = np.ones((2, 1), np.float32), np.ones((3, 1), np.float32)
    assert exact_matmul(f32([[big, 2.0**103]]), one2).item() == np.inf  # the threshold: a tie to 2^128
    assert exact_matmul(f32([[big, 2.0**103, -(2.0**-149)]]), one3).item() == big
    assert exact_matmul(f32([[big, big]]), f32([[1.0], [-1.0]])).item() == 0.0
    tiny = np.float32(2.0**-149)
    assert exact_matmul(f32([[tiny]]), f32([[0.5]])).item() == 0.0  # a tie to even: 0
    got = exact_matmul(f32([[tiny, -tiny]]), f32([[0.5], [0.75]]))  # -2^-151: -0
    assert got.item() == 0.0
    assert np.signbit(got.item())
    zero = exact_matmul(f32([[-0.0, 3.0]]), f32([[1.0], [0.0]]))  # an exact zero sum: +0
    assert not np.signbit(zero.item())
    assert not np.signbit(exact_matmul(f32([[1.0, 1.0]]), f32([[1.0], [-1.0]])).item())


def test_infinities_and_nans() -> None:
    got = exact_matmul(f32([[np.inf, 1.0], [np.inf, -np.inf], [np.nan, 0.0]]), f32([[1.0], [1.0]]))
    assert got[0, 0] == np.inf
    assert np.isnan(got[1:]).all()
    assert got[1:].view(np.uint32).tolist() == [[0x7FC00000], [0x7FC00000]]  # one NaN, whatever the order


def _reference_stack(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """:func:`exact_reference` matrix by matrix over NumPy's broadcast of the stacks."""
    a2 = a[None] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    a3 = np.broadcast_to(a2, (*batch, *a2.shape[-2:]))
    b3 = np.broadcast_to(b2, (*batch, *b2.shape[-2:]))
    out = np.empty((*batch, a2.shape[-2], b2.shape[-1]), np.float32)
    for idx in np.ndindex(*batch):
        out[idx] = exact_reference(a3[idx], b3[idx])
    result: np.ndarray = out.reshape(np.matmul(a, b).shape)
    return result


def test_shapes_follow_numpy() -> None:
    rng = np.random.default_rng(3)
    cases = [
        ((3, 4, 5, 6), (3, 4, 6, 7)), ((2, 1, 5, 6), (3, 6, 7)), ((3, 5, 6), (6, 7)),
        ((6,), (6, 7)), ((5, 6), (6,)),
    ]  # fmt: skip
    for sa, sb in cases:
        a, b = _spread(rng, sa, -3, 3), _spread(rng, sb, -3, 3)
        got = exact_matmul(a, b)
        assert got.dtype == np.float32
        assert same_bits(got, _reference_stack(a, b))
    assert exact_matmul(np.zeros((0, 3), np.float32), np.ones((3, 2), np.float32)).shape == (0, 2)
    assert exact_matmul(np.ones((2, 0), np.float32), np.ones((0, 2), np.float32)).tolist() == [[0.0] * 2] * 2


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="float64: expected float32"):
        exact_matmul(np.ones((2, 2)), np.ones((2, 2), np.float32))
    with pytest.raises(ValueError, match="inner dimensions differ"):
        exact_matmul(np.ones((2, 3), np.float32), np.ones((2, 2), np.float32))


# ---- the trainer's host GEMMs ---------------------------------------------------------------------
SHAPES = [
    ((2048, 64), (64, 64)),
    ((64, 2048), (2048, 192)),
    ((32, 64, 64), (64, 256)),
    ((128, 64, 16), (128, 16, 64)),
    ((3, 5), (5, 2)),
]


def test_host_matmul_is_the_exact_gemm_inside_deterministic() -> None:
    rng = np.random.default_rng(5)
    for sa, sb in SHAPES:
        a, b = _spread(rng, sa, -4, 4), _spread(rng, sb, -4, 4)
        with deterministic():
            assert is_deterministic()
            got = host_matmul(a, b)
        assert same_bits(got, exact_matmul(a, b))
        # BLAS's float32 sums, in any order, are within K 2^-24 sum|a b| of the exact sum
        plain = host_matmul(a, b).astype(np.float64)
        bound = a.shape[-1] * 2.0**-23 * np.matmul(np.abs(a).astype(np.float64), np.abs(b).astype(np.float64))
        assert (np.abs(plain - got) <= bound).all()
    assert not is_deterministic()


def test_blocks_depend_on_the_shape_alone() -> None:
    # whole 16-row panels, covering the rows once, as many as the work asks, at most 8
    blocks = _blocks(1000, 10**9, 16)
    assert len(blocks) == 8
    assert blocks[0][0] == 0
    assert blocks[-1][1] == 1000
    assert all(p[1] == q[0] for p, q in itertools.pairwise(blocks))
    assert all((hi - lo) % 16 == 0 for lo, hi in blocks[:-1])
    assert _blocks(64, 64 * 64 * 64, 16) == [(0, 64)]  # a small GEMM: one piece


_CHILD = (
    r"""
import hashlib, sys
SHAPES = """
    + repr(SHAPES)
    + r"""
import numpy as np
from floatlab.train.hostmath import deterministic, host_matmul
rng = np.random.default_rng(11)
h = hashlib.sha256()
with deterministic(sys.argv[1] == "exact"):
    for sa, sb in SHAPES:
        a = (rng.standard_normal(sa) * 2.0 ** rng.integers(-4, 4, sa)).astype(np.float32)
        b = (rng.standard_normal(sb) * 2.0 ** rng.integers(-4, 4, sb)).astype(np.float32)
        h.update(host_matmul(a, b).tobytes())
print(h.hexdigest())
"""
)


def _digest_in_child(mode: str, **env: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, mode],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return out.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("mode", ["blas", "exact"])
def test_host_gemms_ignore_the_blas_thread_count(mode: str) -> None:
    assert _digest_in_child(mode, OPENBLAS_NUM_THREADS="1") == _digest_in_child(
        mode, OPENBLAS_NUM_THREADS="2"
    )


def test_exact_host_gemms_ignore_the_blas_kernel() -> None:
    kernels = {"Haswell", other_blas_kernel()}
    digests = {_digest_in_child("exact", OPENBLAS_CORETYPE=c) for c in kernels}
    assert len(digests) == 1
    assert hashlib.sha256(b"").hexdigest() not in digests
