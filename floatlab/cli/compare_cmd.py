"""``floatlab compare``: several precision policies with the same settings, side by side.

With one seed (``--seed``) each policy trains here with its progress lines, and the table shows the
runs side by side. With ``--seeds`` the grid of policies and seeds runs on the sweeps' executors (a
process pool by default, ``--serial``, ``--dask`` or ``--scheduler``) through the Python API's one
implementation, :func:`floatlab.train.run_seeds`; :func:`floatlab.train.final_table` gives each
policy's final validation as mean with its 95% interval and the paired gap to the first policy, and
:func:`floatlab.train.compare` draws the figure. The options are ``floatlab train``'s
(:mod:`floatlab.cli.train_cmds`).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from floatlab.cli import train_cmds as tc
from floatlab.cli._common import UI, View, add_command
from floatlab.cli.train_views import compare_view, seeds_view
from floatlab.io import FIGURE_SUFFIXES, atomic_output, check_outputs, figure_name

if TYPE_CHECKING:
    from floatlab.cli._common import Subparsers

__all__ = ["NAME", "register", "run_compare"]

NAME = "compare"


def run_compare(args: argparse.Namespace, ui: UI) -> int:
    """Train each policy with the same settings; print the table, plot if asked.

    >>> parser = argparse.ArgumentParser()
    >>> _ = register(parser.add_subparsers())
    >>> args = parser.parse_args(["compare", "fp32", "fp16", "--data", "underflow", "--epochs", "1",
    ...                           "--hidden", "8", "-q"])
    >>> run_compare(args, UI())  # doctest: +ELLIPSIS
      policy  test acc  test loss  train loss  skipped  flushed  swallowed  final scale ...memory
      fp32 ...
      fp16 ...  100.0 % ... MiB
    0
    """
    from floatlab.train.data.text import check_model_and_data

    names = [*args.policies, *args.preset]
    if not names:
        raise ValueError("compare needs at least one policy or --preset, e.g. fp32 fp16 bf16 mixed-fp16")
    if args.seeds is not None:
        return _compare_seeds(args, ui, names)
    configs = [tc.config_from_args(args, p) for p in names]
    for c in configs:
        c.make_policy()
    check_model_and_data(args.model, args.data)
    json_file = tc._json_file(args)
    plot = None if args.plot is None else figure_name(args.plot)
    check_outputs([("--plot", plot), ("--json", json_file)], suffixes={"--plot": FIGURE_SUFFIXES})
    backend = tc._backend(args)
    histories = []
    for c in configs:
        trainer = tc._fit(c, args.quiet, label=c.precision, backend=backend)
        tc._report_stop(trainer, c.precision)
        histories.append(trainer.history)
    title = f"{args.model} on {args.data}, seed {args.seed}"
    return _finish(ui, compare_view(histories, color=ui.color), plot, json_file, histories, title)


def _finish(ui: UI, view: View, plot: str | None, json_file: str | None, runs: Any, title: str) -> int:
    """Draw ``runs`` (histories, or run_seeds' dict) to ``plot`` when asked, then show ``view``
    (with the histories in its JSON); a figure that fails loses no run: the JSON is written first."""
    from floatlab.train import compare

    listed = runs if isinstance(runs, list) else [h for hs in runs.values() for h in hs]
    data = {**view.data, "histories": [h.to_dict() for h in listed]}
    if plot is not None:
        try:
            with atomic_output(plot) as tmp:
                compare(runs, tmp, title=title)
        except Exception:
            if json_file is not None:  # the runs are not lost with the figure
                tc._write_json(json_file, data)
            raise
        view = tc._with_curves(view, plot, ui.color)
    return tc._show(ui, view, json_file, {**view.data, "histories": data["histories"]})


def _compare_seeds(args: argparse.Namespace, ui: UI, names: list[str]) -> int:
    """``compare --seeds``: the grid of policies and seeds on the sweeps' executors, each policy's
    final validation as mean with its 95% interval and the paired gap to the first; the figure."""
    from floatlab.sweeps import parse_seeds
    from floatlab.text.progress import progress_wanted
    from floatlab.train import final_table, run_seeds
    from floatlab.train.data.text import check_model_and_data

    seeds = parse_seeds(args.seeds)
    base = tc.config_from_args(args, names[0])
    for p in names:
        tc.config_from_args(args, p).make_policy()
    check_model_and_data(args.model, args.data)
    json_file = tc._json_file(args)
    plot = None if args.plot is None else figure_name(args.plot)
    check_outputs([("--plot", plot), ("--json", json_file)], suffixes={"--plot": FIGURE_SUFFIXES})
    executor = "serial" if args.serial else "dask" if (args.dask or args.scheduler) else "process"
    config = {k: v for k, v in base.to_dict().items() if k not in ("precision", "seed")}
    runs = run_seeds(
        names, seeds, executor=executor, workers=args.workers, scheduler=args.scheduler,
        progress=None if not args.quiet and progress_wanted(None) else False, **config,
    )  # fmt: skip
    view = seeds_view(final_table(runs), color=ui.color)
    return _finish(ui, view, plot, json_file, runs, f"{args.model} on {args.data}, seeds {args.seeds}")


def register(subparsers: Subparsers) -> argparse.ArgumentParser:
    """Add ``compare`` to ``subparsers``; return its parser.

    >>> parser = argparse.ArgumentParser()
    >>> register(parser.add_subparsers()).prog.split()[-1]
    'compare'
    """
    names = ", ".join(tc.POLICY_NAMES)
    p = add_command(
        subparsers,
        "compare",
        help="train several precision policies with the same seed and compare them",
        description="Run each POLICY with the same model, data, seed and settings; print final accuracy, "
        "loss, skipped steps, flushed gradients and swallowed updates side by side; --plot draws the curves.",
        epilog="examples:\n"
        "  floatlab compare fp32 fp16 bf16 mixed-fp16 --plot curves.png\n"
        "  floatlab compare fp32 fp16 mixed-fp16 --data underflow --epochs 3\n"
        "  floatlab compare fp32 mixed-bf16 bf16 --seeds 0-2 --data digits --epochs 2 --plot seeds.png\n"
        "  floatlab compare fp32 mixed-fp16 bf16 fp16 --model transformer --data text --steps 500 "
        "--plot lm.png\n",
    )
    p.add_argument("policies", nargs="*", metavar="POLICY", help=f"{names}, or a framework preset")
    p.add_argument(
        "--preset",
        action="append",
        default=[],
        metavar="NAME",
        help="add a framework's recipe "
        "(floatlab presets lists them; repeat for several); the switches below override its settings",
    )
    p.add_argument("--plot", metavar="FILE.png", help="write the training curves to this image")
    seeds = p.add_argument_group("over seeds (means with their 95%% intervals, gaps to the first policy)")
    seeds.add_argument("--seeds", metavar="SEEDS", help="train each policy once per seed: 0-4, 0,2,5, ...")
    how = seeds.add_mutually_exclusive_group()
    how.add_argument("--serial", action="store_true", help="one run after another, in this process")
    how.add_argument("--dask", action="store_true", help="on a Dask LocalCluster (default: a process pool)")
    how.add_argument("--scheduler", metavar="ADDR", help="on the Dask cluster at ADDR (tcp://host:8786)")
    seeds.add_argument("--workers", type=int, metavar="N", help="processes of the pool (default: every core)")
    tc._run_options(p)
    tc._switch_options(p)
    tc._output_options(p)
    p.set_defaults(run=run_compare)
    return p
