"""Measured speed: GEMM throughput per compute format, and trainer step times, on a backend.

:func:`measure_gemm` times square GEMMs in fp32, tf32, fp16 and bf16 and sets each rate
beside the device's published dense peak (:data:`PEAKS`); :func:`tensor_core_verdict` reads
the fp16 rate: far above the fp32 SIMT peak, it can only come from tensor cores.
:func:`measure_train` times trainer steps of several policies. ``floatlab bench`` prints them
and ``benchmarks/bench_gpu.py`` writes them to ``benchmarks/results``.

On NumPy the fp32 GEMM is the BLAS library's sgemm and the other formats are floatlab's
simulation (:func:`floatlab.train.precision.matmul.gemm`: inputs rounded, fp32 sgemm, output
rounded), so their rates are what simulation costs, not a hardware figure.

>>> peak_for("NVIDIA H100 80GB HBM3").fp16, peak_for("NVIDIA L40S") is None
(989.5, True)
"""

from __future__ import annotations

import re
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from floatlab._signature import passing_on, spelled_out
from floatlab.backend import Backend, get_backend

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from floatlab.train.config import TrainConfig
    from floatlab.train.data import Dataset

__all__ = [
    "GEMM_COMPUTES",
    "PEAKS",
    "GemmResult",
    "Peak",
    "TrainResult",
    "Workload",
    "measure_gemm",
    "measure_train",
    "peak_for",
    "step_phases",
    "tensor_core_verdict",
]

GEMM_COMPUTES: tuple[str, ...] = ("fp32", "tf32", "fp16", "bf16")


@dataclass(frozen=True)
class Peak:
    """A GPU's published dense peak, TFLOP/s (None where the GPU has no such unit): fp32 on
    the SIMT cores, tf32/fp16/bf16 on the tensor cores (fp32 accumulation; without sparsity).

    >>> Peak("T4", 8.1, None, 65.0, None).fp16 / Peak("T4", 8.1, None, 65.0, None).fp32 > 8
    True
    """

    name: str
    fp32: float
    tf32: float | None
    fp16: float | None
    bf16: float | None

    def of(self, compute: str) -> float | None:
        """The peak of one compute format.

        >>> Peak("A100", 19.5, 156.0, 312.0, 312.0).of("tf32")
        156.0
        """
        value: float | None = getattr(self, compute)
        return value


#: NVIDIA's datasheet figures; the tensor-core figures are half of the datasheets' "with
#: sparsity" numbers. Matched against the device name, most specific pattern first.
PEAKS: tuple[tuple[str, Peak], ...] = (
    (r"h100.*pcie", Peak("H100 PCIe", 51.2, 378.0, 756.5, 756.5)),
    (r"h100.*nvl", Peak("H100 NVL", 60.0, 417.5, 835.5, 835.5)),
    (r"h100", Peak("H100 SXM", 67.0, 494.5, 989.5, 989.5)),
    (r"h200.*nvl", Peak("H200 NVL", 60.0, 417.5, 835.5, 835.5)),
    (r"h200", Peak("H200 SXM", 67.0, 494.5, 989.5, 989.5)),
    (r"a100", Peak("A100 SXM4", 19.5, 156.0, 312.0, 312.0)),
    (r"\bl4\b", Peak("L4", 30.3, 60.0, 121.0, 121.0)),
    (r"\bt4\b", Peak("T4", 8.1, None, 65.0, None)),
    (r"v100.*pcie", Peak("V100 PCIe", 14.0, None, 112.0, None)),
    (r"v100", Peak("V100 SXM2", 15.7, None, 125.0, None)),
)


def peak_for(device: str) -> Peak | None:
    """The published peaks of the GPU called ``device``; None for one not in :data:`PEAKS`.

    >>> peak_for("Tesla V100-PCIE-32GB").name, peak_for("NVIDIA L4").fp32
    ('V100 PCIe', 30.3)
    """
    name = device.lower()
    for pattern, peak in PEAKS:
        if re.search(pattern, name):
            return peak
    return None


@dataclass(frozen=True)
class GemmResult:
    """One timed GEMM: ``n x n @ n x n`` in ``compute`` on ``backend``.

    >>> round(GemmResult("numpy", "CPU", "fp32", 64, 1e-4, "OpenBLAS").tflops, 6)   # 2 n^3 flops in 0.1 ms
    0.005243
    """

    backend: str
    device: str
    compute: str
    n: int
    seconds: float
    how: str
    peak: float | None = None

    @property
    def tflops(self) -> float:
        return 2.0 * self.n**3 / self.seconds / 1e12

    @property
    def ratio(self) -> float | None:
        """Share of the published dense peak reached (None without a peak)."""
        return self.tflops / self.peak if self.peak else None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "tflops": self.tflops, "ratio": self.ratio}


