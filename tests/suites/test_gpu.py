"""The CuPy backend on a CUDA GPU (marker ``gpu``; every test is skipped without CUDA).

``benchmarks/run_gpu.sh`` runs these with ``pytest -m gpu`` and then the GPU benchmarks. Oracles:
the CPU rounding kernels (bit for bit on 10^7 values per mode), NumPy's simulation of the GEMM
(within fp32 accumulation-order error), the CPU trainer's loss curve, the NumPy histogram.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

import floatlab as fl
from floatlab.backend import cuda_available, get_backend, is_cupy, to_numpy
from floatlab.train.precision.matmul import matmul

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not cuda_available(), reason="no CUDA device is available"),
]

N = 10**7


@pytest.fixture(scope="module")
def cp() -> Any:
    from floatlab.backend import require_cupy

    return require_cupy()


def _values32(n: int, seed: int) -> np.ndarray:
    """Half random bit patterns (every class: NaNs, infinities, subnormals), half values spread
    over fp16's and fp8's ranges, where rounding decides most."""
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 1 << 32, n // 2, dtype=np.uint64).astype(np.uint32).view(np.float32)
    near = (rng.standard_normal(n - n // 2) * 2.0 ** rng.integers(-30, 18, n - n // 2)).astype(np.float32)
    return np.concatenate([bits, near])


def _bits_equal(a: Any, b: Any) -> bool:
    a, b = to_numpy(a), to_numpy(b)
    return bool(
        a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a.view(np.uint8), b.view(np.uint8))
    )


@pytest.mark.parametrize("mode", fl.ROUNDING_MODES)
def test_rounding_kernels_bit_identical_on_1e7_values(cp: Any, mode: str) -> None:
    x = _values32(N, seed=1)
    xg = cp.asarray(x)
    rng = 1234 if mode == "stochastic" else None
    for fmt in ("fp16", "bf16", "e4m3fn", "e5m2"):
        assert _bits_equal(fl.encode_array(xg, fmt, mode, rng=rng), fl.encode_array(x, fmt, mode, rng=rng)), (
            fmt
        )
        # (nearest even into fp16 or bfloat16 is the plain cast's own kernel, both ways)
        assert _bits_equal(fl.round_array(xg, fmt, mode, rng=rng), fl.round_array(x, fmt, mode, rng=rng)), fmt
        gpu, gstats = fl.round_array_with_flags(xg, fmt, mode, rng=rng)
        cpu, cstats = fl.round_array_with_flags(x, fmt, mode, rng=rng)
        assert is_cupy(gpu)
        assert _bits_equal(gpu, cpu), fmt
        assert gstats == cstats, fmt
    sat: dict[str, Any] = {"saturate": True, "subnormals": False, "rng": rng}
    assert _bits_equal(fl.encode_array(xg, "e4m3fn", mode, **sat), fl.encode_array(x, "e4m3fn", mode, **sat))


@pytest.mark.parametrize("mode", fl.ROUNDING_MODES)
def test_rounding_kernels_bit_identical_from_float64_and_float16(cp: Any, mode: str) -> None:
    rng_ = np.random.default_rng(2)
    bits = rng_.integers(0, 1 << 63, N // 4, dtype=np.uint64) | (
        rng_.integers(0, 2, N // 4, dtype=np.uint64) << 63
    )
    x64 = np.concatenate(
        [bits.view(np.float64), rng_.standard_normal(N // 4) * 2.0 ** rng_.integers(-140, 130, N // 4)]
    )
    x16 = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    rng = 99 if mode == "stochastic" else None
    for fmt in ("fp16", "bf16", "fp32", "e5m2"):
        gpu = fl.encode_array_with_flags(cp.asarray(x64), fmt, mode, rng=rng)
        cpu = fl.encode_array_with_flags(x64, fmt, mode, rng=rng)
        assert _bits_equal(gpu[0], cpu[0]), fmt
        assert gpu[1] == cpu[1], fmt
    for fmt in ("e4m3fn", "e5m2", "e2m1", "tf32"):
        gpu = fl.round_array_with_flags(cp.asarray(x16), fmt, mode, rng=rng)
        cpu = fl.round_array_with_flags(x16, fmt, mode, rng=rng)
        assert _bits_equal(gpu[0], cpu[0]), fmt
        assert gpu[1] == cpu[1], fmt


@pytest.mark.parametrize("compute", ["fp32", "tf32", "fp16", "bf16"])
@pytest.mark.parametrize(
    ("sa", "sb"), [((512, 1024), (1024, 256)), ((4, 33, 77), (77, 65)), ((3, 64, 96), (3, 96, 32))]
)
def test_gemm_matches_the_numpy_simulation(
    cp: Any, compute: str, sa: tuple[int, ...], sb: tuple[int, ...]
) -> None:
    rng = np.random.default_rng(5)
    a = (rng.standard_normal(sa) * 2).astype(np.float32)
    b = (rng.standard_normal(sb) * 2).astype(np.float32)
    gpu = matmul(cp.asarray(a), cp.asarray(b), compute, get_backend("cupy"))
    assert is_cupy(gpu)
    assert gpu.dtype == cp.float32
    cpu = matmul(a, b, compute, get_backend("numpy"))  # inputs rounded alike, fp32 accumulation
    k = sa[-1]
    ra = fl.round_array(a, compute) if compute != "fp32" else a
    rb = fl.round_array(b, compute) if compute != "fp32" else b
    mag = np.matmul(np.abs(ra).astype(np.float64), np.abs(rb).astype(np.float64))
    # two fp32 sums of the same exact products, in different orders, differ by at most about
    # 2 k u sum|a b|; TF32 tensor cores may round their inputs differently from nearest-even
    # (one tf32 ulp, 2^-10, per product at most)
    bound = mag * (2 * k * 2.0**-24) + (mag * 2.0**-9 if compute == "tf32" else 0)
    diff = np.abs(to_numpy(gpu).astype(np.float64) - cpu.astype(np.float64))
    assert np.all(diff <= bound + 1e-30), float(np.max(diff / (mag + 1e-30)))


def test_fp32_gemm_runs_with_tf32_off(cp: Any) -> None:
    """An fp32 GEMM whose exact result needs more than tf32's precision: only IEEE fp32 gets it."""
    a = np.full((128, 256), 1 + 2.0**-12, np.float32)
    b = np.ones((256, 128), np.float32)
    fp32 = to_numpy(matmul(cp.asarray(a), cp.asarray(b), "fp32", get_backend("cupy")))
    tf32 = to_numpy(matmul(cp.asarray(a), cp.asarray(b), "tf32", get_backend("cupy")))
    assert np.all(fp32 == np.float32(256 * (1 + 2.0**-12)))
    assert np.all(tf32 == 256.0)  # 1 + 2^-12 has no tf32 value but 1 (either rounding)


