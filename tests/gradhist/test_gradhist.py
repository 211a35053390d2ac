"""The gradient histogram against independent oracles.

* binning: ``np.frexp`` gives floor(log2|x|) for every finite nonzero value (subnormals included);
  numpy's isnan/isinf and finfo give the special counts;
* cells: counts below grid thresholds against ``np.count_nonzero(|x| < t)``;
* verdicts: what ``floatlab.encode_array`` / ``round_array`` do to the same values, element by
  element, and for round-to-nearest-even also numpy's float16 cast and ml_dtypes' casts.
"""

from __future__ import annotations

import json
import math
import pickle
import subprocess
import sys
from collections import Counter
from typing import Any

import ml_dtypes
import numpy as np
import numpy.typing as npt
import pytest

import floatlab as fl
from floatlab import gradhist as H
from floatlab.formats import FloatFormat, get_format
from floatlab.gradhist import _inputs as gradhist_inputs
from floatlab.text import render

SEED = 20240601


# ---- data -------------------------------------------------------------------------------------
def random_float32(n: int, rng: np.random.Generator) -> npt.NDArray[np.float32]:
    """Uniform random bit patterns: every exponent, both signs, subnormals, inf and NaN, plus
    explicit zeros, infinities, powers of two and grid points of the histogram's cells."""
    x = rng.integers(0, 2**32, n, dtype=np.uint32).view(np.float32).copy()
    k = n // 20
    idx = rng.permutation(n)
    x[idx[:k]] = 0.0
    x[idx[k : k + 10]] = -0.0
    x[idx[k + 10 : k + 20]] = np.inf
    x[idx[k + 20 : k + 25]] = -np.inf
    e = rng.integers(-149, 128, k)
    x[idx[2 * k : 3 * k]] = np.ldexp(np.float32(1.0), e).astype(np.float32)
    j = rng.integers(0, 256, k)
    x[idx[3 * k : 4 * k]] = np.ldexp(1.0 + j / 256, rng.integers(-126, 128, k)).astype(np.float32)
    L = rng.integers(8, 24, k)
    x[idx[4 * k : 5 * k]] = np.ldexp(2.0 - np.ldexp(1.0, -L), rng.integers(-126, 127, k)).astype(np.float32)
    flip = np.where(rng.random(n) < 0.5, np.uint32(0x80000000), np.uint32(0))
    b = x.view(np.uint32) ^ flip  # a sign flip that leaves NaNs alone
    # quiet the signalling NaNs: casting them to float64 would warn (and warnings are errors)
    b[np.isnan(x)] |= np.uint32(0x00400000)
    out: npt.NDArray[np.float32] = b.view(np.float32)
    return out


def frexp_oracle(x: npt.NDArray[Any]) -> tuple[dict[int, int], dict[str, int]]:
    """Exponent counts and special counts of x, the way the issue asks: frexp binning."""
    a = np.asarray(x)
    if a.dtype == ml_dtypes.bfloat16 or a.dtype.itemsize == 1:
        a = a.astype(np.float32)  # exact: float32 holds every bf16 / 8-bit float value
    fin = np.isfinite(a) & (a != 0)
    _m, e = np.frexp(a[fin])
    exps, counts = np.unique(e.astype(np.int64) - 1, return_counts=True)
    tiny = float(ml_dtypes.finfo(np.asarray(x).dtype).smallest_normal)  # type: ignore[no-untyped-call]
    specials = {
        "zeros": int(np.count_nonzero(a == 0)),
        "nan": int(np.count_nonzero(np.isnan(a))),
        "posinf": int(np.count_nonzero(a == np.inf)),
        "neginf": int(np.count_nonzero(a == -np.inf)),
    }
    specials["subnormal"] = int(np.count_nonzero(np.abs(a[fin]) < tiny))
    return dict(zip(exps.tolist(), counts.tolist(), strict=True)), specials


def check_against_frexp(h: H.GradHistogram, x: npt.NDArray[Any]) -> None:
    expected, specials = frexp_oracle(x)
    exps, counts = h.exponent_counts()
    got = {e: c for e, c in zip(exps.tolist(), counts.tolist(), strict=True) if c}
    assert got == expected
    assert h.zeros == specials["zeros"]
    assert h.nan == specials["nan"]
    assert h.posinf == specials["posinf"]
    assert h.neginf == specials["neginf"]
    assert h.subnormal_inputs == specials["subnormal"]
    assert h.total == np.asarray(x).size


