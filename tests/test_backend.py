"""The backend layer on a machine without a GPU: NumPy arrays, the GEMM contract, the trainer's
``backend=`` plumbing, and the GPU rounding code path run on the CPU.

The GPU rounding kernels are the element functions of floatlab.rounding._kernels compiled for CUDA; here
the same element bodies and the same host-side code are compiled for the CPU (``target="cpu"``)
and checked bit for bit against the production CPU kernels. tests/suites/test_gpu.py repeats the
check on a CUDA device.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import warnings
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import floatlab as fl
from floatlab.backend import (
    Backend,
    BackendUnavailable,
    cuda_available,
    get_backend,
    get_xp,
    is_cupy,
    to_numpy,
    tree_map_arrays,
)
from floatlab.cli import main
from floatlab.formats import TF32
from floatlab.perf import GemmResult, measure_gemm, peak_for, tensor_core_verdict
from floatlab.rounding import RoundingOptions
from floatlab.rounding import cuda as gk
from floatlab.train.precision import Precision
from floatlab.train.precision.matmul import (
    check_gemm_support,
    cublas_gemm_args,
    cupy_matmul,
    gemm_format,
    matmul,
)
from floatlab.train.precision.policy import get_policy, policy_names

NO_CUDA = not cuda_available()


# ---- arrays and backends --------------------------------------------------------------------------
def test_numpy_helpers() -> None:
    a = np.arange(3.0)
    assert get_xp(a) is np
    assert get_xp(1.0, [2.0]) is np
    assert not is_cupy(a)
    assert not is_cupy("x")
    assert to_numpy([1.0, 2.0]).tolist() == [1.0, 2.0]
    assert to_numpy(a) is a
    tree = {"s": {"m": a, "n": [a, 1]}, "t": 2}
    doubled = tree_map_arrays(tree, lambda x: x * 2)
    assert doubled["s"]["m"].tolist() == [0.0, 2.0, 4.0]
    assert doubled["s"]["n"][1] == 1
    assert doubled["t"] == 2


def test_get_backend_names_and_errors() -> None:
    assert get_backend().name == "numpy"
    assert get_backend(" NumPy ").name == "numpy"
    assert get_backend("numpy", tf32=True) == Backend("numpy", True)
    with pytest.raises(ValueError, match=r"unknown backend 'gpu': expected numpy or cupy"):
        get_backend("gpu")
    with pytest.raises(ValueError, match="GEMM compute format 'float8_e4m3fn'"):
        matmul(np.ones((1, 1)), np.ones((1, 1)), "e4m3fn")


@pytest.mark.skipif(not NO_CUDA, reason="a CUDA device is available here")
def test_cupy_backend_without_cuda_says_so_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(BackendUnavailable, match=r"^no CUDA device is available") as info:
        get_backend("cupy")
    assert "\n" not in str(info.value)
    assert isinstance(info.value, ValueError)
    for argv in (
        ["bench", "gemm", "--backend", "cupy"],
        ["bench", "train", "--backend", "cupy"],
        ["train", "--backend", "cupy", "--data", "underflow", "--epochs", "1", "-q"],
        ["compare", "fp32", "--backend", "cupy", "--data", "underflow", "--epochs", "1", "-q"],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("floatlab: error: no CUDA device is available")
        assert err.count("\n") == 1


def test_import_floatlab_and_numpy_work_load_no_gpu_modules() -> None:
    # (the interpreter may load the empty ``cuda`` namespace package itself: numba-cuda's wheels
    # install .pth hooks; what counts is what importing and using floatlab adds)
    probe = (
        "import sys\n"
        "before = set(sys.modules)\n"
        "import numpy as np, floatlab as fl, floatlab.backend as b\n"
        "fl.round_array(np.ones(3, np.float32), 'fp16')\n"
        "import floatlab.train.precision.matmul as g\n"
        "g.matmul(np.ones((2, 2)), np.ones((2, 2)), 'fp16', b.get_backend('numpy'))\n"
        "new = set(sys.modules) - before\n"
        "gpu = [m for m in new if m.split('.')[0] in ('cupy', 'cuda', 'numba_cuda') or 'numba.cuda' in m]\n"
        "print(sorted(gpu))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---- the GEMM contract -------------------------------------------------------------------------------
def _tf32_oracle(x: np.ndarray) -> np.ndarray:
    """Round float32 values to 10 fraction bits, to nearest even, by integer arithmetic on the bits."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    r = (u + 0xFFF + ((u >> 13) & 1)) & ~np.uint64(0x1FFF)
    out: np.ndarray = r.astype(np.uint32).view(np.float32)
    return out


