"""Compensated (Kahan) weight updates: against exact rational arithmetic, the trainer's state, resume."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import floatlab.train as ft
from floatlab.formats import BF16
from floatlab.train import Policy, TrainConfig, Trainer
from floatlab.train.history import TrainingFaultWarning
from floatlab.train.models import MLP
from floatlab.train.optim import make_optimizer
from floatlab.train.precision import Precision
from floatlab.train.precision.update import add_update, kahan_update
from floatlab.train.state import check_state

# ---- an independent oracle: bf16 round-to-nearest-even on exact rationals ----------------------


def _exponent(x: Fraction) -> int:
    """e with 2^e <= |x| < 2^(e+1), exactly."""
    a = abs(x)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    return e - 1 if Fraction(2) ** e > a else e


def bf16(x: Fraction) -> Fraction:
    """``x`` rounded to bf16 (8 significant bits), ties to even; normal range only."""
    if x == 0:
        return Fraction(0)
    unit = Fraction(2) ** (_exponent(x) - 7)  # the gap of x's binade
    assert unit >= Fraction(2) ** -133
    return round(x / unit) * unit  # Python's round of a Fraction: ties to even


def ulp(x: Fraction) -> Fraction:
    return Fraction(2) ** (_exponent(x) - 7)


def kahan_reference(w: Fraction, c: Fraction, d: Fraction) -> tuple[Fraction, Fraction]:
    """Zamirai et al.'s Algorithm 1 written with one exact operation and one rounding per line."""
    u = bf16(d)
    y = bf16(u - c)
    s = bf16(w + y)
    c = bf16(bf16(s - w) - y)
    return s, c


def test_the_oracle_rounds_as_documented() -> None:
    assert bf16(Fraction(1, 3)) == Fraction(171, 512)  # 0.333984375
    assert bf16(1 + Fraction(1, 512)) == 1  # a tie at 1 + half an ulp: to even
    assert bf16(1 + Fraction(3, 512)) == 1 + Fraction(4, 512)


# ---- one weight, many tiny updates ---------------------------------------------------------------
def test_a_compensated_bf16_weight_tracks_the_exact_sum_where_nearest_stalls() -> None:
    rng = np.random.default_rng(0)
    # updates of 10^-4 or so with a drift, every one far below half an ulp of the weight (2^-8 at 1)
    ds = rng.uniform(-0.5e-4, 1.5e-4, 3000).astype(np.float32)
    P = Precision("bf16")
    w, c, plain = np.array([1.0], np.float32), np.array([0.0], np.float32), np.array([1.0], np.float32)
    rw, rc = Fraction(1), Fraction(0)
    exact = Fraction(1)
    for d in ds:
        w, c = kahan_update(P, w, np.array([d], np.float32), c, BF16, "rne")
        plain = add_update(P, plain, np.array([d], np.float32), BF16, "rne")
        rw, rc = kahan_reference(rw, rc, Fraction(float(d)))
        # every step, bit for bit: the vectorised update is the algorithm with its roundings
        assert (Fraction(float(w[0])), Fraction(float(c[0]))) == (rw, rc)
        exact += Fraction(float(d))
    assert float(exact) == pytest.approx(1.15, abs=0.01)
    assert plain[0] == 1.0  # round to nearest: every update swallowed, the weight never moved
    assert abs(Fraction(float(w[0])) - exact) <= ulp(exact)  # within one bf16 ulp of the exact sum
    assert abs(Fraction(float(plain[0])) - exact) > 15 * ulp(exact)


