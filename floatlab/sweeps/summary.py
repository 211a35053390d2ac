"""What a sweep says: per configuration, the mean of each final metric over the seeds with its 95%
confidence interval, and the curves with their bands.

A configuration is every configuration column but the seed (and the run's key). The interval is
Student's t over the seeds that finished (the same interval as
:func:`floatlab.train.analysis.seeds.paired_gap` of the values against zero); a run that failed or
stopped early (its loss turned inf or NaN) has no final metric and is counted apart, never
averaged in.

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

import numpy as np

from floatlab.sweeps.curves import config_name
from floatlab.sweeps.grid import CONFIG_COLUMNS
from floatlab.train.history import STEP_FIELDS

__all__ = [
    "EVAL_METRICS",
    "METRICS",
    "STEP_METRICS",
    "config_columns",
    "final_rows",
    "plot_curves",
    "summarize",
]

#: the final metrics a summary gives by default
METRICS: tuple[str, ...] = ("test_loss", "test_accuracy", "train_loss")
#: what :func:`plot_curves` draws from the table (one value a run and evaluation)
EVAL_METRICS: tuple[str, ...] = ("test_loss", "test_accuracy", "train_loss")
#: what :func:`plot_curves` draws from the curves (one value a run and step)
STEP_METRICS: tuple[str, ...] = tuple(k for k in STEP_FIELDS if k not in ("step", "epoch", "fault"))
#: each metric's axis label: its name and unit (``{loss}``: nats, or bits/char for text)
_LABELS: dict[str, str] = {
    "test_loss": "validation loss ({loss})",
    "train_loss": "training loss at evaluation ({loss})",
    "test_accuracy": "validation accuracy (%)",
    "loss": "training loss ({loss})",
    "accuracy": "batch accuracy (%)",
    "scale": "loss scale (log)",
    "skipped": "steps skipped (% of runs)",
    "flushed": "gradients flushed to zero (%, log)",
    "swallowed": "updates swallowed (%, log)",
    "lr": "learning rate",
    "grad_norm": "gradient norm (L2)",
}
_PERCENT = ("test_accuracy", "accuracy", "skipped", "flushed", "swallowed")
_LOSSES = ("test_loss", "train_loss", "loss")


def _known(df: Any) -> list[str]:
    """The configuration columns of ``df`` (a table or a curves table), in the table's order, the
    seed left out."""
    curves = "status" not in df.columns and all(k in df.columns for k in ("run_id", "step", "loss", "scale"))
    names = [config_name(c) if curves else c for c in CONFIG_COLUMNS if c != "seed"]
    return [c for c in names if c in df.columns]


def config_columns(df: Any, *, varying: bool = True) -> list[str]:
    """The columns that name a configuration (the known configuration columns: TrainConfig's fields,
    the policy overrides, the backend; not the seed, and never a column a user added); with
    ``varying``, those that differ between runs (``precision`` when none does).

    >>> import pandas as pd
    >>> config_columns(pd.DataFrame({"run_id": ["a", "b"], "precision": ["fp32", "bf16"], "lr": [0.1, 0.1],
    ...                              "note": ["x", "y"]}))
    ['precision']
    """
    cols = _known(df)
    if not varying:
        return cols
    vary = [c for c in cols if df[c].astype(str).nunique(dropna=False) > 1]
    return vary or [c for c in ("precision",) if c in cols] or cols[:1]


def _keys(df: Any, by: str | Sequence[str] | None, what: str = "table") -> list[str]:
    """The grouping columns: ``by`` (a column name or a list of them), or the configuration columns
    that vary; an empty table or a name that is no column is one ValueError."""
    if not len(df):
        raise ValueError(f"empty sweep {what}: expected at least one run")
    if by is None:
        return config_columns(df)
    names = [by] if isinstance(by, str) else list(by) if isinstance(by, (list, tuple)) else None
    if not names or not all(isinstance(n, str) for n in names):
        raise ValueError(f"by={by!r}: expected a column name or a list of column names")
    for n in names:
        if n not in df.columns:
            known = ", ".join(config_columns(df, varying=False)[:12])
            raise ValueError(
                f"by={n!r} names no column of the sweep {what}: expected a column such as {known}"
            )
    return names


def final_rows(df: Any) -> Any:
    """Each run's last row (its final evaluation), in the table's order.

    >>> import pandas as pd
    >>> final_rows(pd.DataFrame({"run_id": ["a", "a", "b"], "eval": [0, 1, 0]}))["eval"].tolist()
    [1, 0]
    """
    return df.groupby("run_id", sort=False).tail(1).reset_index(drop=True)


def _t(p: float, df: Any) -> Any:
    """Student's t quantile ``p`` at ``df`` degrees of freedom (SciPy: it comes with scikit-learn)."""
    from scipy.stats import t as student_t  # type: ignore[import-untyped,unused-ignore]

    return student_t.ppf(p, df)


