"""Checkpoints: written atomically, and resuming trains bit for bit as if it had never stopped."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import floatlab.train as ft
from floatlab.train import History, TrainConfig, Trainer
from floatlab.train import checkpoint as ck


def _data() -> ft.Dataset:
    return ft.make_underflow_task(n_train=320, n_test=64, loss_weight=2.0**-20)


def _same(a: Trainer, b: Trainer) -> None:
    for k in a.params:
        np.testing.assert_array_equal(a.params[k], b.params[k], err_msg=k)
        assert a.params[k].dtype == b.params[k].dtype
    assert sorted(a.buffers) == sorted(b.buffers)
    for k in a.buffers:  # BatchNorm's running statistics
        np.testing.assert_array_equal(a.buffers[k], b.buffers[k], err_msg=k)
    assert a.scaler.state_dict() == b.scaler.state_dict()
    assert (a.step, a.opt_steps, a.epoch) == (b.step, b.opt_steps, b.epoch)
    ha, hb = a.history.to_dict(), b.history.to_dict()
    assert ha["steps"] == hb["steps"]
    assert ha["evals"] == hb["evals"]


@pytest.mark.parametrize(
    "cfg",
    [
        TrainConfig(
            data="underflow",
            precision="mixed-fp16",
            epochs=3,
            hidden=(16,),
            optimizer="adamw",
            schedule="cosine",
            warmup=3,
            clip=1.0,
        ),
        # stochastic rounding: the random stream must resume where it stopped
        TrainConfig(
            data="underflow",
            precision="bf16",
            epochs=3,
            hidden=(16,),
            overrides={"update_rounding": "stochastic", "rounding": "stochastic"},
        ),
        TrainConfig(
            data="underflow",
            model="attention",
            precision="mixed-fp16",
            epochs=3,
            d_model=8,
            optimizer="adamw",
        ),
        # BatchNorm: its running statistics are state, and live in fp16 in a pure fp16 run
        TrainConfig(data="underflow", model="convnet", precision="fp16", epochs=3, channels=(4,)),
    ],
    ids=["mixed-fp16-adamw", "bf16-stochastic", "attention", "convnet-fp16"],
)
@pytest.mark.parametrize("stop", [7, 10])  # mid-epoch, and on an epoch boundary (5 batches per epoch)
def test_resume_is_bit_identical(cfg: TrainConfig, stop: int, tmp_path: Path) -> None:
    data = _data()
    straight = Trainer.from_config(cfg, data)
    straight.fit(cfg.epochs)

    first = Trainer.from_config(cfg, data)
    first.fit(cfg.epochs, stop_after=stop)
    assert first.step == stop
    path = first.save(tmp_path / "ck.npz")
    del first
    resumed = Trainer.resume(path, data)
    assert resumed.step == stop
    resumed.fit(cfg.epochs)
    _same(straight, resumed)


def test_a_state_dict_is_a_snapshot_that_later_steps_leave_alone() -> None:
    # the optimizer's state arrays are reused from step to step: a state dict must not share them
    data = _data()
    cfg = TrainConfig(data="underflow", precision="mixed-fp16", epochs=3, hidden=(8,), optimizer="adamw")
    tr = Trainer.from_config(cfg, data)
    tr.fit(3, stop_after=4)
    state = tr.state_dict()
    tr.fit(3)  # eleven more steps write over every buffer the optimizer holds
    twin = Trainer.from_config(cfg, data)
    twin.load_state_dict(state)
    assert twin.step == 4
    twin.fit(3)
    _same(tr, twin)
    for k, st in tr.opt.state.items():
        for n in st:
            np.testing.assert_array_equal(st[n], twin.opt.state[k][n], err_msg=f"{k}/{n}")


def test_resume_into_an_existing_trainer(tmp_path: Path) -> None:
    cfg = TrainConfig(data="underflow", precision="fp16", epochs=2, hidden=(8,))
    a = Trainer.from_config(cfg, _data())
    a.fit(1)
    a.save(tmp_path / "a.npz")
    b = Trainer.from_config(cfg, _data())
    b.load(tmp_path / "a.npz")
    a.fit(2)
    b.fit(2)
    _same(a, b)
    other = Trainer.from_config(TrainConfig(data="underflow", precision="bf16", hidden=(8,)), _data())
    with pytest.raises(ValueError, match="checkpoint policy 'fp16' differs from 'bf16'"):
        other.load(tmp_path / "a.npz")


def test_checkpoint_round_trip_of_values(tmp_path: Path) -> None:
    state: dict[str, Any] = {
        "a": {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "n": 3},
        "lst": [np.zeros(2), {"x": -np.inf}, None, "text", True],
        "big": 2**127 + 5,
    }
    back = ck.load_checkpoint(ck.save_checkpoint(tmp_path / "s.npz", state))
    assert back["a"]["w"].dtype == np.float32
    assert back["a"]["w"].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert back["a"]["n"] == 3
    assert back["big"] == 2**127 + 5
    assert back["lst"][1]["x"] == -np.inf
    assert back["lst"][2:] == [None, "text", True]
    with pytest.raises(ValueError, match=r"expected a \.npz name"):
        ck.save_checkpoint(tmp_path / "s.pt", state)
    with pytest.raises(ValueError, match="cannot store a set"):
        ck.save_checkpoint(tmp_path / "s.npz", {"s": {1, 2}})
    with pytest.raises(ValueError, match="checkpoint key"):
        ck.save_checkpoint(tmp_path / "s.npz", {"a/b": 1})


def test_a_failed_write_keeps_the_old_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "ck.npz"
    ck.save_checkpoint(path, {"v": np.ones(3)})
    before = path.read_bytes()

    def broken(*args: Any, **kwargs: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", broken)
    # one line naming the file and the reason, as every output of floatlab.io
    with pytest.raises(ValueError, match=r"cannot write .*ck\.npz.*: disk full \(nothing written"):
        ck.save_checkpoint(path, {"v": np.zeros(3)})
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["ck.npz"]  # the temporary file is gone too


def test_writes_go_through_a_temporary_file_and_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    real_replace, real_fsync = os.replace, os.fsync

    def replace(src: Any, dst: Any) -> None:
        calls.append(f"replace {Path(src).parent == tmp_path} {Path(dst).name}")
        real_replace(src, dst)

    def fsync(fd: int) -> None:
        calls.append("fsync")
        real_fsync(fd)

    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "fsync", fsync)
    ck.save_checkpoint(tmp_path / "c.npz", {"v": np.ones(2)})
    # data synced before the rename, in the same directory; the directory synced after it
    assert calls == ["fsync", "replace True c.npz", "fsync"]


def test_history_save_and_load(tmp_path: Path) -> None:
    h = ft.train("mlp", _data(), "mixed-fp16", epochs=1, hidden=(8,), clip=1.0, histogram_steps=(2,))
    for name in ("h.json", "h.npz"):
        back = History.load(h.save(tmp_path / name))
        assert back.steps == h.steps
        assert back.evals == h.evals
        assert back.label == h.label
        assert back.histograms.keys() == h.histograms.keys()
        assert back.meta == h.meta
    with pytest.raises(ValueError, match=r"expected a \.json, \.npz or \.csv name"):
        h.save(tmp_path / "h.txt")
    with pytest.raises(ValueError, match="log_step: missing"):
        h.log_step(step=1)
    with pytest.raises(ValueError, match="unknown history column"):
        h.column("speed")


# ---- a checkpoint of the wrong structure: one ValueError, and nothing already loaded is lost ------
def _damaged_states(state: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every top-level part and every entry one level below removed, or replaced by a value of
    each wrong kind."""
    import copy

    wrong: list[Any] = [None, -1, 2.5, "x", [1], {}, {"x": 1}, np.zeros(3), np.zeros((2, 2), np.int64)]
    out = []
    for k in state:
        out.append((f"del {k}", {kk: v for kk, v in state.items() if kk != k}))
        out += [(f"{k}={w!r}", {**state, k: w}) for w in wrong]
        if isinstance(state[k], dict):
            for k2 in state[k]:
                gone = copy.deepcopy(state)
                del gone[k][k2]
                out.append((f"del {k}/{k2}", gone))
                for w in wrong:
                    bad = copy.deepcopy(state)
                    bad[k][k2] = w
                    out.append((f"{k}/{k2}={w!r}", bad))
    return out


