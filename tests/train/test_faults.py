"""Faults in training: non-finite batches, losses, gradients and updates, a collapsing loss scale and
one stuck at fp32's limit are detected, skipped where the weights are guarded, warned about once and
flagged in the history; fp32 master weights never receive a non-finite value; an interrupted
checkpoint write leaves the previous checkpoint readable."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import floatlab.io
import floatlab.train as ft
from floatlab.train import TrainConfig, Trainer
from floatlab.train import checkpoint as ck
from floatlab.train.history import FAULTS, TrainingFaultWarning
from floatlab.train.precision.scaler import SCALE_COLLAPSE, LossScaler


@functools.cache
def _data() -> ft.Dataset:
    return ft.make_underflow_task(n_train=256, n_test=64, loss_weight=2.0**-20)


def _trainer(precision: str = "mixed-fp16", **kw: Any) -> Trainer:
    return Trainer.from_config(TrainConfig(data="underflow", precision=precision, hidden=(8,), **kw), _data())


def _snapshot(tr: Trainer) -> dict[str, np.ndarray]:
    return {k: v.copy() for k, v in tr.params.items()}


def _assert_same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    for k in a:
        np.testing.assert_array_equal(a[k].view(np.uint8), b[k].view(np.uint8), err_msg=k)


def _batch(n: int = 16) -> tuple[np.ndarray, np.ndarray]:
    d = _data()
    return d.x_train[:n].copy(), d.y_train[:n].copy()


def _step(tr: Trainer, x: np.ndarray, y: np.ndarray) -> ft.StepStats:
    """One step as fit() takes it, logged in the history."""
    st = tr.train_step(x, y)
    tr.history.log_step(step=tr.step, epoch=tr.epoch, **vars(st))
    return st


# ---- non-finite batches and losses ---------------------------------------------------------------
@pytest.mark.parametrize("precision", ["mixed-fp16", "mixed-bf16", "fp32", "mixed-fp8"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_nonfinite_batch_is_skipped_flagged_and_warned_once(precision: str, bad: float) -> None:
    tr = _trainer(precision)
    x, y = _batch()
    _step(tr, x, y)  # a clean step first
    before = _snapshot(tr)
    x[3, 5] = bad
    with pytest.warns(TrainingFaultWarning) as record:
        st = _step(tr, x, y)
    assert st.skipped
    assert "nonfinite_batch" in st.fault.split(",")
    _assert_same(before, tr.params)
    # the second time: flagged, not warned again
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        st2 = _step(tr, x, y)
    assert "nonfinite_batch" in st2.fault
    assert sum("nonfinite_batch" in str(w.message) for w in record) == 1
    assert tr.history.faults()["nonfinite_batch"] == [2, 3]
    assert tr.history.summary()["faults"]["nonfinite_batch"] == 2
    # a clean batch trains again
    st3 = _step(tr, *_batch())
    assert not st3.skipped
    assert st3.fault == ""


def test_a_loss_that_overflows_is_detected() -> None:
    # inputs of 60000 (finite in fp16) drive the fp16 activations past 65504: the loss is NaN
    tr = _trainer("mixed-fp16")
    x, y = _batch()
    x[:] = 6e4
    before = _snapshot(tr)
    with pytest.warns(TrainingFaultWarning) as record:
        st = _step(tr, x, y)
    assert any("[nonfinite_loss]" in str(w.message) for w in record)
    assert not np.isfinite(st.loss)
    assert st.skipped
    assert "nonfinite_loss" in st.fault
    _assert_same(before, tr.params)


def _opt_snapshot(tr: Trainer) -> dict[str, np.ndarray]:
    """The optimizer's step count and state arrays, copied."""
    out = {f"{k}/{n}": a.copy() for k, st in tr.opt.state.items() for n, a in st.items()}
    out["t"] = np.array([tr.opt.t])
    return out


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_an_update_that_overflows_is_undone(optimizer: str) -> None:
    # finite gradients, but a learning rate so large that the fp32 update is inf
    tr = _trainer("mixed-fp16", optimizer=optimizer)
    x, y = _batch()
    _step(tr, x, y)
    before, opt_before, opt_steps = _snapshot(tr), _opt_snapshot(tr), tr.opt_steps
    assert opt_before.keys() > {"t"}  # momentum buffers or moments exist: there is state to protect
    tr.opt.lr = 1e38 * 2.0**20  # (the lr is divided by the loss weight)
    with pytest.warns(TrainingFaultWarning) as record:
        st = _step(tr, x, y)
    assert [str(w.message).rsplit("[", 1)[1].split("]")[0] for w in record] == ["nonfinite_update"]
    assert st.skipped
    assert st.fault == "nonfinite_update"
    assert tr.opt_steps == opt_steps
    _assert_same(before, tr.params)
    _assert_same(opt_before, _opt_snapshot(tr))  # the optimizer did not take the step either
    # the next good step is the one an untouched twin takes
    tr.opt.lr = _trainer(optimizer=optimizer).opt.lr
    twin = _trainer("mixed-fp16", optimizer=optimizer)
    _step(twin, x, y)
    twin.scaler.load_state_dict(tr.scaler.state_dict())
    _step(tr, x, y)
    _step(twin, x, y)
    _assert_same(twin.params, tr.params)
    _assert_same(_opt_snapshot(twin), _opt_snapshot(tr))


