"""Runs whose whole histories come back: :func:`run_histories`, a grid run on any executor (as
:func:`floatlab.sweeps.run.run_grid` runs it) with nothing written, for a caller that wants each
run's :class:`~floatlab.train.history.History` itself (``floatlab.train.run_seeds`` over a pool).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from floatlab._signature import spelled_out, unexpected_keyword
from floatlab.sweeps.grid import Grid, Task
from floatlab.sweeps.run import (
    Outcome,
    RunOptions,
    _checked,
    _dispatch,
    _run_grid,
    _shared_data,
    _start_method,
    _Watch,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from floatlab.train.history import History

__all__ = ["run_histories"]

#: the options that mean nothing where no table is kept
_TABLE_ONLY = ("retry_failed", "curves")


@spelled_out(_run_grid, [n for n in RunOptions.__annotations__ if n not in _TABLE_ONLY])
def run_histories(grid: Grid, **options: Unpack[RunOptions]) -> list[History]:
    """Run every task of ``grid`` on the chosen executor (the options of :func:`run_grid`; nothing is
    written) and return each run's whole :class:`~floatlab.train.history.History` (rebuilt from
    what the run sent: its steps, evaluations, gradient histograms and fp8/MX operand records), in
    the grid's order. The same bits on every executor and any number of workers. When a run
    failed, one ValueError after every run has ended, naming the first failed run's precision, seed
    and reason. A run that stopped early (its loss turned inf or NaN) is not a failure: its history
    says why (``meta["stopped"]``).

    >>> g = Grid({"precision": ["fp32", "bf16"], "seed": [0, 1]}, {"data": "underflow", "hidden": (4,),
    ...          "steps": 3})
    >>> hs = run_histories(g, executor="serial")
    >>> [(h.meta["config"]["precision"], h.meta["config"]["seed"], h.n_steps) for h in hs]
    [('fp32', 0, 3), ('fp32', 1, 3), ('bf16', 0, 3), ('bf16', 1, 3)]
    >>> run_histories(g, curves=True)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: run_histories option curves=True: expected only executor, workers, scheduler, ...
    """
    from floatlab.train.history import History

    given: dict[str, Any] = dict(options)
    unknown = [k for k in given if k not in RunOptions.__annotations__]
    if unknown:  # (the options are read one by one below: a misspelt one would pass unseen)
        raise unexpected_keyword(
            TypeError(f"run_histories() got an unexpected keyword argument {unknown[0]!r}")
        ) from None
    for k in _TABLE_ONLY:
        if k in given:
            allowed = ", ".join(n for n in RunOptions.__annotations__ if n not in _TABLE_ONLY)
            raise ValueError(
                f"run_histories option {k}={given[k]!r}: expected only {allowed} (nothing is written)"
            )
    executor = _checked(
        options.get("executor", "process"),
        options.get("scheduler"),
        options.get("threads", 1),
        options.get("workers"),
        options.get("timeout", 30.0),
        options.get("progress"),
    )
    todo = list(grid.tasks)
    workers = options.get("workers")
    n = max(1, min(workers or os.cpu_count() or 1, max(len(todo), 1)))
    context = _start_method() if executor == "process" and n > 1 else None
    data = _shared_data(todo)
    watch = _Watch(len(todo), 0, options.get("callback"), options.get("progress"))
    got: dict[str, Outcome] = {}

    def finished(task: Task, outcome: Outcome, running: int) -> None:
        got[task.run_id] = outcome
        watch.done(task, outcome[0][0]["status"], running)

    try:
        watch.start()
        _dispatch(
            todo, executor, n, threads=options.get("threads", 1), send="history",
            scheduler=options.get("scheduler"), processes=options.get("processes", True),
            timeout=options.get("timeout", 30.0), context=context, data=data, finished=finished,
        )  # fmt: skip
    finally:
        watch.close()
    failed = [t for t in todo if got[t.run_id][1] is None]
    if failed:
        t = failed[0]
        reason = got[t.run_id][0][0]["reason"]
        raise ValueError(
            f"run of precision {t.config.precision} seed {t.config.seed} failed: {reason} "
            f"({len(failed)} of {len(todo)} runs failed; expected every run to finish)"
        )
    return [History.from_dict(got[t.run_id][1]) for t in todo]
