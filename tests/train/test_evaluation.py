"""The evaluation's ruler: the loss measured in fp32 whatever the policy, checked against a float64
log-softmax of the same logits, and the in-format loss kept beside it."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import floatlab.train as ft
from floatlab.train.data.datasets import make_underflow_task
from floatlab.train.evaluation import evaluate
from floatlab.train.models.base import get_model
from floatlab.train.precision.precision import Precision


def _in_bf16(v: float) -> bool:
    return float(np.float32(v).astype(ml_dtypes.bfloat16)) == v


def _float64_cross_entropy(logits: np.ndarray, y: np.ndarray) -> float:
    z = logits.astype(np.float64)
    z = z - z.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return float(-logp[np.arange(len(y)), y].mean())


def test_the_loss_is_measured_in_fp32_from_the_policys_logits() -> None:
    m = get_model("mlp", n_in=6, n_out=5, hidden=(16,))
    params = {k: np.asarray(v, np.float32) for k, v in m.init(np.random.default_rng(0)).items()}
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(200, 6)).astype(np.float32), rng.integers(0, 5, 200)
    P = Precision("bf16")
    e = evaluate(m, P, params, {}, x, y, batch_size=64)
    with P.inference():
        logits, _ = m.forward(P.weights(params, m.norm_params), x, P, train=False, buffers={})
    # the oracle: float64 log-softmax of the very logits the bf16 model gives
    assert e.loss == pytest.approx(_float64_cross_entropy(np.asarray(logits), y), rel=1e-5)
    assert e.accuracy == float(np.mean(np.argmax(logits, axis=1) == y))
    # the in-format loss is bf16's coarse one, within bf16's resolution of the measured loss
    assert abs(e.loss_in_format - e.loss) < 2.0**-7 * 4 * max(1.0, e.loss)


def test_pure_bf16_validation_losses_are_fp32_numbers_and_the_in_format_ones_bf16() -> None:
    h = ft.train("mlp", "underflow", "bf16", epochs=3, hidden=(16,), eval_every=8, seed=0)
    measured = [v for v in h.evals["test_loss"] if math.isfinite(v)]
    in_format = h.evals["test_loss_in_format"]
    assert len(measured) >= 5
    assert not all(_in_bf16(v) for v in measured)  # the ruler is finer than bf16
    # each batch's in-format loss is a bf16 value; their weighted mean over the batches need not be
    trainer = ft.Trainer.from_config(
        ft.TrainConfig(data="underflow", precision="bf16", hidden=(16,)), make_underflow_task()
    )
    one_batch = trainer.evaluate(trainer.data.x_test, trainer.data.y_test, batch_size=10_000)
    assert _in_bf16(one_batch.loss_in_format)
    assert not _in_bf16(one_batch.loss)
    assert len(in_format) == len(measured)


def test_a_wide_policy_measures_with_its_own_loss() -> None:
    h = ft.train("mlp", "underflow", "fp32", epochs=1, hidden=(8,), seed=0)
    assert h.evals["test_loss"] == h.evals["test_loss_in_format"]


def test_a_history_written_before_the_in_format_loss_loads_with_none() -> None:
    h = ft.History("old")
    h.log_eval(epoch=1, step=2, train_loss=1.0, test_loss=0.5, test_accuracy=0.9)
    d = h.to_dict()
    del d["evals"]["test_loss_in_format"]
    assert ft.History.from_dict(d).evals["test_loss_in_format"] == [None]