def test_a_large_update_moves_the_weight_as_without_compensation() -> None:
    # with nothing carried and an update that the sum keeps exactly, both paths agree
    P = Precision("bf16")
    w, d, zero = (
        np.array([1.0, -3.0, 0.0], np.float32),
        np.array([0.5, 0.25, 2.0**-20], np.float32),
        np.zeros(3, np.float32),
    )
    new, c = kahan_update(P, w, d, zero, BF16, "rne")
    np.testing.assert_array_equal(new, add_update(P, w, d, BF16, "rne"))
    np.testing.assert_array_equal(c, 0.0)
    # wide weights: nothing to compensate, the buffer is returned untouched
    wide, same = kahan_update(P, w, d, zero, P.wide, "rne")
    np.testing.assert_array_equal(wide, w + d)
    assert same is zero


# ---- the trainer's update path -------------------------------------------------------------------
def _tiny(policy: Policy | str, **kw: Any) -> Trainer:
    data = ft.make_underflow_task(n_train=64, n_test=32)
    return Trainer(MLP(data.n_features, (3,), data.n_classes), data, policy, **kw)


def test_the_trainers_update_follows_the_exact_sums_of_fixed_updates() -> None:
    pol = ft.get_policy("bf16").replace(update_compensation=True)
    tr, off = _tiny(pol), _tiny("bf16")
    assert sorted(tr.compensation) == sorted(tr.params)
    assert off.compensation == {}
    rng = np.random.default_rng(1)
    # fixed gradients, and SGD's update from them: each about 3e-4 of its weight (bf16 loses them)
    grads = {
        k: (np.abs(v) + 0.01) * rng.uniform(0.5, 1.5, v.shape).astype(np.float32)
        for k, v in tr.params.items()
    }
    deltas = {k: (-3e-4 * g).astype(np.float32) for k, g in grads.items()}
    w0 = {k: v.copy() for k, v in tr.params.items()}
    ref = {k: [(Fraction(float(x)), Fraction(0)) for x in v.ravel()] for k, v in w0.items()}
    n, shares = 200, []
    for _ in range(n):
        share, finite = tr._apply(deltas)
        off._apply(deltas)
        assert finite
        shares.append(share)
        for k, d in deltas.items():  # the exact-arithmetic algorithm, element by element
            ref[k] = [
                kahan_reference(w, c, Fraction(float(x))) for (w, c), x in zip(ref[k], d.ravel(), strict=True)
            ]
    for k, d in deltas.items():
        got = [Fraction(float(x)) for x in tr.params[k].ravel()]
        carried = [Fraction(float(x)) for x in tr.compensation[k].ravel()]
        assert got == [w for w, _ in ref[k]], k
        assert carried == [c for _, c in ref[k]], k
        for g, w_0, x in zip(got, w0[k].ravel(), d.ravel(), strict=True):
            # the sum of the updates as the weight format stores them (a fixed update's own rounding
            # repeats n times: compensation keeps the sum's rounding errors, not the update's)
            exact = Fraction(float(w_0)) + n * bf16(Fraction(float(x)))
            assert abs(g - exact) <= ulp(exact), k
    # most steps left most weights where they were (swallowed, and carried), yet the weights moved
    assert np.mean(shares) > 0.5
    moved = sum(int(np.count_nonzero(tr.params[k] != w0[k])) for k in w0)
    stalled = sum(int(np.count_nonzero(off.params[k] != w0[k])) for k in w0)
    assert moved == sum(v.size for v in w0.values()) > stalled


def _old_apply(tr: Trainer, deltas: dict[str, Any]) -> tuple[float, bool]:
    """The update as it was before compensation existed (the reference for 'off')."""
    mode = tr.policy.update_rounding
    intended = changed = bad = 0
    for k, d in deltas.items():
        fmt, old = tr.param_formats[k], tr.params[k]
        new = old + d if tr.P.is_wide(fmt) else tr.P.cast(old + tr.P.cast(d, fmt, mode), fmt, mode)
        intended += int(np.count_nonzero(d != 0))
        changed += int(np.count_nonzero(new != old))
        bad += 0 if bool(np.isfinite(new).all()) else 1
        tr.params[k] = new
    return ((intended - changed) / intended if intended else 0.0), bad == 0