ORACLE_ROUND: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "fp32": lambda x: x.astype(np.float32),
    "tf32": _tf32_oracle,
    "fp16": lambda x: x.astype(np.float32).astype(np.float16).astype(np.float32),
    "bf16": lambda x: x.astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float32),
}


@pytest.mark.parametrize("compute", ["fp32", "tf32", "fp16", "bf16"])
@pytest.mark.parametrize(
    ("sa", "sb"),
    [((64, 300), (300, 48)), ((3, 5, 70), (70, 4)), ((2, 5, 70), (2, 70, 4)), ((1, 5, 70), (3, 70, 4))],
)
def test_numpy_matmul_is_rounded_inputs_with_fp32_accumulation(
    compute: str, sa: tuple[int, ...], sb: tuple[int, ...]
) -> None:
    rng = np.random.default_rng(7)
    a = (rng.standard_normal(sa) * 3).astype(np.float32)
    b = (rng.standard_normal(sb) * 3).astype(np.float32)
    got = matmul(a, b, compute, get_backend("numpy"))
    ra, rb = ORACLE_ROUND[compute](a).astype(np.float64), ORACLE_ROUND[compute](b).astype(np.float64)
    exact = np.matmul(ra, rb)  # products of <= 24-bit significands: float64 holds them; sums nearly
    bound = np.matmul(np.abs(ra), np.abs(rb)) * (sa[-1] * 2.0**-24) + 1e-30
    assert got.dtype == np.float32
    assert got.shape == exact.shape
    assert np.all(np.abs(got - exact) <= bound)
    # and the inputs really were rounded: an fp32 GEMM of the raw inputs differs beyond that bound
    if compute != "fp32":
        raw = np.matmul(a.astype(np.float64), b.astype(np.float64))
        assert np.any(np.abs(raw - exact) > bound)


# ---- the CuPy GEMM path on the host: NumPy for CuPy, an emulation of cuBLAS for cuBLAS -------------
_CUDA_R_32F, _CUDA_R_16F, _CUDA_R_16BF = 0, 2, 14


def _host_cublas(cp: Any, a_in: Any, a_type: int, b_in: Any, b_type: int, out: Any, f: Any) -> None:
    """cublasGemmStridedBatchedEx emulated on NumPy from the very arguments gemm_prepared passes:
    column-major operands read from the flat buffers by leading dimension and batch stride (an
    index beyond a buffer raises), float64 products and sums rounded once to float32."""
    assert cp.float32 is np.float32  # numpy, or numpy posing as cupy
    (ta, tb, m, n, k, alpha, A, at, lda, sa, B, bt, ldb, sb, beta, C, ct, ldc, sc, batch, compute, algo) = (
        cublas_gemm_args(a_in, a_type, b_in, b_type, out, f)
    )
    assert (ta, tb, ct, algo, alpha, beta) == (0, 0, _CUDA_R_32F, -1, 1.0, 0.0)
    assert compute == (77 if f == TF32 else 68)  # CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_COMPUTE_32F

    def values(buf: np.ndarray, t: int) -> np.ndarray:
        assert buf.flags.c_contiguous
        flat = buf.reshape(-1)
        if t == _CUDA_R_32F:
            assert flat.dtype == np.float32
            return (fl.round_array(flat, "tf32") if compute == 77 else flat).astype(np.float64)
        if t == _CUDA_R_16F:
            assert flat.dtype == np.float16
            return flat.astype(np.float64)
        assert t == _CUDA_R_16BF
        assert flat.dtype == np.uint16
        bf16: np.ndarray = (flat.astype(np.uint32) << np.uint32(16)).view(np.float32)
        return bf16.astype(np.float64)

    av, bv = values(A, at), values(B, bt)
    assert C.flags.c_contiguous
    assert C.dtype == np.float32
    c = C.reshape(-1)
    rows, cols = np.arange(m)[:, None], np.arange(n)[None, :]
    for i in range(batch):
        op_a = av[sa * i + rows + lda * np.arange(k)[None, :]]
        op_b = bv[sb * i + np.arange(k)[:, None] + ldb * cols]
        c[sc * i + rows + ldc * cols] = (op_a @ op_b).astype(np.float32)


