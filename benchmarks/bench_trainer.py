"""Training-step throughput: floatlab's NumPy trainer against PyTorch on the CPU, in one run.

Two models, each timed as one step = forward, loss, backward and the optimizer update (SGD with
momentum 0.9):

* the 784-256-256-10 ReLU MLP with softmax cross-entropy, batch 128, on random 784-dim inputs
  (the shape of MNIST; the digits that ship with scikit-learn are 8x8): floatlab fp32,
  mixed-fp16 (fp16 tensor-core GEMMs simulated with float32 BLAS, fp32 master weights, dynamic
  loss scaling), mixed-bf16 and pure fp16, against torch fp32 and torch with bf16 autocast
  (``torch.autocast("cpu", dtype=torch.bfloat16)``); writes ``benchmarks/results/trainer.md``;
* the decoder-only transformer language model at its default size (4 layers, width 128, 4 heads,
  context 64, vocabulary 65, batch 32 sequences of 64 tokens): floatlab fp32, mixed-fp16,
  mixed-bf16, pure fp16, pure bf16 and the three fp8 recipes (fp8-tensorwise, fp8-delayed,
  fp8-blockwise: their linear layers' GEMM operands scaled into fp8) and two microscaling recipes
  (mxfp8, nvfp4: the operands quantized in blocks along each GEMM's reduction), against the same model in
  torch fp32 (written with
  ``torch.nn.functional``: causal ``scaled_dot_product_attention``, and once more with the
  attention spelled out as a masked softmax, as floatlab computes it); torch runs on as many
  threads as numpy's BLAS (found with threadpoolctl when it is installed; ``--threads`` sets
  both). A cProfile run of floatlab's fp32 and mixed-fp16 steps says where the time goes.
  Writes ``benchmarks/results/trainer-transformer.md``.

With ``--threads N`` the files get the thread count in their names (``trainer-Nthread.md``,
``trainer-transformer-Nthread.md``, such as ``trainer-transformer-1thread.md``).

Each variant runs in a process of its own (so that no two sets of thread pools compete), in
rounds that interleave the variants in time, so that the noise of shared cores hits them alike;
the tables give steps per second at the best and the median block, and the ratios the issue
asks for (of the median times).

    python benchmarks/bench_trainer.py                        # both models
    python benchmarks/bench_trainer.py --model transformer --threads 1
    python benchmarks/bench_trainer.py --quick                # a short run that writes nothing
    python benchmarks/bench_trainer.py --rounds 2 --blocks 3 --steps 10
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import importlib.util
import itertools
import json
import os
import pstats
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from _common import Table, write_results

import floatlab.train as ft
from floatlab.train.models.seq_layers import BLOCK_PARAMS
from floatlab.train.models.transformer import TransformerLM

SIZES = (784, 256, 256, 10)
BATCH = 128
# the transformer's default size, and its batch of sequences
LM = {"context": 64, "vocab": 65, "layers": 4, "d_model": 128, "heads": 4}
LM_BATCH = 32
LM_RESULTS = "trainer-transformer"  # benchmarks/results/trainer-transformer.md

Step = Callable[[], object]
_LIMITS: list[Any] = []


def blas_threads() -> int | None:
    """The thread count of numpy's BLAS (threadpoolctl), or None when that cannot be found."""
    try:
        from threadpoolctl import threadpool_info  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        return None
    counts = [int(i["num_threads"]) for i in threadpool_info() if i.get("user_api") == "blas"]
    return max(counts) if counts else None


def set_threads(n: int | None) -> int | None:
    """Limit numpy's BLAS (when threadpoolctl is there) and numba's loops to ``n`` threads;
    return the BLAS thread count in use."""
    if n is not None:
        import numba

        most: int = numba.config.NUMBA_NUM_THREADS  # type: ignore[attr-defined,unused-ignore]
        numba.set_num_threads(max(1, min(n, most)))
        try:
            from threadpoolctl import threadpool_limits  # type: ignore[import-untyped,unused-ignore]
        except ImportError:
            return None
        # kept for the whole process: the limit holds while the object lives
        _LIMITS.append(threadpool_limits(limits=n, user_api="blas"))
    return blas_threads()


