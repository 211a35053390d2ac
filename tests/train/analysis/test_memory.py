"""The memory ledger: parameter counts against the models' own and torch's, byte counts written out
by hand from the models' code, the activation count at any batch against a direct count, the
gradient formats against a real backward pass, the optimizer state against a real optimizer's, and
the ``floatlab memory`` command and the compare column."""

from __future__ import annotations

import hashlib
import json
import math
import tracemalloc
from collections.abc import Iterator, Mapping
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from floatlab.cli import main
from floatlab.formats import FP16, FloatFormat, get_format
from floatlab.train.analysis.memory import (
    LAYOUTS,
    Ledger,
    _saved_counts,
    batchnorm_kind,
    buffer_shapes,
    layout_of,
    ledger,
    ledger_for,
    mib_text,
    param_shapes,
    storage_bits,
)
from floatlab.train.config import TrainConfig
from floatlab.train.data import make_underflow_task
from floatlab.train.models import MLP, AttentionNet, Model, cross_entropy_backward, cross_entropy_forward
from floatlab.train.models.convnet import ConvNet
from floatlab.train.models.transformer import TransformerLM
from floatlab.train.precision import Precision
from floatlab.train.precision.policy import Policy, get_policy, policy_names
from floatlab.train.precision.presets import preset_names
from floatlab.train.trainer import Trainer

TINY_LM = {"context": 8, "vocab": 11, "layers": 2, "d_model": 16, "heads": 2}


def lm() -> TransformerLM:
    return TransformerLM(**TINY_LM)


def elements(led: Ledger, what: str, fmt: str | None = None) -> int:
    return sum(e.elements for e in led.entries if e.what == what and fmt in (None, e.format))


def saved_bytes(led: Ledger) -> int:
    return sum(led.bytes_of(w) for w in ("activations", "loss", "indices"))


# ---- parameters -----------------------------------------------------------------------------------
MODELS: list[Model] = [MLP(64, (32, 16), 10), ConvNet(64, 10, channels=(4, 8)), lm(), AttentionNet(64, 10)]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_parameter_count_is_the_models_own(model: Model) -> None:
    n = model.n_params  # type: ignore[attr-defined]
    led = ledger(model, "fp32", batch_size=2, momentum=0.0)
    assert elements(led, "weights") == elements(led, "gradients") == n
    # master weights, gradients and the optimizer's state: one entry per parameter each
    mixed = ledger(model, "mixed-fp16", batch_size=2, optimizer="adamw")
    assert elements(mixed, "master weights") + elements(mixed, "weights", "fp32") == n
    assert elements(mixed, "optimizer state") == 2 * n


def test_parameter_count_against_torch() -> None:
    torch = pytest.importorskip("torch")
    nn = torch.nn

    def count(*modules: Any) -> int:
        return sum(p.numel() for m in modules for p in m.parameters())

    mlp = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 10))
    conv = nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1, bias=False),
        nn.BatchNorm2d(4),
        nn.Conv2d(4, 8, 3, padding=1, bias=False),
        nn.BatchNorm2d(8),
        nn.Linear(2 * 2 * 8, 10),
    )
    d, heads = TINY_LM["d_model"], TINY_LM["heads"]
    blocks = [
        nn.TransformerEncoderLayer(d, heads, dim_feedforward=4 * d, norm_first=True)
        for _ in range(TINY_LM["layers"])
    ]
    # GPT-2's shape: token table (tied to the output), position table, blocks, final LayerNorm
    gpt = count(nn.Embedding(TINY_LM["vocab"], d), *blocks, nn.LayerNorm(d)) + TINY_LM["context"] * d
    expected = {"mlp": count(mlp), "convnet": count(conv), "transformer": gpt}
    for model in MODELS[:3]:
        assert elements(ledger(model, "fp32", batch_size=1), "weights") == expected[model.name], model.name


