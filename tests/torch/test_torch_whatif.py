"""floatlab.torch.whatif and inspect(..., recipes=[...]): what a recipe would do to each Linear
layer's GEMM operands, without changing the training.

Oracles: torch's own float8 cast with per-tensor current scaling (``fp8_max / amax``, as
torchao's tensorwise recipe) for the error and the flushed share; the ordering of the formats'
precision for the others (MXFP8 keeps more of a tensor than MXFP4)."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("torch")

import torch

import floatlab.torch as flt


def test_inspect_reports_what_each_recipe_would_do_to_each_operand() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    x = torch.randn(16, 64) * torch.logspace(-12, 0, 64, base=2.0)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    recipes = ["fp8-tensorwise", "mxfp8", "mxfp4", "nvfp4", "fp8-blockwise"]
    rep = flt.inspect(model, (x, None), lambda out: out.square().mean(), ["bf16"], recipes=recipes)
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())  # training unchanged
    df = rep.recipes()
    assert len(df) == 2 * 3 * len(recipes)
    assert set(df["operand"]) == {"input", "weight", "grad"}
    # the oracle: torch's float8 cast of the first layer's input at scale 448 / amax
    row = df[(df["layer"] == "0") & (df["operand"] == "input") & (df["recipe"] == "fp8-tensorwise")].iloc[0]
    scale = 448 / x.abs().max()
    q = (x * scale).to(torch.float8_e4m3fn).float() / scale
    assert row["mse"] == pytest.approx(((q.double() - x.double()) ** 2).mean().item(), rel=1e-5)
    assert row["flushed"] == ((q == 0) & (x != 0)).float().mean().item()
    want_sqnr = 10 * math.log10(
        (x.double() ** 2).sum().item() / ((q.double() - x.double()) ** 2).sum().item()
    )
    assert row["sqnr_db"] == pytest.approx(want_sqnr, rel=1e-5)
    sqnr = df[(df["layer"] == "0") & (df["operand"] == "weight")].set_index("recipe")["sqnr_db"]
    assert sqnr["mxfp8"] > sqnr["mxfp4"]
    assert sqnr["nvfp4"] > sqnr["mxfp4"]  # (smaller blocks, finer scales)


def test_a_name_without_a_recipe_is_refused_before_any_pass() -> None:
    model = torch.nn.Linear(2, 1)
    with pytest.raises(ValueError, match=r"recipes entry 'mixed-bf16': policy mixed-bf16 has no GEMM recipe"):
        flt.inspect(model, (torch.ones(1, 2), None), lambda out: out.sum(), ["bf16"], recipes=["mixed-bf16"])
