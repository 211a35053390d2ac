"""Training-step throughput: floatlab's NumPy trainer against PyTorch on the CPU, in one run.

The model is the 784-256-256-10 ReLU MLP with softmax cross-entropy, batch 128, SGD with
momentum, on random 784-dim inputs (the shape of MNIST; the digits that ship with
scikit-learn are 8x8). One step is forward, loss, backward and the optimizer update:

* floatlab fp32 and mixed-fp16 (fp16 tensor-core GEMMs simulated with float32 BLAS, fp32 master
  weights, dynamic loss scaling), plus mixed-bf16 and pure fp16 for reference;
* torch fp32, and torch with bf16 autocast (``torch.autocast("cpu", dtype=torch.bfloat16)``).

Each variant runs in a process of its own (so that no two sets of thread pools compete), in
rounds that interleave the variants in time, so that the noise of shared cores hits them alike;
the tables give steps per second at the best and the median block, and the ratios the issue
asks for. Writes ``benchmarks/results/trainer.md``.

    python benchmarks/bench_trainer.py
    python benchmarks/bench_trainer.py --rounds 2 --blocks 3 --steps 10
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import itertools
import json
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from _common import Table, write_results

import floatlab.train as ft

SIZES = (784, 256, 256, 10)
BATCH = 128


def floatlab_step(policy: str, x: np.ndarray[Any, Any], y: np.ndarray[Any, Any]) -> Callable[[], object]:
    """One trainer step of ``policy`` on the batch ``(x, y)``."""
    model = ft.MLP(SIZES[0], SIZES[1:-1], SIZES[-1])
    data = ft.Dataset("random", x, y, x, y, SIZES[-1])
    tr = ft.Trainer(model, data, policy, optimizer=ft.SGD(lr=0.01, momentum=0.9), seed=0)
    return lambda: tr.train_step(x, y)


def torch_step(x: np.ndarray[Any, Any], y: np.ndarray[Any, Any], autocast: bool) -> Callable[[], object]:
    import torch

    torch.manual_seed(0)
    layers: list[Any] = []
    for i, (a, b) in enumerate(itertools.pairwise(SIZES)):
        layers.append(torch.nn.Linear(a, b))
        if i < len(SIZES) - 2:
            layers.append(torch.nn.ReLU())
    net = torch.nn.Sequential(*layers)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)

    def step() -> object:
        opt.zero_grad(set_to_none=True)
        if autocast:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = loss_fn(net(tx), ty)
        else:
            loss = loss_fn(net(tx), ty)
        loss.backward()
        opt.step()
        return loss

    return step


VARIANTS: dict[str, Callable[[np.ndarray[Any, Any], np.ndarray[Any, Any]], Callable[[], object]]] = {
    "floatlab fp32": lambda x, y: floatlab_step("fp32", x, y),
    "floatlab mixed-fp16": lambda x, y: floatlab_step("mixed-fp16", x, y),
    "floatlab mixed-bf16": lambda x, y: floatlab_step("mixed-bf16", x, y),
    "floatlab fp16 (pure)": lambda x, y: floatlab_step("fp16", x, y),
    "torch fp32": lambda x, y: torch_step(x, y, autocast=False),
    "torch bf16 autocast": lambda x, y: torch_step(x, y, autocast=True),
}


def measure(name: str, blocks: int, steps: int) -> list[float]:
    """Seconds per step of one variant: ``blocks`` timed blocks of ``steps`` steps after a warm-up."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, SIZES[0]), dtype=np.float32)
    y = rng.integers(0, SIZES[-1], BATCH)
    fn = VARIANTS[name](x, y)
    for _ in range(5):  # warm-up: compilation, BLAS buffers, allocator
        fn()
    out = []
    gc.disable()
    for _ in range(blocks):
        t0 = time.perf_counter()
        for _ in range(steps):
            fn()
        out.append((time.perf_counter() - t0) / steps)
    gc.enable()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="rounds over all variants (default: 3)")
    ap.add_argument("--blocks", type=int, default=4, help="timed blocks per variant and round (default: 4)")
    ap.add_argument("--steps", type=int, default=20, help="steps per timed block (default: 20)")
    ap.add_argument("--variant", help=argparse.SUPPRESS)  # internal: measure one variant, print JSON
    args = ap.parse_args()
    if args.variant:
        print(json.dumps(measure(args.variant, args.blocks, args.steps)))
        return

    have_torch = importlib.util.find_spec("torch") is not None
    names = [n for n in VARIANTS if have_torch or not n.startswith("torch")]
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(args.rounds):
        for n in names:
            # a fresh process per variant: thread pools (OpenBLAS, numba's, torch's) of one
            # variant never compete with another's; the rounds interleave the variants in time
            cmd = [
                sys.executable,
                __file__,
                "--variant",
                n,
                "--blocks",
                str(args.blocks),
                "--steps",
                str(args.steps),
            ]
            res = subprocess.run(cmd, capture_output=True, text=True, check=True)
            times[n] += json.loads(res.stdout.strip().splitlines()[-1])
            print(f"round {r + 1}/{args.rounds}: {n}: {1 / min(times[n]):.0f} steps/s", file=sys.stderr)

    best = {k: min(v) for k, v in times.items()}
    med = {k: float(np.median(v)) for k, v in times.items()}
    table = Table(["variant", "steps/s (best)", "steps/s (median)", "ms/step (median)"])
    for k in names:
        table.add(k, f"{1 / best[k]:.1f}", f"{1 / med[k]:.1f}", f"{1e3 * med[k]:.2f}")

    ratios = Table(["ratio (time per step)", "best", "median", "aim"])

    def ratio(a: str, b: str, aim: str) -> None:
        if a in best and b in best:
            ratios.add(f"{a} / {b}", f"{best[a] / best[b]:.2f}", f"{med[a] / med[b]:.2f}", aim)

    ratio("floatlab fp32", "torch fp32", "<= 1.5")
    ratio("floatlab mixed-fp16", "floatlab fp32", "<= 1.5")
    ratio("floatlab mixed-fp16", "torch bf16 autocast", "")
    ratio("floatlab mixed-bf16", "floatlab fp32", "")
    ratio("floatlab fp16 (pure)", "floatlab fp32", "")

    import numba
    import torch

    torch_note = (
        f"torch {torch.__version__} on {torch.get_num_threads()} threads" if have_torch else "no torch"
    )
    sections = [
        f"784-256-256-10 ReLU MLP, batch {BATCH}, SGD momentum 0.9, one step = forward + loss + backward + "
        f"update. Each variant runs in its own process ({args.rounds} rounds over the variants, "
        f"{args.blocks} blocks of {args.steps} steps each per round); {torch_note}; numba threads "
        f"{numba.get_num_threads()} (threading layer: {getattr(numba.config, 'THREADING_LAYER', '?')}).",
        table.markdown(),
        ratios.markdown(),
        "mixed-fp16 per step: 6 weight casts to fp16, 4 activation and 7 gradient casts (each a "
        "`round_array` call, about 0.75 million values in all), the same float32 BLAS GEMMs as fp32, "
        "loss scaling, the finite check and the counts of flushed gradients and swallowed updates. "
        "Arrays under 2^18 elements are rounded on one thread (waking the other core costs more than "
        "it saves, and between GEMMs OpenBLAS's threads and the loop threads would take turns on the "
        "same cores); float32 -> fp16 round-to-nearest-even uses the CPU's own conversion (F16C), "
        "float32 -> bf16 round-to-nearest-even one integer add per value; tests check both bit for "
        "bit against the generic loops.",
    ]
    path = write_results(
        "trainer", "Training-step throughput: floatlab vs PyTorch (CPU)", sections, ["torch"]
    )
    print(table.markdown())
    print()
    print(ratios.markdown())
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    main()
