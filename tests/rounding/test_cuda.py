"""The CUDA rounding kernels run under numba's CUDA simulator, bit for bit against the CPU executor.

The simulator must be switched on (``NUMBA_ENABLE_CUDASIM=1``) before numba.cuda is first
imported, so the suite runs this file again in a subprocess with it set: in the suite's own
process only :func:`test_cuda_kernels_under_the_simulator` is collected, and in the subprocess
only the simulated tests. The simulator runs every CUDA thread as a Python thread, so the arrays
are small: a few dozen values chosen to reach every branch (specials, subnormals, ties, overflow),
and one launch of several blocks whose last block is partly beyond the array (the bounds check).
What it covers: the CUDA kernels and their launch (grid, thread index, bounds check), the host
side of :func:`floatlab.rounding.cuda.run_array` with NumPy arrays, and the element functions
executed as Python. What it cannot cover (NVVM's code, the device's integer instructions, CuPy's
streams) waits for a GPU: docs/howto/gpu.md lists it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import floatlab as fl
from floatlab.rounding import RoundingOptions

SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


def _has_numba_cuda() -> bool:
    try:
        from numba import cuda
    except Exception:  # numba without its CUDA target (the dev or gpu extra)
        return False
    return getattr(cuda, "implementation", "") == "NVIDIA"


if not SIMULATED:

    @pytest.mark.slow
    @pytest.mark.skipif(not _has_numba_cuda(), reason="numba-cuda (the dev extra) is not installed")
    def test_cuda_kernels_under_the_simulator() -> None:
        """Run this file's simulated tests in a subprocess with the simulator on; all must pass."""
        root = Path(__file__).resolve().parents[2]
        env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1", "NUMBA_NUM_THREADS": "1"}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH", "")) if p)
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfEs", str(Path(__file__))]
        done = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, timeout=600)
        report = done.stdout[-6000:] + done.stderr[-2000:]
        assert done.returncode == 0, report
        summary = done.stdout.strip().splitlines()[-1]
        assert re.search(r"\b\d+ passed\b", summary), report
        assert not re.search(r"skipped|deselected|xfail|error", summary), report


