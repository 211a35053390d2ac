"""Exhaustive correctness: every one of the 2^32 float32 bit patterns rounded to fp16 and bf16.

For each float32 input this checks, against oracles that share no code with floatlab:

* round to nearest even, fp16: ``encode_array`` (the CPU's conversion instruction), the general
  kernel (``encode_array_with_flags``) and ``round_array`` (float32 out) against numpy's float16 cast and
  torch's; bf16 (``encode_array`` and ``round_array`` there are one integer add per value) against
  ml_dtypes' bfloat16 cast and torch's. NaNs are compared with the IEEE 754
  rule (a quiet NaN with the input's sign and the top bits of its payload), which torch's fp16
  cast follows bit for bit (numpy keeps signalling NaNs signalling, ml_dtypes drops payloads);
* the same oracle values from ``round_flushed`` (the trainer's one-pass store, also rounding in
  its input's own memory) with its count of the values flushed to zero, and from
  ``round_scaled`` at scale 1, saturating (the fp8 recipes' cast, which rounds to nearest even
  in the input's own bit pattern), a finite input that overflows becoming the largest finite
  value;
* the IEEE flags counted by ``encode_array_with_flags`` (inexact, underflow after rounding, overflow,
  invalid) against counts made with exact float64 comparisons;
* the directed modes ``rtz``, ``rup``, ``rdown``, ``rna`` and ``rodd`` into fp16 and bf16 against
  exact reference arithmetic: the two neighbours of each input are found from the oracle's
  round-to-nearest code by stepping one code up or down, decoded through the oracle's own table,
  and compared with the input in float64, which holds every float32, fp16 and bf16 value and
  every midpoint between two of them exactly.

``python benchmarks/exhaustive.py`` runs all 2^32 inputs in chunks of 2^24 on every core and
writes ``benchmarks/results/exhaustive.md``; ``--chunks N`` checks a strided sample of N chunks.
The test suite runs :func:`check_bits` on a 2^20-input sample and on every special pattern
(``tests/rounding/test_exhaustive.py``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parent))

U16 = npt.NDArray[np.uint16]
U32 = npt.NDArray[np.uint32]
F64 = npt.NDArray[np.float64]

DIRECTED = ("rtz", "rup", "rdown", "rna", "rodd")
TARGETS = ("fp16", "bf16")


@dataclass(frozen=True)
class Target:
    """What the oracle side knows about a 16-bit target: its decoding table (built by the oracle
    library's own cast to float64), its parameters and its round-to-nearest-even cast."""

    name: str
    mantissa_bits: int
    emin: int
    table64: F64
    table32: npt.NDArray[np.float32]

    @property
    def quiet_bit(self) -> int:
        return 1 << (self.mantissa_bits - 1)

    @property
    def exponent_mask(self) -> int:
        return 0x7FFF & ~((1 << self.mantissa_bits) - 1)

    @property
    def tiny_threshold(self) -> float:
        """Inexact results below this magnitude are tiny after rounding (IEEE 754 underflow):
        the midpoint between 2^emin and the number below it at the target's precision, which
        rounds (to even) up to 2^emin."""
        return float(2.0**self.emin - 2.0 ** (self.emin - self.mantissa_bits - 2))


def _target(name: str) -> Target:
    codes = np.arange(1 << 16, dtype=np.uint16)
    if name == "fp16":
        as_type: Any = codes.view(np.float16)
        m, emin = 10, -14
    else:
        as_type = codes.view(ml_dtypes.bfloat16)
        m, emin = 7, -126
    with np.errstate(invalid="ignore"):
        t64 = as_type.astype(np.float64)
        t32 = as_type.astype(np.float32)
    t64.flags.writeable = False
    t32.flags.writeable = False
    return Target(name, m, emin, t64, t32)


_TARGETS: dict[str, Target] = {}


def target(name: str) -> Target:
    """The oracle's description of ``"fp16"`` or ``"bf16"`` (cached)."""
    if name not in _TARGETS:
        _TARGETS[name] = _target(name)
    return _TARGETS[name]


def oracle_rne(x: npt.NDArray[np.float32], name: str) -> U16:
    """Round-to-nearest-even codes from numpy (fp16) or ml_dtypes (bf16)."""
    with np.errstate(invalid="ignore", over="ignore"):
        if name == "fp16":
            out: U16 = x.astype(np.float16).view(np.uint16)
        else:
            out = x.astype(ml_dtypes.bfloat16).view(np.uint16)
    return out


def torch_rne(x: npt.NDArray[np.float32], name: str) -> U16 | None:
    """The same cast done by torch, or None without torch."""
    try:
        import torch
    except ImportError:
        return None
    t = torch.from_numpy(x).to(torch.float16 if name == "fp16" else torch.bfloat16)
    out: U16 = t.view(torch.int16).numpy().view(np.uint16)
    return out


def nan_code(bits: U32, tg: Target) -> U16:
    """The IEEE 754 conversion of a float32 NaN: quiet, same sign, payload's top bits kept."""
    sign = ((bits >> np.uint32(16)) & np.uint32(0x8000)).astype(np.uint16)
    payload = ((bits & np.uint32(0x3FFFFF)) >> np.uint32(23 - tg.mantissa_bits)).astype(np.uint16)
    out: U16 = sign | np.uint16(tg.exponent_mask | tg.quiet_bit) | payload
    return out


def _next_up(c: U16) -> U16:
    """The code of the next larger value (non-NaN codes below +inf): the IEEE 754 nextUp."""
    # one code up for positive values, one down (towards zero) for negative ones; uint16 wraps
    up: U16 = c + np.uint16(1) - ((c >> np.uint16(15)) << np.uint16(1))
    up[c == np.uint16(0x8000)] = 1  # -0 -> the smallest positive subnormal
    return up


def _next_down(c: U16) -> U16:
    """nextDown(x) = -nextUp(-x)."""
    down: U16 = _next_up(c ^ np.uint16(0x8000)) ^ np.uint16(0x8000)
    return down


def directed_oracle(x64: F64, rne: U16, tg: Target) -> dict[str, U16]:
    """The codes of every directed mode for non-NaN inputs, from the round-to-nearest code and
    exact comparisons in float64 (see the module docstring)."""
    rv = tg.table64[rne]
    above = x64 > rv  # the nearest value lies below x: it is the lower neighbour
    below = x64 < rv
    down, up = rne.copy(), rne.copy()  # exact inputs (and NaNs, compared elsewhere) keep rne
    down[below] = _next_down(rne[below])
    up[above] = _next_up(rne[above])
    dv, uv = tg.table64[down], tg.table64[up]
    with np.errstate(invalid="ignore"):
        mid = (dv + uv) / 2
    # next to an infinity the missing neighbour is the next power of two beyond the largest
    # finite value: the midpoint lies half an ulp beyond it
    top = np.flatnonzero(np.isinf(uv) & np.isfinite(dv))
    mid[top] = dv[top] + (dv[top] - tg.table64[_next_down(down[top])]) / 2
    bottom = np.flatnonzero(np.isinf(dv) & np.isfinite(uv))
    mid[bottom] = uv[bottom] - (tg.table64[_next_up(up[bottom])] - uv[bottom]) / 2
    positive = x64 > 0
    rtz = np.where(positive, down, up)
    rna = np.where(x64 > mid, up, down)
    tie = np.flatnonzero(x64 == mid)  # ties go away from zero
    rna[tie] = np.where(positive[tie], up[tie], down[tie])
    rodd = np.where((down & np.uint16(1)) == 1, down, up)
    return {"rtz": rtz, "rup": up, "rdown": down, "rna": rna, "rodd": rodd}


@dataclass
class Report:
    """Inputs checked and mismatches found, per check."""

    checked: dict[str, int] = field(default_factory=dict)
    mismatches: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[int]] = field(default_factory=dict)

    def add(self, name: str, n: int, bad: npt.NDArray[np.bool_], bits: U32) -> None:
        self.checked[name] = self.checked.get(name, 0) + n
        count = int(np.count_nonzero(bad))
        self.mismatches[name] = self.mismatches.get(name, 0) + count
        if count:
            ex = self.examples.setdefault(name, [])
            ex.extend(int(b) for b in bits[bad][: max(0, 5 - len(ex))])

    def add_count(self, name: str, got: int, want: int) -> None:
        self.checked[name] = self.checked.get(name, 0) + 1
        self.mismatches[name] = self.mismatches.get(name, 0) + int(got != want)
        if got != want:
            self.examples.setdefault(name, []).append(got - want)

    def merge(self, other: Report) -> None:
        for k, v in other.checked.items():
            self.checked[k] = self.checked.get(k, 0) + v
        for k, v in other.mismatches.items():
            self.mismatches[k] = self.mismatches.get(k, 0) + v
        for k, ex in other.examples.items():
            mine = self.examples.setdefault(k, [])
            mine.extend(ex[: max(0, 5 - len(mine))])

    @property
    def total_mismatches(self) -> int:
        return sum(self.mismatches.values())


