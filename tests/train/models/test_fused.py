"""The fused GELU, layer norm and softmax kernels against the NumPy code they replace.

The oracles: the layers' NumPy path (``_old_*`` below: model.py's code with the kernels switched off,
rounding points included), float64 central differences for the gradients, and, for the policies that
round inside the ops (pure fp16/bf16), bit-for-bit equality with that path, which they still run.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from oracles import numeric_grad

from floatlab.train import models as M
from floatlab.train.models import fused
from floatlab.train.precision import Precision

Arr = np.ndarray[Any, Any]


# ---- the NumPy path of the same layers (the reference) ---------------------------------------------
@contextmanager
def _numpy_path() -> Iterator[None]:
    """The layers as they run where no kernel applies: model.py's NumPy code, rounding points included."""
    fusable = fused.fusable
    fused.fusable = lambda *arrays: False
    try:
        yield
    finally:
        fused.fusable = fusable


def _old_gelu(x: Arr, P: Precision) -> Arr:
    with _numpy_path():
        return M.gelu_forward(x, P)


def _old_gelu_backward(dy: Arr, x: Arr, P: Precision) -> Arr:
    with _numpy_path():
        return M.gelu_backward(dy, x, P)


def _old_softmax(s: Arr, P: Precision) -> Arr:
    with _numpy_path():
        return M.softmax_forward(s, P)


def _old_softmax_backward(dp: Arr, p: Arr, P: Precision) -> Arr:
    with _numpy_path():
        return M.softmax_backward(dp, p, P)


def _old_layer_norm(x: Arr, g: Arr, b: Arr, P: Precision) -> tuple[Arr, dict[str, Arr]]:
    with _numpy_path():
        return M.layer_norm_forward(x, g, b, P)


def _old_layer_norm_backward(dy: Arr, cache: dict[str, Arr], g: Arr, P: Precision) -> tuple[Arr, Arr, Arr]:
    with _numpy_path():
        return M.layer_norm_backward(dy, cache, g, P)


SHAPES = [(2048, 128), (7, 13), (3, 5, 130), (5, 3), (1, 1), (4, 300)]
DTYPES = [np.float32, np.float64]


def assert_close(got: Any, want: Any, dtype: Any) -> None:
    """The kernels do NumPy's arithmetic in its order (today bit for bit); a few ulps of slack."""
    rtol, atol = (1e-6, 1e-7) if dtype == np.float32 else (1e-12, 1e-15)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def wide(dtype: Any) -> Precision:
    return Precision("fp32" if dtype == np.float32 else "fp64")


def causal_scores(rng: np.random.Generator, n: int, t: int, dtype: Any) -> Arr:
    s = (rng.standard_normal((n, t, t)) * 3).astype(dtype)
    s += np.triu(np.full((t, t), -np.inf, dtype), 1)
    return s


# ---- against the NumPy path ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_gelu_matches_numpy(shape: tuple[int, ...], dtype: Any) -> None:
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 3).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    P = wide(dtype)
    y = M.gelu_forward(x, P)
    assert y.dtype == dtype
    assert_close(y, _old_gelu(x, P), dtype)
    assert_close(M.gelu_backward(dy, x, P), _old_gelu_backward(dy, x, P), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_layer_norm_matches_numpy(shape: tuple[int, ...], dtype: Any) -> None:
    rng = np.random.default_rng(1)
    d = shape[-1]
    x = (rng.standard_normal(shape) * 3 + 1).astype(dtype)
    g, b = rng.standard_normal(d).astype(dtype), rng.standard_normal(d).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    P = wide(dtype)
    y, cache = M.layer_norm_forward(x, g, b, P)
    y0, cache0 = _old_layer_norm(x, g, b, P)
    assert y.dtype == dtype
    assert cache["rstd"].shape == cache0["rstd"].shape
    for got, want in ((y, y0), (cache["xhat"], cache0["xhat"]), (cache["rstd"], cache0["rstd"])):
        assert_close(got, want, dtype)
    for got, want in zip(
        M.layer_norm_backward(dy, cache, g, P), _old_layer_norm_backward(dy, cache0, g, P), strict=True
    ):
        assert_close(got, want, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(128, 64, 64), (3, 9, 9), (2, 1, 1), (2, 150, 150)])
