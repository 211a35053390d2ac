"""A sweep's per-step curves: each run's rows are its History's own columns (the oracle: the
trainer run by hand), the same on every executor, written beside the table and read back equal, and
a run whose curves were cut short runs again."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from floatlab.sweeps import CONFIG_COLUMNS, SweepEvent, read_curves, read_table, sweep, write_table
from floatlab.sweeps.curves import config_name
from floatlab.train import TrainConfig, Trainer
from floatlab.train.history import STEP_FIELDS

FIXED: dict[str, Any] = {"data": "underflow", "hidden": (8,), "steps": 6, "eval_every": 3}
AXES: dict[str, Any] = {"precision": ["fp32", "mixed-fp16"], "seed": [0, 1]}


@pytest.fixture(scope="module")
def serial() -> pd.DataFrame:
    return sweep(AXES, FIXED, executor="serial", progress=False)


def test_each_run_s_curves_are_its_history(serial: pd.DataFrame) -> None:
    curves = serial.attrs["curves"]
    config = [c for c in CONFIG_COLUMNS if c in serial.columns]
    assert list(curves.columns) == ["run_id", *[config_name(c) for c in config], *STEP_FIELDS]
    assert "config_lr" in curves.columns  # the configured lr, beside each step's
    assert len(curves) == 4 * 6
    for run_id, rows in serial.groupby("run_id", sort=False):
        mine = curves[curves["run_id"] == run_id]
        config = rows.iloc[0]
        h = Trainer.from_config(
            TrainConfig(precision=config["precision"], seed=int(config["seed"]), **FIXED)
        ).run()
        for k in STEP_FIELDS:
            got = mine[k].astype(object if k == "fault" else None).to_numpy()
            want = np.asarray(h.steps[k], dtype=object) if k == "fault" else h.column(k)
            np.testing.assert_array_equal(got, want, err_msg=k)
        for c in CONFIG_COLUMNS:  # the table's configuration, on every step
            if c in serial.columns:
                for v in mine[config_name(c)].astype(object):
                    assert (pd.isna(v) and pd.isna(config[c])) or v == config[c], c


def test_the_curves_are_compact(serial: pd.DataFrame) -> None:
    curves = serial.attrs["curves"]
    for c in ("run_id", *[config_name(c) for c in CONFIG_COLUMNS if c in serial.columns], "fault"):
        assert isinstance(curves[c].dtype, pd.CategoricalDtype), c
    assert curves["step"].dtype == np.int64
    assert curves["skipped"].dtype == bool
    assert all(curves[k].dtype == np.float64 for k in ("loss", "scale", "flushed", "lr", "grad_norm"))
    # a few bytes a configuration column and 8 a number: well under 200 bytes a row
    assert curves.memory_usage(deep=True).sum() / len(curves) < 200


def test_a_table_derived_from_the_sweep_shares_its_curves(serial: pd.DataFrame) -> None:
    part = serial[serial["precision"] == "fp32"]
    assert part.attrs["curves"] is serial.attrs["curves"]  # shared, not copied at every step
    grouped = serial.attrs["curves"].groupby(["precision", "seed"], observed=True)["loss"].mean()
    assert len(grouped) == 4  # a user groups the curves by the configuration directly


def test_serial_pool_and_cluster_give_the_same_curves(serial: pd.DataFrame) -> None:
    pool = sweep(AXES, FIXED, executor="process", workers=2, progress=False)
    pd.testing.assert_frame_equal(serial.attrs["curves"], pool.attrs["curves"])
    cluster = sweep(AXES, FIXED, executor="dask", workers=2, processes=False, progress=False)
    pd.testing.assert_frame_equal(serial.attrs["curves"], cluster.attrs["curves"])


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_the_curves_file_reads_back_equal(serial: pd.DataFrame, tmp_path: Path, suffix: str) -> None:
    out = tmp_path / f"runs{suffix}"
    df = sweep(AXES, FIXED, executor="serial", out=out, progress=False)
    assert (tmp_path / f"runs.curves{suffix}").exists()
    pd.testing.assert_frame_equal(df.attrs["curves"], serial.attrs["curves"])
    pd.testing.assert_frame_equal(read_curves(out), serial.attrs["curves"])
    pd.testing.assert_frame_equal(read_curves(tmp_path / f"runs.curves{suffix}"), serial.attrs["curves"])
    pd.testing.assert_frame_equal(read_table(out).attrs["curves"], serial.attrs["curves"])


def test_a_run_whose_curves_were_cut_short_runs_again(serial: pd.DataFrame, tmp_path: Path) -> None:
    out = tmp_path / "runs.csv"
    sweep(AXES, FIXED, executor="serial", out=out, progress=False)
    curves = tmp_path / "runs.curves.csv"
    text = curves.read_bytes()
    curves.write_bytes(text[:-5])  # killed while writing the last run's last row
    seen: list[SweepEvent] = []
    again = sweep(AXES, FIXED, executor="serial", out=out, callback=seen.append, progress=False)
    assert (seen[0].total, seen[0].skipped) == (1, 3)
    assert seen[-1].task is not None
    assert seen[-1].task.run_id == serial["run_id"].iloc[-1]
    pd.testing.assert_frame_equal(again.attrs["curves"], serial.attrs["curves"])
    assert curves.read_bytes() == text
    os.remove(curves)  # a table without its curves: every run runs again to have them
    seen.clear()
    sweep(AXES, FIXED, executor="serial", out=out, callback=seen.append, progress=False)
    assert seen[0].total == 4
    pd.testing.assert_frame_equal(read_curves(out), serial.attrs["curves"])


def test_without_curves_nothing_is_kept_or_written(tmp_path: Path) -> None:
    out = tmp_path / "runs.parquet"
    df = sweep({"seed": [0]}, FIXED, executor="serial", out=out, curves=False, progress=False)
    assert "curves" not in df.attrs
    assert not (tmp_path / "runs.curves.parquet").exists()
    assert "curves" not in read_table(out).attrs
    with pytest.raises(ValueError, match=r"runs\.curves\.parquet"):
        read_curves(out)
    with pytest.raises(ValueError, match=r"^curves='yes': expected True"):
        sweep({"seed": [0]}, FIXED, executor="serial", curves="yes")  # type: ignore[arg-type]


def test_the_progress_bar_counts_the_runs(capsys: pytest.CaptureFixture[str]) -> None:
    sweep({"seed": [0, 1]}, FIXED, executor="serial", progress=True)
    err = capsys.readouterr().err
    assert "sweep" in err
    assert "2/2" in err
    assert "running 0, failed 0" in err


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_a_sweep_s_table_written_again_keeps_its_curves(
    serial: pd.DataFrame, tmp_path: Path, suffix: str
) -> None:
    out = tmp_path / f"copy{suffix}"
    write_table(serial, out)  # (pandas' to_parquet cannot: it writes attrs as JSON)
    back = read_table(out)
    pd.testing.assert_frame_equal(back, serial)
    pd.testing.assert_frame_equal(back.attrs["curves"], serial.attrs["curves"])
