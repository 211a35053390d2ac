"""A sweep's results as one tidy table: one row per run and evaluation.

The columns are the run's key (``run_id``), its configuration (every TrainConfig field, the
policy's ``overrides`` as JSON, the backend), the floatlab version, what became of it (``status``: ok,
stopped (its loss turned inf or NaN with no scaler to catch it) or failed, and ``reason``), the
run's totals (``steps_run``, ``skipped_steps``, ``final_scale``, ``mean_flushed``,
``mean_swallowed``) and one evaluation's metrics (``eval``, ``step``, ``epoch``, ``train_loss``,
``test_loss``, ``test_accuracy``). A run with no evaluation (it failed, or stopped before its
first) is one row with empty metrics. The table is written whole, atomically, after every run
(:func:`write_table`), so that a sweep killed midway keeps every run that finished; a table read
back holds whole runs only (:func:`read_table`), so that a run whose rows were cut short runs again.

>>> from floatlab.sweeps.grid import Grid
>>> task = Grid({"seed": [0]}, {"data": "underflow"}).tasks[0]
>>> rows = run_rows(task, error="ValueError: bad")
>>> len(rows), rows[0]["status"], rows[0]["reason"], rows[0]["test_loss"]
(1, 'failed', 'ValueError: bad', None)
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import os
import re
from typing import TYPE_CHECKING, Any

from floatlab.io import atomic_output, first_bytes
from floatlab.sweeps.curves import CURVE_COLUMNS, curves_frame, curves_path, read_curves_file, whole
from floatlab.sweeps.grid import CONFIG_COLUMNS
from floatlab.train.config import RENAMED_SETTINGS

if TYPE_CHECKING:
    from floatlab.sweeps.grid import Task
    from floatlab.train.history import History

__all__ = [
    "EVAL_COLUMNS",
    "RUN_COLUMNS",
    "TABLE_SUFFIXES",
    "attach_curves",
    "read_curves",
    "read_runs",
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
#: the columns a CSV table keeps as text, besides the configuration's text fields (see _text_columns)
_TEXT = ("run_id", "model", "data", "precision", "overrides", "optimizer", "schedule", "hidden", "activation",
         "channels", "histogram_steps", "backend", "floatlab", "status", "reason")  # fmt: skip
_FLOATS = ("final_scale", "mean_flushed", "mean_swallowed", "train_loss", "test_loss", "test_accuracy")
#: what may become of a run
STATUSES: tuple[str, ...] = ("ok", "stopped", "failed")
_INT = re.compile(r"[+-]?[0-9]+")


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


def write_table(rows: list[dict[str, Any]] | Any, path: str | os.PathLike[str]) -> Any:
    """Write ``rows`` (a list of rows, or a sweep's DataFrame) to ``path`` (.parquet or .csv)
    atomically: a reader sees the old table or the new one, never half of one. A DataFrame's curves
    (``attrs["curves"]``) are written beside it first (``<stem>.curves.parquet``: what
    :func:`read_table` reads back); pandas' own ``to_parquet`` refuses a table whose ``attrs`` hold
    them (it writes ``attrs`` as JSON). Returns the DataFrame written (without ``attrs``).

    >>> import tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "t.parquet")
    >>> _ = write_table([{"run_id": "a", "status": "ok", "test_loss": 0.5}], p)
    >>> read_table(p)["test_loss"].tolist()
    [0.5]
    """
    name = os.fspath(path)
    kind = _suffix(name)
    curves = None
    if not isinstance(rows, list):
        curves = rows.attrs.get("curves")
        rows = records(rows)
    df = to_frame(rows)
    if curves is not None:
        steps = curves[list(CURVE_COLUMNS)]
        with atomic_output(curves_path(name)) as tmp:
            if kind == ".parquet":
                steps.to_parquet(tmp, index=False)
            else:
                steps.to_csv(tmp, index=False, lineterminator="\n")
    with atomic_output(name) as tmp:
        if kind == ".parquet":
            df.to_parquet(tmp, index=False)
        else:
            df.to_csv(tmp, index=False)
    return df


def read_table(path: str | os.PathLike[str]) -> Any:
    """A table :func:`write_table` wrote, as a DataFrame equal to the one written (a CSV's and a
    Parquet file's alike); a file that is not one is one ValueError. Only whole runs come back: a
    run with a row that is cut short (a field missing, a value that is no number, the file ending
    mid-row) or with its evaluations incomplete has not finished, and none of its rows is kept.
    When the sweep's curves file is beside it (:func:`floatlab.sweeps.curves.curves_path`), the
    curves of its runs are in ``attrs["curves"]`` (as :func:`read_curves` gives them).

    >>> read_table("no/such.parquet")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: ...no/such.parquet...
    """
    df = read_runs(path)
    beside = curves_path(path)
    if os.path.exists(beside):
        attach_curves(df, read_curves_file(beside))
    return df


def read_curves(path: str | os.PathLike[str]) -> Any:
    """The per-step curves of a sweep written to ``path`` (the table, or its curves file beside it):
    one row per run and step, the run's key (``run_id``) and configuration columns (categoricals),
    then :data:`floatlab.train.history.STEP_FIELDS`. Only the runs that are whole in the table and
    in the curves file come back; a missing or unreadable file is one ValueError.

    >>> read_curves("no/such.parquet")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: ...no/such.curves.parquet...
    """
    name = os.fspath(path)
    beside = curves_path(name)
    first_bytes(beside, "a sweep's curves file (.curves.parquet or .curves.csv)")
    stem, suffix = os.path.splitext(beside)
    table = stem[: -len(".curves")] + suffix
    df = read_runs(table) if os.path.exists(table) else None
    if df is None:
        raise ValueError(f"sweep curves {beside!r}: expected its table {table!r} beside it")
    return attach_curves(df, read_curves_file(beside))


def attach_curves(df: Any, found: tuple[dict[str, Any], set[str]]) -> Any:
    """Put the curves ``found`` (:func:`floatlab.sweeps.curves.read_curves_file`) of the runs of the
    table ``df`` that are whole in both in ``df.attrs["curves"]``, with the table's configuration
    columns; return them.

    >>> import numpy as np
    >>> from floatlab.sweeps.curves import step_arrays
    >>> from floatlab.train.history import History
    >>> h = History("x")
    >>> h.log_step(step=1, epoch=0, loss=2.0, accuracy=0.5, scale=1.0, skipped=False, flushed=0.0,
    ...            swallowed=0.0, lr=0.1, grad_norm=None)
    >>> df = to_frame([{"run_id": "a", "precision": "bf16", "status": "ok", "steps_run": 1},
    ...                {"run_id": "b", "precision": "fp32", "status": "ok", "steps_run": 2}])
    >>> c = attach_curves(df, ({"a": step_arrays(h), "b": step_arrays(h)}, set()))
    >>> c[["run_id", "precision", "loss"]].values.tolist()   # b's curves lack a step: left out
    [['a', 'bf16', 2.0]]
    """
    runs, cut = found
    if len(df):
        per_run = df.drop_duplicates("run_id")
        steps = dict(zip(per_run["run_id"], per_run["steps_run"], strict=True))
        keys = [k for k, n in steps.items() if k not in cut and k in runs and whole(runs[k], n)]
        configs = per_run[["run_id", *[c for c in CONFIG_COLUMNS if c in df.columns]]]
    else:
        keys, configs = [], None
    frame = curves_frame([(k, runs[k]) for k in keys], configs)
    df.attrs["curves"] = frame
    return frame


def read_runs(path: str | os.PathLike[str]) -> Any:
    """:func:`read_table` without the curves.

    >>> import tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "t.csv")
    >>> _ = write_table([{"run_id": "a", "status": "failed", "eval": None}], p)
    >>> read_runs(p)["status"].tolist(), read_runs(p).attrs
    (['failed'], {})
    """
    import pandas as pd

    name = os.fspath(path)
    kind = _suffix(name)
    first_bytes(name, "a sweep table (.parquet or .csv)")
    if kind == ".parquet":
        try:
            df = pd.read_parquet(name)
        except Exception as e:  # a truncated or foreign file: pyarrow raises many kinds
            raise ValueError(f"sweep table {name!r} cannot be read: {type(e).__name__}: {e}") from None
        header, rows, cut = [str(c) for c in df.columns], records(df), set[str]()
    else:
        header, rows, cut = _read_csv(name)
    if "run_id" not in header or "status" not in header:
        raise ValueError(f"sweep table {name!r}: expected the columns run_id and status (a floatlab sweep)")
    kept = _whole_runs(rows, cut)
    if kind == ".parquet":
        whole = {r["run_id"] for r in kept}
        df = df[df["run_id"].isin(whole)].reset_index(drop=True) if len(kept) < len(rows) else df
    else:
        df = to_frame(kept) if kept else pd.DataFrame(columns=header)
    return df.rename(columns=RENAMED_SETTINGS)  # (a table an earlier floatlab wrote)


def _read_csv(name: str) -> tuple[list[str], list[dict[str, Any]], set[str]]:
    """The header, the whole rows (as :func:`run_rows` gives them: text as text, numbers as numbers,
    empty as None) and the keys of the runs with a row cut short, of a CSV table.

    The text columns are text whatever they hold (a key of digits, sizes such as ``"8"``, an empty
    reason); every other value is a number or empty. A file that ends mid-row (no final newline,
    or inside a quoted field) ends with a row cut short: when its key may be cut too, the run of
    the row before it is not trusted either."""
    try:
        with open(name, "rb") as fh:
            text = fh.read().decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"sweep table {name!r} cannot be read: {type(e).__name__}: {e}") from None
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    got: list[list[str]] = []
    partial: list[str] | None = None
    try:
        got.extend(r for r in reader if r)
        if not text.endswith(("\n", "\r")) and got:
            partial = got.pop()  # the file ends inside this row: any field may be cut
    except csv.Error:  # the file ends inside a quoted field: the row is lost with it
        partial = []
    if not got:
        raise ValueError(f"sweep table {name!r} is empty: expected a header row")
    header, body = got[0], got[1:]
    key = header.index("run_id") if "run_id" in header else 0
    cut: set[str] = set()
    if partial is not None:
        if len(partial) > key + 1:  # its key ended with its field: that run alone
            cut.add(partial[key])
        elif body:
            cut.add(body[-1][key] if len(body[-1]) > key else "")
    rows: list[dict[str, Any]] = []
    text_columns = _text_columns()
    for fields in body:
        row = _csv_row(header, fields, text_columns)
        if row is None:
            cut.add(fields[key] if len(fields) > key else "")
        else:
            rows.append(row)
    return header, rows, cut


def _text_columns() -> frozenset[str]:
    """The columns that hold text: :data:`_TEXT` and every configuration field written as text (a
    string, a tuple of sizes, the policy's overrides, under their names old and new)."""
    from floatlab.train.config import TrainConfig

    typed = (
        f.name for f in dataclasses.fields(TrainConfig) if str(f.type).startswith(("str", "tuple", "dict"))
    )
    return frozenset((*_TEXT, *typed, *RENAMED_SETTINGS))


def _csv_row(header: list[str], fields: list[str], text: frozenset[str]) -> dict[str, Any] | None:
    """One CSV record as a row, or None when it is not whole (a field too few or too many, a value
    that is neither a number nor True or False)."""
    if len(fields) != len(header):
        return None
    row: dict[str, Any] = {}
    for k, v in zip(header, fields, strict=True):
        if k in text:
            row[k] = v
        elif not v:
            row[k] = None
        elif v in ("True", "False"):
            row[k] = v == "True"
        else:
            try:
                row[k] = int(v) if _INT.fullmatch(v) else float(v)
            except ValueError:
                return None
    return row


def _whole_runs(rows: list[dict[str, Any]], cut: set[str]) -> list[dict[str, Any]]:
    """``rows`` without the runs that are not whole: those in ``cut``, and those whose rows do not
    tell a finished run (a known status, one per run; a failed run's one row; an ok or stopped run's
    evaluations numbered from 0, the last at the step it ended).

    >>> r = {"run_id": "a", "status": "ok", "eval": 0, "step": 2, "steps_run": 2}
    >>> [x["run_id"] for x in _whole_runs([r, {**r, "run_id": "b", "step": 1}], set())]
    ['a']
    """
    runs: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        runs.setdefault(str(r.get("run_id") or ""), []).append(r)
    bad = {k for k, rs in runs.items() if not k or k in cut or not _finished(rs)}
    return [r for r in rows if str(r.get("run_id") or "") not in bad]


def _finished(rows: list[dict[str, Any]]) -> bool:
    status = {r.get("status") for r in rows}
    if len(status) != 1 or not status <= set(STATUSES):
        return False
    evals = [r.get("eval") for r in rows]
    if evals == [None]:  # failed, or no evaluation
        return True
    if status == {"failed"} or evals != list(range(len(rows))):
        return False
    last = rows[-1]
    # every run that trains evaluates at the step it ends (the trainer's last evaluation)
    return last.get("step") is not None and last.get("step") == last.get("steps_run")


def records(df: Any) -> list[dict[str, Any]]:
    """The rows of a table as plain dicts, NaN metrics back to None (the form :func:`run_rows` gives).

    >>> records(to_frame([{"run_id": "a", "test_loss": None}]))
    [{'run_id': 'a', 'test_loss': None}]
    """
    out = []
    for r in df.to_dict("records"):
        out.append({k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()})
    return out
