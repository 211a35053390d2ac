"""``floatlab sweep``: a grid of training runs (policies x seeds x loss scales x any option), with
a 95% confidence interval over the seeds.

The axes come from ``--precision``/``--preset`` (repeat them), ``--seeds 0-4``, ``--loss-scale``
(repeat it: static loss scaling at each scale), ``--grid KEY=V1,V2`` (any trainer or policy
option) and ``--config FILE`` (TOML or YAML, tables ``grid`` and ``fixed``, whose settings only
an option given on the command line overrides); every other option is the ``train`` command's,
shared by every run. Runs go to a local process pool on every core, to a Dask ``LocalCluster``
(``--dask``) or to a running Dask cluster (``--scheduler ADDRESS``).
``--out`` keeps the tidy table (Parquet or CSV), written after each run, and each run's per-step
curves beside it (``<stem>.curves.parquet`` or ``.csv``); running the same sweep again skips the
runs in it. ``--by`` groups the summary and ``--plot``'s curves (default: the configuration
columns that vary); ``--metric`` is any evaluation or per-step metric. Every grid key and value
is checked before the first run.

>>> parser = argparse.ArgumentParser()
>>> _ = register(parser.add_subparsers())
>>> args = parser.parse_args(["sweep", "--precision", "fp32", "--seeds", "0-1", "--data", "underflow",
...                           "--hidden", "4", "--steps", "2", "--serial", "-q"])
>>> run(args, UI())  # doctest: +ELLIPSIS +NORMALIZE_WHITESPACE
  precision runs ok test accuracy (95% CI) ...
  fp32          2   2 ...
0
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import TYPE_CHECKING, Any

from floatlab.cli._common import UI, View, add_command, checked_number
from floatlab.cli.progress import SweepProgress, num, pct
from floatlab.cli.train_cmds import (
    _json_file,
    _on_off,
    _output_options,
    _run_options,
    _show,
    _switch_options,
    _with_curves,
    config_from_args,
)
from floatlab.io import FIGURE_SUFFIXES, atomic_output, check_outputs, figure_name
from floatlab.text import dim, parse_scale, safe, table

if TYPE_CHECKING:
    from floatlab.cli._common import Subparsers
    from floatlab.sweeps import Grid

__all__ = ["NAME", "build_grid", "parse_grid_option", "register", "run", "sweep_view"]

NAME = "sweep"

#: the options whose value is a tuple of sizes: their values in --grid are written 8x8
_TUPLE_KEYS = ("hidden", "channels", "histogram_steps")

_EPILOG = """\
examples:
  floatlab sweep --precision fp32 --precision mixed-fp16 --seeds 0-4 --epochs 5 --out results.parquet
  floatlab sweep --precision fp16 --loss-scale 2^8 --loss-scale 2^16 --seeds 0-2 --data underflow
  floatlab sweep --precision bf16 --grid lr=0.01,0.05 --grid hidden=32x32,128x128 --seeds 0-3 --dask
  floatlab sweep --config sweep.toml --scheduler tcp://10.0.0.5:8786 --out runs.parquet --plot curves.png
