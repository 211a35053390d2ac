"""Determinism: the same seed gives bit-identical training, in one process, in another process with a
different thread count, and after a resume (faults included); stochastic rounding is a function of
its generator's state and the element's index, reproducible whatever the threads or the layout."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import floatlab as fl
import floatlab.train as ft
from floatlab.rounding import random_bits_at, round_scalar
from floatlab.train import TrainConfig, Trainer
from floatlab.train.history import TrainingFaultWarning

CONFIGS = {
    "mixed-fp16-adamw": TrainConfig(
        data="underflow", precision="mixed-fp16", epochs=2, hidden=(16,), optimizer="adamw", clip=1.0
    ),
    "bf16-stochastic": TrainConfig(
        data="underflow",
        precision="bf16",
        epochs=2,
        hidden=(16,),
        overrides={"rounding": "stochastic", "update_rounding": "stochastic"},
    ),
    "mixed-fp8": TrainConfig(data="underflow", precision="mixed-fp8", epochs=2, hidden=(16,)),
    "attention": TrainConfig(
        data="underflow", model="attention", precision="mixed-bf16", epochs=2, d_model=8
    ),
}


def _data(with_faults: bool = False) -> ft.Dataset:
    d = ft.make_underflow_task(n_train=192, n_test=64, loss_weight=2.0**-20)
    if not with_faults:
        return d
    x = d.x_train.copy()
    x[5, 3], x[70, 0], x[150, 9] = np.nan, np.inf, -np.inf  # three poisoned examples
    return dataclasses.replace(d, x_train=x)


def digest(tr: Trainer) -> str:
    """A fingerprint of everything a run produced: weights (bits), scaler state, history."""
    h = hashlib.sha256()
    for k in sorted(tr.params):
        h.update(k.encode())
        h.update(np.ascontiguousarray(tr.params[k]).tobytes())
    h.update(json.dumps(tr.scaler.state_dict(), sort_keys=True, default=str).encode())
    h.update(json.dumps(tr.history.to_dict()["steps"], sort_keys=True).encode())
    h.update(json.dumps(tr.history.to_dict()["evals"], sort_keys=True).encode())
    return h.hexdigest()


def _fit(cfg: TrainConfig, data: ft.Dataset, stop_after: int | None = None) -> Trainer:
    tr = Trainer.from_config(cfg, data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TrainingFaultWarning)
        tr.fit(cfg.epochs, stop_after=stop_after)
    return tr


@pytest.mark.parametrize("name", list(CONFIGS))
def test_same_seed_same_bits(name: str) -> None:
    cfg = CONFIGS[name]
    a, b = _fit(cfg, _data()), _fit(cfg, _data())
    assert digest(a) == digest(b)
    # and the seed matters: another seed gives other weights
    c = _fit(dataclasses.replace(cfg, seed=1), _data())
    assert digest(c) != digest(a)


_CHILD = """
import sys, warnings
sys.path.insert(0, sys.argv[1])
import test_determinism as td
warnings.simplefilter("ignore")
print(td.digest(td._fit(td.CONFIGS[sys.argv[2]], td._data(with_faults=True))))
"""


def test_same_bits_in_another_process_with_another_thread_count() -> None:
    cfg = CONFIGS["bf16-stochastic"]
    here = digest(_fit(cfg, _data(with_faults=True)))
    env = {**os.environ, "NUMBA_NUM_THREADS": "1", "PYTHONHASHSEED": "123"}
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(Path(__file__).parent), "bf16-stochastic"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    assert out.stdout.strip().splitlines()[-1] == here


@pytest.mark.parametrize("name", ["mixed-fp16-adamw", "bf16-stochastic"])
def test_resume_after_faults_is_bit_identical(name: str, tmp_path: Path) -> None:
    # the poisoned examples make some steps skip and warn: a resumed run must skip the same ones
    cfg = CONFIGS[name]
    data = _data(with_faults=True)
    straight = _fit(cfg, data)
    assert straight.history.faults()["nonfinite_batch"]  # the faults did happen
    for stop in (1, 4, 7):  # mid-epoch and at the epoch boundary (3 batches per epoch)
        first = _fit(cfg, data, stop_after=stop)
        path = first.save(tmp_path / f"ck{stop}.npz")
        resumed = Trainer.resume(path, data)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TrainingFaultWarning)
            resumed.fit(cfg.epochs)
        assert digest(resumed) == digest(straight), stop


# ---- stochastic rounding is reproducible from its generator ---------------------------------------
def _x(n: int = 300_000) -> np.ndarray:
    rng = np.random.default_rng(7)
    return (rng.standard_normal(n) * 2.0 ** rng.integers(-30, 10, n)).astype(np.float32)


def test_stochastic_rounding_depends_only_on_the_generator_state() -> None:
    x = _x()
    a = fl.encode_array(x, "bf16", "stochastic", rng=np.random.default_rng(11))
    b = fl.encode_array(x, "bf16", "stochastic", rng=11)  # an int seed means default_rng(seed)
    np.testing.assert_array_equal(a, b)
    c = fl.encode_array(x, "bf16", "stochastic", rng=12)
    assert np.count_nonzero(a != c) > x.size // 100  # another seed, other draws
    # successive calls draw successive keys: a replay from the same seed repeats the sequence
    g1, g2 = np.random.default_rng(5), np.random.default_rng(5)
    first = [fl.round_array(x, "fp16", "stochastic", rng=g1) for _ in range(3)]
    second = [fl.round_array(x, "fp16", "stochastic", rng=g2) for _ in range(3)]
    for u, v in zip(first, second, strict=True):
        np.testing.assert_array_equal(u.view(np.uint32), v.view(np.uint32))
    assert not np.array_equal(first[0], first[1])


def test_each_element_follows_the_scalar_reference() -> None:
    # element i rounds with the bits random_bits_at(key, i): the specification, per element
    x = _x(50_000)
    g = np.random.default_rng(3)
    key_gen = np.random.default_rng(3)
    k = key_gen.integers(0, 2**32, size=2, dtype=np.uint64)
    key = (int(k[0]), int(k[1]))
    codes = fl.encode_array(x, "fp16", "stochastic", rng=g)
    assert g.bit_generator.state == key_gen.bit_generator.state  # exactly one key drawn
    for i in np.random.default_rng(0).integers(0, x.size, 400):
        want, _ = round_scalar(float(x[i]), "fp16", "stochastic", rand=random_bits_at(key, int(i)))
        assert int(codes[i]) == want, i


def test_deterministic_modes_leave_the_generator_alone() -> None:
    g = np.random.default_rng(9)
    state = g.bit_generator.state
    fl.encode_array(_x(1000), "fp16", "rne", rng=g)
    fl.round_array(_x(1000), "bf16", "rtz", rng=g)
    assert g.bit_generator.state == state


def test_stochastic_rounding_ignores_threads_and_layout() -> None:
    numba = pytest.importorskip("numba")
    x = _x(1_000_000).reshape(1000, 1000)
    ref = fl.encode_array(x, "bf16", "stochastic", rng=21)
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = fl.encode_array(x, "bf16", "stochastic", rng=21)
    finally:
        numba.set_num_threads(before)
    np.testing.assert_array_equal(one, ref)
    # the index is the flat C-order position: a Fortran-ordered or big-endian copy, or a flat
    # view, of the same values draws the same bits
    np.testing.assert_array_equal(fl.encode_array(np.asfortranarray(x), "bf16", "stochastic", rng=21), ref)
    np.testing.assert_array_equal(fl.encode_array(x.astype(">f4"), "bf16", "stochastic", rng=21), ref)
    np.testing.assert_array_equal(
        fl.encode_array(x.reshape(-1), "bf16", "stochastic", rng=21), ref.reshape(-1)
    )


# ---- BLAS: the thread count never matters; with deterministic=True, nor does the kernel -----------
def _weights(tr: Trainer) -> str:
    h = hashlib.sha256()
    for k in sorted(tr.params):
        h.update(np.ascontiguousarray(tr.params[k]).tobytes())
    return h.hexdigest()


def test_evaluations_leave_the_training_random_bits_alone(tmp_path: Path) -> None:
    # stochastic rounding in the forward pass: an evaluation must not draw from the training stream
    cfg = CONFIGS["bf16-stochastic"]
    data = _data()
    plain = _fit(cfg, data)
    evaluated = _fit(dataclasses.replace(cfg, eval_every=1), data)
    assert _weights(evaluated) == _weights(plain)
    # and a run resumed from a checkpoint follows the uninterrupted one, evaluations and all
    cfg2 = dataclasses.replace(cfg, eval_every=2)
    straight = _fit(cfg2, data)
    first = _fit(cfg2, data, stop_after=3)
    resumed = Trainer.resume(first.save(tmp_path / "ck.npz"), data)
    resumed.fit(cfg2.epochs)
    assert digest(resumed) == digest(straight)


_README_RUN = r"""
import hashlib, sys
import numpy as np
from floatlab.train import TrainConfig, Trainer
cfg = TrainConfig(
    model="transformer", data="text", layers=1, d_model=64, batch_size=32, steps=3, eval_every=3,
    optimizer="adamw", lr=3e-3, precision=sys.argv[1], deterministic=sys.argv[2] == "exact",
)
tr = Trainer.from_config(cfg)
tr.run()
h = hashlib.sha256()
for k in sorted(tr.params):
    h.update(np.ascontiguousarray(tr.params[k]).tobytes())
h.update(repr(tr.history.evals["test_loss"]).encode())
print(h.hexdigest())
"""


def _readme_run(precision: str, mode: str, **env: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", _README_RUN, precision, mode],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return out.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("precision", ["fp32", "mixed-bf16"])
def test_the_blas_thread_count_does_not_change_a_run(precision: str) -> None:
    # the README's transformer: OpenBLAS blocks its GEMMs (2048 x 64 x 64 and up) by its thread
    # count, so each GEMM runs on one BLAS thread, in row blocks fixed by its shape
    one = _readme_run(precision, "blas", OPENBLAS_NUM_THREADS="1")
    assert _readme_run(precision, "blas", OPENBLAS_NUM_THREADS="2") == one


def test_a_deterministic_run_is_the_same_under_another_blas_kernel() -> None:
    from oracles import other_blas_kernel

    haswell = _readme_run("mixed-bf16", "exact", OPENBLAS_CORETYPE="Haswell", OPENBLAS_NUM_THREADS="1")
    other = _readme_run(
        "mixed-bf16", "exact", OPENBLAS_CORETYPE=other_blas_kernel(), OPENBLAS_NUM_THREADS="2"
    )
    assert other == haswell
