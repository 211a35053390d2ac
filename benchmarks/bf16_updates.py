"""Pure bf16 done right: the two cures of swallowed updates on the transformer, over seeds.

Pure bf16 with round-to-nearest weight updates loses the small updates of late training.
Zamirai et al., "Revisiting BFloat16 Training" (2020), recover fp32's result with stochastic
rounding of the update or with Kahan-compensated updates. This measures both on the
character-level transformer with lesson 09's protocol: for each seed, train in fp32 (phase 1:
AdamW at a high learning rate), then go on from those same weights at a tenth of the learning
rate (phase 2, where updates are small next to the weights) in fp32, pure bf16 (nearest), pure
bf16 with stochastic update rounding and pure bf16 with compensated updates (a bf16
compensation buffer). Every policy starts phase 2 from the same point, so the seed's luck
cancels. Writes the final validation loss in bits per character of every run, each variant's
paired difference from fp32 and from pure bf16 with a 95% Student-t interval
(``floatlab.train.analysis.seeds.paired_gap``) and the share of pure bf16's gap it closes, to
``benchmarks/results/bf16-updates.md``.

The loss is measured twice. As lesson 09 does, in the run's own precision: a pure-bf16 forward
pass ends in a bf16 loss, whose values lie on bf16's grid (2^-7 apart between 1 and 2 nats,
about 0.011 bits/char), so the bf16 variants' results move in steps of that size. And the
trained weights evaluated in fp32 (exact, since bf16 values are fp32 values): what the weights
learnt, without the evaluation's rounding.

    python benchmarks/bf16_updates.py            # lesson 09's settings, seeds 0, 1, 2
    python benchmarks/bf16_updates.py --seeds 5 --steps 600 --late-steps 400
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import shlex
import sys
import time
from typing import Any

from _common import Table, write_results
from _late_phase import add_protocol_options, model_settings

import floatlab.train as ft
from floatlab.train.analysis.seeds import LatePhase, late_phase, paired_gap

# label -> (precision, policy overrides)
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "fp32": ("fp32", {}),
    "bf16": ("bf16", {}),
    "bf16, stochastic updates": ("bf16", {"update_rounding": "stochastic"}),
    "bf16, compensated updates": ("bf16", {"update_compensation": True}),
}


def bits(trainer: ft.Trainer) -> float:
    value: float = trainer.history.summary()["bits_per_char"]
    return value


def _tables(
    seeds: list[int],
    final: dict[str, list[float]],
    swallowed: dict[str, list[float]],
    phase1: list[float] | None,
) -> tuple[Table, Table]:
    """The per-run table and the table of paired differences for one measure of the loss."""
    per_run = Table(["variant", *(f"seed {s}" for s in seeds), "mean", "updates swallowed"])
    if phase1 is not None:
        per_run.add("fp32, phase 1", *(f"{v:.4f}" for v in phase1), f"{sum(phase1) / len(phase1):.4f}", "")
    for label in VARIANTS:
        b = final[label]
        per_run.add(
            label, *(f"{v:.4f}" for v in b), f"{sum(b) / len(b):.4f}", f"{sum(swallowed[label]) / len(b):.1%}"
        )
    gaps = Table(["variant", "minus fp32", "95% CI low", "95% CI high", "minus bf16", "95% CI", "gap closed"])
    if len(seeds) < 2:
        return per_run, gaps
    bf16_gap = [a - b for a, b in zip(final["bf16"], final["fp32"], strict=True)]
    for label in VARIANTS:
        if label == "fp32":
            continue
        g = paired_gap(final[label], final["fp32"])
        h = paired_gap(final[label], final["bf16"]) if label != "bf16" else None
        mine = [a - b for a, b in zip(final[label], final["fp32"], strict=True)]
        closed = [1 - m / b if b else math.nan for m, b in zip(mine, bf16_gap, strict=True)]
        gaps.add(
            label,
            f"{g.mean:+.4f}",
            f"{g.low:+.4f}",
            f"{g.high:+.4f}",
            "" if h is None else f"{h.mean:+.4f}",
            "" if h is None else f"[{h.low:+.4f}, {h.high:+.4f}]",
            "" if h is None else ", ".join(f"{c:.0%}" for c in closed),
        )
    return per_run, gaps


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_protocol_options(ap, seeds=3, steps=300, late_steps=200)
    ap.add_argument("--name", default="bf16-updates", help="results file name (without suffix)")
    args = ap.parse_args(argv)
    settings = model_settings(args)
    text = ft.load_text(context=args.context)
    started = time.perf_counter()

    def progress(seed: int, lp: LatePhase) -> None:
        row = ", ".join(f"{v} {bits(lp.runs[v][-1]):.4f}" for v in VARIANTS)
        elapsed = time.perf_counter() - started
        first = bits(lp.phase1[-1])
        print(f"seed {seed}: phase 1 {first:.4f}; phase 2 {row} ({elapsed:.0f} s)", file=sys.stderr)

    # (evaluations read the weights and change nothing: eval_every as in lesson 09)
    lp = late_phase(
        VARIANTS,
        range(args.seeds),
        first={"lr": args.lr, "steps": args.steps, "eval_every": 100},
        late={"lr": args.late_lr, "steps": args.late_steps, "eval_every": args.late_steps},
        dataset=text,
        callback=progress,
        **settings,
    )
    seeds = lp.seeds
    phase1 = [bits(t) for t in lp.phase1]
    final = {v: [bits(t) for t in lp.runs[v]] for v in VARIANTS}
    swallowed = {v: [t.history.summary()["mean_swallowed"] for t in lp.runs[v]] for v in VARIANTS}
    in_fp32: dict[str, list[float]] = {v: [] for v in VARIANTS}  # the weights evaluated in fp32
    for v in VARIANTS:
        for t in lp.runs[v]:
            assert t.config is not None
            fp32 = dataclasses.replace(t.config, precision="fp32", overrides={})
            judge = ft.Trainer.from_config(fp32, text)
            judge.start_from(t.params)
            in_fp32[v].append(judge.evaluate(text.x_test, text.y_test)[0] / math.log(2))
    wall = time.perf_counter() - started

    runs32, gaps32 = _tables(seeds, in_fp32, swallowed, None)
    per_run, gaps = _tables(seeds, final, swallowed, phase1)
    command = "python benchmarks/bf16_updates.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    sections = [
        f"Command: `{command.strip()}` ({wall / 60:.1f} min on this machine, shared with other work).",
        f"Model: transformer, {args.layers} layer(s) x {args.d_model}, {args.heads} heads, context "
        f"{args.context}, batch {args.batch_size}, AdamW. Phase 1: fp32, lr {args.lr:g}, {args.steps} "
        f"steps, seeds {', '.join(map(str, seeds))}. Phase 2: from phase 1's weights, lr {args.late_lr:g}, "
        f"{args.late_steps} steps, seed 100 + the seed, in each variant. Validation: the last 10% of the "
        "text (256 windows). Variants: pure bf16 (weights, activations, gradients, updates in bf16) with "
        "round-to-nearest updates, with stochastic rounding of the update "
        "(`overrides={'update_rounding': 'stochastic'}`) and with Kahan-compensated updates, the "
        "compensation buffer in bf16 (`overrides={'update_compensation': True}`).",
        "## Final validation loss in the run's own precision, bits per character (lesson 09's measure)\n\n"
        "A pure-bf16 run's loss is a bf16 value: on a grid about 0.011 bits/char apart here.\n\n"
        + per_run.markdown(),
        "## Paired differences after phase 2 (per seed), mean and 95% Student-t interval\n\n"
        "`minus fp32` is the cost of the variant against fp32, `minus bf16` its gain over pure bf16 "
        "with round-to-nearest (negative: better), `gap closed` the share of pure bf16's gap from "
        "fp32 that the variant closes, seed by seed.\n\n" + gaps.markdown(),
        "## The same runs' final weights evaluated in fp32, bits per character\n\n"
        "What the weights learnt, without the bf16 rounding of the evaluation itself.\n\n"
        + runs32.markdown()
        + "\n\n"
        + gaps32.markdown(),
    ]
    title = "Pure bf16: stochastic and compensated weight updates on the transformer"
    write_results(args.name, title, sections)
    for table in (per_run, gaps, runs32, gaps32):
        print(table.markdown() + "\n")
    return 0 if all(math.isfinite(v) for v in final["fp32"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
