"""A policy on your own PyTorch model: what :func:`floatlab.torch.simulate` costs a training step.

A CPU training step (forward, cross-entropy, backward, AdamW) of a torch transformer classifier
of about 1M parameters (4 blocks of width 128, MLP 512, 64 tokens of 64 features, batch 32),
timed in one run, interleaved round by round:

* plain torch fp32, the baseline;
* under ``simulate`` with the plain formats (``mixed-bf16``, ``bf16``, ``mixed-fp16``): every
  Linear, matmul and bmm of the forward pass with its operands and output rounded, and every
  gradient they send back (target: at most 2x the fp32 step);
* under ``simulate`` with ``mxfp8``: the Linear layers' three GEMMs through floatlab's
  microscaling recipe (the operands quantized on the host), against torchao's own emulated MX
  training of the same layers (``mx_mm`` with ``KernelPreference.EMULATED``, swapped into each
  Linear), the peer the issue names (goal: no slower);
* under ``simulate`` with ``fp8-tensorwise`` (goal: at most 2x fp32), against torchao's float8
  training with tensorwise scaling, emulated (``convert_to_float8_training`` with
  ``Float8LinearConfig(emulate=True)``);
* under ``simulate`` with ``nvfp4`` (the blocks' Linear layers; the first and last in bf16).
  torchao has no NVFP4 training step that runs on a CPU, so its emulated MXFP8 step is the
  nearest peer.

Every ``simulate`` variant keeps its record (:meth:`floatlab.torch.Simulation.to_pandas`: the
statistics of every rounded operand) but those marked ``record=False``, which keep only the
recipes' own operand statistics, the scaler's steps and the swallowed updates.

Each figure is the best of the timed blocks; the ratio to fp32 comes from the same run. Writes
``benchmarks/results/torch-simulate.md``. Run: ``python benchmarks/bench_torch_simulate.py``.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Table, fmt_ratio, write_results

WIDTH, LAYERS, TOKENS, FEATURES, BATCH, CLASSES = 128, 4, 64, 64, 32, 32  # (torchao: multiples of 32)
ROUNDS, STEPS = 4, 3


def make_model() -> Any:
    import torch

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = torch.nn.LayerNorm(WIDTH), torch.nn.LayerNorm(WIDTH)
            self.qkv, self.proj = torch.nn.Linear(WIDTH, 3 * WIDTH), torch.nn.Linear(WIDTH, WIDTH)
            self.fc1, self.fc2 = torch.nn.Linear(WIDTH, 4 * WIDTH), torch.nn.Linear(4 * WIDTH, WIDTH)

        def forward(self, h: Any) -> Any:
            n, t, d = h.shape
            q, k, v = self.qkv(self.ln1(h)).reshape(n, t, 3, 4, d // 4).permute(2, 0, 3, 1, 4)
            att = torch.softmax(q @ k.transpose(-1, -2) / (d // 4) ** 0.5, dim=-1)
            h = h + self.proj((att @ v).transpose(1, 2).reshape(n, t, d))
            return h + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(h))))

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Linear(FEATURES, WIDTH)
            self.blocks = torch.nn.Sequential(*(Block() for _ in range(LAYERS)))
            self.head = torch.nn.Linear(WIDTH, CLASSES)

        def forward(self, x: Any) -> Any:
            return self.head(self.blocks(self.embed(x)).mean(dim=1))

    torch.manual_seed(0)
    return Net()


def make_step(variant: str) -> Callable[[], float]:
    import torch

    import floatlab.torch as flt

    model = make_model()
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(BATCH, TOKENS, FEATURES, generator=g), torch.randint(0, CLASSES, (BATCH,), generator=g)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    if variant == "torchao mxfp8 (emulated)":
        swap_in_torchao_mx(model)
    if variant == "torchao float8 tensorwise (emulated)":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from torchao.float8 import Float8LinearConfig, convert_to_float8_training

        convert_to_float8_training(model, config=Float8LinearConfig(emulate=True))
    sim = None
    if variant.startswith("simulate "):
        sim = flt.simulate(model, variant.split()[1].rstrip(","), record="record=False" not in variant)
        sim.__enter__()

    def step() -> float:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()
        opt.zero_grad()
        return float(loss.detach())

    return step


def swap_in_torchao_mx(model: Any) -> None:
    """Each Linear's forward through torchao's emulated MXFP8 training GEMMs (E4M3, floor scales)."""
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torchao.prototype.moe_training.mxfp8_linear import mx_mm
        from torchao.prototype.mx_formats.config import (
            MXFP8Dim0CastKernelChoice,
            MXFP8Dim1CastKernelChoice,
            ScaleCalculationMode,
        )
        from torchao.quantization.quantize_.common.kernel_preference import KernelPreference

    e4m3 = torch.float8_e4m3fn
    args = (
        e4m3, e4m3, e4m3, 32, KernelPreference.EMULATED, MXFP8Dim0CastKernelChoice.TORCH,
        MXFP8Dim1CastKernelChoice.TORCH, ScaleCalculationMode.FLOOR, False,
    )  # fmt: skip
    for m in model.modules():
        if isinstance(m, torch.nn.Linear):

            def forward(x: Any, m: Any = m) -> Any:
                return mx_mm.apply(x, m.weight, *args) + m.bias

            object.__setattr__(m, "forward", forward)  # (this module only: torchao's GEMMs)


VARIANTS = (
    "torch fp32",
    "simulate mixed-bf16",
    "simulate mixed-bf16, record=False",
    "simulate bf16",
    "simulate mixed-fp16",
    "simulate fp8-tensorwise",
    "simulate fp8-tensorwise, record=False",
    "torchao float8 tensorwise (emulated)",
    "simulate mxfp8",
    "simulate nvfp4",
    "torchao mxfp8 (emulated)",
)


def main() -> None:
    import torch

    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "2")))
    steps = {v: make_step(v) for v in VARIANTS}
    for fn in steps.values():  # warm-up: compilation, allocator
        fn()
    best: dict[str, float] = {v: float("inf") for v in VARIANTS}
    losses: dict[str, float] = {}
    load0 = os.getloadavg()[0]
    for _ in range(ROUNDS):
        for v, fn in steps.items():
            t = time.perf_counter()
            for _ in range(STEPS):
                losses[v] = fn()
            best[v] = min(best[v], (time.perf_counter() - t) / STEPS)
    load1 = os.getloadavg()[0]
    n_params = sum(p.numel() for p in make_model().parameters())
    table = Table(["variant", "ms per step", "x torch fp32", "loss after the timed steps"])
    base = best["torch fp32"]
    for v in VARIANTS:
        table.add(v, f"{best[v] * 1e3:.1f}", fmt_ratio(best[v] / base), f"{losses[v]:.4f}")
    mx = best["simulate mxfp8"] / best["torchao mxfp8 (emulated)"]
    nv = best["simulate nvfp4"] / best["torchao mxfp8 (emulated)"]
    f8 = best["simulate fp8-tensorwise"] / best["torchao float8 tensorwise (emulated)"]
    goals = [
        f"{v}: {fmt_ratio(best[v] / base)} torch fp32 (goal at most 2x: "
        f"{'met' if best[v] / base <= 2 else 'not met'})"
        for v in (
            "simulate mixed-bf16",
            "simulate mixed-bf16, record=False",
            "simulate fp8-tensorwise",
            "simulate fp8-tensorwise, record=False",
        )
    ] + [
        f"simulate {name}: {fmt_ratio(r)} torchao's emulated MX step (goal at most 1x: "
        f"{'met' if r <= 1 else 'not met'})"
        for name, r in (("mxfp8", mx), ("nvfp4", nv))
    ]
    sections = [
        f"A torch transformer classifier of {n_params:,} parameters ({LAYERS} blocks of width {WIDTH}, "
        f"{TOKENS} tokens, batch {BATCH}), one AdamW training step on the CPU with "
        f"{torch.get_num_threads()} threads, best of {ROUNDS} blocks of {STEPS} steps, variants "
        f"interleaved. Load average {load0:.1f} before, {load1:.1f} after.",
        table.markdown(),
        "Goals of issue 37 on this CPU:\n\n" + "\n".join(f"- {g}" for g in goals),
        f"floatlab's fp8-tensorwise step takes {fmt_ratio(f8)} torchao's emulated float8 step. "
        f"floatlab's mxfp8 step takes {fmt_ratio(mx)} torchao's emulated MX step. The two quantize the "
        "Linear layers' operands the same way (bit for bit on bf16 operands: "
        "tests/torch/test_torch_simulate.py); floatlab's policy also stores them in bf16 first, as the "
        "mxfp8 policy's model runs in bf16, hence the slightly different losses.",
        "Command: `python benchmarks/bench_torch_simulate.py`",
    ]
    path = write_results(
        "torch-simulate",
        "floatlab.torch.simulate: the cost of a policy on a torch model",
        sections,
        ["torch", "torchao"],
    )
    print(path.read_text())


if __name__ == "__main__":
    main()
