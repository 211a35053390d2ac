"""A per-layer report of a PyTorch model in low-precision formats: :func:`inspect`.

"Would my model's tensors fit in fp16, bf16 or fp8, which layers lose values, and what scale saves
them?" :func:`inspect` runs a few forward and backward passes of the model on one batch and looks,
for every layer, at four kinds of tensor (:data:`KINDS`):

* ``weight``: the parameters the module owns (its weight and bias together);
* ``activation``: the module's output, as the forward pass produced it;
* ``weight_grad``: the gradients of those parameters after the backward pass;
* ``activation_grad``: the gradient of the loss with respect to the module's output (the
  ``grad_output`` of a backward hook), where fp16 underflow usually starts (Micikevicius et al.,
  "Mixed Precision Training", ICLR 2018, Figure 2 and Section 3.2).

The layers are the modules that own parameters and the leaf modules (those without children):
Linear, Conv, Embedding, the norms, and parameter-free leaves such as ReLU or Dropout (these have
activations only). For each layer, kind and format the report gives the largest finite magnitude
(``amax``), the NaNs and infinities (counted, never raised), and what rounding the values into the
format does: the shares that flush to zero, turn subnormal or overflow. These are counted element
by element on a float32 (or float64) NumPy copy of each tensor rounded by
:func:`floatlab.round_array_with_flags`, floatlab's one rounding door.

The scale that saves them is floatlab's loss-scale advice, applied to each tensor family:
:meth:`GradHistogram.recommend_scale <floatlab.gradhist.GradHistogram.recommend_scale>` over the
histogram of the same values. The rule (see :class:`~floatlab.gradhist.ScaleAdvice`): the
power of two ``2^k`` with ``amax * 2^k <= format.max / 2^headroom`` (``headroom`` binades kept free
for growth, 2 by default, as the loss scaler's advice elsewhere in floatlab) that flushes the fewest
values and then leaves the fewest subnormal, the one closest to 1 when several tie. So a weight
tensor that overflows fp8 gets a negative ``k``, an underflowing gradient a positive one, and the
report's scale for a layer's gradients is the one :class:`~floatlab.torch_hooks.GradientRecorder`
would advise for the same values. The report also says what still flushes or overflows at that
scale (exact: the histogram decides every class boundary for power-of-two scales).

The result, a :class:`LayerReport`, prints as a text table (drawn by :mod:`floatlab.text.torch`),
turns into a pandas DataFrame (:meth:`LayerReport.to_frame`) and draws a heat map, layers by
formats (:meth:`LayerReport.plot`). torch is needed only to run :func:`inspect`; importing this
module does not import it.

>>> sorted(KINDS)
['activation', 'activation_grad', 'weight', 'weight_grad']
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from floatlab.formats import FloatFormat, get_format
from floatlab.gradhist import GradHistogram
from floatlab.io import save_figure
from floatlab.rounding import ROUNDING_MODES, round_array_with_flags
from floatlab.text import percent, render
from floatlab.torch.advice import ModelAdvice
from floatlab.torch.attention import PARTS, AttentionWatch
from floatlab.torch.whatif import RecipeWhatIf
from floatlab.torch_hooks import output_tensors

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = ["DEFAULT_FORMATS", "KINDS", "LayerReport", "TensorShares", "inspect"]

#: The tensor kinds the report looks at, in the order it shows them.
KINDS: tuple[str, ...] = ("weight", "activation", "weight_grad", "activation_grad")

#: The formats :func:`inspect` tries when none are named.
DEFAULT_FORMATS: tuple[str, ...] = ("fp16", "bf16", "float8_e4m3fn", "float8_e5m2")


@dataclass(frozen=True)
class TensorShares:
    """One row of a :class:`LayerReport`: the values of one kind of tensor of one layer (over all
    the steps), and what one format makes of them.

    ``values`` counts every value (zeros, NaNs and infinities included) and is the denominator of
    every share; ``nan`` and ``inf`` count the non-finite inputs; ``amax`` is the largest finite
    magnitude (0.0 when there is none). ``flushed``, ``subnormal`` and ``overflow`` count the
    finite nonzero values that rounding into ``format`` unscaled makes zero, subnormal, or
    overflow (the IEEE overflow flag). ``log2_scale`` is the exponent of the scale floatlab's
    advice picks (see :mod:`floatlab.torch.inspect`), and the ``scaled_`` counts say what that
    scale leaves.

    >>> r = TensorShares("fc", "Linear", "activation_grad", "fp16", 8, 0, 0, 0, 1e-8,
    ...                  flushed=2, subnormal=6, overflow=0, log2_scale=20,
    ...                  scaled_flushed=0, scaled_subnormal=0, scaled_overflow=0)
    >>> r.lost, r.share("flushed"), r.share("lost")
    (2, 0.25, 0.25)
    """

    layer: str
    module: str
    kind: str
    format: str
    values: int
    nan: int
    inf: int
    zeros: int
    amax: float
    flushed: int
    subnormal: int
    overflow: int
    log2_scale: int
    scaled_flushed: int
    scaled_subnormal: int
    scaled_overflow: int

    @property
    def lost(self) -> int:
        """Values that become zero or overflow unscaled (see the class for an example)."""
        return self.flushed + self.overflow

    @property
    def scaled_lost(self) -> int:
        """Values that still become zero or overflow at the advised scale.

        >>> TensorShares("a", "ReLU", "activation", "fp16", 4, 0, 0, 0, 1.0, 1, 0, 0, 3, 0, 0, 1).scaled_lost
        1
        """
        return self.scaled_flushed + self.scaled_overflow

    def share(self, field: str) -> float:
        """``field`` (a count: flushed, subnormal, overflow, lost, nan, inf, zeros or one of the
        ``scaled_`` counts) as a fraction of all values (0.0 when there are none).

        >>> TensorShares("a", "ReLU", "activation", "fp16", 4, 1, 0, 0, 1.0, 0, 0, 0, 0, 0, 0, 0).share("nan")
        0.25
        """
        fields = (
            "flushed",
            "subnormal",
            "overflow",
            "lost",
            "nan",
            "inf",
            "zeros",
            "scaled_flushed",
            "scaled_subnormal",
            "scaled_overflow",
            "scaled_lost",
        )
        if field not in fields:
            raise ValueError(f"field {field!r}: expected one of {', '.join(fields)}")
        count: int = getattr(self, field)
        return count / self.values if self.values else 0.0


class LayerReport:
    """What :func:`inspect` found: one :class:`TensorShares` per layer, kind and format.

    ``rows`` in the order layers, then kinds (:data:`KINDS`), then ``formats``; ``steps`` is the
    number of forward and backward passes they cover, ``rounding`` and ``headroom`` the rounding
    mode and the headroom (in binades) of the scale advice.

    >>> rows = [TensorShares("fc", "Linear", "activation_grad", "fp16", 4, 0, 0, 0, 2.0**-26,
    ...                      2, 2, 0, 26, 0, 0, 0)]
    >>> rep = LayerReport(rows, formats=["fp16"], steps=1)
    >>> rep.layers, rep.row("fc", "activation_grad", "fp16").flushed
    (['fc'], 2)
    """

    def __init__(
        self,
        rows: Iterable[TensorShares],
        *,
        formats: Sequence[str],
        steps: int,
        rounding: str = "rne",
        headroom: int = 2,
        histograms: dict[tuple[str, str], GradHistogram] | None = None,
        unseen: dict[str, str] | None = None,
        recipe_rows: Sequence[dict[str, Any]] = (),
    ) -> None:
        self.rows: tuple[TensorShares, ...] = tuple(rows)
        #: the histogram of each (layer, kind)'s values: what :meth:`advice` judges any format by
        self.histograms: dict[tuple[str, str], GradHistogram] = dict(histograms or {})
        #: the layers whose tensors inspect could not see, with the reason
        self.unseen: dict[str, str] = dict(unseen or {})
        self.recipe_rows: tuple[dict[str, Any], ...] = tuple(recipe_rows)
        self.formats: tuple[str, ...] = tuple(get_format(f).name for f in formats)
        self.steps = steps
        self.rounding = rounding
        self.headroom = headroom

    @property
    def layers(self) -> list[str]:
        """The layers in the report, in the model's order (see the class for an example)."""
        return list(dict.fromkeys(r.layer for r in self.rows))

    def row(self, layer: str, kind: str, fmt: FloatFormat | str) -> TensorShares:
        """The row of ``layer``, ``kind`` and format ``fmt``; a ValueError when there is none.

        >>> rep = LayerReport([], formats=["fp16"], steps=1)
        >>> rep.row("fc", "weight", "fp16")
        Traceback (most recent call last):
        ...
        ValueError: layer 'fc', kind 'weight', format fp16: not in the report (expected one of its rows)
        """
        name = get_format(fmt).name
        for r in self.rows:
            if (r.layer, r.kind, r.format) == (layer, kind, name):
                return r
        raise ValueError(
            f"layer {layer!r}, kind {kind!r}, format {name}: not in the report (expected one of its rows)"
        )

    def to_frame(self) -> pd.DataFrame:
        """A pandas DataFrame, one row per layer x kind x format.

        Columns: ``layer``, ``module`` (its class), ``kind``, ``format``, ``values``, ``nan``,
        ``inf`` (counts), ``amax``; the shares of all values (fractions from 0 to 1) ``zeros``,
        ``flushed``, ``subnormal``, ``overflow`` and ``lost`` (flushed + overflow) unscaled;
        ``log2_scale`` and ``scale`` (the advised power of two); ``flushed_scaled``,
        ``subnormal_scaled``, ``overflow_scaled`` and ``lost_scaled``, the shares at that scale.

        >>> rows = [TensorShares("fc", "Linear", "weight", "fp16", 4, 0, 0, 0, 1.0, 1, 0, 0, 0, 1, 0, 0)]
        >>> df = LayerReport(rows, formats=["fp16"], steps=1).to_frame()
        >>> df["layer"].tolist(), df["kind"].tolist(), df["flushed"].tolist(), df["scale"].tolist()
        (['fc'], ['weight'], [0.25], [1.0])
        """
        import pandas as pd

        records = []
        for r in self.rows:
            records.append(
                {
                    "layer": r.layer,
                    "module": r.module,
                    "kind": r.kind,
                    "format": r.format,
                    "values": r.values,
                    "nan": r.nan,
                    "inf": r.inf,
                    "amax": r.amax,
                    "zeros": r.share("zeros"),
                    "flushed": r.share("flushed"),
                    "subnormal": r.share("subnormal"),
                    "overflow": r.share("overflow"),
                    "lost": r.share("lost"),
                    "log2_scale": r.log2_scale,
                    "scale": math.ldexp(1.0, r.log2_scale),
                    "flushed_scaled": r.share("scaled_flushed"),
                    "subnormal_scaled": r.share("scaled_subnormal"),
                    "overflow_scaled": r.share("scaled_overflow"),
                    "lost_scaled": r.share("scaled_lost"),
                }
            )
        columns = [
            "layer", "module", "kind", "format", "values", "nan", "inf", "amax", "zeros", "flushed",
            "subnormal", "overflow", "lost", "log2_scale", "scale", "flushed_scaled", "subnormal_scaled",
            "overflow_scaled", "lost_scaled",
        ]  # fmt: skip
        return pd.DataFrame.from_records(records, columns=columns)

    def advice(self, fmt: FloatFormat | str, *, tolerance: float = 1e-3) -> ModelAdvice:
        """One verdict for the model in ``fmt`` (any format: it is judged from the histograms of the
        values, not the report's columns): one power-of-two loss scale, the layers to keep in a
        wider format with the reason (a share above ``tolerance`` lost), and the headroom
        (:class:`~floatlab.torch.advice.ModelAdvice`).

        >>> import numpy as np
        >>> from floatlab.gradhist import histogram
        >>> rep = LayerReport([], formats=["fp16"], steps=1,
        ...                   histograms={("fc", "activation_grad"): histogram(np.float32([2.0**-30]))})
        >>> rep.advice("fp16").log2_scale
        43
        """
        return ModelAdvice.of(
            self.histograms, fmt, headroom=self.headroom, rounding=self.rounding, tolerance=tolerance
        )

    def recipes(self) -> pd.DataFrame:
        """What each recipe of ``inspect(..., recipes=[...])`` would do to each Linear layer's GEMM
        operands (:mod:`floatlab.torch.whatif`): a row per layer, operand and recipe with the
        shares flushed and saturated, the MSE and the SQNR in dB (empty without recipes).

        >>> LayerReport([], formats=["fp16"], steps=1).recipes().columns.tolist()[:3]
        ['layer', 'operand', 'recipe']
        """
        import pandas as pd

        cols = ["layer", "operand", "recipe", "values", "flushed", "saturated", "mse", "sqnr_db"]
        return pd.DataFrame.from_records(list(self.recipe_rows), columns=cols)

    def summary(self) -> pd.DataFrame:
        """The rows of :meth:`to_frame` that lose something: values flushed to zero or overflowed
        unscaled, or NaN or infinite ones.

        >>> rows = [TensorShares("fc", "Linear", "weight", "fp16", 4, 0, 0, 0, 1.0, 1, 0, 0, 0, 1, 0, 0),
        ...         TensorShares("fc", "Linear", "weight", "bf16", 4, 0, 0, 0, 1.0, 0, 0, 0, 0, 0, 0, 0)]
        >>> LayerReport(rows, formats=["fp16", "bf16"], steps=1).summary()["format"].tolist()
        ['fp16']
        """
        df = self.to_frame()
        loses = (df["lost"] > 0) | (df["nan"] > 0) | (df["inf"] > 0)
        return df[loses].reset_index(drop=True)

    def of_kind(self, kind: str) -> list[TensorShares]:
        """The rows of tensor kind ``kind`` (one of :data:`KINDS`), in the report's order; a
        ValueError for another kind.

        >>> LayerReport([], formats=["fp16"], steps=1).of_kind("weight")
        []
        >>> LayerReport([], formats=["fp16"], steps=1).of_kind("grad")
        Traceback (most recent call last):
        ...
        ValueError: kind='grad': expected one of weight, activation, weight_grad, activation_grad
        """
        k = _checked_kind(kind)
        return [r for r in self.rows if r.kind == k]

    def __str__(self) -> str:
        return render(self)

    def __repr__(self) -> str:
        return (
            f"LayerReport({len(self.layers)} layers, {len(self.rows)} rows, formats={list(self.formats)}, "
            f"steps={self.steps})"
        )

    def plot(self, path: str | os.PathLike[str] | None = None, *, kind: str = "activation_grad") -> Figure:
        """A heat map, layers (rows) by formats (columns), coloured by the share of ``kind``'s
        values lost unscaled (flushed to zero plus overflowed), each cell labelled with that share
        and the advised scale. Layers without tensors of ``kind`` are left out. With ``path`` the
        figure is also written there (PNG, SVG or PDF, by suffix).

        >>> rows = [TensorShares("fc", "Linear", "activation_grad", f, 4, 0, 0, 0, 2.0**-26, 2, 2, 0,
        ...                      26, 0, 0, 0) for f in ("fp16", "bf16")]
        >>> fig = LayerReport(rows, formats=["fp16", "bf16"], steps=1).plot()
        >>> fig.axes[0].get_title()
        'activation_grad: share of values lost (flushed + overflow), unscaled'
        """
        from floatlab._figure import ShownFigure

        k = _checked_kind(kind)
        layers = [name for name in self.layers if any(r.layer == name and r.kind == k for r in self.rows)]
        grid = np.full((len(layers), len(self.formats)), np.nan)
        labels: dict[tuple[int, int], str] = {}
        for r in self.rows:
            if r.kind == k and r.format in self.formats:
                i, j = layers.index(r.layer), self.formats.index(r.format)
                grid[i, j] = r.share("lost")
                labels[i, j] = f"{percent(r.lost, r.values)}\n2^{r.log2_scale}"
        fig = ShownFigure(
            figsize=(1.6 * len(self.formats) + 3.5, 0.45 * max(len(layers), 1) + 2.2), layout="constrained"
        )
        ax = fig.add_subplot()
        image = ax.imshow(
            np.ma.masked_invalid(grid) if layers else np.zeros((1, len(self.formats))),
            cmap="Reds",
            vmin=0.0,
            vmax=1.0,
            aspect="auto",
        )
        for (i, j), text in labels.items():
            ax.text(
                j,
                i,
                text,
                ha="center",
                va="center",
                fontsize=7,
                color="white" if grid[i, j] > 0.6 else "black",
            )
        ax.set_xticks(range(len(self.formats)), self.formats)
        module = {r.layer: r.module for r in self.rows}
        ax.set_yticks(range(len(layers)), [f"{name or '(model)'} ({module[name]})" for name in layers])
        ax.set_xlabel("format (cell: share lost, advised scale)")
        ax.set_ylabel("layer")
        ax.set_title(f"{k}: share of values lost (flushed + overflow), unscaled")
        if not layers:
            ax.text(0, 0, f"no {k} tensors", ha="left", va="center")
        fig.colorbar(image, ax=ax, label="share lost")
        if path is not None:
            save_figure(fig, path, dpi=120)  # (no dates, no random names: the same bytes each run)
        return fig


