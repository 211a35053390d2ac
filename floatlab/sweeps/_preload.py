"""What the process pool's fork server does once, before it forks any worker (private).

The fork server imports this module (see :func:`floatlab.sweeps.run`'s pool): every worker it
forks then starts with the trainer imported and numba's compiler set up (its import, the CPU
target's tables and LLVM: about half a second of a fresh process's first run), instead of doing
both itself. A compiled loop cannot be carried over the fork the same way: numba's OpenMP threading
layer ends any process forked after a parallel loop was compiled or run, so only a plain
(single-threaded) function is compiled here, and each worker loads the parallel loops from numba's
disk cache on first use (a few hundredths of a second).

>>> prepare()
True
"""

from __future__ import annotations

__all__ = ["prepare"]


def prepare() -> bool:
    """Import the trainer and set numba's compiler up in this process, without compiling or running
    any parallel loop (see the module's note); True once done. Cheap when already done.

    >>> prepare() and prepare()
    True
    """
    import numba

    import floatlab.sweeps.run
    import floatlab.train  # noqa: F401

    @numba.njit(cache=False)
    def _one(x: int) -> int:  # pragma: no cover - compiled, its Python body never runs
        return x + 1

    return bool(_one(1) == 2)


prepare()
