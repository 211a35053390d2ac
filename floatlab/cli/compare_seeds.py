"""``floatlab compare --seeds``: the policies over seeds, on the sweeps' executors.

One implementation with the Python API: :func:`floatlab.train.run_seeds` runs the grid of policies
and seeds (a process pool by default, ``--serial``, ``--dask`` or ``--scheduler``),
:func:`floatlab.train.final_table` gives each policy's final validation as mean with its 95%
interval and the paired gap to the first policy, and :func:`floatlab.train.compare` draws the figure.
"""

from __future__ import annotations

import argparse

from floatlab.cli._common import UI
from floatlab.cli.train_cmds import _json_file, _show, _with_curves, _write_json, config_from_args
from floatlab.cli.train_views import seeds_view
from floatlab.io import FIGURE_SUFFIXES, atomic_output, check_outputs, figure_name

__all__ = ["compare_seeds"]


def compare_seeds(args: argparse.Namespace, ui: UI, names: list[str]) -> int:
    """``compare --seeds``: the grid of policies and seeds on the sweeps' executors, each policy's
    final validation as mean with its 95% interval and the paired gap to the first; the figure."""
    from floatlab.sweeps import parse_seeds
    from floatlab.text.progress import progress_wanted
    from floatlab.train import compare, final_table, run_seeds
    from floatlab.train.data.text import check_model_and_data

    seeds = parse_seeds(args.seeds)
    base = config_from_args(args, names[0])
    for p in names:
        config_from_args(args, p).make_policy()
    check_model_and_data(args.model, args.data)
    json_file = _json_file(args)
    plot = None if args.plot is None else figure_name(args.plot)
    check_outputs([("--plot", plot), ("--json", json_file)], suffixes={"--plot": FIGURE_SUFFIXES})
    executor = "serial" if args.serial else "dask" if (args.dask or args.scheduler) else "process"
    config = {k: v for k, v in base.to_dict().items() if k not in ("precision", "seed")}
    runs = run_seeds(
        names, seeds, executor=executor, workers=args.workers, scheduler=args.scheduler,
        progress=None if not args.quiet and progress_wanted(None) else False, **config,
    )  # fmt: skip
    view = seeds_view(final_table(runs), color=ui.color)
    histories = [h.to_dict() for hs in runs.values() for h in hs]
    if plot is not None:
        try:
            with atomic_output(plot) as tmp:
                compare(runs, tmp, title=f"{args.model} on {args.data}, seeds {args.seeds}")
        except Exception:
            if json_file is not None:  # the runs are not lost with the figure
                _write_json(json_file, {**view.data, "histories": histories})
            raise
        view = _with_curves(view, plot, ui.color)
    return _show(ui, view, json_file, {**view.data, "histories": histories})