@pytest.fixture
def small_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Route float32/float64 inputs of any size through the vectorised reference."""
    monkeypatch.setattr(gradhist_inputs, "_SMALL_INPUT", 1 << 62)


@pytest.fixture
def compiled_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Route float32/float64 inputs of any size through the compiled loops."""
    monkeypatch.setattr(gradhist_inputs, "_SMALL_INPUT", 0)


# ---- binning ----------------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["small_path", "compiled_path"])
def test_float32_binning_matches_frexp(path: str, request: pytest.FixtureRequest) -> None:
    request.getfixturevalue(path)
    x = random_float32(60_000, np.random.default_rng(SEED))
    check_against_frexp(H.histogram(x), x)


@pytest.mark.parametrize("path", ["small_path", "compiled_path"])
def test_float64_binning_matches_frexp(path: str, request: pytest.FixtureRequest) -> None:
    request.getfixturevalue(path)
    rng = np.random.default_rng(SEED + 1)
    x = rng.integers(0, 2**64, 50_000, dtype=np.uint64).view(np.float64).copy()
    x[:500] = 0.0
    x[500:600] = np.ldexp(1.0, rng.integers(-1074, 1024, 100))  # subnormal and normal powers of two
    x[600:650] = np.inf
    # clustered data too: the compiled loop's fast window sits around the median exponent
    x[650:30_000] = rng.standard_normal(29_350) * np.ldexp(1.0, rng.integers(-60, 60, 29_350))
    check_against_frexp(H.histogram(x), x)


def test_float16_and_bfloat16_binning_matches_frexp() -> None:
    rng = np.random.default_rng(SEED + 2)
    codes = rng.integers(0, 2**16, 40_000, dtype=np.uint16)
    for dtype in (np.float16, ml_dtypes.bfloat16):
        x = codes.view(dtype)
        check_against_frexp(H.histogram(x), x)


@pytest.mark.parametrize(
    "name",
    ["float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float6_e2m3fn", "float4_e2m1fn"],
)
def test_small_float_inputs_match_frexp(name: str) -> None:
    codes = np.arange(1 << get_format(name).bits, dtype=np.uint8).repeat(3)
    x = codes.view(getattr(ml_dtypes, name))
    h = H.histogram(x)
    expected, specials = frexp_oracle(x)
    exps, counts = h.exponent_counts()
    assert {e: c for e, c in zip(exps.tolist(), counts.tolist(), strict=True) if c} == expected
    assert (h.zeros, h.nan) == (specials["zeros"], specials["nan"])
    assert (h.posinf, h.neginf) == (specials["posinf"], specials["neginf"])
    assert h.subnormal_inputs == specials["subnormal"] == 3 * 2 * (2 ** get_format(name).mantissa_bits - 1)


def test_cells_against_counts_below_grid_thresholds() -> None:
    rng = np.random.default_rng(SEED + 3)
    x = random_float32(40_000, rng)
    h = H.histogram(x)
    a = np.abs(x[np.isfinite(x) & (x != 0)].astype(np.float64))
    grid = zip(rng.integers(0, 256, 40).tolist(), rng.integers(-140, 120, 40).tolist(), strict=True)
    thresholds = [math.ldexp(1 + j / 256, e) for j, e in grid]
    tops = zip(rng.integers(8, 24, 20).tolist(), rng.integers(-140, 120, 20).tolist(), strict=True)
    thresholds += [math.ldexp(2 - 2.0**-L, e) for L, e in tops]
    for t in thresholds:
        assert h.count_below(t) == np.count_nonzero(a < t), t
    with pytest.raises(ValueError, match="falls inside a histogram cell"):
        h.count_below(0.3)


def test_signs_are_kept_apart() -> None:
    x = np.array([-1.0, -2.0, 3.0, -0.0, 0.0, -np.inf], np.float32)
    h = H.histogram(x)
    assert h.negative == 2
    assert h.exponent_counts("negative")[1].tolist() == [1, 1]
    assert h.exponent_counts("positive")[1].tolist() == [0, 1]
    assert (h.zeros, h.neginf, h.posinf) == (2, 1, 0)
    with pytest.raises(ValueError, match="sign="):
        h.exponent_counts("neither")


