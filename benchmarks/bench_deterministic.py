"""What the same bits cost: the trainer's host GEMMs and training steps, default against deterministic.

Two tables, in one run:

* **GEMMs** of the README's transformer (1 layer x 64, batch 32 x 64 tokens) and of the default one
  (4 layers x 128): NumPy's sgemm and dgemm (BLAS on one thread, and on all of them), torch's fp32
  matmul on the CPU, floatlab's default host GEMM (``host_matmul``: one BLAS thread, row blocks on
  a thread pool) and its deterministic one (``exact_matmul``: exact products summed exactly,
  rounded once), with the share of outputs the deterministic GEMM had to sum exactly;
* **training steps** (forward, loss, backward, AdamW) of both transformers in fp32 and mixed-bf16,
  default and ``deterministic=True``, each variant in a process of its own, in rounds that
  interleave the variants; with ``--base DIR`` (a checkout of an older floatlab) the same default
  steps of that tree too, for an A/B of the thread-count change.

Writes ``benchmarks/results/deterministic.md``.

    python benchmarks/bench_deterministic.py
    git worktree add /tmp/base <commit>; python benchmarks/bench_deterministic.py --base /tmp/base
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from _common import Table, fmt_ratio, time_best, write_results

# (name, a shape, b shape, a transposed?) for each GEMM of a step, README transformer first
GEMMS = {
    "1 x 64": [
        ("qkv / mlp-in forward", (2048, 64), (64, 256), False),
        ("logits forward", (2048, 64), (64, 72), False),
        ("mlp-out forward", (2048, 256), (256, 64), False),
        ("weight gradient", (64, 2048), (2048, 256), True),
        ("attention scores", (128, 64, 16), (128, 16, 64), False),
    ],
    "4 x 128": [
        ("qkv forward", (2048, 128), (128, 384), False),
        ("mlp-in forward", (2048, 128), (128, 512), False),
        ("mlp-out forward", (2048, 512), (512, 128), False),
        ("weight gradient", (128, 2048), (2048, 512), True),
        ("attention scores", (128, 64, 32), (128, 32, 64), False),
    ],
}
MODELS = {"1 x 64": (1, 64), "4 x 128": (4, 128)}

STEP = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import floatlab.train as ft
layers, width, precision, steps = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[6])
kw = {"deterministic": True} if sys.argv[5] == "1" else {}
cfg = ft.TrainConfig(model="transformer", data="text", layers=layers, d_model=width, batch_size=32,
                     steps=10**6, optimizer="adamw", lr=3e-3, precision=precision, **kw)
tr = ft.Trainer.from_config(cfg)
tr.fit(1, stop_after=2)
times = []
for _ in range(3):
    t0 = time.perf_counter()
    tr.fit(1, stop_after=tr.step + steps)
    times.append((time.perf_counter() - t0) / steps)
print(json.dumps(times))
"""


def gemm_table(threads: int) -> str:
    from threadpoolctl import threadpool_limits

    from floatlab.rounding import exact_matmul
    from floatlab.train.hostmath import host_matmul

    torch: Any = None
    with contextlib.suppress(ImportError):
        import torch
    rng = np.random.default_rng(0)
    table = Table(
        ["model", "GEMM", "shape", "sgemm 1 thread", f"sgemm {threads}", "dgemm 1 thread", "torch fp32",
         "host_matmul", "exact_matmul", "exact / sgemm 1 thread", "summed exactly"]
    )  # fmt: skip
    for model, gemms in GEMMS.items():
        for name, sa, sb, transposed in gemms:
            # bf16 values, as a mixed-bf16 step's operands are
            import ml_dtypes

            a = (
                rng.standard_normal(sa[::-1] if transposed else sa)
                .astype(ml_dtypes.bfloat16)
                .astype(np.float32)
            )
            a = a.T if transposed else a
            b = rng.standard_normal(sb).astype(ml_dtypes.bfloat16).astype(np.float32)
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            with threadpool_limits(1, "blas"):
                s1 = time_best(partial(np.matmul, a, b), repeat=9)
                d1 = time_best(partial(np.matmul, a64, b64), repeat=9)
            sn = time_best(partial(np.matmul, a, b), repeat=9)
            host = time_best(partial(host_matmul, a, b), repeat=9)
            exact = time_best(partial(exact_matmul, a, b), repeat=9)
            tt = "-"
            if torch is not None:
                ta, tb = torch.from_numpy(np.ascontiguousarray(a)), torch.from_numpy(b)
                tt = f"{time_best(partial(torch.matmul, ta, tb), repeat=9).best * 1e3:.3f}"
            share = _exact_share(a, b)
            ms = (
                [f"{t.best * 1e3:.3f}" for t in (s1, sn, d1)]
                + [tt]
                + [f"{t.best * 1e3:.3f}" for t in (host, exact)]
            )
            table.add(model, name, f"{sa} x {sb}", *ms, fmt_ratio(exact.best / s1.best), share)
    return "## GEMMs (ms, best of 9; bf16-valued float32 operands)\n\n" + table.markdown()


