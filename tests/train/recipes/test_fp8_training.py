"""The fp8 recipes inside the trainer: the policies, the linear layers' GEMMs, the per-operand
record, checkpoints, evaluation, the accumulator and the command line.

Oracles: a float64 transcription of a per-tensor scaled linear layer with ml_dtypes' saturating
fp8 casts; exact rational sums (fractions.Fraction) for the narrow accumulator; the trainer's
own straight run for a resumed one (bit for bit).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import floatlab as fl
import floatlab.cli as cli
import floatlab.train as ft
from floatlab.cli import train_cmds
from floatlab.formats import BF16
from floatlab.rounding import round_rational
from floatlab.train.models import linear_forward
from floatlab.train.precision import Precision
from floatlab.train.precision.policy import get_policy
from floatlab.train.recipes import OperandScaler

Main = Callable[[list[str]], int]
Arr = np.ndarray[Any, Any]

SMALL_LM = dict(model="transformer", data="text", layers=1, d_model=32, heads=2, context=16, batch_size=8)


@pytest.fixture(scope="module")
def text_data() -> Any:
    return ft.load_text(context=16)


@pytest.fixture
def main(monkeypatch: pytest.MonkeyPatch) -> Main:
    if train_cmds not in cli.COMMANDS:
        monkeypatch.setattr(cli, "COMMANDS", (*cli.COMMANDS, train_cmds))
    return cli.main


def _trainer(precision: str, data: Any, steps: int = 4, **policy: Any) -> ft.Trainer:
    cfg = ft.TrainConfig(precision=precision, steps=steps, overrides=policy, **SMALL_LM)  # type: ignore[arg-type]
    return ft.Trainer.from_config(cfg, data)


# ---- the policies -----------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["tensorwise", "delayed", "blockwise"])
def test_fp8_policies_are_bf16_with_fp8_linear_gemms(kind: str) -> None:
    p = get_policy(f"fp8-{kind}")
    assert p.fp8 is not None
    assert p.fp8.kind == kind
    assert (p.forward.name, p.backward.name, p.master_weights, p.loss_scaling) == (
        "bf16",
        "bf16",
        True,
        "none",
    )
    assert "linear GEMMs in fp8" in p.describe()
    assert ft.Policy.from_dict(json.loads(json.dumps(p.to_dict()))) == p


def test_mixed_fp8_is_described_as_unscaled() -> None:
    assert "no per-tensor scaling" in get_policy("mixed-fp8").describe()


def test_recipe_knobs_pass_through_replace() -> None:
    p = get_policy("fp8-delayed").replace(amax_history=16, margin=2, fp8_format="e4m3")
    assert p.fp8 is not None
    assert (p.fp8.amax_history, p.fp8.margin, p.fp8.fp8_format) == (16, 2, "e4m3")
    with pytest.raises(ValueError, match=r"amax_history=16: policy mixed-fp16 has no fp8 recipe"):
        get_policy("mixed-fp16").replace(amax_history=16)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"promote_every": 0, "accumulate": ""}, None),
        ({"promote_every": -1, "accumulate": "acc14"}, r"promote_every=-1: expected a number of products"),
        ({"promote_every": 128}, r"promote_every=128: promotion needs a narrow accumulator"),
        ({"accumulate": "acc99"}, r"acc99"),
        ({"amax_history": 0}, r"amax_history=0"),
        ({"margin": -1}, r"margin=-1"),
        ({"fp8_format": "e5m2"}, r"e5m2"),
    ],
)
def test_bad_recipe_and_accumulator_settings(changes: dict[str, Any], message: str | None) -> None:
    if message is None:
        get_policy("fp8-delayed").replace(**changes)
        return
    with pytest.raises(ValueError, match=message):
        get_policy("fp8-delayed").replace(**changes)


# ---- the linear layer's GEMM --------------------------------------------------------------------
FP8_MAX = {ml_dtypes.float8_e4m3fn: 448.0, ml_dtypes.float8_e5m2: 57344.0}


def _fp8(x: Arr, dtype: Any) -> Arr:
    """The saturating cast to fp8 (ml_dtypes, from float32: exact inputs here), back as float64."""
    top = FP8_MAX[dtype]
    return np.clip(x.astype(np.float32), -top, top).astype(dtype).astype(np.float64)


def test_tensorwise_linear_forward_matches_a_float64_transcription() -> None:
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((16, 40)) * 3e-3).astype(np.float32)
    W = (rng.standard_normal((40, 8)) * 20).astype(np.float32)
    P = Precision("fp8-tensorwise")
    y = linear_forward(x, W, None, P, site="fc")
    sx = np.float32(448.0) / np.float32(np.abs(x).max())
    sw = np.float32(448.0) / np.float32(np.abs(W).max())
    ref = (_fp8(x * sx, ml_dtypes.float8_e4m3fn) @ _fp8(W * sw, ml_dtypes.float8_e4m3fn)) / (
        float(sx) * float(sw)
    )
    # the float32 sum and epilogue differ from float64 by far less than bf16's half ulp; the
    # result is stored in bf16 once: at most one bf16 ulp apart
    ulp = 2.0 ** (np.floor(np.log2(np.abs(ref))) - 7)
    assert np.all(np.abs(y - ref) <= ulp)
    stats = P.end_step()
    assert sorted(stats) == ["fc.input", "fc.weight"]
    assert stats["fc.input"]["scale"] == pytest.approx(float(sx), rel=1e-7)


def test_a_layer_without_a_site_is_an_ordinary_gemm() -> None:
    rng = np.random.default_rng(1)
    x, W = rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((8, 3)).astype(np.float32)
    P = Precision("fp8-tensorwise")
    np.testing.assert_array_equal(linear_forward(x, W, None, P), P.matmul(x, W, P.fwd))
    assert P.end_step() == {}


def _exact_sequential(a: Arr, b: Arr, p: int, every: int) -> Arr:
    """Sum k by k, each partial sum rounded to p significant bits (fp32's exponent range),
    added into an fp32 total every ``every`` products: in exact rationals."""
    from floatlab.formats import FP32, FloatFormat

    acc_fmt = FloatFormat(exponent_bits=8, mantissa_bits=p - 1, name=f"acc{p}")

    def rounded(v: Fraction, fmt: FloatFormat) -> Fraction:
        exact = fl.decode(round_rational(v, fmt)[0], fmt).exact
        assert exact is not None
        return Fraction(exact)

    m, k = a.shape
    n = b.shape[1]
    out = np.zeros((m, n))
    for i in range(m):
        for j in range(n):
            total, part = Fraction(0), Fraction(0)
            for t in range(k):
                part = rounded(part + Fraction(float(a[i, t])) * Fraction(float(b[t, j])), acc_fmt)
                if (t + 1) % every == 0 or t == k - 1:
                    total = rounded(total + part, FP32)
                    part = Fraction(0)
            out[i, j] = float(total)
    return out


def test_policy_accumulator_in_linear_layers_matches_exact_sums() -> None:
    rng = np.random.default_rng(2)
    P = Precision(get_policy("fp32").replace(accumulate="acc14", promote_every=8))
    a = P.cast(rng.uniform(0, 1, (3, 37)).astype(np.float32), BF16)
    b = P.cast(rng.uniform(0, 1, (37, 2)).astype(np.float32), BF16)
    got = linear_forward(a, b, None, P, site="fc")
    np.testing.assert_array_equal(got, _exact_sequential(a, b, 14, 8).astype(np.float32))


def test_tensorwise_with_a_14_bit_accumulator_matches_exact_sums() -> None:
    # fp8 operands scaled per tensor, summed in 14 bits and promoted every 8 products, the
    # epilogue's inverse scales, one rounding to bf16
    rng = np.random.default_rng(3)
    x = rng.uniform(0, 2, (3, 37)).astype(np.float32)
    W = rng.uniform(0, 0.5, (37, 2)).astype(np.float32)
    P = Precision(get_policy("fp8-tensorwise").replace(accumulate="acc14", promote_every=8))
    got = linear_forward(x, W, None, P, site="fc")
    sx = np.float32(448.0) / np.float32(np.abs(x).max())
    sw = np.float32(448.0) / np.float32(np.abs(W).max())
    qx, qw = _fp8(x * sx, ml_dtypes.float8_e4m3fn), _fp8(W * sw, ml_dtypes.float8_e4m3fn)
    acc = _exact_sequential(qx, qw, 14, 8).astype(np.float32) * ((np.float32(1) / sx) * (np.float32(1) / sw))
    want = acc.astype(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_array_equal(got, want)


def test_block_scaling_promotes_once_a_tile() -> None:
    with pytest.raises(ValueError, match=r"promote_every=64: block scaling promotes once a tile"):
        get_policy("fp8-blockwise").replace(accumulate="acc14", promote_every=64)
    p = get_policy("fp8-blockwise").replace(accumulate="acc14", promote_every=128)
    assert "accumulate in acc14, promoted to fp32 every 128" in p.describe()


# ---- in the trainer -----------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["tensorwise", "delayed", "blockwise"])
def test_every_linear_operand_is_recorded_each_step(kind: str, text_data: Any) -> None:
    tr = _trainer(f"fp8-{kind}", text_data, steps=3)
    h = tr.run()
    layers = ["h0.W1", "h0.W2", "h0.Wo", "h0.Wqkv"]
    assert sorted(h.operands) == sorted(f"{s}.{r}" for s in layers for r in ("input", "weight", "grad"))
    for cols in h.operands.values():
        assert sorted(cols) == ["amax", "flushed", "saturated", "scale", "subnormal"]
        assert all(len(v) == h.n_steps == 3 for v in cols.values())
        assert all(np.isfinite(cols["scale"]))
        assert min(cols["scale"]) > 0
    if kind == "delayed":  # TE starts every scale at 1; the next comes from the recorded amax
        amax = h.operands["h0.W1.weight"]["amax"]
        assert h.operands["h0.W1.weight"]["scale"][:2] == [1.0, pytest.approx(448.0 / amax[0], rel=1e-6)]
    back = ft.History.from_dict(json.loads(json.dumps(h.to_dict())))
    assert back.operands == h.operands


@pytest.mark.parametrize("kind", ["tensorwise", "delayed"])
def test_reused_casts_equal_fresh_ones(kind: str, text_data: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # the backward reuses the forward's fp8 copy of x and W (transposed) and of dy: casting them
    # afresh with the step's scale gives the same bits
    a = _trainer(f"fp8-{kind}", text_data, steps=3)
    a.run()
    monkeypatch.setattr(OperandScaler, "_reuse", staticmethod(lambda step, x32: None))
    b = _trainer(f"fp8-{kind}", text_data, steps=3)
    b.run()
    for k in a.params:
        np.testing.assert_array_equal(a.params[k], b.params[k])
    assert a.history.operands == b.history.operands


def test_evaluation_leaves_the_recipe_state_alone(text_data: Any) -> None:
    # the same run with an evaluation after every step trains exactly as the one without
    a = _trainer("fp8-delayed", text_data, steps=4, amax_history=3)
    b = _trainer("fp8-delayed", text_data, steps=4, amax_history=3)
    a.run()
    b.eval_every = 1
    b.run()
    for k in a.params:
        np.testing.assert_array_equal(a.params[k], b.params[k])
    assert a.history.operands == b.history.operands


def test_resume_under_delayed_scaling_is_bit_for_bit(text_data: Any, tmp_path: Path) -> None:
    straight = _trainer("fp8-delayed", text_data, steps=6, amax_history=4)
    straight.run()
    first = _trainer("fp8-delayed", text_data, steps=3, amax_history=4)
    first.run()
    path = first.save(tmp_path / "ck.npz")
    resumed = _trainer("fp8-delayed", text_data, steps=6, amax_history=4)
    resumed.load(path)
    resumed.run()
    for k in straight.params:
        np.testing.assert_array_equal(straight.params[k], resumed.params[k])
    assert resumed.history.operands == straight.history.operands
    assert resumed.P.scaling is not None
    assert straight.P.scaling is not None
    assert resumed.P.scaling.state_dict()["steps"] == straight.P.scaling.state_dict()["steps"] == 6


def test_a_checkpoint_without_fp8_state_is_refused(text_data: Any) -> None:
    tr = _trainer("fp8-delayed", text_data, steps=1)
    state = tr.state_dict()
    state["scaling"] = None
    with pytest.raises(ValueError, match="lacks its recipe's scaling state"):
        _trainer("fp8-delayed", text_data, steps=1).load_state_dict(state)


# ---- the command line -----------------------------------------------------------------------------
def test_train_fp8_json_has_per_operand_lists(main: Main, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["train", "--model", "transformer", "--data", "text", "--layers", "1", "--d-model", "32"]
    argv += [
        "--context",
        "16",
        "--steps",
        "2",
        "--precision",
        "fp8-delayed",
        "--amax-history",
        "8",
        "-q",
        "--json",
    ]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    ops = data["operands"]
    assert "h0.W1.grad" in ops
    assert all(len(ops[k]["amax"]) == len(ops[k]["scale"]) == 2 for k in ops)
    assert data["policy"]["recipe"]["amax_history"] == 8


def test_train_plot_draws_the_operands(
    main: Main, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    plot = tmp_path / "run.png"
    argv = ["train", "--model", "transformer", "--data", "text", "--layers", "1", "--d-model", "32"]
    argv += ["--context", "16", "--steps", "2", "--precision", "fp8-tensorwise", "-q", "--no-color"]
    assert main([*argv, "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    assert plot.exists()
    assert (tmp_path / "run-fp8.png").exists()
    assert "GEMM operands  12, scales" in out


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--precision", "fp8-delayed", "--amax-history", "0"], "amax_history=0"),
        (["--precision", "fp8-delayed", "--margin", "-1"], "margin=-1"),
        (["--precision", "fp8-delayed", "--fp8-format", "e5m2"], "e5m2"),
        (["--precision", "fp8-delayed", "--amax-compute-algo", "mean"], "mean"),
        (
            ["--precision", "fp8-delayed", "--accumulate", "acc14", "--promote-every", "0"],
            "--promote-every 0",
        ),
        (["--precision", "fp32", "--accumulate", "acc14", "--promote-every", "-3"], "--promote-every -3"),
        (["--precision", "fp32", "--promote-every", "128"], "needs a narrow accumulator"),
        (["--precision", "fp32", "--accumulate", "fp99"], "fp99"),
        (["--precision", "mixed-fp16", "--margin", "1"], "has no fp8 recipe"),
        (["--precision", "fp8-sideways"], "fp8-sideways"),
    ],
)
def test_bad_fp8_options_are_one_line(
    main: Main, capsys: pytest.CaptureFixture[str], args: list[str], words: str | None
) -> None:
    base = ["train", "--data", "underflow", "--epochs", "1", "--hidden", "8", "-q"]
    code = main([*base, *args])
    err = capsys.readouterr().err
    if words is None:
        assert code == 0
        return
    assert code == 2
    assert words in err
    assert err.count("\n") == 1
    assert "Traceback" not in err
