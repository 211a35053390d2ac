"""The trainer's figures, in one place: runs side by side (:func:`compare`) and the fp8 operands
over training (:func:`plot_operands`).

Each returns a :class:`matplotlib.figure.Figure` built without pyplot: nothing here chooses or
changes matplotlib's backend, the figure displays itself in a notebook, and a ``path`` saves it
atomically with nothing in the file that changes from run to run.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from floatlab.io import atomic_output, save_figure
from floatlab.train.analysis.runs import Run, group_runs
from floatlab.train.analysis.seeds import t_quantile
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


#: one line style per label, with its colour, so that runs that coincide stay visible
_STYLES: tuple[str, ...] = ("-", "--", "-.", ":")


def _figure(**kw: Any) -> Figure:
    from floatlab._figure import ShownFigure

    return ShownFigure(**kw)


def _matrix(runs: Sequence[Run], column: str, evals: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The steps (of the longest run) and one row per run of ``column``, NaN past a run's end."""
    cols = [(r.evals if evals else r.steps).get(column, np.array([])) for r in runs]
    steps_of = [(r.evals if evals else r.steps).get("step", np.array([])) for r in runs]
    n = max((len(c) for c in cols), default=0)
    out = np.full((len(runs), n), np.nan)
    for i, c in enumerate(cols):
        out[i, : len(c)] = c
    longest = max(steps_of, key=len) if steps_of else np.array([])
    return np.asarray(longest, np.float64), out