def _interval(values: list[float], level: float) -> tuple[float, float, float]:
    """The mean of ``values`` and the ends of its ``level`` Student-t interval (none from one value).

    >>> [round(v, 3) for v in _interval([1.0, 2.0, 3.0], 0.95)]   # 2 -+ t(0.975, 2) / sqrt(3)
    [2.0, -0.484, 4.484]
    """
    if not values:
        return math.nan, math.nan, math.nan
    n = len(values)
    mean = math.fsum(values) / n
    if n == 1:
        return mean, math.nan, math.nan
    if not all(math.isfinite(v) for v in values):
        return math.nan, math.nan, math.nan
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    half = float(_t(0.5 + level / 2, n - 1)) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def summarize(
    df: Any, metrics: Sequence[str] = METRICS, *, by: str | Sequence[str] | None = None, level: float = 0.95
) -> Any:
    """Per group of ``by`` (a column or a list of columns; None: the configuration columns that
    vary, :func:`config_columns`): ``runs`` (seeds), ``ok``, ``stopped``, ``failed``, and for each
    metric its mean over the runs that ended ``ok`` and the ``level`` confidence interval
    (``_mean``, ``_low``, ``_high``; no interval from fewer than two runs).

    >>> import pandas as pd
    >>> rows = [{"run_id": "a", "seed": 0, "precision": "fp16", "status": "failed", "eval": None,
    ...          "test_loss": None}]
    >>> s = summarize(pd.DataFrame(rows), metrics=("test_loss",))
    >>> int(s["runs"].iloc[0]), int(s["failed"].iloc[0]), float(s["test_loss_mean"].iloc[0])
    (1, 1, nan)
    >>> summarize(pd.DataFrame(rows), by="lr")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: by='lr' names no column of the sweep table: expected a column such as precision
    """
    import pandas as pd  # type: ignore[import-untyped,unused-ignore]

    keys = _keys(df, by)
    unknown = [m for m in metrics if m not in df.columns]
    if unknown:
        raise ValueError(f"summary metric {unknown[0]!r}: expected one of {', '.join(METRICS)}")
    last = final_rows(df)
    out: list[dict[str, Any]] = []
    for key, group in last.groupby(keys, sort=False, dropna=False, observed=True):
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


def _source(df: Any, metric: str, keys_by: str | Sequence[str] | None) -> tuple[Any, list[str]]:
    """The rows ``metric`` is drawn from (the table's finished evaluations, or the curves of its
    runs that ended ok) and the grouping columns there."""
    table = "status" in df.columns
    if metric in STEP_METRICS:
        curves = df.attrs.get("curves") if table else df
        if curves is None or metric not in curves.columns or "step" not in curves.columns:
            raise ValueError(
                f"curve metric {metric!r} is per step: expected a sweep's table with its curves "
                "(df.attrs['curves'], kept unless curves=False; read_table reads them) or the curves table"
            )
        if table:
            ok = set(df.loc[df["status"].astype(str) == "ok", "run_id"])
            curves = curves[curves["run_id"].isin(ok)]
            if keys_by is None:
                keys = [config_name(c) for c in config_columns(df)]
            else:  # a table's column: its name in the curves, or each run's value from the table
                names = _keys(df, keys_by)
                keys = []
                for n in names:
                    if config_name(n) in curves.columns and n in CONFIG_COLUMNS:
                        keys.append(config_name(n))
                    else:
                        per_run = df.drop_duplicates("run_id").set_index("run_id")[n]
                        curves = curves.assign(**{n: curves["run_id"].map(per_run).to_numpy()})
                        keys.append(n)
            if not len(curves):
                raise ValueError(
                    f"curve metric {metric!r}: no run of the sweep ended ok: expected at least one"
                )
            return curves, keys
        return curves, _keys(curves, keys_by, "curves")
    if metric not in EVAL_METRICS or not table or metric not in df.columns:
        if metric in EVAL_METRICS:
            raise ValueError(
                f"curve metric {metric!r} is per evaluation: expected the sweep's table, not its curves"
            )
        raise ValueError(
            f"curve metric {metric!r}: expected one of {', '.join(EVAL_METRICS)} (per evaluation) or "
            f"{', '.join(STEP_METRICS)} (per step)"
        )
    keys = _keys(df, keys_by)
    ok = df[(df["status"].astype(str) == "ok") & df["step"].notna()]
    if not len(ok):
        raise ValueError(f"curve metric {metric!r}: no run of the sweep ended ok: expected at least one")
    return ok, keys