# ---- streaming and merging --------------------------------------------------------------------
def test_streaming_and_merging_equal_one_pass() -> None:
    rng = np.random.default_rng(SEED + 4)
    x = random_float32(80_000, rng)
    whole = H.histogram(x)
    cuts = np.sort(rng.integers(0, x.size, 5))
    parts = np.split(x, cuts)
    streamed = H.GradHistogram()
    for p in parts:
        streamed.update(p)
    assert streamed == whole
    assert sum((H.GradHistogram(p) for p in parts), H.GradHistogram()) == whole
    assert sum(H.GradHistogram(p) for p in parts) == whole
    merged = H.GradHistogram(parts[-1])
    for p in parts[:-1]:
        merged = H.GradHistogram(p) + merged  # out of order: merging commutes
    assert merged == whole
    assert pickle.loads(pickle.dumps(whole)) == whole
    assert whole != H.histogram(x[1:])


def test_merge_across_dtypes_shares_one_axis() -> None:
    rng = np.random.default_rng(SEED + 5)
    x32 = random_float32(20_000, rng)
    x64 = rng.standard_normal(20_000) * np.ldexp(1.0, rng.integers(-300, 300, 20_000))
    x16 = rng.integers(0, 2**16, 5_000, dtype=np.uint16).view(np.float16)
    h = H.histogram(x32, x64, x16)
    assert h == H.histogram(x32) + H.histogram(x64) + H.histogram(x16)
    assert h.dtypes == ("float16", "float32", "float64")
    expected: Counter[int] = Counter()
    for part in (x32, x64, x16):
        expected.update(frexp_oracle(part)[0])
    exps, counts = h.exponent_counts()
    assert {e: c for e, c in zip(exps.tolist(), counts.tolist(), strict=True) if c} == expected


def test_compiled_and_vectorised_paths_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(SEED + 6)
    x = random_float32(30_000, rng)
    y = np.concatenate([x.astype(np.float64), rng.standard_normal(1000) * 1e-310])
    monkeypatch.setattr(gradhist_inputs, "_SMALL_INPUT", 0)
    compiled = H.histogram(x, y)
    monkeypatch.setattr(gradhist_inputs, "_SMALL_INPUT", 1 << 62)
    assert H.histogram(x, y) == compiled


def test_the_compiled_loops_run_on_one_thread_below_serial_below(monkeypatch: pytest.MonkeyPatch) -> None:
    """As the rounding loops: a small array on one thread (one set of counters), a large one on
    all of numba's threads (a set per thread), the same counts either way."""
    numba = pytest.importorskip("numba")
    from floatlab.gradhist import _kernels as hk
    from floatlab.rounding import threads

    seen: list[tuple[int, int]] = []
    loops = hk._compile()
    for key in ("32", "64"):

        def spy(*args: Any, kern: Any = loops[key]) -> Any:
            seen.append((numba.get_num_threads(), args[-4].shape[0]))  # (the per-thread counters)
            return kern(*args)

        monkeypatch.setitem(loops, key, spy)
    monkeypatch.setattr(gradhist_inputs, "_SMALL_INPUT", 0)
    x = random_float32(30_000, np.random.default_rng(SEED + 7))
    small = H.histogram(x, x.astype(np.float64))
    monkeypatch.setattr(threads, "SERIAL_BELOW", 1000)  # the same arrays, now above the threshold
    large = H.histogram(x, x.astype(np.float64))
    n = numba.get_num_threads()
    assert seen == [(1, 1), (1, 1), (n, n), (n, n)]
    assert numba.get_num_threads() == n  # restored
    assert large == small


# ---- inputs -----------------------------------------------------------------------------------
class OnlyArray:
    def __init__(self, a: npt.NDArray[Any]) -> None:
        self.a = a

    def __array__(self, dtype: Any = None, copy: Any = None) -> npt.NDArray[Any]:
        return self.a


class OnlyDLPack:
    def __init__(self, a: npt.NDArray[Any]) -> None:
        self.a = a

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.a.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.a.__dlpack_device__()


def test_inputs_of_every_kind_give_the_same_counts() -> None:
    x = np.array([[1.0, -2.5], [0.0, 3e-40]], np.float32)
    ref = H.histogram(x)
    assert H.histogram(x.T) == ref  # not contiguous
    assert H.histogram(x.astype(">f4")) == ref  # big-endian
    assert H.histogram(OnlyArray(x)) == ref
    assert H.histogram(OnlyDLPack(x)) == ref
    assert H.histogram(np.float32(5.0)).total == 1
    assert H.histogram([1.0, 2.0]).dtypes == ("float64",)
    assert H.histogram(np.zeros(0, np.float32)).total == 0
    for bad in (np.arange(3), np.array([1 + 2j]), np.array(["a"])):
        with pytest.raises(ValueError, match="expected floating-point values"):
            H.histogram(bad)