@pytest.mark.parametrize("compute", ["fp32", "tf32", "fp16", "bf16"])
@pytest.mark.parametrize(
    ("sa", "sb"),
    [
        ((9, 30), (30, 7)),
        ((3, 5, 17), (17, 4)),  # a stack times one matrix: one GEMM on the stacked rows
        ((2, 5, 17), (2, 17, 4)),
        ((1, 5, 17), (3, 17, 4)),  # broadcasting a
        ((3, 5, 17), (1, 17, 4)),  # broadcasting b (stride 0)
        ((2, 1, 4, 6), (3, 6, 2)),
        ((4, 0), (0, 3)),  # k = 0: zeros
        ((0, 5), (5, 2)),
        ((2, 3, 0), (0, 2)),
        ((0, 3, 5), (1, 5, 2)),
    ],
)
def test_cupy_gemm_path_on_numpy(compute: str, sa: tuple[int, ...], sb: tuple[int, ...]) -> None:
    """The CuPy GEMM path (batching, reshapes, GEMM input buffers, cuBLAS's arguments) with NumPy
    for CuPy: only cuBLAS itself and the device's tensor cores are left to a GPU run."""
    rng = np.random.default_rng(3)
    a = (rng.standard_normal(sa) * 3).astype(np.float32)
    b = (rng.standard_normal(sb) * 3).astype(np.float32)
    got = cupy_matmul(np, a, b, fl.get_format(compute), _host_cublas)
    ra, rb = ORACLE_ROUND[compute](a).astype(np.float64), ORACLE_ROUND[compute](b).astype(np.float64)
    exact = np.matmul(ra, rb)
    assert got.dtype == np.float32
    assert got.shape == exact.shape
    bound = np.matmul(np.abs(ra), np.abs(rb)) * 2.0**-23 + 1e-30  # one rounding of a float64 sum
    assert np.all(np.abs(got - exact) <= bound)


def test_cupy_gemm_path_on_numpy_errors_and_fp64() -> None:
    with pytest.raises(ValueError, match="expected arrays of 2 or more dimensions"):
        cupy_matmul(np, np.ones(3), np.ones((3, 1)), fl.FP16, _host_cublas)
    with pytest.raises(ValueError, match="inner dimensions differ"):
        cupy_matmul(np, np.ones((2, 3)), np.ones((2, 1)), fl.FP16, _host_cublas)
    a = np.array([[1 + 2**-40, 1.0]])
    out = cupy_matmul(np, a, np.ones((2, 1)), fl.FP64, _host_cublas)  # fp64: cp.matmul, no cuBLAS Ex
    assert out.dtype == np.float64
    assert out.item() == 2 + 2**-40


@pytest.mark.parametrize(
    ("formats", "expected"),
    [(("fp16",), "fp16"), (("e4m3fn", "e5m2"), "fp16"), (("bf16",), "bf16"), (("fp16", "bf16"), "fp32")],
)
def test_gemm_format(formats: tuple[str, ...], expected: str) -> None:
    assert gemm_format(*formats).name == expected


