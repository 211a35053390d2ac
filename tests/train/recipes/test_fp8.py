"""The fp8 recipes against their sources: Transformer Engine's delayed-scaling update transcribed
from its code, torchao's own tensorwise casts, and a float64 quantize-dequantize-multiply with
ml_dtypes casts as the fp8 oracle for DeepSeek-V3's block scaling.

Sources of the transcriptions (NVIDIA/TransformerEngine, 2.x):

* ``transformer_engine/common/recipe/delayed_scaling.cu``, ``kernel_bulk``: the fused update that
  ``FP8GlobalStateManager.reduce_and_update_fp8_tensors`` runs by default;
* ``transformer_engine/pytorch/quantization.py``: ``_update_amax_history``,
  ``_default_get_amax_and_update_history`` and ``_default_sf_compute``, the unfused path
  (``NVTE_UNFUSED_FP8_UPDATE=1``), run here on torch tensors as TE writes it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import floatlab as fl
from floatlab.train.checkpoint import load_checkpoint, save_checkpoint
from floatlab.train.recipes import (
    E4M3,
    E5M2,
    RECIPES,
    ROLES,
    Fp8Recipe,
    Fp8Scaling,
    OperandScaler,
    Quantized,
    block_quantize,
    blockwise_matmul,
    current_scale,
    delayed_update,
    round_down_pow2,
    scaled_matmul,
    tile_quantize,
)
from floatlab.train.recipes.scales import cast_shares, saturating_cast

F32_MAX = float(np.finfo(np.float32).max)
U = 2.0**-24  # fp32's unit roundoff
ML = {E4M3.name: ml_dtypes.float8_e4m3fn, E5M2.name: ml_dtypes.float8_e5m2}
INF, NAN = math.inf, math.nan


# ---- oracles ------------------------------------------------------------------------------------------
def fmaxf(a: np.float32, b: np.float32) -> np.float32:
    """C's fmaxf: a NaN operand loses to the other."""
    if math.isnan(a):
        return b
    if math.isnan(b):
        return a
    return a if a >= b else b


def te_kernel_bulk(
    history: list[np.float32], scale: np.float32, fp8_max: float, margin: int, algo: str
) -> tuple[list[np.float32], np.float32]:
    """``kernel_bulk`` of delayed_scaling.cu for one tensor, one thread doing every slot."""
    length = len(history)
    last_amax = history[0]
    amax = np.float32(0.0)
    if last_amax != 0.0:
        rolled = []
        for i in range(length):
            a = history[i + 1] if i < length - 1 else last_amax
            amax = fmaxf(amax, a)
            rolled.append(a if i > 0 else np.float32(0.0))
        history = rolled
    if algo == "most_recent":
        amax = last_amax
    # const float scaled_max = fp8_dtype_max(fp8_dtype) * std::pow(2.f, -margin);
    scaled_max = np.float32(fp8_max) * np.float32(math.pow(2.0, -margin))
    with np.errstate(over="ignore"):
        new = scaled_max / amax if math.isfinite(amax) and amax > 0 else scale
    if math.isinf(new):
        new = np.float32(F32_MAX)
    return history, np.float32(new)


def te_unfused(amax_history: Any, scale: Any, fp8_max: float, margin: int, algo: str) -> None:
    """TE's Python path, verbatim on torch tensors (history shaped (H, 1), scale (1,))."""
    import torch

    amax = torch.max(amax_history, dim=0).values if algo == "max" else amax_history[0].clone()
    if amax_history.shape[0] > 1:
        new_amax_history = torch.roll(amax_history, -1, 0)
        amax_history.copy_(new_amax_history)
    amax_history[0].fill_(0.0)
    sf = (fp8_max / amax) / (2**margin)
    sf = torch.where(amax > 0.0, sf, scale)
    sf = torch.where(torch.isfinite(amax), sf, scale)
    sf = torch.where(torch.isinf(sf), torch.full_like(sf, torch.finfo(torch.float32).max), sf)
    scale.copy_(sf)


def fp8_cast(xs: np.ndarray, fmt: fl.FloatFormat) -> np.ndarray:
    """The saturating cast by ml_dtypes: clamp to +-max (infinities too), round to nearest even."""
    out: np.ndarray = np.clip(xs, -fmt.max, fmt.max).astype(ML[fmt.name]).astype(np.float32)
    return out


def plain_overflows(xs: np.ndarray, fmt: fl.FloatFormat) -> np.ndarray:
    """Where ml_dtypes' cast without saturation leaves the finite range (NaN in E4M3, inf in E5M2)."""
    with np.errstate(over="ignore", invalid="ignore"):
        plain = xs.astype(ML[fmt.name]).astype(np.float32)
    out: np.ndarray = ~np.isnan(xs) & ~np.isfinite(plain)
    return out


def te_amax(x: np.ndarray) -> np.float32:
    """TE's cast-kernel amax: fmaxf(fabsf(v), amax) from 0 over every element."""
    amax: np.float32 = np.float32(0.0)
    for v in x.ravel().tolist():
        amax = fmaxf(np.float32(abs(v)), amax)
    return amax


