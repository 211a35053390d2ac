"""A sweep's per-step curves: every run's per-step history as one tidy table, one row per run and
step, beside the table of evaluations.

Each run sends its steps as arrays (:func:`step_arrays`: the columns of
:data:`floatlab.train.history.STEP_FIELDS`, numbers as int64, float64 and bool, the faults as text);
:func:`curves_frame` puts them together with the run's key and configuration columns (the same as
the table's; the configured ``lr`` is ``config_lr`` there, beside each step's ``lr``: see
:func:`config_name`), the key and the configuration as categoricals, so that 100 runs of 5000 steps (half a
million rows) take tens of megabytes, not hundreds. The file beside the table (``<stem>.curves.parquet``
or ``.csv``, :func:`curves_path`) holds the key and the steps only: the configuration of each key is
in the table, and :func:`floatlab.sweeps.read_table` and :func:`floatlab.sweeps.read_curves` join it
back. The file is written whole and atomically after every run (:class:`CurvesFile`), like the table.

>>> from floatlab.train.history import History
>>> h = History("x")
>>> for s in (1, 2):
...     h.log_step(step=s, epoch=0, loss=1.0 / s, accuracy=0.5, scale=1.0, skipped=False, flushed=0.0,
...                swallowed=0.0, lr=0.1, grad_norm=None)
>>> a = step_arrays(h)
>>> a["step"].tolist(), a["loss"].tolist(), a["grad_norm"].tolist()
([1, 2], [1.0, 0.5], [nan, nan])
>>> curves_path("runs/sweep.parquet")
'runs/sweep.curves.parquet'
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from floatlab.io import atomic_output
from floatlab.train.history import STEP_FIELDS

if TYPE_CHECKING:
    from floatlab.train.history import History

__all__ = [
    "CURVE_COLUMNS",
    "CurvesFile",
    "config_name",
    "curves_frame",
    "curves_path",
    "read_curves_file",
    "step_arrays",
    "whole",
]

#: the columns of the curves file: the run's key, then its steps
CURVE_COLUMNS: tuple[str, ...] = ("run_id", *STEP_FIELDS)
_INTS = ("step", "epoch")
_BOOLS = ("skipped",)
_TEXT = ("fault",)
_FLOATS = tuple(k for k in STEP_FIELDS if k not in (*_INTS, *_BOOLS, *_TEXT))

Arrays = dict[str, "np.ndarray[Any, Any]"]


def config_name(column: str) -> str:
    """The name a configuration column of the table has in the curves table: its own, but for one
    that a step's column also has (``lr``, the configured learning rate, beside each step's
    scheduled ``lr``), which is ``config_`` and its name.

    >>> config_name("precision"), config_name("lr")
    ('precision', 'config_lr')
    """
    return f"config_{column}" if column in STEP_FIELDS else column


def step_arrays(history: History) -> Arrays:
    """``history``'s per-step columns as arrays (None becomes NaN): what a run sends back.

    >>> from floatlab.train.history import History
    >>> h = History("x")
    >>> h.log_step(step=1, epoch=0, loss=2.0, accuracy=0.5, scale=8.0, skipped=True, flushed=0.25,
    ...            swallowed=0.0, lr=0.1, grad_norm=None, fault="nonfinite_grad")
    >>> a = step_arrays(h)
    >>> a["scale"].tolist(), a["skipped"].tolist(), a["fault"].tolist(), a["step"].dtype.name
    ([8.0], [True], ['nonfinite_grad'], 'int64')
    """
    out: Arrays = {}
    for k in STEP_FIELDS:
        if k in _INTS:
            out[k] = np.asarray(history.steps[k], dtype=np.int64).reshape(-1)
        elif k in _BOOLS:
            out[k] = np.asarray([bool(v) for v in history.steps[k]], dtype=bool)
        elif k in _TEXT:
            out[k] = np.asarray([str(v or "") for v in history.steps[k]], dtype=object)
        else:
            out[k] = history.column(k).astype(np.float64)
    return out


def curves_path(table: str | os.PathLike[str]) -> str:
    """The curves file beside the table ``table``: ``<stem>.curves<suffix>`` (a curves file's own
    name is its own).

    >>> curves_path("a.csv"), curves_path("a.curves.csv")
    ('a.curves.csv', 'a.curves.csv')
    """
    name = os.fspath(table)
    stem, suffix = os.path.splitext(name)
    return name if stem.endswith(".curves") else f"{stem}.curves{suffix}"


def _empty() -> Arrays:
    return {
        k: np.zeros(
            0, dtype=np.int64 if k in _INTS else bool if k in _BOOLS else object if k in _TEXT else float
        )
        for k in STEP_FIELDS
    }


def _categorical(values: Any) -> Any:
    import pandas as pd  # type: ignore[import-untyped,unused-ignore]

    return pd.Categorical(values)


def _shared_frame_type() -> Any:
    """A DataFrame that a deep copy shares rather than copies: pandas deep-copies a table's
    ``attrs`` into every table derived from it, and half a million rows copied at each ``df[...]``
    would cost more than the sweep's table itself."""
    global _SHARED
    if _SHARED is None:
        import pandas as pd

        class SharedFrame(pd.DataFrame):  # type: ignore[misc]
            """The sweep's curves: a DataFrame that tables derived from the sweep's share."""

            def __deepcopy__(self, memo: Any = None) -> SharedFrame:
                return self

        SharedFrame.__module__ = __name__
        SharedFrame.__qualname__ = "_SHARED_FRAME"
        _SHARED = SharedFrame
    return _SHARED