def test_torch_tensors() -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(SEED + 7)
    x = random_float32(5_000, rng)
    assert H.histogram(torch.from_numpy(x)) == H.histogram(x)
    t = torch.from_numpy(x).to(torch.bfloat16)
    assert H.histogram(t) == H.histogram(x.astype(ml_dtypes.bfloat16))
    with np.errstate(over="ignore"):  # float32 beyond 65504 becomes inf, as in torch
        x16 = x.astype(np.float16)
    assert H.histogram(torch.from_numpy(x).to(torch.float16)) == H.histogram(x16)
    w = torch.ones(3, requires_grad=True)
    assert H.histogram(w * 2).total == 3  # a tensor that needs grad is detached


# ---- verdicts against the rounding primitive ------------------------------------------------------
def classify_codes(codes: npt.NDArray[Any], fmt: FloatFormat) -> tuple[int, int]:
    """(zeros, subnormals) among the codes; the fnuz NaN (the code of "-0") is no zero."""
    c = codes.astype(np.uint64)
    mag = c & np.uint64(fmt.sign_mask - 1)
    zero = (mag == 0) & ~((c == fmt.sign_mask) & (fmt.encoding == "fnuz"))
    return int(np.count_nonzero(zero)), int(np.count_nonzero((mag > 0) & (mag < 2**fmt.mantissa_bits)))


def oracle_verdict(
    x: npt.NDArray[Any], fmt: FloatFormat, rounding: str, log2_scale: int, subnormals: bool = True
) -> tuple[int, int, int, int]:
    """(flushed, subnormal, normal, overflow) of the finite nonzero x by encode_array."""
    v = x[np.isfinite(x) & (x != 0)].astype(np.float64) * 2.0**log2_scale  # exact for float32 x
    codes, stats = fl.encode_array_with_flags(v, fmt, rounding, subnormals=subnormals)
    flushed, sub = classify_codes(codes, fmt)
    return flushed, sub, v.size - flushed - sub - stats.overflow, stats.overflow


def edge_values(fmt: FloatFormat) -> npt.NDArray[np.float64]:
    """The format's class boundaries (from its own parameters) and their float32 neighbours."""
    sub, tiny, big = fmt.smallest_subnormal, fmt.smallest_normal, fmt.max
    step = math.ldexp(1.0, fmt.emax - fmt.mantissa_bits)
    edges = [sub / 2, sub, tiny - sub / 2, tiny - sub, tiny, big, big + step / 2, big + step, 2 * big]
    out = []
    for e in edges:
        if not math.ldexp(1.0, -149) <= e < float(np.finfo(np.float32).max):
            continue
        f = np.float32(e)
        out.append(f)
        lo, hi = f, f
        for _ in range(3):
            lo, hi = np.nextafter(lo, np.float32(0)), np.nextafter(hi, np.float32(np.inf))
            out += [lo, hi]
    return np.array(out, np.float32).astype(np.float64)


CASES = [
    ("fp16", "rne", 0),
    ("fp16", "rne", 10),
    ("fp16", "rne", -3),
    ("fp16", "rna", 4),
    ("fp16", "rtz", 2),
    ("fp16", "rodd", 0),
    ("fp16", "rup", 3),
    ("fp16", "rdown", 0),
    ("bf16", "rne", 0),
    ("bf16", "rup", 1),
    ("float8_e4m3fn", "rne", 0),
    ("float8_e4m3fn", "rodd", 2),
    ("float8_e5m2", "rne", 5),
    ("float8_e4m3fnuz", "rne", 0),
    ("float6_e2m3fn", "rne", 0),
    ("float4_e2m1fn", "rtz", 1),
    ("tf32", "rne", 0),
]


@pytest.mark.parametrize(("name", "rounding", "k"), CASES)
def test_verdict_equals_encode_array(name: str, rounding: str, k: int) -> None:
    fmt = get_format(name)
    rng = np.random.default_rng(SEED + 8)
    x = random_float32(30_000, rng)
    edges = edge_values(fmt) * 2.0**-k
    x = np.concatenate([x, edges.astype(np.float32), -edges.astype(np.float32)])
    v = H.histogram(x).verdict(fmt, 2.0**k, rounding)
    assert v.uncertain == 0
    assert (v.flushed, v.subnormal, v.normal, v.overflow) == oracle_verdict(x, fmt, rounding, k)
    assert v.zeros == np.count_nonzero(x == 0)
    assert v.nonfinite == np.count_nonzero(~np.isfinite(x))