def test_softmax_matches_numpy_with_causal_mask(shape: tuple[int, ...], dtype: Any) -> None:
    rng = np.random.default_rng(2)
    s = causal_scores(rng, shape[0], shape[1], dtype)
    dp = rng.standard_normal(tuple(s.shape)).astype(dtype)
    P = wide(dtype)
    p = M.softmax_forward(s, P)
    assert p.dtype == dtype
    assert_close(p, _old_softmax(s, P), dtype)
    assert np.all(p[:, np.triu_indices(shape[1], 1)[0], np.triu_indices(shape[1], 1)[1]] == 0.0)
    np.testing.assert_allclose(p.sum(-1), 1.0, rtol=1e-5 if dtype == np.float32 else 1e-12)
    assert_close(M.softmax_backward(dp, p, P), _old_softmax_backward(dp, p, P), dtype)


def test_softmax_unmasked_rows_of_2048_by_128() -> None:
    rng = np.random.default_rng(3)
    s = (rng.standard_normal((2048, 128)) * 5).astype(np.float32)
    assert_close(M.softmax_forward(s, wide(np.float32)), _old_softmax(s, wide(np.float32)), np.float32)


# ---- gradients against float64 central differences --------------------------------------------------
def assert_grad(analytic: Arr, f: Any, x: Arr) -> None:
    idx, num = numeric_grad(f, x, n_max=60)
    np.testing.assert_allclose(analytic.reshape(-1)[idx], num, rtol=1e-5, atol=1e-8)


def test_fused_gradients_against_finite_differences() -> None:
    rng = np.random.default_rng(4)
    P = Precision("fp64")
    x, R = rng.standard_normal((6, 130)) * 2, rng.standard_normal((6, 130))
    assert_grad(M.gelu_backward(R, x, P), lambda: float(np.sum(M.gelu_forward(x, P) * R)), x)
    g, b = rng.standard_normal(130), rng.standard_normal(130)
    _, cache = M.layer_norm_forward(x, g, b, P)
    dx, dg, db = M.layer_norm_backward(R, cache, g, P)

    def ln() -> float:
        return float(np.sum(M.layer_norm_forward(x, g, b, P)[0] * R))

    assert_grad(dx, ln, x)
    assert_grad(dg, ln, g)
    assert_grad(db, ln, b)
    s = causal_scores(rng, 3, 9, np.float64)
    Rs = rng.standard_normal(tuple(s.shape))
    p = M.softmax_forward(s, P)
    ds = M.softmax_backward(Rs, p, P)
    live = np.isfinite(s)
    idx, num = numeric_grad(lambda: float(np.sum(M.softmax_forward(s, P) * Rs)), s, n_max=400)
    keep = live.reshape(-1)[idx]
    np.testing.assert_allclose(ds.reshape(-1)[idx][keep], num[keep], rtol=1e-5, atol=1e-8)
    assert np.all(ds[~live] == 0.0)


# ---- the policies that round inside the ops keep the NumPy code bit for bit -------------------------
@pytest.mark.parametrize("policy", ["fp16", "bf16"])
def test_low_precision_paths_unchanged(policy: str) -> None:
    rng = np.random.default_rng(5)
    P = Precision(policy)
    x = (rng.standard_normal((64, 48)) * 3).astype(np.float32)
    g, b = rng.standard_normal(48).astype(np.float32), rng.standard_normal(48).astype(np.float32)
    dy = (rng.standard_normal((64, 48)) * 1e-2).astype(np.float32)
    s = causal_scores(rng, 4, 12, np.float32)
    dp = rng.standard_normal(tuple(s.shape)).astype(np.float32)
    y, cache = M.layer_norm_forward(x, g, b, P)
    y0, cache0 = _old_layer_norm(x, g, b, P)
    pairs = [(y, y0), (cache["xhat"], cache0["xhat"]), (cache["rstd"], cache0["rstd"])]
    pairs += list(
        zip(M.layer_norm_backward(dy, cache, g, P), _old_layer_norm_backward(dy, cache0, g, P), strict=True)
    )
    p = M.softmax_forward(s, P)
    pairs += [(p, _old_softmax(s, P)), (M.softmax_backward(dp, p, P), _old_softmax_backward(dp, p, P))]
    for got, want in pairs:
        np.testing.assert_array_equal(got, want)
    # GELU is computed wide in every policy and stored once: it takes the fused path here too
    np.testing.assert_array_equal(M.gelu_forward(x, P), _old_gelu(x, P))
    np.testing.assert_array_equal(M.gelu_backward(dy, x, P), _old_gelu_backward(dy, x, P))


def test_non_contiguous_input_takes_the_numpy_path() -> None:
    rng = np.random.default_rng(6)
    x = rng.standard_normal((40, 30)).astype(np.float32).T
    assert not fused.fusable(x)
    P = Precision("fp32")
    np.testing.assert_array_equal(M.softmax_forward(x, P), _old_softmax(x, P))
    assert not fused.fusable(np.zeros(3, np.float16))
    assert not fused.fusable(np.zeros(3, np.float32), np.zeros(3, np.float64))