@pytest.mark.parametrize(
    ("policy", "model"), [("mixed-fp16", "mlp"), ("mixed-bf16", "attention"), ("fp32", "mlp")]
)
def test_training_on_the_gpu_follows_the_cpu_loss_curve(policy: str, model: str) -> None:
    from floatlab.train import TrainConfig, Trainer
    from floatlab.train.data import make_underflow_task

    data = make_underflow_task(n_train=1024, n_test=256)
    cfg = TrainConfig(model=model, data="underflow", precision=policy, hidden=(64, 64), epochs=3, d_model=32)
    histories = []
    for backend in ("numpy", "cupy"):
        tr = Trainer.from_config(cfg, data, backend=backend)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            histories.append(tr.fit(cfg.epochs))
        if backend == "cupy":
            assert is_cupy(tr.params[next(iter(tr.params))])
    cpu, gpu = (np.asarray(h.column("loss"), np.float64) for h in histories)
    assert cpu.shape == gpu.shape
    # the first step sees the same weights and data: only the GEMMs' summation order differs
    assert abs(gpu[0] - cpu[0]) <= 1e-3 * abs(cpu[0])
    # then the runs drift apart by rounding, but follow the same curve
    kernel = np.ones(8) / 8
    drift = np.convolve(gpu, kernel, mode="valid") - np.convolve(cpu, kernel, mode="valid")
    assert np.max(np.abs(drift)) <= 0.1 * max(float(cpu[0]), 1.0)
    assert abs(histories[0].final["test_accuracy"] - histories[1].final["test_accuracy"]) <= 0.05


#: the transformer language model and the conv net with BatchNorm under each kind of policy
LARGER_RUNS: dict[str, dict[str, Any]] = {
    "transformer": {"model": "transformer", "data": "text", "layers": 2, "d_model": 64, "heads": 4,
                    "context": 32, "steps": 40, "optimizer": "adamw"},
    "convnet": {"model": "convnet", "data": "digits", "channels": (8, 16), "steps": 40},
}  # fmt: skip


