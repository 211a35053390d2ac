"""floatlab.torch.simulate: a precision policy on a torch model's GEMMs and embeddings.

Oracles: torch's own casts (``.to(torch.bfloat16)``, ``.to(torch.float16)``, the float8 dtypes)
and torch's own autograd on operands rounded by them, with operands of few significant bits
(small multiples of powers of two), so that every fp32 sum in the GEMMs is exact whatever
order BLAS adds in; and floatlab's NumPy trainer (AttentionNet) for one whole training step.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import floatlab as fl
from floatlab.train.models import AttentionNet, cross_entropy_backward, cross_entropy_forward
from floatlab.train.precision import Precision
from floatlab.train.precision.policy import FP32_OPS, Policy, get_policy

pytest.importorskip("torch")

import torch
import torch.nn.functional as F
from torch_twins import StoredSoftmax, model_state, same_state

import floatlab.torch as flt
from floatlab.text import render

DTYPE = {
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "e4m3fn": torch.float8_e4m3fn,
    "e5m2": torch.float8_e5m2,
}


def _cast(t: Any, fmt: str) -> Any:
    """The oracle's rounding: torch's own cast (round to nearest even, from float32), back to float32."""
    return t.to(DTYPE[fmt]).float()


def _bf16(t: Any) -> Any:
    return _cast(t, "bf16")


def _grad(t: Any) -> Any:
    """The gradient autograd left in ``t`` (there must be one)."""
    assert t.grad is not None
    return t.grad


def _dyadic(gen: Any, shape: tuple[int, ...], bits: int, scale: int) -> Any:
    """Integers of up to ``bits`` bits divided by ``scale``: few enough significant bits that
    products and sums of a few of them are exact in fp32, more than bf16 keeps (8)."""
    m = 2 ** (bits - 1)
    return torch.randint(-m, m + 1, shape, generator=gen).float() / scale


# ---- one layer against torch's casts and autograd ---------------------------------------------------
@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
@pytest.mark.parametrize("layer", ["linear", "conv1d", "conv2d"])
def test_a_layer_rounds_weights_inputs_outputs_and_every_gradient(fmt: str, layer: str) -> None:
    gen = torch.Generator().manual_seed(1)
    shapes: dict[str, tuple[Any, tuple[int, ...]]] = {
        "linear": (torch.nn.Linear(8, 5), (6, 8)),
        "conv1d": (torch.nn.Conv1d(2, 3, 3), (2, 2, 7)),
        "conv2d": (torch.nn.Conv2d(2, 3, 2), (2, 2, 4, 4)),
    }
    module, xshape = shapes[layer]
    with torch.no_grad():  # weights and bias of 9 bits (|w| < 1): bf16 rounds them, fp16 keeps them
        module.weight.copy_(_dyadic(gen, tuple(module.weight.shape), 9, 256))
        module.bias.copy_(_dyadic(gen, tuple(module.bias.shape), 9, 256))
    w0, b0 = module.weight.detach().clone(), module.bias.detach().clone()
    x = _dyadic(gen, xshape, 10, 128).requires_grad_()  # |x| < 4, 10 bits
    with flt.simulate(module, fmt) as sim:  # the pure policy: forward and backward in fmt
        y = module(x)
    G = _dyadic(gen, tuple(y.shape), 10, 128)  # the gradient reaching the output
    y.backward(G)

    # the oracle: torch's casts of every operand, torch's own layer and autograd, torch's casts after
    rx, rw, rb = (_cast(t, fmt).requires_grad_() for t in (x.detach(), w0, b0))
    fn: Any = {"linear": F.linear, "conv1d": F.conv1d, "conv2d": F.conv2d}[layer]
    ref = fn(rx, rw, rb)
    ref.backward(_cast(G, fmt))
    assert torch.equal(y, _cast(ref.detach(), fmt))
    assert torch.equal(_grad(x), _cast(_grad(rx), fmt))
    assert torch.equal(_grad(module.weight), _cast(_grad(rw), fmt))
    assert torch.equal(_grad(module.bias), _cast(_grad(rb), fmt))
    # the parameters themselves are the optimizer's, untouched and fp32
    assert torch.equal(module.weight.detach(), w0)
    assert module.weight.dtype == torch.float32
    assert sim.calls[layer] == 1
    assert sim.skipped == []


class Attention(torch.nn.Module):
    """Functional GEMMs in a custom forward (no parameters)."""

    def forward(self, q: Any, k: Any, v: Any) -> Any:
        s = q @ k.transpose(1, 2)
        p = torch.bmm(s, v)
        return torch.matmul(p, v.transpose(1, 2)).sum(0) @ torch.mm(q[0].t(), q[0])


def test_matmul_bmm_mm_and_the_at_operator_in_a_custom_forward() -> None:
    gen = torch.Generator().manual_seed(2)
    q, k, v = (_dyadic(gen, (2, 3, 3), 6, 32) for _ in range(3))
    with flt.simulate(Attention(), "bf16") as sim:
        y = Attention()(q, k, v)  # (another instance: not the simulated model, so not rounded)
        out = sim.model(q, k, v)

    def r(t: Any) -> Any:
        return _cast(t, "bf16")

    s = r(r(q) @ r(k).transpose(1, 2))
    p = r(r(s) @ r(v))
    m = r(r(p) @ r(v).transpose(1, 2)).sum(0)  # (a sum is no GEMM: not rounded)
    want = r(r(m) @ r(r(q[0].t()) @ r(q[0])))
    assert torch.equal(out, want)
    assert dict(sim.calls) == {"matmul": 3, "bmm": 1, "mm": 1}
    plain = torch.matmul(q @ k.transpose(1, 2) @ v, v.transpose(1, 2)).sum(0) @ (q[0].t() @ q[0])
    assert torch.equal(y, plain)


def test_embedding_reads_its_table_rounded_and_stores_its_gradient() -> None:
    emb = torch.nn.Embedding(5, 3)
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        emb.weight.copy_(_dyadic(gen, (5, 3), 12, 1024))
    idx = torch.tensor([[1, 4, 1], [0, 1, 2]])
    with flt.simulate(emb, "fp16") as sim:
        y = emb(idx)
    G = _dyadic(gen, (2, 3, 3), 14, 64)  # 14 bits: fp16 rounds them
    y.backward(G)
    assert torch.equal(y, _cast(emb.weight.detach(), "fp16")[idx])
    dtable = torch.zeros(5, 3).index_add_(0, idx.reshape(-1), _cast(G, "fp16").reshape(-1, 3))
    assert torch.equal(_grad(emb.weight), _cast(dtable, "fp16"))
    assert sim.simulated == ["<model> (Embedding)"]


# ---- what it leaves alone, and says so --------------------------------------------------------------
class Scaled(torch.nn.Module):
    """A custom module with a parameter of its own."""

    def __init__(self) -> None:
        super().__init__()
        self.gain = torch.nn.Parameter(torch.full((4,), 1 / 3))

    def forward(self, x: Any) -> Any:
        return x * self.gain


class Mixed(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.norm = torch.nn.LayerNorm(4)
        self.bn = torch.nn.BatchNorm1d(4)
        self.scaled = Scaled()
        self.attn = torch.nn.MultiheadAttention(4, 1, batch_first=True)
        self.blocks = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())

    def forward(self, x: Any) -> Any:
        h = self.scaled(self.norm(self.fc(x)))
        a, _ = self.attn(h[:, None], h[:, None], h[:, None])
        return torch.softmax(self.blocks(self.bn(a[:, 0])), -1)


def test_layers_it_cannot_simulate_are_listed_never_silently_skipped() -> None:
    model = Mixed()
    with flt.simulate(model, "mixed-bf16") as sim:
        y = model(torch.randn(3, 4))
    assert sim.simulated == ["fc (Linear)", "attn (MultiheadAttention)", "blocks.0 (Linear)"]
    assert sim.skipped == ["norm (LayerNorm)", "bn (BatchNorm1d)", "scaled (Scaled)"]
    assert sim.calls["multi_head_attention_forward"] == 1
    text = render(sim)
    for name in sim.skipped:
        assert name in text
    assert "left in their own precision (3)" in text
    # the softmax (an fp32-list op) is left alone: its output is no bf16 tensor
    assert not torch.equal(y, _cast(y.detach(), "bf16"))


def test_only_the_models_forward_inside_the_block_is_simulated() -> None:
    lin = torch.nn.Linear(3, 3)
    x = torch.full((1, 3), 1 / 3)
    plain = lin(x)
    with flt.simulate(lin, "bf16") as sim:
        inside = lin(x)
        outside = x @ x.t()  # a GEMM of the caller's (a metric): not the model's
    after = lin(x)
    assert torch.equal(inside, _cast(inside.detach(), "bf16"))
    assert not torch.equal(inside, plain)
    assert outside.item() == (x @ x.t()).item() != _cast(x @ x.t(), "bf16").item()
    assert torch.equal(after, plain)
    assert sim.calls["linear"] == 1


def test_an_exception_in_forward_switches_the_rounding_off() -> None:
    class Broken(torch.nn.Module):
        def forward(self, x: Any) -> Any:
            raise RuntimeError("boom")

    x = torch.full((2, 2), 1 / 3)
    plain = x @ x
    with flt.simulate(Broken(), "bf16") as sim:
        with pytest.raises(RuntimeError, match="boom"):
            sim.model(x)
        y = x @ x
    assert torch.equal(y, plain)
    assert not torch.equal(y, _cast(plain, "bf16"))


def test_stochastic_rounding_is_reproducible_from_its_seed_and_unbiased() -> None:
    policy = get_policy("bf16").replace(rounding="stochastic")
    lin = torch.nn.Linear(16, 16, bias=False)
    with torch.no_grad():  # the identity: each output is its input's stochastic rounding
        lin.weight.copy_(torch.eye(16))
    x = torch.full((512, 16), 1 / 3)
    outs = []
    for seed in (5, 5, 6):
        with flt.simulate(lin, policy, rng=seed):
            outs.append(lin(x).detach())
    assert torch.equal(outs[0], outs[1])
    assert not torch.equal(outs[0], outs[2])
    # every value is one of 1/3's two bf16 neighbours, and their mean is 1/3: the rounding step
    # is 2^-9, the standard deviation of a mean of 8192 such roundings below 2^-9 / 2 / 90
    assert set(outs[0].unique().tolist()) == {0.33203125, 0.333984375}
    assert abs(outs[0].double().mean().item() - 1 / 3) < 2e-4
    assert abs(_cast(x, "bf16")[0, 0].item() - 1 / 3) > 6e-4  # (round to nearest's error)


def test_fp16_gradients_underflow_without_a_loss_scale() -> None:
    lin = torch.nn.Linear(4, 1, bias=False)
    x = torch.ones(2, 4)
    with flt.simulate(lin, "mixed-fp16") as sim:
        (lin(x).sum() * 1e-8).backward()  # every gradient 2e-8: below fp16's smallest subnormal / 2
        flushed = _grad(lin.weight).clone()
        lin.weight.grad = None
        scale = 2.0**16  # what a GradScaler does: scale the loss, unscale the gradients in fp32
        (lin(x).sum() * 1e-8 * scale).backward()
    assert torch.equal(flushed, torch.zeros(1, 4))
    assert torch.allclose(_grad(lin.weight) / scale, torch.full((1, 4), 2e-8), rtol=2**-10)
    assert "dynamic loss scaling: sim.scaler() (torch rules, scale 65536)" in render(sim)
    static = flt.simulate(lin, get_policy("fp16").replace(loss_scaling="static", static_scale=512.0))
    assert "static loss scale 512: sim.scaler()" in render(static)


def test_the_policys_saturate_and_subnormals_switches_reach_every_rounding() -> None:
    lin = torch.nn.Linear(1, 3, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([[1e-6], [1e5], [1.0]]))  # an fp16 subnormal, an overflow
    x = torch.ones(1, 1)
    outs = {}
    for key, changes in {"plain": {}, "ftz": {"subnormals": False}, "sat": {"saturate": True}}.items():
        with flt.simulate(lin, get_policy("fp16").replace(**changes)):
            outs[key] = lin(x)[0].tolist()
    sub = _cast(torch.tensor(1e-6), "fp16").item()  # torch's own fp16 keeps the subnormal
    assert outs["plain"] == [sub, float("inf"), 1.0]
    assert outs["ftz"] == [0.0, float("inf"), 1.0]
    assert outs["sat"] == [sub, 65504.0, 1.0]


def test_fp8_formats_forward_e4m3_backward_e5m2() -> None:
    lin = torch.nn.Linear(8, 4)
    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(4), requires_grad=True)
    with flt.simulate(lin, "mixed-fp8"):
        y = lin(x)
        y.sum().backward()
    # the output is stored in E4M3 (saturate off: torch's own E4M3 cast agrees away from overflow)
    assert torch.equal(y, _cast(y.detach(), "e4m3fn"))
    assert torch.equal(_grad(x), _cast(_grad(x), "e5m2"))
    assert torch.equal(_grad(lin.weight), _cast(_grad(lin.weight), "e5m2"))


def test_bad_input_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="the accumulator acc14 is simulated in the fp8 recipes' GEMMs only"):
        flt.simulate(torch.nn.Linear(2, 2), get_policy("mixed-bf16").replace(accumulate="acc14"))
    with pytest.raises(ValueError, match=r"expected a torch\.nn\.Module"):
        flt.simulate(lambda x: x, "bf16")  # type: ignore[arg-type]
    sim = flt.simulate(torch.nn.Linear(2, 2), "bf16")
    with sim, pytest.raises(ValueError, match="already attached"):
        sim.__enter__()


# ---- one training step against floatlab's NumPy trainer ---------------------------------------------
class AttentionTwin(torch.nn.Module):
    """floatlab's AttentionNet in torch, with its weights: embed (+ position) -> LN -> attention
    (fused QKV) -> residual -> LN -> mean over tokens -> classifier.

    ``store`` marks where the NumPy model stores a tensor that no GEMM of simulate's reaches (the
    residual sums, the layer norms' outputs and input gradients, the scores, the pooled mean):
    :meth:`Simulation.store` under simulate, the identity otherwise.
    """

    def __init__(self, w: dict[str, np.ndarray], tokens: int) -> None:
        super().__init__()
        f, d = w["We"].shape
        self.t, self.d = tokens, d

        def P(a: np.ndarray) -> Any:
            return torch.nn.Parameter(torch.from_numpy(np.ascontiguousarray(a)).clone())

        self.embed = torch.nn.Linear(f, d)
        self.embed.weight, self.embed.bias = P(w["We"].T), P(w["be"])
        self.pos = P(w["pos"])
        self.ln1 = torch.nn.LayerNorm(d)
        self.ln1.weight, self.ln1.bias = P(w["ln1_g"]), P(w["ln1_b"])
        self.qkv = torch.nn.Linear(d, 3 * d, bias=False)
        self.qkv.weight = P(w["Wqkv"].T)
        self.out = torch.nn.Linear(d, d)
        self.out.weight, self.out.bias = P(w["Wo"].T), P(w["bo"])
        self.ln2 = torch.nn.LayerNorm(d)
        self.ln2.weight, self.ln2.bias = P(w["ln2_g"]), P(w["ln2_b"])
        self.head = torch.nn.Linear(d, w["Wc"].shape[1])
        self.head.weight, self.head.bias = P(w["Wc"].T), P(w["bc"])
        self.store: Any = lambda x: x
        self.round: Any = lambda x: x

    def forward(self, x: Any) -> Any:
        S, d = self.store, self.d
        h0 = S(self.embed(x.reshape(x.shape[0], self.t, -1)) + self.pos)
        a = S(self.ln1(S(h0)))
        qkv = self.qkv(a)
        q, k, v = qkv[..., :d], qkv[..., d : 2 * d], qkv[..., 2 * d :]
        s = S(torch.matmul(q, k.transpose(1, 2)) * (1 / math.sqrt(d)))
        p = S(StoredSoftmax.apply(s, self.round))  # type: ignore[no-untyped-call]
        h1 = S(h0 + self.out(p @ v))
        c = S(self.ln2(S(h1)))
        return self.head(S(c.mean(1)))


#: AttentionNet's parameters, their twins' names, and whether the twin holds them transposed
TWIN_NAMES = {
    "We": ("embed.weight", True), "be": ("embed.bias", False), "pos": ("pos", False),
    "ln1_g": ("ln1.weight", False), "ln1_b": ("ln1.bias", False), "Wqkv": ("qkv.weight", True),
    "Wo": ("out.weight", True), "bo": ("out.bias", False), "ln2_g": ("ln2.weight", False),
    "ln2_b": ("ln2.bias", False), "Wc": ("head.weight", True), "bc": ("head.bias", False),
}  # fmt: skip


def _comparable(name: str) -> Policy:
    """The named policy, with every op of the fp32 list kept in fp32 where it is a pure policy:
    the pure fp16 and bf16 policies round inside softmax, layer norm and the reductions of the
    NumPy model, points simulate leaves to the model (in fp32)."""
    p = get_policy(name)
    return p if p.master_weights or p.is_wide else p.replace(fp32_ops=FP32_OPS, fp32_reductions=True)


@pytest.mark.parametrize("name", ["fp32", "bf16", "fp16", "mixed-bf16"])
def test_one_training_step_matches_the_numpy_trainer(name: str) -> None:
    """Same loss and gradients as AttentionNet's step in floatlab's NumPy trainer.

    Tolerance, from the summation order: both sides add the same exact products of the same
    stored operands, only in another order (OpenBLAS and NumPy's reductions against torch's
    kernels), and compute exp, log and 1/sqrt with their own fp32 functions (within a few ulps).
    Higham's bound (Accuracy and Stability of Numerical Algorithms, 2nd ed., section 3.1) gives
    each K-term fp32 sum within gamma_K ~ K u of the exact one, u = 2^-24, relative to the sum of
    the magnitudes of its terms, so two orders agree within 2 K u of it; through the L = 12 GEMMs
    of the longest path of the step (forward and backward), with K at most 48 here, the fp32
    results agree within 2 L K u relative to each tensor's largest value (3.4e-5).
    In a low-precision format each stored value is then the same rounding of two fp32 values that
    close: the same value, unless they straddle a rounding boundary, where the two differ by one
    unit in the last place of the format, and what follows carries that difference on: gradients
    within 4 ulps of the format at each tensor's largest value, most elements bit for bit equal.
    """
    policy = _comparable(name)
    tokens, d = 4, 16  # d = 16: the scores' scale 1/sqrt(d) = 1/4 is exact, so it commutes with rounding
    model = AttentionNet(64, 10, tokens=tokens, d_model=d)
    rng = np.random.default_rng(0)
    w = model.init(rng)
    # the NumPy model adds the position table to the embedding's bias before its one rounding;
    # torch adds it after the Linear's own: with a zero table both are one rounding
    w["pos"][:] = 0.0
    if not policy.master_weights:  # pure policies keep their weights in the forward format
        w = {k: fl.round_array(v, policy.forward) for k, v in w.items()}
    x = rng.standard_normal((8, 64), dtype=np.float32)
    y = rng.integers(0, 10, 8)

    P = Precision(policy)
    wf = P.weights(w)
    logits, cache = model.forward(wf, x, P)
    loss, loss_cache = cross_entropy_forward(logits, y, P)
    with P.counting_flushes():
        grads = model.backward(wf, cache, cross_entropy_backward(loss_cache, P), P)

    twin = AttentionTwin(w, tokens)
    with flt.simulate(twin, policy) as sim:
        twin.store = sim.store
        twin.round = lambda t: sim.round(t, policy.forward)
        out = twin(torch.from_numpy(x))
        loss_t = F.cross_entropy(out, torch.from_numpy(y))
        loss_t.backward()  # type: ignore[no-untyped-call]
    assert sim.skipped == ["<model> (AttentionTwin)", "ln1 (LayerNorm)", "ln2 (LayerNorm)"]  # pos, norms

    u, L, K = 2.0**-24, 12, 48
    fp32_tol = 2 * L * K * u
    low = not policy.is_wide
    ulp = 2.0 ** (1 - policy.backward.precision) if low else 0.0
    assert abs(loss_t.item() - loss) <= fp32_tol * max(abs(loss), 1.0)
    stored = out.detach().numpy()  # the logits, stored in the forward format by both
    assert np.abs(stored - logits).max() <= (fp32_tol + 4 * ulp) * float(np.abs(logits).max())
    if low:
        assert np.mean(stored == logits) >= 0.75
    params = dict(twin.named_parameters())
    for key, (tname, transposed) in TWIN_NAMES.items():
        g = _grad(params[tname]).numpy()
        g = g.T if transposed else g
        # the NumPy trainer stores every gradient in the backward format; simulate stores those of
        # its GEMMs, and leaves the position table's and the layer norms' in fp32, rounded here
        g = fl.round_array(g, policy.backward)
        want = grads[key]
        scale = float(np.abs(want).max())
        assert np.abs(g - want).max() <= (fp32_tol + 4 * ulp) * scale, key
        if low:
            assert np.mean(g == want) >= 0.75, key


# ---- a policy's GEMM recipe on the Linear layers --------------------------------------------------
def _bf16_values(shape: tuple[int, ...], seed: int, scale: float = 1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * scale).bfloat16().float()  # (nothing left to round)


def test_a_linear_under_mxfp8_is_torchaos_emulated_mx_training() -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mxl = pytest.importorskip("torchao.prototype.moe_training.mxfp8_linear")
        cfg = pytest.importorskip("torchao.prototype.mx_formats.config")
        kp = pytest.importorskip("torchao.quantization.quantize_.common.kernel_preference")
    x, dy = _bf16_values((64, 96), 0), _bf16_values((64, 32), 1, 1e-3)
    lin = torch.nn.Linear(96, 32, bias=False)
    with torch.no_grad():
        lin.weight.copy_(_bf16_values((32, 96), 2, 0.1))
    xs = x.clone().requires_grad_(True)
    with flt.simulate(lin, "mxfp8") as sim:
        y = lin(xs)
        y.backward(dy)
    tx, tw = x.clone().requires_grad_(True), lin.weight.detach().clone().requires_grad_(True)
    e4m3 = torch.float8_e4m3fn
    d0, d1 = cfg.MXFP8Dim0CastKernelChoice.TORCH, cfg.MXFP8Dim1CastKernelChoice.TORCH
    mode = cfg.ScaleCalculationMode.FLOOR
    ref = mxl.mx_mm.apply(tx, tw, e4m3, e4m3, e4m3, 32, kp.KernelPreference.EMULATED, d0, d1, mode, False)
    ref.backward(dy)
    assert xs.grad is not None
    assert lin.weight.grad is not None
    assert tx.grad is not None
    assert tw.grad is not None
    # the same quantized operands and float32 GEMMs; simulate stores the results in bf16
    for got, want in ((y, ref), (xs.grad, tx.grad), (lin.weight.grad, tw.grad)):
        assert torch.equal(got.detach(), want.detach().bfloat16().float())
    assert sorted(sim.operands) == ["<model>.grad", "<model>.input", "<model>.weight"]  # closed at exit


def test_nvfp4_keeps_the_first_and_last_linear_and_records_the_rest_per_step() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, 4),
    )
    x = torch.randn(16, 32)
    with flt.simulate(model, "nvfp4") as sim:
        for _ in range(3):
            model(x).square().mean().backward()
        with torch.no_grad():
            model(x)  # an evaluation: no step, no record
    sim.end_step()
    assert sorted(sim.operands) == ["2.grad", "2.input", "2.weight"]
    assert all(len(v["amax"]) == 3 for v in sim.operands.values())
    assert sim.operands["2.input"]["amax"][0] == pytest.approx(
        float(torch.relu(model[0](x)).detach().abs().max()), rel=2**-7
    )


# ---- attention, einsum, baddbmm and addmm -----------------------------------------------------------
class Calls(torch.nn.Module):
    """A parameter-free module whose forward calls ``fn`` (a custom module's functional GEMMs)."""

    def __init__(self, fn: Any) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


@pytest.mark.parametrize("op", ["addmm", "Tensor.addmm", "baddbmm", "Tensor.baddbmm", "einsum"])
def test_addmm_baddbmm_and_einsum_round_like_the_other_gemms(op: str) -> None:
    # operands of 10 bits (bf16 rounds them), alpha and beta powers of two: every fp32 sum is exact
    gen = torch.Generator().manual_seed(6)
    add = _dyadic(gen, (2, 3, 5), 10, 128).requires_grad_()
    a = _dyadic(gen, (2, 3, 4), 10, 128).requires_grad_()
    b = _dyadic(gen, (2, 4, 5), 10, 128).requires_grad_()
    calls: dict[str, Any] = {
        "addmm": lambda c, x, y: torch.addmm(c[0], x[0], y[0], beta=0.5, alpha=2.0),
        "Tensor.addmm": lambda c, x, y: c[0].addmm(x[0], y[0], alpha=0.25),
        "baddbmm": lambda c, x, y: torch.baddbmm(c, x, y, beta=2.0),
        "Tensor.baddbmm": lambda c, x, y: c.baddbmm(x, y),
        "einsum": lambda c, x, y: torch.einsum("bij,bjk->bik", x, y),
    }
    fn = calls[op]
    with flt.simulate(Calls(fn), "bf16") as sim:
        y = sim.model(add, a, b)
    G = _dyadic(gen, tuple(y.shape), 10, 128)
    y.backward(G)
    # the oracle: torch's own function on operands rounded by torch's cast, its autograd, its casts
    ra, rx, ry = (_bf16(t.detach()).requires_grad_() for t in (add, a, b))
    ref = fn(ra, rx, ry)
    ref.backward(_bf16(G))
    assert torch.equal(y, _bf16(ref.detach()))
    assert not torch.equal(y, fn(add, a, b).detach())  # (the rounding changed something)
    for got, want in ((a, rx), (b, ry)):
        assert torch.equal(_grad(got), _bf16(_grad(want)))
    if op != "einsum":
        assert torch.equal(_grad(add), _bf16(_grad(ra)))
    assert dict(sim.calls) == {op.removeprefix("Tensor."): 1}


_SDPA_CASES: dict[str, dict[str, Any]] = {
    "plain": {},
    "bool mask": {"attn_mask": "bool"},
    "float mask": {"attn_mask": "float"},
    "causal": {"is_causal": True},
    "scale": {"scale": 0.3},
    "grouped query": {"enable_gqa": True},
}


@pytest.mark.parametrize("case", list(_SDPA_CASES))
def test_attention_under_fp32_is_torchs_own_sdpa(case: str) -> None:
    gen = torch.Generator().manual_seed(8)
    kv_heads = 2 if case == "grouped query" else 4
    q = torch.randn(2, 4, 5, 8, generator=gen)
    k, v = (torch.randn(2, kv_heads, 6, 8, generator=gen) for _ in range(2))
    kwargs = dict(_SDPA_CASES[case])
    if kwargs.get("attn_mask") == "bool":
        mask = torch.rand(5, 6, generator=gen) > 0.3
        mask[2] = False  # a query that sees no key: torch gives zeros there
        kwargs["attn_mask"] = mask
    elif kwargs.get("attn_mask") == "float":
        kwargs["attn_mask"] = torch.randn(2, 1, 5, 6, generator=gen)
    G = torch.randn(2, 4, 5, 8, generator=gen)
    ours = [t.clone().requires_grad_() for t in (q, k, v)]
    theirs = [t.clone().requires_grad_() for t in (q, k, v)]
    with flt.simulate(Calls(F.scaled_dot_product_attention), "fp32") as sim:
        y = sim.model(*ours, **kwargs)
    y.backward(G)
    ref = F.scaled_dot_product_attention(theirs[0], theirs[1], theirs[2], **kwargs)
    ref.backward(G)  # type: ignore[no-untyped-call]
    assert torch.allclose(y, ref, rtol=1e-5, atol=1e-6)
    for mine, torchs in zip(ours, theirs, strict=True):
        assert torch.allclose(_grad(mine), _grad(torchs), rtol=1e-4, atol=1e-6)
    assert dict(sim.calls) == {"scaled_dot_product_attention": 1}


class _RoundBf16(torch.autograd.Function):
    """The oracle's storage point: torch's bf16 cast forward and backward (straight through)."""

    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        return _bf16(x)

    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        return _bf16(g)


def test_attention_under_bf16_rounds_the_operands_and_outputs_of_its_two_gemms() -> None:
    # q and k of 10 bits under 1/2 (bf16 rounds them), v of 6 bits, head size 16 (scale 1/4): the
    # sums of q @ k^T and of p @ v are exact in fp32, so only the bf16 roundings can differ
    gen = torch.Generator().manual_seed(9)
    q, k = (_dyadic(gen, (2, 3, 5, 16), 10, 1024).requires_grad_() for _ in range(2))
    v = _dyadic(gen, (2, 3, 5, 16), 6, 64).requires_grad_()
    mask = torch.ones(5, 5, dtype=torch.bool).triu()  # (any boolean mask)
    with flt.simulate(Calls(F.scaled_dot_product_attention), "bf16") as sim:
        y = sim.model(q, k, v, attn_mask=mask)
    G = _dyadic(gen, (2, 3, 5, 16), 10, 128)
    y.backward(G)

    def r(t: Any) -> Any:
        out: Any = _RoundBf16.apply(t)  # type: ignore[no-untyped-call]
        return out

    rq, rk, rv = (t.detach().clone().requires_grad_() for t in (q, k, v))
    s = r((r(rq) @ r(rk).transpose(-2, -1)) * 0.25)
    p = torch.softmax(s.masked_fill(~mask, float("-inf")), -1)
    want = r(r(p) @ r(rv))
    want.backward(G)
    assert torch.equal(y, want)
    assert not torch.equal(y, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    for got, oracle in ((q, rq), (k, rk), (v, rv)):
        g = _grad(got)
        assert torch.equal(g, _bf16(g))  # every gradient sent on is stored in bf16
        assert torch.allclose(g, _grad(oracle), rtol=2**-7, atol=0)
    assert sim.calls["scaled_dot_product_attention"] == 1


def test_the_report_counts_what_it_rounded_and_names_the_gemms_it_left() -> None:
    gen = torch.Generator().manual_seed(10)
    q = torch.randn(1, 2, 3, 4, generator=gen)
    m, x = torch.randn(3, 4, generator=gen), torch.randn(4, generator=gen)

    def forward(q: Any, m: Any, x: Any) -> Any:
        a = F.scaled_dot_product_attention(q, q, q)
        b = torch.einsum("ij,j->i", m, x)
        return a, b, torch.tensordot(m, x, dims=1), torch.mv(m, x)

    with flt.simulate(Calls(forward), "bf16") as sim:
        _, b, c, d = sim.model(q, m, x)
    assert dict(sim.calls) == {"scaled_dot_product_attention": 1, "einsum": 1}
    assert dict(sim.left) == {"tensordot": 1, "mv": 1}
    text = render(sim)
    assert "calls rounded so far: einsum 1, scaled_dot_product_attention 1" in text
    assert "GEMM calls left in their own precision so far: mv 1, tensordot 1" in text
    # the ones left are torch's own, unrounded
    assert torch.equal(c, torch.tensordot(m, x, dims=1))
    assert torch.equal(d, torch.mv(m, x))
    assert torch.equal(b, _bf16(_bf16(m) @ _bf16(x)))


# ---- leaving the block, whatever happened in it --------------------------------------------------------
class Interrupted(torch.nn.Module):
    """A linear layer, then (while ``fail`` is set) an exception of that kind in the forward pass;
    a batch norm that is not called, for its buffers."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(3, 3)
        self.norm = torch.nn.BatchNorm1d(3)
        self.fail: type[BaseException] | None = None

    def forward(self, x: Any) -> Any:
        h = self.fc(x)
        if self.fail is not None:
            raise self.fail("stop")
        return h


@pytest.mark.parametrize("kind", [RuntimeError, KeyboardInterrupt])
def test_an_exception_of_any_kind_leaves_the_model_and_torch_as_they_were(kind: type[BaseException]) -> None:
    torch.manual_seed(0)
    model = Interrupted()
    x = torch.full((2, 3), 1 / 3)
    plain, gemm = model(x).detach(), x @ x.t()
    assert not torch.equal(gemm, _bf16(gemm))
    before = model_state(model)
    model.fail = kind
    with pytest.raises(kind), flt.simulate(model, "bf16"):
        model(x)
    model.fail = None
    assert same_state(model_state(model), before)
    assert torch.equal(x @ x.t(), gemm)  # the process's GEMMs after the block: torch's own
    assert torch.equal(model(x), plain)
    # caught inside the block: the caller's GEMMs after it are still its own, the model's rounded
    with flt.simulate(model, "bf16") as sim:
        model.fail = kind
        with pytest.raises(kind):
            model(x)
        model.fail = None
        assert torch.equal(x @ x.t(), gemm)
        h = model(x)
        assert torch.equal(h, _bf16(F.linear(_bf16(x), _bf16(model.fc.weight), _bf16(model.fc.bias))))
    assert sim.calls["linear"] == 2
    assert same_state(model_state(model), before)
    assert torch.equal(x @ x.t(), gemm)


class Twice(torch.nn.Module):
    """A model whose forward pass calls the model itself once more."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4, bias=False)

    def forward(self, x: Any, again: bool = True) -> Any:
        h = self.fc(x)
        if again:
            h = self(h, again=False)
        return h @ h.t()


def test_a_model_that_calls_itself_is_rounded_through_both_passes() -> None:
    gen = torch.Generator().manual_seed(13)
    model = Twice()
    with torch.no_grad():
        model.fc.weight.copy_(_dyadic(gen, (4, 4), 10, 256))
    x = _dyadic(gen, (4, 4), 10, 128)
    with flt.simulate(model, "bf16") as sim:
        y = model(x)
    w = _bf16(model.fc.weight.detach())

    def gemm(a: Any, b: Any) -> Any:
        return _bf16(_bf16(a) @ _bf16(b))

    inner = gemm(_bf16(x) @ w.t(), w.t())  # (x's GEMM: one rounding of an exact fp32 sum)
    m = gemm(inner, inner.t())
    assert torch.equal(y, gemm(m, m.t()))
    assert dict(sim.calls) == {"linear": 2, "matmul": 2}


@pytest.mark.parametrize("where", ["pre-hook", "forward hook", "global pre-hook"])
def test_a_raising_hook_of_the_users_leaves_the_rounding_on_for_later_passes(where: str) -> None:
    gen = torch.Generator().manual_seed(11)
    lin = torch.nn.Linear(4, 4)
    x = _dyadic(gen, (2, 4), 10, 128)
    want = _bf16(F.linear(_bf16(x), _bf16(lin.weight.detach()), _bf16(lin.bias.detach())))
    failures = [1]

    def hook(*_: Any) -> None:
        if failures:
            failures.pop()
            raise RuntimeError("hook failed")

    register: dict[str, Any] = {
        "pre-hook": lin.register_forward_pre_hook,
        "forward hook": lin.register_forward_hook,
        "global pre-hook": torch.nn.modules.module.register_module_forward_pre_hook,
    }
    handle = register[where](hook)  # registered before simulate, so it runs before its hooks
    try:
        with flt.simulate(lin, "bf16"):
            with pytest.raises(RuntimeError, match="hook failed"):
                lin(x)
            outs = [lin(x).detach() for _ in range(2)]
            gemm = x @ x.t()
    finally:
        handle.remove()
    for y in outs:
        assert torch.equal(y, want)
    assert torch.equal(gemm, x @ x.t())


# ---- models simulate refuses -------------------------------------------------------------------------
def test_a_compiled_model_is_refused_in_one_line() -> None:
    lin = torch.nn.Linear(2, 2)
    compiled: Any = torch.compile(lin, backend="eager")  # (compiles nothing until it is called)
    in_place = torch.nn.Linear(2, 2)
    in_place.compile(backend="eager")
    for model in (compiled, torch.nn.Sequential(compiled), in_place):
        with pytest.raises(ValueError, match="compiled") as e:
            flt.simulate(model, "bf16")
        assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match=r"_orig_mod"):
        flt.simulate(compiled, "bf16")
    with flt.simulate(compiled._orig_mod, "bf16") as sim:  # the original module is simulated
        lin(torch.ones(1, 2))
    assert sim.calls["linear"] == 1


@pytest.mark.parametrize("policy", ["bf16", "mixed-bf16", "mixed-fp16", "fp8-tensorwise", "mxfp8"])
def test_a_half_precision_model_is_refused_where_the_policy_needs_fp32_masters(policy: str) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(32, 4)).half()
    with pytest.raises(ValueError, match=r"parameter '0\.weight' of dtype torch\.float16") as e:
        flt.simulate(model, policy)
    assert "expected fp32 master parameters" in str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(("policy", "dtype"), [("fp16", torch.float16), ("bf16", torch.bfloat16)])
def test_a_model_stored_in_the_pure_policys_own_format_is_that_policy(policy: str, dtype: Any) -> None:
    gen = torch.Generator().manual_seed(12)
    lin = torch.nn.Linear(8, 3).to(dtype)
    x = _dyadic(gen, (2, 8), 10, 128).to(dtype)
    with flt.simulate(lin, policy) as sim:
        y = lin(x)
    assert torch.equal(y, F.linear(x, lin.weight, lin.bias))  # (nothing left to round)
    assert sim.calls["linear"] == 1