@pytest.mark.parametrize("policy", policy_names())
@pytest.mark.parametrize("model", ["mlp", "attention"])
def test_every_gemm_operand_is_exact_in_the_gpu_gemm_format(
    policy: str, model: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a GPU the trainer converts GEMM operands to Precision.gemm_compute (fp16 for fp16 and
    fp8 policies, bf16 for bf16 ones); that conversion must change no value."""
    from floatlab.train import TrainConfig, Trainer
    from floatlab.train.data import make_underflow_task

    seen: list[str] = []
    original = Precision.matmul

    def checked(self: Precision, a: Any, b: Any, out: Any, **kw: Any) -> Any:
        fmt = self.gemm_compute
        if fmt in ("fp16", "bf16"):
            for x in (a, b):
                x32 = np.asarray(x, np.float32)
                assert np.array_equal(fl.round_array(x32, fmt), x32, equal_nan=True), (policy, fmt)
        seen.append(fmt)
        return original(self, a, b, out, **kw)

    monkeypatch.setattr(Precision, "matmul", checked)
    data = make_underflow_task(n_train=32, n_test=16)
    cfg = TrainConfig(
        model=model, data="underflow", precision=policy, hidden=(16,), batch_size=16, d_model=16
    )
    tr = Trainer.from_config(cfg, data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # what the formats do to training is not this test's concern
        tr.fit(1, stop_after=2)
    expected = {
        "fp16": "fp16",
        "bf16": "bf16",
        "mixed-fp16": "fp16",
        "mixed-bf16": "bf16",
        "mixed-fp8": "fp16",
    }
    if get_policy(policy).recipe is not None:
        # a recipe's linear GEMMs multiply scaled fp8 values (checked exact in fp16, the GPU
        # GEMM that holds E4M3 and E5M2, in the test below) or block-scaled values; its other
        # GEMMs (attention) are bf16
        assert set(seen) <= {"bf16"}
        return
    assert set(seen) == {expected.get(policy, "fp64" if policy == "fp64" else "fp32")}


def test_trainer_numpy_backend_changes_nothing() -> None:
    from floatlab.train import train

    kw: dict[str, Any] = {"epochs": 1, "hidden": (16,), "seed": 3}
    a = train("mlp", "underflow", "mixed-fp16", **kw)
    b = train("mlp", "underflow", "mixed-fp16", backend="numpy", **kw)
    assert a.column("loss").tolist() == b.column("loss").tolist()
    assert a.final == b.final


def test_tf32_backend_on_numpy_rounds_fp32_gemm_inputs() -> None:
    P = Precision("fp32", backend=get_backend("numpy", tf32=True))
    assert P.gemm_compute == "tf32"
    assert Precision("fp32").gemm_compute == "fp32"
    a = np.array([[1 + 2**-12, 1.0]], np.float32)
    b = np.ones((2, 1), np.float32)
    assert P.matmul(a, b, P.fwd).item() == 2.0  # the 2^-12 is below tf32's precision
    assert Precision("fp32").matmul(a, b, P.fwd).item() == 2 + 2**-12


# ---- the CuPy backend's code paths with NumPy posing as CuPy ----------------------------------------
@pytest.fixture
def fake_cupy(monkeypatch: pytest.MonkeyPatch) -> Any:
    """NumPy posing as CuPy on a fake device (compute capability 9.0), cuBLAS emulated by
    :func:`_host_cublas`: the backend's, the GEMMs' and the trainer's CuPy code paths run on the
    host. NumPy arrays stay host arrays (``is_cupy`` is false), so rounding takes the CPU path."""
    import types

    import floatlab.train.precision.matmul as mm

    cp = types.ModuleType("cupy")
    for name in dir(np):
        if not name.startswith("__"):
            setattr(cp, name, getattr(np, name))

    class DeviceArray:
        """No array is one of these."""

    stream = types.SimpleNamespace(ptr=0, synchronize=lambda: None)
    device = types.SimpleNamespace(id=0, compute_capability="90")
    cp.ndarray = DeviceArray  # type: ignore[attr-defined]
    cp.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
        runtime=types.SimpleNamespace(
            getDeviceCount=lambda: 1, getDeviceProperties=lambda i: {"name": b"Fake GPU"}
        ),
        Device=lambda i=0: device,
        get_current_stream=lambda: stream,
    )
    monkeypatch.setitem(sys.modules, "cupy", cp)
    monkeypatch.setattr(mm, "gemm_prepared", _host_cublas)
    monkeypatch.setattr(mm, "_GEMM_SUPPORTED", set())
    return cp


def test_cupy_backend_on_a_fake_device(fake_cupy: Any) -> None:
    be = get_backend("cupy")
    assert be.is_gpu
    assert be.xp is fake_cupy
    assert be.device_name() == "Fake GPU"
    assert be.compute_capability() == (9, 0)
    be.synchronize()
    assert be.asarray([1, 2], np.float32).dtype == np.float32
    fake_cupy.cuda.Device().compute_capability = "100"
    assert be.compute_capability() == (10, 0)  # Blackwell: two digits of major version


def test_cupy_matmul_checks_the_device_once_per_format(fake_cupy: Any) -> None:
    be = get_backend("cupy")
    a = np.array([[1 + 2**-12, 1.0]], np.float32)
    b = np.ones((2, 1), np.float32)
    assert matmul(a, b, "bf16", be).item() == 2.0  # through cupy_matmul and the emulated cuBLAS
    assert matmul(a, b, "fp32", be).item() == 2 + 2**-12
    fake_cupy.cuda.Device().compute_capability = "75"
    assert matmul(a, b, "bf16", be).item() == 2.0  # checked already for this device and format
    with pytest.raises(
        ValueError, match=r"^tf32 GEMMs need compute capability 8\.0 or later \(Ampere\); Fake GPU has 7\.5"
    ):
        matmul(a, b, "tf32", be)


#: the models on the CuPy code path: the MLP, the transformer language model, the conv net with
#: BatchNorm, and an fp8 recipe's scaled GEMMs (small sizes: the GPU run trains them at full size)
CUPY_PATH_RUNS: dict[str, dict[str, Any]] = {
    "mlp": {"data": "underflow", "precision": "mixed-fp16", "hidden": (16,), "epochs": 2},
    "transformer": {"model": "transformer", "data": "text", "precision": "mixed-bf16", "layers": 1,
                    "d_model": 16, "heads": 2, "context": 8, "steps": 6},
    "convnet": {"model": "convnet", "data": "digits", "precision": "mixed-fp16", "channels": (4, 8),
                "steps": 6},
    "fp8": {"model": "transformer", "data": "text", "precision": "fp8-delayed", "layers": 1, "d_model": 16,
            "heads": 2, "context": 8, "steps": 6},
}  # fmt: skip


@pytest.mark.parametrize("run", list(CUPY_PATH_RUNS))
def test_trainer_on_the_cupy_code_path_follows_numpy(fake_cupy: Any, tmp_path: Any, run: str) -> None:
    """The trainer's backend calls (arrays to the device, GEMMs in the policy's GEMM format,
    checkpoints brought to the host) with NumPy posing as CuPy: the loss curve of the NumPy
    backend, up to the GEMMs' summation order."""
    from floatlab.train import TrainConfig, Trainer
    from floatlab.train.data import get_data, make_underflow_task

    cfg = TrainConfig(batch_size=32, **CUPY_PATH_RUNS[run])
    if cfg.data == "underflow":
        data = make_underflow_task(n_train=128, n_test=64)
    else:
        data = get_data(cfg.data, context=cfg.context)
    losses = []
    for backend in ("numpy", "cupy"):
        tr = Trainer.from_config(cfg, data, backend=backend)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            losses.append(np.asarray(tr.run().column("loss"), np.float64))
    assert tr.backend.is_gpu
    assert losses[0].size == losses[1].size == cfg.total_steps(tr.n_batches)
    assert np.allclose(losses[1], losses[0], rtol=1e-3, atol=1e-6)
    back = Trainer.resume(tr.save(tmp_path / "ck.npz"), data, backend="cupy")
    assert all(np.array_equal(to_numpy(back.params[k]), to_numpy(tr.params[k])) for k in tr.params)


