"""LossScaler against torch.amp.GradScaler step by step, and the presets against the update rules
of the frameworks they name, written out as those frameworks write them."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from floatlab.train.policy import get_policy
from floatlab.train.scaler import SCALER_PRESETS, LossScaler


def overflow_pattern(seed: int, n: int, p: float = 0.03, burst: float = 0.3) -> list[bool]:
    """Random overflow steps: rare isolated ones and bursts of several in a row."""
    rng = np.random.default_rng(seed)
    out, i = [], 0
    while i < n:
        if rng.random() < p:
            k = int(rng.integers(2, 9)) if rng.random() < burst else 1
            out += [True] * k
            i += k
        else:
            out.append(False)
            i += 1
    return out[:n]


def drive_torch(pattern: list[bool], **kw: Any) -> tuple[list[float], list[bool]]:
    """Run torch.amp.GradScaler on a one-parameter model, inf gradients on the pattern's steps.

    Returns the scale each step used and whether the optimizer step was skipped (the weight
    did not move)."""
    torch = pytest.importorskip("torch")
    scaler = torch.amp.GradScaler("cpu", **kw)
    w = torch.nn.Parameter(torch.zeros(3))
    opt = torch.optim.SGD([w], lr=1.0)
    scales, skipped = [], []
    for bad in pattern:
        opt.zero_grad()
        # gradients of at most 1 times the scale: only the injected infs overflow fp32
        loss = scaler.scale((w * torch.tensor([1.0, 0.5, 0.25])).sum())
        loss.backward()
        assert w.grad is not None
        if bad:
            w.grad[1] = float("inf")
        before = w.detach().clone()
        scales.append(scaler.get_scale())
        scaler.step(opt)
        scaler.update()
        skipped.append(bool(torch.equal(before, w.detach())))
    return scales, skipped


def drive_ours(pattern: list[bool], **kw: Any) -> tuple[list[float], list[bool]]:
    s = LossScaler(**kw)
    for bad in pattern:
        s.update(bad)
    return [e.scale for e in s.log], [e.skipped for e in s.log]


@pytest.mark.parametrize(
    ("seed", "kw"),
    [
        (0, {}),
        (1, {"init_scale": 2.0**10, "growth_interval": 7}),
        (2, {"init_scale": 1000.0, "growth_factor": 1.7, "backoff_factor": 0.37, "growth_interval": 5}),
        (3, {"init_scale": 3.0, "growth_factor": 1.1, "backoff_factor": 0.9, "growth_interval": 2}),
    ],
)
def test_same_scales_and_skips_as_gradscaler(seed: int, kw: dict[str, Any]) -> None:
    pattern = overflow_pattern(seed, 3000, p=0.01 if not kw else 0.05)
    t_scales, t_skips = drive_torch(pattern, **kw)
    o_scales, o_skips = drive_ours(pattern, **kw)
    assert o_skips == t_skips == pattern
    assert o_scales == t_scales  # exact: both hold the scale in fp32
    assert len(set(o_scales)) > 3  # the pattern made the scale move both ways


def test_gradscaler_edges_fp32_range() -> None:
    # growth stops below fp32 overflow; repeated backoff walks into fp32's subnormals
    up = [False] * 12
    assert (
        drive_ours(up, init_scale=2.0**120, growth_interval=1)[0]
        == drive_torch(up, init_scale=2.0**120, growth_interval=1)[0]
    )
    down = [True] * 30
    ours = drive_ours(down, init_scale=2.0**-120, backoff_factor=0.37, growth_interval=1)[0]
    assert ours == drive_torch(down, init_scale=2.0**-120, backoff_factor=0.37, growth_interval=1)[0]
    assert ours[-1] < 2.0**-126  # subnormal: fp32 rounding there too


def test_state_dict_loads_from_and_into_gradscaler_keys() -> None:
    torch = pytest.importorskip("torch")
    ts = torch.amp.GradScaler("cpu", init_scale=256.0, growth_interval=4)
    w = torch.nn.Parameter(torch.ones(1))
    opt = torch.optim.SGD([w], lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        ts.scale(w.sum()).backward()
        ts.step(opt)
        ts.update()
    ours = LossScaler()
    ours.load_state_dict(ts.state_dict())
    assert (ours.scale, ours.growth_tracker, ours.growth_interval) == (256.0, 3, 4)
    ours.update(False)
    assert ours.scale == 512.0
    assert set(ts.state_dict()) <= set(ours.state_dict())


def _mindspore(pattern: list[bool], init: float, factor: float, window: int) -> list[float]:
    """MindSpore DynamicLossScaleManager.update_loss_scale, in its own terms (iteration counters)."""
    scale, cur_iter, last_overflow = init, 1, 0
    used = []
    for overflow in pattern:
        used.append(scale)
        if overflow:
            scale = max(scale / factor, 1)
            last_overflow = cur_iter
        elif (cur_iter - last_overflow) % window == 0:
            scale *= factor
        cur_iter += 1
    return used


def _apex(pattern: list[bool], init: float, window: int, max_scale: float) -> list[float]:
    """Apex amp LossScaler.update_scale, in its own terms (unskipped counter, min/max clamps)."""
    scale, unskipped = min(max_scale, init), 0
    used = []
    for overflow in pattern:
        used.append(scale)
        if overflow:
            scale = scale / 2.0
            unskipped = 0
        else:
            unskipped += 1
        if unskipped == window:
            scale = min(max_scale, scale * 2.0)
            unskipped = 0
    return used


def _scales(s: LossScaler, pattern: list[bool]) -> list[float]:
    for bad in pattern:
        s.update(bad)
    return [e.scale for e in s.log]


def test_mindspore_preset() -> None:
    init, grow, back, window, lo, hi = SCALER_PRESETS["mindspore"]
    assert (init, grow, back, window, lo, hi) == (2.0**24, 2.0, 0.5, 2000, 1.0, math.inf)
    # a short window so that growth, backoff and the floor at 1 all happen
    pattern = overflow_pattern(4, 4000, p=0.05) + [True] * 40 + [False] * 30
    ours = LossScaler(2.0**6, 2.0, 0.5, 7, min_scale=1.0)
    assert _scales(ours, pattern) == _mindspore(pattern, 2.0**6, 2.0, 7)
    assert max(e.scale for e in ours.log) > 2.0**10
    assert min(e.scale for e in ours.log) == 1.0


def test_apex_preset() -> None:
    assert SCALER_PRESETS["apex"][0] == 2.0**16
    assert SCALER_PRESETS["apex"][5] == 2.0**24
    pattern = [False] * 60 + overflow_pattern(5, 3000, p=0.02)
    ours = LossScaler(2.0**20, 2.0, 0.5, 6, max_scale=2.0**24)
    assert _scales(ours, pattern) == _apex(pattern, 2.0**20, 6, 2.0**24)
    assert max(e.scale for e in ours.log) == 2.0**24


def test_keras_and_other_presets() -> None:
    assert LossScaler.preset("keras").scale == 2.0**15 == LossScaler.preset("tensorflow").scale
    assert LossScaler.preset("tf1").min_scale == 1.0
    assert LossScaler.preset("torch").scale == 2.0**16 == LossScaler.preset("PyTorch").scale
    with pytest.raises(ValueError, match="unknown loss-scaler preset 'caffe'"):
        LossScaler.preset("caffe")


def test_static_and_disabled() -> None:
    s = LossScaler.static(512.0)
    for bad in [False] * 5 + [True] + [False] * 5:
        s.update(bad)
    assert {e.scale for e in s.log} == {512.0}
    assert s.skipped_steps == 1
    assert not s.is_dynamic
    d = LossScaler.disabled()
    d.update(True)
    assert d.scale == 1.0
    assert d.skipped_steps == 0
    assert not d.log[0].skipped
    assert d.inv_scale == 1.0


def test_report_and_underflow_log() -> None:
    s = LossScaler(init_scale=4.0, growth_interval=2)
    for bad, u in [(False, 0.1), (True, 0.0), (False, 0.3)]:
        s.update(bad, underflow=u)
    r = s.report()
    assert (r["steps"], r["skipped_steps"], r["scale_max"], r["scale_min"]) == (3, 1, 4.0, 2.0)
    assert r["mean_underflow"] == pytest.approx(0.4 / 3)
    back = LossScaler()
    back.load_state_dict(s.state_dict())
    assert back.log == s.log
    assert back.scale == s.scale == 2.0


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"init_scale": 0.0}, "init_scale=0.0"),
        ({"init_scale": math.inf}, "init_scale=inf"),
        ({"growth_factor": 0.5}, "growth_factor=0.5"),
        ({"backoff_factor": 1.5}, "backoff_factor=1.5"),
        ({"growth_interval": 0}, "growth_interval=0"),
        ({"min_scale": 4.0, "max_scale": 2.0}, "min_scale=4.0"),
    ],
)
def test_errors(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LossScaler(**kw)
    with pytest.raises(ValueError, match="lacks"):
        LossScaler().load_state_dict({"scale": 1.0})


@pytest.mark.parametrize("scale", [1e300, 2.0**128, 1e-50, 0.0, -4.0, math.nan, math.inf])
def test_scales_fp32_cannot_hold_are_refused(scale: float) -> None:
    # the scale multiplies the loss in fp32: inf would skip every step, 0 would learn nothing
    with np.errstate(over="ignore"):  # the oracle: numpy's fp32 cast gives 0, inf, nan or a negative
        assert not 0 < float(np.float32(scale)) < math.inf
    with pytest.raises(ValueError, match="expected a loss scale fp32 can hold"):
        LossScaler(init_scale=scale)
    with pytest.raises(ValueError, match="expected a loss scale fp32 can hold"):
        get_policy("mixed-fp16").replace(loss_scaling="static", static_scale=scale)
    for ok in (2.0**-149, 2.0**127, 65536):  # the extremes fp32 holds are accepted
        assert LossScaler(init_scale=ok).scale == float(np.float32(ok))
