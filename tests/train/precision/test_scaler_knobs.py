"""The scaler knobs (init_scale, growth_factor, backoff_factor, growth_interval) as policy overrides:
the scaler they make against torch.amp.GradScaler with the same numbers, their checks, and a run
whose scale grows and backs off within a hundred steps."""

from __future__ import annotations

from typing import Any

import pytest

import floatlab.train as ft
from floatlab.train.precision.scaler import make_scaler
from tests.train.precision.test_scaler import drive_torch, overflow_pattern

KNOBS: dict[str, Any] = {
    "init_scale": 2.0**9, "growth_factor": 1.5, "backoff_factor": 0.25, "growth_interval": 6,
}  # fmt: skip


def test_the_knobs_make_gradscalers_scaler() -> None:
    s = make_scaler(ft.get_policy("mixed-fp16").replace(**KNOBS))
    pattern = overflow_pattern(7, 600, p=0.04)
    for bad in pattern:
        s.update(bad)
    t_scales, t_skips = drive_torch(pattern, **KNOBS)
    assert [e.scale for e in s.log] == t_scales
    assert [e.skipped for e in s.log] == t_skips


def test_a_preset_keeps_its_rules_under_the_knobs() -> None:
    s = make_scaler(ft.get_policy("apex-O2").replace(growth_interval=3))
    assert (s.growth_interval, s.max_scale, s.fp32_scale) == (3, 2.0**24, False)


@pytest.mark.parametrize(
    ("knob", "value", "message"),
    [
        ("growth_interval", 0, "growth_interval=0: expected an integer >= 1"),
        ("growth_factor", 0.5, "growth_factor=0.5: expected a finite number >= 1"),
        ("backoff_factor", 1.5, "backoff_factor=1.5: expected a number in (0, 1]"),
        ("init_scale", 0.0, "init_scale=0.0: expected a loss scale fp32 can hold"),
    ],
)
def test_bad_knobs_are_one_line_naming_the_value(knob: str, value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        ft.get_policy("mixed-fp16").replace(**{knob: value})


def test_knobs_given_to_a_policy_without_dynamic_scaling_stay_unused() -> None:
    # (so that one setting can go to fp32, bf16 and mixed-fp16 alike in a comparison)
    for name in ("bf16", "tf1-static-128"):
        p = ft.TrainConfig(precision=name, policy={"growth_interval": 10}).make_policy()
        plain = make_scaler(ft.get_policy(name))
        assert make_scaler(p).state_dict() == plain.state_dict()
    with pytest.raises(ValueError, match="growth_interval=0: expected an integer >= 1"):
        ft.get_policy("bf16").replace(growth_interval=0)  # (a bad value is refused all the same)


def test_the_scale_grows_and_backs_off_within_a_hundred_steps() -> None:
    h = ft.train(
        "mlp", "digits", "mixed-fp16", epochs=1, steps=100, hidden=(32,), seed=0,
        policy={"growth_interval": 10, "init_scale": 2.0**12},
    )  # fmt: skip
    scales = h.column("scale")
    assert scales.max() > 2.0**12  # it grew
    skipped = [i for i, s in enumerate(h.steps["skipped"]) if s]
    assert skipped, "no overflow within 100 steps"
    i = skipped[0]
    assert i + 1 < len(scales)
    assert scales[i + 1] == scales[i] / 2
