"""Rounding: the one door through which a real number becomes a low-precision one.

The package is layered bottom-up; no module imports one above it:

* :mod:`~floatlab.rounding.spec`: the specification, the exact scalar reference
  (:func:`round_rational`, :func:`round_scalar`), the modes and the random-bit rule;
* :mod:`~floatlab.rounding.options`: :class:`RoundingOptions`, every knob checked in one place,
  and the one input check :func:`as_float_array`;
* :mod:`~floatlab.rounding.params`: the integers a compiled loop needs, derived from the formats
  as named fields;
* :mod:`~floatlab.rounding.plan`: the host prologue (which loop, which parameters), shared by
* the executors :mod:`~floatlab.rounding.cpu` (numba loops over the cores, one thread for a
  small array: :mod:`~floatlab.rounding.threads`) and
  :mod:`~floatlab.rounding.cuda` (the same element functions compiled for a GPU);
* :mod:`~floatlab.rounding.arrays`: the public door, :func:`round_array`, :func:`encode_array`
  and the building blocks the rest of floatlab uses (:mod:`~floatlab.rounding.scaled`: the fp8
  recipes' scaled casts; :mod:`~floatlab.rounding.flushed`: a rounding and what it flushed;
  :mod:`~floatlab.rounding.integers`: integers of any width, each rounded once).

Modes (IEEE 754 names in brackets):

* ``"rne"``  nearest, ties to even            [roundTiesToEven, the default]
* ``"rna"``  nearest, ties away from zero     [roundTiesToAway]
* ``"rtz"``  toward zero                      [roundTowardZero]
* ``"rup"``  toward +infinity                 [roundTowardPositive]
* ``"rdown"`` toward -infinity                [roundTowardNegative]
* ``"rodd"`` to odd: an inexact result gets an odd last bit (used to avoid double rounding)
* ``"stochastic"``: up with probability equal to the distance from the lower neighbour,
  in units of the gap, using ``random_bits`` uniform random bits

>>> import numpy as np, floatlab as fl
>>> fl.round_array(np.array([0.1, 1e-9], np.float32), "fp16").tolist()
[0.0999755859375, 0.0]
"""

from __future__ import annotations

from floatlab.rounding import arrays, flushed, integers, options, params, scaled, spec
from floatlab.rounding.arrays import *  # noqa: F403
from floatlab.rounding.exact_gemm import exact_matmul
from floatlab.rounding.flushed import *  # noqa: F403
from floatlab.rounding.integers import *  # noqa: F403
from floatlab.rounding.options import *  # noqa: F403
from floatlab.rounding.params import *  # noqa: F403
from floatlab.rounding.scaled import *  # noqa: F403
from floatlab.rounding.spec import *  # noqa: F403

# every public name of the layers, each listed once, in its own module
__all__ = [
    *spec.__all__, *options.__all__, *params.__all__, *arrays.__all__, *flushed.__all__, *integers.__all__,
    *scaled.__all__,
    "exact_matmul",
]  # fmt: skip
