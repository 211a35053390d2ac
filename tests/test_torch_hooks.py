"""GradientRecorder under hooks: steps counted per backward pass, and activation gradients
recorded apart from the parameter gradients, checked against gradients kept by hand with
retain_grad and against numpy's float16 cast. (The recorder's older tests live in
test_gradhist.py.)"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from floatlab.gradhist import GradHistogram

torch = pytest.importorskip("torch")

from floatlab.text import render  # noqa: E402
from floatlab.torch_hooks import GradientRecorder, output_tensors  # noqa: E402


def model_with_in_place_relu() -> Any:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.ReLU(inplace=True), torch.nn.Linear(16, 3))


def batch(seed: int) -> tuple[Any, Any]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(32, 5, generator=g), torch.randint(0, 3, (32,), generator=g)


def loss_of(model: Any, x: Any, y: Any, scale: float = 1.0) -> Any:
    return torch.nn.functional.cross_entropy(model(x), y) * scale


def grads_by_hand(model: Any, x: Any, y: Any, scale: float = 1.0) -> dict[str, npt.NDArray[np.float32]]:
    """The gradient of the loss with respect to each layer's output, the layers run one by one,
    out of place, with retain_grad (no hooks)."""
    kept = []
    h = x
    for name, layer in model.named_children():
        h = torch.relu(h) if isinstance(layer, torch.nn.ReLU) else layer(h)
        h.retain_grad()
        kept.append((name, h))
    (torch.nn.functional.cross_entropy(h, y) * scale).backward()
    model.zero_grad(set_to_none=True)
    return {f"{name}.grad_output": h.grad.numpy().copy() for name, h in kept}


def test_steps_count_backward_passes_under_hooks() -> None:
    model = model_with_in_place_relu()
    rec = GradientRecorder(model)
    with rec.attached():
        for seed in range(3):
            model.zero_grad()
            loss_of(model, *batch(seed)).backward()
        assert rec.steps == 3
        # two backward passes through one graph: two steps
        out = model(batch(3)[0])
        out.sum().backward(retain_graph=True)
        out.square().sum().backward()
        assert rec.steps == 5
        # torch.autograd.grad is a backward pass too (activation hooks fire, .grad stays)
        torch.autograd.grad(model(batch(4)[0]).sum(), model[0].weight)
        assert rec.steps == 6
        model(batch(5)[0])  # a forward pass alone is no step
        assert rec.steps == 6
        late = model(batch(6)[0])  # watched, but its backward runs after detach
    seen = rec.activation_total.total
    late.sum().backward()
    assert (rec.steps, rec.activation_total.total) == (6, seen)
    assert render(rec, "fp16").splitlines()[0] == "gradients of 4 parameters over 6 steps, in fp16 unscaled:"
    model.zero_grad()
    loss_of(model, *batch(6)).backward()  # the hooks are gone
    assert rec.steps == 6


def test_steps_without_activation_hooks_and_with_frozen_parameters() -> None:
    model = model_with_in_place_relu()
    model[0].weight.requires_grad_(False)
    rec = GradientRecorder(model, activation_grads=False)
    with rec.attached():
        for seed in range(4):
            loss_of(model, *batch(seed)).backward()
    assert rec.steps == 4
    assert rec.activation_grads == {}
    assert set(rec.layers) == {"0.bias", "2.weight", "2.bias"}


def test_activation_gradients_match_retain_grad() -> None:
    model = model_with_in_place_relu()
    expected: dict[str, list[npt.NDArray[np.float32]]] = {}
    rec = GradientRecorder(model)
    for seed in range(2):
        x, y = batch(seed)
        for key, g in grads_by_hand(model, x, y).items():
            expected.setdefault(key, []).append(g)
        with rec.attached():
            loss_of(model, x, y).backward()
        model.zero_grad(set_to_none=True)
    assert rec.steps == 2
    assert list(rec.activation_grads) == ["2.grad_output", "1.grad_output", "0.grad_output"]  # backward order
    for key, gs in expected.items():
        g = np.concatenate([a.ravel() for a in gs])
        assert rec.activation_grads[key].total == g.size
        assert rec.activation_grads[key] == GradHistogram(g), key
    # the first layer's output gradient is masked by the ReLU that overwrote that output in place
    assert np.count_nonzero(expected["0.grad_output"][0] == 0) > 0
    # kept apart: parameters in layers/total, module outputs in activation_grads/activation_total
    assert rec.total == sum(rec.layers.values(), GradHistogram())
    assert rec.activation_total == sum(rec.activation_grads.values(), GradHistogram())
    assert set(rec.layers) == {"0.weight", "0.bias", "2.weight", "2.bias"}


def test_report_shows_activation_gradients_apart_and_their_underflow() -> None:
    model = model_with_in_place_relu()
    x, y = batch(7)
    g0 = grads_by_hand(model, x, y, scale=1e-6)["0.grad_output"]
    rec = GradientRecorder(model)
    with rec.attached():
        loss_of(model, x, y, scale=1e-6).backward()
    lines = render(rec, "fp16").splitlines()
    start = lines.index("activation gradients of 3 modules over 1 steps, in fp16 unscaled:")
    assert lines[0] == "gradients of 4 parameters over 1 steps, in fp16 unscaled:"
    assert not any("grad_output" in line for line in lines[:start])
    row = next(line for line in lines[start:] if line.strip().startswith("0.grad_output"))
    # the oracle: numpy's float16 cast flushes these nonzero values to zero
    with np.errstate(under="ignore"):
        flushed = int(np.count_nonzero((g0 != 0) & (g0.astype(np.float16) == 0)))
    assert flushed > 0
    v = rec.activation_grads["0.grad_output"].verdict("fp16")
    assert v.flushed == flushed
    assert row.split()[1] == f"{g0.size:,}"
    assert lines[-4].startswith("all activation gradients: fp16, scale 1")
    assert lines[-3].startswith("advice: scale 2^")
    assert lines[-1].startswith("both kinds, one loss scale: scale 2^")
    rec.reset()
    assert (rec.steps, rec.activation_grads, rec.activation_total.total) == (0, {}, 0)
    assert "activation gradients" not in render(rec, "fp16")


def _brute_force(tensors: list[npt.NDArray[Any]], k: int) -> dict[str, int]:
    """What numpy's float16 cast (correctly rounded from float64) does to ``tensors * 2^k``."""
    counts = dict.fromkeys(("flushed", "subnormal", "overflow"), 0)
    for t in tensors:
        x = t.astype(np.float64).ravel()
        x = x[x != 0] * 2.0**k  # (exact: a power of two, far from float64's limits here)
        with np.errstate(under="ignore", over="ignore"):
            r = x.astype(np.float16)
        counts["flushed"] += int(np.count_nonzero(r == 0))
        counts["subnormal"] += int(np.count_nonzero((r != 0) & (np.abs(r) < 2.0**-14)))
        counts["overflow"] += int(np.count_nonzero(np.isinf(r)))
    return counts