# ---- the GPU rounding code path, on the CPU -----------------------------------------------------------
def _inputs(dtype: str) -> np.ndarray:
    rng = np.random.default_rng(11)
    if dtype == "float16":
        return np.arange(1 << 16, dtype=np.uint16).view(np.float16)  # every fp16 value
    if dtype == "float32":
        bits = rng.integers(0, 1 << 32, 40_000, dtype=np.uint64).astype(np.uint32)
        near = (rng.standard_normal(20_000) * 2.0 ** rng.integers(-30, 20, 20_000)).astype(np.float32)
        return np.concatenate([bits.view(np.float32), near])
    bits64 = rng.integers(0, 1 << 63, 20_000, dtype=np.uint64) | (
        rng.integers(0, 2, 20_000, dtype=np.uint64) << 63
    )
    near64 = rng.standard_normal(20_000) * 2.0 ** rng.integers(-140, 130, 20_000)
    return np.concatenate([bits64.view(np.float64), near64])


def _gpu_path(
    x: Any, fmt: Any, rounding: str = "rne", *, back: bool = False, flags: bool = False, **kw: Any
) -> Any:
    """The GPU code path (host side and element functions) compiled for the CPU."""
    options = RoundingOptions.make(rounding, **kw)
    out, stats = gk.run_array(x, fl.get_format(fmt), options, back=back, flags=flags, xp=np, target="cpu")
    return (out, stats) if flags else out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, tuple):
        return _same(a[0], b[0]) and a[1] == b[1]
    return bool(
        a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a.view(np.uint8), b.view(np.uint8))
    )


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("fmt", ["fp16", "bf16", "tf32", "e4m3fn", "e5m2", "e2m1", "e5m2fnuz"])
def test_gpu_code_path_on_cpu_gives_the_cpu_kernels_bits(dtype: str, fmt: str) -> None:
    x = _inputs(dtype).reshape(-1, 4)
    f = fl.get_format(fmt)
    for mode in fl.ROUNDING_MODES:
        for opts in ({}, {"saturate": True, "subnormals": False}, {"random_bits": 7}):
            kw: dict[str, Any] = {"rng": 42 if mode == "stochastic" else None, **opts}
            for flags in (False, True):
                encode = fl.encode_array_with_flags if flags else fl.encode_array
                cpu = encode(x, f, mode, **kw)
                gpu = _gpu_path(x, f, mode, flags=flags, **kw)
                assert _same(cpu, gpu), (dtype, fmt, mode, opts, flags)
                try:
                    cpu = (fl.round_array_with_flags if flags else fl.round_array)(x, f, mode, **kw)
                except ValueError as e:  # neither format holds the other: both refuse alike
                    with pytest.raises(ValueError, match=re.escape(str(e))):
                        _gpu_path(x, f, mode, back=True, flags=flags, **kw)
                    continue
                gpu = _gpu_path(x, f, mode, back=True, flags=flags, **kw)
                assert _same(cpu, gpu), ("round", dtype, fmt, mode, opts, flags)


