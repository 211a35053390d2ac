"""The pool's order: one run of each configuration first, then the longest first as they told; a
configuration still running counts as the longest; a run put back goes next; every run once."""

from __future__ import annotations

from typing import Any

from floatlab.sweeps import Grid
from floatlab.sweeps.order import TaskQueue

FIXED: dict[str, Any] = {"data": "underflow", "steps": 2}


def _names(tasks: list[Any]) -> list[tuple[str, int]]:
    return [(t.config.precision, t.config.seed) for t in tasks]


def test_the_longest_go_first_and_the_unknown_count_as_longest() -> None:
    g = Grid({"precision": ["fp32", "mixed-bf16", "bf16"], "seed": [0, 1, 2]}, FIXED)
    q = TaskQueue(g.tasks)
    first = [t for t in (q.take(), q.take(), q.take()) if t is not None]
    assert _names(first) == [("fp32", 0), ("mixed-bf16", 0), ("bf16", 0)]
    q.done(first[0], seconds=1.0)
    q.done(first[1], seconds=3.0)  # bf16's first run still going: it may be the longest
    nxt = q.take()
    assert nxt is not None
    assert _names([nxt]) == [("bf16", 1)]
    q.put_back(nxt)  # could not start: it goes next
    assert q.take() is nxt
    q.done(first[2], seconds=2.0)
    rest = list(iter(q.take, None))
    assert _names(rest) == [("mixed-bf16", 1), ("mixed-bf16", 2), ("bf16", 2), ("fp32", 1), ("fp32", 2)]
    assert len(q) == 0
    assert sorted(t.index for t in [*first, nxt, *rest]) == list(range(9))  # every run once
