"""The fp8 recipes' record of every GEMM operand over training, as a summary table.

Under an fp8 recipe (:class:`~floatlab.train.recipes.Fp8Recipe`) the trainer records, at every
step and for every operand of every linear layer (``"h0.W1.input"``, ``"h0.W1.weight"``,
``"h0.W1.grad"``), the tensor's amax, the scale it was multiplied by before the cast to fp8, and
the shares of its values that saturated at the format's largest value, that were non-zero and
became zero (flushed), and that landed on fp8's subnormals (:attr:`History.operands`).
:func:`operand_summary` condenses that to one row per operand;
:func:`~floatlab.train.analysis.plots.plot_operands` draws the amax and the scale of each over the
steps.

>>> from floatlab.train.history import History
>>> h = History("fp8")
>>> for step, amax in enumerate([1.0, 2.0, 8.0], 1):
...     h.log_step(step=step, epoch=0, loss=1.0, accuracy=0.0, scale=1.0, skipped=False, flushed=0.0,
...                swallowed=0.0, lr=0.1, grad_norm=None)
...     h.log_operands({"W0.input": {"amax": amax, "scale": 448 / amax, "saturated": 0.0,
...                                   "flushed": 0.0, "subnormal": 0.01}})
>>> row = operand_summary(h)[0]
>>> row["operand"], row["amax_max"], row["scale_min"], row["scale_max"]
('W0.input', 8.0, 56.0, 448.0)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from floatlab.train.history import History

__all__ = ["operand_summary"]


def _finite(values: list[float]) -> np.ndarray[Any, np.dtype[np.float64]]:
    v = np.asarray(values, dtype=np.float64)
    return v[np.isfinite(v)]


def operand_summary(history: History) -> list[dict[str, Any]]:
    """One row per recorded operand: its largest amax, the smallest and largest scale it used,
    and the largest share of its values saturated, flushed and subnormal at any one step, with
    the step of the worst saturation (None where it never saturated).

    >>> from floatlab.train.history import History
    >>> operand_summary(History("fp32"))
    []
    """
    rows = []
    steps = history.steps["step"]
    for key, cols in history.operands.items():
        row: dict[str, Any] = {"operand": key}
        for stat, how in (("amax", "max"), ("scale", "min"), ("scale", "max")):
            v = _finite(cols.get(stat, []))
            row[f"{stat}_{how}"] = float(getattr(np, how)(v)) if len(v) else None
        for share in ("saturated", "flushed", "subnormal"):
            v = np.asarray(cols.get(share, []), dtype=np.float64)
            row[f"{share}_max"] = float(np.nanmax(v)) if len(v) and np.isfinite(v).any() else None
        sat = np.nan_to_num(np.asarray(cols.get("saturated", []), dtype=np.float64), nan=0.0)
        row["saturated_at"] = int(steps[int(np.argmax(sat))]) if len(sat) and sat.max() > 0 else None
        rows.append(row)
    return rows