def test_gpu_host_side_with_numpy_posing_as_cupy(fake_cupy: Any) -> None:
    """The host side's CuPy branches (the widening of 16-bit inputs that rebuilds NaNs and
    infinities from the bits, as a GPU's conversion may quieten a NaN) give the NumPy bits."""
    from floatlab.rounding.plan import widen16

    bits = np.arange(1 << 16, dtype=np.uint16)
    for src in (fl.FP16, fl.BF16):
        for subnormals in (True, False):
            assert np.array_equal(
                widen16(bits, src, subnormals, fake_cupy), widen16(bits, src, subnormals, np)
            )
    x = bits.view(np.float16)
    for mode in ("rne", "stochastic"):
        seed = 5 if mode == "stochastic" else None
        options = RoundingOptions.make(mode, rng=seed)
        got = gk.run_array(x, fl.get_format("e4m3fn"), options, flags=True, xp=fake_cupy, target="cpu")
        assert _same(got, tuple(fl.encode_array_with_flags(x, "e4m3fn", mode, rng=seed)))


def test_gpu_code_path_errors_match_the_cpu() -> None:
    with pytest.raises(ValueError, match="round_array would round twice"):
        _gpu_path(np.ones(2, np.float16), "bf16", back=True)
    with pytest.raises(ValueError, match="x has dtype complex128: expected float64, float32 or float16"):
        _gpu_path(np.ones(2, complex), "fp16")
    with pytest.raises(ValueError, match="rounding='stochastic' needs rng"):
        _gpu_path(np.ones(2), "fp16", "stochastic")
    with pytest.raises(ValueError, match="kernel target 'tpu'"):
        gk.kernels("tpu")
    assert _gpu_path(np.zeros((0, 3)), "fp16").shape == (0, 3)


def _numba_cuda() -> Any:
    try:
        from numba import cuda
    except Exception:  # pragma: no cover - numba without its CUDA target
        return None
    return cuda if getattr(cuda, "implementation", "") == "NVIDIA" else None


def _nvvm_archs() -> list[tuple[int, int]]:
    """The compute capabilities the installed CUDA compiler knows ([] without numba-cuda)."""
    if _numba_cuda() is None:
        return []
    import importlib

    nvrtc = importlib.import_module("numba.cuda.cudadrv.nvrtc")
    return [tuple(cc) for cc in nvrtc.get_supported_ccs()]


#: Volta, Ampere, Hopper, Blackwell: the architectures the GPU backend targets
PTX_ARCHS = [(7, 0), (8, 0), (9, 0), (10, 0)]


@pytest.mark.skipif(_numba_cuda() is None, reason="numba-cuda (the dev extra) is not installed")
@pytest.mark.skipif(os.environ.get("NUMBA_ENABLE_CUDASIM") == "1", reason="the CUDA simulator is on")
@pytest.mark.parametrize("cc", PTX_ARCHS, ids=[f"sm_{a}{b}" for a, b in PTX_ARCHS])
def test_cuda_kernels_compile_to_ptx(cc: tuple[int, int]) -> None:
    """The element functions compile for CUDA (NVVM, no GPU needed) into self-contained kernels.

    All four kernels for Hopper (sm_90, the GPUs the benchmarks run on), with 64-bit lanes too;
    for the other targets the flag-counting kernel, which calls every element function (each
    kernel costs seconds of compilation)."""
    if cc not in _nvvm_archs():  # pragma: no cover - an older CUDA compiler than the dev extra's
        pytest.skip(f"this CUDA compiler cannot target sm_{cc[0]}{cc[1]}")
    every = cc == (9, 0)
    ptx = gk.compile_ptx(cc) if every else gk.compile_ptx(cc, ("full",))
    names = {"encode", "round", "general", "full", "cast_code", "cast_round"}
    assert set(ptx) == (names if every else {"full"})
    for text in ptx.values():
        assert f".target sm_{cc[0]}{cc[1]}" in text
        assert ".entry" in text
        assert "call.uni" not in text  # every element function inlined into the kernel
    assert "clz.b32" in ptx["full"]  # the lane-width intrinsics survive: 32-bit lanes for fp32 -> fp16
    if every:  # the plain fp16 cast is the GPU's own conversion, both ways
        assert "cvt.rn.f16.f32" in ptx["cast_round"]
        assert "cvt.f32.f16" in ptx["cast_round"]
    if cc == (9, 0):  # float64 input: 64-bit lanes
        wide = gk.compile_ptx(cc, ("full",), lanes=64)["full"]
        assert "call.uni" not in wide
        assert "clz.b64" in wide
        # the parameters the CuPy launch lays out are the ones each entry declares, one by one
        for lanes, kernels in ((32, ptx), (64, {"full": wide})):
            for name, text in kernels.items():
                want = [np.asarray(v).dtype.itemsize for v in gk.flat_args(gk.launch_args(name, lanes))]
                assert gk.ptx_entry(text)[1] == want, (name, lanes)