def test_pure_low_precision_lets_nan_in_and_says_so() -> None:
    # no scaler, no master weights: the baseline lesson, where NaN reaches the weights, reported
    tr = _trainer("fp16")
    x, y = _batch()
    x[0, 0] = np.nan
    with pytest.warns(TrainingFaultWarning) as record:
        st = _step(tr, x, y)
    assert not st.skipped
    faults = {"nonfinite_batch", "nonfinite_loss", "nonfinite_grad", "nonfinite_weights"}
    assert set(st.fault.split(",")) == faults
    assert any(not np.isfinite(v).all() for v in tr.params.values())
    assert {str(w.message).rsplit("[", 1)[1].split("]")[0] for w in record} == faults


def test_routine_overflow_under_dynamic_scaling_is_flagged_without_a_warning() -> None:
    tr = _trainer("mixed-fp16")
    tr.scaler.load_state_dict({**tr.scaler.state_dict(), "scale": 2.0**60})  # far too large for fp16
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        st = _step(tr, *_batch())
    assert st.skipped
    assert st.fault == "nonfinite_grad"
    assert tr.scaler.scale == 2.0**59


# ---- the loss scale: collapse and the fp32 limit -------------------------------------------------
def _torch_scales(n: int, init: float, found_inf: bool, interval: int = 2000) -> list[float]:
    """The scale after each of ``n`` updates of torch's own GradScaler update kernel."""
    torch = pytest.importorskip("torch")
    scale = torch.full((1,), init, dtype=torch.float32)
    tracker = torch.zeros(1, dtype=torch.int32)
    found = torch.full((1,), float(found_inf))
    out = []
    for _ in range(n):
        torch._amp_update_scale_(scale, tracker, found, 2.0, 0.5, interval)
        out.append(float(scale.item()))
    return out


def test_default_scale_collapses_to_zero_as_torch_does() -> None:
    s = LossScaler()
    ours = []
    for _ in range(200):
        s.update(True)
        ours.append(s.scale)
    assert ours == _torch_scales(200, 2.0**16, True)
    assert ours[-1] == 0.0
    first = next(i for i, v in enumerate(ours) if v < SCALE_COLLAPSE)
    assert ours[first] == 2.0**-127
    assert s.collapsed
    assert s.inv_scale == float("inf")  # from here every gradient unscales to inf or NaN


def test_min_scale_floor_stops_the_collapse() -> None:
    s = LossScaler(min_scale=1.0)  # the floor of TF1's and MindSpore's dynamic scalers
    for _ in range(200):
        s.update(True)
    assert s.scale == 1.0
    assert not s.collapsed
    s.update(False)
    assert s.scale == 1.0  # growth waits for growth_interval clean steps, as before
    with pytest.raises(ValueError, match="min_scale"):
        LossScaler(min_scale=-1.0)


def test_scale_sticks_at_the_fp32_limit_as_torch_does() -> None:
    s = LossScaler(init_scale=2.0**125, growth_interval=1)
    ours, limits = [], []
    for _ in range(5):
        s.update(False)
        ours.append(s.scale)
        limits.append(s.at_limit)
    assert ours == _torch_scales(5, 2.0**125, False, interval=1)
    assert ours == [2.0**126, 2.0**127, 2.0**127, 2.0**127, 2.0**127]
    assert limits == [False, False, True, True, True]


def test_trainer_reports_a_collapsing_scale() -> None:
    tr = _trainer("mixed-fp16")
    tr.scaler.load_state_dict({**tr.scaler.state_dict(), "scale": 2.0**-125})
    x, y = _batch()
    x[0, 0] = np.nan  # every step overflows: the scale halves each time
    with pytest.warns(TrainingFaultWarning) as record:
        faults = [_step(tr, x, y).fault for _ in range(4)]
    assert ["scale_collapse" in f for f in faults] == [False, True, True, True]
    assert tr.scaler.scale == 2.0**-129
    assert sum("scale_collapse" in str(w.message) for w in record) == 1
    assert all(np.isfinite(v).all() for v in tr.params.values())


