"""LossScaler against torch.amp.GradScaler and Keras 3's LossScaleOptimizer step by step, and the
presets against the update rules of the other frameworks they name (Apex, fastai, MindSpore,
tf.keras), written out as those frameworks' sources write them."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import floatlab.train as ft
from floatlab.train.precision.policy import get_policy
from floatlab.train.precision.scaler import SCALER_PRESETS, SCALER_RULES, LossScaler, ScalerRules, make_scaler


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


# ---- the other frameworks, each against its own update rule ----------------------------------------
# Each reference below is the framework's scale update written out in Python from the file it cites,
# in the framework's own terms (its counters, its clamps, its number type), and driven with the same
# random overflow pattern as floatlab's preset; the scale every step used and which steps were skipped
# must agree exactly. The intervals are shortened so that growth, backoff, floors and caps all happen.


def drive(s: LossScaler, pattern: list[bool]) -> tuple[list[float], list[bool]]:
    for bad in pattern:
        s.update(bad)
    return [e.scale for e in s.log], [e.skipped for e in s.log]


def preset_with(name: str, **changes: Any) -> LossScaler:
    """The preset's scaler with some settings changed (a shorter interval, another start)."""
    init, grow, back, interval, lo, hi = SCALER_PRESETS[name]
    rules = SCALER_RULES.get(name, ScalerRules())
    kw: dict[str, Any] = {
        "init_scale": init,
        "growth_factor": grow,
        "backoff_factor": back,
        "growth_interval": interval,
        "min_scale": lo,
        "max_scale": hi,
        "skips_nonfinite": rules.skips_nonfinite,
        "fp32_scale": rules.fp32_scale,
        "limit_rule": rules.limit_rule,
        "name": name,
    }
    return LossScaler(**{**kw, **changes})


def _mindspore_manager(pattern: list[bool], init: float, factor: float, window: int) -> list[float]:
    """MindSpore DynamicLossScaleManager.update_loss_scale
    (mindspore/python/mindspore/train/loss_scale_manager.py), in its own terms (iteration counters)."""
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


def _mindspore_cell(
    pattern: list[bool], init: float, factor: float, window: int
) -> tuple[list[float], list[bool]]:
    """MindSpore nn.DynamicLossScaleUpdateCell.construct (mindspore/python/mindspore/nn/wrap/
    loss_scale.py), the cell that training runs: fp32 tensors, Reciprocal, Maximum with 1, Select;
    TrainOneStepWithLossScaleCell skips the optimizer on overflow."""
    f32 = np.float32
    scale, factor32, one = f32(init), f32(factor), f32(1.0)
    cur_iter, last_overflow_iter = 1, 0
    used, skipped = [], []
    for overflow in pattern:
        used.append(float(scale))
        skipped.append(overflow)
        on_overflow = max(scale * (one / factor32), one) if overflow else scale
        should_inc = window <= cur_iter - last_overflow_iter
        if overflow or should_inc:
            last_overflow_iter = cur_iter
        scale = on_overflow * factor32 if (should_inc and not overflow) else on_overflow
        cur_iter += 1
    return used, skipped


def _apex(
    pattern: list[bool], init: float, window: int, min_loss_scale: float | None, max_loss_scale: float
) -> tuple[list[float], list[bool]]:
    """Apex amp LossScaler.update_scale (NVIDIA/apex apex/amp/scaler.py), dynamic: Python floats, the
    `_unskipped` counter, `if(self._min_loss_scale)` floor and `min(max, scale*2.)` cap."""
    scale, unskipped = init, 0
    used, skipped = [], []
    for overflow in pattern:
        used.append(scale)
        if overflow:
            should_skip = True
            scale = max(min_loss_scale, scale / 2.0) if min_loss_scale else scale / 2.0
            unskipped = 0
        else:
            should_skip = False
            unskipped += 1
        if unskipped == window:
            scale = min(max_loss_scale, scale * 2.0)
            unskipped = 0
        skipped.append(should_skip)
    return used, skipped


def _fastai(
    pattern: list[bool], loss_scale: float, max_noskip: int, max_scale: float
) -> tuple[list[float], list[bool]]:
    """fastai v1 MixedPrecision.on_backward_end (fastai/callbacks/fp16.py), dynamic: Python floats;
    an overflow is acted on only while the scale is above 1, growth only while below max_scale."""
    noskip = 0
    used, skipped = [], []
    for overflow in pattern:
        used.append(loss_scale)
        if overflow and loss_scale > 1:
            loss_scale /= 2
            noskip = 0
            skipped.append(True)
        else:
            skipped.append(False)  # the master gradients are copied and the step is taken
            noskip += 1
            if noskip >= max_noskip and loss_scale < max_scale:
                loss_scale *= 2
                noskip = 0
    return used, skipped