def check_bits(bits: U32, *, directed: bool = True, use_torch: bool = True) -> Report:
    """Run every check on the float32 inputs with bit patterns ``bits``."""
    import floatlab as fl

    bits = np.ascontiguousarray(bits, dtype=np.uint32)
    x = bits.view(np.float32)
    with np.errstate(invalid="ignore"):  # (signalling NaNs)
        x64 = x.astype(np.float64)
    n = int(bits.size)
    nan = np.isnan(x)
    ok = ~nan
    signalling = nan & ((bits & np.uint32(0x400000)) == 0)
    finite = np.isfinite(x64)
    rep = Report()
    for name in TARGETS:
        tg = target(name)
        raw = oracle_rne(x, name)
        # the oracle itself: a NaN must stay a NaN
        rep.add(f"{name} oracle keeps NaN class", n, nan & ~np.isnan(tg.table64[raw]), bits)
        want = raw.copy()
        want[nan] = nan_code(bits[nan], tg)
        if use_torch:
            th = torch_rne(x, name)
            if th is not None:
                # torch's fp16 cast follows the NaN rule too; its bf16 cast rewrites NaNs
                cmp = np.ones(n, dtype=bool) if name == "fp16" else ok
                rep.add(f"{name} rne: oracle vs torch", int(cmp.sum()), cmp & (th != want), bits)

        got = fl.encode_array(x, name)
        rep.add(f"{name} rne encode_array", n, got != want, bits)
        got_full, stats = fl.encode_array_with_flags(x, name)
        rep.add(f"{name} rne encode_array_with_flags", n, got_full != want, bits)
        back = fl.round_array(x, name)
        rep.add(f"{name} rne round_array", n, back.view(np.uint32) != tg.table32[want].view(np.uint32), bits)
        # the one-pass store with its flush count, and the scaled cast's in-place rounding (scale
        # 1, saturating: a finite input that overflows becomes the largest value, of its sign)
        want32 = tg.table32[want].view(np.uint32)
        stored = fl.rounding.round_flushed(x, name)
        rep.add(f"{name} rne round_flushed", n, stored.values.view(np.uint32) != want32, bits)
        lost = int(((x64 != 0) & (tg.table64[want] == 0)).sum())  # (a NaN is non-zero on both sides)
        rep.add_count(f"{name} rne round_flushed: flushed", stored.flushed, lost)
        # the same store rounding a GEMM's output in its own memory (the in-place loop)
        owned = x.copy()
        over = fl.rounding.round_flushed(owned, name, overwrite=True)
        rep.add(f"{name} rne round_flushed in place", n, owned.view(np.uint32) != want32, bits)
        rep.add_count(f"{name} rne round_flushed in place: flushed", over.flushed, lost)
        top = np.float32(tg.table64[np.isfinite(tg.table64)].max())
        sat = tg.table32[want].copy()
        over = np.isinf(sat) & finite  # (an infinite input stays infinite)
        sat[over] = np.copysign(top, sat[over])
        # the finite inputs alone take the in-place loop; with an inf or NaN among them the array
        # goes through the door's loop
        fin = np.ascontiguousarray(x[finite])
        scaled = fl.rounding.round_scaled(fin, np.float32(1.0), name, saturate=True).values
        bad = scaled.view(np.uint32) != sat[finite].view(np.uint32)
        rep.add(f"{name} rne round_scaled (in place)", fin.size, bad, bits[finite])
        whole = fl.rounding.round_scaled(x, np.float32(1.0), name, saturate=True).values
        rep.add(f"{name} rne round_scaled", n, whole.view(np.uint32) != sat.view(np.uint32), bits)

        value = tg.table64[want]
        with np.errstate(invalid="ignore"):
            inexact = finite & (value != x64)
        overflow = finite & np.isinf(value)
        underflow = inexact & (np.abs(x64) < tg.tiny_threshold)
        rep.add_count(f"{name} rne flag count: inexact", stats.inexact, int(inexact.sum()))
        rep.add_count(f"{name} rne flag count: underflow", stats.underflow, int(underflow.sum()))
        rep.add_count(f"{name} rne flag count: overflow", stats.overflow, int(overflow.sum()))
        rep.add_count(f"{name} rne flag count: invalid", stats.invalid, int(signalling.sum()))

        if directed:
            expected = directed_oracle(x64, want, tg)
            for mode in DIRECTED:
                exp = expected[mode]
                exp[nan] = want[nan]
                rep.add(f"{name} {mode} encode_array", n, fl.encode_array(x, name, mode) != exp, bits)
    return rep