def test_trainer_reports_a_scale_stuck_at_the_fp32_limit() -> None:
    # fp32 compute with dynamic scaling and tiny (weighted) gradients: nothing ever overflows,
    # so the scale grows until fp32 cannot hold the next step
    tr = _trainer("fp32", overrides={"loss_scaling": "dynamic"})
    tr.scaler = LossScaler(init_scale=2.0**126, growth_interval=1)
    with pytest.warns(TrainingFaultWarning) as record:
        faults = [_step(tr, *_batch()).fault for _ in range(3)]
    assert len(record) == 1
    assert "[scale_at_limit]" in str(record[0].message)
    assert faults == ["", "scale_at_limit", "scale_at_limit"]
    assert tr.scaler.scale == 2.0**127


def test_every_fault_has_a_description() -> None:
    assert set(FAULTS) == {
        "nonfinite_batch",
        "nonfinite_loss",
        "nonfinite_grad",
        "nonfinite_update",
        "nonfinite_weights",
        "scale_collapse",
        "scale_at_limit",
    }


# ---- 1,000 injected faults: the fp32 master weights stay finite --------------------------------
def test_a_thousand_faults_never_reach_the_master_weights() -> None:
    rng = np.random.default_rng(2024)
    tr = _trainer("mixed-fp16", optimizer="adamw")
    d = _data()
    lr = tr.opt.lr
    kinds = ["nan", "inf", "-inf", "huge", "scale", "lr", "tiny_scale"]
    seen: dict[str, int] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TrainingFaultWarning)
        for i in range(1000):
            idx = rng.integers(0, len(d.y_train), size=8)
            x, y = d.x_train[idx].copy(), d.y_train[idx]
            kind = kinds[i % len(kinds)]
            if kind in ("nan", "inf", "-inf"):
                mask = rng.random(x.shape) < rng.choice([1e-3, 0.05, 1.0])
                mask.flat[rng.integers(0, x.size)] = True
                x[mask] = float(kind)
            elif kind == "huge":  # the activations or the loss overflow (or the batch itself)
                with np.errstate(over="ignore"):
                    x *= np.float32(rng.choice([2.0**14, 2.0**20, 3e38]))
            elif kind == "scale":  # a scale far beyond fp16's range
                tr.scaler.load_state_dict({**tr.scaler.state_dict(), "scale": 2.0 ** rng.integers(40, 127)})
            elif kind == "tiny_scale":  # a collapsed scale
                tr.scaler.load_state_dict(
                    {**tr.scaler.state_dict(), "scale": 2.0 ** -int(rng.integers(125, 149))}
                )
            else:  # beyond fp32: every update is inf or NaN
                tr.opt.lr = 1e39
            before, opt_before = _snapshot(tr), _opt_snapshot(tr)
            st = _step(tr, x, y)
            tr.opt.lr = lr
            for k, v in tr.params.items():
                assert v.dtype == np.float32
                assert np.isfinite(v).all(), (i, kind, k, st.fault)
            for k, v in _opt_snapshot(tr).items():
                assert np.isfinite(v).all(), (i, kind, k, st.fault)
            if st.skipped:
                _assert_same(before, tr.params)
                _assert_same(opt_before, _opt_snapshot(tr))
            else:
                assert not {"nonfinite_batch", "nonfinite_loss", "nonfinite_grad"} & set(st.fault.split(","))
            for f in filter(None, st.fault.split(",")):
                seen[f] = seen.get(f, 0) + 1
            if kind == "scale":  # back to a workable scale for the next step
                tr.scaler.load_state_dict({**tr.scaler.state_dict(), "scale": 2.0**10})
            if kind == "tiny_scale":
                tr.scaler.load_state_dict({**tr.scaler.state_dict(), "scale": 2.0**10})
    assert {
        "nonfinite_batch",
        "nonfinite_loss",
        "nonfinite_grad",
        "nonfinite_update",
        "scale_collapse",
    } <= set(seen)
    assert sum(tr.history.steps["skipped"]) >= 700
    # and training still works after all that
    loss0 = tr.evaluate(d.x_test, d.y_test)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TrainingFaultWarning)
        tr.fit(tr.epoch + 2)
    assert tr.evaluate(d.x_test, d.y_test)[0] < loss0


# ---- checkpoints: an interrupted write leaves the previous one readable --------------------------
class _Crash(Exception):
    pass


def _state(v: float, n: int = 50_000) -> dict[str, Any]:
    return {"params": {"w": np.full(n, v, np.float32), "b": np.arange(7.0) * v}, "step": int(v), "note": "x"}


def _check_old(path: Path, v: float) -> None:
    back = ck.load_checkpoint(path)
    assert back["step"] == int(v)
    np.testing.assert_array_equal(back["params"]["w"], np.full(50_000, v, np.float32))