# ---- counting ---------------------------------------------------------------------------------
class _Tally:
    """The running counts of one layer's one kind of tensor, over all steps."""

    def __init__(self, formats: Sequence[FloatFormat]) -> None:
        self.values = self.nan = self.inf = self.zeros = 0
        self.amax = 0.0
        self.counts = {f.name: [0, 0, 0] for f in formats}  # flushed, subnormal, overflow
        self.hist = GradHistogram()

    def add(self, x: npt.NDArray[np.floating[Any]], formats: Sequence[FloatFormat], rounding: str) -> None:
        finite = np.isfinite(x)
        nonzero = finite & (x != 0)
        self.values += x.size
        self.nan += int(np.count_nonzero(np.isnan(x)))
        self.inf += int(np.count_nonzero(np.isinf(x)))
        self.zeros += int(np.count_nonzero(x == 0))
        if finite.any():
            self.amax = max(self.amax, float(np.max(np.abs(x[finite]))))
        self.hist.update(x)
        for f in formats:
            y, stats = round_array_with_flags(x, f, rounding)
            c = self.counts[f.name]
            c[0] += int(np.count_nonzero(nonzero & (y == 0)))
            # a subnormal result is nonzero, finite and below the smallest normal: it has lost
            # significand bits (the container, float32 or float64, holds it exactly)
            tiny = np.isfinite(y) & (y != 0) & (np.abs(y) < f.smallest_normal)
            c[1] += int(np.count_nonzero(nonzero & tiny))
            # the IEEE overflow flag: inf, NaN (formats without inf) or a saturated maximum
            c[2] += stats.overflow

    def rows(
        self, layer: str, module: str, kind: str, formats: Sequence[FloatFormat], rounding: str, headroom: int
    ) -> Iterator[TensorShares]:
        for f in formats:
            advice = self.hist.recommend_scale(f, headroom=headroom, rounding=rounding)
            flushed, subnormal, overflow = self.counts[f.name]
            after = advice.after
            yield TensorShares(
                layer=layer,
                module=module,
                kind=kind,
                format=f.name,
                values=self.values,
                nan=self.nan,
                inf=self.inf,
                zeros=self.zeros,
                amax=self.amax,
                flushed=flushed,
                subnormal=subnormal,
                overflow=overflow,
                log2_scale=advice.log2_scale,
                scaled_flushed=after.flushed,
                scaled_subnormal=after.subnormal,
                scaled_overflow=after.overflow,
            )


