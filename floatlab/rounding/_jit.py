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

_lock = threading.Lock()
_compiled: dict[str, Any] = {}

#: arrays smaller than this run on one thread. Waking the other cores costs more than they save
#: on a small array, and worse, between the GEMMs of a training step the BLAS threads and the
#: loop threads (OpenMP's spin-wait) then take turns on the same cores, which costs milliseconds:
#: a step of the default transformer under an fp8 recipe, whose operands (up to a million values
#: each) are rounded between GEMMs, took 443 ms with those arrays on two threads and 269 ms on
#: one (2 cores; fp32's step 120 ms either way). Above two million values the threads pay.
SERIAL_BELOW = 1 << 21


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
    """Run compiled loop ``name`` over ``n`` elements: on one thread when ``n`` is small."""
    fn = loop(name)
    if n >= SERIAL_BELOW:
        return fn(*args)
    import numba

    threads = numba.get_num_threads()
    if threads == 1:
        return fn(*args)
    numba.set_num_threads(1)  # per calling thread, so concurrent callers do not interfere
    try:
        return fn(*args)
    finally:
        numba.set_num_threads(threads)