def _band(m: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean over the rows, and the ``level`` Student-t interval where two rows or more have a value."""
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # (all-NaN columns: no value there)
        count = np.sum(np.isfinite(m), axis=0)
        mean = np.nanmean(m, axis=0) if m.size else np.array([])
        sd = np.nanstd(m, axis=0, ddof=1) if m.shape[0] > 1 else np.full(m.shape[1], np.nan)
    t = np.array([t_quantile(0.5 + level / 2, int(c) - 1) if c >= 2 else np.nan for c in count])
    half = t * sd / np.sqrt(np.maximum(count, 1))
    return mean, mean - half, mean + half


def _smooth(v: np.ndarray, span: int) -> np.ndarray:
    """A debiased exponential moving average over ``span`` steps (TensorBoard's), skipping NaN."""
    alpha = 2.0 / (span + 1.0)
    out = np.full(len(v), np.nan)
    acc = weight = 0.0
    for i, x in enumerate(v):
        if math.isfinite(x):
            acc = (1 - alpha) * acc + alpha * x
            weight = (1 - alpha) * weight + alpha
        out[i] = acc / weight if weight else np.nan
    return out


def _draw(ax: Any, x: np.ndarray, m: np.ndarray, style: dict[str, Any], **kw: Any) -> None:
    """The mean of ``m``'s rows against ``x``, and its band when there are two rows or more."""
    mean, low, high = _band(m)
    ax.plot(x, mean, **style, **kw)
    if m.shape[0] > 1:
        ax.fill_between(x, low, high, color=style["color"], alpha=0.18, linewidth=0)


def _legend_name(label: str, runs: Sequence[Run]) -> str:
    if len(runs) > 1:
        return f"{label} ({len(runs)} seeds)"
    return label if runs[0].seed is None else f"{label} (seed {runs[0].seed})"


def compare(
    runs: Any,
    path: str | os.PathLike[str] | None = None,
    *,
    title: str | None = None,
    by: str | Sequence[str] | None = None,
    smooth: int | None = None,
) -> Figure:
    """One figure that compares precision policies over seeds: training loss (smoothed over
    ``smooth`` steps, the raw mean faint; bits per character for a character model), validation
    (bits per character, or test accuracy in percent), the loss scale on a log axis with skipped
    steps marked, and the shares of flushed gradients and swallowed updates in percent on a symlog
    axis. Each label (policy) has one colour and line style in every panel, the mean over its seeds
    and, with two seeds or more, the 95% band; the legend names each label once.

    ``runs``: a list of histories (grouped by label), the dict :func:`run_seeds` returns, or a
    sweep's table with its curves (grouped by the columns ``by``). Saved to ``path`` when given
    (any matplotlib backend); the figure displays itself in a notebook, and nothing here changes
    matplotlib's backend.

    >>> import tempfile, os
    >>> from floatlab.train.history import History
    >>> h = History("a"); h.log_step(step=1, epoch=0, loss=1.0, accuracy=0.5, scale=1.0, skipped=False,
    ...     flushed=0.0, swallowed=0.0, lr=0.1, grad_norm=None)
    >>> with tempfile.TemporaryDirectory() as d:
    ...     fig = compare([h], os.path.join(d, "c.png")); os.path.exists(os.path.join(d, "c.png"))
    True
    >>> [ax.get_title() for ax in fig.axes][:5]
    ['training loss', 'test accuracy', 'loss scale', 'gradients flushed to zero', 'updates swallowed']
    """
    from matplotlib.lines import Line2D

    g = group_runs(runs, by=by)
    if smooth is not None and (isinstance(smooth, bool) or not isinstance(smooth, int) or smooth < 1):
        raise ValueError(f"smooth={smooth!r}: expected a number of steps >= 1")
    fig = _figure(figsize=(15, 8), layout="constrained")
    axes = fig.subplots(2, 3).ravel()
    loss_unit = "bits/char" if g.text else "nats"
    to_unit = 1.0 / math.log(2.0) if g.text else 1.0
    handles, names = [], []
    for i, label in enumerate(g.labels):
        runs_ = g.groups[label]
        style: dict[str, Any] = {"color": f"C{i % 10}", "ls": _STYLES[(i // 10 + i) % len(_STYLES)]}
        steps, loss = _matrix(runs_, "loss")
        span = smooth or max(1, len(steps) // 40)
        if len(steps):
            axes[0].plot(steps, np.nanmean(loss, axis=0) * to_unit, color=style["color"], lw=0.6, alpha=0.25)
            smoothed = np.array([_smooth(row, span) for row in loss]) * to_unit
            _draw(axes[0], steps, smoothed, style, lw=1.6)
        e_steps, e_vals = _matrix(runs_, "test_loss" if g.text else "test_accuracy", evals=True)
        if len(e_steps):
            _draw(axes[1], e_steps, e_vals * (to_unit if g.text else 100.0), style, marker="o", ms=3, lw=1.4)
        _, scale = _matrix(runs_, "scale")
        _, skipped = _matrix(runs_, "skipped")
        for row, skip in zip(scale, skipped, strict=True):
            axes[2].plot(steps, row, color=style["color"], ls=style["ls"], lw=1.0, alpha=0.8)
            hit = np.nan_to_num(skip) > 0
            if hit.any():
                axes[2].plot(steps[hit], row[hit], "x", color=style["color"], ms=5, mew=1.2)
        for ax, column in ((axes[3], "flushed"), (axes[4], "swallowed")):
            _, share = _matrix(runs_, column)
            if len(steps):
                _draw(ax, steps, 100.0 * share, style, lw=1.2)
        names.append(_legend_name(label, runs_))
        handles.append(Line2D([], [], lw=2, **style))
    axes[0].set(title="training loss", xlabel="step", ylabel=f"loss ({loss_unit}; smoothed, raw faint)")
    if g.text:
        axes[1].set(title="validation", xlabel="step", ylabel="validation loss (bits/char, fp32)")
    else:
        axes[1].set(title="test accuracy", xlabel="step", ylabel="test accuracy (%)")
    axes[2].set(title="loss scale", xlabel="step", ylabel="loss scale (log; x: skipped step)", yscale="log")
    for ax, what in ((axes[3], "gradients flushed to zero"), (axes[4], "updates swallowed")):
        ax.set(title=what, xlabel="step", ylabel="share of the non-zero values (%)")
        ax.set_yscale("symlog", linthresh=0.01)
        ax.set_ylim(0, 100)
    for ax in axes[:5]:
        ax.grid(alpha=0.3)
    axes[5].axis("off")
    level = "mean over the seeds, 95% band" if g.seeds > 1 else "one seed each"
    axes[5].legend(handles, names, loc="center", frameon=False, ncol=1 if len(names) <= 12 else 2,
                   title=f"{g.model or 'runs'}: {level}")  # fmt: skip
    if title:
        fig.suptitle(title)
    return _saved(fig, path)


def _recipe_words(history: History) -> tuple[str, str]:
    """What the recipe's operands are, and what its recorded scale is, in words."""
    policy = history.meta.get("policy")
    recipe = policy.get("recipe") if isinstance(policy, dict) else None
    kind = recipe.get("kind") if isinstance(recipe, dict) else None
    elements = str(recipe.get("elements", "")).upper() if isinstance(recipe, dict) else ""
    if kind == "nvfp4":
        return f"NVFP4 ({elements} elements)", "largest block's scale (1 / (E4M3 block x fp32 tensor))"
    if isinstance(kind, str) and kind.startswith("mx"):
        return f"{kind.upper()} ({elements} elements)", "scale of the largest block (1 / E8M0 block scale)"
    return "the fp8", "scale (fp8 max / amax)"


def plot_operands(
    history: History,
    path: str | os.PathLike[str] | None = None,
    *,
    title: str | None = None,
) -> Figure:
    """Draw each operand's amax (top row), scale (middle row) and its saturated, flushed and
    subnormal shares in percent (bottom row) over the steps, one panel per role (input, weight,
    grad), one line per layer; the labels name the recipe's element and scale formats (fp8, MX with
    E8M0 block scales, NVFP4 with E4M3 block scales). Saved to ``path`` when given.

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
    steps = np.asarray(history.steps["step"], dtype=np.float64)
    what, scale_label = _recipe_words(history)
    fig = _figure(figsize=(15, 10), layout="constrained")
    axes = fig.subplots(3, len(ROLES), sharex=True)
    layers = sorted({key.rsplit(".", 1)[0] for key in history.operands})
    shares = (("saturated", "-"), ("flushed", "--"), ("subnormal", ":"))
    for j, role in enumerate(ROLES):
        for i, layer in enumerate(layers):
            cols = history.operands.get(f"{layer}.{role}")
            if cols is None:
                continue
            color = f"C{i % 10}"
            for row, stat in enumerate(("amax", "scale")):
                v = np.asarray(cols.get(stat, [math.nan] * len(steps)), dtype=np.float64)
                axes[row, j].plot(steps[: len(v)], v, color=color, lw=1, label=layer)
            for stat, ls in shares:
                v = 100.0 * np.asarray(cols.get(stat, []), dtype=np.float64)
                axes[2, j].plot(steps[: len(v)], v, color=color, lw=1, ls=ls)
        axes[0, j].set(title=f"{role}: amax", yscale="log", ylabel="largest |value|")
        axes[1, j].set(title=f"{role}: {scale_label}", yscale="log", ylabel="scale (log)")
        axes[2, j].set(title=f"{role}: saturated (-), flushed (--), subnormal (:)", xlabel="step",
                       ylabel="share of the operand (%)")  # fmt: skip
        axes[2, j].set_yscale("symlog", linthresh=0.01)
    for ax in axes.flat:
        ax.grid(alpha=0.3)
    drawn = [ax for ax in axes[0] if ax.get_lines()]
    if drawn:  # one legend of the layers, on the first panel that has them
        drawn[0].legend(fontsize=7, ncol=2)
    fig.suptitle(title or f"{history.label}: {what} operands' amax, scale and shares, per layer")
    return _saved(fig, path)