def _check_sizes(sizes: Sequence[int]) -> list[int]:
    out = [int(s) for s in sizes]
    if not out or min(out) < 1:
        raise ValueError(f"GEMM sizes {list(sizes)}: expected positive integers such as 1024,4096")
    return out


def _check_computes(computes: Sequence[str]) -> list[str]:
    out = [c.strip().lower() for c in computes]
    bad = [c for c in out if c not in GEMM_COMPUTES]
    if bad or not out:
        raise ValueError(f"GEMM formats {bad or list(computes)}: expected some of {', '.join(GEMM_COMPUTES)}")
    return out


def _time_calls(fn: Callable[[], object], sync: Callable[[], None], min_seconds: float) -> float:
    """Seconds per call: after a warm-up call, the best of 3 rounds, each round as many calls as
    fill ``min_seconds / 3`` (so that fast calls are timed in batches)."""
    fn()
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    one = max(time.perf_counter() - t0, 1e-9)
    per_round = max(1, int(min_seconds / 3 / one))
    best = one
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(per_round):
            fn()
        sync()
        best = min(best, (time.perf_counter() - t0) / per_round)
    return best


_MAX_SECONDS = 3600  # per measurement


def measure_gemm(
    backend: Backend | str = "numpy",
    sizes: Sequence[int] = (1024, 4096, 8192),
    computes: Sequence[str] = GEMM_COMPUTES,
    *,
    min_seconds: float = 0.3,
    seed: int = 0,
) -> list[GemmResult]:
    """Time ``n x n`` GEMMs for every size and compute format (fp32 accumulation throughout).

    On CuPy: cuBLAS ``cublasGemmEx`` with inputs already in their type and fp32 output, TF32
    off for fp32 and on for tf32 (only the GEMM is timed). On NumPy: sgemm for fp32 and the
    simulated GEMM of :func:`floatlab.train.precision.matmul.gemm` for the others.

    >>> r = measure_gemm("numpy", [32], ["fp32", "fp16"], min_seconds=0.001)
    >>> [(x.compute, x.n, x.tflops > 0) for x in r]
    [('fp32', 32, True), ('fp16', 32, True)]
    """
    if not isinstance(min_seconds, (int, float)) or not 0 <= min_seconds <= _MAX_SECONDS:
        raise ValueError(f"min_seconds={min_seconds!r}: expected seconds from 0 to {_MAX_SECONDS}")
    be = get_backend(backend)
    sizes_ = _check_sizes(sizes)
    computes_ = _check_computes(computes)
    device = be.device_name()
    peak = peak_for(device) if be.is_gpu else None
    cc = be.compute_capability()
    if cc is not None and cc < (8, 0):
        # TF32 and bf16 tensor cores arrive with Ampere (compute capability 8.0)
        computes_ = [c for c in computes_ if c not in ("tf32", "bf16")]
    rng = np.random.default_rng(seed)
    results = []
    for n in sizes_:
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        for c in computes_:
            if be.is_gpu:
                fn, how = _gpu_gemm_call(be, a, b, c)
            else:
                fn, how = _cpu_gemm_call(a, b, c)
            seconds = _time_calls(fn, be.synchronize, min_seconds)
            results.append(GemmResult(be.name, device, c, n, seconds, how, peak.of(c) if peak else None))
    return results


def _cpu_gemm_call(a: np.ndarray, b: np.ndarray, c: str) -> tuple[Callable[[], object], str]:
    if c == "fp32":
        return (lambda: np.matmul(a, b)), "numpy sgemm (BLAS), IEEE fp32"
    from floatlab.train.precision.matmul import gemm

    return (lambda: gemm(a, b, c)), f"simulated: inputs and output rounded to {c}, fp32 sgemm between"


def _gpu_gemm_call(be: Backend, a: np.ndarray, b: np.ndarray, c: str) -> tuple[Callable[[], object], str]:
    from floatlab.formats import get_format
    from floatlab.train.precision.matmul import gemm_prepared, to_gemm_input

    cp = be.xp
    f = get_format(c)
    a_in, a_type = to_gemm_input(cp, cp.asarray(a)[None], f)
    b_in, b_type = to_gemm_input(cp, cp.asarray(b)[None], f)
    out = cp.empty((1, a.shape[0], b.shape[1]), cp.float32)
    how = {
        "fp32": "cublasGemmEx fp32 in/out, COMPUTE_32F (TF32 off)",
        "tf32": "cublasGemmEx fp32 in/out, COMPUTE_32F_FAST_TF32",
        "fp16": "cublasGemmEx fp16 in, fp32 out, COMPUTE_32F",
        "bf16": "cublasGemmEx bf16 in, fp32 out, COMPUTE_32F",
    }[c]
    return (lambda: gemm_prepared(cp, a_in, a_type, b_in, b_type, out, f)), how