def _tf2(
    pattern: list[bool], init: float, multiplier: float, growth_steps: int
) -> tuple[list[float], list[bool]]:
    """tf.keras _DynamicLossScaleState.update (keras/mixed_precision/loss_scale_optimizer.py, TF 2.x):
    an fp32 variable, `_assign_if_finite` on growth, `tf.maximum(scale / multiplier, 1)` on overflow."""
    f32 = np.float32
    scale, counter = f32(init), 0
    used, skipped = [], []
    for overflow in pattern:
        used.append(float(scale))
        skipped.append(overflow)  # should_apply_gradients = is_finite
        if not overflow:
            if counter + 1 >= growth_steps:
                with np.errstate(over="ignore"):
                    new = scale * f32(multiplier)
                if np.isfinite(new):
                    scale = new
                counter = 0
            else:
                counter += 1
        else:
            scale = max(scale / f32(multiplier), f32(1.0))
            counter = 0
    return used, skipped


def test_preset_numbers_are_the_sources_defaults() -> None:
    # each line: the defaults as the cited file writes them
    assert SCALER_PRESETS["torch"] == (2.0**16, 2.0, 0.5, 2000, 0.0, math.inf)  # GradScaler.__init__
    assert SCALER_PRESETS["keras"] == (2.0**15, 2.0, 0.5, 2000, 0.0, math.inf)  # Keras 3, no floor
    assert SCALER_PRESETS["tf2"] == (2.0**15, 2.0, 0.5, 2000, 1.0, math.inf)  # tf.maximum(.., 1)
    assert SCALER_PRESETS["apex"] == (2.0**16, 2.0, 0.5, 2000, 0.0, 2.0**24)  # min_loss_scale None
    assert SCALER_PRESETS["fastai"] == (2.0**16, 2.0, 0.5, 1000, 1.0, 2.0**24)  # max_noskip=1000
    assert SCALER_PRESETS["mindspore"] == (2.0**24, 2.0, 0.5, 2000, 1.0, math.inf)
    assert SCALER_PRESETS["mindspore-fixed"].init_scale == 128.0  # FixedLossScaleManager(128.0)
    assert SCALER_RULES["fastai"] == ScalerRules(skips_nonfinite=True, fp32_scale=False, limit_rule="guard")
    assert not SCALER_RULES["mindspore-fixed-nodrop"].skips_nonfinite
    assert SCALER_RULES.get("mindspore-fixed", ScalerRules()).skips_nonfinite
    for name in SCALER_PRESETS:
        s = LossScaler.preset(name)
        assert (s.name, s.scale) == (name, SCALER_PRESETS[name].init_scale)


@pytest.mark.parametrize(("factor", "seed"), [(2.0, 4), (3.0, 6)])
def test_mindspore_against_its_update_cell_and_manager(factor: float, seed: int) -> None:
    # a short window so that growth, backoff and the floor at 1 all happen
    pattern = overflow_pattern(seed, 3000, p=0.05) + [True] * 150 + [False] * 30
    backoff = float(np.float32(1.0) / np.float32(factor))  # the cell multiplies by Reciprocal(factor)
    ours = preset_with(
        "mindspore", init_scale=2.0**6, growth_factor=factor, backoff_factor=backoff, growth_interval=7
    )
    scales, skips = drive(ours, pattern)
    assert (scales, skips) == _mindspore_cell(pattern, 2.0**6, factor, 7)
    if factor == 2.0:  # the Python manager agrees where its float arithmetic is exact
        assert scales == _mindspore_manager(pattern, 2.0**6, factor, 7)
    assert max(scales) > 2.0**10
    assert min(scales) == 1.0


@pytest.mark.parametrize(
    ("seed", "init", "floor", "cap"),
    [(5, 2.0**20, None, 2.0**24), (7, 2.0**26, 1.0, 2.0**24), (8, 2.0**16, 2.0**10, 2.0**18)],
)
def test_apex_against_its_update_scale(seed: int, init: float, floor: float | None, cap: float) -> None:
    pattern = [False] * 60 + overflow_pattern(seed, 3000, p=0.02) + [True] * 30 + [False] * 40
    ours = preset_with("apex", init_scale=init, growth_interval=6, min_scale=floor or 0.0, max_scale=cap)
    scales, skips = drive(ours, pattern)
    assert (scales, skips) == _apex(pattern, init, 6, floor, cap)
    assert max(scales) == max(init, cap)  # an initial scale above the cap is clamped at the first growth


