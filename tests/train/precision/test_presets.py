"""The framework presets: each one's policy and loss scaler against what its source says, a preset's
name as a policy name the trainer takes, overrides reported in words, the Python API's errors, and
the ``floatlab presets`` command (table, detail, JSON)."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest

from floatlab.cli import main
from floatlab.train.config import TrainConfig
from floatlab.train.data import make_underflow_task
from floatlab.train.models import MLP
from floatlab.train.precision.policy import FP32_OPS, PRESET_POLICIES, Policy, get_policy, parse_fp32_ops
from floatlab.train.precision.presets import (
    Preset,
    get_preset,
    preset_names,
    preset_overrides,
    presets,
    resolve_policy,
)
from floatlab.train.precision.scaler import LossScaler, make_scaler
from floatlab.train.trainer import Trainer

ALL, LOSS, NORM_LOSS = FP32_OPS, frozenset({"loss"}), frozenset({"norm", "loss"})
NONE = ("none", 1.0, 1.0, 1.0, None, None, None, False)


def dynamic(
    init: float, interval: int, floor: float | None = None, cap: float | None = None
) -> tuple[Any, ...]:
    """A scaler that doubles after ``interval`` clean steps and halves on overflow, skipping the step
    (None: no floor, no cap)."""
    return ("dynamic", init, 2.0, 0.5, interval, floor, cap, True)


def static(scale: float, skips: bool) -> tuple[Any, ...]:
    return ("static", scale, 1.0, 1.0, None, None, None, skips)


# What each source says, written out from it (see docs/concepts/presets.md for the citations):
# name -> (forward, master weights, BatchNorm in fp32, fp32 ops,
#          (scaler kind, init, growth, backoff, interval, floor, cap, skips an overflowing step))
EXPECTED: dict[str, tuple[str, bool, bool, frozenset[str], tuple[Any, ...]]] = {
    # autocast's fp32 list (softmax, log_softmax, layer_norm, exp, log, pow, sum, losses); GradScaler
    "torch-amp": ("fp16", True, True, ALL, dynamic(2.0**16, 2000)),
    # Keras 3: fp32 variables, LayerNorm/BatchNorm upcast, final softmax and loss in fp32; no floor
    "keras": ("fp16", True, True, NORM_LOSS, dynamic(2.0**15, 2000)),
    # tf.keras (TF 2.x): as Keras 3, tf.maximum(scale / multiplier, 1)
    "tf2-keras": ("fp16", True, True, NORM_LOSS, dynamic(2.0**15, 2000, floor=1.0)),
    # 2018: fp32 variables, fp16 compute, reductions in fp32, loss * 128 and grads / 128, no check
    "tf1-static-128": ("fp16", True, True, ALL, static(128.0, skips=False)),
    # apex/amp/frontend.py: O0 fp32, loss_scale 1.0 (not checked: no scaling)
    "apex-O0": ("fp32", False, True, ALL, NONE),
    # O1: patched FP32_FUNCS, fp32 weights, loss_scale "dynamic" (scaler.py: 2^16, 2, 2000, max 2^24)
    "apex-O1": ("fp16", True, True, ALL, dynamic(2.0**16, 2000, cap=2.0**24)),
    # O2: cast_model_type fp16, keep_batchnorm_fp32, master_weights, output cast to fp32 (the loss)
    "apex-O2": ("fp16", True, True, LOSS, dynamic(2.0**16, 2000, cap=2.0**24)),
    # O3: fp16 with BatchNorm, no master weights, loss_scale 1.0
    "apex-O3": ("fp16", False, False, LOSS, NONE),
    # fastai v1 to_fp16: model2half (BatchNorm fp32), master copies, loss_fp32; 2^16, 1000, max 2^24
    "fastai": ("fp16", True, True, LOSS, dynamic(2.0**16, 1000, floor=1.0, cap=2.0**24)),
    # mindspore/train/amp.py _config_level: parameters stay fp32 at every level (cast at use)
    "mindspore-O0": ("fp32", False, True, ALL, NONE),
    "mindspore-O1": ("fp16", True, True, ALL, NONE),
    "mindspore-O2": ("fp16", True, True, NORM_LOSS, dynamic(2.0**24, 2000, floor=1.0)),
    "mindspore-O3": ("fp16", True, False, LOSS, NONE),
    # FixedLossScaleManager(128.0, drop_overflow_update=True / False) on O2's policy
    "mindspore-fixed-128": ("fp16", True, True, NORM_LOSS, static(128.0, skips=True)),
    "mindspore-fixed-128-nodrop": ("fp16", True, True, NORM_LOSS, static(128.0, skips=False)),
}


@pytest.mark.parametrize("name", list(EXPECTED))
def test_every_preset_follows_its_source(name: str) -> None:
    fwd, master, bn32, ops, scaler = EXPECTED[name]
    d = get_preset(name).to_dict()
    assert (d["forward"], d["backward"], d["master_weights"], d["batchnorm_fp32"]) == (fwd, fwd, master, bn32)
    assert d["fp32_ops"] == sorted(ops)
    assert d["fp32_reductions"] is True  # the frameworks' kernels accumulate in fp32
    s = d["scaler"]
    got: tuple[Any, ...] = (s["kind"], s["init_scale"], s["growth_factor"], s["backoff_factor"])
    got += (s["growth_interval"],)
    got += (s["min_scale"], s["max_scale"], s["skips_overflow"])
    assert got == scaler
    assert d["source"]
    assert d["notes"]
    assert d["title"]


def test_the_list_is_complete_and_named_once() -> None:
    assert preset_names() == list(EXPECTED) == list(PRESET_POLICIES)
    assert len(set(preset_names())) == len(presets())
    assert all(p.make_policy().name == p.name for p in presets())
    assert all(p.policy is PRESET_POLICIES[p.name] is get_policy(p.name) for p in presets())


def scaler_numbers(s: LossScaler) -> tuple[Any, ...]:
    """A scaler as EXPECTED writes it (kind, init, growth, backoff, interval, floor, cap, skips)."""
    if not s.enabled:
        return NONE
    if not s.is_dynamic:
        return static(s.scale, s.skips_nonfinite)
    floor = s.min_scale if s.min_scale > 0 else None
    cap = s.max_scale if math.isfinite(s.max_scale) else None
    return ("dynamic", s.scale, s.growth_factor, s.backoff_factor, s.growth_interval, floor, cap, True)


@pytest.mark.parametrize("name", list(EXPECTED))
def test_a_preset_name_is_a_policy_name_the_trainer_takes(name: str) -> None:
    data = make_underflow_task(n_train=32, n_test=8)
    tr = Trainer(MLP(64, (4,), 10), data, name, batch_size=32)
    assert tr.policy is get_preset(name).make_policy()
    # the trainer's scaler is the one make_scaler builds for every caller, with the source's rules
    assert scaler_numbers(tr.scaler) == scaler_numbers(make_scaler(tr.policy)) == EXPECTED[name][-1]
    assert scaler_numbers(get_preset(name).make_scaler()) == EXPECTED[name][-1]


@pytest.mark.parametrize("name", ["fastai", "apex-O3", "mindspore-O2", "keras"])
def test_training_steps_run_under_a_preset(name: str) -> None:
    data = make_underflow_task(n_train=64, n_test=32)
    tr = Trainer(MLP(64, (16,), 10), data, get_preset(name).make_policy(), batch_size=32, seed=0)
    stats = [tr.train_step(data.x_train[i : i + 32], data.y_train[i : i + 32]) for i in (0, 32)]
    assert all(np.isfinite(s.loss) for s in stats)
    assert tr.scaler.name == get_preset(name).make_scaler().name
    assert tr.policy.name == name


def test_trainer_takes_apex_o2_by_name_and_trains_a_step() -> None:
    data = make_underflow_task(n_train=64, n_test=32)
    by_name = Trainer(MLP(64, (16,), 10), data, "apex-O2", batch_size=32, seed=0)
    by_policy = Trainer(MLP(64, (16,), 10), data, get_preset("apex-O2").make_policy(), batch_size=32, seed=0)
    assert by_name.policy == TrainConfig(precision="apex-O2").make_policy()
    assert (by_name.scaler.name, by_name.scaler.scale, by_name.scaler.max_scale) == ("apex", 2.0**16, 2.0**24)
    before = {k: w.copy() for k, w in by_name.params.items()}
    a = by_name.train_step(data.x_train[:32], data.y_train[:32])
    b = by_policy.train_step(data.x_train[:32], data.y_train[:32])
    assert np.isfinite(a.loss)
    assert not a.skipped
    assert a == b
    assert any(not np.array_equal(w, before[k]) for k, w in by_name.params.items())  # a step was taken
    for k, w in by_name.params.items():
        assert np.array_equal(w, by_policy.params[k])
    assert resolve_policy("apex-O2") is get_policy("apex-O2")  # the name older code calls


def test_unknown_preset_is_one_line_with_a_hint() -> None:
    with pytest.raises(
        ValueError, match=r"unknown preset 'apex-O4': did you mean apex-O3\? \(known: torch-amp"
    ) as e:
        get_preset("apex-O4")
    assert "\n" not in str(e.value)
    assert all(n in str(e.value) for n in preset_names())
    with pytest.raises(ValueError, match="unknown preset 'caffe': \\(known"):
        get_preset("caffe")
    with pytest.raises(ValueError, match="preset 3: expected a preset name"):
        get_preset(3)  # type: ignore[arg-type]
    assert get_preset(" MindSpore_O2 ").name == "mindspore-O2"
    p = get_preset("fastai")
    assert get_preset(p) is p


def test_overrides_are_reported_in_words() -> None:
    p = get_preset("apex-O3")
    base = p.make_policy()
    assert preset_overrides(p, base) == []
    assert preset_overrides("apex-O3", base.replace(name="renamed")) == []  # the name is not a setting
    changed = base.replace(
        forward="bf16",
        backward="bf16",
        master_weights=True,
        loss_scaling="static",
        static_scale=256.0,
        fp32_reductions=False,
        fp32_ops=parse_fp32_ops("softmax,loss"),
        batchnorm_fp32=True,
        rounding="rtz",
        update_rounding="stochastic",
        saturate=True,
        subnormals=False,
    )
    assert changed.name == "apex-O3*"
    assert preset_overrides(p, changed) == [
        "forward bf16 (apex-O3: fp16)",
        "backward bf16 (apex-O3: fp16)",
        "master weights on (apex-O3: off)",
        "loss scaling static 256 (torch) (apex-O3: none)",
        "fp32 reductions off (apex-O3: on)",
        "fp32 ops loss, softmax (apex-O3: loss)",
        "BatchNorm in fp32 on (apex-O3: off)",
        "rounding rtz (apex-O3: rne)",
        "update rounding stochastic (apex-O3: rne)",
        "saturating casts on (apex-O3: off)",
        "subnormals off (apex-O3: on)",
    ]
    dyn = get_preset("apex-O2")
    assert preset_overrides(dyn, dyn.make_policy().replace(scaler="torch")) == [
        "loss scaling dynamic (torch) (apex-O2: dynamic (apex))"
    ]
    assert preset_overrides(dyn, dyn.make_policy().replace(memory_layout="autocast")) == [
        "memory layout autocast (apex-O2: apex-o2)"
    ]


def test_to_dict_is_json_and_carries_the_whole_policy() -> None:
    for p in presets():
        d = p.to_dict()
        assert json.loads(json.dumps(d, allow_nan=False)) == d
        assert Policy.from_dict(d["policy"]) == p.policy
        assert d["memory_layout"] == p.policy.memory_layout


def test_the_loss_op_keeps_old_policies_as_they_were() -> None:
    # "softmax" still covers the loss's softmax; "loss" alone keeps only the loss in fp32
    assert "loss" in FP32_OPS
    assert get_policy("mixed-fp16").fp32_ops == FP32_OPS
    assert get_policy("fp16").replace(fp32_ops=parse_fp32_ops("softmax")).loss_op == "softmax"
    assert get_policy("fp16").replace(fp32_ops=parse_fp32_ops("loss")).loss_op == "loss"
    assert get_policy("fp16").loss_op == "softmax"  # neither: the loss follows softmax (low precision)
    assert (
        Policy.from_dict({**get_policy("mixed-fp16").to_dict(), "fp32_ops": ["softmax"]}).loss_op == "softmax"
    )


# ---- the command --------------------------------------------------------------------------------------
def test_presets_command_lists_every_preset(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["presets", "--no-color"]) == 0
    out = capsys.readouterr().out
    for p in presets():
        assert any(line.split()[:1] == [p.name] for line in out.splitlines())
        assert p.source in out
    assert "dynamic 2^16, x2 after 1000 clean steps, x0.5 on overflow while above 1, max 2^24" in out


def test_presets_command_json_matches_the_api(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["presets", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == [p.to_dict() for p in presets()]
    assert main(["presets", "mindspore-fixed-128-nodrop", "--json"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert one == get_preset("mindspore-fixed-128-nodrop").to_dict()
    assert one["scaler"]["skips_overflow"] is False


def test_presets_command_detail_and_unknown_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["presets", "apex-o2", "--no-color"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("apex-O2: NVIDIA Apex amp O2")
    assert "max 2^24" in out
    assert get_preset("apex-O2").notes in out
    assert main(["presets", "apex-O4"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("floatlab: error: unknown preset 'apex-O4'")
    assert "mindspore-fixed-128-nodrop" in err


def test_preset_is_frozen_data() -> None:
    p = get_preset("keras")
    with pytest.raises(AttributeError):
        p.name = "other"  # type: ignore[misc]
    assert isinstance(p, Preset)
    assert math.isfinite(p.make_scaler().scale)