def tensor_core_verdict(results: Sequence[GemmResult]) -> str:
    """Were tensor cores used? fp16 throughput far above the fp32 SIMT peak is the proof.

    >>> tensor_core_verdict([GemmResult("numpy", "CPU", "fp16", 64, 1.0, "simulated")])
    'no tensor cores on the numpy backend: tf32, fp16 and bf16 are simulated (inputs rounded, fp32 BLAS)'
    """
    if not results:
        return "no GEMM was measured"
    if results[0].backend != "cupy":
        return (
            f"no tensor cores on the {results[0].backend} backend: tf32, fp16 and bf16 are simulated "
            "(inputs rounded, fp32 BLAS)"
        )
    fp16 = [r for r in results if r.compute == "fp16"]
    fp32 = [r for r in results if r.compute == "fp32"]
    if not fp16:
        return "no fp16 GEMM was measured: run with fp16 to see whether tensor cores are used"
    best16 = max(fp16, key=lambda r: r.tflops)
    peak = peak_for(best16.device)
    if peak is not None:
        bound, what = peak.fp32, f"the fp32 SIMT peak of the {peak.name} ({peak.fp32:g} TFLOP/s)"
    elif fp32:
        bound, what = max(r.tflops for r in fp32), "the measured fp32 rate"
    else:
        return f"fp16 reached {best16.tflops:.1f} TFLOP/s; no fp32 peak or rate to compare it with"
    factor = best16.tflops / bound
    if factor > 1.5:
        return (
            f"tensor cores used: fp16 reached {best16.tflops:.1f} TFLOP/s at n={best16.n}, "
            f"{factor:.1f}x {what}, which SIMT cores cannot exceed"
        )
    return (
        f"tensor cores not shown: fp16 reached {best16.tflops:.1f} TFLOP/s at n={best16.n}, "
        f"{factor:.2f}x {what} (try a larger size)"
    )


@dataclass(frozen=True)
class TrainResult:
    """Trainer step times of one policy: the median and best of the timed steps, in ms.

    >>> TrainResult("numpy", "CPU", "fp32", 2.0, 1.8, 10, 2.3).to_dict()["median_ms"]
    2.0
    """

    backend: str
    device: str
    policy: str
    median_ms: float
    best_ms: float
    steps: int
    final_loss: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Workload(TypedDict, total=False):
    """What :func:`measure_train` and :func:`step_phases` time, typed once: the model (an MLP of
    ``hidden`` widths on the synthetic underflow task, or the model and data set that the
    :class:`~floatlab.train.TrainConfig` settings ``model`` name), the batch size, the timed and
    the untimed steps, and the seed (help() shows them spelled out, with their defaults).

    >>> sorted(Workload(steps=3, model={"model": "transformer", "data": "text"}))
    ['model', 'steps']
    """

    hidden: Sequence[int]
    batch_size: int
    steps: int
    warmup: int
    seed: int
    model: dict[str, Any] | None


@dataclass(frozen=True, kw_only=True)
class _Workload:
    """:class:`Workload` with its defaults, checked; the data set, its batches and each policy's
    trainer."""

    hidden: Sequence[int] = (512, 512)
    batch_size: int = 256
    steps: int = 10
    warmup: int = 2
    seed: int = 0
    model: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.steps < 1 or self.warmup < 0 or self.batch_size < 1:
            sizes = f"steps={self.steps}, warmup={self.warmup}, batch_size={self.batch_size}"
            raise ValueError(f"{sizes}: expected positive sizes")

    def config(self, policy: str) -> TrainConfig:
        """The run's settings under ``policy``."""
        from floatlab.train.config import TrainConfig

        settings = dict(self.model) if self.model else {"data": "underflow", "hidden": tuple(self.hidden)}
        return TrainConfig.from_dict(
            {**settings, "precision": policy, "batch_size": self.batch_size, "seed": self.seed}
        )

    def data(self) -> tuple[Dataset, list[tuple[Any, Any]]]:
        """The data set and the ``warmup + steps`` batches (on the host; a data set with fewer
        examples is gone through again)."""
        from floatlab.train.data import get_data, make_underflow_task

        cfg, n = self.config("fp32"), self.batch_size * (self.steps + self.warmup)
        if cfg.data == "underflow":
            data = make_underflow_task(n_train=n, n_test=self.batch_size, seed=self.seed)
        else:
            data = get_data(cfg.data, seed=cfg.data_seed, context=cfg.context)
        rows = np.arange(n) % len(data.x_train)
        cut = [rows[i : i + self.batch_size] for i in range(0, n, self.batch_size)]
        return data, [(data.x_train[r], data.y_train[r]) for r in cut]