def test_flat_args_follow_numbas_calling_convention() -> None:
    """An array is meminfo, parent, length, item size, data pointer, shape, stride; a parameter
    tuple is its fields; a bool is one byte."""
    x, out, z, p, d, back = gk.launch_args("general", 32, n=5)
    flat = gk.flat_args((x, out, z, p, d, back))
    assert [int(v) for v in flat[:7]] == [0, 0, 5, 4, x.ctypes.data, 5, 4]
    assert [int(v) for v in flat[7:14]] == [0, 0, 5, 4, out.ctypes.data, 5, 4]
    assert flat[14] is z
    assert flat[15 : 15 + len(p)] == list(p)
    assert flat[15 + len(p) : -1] == list(d)
    assert flat[-1].dtype == np.bool_
    assert bool(flat[-1]) is True
    assert [type(v) for v in gk.flat_args((3, False))] == [np.int64, np.bool_]


def test_compile_ptx_refuses_unknown_kernels() -> None:
    names = r"\('encode', 'round', 'general', 'full', 'cast_code', 'cast_round'\)"
    with pytest.raises(ValueError, match=r"expected kernels among " + names):
        gk.compile_ptx((9, 0), ("mx",))
    with pytest.raises(ValueError, match="lanes 32 or 64"):
        gk.compile_ptx((9, 0), lanes=16)


# ---- measuring ------------------------------------------------------------------------------------------
def test_peaks_and_verdicts() -> None:
    assert peak_for("NVIDIA H100 PCIe").name == "H100 PCIe"  # type: ignore[union-attr]
    assert peak_for("NVIDIA H200").name == "H200 SXM"  # type: ignore[union-attr]
    assert peak_for("NVIDIA A100-SXM4-80GB").bf16 == 312.0  # type: ignore[union-attr]
    assert peak_for("Tesla T4").tf32 is None  # type: ignore[union-attr]
    assert peak_for("NVIDIA L40S") is None
    assert peak_for("AMD EPYC") is None
    h100 = "NVIDIA H100 80GB HBM3"

    def res(compute: str, seconds: float, device: str = h100) -> GemmResult:
        return GemmResult("cupy", device, compute, 8192, seconds, "gemmEx")

    # 2 * 8192^3 flops in 2 ms: 550 TFLOP/s, 8x the H100's 67 TFLOP/s fp32 SIMT peak
    assert tensor_core_verdict([res("fp32", 0.03), res("fp16", 0.002)]).startswith("tensor cores used")
    assert tensor_core_verdict([res("fp16", 0.02)]).startswith("tensor cores not shown")
    unknown = [res("fp32", 0.1, "Mystery GPU"), res("fp16", 0.01, "Mystery GPU")]
    assert "the measured fp32 rate" in tensor_core_verdict(unknown)
    assert tensor_core_verdict([res("fp32", 0.1)]).startswith("no fp16 GEMM")


def test_measure_gemm_on_numpy_and_its_errors() -> None:
    r = measure_gemm("numpy", [24], min_seconds=0.0)
    assert [x.compute for x in r] == ["fp32", "tf32", "fp16", "bf16"]
    assert all(x.tflops > 0 and x.peak is None and x.ratio is None for x in r)
    with pytest.raises(ValueError, match=r"GEMM sizes \[0\]"):
        measure_gemm("numpy", [0])
    with pytest.raises(ValueError, match=r"GEMM formats \['fp8'\]"):
        measure_gemm("numpy", [8], ["fp16", "fp8"])


