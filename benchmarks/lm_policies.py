"""What each precision policy does to a character-level transformer, over several seeds.

Trains the transformer language model on the shipped text under fp32, mixed-fp16, mixed-bf16,
pure bf16 and pure fp16, once per seed, and writes the final validation loss in bits per
character for every run, each policy's mean, and its paired difference from fp32 with a 95%
Student-t interval (``floatlab.train.seeds.paired_gap``). The statements lesson 09 asserts on
its small configuration are measured here on a longer one. Writes
``benchmarks/results/lm-policies.md`` (and ``.json``).

    python benchmarks/lm_policies.py                       # the committed configuration
    python benchmarks/lm_policies.py --seeds 3 --steps 300 --layers 1 --d-model 32   # quicker
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
import time
from typing import Any

from _common import RESULTS, Table, write_results

from floatlab.train.data import get_data
from floatlab.train.history import History
from floatlab.train.seeds import final_metric, paired_gap, run_seeds

POLICIES = ("fp32", "mixed-fp16", "mixed-bf16", "bf16", "fp16")
LN2 = math.log(2.0)


def bits(h: History) -> float:
    return final_metric(h) / LN2


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--optimizer", default="adamw")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--schedule", default="cosine")
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--name", default="lm-policies", help="results file name (without suffix)")
    args = ap.parse_args(argv)
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    config: dict[str, Any] = {
        "model": "transformer",
        "data": "text",
        "layers": args.layers,
        "d_model": args.d_model,
        "heads": args.heads,
        "context": args.context,
        "batch_size": args.batch_size,
        "optimizer": args.optimizer,
        "lr": args.lr,
        "schedule": args.schedule,
        "warmup": args.warmup,
        "steps": args.steps,
        "eval_every": args.eval_every,
    }
    seeds = list(range(args.seeds))
    data = get_data("text", context=args.context)
    started = time.perf_counter()

    def progress(policy: str, seed: int, h: History) -> None:
        elapsed = time.perf_counter() - started
        print(f"{policy:>11} seed {seed}: {bits(h):.4f} bits/char ({elapsed:.0f} s)", file=sys.stderr)

    runs = run_seeds(policies, seeds, dataset=data, callback=progress, **config)
    wall = time.perf_counter() - started

    per_run = Table(["policy", *(f"seed {s}" for s in seeds), "mean", "skipped steps (mean)", "stopped"])
    gaps = Table(["policy", "minus fp32, bits/char", "95% CI low", "95% CI high", "seeds"])
    out: dict[str, Any] = {"config": config, "seeds": seeds, "runs": {}, "gaps": {}}
    for p in policies:
        b = [bits(h) for h in runs[p]]
        skipped = [sum(bool(s) for s in h.steps["skipped"]) for h in runs[p]]
        stopped = sum(bool(h.meta.get("stopped")) for h in runs[p])
        mean = sum(b) / len(b)
        per_run.add(p, *(f"{v:.4f}" for v in b), f"{mean:.4f}", f"{sum(skipped) / len(skipped):.1f}", stopped)
        out["runs"][p] = {
            "bits_per_char": b,
            "curves": [{"step": h.evals["step"], "test_loss": h.evals["test_loss"]} for h in runs[p]],
            "skipped": skipped,
            "stopped": [h.meta.get("stopped", "") for h in runs[p]],
        }
        if p != "fp32" and "fp32" in runs and len(seeds) >= 2:
            g = paired_gap(b, [bits(h) for h in runs["fp32"]])
            gaps.add(p, f"{g.mean:+.4f}", f"{g.low:+.4f}", f"{g.high:+.4f}", g.n)
            out["gaps"][p] = {"mean": g.mean, "low": g.low, "high": g.high, "n": g.n}
    command = "python benchmarks/lm_policies.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    settings = ", ".join(f"{k} {v}" for k, v in config.items())
    sections = [
        f"Command: `{command.strip()}` ({wall / 60:.1f} min on this machine).",
        f"Settings: {settings}; seeds {seeds[0]}..{seeds[-1]} (the seed fixes the initial weights, the "
        "batch order and the random bits; the text and its split are the same for every run).",
        "## Final validation loss, bits per character\n\n" + per_run.markdown(),
        "## Paired difference from fp32 (per seed), mean and 95% Student-t interval\n\n" + gaps.markdown(),
    ]
    write_results(args.name, "Precision policies on the transformer language model", sections)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(per_run.markdown())
    print(gaps.markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
