"""Policies and the storage points of a step, against numpy / ml_dtypes casts and exact arithmetic."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from floatlab.formats import BF16, FP16, FP32, get_format
from floatlab.train.config import TrainConfig
from floatlab.train.precision import Precision, gemm
from floatlab.train.precision.policy import FP32_OPS, Policy, get_policy, parse_fp32_ops, policy_names
from floatlab.train.precision.presets import preset_names
from floatlab.train.recipes import Fp8Recipe, MicroRecipe

Arr = np.ndarray[Any, Any]
ML = {
    "fp16": np.float16,
    "bf16": ml_dtypes.bfloat16,
    "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
    "float8_e5m2": ml_dtypes.float8_e5m2,
}


def oracle(x: Arr, fmt: str) -> Arr:
    """float32 -> fmt -> float32 through numpy / ml_dtypes: one correctly rounded cast."""
    with np.errstate(over="ignore"):  # overflow to inf is what the format does too
        return np.asarray(x, np.float32).astype(ML[fmt]).astype(np.float32)


def sample(seed: int, n: int = 4000) -> Arr:
    rng = np.random.default_rng(seed)
    # magnitudes from deep subnormal to overflow for every format here
    return (rng.standard_normal(n) * 2.0 ** rng.integers(-30, 18, n)).astype(np.float32)


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "float8_e4m3fn", "float8_e5m2"])
def test_activation_and_gradient_casts_match_ml_dtypes(fmt: str) -> None:
    policy = Policy("t", forward=get_format(fmt), backward=get_format(fmt))
    P = Precision(policy)
    x = sample(1)
    if fmt == "float8_e4m3fn":
        x = x[np.abs(x) < 448]  # beyond, ml_dtypes gives NaN and so does the format: compare finite part
    np.testing.assert_array_equal(P.act(x), oracle(x, fmt))
    np.testing.assert_array_equal(P.grad(x), oracle(x, fmt))


def test_fp32_policy_rounds_nothing() -> None:
    P = Precision("fp32")
    x = sample(2)
    assert P.act(x) is x
    assert P.grad(x) is x
    w = {"W": x}
    assert P.weights(w)["W"] is x


def test_flushed_counts_match_an_oracle() -> None:
    P = Precision("fp16")
    x = sample(3)
    with P.counting_flushes():
        P.grad(x)
        P.grad(x[:100])
    ref = oracle(x, "fp16")
    flushed = int(np.sum((x != 0) & (ref == 0))) + int(np.sum((x[:100] != 0) & (ref[:100] == 0)))
    assert P.grad_flushed == flushed > 0
    assert P.grad_values == int(np.count_nonzero(x)) + int(np.count_nonzero(x[:100]))
    # outside the block nothing is counted
    P.grad(x)
    assert P.grad_flushed == flushed


def test_gemm_exact_cases() -> None:
    # integers times powers of two: every product and partial sum is exact in fp32 and in
    # float64, so the only rounding is the final one, which numpy's float64 -> float16 cast does once
    rng = np.random.default_rng(4)
    a = rng.integers(-64, 64, (7, 96)).astype(np.float64) * 2.0**-3
    b = rng.integers(-64, 64, (96, 5)).astype(np.float64) * 2.0**-4
    exact = a @ b
    got = gemm(a.astype(np.float32), b.astype(np.float32), "fp16")
    np.testing.assert_array_equal(got, exact.astype(np.float16).astype(np.float32))
    assert np.any(exact.astype(np.float16) != exact)  # the output rounding did something


def test_gemm_rounds_inputs_once_from_float64() -> None:
    # 1 + 3*2^-9 - 2^-52 in float64: rounded once to bf16 it is 1.0078125 (below the tie);
    # through float32 it would first become the tie 1 + 3*2^-9 and then round up to 1.015625
    v = 1 + 3 * 2.0**-9 - 2.0**-52
    got = gemm(np.array([[v]]), np.array([[1.0]]), "bf16")
    assert float(got[0, 0]) == 1.0078125
    assert float(Fraction(v)) == v


def test_gemm_products_are_exact_and_accumulate_in_fp32() -> None:
    # 4096 copies of fp16(1e-4): an fp16 accumulator would stall; fp32 accumulation does not
    a = np.ones((1, 4096), np.float32)
    b = np.full((4096, 1), 1e-4, np.float32)
    one = float(np.float16(1e-4))
    exact = Fraction(4096) * Fraction(one)
    got = float(gemm(a, b, "fp16", "fp32")[0, 0])
    assert got == float(exact)  # 4096 * a 2^k-scaled fp16 value: every partial sum exact in fp32
    # the fp16 product of two fp16 values has 22 significant bits: exact in fp32
    x, y = np.float16(1.0009765625), np.float16(0.99951171875)
    prod = gemm(np.array([[x]], np.float32), np.array([[y]], np.float32), "fp16", "fp32")[0, 0]
    assert Fraction(float(prod)) == Fraction(float(x)) * Fraction(float(y))


def test_gemm_bias_and_alpha() -> None:
    a = np.array([[1.0, 2.0]], np.float32)
    b = np.array([[3.0], [4.0]], np.float32)
    out = gemm(a, b, "fp16", bias=np.array([0.5], np.float32), alpha=0.25)
    assert float(out[0, 0]) == 11 * 0.25 + 0.5
    with pytest.raises(ValueError, match="fit in fp32"):
        gemm(a, b, "fp64")


def _pairwise_f16(x: Arr) -> Arr:
    """The tree reduction s[i] += s[i + h] with numpy's float16 arithmetic (correctly rounded)."""
    s = [np.float16(v) for v in x]
    while len(s) > 1:
        h = len(s) // 2
        nxt = [np.float16(s[i] + s[i + h]) for i in range(h)]
        s = nxt + s[2 * h :]
    out: Arr = np.asarray(s[0], np.float32)
    return out


