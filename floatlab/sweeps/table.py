"""A sweep's results as one tidy table: one row per run and evaluation.

The columns are the run's key (``run_id``), its configuration (every TrainConfig field, the
policy overrides as JSON, the backend), the floatlab version, what became of it (``status``: ok,
stopped (its loss turned inf or NaN with no scaler to catch it) or failed, and ``reason``), the
run's totals (``steps_run``, ``skipped_steps``, ``final_scale``, ``mean_flushed``,
``mean_swallowed``) and one evaluation's metrics (``eval``, ``step``, ``epoch``, ``train_loss``,
``test_loss``, ``test_accuracy``). A run with no evaluation (it failed, or stopped before its
first) is one row with empty metrics. The table is written whole, atomically, after every run
(:func:`write_table`), so that a sweep killed midway keeps every run that finished.

>>> from floatlab.sweeps.grid import Grid
>>> task = Grid({"seed": [0]}, {"data": "underflow"}).tasks[0]
>>> rows = run_rows(task, error="ValueError: bad")
>>> len(rows), rows[0]["status"], rows[0]["reason"], rows[0]["test_loss"]
(1, 'failed', 'ValueError: bad', None)
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any

from floatlab.io import atomic_output, first_bytes

if TYPE_CHECKING:
    from floatlab.sweeps.grid import Task
    from floatlab.train.history import History

__all__ = [
    "EVAL_COLUMNS",
    "RUN_COLUMNS",
    "TABLE_SUFFIXES",
    "read_table",
    "run_rows",
    "to_frame",
    "write_table",
]

#: what the table's file may be
TABLE_SUFFIXES: tuple[str, ...] = (".parquet", ".csv")
#: the run's outcome and totals, after its configuration
RUN_COLUMNS: tuple[str, ...] = (
    "floatlab", "status", "reason", "steps_run", "skipped_steps", "final_scale", "mean_flushed",
    "mean_swallowed",
)  # fmt: skip
#: one evaluation
EVAL_COLUMNS: tuple[str, ...] = ("eval", "step", "epoch", "train_loss", "test_loss", "test_accuracy")
#: the columns a CSV table keeps as text
_TEXT = ("run_id", "model", "data", "precision", "policy", "optimizer", "schedule", "hidden", "activation",
         "channels", "histogram_steps", "backend", "floatlab", "status", "reason")  # fmt: skip
_FLOATS = ("final_scale", "mean_flushed", "mean_swallowed", "train_loss", "test_loss", "test_accuracy")


def run_rows(
    task: Task, history: History | None = None, *, stopped: str = "", error: str = ""
) -> list[dict[str, Any]]:
    """The table's rows of one run: one per evaluation of ``history``, or one with empty metrics for
    a run that failed with ``error`` (or has no evaluation). ``stopped``: why the run stopped early.

    >>> from floatlab.sweeps.grid import Grid
    >>> from floatlab.train.history import History
    >>> h = History("fp32"); h.log_eval(epoch=1, step=4, train_loss=0.5, test_loss=0.25, test_accuracy=1.0)
    >>> r = run_rows(Grid({"seed": [0]}, {"data": "underflow"}).tasks[0], h)
    >>> [(x["eval"], x["step"], x["test_loss"], x["status"]) for x in r]
    [(0, 4, 0.25, 'ok')]
    """
    from floatlab import __version__

    head: dict[str, Any] = {"run_id": task.run_id, **task.columns(), "floatlab": __version__}
    if error or history is None:
        totals: dict[str, Any] = {"status": "failed", "reason": error or "no history"}
        totals.update({k: None for k in RUN_COLUMNS[3:]})
        return [{**head, **totals, **{k: None for k in EVAL_COLUMNS}}]
    s = history.summary()
    totals = {
        "status": "stopped" if stopped else "ok",
        "reason": stopped,
        "steps_run": s["steps"],
        **{k: s[k] for k in ("skipped_steps", "final_scale", "mean_flushed", "mean_swallowed")},
    }
    ev = history.evals
    if not ev["step"]:
        return [{**head, **totals, **{k: None for k in EVAL_COLUMNS}}]
    return [
        {
            **head,
            **totals,
            "eval": j,
            "step": int(ev["step"][j]),
            "epoch": ev["epoch"][j],
            **{k: ev[k][j] for k in ("train_loss", "test_loss", "test_accuracy")},
        }
        for j in range(len(ev["step"]))
    ]


def to_frame(rows: list[dict[str, Any]]) -> Any:
    """The rows as a pandas DataFrame, with the metrics as float64 (NaN where there is none).

    >>> rows = [{"run_id": "a", "test_loss": None}, {"run_id": "b", "test_loss": 0.5}]
    >>> to_frame(rows)["test_loss"].tolist()
    [nan, 0.5]
    """
    import pandas as pd  # type: ignore[import-untyped,unused-ignore]

    df = pd.DataFrame.from_records(rows)
    for k in _FLOATS:
        if k in df.columns:
            df[k] = pd.to_numeric(df[k], errors="coerce").astype("float64")
    return df.reset_index(drop=True)


def _suffix(path: str) -> str:
    low = path.lower()
    for s in TABLE_SUFFIXES:
        if low.endswith(s):
            return s
    raise ValueError(f"sweep table {path!r}: expected a {' or '.join(TABLE_SUFFIXES)} file")


def write_table(rows: list[dict[str, Any]], path: str | os.PathLike[str]) -> Any:
    """Write ``rows`` to ``path`` (.parquet or .csv) atomically: a reader sees the old table or the
    new one, never half of one. Returns the DataFrame written.

    >>> import tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "t.parquet")
    >>> _ = write_table([{"run_id": "a", "status": "ok", "test_loss": 0.5}], p)
    >>> read_table(p)["test_loss"].tolist()
    [0.5]
    """
    name = os.fspath(path)
    kind = _suffix(name)
    df = to_frame(rows)
    with atomic_output(name) as tmp:
        if kind == ".parquet":
            df.to_parquet(tmp, index=False)
        else:
            df.to_csv(tmp, index=False)
    return df


def read_table(path: str | os.PathLike[str]) -> Any:
    """A table :func:`write_table` wrote, as a DataFrame; a file that is not one is one ValueError.

    >>> read_table("no/such.parquet")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: ...no/such.parquet...
    """
    import pandas as pd

    name = os.fspath(path)
    kind = _suffix(name)
    first_bytes(name, "a sweep table (.parquet or .csv)")
    try:
        if kind == ".parquet":
            df = pd.read_parquet(name)
        else:  # text stays text: a key of digits, sizes such as "8", an empty reason
            df = pd.read_csv(name, dtype=dict.fromkeys(_TEXT, str), keep_default_na=False, na_values=[""])
    except Exception as e:  # a truncated or foreign file: pyarrow and pandas raise many kinds
        raise ValueError(f"sweep table {name!r} cannot be read: {type(e).__name__}: {e}") from None
    if "run_id" not in df.columns or "status" not in df.columns:
        raise ValueError(f"sweep table {name!r}: expected the columns run_id and status (a floatlab sweep)")
    if kind == ".csv":
        for k in _TEXT:
            if k in df.columns and k not in ("lr", "clip"):
                df[k] = df[k].astype(object).where(df[k].notna(), "" if k == "reason" else None)
    return df


def records(df: Any) -> list[dict[str, Any]]:
    """The rows of a table as plain dicts, NaN metrics back to None (the form :func:`run_rows` gives).

    >>> records(to_frame([{"run_id": "a", "test_loss": None}]))
    [{'run_id': 'a', 'test_loss': None}]
    """
    out = []
    for r in df.to_dict("records"):
        out.append({k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()})
    return out
