"""Rounding throughput: floatlab's compiled kernels against numpy, ml_dtypes, gfloat, pychop and torch.

All rows run in one process on the same 10^7 float32 inputs (log-uniform magnitudes with
subnormal results, float32 subnormal inputs and overflows in the mix). Each figure is the best
of several timed calls after a warm-up (compilation excluded). gfloat and pychop are slow, so
they are timed on a slice and reported per value. Writes ``benchmarks/results/rounding.md``.

    python benchmarks/bench_rounding.py            # 10^7 values
    python benchmarks/bench_rounding.py --n 1000000 --repeat 3
"""

from __future__ import annotations

import argparse
import os
import warnings
from collections.abc import Callable
from functools import partial
from typing import Any

import ml_dtypes
import numpy as np
from _common import Table, fmt_rate, fmt_ratio, time_best, write_results

import floatlab as fl
from floatlab.rounding import ROUNDING_MODES, code_dtype, decode_codes

TARGETS: dict[str, Any] = {
    "fp16": np.float16,
    "bf16": ml_dtypes.bfloat16,
    "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
    "float8_e5m2": ml_dtypes.float8_e5m2,
}
GFLOAT_FORMATS = {
    "fp16": "format_info_binary16",
    "bf16": "format_info_bfloat16",
    "float8_e4m3fn": "format_info_ocp_e4m3",
    "float8_e5m2": "format_info_ocp_e5m2",
}
#: the formats of issue 38, timed beside the 8-bit formats above: ml_dtypes' two (its cast is the
#: peer) and two IEEE P3109 formats (gfloat is the peer: (K, P, signed, extended))
NEW_ML_DTYPES: dict[str, Any] = {
    "float8_e3m4": ml_dtypes.float8_e3m4,
    "float8_e8m0fnu": ml_dtypes.float8_e8m0fnu,
}
NEW_P3109: dict[str, tuple[int, int, bool, bool]] = {
    "p3109_k8p3se": (8, 3, True, True),
    "p3109_k8p4uf": (8, 4, False, False),
}


def make_inputs(n: int, seed: int = 0) -> np.ndarray:
    """float32 values: 90% with exponents uniform in [-30, 20] (subnormal and overflowing
    results for fp16 and fp8), 5% float32 subnormals, 5% huge (up to 2^127); random signs."""
    rng = np.random.default_rng(seed)
    e = rng.integers(-30, 21, n)
    part = rng.random(n)
    e = np.where(part < 0.05, rng.integers(-149, -126, n), e)
    e = np.where(part > 0.95, rng.integers(21, 127, n), e)
    x = (1 + rng.random(n)) * np.exp2(e.astype(np.float64)) * rng.choice([-1.0, 1.0], n)
    out: np.ndarray = x.astype(np.float32)
    return out


def _view_astype(codes: np.ndarray, dt: Any) -> np.ndarray:
    out: np.ndarray = codes.view(dt).astype(np.float64)
    return out


class Bench:
    """Rows registered first, then timed round-robin: each row keeps its best time over all
    rounds, so a burst of load from elsewhere on the machine spoils one round, not the row."""

    def __init__(self, n: int, repeat: int, rounds: int) -> None:
        self.n = n
        self.repeat = repeat
        self.rounds = rounds
        self.rows: list[tuple[str, str, str, Callable[[], object], int]] = []
        self.best: list[float] = []

    def add(self, section: str, what: str, mode: str, fn: Callable[[], object], n: int | None = None) -> int:
        self.rows.append((section, what, mode, fn, self.n if n is None else n))
        return len(self.rows) - 1

    def run(self) -> None:
        self.best = [float("inf")] * len(self.rows)
        for r in range(self.rounds):
            for i, (section, what, mode, fn, _n) in enumerate(self.rows):
                t = time_best(fn, repeat=self.repeat, warmup=1 if r == 0 else 0, min_seconds=0.1)
                self.best[i] = min(self.best[i], t.best)
                if r == self.rounds - 1:
                    print(f"{section:8s} {what:48s} {mode:10s} {self.rate(i):10.1f} M/s", flush=True)

    def rate(self, i: int) -> float:
        """Million values per second of row i at its best time."""
        return self.rows[i][4] / self.best[i] / 1e6