def chunk_bits(index: int, chunk_bits: int) -> U32:
    """The float32 bit patterns of chunk ``index`` (2^chunk_bits consecutive patterns)."""
    start = index << chunk_bits
    return np.arange(start, start + (1 << chunk_bits), dtype=np.uint64).astype(np.uint32)


def _work(args: tuple[int, int]) -> Report:
    index, bits = args
    return check_bits(chunk_bits(index, bits))


def special_bits() -> U32:
    """Every float32 pattern where rounding to fp16 or bf16 can go wrong: each 16-bit code's exact
    value, its neighbours, the midpoints to the next code and one float32 ulp either side of
    them, for both targets and both signs; and the float32 landmarks (zeros, subnormals,
    infinities, signalling and quiet NaNs with assorted payloads)."""
    out: list[U32] = []
    one = np.uint32(1)
    for name in TARGETS:
        tg = target(name)
        codes = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
        c = codes[np.isfinite(tg.table64)]
        up = _next_up(c)
        lo, hi = tg.table64[c], tg.table64[up]
        # next to the largest finite value the midpoint is half an ulp beyond it (where
        # round-to-nearest starts to overflow)
        ulp = lo - tg.table64[_next_down(c)]
        with np.errstate(invalid="ignore"):
            mids = np.where(np.isinf(hi), lo + ulp / 2, (lo + hi) / 2)
        values = np.concatenate([lo, mids, -mids])
        # exact: every value of a 16-bit code, and every midpoint of two, is a float32
        b = values.astype(np.float32).view(np.uint32)
        out += [b, b + one, b - one]
    landmarks = np.array(
        [
            0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF, 0x00800000,
            0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0xFF800000, 0x7F800001, 0xFF800001, 0x7FA00000,
            0x7FBFFFFF, 0x7FC00000, 0xFFC00000, 0x7FFFFFFF, 0xFFFFFFFF, 0x7F802000, 0x7FC12345,
        ],
        dtype=np.uint32,
    )  # fmt: skip
    all_bits: U32 = np.unique(np.concatenate([*out, landmarks]).astype(np.uint32))
    return all_bits


