"""floatlab.torch.checks and simulate's bad input: a clear error or warning naming the cause, and
the model left exactly as it was (hooks removed, parameters unchanged), whatever ends the block.

Oracle: the model's own state (its state dict, its hook dictionaries, torch's global optimizer
hooks and fast-path switch) before and after."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

pytest.importorskip("torch")

import torch
from torch.optim import optimizer as torch_optimizer

import floatlab.torch as flt


def _hooks(model: torch.nn.Module) -> list[int]:
    counts = [
        len(d) for m in model.modules() for d in (m._forward_hooks, m._forward_pre_hooks, m._backward_hooks)
    ]
    return [
        *counts,
        len(torch_optimizer._global_optimizer_pre_hooks),
        len(torch_optimizer._global_optimizer_post_hooks),
        int(torch.backends.mha.get_fastpath_enabled()),
    ]


def _state(model: torch.nn.Module) -> dict[str, Any]:
    return {k: v.clone() for k, v in model.state_dict().items()}


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


class Raises(torch.nn.Module):
    def __init__(self, error: BaseException) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(2, 2)
        self.error = error

    def forward(self, x: Any) -> Any:
        self.fc(x)
        raise self.error


@pytest.mark.parametrize("error", [RuntimeError("boom"), KeyboardInterrupt()], ids=["RuntimeError", "Ctrl-C"])
@pytest.mark.parametrize("policy", ["bf16", "mixed-fp16", "mxfp8"])
def test_an_exception_leaving_the_block_leaves_the_model_as_it_was(error: BaseException, policy: str) -> None:
    model = Raises(error)
    model.register_forward_hook(lambda *a: None)  # a hook of the user's: it stays
    hooks, state = _hooks(model), _state(model)

    def run() -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", flt.SimulationWarning)
            with flt.simulate(model, policy):
                model(torch.ones(1, 2))

    with pytest.raises(type(error)):
        run()
    assert _hooks(model) == hooks
    assert _same(_state(model), state)
    with flt.simulate(torch.nn.Linear(1, 1), "bf16"):  # nothing is left attached
        pass
    with flt.simulate(model, policy):  # and the model can be simulated again
        model.fc(torch.ones(1, 2))


def test_an_optimizer_step_that_raises_leaves_the_weights_and_hooks() -> None:
    class Failing(torch.optim.SGD):
        def step(self, closure: Any = None) -> Any:
            raise RuntimeError("step failed")

    lin = torch.nn.Linear(2, 2)
    opt = Failing(lin.parameters(), lr=0.1)
    hooks, state = _hooks(lin), _state(lin)
    sim = flt.simulate(lin, "bf16")

    def run() -> None:
        with sim:
            lin(torch.ones(1, 2)).sum().backward()
            opt.step()  # the pre-step hook ran, the step raised: no post-step hook

    with pytest.raises(RuntimeError, match="step failed"):
        run()
    assert _hooks(lin) == hooks
    assert _same(_state(lin), state)
    assert sim.weights.steps == []


def test_a_model_on_the_meta_device_is_refused() -> None:
    with pytest.raises(
        ValueError, match=r"^model on the meta device \(parameter weight has a shape but no values\)"
    ):
        flt.simulate(torch.nn.Linear(2, 2, device="meta"), "bf16")


def test_a_model_in_half_precision_is_refused_unless_it_is_the_policy() -> None:
    half = torch.nn.Linear(2, 2).half()
    with pytest.raises(ValueError, match=r"parameter 'weight' of dtype torch.float16 cannot hold"):
        flt.simulate(half, "mixed-bf16")
    with flt.simulate(half, "fp16") as sim:  # stored in the policy's own format: that policy
        half(torch.ones(1, 2, dtype=torch.float16))
    assert sim.weights.params == []  # nothing to store: the parameters are fp16 already


def test_a_model_already_attached_is_refused() -> None:
    lin = torch.nn.Linear(2, 2)
    with flt.simulate(lin, "bf16"), pytest.raises(ValueError, match=r"already attached to a simulation"):
        flt.simulate(lin, "fp16")
    outer = flt.simulate(lin, "bf16")  # (both built before either is entered: refused on entering)
    inner = flt.simulate(lin, "fp16")
    with outer, pytest.raises(ValueError, match=r"already attached"), inner:
        pass


def test_a_frozen_model_warns_and_a_forward_without_gemms_warns() -> None:
    frozen = torch.nn.Linear(2, 2).requires_grad_(False)
    with pytest.warns(flt.SimulationWarning, match=r"every parameter of the model is frozen"):
        flt.simulate(frozen, "bf16")
    relu = torch.nn.ReLU()  # no parameters and no GEMM: nothing would be simulated
    with (
        pytest.warns(flt.SimulationWarning, match=r"1 forward passes of ReLU called no GEMM"),
        flt.simulate(relu, "bf16"),
    ):
        relu(torch.ones(2))
    matmul = (
        torch.nn.Flatten()
    )  # no parameters, but a GEMM of its caller's inside the block is not the model's
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with flt.simulate(matmul, "bf16"):
            pass  # no forward pass: nothing to say
