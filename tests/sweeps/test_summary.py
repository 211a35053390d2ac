"""summarize and plot_curves with an explicit by=: the groups are the configuration columns (never a
column a user added), the means are pandas' groupby means and the bands Student's t from SciPy."""

from __future__ import annotations

import math
from typing import Any

import matplotlib
import numpy as np
import pandas as pd
import pytest
from scipy import stats  # type: ignore[import-untyped,unused-ignore]

from floatlab.sweeps import plot_curves, summarize, sweep

FIXED: dict[str, Any] = {"data": "underflow", "hidden": (8,), "steps": 8, "eval_every": 4}
AXES: dict[str, Any] = {"precision": ["fp32", "mixed-fp16"], "seed": [0, 1, 2]}


@pytest.fixture(scope="module")
def df() -> pd.DataFrame:
    return sweep(AXES, FIXED, executor="serial", progress=False)


def _t_band(values: np.ndarray[Any, Any]) -> tuple[float, float, float]:
    m = float(np.mean(values))
    half = stats.t.ppf(0.975, len(values) - 1) * np.std(values, ddof=1) / math.sqrt(len(values))
    return m, m - half, m + half


def test_a_column_a_user_adds_is_no_grouping_key(df: pd.DataFrame) -> None:
    mine = df.assign(note=df["seed"].astype(str))  # differs between runs, but is no configuration
    s = summarize(mine, metrics=("test_loss",))
    assert s["precision"].tolist() == ["fp32", "mixed-fp16"]
    assert "note" not in s.columns
    assert s["runs"].tolist() == [3, 3]
    by_note = summarize(mine, metrics=("test_loss",), by="note")  # unless asked for
    assert by_note["note"].tolist() == ["0", "1", "2"]
    assert by_note["runs"].tolist() == [2, 2, 2]


def test_summary_means_and_intervals(df: pd.DataFrame) -> None:
    s = summarize(df, metrics=("test_loss",), by=["precision"])
    last = df.groupby("run_id", sort=False).tail(1)
    for _, row in s.iterrows():
        values = last.loc[last["precision"] == row["precision"], "test_loss"].to_numpy()
        m, lo, hi = _t_band(values)
        assert row["test_loss_mean"] == pytest.approx(m, rel=1e-12)
        assert row["test_loss_low"] == pytest.approx(lo, rel=1e-9)
        assert row["test_loss_high"] == pytest.approx(hi, rel=1e-9)


@pytest.mark.parametrize("metric", ["loss", "flushed", "scale", "test_loss", "test_accuracy"])
def test_the_curves_are_the_means_over_seeds_with_t_bands(df: pd.DataFrame, metric: str) -> None:
    backend = matplotlib.get_backend()
    fig = plot_curves(df, metric=metric)
    assert matplotlib.get_backend() == backend  # no backend chosen for the notebook
    (ax,) = fig.axes
    source = df.attrs["curves"] if metric in ("loss", "flushed", "scale") else df
    factor = 100.0 if metric in ("flushed", "test_accuracy") else 1.0
    lines = ax.get_lines()
    assert [ln.get_label() for ln in lines] == ["fp32", "mixed-fp16"]
    for line, band, precision in zip(lines, ax.collections, ["fp32", "mixed-fp16"], strict=True):
        rows = source[source["precision"] == precision]
        means = rows.groupby("step")[metric].mean()
        np.testing.assert_allclose(line.get_xdata(), means.index.to_numpy(dtype=float))
        np.testing.assert_allclose(line.get_ydata(), means.to_numpy() * factor, rtol=1e-12)
        verts = band.get_paths()[0].vertices
        for step, at in rows.groupby("step"):
            _, lo, hi = _t_band(at[metric].to_numpy(dtype=float))
            ys = verts[verts[:, 0] == step, 1]
            if math.isfinite(lo):
                assert np.isclose(ys, lo * factor, rtol=1e-9, atol=1e-12).any()
                assert np.isclose(ys, hi * factor, rtol=1e-9, atol=1e-12).any()
    label = ax.get_ylabel()
    if metric in ("flushed", "test_accuracy"):
        assert "%" in label
    if metric in ("loss", "test_loss"):
        assert "nats" in label
    if metric == "scale":
        assert ax.get_yscale() == "log"
    assert ax.get_xlabel() == "training step"


def test_a_curves_table_given_directly_and_grouped_by_seed(df: pd.DataFrame) -> None:
    fig = plot_curves(df.attrs["curves"], metric="loss", by="seed")
    assert [ln.get_label() for ln in fig.axes[0].get_lines()] == ["0", "1", "2"]
    fig = plot_curves(df, metric="loss", by=["precision", "seed"])
    assert len(fig.axes[0].get_lines()) == 6
    mine = df.assign(note=df["precision"].str.upper())  # a user's column reaches the curves by run
    fig = plot_curves(mine, metric="loss", by="note")
    assert [ln.get_label() for ln in fig.axes[0].get_lines()] == ["FP32", "MIXED-FP16"]


def test_the_figure_is_written(df: pd.DataFrame, tmp_path: Any) -> None:
    out = tmp_path / "loss.png"
    plot_curves(df, out, metric="loss")
    assert out.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (
            lambda d: plot_curves(d, metric="loss", by="precisoin"),
            r"^by='precisoin' names no column of the sweep",
        ),
        (lambda d: summarize(d, by=["precision", "nope"]), r"^by='nope' names no column of the sweep table"),
        (
            lambda d: summarize(d, by=3),  # type: ignore[arg-type]
            r"^by=3: expected a column name or a list",
        ),
        (
            lambda d: plot_curves(d, metric="bits"),
            r"^curve metric 'bits': expected one of test_loss, .* \(per step\)",
        ),
        (lambda d: plot_curves(d.iloc[:0]), r"^empty sweep table: expected at least one run"),
        (lambda d: summarize(d.iloc[:0]), r"^empty sweep table: expected at least one run"),
        (
            lambda d: plot_curves(d.attrs["curves"], metric="test_loss"),
            r"^curve metric 'test_loss' is per evaluation",
        ),
        (lambda d: plot_curves(d, level=95), r"^level=95: expected a confidence level between 0 and 1"),
    ],
)
def test_bad_input_is_one_line(df: pd.DataFrame, call: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match) as e:
        call(df)
    assert "\n" not in str(e.value)


def test_without_curves_a_per_step_metric_says_where_they_come_from() -> None:
    df = sweep({"seed": [0]}, FIXED, executor="serial", curves=False, progress=False)
    with pytest.raises(
        ValueError, match=r"^curve metric 'scale' is per step: expected a sweep's table with its curves"
    ):
        plot_curves(df, metric="scale")


def test_a_summary_s_own_configuration_columns(df: pd.DataFrame) -> None:
    from floatlab.sweeps import config_columns

    s = summarize(df, by=["precision", "lr"])
    assert config_columns(s) == ["precision"]  # lr is a column of the summary, the same everywhere
    assert "lr" in config_columns(s, varying=False)
    assert "config_lr" in config_columns(df.attrs["curves"], varying=False)
    assert "lr" not in config_columns(df.attrs["curves"], varying=False)  # there, each step's lr