def peers(bench: Bench, x: np.ndarray, notes: list[str]) -> None:
    """numpy, ml_dtypes, gfloat, pychop, torch: round to nearest even into each target."""
    for name, dt in {**TARGETS, **NEW_ML_DTYPES}.items():
        if name != "fp16":  # numpy's float16 cast is timed first, as the reference line
            bench.add("peer", f"ml_dtypes astype({np.dtype(dt).name})", "rne", partial(x.astype, dt))
    try:
        import gfloat
        import gfloat.formats as gff

        n = min(x.size, 1_000_000)
        xs = x[:n].astype(np.float64)
        for name, attr in GFLOAT_FORMATS.items():
            fi = getattr(gff, attr)
            bench.add("peer", f"gfloat round_ndarray {name}", "rne", partial(gfloat.round_ndarray, fi, xs), n)
            bench.add(
                "peer", f"gfloat encode_ndarray {name}", "rne", partial(gfloat.encode_ndarray, fi, xs), n
            )
        notes.append(f"gfloat timed on the first {n:,} values (as float64, its working type), per value.")
        from gfloat.types import Domain, Signedness

        for name, (k, p, signed, extended) in NEW_P3109.items():
            fi = gff.format_info_p3109(
                k, p, Signedness.Signed if signed else Signedness.Unsigned,
                Domain.Extended if extended else Domain.Finite,
            )  # fmt: skip
            # an unsigned format takes the magnitudes (gfloat has no rule for negative values)
            xp = np.abs(xs) if not signed else xs
            bench.add("peer", f"gfloat round_ndarray {name}", "rne", partial(gfloat.round_ndarray, fi, xp), n)
            bench.add(
                "peer", f"gfloat encode_ndarray {name}", "rne", partial(gfloat.encode_ndarray, fi, xp), n
            )
    except Exception as exc:  # a peer that is missing or fails is noted, not fatal
        notes.append(f"gfloat skipped: {type(exc).__name__}: {exc}")
    try:
        import pychop

        n = min(x.size, 1_000_000)
        xs = x[:n].astype(np.float64)
        for name in ("fp16", "bf16", "float8_e5m2"):
            f = fl.get_format(name)
            chop = pychop.Chop(exp_bits=f.exponent_bits, sig_bits=f.mantissa_bits, rmode=1)
            bench.add("peer", f"pychop Chop {name}", "rne", partial(chop, xs), n)
        notes.append(
            f"pychop (Chop, numpy backend) timed on the first {n:,} values as float64; it has no "
            "fn-style e4m3 (no inf, one NaN), so that row is left out."
        )
    except Exception as exc:
        notes.append(f"pychop skipped: {type(exc).__name__}: {exc}")
    try:
        import torch

        t = torch.from_numpy(x)
        bench.add("peer", "torch .to(float16) (CPU)", "rne", partial(t.to, torch.float16))
        bench.add("peer", "torch .to(bfloat16) (CPU)", "rne", partial(t.to, torch.bfloat16))
        for name, tdt in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
            theirs = t.to(tdt).view(torch.int16).numpy().view(np.uint16)
            diff = int(np.count_nonzero(theirs != fl.encode_array(x, name)))
            notes.append(f"torch's {name} cast differs from floatlab's in {diff} of {x.size:,} values.")
        notes.append(
            f"torch {torch.__version__} ran on {torch.get_num_threads()} threads. The numpy copy line "
            "includes allocating and first touching a new output array, as numpy's, floatlab's and torch's "
            "casts do; the 'copyto (preallocated)' row is the copy without that."
        )
    except Exception as exc:
        notes.append(f"torch skipped: {type(exc).__name__}: {exc}")


