"""What the fp8 training recipes do to a character-level transformer, over several seeds.

The protocol of lesson 09 (``floatlab.train.analysis.seeds.late_phase``), for the recipes of lesson 11. For
each seed: train the transformer language model on the shipped text in fp32 (phase 1: AdamW at a
high learning rate), then go on from those same weights at a tenth of the learning rate (phase 2)
once under each policy: fp32 and mixed-bf16 (the references), the three scaled fp8 recipes
(fp8-tensorwise, fp8-delayed, fp8-blockwise: a bf16 model whose linear layers' GEMM operands are
scaled into fp8) and mixed-fp8 (every forward value rounded into E4M3 and every gradient into
E5M2, unscaled, with one dynamic loss scale). Every policy starts phase 2 from the same point, so
the seed's luck cancels and what is left is the format.

Writes, to ``benchmarks/results/fp8-recipes.md`` (and ``.json``): the final validation loss in
bits per character of every run; each policy's paired difference from mixed-bf16 with a 95%
Student-t interval (``floatlab.train.analysis.seeds.paired_gap``); the paired differences between the
scaled recipes; and what the casts did (the largest shares of an operand's values saturated and
flushed at any step, from ``History.operands``).

    python benchmarks/fp8_recipes.py                       # the committed configuration
    python benchmarks/fp8_recipes.py --quick               # a smoke run, a minute or two
    python benchmarks/fp8_recipes.py --seeds 3 --steps 200 --late-steps 100   # lesson 11's lengths
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import shlex
import sys
import time
from typing import Any

from _common import RESULTS, Table, write_results
from _late_phase import add_protocol_options, bits, compare, model_settings, run_protocol

import floatlab.train as ft
from floatlab.train.analysis.operands import operand_summary

POLICIES = ("fp32", "mixed-bf16", "fp8-tensorwise", "fp8-delayed", "fp8-blockwise", "mixed-fp8")
REFERENCE = "mixed-bf16"
SCALED = ("fp8-tensorwise", "fp8-delayed", "fp8-blockwise")


def worst_share(trainer: ft.Trainer, share: str) -> float:
    """The largest share of ``share`` (saturated, flushed) of any operand at any step; 0 without
    an fp8 recipe (no operand record)."""
    rows = operand_summary(trainer.history)
    values = [r[f"{share}_max"] for r in rows if r[f"{share}_max"] is not None]
    return max(values, default=0.0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_protocol_options(ap, seeds=5, steps=600, late_steps=300)
    # lesson 11's model: the context and batch of lesson 09 halved, so that an fp8 step stays cheap
    ap.set_defaults(context=32, batch_size=16)
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--quick", action="store_true", help="2 seeds, 100 + 50 steps: a smoke run")
    ap.add_argument("--name", default="fp8-recipes", help="results file name (without suffix)")
    args = ap.parse_args(argv)
    if args.quick:
        args.seeds, args.steps, args.late_steps = 2, 100, 50
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    for p in ("fp32", REFERENCE):
        if p not in policies:
            policies.insert(0, p)
    started = time.perf_counter()
    lp = run_protocol(args, policies)
    seeds = lp.seeds
    phase1 = [bits(t) for t in lp.phase1]
    final = {p: [bits(t) for t in lp.runs[p]] for p in policies}
    saturated = {p: [worst_share(t, "saturated") for t in lp.runs[p]] for p in policies}
    flushed = {p: [worst_share(t, "flushed") for t in lp.runs[p]] for p in policies}
    grads_flushed = {p: [t.history.summary()["mean_flushed"] for t in lp.runs[p]] for p in policies}
    skipped = {p: [t.history.summary()["skipped_steps"] for t in lp.runs[p]] for p in policies}
    wall = time.perf_counter() - started

    def mean(v: list[float]) -> float:
        return sum(v) / len(v)

    per_run = Table(["policy", *(f"seed {s}" for s in seeds), "mean"])
    per_run.add("fp32, phase 1", *(f"{v:.4f}" for v in phase1), f"{mean(phase1):.4f}")
    worst = ["operand saturated (worst step)", "operand flushed (worst step)"]
    casts = Table(["policy", *worst, "grads flushed", "skipped"])
    out: dict[str, Any] = {
        "settings": model_settings(args),
        "args": vars(args),
        "seeds": seeds,
        "phase1": phase1,
    }
    out.update(final=final, saturated=saturated, flushed=flushed, grads_flushed=grads_flushed)
    out.update(skipped=skipped, gaps={}, pairs={})
    for p in policies:
        per_run.add(p, *(f"{v:.4f}" for v in final[p]), f"{mean(final[p]):.4f}")
        casts.add(
            p,
            f"{mean(saturated[p]):.3%}",
            f"{mean(flushed[p]):.3%}",
            f"{mean(grads_flushed[p]):.3%}",
            f"{mean(skipped[p]):.1f}",
        )
    columns = ["95% CI low", "95% CI high", "every seed", "seeds"]
    gaps = Table(["policy", f"minus {REFERENCE}, bits/char", *columns])
    pairs = Table(["recipes", "difference, bits/char", *columns])

    if len(seeds) >= 2:
        for p in policies:
            if p != REFERENCE:
                out["gaps"][p] = compare(gaps, p, final[p], final[REFERENCE])
        for a, b in itertools.combinations([p for p in SCALED if p in policies], 2):
            label = f"{a} minus {b}"
            out["pairs"][label] = compare(pairs, label, final[a], final[b])
    command = "python benchmarks/fp8_recipes.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    sections = [
        f"Command: `{command.strip()}` ({wall / 60:.1f} min on this machine, shared with other work).",
        f"Model: transformer, {args.layers} layer(s) x {args.d_model}, {args.heads} heads, context "
        f"{args.context}, batch {args.batch_size}, AdamW. Phase 1: fp32, lr {args.lr:g}, {args.steps} steps. "
        f"Phase 2: from phase 1's weights, lr {args.late_lr:g}, {args.late_steps} steps, under each policy "
        "(a fresh fp8 recipe state: delayed scaling starts from scale 1 and an empty history). "
        "Validation: the last 10% of the text (256 windows).",
        "## Final validation loss, bits per character\n\n" + per_run.markdown(),
        f"## Paired difference from {REFERENCE} after phase 2 (per seed), mean and 95% Student-t interval\n\n"
        + gaps.markdown(),
        "## Paired differences between the scaled recipes\n\n" + pairs.markdown(),
        "## What the casts did in phase 2 (mean over the seeds)\n\n"
        "The largest share of one operand's values (any linear layer, any role) that saturated or "
        "flushed to zero at any one step (the scaled recipes' `History.operands`; mixed-fp8 "
        "records none), the mean share of gradients flushed (the trainer's `flushed` column) and "
        "the steps skipped by the loss scaler.\n\n" + casts.markdown(),
    ]
    write_results(args.name, "fp8 training recipes on the transformer language model", sections)
    path = RESULTS / f"{args.name}.json"
    path.write_text(json.dumps(out, indent=1, allow_nan=True) + "\n", encoding="utf-8")
    print(per_run.markdown())
    print(gaps.markdown())
    print(pairs.markdown())
    print(casts.markdown())
    return 0 if all(math.isfinite(v) for v in final[REFERENCE]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