@pytest.mark.parametrize("headroom", [0, 2])
def test_one_scale_for_both_kinds_against_a_search_over_powers_of_two(headroom: int) -> None:
    """Large inputs make large weight gradients from small output gradients: the activation
    gradients' own advice rescues their small values and overflows the weight gradients."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4))
    rec = GradientRecorder(model)
    params: list[npt.NDArray[Any]] = []
    acts: list[npt.NDArray[Any]] = []
    gen = torch.Generator().manual_seed(1)
    with rec.attached():
        for _ in range(2):
            x = torch.randn(64, 8, generator=gen) * 2.0**10
            # the gradient reaching the layer's output: magnitudes 2^-45 .. 2^-15
            g = torch.randn(64, 4, generator=gen) * torch.exp2(-15 - 30 * torch.rand(64, 4, generator=gen))
            model.zero_grad(set_to_none=True)
            (model(x) * g).sum().backward()
            acts.append(g.numpy().copy())
            params += [p.grad.numpy().copy() for p in model.parameters() if p.grad is not None]
    assert rec.steps == 2
    c = rec.combined_advice("fp16", headroom=headroom)

    # the oracle: every power of two, the recorded tensors scaled exactly and cast by numpy
    limit = 65504.0 / 2.0**headroom
    top = max(float(np.abs(t).astype(np.float64).max()) for t in params + acts)
    fits = [k for k in range(-200, 200) if top * 2.0**k <= limit]
    assert c.log2_scale == max(fits)
    for kind, tensors, v in (("parameters", params, c.parameters), ("activations", acts, c.activations)):
        want = _brute_force(tensors, c.log2_scale)
        assert (v.flushed, v.subnormal, v.overflow) == (want["flushed"], want["subnormal"], 0), kind
        assert v.total == sum(t.size for t in tensors)
    # the activation gradients' own advice overflows the weight gradients (numpy's cast says so)
    own = c.advice["activations"].log2_scale
    assert own > c.log2_scale
    assert _brute_force(params, own)["overflow"] > 0
    assert sum(_brute_force(acts, c.log2_scale).values()) > 0  # it still loses some of them
    text = render(rec, "fp16", headroom=headroom)
    assert f"both kinds, one loss scale: scale 2^{c.log2_scale}, the largest" in text
    assert f"the activation gradients' own advice, 2^{own}, would push the parameter" in text


def test_a_leaf_model_and_tuple_outputs() -> None:
    torch.manual_seed(2)
    model = torch.nn.GRU(3, 4, batch_first=True)  # a leaf returning (output, h_n)
    rec = GradientRecorder(model)
    x = torch.randn(2, 5, 3)
    with rec.attached():
        out, h = model(x)
        (out.sum() + h.sum()).backward()
    assert rec.steps == 1
    assert list(rec.activation_grads) == ["grad_output"]  # the root module has no name
    assert rec.activation_grads["grad_output"].total == out.numel() + h.numel()


def test_output_tensors() -> None:
    a, b = torch.ones(1), torch.zeros(2)
    assert [t.numel() for t in output_tensors({"x": [a, (b, "s")], "y": 3})] == [1, 2]
    assert list(output_tensors(None)) == []
