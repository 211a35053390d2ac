"""GPU benchmarks: GEMM TFLOP/s per format against the published peak, trainer step times on the
GPU and on the CPU, and the rounding kernels' throughput on the GPU and the CPU, in one run.

Needs a CUDA device with CuPy and numba-cuda (``pip install floatlab[gpu]``); without one it says
so in one line and exits with status 2. ``benchmarks/run_gpu.sh`` runs the GPU tests first and
passes their summary in with ``--pytest-log``. Writes ``benchmarks/results/gpu-<device>.md``.

    python benchmarks/bench_gpu.py
    python benchmarks/bench_gpu.py --sizes 1024,4096 --quick
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from _common import Table, fmt_ratio, time_best, write_results

import floatlab as fl
from floatlab.backend import Backend, BackendUnavailable, get_backend
from floatlab.perf import measure_gemm, measure_train, peak_for, step_phases, tensor_core_verdict
from floatlab.train.trainer import STEP_PHASES


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def gpu_header(be: Backend) -> list[str]:
    """Markdown lines: the device, its compute capability and memory, CUDA and library versions."""
    cp = be.xp
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    cc = be.compute_capability()
    runtime = cp.cuda.runtime.runtimeGetVersion()
    driver = cp.cuda.runtime.driverGetVersion()
    peak = peak_for(be.device_name())

    def cuda_text(v: int) -> str:
        return f"{v // 1000}.{(v % 1000) // 10}"

    lines = [
        f"- GPU: {be.device_name()}, compute capability {cc[0]}.{cc[1]}"
        if cc
        else f"- GPU: {be.device_name()}",
        f"- GPU memory: {props['totalGlobalMem'] / 2**30:.0f} GiB, {props['multiProcessorCount']} SMs",
        f"- CUDA: runtime {cuda_text(runtime)}, driver {cuda_text(driver)}",
        "- GPU packages: "
        + ", ".join(
            f"{d} {_version(d)}" for d in ("cupy-cuda12x", "cupy-cuda13x", "cupy", "numba-cuda", "numba")
        ),
    ]
    if peak is not None:
        lines.append(
            f"- published dense peak ({peak.name}), TFLOP/s: fp32 {peak.fp32:g}, tf32 {peak.tf32 or '-'}, "
            f"fp16 {peak.fp16 or '-'}, bf16 {peak.bf16 or '-'}"
        )
    return lines


def gemm_section(be: Backend, sizes: list[int], min_seconds: float) -> str:
    results = measure_gemm(be, sizes, min_seconds=min_seconds)
    t = Table(["n", "format", "TFLOP/s", "peak", "of peak", "how"])
    for r in results:
        ratio = "-" if r.ratio is None else f"{100 * r.ratio:.1f} %"
        t.add(r.n, r.compute, f"{r.tflops:.1f}", "-" if r.peak is None else f"{r.peak:g}", ratio, r.how)
    cpu = measure_gemm("numpy", [min(sizes[0], 1024)], ["fp32", "fp16"], min_seconds=min_seconds)
    c = Table(["n", "format", "TFLOP/s", "how"])
    for r in cpu:
        c.add(r.n, r.compute, f"{r.tflops:.4f}", r.how)
    return "\n\n".join(
        [
            "## GEMM throughput",
            "Square n x n GEMMs, fp32 accumulation and fp32 output; only the cuBLAS call is timed "
            "(inputs already in their type), best of 3 rounds.",
            t.markdown(),
            f"Verdict: {tensor_core_verdict(results)}.",
            "The same GEMMs on this machine's CPU (numpy: BLAS for fp32, floatlab's simulation for fp16):",
            c.markdown(),
        ]
    )


def train_section(be: Backend, steps: int, quick: bool) -> str:
    hidden, batch = ((1024, 1024), 1024) if quick else ((4096, 4096), 4096)
    policies = ["fp32", "mixed-fp16", "mixed-bf16"]
    gpu = measure_train(be, policies, hidden=hidden, batch_size=batch, steps=steps)
    # the transformer language model at a size where its GEMMs dominate the step
    lm = {"model": "transformer", "data": "text", "layers": 2, "d_model": 256, "heads": 4, "context": 64}
    if not quick:
        lm.update(layers=4, d_model=1024, heads=16, context=256)
    lm_batch = 32 if quick else 64
    lm_rows = measure_train(be, policies, batch_size=lm_batch, steps=steps, model=lm)
    lm_shape = f"transformer {lm['layers']} x {lm['d_model']}, context {lm['context']}, batch {lm_batch}"
    cpu_hidden, cpu_batch = (512, 512), 256
    cpu = measure_train(
        "numpy", policies[:2], hidden=cpu_hidden, batch_size=cpu_batch, steps=max(3, steps // 4)
    )
    t = Table(["backend", "model", "policy", "ms/step (median)", "ms/step (best)", "vs fp32"])
    for rows, shape in (
        (gpu, f"64-{hidden[0]}-{hidden[1]}-10, batch {batch}"),
        (lm_rows, lm_shape),
        (cpu, f"64-512-512-10, batch {cpu_batch}"),
    ):
        base = rows[0].median_ms
        for r in rows:
            t.add(
                r.backend,
                shape,
                r.policy,
                f"{r.median_ms:.2f}",
                f"{r.best_ms:.2f}",
                f"{r.median_ms / base:.2f}",
            )
    # where the GPU step's time goes: each phase timed to its end on the device (see step_phases)
    phases = {p: step_phases(be, p, hidden=hidden, batch_size=batch, steps=steps) for p in policies}
    lm_phases = {p: step_phases(be, p, batch_size=lm_batch, steps=steps, model=lm) for p in policies}
    w, lm_w = (_phase_table(ph, policies) for ph in (phases, lm_phases))
    return "\n\n".join(
        [
            "## Trainer step time",
            "One step = cast, forward, scaled loss, backward, unscale, finite check, SGD step (momentum "
            "0.9), scale update, on the synthetic underflow task. mixed-fp16 GEMMs are cuBLAS fp16 GEMMs "
            "on tensor cores; fp32 runs with TF32 off. Every rounding point is a floatlab GPU rounding "
            "kernel. Each step's batch is copied from the host.",
            t.markdown(),
            f"Where the GPU step's time goes ({hidden[0]}-wide MLP, batch {batch}, median of {steps} steps): "
            "the device synchronised at the end of each phase and around each GEMM "
            "(`floatlab.perf.step_phases`), so the phases do not overlap, the batches are on the device "
            "beforehand, and the whole step can read a little above the table's. A GEMM's time holds "
            "its operands' conversion, the cuBLAS call, its epilogue and its output's store.",
            w.markdown(),
            f"The same for the {lm_shape} (SGD with momentum, as above; the GEMMs are the attention's "
            "and the MLP blocks' projections, the element-wise passes softmax, layer norm and GELU):",
            lm_w.markdown(),
        ]
    )


def _phase_table(phases: dict[str, dict[str, float]], policies: list[str]) -> Table:
    """Milliseconds and shares of the step per phase, a column pair per policy."""
    w = Table(["phase of the step", *(f"{p} ms" for p in policies), *(f"{p} share" for p in policies)])
    for row in [*STEP_PHASES, "gemm", "total"]:
        name = {"gemm": "of which GEMMs (forward and backward)", "total": "whole step"}.get(row, row)
        ms = [f"{phases[p][row]:.2f}" for p in policies]
        share = [f"{100 * phases[p][row] / phases[p]['total']:.0f} %" for p in policies]
        w.add(name, *ms, *share)
    return w


def rounding_section(be: Backend, n: int) -> str:
    cp = be.xp
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(n) * 2.0 ** rng.integers(-20, 10, n)).astype(np.float32)
    xg = cp.asarray(x)
    cases: list[tuple[str, Callable[[Any], Any]]] = [
        ("fp32 -> fp16, rne", lambda a: fl.round_array(a, "fp16")),
        ("fp32 -> bf16, rne", lambda a: fl.round_array(a, "bf16")),
        ("fp32 -> fp16, stochastic", lambda a: fl.round_array(a, "fp16", "stochastic", rng=1)),
        ("fp32 -> e4m3fn codes, rne, saturate", lambda a: fl.encode_array(a, "e4m3fn", saturate=True)),
        ("fp32 -> fp16 with IEEE flags", lambda a: fl.round_array_with_flags(a, "fp16")),
    ]
    t = Table(["conversion", "GPU M values/s", "CPU M values/s", "GPU / CPU"])
    for name, fn in cases:

        def on_gpu(fn: Callable[[Any], Any] = fn) -> None:
            fn(xg)
            be.synchronize()

        g = time_best(on_gpu, repeat=5, warmup=2)
        c = time_best(lambda fn=fn: fn(x), repeat=3, warmup=1)  # type: ignore[misc]
        t.add(name, f"{n / g.best / 1e6:,.0f}", f"{n / c.best / 1e6:,.0f}", fmt_ratio(c.best / g.best))

    def device_copy() -> None:
        xg.copy()
        be.synchronize()

    copy = time_best(device_copy, repeat=5, warmup=2)
    return "\n\n".join(
        [
            "## Rounding kernels",
            f"{n:,} float32 values; GPU: the CPU kernels' element functions compiled with numba-cuda, one "
            f"thread per value (a plain device copy runs at {n / copy.best / 1e6:,.0f} M values/s); CPU: the "
            "numba kernels on this machine's cores.",
            t.markdown(),
        ]
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="1024,4096,8192", help="GEMM sizes (default: 1024,4096,8192)")
    p.add_argument("--steps", type=int, default=20, help="timed trainer steps per policy (default: 20)")
    p.add_argument("--values", type=int, default=10**8, help="values per rounding measurement (default: 1e8)")
    p.add_argument("--min-seconds", type=float, default=0.5, help="time per GEMM measurement (default: 0.5)")
    p.add_argument("--quick", action="store_true", help="smaller trainer and rounding runs")
    p.add_argument("--pytest-log", type=Path, help="output of 'pytest -m gpu' to summarise in the results")
    p.add_argument("--out", help="results name (default: gpu-<device>)")
    args = p.parse_args(argv)
    try:
        be = get_backend("cupy")
    except BackendUnavailable as e:
        print(f"bench_gpu: {e}", file=sys.stderr)
        return 2
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    values = min(args.values, 10**7) if args.quick else args.values
    t0 = time.perf_counter()
    sections = [
        "\n".join(gpu_header(be)),
        gemm_section(be, sizes, args.min_seconds),
        train_section(be, args.steps, args.quick),
        rounding_section(be, values),
    ]
    if args.pytest_log is not None and args.pytest_log.exists():
        log = args.pytest_log.read_text(encoding="utf-8", errors="replace").splitlines()
        summary = [line for line in log if re.search(r"\b(passed|failed|error|skipped)\b", line)][-1:]
        failures = [line for line in log if line.startswith(("FAILED", "ERROR"))]
        sections.append(
            "## GPU tests (`pytest -m gpu`)\n\n" + "\n".join(f"    {line}" for line in [*failures, *summary])
        )
    sections.append(f"(run took {time.perf_counter() - t0:.0f} s)")
    slug = re.sub(r"[^a-z0-9]+", "-", be.device_name().lower().removeprefix("nvidia ")).strip("-")
    path = write_results(args.out or f"gpu-{slug}", f"GPU benchmarks on {be.device_name()}", sections)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
