"""Codec throughput: floatlab's decode_array / encode_array next to NumPy, ml_dtypes and gfloat.

One run times every implementation on the same data and writes a markdown table with the
machine and the versions to benchmarks/results/codec.md:

* decode: 10^7 random codes (uniform over the code space, so every class occurs) to float64;
* encode: 10^7 standard-normal float64 values to codes, round to nearest even.

NumPy's own casts (float16, float32) and ml_dtypes' (bfloat16, float8) are the speed to beat;
gfloat is slow, so it is timed on a slice and scaled. Each timing is the best of
``--repeat`` interleaved rounds after one warm-up run (which also compiles the numba kernels).

    python benchmarks/bench_codec.py [--n 10000000] [--repeat 5] [--out benchmarks/results/codec.md]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import math
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gfloat
import gfloat.formats as gf
import ml_dtypes
import numpy as np
import numpy.typing as npt
from _common import cpu_model

import floatlab as fl
from floatlab.codec import arrays as codec_arrays

# format name, numpy/ml_dtypes type, unsigned code type, gfloat format
CASES: list[tuple[str, Any, Any, Any]] = [
    ("fp16", np.float16, np.uint16, gf.format_info_binary16),
    ("bf16", ml_dtypes.bfloat16, np.uint16, gf.format_info_bfloat16),
    ("float8_e4m3fn", ml_dtypes.float8_e4m3fn, np.uint8, gf.format_info_ocp_e4m3),
    ("float8_e5m2", ml_dtypes.float8_e5m2, np.uint8, gf.format_info_ocp_e5m2),
    ("fp32", np.float32, np.uint32, gf.format_info_binary32),
]


# ---- the minimum of a timing harness (no shared benchmarks helper module exists yet) ---------
def best_of(fns: dict[str, Callable[[], object]], repeat: int) -> dict[str, float]:
    """Best wall-clock seconds of each function over ``repeat`` rounds, after one warm-up call each.

    The rounds interleave the functions, so that a burst of load on a shared machine hits all
    of them alike instead of whichever happened to run at the time.
    """
    for fn in fns.values():
        fn()
    best = dict.fromkeys(fns, math.inf)
    for _ in range(repeat):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    return best


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def machine_header() -> list[str]:
    import numba

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
    return [
        f"- machine: {cpu_model()}, {os.cpu_count()} logical cores "
        f"(numba threads: {numba.get_num_threads()}), {platform.system()} {platform.release()}; "
        f"load average at the end of the run: {load}",
        f"- python {platform.python_version()}, numpy {np.__version__}, ml_dtypes {_version('ml_dtypes')}, "
        f"gfloat {_version('gfloat')}, numba {numba.__version__}, floatlab {fl.__version__}",
    ]


# ---- the measurements --------------------------------------------------------------------------
Row = tuple[str, str, str, float]  # format, operation, implementation, million elements per second


def _same_values(a: npt.NDArray[np.float64], b: npt.NDArray[np.float64]) -> bool:
    return bool(np.array_equal(np.isnan(a), np.isnan(b)) and np.array_equal(a[~np.isnan(a)], b[~np.isnan(b)]))


def _with_numpy_path_only(fn: Callable[[], object]) -> Callable[[], object]:
    """``fn`` run with decode_array's kernel switched off (its lookup table / NumPy paths alone)."""

    def run() -> object:
        saved = codec_arrays._KERNEL_MIN_SIZE
        codec_arrays._KERNEL_MIN_SIZE = 1 << 62
        try:
            return fn()
        finally:
            codec_arrays._KERNEL_MIN_SIZE = saved

    return run


