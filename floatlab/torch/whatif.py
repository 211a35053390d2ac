"""What a GEMM recipe would do to a model's operands, without changing the training:
:class:`RecipeWhatIf` (``inspect(..., recipes=[...])``, as Transformer Engine's debug features do).

For every ``nn.Linear`` layer, its three GEMM operands as a training step has them (the
``input`` and the ``weight`` of the forward GEMM, the ``grad`` at the layer's output of the
backward GEMMs) are quantized as each recipe quantizes them along the GEMM's reduction axis
(the input features of ``input`` and ``weight``, the output features of ``grad``): an fp8 recipe
through its :class:`~floatlab.train.recipes.fp8.OperandScaler` (per-tensor current or delayed
scaling, DeepSeek-V3's tiles and blocks), a microscaling one through
:func:`floatlab.blocks.mx_quantize` with the recipe's element format, scale mode and rounding
(weights in 16x16 tiles under NVFP4's ``weight_tiles``; the random Hadamard transform of the
weight-gradient GEMM is not applied: these are the operands of the forward and data-gradient
GEMMs). Per layer, operand and recipe: the values, the shares flushed to zero and saturated
(or clamped), the mean squared error of the dequantized operand and its SQNR in dB
(``10 log10(sum x^2 / sum (x - q)^2)``; inf when exact).

>>> import numpy as np
>>> w = RecipeWhatIf(["mxfp8"])
>>> w.add("fc", "input", np.float32([[1.0, 2.0**-140] + [0.5] * 30]))
>>> r = w.rows()[0]
>>> r["recipe"], r["flushed"], r["mse"] > 0
('mxfp8', 0.03125, True)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from floatlab.blocks import mx_quantize
from floatlab.train.precision.policy import get_policy
from floatlab.train.recipes import Fp8Recipe, MicroRecipe
from floatlab.train.recipes.fp8 import OperandScaler

__all__ = ["OPERANDS", "RecipeWhatIf"]

#: the GEMM operands of a Linear layer a recipe quantizes
OPERANDS: tuple[str, ...] = ("input", "weight", "grad")


class RecipeWhatIf:
    """The running what-if counts of each recipe on each (layer, operand) (see the module);
    ``recipes`` are policy names with a GEMM recipe (``"fp8-tensorwise"``, ``"fp8-delayed"``,
    ``"fp8-blockwise"``, ``"mxfp8"``, ``"mxfp4"``, ``"nvfp4"``, ...).

    >>> RecipeWhatIf(["bf16"])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: recipes entry 'bf16': policy bf16 has no GEMM recipe (expected fp8-tensorwise, ...)
    """

    def __init__(self, recipes: list[str], rng: np.random.Generator | None = None) -> None:
        self.recipes: dict[str, Fp8Recipe | MicroRecipe] = {}
        for name in recipes:
            p = get_policy(name)
            if p.recipe is None:
                raise ValueError(
                    f"recipes entry {name!r}: policy {p.name} has no GEMM recipe (expected fp8-tensorwise, "
                    "fp8-delayed, fp8-blockwise, mxfp8, mxfp6, mxfp4 or nvfp4)"
                )
            self.recipes[p.name] = p.recipe
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self._scalers: dict[tuple[str, str, str], OperandScaler] = {}
        self._sums: dict[tuple[str, str, str], list[float]] = {}

    def _quantize(self, key: tuple[str, str, str], x: np.ndarray[Any, Any]) -> tuple[Any, int, int]:
        """The dequantized operand, the values flushed and the values saturated."""
        _, role, name = key
        recipe = self.recipes[name]
        if isinstance(recipe, Fp8Recipe):
            if key not in self._scalers:
                self._scalers[key] = OperandScaler(recipe, role)
            s = self._scalers[key]
            q = s.quantize(x, 1)
            stats = s.end_step()  # (a what-if step per call: delayed scaling's history moves on)
            inv = np.asarray(q.inv_scale, np.float32)
            if q.layout == "tile":
                inv = np.repeat(inv, q.block, axis=1)[:, : x.shape[1]]
            elif q.layout == "block":
                inv = np.repeat(np.repeat(inv, q.block, axis=0), q.block, axis=1)[: x.shape[0], : x.shape[1]]
            n = x.size
            return q.values * inv, round(stats.flushed * n), round(stats.saturated * n)
        fmt = recipe.format_for(role)
        axis: Any = (0, 1) if role == "weight" and recipe.weight_tiles else 1
        mode = recipe.rounding_for(role)
        options: dict[str, Any] = {"axis": axis, "rounding": mode}
        if mode == "stochastic":
            options["rng"] = self.rng
        if recipe.scale_mode is not None:
            options["scale_mode"] = recipe.scale_mode
        b = mx_quantize(x, fmt, **options)
        return b.dequantize(), b.flushed, b.clamped

    def add(self, layer: str, role: str, x: Any) -> None:
        """Quantize operand ``role`` of ``layer`` (a 2-d float32 array, reduction along axis 1) with
        every recipe and add what each did to the counts."""
        x = np.asarray(x, np.float32).reshape(-1, np.shape(x)[-1])
        finite = np.isfinite(x)
        x = np.where(finite, x, 0).astype(np.float32)
        signal = float(np.sum(np.square(x, dtype=np.float64)))
        for name in self.recipes:
            key = (layer, role, name)
            deq, flushed, saturated = self._quantize(key, x)
            err = float(np.sum(np.square(np.asarray(deq, np.float64) - x)))
            sums = self._sums.setdefault(key, [0.0] * 5)
            for i, v in enumerate((x.size, flushed, saturated, signal, err)):
                sums[i] += v

    def rows(self) -> list[dict[str, Any]]:
        """One row per layer, operand and recipe: ``layer``, ``operand``, ``recipe``, ``values``,
        ``flushed`` and ``saturated`` (shares), ``mse`` and ``sqnr_db``."""
        out = []
        for (layer, role, name), (n, flushed, saturated, signal, err) in self._sums.items():
            sqnr = math.inf if err == 0 else (10 * math.log10(signal / err) if signal > 0 else -math.inf)
            out.append(
                {
                    "layer": layer,
                    "operand": role,
                    "recipe": name,
                    "values": int(n),
                    "flushed": flushed / n if n else 0.0,
                    "saturated": saturated / n if n else 0.0,
                    "mse": err / n if n else 0.0,
                    "sqnr_db": sqnr,
                }
            )
        return out