def test_step_phases_time_each_phase_and_change_nothing() -> None:
    from floatlab.perf import step_phases
    from floatlab.train.data import make_underflow_task
    from floatlab.train.trainer import STEP_PHASES, TrainConfig, Trainer

    t = step_phases("numpy", "mixed-fp16", hidden=(32, 32), batch_size=16, steps=1, warmup=1)
    assert list(t) == [*STEP_PHASES, "gemm", "total"]
    assert all(v >= 0 for v in t.values())
    assert 0 < t["gemm"] < t["forward"] + t["backward"]  # (one step: its own values, no medians)
    assert t["total"] == pytest.approx(sum(t[p] for p in STEP_PHASES))
    # a trainer's clock hears every phase in order, and changes nothing it computes
    data = make_underflow_task(n_train=64, n_test=16)
    cfg = TrainConfig(data="underflow", precision="mixed-fp16", hidden=(16,), batch_size=16)
    plain, timed = Trainer.from_config(cfg, data), Trainer.from_config(cfg, data)
    heard: list[str] = []
    timed.phase_clock = heard.append
    for i in range(3):
        x, y = data.x_train[16 * i : 16 * (i + 1)], data.y_train[16 * i : 16 * (i + 1)]
        assert plain.train_step(x, y) == timed.train_step(x, y)
    assert heard == list(STEP_PHASES) * 3
    assert all(np.array_equal(plain.params[k], timed.params[k]) for k in plain.params)


def test_bench_cli_on_numpy(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench", "gemm", "--sizes", "32", "--formats", "fp32,fp16", "--min-seconds", "0", "--no-color"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "GEMM throughput on numpy" in out
    assert "simulated: inputs and output rounded to fp16" in out
    assert "no tensor cores on the numpy backend" in out
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["compute"] for r in data["results"]] == ["fp32", "fp16"]
    assert data["results"][0]["n"] == 32
    argv = [
        "bench",
        "train",
        "fp32",
        "mixed-bf16",
        "--hidden",
        "8",
        "--batch-size",
        "8",
        "--steps",
        "1",
        "--json",
    ]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in data["results"]] == ["fp32", "mixed-bf16"]
    assert main(["bench", "gemm", "--sizes", "0"]) == 2
    assert main(["bench", "gemm", "--formats", "fp8", "--sizes", "8"]) == 2
    assert main(["bench"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 3
    assert all(line.startswith("floatlab: error:") for line in err.splitlines())


@pytest.mark.parametrize(
    ("fmt", "capability", "supported"),
    [
        ("fp16", (7, 0), True),  # V100: fp16 tensor cores
        ("fp16", (6, 1), False),  # Pascal: none
        ("bf16", (7, 5), False),  # T4: fp16 only
        ("bf16", (8, 0), True),  # A100
        ("tf32", (7, 0), False),
        ("tf32", (9, 0), True),  # H100
        ("fp32", (5, 0), True),  # SIMT fp32 everywhere
        ("bf16", None, True),  # no GPU: the NumPy path, nothing to check
    ],
)
def test_gemm_support_by_compute_capability(
    fmt: str, capability: tuple[int, int] | None, supported: bool
) -> None:
    if supported:
        check_gemm_support(fmt, capability)
    else:
        with pytest.raises(ValueError, match=rf"^{fmt} GEMMs need compute capability \d\.0 or later"):
            check_gemm_support(fmt, capability, "an old GPU")


@pytest.mark.parametrize("recipe", ["fp8-tensorwise", "fp8-delayed", "fp8-blockwise"])
def test_an_fp8_recipes_gemm_operands_are_exact_in_fp16(recipe: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # the operands an fp8 recipe's GEMM multiplies are E4M3/E5M2 values: exact in fp16, so a GPU
    # runs them as fp16 tensor-core GEMMs without rounding
    from floatlab.train import TrainConfig, Trainer
    from floatlab.train.data import make_underflow_task
    from floatlab.train.recipes import fp8 as fp8_module

    original = fp8_module.scaled_matmul
    seen: list[int] = []

    def checked(a: Any, b: Any, **kw: Any) -> Any:
        for q in (a, b):
            assert np.array_equal(fl.round_array(q.values, "fp16"), q.values, equal_nan=True)
        seen.append(1)
        return original(a, b, **kw)

    monkeypatch.setattr(fp8_module, "scaled_matmul", checked)
    tr = Trainer.from_config(
        TrainConfig(data="underflow", precision=recipe, hidden=(16,), batch_size=16),
        make_underflow_task(n_train=32, n_test=16),
    )
    tr.fit(1, stop_after=2)
    # 2 steps of 5 GEMMs (the first layer needs no data gradient), then the epoch's evaluation (2)
    assert len(seen) == 2 * 5 + 2
