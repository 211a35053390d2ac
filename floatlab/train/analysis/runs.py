"""Runs gathered for a comparison: by label (a policy, a preset, a sweep's configuration), each with
its seeds.

:func:`group_runs` takes what the trainer and the sweeps give - a list of histories, the dict that
:func:`~floatlab.train.analysis.seeds.run_seeds` returns, or a sweep's table (with its per-step
curves) - and returns one :class:`Runs`: per label, per seed, the per-step columns and the
evaluations as float arrays. :func:`final_table` says what the runs ended at: per label, the final
validation metric's mean over the seeds with its 95% interval, and the paired gap to the first label.
The figure (:func:`floatlab.train.analysis.plots.compare`) draws from the same :class:`Runs`.

>>> from floatlab.train.history import History
>>> def run(label, seed, loss):
...     h = History(label, {"config": {"seed": seed, "model": "mlp"}})
...     h.log_step(step=1, epoch=0, loss=loss, accuracy=0.5, scale=1.0, skipped=False, flushed=0.0,
...                swallowed=0.0, lr=0.1, grad_norm=None)
...     h.log_eval(epoch=1, step=1, train_loss=loss, test_loss=loss, test_accuracy=0.5)
...     return h
>>> runs = group_runs({"fp32": [run("fp32", 0, 1.0), run("fp32", 1, 1.2)],
...                    "bf16": [run("bf16", 0, 1.5), run("bf16", 1, 1.6)]})
>>> runs.labels, [r.seed for r in runs.groups["bf16"]]
(['fp32', 'bf16'], [0, 1])
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from floatlab.train.analysis.seeds import paired_gap
from floatlab.train.history import EVAL_FIELDS, STEP_FIELDS, History

__all__ = ["Run", "Runs", "final_table", "group_runs"]

#: the per-step columns a comparison reads (numbers: ``skipped`` as 0/1)
STEP_COLUMNS: tuple[str, ...] = tuple(k for k in STEP_FIELDS if k != "fault")


@dataclass(frozen=True)
class Run:
    """One run: its seed, per-step columns (:data:`STEP_COLUMNS`) and evaluation columns
    (:data:`~floatlab.train.history.EVAL_FIELDS`), as float arrays.

    >>> h = History("fp32", {"config": {"seed": 3}})
    >>> h.log_step(step=1, epoch=0, loss=0.5, accuracy=1.0, scale=1.0, skipped=False, flushed=0.0,
    ...            swallowed=0.0, lr=0.1, grad_norm=None)
    >>> r = group_runs([h]).groups["fp32"][0]
    >>> r.seed, r.steps["loss"].tolist()
    (3, [0.5])
    """

    seed: int | None
    steps: dict[str, np.ndarray[Any, np.dtype[np.float64]]]
    evals: dict[str, np.ndarray[Any, np.dtype[np.float64]]]


@dataclass(frozen=True)
class Runs:
    """Runs by label, in the order given; ``text``: character models (losses in bits per character);
    ``model``: the one model they trained (None when unknown).

    >>> runs = group_runs([History("bf16", {"config": {"seed": 0, "model": "mlp"}}),
    ...                    History("bf16", {"config": {"seed": 1, "model": "mlp"}})])
    >>> runs.labels, runs.seeds, runs.model, runs.text
    (['bf16'], 2, 'mlp', False)
    """

    labels: list[str]
    groups: dict[str, list[Run]]
    text: bool
    model: str | None

    @property
    def seeds(self) -> int:
        """The most seeds any label has."""
        return max(len(g) for g in self.groups.values())


def _from_history(h: History) -> Run:
    cfg = h.meta.get("config")
    seed = cfg.get("seed") if isinstance(cfg, dict) else h.meta.get("seed")
    steps = {k: h.column(k) for k in STEP_COLUMNS}
    evals = {k: h.eval_column(k) for k in EVAL_FIELDS}
    return Run(None if seed is None else int(seed), steps, evals)


def _model_of(h: History) -> str | None:
    cfg = h.meta.get("config")
    model = cfg.get("model") if isinstance(cfg, dict) else None
    return None if model is None else str(model)


def _check_seeds(label: str, runs: list[Run]) -> None:
    seen: set[int] = set()
    for r in runs:
        if r.seed is not None and r.seed in seen:
            raise ValueError(f"seed {r.seed} appears twice for {label!r}: expected each seed once per label")
        if r.seed is not None:
            seen.add(r.seed)


def _from_histories(by_label: Mapping[str, Sequence[History]]) -> Runs:
    groups: dict[str, list[Run]] = {}
    models: set[str] = set()
    text = []
    for label, histories in by_label.items():
        if isinstance(histories, History) or not all(isinstance(h, History) for h in histories):
            raise ValueError(f"runs of {label!r}: expected a list of History objects")
        groups[str(label)] = [_from_history(h) for h in histories]
        models.update(m for h in histories if (m := _model_of(h)) is not None)
        text += [h.is_text for h in histories]
    if len(models) > 1:
        raise ValueError(
            f"runs of different models ({', '.join(sorted(models))}): expected one model per figure "
            "(compare each model's runs on their own)"
        )
    if text and any(text) != all(text):
        raise ValueError("runs of a character model and of a classifier: expected one kind of data a figure")
    return Runs(list(groups), groups, bool(text) and all(text), next(iter(models), None))


def _from_table(df: Any, by: str | Sequence[str] | None) -> Runs:
    """A sweep's table (one row per run and evaluation) and its per-step curves (``df.attrs["curves"]``)."""
    from floatlab.sweeps.summary import config_columns

    keys = [by] if isinstance(by, str) else list(by) if by is not None else config_columns(df)
    missing = [k for k in keys if k not in df.columns]
    if missing:
        have = ", ".join(map(str, df.columns))
        raise ValueError(f"by={missing[0]!r}: expected columns of the table ({have})")
    if "model" in df.columns and df["model"].nunique() > 1:
        models = ", ".join(sorted(map(str, df["model"].unique())))
        raise ValueError(f"runs of different models ({models}): expected one model a figure (filter first)")
    curves = df.attrs.get("curves")
    ok = df[df["status"].astype(str) == "ok"] if "status" in df.columns else df
    groups: dict[str, list[Run]] = {}
    for key, rows in ok.groupby(keys, sort=False, dropna=False):
        label = ", ".join(str(k) for k in (key if isinstance(key, tuple) else (key,)))
        runs = []
        for run_id, evals in rows.groupby("run_id", sort=False):
            seed = int(evals["seed"].iloc[0]) if "seed" in evals.columns else None
            ev = {k: evals[k].to_numpy(np.float64) if k in evals.columns else np.full(len(evals), np.nan)
                  for k in EVAL_FIELDS}  # fmt: skip
            if curves is not None and len(curves):
                mine = curves[curves["run_id"] == run_id].sort_values("step")
                steps = {k: mine[k].to_numpy(np.float64) for k in STEP_COLUMNS if k in mine.columns}
            else:
                steps = {}
            runs.append(Run(seed, steps, ev))
        _check_seeds(label, runs)
        groups[label] = runs
    if not groups:
        raise ValueError("a sweep table with no finished run: expected at least one run with status ok")
    text = "data" in df.columns and bool((df["data"].astype(str) == "text").all())
    model = str(df["model"].iloc[0]) if "model" in df.columns else None
    return Runs(list(groups), groups, text, model)