def _bands(rows: Any, metric: str, level: float) -> tuple[Any, Any, Any, Any]:
    """Per step: the mean of ``metric`` over the runs and the ``level`` Student-t band (the mean
    itself where fewer than two runs have a finite value)."""
    values = rows[metric].to_numpy(dtype=np.float64)
    steps = rows["step"].to_numpy()
    keep = np.isfinite(values)
    frame = {"step": steps[keep], "v": values[keep]}
    import pandas as pd

    g = pd.DataFrame(frame).groupby("step", sort=True)["v"].agg(["mean", "std", "count"])
    n = g["count"].to_numpy()
    t = np.where(n >= 2, _t(0.5 + level / 2, np.maximum(n - 1, 1)), np.nan)
    half = t * g["std"].to_numpy() / np.sqrt(n)
    mean = g["mean"].to_numpy()
    half = np.where(np.isfinite(half), half, 0.0)
    return g.index.to_numpy(dtype=np.float64), mean, mean - half, mean + half


def plot_curves(
    df: Any,
    path: str | os.PathLike[str] | None = None,
    *,
    metric: str = "test_loss",
    by: str | Sequence[str] | None = None,
    level: float = 0.95,
) -> Any:
    """Each group's ``metric`` against the step: the mean over its runs (seeds) and the ``level``
    Student-t confidence band. ``metric``: an evaluation metric of the table (:data:`EVAL_METRICS`)
    or a per-step one (:data:`STEP_METRICS`) from the table's ``attrs["curves"]`` or a curves table
    given as ``df``; ``by``: the grouping column or columns (None: the configuration columns that
    vary). Losses in nats (bits/char when every run reads text), shares and accuracies in percent,
    the loss scale and the flushed and swallowed shares on a log axis. Runs that failed or stopped
    early are left out. Built without pyplot (no backend is touched); written to ``path`` when
    given; returns the figure.

    >>> import pandas as pd
    >>> rows = [{"run_id": str(s), "precision": "fp32", "seed": s, "status": "ok", "eval": 0, "step": 1,
    ...          "test_loss": 1.0 + s} for s in range(3)]
    >>> fig = plot_curves(pd.DataFrame(rows))
    >>> fig.axes[0].get_lines()[0].get_ydata().tolist(), fig.axes[0].get_ylabel()
    ([2.0], 'validation loss (nats)')
    >>> plot_curves(pd.DataFrame(rows), metric="loss")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: curve metric 'loss' is per step: expected a sweep's table with its curves ...
    """
    from floatlab._figure import ShownFigure  # no pyplot: no GUI backend, no global figure list

    if not (isinstance(level, float) and 0.0 < level < 1.0):
        raise ValueError(f"level={level!r}: expected a confidence level between 0 and 1, such as 0.95")
    if not len(df):
        raise ValueError("empty sweep table: expected at least one run")
    rows, keys = _source(df, metric, by)
    text = "data" in rows.columns and set(rows["data"].astype(str)) == {"text"}
    factor = (1 / math.log(2) if text else 1.0) if metric in _LOSSES else 100.0 if metric in _PERCENT else 1.0
    fig = ShownFigure(figsize=(7, 4.5))
    ax = fig.add_subplot()
    for key, group in rows.groupby(keys, sort=False, dropna=False, observed=True):
        label = ", ".join(str(k) for k in (key if isinstance(key, tuple) else (key,)))
        steps, mean, low, high = _bands(group, metric, level)
        (line,) = ax.plot(steps, mean * factor, marker="." if len(steps) < 50 else None, label=label)
        ax.fill_between(steps, low * factor, high * factor, color=line.get_color(), alpha=0.2, linewidth=0)
    if metric == "scale":
        ax.set_yscale("log", base=2)
    elif metric in ("flushed", "swallowed"):
        ax.set_yscale("symlog", linthresh=0.01)
    ax.set_xlabel("training step")
    ax.set_ylabel(_LABELS[metric].format(loss="bits/char" if text else "nats"))
    ax.set_title(
        f"{_LABELS[metric].split(' (')[0]} by {', '.join(keys)}: mean over seeds, "
        f"{round(100 * level)}% confidence band"
    )
    ax.legend(fontsize="small")
    fig.tight_layout()
    if path is not None:
        from floatlab.io import save_figure

        save_figure(fig, path, dpi=120)
    return fig