def _fingerprint(tr: Trainer) -> str:
    import hashlib

    h = hashlib.sha256()
    state = tr.state_dict()
    for k in sorted(tr.params):
        h.update(np.ascontiguousarray(tr.params[k]).tobytes())
    for k, st in sorted(tr.opt.state.items()):
        for n in sorted(st):
            h.update(k.encode() + n.encode() + st[n].tobytes())
    h.update(repr((state["counters"], state["scaler"], state["rng"], state["history"])).encode())
    return h.hexdigest()


def test_a_damaged_trainer_state_is_one_value_error_and_changes_nothing(tmp_path: Path) -> None:
    data = _data()
    cfg = TrainConfig(data="underflow", precision="mixed-fp16", epochs=3, hidden=(8,), optimizer="adamw")
    src = Trainer.from_config(cfg, data)
    src.fit(1)
    good = src.state_dict()
    target = Trainer.from_config(cfg, data)
    target.fit(2)  # a trainer with state of its own, which a failed load must not touch
    before = _fingerprint(target)
    refused = accepted = 0
    for name, state in _damaged_states(good):
        message: str | None = None
        try:
            target.load_state_dict(state)
        except ValueError as e:
            message = str(e)
        if message is not None:
            refused += 1
            assert "\n" not in message, name
            assert _fingerprint(target) == before, name
            continue
        # accepted (a part it may lack or ignore): then it trains on without surprises
        accepted += 1
        target.fit(target.epoch + 1)
        target = Trainer.from_config(cfg, data)
        target.fit(2)
    assert refused > 300, (refused, accepted)
    assert accepted > 0, (refused, accepted)


