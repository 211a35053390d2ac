"""floatlab.torch.attention: nn.MultiheadAttention written out, simulated and inspected.

Oracles: torch's own ``nn.MultiheadAttention`` (outputs, attention weights and gradients) for the
written-out function, and torch's bf16 cast for the simulated projections."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("torch")

import torch

import floatlab.torch as flt
from floatlab.torch.attention import PARTS, multi_head_attention

CASES = {
    "self": {},
    "batch_first": {"batch_first": True},
    "bool mask": {"mask": "bool"},
    "float mask": {"mask": "float"},
    "padding": {"padding": True},
    "weights per head": {"need_weights": True, "average": False},
    "kdim vdim": {"kdim": 6, "vdim": 5},
    "unbatched": {"unbatched": True},
}


def _run(case: dict[str, Any], simulate: str | None) -> tuple[Any, ...]:
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(
        8, 2, batch_first=case.get("batch_first", False), kdim=case.get("kdim"), vdim=case.get("vdim")
    )
    length, batch = 5, 3
    shape: tuple[int, ...] = (batch, length) if case.get("batch_first") else (length, batch)
    if case.get("unbatched"):
        shape = (length,)
    q = torch.randn(*shape, 8, requires_grad=True)
    k = torch.randn(*shape, case.get("kdim", 8))
    v = torch.randn(*shape, case.get("vdim", 8))
    kw: dict[str, Any] = {"need_weights": case.get("need_weights", False)}
    if "average" in case:
        kw["average_attn_weights"] = case["average"]
    if case.get("mask") == "bool":
        kw["attn_mask"] = torch.ones(length, length, dtype=torch.bool).triu(1)
    elif case.get("mask") == "float":
        kw["attn_mask"] = torch.randn(length, length)
    if case.get("padding"):
        kw["key_padding_mask"] = torch.tensor([[False] * 4 + [True]] * batch)
    if simulate is None:
        out, w = mha(q, k, v, **kw)
    else:
        with flt.simulate(mha, simulate) as sim:
            out, w = mha(q, k, v, **kw)
        assert sim.calls["multi_head_attention_forward"] == 1
    out.square().sum().backward()
    return (
        out,
        w,
        q.grad,
        mha.in_proj_weight.grad if mha.in_proj_weight is not None else mha.q_proj_weight.grad,
    )


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_the_written_out_function_is_torchs_multihead_attention(case: dict[str, Any]) -> None:
    want, got = _run(case, None), _run(case, "fp32")  # fp32: nothing rounded, the function written out
    for a, b in zip(want, got, strict=True):
        if a is None:
            assert b is None
        else:
            assert torch.allclose(a, b, atol=1e-5, rtol=1e-5)


def test_under_bf16_the_projections_are_bf16_gemms_and_recorded() -> None:
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(8, 2)
    x = torch.randn(4, 2, 8)
    with flt.simulate(mha, "bf16") as sim:
        out, _ = mha(x, x, x, need_weights=False)
        out.sum().backward()
    assert torch.equal(out, out.to(torch.bfloat16).float())
    assert sim.simulated == ["<model> (MultiheadAttention)"]
    sites = set(sim.to_pandas()["site"])
    assert {"<model>.q_proj", "<model>.k_proj", "<model>.v_proj", "<model>.out_proj", "<model>"} <= sites
    scores = sim.to_pandas().query("site == '<model>'")
    assert {"scores", "softmax", "output", "grad"} <= set(scores["operand"])


def test_options_it_does_not_write_out_are_left_and_counted() -> None:
    mha = torch.nn.MultiheadAttention(4, 1, add_bias_kv=True)
    x = torch.randn(3, 1, 4)
    with flt.simulate(mha, "bf16") as sim:
        mha(x, x, x)
    assert sim.left["multi_head_attention_forward"] == 1
    assert "multi_head_attention_forward 1" in str(sim)
    assert (
        multi_head_attention(
            (x,) * 3 + (4, 1, None, None, mha.bias_k, mha.bias_v, False, 0.0, None, None), {}
        )
        is None
    )


@pytest.mark.parametrize("training", [True, False])
def test_inspect_sees_inside_a_transformer_encoder_layers_attention(training: bool) -> None:
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0).train(training)
    x = torch.randn(5, 3, 16)
    before = torch.backends.mha.get_fastpath_enabled()
    if training:
        rep = flt.inspect(layer, (x, None), lambda out: out.square().mean(), ["fp16"])
    else:  # the fused fast path of evaluation: switched off while inspect watches
        with torch.no_grad():
            rep = flt.inspect(layer, (x, None), lambda out: out.square().mean(), ["fp16"])
    assert torch.backends.mha.get_fastpath_enabled() == before
    kinds = {"activation", "activation_grad"} if training else {"activation"}
    for part in ("", *(f".{p}" for p in PARTS)):
        assert {r.kind for r in rep.rows if r.layer == f"self_attn{part}"} >= kinds, part
    assert rep.unseen == {}
    # the softmax's output: probabilities, each row summing to one, so amax <= 1
    assert 0 < rep.row("self_attn.softmax", "activation", "fp16").amax <= 1
    # the scores amax, against torch: q k^T / sqrt(d) of the in-projection
    with torch.no_grad():
        q, k, _ = torch.nn.functional.linear(
            x, layer.self_attn.in_proj_weight, layer.self_attn.in_proj_bias
        ).chunk(3, -1)
        q = q.reshape(5, 6, 8).transpose(0, 1)
        k = k.reshape(5, 6, 8).transpose(0, 1)
        scores = (q @ k.transpose(1, 2)) / 8**0.5
    got = rep.row("self_attn.scores", "activation", "fp16").amax
    assert got == pytest.approx(scores.abs().max().item(), rel=1e-5)
