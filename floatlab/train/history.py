"""The record of a training run: every step, every evaluation, gradient histograms at chosen steps.

A :class:`History` holds columns (one value per step): ``loss``, ``accuracy`` (of the batch),
``scale`` (the loss scale the step used), ``skipped``, ``flushed`` (share of the non-zero
gradients stored as zero: underflow), ``swallowed`` (share of the non-zero updates that left
the weight unchanged), ``lr``, ``grad_norm`` and ``fault`` (the faults the step met, comma-separated,
"" for none: see :data:`FAULTS`); and one row per evaluation. It saves as JSON or npz (everything),
or as a tidy CSV of one row per step (:meth:`History.to_csv`); :meth:`History.to_pandas` gives the
same table as a DataFrame, and :func:`compare` plots several runs side by side.

>>> h = History("demo")
>>> h.log_step(step=1, epoch=0, loss=2.3, accuracy=0.1, scale=1.0, skipped=False, flushed=0.0,
...            swallowed=0.0, lr=0.1, grad_norm=None)
>>> h.log_eval(epoch=1, step=1, train_loss=2.2, test_loss=2.25, test_accuracy=0.12)
>>> h.n_steps, h.final["test_accuracy"], History.from_dict(h.to_dict()).steps["loss"]
(1, 0.12, [2.3])
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from floatlab.io import check_archive, write_atomic
from floatlab.train._checks import shown, want_dict, want_str

if TYPE_CHECKING:
    pass

__all__ = [
    "CSV_FIELDS",
    "EVAL_FIELDS",
    "FAULTS",
    "STEP_FIELDS",
    "History",
    "TrainingFaultWarning",
    "bits_per_char",
]

STEP_FIELDS: tuple[str, ...] = (
    "step",
    "epoch",
    "loss",
    "accuracy",
    "scale",
    "skipped",
    "flushed",
    "swallowed",
    "lr",
    "grad_norm",
    "fault",
)
#: step fields that callers may leave out, with their value when they do
STEP_DEFAULTS: dict[str, Any] = {"fault": ""}
#: what the trainer detects and records in the ``fault`` column, and what each means
FAULTS: dict[str, str] = {
    "nonfinite_batch": "the batch held an inf or NaN",
    "nonfinite_loss": "the loss was inf or NaN (it overflowed)",
    "nonfinite_grad": "a gradient was inf or NaN",
    "nonfinite_update": "the update would have made a weight inf or NaN (the weights were kept)",
    "nonfinite_weights": "a weight became inf or NaN (nothing in the policy refuses such an update)",
    "scale_collapse": "the loss scale fell below fp32's smallest normal, 2^-126",
    "scale_at_limit": "the loss scale was due to grow but stuck at fp32's limit",
}
#: an evaluation's fields: ``test_loss`` is measured in fp32 whatever the policy, and
#: ``test_loss_in_format`` is the same loss as the policy's format computes it (see
#: :mod:`floatlab.train.evaluation`; None in a history written before it was kept)
EVAL_FIELDS: tuple[str, ...] = (
    "epoch", "step", "train_loss", "test_loss", "test_accuracy", "test_loss_in_format",
)  # fmt: skip
#: evaluation fields that callers may leave out, with their value when they do
EVAL_DEFAULTS: dict[str, Any] = {"test_loss_in_format": None}
#: the columns of :meth:`History.to_csv` and :meth:`History.to_pandas`: the step fields, then the
#: evaluation's (empty where no evaluation happened at that step; ``eval_epoch`` is the evaluation's
#: ``epoch``, the epochs done by then, where the step's ``epoch`` counts from 0 the one in progress)
CSV_FIELDS: tuple[str, ...] = (*STEP_FIELDS, "eval_epoch", *EVAL_FIELDS[2:])


def bits_per_char(loss: float | None) -> float | None:
    """A character model's loss (mean cross-entropy, in nats per character) in bits per character:
    ``loss / ln 2`` (None stays None).

    >>> bits_per_char(math.log(72))   # a uniform guess over 72 characters: log2(72)
    6.169925001442312
    """
    return None if loss is None else float(loss) / math.log(2.0)


class TrainingFaultWarning(RuntimeWarning):
    """Issued once per kind of fault (:data:`FAULTS`) and run: a non-finite batch, loss, update or
    weight, a collapsed loss scale, or one stuck at fp32's limit. Each step it happens in is
    also flagged in the history's ``fault`` column.

    >>> import warnings, numpy as np, floatlab.train as ft
    >>> tr = ft.Trainer.from_config(ft.TrainConfig(data="underflow", hidden=(4,)), ft.make_underflow_task())
    >>> x, y = tr.data.x_train[:8].copy(), tr.data.y_train[:8]
    >>> x[0, 0] = np.nan
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     st = tr.train_step(x, y)
    >>> st.skipped, st.fault, [w.category.__name__ for w in caught]
    (True, 'nonfinite_batch,nonfinite_loss,nonfinite_grad', ['TrainingFaultWarning', 'TrainingFaultWarning'])
    """


def _json_float(v: Any) -> Any:
    """Strict JSON: non-finite floats become their names."""
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return v


def _from_json_float(v: Any) -> Any:
    if isinstance(v, str) and v in ("nan", "inf", "-inf"):
        return float(v)
    return v


def _append_row(
    what: str, columns: dict[str, list[Any]], fields: tuple[str, ...], values: dict[str, Any]
) -> None:
    """Append ``values`` to ``columns``, one value a field; every field and no other must be given."""
    missing = set(fields) - set(values)
    extra = set(values) - set(fields)
    if missing or extra:
        raise ValueError(f"{what}: missing {sorted(missing)}, unknown {sorted(extra)}")
    for k in fields:
        columns[k].append(values[k])


@dataclass
class History:
    """Columns of per-step values, rows of evaluations, and gradient histograms by step.

    >>> h = History("fp16", {"seed": 0})
    >>> h.n_steps, h.final, h.label
    (0, {}, 'fp16')
    """

    label: str
    meta: dict[str, Any] = field(default_factory=dict)
    steps: dict[str, list[Any]] = field(default_factory=lambda: {k: [] for k in STEP_FIELDS})
    evals: dict[str, list[Any]] = field(default_factory=lambda: {k: [] for k in EVAL_FIELDS})
    histograms: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: the :class:`~floatlab.gradhist.GradHistogram` objects behind :attr:`histograms` (in memory
    #: only: a saved history keeps their counts, verdicts and advice as plain data)
    grad_histograms: dict[int, Any] = field(default_factory=dict, compare=False, repr=False)
    #: per GEMM operand of an fp8 recipe (``"h0.Wqkv.input"``, ...): per-step lists of its
    #: statistics (``amax``, ``scale``, ``saturated``, ``flushed``, ``subnormal``), one value a step
    #: (NaN at a step that did not record it); empty without an fp8 recipe
    operands: dict[str, dict[str, list[float]]] = field(default_factory=dict)

    # ---- recording --------------------------------------------------------------------------------
    def log_step(self, **values: Any) -> None:
        """Append one step; every field of :data:`STEP_FIELDS` must be given (``fault`` may be
        left out: no fault)."""
        _append_row("log_step", self.steps, STEP_FIELDS, {**STEP_DEFAULTS, **values})

    def log_eval(self, **values: Any) -> None:
        """Append one evaluation; every field of :data:`EVAL_FIELDS` must be given
        (``test_loss_in_format`` may be left out: None)."""
        _append_row("log_eval", self.evals, EVAL_FIELDS, {**EVAL_DEFAULTS, **values})

    def log_operands(self, stats: Mapping[str, Mapping[str, float]]) -> None:
        """Record the GEMM operands' statistics of the step just logged (:meth:`log_step` first):
        ``{operand: {stat: value}}``, as :meth:`floatlab.train.Precision.end_step` gives them.

        >>> h = History("fp8")
        >>> h.log_step(step=1, epoch=0, loss=2.3, accuracy=0.1, scale=1.0, skipped=False, flushed=0.0,
        ...            swallowed=0.0, lr=0.1, grad_norm=None)
        >>> h.log_operands({"W0.input": {"amax": 3.5, "scale": 128.0}})
        >>> h.operands["W0.input"]["scale"]
        [128.0]
        """
        n = self.n_steps
        for key, values in stats.items():
            record = self.operands.setdefault(key, {})
            for stat, v in values.items():
                col = record.setdefault(stat, [])
                col.extend([math.nan] * (n - 1 - len(col)))  # (an operand first seen late)
                col.append(float(v))
        for record in self.operands.values():  # (an operand this step did not use)
            for col in record.values():
                col.extend([math.nan] * (n - len(col)))

    def add_histogram(self, step: int, data: dict[str, Any], histogram: Any = None) -> None:
        """Keep the gradient histogram taken at ``step``: its plain data, and the object itself."""
        self.histograms[int(step)] = data
        if histogram is not None:
            self.grad_histograms[int(step)] = histogram

    # ---- reading --------------------------------------------------------------------------------------
    @property
    def n_steps(self) -> int:
        return len(self.steps["step"])

    def column(self, name: str) -> np.ndarray[Any, np.dtype[np.float64]]:
        """One per-step column as a float array (None becomes NaN).

        >>> h = History("x"); h.column("loss").shape
        (0,)
        """
        numeric = [k for k in STEP_FIELDS if k != "fault"]
        if name not in numeric:
            if name == "fault":
                raise ValueError("history column 'fault' holds names, not numbers: use faults()")
            raise ValueError(f"unknown history column {name!r}: expected one of {', '.join(numeric)}")
        return _floats(self.steps[name])

    def faults(self) -> dict[str, list[int]]:
        """The steps (the ``step`` column's numbers) at which each fault happened.

        >>> h = History("x")
        >>> h.log_step(step=1, epoch=0, loss=float("nan"), accuracy=0.0, scale=1.0, skipped=True,
        ...            flushed=0.0, swallowed=0.0, lr=0.1, grad_norm=None, fault="nonfinite_batch")
        >>> h.faults()
        {'nonfinite_batch': [1]}
        """
        out: dict[str, list[int]] = {}
        for step, fault in zip(self.steps["step"], self.steps["fault"], strict=True):
            for name in filter(None, str(fault).split(",")):
                out.setdefault(name, []).append(int(step))
        return out

    def eval_column(self, name: str) -> np.ndarray[Any, np.dtype[np.float64]]:
        """One column of the evaluations (``epoch``, ``step``, ``test_accuracy``, ...) as floats.

        >>> History("x").eval_column("test_accuracy").shape
        (0,)
        """
        if name not in self.evals:
            raise ValueError(f"unknown evaluation column {name!r}: expected one of {', '.join(EVAL_FIELDS)}")
        return _floats(self.evals[name])

    @property
    def final(self) -> dict[str, Any]:
        """The last evaluation row (empty when there was none)."""
        if not self.evals["epoch"]:
            return {}
        return {k: v[-1] for k, v in self.evals.items()}

    @property
    def is_text(self) -> bool:
        """Whether the run trained a character model (its data set's ``kind`` is ``"text"``)."""
        data = self.meta.get("data")
        return isinstance(data, dict) and data.get("kind") == "text"

    def summary(self) -> dict[str, Any]:
        """Final test accuracy and loss, last training loss, skipped steps, mean flushed and
        swallowed shares; for a character model the final test (validation) loss in bits per
        character (else None); why the run stopped early ("" when it did not).

        >>> s = History("x").summary()
        >>> s["steps"], s["bits_per_char"], s["stopped"]
        (0, None, '')
        """
        n = self.n_steps
        f = self.final

        def mean(col: str) -> float | None:
            v = self.column(col)
            return float(np.mean(v)) if len(v) else None

        tail = self.column("loss")[-max(1, n // 10) :] if n else np.array([])
        return {
            "label": self.label,
            "steps": n,
            "skipped_steps": int(sum(bool(s) for s in self.steps["skipped"])),
            "final_scale": self.steps["scale"][-1] if n else None,
            "train_loss": float(np.mean(tail)) if len(tail) else None,
            "test_loss": f.get("test_loss"),
            "test_accuracy": f.get("test_accuracy"),
            "mean_flushed": mean("flushed"),
            "mean_swallowed": mean("swallowed"),
            "faults": {k: len(v) for k, v in self.faults().items()},
            "bits_per_char": bits_per_char(f.get("test_loss")) if self.is_text else None,
            "stopped": str(self.meta.get("stopped", "")),
        }

    # ---- saving ---------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Plain, strict-JSON-ready data."""

        def clean(d: dict[str, list[Any]]) -> dict[str, list[Any]]:
            return {k: [_json_float(v) for v in vs] for k, vs in d.items()}

        hist = {
            str(s): {k: (np.asarray(v).tolist() if isinstance(v, np.ndarray) else v) for k, v in h.items()}
            for s, h in self.histograms.items()
        }
        return {
            "label": self.label,
            "meta": self.meta,
            "steps": clean(self.steps),
            "evals": clean(self.evals),
            "histograms": hist,
            "operands": {k: clean(v) for k, v in self.operands.items()},
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> History:
        """Inverse of :meth:`to_dict`; anything else is one ValueError saying what is wrong.

        >>> History.from_dict({"label": "x", "steps": {"step": [1, 2], "loss": [0.5]}, "evals": {}})
        Traceback (most recent call last):
        ...
        ValueError: history columns of different lengths: step 2, loss 1
        """
        want_dict("history", d)
        label = want_str("history label", d.get("label"))
        meta = want_dict("history meta", d.get("meta", {}))
        steps_in = want_dict("history steps", d.get("steps"))
        evals_in = want_dict("history evals", d.get("evals", {}))
        hist_in = want_dict("history histograms", d.get("histograms", {}))
        ops_in = want_dict("history operands", d.get("operands", {}))
        n = _column_length(steps_in, "steps")
        # a history saved before a column existed gets that column's default at every step
        steps = {
            k: [_from_json_float(v) for v in steps_in[k]] if k in steps_in else [STEP_DEFAULTS.get(k)] * n
            for k in STEP_FIELDS
        }
        n_evals = _column_length(evals_in, "evals")
        evals = {
            k: [_from_json_float(v) for v in evals_in.get(k, [])]
            if k in evals_in or k not in EVAL_DEFAULTS
            else [EVAL_DEFAULTS[k]] * n_evals
            for k in EVAL_FIELDS
        }
        hist = {}
        for s, h in hist_in.items():
            if not s.isdigit():
                raise ValueError(f"history histogram key {shown(s)}: expected a step number")
            hist[int(s)] = dict(want_dict(f"history histogram {s}", h))
        operands: dict[str, dict[str, list[float]]] = {}
        for key, cols in ops_in.items():
            cols = want_dict(f"history operand {key}", cols)
            if cols and _column_length(cols, f"operand {key}") != n:
                raise ValueError(f"history operand {key}: expected {n} values a statistic (one a step)")
            operands[str(key)] = {k: [_number(v, f"operand {key} {k}") for v in vs] for k, vs in cols.items()}
        return cls(label, dict(meta), steps, evals, hist, operands=operands)

    def table(self) -> dict[str, list[Any]]:
        """The tidy table of :meth:`to_csv` and :meth:`to_pandas`: the columns :data:`CSV_FIELDS`,
        one row per step, each evaluation on the row of its step (an evaluation at a step that
        has no row, such as one before the first step, gets a row of its own, in step order);
        None where there is no value.

        >>> h = History("x")
        >>> h.log_step(step=1, epoch=0, loss=2.0, accuracy=0.5, scale=1.0, skipped=False, flushed=0.0,
        ...            swallowed=0.0, lr=0.1, grad_norm=None)
        >>> h.log_eval(epoch=0, step=0, train_loss=None, test_loss=2.5, test_accuracy=0.1)
        >>> t = h.table(); t["step"], t["loss"], t["test_loss"]
        ([0, 1], [None, 2.0], [2.5, None])
        """
        rows: list[dict[str, Any]] = [{k: self.steps[k][i] for k in STEP_FIELDS} for i in range(self.n_steps)]
        first_row: dict[int, int] = {}
        for i, row in enumerate(rows):
            first_row.setdefault(int(row["step"]), i)
        alone: list[dict[str, Any]] = []
        taken: set[int] = set()
        for j in range(len(self.evals["step"])):
            step = int(self.evals["step"][j])
            values = {
                "eval_epoch": self.evals["epoch"][j],
                **{k: self.evals[k][j] for k in EVAL_FIELDS[2:]},
            }
            at = first_row.get(step)
            if at is not None and at not in taken:
                taken.add(at)
                rows[at].update(values)
            else:  # no step row to sit on (or its row has an evaluation already)
                alone.append({"step": step, "epoch": values["eval_epoch"], **values})
        for extra in alone:  # before the first row of a later step: the table stays in step order
            at = next((i for i, r in enumerate(rows) if int(r["step"]) > extra["step"]), len(rows))
            rows.insert(at, extra)
        return {k: [r.get(k) for r in rows] for k in CSV_FIELDS}

    def to_csv(self, path: str | os.PathLike[str] | None = None) -> str:
        """The tidy table (:meth:`table`) as CSV: a header line, then one line per step; an empty
        field where there is no value, floats written exactly (Python's shortest repr: ``nan``,
        ``inf`` for the non-finite), booleans as ``True``/``False``. Written atomically to
        ``path`` when given; the text is returned either way.

        >>> h = History("x")
        >>> h.log_step(step=1, epoch=0, loss=0.1, accuracy=0.5, scale=1.0, skipped=False, flushed=0.0,
        ...            swallowed=0.0, lr=0.1, grad_norm=None, fault="nonfinite_batch,nonfinite_loss")
        >>> print(h.to_csv(), end="")
        step,epoch,loss,accuracy,scale,skipped,flushed,swallowed,lr,grad_norm,fault,eval_epoch,train_loss,test_loss,test_accuracy,test_loss_in_format
        1,0,0.1,0.5,1.0,False,0.0,0.0,0.1,,"nonfinite_batch,nonfinite_loss",,,,,
        """
        t = self.table()
        buf = io.StringIO()
        out = csv.writer(buf, lineterminator="\n")
        out.writerow(CSV_FIELDS)
        for i in range(len(t["step"])):
            out.writerow([_csv_value(t[k][i]) for k in CSV_FIELDS])
        text = buf.getvalue()
        if path is not None:
            write_atomic(path, text)
        return text

    def to_pandas(self) -> Any:
        """The tidy table (:meth:`table`) as a pandas DataFrame, one row per step: numbers as
        float64 (NaN where there is no value; ``step`` as int64), ``skipped`` as bool (False on a
        row of an evaluation alone), ``fault`` as text.

        >>> h = History("x")
        >>> h.log_step(step=1, epoch=0, loss=0.5, accuracy=0.5, scale=1.0, skipped=False, flushed=0.0,
        ...            swallowed=0.0, lr=0.1, grad_norm=None)
        >>> df = h.to_pandas(); df.shape, float(df["loss"].iloc[0]), bool(df["test_loss"].isna().all())
        ((1, 16), 0.5, True)
        """
        try:
            import pandas as pd  # type: ignore[import-untyped,unused-ignore]
        except ImportError as e:
            raise ImportError("History.to_pandas needs pandas: pip install pandas") from e
        t = self.table()
        columns: dict[str, Any] = {}
        for k in CSV_FIELDS:
            if k == "fault":
                columns[k] = [("" if v is None else str(v)) for v in t[k]]
            elif k == "skipped":
                columns[k] = np.array([bool(v) for v in t[k]], dtype=bool)
            elif k == "step":
                columns[k] = np.array([int(v) for v in t[k]], dtype=np.int64)
            else:
                columns[k] = _floats(t[k])
        return pd.DataFrame(columns, columns=list(CSV_FIELDS))

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write to ``path``: ``.json`` (everything), ``.npz`` (columns as arrays, the rest as JSON)
        or ``.csv`` (the per-step table only: see :meth:`to_csv`).

        >>> import tempfile, os
        >>> with tempfile.TemporaryDirectory() as d:
        ...     h = History("x"); p = h.save(os.path.join(d, "h.npz"))
        ...     History.load(p).label
        'x'
        """
        p = Path(path)
        if p.suffix == ".json":
            write_atomic(p, json.dumps(self.to_dict(), indent=1, allow_nan=False) + "\n")
        elif p.suffix == ".npz":
            arrays: dict[str, Any] = {f"steps/{k}": self.column(k) for k in STEP_FIELDS if k != "fault"}
            arrays["steps/fault"] = np.array([str(f) for f in self.steps["fault"]], dtype=np.str_)
            arrays.update({f"evals/{k}": self.eval_column(k) for k in EVAL_FIELDS})
            d = self.to_dict()
            rest = {"label": d["label"], "meta": d["meta"], "histograms": d["histograms"]}
            arrays = {"json": np.array(json.dumps(rest, allow_nan=False)), **arrays}
            write_atomic(p, lambda fh: np.savez(fh, **arrays))
        elif p.suffix == ".csv":
            self.to_csv(p)
        else:
            raise ValueError(f"history file {str(p)!r}: expected a .json, .npz or .csv name")
        return p

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> History:
        """Read what :meth:`save` wrote (see :meth:`save` for an example); a missing, damaged or
        foreign file is one ValueError naming it, and so is anything but a regular file and an
        .npz whose members would inflate past :data:`floatlab.io.MAX_BYTES`."""
        p = Path(path)
        if p.suffix == ".csv":
            raise ValueError(
                f"history file {str(p)!r}: a CSV holds the per-step table only; load the run's .json "
                "or .npz (or read the CSV with pandas.read_csv)"
            )
        if p.suffix not in (".json", ".npz"):
            raise ValueError(f"history file {str(p)!r}: expected a .json or .npz name")
        if not p.is_file():
            what = "a directory" if p.is_dir() else "no such file" if not p.exists() else "not a regular file"
            raise ValueError(f"history file {str(p)!r}: {what}")
        try:
            if p.suffix == ".npz":
                check_archive(str(p))  # before anything is inflated
            return cls._read(p)
        except Exception as e:  # json, zipfile, numpy and the dict lookups raise several kinds
            raise ValueError(f"history file {str(p)!r} is damaged or not a floatlab history: {e!r}") from None

    @classmethod
    def _read(cls, p: Path) -> History:
        if p.suffix == ".json":
            return cls.from_dict(json.loads(p.read_text(encoding="utf-8")))
        # opened here: np.load leaks its own file handle when the zip is damaged
        with open(p, "rb") as fh, np.load(fh, allow_pickle=False) as z:
            rest = json.loads(str(z["json"]))
            n = len(z["steps/step"])
            steps = {
                k: [_npz_value(k, v) for v in z[f"steps/{k}"].tolist()]
                if f"steps/{k}" in z.files
                else [STEP_DEFAULTS.get(k)] * n
                for k in STEP_FIELDS
            }
            evals = {
                k: [_npz_value(k, v) for v in z[f"evals/{k}"].tolist()]
                for k in EVAL_FIELDS
                if f"evals/{k}" in z.files  # (from_dict fills a field a file written before it lacks)
            }
        return cls.from_dict({**rest, "steps": steps, "evals": evals})


def _number(v: Any, what: str) -> float:
    """A saved statistic as a float (strict JSON spells the non-finite ones as names)."""
    v = _from_json_float(v)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"history {what} value {shown(v)}: expected a number")
    return float(v)


def _column_length(columns: dict[str, Any], what: str) -> int:
    """The common length of the columns (lists of numbers, None, booleans or strings)."""
    lengths = {}
    for k, v in columns.items():
        if not isinstance(v, list) or not all(x is None or isinstance(x, (bool, int, float, str)) for x in v):
            raise ValueError(f"history {what} column {k!r}={shown(v)}: expected a list of values")
        lengths[k] = len(v)
    if len(set(lengths.values())) > 1:
        listed = ", ".join(f"{k} {n}" for k, n in lengths.items())
        raise ValueError(f"history columns of different lengths: {listed}")
    return next(iter(lengths.values()), 0)


def _csv_value(v: Any) -> str:
    """One CSV field: "" for None, exact floats (shortest repr), ``True``/``False``, text as is."""
    if v is None:
        return ""
    if isinstance(v, (bool, np.bool_)):
        return str(bool(v))
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return repr(float(v))
    return str(v)


def _floats(values: list[Any]) -> np.ndarray[Any, np.dtype[np.float64]]:
    return np.array([np.nan if v is None else float(v) for v in values], dtype=np.float64)


def _npz_value(key: str, v: Any) -> Any:
    if key == "fault":
        return str(v)
    if key in ("step", "epoch"):
        return int(v)
    if key == "skipped":
        return bool(v)
    if key in ("grad_norm", "test_loss_in_format") and math.isnan(v):
        return None
    return v
