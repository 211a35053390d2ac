"""What ``floatlab train`` and ``floatlab compare`` print: a finished run's summary
(:func:`train_view`) and several runs side by side (:func:`compare_view`), as text and as data.

>>> from floatlab.train import TrainConfig, Trainer
>>> tr = Trainer.from_config(TrainConfig(data="underflow", precision="fp32", epochs=0))
>>> train_view(tr).data["summary"]["steps"]
0
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from floatlab.cli._common import View
from floatlab.cli.progress import num as _num
from floatlab.cli.progress import pct as _pct
from floatlab.text import bold, dim, style, table

if TYPE_CHECKING:
    from floatlab.train import History, Trainer

__all__ = ["compare_view", "train_view"]


def _override_lines(trainer: Trainer, color: bool) -> list[str]:
    """A line naming what the switches changed of a framework preset's recipe (none otherwise)."""
    from floatlab.train.precision.presets import get_preset, preset_overrides

    cfg = trainer.config
    if cfg is None or not cfg.overrides:
        return []
    try:
        preset = get_preset(cfg.precision)
    except ValueError:  # a named policy, not a preset
        return []
    changed = preset_overrides(preset, trainer.policy)
    return [dim(f"overrides of {preset.name}: {'; '.join(changed)}", color)] if changed else []


def _operands_line(h: History, color: bool) -> str:
    """The recipe's GEMM operands in one line: how many, the range of their scales, the worst
    saturation and where it happened."""
    from floatlab.train.analysis.operands import operand_summary

    rows = operand_summary(h)
    lo = min((r["scale_min"] for r in rows if r["scale_min"] is not None), default=None)
    hi = max((r["scale_max"] for r in rows if r["scale_max"] is not None), default=None)
    worst = max(rows, key=lambda r: r["saturated_max"] or 0.0)
    scales = f"scales {lo:.3g} to {hi:.3g}" if lo is not None and hi is not None else "no finite scale"
    sat = worst["saturated_max"] or 0.0
    where = f" ({worst['operand']}, step {worst['saturated_at']})" if sat > 0 else ""
    return f"{len(rows)}, {scales}" + dim(f"; saturated at most {_pct(sat)} of a tensor{where}", color)


def train_view(trainer: Trainer, *, color: bool = False) -> View:
    """The summary of a finished run; for a character model, its validation loss in bits per
    character.

    >>> from floatlab.train import TrainConfig, Trainer
    >>> tr = Trainer.from_config(TrainConfig(data="underflow", precision="fp32", epochs=0))
    >>> train_view(tr).data["summary"]["steps"]
    0
    """
    h = trainer.history
    s = h.summary()
    m = trainer.model.config()
    d = trainer.data.info()
    hyper = trainer.opt.hyper()
    text = trainer.data.kind == "text"
    if text:
        seen = f"{d['n_train']:,} training windows, {d['n_test']} validation, {d['vocab_size']} characters"
    else:
        seen = f"{d['n_train']} train, {d['n_test']} test"
    by_steps = trainer.config is not None and trainer.config.steps is not None
    length = f"{trainer.step} steps" if by_steps else f"{trainer.epoch} epochs"
    lines = [
        bold(trainer.policy.describe(), color),
        *_override_lines(trainer, color),
        dim(
            f"{trainer.model.describe()} on {d['name']} ({seen}), {hyper['name']} "
            f"lr {hyper['lr']:g}, batch {trainer.batch_size}, {length}, seed {trainer.seed}",
            color,
        ),
        "",
    ]
    scales = h.column("scale")
    start = f"{scales[0]:g}" if len(scales) else "-"
    acc = s["test_accuracy"]
    rows: list[list[str]] = []
    if text:
        from floatlab.train.history import bits_per_char

        bpc = s["bits_per_char"]
        rows += [
            [
                "validation",
                f"{_num(bpc, '.3f')} bits/char"
                + dim(f"  (loss {_num(s['test_loss'])}; next character right {_pct(acc)})", color),
            ],
            [
                "train loss",
                f"{_num(bits_per_char(s['train_loss']), '.3f')} bits/char"
                + dim(f"  (loss {_num(s['train_loss'])}, last tenth of the steps)", color),
            ],
        ]
    else:
        acc_text = _pct(acc)
        rows += [
            [
                "test accuracy",
                style(acc_text, "green", color=color) if acc is not None and acc > 0.9 else acc_text,
            ],
            ["test loss", _num(s["test_loss"])],
            ["train loss", _num(s["train_loss"]) + dim("  (last tenth of the steps)", color)],
        ]
    rows += [
        ["steps", f"{s['steps']} ({s['skipped_steps']} skipped)"],
        ["loss scale", f"{trainer.scaler.scale:g} (start {start})" if trainer.scaler.enabled else "none"],
        ["flushed", _pct(s["mean_flushed"]) + dim("  of the non-zero gradients, per step", color)],
        ["swallowed", _pct(s["mean_swallowed"]) + dim("  of the non-zero updates, per step", color)],
    ]
    if h.operands:
        rows.append(["GEMM operands", _operands_line(h, color)])
    if s["stopped"]:
        rows.append(["stopped", style(s["stopped"], "red", color=color)])
    lines += ["  " + f"{k:<15}{v}" for k, v in rows]
    data = {"policy": trainer.policy.to_dict(), "summary": s, "model": m, "data": d, "optimizer": hyper}
    if h.operands:  # the recipe's record: per operand, per-step lists of amax, scale and shares
        data["operands"] = h.to_dict()["operands"]
    return View("\n".join(lines), data)


