"""The conv net with BatchNorm: each layer against float64 central differences, the whole net and
BatchNorm's running statistics against torch, and what the policy's ``batchnorm_fp32`` switch does.

Oracles: the forward pass run in float64 under the fp64 policy (no rounding anywhere) and
differentiated numerically; torch autograd (float64) for the same weights, in torch's NCHW
layout; NumPy's float16 and ml_dtypes' bfloat16 casts for what a format can represent.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from oracles import numeric_grad

from floatlab.train import TrainConfig, Trainer, get_data
from floatlab.train.models import convnet as C
from floatlab.train.models import cross_entropy_backward, cross_entropy_forward, get_model
from floatlab.train.precision import Precision
from floatlab.train.precision.policy import get_policy

F64 = Precision("fp64")
Arr = np.ndarray[Any, np.dtype[Any]]


def assert_grad(analytic: Arr | None, f: Callable[[], float], x: Arr) -> None:
    assert analytic is not None
    assert analytic.shape == x.shape
    idx, num = numeric_grad(f, x)
    np.testing.assert_allclose(analytic.reshape(-1)[idx], num, rtol=1e-5, atol=1e-8)


# ---- layers against finite differences ------------------------------------------------------------
def test_conv2d_gradients() -> None:
    rng = np.random.default_rng(1)
    x, W, b = rng.standard_normal((2, 4, 5, 3)), rng.standard_normal((3, 3, 3, 4)), rng.standard_normal(4)
    R = rng.standard_normal((2, 4, 5, 4))

    def f() -> float:
        return float(np.sum(C.conv2d_forward(x, W, b, F64)[0] * R))

    _, cache = C.conv2d_forward(x, W, b, F64)
    dx, dW, db = C.conv2d_backward(R, cache, W, F64)
    assert_grad(dx, f, x)
    assert_grad(dW, f, W)
    assert_grad(db, f, b)
    # without a bias: no bias gradient; the first layer asks for no input gradient
    _, cache = C.conv2d_forward(x, W, None, F64)
    dx0, dW0, db0 = C.conv2d_backward(R, cache, W, F64, input_grad=False)
    assert dx0 is None
    assert db0 is None
    np.testing.assert_allclose(dW0, dW, rtol=1e-12)


def test_conv2d_is_a_correlation_with_zero_padding() -> None:
    # written out pixel by pixel, independently of im2col
    rng = np.random.default_rng(2)
    x, W = rng.standard_normal((1, 3, 4, 2)), rng.standard_normal((3, 3, 2, 3))
    pad = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    ref = np.zeros((1, 3, 4, 3))
    for p in range(3):
        for q in range(4):
            ref[0, p, q] = np.einsum("ijc,ijco->o", pad[0, p : p + 3, q : q + 3], W)
    np.testing.assert_allclose(C.conv2d_forward(x, W, None, F64)[0], ref, rtol=1e-12)


@pytest.mark.parametrize("train", [True, False])
def test_batch_norm_gradients(train: bool) -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 2, 3, 4)) * 2 + 1
    g, b = rng.standard_normal(4), rng.standard_normal(4)
    running = (rng.standard_normal(4), rng.random(4) + 0.5)
    R = rng.standard_normal(x.shape)

    def f() -> float:
        return float(np.sum(C.batch_norm_forward(x, g, b, F64, running, train=train)[0] * R))

    _, cache, _ = C.batch_norm_forward(x, g, b, F64, running, train=train)
    dx, dg, db = C.batch_norm_backward(R, cache, g, F64)
    assert_grad(dx, f, x)
    assert_grad(dg, f, g)
    assert_grad(db, f, b)


def test_max_pool_gradient_and_values() -> None:
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 4, 6, 3))  # distinct values: no ties
    R = rng.standard_normal((2, 2, 3, 3))
    y, where = C.max_pool_forward(x)
    ref = x.reshape(2, 2, 2, 3, 2, 3).max(axis=(2, 4))
    np.testing.assert_array_equal(y, ref)
    assert_grad(C.max_pool_backward(R, where), lambda: float(np.sum(C.max_pool_forward(x)[0] * R)), x)


def test_max_pool_ties_and_nans_route_as_torch() -> None:
    torch = pytest.importorskip("torch")
    windows = [
        [1.0, 5.0, 5.0, 2.0],  # tie: the first
        [2.0, 2.0, 2.0, 2.0],
        [np.nan, 3.0, np.nan, 1.0],  # NaN: the last NaN
        [7.0, np.nan, 1.0, np.nan],
        [-np.inf, -np.inf, -np.inf, -np.inf],
    ]
    for win in windows:
        x = np.array(win).reshape(1, 2, 2, 1)
        y, where = C.max_pool_forward(x)
        dx = C.max_pool_backward(np.ones_like(y), where)
        t = torch.tensor(np.array(win).reshape(1, 1, 2, 2), requires_grad=True)
        yt = torch.nn.functional.max_pool2d(t, 2)
        yt.sum().backward()
        np.testing.assert_array_equal(y.ravel(), yt.detach().numpy().ravel())
        np.testing.assert_array_equal(dx.ravel(), t.grad.numpy().ravel(), err_msg=str(win))


def test_max_pool_gradient_blocks_inf_and_nan_elsewhere() -> None:
    dy = np.array([np.inf, np.nan]).reshape(1, 1, 2, 1)
    where = np.array([3, 0], np.uint8).reshape(1, 1, 2, 1)
    dx = C.max_pool_backward(dy, where)[0, :, :, 0]
    assert dx[1, 1] == np.inf
    assert np.isnan(dx[0, 2])
    assert np.count_nonzero(dx == 0) == 6
    assert not np.signbit(dx).any()


# ---- the whole net against torch ------------------------------------------------------------------
def _torch_net(
    torch: Any, m: C.ConvNet, w: dict[str, Arr], x: Arr, running: dict[str, Any] | None, train: bool
) -> Any:
    """The same net in torch (NCHW), parameters as leaves: (logits, leaves by our names)."""
    F = torch.nn.functional
    leaves: dict[str, Any] = {}

    def leaf(name: str, value: Arr) -> Any:
        leaves[name] = torch.tensor(np.ascontiguousarray(value), requires_grad=True)
        return leaves[name]

    h = torch.tensor(x.reshape(-1, 1, m.side, m.side))
    for i in range(len(m.channels)):
        # our weights are (3, 3, C_in, C_out); torch's (C_out, C_in, 3, 3)
        Wt = leaf(f"conv{i}_W", w[f"conv{i}_W"].transpose(3, 2, 0, 1))
        z = F.conv2d(h, Wt, padding=1)
        rm = running[f"bn{i}_mean"] if running is not None else None
        rv = running[f"bn{i}_var"] if running is not None else None
        g, b = leaf(f"bn{i}_g", w[f"bn{i}_g"]), leaf(f"bn{i}_b", w[f"bn{i}_b"])
        a = F.batch_norm(z, rm, rv, g, b, training=train, momentum=0.1, eps=1e-5)
        h = F.max_pool2d(F.relu(a), 2)
    flat = h.permute(0, 2, 3, 1).reshape(h.shape[0], -1)  # our features are flattened NHWC
    logits = flat @ leaf("Wc", w["Wc"]) + leaf("bc", w["bc"])
    return logits, leaves


def _params64(m: C.ConvNet, seed: int) -> dict[str, Arr]:
    rng = np.random.default_rng(seed)
    w = {k: v.astype(np.float64) for k, v in m.init(rng).items()}
    for k in m.norm_params:  # gamma and beta away from their 1 and 0, so their gradients show
        w[k] = w[k] + rng.standard_normal(w[k].shape) * 0.3
    return w


def test_convnet_loss_and_gradients_match_torch() -> None:
    torch = pytest.importorskip("torch")
    m = C.ConvNet(64, 10, channels=(6, 8))
    w = _params64(m, 5)
    rng = np.random.default_rng(6)
    x, y = rng.random((7, 64)), rng.integers(0, 10, 7)
    logits, cache = m.forward(w, x, F64)
    loss, lc = cross_entropy_forward(logits, y, F64)
    grads = m.backward(w, cache, cross_entropy_backward(lc, F64), F64)
    assert list(grads) == list(w)

    t_logits, leaves = _torch_net(torch, m, w, x, None, True)
    t_loss = torch.nn.functional.cross_entropy(t_logits, torch.tensor(y))
    t_loss.backward()
    np.testing.assert_allclose(logits, t_logits.detach().numpy(), rtol=1e-10, atol=1e-12)
    assert loss == pytest.approx(float(t_loss.detach()), rel=1e-10)
    for k, g in grads.items():
        tg = leaves[k].grad.numpy()
        if k.startswith("conv"):
            tg = tg.transpose(2, 3, 1, 0)
        scale = float(np.abs(tg).max())
        np.testing.assert_allclose(g, tg, rtol=1e-10, atol=1e-10 * scale, err_msg=k)


def test_running_statistics_and_eval_match_torch() -> None:
    torch = pytest.importorskip("torch")
    m = C.ConvNet(64, 10, channels=(4, 5))
    w = _params64(m, 7)
    rng = np.random.default_rng(8)
    buffers = {k: v.astype(np.float64) for k, v in m.init_buffers().items()}
    t_running = {k: torch.tensor(v.copy()) for k, v in buffers.items()}
    for step in range(3):
        x = rng.random((5 + step, 64)) * (step + 1)
        m.forward(w, x, F64, buffers=buffers)
        with torch.no_grad():
            _torch_net(torch, m, w, x, t_running, True)
    for k, v in buffers.items():
        np.testing.assert_allclose(v, t_running[k].numpy(), rtol=1e-12, err_msg=k)
    assert not np.allclose(buffers["bn0_var"], 1.0)  # they moved
    x = rng.random((4, 64))
    before = {k: v.copy() for k, v in buffers.items()}
    logits, _ = m.forward(w, x, F64, train=False, buffers=buffers)
    with torch.no_grad():
        t_logits, _ = _torch_net(torch, m, w, x, t_running, False)
    np.testing.assert_allclose(logits, t_logits.numpy(), rtol=1e-10, atol=1e-12)
    # evaluation leaves the running statistics alone
    assert all(np.array_equal(v, before[k]) for k, v in buffers.items())


# ---- precision: BatchNorm in fp32 or in the low format --------------------------------------------
def _representable(v: Arr, dtype: Any) -> Arr:
    out: Arr = v == v.astype(dtype).astype(np.float32)
    return out


def _one_step(policy: Any) -> tuple[dict[str, Arr], dict[str, Arr]]:
    """Running statistics and gradients after one training forward and backward pass."""
    m = C.ConvNet()
    P = Precision(policy)
    # stored as the trainer stores them, then as the forward pass sees them
    stored = {
        k: P.cast(v, P.policy.param_format(k in m.norm_params))
        for k, v in m.init(np.random.default_rng(0)).items()
    }
    w = P.weights(stored, m.norm_params)
    buffers = m.init_buffers()
    x = np.random.default_rng(1).random((16, 64), dtype=np.float32)
    logits, cache = m.forward(w, x, P, buffers=buffers)
    _, lc = cross_entropy_forward(logits, np.arange(16) % 10, P)
    return buffers, m.backward(w, cache, cross_entropy_backward(lc, P, seed=1024.0), P)


def test_running_statistics_live_in_the_policy_s_format() -> None:
    low, low_grads = _one_step(get_policy("fp16"))
    wide, wide_grads = _one_step(get_policy("fp16").replace(batchnorm_fp32=True))
    for k in low:
        assert _representable(low[k], np.float16).all(), k
    # in fp32 they are (almost all) not fp16 values
    assert np.mean(_representable(wide["bn0_var"], np.float16)) < 0.5
    assert np.mean(_representable(wide["bn1_mean"], np.float16)) < 0.5
    # BatchNorm's parameter gradients: backward format when BatchNorm is low, fp32 when kept wide
    for k in ("bn0_g", "bn1_g", "bn1_b"):
        assert _representable(low_grads[k], np.float16).all(), k
        assert not _representable(wide_grads[k], np.float16).all(), k
    # the other gradients are in fp16 either way
    assert _representable(wide_grads["conv1_W"], np.float16).all()
    bf, _ = _one_step(get_policy("bf16"))
    assert all(_representable(v, ml_dtypes.bfloat16).all() for v in bf.values())


def test_norm_in_fp32_ops_keeps_the_inside_wide() -> None:
    # pure fp16 with "norm" and "sum" in its fp32 ops computes BatchNorm's statistics as
    # batchnorm_fp32 does (no rounding inside); only their storage differs: fp16 against fp32
    fp16 = get_policy("fp16")
    inside_wide, _ = _one_step(fp16.replace(fp32_ops=frozenset({"norm", "sum"})))
    kept_wide, _ = _one_step(fp16.replace(batchnorm_fp32=True))
    low, _ = _one_step(fp16)
    for k, v in inside_wide.items():
        np.testing.assert_array_equal(v, kept_wide[k].astype(np.float16).astype(np.float32), err_msg=k)
    # rounding inside shows (the means come from fp16 sums of 1,024 values per channel)
    assert not np.array_equal(inside_wide["bn0_mean"], low["bn0_mean"])


# ---- the model as the trainer sees it -------------------------------------------------------------
def test_model_interface() -> None:
    m = get_model("convnet", 64, 10, channels=(4, 8))
    assert isinstance(m, C.ConvNet)
    assert m.config() == {"name": "convnet", "n_in": 64, "n_out": 10, "channels": [4, 8]}
    assert m.describe() == "convnet 4-8 channels on 8x8"
    w = m.init(np.random.default_rng(0))
    assert m.n_params == sum(v.size for v in w.values())
    assert m.norm_params == {"bn0_g", "bn0_b", "bn1_g", "bn1_b"}
    assert m.norm_params <= set(w)
    assert all(v.dtype == np.float32 for v in (*w.values(), *m.init_buffers().values()))
    assert float(np.abs(w["conv1_W"]).max()) <= 1 / np.sqrt(9 * 4)
    assert C.ConvNet(256, 3, channels=(2, 2, 2, 2)).describe() == "convnet 2-2-2-2 channels on 16x16"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_in": 60}, "n_in=60: expected a square"),
        ({"n_in": 36}, "image side 6 (n_in=36): expected a multiple of 4"),
        ({"channels": ()}, "channels=(): expected a non-empty list"),
        ({"channels": (16, 0)}, "channels=[16, 0]: expected positive integers"),
        ({"channels": "16"}, "channels='16'"),
        ({"n_out": 0}, "n_out=0"),
    ],
)
def test_bad_model_settings(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        C.ConvNet(**kwargs)


def test_bad_forward_calls() -> None:
    m = C.ConvNet(channels=(2,))
    w = m.init(np.random.default_rng(0))
    P = Precision("fp32")
    with pytest.raises(ValueError, match="train=False needs buffers"):
        m.forward(w, np.zeros((2, 64), np.float32), P, train=False)
    with pytest.raises(ValueError, match=r"input of shape \(2, 63\): expected \(n, 64\)"):
        m.forward(w, np.zeros((2, 63), np.float32), P)
    with pytest.raises(ValueError, match="batch norm over 1 value per channel"):
        C.batch_norm_forward(np.ones((1, 1, 1, 2)), np.ones(2), np.zeros(2), P)
    with pytest.raises(ValueError, match="even height and width"):
        C.max_pool_forward(np.ones((1, 3, 4, 1)))


@pytest.fixture(scope="module")
def digits() -> Any:
    pytest.importorskip("sklearn")
    return get_data("digits")


@pytest.mark.parametrize("precision", ["fp32", "mixed-fp16", "fp16"])
def test_trains_on_digits(digits: Any, precision: str) -> None:
    cfg = TrainConfig(model="convnet", data="digits", precision=precision, steps=40, batch_size=64)
    tr = Trainer.from_config(cfg, digits)
    tr.run()
    acc = tr.evaluate(digits.x_test, digits.y_test).accuracy
    assert acc > 0.6, acc  # chance is 0.1
    gamma = tr.params["bn1_g"]
    if precision == "fp16":
        # pure fp16: BatchNorm's parameters and running statistics are fp16 values
        assert all(_representable(tr.params[k], np.float16).all() for k in tr.model.norm_params)
        assert all(_representable(v, np.float16).all() for v in tr.buffers.values())
    elif precision == "mixed-fp16":  # BatchNorm's parameters stayed fp32 while the rest is fp16
        assert not _representable(gamma, np.float16).all()
        assert not _representable(tr.buffers["bn0_var"], np.float16).all()
        assert _representable(tr.P.weights(tr.params, tr.model.norm_params)["conv1_W"], np.float16).all()
