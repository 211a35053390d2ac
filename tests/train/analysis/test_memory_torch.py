"""The memory ledger's formats against the frameworks themselves: torch 2.x on the CPU for PyTorch
AMP (autocast, fp16 and bf16), Apex O2 and Apex O3 (emulated in torch as apex/amp/_initialize.py
does them: O2 ``convert_network``, BatchNorm's parameters fp32 and the input cast to fp16, never
BatchNorm's; O3 ``model.half()``; both cast the output to fp32 before the loss), and Keras 3's
BatchNormalization under ``mixed_float16`` (run on Keras's torch backend in a child process).

What torch keeps for the backward pass is read with ``torch.autograd.graph.saved_tensors_hooks``
(each storage once, the parameters and buffers left out), the gradients' formats from ``.grad``
and the optimizer's from ``optimizer.state``. The ledger counts floatlab's models' activations
(im2col rows, pre-activations), not torch's, so the saved tensors are compared by format: the
elements each sample adds in fp32 (exactly), the formats the per-sample tensors are kept in, and
the batch-independent fp32 tensors (BatchNorm's mean and 1/std). The one documented exception: the
0-dimensional scalars torch's loss keeps (its total weight), which the ledger does not count.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections import Counter
from typing import Any

import pytest

from floatlab.train.analysis.memory import Ledger, batchnorm_kind, ledger
from floatlab.train.models import MLP, Model
from floatlab.train.models.convnet import ConvNet
from floatlab.train.precision.policy import Policy, get_policy

torch = pytest.importorskip("torch")
nn = torch.nn

NAMES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
N1, N2 = 2, 5  # two batch sizes: what the second adds per sample scales with the batch


def twin(model: Model) -> Any:
    """The torch module of floatlab's ``model`` (MLP with ReLU, or ConvNet on NCHW images)."""
    if isinstance(model, MLP):
        layers: list[Any] = []
        for a, b in zip(model.sizes[:-1], model.sizes[1:], strict=True):
            layers += [nn.Linear(a, b), nn.ReLU()]
        return nn.Sequential(*layers[:-1])
    assert isinstance(model, ConvNet)
    layers, c_in = [nn.Unflatten(1, (1, model.side, model.side))], 1
    for c in model.channels:
        layers += [
            nn.Conv2d(c_in, c, 3, padding=1, bias=False),
            nn.BatchNorm2d(c),
            nn.ReLU(),
            nn.MaxPool2d(2),
        ]
        c_in = c
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(model.n_features, model.n_out))


def _storage(t: Any) -> int:
    return int(t.untyped_storage().data_ptr())