def compare_view(histories: list[History], *, color: bool = False) -> View:
    """The runs side by side (character models: validation bits per character and loss); a
    run that stopped early is named under the table. The memory column is the step's total from
    :func:`floatlab.train.analysis.memory.ledger_for` (model, policy, optimizer and batch size of the run;
    "-" for a history that does not record them).

    >>> from floatlab.train import History
    >>> print(compare_view([History("fp32")]).text)  # doctest: +NORMALIZE_WHITESPACE
      policy  test acc  test loss  train loss  skipped  flushed  swallowed  final scale  memory
      fp32    -         -          -           0        -        -          -            -
    """
    from floatlab.train.analysis.memory import ledger_for, mib_text

    text = bool(histories) and all(h.is_text for h in histories)
    rows = []
    notes = []
    ledgers = []
    for h in histories:
        s = h.summary()
        scale = s["final_scale"]
        try:
            led = ledger_for(h)
        except ValueError:  # a history that does not record its model, policy or batch size
            led = None
        ledgers.append(None if led is None else led.to_dict())
        rows.append(
            [
                h.label,
                _num(s["bits_per_char"], ".3f") if text else _pct(s["test_accuracy"]),
                _num(s["test_loss"]),
                _num(s["train_loss"]),
                str(s["skipped_steps"]),
                _pct(s["mean_flushed"], 1),
                _pct(s["mean_swallowed"], 1),
                "-" if scale is None else f"{scale:g}",
                "-" if led is None else mib_text(led.total),
            ]
        )
        if s["stopped"]:
            at = s["stopped"].split(":")[0]  # "step 12"
            notes.append(f"  {h.label} stopped early, {at}: its loss became inf or NaN")
    first = ["bits/char", "val loss"] if text else ["test acc", "test loss"]
    header = ["policy", *first, "train loss", "skipped", "flushed", "swallowed", "final scale", "memory"]
    out = table(header, rows, align="<>>>>>>>>", color=color)
    if notes:
        out += "\n" + dim("\n".join(notes), color)
    return View(out, {"runs": [h.summary() for h in histories], "memory": ledgers})


def seeds_view(final: Any, *, color: bool = False) -> View:
    """What runs over seeds ended at (``final``: :func:`floatlab.train.final_table`'s DataFrame):
    per policy the final validation metric's mean over the seeds with its 95% interval, and the
    paired gap to the first policy with its interval.

    >>> import pandas as pd
    >>> rows = [{"label": "fp32", "metric": "test_accuracy", "unit": "share", "seeds": 3, "finished": 3,
    ...          "mean": 0.95, "low": 0.94, "high": 0.96, "gap": 0.0, "gap_low": None, "gap_high": None},
    ...         {"label": "bf16", "metric": "test_accuracy", "unit": "share", "seeds": 3, "finished": 3,
    ...          "mean": 0.93, "low": 0.91, "high": 0.95, "gap": -0.02, "gap_low": -0.03, "gap_high": -0.01}]
    >>> print(seeds_view(pd.DataFrame(rows)).text)  # doctest: +NORMALIZE_WHITESPACE
      policy  seeds  final test accuracy (95% CI)  gap to fp32 (95% CI)
      fp32    3      95.00 % (94.00 % to 96.00 %)  -
      bf16    3      93.00 % (91.00 % to 95.00 %)  -2.00 % (-3.00 % to -1.00 %)
    """
    records = final.to_dict("records")
    share = bool(records) and records[0]["unit"] == "share"

    def value(v: Any, signed: bool = False) -> str:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "-"
        if share:
            return f"{100 * v:+.2f} %" if signed else _pct(v)
        return f"{v:+.4f}" if signed else _num(v)

    def interval(mean: Any, low: Any, high: Any, signed: bool = False) -> str:
        if value(mean) == "-":
            return "-"
        if value(low) == "-":
            return value(mean, signed)
        return f"{value(mean, signed)} ({value(low, signed)} to {value(high, signed)})"

    first = records[0]["label"] if records else "-"
    rows = []
    for i, r in enumerate(records):
        gap = "-" if i == 0 else interval(r["gap"], r["gap_low"], r["gap_high"], signed=True)
        seeds = str(r["seeds"]) if r["finished"] == r["seeds"] else f"{r['finished']} of {r['seeds']}"
        rows.append([r["label"], seeds, interval(r["mean"], r["low"], r["high"]), gap])
    metric = records[0]["metric"].replace("_", " ") if records else "metric"
    bits = bool(records) and records[0]["unit"] == "bits/char"
    what = "final validation loss, bits/char" if bits else f"final {metric}"
    header = ["policy", "seeds", f"{what} (95% CI)", f"gap to {first} (95% CI)"]
    return View(table(header, rows, align="<>>>", color=color), {"final": records})