@pytest.mark.parametrize("n", [1, 2, 7, 64, 100])
def test_low_precision_sum(n: int) -> None:
    rng = np.random.default_rng(n)
    x = oracle(rng.standard_normal(n).astype(np.float32) * 100, "fp16")
    P = Precision("fp16")
    got = P.low_sum(x[:, None].repeat(2, 1), 0, FP16)
    assert got.shape == (2,)
    assert float(got[0]) == float(_pairwise_f16(x))


def test_low_precision_sum_loses_small_addends() -> None:
    x = np.array([2048.0] + [1.0] * 15, np.float32)
    # pairwise in fp16: 2048 + 1 ties to 2048 (ulp 2), the ones sum exactly among themselves
    assert float(Precision("fp16").low_sum(x, 0, FP16)) == float(_pairwise_f16(x)) == 2062.0
    assert (
        float(Precision("fp16").rounder(FP16, "sum").sum(x, 0)) == 2062.0
    )  # fp16 policy: no fp32 reductions
    assert float(Precision("mixed-fp16").rounder(FP16, "norm").sum(x, 0)) == 2063.0


def _tree_oracle(x: Arr, axis: int, fmt: str) -> Arr:
    """The same tree with each sum formed in float64 and rounded through float32 into ``fmt`` by
    numpy / ml_dtypes: 53 >= 2 * 24 + 2 and 24 >= 2 * 11 + 2, so both roundings are one."""
    s = np.moveaxis(np.asarray(x, np.float64), axis, 0)
    while s.shape[0] > 1:
        h = s.shape[0] // 2
        with np.errstate(over="ignore", invalid="ignore"):
            top = oracle((s[:h] + s[h : 2 * h]).astype(np.float32), fmt).astype(np.float64)
        s = np.concatenate([top, s[2 * h :]])
    out: Arr = s[0].astype(np.float32)
    return out