_SHARED: Any = None


def __getattr__(name: str) -> Any:  # (so that a pickled SharedFrame finds its class again)
    if name == "_SHARED_FRAME":
        return _shared_frame_type()
    raise AttributeError(name)


def curves_frame(parts: Iterable[tuple[str, Arrays]], configs: Any = None) -> Any:
    """The tidy curves table of ``parts`` (each run's key and :func:`step_arrays`, in order): the
    key, the configuration columns of ``configs`` (a DataFrame with ``run_id`` and one row per run,
    or None), then the steps; the key and configuration as categoricals. A frame that deep copies
    share (see :func:`_shared_frame_type`).

    >>> import pandas as pd
    >>> a = {k: v for k, v in _empty().items()}
    >>> a["step"] = np.array([1, 2]); a["loss"] = np.array([0.5, 0.25])
    >>> for k in a:
    ...     if len(a[k]) == 0:
    ...         a[k] = np.zeros(2, dtype=a[k].dtype)
    >>> f = curves_frame([("r1", a)], pd.DataFrame({"run_id": ["r1"], "precision": ["bf16"]}))
    >>> list(f.columns[:4]), f["precision"].tolist(), f["loss"].tolist()
    (['run_id', 'precision', 'step', 'epoch'], ['bf16', 'bf16'], [0.5, 0.25])
    """
    import pandas as pd

    parts = list(parts)
    keys = [k for k, _ in parts]
    lengths = np.asarray([len(a["step"]) for _, a in parts], dtype=np.int64)
    which = np.repeat(np.arange(len(parts)), lengths)
    data: dict[str, Any] = {
        "run_id": pd.Categorical.from_codes(which, categories=pd.Index(keys, dtype=object))
    }
    if configs is not None and len(configs.columns) > 1:
        per_run = configs.drop_duplicates("run_id").set_index("run_id").reindex(keys)
        for col in per_run.columns:
            codes, uniques = pd.factorize(per_run[col], use_na_sentinel=True)
            data[config_name(col)] = pd.Categorical.from_codes(np.asarray(codes)[which], categories=uniques)
    arrays = [a for _, a in parts] or [_empty()]
    for k in STEP_FIELDS:
        col = np.concatenate([a[k] for a in arrays])
        data[k] = _categorical(col.astype(str)) if k in _TEXT else col
    frame = pd.DataFrame(data, copy=False)
    return _shared_frame_type()(frame)


class CurvesFile:
    """The curves of a sweep's runs, kept by key and written whole to ``path`` (.parquet or .csv)
    after each run, atomically; ``path`` None keeps them in memory only. A CSV keeps each run's
    text once it is made, so that writing after a run costs the file's bytes, not its formatting.

    >>> import tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "s.curves.parquet")
    >>> f = CurvesFile(p)
    >>> one = {k: np.zeros(1, dtype=v.dtype) for k, v in _empty().items()}
    >>> one["step"][0], one["fault"][0] = 1, ""
    >>> f.add("r1", one); f.add("r0", None)   # a failed run has no steps
    >>> f.write(["r0", "r1"])
    >>> runs, cut = read_curves_file(p)
    >>> sorted(runs), runs["r1"]["step"].tolist(), cut
    (['r1'], [1], set())
    """

    def __init__(self, path: str | None, old: Mapping[str, Arrays] | None = None) -> None:
        self.path = path
        self.runs: dict[str, Arrays] = dict(old or {})
        self._text: dict[str, str] = {}
        self._tables: dict[str, Any] = {}

    def add(self, key: str, arrays: Arrays | None) -> None:
        self.runs[key] = arrays if arrays is not None else _empty()
        self._text.pop(key, None)
        self._tables.pop(key, None)

    def write(self, order: list[str]) -> None:
        """Write the runs ``order`` names (each that is here), in that order."""
        if self.path is None:
            return
        keys = [k for k in order if k in self.runs]
        if self.path.lower().endswith(".csv"):
            chunks = [self._csv(k) for k in keys]
            with atomic_output(self.path) as tmp, open(tmp, "w", encoding="utf-8", newline="") as fh:
                fh.write(",".join(CURVE_COLUMNS) + "\n")
                fh.writelines(chunks)
            return
        import pyarrow as pa
        import pyarrow.parquet as pq

        tables = [self._arrow(k) for k in keys] or [_plain_arrow("", _empty())]
        with atomic_output(self.path) as tmp:
            pq.write_table(pa.concat_tables(tables), tmp)

    def _csv(self, key: str) -> str:
        text = self._text.get(key)
        if text is None:
            buf = io.StringIO()
            _plain([key], [self.runs[key]]).to_csv(buf, index=False, header=False, lineterminator="\n")
            text = self._text[key] = buf.getvalue()
        return text

    def _arrow(self, key: str) -> Any:
        table = self._tables.get(key)
        if table is None:
            table = self._tables[key] = _plain_arrow(key, self.runs[key])
        return table