def floatlab_step(policy: str, x: np.ndarray[Any, Any], y: np.ndarray[Any, Any]) -> Step:
    """One trainer step of ``policy`` on the batch ``(x, y)``."""
    model = ft.MLP(SIZES[0], SIZES[1:-1], SIZES[-1])
    data = ft.Dataset("random", x, y, x, y, SIZES[-1])
    tr = ft.Trainer(model, data, policy, optimizer=ft.SGD(lr=0.01, momentum=0.9), seed=0)
    return lambda: tr.train_step(x, y)


def torch_step(x: np.ndarray[Any, Any], y: np.ndarray[Any, Any], autocast: bool) -> Step:
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


def lm_floatlab_step(policy: str, x: np.ndarray[Any, Any], y: np.ndarray[Any, Any]) -> Step:
    """One trainer step of the default transformer under ``policy`` on the tokens ``(x, y)``."""
    data = ft.Dataset("random", x, y, x, y, LM["vocab"])
    tr = ft.Trainer(TransformerLM(**LM), data, policy, optimizer=ft.SGD(lr=0.01, momentum=0.9), seed=0)
    return lambda: tr.train_step(x, y)


def lm_torch_step(x: np.ndarray[Any, Any], y: np.ndarray[Any, Any], sdpa: bool) -> Step:
    """The same transformer in torch fp32: the weights floatlab starts from (transposed where
    torch's linear layers keep ``(out, in)``), the same ops, SGD with momentum."""
    import torch

    F = torch.nn.functional
    m = TransformerLM(**LM)
    init = m.init(np.random.default_rng([0, 0]))
    # torch's linear layers keep their weights as (out, in): the transposes of floatlab's
    linear = {"Wqkv", "Wo", "W1", "W2"}
    w = {
        k: torch.nn.Parameter(
            torch.from_numpy(np.ascontiguousarray(v.T) if k.split(".")[-1] in linear else v)
        )
        for k, v in init.items()
    }
    opt = torch.optim.SGD(w.values(), lr=0.01, momentum=0.9)
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    n, t = x.shape
    d, nh = m.d_model, m.heads
    causal = torch.ones(t, t, dtype=torch.bool).tril()

    def attend(q: Any, k: Any, v: Any) -> Any:
        if sdpa:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        s = (q @ k.transpose(-1, -2)) * (d // nh) ** -0.5
        return torch.softmax(s.masked_fill(~causal, float("-inf")), -1) @ v

    def loss_fn() -> Any:
        h = F.embedding(tx, w["tok"]) + w["pos"][:t]
        for i in range(m.layers):
            p = {k: w[f"h{i}.{k}"] for k in BLOCK_PARAMS}
            a = F.layer_norm(h, (d,), p["ln1_g"], p["ln1_b"])
            q, k, v = (
                z.view(n, t, nh, d // nh).transpose(1, 2)
                for z in F.linear(a, p["Wqkv"], p["bqkv"]).split(d, -1)  # type: ignore[no-untyped-call]
            )
            h = h + F.linear(attend(q, k, v).transpose(1, 2).reshape(n, t, d), p["Wo"], p["bo"])
            b = F.layer_norm(h, (d,), p["ln2_g"], p["ln2_b"])
            h = h + F.linear(F.gelu(F.linear(b, p["W1"], p["b1"]), approximate="tanh"), p["W2"], p["b2"])
        hf = F.layer_norm(h, (d,), w["lnf_g"], w["lnf_b"])
        return F.cross_entropy(F.linear(hf, w["tok"]).view(-1, m.vocab), ty.view(-1))  # tied output

    def step() -> object:
        opt.zero_grad(set_to_none=True)
        loss = loss_fn()
        loss.backward()
        opt.step()
        return loss

    return step


Data = tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]
Maker = Callable[[np.ndarray[Any, Any], np.ndarray[Any, Any]], Step]

VARIANTS: dict[str, Maker] = {
    "floatlab fp32": lambda x, y: floatlab_step("fp32", x, y),
    "floatlab mixed-fp16": lambda x, y: floatlab_step("mixed-fp16", x, y),
    "floatlab mixed-bf16": lambda x, y: floatlab_step("mixed-bf16", x, y),
    "floatlab fp16 (pure)": lambda x, y: floatlab_step("fp16", x, y),
    "torch fp32": lambda x, y: torch_step(x, y, autocast=False),
    "torch bf16 autocast": lambda x, y: torch_step(x, y, autocast=True),
}
LM_VARIANTS: dict[str, Maker] = {
    "floatlab fp32": lambda x, y: lm_floatlab_step("fp32", x, y),
    "floatlab mixed-fp16": lambda x, y: lm_floatlab_step("mixed-fp16", x, y),
    "floatlab mixed-bf16": lambda x, y: lm_floatlab_step("mixed-bf16", x, y),
    "floatlab fp16 (pure)": lambda x, y: lm_floatlab_step("fp16", x, y),
    "floatlab bf16 (pure)": lambda x, y: lm_floatlab_step("bf16", x, y),
    "floatlab fp8-tensorwise": lambda x, y: lm_floatlab_step("fp8-tensorwise", x, y),
    "floatlab fp8-delayed": lambda x, y: lm_floatlab_step("fp8-delayed", x, y),
    "floatlab fp8-blockwise": lambda x, y: lm_floatlab_step("fp8-blockwise", x, y),
    "floatlab mxfp8": lambda x, y: lm_floatlab_step("mxfp8", x, y),
    "floatlab nvfp4": lambda x, y: lm_floatlab_step("nvfp4", x, y),
    "torch fp32": lambda x, y: lm_torch_step(x, y, sdpa=True),
    "torch fp32, attention spelled out": lambda x, y: lm_torch_step(x, y, sdpa=False),
}


def batch(model: str) -> Data:
    rng = np.random.default_rng(0)
    if model == "transformer":
        tokens = rng.integers(0, LM["vocab"], (LM_BATCH, LM["context"] + 1))
        return np.ascontiguousarray(tokens[:, :-1]), np.ascontiguousarray(tokens[:, 1:])  # next tokens
    return rng.standard_normal((BATCH, SIZES[0]), dtype=np.float32), rng.integers(0, SIZES[-1], BATCH)


def make_step(model: str, name: str, threads: int | None) -> Step:
    """The step of variant ``name``; torch gets as many threads as numpy's BLAS has."""
    used = set_threads(threads)
    if name.startswith("torch"):
        import torch

        torch.set_num_threads(used or threads or torch.get_num_threads())
    x, y = batch(model)
    return (LM_VARIANTS if model == "transformer" else VARIANTS)[name](x, y)


def measure(model: str, name: str, blocks: int, steps: int, threads: int | None) -> dict[str, Any]:
    """Seconds per step of one variant: ``blocks`` timed blocks of ``steps`` steps after a warm-up."""
    fn = make_step(model, name, threads)
    for _ in range(3 if model == "transformer" else 5):  # warm-up: compilation, BLAS buffers, allocator
        fn()
    out = []
    gc.disable()
    for _ in range(blocks):
        t0 = time.perf_counter()
        for _ in range(steps):
            fn()
        out.append((time.perf_counter() - t0) / steps)
    gc.enable()
    import numba

    info: dict[str, Any] = {
        "times": out,
        "blas_threads": blas_threads(),
        "numba_threads": numba.get_num_threads(),
    }
    if name.startswith("torch"):
        import torch

        info["torch_threads"] = torch.get_num_threads()
    return info


GEMM_ROW = "GEMMs of the linear layers and the logits (BLAS, epilogue, rounding)"
ATTENTION_ROW = "attention core: batched GEMMs and softmax"
REST_ROW = "the rest: embedding, mask, heads, residual adds, bias gradients, checks"
#: floatlab's parts of a step: (row, file, function-name prefix, caller's file or ""), measured as
#: cumulative times, which do not nest (none of these functions calls another); the GEMMs are
#: told apart by their caller: the linear layers and the logits, or the attention's batched ones
PARTS: tuple[tuple[str, str, str, str], ...] = (
    (GEMM_ROW, "precision.py", "matmul", "model.py"),
    (GEMM_ROW, "precision.py", "matmul", "precision.py"),  # (the linear layers, through Precision.linear)
    (GEMM_ROW, "precision.py", "matmul", "transformer.py"),
    (ATTENTION_ROW, "precision.py", "matmul", "seq_layers.py"),
    (ATTENTION_ROW, "model.py", "softmax_", ""),
    ("GELU forward + backward", "model.py", "gelu_", ""),
    ("LayerNorm forward + backward", "model.py", "layer_norm_", ""),
    ("cross-entropy", "model.py", "cross_entropy_", ""),
    ("weight casts", "precision.py", "weights", ""),
    ("optimizer and update", "optim.py", "propose", ""),
    ("optimizer and update", "trainer.py", "_apply", ""),
)
#: torch's ops in the same rows (by name; their own times): flash attention holds the GEMMs and
#: the softmax of the attention in one kernel
TORCH_PARTS: tuple[tuple[str, str], ...] = (
    (GEMM_ROW, "aten::mm"),
    (GEMM_ROW, "aten::addmm"),
    (ATTENTION_ROW, "scaled_dot_product"),
    ("GELU forward + backward", "aten::gelu"),
    ("LayerNorm forward + backward", "layer_norm"),
    ("cross-entropy", "log_softmax"),
    ("cross-entropy", "nll_loss"),
)


def _in(file: str, name: str) -> bool:
    return file.endswith(os.sep + name)


def breakdown(policy: str, steps: int, threads: int | None) -> dict[str, float]:
    """Seconds per step of the transformer's parts under ``policy`` (cProfile), or in torch fp32
    (``policy="torch"``, torch's profiler)."""
    if policy == "torch":
        return torch_breakdown(steps, threads)
    fn = make_step("transformer", f"floatlab {policy}", threads)
    for _ in range(3):
        fn()
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    for _ in range(steps):
        fn()
    prof.disable()
    total = (time.perf_counter() - t0) / steps
    stats: dict[Any, Any] = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    parts = dict.fromkeys([row for row, *_ in PARTS] + [REST_ROW], 0.0)
    for (file, _, func), (_, _, _, cum, callers) in stats.items():
        for row, f, prefix, caller in PARTS:
            if not (_in(file, f) and func.startswith(prefix)):
                continue
            if caller:  # the share of the calls made from functions in that file
                cum = sum(c[3] for (cf, _, _), c in callers.items() if _in(cf, caller))
            parts[row] += cum / steps
    parts[REST_ROW] = total - sum(parts.values())
    return {"total": total, **parts}


def torch_breakdown(steps: int, threads: int | None) -> dict[str, float]:
    """torch fp32's step in the same rows, from its profiler (the ops' own times)."""
    from torch.profiler import profile

    fn = make_step("transformer", "torch fp32", threads)
    for _ in range(3):
        fn()
    t0 = time.perf_counter()
    with profile() as prof:
        for _ in range(steps):
            fn()
    total = (time.perf_counter() - t0) / steps
    parts = dict.fromkeys([row for row, _ in TORCH_PARTS] + [REST_ROW], 0.0)
    for ev in prof.key_averages():
        for row, name in TORCH_PARTS:
            if name in ev.key:
                parts[row] += ev.self_cpu_time_total / 1e6 / steps
                break
    parts[REST_ROW] = total - sum(parts.values())
    return {"total": total, **parts}


def run_variant(args: argparse.Namespace, *extra: str) -> Any:
    """Run this script on one variant in a fresh process and return what it printed (JSON)."""
    cmd = [
        sys.executable,
        __file__,
        "--model",
        args.model,
        "--blocks",
        str(args.blocks),
        "--steps",
        str(args.steps),
    ]
    if args.threads is not None:
        cmd += ["--threads", str(args.threads)]
    res = subprocess.run([*cmd, *extra], capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=("all", "mlp", "transformer"), default="all", help="default: both")
    ap.add_argument("--rounds", type=int, default=3, help="rounds over all variants (default: 3)")
    ap.add_argument(
        "--blocks", type=int, help="timed blocks per variant and round (default: 4 MLP, 3 transformer)"
    )
    ap.add_argument("--steps", type=int, help="steps per timed block (default: 20 MLP, 3 transformer)")
    ap.add_argument("--threads", type=int, help="BLAS and torch threads (default: numpy's BLAS count)")
    ap.add_argument(
        "--quick", action="store_true", help="1 round of 2 short blocks, no profile; writes nothing"
    )
    ap.add_argument("--variant", help=argparse.SUPPRESS)  # internal: measure one variant, print JSON
    ap.add_argument("--breakdown", help=argparse.SUPPRESS)  # internal: profile one policy, print JSON
    args = ap.parse_args()
    if args.model == "all" and not (args.variant or args.breakdown):
        for model in ("mlp", "transformer"):
            run_model(args, model)
        return
    set_defaults(args)
    if args.variant:
        print(json.dumps(measure(args.model, args.variant, args.blocks, args.steps, args.threads)))
    elif args.breakdown:
        print(json.dumps(breakdown(args.breakdown, args.steps, args.threads)))
    else:
        run_model(args, args.model)


def set_defaults(args: argparse.Namespace) -> argparse.Namespace:
    """Fill in the blocks and steps the model's default (or ``--quick``) run takes."""
    lm = args.model == "transformer"
    if args.blocks is None:
        args.blocks = 2 if args.quick else (3 if lm else 4)
    if args.steps is None:
        args.steps = (1 if lm else 5) if args.quick else (3 if lm else 20)
    return args


def run_model(args: argparse.Namespace, model: str) -> None:
    args = set_defaults(argparse.Namespace(**{**vars(args), "model": model}))
    lm = model == "transformer"
    rounds = 1 if args.quick else args.rounds
    load_before = os.getloadavg()[0]  # (the cores are shared: say how busy they were)
    have_torch = importlib.util.find_spec("torch") is not None
    variants = LM_VARIANTS if lm else VARIANTS
    names = [n for n in variants if have_torch or not n.startswith("torch")]
    times: dict[str, list[float]] = {n: [] for n in names}
    threads: dict[str, Any] = {}
    for r in range(rounds):
        for n in names:
            # a fresh process per variant: thread pools (OpenBLAS, numba's, torch's) of one
            # variant never compete with another's; the rounds interleave the variants in time
            info = run_variant(args, "--variant", n)
            times[n] += info["times"]
            threads["blas"], threads["numba"] = info["blas_threads"], info["numba_threads"]
            threads.setdefault("torch", info.get("torch_threads"))
            print(f"{model} round {r + 1}/{rounds}: {n}: {1 / min(times[n]):.1f} steps/s", file=sys.stderr)

    best = {k: min(v) for k, v in times.items()}
    med = {k: float(np.median(v)) for k, v in times.items()}
    table = Table(["variant", "steps/s (best)", "steps/s (median)", "ms/step (median)"])
    for k in names:
        table.add(k, f"{1 / best[k]:.1f}", f"{1 / med[k]:.1f}", f"{1e3 * med[k]:.2f}")

    ratios = Table(["ratio (time per step)", "best", "median", "aim"])

    def ratio(a: str, b: str, aim: str) -> None:
        if a in best and b in best:
            ratios.add(f"{a} / {b}", f"{best[a] / best[b]:.2f}", f"{med[a] / med[b]:.2f}", aim)

    import numba

    numba_note = (
        f"numba threads {threads.get('numba')} "
        f"(threading layer: {getattr(numba.config, 'THREADING_LAYER', '?')})"
    )
    torch_version = "no torch"
    if have_torch:
        import torch

        torch_version = f"torch {torch.__version__}"
    if not lm:
        ratio("floatlab fp32", "torch fp32", "<= 1.5")
        ratio("floatlab mixed-fp16", "floatlab fp32", "<= 1.5")
        ratio("floatlab mixed-fp16", "torch bf16 autocast", "")
        ratio("floatlab mixed-bf16", "floatlab fp32", "")
        ratio("floatlab fp16 (pure)", "floatlab fp32", "")
        sections = [
            f"784-256-256-10 ReLU MLP, batch {BATCH}, SGD momentum 0.9, one step = forward + loss + "
            f"backward + update. Each variant runs in its own process ({rounds} rounds over the variants, "
            f"{args.blocks} blocks of {args.steps} steps each per round); {torch_version} on "
            f"{threads.get('torch')} threads; {numba_note}.",
            table.markdown(),
            ratios.markdown(),
            MLP_NOTE,
        ]
        name, title = "trainer", "Training-step throughput: floatlab vs PyTorch (CPU)"
    else:
        ratio("floatlab fp32", "torch fp32", "<= 1.3")
        ratio("floatlab fp32", "torch fp32, attention spelled out", "")
        ratio("floatlab mixed-fp16", "floatlab fp32", "<= 1.6")
        ratio("floatlab mixed-bf16", "floatlab fp32", "<= 1.6")
        ratio("floatlab fp16 (pure)", "floatlab fp32", "")
        ratio("floatlab bf16 (pure)", "floatlab fp32", "")
        for recipe in ("tensorwise", "delayed", "blockwise"):
            ratio(f"floatlab fp8-{recipe}", "floatlab fp32", "<= 2")
        for recipe in ("mxfp8", "nvfp4"):
            ratio(f"floatlab {recipe}", "floatlab fp32", "<= 2.5")
        sections = [
            f"Decoder-only transformer, {LM['layers']} layers x {LM['d_model']}, {LM['heads']} heads, "
            f"context {LM['context']}, vocabulary {LM['vocab']} (tied output), batch {LM_BATCH} sequences; "
            "one step = forward + loss + backward + SGD (momentum 0.9) update. torch runs the same model "
            "from the same weights (causal `scaled_dot_product_attention`, and once with the attention "
            f"spelled out as a masked softmax). Each variant runs in its own process ({rounds} rounds "
            f"over the variants, {args.blocks} blocks of {args.steps} steps each per round); numpy's BLAS "
            f"on {threads.get('blas')} threads, {torch_version} on {threads.get('torch')} threads; "
            f"{numba_note}. The cores are shared with other users (1-minute load average "
            f"{load_before:.1f} before the run, {os.getloadavg()[0]:.1f} after it): the rounds interleave "
            "the variants so that noise hits them alike, and the ratios are of medians.",
            table.markdown(),
            ratios.markdown(),
        ]
        if not args.quick:
            sections.append(breakdown_section(args, have_torch))
        name, title = LM_RESULTS, "Training-step throughput: the transformer, floatlab vs PyTorch (CPU)"
    print(table.markdown())
    print()
    print(ratios.markdown())
    if args.quick:
        print("\n(--quick: nothing written)")
        return
    for extra in sections[3:]:
        print()
        print(extra)
    if args.threads is not None:
        name, title = f"{name}-{args.threads}thread", f"{title}, {args.threads} thread(s)"
    path = write_results(name, title, sections, ["torch"])
    print(f"\nwritten to {path}")


def breakdown_section(args: argparse.Namespace, have_torch: bool) -> str:
    """Where the transformer's step spends its time: floatlab fp32 and mixed-fp16 (cProfile) and
    torch fp32 (its profiler), 5 steps each."""
    runs = ["fp32", "mixed-fp16", *(["torch"] if have_torch else [])]
    got = {r: run_variant(argparse.Namespace(**{**vars(args), "steps": 5}), "--breakdown", r) for r in runs}
    heads = {"fp32": "floatlab fp32", "mixed-fp16": "floatlab mixed-fp16", "torch": "torch fp32"}
    table = Table(
        ["part of the step", *(f"{heads[r]} ms" for r in runs), *(f"{heads[r]} share" for r in runs)]
    )
    for part in [k for k in got["fp32"] if k != "total"]:
        ms = [got[r].get(part, 0.0) * 1e3 for r in runs]
        shares = [got[r].get(part, 0.0) / got[r]["total"] for r in runs]
        table.add(part, *(f"{v:.1f}" for v in ms), *(f"{v:.0%}" for v in shares))
    table.add(
        "whole step (profiled)", *(f"{got[r]['total'] * 1e3:.1f}" for r in runs), *("100%" for _ in runs)
    )
    return (
        "Where the time goes (5 profiled steps each: cProfile for floatlab, cumulative times of the "
        "functions of each part; torch's profiler for torch, the ops' own times; torch's flash "
        "attention kernel holds its attention GEMMs and softmax). floatlab's GEMM rows are "
        "`Precision.matmul`: BLAS, the alpha and bias epilogue and the rounding of the output:\n\n"
        + table.markdown()
    )


MLP_NOTE = (
    "mixed-fp16 per step: 6 weight casts to fp16, 4 activation and 7 gradient casts (each a "
    "`round_array` call, about 0.75 million values in all), the same float32 BLAS GEMMs as fp32, "
    "loss scaling, the finite check and the counts of flushed gradients and swallowed updates. "
    "Arrays under 2^18 elements are rounded on one thread (waking the other core costs more than "
    "it saves, and between GEMMs OpenBLAS's threads and the loop threads would take turns on the "
    "same cores); float32 -> fp16 round-to-nearest-even uses the CPU's own conversion (F16C), "
    "float32 -> bf16 round-to-nearest-even one integer add per value; tests check both bit for "
    "bit against the generic loops."
)


if __name__ == "__main__":
    main()