@pytest.mark.parametrize(
    ("model", "policy"),
    [("transformer", p) for p in ("fp32", "mixed-fp16", "mixed-bf16", "bf16", "fp16", "fp8-delayed", "mxfp8")]
    + [("convnet", p) for p in ("fp32", "mixed-fp16", "bf16")],
)
def test_the_transformer_and_the_convnet_on_the_gpu_follow_the_cpu(model: str, policy: str) -> None:
    """Every policy trains both on CuPy, and its loss curve follows the CPU run's: the same first
    loss up to the GEMMs' summation order, then the same curve within rounding drift."""
    from floatlab.train import TrainConfig, Trainer
    from floatlab.train.data import get_data

    cfg = TrainConfig(precision=policy, batch_size=32, **LARGER_RUNS[model])
    data = get_data(cfg.data, context=cfg.context)
    losses = []
    for backend in ("numpy", "cupy"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            losses.append(np.asarray(Trainer.from_config(cfg, data, backend=backend).run().column("loss")))
    cpu, gpu = losses
    assert cpu.shape == gpu.shape == (40,)
    assert np.isfinite(gpu).all()
    assert abs(gpu[0] - cpu[0]) <= 1e-2 * abs(cpu[0])
    kernel = np.ones(8) / 8
    drift = np.convolve(gpu, kernel, mode="valid") - np.convolve(cpu, kernel, mode="valid")
    assert np.max(np.abs(drift)) <= 0.1 * max(float(cpu[0]), 1.0)


@pytest.mark.parametrize("policy", ["mixed-fp16", "mixed-bf16", "fp16"])
def test_flush_counts_on_the_gpu_equal_the_cpus(cp: Any, policy: str) -> None:
    """A backward pass's gradient stores count the values flushed to zero; on a GPU the counts
    stay on the device until the pass ends, and must be the CPU's."""
    from floatlab.train.precision import Precision

    with np.errstate(invalid="ignore"):  # (the values hold signalling NaNs)
        x = _values32(1_000_000, seed=4) * np.float32(2.0**-12)  # many below fp16's subnormals
    counts, stored = [], []
    for backend, a in (("numpy", x), ("cupy", cp.asarray(x))):
        P = Precision(policy, backend=backend)
        with P.counting_flushes():
            stored.append(P.grad(a))
            P.grad(a[:1000])
        counts.append((P.grad_values, P.grad_flushed, P.flushed_share))
    assert _bits_equal(stored[0], stored[1])
    assert counts[0] == counts[1]
    assert counts[0][1] > 0


def test_histogram_and_checkpoint_take_gpu_arrays(cp: Any, tmp_path: Any) -> None:
    from floatlab.train import TrainConfig, Trainer
    from floatlab.train.data import make_underflow_task

    x = _values32(100_000, seed=3)
    assert fl.histogram(cp.asarray(x)) == fl.histogram(x)
    data = make_underflow_task(n_train=256, n_test=64)
    cfg = TrainConfig(data="underflow", precision="mixed-fp16", hidden=(32,), epochs=2)
    tr = Trainer.from_config(cfg, data, backend="cupy")
    tr.fit(1)
    back = Trainer.resume(tr.save(tmp_path / "ck.npz"), data, backend="cupy")
    assert all(np.array_equal(to_numpy(back.params[k]), to_numpy(tr.params[k])) for k in tr.params)
    tr.fit(2)
    back.fit(2)
    assert back.history.column("loss").tolist() == tr.history.column("loss").tolist()


def test_step_phases_on_the_gpu(cp: Any) -> None:
    from floatlab.perf import step_phases
    from floatlab.train.trainer import STEP_PHASES

    t = step_phases("cupy", "mixed-fp16", hidden=(256, 256), batch_size=256, steps=3, warmup=1)
    assert list(t) == [*STEP_PHASES, "gemm", "total"]
    assert all(v >= 0 for v in t.values())
    assert 0 < t["gemm"] < t["total"]


def test_cli_with_the_cupy_backend(capsys: pytest.CaptureFixture[str]) -> None:
    from floatlab.cli import main

    assert main(["bench", "gemm", "--backend", "cupy", "--sizes", "2048", "--min-seconds", "0.05"]) == 0
    out = capsys.readouterr().out
    assert "GEMM throughput on cupy" in out
    assert "cublasGemmEx fp16 in, fp32 out" in out
    argv = ["train", "--backend", "cupy", "--data", "underflow", "--epochs", "1", "--hidden", "32", "-q"]
    assert main(argv) == 0
    assert "test accuracy" in capsys.readouterr().out