"""


def _value(key: str, text: str) -> Any:
    """One value of ``--grid KEY=...``: a number, on/off, sizes (for hidden, channels), or text."""
    t = text.strip()
    if key in _TUPLE_KEYS:
        try:
            return tuple(int(s) for s in t.split("x"))
        except ValueError:
            raise ValueError(f"--grid {key}={text!r}: expected sizes such as 64x64") from None
    low = t.lower()
    if low in ("on", "true", "yes", "off", "false", "no"):
        return _on_off(low)
    if low in ("none", "null"):
        return None
    for kind in (int, float):
        try:
            return kind(t)
        except ValueError:
            pass
    return t


def parse_grid_option(text: str) -> tuple[str, list[Any]]:
    """``KEY=V1,V2,...`` as a key and its values (sizes written ``8x8``).

    >>> parse_grid_option("lr=0.01,0.05"), parse_grid_option("hidden=8x8,16")
    (('lr', [0.01, 0.05]), ('hidden', [(8, 8), (16,)]))
    >>> parse_grid_option("lr")
    Traceback (most recent call last):
    ...
    ValueError: --grid 'lr': expected KEY=VALUE1,VALUE2 such as lr=0.01,0.05
    """
    key, sep, values = text.partition("=")
    key = key.strip().replace("-", "_")
    if not sep or not key or not values.strip():
        raise ValueError(f"--grid {text!r}: expected KEY=VALUE1,VALUE2 such as lr=0.01,0.05")
    return key, [_value(key, v) for v in values.split(",") if v.strip()]


def _trainer_defaults() -> dict[str, Any]:
    """The trainer options (``train``'s) and their defaults. The sweep command's own defaults for
    them are None, so that an option given on the command line, even at its default value, can be
    told from one left out (see :func:`build_grid`).

    >>> d = _trainer_defaults(); d["seed"], d["epochs"], d["rounding"]
    (0, 20, None)
    """
    parser = argparse.ArgumentParser(add_help=False)
    _run_options(parser)
    _switch_options(parser)
    return vars(parser.parse_args([]))


def build_grid(args: argparse.Namespace) -> Grid:
    """The sweep the options describe: axes from --precision, --preset, --seeds, --loss-scale,
    --grid and --config; fixed settings from the other options.

    With --config FILE, the file's settings stand unless an option is given on the command line
    (even at its default value): --seeds or --seed replaces the file's seeds, --precision,
    --preset and --grid add values to its axes (and replace a fixed setting of the same key), any
    other option replaces the file's setting, fixed or axis. An option left out never overrides
    the file: its default applies only where the file says nothing. An option given for a key that
    another option of the command line makes an axis is refused (one of them would be dropped)."""
    from floatlab.sweeps import Grid, load_grid_file, parse_seeds

    axes: dict[str, list[Any]] = {}
    fixed: dict[str, Any] = {}
    if args.config is not None:
        axes, fixed = load_grid_file(args.config)  # (keys under their own names: seeds is seed)
    defaults = _trainer_defaults()
    given = {k for k in defaults if getattr(args, k, None) is not None}
    filled = argparse.Namespace(**{**vars(args), **{k: v for k, v in defaults.items() if k not in given}})
    made: set[str] = set()  # the axes the command line makes (the rest come from the file)
    names = [*args.precision, *args.preset]
    if names:
        axes["precision"] = [*axes.get("precision", []), *names]
        made.add("precision")
    if args.seeds is not None:
        axes["seed"] = parse_seeds(args.seeds)
        made.add("seed")
    if args.loss_scale:
        axes["static_scale"] = [float(parse_scale(s, "--loss-scale")) for s in args.loss_scale]
        made.add("static_scale")
        if "loss_scaling" not in axes:
            fixed.setdefault("loss_scaling", "static")
    for item in args.grid:
        key, values = parse_grid_option(item)
        axes[key] = [*axes.get(key, []), *values] if key in axes else values
        made.add(key)
    cfg = config_from_args(filled, "fp32")  # the trainer options, parsed as `train` parses them
    cli = {k: v for k, v in cfg.to_dict().items() if k not in ("precision", "overrides")}
    cli.update(cfg.overrides)  # (only the switches given)
    if filled.backend != "numpy" or "backend" in given:
        cli["backend"] = filled.backend
    for k, v in cli.items():
        if k in given or k in cfg.overrides:  # an option given on the command line
            if k in made:
                flag = "--seed" if k == "seed" else f"--{k.replace('_', '-')}"
                raise ValueError(
                    f"{flag} and the sweep's axis {k} (from --seeds, --loss-scale, --precision or "
                    "--grid): expected one of them"
                )
            axes.pop(k, None)  # it replaces the file's axis
            fixed[k] = v
        elif args.config is None and k not in axes:
            fixed[k] = v  # a default (with --config, the file's setting or the trainer's stands)
    if "precision" not in axes and "precision" not in fixed:
        axes["precision"] = ["mixed-fp16"]
    for k in list(fixed):
        if k in axes:
            del fixed[k]  # an axis replaces a fixed setting of the file's
    return Grid(axes, fixed)


def _ci(mean: float, low: float, high: float, fmt: Any) -> str:
    if mean != mean:  # NaN: no run ended ok
        return "-"
    if low != low:
        return f"{fmt(mean)} (1 run)"
    return f"{fmt(mean)} [{fmt(low)}, {fmt(high)}]"


def sweep_view(
    summary: Any,
    *,
    failures: list[str],
    out: str | None,
    color: bool,
    keys: list[str] | None = None,
    curves: str | None = None,
) -> View:
    """The summary table: per group (``keys``, default the configuration columns that vary), the
    runs and the final test accuracy and loss with their 95% confidence intervals; where the table
    and its per-step ``curves`` were written."""
    from floatlab.sweeps import config_columns

    if keys is None:
        keys = [c for c in config_columns(summary) if c not in ("runs", "ok", "stopped", "failed")]
        keys = [c for c in keys if not c.endswith(("_mean", "_low", "_high"))]
    rows = []
    for r in summary.to_dict("records"):
        rows.append(
            [str(r[k]) for k in keys]
            + [str(r["runs"]), str(r["ok"])]
            + [_ci(r["test_accuracy_mean"], r["test_accuracy_low"], r["test_accuracy_high"], pct)]
            + [_ci(r["test_loss_mean"], r["test_loss_low"], r["test_loss_high"], num)]
            + [str(r["stopped"] + r["failed"])]
        )
    header = [*keys, "runs", "ok", "test accuracy (95% CI)", "test loss (95% CI)", "stopped/failed"]
    lines = [table(header, rows, align="<" * len(keys) + ">>>>>", color=color)]
    lines += [dim(f"  failed: {safe(f)}", color) for f in failures]
    if out is not None:
        lines.append(dim(f"  table written to {safe(out)}", color))
    if curves is not None:
        lines.append(dim(f"  per-step curves written to {safe(curves)}", color))
    data = {"summary": summary.to_dict("records"), "failed": failures, "table": out, "curves": curves}
    return View("\n".join(lines), data)


def run(args: argparse.Namespace, ui: UI) -> int:
    """Check the grid, run it, print the summary (see the module docstring)."""
    from floatlab.sweeps import EVAL_METRICS, STEP_METRICS, TABLE_SUFFIXES, plot_curves, summarize, sweep
    from floatlab.sweeps.curves import curves_path
    from floatlab.sweeps.table import run_rows

    if args.metric not in (
        *EVAL_METRICS,
        *STEP_METRICS,
    ):  # (checked before any run, though only --plot draws it)
        raise ValueError(
            f"--metric {args.metric!r}: expected one of {', '.join(EVAL_METRICS)} (per evaluation) or "
            f"{', '.join(STEP_METRICS)} (per step)"
        )
    grid = build_grid(args)  # every key and value checked: before any run
    by = _by(args.by, list(run_rows(grid.tasks[0], error="-")[0]))
    plot = None if args.plot is None else figure_name(args.plot)
    json_file = _json_file(args)
    check_outputs(
        [("--out", args.out), ("--plot", plot), ("--json", json_file)],
        suffixes={"--out": TABLE_SUFFIXES, "--plot": FIGURE_SUFFIXES},
    )
    executor = "serial" if args.serial else "dask" if (args.dask or args.scheduler) else "process"
    progress = None if args.quiet or sys.stderr is None else SweepProgress(sys.stderr)
    try:
        df = sweep(
            grid,
            out=args.out,
            executor=executor,
            workers=args.workers,
            scheduler=args.scheduler,
            retry_failed=args.retry_failed,
            timeout=args.timeout,
            callback=progress,
            progress=False,  # (the command's own lines and bar, through the callback)
        )
    finally:
        if progress is not None:
            progress.close()
    failures = sorted({f"{r['precision']} seed {r['seed']}: {r['reason']}" for r in df.to_dict("records")
                       if r["status"] == "failed"})  # fmt: skip
    if failures and sys.stderr is not None:
        sys.stderr.write(f"floatlab: warning: {len(failures)} of {len(grid)} runs failed (see the table)\n")
    summary = summarize(df, by=by)
    curves = None if args.out is None else curves_path(args.out)
    view = sweep_view(summary, failures=failures, out=args.out, color=ui.color, keys=by, curves=curves)
    if plot is not None:
        with atomic_output(plot) as tmp:
            plot_curves(df, tmp, metric=args.metric, by=by)
        view = _with_curves(view, plot, ui.color)
    return _show(ui, view, json_file, view.data)  # --json FILE: the summary there, the text here


def register(subparsers: Subparsers) -> argparse.ArgumentParser:
    """Add ``sweep`` to ``subparsers``.

    >>> parser = argparse.ArgumentParser()
    >>> register(parser.add_subparsers()).prog.split()[-1]
    'sweep'
    """
    p = add_command(
        subparsers,
        NAME,
        help="train a grid of runs (policies x seeds x options) and give 95%% confidence intervals",
        description="Train every combination of the grid's values, in a process pool, on a Dask cluster "
        "or one after another, keep one row per run and evaluation in a Parquet or CSV table, and print "
        "per configuration the mean final test accuracy and loss with a 95% confidence interval over the "
        "seeds. Every option of 'floatlab train' is a setting shared by every run.",
        epilog=_EPILOG,
    )
    grid = p.add_argument_group("the grid")
    grid.add_argument("--precision", action="append", default=[], metavar="POLICY", help="a policy (repeat)")
    grid.add_argument(
        "--preset", action="append", default=[], metavar="NAME", help="a framework preset (repeat)"
    )
    grid.add_argument("--seeds", metavar="SEEDS", help="seeds such as 0-4 or 0,2,5 (default: --seed)")
    grid.add_argument(
        "--loss-scale", action="append", default=[], metavar="S", help="static loss scaling at S (repeat)"
    )
    grid.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="KEY=V1,V2",
        help="any trainer or policy option as an axis: lr=0.01,0.05, hidden=32x32,64x64, "
        "rounding=rne,stochastic (repeat for several axes)",
    )
    grid.add_argument(
        "--config",
        metavar="FILE",
        help="a TOML or YAML file with the tables grid and fixed. Its settings stand unless an option is "
        "given on the command line: --seeds or --seed replaces its seeds, --precision, --preset and --grid "
        "add values to its axes, any other option replaces its setting (fixed or axis); an option left "
        "out never overrides the file (its default applies only where the file says nothing)",
    )
    where = p.add_argument_group("where the runs go (default: a process pool on every core)")
    how = where.add_mutually_exclusive_group()
    how.add_argument("--serial", action="store_true", help="one run after another, in this process")
    how.add_argument("--dask", action="store_true", help="on a Dask LocalCluster")
    how.add_argument(
        "--scheduler", metavar="ADDRESS", help="on the Dask cluster at ADDRESS (tcp://host:8786)"
    )
    where.add_argument(
        "--workers", type=_workers, metavar="N", help="processes or Dask workers, >= 1 (default: every core)"
    )
    where.add_argument(
        "--timeout",
        type=_seconds,
        default=30.0,
        metavar="S",
        help="seconds to reach the scheduler, a positive number (default: 30)",
    )
    files = p.add_argument_group("files")
    files.add_argument("--out", metavar="FILE", help="the table, .parquet or .csv, written as runs finish")
    files.add_argument("--retry-failed", action="store_true", help="run the failed runs of --out again")
    files.add_argument("--plot", metavar="FILE.png", help="curves with their 95%% confidence bands")
    files.add_argument(
        "--metric",
        default="test_loss",
        metavar="NAME",
        help="the curves' metric: per evaluation test_loss (default), test_accuracy, train_loss; per step "
        "loss, accuracy, scale, skipped, flushed, swallowed, lr, grad_norm",
    )
    files.add_argument(
        "--by",
        metavar="COL[,COL]",
        help="group the summary and the curves by these table columns (default: the configuration "
        "columns that vary), such as precision or precision,lr",
    )
    _run_options(p)
    _switch_options(p)
    _output_options(p)
    # None: left out (see build_grid: with --config only the options given override the file's)
    p.set_defaults(**dict.fromkeys(_trainer_defaults(), None), run=run, parser=p)
    return p


def _by(text: str | None, columns: list[str]) -> list[str] | None:
    """``--by COL[,COL]``: columns of the table, checked before any run (None: left out).

    >>> _by("precision, lr", ["precision", "lr", "seed"])
    ['precision', 'lr']
    >>> _by("precison", ["precision", "seed"])
    Traceback (most recent call last):
    ...
    ValueError: --by 'precison' names no column of the sweep table: expected precision, seed
    """
    if text is None:
        return None
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise ValueError(f"--by {text!r}: expected column names such as precision or precision,lr")
    for n in names:
        if n not in columns:
            raise ValueError(f"--by {n!r} names no column of the sweep table: expected {', '.join(columns)}")
    return names


def _workers(text: str) -> int:
    """``--workers N``: a whole number >= 1.

    >>> _workers("4")
    4
    >>> _workers("0")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: '0': expected a number of workers >= 1
    """
    return checked_number(text, int, lambda n: n >= 1, f"{text!r}: expected a number of workers >= 1")


def _seconds(text: str) -> float:
    """``--timeout S``: a positive number of seconds.

    >>> _seconds("2.5")
    2.5
    >>> _seconds("-1")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: '-1': expected a positive number of seconds
    """
    error = f"{text!r}: expected a positive number of seconds"
    return checked_number(text, float, lambda s: 0 < s < math.inf, error)
