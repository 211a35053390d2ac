"""The order in which a pool hands out a sweep's runs: the longest first, learnt as the sweep goes.

A pool of a few workers that takes the runs in the grid's order can end with one worker on a long
run started last while the others idle: 9 runs on 2 workers, the bf16 runs (twice an fp32 run's
time) last in the grid, lose a tenth of the sweep that way. The runs of one configuration over
its seeds cost about the same, so :class:`TaskQueue` first starts one run of each configuration
(in the grid's order), then hands out the rest longest first by the time the first of each took
(a configuration whose first run is still going counts as the longest). The order changes nothing
in the results: each run is seeded, and the table is kept in the grid's order.

>>> from floatlab.sweeps.grid import Grid
>>> g = Grid({"precision": ["fp32", "bf16"], "seed": [0, 1, 2]}, {"data": "underflow", "steps": 2})
>>> q = TaskQueue(g.tasks)
>>> first = [q.take(), q.take()]
>>> [(t.config.precision, t.config.seed) for t in first]   # one of each configuration
[('fp32', 0), ('bf16', 0)]
>>> q.done(first[0], seconds=1.0); q.done(first[1], seconds=2.0)
>>> [(t.config.precision, t.config.seed) for t in iter(q.take, None)]   # then the longest first
[('bf16', 1), ('bf16', 2), ('fp32', 1), ('fp32', 2)]
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterable

from floatlab.sweeps.grid import Task

__all__ = ["TaskQueue"]


def _family(task: Task) -> str:
    """The task's configuration but its seed (and where it runs): the runs that cost alike."""
    return json.dumps(
        {**task.config.to_dict(), "seed": None, "backend": task.backend}, sort_keys=True, default=str
    )


class TaskQueue:
    """The runs still to hand out (see the module's note); safe to use from several threads.

    >>> q = TaskQueue([])
    >>> q.take() is None, len(q)
    (True, 0)
    """

    def __init__(self, tasks: Iterable[Task]) -> None:
        self._left = list(tasks)
        self._family = {t.run_id: _family(t) for t in self._left}
        self._cost: dict[str, float] = {}
        self._tried: set[str] = set()
        self._started: dict[str, float] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._left)

    def take(self) -> Task | None:
        """The next run to start (None when none is left)."""
        with self._lock:
            if not self._left:
                return None
            fam = [self._family[t.run_id] for t in self._left]
            new = next((i for i, f in enumerate(fam) if f not in self._tried), None)
            if new is None:  # the longest known first; ties (and the unknown) in the grid's order
                new = max(range(len(fam)), key=lambda i: (self._cost.get(fam[i], math.inf), -i))
            task = self._left.pop(new)
            self._tried.add(fam[new])
            self._started[task.run_id] = time.monotonic()
            return task

    def put_back(self, task: Task) -> None:
        """Hand ``task`` out next (it could not start)."""
        with self._lock:
            self._started.pop(task.run_id, None)
            self._left.insert(0, task)

    def done(self, task: Task, seconds: float | None = None) -> None:
        """``task`` has ended, after ``seconds`` (default: since it was taken); the first run of a
        configuration to end tells what its others cost."""
        with self._lock:
            start = self._started.pop(task.run_id, None)
            if seconds is None:
                seconds = None if start is None else time.monotonic() - start
            if seconds is not None:
                self._cost.setdefault(self._family.get(task.run_id, _family(task)), seconds)
