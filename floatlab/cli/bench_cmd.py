"""``floatlab bench gemm`` and ``floatlab bench train``: measured speed on NumPy or a CUDA GPU.

``bench gemm`` prints the TFLOP/s of fp32, tf32, fp16 and bf16 GEMMs, each beside the GPU's
published dense peak, and says whether tensor cores were used. ``bench train`` times trainer
steps of fp32 and mixed-fp16 (or any policies) on the chosen backend. The measuring code is in
:mod:`floatlab.perf`, imported when the command runs.

>>> parser = argparse.ArgumentParser()
>>> _ = register(parser.add_subparsers())
>>> args = parser.parse_args(["bench", "gemm", "--sizes", "16", "--formats", "fp32", "--min-seconds", "0"])
>>> args.run(args, UI())  # doctest: +ELLIPSIS
GEMM throughput on numpy (...)
...
0
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from floatlab.cli._common import UI, View, add_color_options, checked_number, parse_sizes
from floatlab.text import bold, dim, table

if TYPE_CHECKING:
    from floatlab.cli._common import Subparsers
    from floatlab.perf import GemmResult, TrainResult

__all__ = ["NAME", "gemm_view", "register", "run_gemm", "run_train", "train_view"]

NAME = "bench"


def _sizes(text: str) -> tuple[int, ...]:
    return parse_sizes(text, "sizes such as 1024,4096,8192")


def _seconds(text: str) -> float:
    """``--min-seconds``: a finite number of seconds from 0 to an hour.

    >>> _seconds("0.5")
    0.5
    >>> _seconds("nan")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: 'nan': expected a number of seconds from 0 to 3600
    """
    error = f"{text[:40]!r}: expected a number of seconds from 0 to 3600"
    return checked_number(text, float, lambda v: 0 <= v <= 3600, error)


def _positive(text: str) -> int:
    """A positive count (``--batch-size``, ``--steps``).

    >>> _positive("256")
    256
    >>> _positive("0")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: '0': expected a positive integer
    """
    return checked_number(text, int, lambda v: v >= 1, f"{text[:40]!r}: expected a positive integer")


def _names(text: str) -> list[str]:
    return [s.strip() for s in text.split(",") if s.strip()]


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def gemm_view(results: list[GemmResult], verdict: str, *, color: bool = False) -> View:
    """The GEMM table and the tensor-core verdict.

    >>> from floatlab.perf import GemmResult
    >>> r = [GemmResult("cupy", "NVIDIA H100 80GB HBM3", "fp16", 8192, 1.6e-3, "gemmEx", 989.5)]
    >>> print(gemm_view(r, "tensor cores used").text)  # doctest: +NORMALIZE_WHITESPACE
    GEMM throughput on cupy (NVIDIA H100 80GB HBM3)
      n     format  TFLOP/s  peak   of peak  how
      8192  fp16    687.2    989.5  69.4 %   gemmEx
    <BLANKLINE>
      tensor cores used
      peak: the published dense figure (tensor cores; fp32 on SIMT cores)
    """
    head = results[0] if results else None
    title = f"GEMM throughput on {head.backend} ({head.device})" if head else "GEMM throughput"
    rows = [
        [
            str(r.n),
            r.compute,
            f"{r.tflops:.3g}" if r.tflops < 1 else f"{r.tflops:.1f}",
            _fmt(r.peak, "g"),
            "-" if r.ratio is None else f"{100 * r.ratio:.1f} %",
            r.how,
        ]
        for r in results
    ]
    text = table(["n", "format", "TFLOP/s", "peak", "of peak", "how"], rows, align="><>>><", color=color)
    lines = [bold(title, color), text, "", "  " + verdict]
    if head is not None and head.backend == "cupy":
        lines.append(dim("  peak: the published dense figure (tensor cores; fp32 on SIMT cores)", color))
    data = {"results": [r.to_dict() for r in results], "verdict": verdict}
    return View("\n".join(lines), data)


def train_view(results: list[TrainResult], *, color: bool = False) -> View:
    """Step times side by side, with each policy's ratio to the first.

    >>> from floatlab.perf import TrainResult
    >>> r = [TrainResult("numpy", "CPU", p, t, t - 0.1, 10, 2.3) for p, t in (("fp32", 2), ("mixed-fp16", 3))]
    >>> print(train_view(r).text)  # doctest: +NORMALIZE_WHITESPACE
    Trainer step time on numpy (CPU)
      policy      ms/step (median)  ms/step (best)  vs fp32
      fp32        2.00              1.90            1.00
      mixed-fp16  3.00              2.90            1.50
    """
    head = results[0] if results else None
    title = f"Trainer step time on {head.backend} ({head.device})" if head else "Trainer step time"
    base = head.median_ms if head else 1.0
    first = head.policy if head else "-"
    rows = [
        [r.policy, f"{r.median_ms:.2f}", f"{r.best_ms:.2f}", f"{r.median_ms / base:.2f}"] for r in results
    ]
    text = table(
        ["policy", "ms/step (median)", "ms/step (best)", f"vs {first}"], rows, align="<>>>", color=color
    )
    return View(bold(title, color) + "\n" + text, {"results": [r.to_dict() for r in results]})


def run_gemm(args: argparse.Namespace, ui: UI) -> int:
    """Measure and print the GEMM table (see the module docstring)."""
    from floatlab.backend import get_backend
    from floatlab.perf import measure_gemm, tensor_core_verdict

    be = get_backend(args.backend)
    sizes = args.sizes or ([1024, 4096, 8192] if be.is_gpu else [256, 512, 1024])
    results = measure_gemm(be, sizes, args.formats, min_seconds=args.min_seconds)
    ui.show(gemm_view(results, tensor_core_verdict(results), color=ui.color))
    return 0


def run_train(args: argparse.Namespace, ui: UI) -> int:
    """Measure and print trainer step times of the policies."""
    from floatlab.backend import get_backend
    from floatlab.perf import measure_train

    be = get_backend(args.backend)
    hidden = args.hidden or ((4096, 4096) if be.is_gpu else (512, 512))
    batch = args.batch_size if args.batch_size is not None else (4096 if be.is_gpu else 256)
    results = measure_train(be, args.policies, hidden=hidden, batch_size=batch, steps=args.steps)
    ui.show(train_view(results, color=ui.color))
    return 0


def _output(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group("output")
    group.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON")
    add_color_options(group)


def _backend_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--backend", default="numpy", metavar="numpy|cupy", help="numpy (default) or cupy (a CUDA GPU)"
    )


def register(subparsers: Subparsers) -> argparse.ArgumentParser:
    """Add ``bench`` (with ``gemm`` and ``train``) to ``subparsers``.

    >>> parser = argparse.ArgumentParser()
    >>> register(parser.add_subparsers()).prog.split()[-1]
    'bench'
    """
    p = subparsers.add_parser(
        NAME,
        help="measure GEMM TFLOP/s per format and trainer step times, on numpy or a CUDA GPU",
        description="Measured speed. 'bench gemm' times fp32, tf32, fp16 and bf16 GEMMs and compares them "
        "with the GPU's published peak; 'bench train' times trainer steps of several policies.",
        epilog="examples:\n"
        "  floatlab bench gemm --backend cupy --sizes 1024,4096,8192\n"
        "  floatlab bench gemm --sizes 512,1024\n"
        "  floatlab bench train --backend cupy fp32 mixed-fp16 mixed-bf16\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(title="benchmarks", dest="bench", metavar="WHAT")

    def _missing(args: argparse.Namespace, ui: UI) -> int:
        raise ValueError("bench needs a benchmark: gemm or train (see 'floatlab bench --help')")

    p.set_defaults(run=_missing)
    g = sub.add_parser(
        "gemm",
        help="TFLOP/s of fp32, tf32, fp16 and bf16 GEMMs, against the device's peak",
        description="Time n x n GEMMs (fp32 accumulation) in each format. On cupy they are cuBLAS "
        "cublasGemmEx calls (TF32 off for fp32); fp16 far above the fp32 SIMT peak proves tensor cores. "
        "On numpy, fp32 is BLAS sgemm and the others are floatlab's simulation.",
    )
    _backend_option(g)
    g.add_argument(
        "--sizes",
        type=_sizes,
        default=None,
        metavar="N,N,...",
        help="matrix sizes (default: 1024,4096,8192 on cupy, 256,512,1024 on numpy)",
    )
    g.add_argument(
        "--formats",
        type=_names,
        default=["fp32", "tf32", "fp16", "bf16"],
        metavar="F,F,...",
        help="compute formats (default: fp32,tf32,fp16,bf16)",
    )
    g.add_argument(
        "--min-seconds", type=_seconds, default=0.3, help="time spent per measurement (default: 0.3)"
    )
    _output(g)
    g.set_defaults(run=run_gemm)
    t = sub.add_parser(
        "train",
        help="trainer step times, fp32 vs mixed-fp16 (or the given policies)",
        description="Time training steps of an MLP on the synthetic task for each policy on one backend.",
    )
    t.add_argument("policies", nargs="*", default=["fp32", "mixed-fp16"], metavar="POLICY")
    _backend_option(t)
    t.add_argument(
        "--hidden",
        type=_sizes,
        metavar="N,N",
        help="hidden sizes (default: 4096,4096 on cupy, 512,512 on numpy)",
    )
    t.add_argument(
        "--batch-size", type=_positive, metavar="B", help="batch size (default: 4096 on cupy, 256 on numpy)"
    )
    t.add_argument("--steps", type=_positive, default=10, help="timed steps per policy (default: 10)")
    _output(t)
    t.set_defaults(run=run_train)
    return p
