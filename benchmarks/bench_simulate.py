"""Simulator throughput: correctly rounded arithmetic and serial sums against numpy's own float16/float32.

Elementwise rows feed 10^6 pairs of random fp16 (or bf16, fp32) values to floatlab.simulate and to
numpy / ml_dtypes arithmetic in the same type (correctly rounded in round to nearest even, the one
mode they have). Accumulation rows sum 10^6 standard normal terms left to right; numpy's
``np.add.accumulate`` in float16 / float32 is the peer (it also returns the whole running sum).
Rates are million values (or terms) per second at the best of several timed calls after a warm-up
(compilation excluded). Writes ``benchmarks/results/simulate.md``.

    python benchmarks/bench_simulate.py
    python benchmarks/bench_simulate.py --n 100000 --repeat 3
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from functools import partial

import ml_dtypes
import numpy as np
from _common import Table, fmt_rate, fmt_ratio, time_best, write_results

from floatlab import simulate as sim


def _pairs(n: int, dtype: type, bits: type, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Random finite values of a float type, from random bit patterns."""
    rng = np.random.default_rng(seed)
    width = np.dtype(bits).itemsize * 8
    raw: np.ndarray = rng.integers(0, 1 << width, (2, 2 * n), dtype=np.uint64).astype(bits)
    vals: np.ndarray = raw.view(dtype)
    with np.errstate(invalid="ignore"):
        keep = np.isfinite(vals.astype(np.float64)).all(axis=0)
    a, b = vals[0][keep][:n], vals[1][keep][:n]
    return np.ascontiguousarray(a), np.ascontiguousarray(b)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="values per call (default 10^6)")
    parser.add_argument("--repeat", type=int, default=5, help="timed calls per row (default 5)")
    args = parser.parse_args()
    n, repeat = args.n, args.repeat

    elem = Table(["operation", "format", "mode", "floatlab M/s", "numpy M/s", "floatlab / numpy"])
    cases: list[tuple[str, str, type, type, Callable[..., object], Callable[..., object]]] = [
        ("add", "fp16", np.float16, np.uint16, sim.add, np.add),
        ("mul", "fp16", np.float16, np.uint16, sim.mul, np.multiply),
        ("div", "fp16", np.float16, np.uint16, sim.div, np.divide),
        ("add", "bf16", ml_dtypes.bfloat16, np.uint16, sim.add, np.add),
        ("add", "fp32", np.float32, np.uint32, sim.add, np.add),
        ("div", "fp32", np.float32, np.uint32, sim.div, np.divide),
    ]
    for name, fmt, dtype, bits, ours, theirs in cases:
        a, b = _pairs(n, dtype, bits, seed=1)
        with np.errstate(all="ignore"):
            t_ours = time_best(partial(ours, a, b, fmt), repeat=repeat)
            t_np = time_best(partial(theirs, a, b), repeat=repeat)
        r_ours, r_np = t_ours.rate(a.size), t_np.rate(a.size)
        elem.add(name, fmt, "rne", fmt_rate(r_ours), fmt_rate(r_np), fmt_ratio(r_ours / r_np))
        if fmt == "fp16" and name == "add":
            for mode in ("rtz", "stochastic"):
                rng = np.random.default_rng(0) if mode == "stochastic" else None
                t = time_best(partial(sim.add, a, b, fmt, mode, rng=rng), repeat=repeat)
                elem.add(name, fmt, mode, fmt_rate(t.rate(a.size)), "-", "-")
    a, b = _pairs(n, np.float16, np.uint16, seed=2)
    c = _pairs(n, np.float16, np.uint16, seed=3)[0][: a.size]
    with np.errstate(all="ignore"):
        t = time_best(partial(sim.fma, a, b, c, "fp16"), repeat=repeat)
    elem.add("fma", "fp16", "rne", fmt_rate(t.rate(a.size)), "-", "-")

    acc = Table(
        ["method", "terms", "accumulator", "floatlab M terms/s", "numpy M terms/s", "floatlab / numpy"]
    )
    x = np.random.default_rng(4).standard_normal(n)
    peers = {"fp16": np.float16, "fp32": np.float32}
    for method, accumulator in (
        ("sequential", "fp16"),
        ("sequential", "fp32"),
        ("kahan", "fp16"),
        ("pairwise", "fp16"),
    ):
        run = partial(sim.accumulate, x, "fp16", accumulator=accumulator, method=method)
        t = time_best(run, repeat=max(1, repeat // 2))
        rate = t.rate(n)
        peer = "-"
        ratio = "-"
        if method == "sequential":
            xs = x.astype(np.float16).astype(peers[accumulator])
            tp = time_best(partial(np.add.accumulate, xs), repeat=repeat)
            peer, ratio = fmt_rate(tp.rate(n)), fmt_ratio(rate / tp.rate(n))
        acc.add(method, "fp16", accumulator, fmt_rate(rate), peer, ratio)

    note = (
        f"{n:,} values per call. Elementwise: floatlab rounds the exact result once in any mode "
        "(TwoSum / exact products, round to odd in float64, then the rounding kernels); numpy and "
        "ml_dtypes compute in the type itself (float16 and bfloat16 through float32), round to nearest "
        "even only. Accumulation rows include storing the terms, the exact sum of the terms "
        "(integer arithmetic) and the bookkeeping (stagnation, overflow, trajectory)."
    )
    path = write_results(
        "simulate",
        "Simulator throughput",
        [note, "## Elementwise arithmetic", elem.markdown(), "## Accumulation", acc.markdown()],
        packages=["numba", "ml_dtypes"],
    )
    print(elem.markdown())
    print()
    print(acc.markdown())
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    main()
