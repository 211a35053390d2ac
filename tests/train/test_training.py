"""Training dynamics with fixed seeds: the issue's criteria, and each technique's switch on its own."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest

import floatlab.train as ft
from floatlab.train import History, TrainConfig, Trainer


@functools.cache
def digits() -> ft.Dataset:
    pytest.importorskip("sklearn")  # the digits ship inside scikit-learn
    return ft.load_digits()


@functools.cache
def underflow_task(weight: float = 2.0**-20) -> ft.Dataset:
    return ft.make_underflow_task(n_train=1024, n_test=512, loss_weight=weight)


@functools.cache
def run(precision: str, data: str = "digits", **kw: Any) -> History:
    ds = digits() if data == "digits" else underflow_task()
    overrides = dict(kw.pop("overrides", ()))
    return ft.train("mlp", ds, precision, seed=0, overrides=overrides, **kw)


def acc(h: History) -> float:
    v = h.final["test_accuracy"]
    assert isinstance(v, float)
    return 100 * v


# ---- the criteria on the digits ---------------------------------------------------------------
def test_digits_mixed_precision_matches_fp32() -> None:
    fp32, m16, mb16 = (run(p, epochs=20) for p in ("fp32", "mixed-fp16", "mixed-bf16"))
    assert acc(fp32) > 94
    assert abs(acc(m16) - acc(fp32)) <= 1.0
    assert abs(acc(mb16) - acc(fp32)) <= 2.0
    assert fp32.summary()["skipped_steps"] == m16.summary()["skipped_steps"] == 0


def test_fp8_forward_and_backward_formats() -> None:
    # e4m3 activations and weights in the GEMMs, e5m2 gradients, fp32 masters and loss scaling
    fp32, fp8 = run("fp32", epochs=20), run("mixed-fp8", epochs=20)
    assert fp8.meta["policy"]["forward"] == "float8_e4m3fn"
    assert fp8.meta["policy"]["backward"] == "float8_e5m2"
    assert abs(acc(fp8) - acc(fp32)) <= 3.0


def test_pure_fp16_swallows_small_updates() -> None:
    kw = {"epochs": 30, "lr": 0.005, "momentum": 0.0}
    fp32, f16, m16 = run("fp32", **kw), run("fp16", **kw), run("mixed-fp16", **kw)
    s32, s16, sm = fp32.summary(), f16.summary(), m16.summary()
    assert s16["mean_swallowed"] > 0.5 > 0.05 > s32["mean_swallowed"]
    assert s16["test_loss"] > s32["test_loss"] + 0.02  # lost updates: a worse loss
    # master weights (mixed-fp16) give the updates back
    assert sm["mean_swallowed"] < 0.05
    assert abs(sm["test_loss"] - s32["test_loss"]) < 0.005


def test_swallowed_updates_match_an_oracle() -> None:
    # one pure-fp16 step, its weight update recomputed with numpy's float16 arithmetic
    tr = Trainer.from_config(TrainConfig(precision="fp16", lr=0.005, momentum=0.0, hidden=(16,)), digits())
    before = {k: v.copy() for k, v in tr.params.items()}
    deltas: dict[str, Any] = {}
    apply = tr._apply

    def spy(d: dict[str, Any]) -> tuple[float, bool]:
        deltas.update({k: v.copy() for k, v in d.items()})
        return apply(d)

    tr._apply = spy  # type: ignore[method-assign,assignment]
    st = tr.train_step(digits().x_train[:64], digits().y_train[:64])
    intended = swallowed = 0
    for k, w in before.items():
        w16, d16 = w.astype(np.float16), deltas[k].astype(np.float16)
        new = (w16 + d16).astype(np.float32)  # float16 + float16: one correctly rounded sum
        np.testing.assert_array_equal(tr.params[k], new)
        intended += int(np.count_nonzero(deltas[k]))
        swallowed += int(np.count_nonzero((deltas[k] != 0) & (new == w)))
    assert st.swallowed == swallowed / intended
    assert 0.2 < st.swallowed < 1


def _tree_sum_f16(x: Any, axis: int) -> Any:
    """Pairwise s[i] += s[i + h] along ``axis`` in numpy float16."""
    s = np.moveaxis(np.asarray(x, np.float16), axis, 0)
    while s.shape[0] > 1:
        h = s.shape[0] // 2
        head = s[:h] + s[h : 2 * h]
        s = np.concatenate([head, s[2 * h :]]) if s.shape[0] % 2 else head
    return s[0]


def test_pure_fp16_loss_matches_float16_arithmetic() -> None:
    # the fp16 policy's cross-entropy, every step of it recomputed in numpy float16
    rng = np.random.default_rng(3)
    z = (rng.standard_normal((64, 10)) * 4).astype(np.float16)
    y = rng.integers(0, 10, 64)
    loss, _ = ft.models.cross_entropy_forward(z.astype(np.float32), y, ft.Precision("fp16"))
    zs = z - z.max(axis=1, keepdims=True)
    e = np.exp(zs)
    s = _tree_sum_f16(e, 1)[:, None]
    logp = zs - np.log(s)
    nll = -logp[np.arange(64), y]
    ref = _tree_sum_f16(nll, 0) / np.float16(64)
    assert loss == float(ref)
    exact = float(
        np.mean(np.log(np.exp(z.astype(np.float64)).sum(1)) - z.astype(np.float64)[np.arange(64), y])
    )
    assert loss != exact  # fp16 arithmetic did round


# ---- the synthetic underflow task --------------------------------------------------------------
def test_underflow_task_pure_fp16_stalls_and_mixed_recovers() -> None:
    fp32, f16, m16 = (run(p, "underflow", epochs=4) for p in ("fp32", "fp16", "mixed-fp16"))
    assert acc(fp32) > 95
    assert acc(m16) > 95
    assert acc(f16) < 40  # ten classes: barely above chance
    assert f16.summary()["mean_flushed"] > 0.9  # why: the gradients were stored as zero
    assert m16.summary()["mean_flushed"] < 0.5
    loss16 = f16.column("loss")
    assert loss16[-8:].mean() > 0.9 * loss16[:8].mean()  # the loss does not move


def test_each_switch_alone_on_the_underflow_task() -> None:
    # loss scaling is the technique that saves these gradients ...
    no_scaling = run("mixed-fp16", "underflow", epochs=3, overrides=(("loss_scaling", "none"),))
    assert acc(no_scaling) < 40
    dynamic_masters = (("loss_scaling", "dynamic"), ("master_weights", True))
    both = run("fp16", "underflow", epochs=3, overrides=dynamic_masters)
    assert acc(both) > 95
    # a static scale works as well as a dynamic one here
    static = run(
        "fp16",
        "underflow",
        epochs=3,
        overrides=(("loss_scaling", "static"), ("static_scale", 2.0**16), ("master_weights", True)),
    )
    assert acc(static) > 95


def test_loss_weight_changes_nothing_in_fp32() -> None:
    # multiplying the loss by 2^-20 and the learning rate by 2^20 is exact in fp32: the same
    # weights, bit for bit, whatever the gradients' size
    a = Trainer.from_config(TrainConfig(precision="fp32", epochs=1), underflow_task(2.0**-20))
    b = Trainer.from_config(TrainConfig(precision="fp32", epochs=1), underflow_task(1.0))
    a.fit(1)
    b.fit(1)
    for k in a.params:
        np.testing.assert_array_equal(a.params[k], b.params[k])
    assert a.history.steps["loss"] == b.history.steps["loss"]


# ---- loss-scale dynamics inside the loop ------------------------------------------------------
def test_overflow_skips_and_backs_off() -> None:
    cfg = TrainConfig(precision="mixed-fp16", epochs=1, hidden=(32,), schedule="cosine", warmup=40)
    tr = Trainer.from_config(cfg, digits())
    tr.scaler.load_state_dict({**tr.scaler.state_dict(), "scale": 2.0**40})  # far too large for fp16
    tr.fit(1)
    h = tr.history
    skipped = h.steps["skipped"]
    first = skipped.index(False)  # the first step whose gradients fit fp16
    assert first >= 15
    scales = h.column("scale")
    np.testing.assert_array_equal(scales[: first + 1], 2.0 ** (40 - np.arange(first + 1)))
    # the schedule did not advance while steps were skipped: warm-up starts at the first real step
    lrs = h.column("lr")
    assert np.all(lrs[: first + 1] == lrs[0])
    assert lrs[first + 1] == 2 * lrs[0]
    assert tr.opt_steps == tr.step - sum(skipped)


def test_clipping_after_unscaling_is_scale_free() -> None:
    # with clipping on, mixed-fp16 and fp32 see the same (unscaled) norms
    kw: dict[str, Any] = {"epochs": 1, "hidden": (32,), "clip": 0.5}
    a = run("fp32", **kw)
    b = run("mixed-fp16", **kw)
    na, nb = a.column("grad_norm"), b.column("grad_norm")
    np.testing.assert_allclose(nb, na, rtol=0.05)
    assert np.all(na > 0)


def test_attention_model_trains_in_mixed_precision() -> None:
    kw: dict[str, Any] = {"epochs": 6, "optimizer": "adamw", "lr": 5e-3}
    a = ft.train("attention", digits(), "fp32", seed=0, **kw)
    b = ft.train("attention", digits(), "mixed-fp16", seed=0, **kw)
    assert acc(a) > 80
    assert abs(acc(a) - acc(b)) <= 3


def test_fp32_ops_switch_changes_the_loss_arithmetic() -> None:
    rng = np.random.default_rng(4)
    z = (rng.standard_normal((64, 10)) * 4).astype(np.float16).astype(np.float32)
    y = rng.integers(0, 10, 64)
    keep = ft.get_policy("fp16").replace(fp32_ops=frozenset({"softmax", "log", "exp", "sum"}))
    loss, _ = ft.models.cross_entropy_forward(z, y, ft.Precision(keep))
    z64 = z.astype(np.float64)
    exact = float(
        np.mean(
            np.log(np.exp(z64 - z64.max(1, keepdims=True)).sum(1))
            - (z64 - z64.max(1, keepdims=True))[np.arange(64), y]
        )
    )
    assert loss == pytest.approx(exact, rel=1e-6)  # fp32 arithmetic: float32 accuracy


def test_stochastic_update_rounding_beats_swallowing() -> None:
    # pure bf16 swallows almost every small update; rounding them stochastically keeps their
    # expected value, and training follows fp32 again
    kw = {"epochs": 10, "lr": 0.01, "momentum": 0.0}
    fp32 = run("fp32", **kw).summary()["test_loss"]
    rne = run("bf16", **kw).summary()["test_loss"]
    sr = run("bf16", overrides=(("update_rounding", "stochastic"),), **kw).summary()["test_loss"]
    assert rne > fp32 + 0.02
    assert abs(sr - fp32) < 0.01


def test_gradient_histograms_at_chosen_steps() -> None:
    h = run("mixed-fp16", "underflow", epochs=1, histogram_steps=(1, 5))
    assert set(h.histograms) == {1, 5}
    v = h.histograms[5]
    # the unscaled gradients of this task sit far below fp16's range; a scale near 2^16+ saves them
    assert v["verdict"]["fractions"]["flushed"] > 0.5
    assert v["advice"]["log2_scale"] >= 16
    assert h.grad_histograms[5].total == sum(
        int(np.prod(s)) for s in (64 * 128, 128, 128 * 128, 128, 1280, 10)
    )


def test_train_config_errors() -> None:
    with pytest.raises(ValueError, match="epochs=-1"):
        TrainConfig(epochs=-1)
    with pytest.raises(ValueError, match="batch_size=0"):
        TrainConfig(batch_size=0)
    with pytest.raises(ValueError, match="unknown data set 'mnist'"):
        Trainer.from_config(TrainConfig(data="mnist"))
    with pytest.raises(ValueError, match="train config fields"):
        TrainConfig.from_dict({"epochs": 1, "colour": "red"})
