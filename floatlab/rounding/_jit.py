"""The compiled CPU loops as one typed table, built on first use: :func:`kernels`.

numba is imported on first use only (``import floatlab`` must stay light): the kernel modules
import it, and :func:`kernels` imports them. The loop sources live in
:mod:`floatlab.rounding._kernels` (the rounding loops, on the element functions),
:mod:`floatlab.rounding._block_kernels` and :mod:`floatlab.rounding._e4m3_kernels` (block
scaling, on the same element functions), :mod:`floatlab.rounding._scaled_kernels` (the fp8
recipes' scaled casts) and :mod:`floatlab.rounding._fp64_kernels` (exact float64 arithmetic).
Each loop compiles on its first call for the types of its arguments, or loads from numba's cache.
A parallel loop runs on one thread when the array is small: its caller wraps the call in
:func:`floatlab.rounding.threads.loop_threads`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

Loop = Callable[..., Any]


class Kernels(NamedTuple):
    """The compiled CPU loops, each a field (see its module for its arguments)."""

    # floatlab.rounding._kernels: the door's loops, the plain casts, the running sums
    encode: Loop
    round_back: Loop
    full: Loop
    general: Loop
    decode: Loop
    gather: Loop
    cast16: Loop
    round_count: Loop
    round_count_inplace: Loop
    sequential: Loop
    kahan: Loop
    # floatlab.rounding._block_kernels and _e4m3_kernels: block scaling
    e8m0_blocks: Loop
    e4m3_blocks: Loop
    finite_amax: Loop
    # floatlab.rounding._scaled_kernels: the scaled casts, the block GEMM's sums, the tree sums
    scaled_round: Loop
    tile_cast: Loop
    fma_sum: Loop
    fma_one: Loop
    fma_sum_store: Loop
    fma_one_store: Loop
    tree_rows: Loop
    tree_cols: Loop
    # floatlab.rounding._fp64_kernels: exact float64 arithmetic
    add_count: Loop
    odd_sum: Loop
    odd_div: Loop
    odd_sqrt: Loop
    accumulate: Loop
    fma: Loop


@functools.cache
def kernels() -> Kernels:
    """The table of compiled loops (its modules imported once per process).

    >>> kernels().encode is kernels().encode
    True
    """
    from floatlab.rounding import _block_kernels as b
    from floatlab.rounding import _e4m3_kernels as e
    from floatlab.rounding import _fp64_kernels as f
    from floatlab.rounding import _kernels as k
    from floatlab.rounding import _scaled_kernels as s

    return Kernels(
        encode=k.encode,
        round_back=k.round_back,
        full=k.full,
        general=k.general,
        decode=k.decode,
        gather=k.gather,
        cast16=k.cast16,
        round_count=k.round_count,
        round_count_inplace=k.round_count_inplace,
        sequential=k.sequential,
        kahan=k.kahan,
        e8m0_blocks=b.e8m0_blocks,
        e4m3_blocks=e.e4m3_blocks,
        finite_amax=b.finite_amax,
        scaled_round=s.scaled_round,
        tile_cast=s.tile_cast,
        fma_sum=s.fma_sum,
        fma_one=s.fma_one,
        fma_sum_store=s.fma_sum_store,
        fma_one_store=s.fma_one_store,
        tree_rows=s.tree_rows,
        tree_cols=s.tree_cols,
        add_count=f.add_count,
        odd_sum=f.odd_sum,
        odd_div=f.odd_div,
        odd_sqrt=f.odd_sqrt,
        accumulate=f.accumulate,
        fma=f.fma,
    )
