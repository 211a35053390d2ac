"""What each precision policy does to a character-level transformer, over several seeds.

The protocol of lesson 09, longer and over more seeds. For each seed: train the transformer
language model on the shipped text in fp32 (phase 1: AdamW at a high learning rate, the early
part of a long run), then go on from those same weights at a tenth of the learning rate (phase 2:
the late part, where updates are small next to the weights) once in each policy: fp32,
mixed-fp16, mixed-bf16, pure bf16 and pure fp16. Every policy starts phase 2 from the same point,
so the seed's luck cancels and what is left is the format. Writes the final validation loss in
bits per character for every run, each policy's mean, and its paired difference from fp32 with a
95% Student-t interval (``floatlab.train.analysis.seeds.paired_gap``) to
``benchmarks/results/<name>.md`` (and ``.json``; ``--name``, lm-policies unless given).

    python benchmarks/lm_policies.py                                   # results/lm-policies.md
    python benchmarks/lm_policies.py --context 32 --name lm-policies-context32   # the lesson's model
    python benchmarks/lm_policies.py --seeds 4 --steps 300 --late-steps 150 --context 32   # the lesson's runs
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
from _late_phase import add_protocol_options, bits, model_settings, run_protocol

from floatlab.train.analysis.seeds import paired_gap

POLICIES = ("fp32", "mixed-fp16", "mixed-bf16", "bf16", "fp16")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_protocol_options(ap, seeds=5, steps=600, late_steps=400)
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--name", default="lm-policies", help="results file name (without suffix)")
    args = ap.parse_args(argv)
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    if "fp32" not in policies:
        policies.insert(0, "fp32")
    started = time.perf_counter()
    lp = run_protocol(args, policies)
    seeds = lp.seeds
    phase1 = [bits(t) for t in lp.phase1]
    final = {p: [bits(t) for t in lp.runs[p]] for p in policies}
    swallowed = {p: [t.history.summary()["mean_swallowed"] for t in lp.runs[p]] for p in policies}
    flushed = {p: [t.history.summary()["mean_flushed"] for t in lp.runs[p]] for p in policies}
    wall = time.perf_counter() - started

    per_run = Table(["policy", *(f"seed {s}" for s in seeds), "mean", "updates swallowed", "grads flushed"])
    per_run.add("fp32, phase 1", *(f"{v:.4f}" for v in phase1), f"{sum(phase1) / len(phase1):.4f}", "", "")
    gaps = Table(["policy", "minus fp32, bits/char", "95% CI low", "95% CI high", "seeds"])
    out: dict[str, Any] = {
        "settings": model_settings(args),
        "args": vars(args),
        "seeds": seeds,
        "phase1": phase1,
    }
    out["final"], out["swallowed"], out["flushed"], out["gaps"] = final, swallowed, flushed, {}
    for p in policies:
        b = final[p]
        per_run.add(
            p,
            *(f"{v:.4f}" for v in b),
            f"{sum(b) / len(b):.4f}",
            f"{sum(swallowed[p]) / len(b):.1%}",
            f"{sum(flushed[p]) / len(b):.2%}",
        )
        if p != "fp32" and len(seeds) >= 2:
            g = paired_gap(b, final["fp32"])
            gaps.add(p, f"{g.mean:+.4f}", f"{g.low:+.4f}", f"{g.high:+.4f}", g.n)
            out["gaps"][p] = {"mean": g.mean, "low": g.low, "high": g.high, "n": g.n}
    command = "python benchmarks/lm_policies.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    sections = [
        f"Command: `{command.strip()}` ({wall / 60:.1f} min on this machine, shared with other work).",
        f"Model: transformer, {args.layers} layer(s) x {args.d_model}, {args.heads} heads, context "
        f"{args.context}, batch {args.batch_size}, AdamW. Phase 1: fp32, lr {args.lr:g}, {args.steps} steps. "
        f"Phase 2: from phase 1's weights, lr {args.late_lr:g}, {args.late_steps} steps, in each policy. "
        "Validation: the last 10% of the text (256 windows).",
        "## Final validation loss, bits per character\n\n" + per_run.markdown(),
        "## Paired difference from fp32 after phase 2 (per seed), mean and 95% Student-t interval\n\n"
        + gaps.markdown(),
    ]
    write_results(args.name, "Precision policies on the transformer language model", sections)
    path = RESULTS / f"{args.name}.json"
    path.write_text(json.dumps(out, indent=1, allow_nan=True) + "\n", encoding="utf-8")
    print(per_run.markdown())
    print(gaps.markdown())
    return 0 if all(math.isfinite(v) for v in final["fp32"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