def test_resume_from_a_damaged_checkpoint_exits_2_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from floatlab.cli import main

    data = _data()
    tr = Trainer.from_config(TrainConfig(data="underflow", hidden=(8,), epochs=2), data)
    tr.fit(1)
    good = tr.state_dict()
    cases = {
        "no policy name": {**good, "policy": {k: v for k, v in good["policy"].items() if k != "name"}},
        "config lr a string": {**good, "config": {**good["config"], "lr": "x"}},
        "params a list": {**good, "params": [1, 2]},
        "optimizer of another kind": {**good, "optimizer": {"t": 1, "state": {"W0": {"m": np.zeros(2)}}}},
        "perm out of range": {**good, "perm": np.arange(5, 325)},
        "scale negative": {**good, "scaler": {**good["scaler"], "scale": -1.0}},
        "history columns of different lengths": {
            **good,
            "history": {**good["history"], "steps": {"step": [1, 2], "loss": [1.0]}},
        },
    }
    for name, state in cases.items():
        path = ck.save_checkpoint(tmp_path / "bad.npz", state)
        status = main(["train", "--resume", str(path), "--epochs", "2", "--quiet"])
        err = capsys.readouterr().err
        assert status == 2, (name, err)
        assert err.startswith("floatlab: error: "), (name, err)
        assert err.count("\n") == 1, (name, err)
        assert "internal error" not in err, name


def test_running_statistics_are_checked_before_loading() -> None:
    cfg = TrainConfig(data="underflow", model="convnet", precision="mixed-fp16", epochs=1, channels=(4,))
    a = Trainer.from_config(cfg, _data())
    a.fit(1, stop_after=2)
    state = a.state_dict()
    b = Trainer.from_config(cfg, _data())
    before = {k: v.copy() for k, v in b.buffers.items()}
    missing = {k: v for k, v in state.items() if k != "buffers"}
    with pytest.raises(ValueError, match=r"checkpoint buffers \[\] differ from the model's \['bn0_mean'"):
        b.load_state_dict(missing)
    bad = {**state, "buffers": {**state["buffers"], "bn0_var": np.ones(5, np.float32)}}
    with pytest.raises(ValueError, match=r"checkpoint buffer bn0_var=.*expected \(4,\) floats"):
        b.load_state_dict(bad)
    for k, v in before.items():  # nothing was loaded
        np.testing.assert_array_equal(b.buffers[k], v)
    b.load_state_dict(state)
    for k in a.buffers:
        np.testing.assert_array_equal(b.buffers[k], a.buffers[k])
        assert not np.array_equal(b.buffers[k], before[k])  # two training steps moved them
