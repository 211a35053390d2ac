"""What the language-model benchmarks share: lesson 09's two-phase protocol as options and settings.

Phase 1 trains the transformer in fp32 with AdamW at ``--lr``; phase 2 goes on from those weights at
``--late-lr`` in each variant (``floatlab.train.analysis.seeds.late_phase``).
"""

from __future__ import annotations

import argparse
from typing import Any


def add_protocol_options(ap: argparse.ArgumentParser, *, seeds: int, steps: int, late_steps: int) -> None:
    """The options of the protocol and of the model, with these defaults for the lengths."""
    ap.add_argument("--seeds", type=int, default=seeds)
    ap.add_argument("--steps", type=int, default=steps, help="phase 1 (fp32) steps")
    ap.add_argument("--late-steps", type=int, default=late_steps, help="phase 2 steps, in each variant")
    ap.add_argument("--lr", type=float, default=3e-3, help="phase 1 learning rate (AdamW)")
    ap.add_argument("--late-lr", type=float, default=3e-4, help="phase 2 learning rate")
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=32)


def model_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The TrainConfig settings both phases share."""
    return {
        "model": "transformer",
        "data": "text",
        "layers": args.layers,
        "d_model": args.d_model,
        "heads": args.heads,
        "context": args.context,
        "batch_size": args.batch_size,
        "optimizer": "adamw",
    }


def bits(trainer: Any) -> float:
    """A run's final validation loss in bits per character."""
    value: float = trainer.history.summary()["bits_per_char"]
    return value


def run_protocol(args: argparse.Namespace, policies: list[str]) -> Any:
    """Both phases for every seed and policy (a ``LatePhase``), one progress line a seed on stderr."""
    import sys
    import time

    import floatlab.train as ft
    from floatlab.train.analysis.seeds import LatePhase, late_phase

    started = time.perf_counter()

    def progress(seed: int, lp: LatePhase) -> None:
        row = ", ".join(f"{p} {bits(lp.runs[p][-1]):.4f}" for p in policies)
        elapsed = time.perf_counter() - started
        print(
            f"seed {seed}: phase 1 {bits(lp.phase1[-1]):.4f}; phase 2 {row} ({elapsed:.0f} s)",
            file=sys.stderr,
        )

    return late_phase(
        policies,
        range(args.seeds),
        first={"lr": args.lr, "steps": args.steps},
        late={"lr": args.late_lr, "steps": args.late_steps},
        dataset=ft.load_text(context=args.context),
        callback=progress,
        **model_settings(args),
    )


def compare(table: Any, label: str, a: list[float], b: list[float]) -> dict[str, Any]:
    """Add the paired difference a - b (per seed) to ``table`` (columns: label, mean, the 95%
    Student-t interval, the spread over seeds, the number of seeds); return it as data."""
    from floatlab.train.analysis.seeds import paired_gap

    g = paired_gap(a, b)
    d = [x - y for x, y in zip(a, b, strict=True)]
    spread = f"{min(d):+.4f} to {max(d):+.4f}"
    table.add(label, f"{g.mean:+.4f}", f"{g.low:+.4f}", f"{g.high:+.4f}", spread, g.n)
    return {"mean": g.mean, "low": g.low, "high": g.high, "n": g.n, "per_seed": d}