def strided_bits(count_bits: int = 20, seed: int = 0) -> U32:
    """2^count_bits inputs spread over all 2^32 patterns: a stride through the space plus a
    random low part, so that every exponent, sign and many fraction patterns appear."""
    rng = np.random.default_rng(seed)
    n = 1 << count_bits
    base = np.arange(n, dtype=np.uint64) << np.uint64(32 - count_bits)
    low = rng.integers(0, 1 << (32 - count_bits), size=n, dtype=np.uint64)
    bits: U32 = (base + low).astype(np.uint32)
    return bits


def _markdown(rep: Report, inputs: int, specials: int, seconds: float, jobs: int, chunk: int) -> str:
    from _common import Table

    t = Table(["check", "inputs checked", "mismatches"])
    for name in rep.checked:
        t.add(name, f"{rep.checked[name]:,}", f"{rep.mismatches[name]:,}")
    whole = " (all 2^32)" if inputs == 1 << 32 else " (a strided sample of chunks)"
    lines = [
        f"Inputs: {inputs:,} float32 bit patterns{whole} in chunks of 2^{chunk}, then {specials:,} special "
        "patterns (every fp16 and bf16 value and midpoint, one float32 ulp either side, landmarks) "
        f"checked again; {jobs} worker processes, each with NUMBA_NUM_THREADS=1.",
        f"**Total mismatches: {rep.total_mismatches:,}.** Wall time: {seconds:,.0f} s "
        f"({inputs / seconds / 1e6:,.1f} million inputs per second through all the checks).",
        "Oracles: numpy's float16 cast, ml_dtypes' bfloat16 cast and torch's casts (round to nearest "
        "even; NaNs against the IEEE 754 rule: quiet, same sign, top payload bits); for the directed "
        "modes the two neighbours of each input, stepped from the oracle's nearest code and compared "
        "with the input exactly in float64. Flag-count rows compare one count per chunk (their "
        "'inputs checked' is the number of chunks).",
        t.markdown(),
        "Reproduce: `make test-exhaustive` (or `python benchmarks/exhaustive.py --chunks 8` for a sample).",
    ]
    if rep.examples:
        lines.append("Examples of mismatching inputs (float32 bits):\n")
        lines += [f"- {k}: {', '.join(hex(b) for b in v)}" for k, v in rep.examples.items()]
    return "\n\n".join(lines)