# ---- bytes by hand --------------------------------------------------------------------------------
def test_mixed_fp16_adamw_of_a_tiny_mlp_by_hand() -> None:
    led = ledger(MLP(4, (3,), 2), "mixed-fp16", batch_size=5, optimizer="adamw")
    params = (4 * 3 + 3) + (3 * 2 + 2)  # 23
    weights = params * 2  # fp16 working copy: 46
    master = params * 4  # fp32 master weights: 92
    grads = params * 2  # fp16 gradients (Apex O2's layout): 46
    master_grads = params * 4  # fp32 master gradients: 92
    adam = 2 * params * 4  # m and v in fp32: 184
    # kept for backward, in fp16: the input x (5 x 4), the pre-activation z (5 x 3), ReLU's output
    # (5 x 3), the logits (5 x 2); in fp32 (the loss is an fp32 op): the probabilities (5 x 2);
    # the labels, int64 (5)
    activations = (5 * 4 + 5 * 3 + 5 * 3 + 5 * 2) * 2  # 120
    loss, labels = 5 * 2 * 4, 5 * 8  # 40, 40
    assert weights + master + grads + master_grads + adam + activations + loss + labels == 660
    assert [(e.what, e.format, e.bytes) for e in led.entries] == [
        ("weights", "fp16", weights),
        ("master weights", "fp32", master),
        ("gradients", "fp16", grads),
        ("master gradients", "fp32", master_grads),
        ("optimizer state", "fp32", adam),
        ("activations", "fp16", activations),
        ("loss", "fp32", loss),
        ("indices", "int64", labels),
    ]
    assert led.total == 660
    # the same step in fp32: 4 bytes for every weight, gradient, moment and saved value
    assert led.fp32_bytes == params * 4 * 4 + (60 + 10) * 4 + labels == 688


@pytest.mark.parametrize("policy", ["fp32", "fp64", "fp16", "bf16"])
def test_mlp_activations_by_hand(policy: str) -> None:
    n, (n_in, h1, h2, out) = 6, (10, 7, 5, 3)
    led = ledger(MLP(n_in, (h1, h2), out), policy, batch_size=n, momentum=0.0)
    width = {"fp32": 4, "fp64": 8, "fp16": 2, "bf16": 2}[policy]
    # inputs of each layer (x, ReLU outputs), pre-activations (the last is the logits), probabilities
    floats = n * (n_in + h1 + h2) + n * (h1 + h2 + out) + n * out
    assert led.bytes_of("activations") + led.bytes_of("loss") == floats * width
    assert led.bytes_of("indices") == n * 8
    # fp32 SGD without momentum: 4 bytes for each parameter and gradient, and the activations
    if policy == "fp32":
        params = n_in * h1 + h1 + h1 * h2 + h2 + h2 * out + out
        assert led.total == 4 * (params + params) + saved_bytes(led)
        assert led.ratio == 1.0


def lm_floats_per_token(m: TransformerLM) -> tuple[int, int, int]:
    """(all floats, LayerNorm statistics and normalised values, the loss's probabilities) that the
    transformer keeps per token, counted from its code: per block the LayerNorms' xhat (d) and rstd
    (1) twice, LN1's output a (d), the fused q, k, v (3d), the attention weights (heads x t), the
    joined heads (d), LN2's output (d), the MLP's pre-activation and GELU output (4d each); then the
    final LayerNorm (output d, xhat d, rstd 1), the logits (V) and the loss's probabilities (V)."""
    d, t, V = m.d_model, m.context, m.vocab
    block = 2 * (d + 1) + d + 3 * d + m.heads * t + d + d + 4 * d + 4 * d
    total = m.layers * block + (d + d + 1) + V + V
    return total, m.layers * 2 * (d + 1) + (d + 1), V


def test_transformer_activations_by_hand() -> None:
    m, n = lm(), 3
    tokens = n * m.context
    total, norm, probs = lm_floats_per_token(m)
    ids = 2 * tokens * 8  # token ids and next-token labels, int64
    fp32 = ledger(m, "fp32", batch_size=n, momentum=0.0)
    assert saved_bytes(fp32) == tokens * total * 4 + ids
    assert fp32.total == 4 * 2 * m.n_params + saved_bytes(fp32)
    # pure fp16: every float kept in fp16
    assert saved_bytes(ledger(m, "fp16", batch_size=n)) == tokens * total * 2 + ids
    # mixed-fp16 keeps LayerNorm and the loss in fp32: their saved values stay fp32, the rest fp16
    mixed = ledger(m, "mixed-fp16", batch_size=n)
    assert elements(mixed, "activations", "fp32") == tokens * norm
    assert elements(mixed, "loss", "fp32") == tokens * probs
    assert elements(mixed, "activations", "fp16") == tokens * (total - norm - probs)
    # Apex O2 computes LayerNorm in fp16 (only the loss in fp32)
    o2 = ledger(m, "apex-O2", batch_size=n)
    assert elements(o2, "activations", "fp16") == tokens * (total - probs)
    assert elements(o2, "activations", "fp32") == 0


