"""The weight update: the optimizer's step added to the weights, in the weights' format.

With fp32 (or fp64) weights the sum is one rounding, done by the hardware. Weights stored in a
low-precision format (a pure policy) take two: the update is stored in the weight format, then
the sum (:func:`add_update`). An update below half an ulp of its weight leaves the weight as it
was: it is *swallowed*.

:func:`kahan_update` is the cure of Zamirai et al., "Revisiting BFloat16 Training" (2020),
Algorithm 1 (Kahan's compensated summation applied to the weight update): a buffer ``c`` per
weight, stored in the weight format like the weight itself, carries what the rounding of the sum
lost, and the next step adds it back. A thousand updates of 10^-4 to a bf16 weight of 1:

>>> import numpy as np
>>> from floatlab.train.precision.precision import Precision
>>> P = Precision("bf16")
>>> plain = w = np.ones(1, np.float32)
>>> c = np.zeros(1, np.float32)
>>> for _ in range(1000):
...     plain = add_update(P, plain, np.float32([1e-4]), P.fwd, "rne")
...     w, c = kahan_update(P, w, np.float32([1e-4]), c, P.fwd, "rne")
>>> plain.tolist(), w.tolist()   # the exact sum is 1.1; bf16's neighbours there are 1.09375, 1.1015625
([1.0], [1.1015625])

The buffer keeps the rounding error of the sum, not that of ``y`` (the update plus the carry,
rounded to 8 bits): over many steps those errors add up, so a compensated bf16 weight follows
the exact sum of its updates to within about an ulp, not to the last bit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from floatlab.backend import get_xp, host_ints
from floatlab.formats import FloatFormat
from floatlab.rounding import add_count
from floatlab.train.precision.precision import Array, Params, Precision

__all__ = ["Applied", "add_update", "apply_updates", "kahan_update"]


def add_update(P: Precision, w: Array, d: Array, fmt: FloatFormat, mode: str) -> Array:
    """``w + d`` stored in ``fmt``: one rounding for wide weights, two for low-precision ones
    (the update is stored in the weight format first, then the sum), each in rounding ``mode``.

    >>> from floatlab.train.precision.precision import Precision
    >>> P = Precision("bf16")
    >>> add_update(P, np.float32([1.0, 1.0]), np.float32([1e-3, 5e-3]), P.fwd, "rne").tolist()
    [1.0, 1.0078125]
    """
    if P.is_wide(fmt):
        return w + d
    return P.cast(w + P.cast(d, fmt, mode), fmt, mode)


def kahan_update(
    P: Precision, w: Array, d: Array, c: Array, fmt: FloatFormat, mode: str
) -> tuple[Array, Array]:
    """The new weights and compensation ``(w', c')`` of one compensated update, every value
    stored in ``fmt`` with rounding ``mode``. In order, with ``Q`` that rounding (the operands
    of each line are values of ``fmt``, held exactly in the wide arrays, so each line is one
    correctly rounded operation of ``fmt``'s arithmetic, as on a 16-bit FPU)::

        u  = Q(d)             the optimizer's update stored in the weight format (as without
                              compensation: the paper's 16-bit optimizer produces it in 16 bits)
        y  = Q(u - c)         the update with the error the last sums left out added back
        s  = Q(w + y)         the new weight: the rounding that swallows small updates
        t  = Q(s - w)         what the weight actually moved (exact while s and w are within a
                              factor of two of each other, by Sterbenz's lemma)
        c' = Q(t - y)         the new error: what the weight moved beyond y (minus what it missed)
        w' = s

    With ``c = 0`` and ``u`` below half an ulp of ``w``, ``s = w``, ``t = 0`` and ``c' = -u``: the
    update is not lost but carried, and the next step adds it to its own. Wide weights have
    nothing to compensate: ``(w + d, c)``.

    >>> from floatlab.train.precision.precision import Precision
    >>> P = Precision("bf16")
    >>> w, c = kahan_update(P, np.float32([1.0]), np.float32([1e-3]), np.float32([0.0]), P.fwd, "rne")
    >>> w.tolist(), c.tolist()   # swallowed by the sum, carried by c (1e-3 in bf16, negated)
    ([1.0], [-0.00099945068359375])
    >>> w, c = kahan_update(P, w, np.float32([3e-3]), c, P.fwd, "rne")
    >>> w.tolist(), c.tolist()   # 1e-3 + 3e-3 is above half an ulp of 1 (2^-8): the weight moves
    ([1.0078125], [0.003814697265625])
    """
    if P.is_wide(fmt):
        return w + d, c
    u = P.cast(d, fmt, mode)
    y = P.cast(u - c, fmt, mode)
    s = P.cast(w + y, fmt, mode)
    c_new = P.cast(P.cast(s - w, fmt, mode) - y, fmt, mode)
    return s, c_new


@dataclass(frozen=True)
class Applied:
    """The outcome of :func:`apply_updates`: the new weights and compensation buffers, how many
    updates were not zero (``intended``), how many of those changed their weight, and whether
    every new weight is finite.

    >>> Applied({}, {}, 4, 1, True).swallowed
    0.75
    """

    params: Params
    compensation: Params
    intended: int
    changed: int
    finite: bool

    @property
    def swallowed(self) -> float:
        """The share of the non-zero updates that left their weight unchanged."""
        return (self.intended - self.changed) / self.intended if self.intended else 0.0


def apply_updates(
    P: Precision,
    params: Mapping[str, Array],
    deltas: Mapping[str, Array],
    formats: Mapping[str, FloatFormat],
    mode: str,
    compensation: Mapping[str, Array] | None = None,
) -> Applied:
    """Add ``deltas`` to ``params``, each parameter stored in its format of ``formats``, with
    rounding ``mode``; the parameters that have a buffer in ``compensation`` take the
    compensated update (:func:`kahan_update`), the others :func:`add_update`. Nothing is
    modified in place: the new arrays are returned.

    An update is swallowed when it is not zero and its weight did not change. With compensation
    a swallowed update is carried in the buffer, not lost: it moves the weight in a later step
    (and a step whose update is zero can then move a weight; such a change counts for nothing).

    >>> from floatlab.train.precision.precision import Precision
    >>> P = Precision("bf16")
    >>> w, d = {"w": np.float32([1.0, 2.0])}, {"w": np.float32([1e-3, 0.5])}
    >>> out = apply_updates(P, w, d, {"w": P.fwd}, "rne")
    >>> out.params["w"].tolist(), out.swallowed, out.finite
    ([1.0, 2.5], 0.5, True)
    >>> apply_updates(P, w, d, {"w": P.fwd}, "rne", {"w": np.zeros(2, np.float32)}).compensation["w"].tolist()
    [-0.00099945068359375, 0.0]
    """
    comp = compensation if compensation is not None else {}
    new_params: Params = {}
    new_comp: Params = {}
    # per parameter: its non-zero updates, the weights they changed, whether all are finite. On
    # a GPU these stay on the device and come back in one transfer at the end (each read-back
    # waits for the device's queue to drain)
    counts: list[Any] = []
    for k, d in deltas.items():
        fmt = formats[k]
        old = params[k]
        xp = get_xp(old, d)
        if k in comp:
            new, new_comp[k] = kahan_update(P, old, d, comp[k], fmt, mode)
            moved = d != 0
            # a released carry can move a weight whose update is zero: only updates count
            counts += [
                xp.count_nonzero(moved),
                xp.count_nonzero((new != old) & moved),
                xp.isfinite(new).all(),
            ]
        elif (
            P.is_wide(fmt)
            and isinstance(old, np.ndarray)
            and isinstance(d, np.ndarray)
            and d.dtype == old.dtype
            and d.shape == old.shape
        ):
            new, n_intended, n_changed, n_bad = add_count(old, d)  # one pass instead of four
            counts += [n_intended, n_changed, n_bad == 0]
        else:
            new = add_update(P, old, d, fmt, mode)
            counts += [xp.count_nonzero(d != 0), xp.count_nonzero(new != old), xp.isfinite(new).all()]
        new_params[k] = new
    n = host_ints(counts)
    intended, changed, nonfinite = sum(n[0::3]), sum(n[1::3]), n[2::3].count(0)
    return Applied(new_params, new_comp, intended, changed, nonfinite == 0)