def run(chunks: Iterable[int], chunk: int, jobs: int, progress: bool = True) -> Report:
    """Check the given chunk indices with ``jobs`` worker processes; merge their reports."""
    import multiprocessing as mp

    todo = [(i, chunk) for i in chunks]
    total = Report()
    t0 = time.perf_counter()
    ctx = mp.get_context("spawn")
    with ctx.Pool(jobs) as pool:
        for k, rep in enumerate(pool.imap_unordered(_work, todo), 1):
            total.merge(rep)
            if progress and (k % 8 == 0 or k == len(todo)):
                el = time.perf_counter() - t0
                print(
                    f"  {k}/{len(todo)} chunks, {el:,.0f} s, mismatches {total.total_mismatches}",
                    flush=True,
                )
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--chunk-bits", type=int, default=24, help="log2 of the inputs per chunk")
    parser.add_argument("--chunks", type=int, help="check this many chunks, strided (default: all)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    parser.add_argument(
        "--out", default=None, help="write the markdown here (default: results/exhaustive.md)"
    )
    args = parser.parse_args(argv)
    os.environ["NUMBA_NUM_THREADS"] = "1"  # one process per core; each kernel runs on one thread
    n_chunks = 1 << (32 - args.chunk_bits)
    step = 1 if args.chunks is None else max(1, n_chunks // args.chunks)
    chosen = list(range(0, n_chunks, step))[: args.chunks]
    t0 = time.perf_counter()
    rep = run(chosen, args.chunk_bits, args.jobs)
    specials = special_bits()
    rep.merge(check_bits(specials))
    seconds = time.perf_counter() - t0
    inputs = len(chosen) << args.chunk_bits
    from _common import write_results

    text = _markdown(rep, inputs, int(specials.size), seconds, args.jobs, args.chunk_bits)
    if args.out is None:
        path = write_results(
            "exhaustive",
            "Exhaustive rounding check: float32 to fp16 and bf16",
            [text],
            ["ml_dtypes", "torch"],
        )
    else:
        path = Path(args.out)
        path.write_text(text + "\n", encoding="utf-8")
    print(text)
    print(f"written to {path}")
    return 0 if rep.total_mismatches == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
