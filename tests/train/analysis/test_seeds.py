"""Seed sweeps and paired confidence intervals, checked against SciPy's paired t-test."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from floatlab.train.analysis.seeds import final_metric, paired_gap, run_seeds, t_quantile
from floatlab.train.history import History

stats = pytest.importorskip("scipy.stats")


@pytest.mark.parametrize("n", [2, 3, 5, 12])
def test_paired_gap_matches_scipy_ttest_rel(n: int) -> None:
    rng = np.random.default_rng(n)
    a, b = rng.normal(2.0, 0.3, n), rng.normal(1.8, 0.3, n)
    gap = paired_gap(list(a), list(b), level=0.9)
    ci = stats.ttest_rel(a, b).confidence_interval(0.9)
    assert gap.mean == pytest.approx(float(np.mean(a - b)), rel=1e-12)
    assert (gap.low, gap.high) == pytest.approx((ci.low, ci.high), rel=1e-9)


def test_t_quantile_matches_scipy() -> None:
    for df in (1, 2, 4, 30):
        assert t_quantile(0.975, df) == pytest.approx(stats.t.ppf(0.975, df), rel=1e-12)
    with pytest.raises(ValueError, match=r"p=1\.5"):
        t_quantile(1.5, 3)


def test_gap_errors_and_nonfinite() -> None:
    with pytest.raises(ValueError, match="3 and 2 values"):
        paired_gap([1, 2, 3], [1, 2])
    assert math.isnan(paired_gap([math.nan, 1.0], [0.0, 0.0]).mean)


def test_final_metric_of_a_stopped_run_is_nan() -> None:
    h = History("x")
    h.log_eval(epoch=0, step=3, train_loss=1.0, test_loss=0.7, test_accuracy=0.5)
    assert final_metric(h) == 0.7
    h.meta["stopped"] = "step 3: the loss became nan"
    assert math.isnan(final_metric(h))
    assert math.isnan(final_metric(History("empty")))


def test_run_seeds_repeats_a_seed_exactly_and_separates_seeds() -> None:
    kw: dict[str, Any] = {"model": "mlp", "data": "underflow", "hidden": (8,), "steps": 4, "progress": False}
    a, c = (h.steps["loss"] for h in run_seeds(["mixed-bf16"], [4, 5], **kw)["mixed-bf16"])
    (b,) = (h.steps["loss"] for h in run_seeds(["mixed-bf16"], [4], **kw)["mixed-bf16"])
    assert a == b  # the same seed is the same run, bit for bit
    assert a != c
    with pytest.raises(ValueError, match="seed 4 given twice: expected each seed once"):
        run_seeds(["mixed-bf16"], [4, 4], **kw)


def test_late_phase_starts_every_variant_from_the_same_weights() -> None:
    from floatlab.train.analysis.seeds import late_phase

    lp = late_phase(
        {"fp32": ("fp32", {}), "bf16 stochastic": ("bf16", {"update_rounding": "stochastic"})},
        [3],
        first={"steps": 5},
        late={"steps": 1, "lr": 0.0},
        model="mlp",
        data="underflow",
        hidden=(8,),
    )
    start = lp.phase1[0].params
    # a phase 2 at learning rate 0: each variant holds phase 1's weights, stored in its own format
    for k, v in lp.runs["fp32"][0].params.items():
        np.testing.assert_array_equal(v, start[k])
    bf = lp.runs["bf16 stochastic"][0]
    for k, v in bf.params.items():
        np.testing.assert_array_equal(v, bf.P.cast(start[k], bf.policy.forward))
    assert bf.config is not None
    assert bf.config.seed == 103


def test_late_phase_carries_batchnorm_statistics() -> None:
    from floatlab.formats import FP16
    from floatlab.train import TrainConfig, Trainer
    from floatlab.train.analysis.seeds import late_phase

    lp = late_phase(
        ["fp16"], [0], first={"steps": 3}, late={"steps": 1, "lr": 0.0}, model="convnet", data="underflow",
        channels=(4,),
    )  # fmt: skip
    first, late = lp.phase1[0], lp.runs["fp16"][0]
    # the same phase 2 from the weights alone (running statistics at their initial values) differs
    assert late.config is not None
    alone = Trainer.from_config(late.config, late.data)
    alone.start_from(first.params)
    alone.run()
    assert any(not np.array_equal(late.buffers[k], alone.buffers[k]) for k in late.buffers)
    # start_from stores the statistics in the run's format for them (fp16 in a pure fp16 run)
    fresh = Trainer.from_config(TrainConfig(**{**late.config.to_dict(), "channels": (4,)}), late.data)
    fresh.start_from(first.params, first.buffers)
    for k, v in first.buffers.items():
        np.testing.assert_array_equal(fresh.buffers[k], fresh.P.cast(v, FP16))
    with pytest.raises(ValueError, match=r"buffers \['x'\]: expected the model's"):
        fresh.start_from(first.params, {"x": np.zeros(1)})
