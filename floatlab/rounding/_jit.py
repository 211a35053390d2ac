"""The compiled CPU loops: built on first use, launched on one thread when the array is small.

numba is imported here on first use only (``import floatlab`` must stay light). The loop sources
live in :mod:`floatlab.rounding._kernels` (the rounding loops, on the element functions),
:mod:`floatlab.rounding._block_kernels` (block scaling, on the same element functions) and
:mod:`floatlab.rounding._fp64_kernels` (exact float64 arithmetic); each gives its compiled loops
by name through ``compile_into``.
"""

from __future__ import annotations

import threading
from typing import Any

from floatlab.rounding.threads import loop_threads

_lock = threading.Lock()
_compiled: dict[str, Any] = {}


def loops() -> dict[str, Any]:
    """Every compiled loop by name (compiled, or loaded from numba's cache, once per process)."""
    if _compiled:
        return _compiled
    with _lock:
        if not _compiled:
            import numba

            from floatlab.rounding import _block_kernels, _fp64_kernels, _kernels, _scaled_kernels

            built: dict[str, Any] = {}
            _kernels.compile_into(numba, built)
            _block_kernels.compile_into(numba, built)  # (on the element functions just bound)
            _scaled_kernels.compile_into(numba, built)  # (and on the block loops' intrinsics)
            _fp64_kernels.compile_into(numba, built)
            _compiled.update(built)
        return _compiled


def loop(name: str) -> Any:
    """The compiled loop ``name``."""
    return (_compiled or loops())[name]


def launch(name: str, n: int, *args: Any) -> Any:
    """Run compiled loop ``name`` over ``n`` elements: on one thread when ``n`` is small
    (:func:`floatlab.rounding.threads.loop_threads`)."""
    fn = loop(name)
    with loop_threads(n):
        return fn(*args)
