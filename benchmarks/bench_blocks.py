"""MX block quantization throughput: floatlab.blocks next to gfloat, pychop and a NumPy + ml_dtypes recipe.

Every implementation quantizes the same float32 values (standard normal times 2^-10, blocks of 32
along the last axis) into an MX format and back (fake quantization, round to nearest even) and the
results are checked to be equal before anything is timed. The NumPy + ml_dtypes recipe is what a
user would write by hand: the block maximum, ``floor(log2)`` of it, a division, a clip and
ml_dtypes' cast to the element type. gfloat (``quantize_block``, one block per call) and pychop
(``mx_quantize``) are timed on a slice and scaled. Rates are million values per second at the best
of several timed calls after a warm-up (compilation excluded). Writes ``benchmarks/results/blocks.md``.

    python benchmarks/bench_blocks.py
    python benchmarks/bench_blocks.py --n 100000 --repeat 3
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from functools import partial
from typing import Any

import ml_dtypes
import numpy as np
from _common import Table, fmt_rate, fmt_ratio, time_best, write_results

from floatlab.blocks import MX_FORMATS, mx_round

ELEMENT_TYPES: dict[str, Any] = {
    "mxfp8_e4m3": ml_dtypes.float8_e4m3fn,
    "mxfp8_e5m2": ml_dtypes.float8_e5m2,
    "mxfp6_e3m2": ml_dtypes.float6_e3m2fn,
    "mxfp6_e2m3": ml_dtypes.float6_e2m3fn,
    "mxfp4_e2m1": ml_dtypes.float4_e2m1fn,
}


def numpy_recipe(x: np.ndarray, name: str) -> np.ndarray:
    """MX fake quantization by hand: NumPy for the scale, ml_dtypes for the element cast."""
    f = MX_FORMATS[name].element
    blocks = x.reshape(-1, 32)
    amax = np.abs(blocks).max(axis=1, keepdims=True)
    with np.errstate(divide="ignore"):
        shared = np.floor(np.log2(np.where(amax == 0, 2.0**-127, amax))) - f.emax
    scale = np.exp2(np.clip(shared, -127, 127)).astype(np.float32)
    q = np.clip(blocks / scale, -f.max, f.max).astype(ELEMENT_TYPES[name]).astype(np.float32)
    out: np.ndarray = (q * scale).reshape(x.shape)
    return out


def _gfloat(name: str) -> Callable[[np.ndarray], np.ndarray] | None:
    try:
        import gfloat
        import gfloat.formats
    except ImportError:
        return None
    fi = getattr(gfloat.formats, f"format_info_{name}")

    def run(x: np.ndarray) -> np.ndarray:
        blocks = x.astype(np.float64).reshape(-1, 32)
        out = np.stack([gfloat.quantize_block(fi, b, gfloat.compute_scale_amax) for b in blocks])
        return out.reshape(x.shape).astype(np.float32)

    return run


def _pychop(name: str) -> Callable[[np.ndarray], np.ndarray] | None:
    try:
        from pychop.mx_formats import mx_quantize
    except ImportError:
        return None

    def run(x: np.ndarray) -> np.ndarray:
        return np.asarray(mx_quantize(x, name, block_size=32), np.float32)

    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=2**22, help="values per call (a multiple of 32)")
    parser.add_argument("--slice", type=int, default=2**14, help="values given to gfloat and pychop")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args(argv)
    n = args.n - args.n % 32
    x = (np.random.default_rng(0).standard_normal(n) * 2.0**-10).astype(np.float32)
    part = x[: args.slice - args.slice % 32]

    table = Table(["format", "implementation", "M values/s", "floatlab / this", "same values"])
    for name in MX_FORMATS:
        ours = time_best(partial(mx_round, x, name), repeat=args.repeat, min_seconds=1.0)
        rate = ours.rate(n)
        table.add(name, "floatlab mx_round", fmt_rate(rate), "1x", "-")
        expect_all = mx_round(x, name)
        expect_part = expect_all[: part.size]
        peers: list[tuple[str, Callable[[np.ndarray], np.ndarray] | None, np.ndarray]] = [
            ("NumPy + ml_dtypes recipe", partial(numpy_recipe, name=name), x),
            (f"gfloat quantize_block ({part.size:,} slice)", _gfloat(name), part),
            (f"pychop mx_quantize ({part.size:,} slice)", _pychop(name), part),
        ]
        for label, fn, data in peers:
            if fn is None:
                table.add(name, label, "not installed", "-", "-")
                continue
            got = fn(data)
            same = bool(np.array_equal(got, expect_all if data is x else expect_part))
            t = time_best(partial(fn, data), repeat=max(3, args.repeat // 2), min_seconds=0.5)
            peer = t.rate(data.size)
            table.add(name, label, fmt_rate(peer), fmt_ratio(rate / peer), "yes" if same else "no")
        print("\n".join(table.markdown().splitlines()[-4:]), flush=True)

    notes = [
        f"{n:,} float32 values per call (standard normal times 2^-10), blocks of 32 along the last axis, "
        "round to nearest even, quantized and dequantized (fake quantization) to float32.",
        "`same values`: the peer's output equals floatlab's bit for bit on the data it was timed on.",
        "The NumPy + ml_dtypes recipe takes the exponent from `floor(log2(amax))` in float32, which rounds "
        "up for a maximum one ulp below a power of two, and ml_dtypes casts without saturating (hence the "
        "clip); on this data it agrees.",
        "The machine is shared: expect +-30% between runs; compare ratios.",
    ]
    write_results(
        "blocks",
        "MX block quantization throughput",
        ["\n".join(f"- {s}" for s in notes), table.markdown()],
        packages=["ml_dtypes", "numba", "gfloat", "pychop"],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
