"""The trainer's figures, in one place: runs side by side (:func:`compare`) and the fp8 operands
over training (:func:`plot_operands`).

Each returns a :class:`matplotlib.figure.Figure` built without pyplot: nothing here chooses or
changes matplotlib's backend, the figure displays itself in a notebook, and a ``path`` saves it
atomically with nothing in the file that changes from run to run.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from floatlab.io import atomic_output, save_figure
from floatlab.train.recipes import ROLES

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from floatlab.train.history import History

__all__ = ["compare", "plot_operands"]


def _saved(fig: Figure, path: str | os.PathLike[str] | None) -> Figure:
    """``fig``, written to ``path`` first when one is given (the file's type from its suffix)."""
    if path is not None:
        with atomic_output(path) as tmp:  # (a full disk leaves any old figure as it was)
            save_figure(fig, tmp, dpi=110, fmt=os.path.splitext(path)[1][1:] or "png")
    return fig


def compare(
    histories: Sequence[History],
    path: str | os.PathLike[str] | None = None,
    *,
    title: str | None = None,
) -> Figure:
    """Plot the runs side by side: training loss, test accuracy (for character models: validation
    bits per character), loss scale, and the shares of flushed gradients and swallowed updates;
    save to ``path`` when given.

    >>> import tempfile, os
    >>> from floatlab.train.history import History
    >>> h = History("a"); h.log_step(step=1, epoch=0, loss=1.0, accuracy=0.5, scale=1.0, skipped=False,
    ...     flushed=0.0, swallowed=0.0, lr=0.1, grad_norm=None)
    >>> with tempfile.TemporaryDirectory() as d:
    ...     fig = compare([h], os.path.join(d, "c.png")); os.path.exists(os.path.join(d, "c.png"))
    True
    """
    if not histories:
        raise ValueError("compare: expected at least one history")
    from matplotlib.figure import Figure as _Figure

    text = all(h.is_text for h in histories)
    fig = _Figure(figsize=(16, 4.2), layout="constrained")
    axes = fig.subplots(1, 4)
    for i, h in enumerate(histories):
        color = f"C{i % 10}"  # one colour per run in every panel
        steps = h.column("step")
        axes[0].plot(steps, h.column("loss"), color=color, label=h.label, lw=1)
        if h.evals["epoch"]:
            axes[1].plot(
                h.eval_column("step"),
                h.eval_column("test_loss") / math.log(2.0) if text else 100 * h.eval_column("test_accuracy"),
                marker="o",
                ms=3,
                color=color,
                label=h.label,
            )
        axes[2].plot(steps, h.column("scale"), color=color, label=h.label, lw=1)
        axes[3].plot(steps, h.column("flushed"), color=color, label=f"{h.label} flushed", lw=1)
        axes[3].plot(steps, h.column("swallowed"), color=color, label=f"{h.label} swallowed", lw=1, ls="--")
    axes[0].set(title="training loss", xlabel="step")
    axes[1].set(title="validation bits per character" if text else "test accuracy (%)", xlabel="step")
    axes[2].set(title="loss scale", xlabel="step", yscale="log")
    axes[3].set(title="gradients flushed / updates swallowed", xlabel="step", ylim=(-0.02, 1.02))
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    axes[3].legend(fontsize=7)
    if title:
        fig.suptitle(title)
    return _saved(fig, path)


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
    return _saved(fig, path)