def test_verdict_flush_to_zero_target() -> None:
    x = random_float32(20_000, np.random.default_rng(SEED + 9))
    v = H.histogram(x).verdict("fp16", 1, subnormals=False)
    assert v.subnormal == 0
    assert (v.flushed, v.subnormal, v.normal, v.overflow) == oracle_verdict(
        x, get_format("fp16"), "rne", 0, False
    )


def test_verdict_agrees_with_round_array_and_independent_casts() -> None:
    rng = np.random.default_rng(SEED + 10)
    x = random_float32(50_000, rng)
    x = np.concatenate([x, edge_values(fl.FP16).astype(np.float32)])
    fin = x[np.isfinite(x) & (x != 0)]
    h = H.histogram(x)
    for k in (0, 8, 16):
        v = h.verdict("fp16", 2.0**k)
        y = fl.round_array(fin.astype(np.float64) * 2.0**k, "fp16")
        with np.errstate(over="ignore"):  # overflow to inf is what is counted
            z = (fin.astype(np.float64) * 2.0**k).astype(np.float16)  # numpy's cast: one rounding
        for r in (y, np.abs(z.astype(np.float64))):
            assert v.flushed == np.count_nonzero(r == 0)
            assert v.subnormal == np.count_nonzero((r != 0) & (np.abs(r) < 2.0**-14))
            assert v.overflow == np.count_nonzero(np.isinf(r))
    for name in ("bfloat16", "float8_e5m2", "float8_e4m3fn"):
        v = h.verdict(name)
        r = fin.astype(getattr(ml_dtypes, name)).astype(np.float64)  # float32 -> small: one rounding
        tiny = get_format(name).smallest_normal
        assert v.flushed == np.count_nonzero(r == 0)
        assert v.subnormal == np.count_nonzero((r != 0) & (np.abs(r) < tiny))
        assert v.overflow == np.count_nonzero(~np.isfinite(r))


def test_non_power_of_two_scale_brackets_the_truth() -> None:
    x = random_float32(20_000, np.random.default_rng(SEED + 11))
    x = np.concatenate([x[np.isfinite(x)], (edge_values(fl.FP16) / 1000).astype(np.float32)])
    h = H.histogram(x)
    fmt = get_format("fp16")
    v = h.verdict(fmt, 1000.0)
    assert v.uncertain > 0  # cells straddle 65520/1000: the bounds below must do the work
    fin = x[x != 0].astype(np.float64)
    # x * 1000 in float64 may round, so go through exact rationals for the few values near an edge
    codes, stats = fl.encode_array_with_flags(fin * 1000.0, fmt)
    flushed, sub = classify_codes(codes, fmt)
    for got, truth in ((v.flushed, flushed), (v.subnormal, sub), (v.overflow, stats.overflow)):
        assert got <= truth <= got + v.uncertain


def test_exact_ties_at_the_flush_threshold() -> None:
    # 2^-25 is half the smallest fp16 subnormal: ties to even (zero); anything above rounds up
    x = np.array([2.0**-25, np.nextafter(2.0**-25, 1.0), np.nextafter(2.0**-25, 0.0)], np.float64)
    v = H.histogram(x).verdict("fp16")
    assert (v.flushed, v.subnormal) == (2, 1)
    assert H.histogram(x).verdict("fp16", rounding="rna").flushed == 1
    # 464 is the e4m3fn midpoint between 448 and the NaN code: ties to even keep 448
    y = np.array([464.0, np.nextafter(464.0, 1e9), 448.0], np.float64)
    assert H.histogram(y).verdict("e4m3fn").overflow == 1


@pytest.mark.parametrize("rounding", ["stochastic", "nearest-ish"])
def test_verdict_rejects_bad_modes(rounding: str) -> None:
    with pytest.raises(ValueError, match="rounding"):
        H.histogram(np.ones(3)).verdict("fp16", rounding=rounding)


@pytest.mark.parametrize("scale", [0, -1.0, float("inf"), float("nan"), "x"])
def test_verdict_rejects_bad_scales(scale: Any) -> None:
    with pytest.raises(ValueError, match="scale="):
        H.histogram(np.ones(3)).verdict("fp16", scale)