def tile_oracle(x: np.ndarray, fmt: fl.FloatFormat, block: int, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Tiles of ``block`` along ``axis``, one tile at a time: (values, scales)."""
    xm = np.moveaxis(x, axis, -1)
    n = xm.shape[-1]
    q = np.empty(xm.shape, np.float32)
    scales = []
    for lo in range(0, n, block):
        tile = xm[..., lo : lo + block]
        amax = np.abs(tile.astype(np.float64)).max(axis=-1)  # a NaN propagates, as torch.amax
        s = (fmt.max / np.maximum(amax, 1e-12)).astype(np.float32)  # torchao: float64, then float32
        with np.errstate(invalid="ignore"):
            q[..., lo : lo + block] = fp8_cast(tile * s[..., None], fmt)
        scales.append(s)
    return np.moveaxis(q, -1, axis), np.moveaxis(np.stack(scales, -1), -1, axis)


def block_oracle(x: np.ndarray, fmt: fl.FloatFormat, block: int) -> tuple[np.ndarray, np.ndarray]:
    rows, cols = x.shape
    q = np.empty_like(x)
    scales = np.empty((-(-rows // block), -(-cols // block)), np.float32)
    for i, r in enumerate(range(0, rows, block)):
        for j, c in enumerate(range(0, cols, block)):
            blk = x[r : r + block, c : c + block]
            s = np.float32(fmt.max / max(float(np.abs(blk.astype(np.float64)).max()), 1e-12))
            q[r : r + block, c : c + block] = fp8_cast(blk * s, fmt)
            scales[i, j] = s
    return q, scales


def same(a: Any, b: Any) -> bool:
    """Equal as float32 values, NaN equal to NaN."""
    return bool(np.array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32), equal_nan=True))


# ---- delayed scaling ------------------------------------------------------------------------------------
rng0 = np.random.default_rng(7)
_mixed = np.exp(rng0.normal(0.0, 3.0, 60)).astype(np.float32)
_mixed[[3, 17, 18, 40]] = 0.0
_mixed[[9, 33]] = INF
_mixed[[12, 51]] = NAN
_mixed[25] = 1e4  # a spike
SEQUENCES = {
    "steady": [1.0] * 6,
    "zeros": [0.0, 0.0, 2.0, 0.0, 3.0, 0.0, 0.0, 1.0],
    "spike": [1.0, 1.0, 1000.0, 1.0, 1.0, 1.0, 0.5, 1.0],
    "inf": [1.0, INF, 2.0, 2.0, INF, 1.0, 1.0, 0.25],
    "nan": [1.0, NAN, 2.0, NAN, 0.5, 0.5],
    "extremes": [1e-40, 1e-30, 3e38, 1.0, 1e-45],
    "mixed": [float(v) for v in _mixed],
}


@pytest.mark.parametrize("name", sorted(SEQUENCES))
@pytest.mark.parametrize("length", [1, 4, 1024])
@pytest.mark.parametrize("algo", ["max", "most_recent"])
@pytest.mark.parametrize("margin", [0, 2])
@pytest.mark.parametrize("fp8_max", [448.0, 57344.0])
def test_delayed_update_equals_te_kernel_bulk(
    name: str, length: int, algo: str, margin: int, fp8_max: float
) -> None:
    h_ref = [np.float32(0.0)] * length
    s_ref = np.float32(1.0)  # TE's initial scale
    h, s = np.zeros(length, np.float32), np.float32(1.0)
    for amax in SEQUENCES[name]:
        h_ref[0] = np.float32(amax)  # the cast kernel writes the step's amax into slot 0
        h[0] = np.float32(amax)
        h_ref, s_ref = te_kernel_bulk(h_ref, s_ref, fp8_max, margin, algo)
        h, s = delayed_update(h, s, fp8_max, margin, algo)
        assert same(h, h_ref), (amax, h[:4], h_ref[:4])
        assert same(s, s_ref), (amax, s, s_ref)
        assert math.isfinite(s)
        assert s > 0


@pytest.mark.parametrize("length", [1, 4, 1024])
@pytest.mark.parametrize("algo", ["max", "most_recent"])
@pytest.mark.parametrize("margin", [0, 2])
def test_delayed_update_agrees_with_te_python_path_where_they_meet(
    length: int, algo: str, margin: int
) -> None:
    """On amaxes that are never 0 or NaN (where the unfused path differs by design, see
    delayed_update) and not within a factor 2^margin of fp32's range, the histories agree exactly,
    and the scales to one fp32 ulp: torch computes ``fp8_max / amax`` as
    ``amax.reciprocal() * fp8_max`` (``Tensor.__rtruediv__``), two roundings."""
    torch = pytest.importorskip("torch")
    seq = [v for v in SEQUENCES["mixed"] if v != 0 and not math.isnan(v)] + SEQUENCES["spike"]
    th = torch.zeros((length, 1), dtype=torch.float32)
    ts = torch.ones(1, dtype=torch.float32)
    h, s = np.zeros(length, np.float32), np.float32(1.0)
    for amax in seq:
        th[0] = amax
        h[0] = np.float32(amax)
        te_unfused(th, ts, 448.0, margin, algo)
        h, s = delayed_update(h, s, 448.0, margin, algo)
        assert same(h, th.numpy()[:, 0])
        theirs = np.float32(ts.item())
        assert abs(s - theirs) <= np.spacing(max(s, theirs)), (amax, s, theirs)


def test_a_step_with_amax_zero_leaves_the_history_as_te_fused_does() -> None:
    torch = pytest.importorskip("torch")
    h = np.array([0.0, 0.0, 0.0, 5.0], np.float32)  # the step's amax (slot 0) is 0: the module did not run
    th = torch.tensor(h).reshape(4, 1)
    te_unfused(th, torch.ones(1), 448.0, 0, "max")
    assert th[:, 0].tolist() == [0.0, 0.0, 5.0, 0.0]  # the Python path rolls anyway
    assert delayed_update(h, 89.6, 448.0)[0].tolist() == [0.0, 0.0, 0.0, 5.0]  # the fused path does not


@pytest.mark.parametrize("algo", ["max", "most_recent"])
@pytest.mark.parametrize("margin", [0, 2])
@pytest.mark.parametrize("role", ROLES)
def test_delayed_scaler_steps_like_te(algo: str, margin: int, role: str) -> None:
    """Tensors whose amaxes follow a recorded sequence (zeros, a spike, infinities, NaN elements):
    the scale used at each step, the amax recorded and the history after the update equal TE's,
    and the values equal ml_dtypes' saturating cast of x * scale."""
    recipe = Fp8Recipe("delayed", amax_history=4, amax_compute_algo=algo, margin=margin)
    scaler = OperandScaler(recipe, role)
    fmt = recipe.format_for(role)
    rng = np.random.default_rng(1)
    h_ref, s_ref = [np.float32(0.0)] * 4, np.float32(1.0)
    amaxes = [1.0, 0.0, 3.0, 1e4, 2.0, INF, 0.5, 1.0, 0.25, 4.0]
    for t, amax in enumerate(amaxes):
        x = (rng.uniform(-1.0, 1.0, (8, 16)) * (amax if math.isfinite(amax) else 1.0)).astype(np.float32)
        if amax > 0:
            x[0, 0] = amax
        if t == 4:
            x[1, 1] = NAN  # TE's amax skips a NaN element
        q = scaler.quantize(x, 1)
        assert same(q.scale, s_ref)
        with np.errstate(over="ignore", invalid="ignore"):
            assert same(q.values, fp8_cast(x * s_ref, fmt))
        stats = scaler.end_step()
        h_ref[0] = te_amax(x)
        assert same(stats.amax, h_ref[0])
        assert same(stats.scale, s_ref)
        h_ref, s_ref = te_kernel_bulk(h_ref, s_ref, fmt.max, margin, algo)
        assert same(scaler.amax_history, h_ref)
        assert same(scaler.scale, s_ref)


# ---- tensorwise: torchao's own casts --------------------------------------------------------------------
def _tensors() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    normal = rng.normal(0.0, 1.0, (32, 48)).astype(np.float32)
    outliers = normal.copy()
    outliers[3, 7], outliers[20, 1] = 3.0e4, -1.5e5
    tiny = (normal * 1e-6).astype(np.float32)
    with_inf = normal.copy()
    with_inf[5, 5] = -INF
    with_nan = normal.copy()
    with_nan[0, 9] = NAN
    wide = (np.exp(rng.normal(0.0, 6.0, (16, 16))) * rng.choice([-1.0, 1.0], (16, 16))).astype(np.float32)
    return {
        "normal": normal,
        "outliers": outliers,
        "tiny": tiny,
        "zeros": np.zeros((4, 8), np.float32),
        "inf": with_inf,
        "nan": with_nan,
        "wide": wide,
    }


TENSORS = _tensors()


@pytest.mark.parametrize("name", sorted(TENSORS))
@pytest.mark.parametrize("role", ["input", "grad"])
@pytest.mark.parametrize("pow2", [False, True])
def test_tensorwise_equals_torchao(name: str, role: str, pow2: bool) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchao")
    from torchao.float8.float8_scaling_utils import hp_tensor_to_float8_dynamic
    from torchao.float8.float8_training_tensor import LinearMMConfig

    x = TENSORS[name]
    recipe = Fp8Recipe("tensorwise", pow2_scale=pow2)
    fmt = recipe.format_for(role)  # input: E4M3, grad: E5M2 (hybrid)
    dtype = {E4M3.name: torch.float8_e4m3fn, E5M2.name: torch.float8_e5m2}[fmt.name]
    theirs = hp_tensor_to_float8_dynamic(
        torch.from_numpy(x.copy()), dtype, LinearMMConfig(), round_scales_to_power_of_2=pow2
    )
    q = OperandScaler(recipe, role).quantize(x, 1)
    if not np.isfinite(np.abs(x).max()):
        # an inf or NaN amax: torchao's scale is 0 or NaN; floatlab follows Transformer Engine's
        # current scaling (scale 1, never NaN): the values are the saturating cast of x itself
        assert float(q.scale) == 1.0
        want = np.clip(x, -fmt.max, fmt.max).astype(ML[fmt.name]).astype(np.float32)
        assert np.array_equal(q.values, want, equal_nan=True)
        return
    assert same(q.scale, theirs._scale.numpy())
    codes = theirs._data.view(torch.uint8).numpy()
    their_values = theirs._data.float().numpy()
    nan = np.isnan(their_values)
    assert np.array_equal(np.isnan(q.values), nan)
    # the codes of every non-NaN value, bit for bit (a NaN's code is the converter's choice)
    assert np.array_equal(fl.encode_array(q.values, fmt)[~nan], codes[~nan])


@pytest.mark.parametrize("pow2", [False, True])
def test_current_scale_of_one_amax_is_the_array_paths(pow2: bool) -> None:
    # a scalar amax takes a path of its own (no door call per step): the same bits as an array
    rng = np.random.default_rng(2)
    amaxes = [0.0, -0.0, 1e-13, 1e-12, 2.0**-149, 3.4e38, 1e39, math.inf, math.nan, 448.0, 57344.0]
    amaxes += (np.exp2(rng.uniform(-150, 128, 400)) * rng.uniform(1, 2, 400)).tolist()
    with np.errstate(over="ignore"):
        narrow = [np.float32(a) for a in amaxes]
    for fmt in (E4M3, E5M2):
        arrays = current_scale(np.array(amaxes), fmt, pow2)
        # the oracle: the rounding door's float32 of the float64 quotient, 1 for inf and NaN
        a32 = fl.round_array(np.array(amaxes), "fp32").astype(np.float64)
        door = fl.round_array(fmt.max / np.maximum(a32, 1e-12), "fp32")
        door = np.where(np.isfinite(a32), door, 1.0).astype(np.float32)
        if pow2:
            door = (door.view(np.uint32) & np.uint32(0xFF800000)).view(np.float32)
        np.testing.assert_array_equal(arrays.view(np.uint32), door.view(np.uint32))
        for i, a in enumerate(amaxes):
            for one in (a, np.float64(a)):
                got = current_scale(one, fmt, pow2)
                assert got.dtype == np.float32
                assert got.tobytes() == arrays[i].tobytes(), (fmt.name, a)
        for a32, want in zip(narrow, current_scale(np.array(narrow), fmt, pow2), strict=True):
            assert current_scale(a32, fmt, pow2).tobytes() == want.tobytes(), (fmt.name, a32)


def test_current_scale_equals_torchao_amax_to_scale() -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchao")
    from torchao.float8.float8_utils import amax_to_scale

    rng = np.random.default_rng(5)
    amax = np.exp(rng.uniform(-100.0, 88.0, 4000)).astype(np.float32)
    amax = np.concatenate(
        [amax, np.array([0.0, 1e-45, 1e-12, 448.0, 57344.0, INF, NAN, F32_MAX], np.float32)]
    )
    finite = np.isfinite(amax)
    for fmt, dtype in ((E4M3, torch.float8_e4m3fn), (E5M2, torch.float8_e5m2)):
        theirs = amax_to_scale(torch.from_numpy(amax), dtype).numpy()
        ours = current_scale(amax, fmt)
        assert same(ours[finite], theirs[finite])
        assert (ours[~finite] == 1.0).all()  # Transformer Engine's rule where torchao gives 0 or NaN


def test_pow2_rounds_down_exactly_where_torchao_log2_rounds_up() -> None:
    """torchao rounds with exp2(floor(log2(s))) in float32; a scale one ulp below 2^16 has the
    float32 log2 16 and comes back as 2^16, above it. Clearing the fraction bits gives 2^15."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchao")
    from torchao.float8.float8_utils import amax_to_scale

    amax = np.nextafter(np.float32(448.0 / 65536.0), np.float32(INF))  # 448 / amax just below 2^16
    exact = current_scale(amax, E4M3)
    assert 65535.0 < float(exact) < 65536.0
    theirs = float(amax_to_scale(torch.tensor(amax), torch.float8_e4m3fn, round_scales_to_power_of_2=True))
    ours = float(current_scale(amax, E4M3, pow2=True))
    assert (ours, theirs) == (32768.0, 65536.0)


def test_round_down_pow2_against_frexp() -> None:
    rng = np.random.default_rng(11)
    s = np.exp(rng.uniform(-80.0, 80.0, 5000)).astype(np.float32)
    s = np.concatenate([s, np.array([1.0, 2.0**-126, 2.0**127, 3.0 * 2.0**-127], np.float32)])
    want = [math.ldexp(1.0, math.frexp(float(v))[1] - 1) for v in s]  # exact: 2^floor(log2 v)
    got = round_down_pow2(s)
    ok = s >= np.float32(2.0**-126)  # (a subnormal scale has no exponent bits to keep: it becomes 0)
    assert np.array_equal(got[ok], np.array(want, np.float32)[ok])
    assert same(round_down_pow2(np.array([0.0, INF, NAN], np.float32)), [0.0, INF, NAN])


# ---- blockwise ---------------------------------------------------------------------------------------------
SHAPES = [(5, 9, 7), (3, 8, 4), (12, 20, 6), (1, 1, 1), (130, 260, 131)]


@pytest.mark.parametrize("block", [4, 8, 128])
@pytest.mark.parametrize(("m", "k", "n"), SHAPES)
@pytest.mark.parametrize("fmt", [E4M3, E5M2], ids=lambda f: f.name)
def test_tiles_and_blocks_equal_the_saturating_cast_of_x_times_scale(
    block: int, m: int, k: int, n: int, fmt: fl.FloatFormat
) -> None:
    rng = np.random.default_rng(m * 1000 + k)
    x = (rng.normal(0.0, 1.0, (m, k)) * np.exp(rng.normal(0.0, 4.0, (m, 1)))).astype(np.float32)
    x[0, 0] = 0.0
    for axis in (0, 1):
        t = tile_quantize(x, fmt, block, axis)
        q_ref, s_ref = tile_oracle(x, fmt, block, axis)
        assert same(t.scale, s_ref)
        assert same(t.values, q_ref)
    b = block_quantize(x, fmt, block)
    q_ref, s_ref = block_oracle(x, fmt, block)
    assert same(b.scale, s_ref)
    assert same(b.values, q_ref)


@pytest.mark.parametrize("block", [4, 8, 128])
@pytest.mark.parametrize(("m", "k", "n"), SHAPES)
@pytest.mark.parametrize("b_role", ["weight", "grad"])
def test_blockwise_gemm_against_float64_dequantized_product(
    block: int, m: int, k: int, n: int, b_role: str
) -> None:
    """``a`` in 1 x block tiles along K, ``b`` a weight (blocks) or a gradient (block x 1 tiles along
    K). The reference dequantizes the oracle's fp8 values with the same float32 inverse scales and
    multiplies in float64. Bound: each K-slice sums at most ``block`` exact products in fp32
    (at most block - 1 roundings, each within u = 2^-24 of the running sum, which is at most the
    sum of the products' magnitudes), then one rounding for scale_a * scale_b, one for the FMA of
    each of the T slices, and the T - 1 sums across slices: to first order at most
    (block + T + 1) u times sum_k |a_k b_k|; (block + T + 2) u covers the second-order terms."""
    rng = np.random.default_rng(k * 7 + n)
    a = (rng.normal(0.0, 1.0, (m, k)) * np.exp(rng.normal(0.0, 3.0, (m, 1)))).astype(np.float32)
    b = (rng.normal(0.0, 1.0, (k, n)) * np.exp(rng.normal(0.0, 3.0, (1, n)))).astype(np.float32)
    recipe = Fp8Recipe("blockwise", fp8_format="e4m3", block=block)
    qa = OperandScaler(recipe, "input").quantize(a, 1)
    qb = OperandScaler(recipe, b_role).quantize(b, 0)
    out = scaled_matmul(qa, qb)

    fa, sa = tile_oracle(a, E4M3, block, 1)
    fb, sb = block_oracle(b, E4M3, block) if b_role == "weight" else tile_oracle(b, E4M3, block, 0)
    assert same(qa.values, fa)
    assert same(qb.values, fb)
    inv_a = np.repeat(np.float32(1.0) / sa, block, axis=1)[:, :k].astype(np.float64)
    inv_b = np.float32(1.0) / sb
    inv_b = np.repeat(inv_b, block, axis=0)[:k]
    if b_role == "weight":
        inv_b = np.repeat(inv_b, block, axis=1)[:, :n]
    da, db = fa * inv_a, fb * inv_b.astype(np.float64)
    ref = da @ db
    slices = -(-k // block)
    bound = (block + slices + 2) * U * (np.abs(da) @ np.abs(db))
    assert out.dtype == np.float32
    assert out.shape == (m, n)
    assert np.all(np.abs(out - ref) <= bound)


def test_blockwise_gemm_promotes_each_slice_with_one_rounding() -> None:
    """Two K-slices: the first sums to 1, the second's scaled partial sum is 16776961 * 2^-64 times
    65537 = 2^-24 (1 + 65281 * 2^-40), just above 2^-24. Multiplying first rounds that product to
    2^-24 (65281 < 2^16, half its ulp), and 1 + 2^-24 is a tie that goes to 1; DeepGEMM's fused
    multiply-add sees the exact sum, above the tie, and gives 1 + 2^-23."""
    a = np.array([[1.0, 65537.0]], np.float32)
    b = np.array([[1.0], [1.0]], np.float32)
    a_inv = np.array([[1.0, 16776961 * 2.0**-64]], np.float32)
    b_inv = np.array([[1.0], [1.0]], np.float32)
    out = blockwise_matmul(a, a_inv, b, b_inv, 1)
    assert float(out[0, 0]) == 1.0 + 2.0**-23
    unfused = np.float32(1.0) + a_inv[0, 1] * b_inv[1, 0] * np.float32(65537.0)
    assert float(unfused) == 1.0


def test_blockwise_gemm_threads_keep_their_own_partials() -> None:
    """The batched slice GEMMs write into a buffer kept per thread between calls: GEMMs of other
    shapes running at the same time in other threads give the same bits as each alone, and
    the slice loop (no buffer) agrees with the batched path, and with a single slice's GEMM
    scaled in its own memory (K = 32, the last case)."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(8)
    cases = []
    for m, k, n in ((64, 256, 48), (40, 512, 96), (128, 128, 16), (8, 384, 200), (24, 32, 40)):
        a = rng.integers(-8, 8, (m, k)).astype(np.float32)
        b = rng.integers(-8, 8, (k, n)).astype(np.float32)
        a_inv = rng.random((m, k // 32)).astype(np.float32)
        b_inv = rng.random((k // 32, n)).astype(np.float32)
        cases.append((a, a_inv, b, b_inv))
    alone = [blockwise_matmul(a, a_inv, b, b_inv, 32) for a, a_inv, b, b_inv in cases]
    for c, want in zip(cases, alone, strict=True):
        a, a_inv, b, b_inv = c
        # a held transposed (the batched path reads its base), and a strided view (the slice loop)
        held_t = blockwise_matmul(np.asfortranarray(a), a_inv, b, b_inv, 32)
        strided = np.zeros((a.shape[0], 2 * a.shape[1]), np.float32)
        strided[:, ::2] = a
        looped = blockwise_matmul(strided[:, ::2], a_inv, b, b_inv, 32)
        np.testing.assert_array_equal(held_t, want)
        np.testing.assert_array_equal(looped, want)
    with ThreadPoolExecutor(4) as pool:
        for _ in range(5):
            got = list(pool.map(lambda c: blockwise_matmul(c[0], c[1], c[2], c[3], 32), cases * 3))
            for g, want in zip(got, alone * 3, strict=True):
                np.testing.assert_array_equal(g, want)


def test_blockwise_retiles_the_transposed_input_and_keeps_weight_blocks() -> None:
    """The weight-gradient GEMM casts x.T again in tiles along the tokens (DeepSeek's 128x1 tiles);
    the data-gradient GEMM's W.T has the same 128x128 blocks as W, transposed."""
    rng = np.random.default_rng(2)
    x = rng.normal(0.0, 1.0, (10, 6)).astype(np.float32)
    w = rng.normal(0.0, 1.0, (6, 9)).astype(np.float32)
    recipe = Fp8Recipe("blockwise", block=4)
    xs, ws = OperandScaler(recipe, "input"), OperandScaler(recipe, "weight")
    qx, qxt = xs.quantize(x, 1), xs.quantize(x.T, 1)
    assert same(qxt.values, tile_oracle(x.T, E4M3, 4, 1)[0])
    assert not same(qxt.values, qx.values.T)
    qw, qwt = ws.quantize(w, 0), ws.quantize(w.T, 0)
    assert same(qwt.values, qw.values.T)
    assert same(qwt.scale, qw.scale.T)


def test_blockwise_pow2_scales_are_the_tile_scales_rounded_down() -> None:
    rng = np.random.default_rng(6)
    x = (rng.normal(0.0, 1.0, (9, 21)) * np.exp(rng.normal(0.0, 5.0, (9, 1)))).astype(np.float32)
    q = OperandScaler(Fp8Recipe("blockwise", block=8, pow2_scale=True), "input").quantize(x, 1)
    _, exact = tile_oracle(x, E4M3, 8, 1)
    want = np.array(
        [[math.ldexp(1.0, math.frexp(float(v))[1] - 1) for v in row] for row in exact], np.float32
    )
    assert same(q.scale, want)
    s = np.repeat(want, 8, axis=1)[:, :21]
    assert same(q.values, fp8_cast(x * s, E4M3))


def test_wider_inputs_are_rounded_to_fp32_first() -> None:
    """A float64 operand is cast as its fp32 rounding is (torchao's ``tensor.to(torch.float32)``)."""
    x64 = np.random.default_rng(8).normal(0.0, 1.0, (6, 10))
    for kind in RECIPES:
        a = OperandScaler(_recipe(kind, 4), "input").quantize(x64, 1)
        b = OperandScaler(_recipe(kind, 4), "input").quantize(x64.astype(np.float32), 1)
        assert a.values.dtype == np.float32
        assert same(a.values, b.values)
        assert same(a.scale, b.scale)


# ---- per-tensor GEMM --------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["tensorwise", "delayed"])
def test_per_tensor_gemm_is_the_scaled_mm_epilogue(kind: str) -> None:
    rng = np.random.default_rng(4)
    x = rng.normal(0.0, 2.0, (3, 5, 24)).astype(np.float32)  # leading batch axes
    w = rng.normal(0.0, 0.1, (24, 7)).astype(np.float32)
    f = Fp8Scaling(Fp8Recipe(kind))
    for _ in range(2):  # delayed: the second step has real scales
        out = f.matmul("fc", x, "input", w, "weight")
        f.end_step()
    qa = f.scaler("fc", "input").quantize(x, 2)
    qb = f.scaler("fc", "weight").quantize(w, 0)
    inv = np.float32(1.0) / qa.scale * (np.float32(1.0) / qb.scale)  # one fp32 factor
    exact = qa.values.astype(np.float64) @ qb.values.astype(np.float64)  # fp8 products: exact
    ref = exact * float(inv)
    bound = (24 + 2) * U * (np.abs(qa.values.astype(np.float64)) @ np.abs(qb.values)) * float(inv)
    assert out.shape == (3, 5, 7)
    assert np.all(np.abs(out - ref) <= bound)


def _recipe(kind: str, history: int) -> Fp8Recipe:
    """A small recipe of each kind: delayed with a short history, blockwise with tiles of 8."""
    if kind == "delayed":
        return Fp8Recipe(kind, amax_history=history)
    return Fp8Recipe(kind, block=8) if kind == "blockwise" else Fp8Recipe(kind)


@pytest.mark.parametrize("kind", RECIPES)
def test_empty_operands_leading_axes_and_byte_order(kind: str) -> None:
    f = Fp8Scaling(_recipe(kind, 4))
    w = np.ones((5, 3), np.float32)
    assert f.matmul("a", np.zeros((0, 5), np.float32), "input", w, "weight").shape == (0, 3)
    k0 = f.matmul("b", np.ones((2, 0), np.float32), "input", np.ones((0, 3), np.float32), "weight")
    assert k0.tolist() == [[0.0] * 3] * 2  # an empty sum is 0
    x = np.random.default_rng(3).normal(0.0, 1.0, (2, 4, 5)).astype(np.float32)
    g = Fp8Scaling(_recipe(kind, 4))
    batched = g.matmul("c", x, "input", w, "weight")
    h = Fp8Scaling(_recipe(kind, 4))
    flat = h.matmul("c", x.reshape(8, 5), "input", w, "weight")
    assert same(batched, flat.reshape(2, 4, 3))  # tiles run along K: the rows are independent
    swapped = Fp8Scaling(_recipe(kind, 4)).matmul("c", x.astype(">f4"), "input", w.astype(">f4"), "weight")
    assert same(swapped, batched)


# ---- statistics ---------------------------------------------------------------------------------------
def _direct_shares(x: np.ndarray, scale: np.float32, fmt: fl.FloatFormat) -> tuple[float, float, float]:
    with np.errstate(over="ignore", invalid="ignore"):
        xs = x * scale
        q = fp8_cast(xs, fmt)
    n = x.size
    saturated = np.count_nonzero(plain_overflows(xs, fmt)) / n
    flushed = np.count_nonzero((x != 0) & (q == 0)) / n
    subnormal = np.count_nonzero((q != 0) & (np.abs(q) < fmt.smallest_normal)) / n
    return saturated, flushed, subnormal


@pytest.mark.parametrize("kind", RECIPES)
@pytest.mark.parametrize("role", ["input", "grad"])
def test_stats_equal_direct_counts(kind: str, role: str) -> None:
    rng = np.random.default_rng(9)
    recipe = _recipe(kind, 4)
    scaler = OperandScaler(recipe, role)
    fmt = recipe.format_for(role)
    for step in range(4):
        x = (np.exp(rng.uniform(-30.0, 8.0, (16, 24))) * rng.choice([-1.0, 1.0], (16, 24))).astype(np.float32)
        x[rng.random((16, 24)) < 0.1] = 0.0
        if step == 3:
            x *= np.float32(300.0)  # after three steps at a smaller amax: delayed saturates here
        q = scaler.quantize(x, 1)
        stats = scaler.end_step()
        if kind == "blockwise":
            flushed = np.count_nonzero((x != 0) & (q.values == 0)) / x.size
            subnormal = np.count_nonzero((q.values != 0) & (np.abs(q.values) < fmt.smallest_normal)) / x.size
            want = (0.0, flushed, subnormal)
            assert stats.scale == float(tile_oracle(x, fmt, 8, 1)[1].min())
        else:
            want = _direct_shares(x, np.float32(stats.scale), fmt)
        assert (stats.saturated, stats.flushed, stats.subnormal) == pytest.approx(want, abs=0)
        assert stats.amax == float(np.abs(x).max())
    if kind == "delayed":
        assert stats.saturated > 0
    else:
        assert stats.saturated == 0.0


def test_a_spike_saturates_under_delayed_scaling_not_under_current() -> None:
    steady = np.array([[0.5, -1.0, 0.25, 0.75]], np.float32)
    spike = np.array([[0.5, -1.0, 64.0, 0.75]], np.float32)  # 64 * 448 = 28672: beyond E4M3's 464
    w = np.array([[1.0], [1.0], [1.0], [1.0]], np.float32)
    runs = {kind: Fp8Scaling(_recipe(kind, 16)) for kind in ("delayed", "tensorwise")}
    for _kind, f in runs.items():
        for x in (steady, steady, spike, steady):
            f.matmul("fc", x, "input", w, "weight")
            f.end_step()
    delayed = runs["delayed"].history["fc.input"]
    current = runs["tensorwise"].history["fc.input"]
    assert delayed["scale"][2] == 448.0  # from the steady steps' amax 1
    want = _direct_shares(spike, np.float32(448.0), E4M3)[0]
    assert delayed["saturated"] == [0.0, 0.0, want, 0.0]
    assert want == 0.25
    assert current["saturated"] == [0.0, 0.0, 0.0, 0.0]
    assert current["scale"][2] == 7.0
    assert delayed["scale"][3] == 7.0  # the history now holds the spike


# ---- a linear layer's three GEMMs, history and checkpoints ------------------------------------------------
def _linear_step(f: Fp8Scaling, x: np.ndarray, w: np.ndarray, dy: np.ndarray) -> list[np.ndarray]:
    return [
        f.matmul("fc", x, "input", w, "weight"),
        f.matmul("fc", dy, "grad", w.T, "weight"),
        f.matmul("fc", x.T, "input", dy, "grad"),
    ]


def _batches(steps: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(12)
    return [
        (
            rng.normal(0.0, 1.0 + t, (20, 12)).astype(np.float32),
            rng.normal(0.0, 0.2, (12, 10)).astype(np.float32),
            rng.normal(0.0, 1e-3, (20, 10)).astype(np.float32),
        )
        for t in range(steps)
    ]


@pytest.mark.parametrize("kind", RECIPES)
def test_a_step_casts_each_operand_once_with_one_scale(kind: str) -> None:
    f = Fp8Scaling(_recipe(kind, 1024))
    x, w, dy = _batches(1)[0]
    _linear_step(f, x, w, dy)
    stats = f.end_step()
    assert sorted(stats) == ["fc.grad", "fc.input", "fc.weight"]
    assert stats["fc.input"]["amax"] == float(np.abs(x).max())
    if kind != "blockwise":
        # later casts in a step take the step's scale, whatever the tensor: the first's values
        s = OperandScaler(f.recipe, "weight")
        q1, q2, q3 = s.quantize(w, 0), s.quantize(w.T, 0), s.quantize(2 * w, 0)
        assert same(q2.values, q1.values.T)
        assert same(q3.scale, q1.scale)
        assert s.end_step().amax == float(np.abs(w).max())
    assert all(len(v) == 1 for rec in f.history.values() for v in rec.values())


@pytest.mark.parametrize("kind", RECIPES)
def test_a_checkpoint_resumes_the_run_exactly(kind: str, tmp_path: Any) -> None:
    recipe = _recipe(kind, 3)
    batches = _batches(5)
    straight = Fp8Scaling(recipe)
    outs = []
    for x, w, dy in batches:
        outs.append(_linear_step(straight, x, w, dy))
        straight.end_step()
    first = Fp8Scaling(recipe)
    for x, w, dy in batches[:2]:
        _linear_step(first, x, w, dy)
        first.end_step()
    path = save_checkpoint(tmp_path / "fp8.npz", {"fp8": first.state_dict()})
    resumed = Fp8Scaling(recipe)
    resumed.load_state_dict(load_checkpoint(path)["fp8"])
    for t, (x, w, dy) in enumerate(batches[2:], start=2):
        for got, want in zip(_linear_step(resumed, x, w, dy), outs[t], strict=False):
            assert same(got, want)
        resumed.end_step()
    assert resumed.history == straight.history
    assert resumed.steps == 5


def test_an_operand_first_used_later_has_its_own_history() -> None:
    f = Fp8Scaling(Fp8Recipe("delayed"))
    x, w, _ = _batches(1)[0]
    f.matmul("a", x, "input", w, "weight")
    f.end_step()
    f.matmul("b", x, "input", w, "weight")
    out = f.end_step()
    assert f.first_step == {"a.input": 0, "a.weight": 0, "b.input": 1, "b.weight": 1}
    assert len(f.history["a.input"]["amax"]) == 2
    assert len(f.history["b.input"]["amax"]) == 1
    assert out["a.input"]["scale"] == f.history["a.input"]["scale"][1]


def test_an_unused_operand_reports_no_amax_and_keeps_its_delayed_scale() -> None:
    f = Fp8Scaling(Fp8Recipe("delayed", amax_history=4))
    x, w, _ = _batches(1)[0]
    f.matmul("a", x, "input", w, "weight")
    f.end_step()
    held = f.scaler("a", "input").scale
    out = f.end_step()
    assert out["a.input"] == {"amax": 0.0, "scale": held, "saturated": 0.0, "flushed": 0.0, "subnormal": 0.0}
    assert f.scaler("a", "input").scale == held


# ---- recipes and bad input --------------------------------------------------------------------------------
def test_recipe_round_trips_and_formats() -> None:
    for kind in RECIPES:
        for fmt in ("hybrid", "e4m3"):
            r = Fp8Recipe(kind, fmt)
            assert Fp8Recipe.from_dict(r.to_dict()) == r
            assert r.format_for("input") is E4M3
            assert r.format_for("weight") is E4M3
            assert r.format_for("grad") is (E5M2 if fmt == "hybrid" else E4M3)
            source = {"tensorwise": "torchao", "delayed": "Transformer Engine", "blockwise": "DeepSeek-V3"}
            assert source[kind] in r.describe()


def _scaler(kind: str = "tensorwise", role: str = "input") -> OperandScaler:
    return OperandScaler(Fp8Recipe(kind), role)


def _q(layout: str, shape: tuple[int, ...], axis: int, block: int = 0) -> Quantized:
    return Quantized(np.zeros(shape, np.float32), np.float32(1.0), E4M3, axis, layout, block)


BAD: list[tuple[str, Callable[[], object], str]] = [
    ("kind", lambda: Fp8Recipe("mxfp8"), "kind='mxfp8': expected one of tensorwise, delayed, blockwise"),
    ("kind type", lambda: Fp8Recipe(3), "kind=3: expected one of"),  # type: ignore[arg-type]
    ("format", lambda: Fp8Recipe("delayed", "e5m2"), "fp8_format='e5m2': expected one of hybrid, e4m3"),
    ("history", lambda: Fp8Recipe("delayed", amax_history=0), "amax_history=0: expected an integer >= 1"),
    ("history type", lambda: Fp8Recipe("delayed", amax_history=2.5), "amax_history=2.5"),  # type: ignore[arg-type]
    ("algo", lambda: Fp8Recipe("delayed", amax_compute_algo="mean"), "amax_compute_algo='mean': expected"),
    ("margin", lambda: Fp8Recipe("delayed", margin=-1), "margin=-1: expected an integer >= 0"),
    ("block", lambda: Fp8Recipe("blockwise", block=0), "block=0: expected an integer >= 1"),
    ("pow2 type", lambda: Fp8Recipe("tensorwise", pow2_scale="yes"), "pow2_scale='yes': expected true"),  # type: ignore[arg-type]
    ("pow2 delayed", lambda: Fp8Recipe("delayed", pow2_scale=True), "pow2_scale=True: the tensorwise and"),
    ("margin current", lambda: Fp8Recipe("tensorwise", margin=2), "margin=2: the delayed recipe reads it"),
    ("block delayed", lambda: Fp8Recipe("delayed", block=64), "block=64: the blockwise recipe reads it"),
    ("history blockwise", lambda: Fp8Recipe("blockwise", amax_history=8), "amax_history=8: the delayed"),
    ("role", lambda: Fp8Recipe("delayed").format_for("output"), "role='output': expected one of input"),
    ("from_dict type", lambda: Fp8Recipe.from_dict([1]), "fp8 recipe=[1]: expected a mapping"),
    ("from_dict key", lambda: Fp8Recipe.from_dict({"kind": "delayed", "H": 2}), "fp8 recipe key 'H'"),
    ("from_dict kind", lambda: Fp8Recipe.from_dict({"margin": 1}), "expected a 'kind'"),
    ("scaler recipe", lambda: OperandScaler("delayed", "input"), "recipe='delayed': expected an Fp8Recipe"),  # type: ignore[arg-type]
    ("scaler role", lambda: OperandScaler(Fp8Recipe("delayed"), "bias"), "role='bias': expected one of"),
    ("axis", lambda: _scaler().quantize(np.ones((2, 3), np.float32), 2), "reduce_axis=2: expected an axis"),
    (
        "axis low",
        lambda: _scaler().quantize(np.ones((2, 3), np.float32), -3),
        "reduce_axis=-3: expected an integer >= -2",
    ),
    ("scalar", lambda: _scaler().quantize(np.float32(1.0), 0), "an operand of shape (): expected an array"),
    ("strings", lambda: _scaler().quantize(np.array(["a"]), 0), "dtype <U1: expected float64"),
    (
        "weight 3-d",
        lambda: _scaler("blockwise", "weight").quantize(np.ones((2, 2, 2)), 0),
        "a weight of shape (2, 2, 2)",
    ),
    (
        "mm types",
        lambda: scaled_matmul(np.ones((2, 2)), _q("tensor", (2, 2), 0)),  # type: ignore[arg-type]
        "scaled_matmul of ndarray, Quantized",
    ),
    (
        "mm a axis",
        lambda: scaled_matmul(_q("tensor", (2, 3), 0), _q("tensor", (3, 2), 0)),
        "a of shape (2, 3) reduced over axis 0",
    ),
    (
        "mm b axis",
        lambda: scaled_matmul(_q("tensor", (2, 3), 1), _q("tensor", (3, 2), 1)),
        "b of shape (3, 2) reduced over axis 1",
    ),
    (
        "mm inner",
        lambda: scaled_matmul(_q("tensor", (2, 3), 1), _q("tensor", (4, 2), 0)),
        "shapes (2, 3) and (4, 2): inner",
    ),
    (
        "mm mixed",
        lambda: scaled_matmul(_q("tensor", (2, 3), 1), _q("tile", (3, 2), 0, 4)),
        "a tensor operand (block 0) and a tile",
    ),
    (
        "mm blocks",
        lambda: scaled_matmul(_q("tile", (2, 3), 1, 4), _q("tile", (3, 2), 0, 8)),
        "(block 4) and a tile one (block 8)",
    ),
    (
        "site",
        lambda: Fp8Scaling(Fp8Recipe("delayed")).scaler("a/b", "input"),
        "site='a/b': expected a non-empty name",
    ),
    ("site type", lambda: Fp8Scaling(Fp8Recipe("delayed")).scaler(1, "input"), "site=1: expected a string"),  # type: ignore[arg-type]
    (
        "site empty",
        lambda: Fp8Scaling(Fp8Recipe("delayed")).scaler("", "input"),
        "site='': expected a non-empty",
    ),
    (
        "scaling recipe",
        lambda: Fp8Scaling({"kind": "delayed"}),  # type: ignore[arg-type]
        "recipe={'kind': 'delayed'}: expected an Fp8Recipe",
    ),
    (
        "matmul shapes",
        lambda: Fp8Scaling(Fp8Recipe("delayed")).matmul(
            "fc", np.ones((2, 3)), "input", np.ones((2, 3)), "weight"
        ),
        "matmul of shapes (2, 3) and (2, 3)",
    ),
    (
        "matmul 1-d",
        lambda: Fp8Scaling(Fp8Recipe("delayed")).matmul("fc", np.ones(3), "input", np.ones((3, 1)), "weight"),
        "matmul of shapes (3,) and (3, 1)",
    ),
]


@pytest.mark.parametrize(("label", "call", "message"), BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_one_line_naming_the_value(label: str, call: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)) as err:
        call()
    assert "\n" not in str(err.value)


def _delayed_state(**changes: Any) -> dict[str, Any]:
    s = OperandScaler(Fp8Recipe("delayed", amax_history=3), "input")
    s.quantize(np.array([[2.0]], np.float32), 1)
    s.end_step()
    state = s.state_dict()
    state.update(changes)
    return state


BAD_STATES: list[tuple[str, dict[str, Any], str]] = [
    ("recipe", _delayed_state(recipe=Fp8Recipe("delayed").to_dict()), "expected one of 'input' under"),
    ("role", _delayed_state(role="grad"), "an fp8 scaler state of 'grad'"),
    ("scale", _delayed_state(scale=-1.0), "scale=-1.0: expected a finite fp32 scale above 0"),
    ("scale inf", _delayed_state(scale=1e39), "scale=1e+39: expected a finite fp32 scale"),
    ("history length", _delayed_state(amax_history=[1.0, 2.0]), "amax_history=[1.0, 2.0]: expected 3 amaxes"),
    ("history sign", _delayed_state(amax_history=[1.0, -2.0, 0.0]), "amax_history=[1.0, -2.0, 0.0]"),
    ("steps", _delayed_state(steps=-1), "steps=-1: expected an integer >= 0"),
]


@pytest.mark.parametrize(("label", "state", "message"), BAD_STATES, ids=[b[0] for b in BAD_STATES])
def test_a_bad_scaler_state_is_refused_and_changes_nothing(
    label: str, state: dict[str, Any], message: str
) -> None:
    s = OperandScaler(Fp8Recipe("delayed", amax_history=3), "input")
    with pytest.raises(ValueError, match=re.escape(message)):
        s.load_state_dict(state)
    assert s.scale == 1.0
    assert s.steps == 0
    assert s.amax_history.tolist() == [0.0, 0.0, 0.0]


def test_a_bad_scaling_state_is_refused_and_changes_nothing() -> None:
    f = Fp8Scaling(Fp8Recipe("delayed", amax_history=3))
    x, w, dy = _batches(1)[0]
    _linear_step(f, x, w, dy)
    f.end_step()
    good = f.state_dict()
    other = Fp8Scaling(Fp8Recipe("delayed", amax_history=3))
    for bad, message in [
        (
            {**good, "recipe": Fp8Recipe("tensorwise").to_dict()},
            "an fp8 scaling state of {'kind': 'tensorwise'",
        ),
        ({**good, "steps": 2}, "]): expected 2 numbers"),
        ({**good, "first_step": {}}, "expected the same in first_step and history"),
        ({k: v for k, v in good.items() if k != "history"}, "fp8 scaling state lacks 'history'"),
        (
            {
                **good,
                "operands": {"fc.bias": good["operands"]["fc.input"]},
                "first_step": {"fc.bias": 0},
                "history": {"fc.bias": good["history"]["fc.input"]},
            },
            "role='bias'",
        ),
    ]:
        with pytest.raises(ValueError, match=re.escape(message)):
            other.load_state_dict(bad)
        assert other.steps == 0
        assert other.history == {}


@pytest.mark.parametrize("fmt", [E4M3, E5M2])
def test_compiled_cast_counts_equal_the_numpy_counts(fmt: fl.FloatFormat) -> None:
    # the one-pass kernel (C-contiguous operands) against the NumPy counts (the same values laid
    # out in Fortran order, which the kernel declines), on values that saturate, flush, land
    # subnormal, tie at the overflow threshold, and are inf or NaN
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((64, 48)) * 10.0 ** rng.uniform(-8, 3, (64, 48))).astype(np.float32)
    x[0, :4] = [0.0, np.nan, np.inf, -np.inf]
    threshold = fmt.max + 2.0 ** (fmt.emax - fmt.mantissa_bits - 1)
    x[1, :2] = [threshold, -threshold]
    q = saturating_cast(x, fmt)
    fast = cast_shares(x, q, fmt, xs=x, bound=float("inf"))
    slow = cast_shares(
        np.asfortranarray(x), np.asfortranarray(q), fmt, xs=np.asfortranarray(x), bound=float("inf")
    )
    assert fast == slow
    assert fast.saturated > 0
    assert fast.flushed > 0
    assert fast.subnormal > 0


@pytest.mark.parametrize("kind", ["tensorwise", "blockwise"])
def test_a_non_finite_amax_never_gives_a_nan_scale(kind: str) -> None:
    # the tile (or tensor) holding an infinity or a NaN gets the scale 1: its infinities saturate,
    # its NaN stays, and the other tiles are cast as usual (Transformer Engine's rule)
    x = np.ones((2, 8), np.float32)
    x[0, 1], x[1, 6] = np.inf, np.nan
    recipe = Fp8Recipe(kind, block=4) if kind == "blockwise" else Fp8Recipe(kind)
    q = OperandScaler(recipe, "input").quantize(x, 1)
    assert not np.isnan(q.scale).any()
    assert q.values[0, 1] == 448.0
    assert np.isnan(q.values[1, 6])
    assert np.isnan(q.values).sum() == 1
