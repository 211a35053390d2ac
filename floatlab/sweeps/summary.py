"""What a sweep says: per configuration, the mean of each final metric over the seeds with its 95%
confidence interval, and the curves with their bands.

A configuration is every configuration column but the seed (and the run's key). The interval is
Student's t over the seeds that finished (:func:`floatlab.train.analysis.seeds.paired_gap` against zero: the
mean of one sample is the mean of its gaps to nothing); a run that failed or stopped early (its loss
turned inf or NaN) has no final metric and is counted apart, never averaged in.

>>> import pandas as pd
>>> rows = [{"run_id": str(s), "precision": "fp32", "seed": s, "status": "ok", "eval": 0, "step": 4,
...          "test_loss": v, "test_accuracy": 1.0} for s, v in enumerate([1.0, 2.0, 3.0])]
>>> s = summarize(pd.DataFrame(rows), metrics=("test_loss",))
>>> s[["precision", "runs", "ok", "test_loss_mean"]].values.tolist()
[['fp32', 3, 3, 2.0]]
>>> round(float(s["test_loss_high"].iloc[0]), 3)   # 2 + t(0.975, 2) * 1 / sqrt(3)
4.484
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

from floatlab.sweeps.table import EVAL_COLUMNS, RUN_COLUMNS
from floatlab.train.analysis.seeds import paired_gap

__all__ = ["METRICS", "config_columns", "final_rows", "plot_curves", "summarize"]

#: the final metrics a summary gives by default
METRICS: tuple[str, ...] = ("test_loss", "test_accuracy", "train_loss")
_NOT_CONFIG = {"run_id", "seed", *RUN_COLUMNS, *EVAL_COLUMNS}


def config_columns(df: Any, *, varying: bool = True) -> list[str]:
    """The columns that name a configuration (not the seed); with ``varying``, those that differ
    between runs (all of them when none does).

    >>> import pandas as pd
    >>> config_columns(pd.DataFrame({"run_id": ["a", "b"], "precision": ["fp32", "bf16"], "lr": [0.1, 0.1]}))
    ['precision']
    """
    cols = [c for c in df.columns if c not in _NOT_CONFIG]
    if not varying:
        return cols
    vary = [c for c in cols if df[c].astype(str).nunique(dropna=False) > 1]
    return vary or [c for c in ("precision",) if c in cols] or cols[:1]


def final_rows(df: Any) -> Any:
    """Each run's last row (its final evaluation), in the table's order.

    >>> import pandas as pd
    >>> final_rows(pd.DataFrame({"run_id": ["a", "a", "b"], "eval": [0, 1, 0]}))["eval"].tolist()
    [1, 0]
    """
    return df.groupby("run_id", sort=False).tail(1).reset_index(drop=True)


def _interval(values: list[float], level: float) -> tuple[float, float, float]:
    if not values:
        return math.nan, math.nan, math.nan
    if len(values) == 1:
        return values[0], math.nan, math.nan
    g = paired_gap(values, [0.0] * len(values), level)
    return g.mean, g.low, g.high


def summarize(df: Any, metrics: Sequence[str] = METRICS, *, level: float = 0.95) -> Any:
    """Per configuration: ``runs`` (seeds), ``ok``, ``stopped``, ``failed``, and for each metric its
    mean over the runs that ended ``ok`` and the ``level`` confidence interval (``_mean``, ``_low``,
    ``_high``; no interval from fewer than two runs).

    >>> import pandas as pd
    >>> rows = [{"run_id": "a", "seed": 0, "precision": "fp16", "status": "failed", "eval": None,
    ...          "test_loss": None}]
    >>> s = summarize(pd.DataFrame(rows), metrics=("test_loss",))
    >>> int(s["runs"].iloc[0]), int(s["failed"].iloc[0]), float(s["test_loss_mean"].iloc[0])
    (1, 1, nan)
    """
    import pandas as pd  # type: ignore[import-untyped,unused-ignore]

    unknown = [m for m in metrics if m not in df.columns]
    if unknown:
        raise ValueError(f"summary metric {unknown[0]!r}: expected one of {', '.join(METRICS)}")
    last = final_rows(df)
    keys = config_columns(df)
    out: list[dict[str, Any]] = []
    for key, group in last.groupby(keys, sort=False, dropna=False):
        row: dict[str, Any] = dict(zip(keys, key if isinstance(key, tuple) else (key,), strict=True))
        status = group["status"].astype(str)
        row.update(runs=len(group), ok=int((status == "ok").sum()))
        row.update(stopped=int((status == "stopped").sum()), failed=int((status == "failed").sum()))
        good = group[status == "ok"]
        for m in metrics:
            vals = [float(v) for v in good[m] if v is not None and math.isfinite(float(v))]
            row[f"{m}_mean"], row[f"{m}_low"], row[f"{m}_high"] = _interval(vals, level)
        out.append(row)
    return pd.DataFrame(out)


def plot_curves(
    df: Any, path: str | os.PathLike[str] | None = None, *, metric: str = "test_loss", level: float = 0.95
) -> Any:
    """Each configuration's ``metric`` against the step: the mean over its seeds and the ``level``
    confidence band (matplotlib). Written to ``path`` when given; returns the figure.

    >>> import pandas as pd
    >>> rows = [{"run_id": str(s), "precision": "fp32", "seed": s, "status": "ok", "eval": 0, "step": 1,
    ...          "test_loss": 1.0 + s} for s in range(3)]
    >>> fig = plot_curves(pd.DataFrame(rows))
    >>> fig.axes[0].get_lines()[0].get_ydata().tolist()
    [2.0]
    """
    from matplotlib.figure import Figure  # no pyplot: no GUI backend, no global figure list

    if metric not in df.columns:
        raise ValueError(f"curve metric {metric!r}: expected one of {', '.join(METRICS)}")
    keys = config_columns(df)
    ok = df[(df["status"].astype(str) == "ok") & df["step"].notna()]
    fig = Figure(figsize=(7, 4.5))
    ax = fig.add_subplot()
    for key, group in ok.groupby(keys, sort=False, dropna=False):
        label = ", ".join(str(k) for k in (key if isinstance(key, tuple) else (key,)))
        steps, mean, low, high = [], [], [], []
        for step, at in group.groupby("step", sort=True):
            m, lo, hi = _interval([float(v) for v in at[metric] if math.isfinite(float(v))], level)
            steps.append(float(step))
            mean.append(m)
            low.append(lo if math.isfinite(lo) else m)
            high.append(hi if math.isfinite(hi) else m)
        (line,) = ax.plot(steps, mean, marker=".", label=label)
        ax.fill_between(steps, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
    ax.set_xlabel("step")
    ax.set_ylabel(metric.replace("_", " "))
    ax.set_title(f"{metric.replace('_', ' ')}: mean over seeds, {round(100 * level)}% confidence band")
    ax.legend(fontsize="small")
    fig.tight_layout()
    if path is not None:
        from floatlab.io import save_figure

        save_figure(fig, path, dpi=120)
    return fig
