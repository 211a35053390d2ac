"""What the microscaling training recipes, and each piece of NVIDIA's NVFP4 recipe, do to a
character-level transformer, over several seeds.

The protocol of lesson 09 (``floatlab.train.analysis.seeds.late_phase``), for the recipes of lesson 12. For
each seed: train the transformer language model on the shipped text in fp32 (phase 1: AdamW at a
high learning rate), then go on from those same weights at a tenth of the learning rate (phase 2)
once under each variant: mixed-bf16 (the reference: the microscaling recipes keep the rest of the
model in bf16 with fp32 master weights), mxfp8, mxfp4, nvfp4 (NVIDIA's recipe: Hadamard transform
on the weight-gradient inputs, stochastic gradients, first and last linear layers in bf16, 16x16
weight tiles) and nvfp4 with each of those four pieces switched off in turn, and with all four off.
Every variant starts phase 2 from the same point, so the seed's luck cancels and what is left is
the format.

Writes, to ``benchmarks/results/micro-recipes.md`` (and ``.json``): the final validation loss in
bits per character of every run; each variant's paired difference from mixed-bf16 and each nvfp4
ablation's paired difference from nvfp4, with 95% Student-t intervals
(``floatlab.train.analysis.seeds.paired_gap``); and what the casts did (the largest shares of an operand's
values saturated and flushed at any step, from ``History.operands``).

    python benchmarks/micro_recipes.py                     # the committed configuration
    python benchmarks/micro_recipes.py --quick             # a smoke run, a few minutes
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
from _late_phase import add_protocol_options, bits, compare, model_settings, run_protocol

import floatlab.train as ft
from floatlab.train.analysis.operands import operand_summary

#: label -> (policy, the recipe's switches changed)
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "mixed-bf16": ("mixed-bf16", {}),
    "mxfp8": ("mxfp8", {}),
    "mxfp4": ("mxfp4", {}),
    "nvfp4": ("nvfp4", {}),
    "nvfp4 hadamard off": ("nvfp4", {"hadamard": False}),
    "nvfp4 gradients rne": ("nvfp4", {"gradient_rounding": "rne"}),
    "nvfp4 keep_bf16 none": ("nvfp4", {"keep_bf16": ()}),
    "nvfp4 weight tiles off": ("nvfp4", {"weight_tiles": False}),
    "nvfp4 all four off": (
        "nvfp4",
        {"hadamard": False, "gradient_rounding": "rne", "keep_bf16": (), "weight_tiles": False},
    ),
}
REFERENCE = "mixed-bf16"
RECIPE = "nvfp4"
ABLATIONS = tuple(v for v in VARIANTS if v.startswith("nvfp4 "))


def worst_share(trainer: ft.Trainer, share: str) -> float:
    """The largest share of ``share`` (saturated, flushed) of any operand at any step; 0 without
    a recipe (no operand record)."""
    rows = operand_summary(trainer.history)
    values = [r[f"{share}_max"] for r in rows if r[f"{share}_max"] is not None]
    return max(values, default=0.0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_protocol_options(ap, seeds=5, steps=200, late_steps=100)
    # lesson 11's and 12's model: the context and batch of lesson 09 halved, so that a step stays cheap
    ap.set_defaults(context=32, batch_size=16)
    ap.add_argument("--variants", default=",".join(VARIANTS), help="labels of VARIANTS, comma-separated")
    ap.add_argument("--quick", action="store_true", help="2 seeds, 100 + 40 steps: a smoke run")
    ap.add_argument("--name", default="micro-recipes", help="results file name (without suffix)")
    args = ap.parse_args(argv)
    if args.quick:
        args.seeds, args.steps, args.late_steps = 2, 100, 40
    labels = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in labels if v not in VARIANTS]
    if unknown:
        ap.error(f"variants {unknown}: expected some of {', '.join(VARIANTS)}")
    if REFERENCE not in labels:
        labels.insert(0, REFERENCE)
    plan = {v: VARIANTS[v] for v in labels}
    started = time.perf_counter()
    lp = run_protocol(args, plan)  # type: ignore[arg-type]  # (late_phase takes labels or a plan)
    seeds = lp.seeds
    phase1 = [bits(t) for t in lp.phase1]
    final = {v: [bits(t) for t in lp.runs[v]] for v in labels}
    saturated = {v: [worst_share(t, "saturated") for t in lp.runs[v]] for v in labels}
    flushed = {v: [worst_share(t, "flushed") for t in lp.runs[v]] for v in labels}
    wall = time.perf_counter() - started

    def mean(v: list[float]) -> float:
        return sum(v) / len(v)

    def sd(v: list[float]) -> float:
        m = mean(v)
        return math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else math.nan

    per_run = Table(["variant", *(f"seed {s}" for s in seeds), "mean", "sd"])
    per_run.add("fp32, phase 1", *(f"{v:.4f}" for v in phase1), f"{mean(phase1):.4f}", f"{sd(phase1):.4f}")
    casts = Table(["variant", "operand saturated (worst step)", "operand flushed (worst step)"])
    out: dict[str, Any] = {
        "settings": model_settings(args),
        "args": vars(args),
        "variants": {
            v: [plan[v][0], {k: list(x) if isinstance(x, tuple) else x for k, x in plan[v][1].items()}]
            for v in labels
        },
        "seeds": seeds,
        "phase1": phase1,
        "final": final,
        "saturated": saturated,
        "flushed": flushed,
        "gaps": {},
        "ablations": {},
    }
    for v in labels:
        per_run.add(v, *(f"{x:.4f}" for x in final[v]), f"{mean(final[v]):.4f}", f"{sd(final[v]):.4f}")
        casts.add(v, f"{mean(saturated[v]):.3%}", f"{mean(flushed[v]):.3%}")
    columns = ["95% CI low", "95% CI high", "every seed", "seeds"]
    gaps = Table(["variant", f"minus {REFERENCE}, bits/char", *columns])
    ablations = Table(["variant", f"minus {RECIPE}, bits/char", *columns])

    if len(seeds) >= 2:
        for v in labels:
            if v != REFERENCE:
                out["gaps"][v] = compare(gaps, v, final[v], final[REFERENCE])
        if RECIPE in labels:
            if "mxfp4" in labels:
                out["ablations"]["mxfp4"] = compare(ablations, "mxfp4", final["mxfp4"], final[RECIPE])
            for v in labels:
                if v in ABLATIONS:
                    out["ablations"][v] = compare(ablations, v, final[v], final[RECIPE])
    command = "python benchmarks/micro_recipes.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    sections = [
        f"Command: `{command.strip()}` ({wall / 60:.1f} min on this machine, shared with other work).",
        f"Model: transformer, {args.layers} layer(s) x {args.d_model}, {args.heads} heads, context "
        f"{args.context}, batch {args.batch_size}, AdamW. Phase 1: fp32, lr {args.lr:g}, {args.steps} steps. "
        f"Phase 2: from phase 1's weights, lr {args.late_lr:g}, {args.late_steps} steps, under each variant. "
        "Validation: the last 10% of the text (256 windows). The variants: "
        + "; ".join(f"{v} = `{plan[v][0]}`" + (f" with {plan[v][1]}" if plan[v][1] else "") for v in labels)
        + ".",
        "## Final validation loss, bits per character\n\n" + per_run.markdown(),
        f"## Paired difference from {REFERENCE} after phase 2 (per seed), mean and 95% Student-t interval\n\n"
        + gaps.markdown(),
        f"## Each piece of the NVFP4 recipe: paired difference from {RECIPE} (per seed)\n\n"
        "Positive: the variant ends behind the full recipe.\n\n" + ablations.markdown(),
        "## What the casts did in phase 2 (mean over the seeds)\n\n"
        "The largest share of one operand's values (any linear layer, any role) that saturated or "
        "flushed to zero at any one step (`History.operands`; mixed-bf16 records none).\n\n"
        + casts.markdown(),
    ]
    write_results(args.name, "microscaling training recipes on the transformer language model", sections)
    path = RESULTS / f"{args.name}.json"
    path.write_text(json.dumps(out, indent=1, allow_nan=True) + "\n", encoding="utf-8")
    print(per_run.markdown())
    print(gaps.markdown())
    print(ablations.markdown())
    print(casts.markdown())
    return 0 if all(math.isfinite(v) for v in final[REFERENCE]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