def group_runs(runs: Any, *, by: str | Sequence[str] | None = None) -> Runs:
    """``runs`` by label: a list of histories (grouped by their labels), a mapping of labels to
    lists of histories (what :func:`~floatlab.train.analysis.seeds.run_seeds` returns), or a
    sweep's table (grouped by the columns ``by``; default: the configuration columns that vary).

    >>> group_runs([])
    Traceback (most recent call last):
    ...
    ValueError: no runs to compare: expected histories, run_seeds' dict or a sweep's table
    """
    if hasattr(runs, "columns") and hasattr(runs, "groupby"):  # a pandas DataFrame
        if len(runs) == 0:
            raise ValueError("an empty sweep table: expected at least one run")
        return _from_table(runs, by)
    if by is not None:
        raise ValueError(f"by={by!r}: expected by= with a sweep's table only (histories group by label)")
    if isinstance(runs, History):
        runs = [runs]
    if isinstance(runs, Mapping):
        by_label = {str(k): list(v) for k, v in runs.items()}
    elif isinstance(runs, Sequence) and not isinstance(runs, (str, bytes)):
        by_label = {}
        for h in runs:
            if not isinstance(h, History):
                raise ValueError(f"run {h!r}: expected a History")
            by_label.setdefault(h.label, []).append(h)
    else:
        raise ValueError(f"runs={runs!r}: expected histories, run_seeds' dict or a sweep's table")
    if not by_label or not any(by_label.values()):
        raise ValueError("no runs to compare: expected histories, run_seeds' dict or a sweep's table")
    out = _from_histories(by_label)
    for label, group in out.groups.items():
        _check_seeds(label, group)
    return out