else:
    from floatlab.rounding import cuda as gk

    TPB = gk.THREADS_PER_BLOCK
    FORMATS = fl.format_names()

    def test_the_simulator_is_on() -> None:
        assert gk.simulated()
        assert type(gk.kernels("cuda").encode).__name__ == "FakeCUDAKernel"

    def _values(dtype: str, n: int = 48, seed: int = 0) -> np.ndarray:
        """Specials, signed zeros, subnormals and values around fp8/fp16 ranges and ties, then
        random bit patterns (every class, NaN payloads included)."""
        rng = np.random.default_rng(seed)
        dt = np.dtype(dtype)
        ui = {2: np.uint16, 4: np.uint32, 8: np.uint64}[dt.itemsize]
        info = np.finfo(dt)
        fixed = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 1.5, 2.5, 3.0, 448.0, 464.0, 480.0]
        fixed += [57344.0, 61440.0, 65504.0, 65520.0, -70000.0, 6e-5, 2.0**-24, 3 * 2.0**-25, 2.0**-10]
        fixed += [float(info.tiny), float(info.smallest_subnormal), -float(info.max), 1 / 3, 0.1, 1e-30]
        with np.errstate(over="ignore"):
            a = np.array(fixed).astype(dt)
        near = (rng.standard_normal(n // 2) * 2.0 ** rng.integers(-26, 17, n // 2)).astype(dt)
        top = (1 << (8 * dt.itemsize)) - 1
        bits = rng.integers(0, top, n // 2, dtype=np.uint64, endpoint=True).astype(ui).view(dt)
        nan_payload = np.array([top >> 1], ui).view(dt)  # a NaN with every payload bit set
        return np.concatenate([a, near, bits, nan_payload])

    def _same(a: Any, b: Any) -> bool:
        return bool(
            a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a.view(np.uint8), b.view(np.uint8))
        )

    def _check(x: np.ndarray, fmt: str, mode: str, *, back: bool, flags: bool, **kw: Any) -> str:
        """The CUDA kernels (simulated) against the CPU executor; "refused" when both refuse."""
        if mode == "stochastic":
            kw.setdefault("rng", 12345)
        cpu_fn = {
            (False, False): fl.encode_array,
            (False, True): fl.encode_array_with_flags,
            (True, False): fl.round_array,
            (True, True): fl.round_array_with_flags,
        }[back, flags]
        f = fl.get_format(fmt)
        options = RoundingOptions.make(mode, **kw)
        try:
            cpu = cpu_fn(x, f, mode, **kw)
        except ValueError as e:  # round_array would round twice: the GPU path refuses alike
            with pytest.raises(ValueError, match=re.escape(str(e))):
                gk.run_array(x, f, options, back=back, flags=flags, xp=np, target="cuda")
            return "refused"
        got, stats = gk.run_array(x, f, options, back=back, flags=flags, xp=np, target="cuda")
        want, want_stats = (cpu[0], cpu[1]) if flags else (cpu, None)
        where = (x.dtype.name, fmt, mode, back, flags, kw)
        assert isinstance(got, np.ndarray), where
        assert _same(got, want), where
        if flags:
            assert stats == want_stats, where
        return "same"

    @pytest.mark.parametrize("fmt", FORMATS)
    def test_every_format_and_mode(fmt: str) -> None:
        """Every kernel: encode and round (deterministic, no flags), general (stochastic),
        full (flags, every mode), from float32."""
        x = _values("float32", seed=1)
        _check(x, fmt, "rne", back=False, flags=False)  # the encode kernel
        _check(x, fmt, "rtz", back=True, flags=False)  # the round kernel
        _check(x, fmt, "stochastic", back=False, flags=False)  # the general kernel
        for mode in fl.ROUNDING_MODES:  # the full kernel (flag counts), one launch per mode
            _check(x, fmt, mode, back=mode in ("rna", "rodd"), flags=True)

    @pytest.mark.parametrize("fmt", ["fp16", "bf16"])
    def test_the_plain_casts(fmt: str) -> None:
        """float32 to fp16 or bfloat16, nearest even, no flags: the cast kernels of their own, both
        ways, NaN payloads (quiet and signalling, both signs) included."""
        nans = np.array([0x7F800001, 0x7FBFFFFF, 0x7FC00000, 0xFFC02000, 0xFF802001, 0x7FFFE000], np.uint32)
        x = np.concatenate([_values("float32", seed=3), nans.view(np.float32)])
        assert _check(x, fmt, "rne", back=False, flags=False) == "same"
        assert _check(x, fmt, "rne", back=True, flags=False) == "same"

    @pytest.mark.parametrize("dtype", ["float16", "float64"])
    @pytest.mark.parametrize("fmt", ["fp16", "bf16", "fp32", "float8_e4m3fn", "float4_e2m1fn", "fp64"])
    def test_float16_and_float64_inputs(dtype: str, fmt: str) -> None:
        """16-bit inputs widened to float32 on the host for the general and full kernels; 64-bit
        lanes for float64 inputs and fp64 codes."""
        x = _values(dtype, seed=2)
        for mode, back, flags in (
            ("rne", False, False),
            ("rne", True, False),
            ("stochastic", True, False),
            ("rup", False, True),
            ("stochastic", True, True),
        ):
            _check(x, fmt, mode, back=back, flags=flags)

    @pytest.mark.parametrize(
        "options",
        [
            {"saturate": True},
            {"subnormals": False},
            {"saturate": True, "subnormals": False},
            {"random_bits": 5},
        ],
    )
    def test_saturation_subnormals_and_random_bits(options: dict[str, Any]) -> None:
        for dtype, fmt in (
            ("float32", "float8_e4m3fn"),
            ("float32", "float8_e5m2"),
            ("float16", "float6_e3m2fn"),
        ):
            x = _values(dtype, seed=3)
            modes = ("stochastic",) if "random_bits" in options else ("rne", "stochastic")
            for mode in modes:
                for flags in (False, True):
                    _check(x, fmt, mode, back=False, flags=flags, **options)

    def test_launches_of_several_blocks_check_bounds() -> None:
        """2 full blocks and a last one with 37 of its threads in the array: the other threads
        must write nothing (the simulator raises on an index beyond an array), and each
        element's random word depends on its index alone, whichever block and thread draw it."""
        n = 2 * TPB + 37
        x = np.resize(_values("float32", seed=4), n).reshape(-1, 3)
        assert -(-x.size // TPB) == 3
        for mode, back, flags in (
            ("rne", False, False),
            ("rne", True, False),
            ("stochastic", True, False),
            ("stochastic", False, True),
        ):
            assert _check(x, "fp16", mode, back=back, flags=flags) == "same"

    def test_edge_shapes_and_errors() -> None:
        empty = gk.run_array(np.zeros((0, 3), np.float32), fl.FP16, RoundingOptions(), xp=np, target="cuda")
        assert empty[0].shape == (0, 3)
        assert empty[1].total == 0
        one = gk.run_array(np.float64(0.1), fl.BF16, RoundingOptions(), xp=np, target="cuda")[0]
        assert one.shape == ()
        assert one == fl.encode_array(0.1, "bf16")
        ints = gk.run_array(np.arange(5), fl.FP16, RoundingOptions(), back=True, xp=np, target="cuda")[0]
        assert ints.dtype == np.float64
        assert ints.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
        with pytest.raises(ValueError, match="x has dtype complex128"):
            gk.run_array(np.ones(2, complex), fl.FP16, RoundingOptions(), xp=np, target="cuda")
