"""floatlab.torch.inspect: the per-layer report of a torch model, checked against ml_dtypes and
numpy casts of tensors computed independently (the layers run by hand, with retain_grad)."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import numpy.typing as npt
import pytest

from floatlab.formats import get_format

torch = pytest.importorskip("torch")

from floatlab.text import render  # noqa: E402
from floatlab.torch import KINDS, LayerReport, TensorShares, inspect  # noqa: E402
from floatlab.torch_hooks import GradientRecorder  # noqa: E402

FORMATS = ["fp16", "bf16", "float8_e4m3fn", "float8_e5m2"]
# the casts of the oracle: numpy's float16 and ml_dtypes' bfloat16 and float8 types, each a
# single round-to-nearest-even from float32 (the tensors here are float32)
CASTS: dict[str, Any] = {
    "fp16": np.float16,
    "bf16": ml_dtypes.bfloat16,
    "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
    "float8_e5m2": ml_dtypes.float8_e5m2,
}
Array = npt.NDArray[np.float32]


def mlp() -> Any:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def cnn() -> Any:
    torch.manual_seed(1)
    return torch.nn.Sequential(
        torch.nn.Conv2d(2, 4, 3),
        torch.nn.ReLU(inplace=True),  # an in-place layer after the conv: its output is overwritten
        torch.nn.Flatten(),
        torch.nn.Linear(4 * 4 * 4, 3),
    )


def mlp_batch() -> tuple[Any, Any]:
    g = torch.Generator().manual_seed(2)
    return torch.randn(64, 6, generator=g), torch.randint(0, 4, (64,), generator=g)


def cnn_batch() -> tuple[Any, Any]:
    g = torch.Generator().manual_seed(3)
    return torch.randn(16, 2, 6, 6, generator=g), torch.randint(0, 3, (16,), generator=g)


def tiny_loss(out: Any, target: Any) -> Any:
    # a loss scaled by 1e-6: its gradients sit around 2^-24, fp16's smallest subnormal
    return torch.nn.functional.cross_entropy(out, target) * 1e-6


def by_hand(model: Any, batch: tuple[Any, Any], loss_fn: Any) -> dict[tuple[str, str], Array]:
    """The tensors of each (layer, kind), computed without floatlab's hooks: the Sequential's
    layers called one by one, out of place, each output kept with retain_grad."""
    x, target = batch
    model.zero_grad(set_to_none=True)
    out: dict[tuple[str, str], Array] = {}
    kept = []
    h = x
    for name, layer in model.named_children():
        # the ReLU's values as the in-place layer computes them, on a fresh tensor
        h = torch.relu(h) if isinstance(layer, torch.nn.ReLU) else layer(h)
        h.retain_grad()
        kept.append((name, h))
        out[name, "activation"] = h.detach().numpy().copy()
    loss_fn(h, target).backward()
    for name, h in kept:
        out[name, "activation_grad"] = h.grad.numpy().copy()
    for name, layer in model.named_children():
        params = list(layer.parameters())
        if params:
            out[name, "weight"] = np.concatenate([p.detach().numpy().ravel() for p in params])
            out[name, "weight_grad"] = np.concatenate([p.grad.numpy().ravel() for p in params])
    model.zero_grad(set_to_none=True)
    return out


def oracle_counts(x: Array, fmt: str, scale: float = 1.0) -> tuple[int, int, int]:
    """(flushed, subnormal, overflow) of the finite nonzero values of ``x * scale`` cast to
    ``fmt`` by numpy / ml_dtypes (``scale`` a power of two: the product is exact in float64)."""
    f = get_format(fmt)
    x64 = x.astype(np.float64).ravel()
    live = np.isfinite(x64) & (x64 != 0)
    scaled = x64[live] * scale
    assert np.all(scaled.astype(np.float32) == scaled)  # exact in float32: one rounding below
    with np.errstate(over="ignore"):
        y = scaled.astype(np.float32).astype(CASTS[fmt]).astype(np.float64)
    flushed = int(np.count_nonzero(y == 0))
    finite = np.isfinite(y)
    subnormal = int(np.count_nonzero(finite & (y != 0) & (np.abs(y) < f.smallest_normal)))
    overflow = int(np.count_nonzero(~finite))  # inf, or NaN for e4m3fn, which has no inf
    return flushed, subnormal, overflow


def oracle_log2_scale(x: Array, fmt: str, headroom: int = 2) -> int:
    """The scale floatlab's advice should pick, by brute force: among the powers of two 2^k with
    ``amax * 2^k <= max / 2^headroom``, those with the fewest values flushed and then the fewest
    subnormal; of those the one closest to 1."""
    f = get_format(fmt)
    live = x[np.isfinite(x) & (x != 0)].astype(np.float64)
    if not live.size:
        return 0
    amax = float(np.max(np.abs(live)))
    k_max = math.floor(math.log2(f.max / 2**headroom / amax))
    while amax * 2.0**k_max > f.max / 2**headroom:  # (log2 in float64 may round up)
        k_max -= 1
    ks = range(min(0, k_max), k_max + 1)
    keys = {k: oracle_counts(x, fmt, 2.0**k)[:2] for k in ks}
    best = min(keys.values())
    return min(k for k in ks if keys[k] == best)


def check_against_oracle(rep: LayerReport, tensors: dict[tuple[str, str], Array], steps: int = 1) -> None:
    seen = {(r.layer, r.kind) for r in rep.rows}
    assert seen == set(tensors)
    for (layer, kind), x in tensors.items():
        for fmt in rep.formats:
            r = rep.row(layer, kind, fmt)
            assert r.values == x.size * steps
            assert r.nan == int(np.isnan(x).sum()) * steps
            assert r.inf == int(np.isinf(x).sum()) * steps
            finite = x[np.isfinite(x)]
            assert r.amax == (float(np.abs(finite).max()) if finite.size else 0.0)
            flushed, subnormal, overflow = oracle_counts(x, fmt)
            got = (r.flushed, r.subnormal, r.overflow)
            assert got == (flushed * steps, subnormal * steps, overflow * steps), (layer, kind, fmt)


# ---- the shares, against the casts ----------------------------------------------------------
def test_mlp_shares_match_the_casts_of_the_oracle() -> None:
    model, batch = mlp(), mlp_batch()
    expected = by_hand(model, batch, tiny_loss)
    rep = inspect(model, batch, tiny_loss, FORMATS)
    assert rep.layers == ["0", "1", "2"]
    assert rep.formats == tuple(FORMATS)
    check_against_oracle(rep, expected)
    # the ReLU owns no parameters: activations only
    assert {r.kind for r in rep.rows if r.layer == "1"} == {"activation", "activation_grad"}


def test_cnn_with_an_in_place_relu_matches_the_oracle() -> None:
    model, batch = cnn(), cnn_batch()
    expected = by_hand(model, batch, tiny_loss)
    rep = inspect(model, batch, tiny_loss, FORMATS)
    assert rep.layers == ["0", "1", "2", "3"]
    assert rep.row("0", "weight", "fp16").module == "Conv2d"
    # the conv's activation is its output before the in-place ReLU overwrote it
    assert np.any(expected["0", "activation"] < 0)
    check_against_oracle(rep, expected)


def test_fp16_flushes_the_activation_gradients_that_bf16_keeps() -> None:
    model, batch = mlp(), mlp_batch()
    expected = by_hand(model, batch, tiny_loss)
    rep = inspect(model, batch, tiny_loss, ["fp16", "bf16"])
    g = expected["0", "activation_grad"]
    live = np.count_nonzero(g)
    # the oracle's own threshold: RNE flushes |x| <= 2^-25, half fp16's smallest subnormal
    below = int(np.count_nonzero((g != 0) & (np.abs(g) <= 2.0**-25)))
    assert below > 0.1 * live  # a measurable share...
    fp16, bf16 = rep.row("0", "activation_grad", "fp16"), rep.row("0", "activation_grad", "bf16")
    assert fp16.flushed == below
    assert fp16.share("flushed") > 0.05
    assert bf16.flushed == bf16.subnormal == bf16.overflow == 0  # ...that bf16 keeps
    # and the advised scale saves them
    assert fp16.log2_scale > 0
    assert fp16.scaled_flushed == 0
    df = rep.to_frame()
    row = df[(df.layer == "0") & (df.kind == "activation_grad") & (df.format == "fp16")]
    assert row["flushed"].item() == pytest.approx(below / g.size)
    assert row["lost_scaled"].item() == 0.0


# ---- the scale ------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["fp16", "float8_e4m3fn", "float8_e5m2"])
def test_advised_scale_is_the_brute_force_rule_and_what_it_leaves(fmt: str) -> None:
    model, batch = mlp(), mlp_batch()
    expected = by_hand(model, batch, tiny_loss)
    rep = inspect(model, batch, tiny_loss, [fmt])
    for (layer, kind), x in expected.items():
        r = rep.row(layer, kind, fmt)
        k = oracle_log2_scale(x, fmt)
        assert r.log2_scale == k, (layer, kind)
        assert (r.scaled_flushed, r.scaled_subnormal, r.scaled_overflow) == oracle_counts(x, fmt, 2.0**k)


def test_weights_that_overflow_fp8_are_scaled_down() -> None:
    model, batch = mlp(), mlp_batch()
    with torch.no_grad():
        model[0].weight.mul_(1e3)  # up to ~400: beyond float8_e4m3fn's 448 once scaled by 4
        model[0].weight[0, 0] = 1000.0
    rep = inspect(model, batch, tiny_loss, ["float8_e4m3fn"])
    r = rep.row("0", "weight", "float8_e4m3fn")
    assert r.overflow == 1
    assert r.log2_scale < 0
    assert r.scaled_overflow == 0
    x = np.concatenate([p.detach().numpy().ravel() for p in model[0].parameters()])
    assert r.log2_scale == oracle_log2_scale(x, "float8_e4m3fn")


def test_the_scale_agrees_with_the_gradient_recorders_advice() -> None:
    model, batch = mlp(), mlp_batch()
    rec = GradientRecorder(model)
    with rec.attached():
        model.zero_grad(set_to_none=True)
        tiny_loss(model(batch[0]), batch[1]).backward()
    rep = inspect(model, batch, tiny_loss, ["fp16"])
    for layer in ("0", "1", "2"):
        advice = rec.activation_grads[f"{layer}.grad_output"].recommend_scale("fp16")
        assert rep.row(layer, "activation_grad", "fp16").log2_scale == advice.log2_scale
    w = rec.layers["0.weight"] + rec.layers["0.bias"]
    assert rep.row("0", "weight_grad", "fp16").log2_scale == w.recommend_scale("fp16").log2_scale


# ---- NaN and inf ------------------------------------------------------------------------------
def test_nan_and_inf_are_counted_never_raised() -> None:
    model, (x, target) = mlp(), mlp_batch()
    with torch.no_grad():
        model[2].weight[0, 0] = float("nan")
        model[2].weight[1, 1] = float("inf")
    x = x.clone()
    x[0, 0] = float("inf")  # one sample's activations blow up in the first layer
    expected = by_hand(model, (x, target), tiny_loss)
    rep = inspect(model, (x, target), tiny_loss, FORMATS)
    w = rep.row("2", "weight", "fp16")
    assert (w.nan, w.inf) == (1, 1)
    a = rep.row("0", "activation", "bf16")
    assert a.inf == int(np.isinf(expected["0", "activation"]).sum()) > 0
    assert rep.row("2", "activation", "fp16").nan > 0
    check_against_oracle(rep, expected)
    text = render(rep, "weight")
    assert "nan" in text.splitlines()[2]
    df = rep.to_frame()
    assert {"nan", "inf"} <= set(df.columns)
    assert df["nan"].sum() > 0


# ---- the outputs ------------------------------------------------------------------------------
def test_frame_has_one_row_per_layer_kind_and_format() -> None:
    model, batch = mlp(), mlp_batch()
    rep = inspect(model, batch, tiny_loss, FORMATS)
    df = rep.to_frame()
    # layers 0 and 2 have 4 kinds, the ReLU 2
    assert len(df) == (4 + 2 + 4) * len(FORMATS) == len(rep.rows)
    assert not df.duplicated(["layer", "kind", "format"]).any()
    for col in ("flushed", "subnormal", "overflow", "lost", "lost_scaled", "zeros"):
        assert df[col].between(0, 1).all()
    assert (df["lost"] == df["flushed"] + df["overflow"]).all()
    assert (df["scale"] == np.ldexp(1.0, df["log2_scale"].to_numpy())).all()
    assert list(df["kind"].unique()) == list(KINDS)


def test_text_report() -> None:
    model, batch = mlp(), mlp_batch()
    rep = inspect(model, batch, tiny_loss, ["fp16", "bf16"])
    text = str(rep)
    assert text == render(rep)
    assert text.splitlines()[0].startswith("3 layers over 1 step, in fp16, bf16 (rne)")
    for kind in KINDS:
        assert f"{kind}: " in text
    only = render(rep, "activation_grad").splitlines()
    assert only[1].startswith("activation_grad: ")
    assert len(only) == 3 + 3 * 2  # title, kind, header, then 3 layers x 2 formats
    r = rep.row("0", "activation_grad", "fp16")
    assert f"2^{r.log2_scale}" in only[3]
    assert "LayerReport(3 layers" in repr(rep)


def test_heat_map_is_written(tmp_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    model, batch = cnn(), cnn_batch()
    rep = inspect(model, batch, tiny_loss, FORMATS)
    path = tmp_path / "heat.png"
    fig = rep.plot(path)
    assert path.stat().st_size > 0
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    grid = np.asarray(fig.axes[0].images[0].get_array())
    df = rep.to_frame()
    g = df[df.kind == "activation_grad"].pivot(index="layer", columns="format", values="lost")
    assert np.array_equal(grid, g.loc[rep.layers, FORMATS].to_numpy())
    # weights: the parameter-free ReLU and Flatten have no row
    fig = rep.plot(kind="weight")
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels == ["0 (Conv2d)", "3 (Linear)"]
    svg = tmp_path / "heat.svg"
    rep.plot(svg, kind="activation")
    assert svg.read_text().lstrip().startswith("<?xml")


# ---- steps, optimizer, hooks ------------------------------------------------------------------
def test_steps_without_an_optimizer_leave_the_weights() -> None:
    model, batch = mlp(), mlp_batch()
    before = [p.detach().clone() for p in model.parameters()]
    expected = by_hand(model, batch, tiny_loss)
    rep = inspect(model, batch, tiny_loss, ["fp16"], steps=3)
    assert rep.steps == 3
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    check_against_oracle(rep, expected, steps=3)  # three identical passes: three times the counts
    assert not model[0]._forward_hooks
    # .grad holds the last pass's gradient, not the sum of three
    assert np.array_equal(model[2].weight.grad.numpy().ravel(), expected["2", "weight_grad"][: 4 * 32])


def test_an_optimizer_steps_between_passes() -> None:
    model, twin, batch = mlp(), mlp(), mlp_batch()  # the twin: the same weights, stepped by hand
    rep = inspect(
        model, batch, tiny_loss, ["fp16"], steps=2, optimizer=torch.optim.SGD(model.parameters(), lr=1e5)
    )
    twin_opt = torch.optim.SGD(twin.parameters(), lr=1e5)
    passes = []
    for _ in range(2):
        passes.append(by_hand(twin, batch, tiny_loss))
        twin.zero_grad()
        tiny_loss(twin(batch[0]), batch[1]).backward()
        twin_opt.step()
    # the model took two steps, as the twin did
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), twin.parameters(), strict=True))
    assert not np.array_equal(passes[0]["0", "weight"], passes[1]["0", "weight"])
    for kind in ("weight", "activation_grad"):
        r = rep.row("0", kind, "fp16")
        xs = [p["0", kind] for p in passes]
        assert r.values == sum(x.size for x in xs)
        assert r.amax == max(float(np.abs(x).max()) for x in xs)
        assert r.flushed == sum(oracle_counts(x, "fp16")[0] for x in xs)
        assert r.subnormal == sum(oracle_counts(x, "fp16")[1] for x in xs)
        assert r.log2_scale == oracle_log2_scale(np.concatenate(xs), "fp16")


def test_tuple_inputs_and_no_target() -> None:
    module: Any = torch.nn.Module

    class Pair(module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.Linear(3, 2)
            self.b = torch.nn.Linear(3, 2)
            self.gain = torch.nn.Parameter(torch.full((2,), 2.0))  # owned by a module with children

        def forward(self, x: Any, y: Any) -> Any:
            return (self.a(x) + self.b(y)) * self.gain

    torch.manual_seed(4)
    model = Pair()
    x, y = torch.randn(5, 3), torch.randn(5, 3)
    rep = inspect(model, ((x, y), None), lambda out: out.square().mean(), ["fp16"])
    assert rep.layers == ["", "a", "b"]
    assert rep.row("", "weight", "fp16").module == "Pair"
    assert {r.kind for r in rep.rows if r.layer == ""} == {"weight", "weight_grad"}
    assert "(model)" in render(rep, "weight")


def test_a_frozen_model_gets_forward_kinds_only() -> None:
    model, batch = mlp(), mlp_batch()
    model.requires_grad_(False)  # nothing to differentiate: no backward pass, no error
    everything = by_hand(mlp(), batch, tiny_loss)  # the same weights, not frozen
    expected = {key: x for key, x in everything.items() if key[1] in ("weight", "activation")}
    rep = inspect(model, batch, tiny_loss, ["fp16", "float8_e4m3fn"])
    assert {r.kind for r in rep.rows} == {"weight", "activation"}
    check_against_oracle(rep, expected)


def test_importing_floatlab_torch_leaves_pandas_until_a_report_asks_for_it() -> None:
    probe = "import sys, floatlab.torch; print('torch' in sys.modules, 'pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False"]


# ---- bad input --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"steps": 0}, "steps=0: expected"),
        ({"steps": 1.5}, "steps=1.5: expected"),
        ({"formats": []}, r"formats=\[\]: expected"),
        ({"formats": ["fp17"]}, "fp17"),
        ({"rounding": "stochastic"}, "rounding='stochastic': expected a deterministic"),
        ({"rounding": "nearest"}, "rounding='nearest'"),
        ({"headroom": 99}, "headroom=99"),
    ],
)
def test_bad_arguments(kwargs: dict[str, Any], message: str) -> None:
    model, batch = mlp(), mlp_batch()
    with pytest.raises(ValueError, match=message):
        inspect(model, batch, tiny_loss, **kwargs)
    assert not model[0]._forward_hooks


def test_bad_model_batch_and_kind() -> None:
    batch = mlp_batch()
    with pytest.raises(ValueError, match=r"model of type list: expected a torch\.nn\.Module"):
        inspect([], batch, tiny_loss)
    with pytest.raises(ValueError, match=r"batch of type Tensor: expected a pair \(inputs, target\)"):
        inspect(mlp(), batch[0], tiny_loss)
    rep = inspect(mlp(), batch, tiny_loss, ["fp16"])
    with pytest.raises(ValueError, match="kind='grad': expected one of weight, activation"):
        rep.plot(kind="grad")
    with pytest.raises(ValueError, match="kind='grad'"):
        render(rep, "grad")
    with pytest.raises(ValueError, match="layer '9', kind 'weight', format fp16: not in the report"):
        rep.row("9", "weight", "fp16")
    with pytest.raises(ValueError, match="field 'lots'"):
        rep.rows[0].share("lots")


def test_a_failing_loss_removes_the_hooks() -> None:
    model, batch = mlp(), mlp_batch()

    def broken(out: Any, target: Any) -> Any:
        raise RuntimeError("loss exploded")

    with pytest.raises(RuntimeError, match="loss exploded"):
        inspect(model, batch, broken)
    assert not any(m._forward_hooks for m in model.modules())


def test_rows_by_hand() -> None:
    r = TensorShares("x", "Linear", "weight", "fp16", 0, 0, 0, 0, 0.0, 0, 0, 0, 0, 0, 0, 0)
    assert r.share("flushed") == 0.0  # no values: no share, no division by zero
    rep = LayerReport([r], formats=["half"], steps=1)
    assert rep.formats == ("fp16",)
    assert "activation: " not in render(rep)
    assert "(no tensors of this kind)" in render(rep, "activation")


def test_a_model_on_the_meta_device_is_refused_in_one_line() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(6, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to("meta")
    with pytest.raises(ValueError, match="the meta device") as e:
        inspect(model, mlp_batch(), tiny_loss)
    assert "'0.weight'" in str(e.value)
    assert "\n" not in str(e.value)
    assert not any(m._forward_hooks for m in model.modules())


@pytest.mark.parametrize("kind", [RuntimeError, KeyboardInterrupt])
def test_an_exception_of_any_kind_in_forward_leaves_the_model_as_it_was(kind: type[BaseException]) -> None:
    from torch_twins import Raising, model_state, same_state

    model = mlp()
    model.append(Raising(kind))
    before = model_state(model)
    with pytest.raises(kind):
        inspect(model, mlp_batch(), tiny_loss, steps=2)
    assert same_state(model_state(model), before)
