"""Narrow-accumulator GEMM throughput: floatlab's compiled loop against its NumPy reference and peers.

A GEMM of fp8 (E4M3) operands whose accumulator keeps 14 significant bits (ACC14: fp32's exponent,
13 fraction bits; DeepSeek-V3, arXiv 2412.19437, section 3.3.2), the partial sums promoted into
fp32 every 128 products, round to nearest even. The rows:

* floatlab ``accumulate_matmul``: the compiled loop (numba, parallel over output rows), on all of
  numba's threads and on one;
* floatlab ``accumulate_matmul_reference``: the readable NumPy path (the implementation before the
  compiled loop): per product index, the products of all outputs, their exact sums with the
  accumulators (rounded to odd, compiled) and one call of the rounding door;
* pychop and gfloat: the same accumulation written with their rounding, a Python loop over k that
  rounds ``acc + a[:, k] * b[k]`` (float64 arithmetic, then their rounding into ACC14) over all
  outputs; the promotion is a float32 addition. Neither offers an accumulation with a rounded
  accumulator of its own (pychop's ``matmul`` rounds inputs and output only);
* numpy float32 ``@`` (BLAS, fp32 accumulation, nothing narrowed): the speed of light, for scale.

Rates are million products (M * N * K) per second at the best of several calls after a warm-up
(compilation excluded); ratios are against the NumPy reference. Each row also says whether its
result equals floatlab's bit for bit. Writes ``benchmarks/results/accumulate.md`` and ``.json``.

    python benchmarks/bench_accumulate.py            # 128^3, 512^3 and 8 x 8192 x 8
    python benchmarks/bench_accumulate.py --quick    # smaller shapes, one call each; writes nothing
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from functools import partial
from typing import Any

import numba
import numpy as np
from _common import RESULTS, Table, fmt_rate, fmt_ratio, machine_header, time_best, write_results

import floatlab as fl
from floatlab.train.precision.accumulate import ACC14, accumulate_matmul, accumulate_matmul_reference

PROMOTE = 128


def _peer_loop(round_acc: Callable[[np.ndarray], np.ndarray], a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The accumulation with a peer's rounding: acc = round(acc + a[:, k] * b[k]) over k, promoted into
    a float32 total every PROMOTE products (float64 arithmetic: exact for fp8 products and a 14-bit sum)."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    total = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for lo in range(0, a.shape[1], PROMOTE):
        acc = np.zeros((a.shape[0], b.shape[1]))
        for k in range(lo, min(lo + PROMOTE, a.shape[1])):
            acc = round_acc(acc + np.outer(a64[:, k], b64[k]))
        total = total + acc.astype(np.float32)  # the promotion: one fp32 addition, nearest even
    return total


def peers(notes: list[str]) -> dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]]:
    """pychop's and gfloat's rounding into ACC14 inside the loop over k, where they import."""
    out: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {}
    try:
        import pychop

        chop = pychop.Chop(exp_bits=8, sig_bits=13, rmode=1)  # rmode 1: nearest, ties to even
        out["pychop Chop, Python loop over k"] = lambda a, b: _peer_loop(chop, a, b)
    except Exception as exc:  # a peer that is missing or fails is noted, not fatal
        notes.append(f"pychop skipped: {type(exc).__name__}: {exc}")
    try:
        import gfloat
        from gfloat.types import Domain, FormatInfo

        info = FormatInfo(
            name="acc14", k=22, precision=14, bias=127, is_signed=True, domain=Domain.Extended,
            has_nz=True, num_high_nans=(1 << 13) - 1, has_subnormals=True, is_twos_complement=False,
        )  # fmt: skip

        def gfloat_round(x: np.ndarray) -> np.ndarray:
            rounded: np.ndarray = gfloat.round_ndarray(info, x, gfloat.RoundMode.TiesToEven)
            return rounded

        out["gfloat round_ndarray, Python loop over k"] = lambda a, b: _peer_loop(gfloat_round, a, b)
    except Exception as exc:
        notes.append(f"gfloat skipped: {type(exc).__name__}: {exc}")
    return out


def one_thread(
    fn: Callable[[np.ndarray, np.ndarray], np.ndarray],
) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """``fn`` run with numba on one thread (per calling thread, restored after)."""

    def run(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        threads = numba.get_num_threads()
        numba.set_num_threads(1)
        try:
            return fn(a, b)
        finally:
            numba.set_num_threads(threads)

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller shapes, one call per row; writes nothing")
    args = ap.parse_args()
    # square GEMMs, and a long reduction into few outputs (M x K x N)
    shapes = (
        [(64, 64, 64), (128, 128, 128), (4, 1024, 4)]
        if args.quick
        else [(128, 128, 128), (512, 512, 512), (8, 8192, 8)]
    )
    notes: list[str] = []
    peer_fns = peers(notes)
    rng = np.random.default_rng(0)
    table = Table(["shape", "method", "M products/s", "vs NumPy reference", "same bits"])
    # the compiled loop (all threads) against each other way of doing the same accumulation
    summary = Table(
        ["shape", "compiled / NumPy reference", *(f"compiled / {name.split()[0]}" for name in peer_fns)]
    )
    rows: list[dict[str, Any]] = []
    load_before = os.getloadavg()[0]  # (the cores are shared: say how busy they were)

    def compiled(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return accumulate_matmul(a, b, accumulate=ACC14, promote_every=PROMOTE)

    def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return accumulate_matmul_reference(a, b, accumulate=ACC14, promote_every=PROMOTE)

    def blas(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        out: np.ndarray = a @ b
        return out

    threads = numba.get_num_threads()
    methods: list[tuple[str, Callable[[np.ndarray, np.ndarray], np.ndarray], int]] = [
        (f"floatlab accumulate_matmul (compiled, {threads} threads)", compiled, 7),
        ("floatlab accumulate_matmul (compiled, 1 thread)", one_thread(compiled), 7),
        ("floatlab accumulate_matmul_reference (NumPy)", reference, 3),
        *((name, fn, 2) for name, fn in peer_fns.items()),
        ("numpy float32 @ (BLAS, fp32 accumulation: not narrowed)", blas, 9),
    ]
    for m, k, n in shapes:
        a = fl.round_array(rng.normal(0, 1, (m, k)), "e4m3fn").astype(np.float32)
        b = fl.round_array(rng.normal(0, 1, (k, n)), "e4m3fn").astype(np.float32)
        products = m * k * n
        fast = compiled(a, b)
        rates: dict[str, float] = {}
        same: dict[str, str] = {}
        for name, fn, repeat in methods:
            call = partial(fn, a, b)
            result = call()  # (the warm-up call, whose result is compared)
            # the slow rows of the large shape: one timed call
            reps = 1 if args.quick or (repeat <= 3 and products > 2**24) else repeat
            t = time_best(call, repeat=reps, warmup=0)
            rates[name] = t.rate(products)
            if fn is blas:
                same[name] = "-"
            else:
                r32 = np.asarray(result, np.float32)
                differ = int(np.count_nonzero(r32.view(np.uint32) != fast.view(np.uint32)))
                same[name] = "yes" if differ == 0 else f"no ({differ:,} of {fast.size:,} differ)"
            shape = f"{m}x{k}x{n}"
            print(
                f"{shape:12s} {name:58s} {rates[name]:10.2f} M products/s  same bits: {same[name]}",
                flush=True,
            )
        ref = rates["floatlab accumulate_matmul_reference (NumPy)"]
        ours = rates[methods[0][0]]
        summary.add(
            f"{m}x{k}x{n}", fmt_ratio(ours / ref), *(fmt_ratio(ours / rates[name]) for name in peer_fns)
        )
        for name, _, _ in methods:
            table.add(f"{m}x{k}x{n}", name, fmt_rate(rates[name]), fmt_ratio(rates[name] / ref), same[name])
            rows.append(
                {
                    "m": m,
                    "k": k,
                    "n": n,
                    "method": name,
                    "mproducts_per_s": rates[name],
                    "same_bits": same[name],
                }
            )
    load_after = os.getloadavg()[0]
    text = (
        f"ACC14 accumulator (14 significant bits, fp32's exponent), promotion into fp32 every {PROMOTE} "
        "products, round to nearest even; operands: standard normal values rounded to fp8 (E4M3), held in "
        "float32. Rates: million products per second at the best call after a warm-up; ratios against "
        "floatlab's NumPy reference (the implementation before the compiled loop); 'same bits': the "
        "result equals the compiled loop's bit for bit. The peers have no accumulation with a rounded "
        "accumulator: their rows are the same loop written with their rounding of whole arrays (pychop "
        "Chop(exp_bits=8, sig_bits=13), gfloat round_ndarray on an ACC14 FormatInfo) applied after each "
        "addition, over k in Python. The cores are shared with other work: read the ratios, not the "
        f"absolute rates (load average {load_before:.1f} before, {load_after:.1f} after)."
    )
    print()
    print(table.markdown())
    print()
    print(summary.markdown())
    for note in notes:
        print(note)
    if args.quick:
        print("\n(--quick: nothing written)")
        return
    sections = [
        text,
        *notes,
        "Command: `python benchmarks/bench_accumulate.py`",
        table.markdown(),
        f"The compiled loop ({threads} threads) against the other ways, per shape:",
        summary.markdown(),
    ]
    path = write_results(
        "accumulate", "Narrow-accumulator GEMM throughput", sections, ["numba", "pychop", "gfloat"]
    )
    data = {"machine": machine_header(["numba", "pychop", "gfloat"]), "promote_every": PROMOTE, "rows": rows}
    (RESULTS / "accumulate.json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(f"\nwritten to {path} and accumulate.json")


if __name__ == "__main__":
    main()