def _exact_share(a: np.ndarray, b: np.ndarray) -> str:
    """The share of outputs the deterministic GEMM sums in an expansion (the rest settle in float64)."""
    from floatlab.rounding import _exact_kernels as kern

    calls: list[int] = []
    original = kern.resolve

    def counting(*args: object) -> None:
        calls.append(int(args[2].size))  # type: ignore[attr-defined]
        original(*args)

    setattr(kern, "resolve", counting)  # noqa: B010 - counting the outputs that reach it
    try:
        from floatlab.rounding import exact_matmul

        out = exact_matmul(a, b)
    finally:
        setattr(kern, "resolve", original)  # noqa: B010
    return f"{sum(calls) / out.size:.2%}"


def step_table(rounds: int, steps: int, base: str | None) -> str:
    here = str(Path(__file__).resolve().parents[1])
    trees = [("floatlab", here)] + ([("before", base)] if base else [])
    variants = []
    for model, (layers, width) in MODELS.items():
        for precision in ("fp32", "mixed-bf16"):
            for label, tree in trees:
                variants.append((model, precision, label, "default", tree, layers, width, "0"))
            variants.append((model, precision, "floatlab", "deterministic", here, layers, width, "1"))
    times: dict[tuple[str, str, str, str], list[float]] = {v[:4]: [] for v in variants}
    for _ in range(rounds):
        for v in variants:
            model, precision, label, mode, tree, layers, width, det = v
            out = subprocess.run(
                [sys.executable, "-c", STEP, tree, str(layers), str(width), precision, det, str(steps)],
                capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": tree},
            )  # fmt: skip
            times[v[:4]] += json.loads(out.stdout.strip().splitlines()[-1])
    table = Table(["model", "policy", "tree", "mode", "ms/step (median)", "ms/step (best)", "ratio"])
    for (model, precision, label, mode), ts in times.items():
        ref = statistics.median(times[model, precision, "floatlab", "default"])
        med = statistics.median(ts)
        table.add(
            model, precision, label, mode, f"{med * 1e3:.1f}", f"{min(ts) * 1e3:.1f}", fmt_ratio(med / ref)
        )
    return (
        f"## Training steps ({rounds} rounds of 3 blocks of {steps} steps, each variant in its own process; "
        "ratio: the median against floatlab's default step of the same model and policy)\n\n"
        + table.markdown()
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--base", metavar="DIR", help="an older floatlab checkout to time beside")
    parser.add_argument("--no-steps", action="store_true", help="the GEMM table only")
    args = parser.parse_args()
    from threadpoolctl import threadpool_info

    blas = [i for i in threadpool_info() if i["user_api"] == "blas"]
    threads = max([i["num_threads"] for i in blas] + [1])
    kernels = ", ".join(sorted({str(i.get("architecture")) for i in blas}))
    sections = [
        f"OpenBLAS: {kernels} kernel, {threads} threads. Command: `python benchmarks/bench_deterministic.py"
        + (" --base <the tree before>`" if args.base else "`"),
        gemm_table(threads),
    ]
    if not args.no_steps:
        sections.append(step_table(args.rounds, args.steps, args.base))
    path = write_results("deterministic", "Same bits: what the deterministic mode costs", sections, ["torch"])
    print(path.read_text())


if __name__ == "__main__":
    main()
