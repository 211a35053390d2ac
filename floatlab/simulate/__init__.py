"""Experiments on the rounding primitive: arithmetic in a format, swallowed updates, underflow
and accumulation.

Nothing here rounds by itself. Every conversion to a lower precision goes through
:func:`floatlab.rounding.round_array` (or, for one explained value, the scalar reference
:func:`floatlab.rounding.round_rational`); these modules form exact results, hand them to the
primitive and count what it did to them. One idea per module:

* ``floatlab.simulate.arithmetic``: :func:`add`, :func:`sub`, :func:`mul`, :func:`fma`,
  :func:`div` and :func:`sqrt` in a format. Each result is one rounding of the exact result: it
  is formed in float64 rounded to odd at 53 bits, then rounded once into the format, which equals
  a single rounding in every mode for formats of up to 26 significand bits (the module's notes,
  "How the arithmetic stays exact", give the argument and its limits);
* ``floatlab.simulate.updates``: swallowed updates, :func:`swallowed_updates` and
  :func:`explain_add`, with :func:`threshold_ratio`;
* ``floatlab.simulate.storage``: a tensor stored in a format, :func:`underflow`;
* ``floatlab.simulate.accumulation``: sums of many terms, :func:`accumulate` and
  :func:`compare_accumulation`.

>>> import floatlab.simulate as sim
>>> float(sim.add(1.0, 0.0001, "fp16"))      # the update vanishes: 1 + 0.0001 is 1 in fp16
1.0
>>> sim.threshold_ratio("fp16"), sim.threshold_ratio("bf16")
(2048, 256)
"""

from floatlab.simulate.accumulation import (
    METHODS,
    AccumulationComparison,
    AccumulationResult,
    accumulate,
    compare_accumulation,
)
from floatlab.simulate.arithmetic import MAX_PRECISION, add, div, fma, mul, sqrt, sub
from floatlab.simulate.storage import UnderflowResult, underflow
from floatlab.simulate.updates import (
    AddExplanation,
    SwallowResult,
    explain_add,
    swallowed_updates,
    threshold_ratio,
)

__all__ = [
    "MAX_PRECISION",
    "METHODS",
    "AccumulationComparison",
    "AccumulationResult",
    "AddExplanation",
    "SwallowResult",
    "UnderflowResult",
    "accumulate",
    "add",
    "compare_accumulation",
    "div",
    "explain_add",
    "fma",
    "mul",
    "sqrt",
    "sub",
    "swallowed_updates",
    "threshold_ratio",
    "underflow",
]
