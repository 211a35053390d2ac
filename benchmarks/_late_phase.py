"""What the language-model benchmarks share: lesson 09's two-phase protocol as options and settings.

Phase 1 trains the transformer in fp32 with AdamW at ``--lr``; phase 2 goes on from those weights at
``--late-lr`` in each variant (``floatlab.train.seeds.late_phase``).
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