def test_a_write_interrupted_at_every_point_keeps_the_old_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "ck.npz"
    ck.save_checkpoint(path, _state(1.0))
    real_open, real_fsync, real_replace = open, os.fsync, os.replace

    class Counting:
        """The temporary file, failing at its k-th write (or counting them when k is None)."""

        def __init__(self, f: Any, k: int | None, count: list[int]) -> None:
            self._f, self._k, self._count = f, k, count

        def write(self, data: Any) -> int:
            self._count[0] += 1
            if self._k is not None and self._count[0] == self._k:
                raise _Crash(f"write {self._k}")
            return int(self._f.write(data))

        def __getattr__(self, name: str) -> Any:
            return getattr(self._f, name)

        def __enter__(self) -> Counting:
            return self

        def __exit__(self, *exc: object) -> None:
            self._f.close()

    def run(k: int | None) -> int:
        count = [0]
        # the atomic writer's file object (floatlab.io opens the temporary file)
        counting = lambda file, mode: Counting(real_open(file, mode), k, count)  # noqa: E731
        monkeypatch.setattr(floatlab.io, "open", counting, raising=False)
        try:
            ck.save_checkpoint(path, _state(2.0))
        except _Crash:
            pass
        finally:
            monkeypatch.delattr(floatlab.io, "open")
        return count[0]

    writes = run(None)  # how many writes a whole checkpoint takes
    assert writes > 3
    ck.save_checkpoint(path, _state(1.0))
    for k in range(1, writes + 1):
        run(k)
        _check_old(path, 1.0)
        assert os.listdir(tmp_path) == ["ck.npz"]  # the partial temporary file is removed

    def crash(*args: Any) -> None:
        raise _Crash("here")

    # the data never reached the disk, or the rename never happened: still the old checkpoint
    for name, real in (("fsync", real_fsync), ("replace", real_replace)):
        monkeypatch.setattr(os, name, crash)
        with pytest.raises(_Crash):
            ck.save_checkpoint(path, _state(2.0))
        monkeypatch.setattr(os, name, real)
        _check_old(path, 1.0)
        assert os.listdir(tmp_path) == ["ck.npz"]
    ck.save_checkpoint(path, _state(3.0))
    _check_old(path, 3.0)


_WRITER = """
import sys, numpy as np
from floatlab.train import checkpoint as ck
path, n = sys.argv[1], int(sys.argv[2])
print("ready", flush=True)
for i in range(2, 10**6):
    ck.save_checkpoint(path, {"params": {"w": np.full(n, float(i), np.float32)}, "step": i})
"""


def test_a_killed_writer_leaves_a_readable_checkpoint(tmp_path: Path) -> None:
    # a real crash: SIGKILL at arbitrary moments while a process rewrites the checkpoint in a loop
    path = tmp_path / "ck.npz"
    n = 2_000_000  # 8 MB: each write takes a while, so kills land inside writes
    ck.save_checkpoint(path, {"params": {"w": np.full(n, 1.0, np.float32)}, "step": 1})
    rng = np.random.default_rng(0)
    steps = []
    for _ in range(4):
        proc = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(path), str(n)], stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(float(rng.uniform(0.05, 0.6)))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        back = ck.load_checkpoint(path)  # whole: the last completed write, never a partial one
        step = back["step"]
        np.testing.assert_array_equal(back["params"]["w"], np.full(n, float(step), np.float32))
        steps.append(step)
        for leftover in tmp_path.glob(".ck.npz.*.tmp"):  # what a killed writer cannot clean up
            leftover.unlink()
    assert max(steps) > 1


def test_damaged_checkpoints_are_refused_clearly(tmp_path: Path) -> None:
    path = tmp_path / "ck.npz"
    ck.save_checkpoint(path, _state(1.0))
    data = path.read_bytes()
    for cut in (0, 10, len(data) // 3, len(data) - 5):
        bad = tmp_path / f"cut{cut}.npz"
        bad.write_bytes(data[:cut])
        with pytest.raises(ValueError, match="cut"):
            ck.load_checkpoint(bad)
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0xFF
    (tmp_path / "flip.npz").write_bytes(bytes(flipped))
    with pytest.raises(ValueError, match="flip"):
        ck.load_checkpoint(tmp_path / "flip.npz")
    np.save(tmp_path / "one.npy", np.ones(3))
    os.replace(tmp_path / "one.npy", tmp_path / "one.npz")
    with pytest.raises(ValueError, match="single array"):
        ck.load_checkpoint(tmp_path / "one.npz")
    np.savez(tmp_path / "plain.npz", a=np.ones(2))
    with pytest.raises(ValueError, match="not a floatlab checkpoint"):
        ck.load_checkpoint(tmp_path / "plain.npz")
    with pytest.raises(ValueError, match="no such file"):
        ck.load_checkpoint(tmp_path / "missing.npz")
    with pytest.raises(ValueError, match="a directory"):
        ck.load_checkpoint(tmp_path)
