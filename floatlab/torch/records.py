"""The per-step records of a simulation, and their table: :class:`StepRecords`.

Each rounding :func:`floatlab.torch.simulate` does at a GEMM adds, to the open step, the
statistics of that operand (its site, the layer or the GEMM call; its role: ``input``,
``weight``, ``bias``, ``output``, ``grad``): the values, the largest magnitude before rounding
(``amax``: inf or NaN when the operand holds one), and the values rounding saturated or
overflowed, flushed to zero (nonzero before, zero after) and left subnormal. A CPU operand is
counted through NumPy views of its memory; a GPU operand's counts stay tensors on its GPU and
are read back once, when the step closes. A recipe's GEMM operands come from
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

import numpy as np
import torch

from floatlab.formats import FloatFormat
from floatlab.torch.tensors import tensor_array

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["COLUMNS", "StepRecords"]

#: the columns of :meth:`StepRecords.frame`, in order
COLUMNS: tuple[str, ...] = (
    "step", "site", "operand", "values", "amax", "scale", "saturated", "flushed", "subnormal",
    "loss_scale", "skipped", "updates", "swallowed",
)  # fmt: skip


def _host_stats(x: torch.Tensor, y: torch.Tensor, fmt: FloatFormat, saturate: bool) -> list[Any]:
    """The five numbers of a CPU operand, through NumPy views of the tensors' memory: the values,
    the amax, and the counts overflowed (or saturated), flushed and subnormal. Flushed values are
    the nonzero ones that became zero (a rounding makes no zero nonzero), subnormal ones the
    nonzero results below the smallest normal, overflowed ones the results beyond the largest
    finite value (saturating: the inputs beyond it)."""
    a = tensor_array(x.detach(), fmt, back=False)
    b = tensor_array(y.detach(), fmt, back=False)
    n = a.size
    amax = float(max(np.max(a), -np.min(a)))
    ny = np.count_nonzero(b)
    ab = np.abs(b)
    tiny = np.count_nonzero(ab < fmt.smallest_normal) - (n - ny)
    over = np.count_nonzero((np.abs(a) if saturate else ab) > fmt.max)
    return [n, amax, int(over), int(np.count_nonzero(a) - ny), int(tiny)]


def _device_stats(x: torch.Tensor, y: torch.Tensor, fmt: FloatFormat, saturate: bool) -> list[Any]:
    """The same five numbers of a GPU operand, as tensors on its device (read back once per step)."""
    with torch.no_grad():
        xd, yd = x.detach(), y.detach()
        big = torch.linalg.vector_norm(xd.float(), float("inf"))
        ny = torch.count_nonzero(yd)
        ay = yd.abs()
        tiny = torch.count_nonzero(ay < fmt.smallest_normal) - (yd.numel() - ny)
        over = torch.count_nonzero((xd.abs() if saturate else ay) > fmt.max)
        n = torch.tensor(float(x.numel()), device=x.device)
        return [n, big, over.float(), (torch.count_nonzero(xd) - ny).float(), tiny.float()]


class StepRecords:
    """The open step's statistics per (site, operand), and the closed steps' rows (see the module).

    >>> StepRecords().frame().columns.tolist()[:4]
    ['step', 'site', 'operand', 'values']
    """

    def __init__(self) -> None:
        self._open: dict[tuple[str, str], list[Any]] = {}
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
        stats = (
            _host_stats(x, y, fmt, saturate) if x.device.type == "cpu" else _device_stats(x, y, fmt, saturate)
        )
        key = (site, role)
        old = self._open.get(key)
        if old is None:
            self._open[key] = stats
        else:
            old[1] = (
                max(old[1], stats[1])
                if not isinstance(old[1], torch.Tensor)
                else torch.maximum(old[1], stats[1])
            )
            for i in (0, 2, 3, 4):
                old[i] = old[i] + stats[i]

    def close(self, step: int, recipe: dict[str, dict[str, float]]) -> None:
        """Close step ``step``: read the open statistics back (once) and add the rows, with the
        recipe's operand statistics ``recipe`` (keyed ``"<site>.<role>"``, shares)."""
        keys = list(self._open)
        on_device = [k for k in keys if isinstance(self._open[k][0], torch.Tensor)]
        values = {k: [float(v) for v in self._open[k]] for k in keys if k not in on_device}
        if on_device:  # (one read-back for the step)
            back = torch.stack([torch.stack(self._open[k]) for k in on_device]).cpu().tolist()
            values.update(zip(on_device, back, strict=True))
        self._open = {}
        for key in keys:
            (site, role), (n, amax, sat, fl, sub) = key, values[key]
            shares = {"saturated": sat / n, "flushed": fl / n, "subnormal": sub / n}
            self.rows.append(
                dict(step=step, site=site, operand=role, values=int(n), amax=amax, scale=1.0, **shares)
            )
        for name, st in recipe.items():
            site, _, role = name.rpartition(".")
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