def test_views_of_one_buffer_count_once() -> None:
    # AttentionNet keeps q, k and v, three views of one projection: counted once, as 3 d per token
    m, n = AttentionNet(64, 10, tokens=8, d_model=16), 4
    f, t, d, c = 8, 8, 16, 10
    per_example = t * f + t * d + t * (d + 1) + 3 * t * d + t * t + t * d + t * (d + 1) + d + c + c
    led = ledger(m, "fp32", batch_size=n)
    assert led.bytes_of("activations") + led.bytes_of("loss") == n * per_example * 4


def test_packed_small_formats() -> None:
    assert [storage_bits(f) for f in ("fp64", "fp32", "tf32", "fp16", "bf16")] == [64, 32, 32, 16, 16]
    assert storage_bits("float8_e5m2") == 8
    mlp = MLP(4, (3,), 2)
    for name, bits in (("float6_e3m2fn", 6), ("float4_e2m1fn", 4)):
        fmt = get_format(name)
        p = Policy(name, forward=fmt, backward=fmt, master_weights=False, batchnorm_fp32=False)
        led = ledger(mlp, p, batch_size=1, momentum=0.0)
        assert [e for e in led.entries if e.what == "weights"] == [
            ("weights", fmt.name, 23, math.ceil(23 * bits / 8))
        ]


# ---- the oracle: a real forward pass, its cache counted array by array ------------------------------
def _example_batch(model: Model, n: int, rng: np.random.Generator) -> tuple[Any, Any]:
    """A batch of ``n`` the model reads: token ids and next-token labels for a language model,
    else rows of ``n_in`` features in [0, 1) and one label each."""
    vocab, context = getattr(model, "vocab", None), getattr(model, "context", None)
    if vocab is not None and context is not None:
        return rng.integers(0, vocab, (n, context)), rng.integers(0, vocab, (n, context))
    return rng.random((n, model.n_in), dtype=np.float32), rng.integers(0, model.n_out, n)  # type: ignore[attr-defined]


def _arrays(tree: Any) -> Iterator[Any]:
    if isinstance(tree, np.ndarray):
        yield tree
    elif isinstance(tree, Mapping):
        for v in tree.values():
            yield from _arrays(v)
    elif isinstance(tree, (list, tuple)):
        for v in tree:
            yield from _arrays(v)


def _root(a: Any) -> Any:
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def _stored_format(a: Any, P: Precision) -> FloatFormat:
    """The forward format when every value of ``a`` is one of its values, else the holding format."""
    if P.is_wide(P.fwd):
        return P.wide
    return P.fwd if np.array_equal(P.cast(a, P.fwd), a, equal_nan=True) else P.wide


def measured_saved(model: Model, policy: Policy, n: int) -> dict[tuple[str, str, int], int]:
    """What one training forward pass (and the loss) on a batch of ``n`` keeps, by (what, format,
    bits): every array of the caches, views of one buffer once, the weights left out; a float
    array in the forward format when its values are all values of it."""
    rng = np.random.default_rng(0)
    P = Precision(policy, rng=np.random.default_rng(1), layers=model.linear_sites)
    norm = model.norm_params
    params = {
        k: P.cast(np.asarray(v, P.dtype), policy.param_format(k in norm)) for k, v in model.init(rng).items()
    }
    w = P.weights(params, norm)
    buffers = {k: np.asarray(v, P.dtype) for k, v in model.init_buffers().items()}
    x, y = _example_batch(model, n, rng)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        logits, cache = model.forward(w, x.astype(P.dtype) if x.dtype.kind == "f" else x, P, buffers=buffers)
        _, loss_cache = cross_entropy_forward(logits, y, P)
    seen = {id(_root(a)) for a in (*params.values(), *w.values())}
    out: dict[tuple[str, str, int], int] = {}
    for what, tree in (("activations", [cache, logits]), ("loss", loss_cache)):
        groups: dict[int, tuple[Any, dict[int, Any]]] = {}
        for a in _arrays(tree):
            r = _root(a)
            if id(r) not in seen:
                groups.setdefault(id(r), (r, {}))[1][id(a)] = a
        for key, (root, members) in groups.items():
            seen.add(key)
            views = list(members.values())
            count = min(root.nbytes, sum(v.nbytes for v in views)) // views[0].itemsize
            if views[0].dtype.kind in "iub":
                k = ("indices", views[0].dtype.name, 8 * views[0].itemsize)
            else:
                fmt = max((_stored_format(v, P) for v in views), key=storage_bits)
                k = (what, fmt.name, storage_bits(fmt))
            out[k] = out.get(k, 0) + count
    return {k: v for k, v in out.items() if v}


