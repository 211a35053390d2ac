"""A function that passes its ``**options`` on to another, shown with those options spelled out.

``def f(x, **knobs: Unpack[Knobs])`` types the options once; :func:`spelled_out` gives ``f`` the
signature help() and the API reference show: the options as keyword-only parameters with the
defaults of the function that takes them. The function itself is unchanged (no wrapper).

>>> def make(*, scale: float = 1.0, rng: object = None) -> None: ...
>>> @spelled_out(make, before="flags")
... def f(x: float, *, flags: bool = False, **options: object) -> None: ...
>>> import inspect
>>> [(p.name, p.default) for p in inspect.signature(f).parameters.values()]
[('x', <class 'inspect._empty'>), ('scale', 1.0), ('rng', None), ('flags', False)]
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar

__all__ = ["Decorator", "spelled_out"]

F = TypeVar("F", bound=Callable[..., Any])


class Decorator(Protocol):
    """Gives a function its shown signature and hands the same function back."""

    def __call__(self, fn: F, /) -> F: ...


def spelled_out(
    source: Callable[..., Any], names: Iterable[str] | None = None, *, before: str | None = None
) -> Decorator:
    """A decorator that shows a function's ``**options`` as ``source``'s parameters ``names``
    (default: all of its keyword-only ones), in ``source``'s order and with its defaults, placed
    before the function's own parameter ``before`` where it has one, else at the end."""

    def decorate(fn: F) -> F:
        sig = inspect.signature(fn)
        own = [p for p in sig.parameters.values() if p.kind is not p.VAR_KEYWORD]
        given = inspect.signature(source).parameters
        wanted = set(names) if names is not None else None
        options = [
            p.replace(kind=p.KEYWORD_ONLY)
            for p in given.values()
            if (p.name in wanted if wanted is not None else p.kind is p.KEYWORD_ONLY)
        ]
        at = next((i for i, p in enumerate(own) if p.name == before), len(own))
        fn.__signature__ = sig.replace(parameters=[*own[:at], *options, *own[at:]])  # type: ignore[attr-defined]
        return fn

    return decorate
