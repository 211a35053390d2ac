"""The per-step records of a simulation, and their table: :class:`StepRecords`.

Each rounding :func:`floatlab.torch.simulate` does at a GEMM adds, to the open step, the
statistics of that operand (its site, the layer or the GEMM call; its role: ``input``,
``weight``, ``bias``, ``output``, ``grad``): the values, the largest finite magnitude before
rounding (``amax``), and the values rounding saturated or overflowed, flushed to zero (nonzero
before, zero after) and left subnormal. They are kept as tensors where the operand lives (on a
GPU, on the GPU) and read back once, when the step closes. A recipe's GEMM operands come from
the recipe itself (:meth:`floatlab.train.recipes.MicroScaling.end_step` and the fp8 recipes'),
with its scale. :meth:`StepRecords.frame` is the table: one row per step, site and operand,
with the loss scale and skipped step of a scaler and the swallowed updates of weights stored
in their format.

>>> import torch
>>> from floatlab.formats import FP16
>>> rec = StepRecords()
>>> x = torch.tensor([1e-9, 1.0, 1e5])
>>> rec.add("fc", "input", x, x.half().float(), FP16, saturate=False)
>>> rec.close(0, {})
>>> r = rec.rows[0]
>>> r["values"], r["flushed"], r["saturated"]
(3, 0.3333333333333333, 0.3333333333333333)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from floatlab.formats import FloatFormat

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["COLUMNS", "StepRecords"]

#: the columns of :meth:`StepRecords.frame`, in order
COLUMNS: tuple[str, ...] = (
    "step", "site", "operand", "values", "amax", "scale", "saturated", "flushed", "subnormal",
    "loss_scale", "skipped", "updates", "swallowed",
)  # fmt: skip


class StepRecords:
    """The open step's statistics per (site, operand), and the closed steps' rows (see the module).

    >>> StepRecords().frame().columns.tolist()[:4]
    ['step', 'site', 'operand', 'values']
    """

    def __init__(self) -> None:
        self._open: dict[tuple[str, str], list[torch.Tensor]] = {}
        self.rows: list[dict[str, Any]] = []
        #: per step, the scale it used and whether it was skipped (from the scaler's updates)
        self.scaling: dict[int, tuple[float, bool]] = {}
        #: per step, the non-zero updates of the stored weights and those swallowed
        self.updates: dict[int, tuple[int, int]] = {}

    @property
    def pending(self) -> bool:
        """Whether the open step has statistics."""
        return bool(self._open)

    def add(
        self, site: str, role: str, x: torch.Tensor, y: torch.Tensor, fmt: FloatFormat, *, saturate: bool
    ) -> None:
        """Count what rounding ``x`` into ``fmt`` (giving ``y``) did, into (site, role) of the open step."""
        if x.numel() == 0:
            return
        with torch.no_grad():
            ax, ay = x.detach().abs(), y.detach().abs()
            finite = torch.isfinite(ax)
            big = torch.where(finite, ax, 0).amax().float()
            zero = ay == 0
            flushed = (zero & (ax != 0)).sum()
            subnormal = (~zero & (ay < fmt.smallest_normal)).sum()
            # overflow: an inf (or NaN) from a finite value, or a finite one clamped to the maximum
            over = (
                (finite & ~torch.isfinite(ay)) | ((ax > fmt.max) & finite)
                if saturate
                else finite & (ay > fmt.max)
            )
            stats = [
                torch.tensor(float(x.numel()), device=x.device),
                big,
                over.sum().float(),
                flushed.float(),
                subnormal.float(),
            ]
        key = (site, role)
        old = self._open.get(key)
        if old is None:
            self._open[key] = stats
        else:
            old[0] = old[0] + stats[0]
            old[1] = torch.maximum(old[1], stats[1])
            for i in (2, 3, 4):
                old[i] = old[i] + stats[i]

    def close(self, step: int, recipe: dict[str, dict[str, float]]) -> None:
        """Close step ``step``: read the open statistics back (once) and add the rows, with the
        recipe's operand statistics ``recipe`` (keyed ``"<site>.<role>"``, shares)."""
        keys = list(self._open)
        values: list[list[float]] = []
        if keys:
            values = torch.stack([torch.stack(self._open[k]).cpu() for k in keys]).tolist()
        self._open = {}
        for (site, role), (n, amax, sat, fl, sub) in zip(keys, values, strict=True):
            shares = {"saturated": sat / n, "flushed": fl / n, "subnormal": sub / n}
            self.rows.append(
                dict(step=step, site=site, operand=role, values=int(n), amax=amax, scale=1.0, **shares)
            )
        for key, st in recipe.items():
            site, _, role = key.rpartition(".")
            shares = {k: st[k] for k in ("amax", "scale", "saturated", "flushed", "subnormal")}
            self.rows.append(dict(step=step, site=site, operand=role, values=None, **shares))

    def frame(self) -> pd.DataFrame:
        """The table (columns :data:`COLUMNS`): a row per closed step, site and operand, sorted by
        step; ``loss_scale`` and ``skipped`` of the step's scaler update (NaN and None without
        one), ``updates`` and ``swallowed`` of its optimizer step on weights stored in their
        format (None without one). A step with a scaler update or an optimizer step but no GEMM
        record (a step whose forward pass was not seen) has one row with site None."""
        import pandas as pd

        rows = [dict(r) for r in self.rows]
        seen = {r["step"] for r in rows}
        for step in sorted((self.scaling.keys() | self.updates.keys()) - seen):
            rows.append({"step": step, "site": None, "operand": None})
        for r in rows:
            scale, skipped = self.scaling.get(r["step"], (float("nan"), None))
            updates, swallowed = self.updates.get(r["step"], (None, None))
            r.update(loss_scale=scale, skipped=skipped, updates=updates, swallowed=swallowed)
        df = pd.DataFrame.from_records(rows, columns=list(COLUMNS))
        return df.sort_values("step", kind="stable").reset_index(drop=True)
