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

A misspelt option reaches the function that takes the options, and Python's TypeError would name
that private callee. The line that passes the options on catches it and raises
:func:`unexpected_keyword`'s error instead, which names the function the user called, the option
and the closest one it takes. That work happens only on the error path: a ``try`` costs nothing
until it catches.

>>> @spelled_out(make)
... def g(x: float, **options: object) -> None:
...     try:
...         make(**options)
...     except TypeError as e:
...         raise unexpected_keyword(e) from None
>>> g(1.0, scael=2.0)
Traceback (most recent call last):
...
TypeError: g() got an unexpected keyword argument 'scael': did you mean scale?
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Iterable, Mapping
from types import CodeType, FrameType
from typing import Any, ParamSpec, Protocol, TypeVar

from floatlab.registry import Registry

__all__ = ["Decorator", "passing_on", "spelled_out", "unexpected_keyword"]

F = TypeVar("F", bound=Callable[..., Any])
P = ParamSpec("P")
R = TypeVar("R")

#: every function given a signature by :func:`spelled_out`, by its code: what
#: :func:`unexpected_keyword` finds on the stack
_SPELLED_OUT: dict[CodeType, Callable[..., Any]] = {}


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
        _SPELLED_OUT[fn.__code__] = fn
        return fn

    return decorate


def unexpected_keyword(error: TypeError) -> TypeError:
    """The error to raise instead of ``error``, a TypeError caught where a function shown by
    :func:`spelled_out` passes its ``**options`` on: ``{f}() got an unexpected keyword argument
    {name!r}: did you mean {closest}?`` (or ``expected one of ...`` where no name is close), ``f``
    being the outermost such function on the stack that was given ``name``, which its shown
    signature does not take: the function the user called (``add`` hands its options to
    ``round_array``, which hands them to the private callee). ``error`` itself where no such
    function was given a name it does not take: the TypeError had another cause.

    Called in an ``except`` clause, so that the work is done only when a call has failed.

    >>> e = TypeError("a cause of its own"); unexpected_keyword(e) is e
    True
    """
    culprit: tuple[Callable[..., Any], str] | None = None
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        fn = _SPELLED_OUT.get(frame.f_code)
        if fn is not None:
            taken = _keyword_names(fn)
            bad = [name for name in _options_given(frame) if name not in taken]
            if bad:
                culprit = fn, bad[0]
        frame = frame.f_back
    if culprit is None:
        return error
    fn, name = culprit
    names = Registry("keyword argument", dict.fromkeys(_keyword_names(fn)))
    close = names.closest(name)
    hint = f"did you mean {close}?" if close is not None else names.listing()
    return TypeError(f"{fn.__name__}() got an unexpected keyword argument {name!r}: {hint}")


def passing_on(callee: Callable[P, R], /, *args: P.args, **options: P.kwargs) -> R:
    """``callee(*args, **options)``, called by a function shown by :func:`spelled_out` to pass its
    ``**options`` on: a misspelt one is :func:`unexpected_keyword`'s error (where a call is hot,
    write the ``try`` inline instead and save the extra call).

    >>> def make(*, scale: float = 1.0) -> float:
    ...     return scale
    >>> @spelled_out(make)
    ... def h(**options: float) -> float:
    ...     return passing_on(make, **options)
    >>> h(scale=2.0)
    2.0
    >>> h(scal=2.0)
    Traceback (most recent call last):
    ...
    TypeError: h() got an unexpected keyword argument 'scal': did you mean scale?
    """
    try:
        return callee(*args, **options)
    except TypeError as e:
        raise unexpected_keyword(e) from None


def _keyword_names(fn: Callable[..., Any]) -> list[str]:
    """The names ``fn``'s shown signature takes as keywords."""
    by_keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in inspect.signature(fn).parameters.values() if p.kind in by_keyword]


def _options_given(frame: FrameType) -> Mapping[str, object]:
    """The ``**options`` that the call running in ``frame`` was given."""
    code = frame.f_code
    if not code.co_flags & inspect.CO_VARKEYWORDS:
        return {}
    # a code object's variables begin with its parameters: the named ones, *args, then **options
    at = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & inspect.CO_VARARGS)
    options = frame.f_locals.get(code.co_varnames[at], {})
    return options if isinstance(options, Mapping) else {}
