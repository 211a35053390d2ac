"""Comparing policies over seeds: the figure's panels, units, bands and legend, matplotlib's backend
left alone, the final table against an independent Student-t interval, and bad input."""

from __future__ import annotations

import math
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

import floatlab.train as ft
from floatlab.train.analysis.runs import final_table, group_runs
from floatlab.train.history import History

pytest.importorskip("pandas")


@pytest.fixture(scope="module")
def runs() -> dict[str, list[History]]:
    return ft.run_seeds(
        ["fp32", "bf16", "mixed-fp16"], [0, 1, 2], model="mlp", data="digits", hidden=(16,), steps=40,
        eval_every=10, progress=False, overrides={},
    )  # fmt: skip


def _fake(label: str, seed: int, model: str = "mlp", *, acc: float = 0.5, skipped: int = -1) -> History:
    h = History(label, {"config": {"seed": seed, "model": model}})
    for step in range(1, 6):
        h.log_step(step=step, epoch=0, loss=1.0 / step + 0.01 * seed, accuracy=0.5, scale=2.0**step,
                   skipped=step == skipped, flushed=0.001 * step, swallowed=0.0, lr=0.1,
                   grad_norm=None)  # fmt: skip
    h.log_eval(epoch=1, step=5, train_loss=0.3, test_loss=0.4 + 0.1 * seed, test_accuracy=acc)
    return h


def test_the_figure_has_its_panels_units_bands_and_one_legend_entry_per_policy(runs: Any) -> None:
    fig = ft.compare(runs)
    axes = fig.axes
    titles = [ax.get_title() for ax in axes[:5]]
    assert titles == [
        "training loss",
        "test accuracy",
        "loss scale",
        "gradients flushed to zero",
        "updates swallowed",
    ]
    assert axes[0].get_ylabel().startswith("loss (nats")
    assert axes[1].get_ylabel() == "test accuracy (%)"
    assert axes[2].get_yscale() == "log"
    assert axes[3].get_yscale() == axes[4].get_yscale() == "symlog"
    assert "%" in axes[3].get_ylabel()
    assert "%" in axes[4].get_ylabel()
    legend = axes[5].get_legend()
    assert legend is not None
    assert [t.get_text() for t in legend.get_texts()] == [f"{p} (3 seeds)" for p in runs]
    # a 95% band (a filled polygon) per policy in the loss, validation and share panels
    for ax in (axes[0], axes[1], axes[3], axes[4]):
        assert len(ax.collections) == len(runs)
    # one colour per policy in every panel
    colors = {line.get_color() for line in axes[0].get_lines()}
    assert len(colors) == len(runs)


def test_the_band_is_the_student_t_interval_over_the_seeds(runs: Any) -> None:
    from scipy.stats import t as student_t  # type: ignore[import-untyped,unused-ignore]

    fig = ft.compare(runs)
    polygon = fig.axes[1].collections[0]  # fp32's validation band
    acc = np.array([100 * h.eval_column("test_accuracy") for h in runs["fp32"]])
    half = student_t.ppf(0.975, 2) * acc.std(axis=0, ddof=1) / math.sqrt(3)
    ys = np.asarray(polygon.get_paths()[0].vertices)[:, 1]
    want = np.r_[acc.mean(0) - half, acc.mean(0) + half]
    assert np.allclose(np.unique(np.round(ys, 9)), np.unique(np.round(want, 9)))


def test_skipped_steps_are_marked_on_the_scale_panel() -> None:
    fig = ft.compare([_fake("fp16", 0, skipped=3), _fake("fp16", 1)])
    marks = [line for line in fig.axes[2].get_lines() if line.get_marker() == "x"]
    assert len(marks) == 1
    assert np.asarray(marks[0].get_xdata()).tolist() == [3.0]