def test_apex_and_fastai_hold_the_scale_in_a_python_float() -> None:
    # 200 overflows in a row take 2^16 to 2^-184: a float64 still holds it, fp32 would be 0 by then
    pattern = [True] * 200 + [False] * 20
    ours = preset_with("apex", growth_interval=6)
    assert drive(ours, pattern) == _apex(pattern, 2.0**16, 6, None, 2.0**24)
    assert ours.scale == 2.0**-181
    as_fp32 = preset_with("apex", growth_interval=6, fp32_scale=True)
    assert drive(as_fp32, pattern)[0][-1] == 0.0


@pytest.mark.parametrize(
    ("seed", "init", "cap"),
    [(9, 2.0**6, 2.0**24), (10, 3.0, 16.0), (11, 0.75, 2.0**24), (12, 2.0**16, 2.0**18)],
)
def test_fastai_against_its_callback(seed: int, init: float, cap: float) -> None:
    # bursts that reach the floor (where fastai takes the overflowing step and counts it as clean),
    # growth that overshoots a cap that is not a power of two times the start, a start below 1
    pattern = overflow_pattern(seed, 3000, p=0.06, burst=0.5) + [True] * 30 + [False] * 40
    ours = preset_with("fastai", init_scale=init, growth_interval=5, max_scale=cap)
    scales, skips = drive(ours, pattern)
    assert (scales, skips) == _fastai(pattern, init, 5, cap)
    taken = [bad and not skip for bad, skip in zip(pattern, skips, strict=True)]
    assert any(taken)  # overflowing steps taken at the floor: this pattern exercises the rule


def test_tf2_against_its_loss_scale_state() -> None:
    pattern = overflow_pattern(13, 3000, p=0.05) + [True] * 40 + [False] * 30
    ours = preset_with("tf2", init_scale=2.0**6, growth_interval=7)
    scales, skips = drive(ours, pattern)
    assert (scales, skips) == _tf2(pattern, 2.0**6, 2.0, 7)
    assert min(scales) == 1.0
    # at the top of fp32 the scale stays where it is (_assign_if_finite), as GradScaler's does
    top = preset_with("tf2", init_scale=2.0**126, growth_interval=1)
    assert drive(top, [False] * 4) == _tf2([False] * 4, 2.0**126, 2.0, 1)


