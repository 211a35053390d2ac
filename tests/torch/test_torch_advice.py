"""floatlab.torch.advice and LayerReport.advice/summary: one verdict per format for a model.

Oracles: torch's own fp16 cast of the recorded gradients times the advised scale (nothing
overflows; below it, everything the scale saves), exact powers of two for the headroom."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("torch")

import torch

import floatlab.torch as flt
from floatlab.text import render
from floatlab.torch_hooks import GradientRecorder


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.big = torch.nn.Linear(16, 16)  # its outputs overflow fp16: a scale cannot help
        self.fc2 = torch.nn.Linear(16, 1)
        with torch.no_grad():
            self.big.weight.mul_(1e5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.fc2(self.big(torch.relu(self.fc1(x))) * 1e-5)
        return out


def test_advice_is_one_power_of_two_and_the_layers_to_keep_wide() -> None:
    torch.manual_seed(0)
    model = Net()
    batch = (torch.randn(32, 8), torch.randn(32, 1))

    def loss_fn(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss: torch.Tensor = torch.nn.functional.mse_loss(out, y) * 1e-6  # small: fp16 flushes them
        return loss

    rep = flt.inspect(model, batch, loss_fn, ["fp16", "bf16"])
    adv = rep.advice("fp16")
    assert isinstance(adv.log2_scale, int)
    assert adv.scale == 2.0**adv.log2_scale
    assert adv.log2_scale > 0
    assert "big" in adv.layers
    big = [k for k in adv.keep if k.layer == "big"]
    assert {(k.kind, k.cause) for k in big} >= {("activation", "overflow")}
    # the oracle: the same gradients, recorded by hooks, times the scale, cast by torch to fp16
    rec = GradientRecorder(model)
    with rec.attached():
        model.zero_grad()
        loss_fn(model(batch[0]), batch[1]).backward()  # type: ignore[no-untyped-call]
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    scaled = [(g.double() * adv.scale).float() for g in grads]
    assert all(torch.isfinite(s.half()).all() for s in scaled)  # no gradient overflows at the scale
    biggest = max(g.abs().max().item() for g in grads) * adv.scale
    assert biggest <= 65504 / 2**adv.headroom
    assert adv.headroom_binades == pytest.approx(math.log2(65504 / biggest), abs=1.0)  # (a bound per binade)
    # the combined advice of the recorder gives the same scale for the same values
    assert rec.combined_advice("fp16").log2_scale == adv.log2_scale
    text = render(adv)
    assert text.startswith(f"fp16: loss scale 2^{adv.log2_scale} for the whole model")
    assert "keep big (activation:" in text
    # bf16 has fp32's range: nothing overflows it, so no layer is kept for overflow
    assert all(k.cause != "overflow" for k in rep.advice("bf16").keep)


def test_summary_shows_only_rows_that_lose_something() -> None:
    torch.manual_seed(0)
    model = Net()
    rep = flt.inspect(model, (torch.randn(4, 8), None), lambda out: out.sum() * 1e-6, ["fp16", "bf16"])
    full, summary = rep.to_frame(), rep.summary()
    assert 0 < len(summary) < len(full)
    assert (summary["lost"] > 0).all()
    assert len(full[full["lost"] > 0]) == len(summary)
    assert ("big", "activation", "fp16") in set(
        zip(summary["layer"], summary["kind"], summary["format"], strict=True)
    )


def test_a_tolerance_outside_zero_to_one_is_refused() -> None:
    rep = flt.inspect(torch.nn.Linear(2, 1), (torch.ones(1, 2), None), lambda out: out.sum(), ["fp16"])
    with pytest.raises(ValueError, match=r"tolerance=-0.1: expected a share from 0 to 1"):
        rep.advice("fp16", tolerance=-0.1)