@pytest.mark.parametrize(
    ("precision", "changes"),
    [
        ("bf16", {}),
        ("bf16", {"update_rounding": "stochastic"}),
        ("mixed-bf16", {}),
        # with fp32 master weights compensation has nothing to do: the same bits as without it
        ("mixed-bf16", {"update_compensation": True}),
        ("fp32", {"update_compensation": True}),
    ],
)
def test_without_low_precision_compensation_training_is_bit_identical_to_before(
    precision: str, changes: dict[str, Any]
) -> None:
    cfg = TrainConfig(data="underflow", precision=precision, hidden=(8,), epochs=2, overrides=changes)
    data = ft.make_underflow_task(n_train=192, n_test=64)
    new, old = Trainer.from_config(cfg, data), Trainer.from_config(cfg, data)
    old._apply = lambda deltas: _old_apply(old, deltas)  # type: ignore[method-assign]
    assert new.compensation == {}
    new.fit(2)
    old.fit(2)
    for k in new.params:
        np.testing.assert_array_equal(new.params[k], old.params[k], err_msg=k)
    assert new.history.steps == old.history.steps


def test_a_guarded_step_that_overflows_leaves_the_buffers_as_they_were() -> None:
    pol = ft.get_policy("bf16").replace(update_compensation=True, loss_scaling="dynamic")
    data = ft.make_underflow_task(n_train=64, n_test=32)
    tr = _tiny(pol, optimizer=make_optimizer("sgd", 1e-3, momentum=0.0))
    tr.fit(1, stop_after=1)
    before = {k: v.copy() for k, v in tr.compensation.items()}
    assert any(np.count_nonzero(v) for v in before.values())
    tr.opt.lr = 1e60  # the next update overflows bf16: the scaler's guard undoes the step
    with pytest.warns(TrainingFaultWarning, match="nonfinite_update"):
        st = tr.train_step(data.x_train[:32], data.y_train[:32])
    assert st.skipped
    for k, v in before.items():
        np.testing.assert_array_equal(tr.compensation[k], v, err_msg=k)


def test_start_from_clears_the_buffers() -> None:
    tr = _tiny(ft.get_policy("bf16").replace(update_compensation=True))
    tr.fit(1)
    assert any(np.count_nonzero(v) for v in tr.compensation.values())
    tr.start_from(tr.params)
    assert all(not np.count_nonzero(v) for v in tr.compensation.values())


# ---- the policy switch ---------------------------------------------------------------------------
def test_the_switch_is_a_checked_policy_field() -> None:
    on = ft.get_policy("bf16").replace(update_compensation=True)
    assert on.describe().endswith("compensated updates (Kahan, buffer in bf16)")
    assert (
        "nothing to compensate: fp32 weights"
        in ft.get_policy("mixed-bf16").replace(update_compensation=True).describe()
    )
    assert "compensated" not in ft.get_policy("bf16").describe()
    assert Policy.from_dict(on.to_dict()) == on
    with pytest.raises(ValueError, match="update_compensation='yes': expected true or false"):
        ft.get_policy("bf16").replace(update_compensation="yes")
    # a policy written before the field existed loads with compensation off
    old = ft.get_policy("bf16").to_dict()
    del old["update_compensation"]
    assert Policy.from_dict(old) == ft.get_policy("bf16")
    cfg = TrainConfig(precision="bf16", overrides={"update_compensation": True})
    assert cfg.make_policy().update_compensation
    assert TrainConfig.from_dict(cfg.to_dict()).make_policy() == cfg.make_policy()


# ---- state: checked, round-tripped, resumed bit for bit ------------------------------------------
def test_a_state_from_before_the_buffers_existed_loads() -> None:
    tr = _tiny("bf16")
    tr.fit(1)
    state = tr.state_dict()
    assert state["compensation"] == {}
    del state["compensation"]
    del state["policy"]["update_compensation"]
    twin = _tiny("bf16")
    twin.load_state_dict(state)
    assert twin.step == tr.step