@spelled_out(_Workload)
def measure_train(
    backend: Backend | str = "numpy",
    policies: Sequence[str] = ("fp32", "mixed-fp16"),
    **workload: Unpack[Workload],
) -> list[TrainResult]:
    """Time ``steps`` training steps of an MLP (64 inputs, ``hidden``, 10 classes) on the
    synthetic underflow task for each policy, after ``warmup`` untimed steps; with ``model``, of
    the model and data set those :class:`~floatlab.train.TrainConfig` settings name instead
    (``{"model": "transformer", "data": "text", "d_model": 256, "context": 64}``).

    >>> r = measure_train("numpy", ["fp32"], hidden=(16,), batch_size=8, steps=2, warmup=1)
    >>> r[0].policy, r[0].steps, r[0].median_ms > 0
    ('fp32', 2, True)
    >>> lm = {"model": "transformer", "data": "text", "layers": 1, "d_model": 16, "context": 8}
    >>> measure_train("numpy", ["bf16"], batch_size=4, steps=1, warmup=0, model=lm)[0].final_loss > 0
    True
    """
    from floatlab.train.trainer import Trainer

    be = get_backend(backend)
    w = passing_on(_Workload, **workload)
    device = be.device_name()
    data, batches = w.data()
    results = []
    for policy in policies:
        tr = Trainer.from_config(w.config(policy), data, backend=be)
        times = []
        loss = float("nan")
        for i, (x, y) in enumerate(batches):
            be.synchronize()
            t0 = time.perf_counter()
            loss = tr.train_step(x, y).loss
            be.synchronize()
            if i >= w.warmup:
                times.append(time.perf_counter() - t0)
        results.append(
            TrainResult(
                be.name, device, policy, 1e3 * statistics.median(times), 1e3 * min(times), w.steps, loss
            )
        )
    return results


@spelled_out(_Workload)
def step_phases(
    backend: Backend | str = "numpy",
    policy: str = "mixed-fp16",
    **workload: Unpack[Workload],
) -> dict[str, float]:
    """Where a training step of :func:`measure_train`'s workload goes: milliseconds per step (the
    median over ``steps``) in each phase of :data:`floatlab.train.trainer.STEP_PHASES`, then
    ``"gemm"``, the step's GEMMs (operand conversion, the GEMM, its epilogue and its output's
    store; inside forward and backward), and ``"total"``. The device is synchronised at the end
    of every phase and around every GEMM, so a phase's time holds its device work, and the phases
    do not overlap: the total is a little above :func:`measure_train`'s. The batches are put on
    the device before the timed steps.

    >>> t = step_phases("numpy", "fp32", hidden=(16,), batch_size=8, steps=2, warmup=1)
    >>> list(t)
    ['cast', 'forward', 'backward', 'unscale', 'check', 'update', 'close', 'gemm', 'total']
    """
    from floatlab.train.trainer import STEP_PHASES, Trainer

    be = get_backend(backend)
    w = passing_on(_Workload, **workload)
    data, on_host = w.data()
    tr = Trainer.from_config(w.config(policy), data, backend=be)
    batches = [(be.asarray(x), be.asarray(y)) for x, y in on_host]
    rows = [*STEP_PHASES, "gemm"]
    now: dict[str, float] = dict.fromkeys(rows, 0.0)
    last = [0.0]

    def tick(phase: str) -> None:
        be.synchronize()
        t = time.perf_counter()
        now[phase] += t - last[0]
        last[0] = t

    gemm = tr.P.matmul

    def timed_gemm(*args: Any, **kwargs: Any) -> Any:
        be.synchronize()
        t0 = time.perf_counter()
        out = gemm(*args, **kwargs)
        be.synchronize()
        now["gemm"] += time.perf_counter() - t0
        return out

    tr.phase_clock = tick
    tr.P.matmul = timed_gemm  # type: ignore[method-assign]  # (this trainer's Precision only)
    per_step: dict[str, list[float]] = {row: [] for row in [*rows, "total"]}
    for i, (x, y) in enumerate(batches):
        for row in rows:
            now[row] = 0.0
        be.synchronize()
        last[0] = time.perf_counter()
        tr.train_step(x, y)
        if i >= w.warmup:
            for row in rows:
                per_step[row].append(now[row])
            per_step["total"].append(sum(now[p] for p in STEP_PHASES))
    return {row: 1e3 * statistics.median(v) for row, v in per_step.items()}
