"""How many threads a compiled CPU loop runs on: one below :data:`SERIAL_BELOW` elements.

The rounding loops (:mod:`floatlab.rounding.cpu`) and the gradient histogram's counting loops
(:mod:`floatlab.gradhist`) are numba ``parallel=True`` loops; both launch through
:func:`loop_threads`, so that a small array never wakes the other cores. numba is imported on
first use only (``import floatlab`` stays light).

>>> with loop_threads(1000) as n:
...     n
1
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["SERIAL_BELOW", "loop_threads"]

#: arrays smaller than this run on one thread. Waking the other cores costs more than they save
#: on a small array, and worse, between the GEMMs of a training step the BLAS threads and the
#: loop threads (OpenMP's spin-wait) then take turns on the same cores, which costs milliseconds:
#: a step of the default transformer under an fp8 recipe, whose operands (up to a million values
#: each) are rounded between GEMMs, took 443 ms with those arrays on two threads and 269 ms on
#: one (2 cores; fp32's step 120 ms either way). Above two million values the threads pay.
SERIAL_BELOW = 1 << 21


@contextmanager
def loop_threads(n: int) -> Iterator[int]:
    """Inside the block, numba's parallel loops run on one thread when ``n`` (the elements the
    loop will touch) is below :data:`SERIAL_BELOW`, else on all of numba's threads; the block
    gets that number (what a loop that keeps counters per thread allocates for).

    numba's thread count is a setting of the calling thread, so concurrent callers do not
    interfere, and it is restored on leaving the block.

    >>> import numba
    >>> with loop_threads(SERIAL_BELOW) as n:
    ...     n == numba.get_num_threads()
    True
    """
    import numba

    threads = int(numba.get_num_threads())
    if n >= SERIAL_BELOW or threads == 1:
        yield threads
        return
    numba.set_num_threads(1)
    try:
        yield 1
    finally:
        numba.set_num_threads(threads)