def _host_copy(t: Any) -> npt.NDArray[np.floating[Any]]:
    """A NumPy copy of a floating-point tensor: float64 stays float64, the others widen exactly
    to float32 (fp16, bf16 and the fp8 types are subsets of it), on the host."""
    t = t.detach()
    if str(t.dtype) != "torch.float64":
        t = t.float()
    out: npt.NDArray[np.floating[Any]] = t.cpu().numpy().reshape(-1).copy()
    return out


def _checked_kind(kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r}: expected one of {', '.join(KINDS)}")
    return kind


def _checked_formats(formats: Iterable[FloatFormat | str]) -> list[FloatFormat]:
    if isinstance(formats, (str, FloatFormat)):
        formats = [formats]
    out = list(dict.fromkeys(get_format(f) for f in formats))
    if not out:
        raise ValueError("formats=[]: expected at least one format name, such as 'fp16'")
    return out


def _torch() -> Any:
    try:
        import torch
    except ImportError as e:  # pragma: no cover - the suite installs torch
        raise ImportError("floatlab.torch.inspect needs PyTorch: pip install 'floatlab[torch]'") from e
    return torch


# ---- the run ----------------------------------------------------------------------------------
def inspect(
    model: Any,
    batch: Any,
    loss_fn: Callable[..., Any],
    formats: Iterable[FloatFormat | str] = DEFAULT_FORMATS,
    steps: int = 1,
    *,
    optimizer: Any = None,
    rounding: str = "rne",
    headroom: int = 2,
    recipes: Sequence[str] = (),
) -> LayerReport:
    """Run ``steps`` forward and backward passes of ``model`` on ``batch`` and report, per layer
    and tensor kind, what each of ``formats`` does to the values (see :mod:`floatlab.torch.inspect`).

    ``batch`` is a pair ``(inputs, target)``: each pass computes ``loss_fn(model(inputs), target)``,
    or ``loss_fn(model(inputs))`` when ``target`` is None; ``inputs`` that is a tuple is unpacked,
    ``model(*inputs)``. The loss must be a scalar tensor. To see what a loss scale does, scale the
    loss in ``loss_fn``. Before each pass the model's gradients are cleared (``zero_grad``), so the
    ``weight_grad`` of a step is that step's gradient and ``.grad`` holds the last one afterwards.
    No optimizer step is taken unless ``optimizer`` is given: then ``optimizer.step()`` runs after
    each backward, and the weights of the next pass are the updated ones. Without it every pass
    sees the same weights (more steps then only matter for models with randomness, such as
    dropout). The model's mode (train or eval) is left as it is; the hooks are removed on return,
    and when any exception (a ``KeyboardInterrupt`` included) ends the passes. A model on the meta
    device has no values to inspect: it is refused before any pass.
    A loss that needs no gradient (every parameter frozen, or the passes run under
    ``torch.no_grad()``) is not differentiated: the report then has weights and activations only.

    ``recipes`` (policy names with a GEMM recipe: ``"fp8-tensorwise"``, ``"mxfp8"``, ``"nvfp4"``,
    ...) add what each would do to every Linear layer's GEMM operands, without changing the
    training (:meth:`LayerReport.recipes`, :mod:`floatlab.torch.whatif`).

    The counting runs on the host: tensors of a CUDA model are copied to the CPU for it.
    ``rounding`` is a deterministic rounding mode of floatlab, ``headroom`` the binades the
    advised scale keeps free below the format's largest value.

    >>> import pytest; torch = pytest.importorskip("torch")
    >>> _ = torch.manual_seed(0)
    >>> model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    >>> batch = (torch.randn(16, 4), torch.randn(16, 1))
    >>> loss_fn = lambda out, y: torch.nn.functional.mse_loss(out, y) * 1e-6  # a tiny loss
    >>> rep = inspect(model, batch, loss_fn, ["fp16", "bf16"])
    >>> rep.layers
    ['0', '1', '2']
    >>> g16 = rep.row("2", "activation_grad", "fp16")
    >>> g16.flushed + g16.subnormal == g16.values, g16.log2_scale > 0
    (True, True)
    >>> rep.row("2", "activation_grad", "bf16").lost
    0
    """
    torch = _torch()
    fmts = _checked_formats(formats)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps={steps!r}: expected a whole number of passes >= 1")
    if rounding not in ROUNDING_MODES or rounding == "stochastic":
        modes = ", ".join(m for m in ROUNDING_MODES if m != "stochastic")
        raise ValueError(f"rounding={rounding!r}: expected a deterministic rounding mode ({modes})")
    whatif = RecipeWhatIf(list(recipes)) if recipes else None  # (a name without a recipe: refused now)
    for f in fmts:  # the advice checks its headroom before any pass runs (no values: no other work)
        GradHistogram().recommend_scale(f, headroom=headroom, rounding=rounding)
    if not isinstance(model, torch.nn.Module):
        raise ValueError(f"model of type {type(model).__name__}: expected a torch.nn.Module")
    for name, t in (*model.named_parameters(), *model.named_buffers()):
        if t.device.type == "meta":  # (torch's own error would come from inside the first copy)
            raise ValueError(
                f"model on the meta device ({name!r} has a shape but no values to inspect): expected "
                "a model with values, on the CPU or a GPU (model.to_empty(device='cpu'), then its weights)"
            )
    if not (isinstance(batch, (tuple, list)) and len(batch) == 2):
        raise ValueError(
            f"batch of type {type(batch).__name__}: expected a pair (inputs, target); target may be None"
        )
    inputs, target = batch

    # the layers: modules that own parameters, and leaf modules (their outputs are the activations)
    layers: list[tuple[str, Any, list[Any]]] = []
    for name, module in model.named_modules():
        own = list(module.parameters(recurse=False))
        leaf = next(iter(module.children()), None) is None
        if own or leaf:
            layers.append((name, module, own))
        if isinstance(module, torch.nn.MultiheadAttention):  # the tensors inside it (out_proj is its own)
            layers += [(f"{name}.{part}", module, []) for part in PARTS[:-1]]
    tallies: dict[tuple[str, str], _Tally] = {}

    def tally(name: str, kind: str, t: Any) -> None:
        if not t.is_floating_point():
            return  # (integer outputs, say indices, are no activations)
        key = (name, kind)
        if key not in tallies:
            tallies[key] = _Tally(fmts)
        tallies[key].add(_host_copy(t), fmts, rounding)

    def watch(name: str) -> Callable[[Any, Any, Any], None]:
        def forward_hook(module: Any, args: Any, output: Any) -> None:
            for t in output_tensors(output):
                # counted now: a later in-place layer (ReLU(inplace=True)) may overwrite the tensor
                tally(name, "activation", t)
                if t.requires_grad:
                    t.register_hook(lambda grad: tally(name, "activation_grad", grad))

        return forward_hook

    def see(name: str, t: Any) -> Any:
        watch(name)(None, None, t)
        return t

    handles = [  # the leaves' outputs, and a MultiheadAttention's (which has a child, out_proj)
        module.register_forward_hook(watch(name))
        for name, module in model.named_modules()
        if next(iter(module.children()), None) is None or isinstance(module, torch.nn.MultiheadAttention)
    ]
    if whatif is not None:
        handles += _watch_recipes(torch, model, whatif)
    attention = AttentionWatch(model, see).__enter__()
    try:
        for _ in range(steps):
            model.zero_grad(set_to_none=True)
            for name, _module, own in layers:
                for p in own:
                    tally(name, "weight", p)
            out = model(*inputs) if isinstance(inputs, tuple) else model(inputs)
            loss = loss_fn(out) if target is None else loss_fn(out, target)
            if loss.requires_grad:  # (a frozen model, or one under no_grad: forward kinds only)
                loss.backward()
            for name, _module, own in layers:
                for p in own:
                    if p.grad is not None:
                        tally(name, "weight_grad", p.grad)
            if optimizer is not None:
                optimizer.step()
    finally:
        for handle in handles:
            handle.remove()
        attention.__exit__()

    rows: list[TensorShares] = []
    for name, module, _own in layers:
        for kind in KINDS:
            if (name, kind) in tallies:
                rows += tallies[name, kind].rows(name, type(module).__name__, kind, fmts, rounding, headroom)
    return LayerReport(
        rows,
        formats=[f.name for f in fmts],
        steps=steps,
        rounding=rounding,
        headroom=headroom,
        histograms={key: t.hist for key, t in tallies.items()},
        unseen=attention.unseen,
        recipe_rows=whatif.rows() if whatif is not None else (),
    )


def _watch_recipes(torch: Any, model: Any, whatif: RecipeWhatIf) -> list[Any]:
    """Hooks that hand each Linear layer's GEMM operands to ``whatif``: its input and weight as the
    forward pass uses them, the gradient at its output as backward brings it."""
    handles = []
    for name, m in model.named_modules():
        if not isinstance(m, torch.nn.Linear):
            continue

        def before(module: Any, args: Any, name: str = name) -> None:
            if args and hasattr(args[0], "detach"):
                whatif.add(name, "input", _host_copy(args[0]).reshape(-1, module.in_features))
                whatif.add(name, "weight", _host_copy(module.weight).reshape(module.weight.shape))

        def after(module: Any, args: Any, out: Any, name: str = name) -> None:
            if getattr(out, "requires_grad", False):
                out.register_hook(
                    lambda g: whatif.add(name, "grad", _host_copy(g).reshape(-1, module.out_features))
                )

        handles += [m.register_forward_pre_hook(before), m.register_forward_hook(after)]
    return handles