def test_the_buffers_are_checked_before_anything_is_loaded() -> None:
    on = ft.get_policy("bf16").replace(update_compensation=True)
    tr = _tiny(on)
    tr.fit(1)
    good = tr.state_dict()
    assert sorted(good["compensation"]) == sorted(tr.params)
    assert check_state(tr, good).compensation.keys() == tr.compensation.keys()
    twin = _tiny(on)
    untouched = {k: v.copy() for k, v in twin.params.items()}
    bad: list[tuple[dict[str, Any], str]] = []
    missing = dict(good, compensation={k: v for k, v in good["compensation"].items() if k != "W0"})
    bad.append((missing, r"checkpoint compensation buffers \['W1', 'b0', 'b1'\] differ"))
    bad.append((dict(good, compensation=dict(good["compensation"], W0=np.zeros(2))), "buffer W0=.*expected"))
    bad.append((dict(good, compensation=dict(good["compensation"], W0="zeros")), "buffer W0='zeros'"))
    bad.append((dict(good, compensation=[1]), "compensation"))
    for state, match in bad:
        with pytest.raises(ValueError, match=match):
            twin.load_state_dict(state)
        assert twin.step == 0
        assert all(not np.count_nonzero(v) for v in twin.compensation.values())
        for k, v in untouched.items():
            np.testing.assert_array_equal(twin.params[k], v)
    twin.load_state_dict(good)
    for k in tr.compensation:
        np.testing.assert_array_equal(twin.compensation[k], tr.compensation[k])
        assert twin.compensation[k] is not good["compensation"][k]  # a copy, not the state's array


@pytest.mark.parametrize(
    "cfg",
    [
        TrainConfig(
            data="underflow",
            precision="bf16",
            epochs=3,
            hidden=(16,),
            optimizer="adamw",
            lr=1e-3,
            overrides={"update_compensation": True},
        ),
        TrainConfig(
            data="underflow",
            precision="bf16",
            epochs=3,
            hidden=(16,),
            overrides={"update_compensation": True, "update_rounding": "stochastic"},
        ),
        # BatchNorm's affine parameters in fp32 have no buffer; the others have one in fp16
        TrainConfig(
            data="underflow",
            model="convnet",
            precision="fp16",
            epochs=3,
            channels=(4,),
            overrides={"update_compensation": True, "batchnorm_fp32": True},
        ),
    ],
    ids=["bf16-adamw", "bf16-stochastic", "convnet-fp16"],
)
@pytest.mark.parametrize("stop", [7, 10])  # mid-epoch, and on an epoch boundary (5 batches per epoch)
def test_resume_with_compensation_is_bit_identical(cfg: TrainConfig, stop: int, tmp_path: Path) -> None:
    data = ft.make_underflow_task(n_train=320, n_test=64, loss_weight=2.0**-20)
    straight = Trainer.from_config(cfg, data)
    straight.fit(cfg.epochs)
    assert straight.compensation
    assert all(not straight.P.is_wide(straight.param_formats[k]) for k in straight.compensation)
    if cfg.model == "convnet":
        assert not set(straight.compensation) & straight.model.norm_params
    first = Trainer.from_config(cfg, data)
    first.fit(cfg.epochs, stop_after=stop)
    path = first.save(tmp_path / "ck.npz")
    del first
    resumed = Trainer.resume(path, data)
    assert resumed.step == stop
    resumed.fit(cfg.epochs)
    for name in ("params", "compensation", "buffers"):
        a, b = getattr(straight, name), getattr(resumed, name)
        assert sorted(a) == sorted(b)
        for k in a:
            np.testing.assert_array_equal(a[k], b[k], err_msg=f"{name}/{k}")
    assert straight.history.to_dict()["steps"] == resumed.history.to_dict()["steps"]