def bench_decode(name: str, t: Any, utype: Any, gfi: Any, n: int, repeat: int, slice_n: int) -> list[Row]:
    fmt = fl.get_format(name)
    codes = np.random.default_rng(0).integers(0, 1 << fmt.bits, n, dtype=np.uint64).astype(utype)

    def native() -> npt.NDArray[np.float64]:
        with np.errstate(invalid="ignore"):  # widening a signalling NaN raises "invalid"
            out: npt.NDArray[np.float64] = codes.view(t).astype(np.float64)
        return out

    # the same values as the oracle, or the comparison is meaningless
    assert _same_values(fl.decode_array(codes, fmt), native())
    peer = "numpy view + astype" if t in (np.float16, np.float32) else "ml_dtypes view + astype"
    seconds = best_of(
        {
            "floatlab decode_array": lambda: fl.decode_array(codes, fmt),
            "floatlab, NumPy path only": _with_numpy_path_only(lambda: fl.decode_array(codes, fmt)),
            peer: native,
        },
        repeat,
    )
    rows: list[Row] = [(name, "decode", impl, n / sec) for impl, sec in seconds.items()]
    part = codes[:slice_n]
    sec = best_of({"gfloat": lambda: gfloat.decode_ndarray(gfi, part)}, max(1, repeat // 2))["gfloat"]
    rows.append((name, "decode", f"gfloat decode_ndarray ({slice_n:.0e} slice, scaled)", slice_n / sec))
    return rows


def bench_encode(name: str, t: Any, utype: Any, gfi: Any, n: int, repeat: int, slice_n: int) -> list[Row]:
    fmt = fl.get_format(name)
    x = np.random.default_rng(1).standard_normal(n)

    def native() -> npt.NDArray[Any]:
        with np.errstate(over="ignore", invalid="ignore"):
            out: npt.NDArray[Any] = x.astype(t).view(utype)
        return out

    peer = "numpy astype + view" if t in (np.float16, np.float32) else "ml_dtypes astype + view (via float32)"
    fns: dict[str, Callable[[], object]] = {}
    encode_array = getattr(fl, "encode_array", None)
    if encode_array is not None:
        fns["floatlab encode_array"] = lambda: encode_array(x, fmt)
    fns[peer] = native
    rows: list[Row] = [(name, "encode", impl, n / sec) for impl, sec in best_of(fns, repeat).items()]
    part = x[:slice_n]
    sec = best_of({"gfloat": lambda: gfloat.encode_ndarray(gfi, part)}, max(1, repeat // 2))["gfloat"]
    rows.append((name, "encode", f"gfloat encode_ndarray ({slice_n:.0e} slice, scaled)", slice_n / sec))
    return rows


def table(rows: list[Row]) -> list[str]:
    """Markdown rows, each with its speed relative to floatlab's entry point for that format and operation."""
    lines = [
        "| format | operation | implementation | M elements/s | floatlab / this |",
        "|---|---|---|---:|---:|",
    ]
    ours = {(f, op): rate for f, op, impl, rate in rows if impl.startswith(f"floatlab {op}")}
    for f, op, impl, rate in rows:
        ref = ours.get((f, op))
        ratio = f"{ref / rate:.2f}x" if ref is not None else "n/a"
        lines.append(f"| {f} | {op} | {impl} | {rate / 1e6:,.1f} | {ratio} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=10_000_000, help="elements per timing (default 10^7)")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per measurement; the best counts")
    parser.add_argument("--slice", type=int, default=200_000, help="elements given to gfloat (scaled)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "codec.md")
    args = parser.parse_args(argv)

    rows: list[Row] = []
    for case in CASES:
        new = bench_decode(*case, n=args.n, repeat=args.repeat, slice_n=args.slice)
        new += bench_encode(*case, n=args.n, repeat=args.repeat, slice_n=args.slice)
        print("\n".join(table(new)[2:]), flush=True)
        rows += new

    has_encode = getattr(fl, "encode_array", None) is not None
    lines = [
        "# Codec throughput",
        "",
        "Written by `benchmarks/bench_codec.py`; one run, every implementation on the same data.",
        "",
        *machine_header(),
        f"- {args.n:,} elements per timing, best of {args.repeat} interleaved rounds after a warm-up run; "
        f"gfloat is timed on the first {args.slice:,} elements and scaled.",
        "- decode: codes drawn uniformly from the whole code space (NaN and inf included) to float64; "
        "encode: standard-normal float64 values to codes, round to nearest even.",
        "- ml_dtypes converts float64 to bfloat16/float8 through float32 (two roundings), so its encode "
        "does less work and can differ from the exact result; floatlab rounds once.",
        "- `floatlab decode_array` takes the compiled kernel for arrays of 2^16 codes and more, except "
        "fp32/fp64 codes, which always go through NumPy's own cast; `NumPy path only` is the fallback "
        "without the kernel (a lookup table for formats of up to 16 bits).",
        "- last column: floatlab's entry point (decode_array or encode_array) divided by the row's speed; "
        "above 1, floatlab is that many times faster. The machine is shared: expect +-30% between runs.",
        *([] if has_encode else ["- encode_array is not available in this checkout: encode not timed."]),
        "",
        *table(rows),
        "",
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