def _plain_arrow(key: str, arrays: Arrays) -> Any:
    """One run's rows of the file as a pyarrow table (made once per run: a write after each run
    then costs the file's encoding, not the conversion of every run before)."""
    import pyarrow as pa

    n = len(arrays["step"])
    cols = {"run_id": pa.array([key] * n, type=pa.string())}
    for k in STEP_FIELDS:
        v = arrays[k]
        cols[k] = pa.array([str(x) for x in v], type=pa.string()) if k in _TEXT else pa.array(v)
    return pa.table(cols)


def _plain(keys: list[str], arrays: list[Arrays]) -> Any:
    """The file's frame: the key and the steps, no configuration."""
    import pandas as pd

    lengths = [len(a["step"]) for a in arrays]
    data: dict[str, Any] = {
        "run_id": pd.Categorical.from_codes(
            np.repeat(np.arange(len(keys)), lengths), categories=pd.Index(keys, dtype=object)
        )
    }
    for k in STEP_FIELDS:
        data[k] = np.concatenate([a[k] for a in arrays]) if arrays else _empty()[k]
    return pd.DataFrame(data, copy=False)


def read_curves_file(path: str) -> tuple[dict[str, Arrays], set[str]]:
    """The runs of a curves file, by key, and the keys of the runs whose rows were cut short (a CSV
    that ends mid-row); a file that cannot be read is one ValueError.

    >>> import tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "t.curves.csv")
    >>> f = CurvesFile(p, {"r": {**_empty(), "step": np.array([1], dtype=np.int64)}})
    >>> f.runs["r"] = {k: (v if k == "step" else np.zeros(1, dtype=v.dtype)) for k, v in f.runs["r"].items()}
    >>> f.write(["r"])
    >>> runs, cut = read_curves_file(p)
    >>> runs["r"]["step"].tolist(), cut
    ([1], set())
    """
    import pandas as pd

    cut: set[str] = set()
    try:
        if path.lower().endswith(".csv"):
            with open(path, encoding="utf-8", newline="") as fh:
                text = fh.read()
            if text and not text.endswith("\n"):  # the file ends inside its last row
                text, _, partial = text.rpartition("\n")
                lines = text.split("\n")
                if "," in partial:
                    cut.add(partial.split(",", 1)[0])
                elif len(lines) > 1:  # its key may be cut: the run before it is not trusted either
                    cut.add(lines[-1].split(",", 1)[0])
                text += "\n"
            floats = {k: [""] for k in _FLOATS}
            df = pd.read_csv(
                io.StringIO(text),
                dtype={"run_id": str, "fault": str, **{k: "float64" for k in _FLOATS}},
                keep_default_na=False,
                na_values=floats,
            )
        else:
            df = pd.read_parquet(path)
    except Exception as e:  # a foreign or broken file: the readers raise many kinds
        raise ValueError(f"sweep curves {path!r} cannot be read: {type(e).__name__}: {e}") from None
    if list(df.columns) != list(CURVE_COLUMNS):
        raise ValueError(f"sweep curves {path!r}: expected the columns {', '.join(CURVE_COLUMNS)}")
    runs: dict[str, Arrays] = {}
    keys = df["run_id"].astype(str).to_numpy()
    if not len(keys):
        return runs, cut
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    ends = np.r_[starts[1:], len(keys)]
    try:
        cols = {
            k: df[k].to_numpy(
                dtype=np.int64
                if k in _INTS
                else bool
                if k in _BOOLS
                else object
                if k in _TEXT
                else np.float64
            )
            for k in STEP_FIELDS
        }
    except (TypeError, ValueError) as e:  # an empty or non-number where a number belongs
        raise ValueError(f"sweep curves {path!r} cannot be read: {type(e).__name__}: {e}") from None
    cols["fault"] = np.asarray(["" if v is None else str(v) for v in cols["fault"]], dtype=object)
    for a, b in zip(starts, ends, strict=True):
        key = str(keys[a])
        if key in runs:  # one run's rows apart: not a file this sweep wrote
            cut.add(key)
        runs[key] = {k: v[a:b] for k, v in cols.items()}
    return runs, cut


def whole(arrays: Arrays | None, steps_run: Any) -> bool:
    """Whether ``arrays`` are every step of a run that ran ``steps_run`` steps (None, or NaN: a run
    that failed, which has none), numbered up from 1.

    >>> whole({"step": np.array([1, 2])}, 2), whole({"step": np.array([1])}, 2), whole(None, None)
    (True, False, True)
    """
    import math

    none = steps_run is None or (isinstance(steps_run, float) and math.isnan(steps_run))
    if arrays is None:
        return none
    steps = arrays["step"]
    if none:
        return len(steps) == 0
    return len(steps) == int(steps_run) and bool(np.all(steps == np.arange(1, len(steps) + 1)))
