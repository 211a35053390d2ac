"""floatlab.torch.scaler: the policy's loss scaling with GradScaler's interface and torch's knobs.

Oracle: ``torch.amp.GradScaler`` itself (on the CPU) with the same knobs, on the same sequence of
clean and overflowing steps: the same scale after each step and the same steps skipped."""

from __future__ import annotations

import math
from typing import Any

import pytest

pytest.importorskip("torch")

import torch

import floatlab.torch as flt


def test_the_knobs_reach_the_scaler_and_it_moves_as_torchs_gradscaler() -> None:
    knobs: dict[str, Any] = {
        "init_scale": 2.0**10,
        "growth_factor": 4.0,
        "backoff_factor": 0.25,
        "growth_interval": 2,
    }
    ours, theirs = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
    theirs.load_state_dict(ours.state_dict())
    opt_a = torch.optim.SGD(ours.parameters(), lr=1e-3)
    opt_b = torch.optim.SGD(theirs.parameters(), lr=1e-3)
    ref = torch.amp.GradScaler("cpu", **knobs)
    pattern = [1.0, 1.0, 1.0, math.inf, 1.0, 1.0, 1.0]  # an input of inf: an overflowing step
    with flt.simulate(ours, "mixed-fp16", **knobs) as sim:
        scaler = sim.scaler()
        assert scaler is sim.scaler()
        for v in pattern:
            x = torch.tensor([[v, 1.0]])
            for model, opt, s in ((ours, opt_a, scaler), (theirs, opt_b, ref)):
                opt.zero_grad()
                s.scale(model(x).sum()).backward()
                s.step(opt)
                s.update()
            assert scaler.get_scale() == ref.get_scale()
    assert torch.equal(ours.weight, theirs.weight) or torch.allclose(ours.weight, theirs.weight, rtol=2**-10)
    df = sim.to_pandas()
    per_step = df.groupby("step")[["loss_scale", "skipped"]].first()
    assert per_step["loss_scale"].tolist() == [1024.0, 1024.0, 4096.0, 4096.0, 1024.0, 1024.0, 4096.0]
    assert per_step["skipped"].tolist() == [False, False, False, True, False, False, False]


@pytest.mark.parametrize(
    ("knob", "value", "expected"),
    [
        ("growth_interval", 0, "growth_interval=0: expected a whole number of steps >= 1"),
        ("growth_factor", 0.5, "growth_factor=0.5: expected a finite number >= 1"),
        ("backoff_factor", 1.0, r"backoff_factor=1.0: expected a number in \(0, 1\)"),
        ("backoff_factor", 0, r"backoff_factor=0: expected a number in \(0, 1\)"),
        ("init_scale", -1.0, "init_scale=-1.0: expected a finite number > 0"),
    ],
)
def test_bad_knobs_are_refused_in_one_line(knob: str, value: Any, expected: str) -> None:
    with pytest.raises(ValueError, match=f"^{expected}$"):
        flt.simulate(torch.nn.Linear(1, 1), "mixed-fp16", **{knob: value})


def test_knobs_need_a_policy_with_dynamic_loss_scaling() -> None:
    with pytest.raises(ValueError, match=r"growth_interval=10: policy bf16 has no dynamic loss scaling"):
        flt.simulate(torch.nn.Linear(1, 1), "bf16", growth_interval=10)
    # without knobs a policy without scaling gets the disabled scaler: scale 1, nothing skipped
    assert flt.simulate(torch.nn.Linear(1, 1), "bf16").scaler().get_scale() == 1.0
