"""floatlab.torch.weights: the weights of a pure policy stored in its format at each optimizer step.

Oracles: torch's own bf16 cast (round to nearest even) of the exact sum ``w + bf16(d)`` on
dyadic values (every fp32 operation of the optimizer is exact on them), the exact sum of the
updates for Kahan compensation, and the mean of stochastic rounding."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

import torch

import floatlab.torch as flt
from floatlab.train.precision.policy import get_policy


def _bf16(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.bfloat16).float()


def test_an_sgd_update_below_half_an_ulp_is_swallowed_and_counted() -> None:
    lin = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([[1.0, 1.0]]))
    opt = torch.optim.SGD(lin.parameters(), lr=1.0)
    with flt.simulate(lin, "bf16") as sim:
        lin(torch.tensor([[1.0, 1.0]]))  # (a forward pass: the step the update belongs to)
        # 2^-9 is below half bf16's ulp of 1 (2^-8): swallowed; 2^-6 is above: kept
        lin.weight.grad = torch.tensor([[-(2.0**-9), -(2.0**-6)]])
        opt.step()
    assert lin.weight.tolist() == [[1.0, 1.0 + 2.0**-6]]
    assert [(c.updates, c.swallowed) for c in sim.weights.steps] == [(2, 1)]
    df = sim.to_pandas()
    assert set(df["updates"]) == {2}
    assert set(df["swallowed"]) == {1}
    assert "50% of the updates swallowed" in str(sim)


def test_stored_weights_match_torchs_bf16_cast_of_the_twice_rounded_sum() -> None:
    gen = torch.Generator().manual_seed(0)
    lin = torch.nn.Linear(64, 32)
    with torch.no_grad():  # weights of 12 bits, gradients of 12 bits at 2^-20: exact in fp32 sums
        lin.weight.copy_(torch.randint(-2048, 2048, (32, 64), generator=gen).float() / 1024)
        lin.bias.copy_(torch.randint(-2048, 2048, (32,), generator=gen).float() / 1024)
    opt = torch.optim.SGD(lin.parameters(), lr=0.5)
    with flt.simulate(lin, "bf16") as sim:
        for _ in range(3):
            w0 = [_bf16(p.detach()) for p in lin.parameters()]  # the stored weights before the step
            grads = [
                torch.randint(-2048, 2048, p.shape, generator=gen).float() * 2.0**-20
                for p in lin.parameters()
            ]
            for p, g in zip(lin.parameters(), grads, strict=True):
                p.grad = g
            opt.step()
            for p, w, g in zip(lin.parameters(), w0, grads, strict=True):
                want = _bf16(w + _bf16(-0.5 * g))
                assert torch.equal(p.detach(), want)
    step = sim.weights.steps[-1]
    intended = sum(int((g != 0).sum()) for g in grads)
    assert step.updates == intended
    assert 0 < step.swallowed < step.updates


def test_kahan_compensation_follows_the_exact_sum_where_plain_bf16_stands_still() -> None:
    plain, comp = torch.nn.Linear(1, 1, bias=False), torch.nn.Linear(1, 1, bias=False)
    policy = get_policy("bf16").replace(update_compensation=True)
    for model, pol in ((plain, "bf16"), (comp, policy)):
        with torch.no_grad():
            model.weight.fill_(1.0)
        opt = torch.optim.SGD(model.parameters(), lr=1.0)
        with flt.simulate(model, pol):
            for _ in range(1000):
                model.weight.grad = torch.tensor([[-(2.0**-13)]])  # 1/32 of an ulp of 1
                opt.step()
    exact = 1 + 1000 * 2.0**-13
    assert plain.weight.item() == 1.0
    assert abs(comp.weight.item() - exact) <= 2.0**-7  # within one bf16 ulp of the exact sum


def test_stochastic_update_rounding_is_unbiased() -> None:
    lin = torch.nn.Linear(4096, 1, bias=False)
    with torch.no_grad():
        lin.weight.fill_(1.0)
    opt = torch.optim.SGD(lin.parameters(), lr=1.0)
    with flt.simulate(lin, get_policy("bf16").replace(update_rounding="stochastic"), rng=3):
        lin.weight.grad = torch.full((1, 4096), -(2.0**-10))  # 1/8 of an ulp of 1
        opt.step()
    w = lin.weight.detach()
    assert set(w.unique().tolist()) <= {1.0, 1.0 + 2.0**-7}  # type: ignore[no-untyped-call]
    # a share of about 1/8 moved up: the mean is 1 + 2^-10 (the binomial's sd over 4096: 0.005)
    assert abs((w > 1).float().mean().item() - 1 / 8) < 0.03


def test_master_weights_and_other_models_are_left_to_the_optimizer() -> None:
    lin, other = torch.nn.Linear(2, 1, bias=False), torch.nn.Linear(2, 1, bias=False)
    for m in (lin, other):
        with torch.no_grad():
            m.weight.fill_(1.0)
    opt = torch.optim.SGD([*lin.parameters(), *other.parameters()], lr=1.0)
    with flt.simulate(lin, "mixed-bf16") as mixed:
        lin.weight.grad = other.weight.grad = torch.full((1, 2), -(2.0**-12))
        opt.step()
    assert mixed.weights.params == []
    assert mixed.weights.steps == []
    assert lin.weight.tolist() == other.weight.tolist() == [[1.0 + 2.0**-12] * 2]  # fp32 master weights
    with flt.simulate(lin, "bf16") as pure:
        lin.weight.grad = other.weight.grad = torch.full((1, 2), -(2.0**-12))
        opt.step()
    assert lin.weight.tolist() == [[1.0, 1.0]]  # stored in bf16: 1 + 2^-12 + 2^-12 rounds to 1
    assert other.weight.tolist() == [[1.0 + 2.0**-11] * 2]  # not the simulated model's
    assert pure.weights.steps[0].updates == 2
    opt.step()  # outside the block: the optimizer's own fp32 step, no hook left
    assert lin.weight.tolist() == [[1.0 + 2.0**-12] * 2]
