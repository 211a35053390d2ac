"""floatlab.torch.records and Simulation.to_pandas: a row per step, site and operand.

Oracles: torch's own bf16 and fp16 casts for what rounding flushed, left subnormal or overflowed,
and ``Tensor.abs().max()`` for the amax."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("torch")

import torch

import floatlab.torch as flt
from floatlab.formats import FP16
from floatlab.torch.records import COLUMNS, StepRecords


def test_to_pandas_has_a_row_per_step_site_and_operand() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    xs = [torch.randn(5, 4) for _ in range(3)]
    with flt.simulate(model, "mixed-bf16") as sim:
        for x in xs:
            model(x).square().mean().backward()
            opt.step()
            opt.zero_grad()
    df = sim.to_pandas()
    assert list(df.columns) == list(COLUMNS)
    assert sorted(set(df["step"])) == [0, 1, 2]
    assert set(df["site"]) == {"0", "2"}
    assert not df.duplicated(["step", "site", "operand"]).any()
    base = {"input", "weight", "bias", "output", "grad", "weight.grad", "bias.grad"}
    for step in range(3):
        rows = df[df["step"] == step]
        assert set(rows[rows["site"] == "0"]["operand"]) == base  # (the data needs no gradient)
        assert set(rows[rows["site"] == "2"]["operand"]) == base | {"input.grad"}
    first = df[(df["step"] == 0) & (df["site"] == "0") & (df["operand"] == "input")].iloc[0]
    assert first["amax"] == xs[0].abs().max().item()
    assert first["values"] == xs[0].numel()
    assert math.isnan(first["loss_scale"])


def test_the_shares_are_what_torchs_cast_does() -> None:
    x = torch.tensor([1e-9, 3e-8, 1e-6, 1.0, 7e4, -1e5, 0.0, 2.0])
    y = x.half().float()  # torch's fp16 cast: the oracle's rounding
    rec = StepRecords()
    rec.add("fc", "input", x, y, FP16, saturate=False)
    rec.add("fc", "input", x, y, FP16, saturate=False)  # the same operand twice in a step: summed
    rec.close(4, {})
    (row,) = rec.rows
    nonzero = x != 0
    assert row["step"] == 4
    assert row["values"] == 2 * x.numel()
    assert row["flushed"] == ((y == 0) & nonzero).sum().item() / x.numel()
    assert row["subnormal"] == ((y != 0) & (y.abs() < 2.0**-14)).sum().item() / x.numel()
    assert row["saturated"] == y.isinf().sum().item() / x.numel()
    assert row["amax"] == 1e5


def test_a_recipes_operands_come_with_their_scale() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.Linear(32, 32), torch.nn.Linear(32, 32))
    with flt.simulate(model, "nvfp4") as sim:
        for _ in range(2):
            model(torch.randn(4, 32)).sum().backward()
    df = sim.to_pandas()
    recipe = df[df["site"] == "1"]
    assert sorted(set(recipe["operand"])) == ["grad", "input", "weight"]
    want = [v for k in ("input", "weight", "grad") for v in sim.operands[f"1.{k}"]["amax"]]
    assert sorted(recipe["amax"]) == sorted(want)
    assert (recipe["scale"] != 1.0).all()
    assert {"0", "2"} <= set(df["site"])  # the layers kept in bf16 have the plain records


def test_record_false_keeps_the_scaler_and_the_swallowed_updates_only() -> None:
    lin = torch.nn.Linear(2, 1, bias=False)
    opt = torch.optim.SGD(lin.parameters(), lr=1.0)
    with flt.simulate(lin, "bf16", record=False) as sim:
        lin(torch.ones(1, 2)).sum().backward()
        opt.step()
    df = sim.to_pandas()
    assert sim.calls["linear"] == 1
    assert len(df) == 1
    assert df["site"].isna().all()
    assert df["updates"].tolist() == [2]


@pytest.mark.parametrize("saturate", [False, True])
def test_the_device_counts_are_the_host_counts(saturate: bool) -> None:
    """The GPU path's counts (torch reductions, kept on the device) against the CPU path's (NumPy
    views), run here on CPU tensors: the same five numbers. The device itself waits for a GPU run."""
    from floatlab.formats import BF16
    from floatlab.torch.records import _device_stats, _host_stats

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4096, generator=gen) * torch.logspace(-45, 40, 4096, base=2.0)
    x[::97] = 0.0
    for fmt, y in ((FP16, fl_round(x, "fp16", saturate)), (BF16, fl_round(x, "bf16", saturate))):
        host = _host_stats(x, y, fmt, saturate)
        device = [float(t) for t in _device_stats(x, y, fmt, saturate)]
        assert device == [float(v) for v in host]
        if fmt == FP16:  # fp16 flushes and overflows some: the comparison counts something
            assert host[3] > 0
            assert host[2] > 0


def fl_round(x: torch.Tensor, fmt: str, saturate: bool) -> torch.Tensor:
    import floatlab as fl

    out: torch.Tensor = fl.round_array(x, fmt, saturate=saturate)
    return out
