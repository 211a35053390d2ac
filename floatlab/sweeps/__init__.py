"""Sweeps: a grid of runs (policies and presets x seeds x loss scales x any trainer option), run one
after another, in a local process pool or on a Dask cluster, kept in one tidy table (Parquet or
CSV) written as runs finish, and summarised per configuration with 95% confidence intervals over
the seeds.

The package: ``grid`` (the runs and their keys), ``run`` (the executors), ``table`` (the rows and
their files), ``summary`` (means, intervals, curves with bands). It needs the ``scale`` extra
(pandas, pyarrow; dask[distributed] for a cluster): ``import floatlab`` loads none of it.

>>> df = sweep({"precision": ["fp32", "bf16"], "seed": [0, 1]}, {"data": "underflow", "hidden": (4,),
...            "steps": 3}, executor="serial")
>>> df[["precision", "seed", "status", "step"]].values.tolist()
[['fp32', 0, 'ok', 3], ['fp32', 1, 'ok', 3], ['bf16', 0, 'ok', 3], ['bf16', 1, 'ok', 3]]
>>> summarize(df)[["precision", "runs", "ok"]].values.tolist()
[['fp32', 2, 2], ['bf16', 2, 2]]
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from floatlab._signature import passing_on
from floatlab.sweeps.curves import curves_frame
from floatlab.sweeps.grid import CONFIG_COLUMNS, Grid, Task, load_grid_file, parse_seeds, sweep_keys
from floatlab.sweeps.histories import run_histories
from floatlab.sweeps.run import (
    EXECUTORS,
    RunOptions,
    SweepEvent,
    _run_grid,
    execute,
    run_grid,
    run_options_signature,
)
from floatlab.sweeps.summary import (
    EVAL_METRICS,
    METRICS,
    STEP_METRICS,
    config_columns,
    final_rows,
    plot_curves,
    summarize,
)
from floatlab.sweeps.table import TABLE_SUFFIXES, read_curves, read_table, to_frame, write_table

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "CONFIG_COLUMNS",
    "EVAL_METRICS",
    "EXECUTORS",
    "METRICS",
    "STEP_METRICS",
    "TABLE_SUFFIXES",
    "Grid",
    "RunOptions",
    "SweepEvent",
    "Task",
    "config_columns",
    "execute",
    "final_rows",
    "load_grid_file",
    "parse_seeds",
    "plot_curves",
    "read_curves",
    "read_table",
    "run_grid",
    "run_histories",
    "summarize",
    "sweep",
    "sweep_keys",
    "to_frame",
    "write_table",
]


@run_options_signature
def sweep(
    grid: Mapping[str, Sequence[Any]] | Grid | str | os.PathLike[str],
    fixed: Mapping[str, Any] | None = None,
    *,
    out: str | os.PathLike[str] | None = None,
    **options: Unpack[RunOptions],
) -> Any:
    """Run every combination of ``grid``'s values (a mapping of axes, a :class:`Grid`, or a TOML or
    YAML file with the tables ``grid`` and ``fixed``) with the settings ``fixed``; return the tidy
    table as a pandas DataFrame (one row per run and evaluation), each run's per-step history in
    ``df.attrs["curves"]`` (one row per run and step, with the run's key and configuration columns;
    see :mod:`floatlab.sweeps.curves`; not kept with ``curves=False``). With ``out`` (.parquet or
    .csv) the table is written after every run, the curves beside it (``<stem>.curves.parquet``),
    and the runs already there are skipped. ``progress``: a bar over the runs (None: in a notebook
    or a terminal). ``executor``:
    "serial", "process" (a local pool of ``workers`` processes, this one among them; default every
    core) or "dask" (a ``LocalCluster``, or the cluster at ``scheduler``). See
    :func:`floatlab.sweeps.run.run_grid`.

    >>> df = sweep({"seed": [0, 1]}, {"precision": "bf16", "data": "underflow", "hidden": (4,), "steps": 2},
    ...            executor="serial")
    >>> df[["precision", "seed", "status", "step"]].values.tolist()
    [['bf16', 0, 'ok', 2], ['bf16', 1, 'ok', 2]]
    >>> c = df.attrs["curves"]   # every step of every run
    >>> c["seed"].tolist(), c["step"].tolist()
    ([0, 0, 1, 1], [1, 2, 1, 2])
    """
    if isinstance(grid, (str, os.PathLike)):
        axes, from_file = load_grid_file(grid)
        grid = Grid(axes, {**from_file, **(fixed or {})})
    elif not isinstance(grid, Grid):
        grid = Grid(grid, fixed)
    elif fixed:
        raise ValueError("sweep of a Grid with fixed settings: expected the settings inside the Grid")
    path = None if out is None else os.fspath(out)
    rows, curves = passing_on(_run_grid, grid, path, **options)
    in_grid = {t.run_id for t in grid.tasks}
    df = to_frame([r for r in rows if r["run_id"] in in_grid])
    if curves is not None:
        keys = list(dict.fromkeys(df["run_id"])) if len(df) else []
        configs = df.drop_duplicates("run_id")[["run_id", *[c for c in CONFIG_COLUMNS if c in df.columns]]]
        df.attrs["curves"] = curves_frame([(k, curves.runs[k]) for k in keys], configs)
    return df
