"""TrainConfig: the policy's overrides under their name, and every key an earlier floatlab wrote
(a checkpoint's config, a call's keyword) read under its new one."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import floatlab.train as ft
from floatlab.train import TrainConfig, Trainer
from floatlab.train.checkpoint import load_checkpoint, save_checkpoint

SMALL: dict[str, Any] = {"model": "mlp", "data": "underflow", "hidden": (8,), "steps": 3}


def test_the_overrides_replace_fields_of_the_named_policy() -> None:
    cfg = TrainConfig(precision="mixed-fp16", overrides={"loss_scaling": "static", "static_scale": 256.0})
    policy, named = cfg.make_policy(), ft.get_policy("mixed-fp16")
    assert (policy.loss_scaling, policy.static_scale) == ("static", 256.0)
    assert dataclasses.replace(policy, name=named.name, loss_scaling=named.loss_scaling,
                               static_scale=named.static_scale) == named  # fmt: skip
    assert "overrides" in cfg.to_dict()
    assert "policy" not in cfg.to_dict()


def test_the_old_key_reads_as_the_new_one() -> None:
    old = TrainConfig.from_dict({"precision": "bf16", "policy": {"update_rounding": "stochastic"}})
    new = TrainConfig(precision="bf16", overrides={"update_rounding": "stochastic"})
    assert old == new
    assert TrainConfig(precision="bf16", policy={"update_rounding": "stochastic"}) == new
    with pytest.raises(ValueError, match=r"^settings give both 'policy' and 'overrides'"):
        TrainConfig.from_dict({"policy": {}, "overrides": {}})
    with pytest.raises(ValueError, match=r"^settings give both 'policy' and 'overrides'"):
        TrainConfig(policy={"rounding": "rtz"}, overrides={"rounding": "rne"})


def test_train_takes_the_old_keyword_as_the_new_one() -> None:
    old = ft.train(precision="bf16", seed=0, policy={"update_rounding": "stochastic"}, **SMALL)
    new = ft.train(precision="bf16", seed=0, overrides={"update_rounding": "stochastic"}, **SMALL)
    assert old.meta["config"] == new.meta["config"]
    assert old.meta["config"]["overrides"] == {"update_rounding": "stochastic"}
    np.testing.assert_array_equal(old.column("loss"), new.column("loss"))


def test_a_misspelt_setting_is_one_line_naming_the_closest_field() -> None:
    with pytest.raises(ValueError, match=r"^unknown train config key 'overides': did you mean overrides\?"):
        ft.train(precision="bf16", overides={}, **SMALL)


def test_a_checkpoint_written_with_the_old_key_resumes(tmp_path: Path) -> None:
    cfg = TrainConfig(precision="bf16", overrides={"update_rounding": "stochastic"}, seed=1, **SMALL)
    trainer = Trainer.from_config(cfg)
    trainer.run()
    path = trainer.save(tmp_path / "new.npz")
    state = load_checkpoint(path)
    state["config"]["policy"] = state["config"].pop("overrides")  # as an earlier floatlab wrote it
    old = save_checkpoint(tmp_path / "old.npz", state)
    back = Trainer.resume(old)
    assert back.config == cfg
    assert back.policy == trainer.policy
    for k, v in trainer.params.items():
        np.testing.assert_array_equal(back.params[k], v)