SHAPES: list[Model] = [
    *MODELS,
    MLP(10, (7,), 3, activation="gelu"),
    MLP(5, (), 2),
    AttentionNet(64, 10, tokens=4, d_model=8),
    ConvNet(16, 3, channels=(2,)),
    ConvNet(64, 5, channels=(2, 3, 4)),
    TransformerLM(5, 7, layers=1, d_model=6, heads=1),
]
POLICIES = ["fp32", "fp64", "fp16", "bf16", "mixed-fp16", "mixed-bf16", "apex-O3", "torch-amp", "fp8-delayed"]


@pytest.mark.parametrize("model", SHAPES, ids=lambda m: m.describe())
@pytest.mark.parametrize("policy", POLICIES)
def test_activation_count_is_a_real_forward_pass_count(model: Model, policy: str) -> None:
    p = get_policy(policy)
    if isinstance(model, ConvNet) and batchnorm_kind(p) == "input":
        # floatlab's BatchNorm caches its normalised values and 1/std, torch's keeps its input, mean
        # and 1/std (test_memory_torch.py holds the ledger to torch): the cache is floatlab's own
        # policy's, the same policy renamed
        p = p.replace(name="floatlab's own")
    for n in (1, 7):
        assert _saved_counts(model, p, n) == measured_saved(model, p, n)


@pytest.mark.parametrize("model", SHAPES, ids=lambda m: m.describe())
def test_parameter_and_buffer_shapes_are_the_models_own(model: Model) -> None:
    params = model.init(np.random.default_rng(0))
    assert param_shapes(model) == {k: v.shape for k, v in params.items()}
    assert list(param_shapes(model)) == list(params)  # in the order of init
    assert buffer_shapes(model) == {k: v.shape for k, v in model.init_buffers().items()}


def test_a_model_of_billions_of_weights_is_counted_without_allocating() -> None:
    n, sizes = 64, (64, 40000, 40000, 10)
    model = MLP(sizes[0], sizes[1:-1], sizes[-1])
    ledger(MLP(4, (3,), 2), "mixed-fp16", batch_size=2, optimizer="adamw")  # (imports done)
    tracemalloc.start()
    try:
        led = ledger(model, "mixed-fp16", batch_size=n, optimizer="adamw")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20  # building the weights alone would take 6.4 GB
    params = 64 * 40000 + 40000 + 40000 * 40000 + 40000 + 40000 * 10 + 10
    assert params == model.n_params == 1_603_040_010
    assert [(e.what, e.format, e.elements, e.bytes) for e in led.entries] == [
        ("weights", "fp16", params, 2 * params),
        ("master weights", "fp32", params, 4 * params),
        ("gradients", "fp16", params, 2 * params),
        ("master gradients", "fp32", params, 4 * params),
        ("optimizer state", "fp32", 2 * params, 8 * params),
        # the layers' inputs (64, 40000, 40000) and outputs (40000, 40000, 10), in fp16
        ("activations", "fp16", n * 160074, 2 * n * 160074),
        ("loss", "fp32", n * 10, 4 * n * 10),
        ("indices", "int64", n, 8 * n),
    ]
    # the same arithmetic at a small size equals a real model's parameters and forward pass
    small = MLP(64, (40, 40), 10)
    p = get_policy("mixed-fp16")
    assert _saved_counts(small, p, n) == measured_saved(small, p, n)


