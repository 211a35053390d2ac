"""Correctly rounded float32 exp, log and tanh (the deterministic mode's) against mpmath at 300
bits rounded to nearest even by integer arithmetic, and the same bits whatever NumPy's CPU dispatch."""

from __future__ import annotations

import os
import subprocess
import sys
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from oracles import nearest_f32, same_bits

from floatlab.rounding import elementary
from floatlab.rounding.elementary import exact_f32
from floatlab.train.hostmath import deterministic, host_exp, host_log, host_tanh


def oracle(name: str, x: np.ndarray) -> np.ndarray:
    out = np.empty(x.shape, np.float32)
    with mpmath.workprec(300):
        for i, v in enumerate(x.reshape(-1)):
            if not np.isfinite(v) or v == 0 or (name == "log" and v < 0):
                with np.errstate(all="ignore"):
                    out.reshape(-1)[i] = getattr(np, name)(v)  # (the IEEE special cases)
                continue
            sign, man, exp, _ = getattr(mpmath, name)(mpmath.mpf(float(v)))._mpf_
            exact = (-1) ** int(sign) * Fraction(int(man)) * Fraction(2) ** int(exp)
            r = nearest_f32(exact)
            out.reshape(-1)[i] = np.copysign(r, -1.0) if exact < 0 and r == 0 else r
    return out


def _inputs(name: str) -> np.ndarray:
    rng = np.random.default_rng(len(name))
    x = (rng.standard_normal(2000) * 2.0 ** rng.integers(-30, 7, 2000)).astype(np.float32)
    edges = {
        # exp: around overflow (88.72...), the last normal and subnormal results, and zero
        "exp": [88.72283, 88.72284, 88.7229, -87.33654, -103.27893, -103.97208, -104.0, -0.0, 0.0],
        "log": [2.0**-149, 2.0**-126, 1.0, np.nextafter(np.float32(1), np.float32(2)), 3.4e38, 0.0, -1.0],
        "tanh": [2.0**-149, -(2.0**-149), 1e-20, 9.0, 9.1, -50.0, -0.0],
    }[name]
    special = [np.inf, -np.inf, np.nan]
    x = np.concatenate([np.abs(x) if name == "log" else x, np.array(edges + special, np.float32)])
    return x.astype(np.float32)


@pytest.mark.parametrize("name", ["exp", "log", "tanh"])
def test_correctly_rounded(name: str) -> None:
    x = _inputs(name)
    got, want = exact_f32(name, x), oracle(name, x)
    assert same_bits(got[np.isfinite(want) | np.isinf(want)], want[np.isfinite(want) | np.isinf(want)])
    assert np.array_equal(np.isnan(got), np.isnan(want))


@pytest.mark.parametrize("name", ["exp", "log", "tanh"])
def test_the_exact_path(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # every value closer than 2^40 float64 ulps to a boundary: all of them through mpmath
    monkeypatch.setattr(elementary, "_SLACK", 2.0**40)
    x = _inputs(name)[:300]
    want = oracle(name, x)
    ok = ~np.isnan(want)
    assert same_bits(exact_f32(name, x)[ok], want[ok])


def test_in_place_and_bad_input() -> None:
    x = np.array([0.0, 1.0, -2.0], np.float32)
    assert exact_f32("exp", x, out=x) is x
    assert same_bits(x, oracle("exp", np.array([0.0, 1.0, -2.0], np.float32)))
    with pytest.raises(ValueError, match="expected one of exp, log, tanh"):
        exact_f32("sin", x)
    with pytest.raises(ValueError, match="float64: expected float32"):
        exact_f32("exp", np.zeros(2))


def test_host_functions_switch_with_the_mode() -> None:
    x = (np.random.default_rng(1).standard_normal(100_000) * 3).astype(np.float32)
    for fn, name, arg in ((host_exp, "exp", x), (host_log, "log", np.abs(x)), (host_tanh, "tanh", x)):
        with deterministic():
            assert same_bits(fn(arg), exact_f32(name, arg))
        with np.errstate(divide="ignore"):
            assert same_bits(fn(arg), getattr(np, name)(arg))  # NumPy's own vector code outside


_CHILD = r"""
import hashlib
import numpy as np
from floatlab.rounding.elementary import exact_f32
x = (np.random.default_rng(3).standard_normal(300_000) * 4).astype(np.float32)
h = hashlib.sha256()
for name in ("exp", "tanh"):
    h.update(exact_f32(name, x).tobytes())
h.update(exact_f32("log", np.abs(x)).tobytes())
print(h.hexdigest())
"""


def test_the_same_bits_under_another_numpy_dispatch() -> None:
    # NumPy's float32 exp, log and tanh give other bits without its AVX2 code (X86_V3); these don't
    def digest(disabled: str) -> str:
        env = {**os.environ, "NPY_DISABLE_CPU_FEATURES": disabled}
        out = subprocess.run(
            [sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, check=True
        )
        return out.stdout.strip().splitlines()[-1]

    assert digest("") == digest("X86_V3")