def _same_bits(a: Arr, b: Arr) -> bool:
    """Equal bit for bit, any NaN equal to any NaN (-0 and +0 differ)."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    nan = np.isnan(a)
    return (
        a.shape == b.shape
        and bool(np.array_equal(nan, np.isnan(b)))
        and bool(np.array_equal(a.view(np.uint32)[~nan], b.view(np.uint32)[~nan]))
    )


@pytest.mark.parametrize("fmt", ["fp16", "bf16"])
def test_pairwise_sums_are_the_tree_of_correctly_rounded_sums(fmt: str) -> None:
    from floatlab.rounding import pairwise_sums

    rng = np.random.default_rng(7)
    f = get_format(fmt)
    # values of the format from its subnormals to its largest (sums overflow), both zeros, inf, NaN
    x = (rng.standard_normal(3 * 37 * 5) * 2.0 ** rng.integers(f.emin - 8, f.emax + 1, 3 * 37 * 5)).astype(
        np.float32
    )
    x = oracle(x, fmt)
    x[::41], x[7::53], x[11::97], x[5::89] = 0.0, -0.0, np.inf, np.nan
    x = x.reshape(3, 37, 5)
    for axis in range(3):
        got = pairwise_sums(x, axis, fmt)
        if got is None:  # fp16 on a CPU without its own conversion
            pytest.skip("this CPU has no fp16 conversion")
        assert _same_bits(got, _tree_oracle(x, axis, fmt)), axis
        # the trainer's reduction: the compiled tree for float32, the NumPy levels for float64
        P = Precision(fmt)
        assert _same_bits(P.low_sum(x, axis, f), got)
        assert _same_bits(P.low_sum(x.astype(np.float64), axis, f), got)
        assert P.low_sum(x, axis, f, keepdims=True).shape == (*x.shape[:axis], 1, *x.shape[axis + 1 :])
    big = oracle(rng.standard_normal(1001).astype(np.float32), fmt)  # a long odd axis
    long_sum, none = pairwise_sums(big, 0, fmt), pairwise_sums(np.zeros((2, 0), np.float32), 1, fmt)
    assert long_sum is not None
    assert none is not None
    assert _same_bits(long_sum, _tree_oracle(big, 0, fmt))
    assert none.tolist() == [0.0, 0.0]
    assert pairwise_sums(x, 0, "fp32") is None
    assert pairwise_sums(x.astype(np.float64), 0, fmt) is None


def test_rounder_switches() -> None:
    x = np.array([1 / 3], np.float32)
    third16 = oracle(x, "fp16")
    pure = Precision("fp16").rounder(FP16, "softmax")
    assert pure(x)[0] == third16[0]
    assert pure(x, "exp")[0] == third16[0]
    mixed = Precision("mixed-fp16").rounder(FP16, "softmax")
    assert mixed(x)[0] == x[0]  # kept in fp32 ...
    assert mixed.out(x)[0] == third16[0]  # ... and stored once at the op's output
    only_exp = Precision(get_policy("fp16").replace(fp32_ops=frozenset({"exp"}))).rounder(FP16, "softmax")
    assert only_exp(x, "exp")[0] == x[0]
    assert only_exp(x)[0] == third16[0]


def test_named_policies() -> None:
    assert policy_names() == [
        "fp32",
        "fp16",
        "bf16",
        "mixed-fp16",
        "mixed-bf16",
        "mixed-fp8",
        "fp8-tensorwise",
        "fp8-delayed",
        "fp8-blockwise",
        "mxfp8",
        "mxfp6",
        "mxfp4",
        "mxint8",
        "nvfp4",
        "fp64",
    ]
    p = get_policy("fp16")
    assert (p.forward, p.backward, p.weight_format, p.master_weights) == (FP16, FP16, FP16, False)
    assert (p.loss_scaling, p.fp32_reductions, p.fp32_ops) == ("none", False, frozenset())
    m = get_policy("mixed-fp16")
    assert (m.weight_format, m.loss_scaling, m.fp32_reductions, m.fp32_ops) == (
        FP32,
        "dynamic",
        True,
        FP32_OPS,
    )
    assert get_policy("mixed-bf16").loss_scaling == "none"
    assert get_policy("mixed-bf16").forward == BF16
    f8 = get_policy("mixed-fp8")
    assert (f8.forward, f8.backward) == (get_format("e4m3"), get_format("e5m2"))
    for name in policy_names():
        assert Policy.from_dict(get_policy(name).to_dict()) == get_policy(name)


# ---- the one lookup ------------------------------------------------------------------------------
# Policy.to_dict() of a policy with every switch at its default, written out
DEFAULTS: dict[str, Any] = {
    "forward": "fp32",
    "backward": "fp32",
    "master_weights": True,
    "loss_scaling": "none",
    "scaler": "torch",
    "static_scale": 1024.0,
    "fp32_reductions": True,
    "fp32_ops": ["exp", "log", "loss", "norm", "softmax", "sum"],
    "batchnorm_fp32": True,
    "rounding": "rne",
    "update_rounding": "rne",
    "saturate": False,
    "subnormals": True,
    "update_compensation": False,
    "recipe": None,
    "accumulate": "",
    "promote_every": 0,
    "memory_layout": "apex-o2",
}
F16, B16 = {"forward": "fp16", "backward": "fp16"}, {"forward": "bf16", "backward": "bf16"}
PURE = {"master_weights": False, "fp32_reductions": False, "fp32_ops": [], "batchnorm_fp32": False}
NORM_LOSS, LOSS = {"fp32_ops": ["loss", "norm"]}, {"fp32_ops": ["loss"]}
DYN, AUTO = {"loss_scaling": "dynamic"}, {"memory_layout": "autocast"}
STATIC_128 = {"loss_scaling": "static", "static_scale": 128.0}
# What TrainConfig(precision=name).make_policy().to_dict() gave for every name while the presets had a
# lookup of their own (policy.get_policy knew only the named policies), as changes of DEFAULTS. The
# memory layout was then decided by the memory ledger from a list of preset names: "autocast" for
# torch-amp, keras, tf2-keras, tf1-static-128, apex-O1 and mindspore-O1/O2/O3 and its fixed scales.
WAS: dict[str, dict[str, Any]] = {
    "fp32": {},
    "fp16": {**F16, **PURE},
    "bf16": {**B16, **PURE},
    "mixed-fp16": {**F16, **DYN},
    "mixed-bf16": B16,
    "mixed-fp8": {"forward": "float8_e4m3fn", "backward": "float8_e5m2", **DYN},
    **{f"fp8-{k}": {**B16, "recipe": Fp8Recipe(k).to_dict()} for k in ("tensorwise", "delayed", "blockwise")},
    **{
        k: {**B16, "recipe": MicroRecipe(k).to_dict()} for k in ("mxfp8", "mxfp6", "mxfp4", "mxint8", "nvfp4")
    },
    "fp64": {"forward": "fp64", "backward": "fp64"},
    "torch-amp": {**F16, **DYN, **AUTO},
    "keras": {**F16, **DYN, "scaler": "keras", **NORM_LOSS, **AUTO},
    "tf2-keras": {**F16, **DYN, "scaler": "tf2", **NORM_LOSS, **AUTO},
    "tf1-static-128": {**F16, **STATIC_128, "scaler": "tf1-static", **AUTO},
    "apex-O0": {"master_weights": False},
    "apex-O1": {**F16, **DYN, "scaler": "apex", **AUTO},
    "apex-O2": {**F16, **DYN, "scaler": "apex", **LOSS},
    "apex-O3": {**F16, "master_weights": False, **LOSS, "batchnorm_fp32": False},
    "fastai": {**F16, **DYN, "scaler": "fastai", **LOSS},
    "mindspore-O0": {"master_weights": False},
    "mindspore-O1": {**F16, **AUTO},
    "mindspore-O2": {**F16, **DYN, "scaler": "mindspore", **NORM_LOSS, **AUTO},
    "mindspore-O3": {**F16, **LOSS, "batchnorm_fp32": False, **AUTO},
    "mindspore-fixed-128": {**F16, **STATIC_128, "scaler": "mindspore-fixed", **NORM_LOSS, **AUTO},
    "mindspore-fixed-128-nodrop": {
        **F16,
        **STATIC_128,
        "scaler": "mindspore-fixed-nodrop",
        **NORM_LOSS,
        **AUTO,
    },
}


def test_every_name_is_known_once() -> None:
    assert [*policy_names(), *preset_names()] == list(WAS)


@pytest.mark.parametrize("name", list(WAS))
def test_one_lookup_gives_every_policy_and_preset_as_it_was(name: str) -> None:
    want = {"name": name, **DEFAULTS, **WAS[name]}
    got = get_policy(name)
    assert got.to_dict() == want
    assert list(got.to_dict()) == list(want)  # (no field left out of DEFAULTS)
    # every door takes the name through the same lookup, and gives the same object
    assert TrainConfig(precision=name).make_policy() is got
    assert Precision(name).policy is got
    assert get_policy(f" {name.upper().replace('-', '_')} ") is got  # case, spaces, _ for -
    assert get_policy(got) is got


def test_aliases_name_the_policies() -> None:
    assert get_policy("amp") is get_policy("mixed") is get_policy("mixed-fp16")
    assert get_policy("HALF") is get_policy("float16") is get_policy("fp16")
    assert get_policy("Mixed_BFloat16") is get_policy("mixed-bf16")
    assert get_policy("float64").name == "fp64"


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("apex-O9", "did you mean apex-O3? "),  # a preset's name, in its own case
        ("mixd-fp16", "did you mean mixed-fp16? "),
        ("mixed-float61", "did you mean mixed-fp16? "),  # an alias's policy, not the alias
        ("caffe", ""),
    ],
)
def test_an_unknown_name_is_one_line_naming_every_known_one(name: str, hint: str) -> None:
    with pytest.raises(ValueError, match="unknown precision policy or preset") as e:
        get_policy(name)
    msg = str(e.value)
    assert msg.startswith(f"unknown precision policy or preset {name!r}: {hint}(policies: fp32, fp16,")
    assert "\n" not in msg
    assert all(n in msg for n in WAS)
    with pytest.raises(
        ValueError, match="unknown precision policy or preset 'apex-O9': did you mean apex-O3"
    ):
        TrainConfig(precision="apex-O9").make_policy()


def test_policy_errors() -> None:
    with pytest.raises(ValueError, match="unknown precision policy or preset 'fp61'"):
        get_policy("fp61")
    with pytest.raises(ValueError, match="precision policy 3: expected a policy or preset name"):
        get_policy(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="memory_layout='zero': expected one of apex-o2, autocast"):
        Policy("x", memory_layout="zero")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"memory_layout=\[1\]: expected one of"):
        Policy("x", memory_layout=[1])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="loss_scaling='sometimes'"):
        Policy("x", loss_scaling="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"fp32_ops \['gemm'\]"):
        Policy("x", fp32_ops=frozenset({"gemm"}))
    with pytest.raises(ValueError, match="unknown rounding mode"):
        Policy("x", rounding="sideways")
    with pytest.raises(ValueError, match="static_scale=0"):
        Policy("x", static_scale=0)
    with pytest.raises(ValueError, match="fp64 for both"):
        Policy("x", forward=get_format("fp64"), backward=FP16)
    with pytest.raises(ValueError, match="unknown format"):
        Policy("x", forward="fp17")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="fp32 ops"):
        parse_fp32_ops("softmax,gemm")
    assert parse_fp32_ops("all") == FP32_OPS


def test_stochastic_casts_are_seeded() -> None:
    x = np.full(1000, 1 + 2.0**-12, np.float32)  # a quarter of the way from 1 to the next fp16
    pol = get_policy("fp16").replace(rounding="stochastic")
    a = Precision(pol, rng=np.random.default_rng(5)).act(x)
    b = Precision(pol, rng=np.random.default_rng(5)).act(x)
    np.testing.assert_array_equal(a, b)
    up = float(np.mean(a > 1))
    assert 0.18 < up < 0.32  # P(up) = 1/4


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_update_and_counts_equal_numpy(dtype: type) -> None:
    """The trainer's one-pass update (w + d with the counts of non-zero and of effective
    updates and of non-finite results) against numpy, on swallowed, zero, overflowing and NaN updates."""
    from floatlab.rounding import add_count

    rng = np.random.default_rng(5)
    w: np.ndarray[Any, Any] = rng.standard_normal(10_000).astype(dtype)
    tiny = float(np.finfo(dtype).eps) / 8  # below half an ulp of w: swallowed
    d = (w * rng.choice(np.array([0.0, tiny, 1e-3, 1.0]), w.size)).astype(dtype)
    w[:4] = [np.finfo(dtype).max, np.inf, 1.0, np.nan]
    d[:4] = [np.finfo(dtype).max, -np.inf, np.nan, 1.0]
    with np.errstate(over="ignore", invalid="ignore"):
        want = w + d
    got, intended, changed, nonfinite = add_count(w.reshape(100, 100), d.reshape(100, 100))
    assert got.shape == (100, 100)
    assert got.dtype == want.dtype
    assert np.array_equal(got.reshape(-1).view(np.uint8), want.view(np.uint8))
    assert intended == np.count_nonzero(d != 0)
    assert changed == np.count_nonzero(want != w)
    assert nonfinite == np.count_nonzero(~np.isfinite(want)) == 4  # max+max, inf-inf, 1+NaN, NaN+1
    assert 0 < changed < intended  # some updates were swallowed, some were not
