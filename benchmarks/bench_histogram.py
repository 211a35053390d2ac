"""Exponent-histogram throughput: floatlab next to the two NumPy ways of doing it, in one run.

The data: 10^8 gradient-like float32 values (random sign, log2|x| normal around -14 with
standard deviation 4, 10% exact zeros). Each implementation computes the exponent histogram of
all of them:

* ``floatlab histogram(x)``: exact binning from the bit fields into 599 significand cells per
  binade, plus zeros (by sign), infinities, NaNs and subnormal inputs;
* ``np.histogram(np.log2(np.abs(x)))`` on 278 unit bins: the common recipe (it is not exact:
  float rounding of log2 moves values next to a power of two into the wrong bin, and zeros vanish);
* ``np.frexp`` + ``np.bincount``: exact exponents, one bin per binade, plus a count of zeros;
* a NumPy copy of the array: the memory-bandwidth reference.

Rounds are interleaved (every implementation once per round) so that load on a shared machine
hits all alike; the figure is the best round. Writes benchmarks/results/histogram.md.

    python benchmarks/bench_histogram.py [--n 100000000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import time
from collections.abc import Callable
from fractions import Fraction

import numpy as np
import numpy.typing as npt
from _common import Table, fmt_rate, fmt_ratio, write_results

from floatlab.formats import FP32
from floatlab.gradhist import GradHistogram, histogram
from floatlab.gradhist import _kernels as _histkernels


def gradients(n: int, seed: int = 0) -> npt.NDArray[np.float32]:
    """n gradient-like float32 values, made in blocks to bound the temporaries."""
    rng = np.random.default_rng(seed)
    out = np.empty(n, np.float32)
    step = 1 << 23
    for i in range(0, n, step):
        m = min(step, n - i)
        mag = np.exp2(rng.normal(-14.0, 4.0, m)).astype(np.float32)
        mag[rng.random(m) < 0.1] = 0.0
        out[i : i + m] = np.where(rng.random(m) < 0.5, -mag, mag)
    return out


def interleaved(fns: dict[str, Callable[[], object]], repeat: int) -> dict[str, float]:
    """Best seconds of each function over ``repeat`` interleaved rounds, after one warm-up call."""
    for fn in fns.values():
        fn()
    best = dict.fromkeys(fns, math.inf)
    gc.disable()
    try:
        for _ in range(repeat):
            for name, fn in fns.items():
                t0 = time.perf_counter()
                fn()
                best[name] = min(best[name], time.perf_counter() - t0)
    finally:
        gc.enable()
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000_000, help="values per timing (default 10^8)")
    ap.add_argument("--repeat", type=int, default=5, help="interleaved rounds (default 5)")
    args = ap.parse_args()
    n = args.n
    x = gradients(n)
    dst = np.empty_like(x)
    x16 = x.astype(np.float16)
    x64 = x[: n // 10].astype(np.float64)
    part = x[: min(n, 2_000_000)]

    def log2_hist() -> object:
        with np.errstate(divide="ignore"):  # log2(0) = -inf falls outside the bins, as zeros do here
            return np.histogram(np.log2(np.abs(x)), bins=278, range=(-150, 128))

    def frexp_bincount() -> tuple[npt.NDArray[np.intp], int]:
        _m, e = np.frexp(x)
        zeros = np.count_nonzero(x == 0)  # frexp gives zeros exponent 0: count them apart
        counts = np.bincount(e + 149, minlength=278)
        counts[149] -= zeros
        return counts, int(zeros)

    fns: dict[str, Callable[[], object]] = {
        "floatlab histogram(x)": lambda: histogram(x),
        "np.histogram(np.log2(np.abs(x)))": log2_hist,
        "np.frexp + np.bincount": frexp_bincount,
        "numpy copy (memory-bandwidth reference)": lambda: np.copyto(dst, x),
    }
    best = interleaved(fns, args.repeat)
    side = interleaved(
        {
            "float16": lambda: histogram(x16),
            "float64": lambda: histogram(x64),
            "numpy-only": lambda: _histkernels.count_numpy(part.view(np.uint32), FP32),
        },
        max(2, args.repeat // 2),
    )

    # the histograms agree: frexp's exact exponents are floatlab's binades
    h = histogram(x)
    exps, counts = h.exponent_counts()
    ref, zeros = frexp_bincount()
    assert zeros == h.zeros
    assert np.array_equal(ref[exps + 150], counts)  # frexp: |x| = m 2^e with m in [0.5, 1): e = E + 1
    assert ref.sum() == h.finite
    with np.errstate(divide="ignore"):
        log2_counts, _edges = np.histogram(np.log2(np.abs(x)), bins=278, range=(-150, 128))
    misbinned = int(np.abs(log2_counts[exps + 150] - counts).sum() // 2)

    ours = n / best["floatlab histogram(x)"] / 1e6
    table = Table(["implementation", "values", "M values/s", "floatlab / this"])
    for name, t in best.items():
        rate = n / t / 1e6
        table.add(name, f"{n:.0e} float32", fmt_rate(rate), fmt_ratio(ours / rate))
    for name, size, what in (
        ("float16", x16.size, "floatlab histogram(x), float16 input (a count per code)"),
        ("float64", x64.size, "floatlab histogram(x), float64 input"),
        ("numpy-only", part.size, "floatlab's vectorised NumPy reference (no numba)"),
    ):
        rate = size / side[name] / 1e6
        table.add(what, f"{size:.0e} {name if name != 'numpy-only' else 'float32'}", fmt_rate(rate), "")

    t_first = time.perf_counter()
    GradHistogram.verdict(h, "e4m3fnuz", 1)  # a format no earlier call used: thresholds computed
    t_first = time.perf_counter() - t_first
    t_verdict = min(_timed(lambda: h.verdict("fp16", Fraction(2) ** 12)) for _ in range(20))
    t_advice = min(_timed(lambda: h.recommend_scale("fp16")) for _ in range(5))
    small = Table(["step, on the histogram of 10^8 values", "ms"])
    small.add("verdict, first use of a format (exact class boundaries by bisection)", f"{1e3 * t_first:.1f}")
    small.add("verdict, fp16 at scale 2^12 (boundaries cached)", f"{1e3 * t_verdict:.2f}")
    small.add("recommend_scale, fp16", f"{1e3 * t_advice:.1f}")

    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    import numba

    notes = [
        f"{n:,} gradient-like float32 values (random sign, log2|x| ~ normal(-14, 4), 10% exact zeros); "
        f"best of {args.repeat} interleaved rounds after a warm-up call (which also compiles the numba "
        "loop). "
        f"numba threads: {numba.get_num_threads()}; load average at the end of the run: {load}. "
        "The machine is shared: expect +-30% between runs.",
        "Last column: floatlab's rate divided by the row's; above 1, floatlab is that many times faster. "
        "floatlab does more work than either NumPy recipe: 599 significand cells per binade (so verdicts "
        "are exact), signs apart, zeros, infinities, NaNs and subnormal inputs counted.",
        f"Check in the same run: floatlab's binade counts equal frexp + bincount's exactly; "
        f"np.histogram(np.log2(...)) put {misbinned:,} values in the wrong binade (float rounding of log2 "
        "just below a power of two).",
    ]
    write_results(
        "histogram",
        "Exponent histogram throughput",
        [*notes, table.markdown(), small.markdown()],
        packages=["numba"],
    )
    print(table.markdown())
    print(small.markdown())


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