def targets(bench: Bench) -> str:
    """One line on the goals: deterministic modes >= 1000, stochastic >= 300, decode >= 1000 M/s."""
    det: list[float] = []
    sto: list[float] = []
    dec: list[float] = []
    for i, (section, what, mode, _fn, _n) in enumerate(bench.rows):
        if section == "floatlab" and what.startswith("encode_array ->") and "flags" not in what:
            (sto if mode == "stochastic" else det).append(bench.rate(i))
        elif section == "decode" and what.startswith("floatlab"):
            dec.append(bench.rate(i))
    return (
        f"slowest floatlab rows: deterministic encode {min(det):,.0f} M/s (goal 1,000), stochastic encode "
        f"{min(sto):,.0f} M/s (goal 300), decode {min(dec):,.0f} M/s (goal 1,000)."
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--repeat", type=int, default=3, help="timed calls per row in each round")
    ap.add_argument("--rounds", type=int, default=3, help="round-robin passes over all rows")
    ap.add_argument("--no-write", action="store_true", help="print only; leave results/rounding.md alone")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore", RuntimeWarning)  # numpy's overflow warning for the peers' casts
    load_start = os.getloadavg()
    x = make_inputs(args.n)
    bench = Bench(args.n, args.repeat, args.rounds)
    notes: list[str] = []

    import numba

    notes.append(
        f"floatlab's loops run on {numba.get_num_threads()} numba threads "
        f"({numba.threading_layer()} threading layer)."  # type: ignore[attr-defined]
    )
    copy_row = bench.add("memory", "numpy copy (float32)", "-", x.copy)
    dst = np.empty_like(x)
    bench.add("memory", "numpy copyto (preallocated)", "-", partial(np.copyto, dst, x))
    # correctness on this very input before timing: floatlab equals the peers' nearest-even casts
    for name, dt in TARGETS.items():
        want = x.astype(dt).view(code_dtype(fl.get_format(name)))
        got = fl.encode_array(x, name)
        mismatches = int(np.count_nonzero(got != want))
        notes.append(
            f"encode_array(x, {name!r}) differs from the peer's cast in {mismatches} of {x.size:,} values."
        )

    for name, dt in NEW_ML_DTYPES.items():
        want = x.astype(dt).view(np.uint8)
        got = fl.encode_array(x, name)
        # ml_dtypes 0.6 rounds a float32 subnormal above 2^-127 up to 2^-126 in float8_e8m0fnu
        quirk = (np.abs(x) > 2.0**-127) & (np.abs(x) < 2.0**-126) if name == "float8_e8m0fnu" else False
        mismatches = int(np.count_nonzero((got != want) & ~quirk))
        notes.append(
            f"encode_array(x, {name!r}) differs from ml_dtypes' cast in {mismatches} of {x.size:,} values"
            + (
                f" (leaving out the {int(np.count_nonzero(quirk)):,} float32 subnormals above 2^-127, which "
                "ml_dtypes rounds up to 2^-126)."
                if name == "float8_e8m0fnu"
                else "."
            )
        )

    numpy_row = bench.add("peer", "numpy astype(float16)", "rne", partial(x.astype, np.float16))
    peers(bench, x, notes)
    rng = np.random.default_rng(1)
    new_rows: dict[str, int] = {}
    for name in [*NEW_ML_DTYPES, *NEW_P3109]:
        new_rows[name] = bench.add(
            "floatlab", f"encode_array -> {name}", "rne", partial(fl.encode_array, x, name)
        )
        bench.add(
            "floatlab",
            f"encode_array -> {name}",
            "stochastic",
            partial(fl.encode_array, x, name, "stochastic", rng=rng),
        )
        bench.add("floatlab", f"round_array -> {name} (float32 out)", "rne", partial(fl.round_array, x, name))
        bench.add(
            "decode",
            f"floatlab decode_codes {name} -> float64",
            "-",
            partial(decode_codes, fl.encode_array(x, name), fl.get_format(name)),
        )
    for name in TARGETS:
        for mode in ROUNDING_MODES:
            bench.add(
                "floatlab",
                f"encode_array -> {name}",
                mode,
                partial(fl.encode_array, x, name, mode, rng=rng),
            )
        bench.add(
            "floatlab",
            f"round_array -> {name} (float32 out)",
            "rne",
            partial(fl.round_array, x, name),
        )
        bench.add(
            "floatlab",
            f"round_array -> {name} (float32 out)",
            "stochastic",
            partial(fl.round_array, x, name, "stochastic", rng=rng),
        )
        bench.add(
            "floatlab",
            f"encode_array_with_flags -> {name}",
            "rne",
            partial(fl.encode_array_with_flags, x, name),
        )
    for name, dt in TARGETS.items():
        fmt = fl.get_format(name)
        codes = fl.encode_array(x, name)
        bench.add(
            "decode",
            f"floatlab decode_codes {name} -> float64",
            "-",
            partial(decode_codes, codes, fmt),
        )
        bench.add(
            "decode",
            f"{'numpy' if name == 'fp16' else 'ml_dtypes'} view+astype {name} -> float64",
            "-",
            partial(_view_astype, codes, dt),
        )

    e4m3_row = next(
        i for i, r in enumerate(bench.rows) if r[1] == "encode_array -> float8_e4m3fn" and r[2] == "rne"
    )
    bench.run()
    numpy_rate, copy_rate = bench.rate(numpy_row), bench.rate(copy_row)
    notes.append(
        "the new formats' nearest-even encode against float8_e4m3fn's ("
        + ", ".join(f"{n} {bench.rate(i) / bench.rate(e4m3_row):.2f}x" for n, i in new_rows.items())
        + "): the same compiled loop, the formats entering as parameters."
    )
    table = Table(
        ["section", "implementation", "mode", "M values/s", "vs numpy astype(float16)", "vs numpy copy"]
    )
    for i, (section, what, how, _fn, _n) in enumerate(bench.rows):
        rate = bench.rate(i)
        table.add(
            section, what, how, fmt_rate(rate), fmt_ratio(rate / numpy_rate), fmt_ratio(rate / copy_rate)
        )
    notes.append(targets(bench))
    load_end = os.getloadavg()
    notes.append(
        f"machine load (1-minute load average, {os.cpu_count()} logical cores) {load_start[0]:.1f} at the "
        f"start, {load_end[0]:.1f} at the end: the machine is shared, and rates fall with the load; the "
        "ratios within one run are the figures to compare."
    )
    intro = (
        f"{args.n:,} float32 inputs: 90% with exponents uniform in [-30, 20] (fp16/fp8 subnormal and "
        "overflowing results), 5% float32 subnormals, 5% up to 2^127, random signs. Rates are million "
        f"values per second at the best of {args.rounds} round-robin passes of {args.repeat} timed calls "
        "each, after a warm-up (compilation excluded); ratios compare with "
        "numpy's float16 cast and with a plain numpy copy of the float32 input (the memory-speed line). "
        "floatlab rows: `encode_array` returns codes (uint16/uint8), `round_array` returns float32 values, "
        "stochastic rows include drawing the key from a numpy Generator."
    )
    sections = [intro, table.markdown(), "Notes:\n\n" + "\n".join(f"- {n}" for n in notes)]
    if not args.no_write:
        path = write_results(
            "rounding", "Rounding throughput", sections, ["numba", "ml_dtypes", "gfloat", "pychop", "torch"]
        )
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
