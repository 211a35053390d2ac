"""Plain Python functions compiled against each other (:func:`compile_bound`): each is compiled
with its global names looked up in one table, where the names of the others stand for their
compiled selves. The CUDA executor builds its element functions so, for CUDA and for the CPU from
one source (:mod:`floatlab.rounding.cuda`), and the histogram loops theirs
(:mod:`floatlab.gradhist`), with no module's globals rewritten.

No compiler is imported here: the caller hands over its decorator.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["compile_bound", "rebind"]


def rebind(fn: Callable[..., Any], table: dict[str, Any]) -> Callable[..., Any]:
    """``fn`` with its global names looked up in ``table`` (the same code, another binding).

    >>> def tenfold(v):
    ...     return scale * v
    >>> rebind(tenfold, {"scale": 10})(4)
    40
    """
    out = types.FunctionType(fn.__code__, table, fn.__name__, fn.__defaults__, fn.__closure__)
    out.__doc__ = fn.__doc__
    return out


def compile_bound(
    table: dict[str, Any], names: Iterable[str], wrap: Callable[[Callable[..., Any]], Any]
) -> dict[str, Any]:
    """``table`` with each function ``table[name]`` of ``names`` replaced by ``wrap`` (a compiler's
    decorator) of it rebound to ``table``: functions that call each other by name, each compiled
    against the others' compiled selves. Returns ``table``.

    >>> def half(v):
    ...     return v / 2
    >>> def quarter(v):
    ...     return half(half(v))
    >>> calls = []
    >>> def traced(fn):
    ...     return lambda *a: calls.append(fn.__name__) or fn(*a)
    >>> table = compile_bound({"half": half, "quarter": quarter}, ["half", "quarter"], traced)
    >>> table["quarter"](8.0), calls
    (2.0, ['quarter', 'half', 'half'])
    """
    for name in names:
        table[name] = wrap(rebind(table[name], table))
    return table