def test_matplotlibs_backend_is_left_alone_and_the_figure_displays_itself(tmp_path: Any) -> None:
    code = (
        "import matplotlib; matplotlib.use('svg'); import floatlab.train as ft\n"
        "from floatlab.train.history import History\n"
        "h = History('a'); h.log_step(step=1, epoch=0, loss=1.0, accuracy=0.5, scale=1.0, skipped=False,"
        " flushed=0.0, swallowed=0.0, lr=0.1, grad_norm=None)\n"
        f"fig = ft.compare([h], {str(tmp_path / 'c.png')!r})\n"
        "png = fig._repr_png_()\n"
        "import sys\n"
        "print(matplotlib.get_backend(), png[:4] == b'\\x89PNG', 'matplotlib.pyplot' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["svg", "True", "False"]
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"


def test_a_character_model_is_drawn_in_bits_per_character() -> None:
    h = ft.train("transformer", "text", "bf16", steps=4, layers=1, d_model=16, context=8, batch_size=4,
                 eval_every=2, progress=False)  # fmt: skip
    fig = ft.compare([h])
    assert "bits/char" in fig.axes[0].get_ylabel()
    assert fig.axes[1].get_ylabel() == "validation loss (bits/char, fp32)"
    line = fig.axes[1].get_lines()[0]
    assert np.allclose(line.get_ydata(), h.eval_column("test_loss") / math.log(2))


def test_the_final_table_against_an_independent_interval() -> None:
    from scipy.stats import t as student_t  # type: ignore[import-untyped,unused-ignore]

    a = [_fake("a", s, acc=v) for s, v in enumerate([0.91, 0.93, 0.96])]
    b = [_fake("b", s, acc=v) for s, v in enumerate([0.90, 0.90, 0.94])]
    t = final_table({"a": a, "b": b})
    va, vb = np.array([0.91, 0.93, 0.96]), np.array([0.90, 0.90, 0.94])
    half = student_t.ppf(0.975, 2) * va.std(ddof=1) / math.sqrt(3)
    assert t["mean"].iloc[0] == pytest.approx(va.mean())
    assert (t["low"].iloc[0], t["high"].iloc[0]) == pytest.approx((va.mean() - half, va.mean() + half))
    d = vb - va
    dh = student_t.ppf(0.975, 2) * d.std(ddof=1) / math.sqrt(3)
    assert (t["gap"].iloc[1], t["gap_low"].iloc[1], t["gap_high"].iloc[1]) == pytest.approx(
        (d.mean(), d.mean() - dh, d.mean() + dh)
    )


def test_run_seeds_on_the_pool_gives_the_same_bits_as_in_this_process() -> None:
    kw: dict[str, Any] = {"model": "mlp", "data": "underflow", "hidden": (8,), "steps": 6, "progress": False}
    here = ft.run_seeds(["fp32", "bf16"], [0, 1], **kw)
    pool = ft.run_seeds(["fp32", "bf16"], [0, 1], executor="process", workers=2, **kw)
    for p in here:
        for x, y in zip(here[p], pool[p], strict=True):
            assert np.array_equal(x.column("loss"), y.column("loss"))
            assert x.evals == y.evals


@pytest.mark.parametrize(
    ("runs_", "kw", "message"),
    [
        ([], {}, "no runs to compare"),
        ({"a": []}, {}, "no runs to compare"),
        ([_fake("a", 0), _fake("b", 0, model="convnet")], {}, r"runs of different models \(convnet, mlp\)"),
        ({"a": [_fake("a", 1), _fake("a", 1)]}, {}, "seed 1 appears twice for 'a'"),
        ([_fake("a", 0)], {"by": "precision"}, "by='precision': expected by= with a sweep's table only"),
        ([_fake("a", 0)], {"smooth": 0}, "smooth=0: expected a number of steps >= 1"),
    ],
)
def test_bad_input_is_one_line(runs_: Any, kw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ft.compare(runs_, **kw)


def test_a_sweep_table_is_grouped_by_an_explicit_column() -> None:
    from floatlab.sweeps import sweep

    grid: dict[str, list[Any]] = {"precision": ["fp32", "bf16"], "seed": [0, 1]}
    df = sweep(grid, {"data": "underflow", "hidden": (4,), "steps": 4}, executor="serial", progress=False)
    g = group_runs(df, by="precision")
    assert g.labels == ["fp32", "bf16"]
    assert [r.seed for r in g.groups["bf16"]] == [0, 1]
    assert len(g.groups["fp32"][0].steps["loss"]) == 4
    with pytest.raises(ValueError, match="by='nope': expected columns of the table"):
        ft.compare(df, by="nope")
    fig = ft.compare(df, by="precision")
    drawn = fig.axes[5].get_legend()
    assert drawn is not None
    assert [t.get_text() for t in drawn.get_texts()] == ["fp32 (2 seeds)", "bf16 (2 seeds)"]


def test_run_seeds_refuses_seeds_given_twice() -> None:
    with pytest.raises(ValueError, match="seed 0 given twice"):
        ft.run_seeds(["fp32"], [0, 0], data="underflow")


@pytest.mark.parametrize(
    ("policy", "words"),
    [("mxfp4", "E8M0 block scale"), ("nvfp4", "E4M3 block"), ("fp8-delayed", "fp8 max / amax")],
)
def test_the_operand_figure_names_the_recipes_formats_and_plots_the_shares(policy: str, words: str) -> None:
    from floatlab.train.analysis import plot_operands

    h = ft.train("transformer", "text", policy, steps=3, layers=1, d_model=32, context=16, batch_size=4,
                 progress=False)  # fmt: skip
    fig = plot_operands(h)
    assert words in fig.axes[3].get_title()
    if policy != "fp8-delayed":
        assert "E2M1 elements" in fig.get_suptitle()
    shares = fig.axes[6]
    assert shares.get_ylabel() == "share of the operand (%)"
    key = next(k for k in h.operands if k.endswith(".input"))
    flushed = [line for line in shares.get_lines() if line.get_linestyle() == "--"]
    want = 100 * np.asarray(h.operands[key]["flushed"])
    assert any(np.allclose(line.get_ydata(), want) for line in flushed)
