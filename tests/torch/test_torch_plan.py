"""floatlab.torch.plan and simulate's loud parts: a recipe that reaches no layer warns, the
report names the recipe and what each layer's GEMMs got, ``modules=`` picks the layers.

Oracles: the recipe's own record (which sites it quantized) and torch's bf16 cast for the layers
left out of it."""

from __future__ import annotations

import itertools
import warnings

import pytest

pytest.importorskip("torch")

import torch

import floatlab.torch as flt
from floatlab.errors import FloatlabWarning
from floatlab.text import render
from floatlab.torch.plan import plan_layers


def _mlp(*widths: int) -> torch.nn.Sequential:
    layers: list[torch.nn.Module] = []
    for a, b in itertools.pairwise(widths):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


def _step(model: torch.nn.Module, width: int) -> None:
    model(torch.randn(4, width)).square().mean().backward()


def test_nvfp4_on_two_linear_layers_warns_and_the_run_is_plain_bf16() -> None:
    torch.manual_seed(0)
    model = _mlp(32, 32, 16)
    with pytest.warns(flt.SimulationWarning, match=r"nvfp4: its recipe reaches no layer .*keep_bf16 first"):
        sim = flt.simulate(model, "nvfp4")
    assert issubclass(flt.SimulationWarning, FloatlabWarning)
    with sim:
        _step(model, 32)
    assert sim.operands == {}  # the recipe quantized nothing
    text = render(sim)
    assert "recipe nvfp4" in text.splitlines()[0]
    assert "on 0 of 2 Linear layers" in text.splitlines()[0]
    assert "WARNING: the recipe reaches no layer" in text
    assert "0 (Linear): bf16 operands, fp32 GEMM (not the recipe: keep_bf16 first)" in text
    assert "2 (Linear): bf16 operands, fp32 GEMM (not the recipe: keep_bf16 last)" in text


def test_the_warning_can_be_filtered_by_its_class() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.simplefilter("ignore", FloatlabWarning)
        flt.simulate(_mlp(32, 16), "nvfp4")


def test_modules_picks_the_layers_the_recipe_runs_on() -> None:
    torch.manual_seed(0)
    model = _mlp(32, 32, 16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the recipe reaches a layer: no warning
        by_name = flt.simulate(model, "nvfp4", modules=["2"])
        by_fn = flt.simulate(model, "nvfp4", modules=lambda m, name: name == "2")
    for sim in (by_name, by_fn):
        assert [(p.name, p.gemm) for p in sim.plan] == [("0", "format"), ("2", "recipe")]
        with sim:
            _step(model, 32)
        assert sorted(sim.operands) == ["2.grad", "2.input", "2.weight"]
    assert "0 (Linear): bf16 operands, fp32 GEMM (not the recipe: left out by modules=)" in render(by_name)
    # a pattern, and the whole model
    assert [p.gemm for p in plan_layers(model, "mxfp8", modules=["*"])] == ["recipe", "recipe"]


def test_a_layer_left_out_of_the_recipe_gets_bf16_operands_as_torch_casts_them() -> None:
    torch.manual_seed(0)
    lin = torch.nn.Linear(32, 8)
    x = torch.randn(4, 32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", flt.SimulationWarning)
        with flt.simulate(lin, "mxfp4", modules=lambda m, name: False):
            y = lin(x)
    bf = torch.bfloat16
    want = torch.nn.functional.linear(x.to(bf).float(), lin.weight.to(bf).float(), lin.bias.to(bf).float())
    assert torch.allclose(y, want.to(bf).float(), rtol=2**-7, atol=0)


def test_modules_that_name_nothing_or_without_a_recipe_are_refused() -> None:
    model = _mlp(32, 16)
    with pytest.raises(ValueError, match=r"modules entry 'fc\*' names no module of the model"):
        flt.simulate(model, "mxfp8", modules=["fc*"])
    with pytest.raises(ValueError, match=r"policy mixed-bf16 has no GEMM recipe"):
        flt.simulate(model, "mixed-bf16", modules=["0"])
    with pytest.raises(ValueError, match=r"modules='0': expected a callable"):
        flt.simulate(model, "mxfp8", modules="0")


def test_a_recipe_says_conv_layers_take_the_plain_format() -> None:
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.Flatten(), torch.nn.Linear(8, 2))
    sim = flt.simulate(model, "fp8-tensorwise")
    text = render(sim)
    assert (
        "0 (Conv2d): bf16 operands, fp32 GEMM (not the recipe: the recipe runs on Linear layers only)" in text
    )
    assert "2 (Linear): fp8-tensorwise recipe (its three GEMMs)" in text
    assert "on 1 of 1 Linear layers" in text
