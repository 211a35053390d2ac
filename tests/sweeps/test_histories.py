"""run_histories: each run's whole History back from any executor, in the grid's order, the same
bits as the trainer run by hand (the oracle); one ValueError naming the first failed run."""

from __future__ import annotations

from typing import Any

import pytest

from floatlab.sweeps import Grid, run_histories
from floatlab.train import TrainConfig, Trainer

FIXED: dict[str, Any] = {
    "data": "underflow",
    "hidden": (8,),
    "steps": 6,
    "eval_every": 3,
    "histogram_steps": (2,),
}
AXES: dict[str, Any] = {"precision": ["fp32", "fp8-delayed"], "seed": [0, 1]}


@pytest.fixture(scope="module")
def grid() -> Grid:
    return Grid(AXES, FIXED)


@pytest.fixture(scope="module")
def serial(grid: Grid) -> list[Any]:
    return run_histories(grid, executor="serial", progress=False)


def test_each_history_is_the_trainer_s_own(grid: Grid, serial: list[Any]) -> None:
    assert len(serial) == len(grid)
    for task, h in zip(grid.tasks, serial, strict=True):
        by_hand = Trainer.from_config(TrainConfig(**task.config.to_dict())).run()
        want = by_hand.to_dict()
        got = h.to_dict()
        assert got["steps"] == want["steps"]
        assert got["evals"] == want["evals"]
        assert got["histograms"] == want["histograms"]
        assert list(got["histograms"]) == ["2"]
        assert got["operands"] == want["operands"]
        assert (h.meta["config"]["precision"], h.meta["config"]["seed"]) == (
            task.config.precision,
            task.config.seed,
        )
    assert serial[2].operands
    assert not serial[0].operands


def test_the_pool_gives_the_same_bits(grid: Grid, serial: list[Any]) -> None:
    pooled = run_histories(grid, executor="process", workers=2, progress=False)
    assert [h.to_dict() for h in pooled] == [h.to_dict() for h in serial]


def test_a_failed_run_is_one_error_after_all_ran() -> None:
    seen: list[Any] = []
    g = Grid({"precision": ["fp32", "bf16"], "seed": [0, 1]}, {**FIXED, "backend": "nope"})
    with pytest.raises(
        ValueError, match=r"^run of precision fp32 seed 0 failed: .*nope.*\(4 of 4 runs failed"
    ) as e:
        run_histories(g, executor="serial", callback=seen.append, progress=False)
    assert "\n" not in str(e.value)
    assert seen[-1].done == 4  # every run was tried before the error


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"curves": False}, "run_histories option curves=False: expected only executor"),
        ({"retry_failed": True}, "run_histories option retry_failed=True"),
        ({"executor": "gpu"}, "sweep executor 'gpu': expected one of serial, process, dask"),
        ({"progress": "yes"}, "progress='yes': expected True, False or None"),
        ({"workers": 0}, "workers=0: expected a number of workers >= 1"),
    ],
)
def test_bad_options_are_one_line_before_any_run(grid: Grid, options: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        run_histories(grid, **options)