# ---- the synthetic gradient set and the recommended scale ----------------------------------------
def synthetic_gradients(rng: np.random.Generator) -> tuple[npt.NDArray[np.float32], int]:
    """100,000 gradient-like float32 values, exactly 5,000 of them below 2^-24 (in [2^-40, 2^-25))."""
    n, k = 100_000, 5_000
    big = np.exp2(rng.uniform(-20, -4, n - k)) * np.where(rng.random(n - k) < 0.5, -1, 1)
    small = np.exp2(rng.uniform(-40, -25, k)) * np.where(rng.random(k) < 0.5, -1, 1)
    x = np.concatenate([big, small]).astype(np.float32)
    small32 = np.abs(x[n - k :].astype(np.float64))
    assert np.all(small32 < 2.0**-25)  # strictly below the tie: fp16 flushes all of them
    assert np.all(np.abs(x[: n - k].astype(np.float64)) >= 2.0**-24)
    return rng.permutation(x), k


def test_synthetic_share_below_2_to_minus_24_is_reproduced_and_rescued() -> None:
    x, k = synthetic_gradients(np.random.default_rng(SEED + 12))
    h = H.histogram(x)
    assert h.count_below(2.0**-24) == k
    before = h.verdict("fp16")
    assert before.flushed == k
    assert before.fraction("flushed") == pytest.approx(0.05, abs=0)
    advice = h.recommend_scale("fp16")
    assert advice.before == before
    assert advice.after.flushed == 0
    assert advice.after.overflow == 0
    s = advice.scale
    assert s == 2.0**advice.log2_scale
    y = fl.round_array(x.astype(np.float64) * s, "fp16")
    assert np.count_nonzero(y == 0) == 0  # every value survives
    assert np.all(np.isfinite(y))
    assert np.max(np.abs(x.astype(np.float64))) * s <= fl.FP16.max / 2**advice.headroom
    assert "flush" in advice.reason
    assert str(advice) == advice.reason
    json.dumps(advice.to_dict())


def test_recommended_scale_is_the_smallest_with_the_best_outcome() -> None:
    x, _ = synthetic_gradients(np.random.default_rng(SEED + 13))
    h = H.histogram(x)
    a = h.recommend_scale("fp16", headroom=3)
    key = (a.after.flushed, a.after.subnormal)
    below = h.verdict("fp16", 2.0 ** (a.log2_scale - 1))
    assert (below.flushed, below.subnormal) > key  # one step smaller rescues fewer
    top = h.verdict("fp16", 2.0**a.max_log2_scale)
    assert (top.flushed, top.subnormal) == key
    assert np.max(np.abs(x.astype(np.float64))) * 2.0**a.max_log2_scale <= fl.FP16.max / 2**3
    assert h.max_abs_bound * 2.0 ** (a.max_log2_scale + 1) > fl.FP16.max / 2**3  # the largest allowed


def test_recommend_scale_edge_cases() -> None:
    assert H.GradHistogram().recommend_scale("fp16").log2_scale == 0
    assert H.histogram(np.zeros(4)).recommend_scale("fp16").log2_scale == 0
    x = np.array([1e6, 1.0], np.float32)  # overflows fp16 unscaled: scale down
    a = H.histogram(x).recommend_scale("fp16", headroom=0)
    assert a.log2_scale == -4
    assert a.before.overflow == 1
    assert a.after.overflow == 0
    assert H.histogram(x).recommend_scale("bf16").log2_scale == 0  # nothing to rescue
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="headroom="):
            H.histogram(x).recommend_scale("fp16", headroom=bad)  # type: ignore[arg-type]


# ---- output -----------------------------------------------------------------------------------
def test_text_histogram_rows_and_totals() -> None:
    x, _k = synthetic_gradients(np.random.default_rng(SEED + 14))
    x[:100] = 0.0
    h = H.histogram(x)
    text = h.text("fp16", 2.0**10, width=30)
    lines = text.splitlines()
    assert lines[1] == "in fp16, round to nearest, ties to even"
    assert lines[2].split() == ["log2|x|", "count", "share", "unscaled", "at", "2^10"]
    rows = [ln.split() for ln in lines[3:-2]]
    counts = {r[0]: int(r[1].replace(",", "")) for r in rows}
    assert counts["zero"] == np.count_nonzero(x == 0)
    assert sum(counts.values()) == x.size
    e, n = frexp_oracle(x)[0], counts
    assert all(n[str(k)] == c for k, c in e.items())
    # values in [2^-34, 2^-25) flush unscaled and survive at 2^10
    tail = [r for r in rows if r[0].lstrip("-").isdigit() and -34 <= int(r[0]) < -25]
    assert tail
    assert all(r[3] == "zero" and r[4] != "zero" for r in tail)
    assert lines[-2] == str(h.verdict("fp16"))
    assert lines[-1] == str(h.verdict("fp16", 2.0**10))


