"""Names a package exports but loads on first use (PEP 562): the heavy parts of floatlab (NumPy,
the compiled rounding loops) stay unloaded until a program asks for them.

>>> import types
>>> pkg = types.ModuleType("pkg")
>>> pkg.__getattr__, pkg.__dir__ = lazy_exports(vars(pkg), "pkg", {"sqrt": "math"})
>>> pkg.__getattr__("sqrt")(9.0), "sqrt" in pkg.__dir__()
(3.0, True)
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    namespace: dict[str, Any], package: str, homes: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__`` for the names in ``homes`` (name -> the module
    that defines it; a name that is itself a submodule of ``package`` is that module). The first
    use imports the home and stores the value in ``namespace``, so later uses cost nothing."""

    def __getattr__(name: str) -> Any:
        source = homes.get(name)
        if source is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(source)
        value = module if source == f"{package}.{name}" else getattr(module, name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *homes})

    return __getattr__, __dir__
