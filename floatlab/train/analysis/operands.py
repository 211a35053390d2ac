"""The fp8 recipes' record of every GEMM operand over training: a summary table and a figure.

Under an fp8 recipe (:class:`~floatlab.train.recipes.Fp8Recipe`) the trainer records, at every
step and for every operand of every linear layer (``"h0.W1.input"``, ``"h0.W1.weight"``,
``"h0.W1.grad"``), the tensor's amax, the scale it was multiplied by before the cast to fp8, and
the shares of its values that saturated at the format's largest value, that were non-zero and
became zero (flushed), and that landed on fp8's subnormals (:attr:`History.operands`).
:func:`operand_summary` condenses that to one row per operand; :func:`plot_operands` draws the
amax and the scale of each over the steps, one line per layer, one panel per role.

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

import math
import os
from typing import TYPE_CHECKING, Any

import numpy as np

from floatlab.io import atomic_output, save_figure
from floatlab.train.recipes import ROLES

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from floatlab.train.history import History

__all__ = ["operand_summary", "plot_operands"]


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


def plot_operands(
    history: History,
    path: str | os.PathLike[str] | None = None,
    *,
    title: str | None = None,
) -> Figure:
    """Draw each operand's amax (top row) and scale (bottom row) over the steps, one panel per
    role (input, weight, grad), one line per layer, both on log axes; save to ``path`` when given.

    >>> import tempfile
    >>> from floatlab.train.history import History
    >>> h = History("fp8"); h.log_step(step=1, epoch=0, loss=1.0, accuracy=0.0, scale=1.0,
    ...     skipped=False, flushed=0.0, swallowed=0.0, lr=0.1, grad_norm=None)
    >>> h.log_operands({"W0.grad": {"amax": 0.5, "scale": 65536.0}})
    >>> with tempfile.TemporaryDirectory() as d:
    ...     path = os.path.join(d, "scales.png")
    ...     fig = plot_operands(h, path); os.path.exists(path)
    True
    """
    if not history.operands:
        raise ValueError(
            f"history {history.label!r} has no fp8 operand record: expected a run under an fp8 recipe "
            "(fp8-tensorwise, fp8-delayed, fp8-blockwise)"
        )
    import matplotlib

    if path is not None:
        matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure as _Figure

    steps = np.asarray(history.steps["step"], dtype=np.float64)
    fig = _Figure(figsize=(15, 7), layout="constrained")
    axes = fig.subplots(2, len(ROLES), sharex=True)
    layers = sorted({key.rsplit(".", 1)[0] for key in history.operands})
    for j, role in enumerate(ROLES):
        for i, layer in enumerate(layers):
            cols = history.operands.get(f"{layer}.{role}")
            if cols is None:
                continue
            color = f"C{i % 10}"
            for row, stat in enumerate(("amax", "scale")):
                v = np.asarray(cols.get(stat, [math.nan] * len(steps)), dtype=np.float64)
                axes[row, j].plot(steps[: len(v)], v, color=color, lw=1, label=layer)
        axes[0, j].set(title=f"{role}: amax", yscale="log")
        axes[1, j].set(title=f"{role}: scale (fp8 max / amax)", yscale="log", xlabel="step")
    for ax in axes.flat:
        ax.grid(alpha=0.3)
    drawn = [ax for ax in axes[0] if ax.get_lines()]
    if drawn:  # one legend of the layers, on the first panel that has them
        drawn[0].legend(fontsize=7, ncol=2)
    fig.suptitle(title or f"{history.label}: the fp8 operands' amax and scale, per layer")
    if path is not None:
        with atomic_output(path) as tmp:  # (a full disk leaves any old figure as it was)
            save_figure(fig, tmp, dpi=110, fmt=os.path.splitext(path)[1][1:] or "png")
    return fig