def test_to_dict_is_json() -> None:
    h = H.histogram(np.array([1.0, np.nan, -np.inf, 0.0, 2.0**-30], np.float32))
    d = json.loads(json.dumps(h.to_dict()))
    assert d["total"] == 5
    assert d["nan"] == 1
    assert d["neginf"] == 1
    assert [b["exponent"] for b in d["binades"] if b["count"]] == [-30, 0]
    v = json.loads(json.dumps(h.verdict("fp16").to_dict()))
    assert v["flushed"] == 1
    assert v["fractions"]["flushed"] == 0.2


def test_import_is_light() -> None:
    probe = (
        "import sys, floatlab.gradhist, floatlab.torch_hooks; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'numba', 'matplotlib', 'torch', 'sympy'}))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---- the command line -------------------------------------------------------------------------
def run_cli(argv: list[str]) -> tuple[int, str]:
    """Run ``floatlab histogram ...``: through main() once the command is registered there."""
    import argparse
    import io

    from floatlab import cli
    from floatlab.cli import histogram_cmd
    from floatlab.cli._common import UI

    buf = io.StringIO()
    if histogram_cmd in cli.COMMANDS:
        from contextlib import redirect_stdout

        with redirect_stdout(buf):
            status = cli.main(argv)
        return status, buf.getvalue()
    parser = argparse.ArgumentParser()
    histogram_cmd.register(parser.add_subparsers())
    args = parser.parse_args(argv)
    status = args.run(args, UI(json=getattr(args, "json", False), stream=buf))
    return status, buf.getvalue()


def test_cli_npy_json_counts(tmp_path: Any) -> None:
    x, k = synthetic_gradients(np.random.default_rng(SEED + 15))
    path = tmp_path / "grads.npy"
    np.save(path, x)
    status, out = run_cli(["histogram", str(path), "-f", "fp16,e5m2", "--scale", "2^10", "--json"])
    assert status == 0
    data = json.loads(out)
    assert data["total"]["total"] == x.size
    fp16, e5m2 = data["formats"]
    assert fp16["verdict"]["flushed"] == k
    assert fp16["scaled"]["scale"] == 1024.0
    flushed, sub, _normal, over = oracle_verdict(x, fl.FP16, "rne", 10)
    assert (fp16["scaled"]["flushed"], fp16["scaled"]["subnormal"], fp16["scaled"]["overflow"]) == (
        flushed,
        sub,
        over,
    )
    assert e5m2["format"] == "float8_e5m2"
    assert e5m2["scaled"]["flushed"] == oracle_verdict(x, get_format("e5m2"), "rne", 10)[0]


def test_cli_text_and_recommendation(tmp_path: Any) -> None:
    x, _ = synthetic_gradients(np.random.default_rng(SEED + 16))
    path = tmp_path / "grads.npy"
    np.save(path, x)
    status, out = run_cli(["histogram", str(path), "--recommend", "--no-color"])
    assert status == 0
    advice = H.histogram(x).recommend_scale("fp16")
    assert f"recommended scale for fp16: 2^{advice.log2_scale}" in out
    assert advice.reason in out
    assert "unscaled" in out.splitlines()[2]


def test_cli_streams_a_large_npy_in_chunks(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from floatlab.cli import histogram_cmd

    x = random_float32(30_000, np.random.default_rng(SEED + 17))
    path = tmp_path / "big.npy"
    np.save(path, x)
    monkeypatch.setattr(histogram_cmd, "_CHUNK", 7_001)
    assert histogram_cmd.load_histograms([str(path)])["big.npy"] == H.histogram(x)


def test_cli_npz_per_name_and_total(tmp_path: Any) -> None:
    rng = np.random.default_rng(SEED + 18)
    a = random_float32(3_000, rng)
    b = rng.standard_normal(2_000).astype(np.float16)
    path = tmp_path / "step.npz"
    arrays: dict[str, npt.NDArray[Any]] = {"layer1.weight": a, "layer1.bias": b}
    np.savez(path, **arrays)  # type: ignore[arg-type]
    status, out = run_cli(["histogram", str(path), "--json"])
    assert status == 0
    data = json.loads(out)
    assert data["arrays"]["layer1.weight"]["total"] == a.size
    assert data["arrays"]["layer1.bias"]["dtypes"] == ["float16"]
    assert data["total"] == (H.histogram(a) + H.histogram(b)).to_dict()
    status, text = run_cli(["histogram", str(path), str(path)])
    assert "step.npz:layer1.weight" in text


def test_cli_reads_torch_state_files(tmp_path: Any) -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(SEED + 19)
    w = random_float32(2_000, rng)
    path = tmp_path / "grads.pt"
    torch.save(
        {"w": torch.from_numpy(w), "inner": {"b": torch.ones(5, dtype=torch.bfloat16)}, "step": 3}, path
    )
    status, out = run_cli(["histogram", str(path), "--json"])
    assert status == 0
    data = json.loads(out)
    assert set(data["arrays"]) == {"w", "inner.b"}
    assert data["arrays"]["w"] == H.histogram(w).to_dict()
    assert data["arrays"]["inner.b"]["dtypes"] == ["bfloat16"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["histogram", "missing.npy"], "no such file"),
        (["histogram", "{bad}"], "expected a .npy, .npz or .pt"),
        (["histogram", "{npy}", "--scale", "-3"], "--scale"),
        (["histogram", "{npy}", "--scale", "2^x"], "--scale"),
        (["histogram", "{npy}", "-f", "fp61"], "unknown format"),
        (["histogram", "{npy}", "-r", "stochastic"], "deterministic"),
        (["histogram", "{npy}", "--headroom", "-1"], "--headroom"),
    ],
)
def test_cli_errors_name_the_problem(tmp_path: Any, argv: list[str], message: str) -> None:
    npy = tmp_path / "g.npy"
    np.save(npy, np.ones(3, np.float32))
    bad = tmp_path / "g.csv"
    bad.write_text("1,2\n")
    argv = [a.format(npy=npy, bad=bad) for a in argv]
    with pytest.raises(ValueError, match=message):
        run_cli_raw(argv)


