"""Backward passes against float64 central differences, layer by layer and for whole models.

The oracle: the forward pass run on a float64 copy under the fp64 policy (no rounding anywhere),
differentiated numerically with central differences, which owe nothing to the backward code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from oracles import numeric_grad

from floatlab.train import models as M
from floatlab.train.precision import Precision

F64 = Precision("fp64")
Arr = np.ndarray[Any, np.dtype[np.float64]]


def assert_grad(analytic: Arr, f: Callable[[], float], x: Arr) -> None:
    idx, num = numeric_grad(f, x, n_max=60)
    got = analytic.reshape(-1)[idx]
    np.testing.assert_allclose(got, num, rtol=1e-5, atol=1e-8)


def rand(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> Arr:
    return rng.standard_normal(shape) * scale


def test_linear_batched() -> None:
    rng = np.random.default_rng(1)
    x, W, b = rand(rng, 3, 4, 5), rand(rng, 5, 6), rand(rng, 6)
    R = rand(rng, 3, 4, 6)

    def f() -> float:
        return float(np.sum(M.linear_forward(x, W, b, F64) * R))

    dx, dW, db = M.linear_backward(R, x, W, F64)
    assert dx is not None
    assert db is not None
    assert_grad(dx, f, x)
    assert_grad(dW, f, W)
    assert_grad(db, f, b)


def test_relu_and_gelu() -> None:
    rng = np.random.default_rng(2)
    x = rand(rng, 4, 7)
    x[np.abs(x) < 1e-2] = 0.5  # keep central differences away from ReLU's kink
    R = rand(rng, 4, 7)
    assert_grad(M.relu_backward(R, x), lambda: float(np.sum(M.relu_forward(x) * R)), x)
    assert_grad(M.gelu_backward(R, x, F64), lambda: float(np.sum(M.gelu_forward(x, F64) * R)), x)


def test_gelu_matches_its_formula() -> None:
    # GELU's tanh form, written out independently
    x = np.linspace(-4, 4, 17)
    ref = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    np.testing.assert_allclose(M.gelu_forward(x, F64), ref, rtol=1e-14)


def test_softmax() -> None:
    rng = np.random.default_rng(3)
    s, R = rand(rng, 2, 3, 5, scale=2.0), rand(rng, 2, 3, 5)
    p = M.softmax_forward(s, F64)
    np.testing.assert_allclose(p.sum(-1), 1.0, rtol=1e-14)
    assert_grad(M.softmax_backward(R, p, F64), lambda: float(np.sum(M.softmax_forward(s, F64) * R)), s)


@pytest.mark.parametrize(("weight", "seed"), [(1.0, 1.0), (2.0**-20, 2.0**16)])
def test_cross_entropy(weight: float, seed: float) -> None:
    rng = np.random.default_rng(4)
    z, y = rand(rng, 6, 5, scale=3.0), rng.integers(0, 5, 6)
    # the loss is returned unweighted; the gradient is that of seed * weight * loss
    loss, cache = M.cross_entropy_forward(z, y, F64, weight=weight)
    ref = -np.mean(z[np.arange(6), y] - np.log(np.exp(z).sum(1)))
    assert loss == pytest.approx(ref, rel=1e-13)

    def f() -> float:
        return seed * weight * M.cross_entropy_forward(z, y, F64)[0]

    idx, num = numeric_grad(f, z, n_max=60)
    got = M.cross_entropy_backward(cache, F64, seed=seed).reshape(-1)[idx]
    np.testing.assert_allclose(got, num, rtol=1e-5, atol=1e-9 * seed * weight)


def test_layer_norm() -> None:
    rng = np.random.default_rng(5)
    x, g, b = rand(rng, 2, 3, 8, scale=2.0), 1 + rand(rng, 8, scale=0.3), rand(rng, 8)
    R = rand(rng, 2, 3, 8)
    y, cache = M.layer_norm_forward(x, g, b, F64)
    np.testing.assert_allclose(((y - b) / g).mean(-1), 0.0, atol=1e-12)

    def f() -> float:
        return float(np.sum(M.layer_norm_forward(x, g, b, F64)[0] * R))

    dx, dg, db = M.layer_norm_backward(R, cache, g, F64)
    assert_grad(dx, f, x)
    assert_grad(dg, f, g)
    assert_grad(db, f, b)


def test_mean_pool() -> None:
    rng = np.random.default_rng(6)
    x, R = rand(rng, 2, 4, 3), rand(rng, 2, 3)
    assert_grad(M.mean_pool_backward(R, 4, F64), lambda: float(np.sum(M.mean_pool_forward(x, F64) * R)), x)


def _check_model(model: M.Model, n_in: int, n_classes: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    w32 = model.init(rng)
    # float32 -> float64 widening is exact: the float64 copy holds the same weights
    w = {k: v.astype(np.float64) for k, v in w32.items()}
    x = rng.random((5, n_in))
    y = rng.integers(0, n_classes, 5)

    def loss() -> float:
        logits, _ = model.forward(w, x, F64)
        return M.cross_entropy_forward(logits, y, F64)[0]

    logits, cache = model.forward(w, x, F64)
    _, lc = M.cross_entropy_forward(logits, y, F64)
    grads = model.backward(w, cache, M.cross_entropy_backward(lc, F64), F64)
    assert set(grads) == set(w)
    for k in w:
        assert grads[k].shape == w[k].shape, k
        assert_grad(grads[k], loss, w[k])


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_mlp_gradients(activation: str) -> None:
    _check_model(M.MLP(6, (8, 7), 4, activation=activation), 6, 4, seed=7)


def test_attention_gradients() -> None:
    _check_model(M.AttentionNet(12, 3, tokens=4, d_model=6), 12, 3, seed=8)


def test_model_sizes() -> None:
    rng = np.random.default_rng(0)
    for m in (M.MLP(784, (256, 256), 10), M.AttentionNet(64, 10, tokens=8, d_model=32)):
        assert sum(v.size for v in m.init(rng).values()) == m.n_params
        assert all(v.dtype == np.float32 for v in m.init(rng).values())


def test_get_model_errors() -> None:
    with pytest.raises(ValueError, match="unknown model 'resnet'"):
        M.get_model("resnet", 64, 10)
    with pytest.raises(ValueError, match="tokens=5"):
        M.AttentionNet(64, 10, tokens=5)
    with pytest.raises(ValueError, match="activation='tanh'"):
        M.MLP(4, (3,), 2, activation="tanh")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_relu_backward_selects_exactly_as_where(dtype: type) -> None:
    rng = np.random.default_rng(3)
    x: np.ndarray = rng.normal(size=(7, 9)).astype(dtype)
    x[0, :3] = (0.0, -0.0, np.nan)
    dy: np.ndarray = rng.normal(size=(7, 9)).astype(dtype)
    dy[1, :4] = (np.inf, -np.inf, np.nan, -0.0)
    want = np.where(x > 0, dy, dtype(0))
    got = M.relu_backward(dy[:, ::1].T.T, x)  # (also from a view)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))
