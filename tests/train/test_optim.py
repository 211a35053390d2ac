"""Optimizers, clipping and schedules against torch.optim and closed forms."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from floatlab.train.optim import SGD, AdamW, Optimizer, Schedule, clip_grad_norm, global_norm, make_optimizer


def _run_ours(
    opt: Optimizer, w0: np.ndarray[Any, Any], grads: list[np.ndarray[Any, Any]]
) -> np.ndarray[Any, Any]:
    w = {"w": w0.copy()}
    for g in grads:
        d = opt.deltas(w, {"w": g})
        w["w"] = w["w"] + d["w"]
    out: np.ndarray[Any, Any] = w["w"]
    return out


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        (lambda: SGD(lr=0.1, momentum=0.9), {"cls": "SGD", "lr": 0.1, "momentum": 0.9}),
        (
            lambda: SGD(lr=0.05, momentum=0.8, weight_decay=0.01, nesterov=True),
            {"cls": "SGD", "lr": 0.05, "momentum": 0.8, "weight_decay": 0.01, "nesterov": True},
        ),
        (lambda: SGD(lr=0.3, momentum=0.0), {"cls": "SGD", "lr": 0.3}),
        (
            lambda: AdamW(lr=1e-2, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1),
            {"cls": "AdamW", "lr": 1e-2, "betas": (0.9, 0.99), "eps": 1e-8, "weight_decay": 0.1},
        ),
    ],
)
def test_matches_torch_optim(ours: Any, theirs: dict[str, Any]) -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal(50)
    grads = [rng.standard_normal(50) for _ in range(25)]
    # float64 on both sides: the comparison is of the update rules, not of rounding
    got = _run_ours(ours(), w0, grads)
    kw = dict(theirs)
    cls = getattr(torch.optim, kw.pop("cls"))
    p = torch.nn.Parameter(torch.tensor(w0))
    opt = cls([p], **kw)
    for g in grads:
        p.grad = torch.tensor(g)
        opt.step()
    np.testing.assert_allclose(got, p.detach().numpy(), rtol=1e-12, atol=1e-12)


def test_float32_state_stays_float32() -> None:
    opt = AdamW(lr=1e-3)
    w = {"w": np.ones(4, np.float32)}
    d = opt.deltas(w, {"w": np.full(4, 0.5, np.float32)})
    assert d["w"].dtype == np.float32
    assert opt.state["w"]["m"].dtype == np.float32


def test_clip_matches_torch() -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    gs = [rng.standard_normal(s) for s in (10, (3, 4), 7)]
    ours = {str(i): g.copy() for i, g in enumerate(gs)}
    norm = clip_grad_norm(ours, 1.5)
    params = [torch.nn.Parameter(torch.zeros(g.shape, dtype=torch.float64)) for g in gs]
    for p, g in zip(params, gs, strict=False):
        p.grad = torch.tensor(g)
    tnorm = torch.nn.utils.clip_grad_norm_(params, 1.5)
    assert norm == pytest.approx(float(tnorm), rel=1e-12)
    for i, p in enumerate(params):
        assert p.grad is not None
        np.testing.assert_allclose(ours[str(i)], p.grad.numpy(), rtol=1e-12)


def test_global_norm_and_clip_edges() -> None:
    g = {"a": np.array([3.0, 0.0]), "b": np.array([[4.0]])}
    assert global_norm(g) == 5.0
    assert clip_grad_norm(g, 10.0) == 5.0
    assert g["a"][0] == 3.0
    with pytest.raises(ValueError, match="max_norm=0"):
        clip_grad_norm(g, 0)


def test_schedules() -> None:
    cos = Schedule("cosine", total=110, warmup=10, min_ratio=0.1)
    # closed form of a warm-up ramp and a cosine from lr to 0.1 * lr
    for k in range(0, 120, 7):
        if k < 10:
            ref = (k + 1) / 10
        else:
            t = min(1.0, (k - 10) / 100)
            ref = 0.1 + 0.9 * (1 + math.cos(math.pi * t)) / 2
        assert cos(k, 1.0) == pytest.approx(ref, rel=1e-12)
    lin = Schedule("linear", total=100)
    assert [lin(k, 2.0) for k in (0, 50, 100, 200)] == [2.0, 1.0, 0.0, 0.0]
    assert Schedule()(10**6, 0.3) == 0.3
    with pytest.raises(ValueError, match="schedule kind 'step'"):
        Schedule("step")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="must exceed warmup"):
        Schedule("cosine", total=5, warmup=5)


def test_optimizer_errors_and_state() -> None:
    with pytest.raises(ValueError, match=r"momentum=1\.0"):
        SGD(momentum=1.0)
    with pytest.raises(ValueError, match="lr=-1"):
        SGD(lr=-1)
    with pytest.raises(ValueError, match="betas="):
        AdamW(betas=(1.0, 0.9))
    with pytest.raises(ValueError, match="unknown optimizer 'lion'"):
        make_optimizer("lion", 0.1)
    a = SGD(lr=0.1)
    w, g = {"w": np.ones(3)}, {"w": np.ones(3)}
    a.deltas(w, g)
    b = SGD(lr=0.1)
    b.load_state_dict(a.state_dict())
    np.testing.assert_array_equal(a.deltas(w, g)["w"], b.deltas(w, g)["w"])


@pytest.mark.parametrize("name", ["sgd", "adamw"])
def test_state_arrays_are_double_buffered(name: str) -> None:
    # a step writes its new state into the arrays the step before it retired: two buffers per
    # state array, no allocation per step, and the values equal a fresh optimizer's
    opt, fresh = make_optimizer(name, 0.1), make_optimizer(name, 0.1)
    p = {"w": np.linspace(-1, 1, 8, dtype=np.float32)}
    seen = []
    for i in range(5):
        g = {"w": np.full(8, 0.5 - 0.1 * i, np.float32)}
        d = opt.deltas(p, g)
        np.testing.assert_array_equal(d["w"], fresh.deltas(p, g)["w"])
        seen.append([id(a) for a in opt.state["w"].values()])
    assert seen[2] == seen[4]
    assert seen[3] != seen[2]
    # a dropped step leaves the state as it was, and the next one is the fresh optimizer's
    before = {n: a.copy() for n, a in opt.state["w"].items()}
    with np.errstate(over="ignore"):  # (AdamW squares the gradient: inf)
        opt.propose(p, {"w": np.full(8, 1e30, np.float32)})
    for n, a in opt.state["w"].items():
        np.testing.assert_array_equal(a, before[n])
    g = {"w": np.full(8, 0.25, np.float32)}
    np.testing.assert_array_equal(opt.deltas(p, g)["w"], fresh.deltas(p, g)["w"])