def test_the_memory_command_of_a_huge_model_allocates_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["memory", "--hidden", "40,40", "--json"]) == 0  # (the data set's shapes are cached)
    capsys.readouterr()
    tracemalloc.start()
    try:
        assert main(["memory", "--hidden", "40000,40000", "--json"]) == 0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20
    data = json.loads(capsys.readouterr().out)
    assert data["entries"][0] == {
        "what": "weights",
        "format": "fp16",
        "elements": 1_603_040_010,
        "bytes": 3_206_080_020,
    }


def test_byte_counts_at_a_batch_of_10_to_the_20_are_exact(capsys: pytest.CaptureFixture[str]) -> None:
    n = 10**20
    assert main(["memory", *SMALL, "--batch-size", str(n), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = {(e["what"], e["format"]): e["bytes"] for e in data["entries"]}
    assert rows["activations", "fp16"] == 2 * n * (64 + 8 + 8 + 10)  # exact, not a float's 17 digits
    assert rows["loss", "fp32"] == 4 * n * 10
    assert rows["indices", "int64"] == 8 * n
    assert data["total_bytes"] == sum(rows.values())
    assert main(["memory", *SMALL, "--batch-size", str(n)]) == 0
    total = sum(rows.values())
    whole = round(Fraction(total, 2**20))  # 100 MiB and more: no decimals
    assert f"  {whole:,} MiB," in capsys.readouterr().out
    assert mib_text(2**70 + 2**19) == f"{2**50:,} MiB"  # 2^50 + 1/2, to even: a float has no 1/2 there


def test_only_the_registered_models_have_known_shapes() -> None:
    class Custom(Model):
        name = "custom"

    with pytest.raises(ValueError, match="counts the shapes of mlp, attention, transformer and convnet"):
        ledger(Custom(), "fp32", batch_size=1)


# ---- against the trainer ----------------------------------------------------------------------------
def test_gradient_formats_and_optimizer_state_match_a_real_step() -> None:
    data = make_underflow_task(n_train=32, n_test=8)
    model = ConvNet(64, 10, channels=(4, 8))
    o2 = get_policy("apex-O2")
    tr = Trainer(model, data, o2, batch_size=16)
    led = ledger_for(tr)
    assert (led.layout, led.optimizer) == ("apex-o2", "sgd momentum 0.9")
    # the gradients of one backward pass: fp16 values, but BatchNorm's (kept in fp32)
    P = Precision(o2)
    w = P.weights(tr.params, model.norm_params)
    logits, cache = model.forward(w, data.x_train[:16], P, buffers=model.init_buffers())
    _, lc = cross_entropy_forward(logits, data.y_train[:16], P)
    grads = model.backward(w, cache, cross_entropy_backward(lc, P, seed=1024.0), P)
    in_fp16 = {k: bool(np.array_equal(P.cast(g, FP16), g)) for k, g in grads.items()}
    assert {k for k, fits in in_fp16.items() if not fits} == set(model.norm_params)
    n_norm = sum(grads[k].size for k in model.norm_params)
    assert elements(led, "gradients", "fp32") == n_norm
    assert elements(led, "gradients", "fp16") == model.n_params - n_norm
    assert elements(led, "master gradients") == model.n_params - n_norm
    # the optimizer's state after a step, as the ledger counts it
    tr.train_step(data.x_train[:16], data.y_train[:16])
    assert elements(led, "optimizer state") == sum(
        a.size for st in tr.opt.state.values() for a in st.values()
    )
    assert elements(led, "running statistics") == sum(b.size for b in tr.buffers.values())


def test_a_run_has_one_ledger_from_its_config_trainer_or_history() -> None:
    cfg = TrainConfig(
        model="mlp", data="underflow", precision="apex-O2", hidden=(8,), batch_size=16, optimizer="adamw"
    )
    tr = Trainer.from_config(cfg, make_underflow_task(n_train=32, n_test=8))
    a, b, c = ledger_for(cfg), ledger_for(tr), ledger_for(tr.history)
    assert a == b == c
    assert (a.optimizer, a.batch_size, a.policy) == ("adamw", 16, "apex-O2")


# ---- layouts --------------------------------------------------------------------------------------
def test_layouts_differ_in_gradients_only() -> None:
    m = lm()
    auto = ledger(m, "mixed-fp16", batch_size=2, layout="autocast")
    o2 = ledger(m, "mixed-fp16", batch_size=2, layout="apex-o2")
    n = m.n_params
    # weights: fp32 + an fp16 copy either way; gradients: fp32 (autocast) against fp16 + fp32 (Apex O2)
    assert (
        auto.bytes_of("weights") + auto.bytes_of("weight casts")
        == o2.bytes_of("weights") + o2.bytes_of("master weights")
        == 6 * n
    )
    assert auto.bytes_of("gradients") == 4 * n
    assert o2.bytes_of("gradients") + o2.bytes_of("master gradients") == 6 * n
    assert o2.total - auto.total == 2 * n
    assert {layout_of(name) for name in preset_names()} == set(LAYOUTS)
    assert layout_of(get_policy("torch-amp")) == layout_of("mindspore-O2*") == "autocast"
    assert layout_of(get_policy("fastai")) == "apex-o2"
    # a preset without master weights keeps one copy whatever its layout
    o3 = ledger(m, "apex-O3", batch_size=2)
    assert o3.bytes_of("master weights") == o3.bytes_of("weight casts") == 0


# the presets whose framework keeps fp32 weights and casts them at use, as the ledger once listed them
AUTOCAST = {
    "torch-amp",
    "keras",
    "tf2-keras",
    "tf1-static-128",
    "apex-O1",
    "mindspore-O1",
    "mindspore-O2",
    "mindspore-O3",
    "mindspore-fixed-128",
    "mindspore-fixed-128-nodrop",
}


def test_the_layout_is_the_policys_data_not_its_name() -> None:
    for name in [*policy_names(), *preset_names()]:
        assert get_policy(name).memory_layout == ("autocast" if name in AUTOCAST else "apex-o2")
    amp = get_policy("torch-amp")
    # renamed or changed, a preset's policy keeps its framework's layout (the ledger reads the field)
    assert ledger(lm(), amp.replace(name="mine"), batch_size=2).layout == "autocast"
    assert ledger(lm(), amp.replace(loss_scaling="none"), batch_size=2).layout == "autocast"
    o2 = ledger(lm(), amp.replace(name="torch-amp", memory_layout="apex-o2"), batch_size=2)
    assert o2 == ledger(lm(), amp, batch_size=2, layout="apex-o2")
    assert o2.total != ledger(lm(), amp, batch_size=2).total
    # a policy written before the field existed takes the layout of the one it is named after
    old = {k: v for k, v in amp.to_dict().items() if k != "memory_layout"}
    assert Policy.from_dict(old).memory_layout == "autocast"
    assert Policy.from_dict({**old, "name": "torch-amp*"}).memory_layout == "autocast"
    assert Policy.from_dict({**old, "name": "apex-O2"}).memory_layout == "apex-o2"
    assert Policy.from_dict({**old, "name": "my-run"}).memory_layout == "apex-o2"
    with pytest.raises(ValueError, match="unknown precision policy or preset 'apex-O9'"):
        layout_of("apex-O9")


# Every name's ledgers while the ledger chose the layout from the list of names above: the layout,
# each model's total bytes (sgd with momentum, batch 3), and the first 16 hex digits of the SHA-256
# of the JSON of all eight ledgers (each model with sgd and with adamw). Changed since, on purpose,
# and held to torch in test_memory_torch.py: the optimizer state in the format of the weights it
# updates (fp16, bf16, apex-O3: was fp32), and PyTorch's BatchNorm keeping its 16-bit input and
# its mean and 1/std (torch-amp, apex-O0 to O3, fastai: was its normalised values in fp32)
LEDGER_MODELS: list[Model] = [
    ConvNet(64, 10, channels=(4, 8)),
    TransformerLM(8, 11, layers=2, d_model=16, heads=2),
    AttentionNet(64, 10),
    MLP(64, (32,), 10),
]
LEDGERS_WAS: dict[str, tuple[str, int, int, int, int, str]] = {
    "fp32": ("apex-o2", 28416, 141024, 85440, 30720, "988b96aa8a87feab"),
    "fp16": ("apex-o2", 14364, 70704, 42732, 15372, "7e208d0f65ade3a9"),
    "bf16": ("apex-o2", 14364, 70704, 42732, 15372, "f94c744d5f28f28c"),
    "mixed-fp16": ("apex-o2", 23484, 144272, 97260, 39532, "57f08c57bff25e8d"),
    "mixed-bf16": ("apex-o2", 23484, 144272, 97260, 39532, "277c948ad214db06"),
    "mixed-fp8": ("apex-o2", 18402, 118312, 82650, 34298, "451ede0a802fd481"),
    "fp8-tensorwise": ("apex-o2", 23484, 144272, 97260, 39532, "966de6181a884121"),
    "fp8-delayed": ("apex-o2", 23484, 144272, 97260, 39532, "0fa9ca8ddb7c73c6"),
    "fp8-blockwise": ("apex-o2", 23484, 144272, 97260, 39532, "be5b02922fc75864"),
    "mxfp8": ("apex-o2", 23484, 144272, 97260, 39532, "8f785eef33beee97"),
    "mxfp6": ("apex-o2", 23484, 144272, 97260, 39532, "a71c74aa819f8bb8"),
    "mxfp4": ("apex-o2", 23484, 144272, 97260, 39532, "5b56574326e65b8c"),
    # (added with the policy: the same bytes as the other MX recipes', whose GEMMs keep no copy)
    "mxint8": ("apex-o2", 23484, 144272, 97260, 39532, "a78013cc0ec3c597"),
    "nvfp4": ("apex-o2", 23484, 144272, 97260, 39532, "808ce85abe6882e8"),
    "fp64": ("apex-o2", 56520, 281664, 170856, 61416, "52c50c8cd4ddfab5"),
    "torch-amp": ("autocast", 19920, 130480, 87000, 34712, "48922721cf5af050"),
    "keras": ("autocast", 22176, 130480, 87000, 34712, "af4efafa68696178"),
    "tf2-keras": ("autocast", 22176, 130480, 87000, 34712, "56b056a7b5305e81"),
    "tf1-static-128": ("autocast", 22176, 130480, 87000, 34712, "b1a3a1c5e9c0d677"),
    "apex-O0": ("apex-o2", 28464, 141024, 85440, 30720, "bc353ff6893f8adf"),
    "apex-O1": ("autocast", 19920, 130480, 87000, 34712, "0e846222c6a42460"),
    "apex-O2": ("apex-o2", 21228, 140192, 94092, 39532, "c96d764534ec22e8"),
    "apex-O3": ("apex-o2", 14448, 71232, 42792, 15432, "482042565ef69d9b"),
    "fastai": ("apex-o2", 21228, 140192, 94092, 39532, "d7e35ba5dd280aa8"),
    "mindspore-O0": ("apex-o2", 28416, 141024, 85440, 30720, "76190477c4bd5d08"),
    "mindspore-O1": ("autocast", 22176, 130480, 87000, 34712, "5df54124f5baef0f"),
    "mindspore-O2": ("autocast", 22176, 130480, 87000, 34712, "92c248ef7ee03d5f"),
    "mindspore-O3": ("autocast", 19896, 126400, 83832, 34712, "c7a656367865e507"),
    "mindspore-fixed-128": ("autocast", 22176, 130480, 87000, 34712, "7b38cac4e8d6f0cd"),
    "mindspore-fixed-128-nodrop": ("autocast", 22176, 130480, 87000, 34712, "4b54bea66b813234"),
}


@pytest.mark.parametrize("name", list(LEDGERS_WAS))
def test_every_named_ledger_is_as_it_was(name: str) -> None:
    assert list(LEDGERS_WAS) == [*policy_names(), *preset_names()]
    ledgers = [
        ledger(m, name, batch_size=3, optimizer=opt).to_dict()
        for m in LEDGER_MODELS
        for opt in ("sgd", "adamw")
    ]
    digest = hashlib.sha256(json.dumps(ledgers, sort_keys=True).encode()).hexdigest()[:16]
    totals = [led["total_bytes"] for led in ledgers[::2]]
    assert (ledgers[0]["layout"], *totals, digest) == LEDGERS_WAS[name]


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"batch_size": 0}, "batch_size=0: expected an integer >= 1"),
        ({"batch_size": 2, "optimizer": "adam"}, "optimizer 'adam': expected one of sgd, adamw"),
        ({"batch_size": 2, "optimizer": 3}, "optimizer 3: expected"),
        ({"batch_size": 2, "momentum": math.nan}, "momentum=nan"),
        ({"batch_size": 2, "layout": "zero"}, "layout 'zero': expected one of apex-o2, autocast"),
    ],
)
def test_bad_arguments_are_one_line(kwargs: dict[str, Any], words: str) -> None:
    with pytest.raises(ValueError, match=words.replace("(", r"\(")) as e:
        ledger(MLP(4, (3,), 2), "fp32", **kwargs)
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="expected a Model"):
        ledger("mlp", "fp32", batch_size=1)  # type: ignore[arg-type]


