"""Rounding float32 to fp16 and bf16, checked input by input against independent oracles.

``make test-exhaustive`` runs benchmarks/exhaustive.py over all 2^32 float32 inputs (its summary is
benchmarks/results/exhaustive.md). The suite runs the same checks on a sample: 2^20 inputs strided
over the whole space with random low bits, and every special pattern (each fp16 and bf16 value,
each midpoint between neighbours, one float32 ulp either side of them, zeros, subnormals,
infinities and NaNs with assorted payloads). The oracles: numpy's float16 cast, ml_dtypes'
bfloat16 cast and torch's casts for round-to-nearest-even; neighbours found by stepping the
oracle's codes and exact float64 comparisons for the directed modes.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from oracles import benchmark_script

import floatlab as fl
from floatlab.rounding import round_scalar

ex: Any = benchmark_script("exhaustive")


def _assert_clean(rep: Any) -> None:
    bad = {k: v for k, v in rep.mismatches.items() if v}
    assert not bad, f"mismatches {bad}, examples {rep.examples}"


def test_every_special_pattern() -> None:
    bits = ex.special_bits()
    assert bits.size > 600_000
    rep = ex.check_bits(bits)
    _assert_clean(rep)
    assert rep.checked["fp16 rne encode_array"] == bits.size
    assert rep.checked["bf16 rne round_scaled (in place)"] == np.count_nonzero(
        np.isfinite(bits.view(np.float32))
    )
    assert rep.checked["fp16 rne round_flushed: flushed"] == 1
    assert rep.checked["bf16 rne round_flushed in place"] == bits.size
    assert {f"{t} {m} encode_array" for t in ("fp16", "bf16") for m in ex.DIRECTED} <= set(rep.checked)


def test_a_million_strided_inputs() -> None:
    bits = ex.strided_bits(20, seed=1)
    assert np.unique(bits >> np.uint32(12)).size == 1 << 20  # one input in every 4096-wide stride
    _assert_clean(ex.check_bits(bits))


@pytest.mark.parametrize("target", ["fp16", "bf16"])
def test_the_directed_oracle_agrees_with_exact_rational_rounding(target: str) -> None:
    # the oracle itself, checked against exact Fraction arithmetic (the rounding reference)
    rng = np.random.default_rng(3)
    bits = np.concatenate(
        [ex.special_bits()[::97], rng.integers(0, 2**32, 3000, dtype=np.uint64).astype(np.uint32)]
    )
    x = bits.view(np.float32)
    keep = ~np.isnan(x)
    x, bits = x[keep], bits[keep]
    tg = ex.target(target)
    rne = ex.oracle_rne(x, target)
    got = ex.directed_oracle(x.astype(np.float64), rne, tg)
    for i in range(0, x.size, 7):
        for mode in ex.DIRECTED:
            want, _ = round_scalar(float(x[i]), target, mode)
            assert int(got[mode][i]) == want, (hex(int(bits[i])), mode)
    assert Fraction(float(tg.tiny_threshold)) == Fraction(2) ** tg.emin * (
        1 - Fraction(1, 2 ** (tg.mantissa_bits + 2))
    )


def test_the_checks_catch_a_planted_error(monkeypatch: pytest.MonkeyPatch) -> None:
    real = fl.encode_array
    victim = np.uint32(0x3F801000)  # 1 + 2^-11: a tie in fp16

    def off_by_one(x: Any, fmt: Any, rounding: str = "rne", **kw: Any) -> Any:
        out = real(x, fmt, rounding, **kw)
        codes = out[0] if kw.get("flags") else out
        if fmt == "fp16" and rounding == "rup":
            codes[np.asarray(x).view(np.uint32) == victim] ^= 1
        return out

    monkeypatch.setattr(fl, "encode_array", off_by_one)
    rep = ex.check_bits(np.array([victim, 0x3F800000, 0x7F800001], np.uint32))
    assert {k: v for k, v in rep.mismatches.items() if v} == {"fp16 rup encode_array": 1}
    assert rep.examples["fp16 rup encode_array"] == [int(victim)]