def _final(run: Run, metric: str) -> float:
    v = run.evals.get(metric)
    return float(v[-1]) if v is not None and len(v) and math.isfinite(v[-1]) else math.nan


def final_table(runs: Any, *, metric: str | None = None, by: str | Sequence[str] | None = None) -> Any:
    """What the runs ended at, per label: the final ``metric`` (default: the validation loss in bits
    per character for a character model, else the test accuracy) as mean over the seeds with its 95%
    interval, the seeds, and the paired gap to the first label (over the seeds both have) with its
    interval. A pandas DataFrame; ``runs`` as :func:`group_runs` takes them.

    >>> from floatlab.train.history import History
    >>> def run(label, seed, acc):
    ...     h = History(label, {"config": {"seed": seed}})
    ...     h.log_eval(epoch=1, step=1, train_loss=1.0, test_loss=1.0, test_accuracy=acc)
    ...     return h
    >>> t = final_table({"a": [run("a", 0, 0.9), run("a", 1, 0.8)],
    ...                  "b": [run("b", 0, 0.7), run("b", 1, 0.7)]})
    >>> t[["label", "seeds", "mean", "gap"]].round(3).values.tolist()
    [['a', 2, 0.85, 0.0], ['b', 2, 0.7, -0.15]]
    """
    import pandas as pd  # type: ignore[import-untyped,unused-ignore]

    g = runs if isinstance(runs, Runs) else group_runs(runs, by=by)
    name = metric or ("test_loss" if g.text else "test_accuracy")
    if name not in EVAL_FIELDS:
        raise ValueError(f"metric {name!r}: expected one of {', '.join(EVAL_FIELDS[2:])}")
    factor = 1.0 / math.log(2.0) if (g.text and name.startswith(("test_loss", "train_loss"))) else 1.0
    unit = "bits/char" if factor != 1.0 else ("share" if name == "test_accuracy" else "nats")
    first = {r.seed: _final(r, name) * factor for r in g.groups[g.labels[0]]}
    rows = []
    for label in g.labels:
        values = {r.seed: _final(r, name) * factor for r in g.groups[label]}
        finite = [v for v in values.values() if math.isfinite(v)]
        mean = sum(finite) / len(finite) if finite else math.nan
        low = high = math.nan
        if len(finite) >= 2:
            ci = paired_gap(finite, [0.0] * len(finite))
            low, high = ci.low, ci.high
        both = [s for s in values if s in first and math.isfinite(values[s]) and math.isfinite(first[s])]
        gap = gap_low = gap_high = math.nan
        if label == g.labels[0]:
            gap = 0.0
        elif len(both) >= 2:
            d = paired_gap([values[s] for s in both], [first[s] for s in both])
            gap, gap_low, gap_high = d.mean, d.low, d.high
        elif len(both) == 1:
            gap = values[both[0]] - first[both[0]]
        rows.append({"label": label, "metric": name, "unit": unit, "seeds": len(values),
                     "finished": len(finite), "mean": mean, "low": low, "high": high,
                     "gap": gap, "gap_low": gap_low, "gap_high": gap_high})  # fmt: skip
    return pd.DataFrame(rows)