def run_cli_raw(argv: list[str]) -> int:
    """Like run_cli but lets a ValueError through (main() would turn it into exit status 2)."""
    import argparse
    import io

    from floatlab.cli import histogram_cmd
    from floatlab.cli._common import UI

    parser = argparse.ArgumentParser()
    histogram_cmd.register(parser.add_subparsers())
    args = parser.parse_args(argv)
    return int(args.run(args, UI(stream=io.StringIO())))


def test_demo_section_shows_the_rescue() -> None:
    from floatlab.cli import demo, histogram_cmd

    section = next(s for s in demo.SECTIONS if s.render is histogram_cmd._demo_histogram)
    view = section.render(False)
    x = histogram_cmd.synthetic_gradients()
    advice = H.histogram(x).recommend_scale("fp16")
    assert f"recommended scale for fp16: 2^{advice.log2_scale}" in view.text
    assert advice.after.flushed == 0
    assert np.count_nonzero(np.abs(x.astype(np.float64)) < 2.0**-24) == 800


# ---- the torch helper -------------------------------------------------------------------------
def test_gradient_recorder_per_layer_and_total() -> None:
    torch = pytest.importorskip("torch")
    from floatlab.torch_hooks import GradientRecorder

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rec = GradientRecorder(model)
    seen: dict[str, list[npt.NDArray[np.float32]]] = {}
    for _ in range(3):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(torch.randn(4, 8)), torch.tensor([0, 1, 2, 0])) * 1e-5
        loss.backward()
        rec.record()
        for name, p in model.named_parameters():
            seen.setdefault(name, []).append(p.grad.detach().numpy().copy())
        opt.step()
    assert rec.steps == 3
    assert list(rec.layers) == [n for n, _ in model.named_parameters()]
    for name, grads in seen.items():
        check_against_frexp(rec.layers[name], np.concatenate([g.ravel() for g in grads]))
    assert rec.total == sum(rec.layers.values(), H.GradHistogram())
    report = render(rec, "fp16")
    assert "0.weight" in report
    assert "advice: scale 2^" in report
    rec.reset()
    assert rec.total.total == 0


def test_gradient_recorder_hooks_match_record() -> None:
    torch = pytest.importorskip("torch")
    from floatlab.torch_hooks import GradientRecorder

    torch.manual_seed(1)
    model = torch.nn.Linear(5, 2)
    x = torch.randn(3, 5)
    hooked, explicit = GradientRecorder(model), GradientRecorder(model)
    with hooked.attached():
        model(x).square().sum().backward()
    explicit.record()
    assert hooked.total == explicit.total
    assert hooked.layers == explicit.layers
    model.zero_grad()
    model(x).sum().backward()  # the hooks are gone: nothing more is recorded
    assert hooked.total == explicit.total
    with pytest.raises(ValueError, match="model=None"):
        GradientRecorder(None).record()