def torch_step(model: Model, framework: str, dtype: Any, n: int, optimizer: str) -> dict[str, Counter[str]]:
    """One training step of ``model``'s twin as ``framework`` runs it at batch ``n``: elements by
    format of the saved tensors (per storage; parameters, buffers and 0-d scalars left out), of the
    parameters, their ``.grad`` and the optimizer's state (AdamW's step counts left out)."""
    torch.manual_seed(0)
    net = twin(model)
    if framework != "torch-amp":
        net = net.half()
        if framework == "apex-O2":  # convert_network: BatchNorm back to fp32
            for m in net.modules():
                if isinstance(m, nn.BatchNorm2d):
                    m.float()
    params = list(net.parameters())
    # Apex O2 gives the optimizer fp32 master copies; O3 and autocast the model's own parameters
    masters = (
        [p.detach().float().clone().requires_grad_() for p in params] if framework == "apex-O2" else params
    )
    opt = (
        torch.optim.SGD(masters, lr=0.01, momentum=0.9)
        if optimizer == "sgd"
        else torch.optim.AdamW(masters, lr=1e-3)
    )
    x = torch.rand(n, model.n_in)  # type: ignore[attr-defined]
    y = torch.randint(0, model.n_out, (n,))  # type: ignore[attr-defined]
    skip = {_storage(t) for t in (*params, *masters, *net.buffers())}
    saved: dict[int, Any] = {}

    def pack(t: Any) -> Any:
        if t.dim() and _storage(t) not in skip:
            saved.setdefault(_storage(t), t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        if framework == "torch-amp":
            with torch.autocast("cpu", dtype=dtype):
                loss = nn.functional.cross_entropy(net(x), y)
        else:
            loss = nn.functional.cross_entropy(net(x.to(dtype)).float(), y)
    loss.backward()
    if framework == "apex-O2":  # the unscaled gradients copied into the masters' fp32 .grad
        for p, m in zip(params, masters, strict=True):
            m.grad = p.grad.float()
    opt.step()

    def by_format(tensors: Any) -> Counter[str]:
        out: Counter[str] = Counter()
        for t in tensors:
            if t.is_floating_point():
                out[NAMES[t.dtype]] += t.numel()
        return out

    state = [v for st in opt.state.values() for k, v in st.items() if k != "step"]
    return {
        "saved": by_format(saved.values()),
        "weights": by_format(params),
        "gradients": by_format(p.grad for p in params),
        "optimizer state": by_format(state),
    }


def ledger_counts(led: Ledger, *what: str) -> Counter[str]:
    out: Counter[str] = Counter()
    for e in led.entries:
        if e.what in what:
            out[e.format] += e.elements
    return out


def per_sample(a: Counter[str], b: Counter[str]) -> tuple[dict[str, int], dict[str, int]]:
    """(elements per sample, batch-independent elements) by format from counts at N1 and N2."""
    slope = {f: (b[f] - a[f]) // (N2 - N1) for f in a | b}
    assert all((b[f] - a[f]) % (N2 - N1) == 0 for f in slope)
    fixed = {f: a[f] - N1 * s for f, s in slope.items()}
    return {f: s for f, s in slope.items() if s}, {f: v for f, v in fixed.items() if v}


MODELS = [MLP(16, (12, 8), 5), ConvNet(16, 4, channels=(3, 6))]
CASES = [
    ("torch-amp", torch.float16),
    ("torch-amp", torch.bfloat16),
    ("apex-O2", torch.float16),
    ("apex-O3", torch.float16),
]


def policy_of(framework: str, dtype: Any) -> Policy:
    p = get_policy(framework)
    return p if dtype == torch.float16 else p.replace(forward=NAMES[dtype], backward=NAMES[dtype])


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.describe())
@pytest.mark.parametrize(("framework", "dtype"), CASES, ids=lambda c: str(c).removeprefix("torch."))
@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_the_ledgers_formats_are_torchs(model: Model, framework: str, dtype: Any, optimizer: str) -> None:
    policy = policy_of(framework, dtype)
    assert batchnorm_kind(policy) == "input"
    low = NAMES[dtype]
    steps = [torch_step(model, framework, dtype, n, optimizer) for n in (N1, N2)]
    leds = [ledger(model, policy, batch_size=n, optimizer=optimizer) for n in (N1, N2)]
    # the weights the model computes with, their gradients and the optimizer's state: element for element
    for what in ("weights", "gradients", "optimizer state"):
        assert ledger_counts(leds[0], what) == steps[0][what], what
    # what the forward pass keeps: the per-sample formats, the per-sample fp32 elements exactly
    torch_ps, torch_fixed = per_sample(steps[0]["saved"], steps[1]["saved"])
    led_ps, led_fixed = per_sample(*(ledger_counts(led, "activations", "loss") for led in leds))
    assert set(torch_ps) == set(led_ps) == {low, "fp32"}
    # the loss's fp32 log-probabilities alone
    assert torch_ps["fp32"] == led_ps["fp32"] == model.n_out  # type: ignore[attr-defined]
    # batch-independent: BatchNorm's mean and 1/std, in its parameters' format (fp32, but fp16 under
    # Apex O3's model.half(), as torch's CPU kernel keeps them), no copy of its 16-bit input in fp32
    stats = 2 * sum(getattr(model, "channels", ()))
    stats_format = low if framework == "apex-O3" else "fp32"
    assert torch_fixed.get("fp32", 0) == led_fixed.get("fp32", 0) == (stats if stats_format == "fp32" else 0)
    # batch-independent 16-bit tensors: autocast's casts of weights (not all are kept: the first
    # layer's, whose input needs no gradient, is not), which the ledger's "weight casts" hold; none
    # under Apex, whose model holds its fp16 weights itself
    casts = ledger_counts(leds[0], "weight casts")
    if framework == "torch-amp":
        assert led_fixed.get(low, 0) == 0
        assert 0 < torch_fixed[low] <= casts[low]
    else:
        assert not casts
        assert torch_fixed.get(low, 0) == led_fixed.get(low, 0) == (stats if stats_format == low else 0)


def test_the_bug_this_guards_against_fp32_batchnorm_under_autocast() -> None:
    # the ledger once kept BatchNorm's normalised values in fp32 under torch-amp: 98,352 elements of
    # lesson 10's convnet at batch 64 that torch keeps in fp16 (the same policy renamed, floatlab's
    # own fp32 BatchNorm, still does)
    amp = get_policy("torch-amp")
    model = ConvNet(64, 10, channels=(16, 32))
    fp32_of = {
        name: ledger_counts(ledger(model, p, batch_size=64), "activations")["fp32"]
        for name, p in (("torch-amp", amp), ("renamed", amp.replace(name="mine")))
    }
    assert fp32_of["torch-amp"] == 2 * sum(model.channels)
    assert fp32_of["renamed"] == 98_352


KERAS_BATCHNORM = """
import json, keras, torch
layer = keras.layers.BatchNormalization(dtype="mixed_float16")
x = torch.randn(4, 6, 6, 3, dtype=torch.float16, requires_grad=True)
saved = []
def pack(t):
    saved.append([str(t.dtype).removeprefix("torch."), t.numel()])
    return t
with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
    y = layer(x, training=True)
print(json.dumps({"version": keras.__version__, "out": str(y.dtype), "saved": saved}))
"""


def test_keras_batchnorm_computes_in_fp32_under_mixed_float16() -> None:
    if importlib.util.find_spec("keras") is None:
        pytest.skip("Keras is not installed")
    env = {**os.environ, "KERAS_BACKEND": "torch"}
    run = subprocess.run(
        [sys.executable, "-c", KERAS_BATCHNORM], env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    size = 4 * 6 * 6 * 3
    # Keras 3 (keras/src/layers/normalization/batch_normalization.py) casts the fp16 input to fp32:
    # what it keeps of the input's size is fp32, and it returns fp16
    assert got["out"] == "torch.float16"
    full = {dtype for dtype, n in got["saved"] if n == size}
    assert full == {"float32"}, got
    # torch's own BatchNorm, on the same fp16 input with fp32 parameters, keeps the fp16 input
    bn, x = nn.BatchNorm2d(3), torch.randn(4, 3, 6, 6, dtype=torch.float16, requires_grad=True)
    kept: list[Any] = []

    def keep(t: Any) -> Any:
        kept.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
        assert bn(x).dtype == torch.float16
    assert {str(t.dtype) for t in kept if t.numel() == size} == {"torch.float16"}
    # and the ledger follows each: Keras's BatchNorm keeps fp32, torch-amp's its 16-bit input
    assert batchnorm_kind("keras") == "fp32"
    assert batchnorm_kind("torch-amp") == "input"
    model = ConvNet(16, 4, channels=(3,))
    keras_led, amp_led = (
        ledger_counts(ledger(model, p, batch_size=2), "activations") for p in ("keras", "torch-amp")
    )
    assert keras_led["fp32"] - amp_led["fp32"] == 2 * 16 * 3 + 3 - 2 * 3