def test_keras3_loss_scale_optimizer_step_for_step(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """Keras 3's own keras.optimizers.LossScaleOptimizer (torch backend, CPU) fed scaled gradients,
    an inf on the pattern's steps: the scale before each step and whether the weights moved."""
    monkeypatch.setenv("KERAS_BACKEND", "torch")
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    keras = pytest.importorskip("keras")
    if keras.backend.backend() != "torch":
        pytest.skip("keras was imported with another backend")
    # a low start and bursts: Keras 3 has no floor, the scale goes below 1
    pattern = overflow_pattern(14, 300, p=0.08, burst=0.5) + [True] * 12 + [False] * 20
    opt = keras.optimizers.LossScaleOptimizer(
        keras.optimizers.SGD(learning_rate=1.0), initial_scale=8.0, dynamic_growth_steps=5
    )
    v = keras.Variable(np.zeros(3, np.float32))
    opt.build([v])
    k_scales, k_skips = [], []
    for bad in pattern:
        scale = float(opt.dynamic_scale.value)  # (the backend's tensor: torch's)
        g = np.array([1.0, 0.5, 0.25], np.float32) * np.float32(scale)
        if bad:
            g[1] = np.inf
        before = v.value.detach().clone()
        opt.apply([keras.ops.convert_to_tensor(g)], [v])
        k_scales.append(scale)
        k_skips.append(bool((before == v.value.detach()).all()))
    ours = preset_with("keras", init_scale=8.0, growth_interval=5)
    assert drive(ours, pattern) == (k_scales, k_skips)
    assert k_skips == pattern
    assert min(k_scales) < 1.0 < max(k_scales)


def test_static_scalers_skip_or_take_an_overflowing_step() -> None:
    pattern = [False, True, False, True, True, False]
    fixed = LossScaler.preset("mindspore-fixed")  # FixedLossScaleUpdateCell: overflow drops the step
    assert drive(fixed, pattern) == ([128.0] * 6, pattern)
    for name in ("mindspore-fixed-nodrop", "tf1-static"):  # no update cell / no check: every step taken
        s = LossScaler.preset(name)
        assert drive(s, pattern) == ([128.0] * 6, [False] * 6)
        assert (s.skipped_steps, s.is_dynamic, s.catches_overflow) == (0, False, False)


def test_for_policy_picks_the_scaler_a_policy_names() -> None:
    assert LossScaler.for_policy("none").enabled is False
    s = LossScaler.for_policy("static", "torch", 512.0)
    assert (s.scale, s.name, s.skips_nonfinite) == (512.0, "static", True)
    nodrop = LossScaler.for_policy("static", "mindspore-fixed-nodrop", 1024.0)
    assert (nodrop.scale, nodrop.name, nodrop.skips_nonfinite) == (1024.0, "mindspore-fixed-nodrop", False)
    assert LossScaler.for_policy("dynamic", "fastai").limit_rule == "guard"
    with pytest.raises(ValueError, match="loss_scaling='sometimes'"):
        LossScaler.for_policy("sometimes")
    with pytest.raises(ValueError, match="unknown loss-scaler preset 'caffe'"):
        LossScaler.for_policy("static", "caffe")


def test_keras_and_other_presets() -> None:
    assert LossScaler.preset("keras").scale == 2.0**15 == LossScaler.preset("tensorflow").scale
    assert LossScaler.preset("keras").min_scale == 0.0  # Keras 3: no floor
    assert LossScaler.preset("tf2").min_scale == LossScaler.preset("tf").min_scale == 1.0
    assert LossScaler.preset("tf1").min_scale == 1.0
    assert LossScaler.preset("torch").scale == 2.0**16 == LossScaler.preset("PyTorch").scale
    with pytest.raises(ValueError, match="unknown loss-scaler preset 'caffe'"):
        LossScaler.preset("caffe")


def test_rules_survive_the_state_dict() -> None:
    a = preset_with("fastai", init_scale=4.0, growth_interval=3)
    for bad in [True, True, True, False]:
        a.update(bad)
    b = LossScaler()
    b.load_state_dict(a.state_dict())
    assert (b.limit_rule, b.fp32_scale, b.skips_nonfinite, b.scale) == ("guard", False, True, 1.0)
    assert drive(b, [True, False, False]) == drive(a, [True, False, False])
    old = {k: v for k, v in LossScaler.preset("tf1-static").state_dict().items() if k not in SCALER_RULE_KEYS}
    c = LossScaler()
    c.load_state_dict(old)  # written before the rule keys existed: torch's rules
    assert (c.skips_nonfinite, c.fp32_scale, c.limit_rule) == (True, True, "clamp")


SCALER_RULE_KEYS = {"skips_nonfinite", "fp32_scale", "limit_rule"}


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


def test_summary_and_underflow_log() -> None:
    s = LossScaler(init_scale=4.0, growth_interval=2)
    for bad, u in [(False, 0.1), (True, 0.0), (False, 0.3)]:
        s.update(bad, underflow=u)
    r = s.summary()
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
        ({"limit_rule": "wrap"}, "limit_rule='wrap'"),
        ({"fp32_scale": "yes"}, "fp32_scale='yes'"),
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


# ---- the scaler knobs (init_scale, growth_factor, backoff_factor, growth_interval) as policy
# overrides: the scaler they make against torch.amp.GradScaler with the same numbers, their checks,
# and a run whose scale grows and backs off within a hundred steps
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
        p = ft.TrainConfig(precision=name, overrides={"growth_interval": 10}).make_policy()
        plain = make_scaler(ft.get_policy(name))
        assert make_scaler(p).state_dict() == plain.state_dict()
    with pytest.raises(ValueError, match="growth_interval=0: expected an integer >= 1"):
        ft.get_policy("bf16").replace(growth_interval=0)  # (a bad value is refused all the same)


def test_the_scale_grows_and_backs_off_within_a_hundred_steps() -> None:
    h = ft.train(
        "mlp", "digits", "mixed-fp16", epochs=1, steps=100, hidden=(32,), seed=0,
        overrides={"growth_interval": 10, "init_scale": 2.0**12},
    )  # fmt: skip
    scales = h.column("scale")
    assert scales.max() > 2.0**12  # it grew
    skipped = [i for i, s in enumerate(h.steps["skipped"]) if s]
    assert skipped, "no overflow within 100 steps"
    i = skipped[0]
    assert i + 1 < len(scales)
    assert scales[i + 1] == scales[i] / 2