# ---- the command line -----------------------------------------------------------------------------
SMALL = ["--data", "underflow", "--hidden", "8", "--no-color"]


def test_memory_command_table_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["memory", *SMALL, "--precision", "mixed-bf16", "--batch-size", "16"]) == 0
    out = capsys.readouterr().out
    led = ledger_for(TrainConfig(data="underflow", hidden=(8,), precision="mixed-bf16", batch_size=16))
    lines = out.splitlines()
    assert lines[0] == "mixed-bf16: mlp 64-8-10, sgd momentum 0.9, batch 16"
    assert lines[3].split() == ["what", "format", "elements", "bytes", "share"]
    rows = [ln.split() for ln in lines[4 : 4 + len(led.entries)]]
    assert [int(r[-2].replace(",", "")) for r in rows] == [e.bytes for e in led.entries]
    assert lines[4 + len(led.entries)].split()[:2] == ["total", f"{led.total:,}"]
    assert f"{led.ratio:.3g} of the same step in fp32" in out
    assert main(["memory", *SMALL, "--preset", "torch-amp", "--optimizer", "adamw", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["layout"], data["policy"]) == ("autocast", "torch-amp")
    assert data["total_bytes"] == sum(e["bytes"] for e in data["entries"])


def test_memory_command_of_the_transformer(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["memory", "--model", "transformer", "--layers", "1", "--d-model", "16", "--heads", "2"]
    assert main([*argv, "--context", "8", "--batch-size", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    m = TransformerLM(8, 72, layers=1, d_model=16, heads=2)  # the text's 72 characters
    assert data == ledger(m, "mixed-fp16", batch_size=2).to_dict()


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--precision", "fp16", "--preset", "apex-O2"], "not allowed with argument"),
        (["--preset", "apex-O9"], "unknown precision policy or preset 'apex-O9'"),
        (["--model", "mlp", "--data", "text"], "needs a language model"),
        (["--model", "resnet"], "unknown model 'resnet'"),
        (["--batch-size", "0"], "batch_size=0"),
        (["--batch-size", "1e20"], "argument --batch-size: invalid int value: '1e20'"),
        (["--batch-size", "2.5"], "argument --batch-size: invalid int value: '2.5'"),
        (["--optimizer", "lamb"], "optimizer 'lamb'"),
        (["--model", "transformer", "--heads", "3"], "not divisible by heads=3"),
        (["--hidden", "0"], "positive layer sizes"),
    ],
)
def test_memory_command_bad_input(argv: list[str], words: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["memory", *argv]) == 2
    err = capsys.readouterr().err
    assert words in err
    assert err.count("\n") == 1


def test_compare_has_a_memory_column(capsys: pytest.CaptureFixture[str]) -> None:
    run = ["--data", "underflow", "--steps", "2", "--hidden", "8", "--batch-size", "16", "-q", "--no-color"]
    assert main(["compare", "fp32", "--preset", "apex-O2", *run]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[-1] == "memory"
    for line, precision in zip(lines[1:3], ("fp32", "apex-O2"), strict=True):
        led = ledger_for(TrainConfig(data="underflow", hidden=(8,), batch_size=16, precision=precision))
        shown, unit = line.split()[-2:]
        assert unit == "MiB"
        assert float(shown) == pytest.approx(led.total / 2**20, rel=5e-3)
    assert main(["compare", "fp32", "bf16", *run, "--json"]) == 0
    memory = json.loads(capsys.readouterr().out)["memory"]
    assert [m["policy"] for m in memory] == ["fp32", "bf16"]
    assert memory[1]["total_bytes"] < memory[0]["total_bytes"] == memory[0]["fp32_bytes"]
