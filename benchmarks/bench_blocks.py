"""Block quantization throughput (MX formats and NVFP4): floatlab.blocks next to torchao (on the
CPU), gfloat, pychop and a NumPy + ml_dtypes recipe, in one run.

Every implementation quantizes the same float32 values (standard normal times 2^-10, a matrix of
rows of 1024, blocks along the rows) and its result is checked against floatlab's before anything
is timed:

* fake quantization (quantize and dequantize, float32 out): floatlab ``mx_round`` against the
  NumPy + ml_dtypes recipe a user would write (block maximum, ``floor(log2)``, a division, a clip
  and ml_dtypes' cast), gfloat's ``quantize_block`` (one block per call) and pychop's
  ``mx_quantize``, both timed on a slice and scaled;
* codes and scales: floatlab ``mx_quantize`` (which also counts what flushed, saturated and
  turned subnormal) against torchao's ``to_mx`` (FLOOR and RCEIL) and ``nvfp4_quantize`` (one
  level, and two with ``per_tensor_amax_to_scale``);
* every rounding mode, blocks down the columns and 16 x 16 tiles (NVFP4: ``mx_round`` and
  ``mx_quantize``).

Rates are million values per second at the best of several timed calls after a warm-up
(compilation excluded). Writes ``benchmarks/results/blocks.md`` and ``blocks.json``.

    python benchmarks/bench_blocks.py
    python benchmarks/bench_blocks.py --n 262144 --repeat 3 --quick
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from functools import partial
from typing import Any

import ml_dtypes
import numpy as np
from _common import RESULTS, Table, fmt_rate, fmt_ratio, machine_header, time_best, write_results

import floatlab as fl
from floatlab.blocks import BLOCK_FORMATS, MX_FORMATS, mx_quantize, mx_round

ELEMENT_TYPES: dict[str, Any] = {
    "mxfp8_e4m3": ml_dtypes.float8_e4m3fn,
    "mxfp8_e5m2": ml_dtypes.float8_e5m2,
    "mxfp6_e3m2": ml_dtypes.float6_e3m2fn,
    "mxfp6_e2m3": ml_dtypes.float6_e2m3fn,
    "mxfp4_e2m1": ml_dtypes.float4_e2m1fn,
}
MODES = ("rne", "rna", "rtz", "rup", "rdown", "rodd", "stochastic")
LAYOUTS: tuple[tuple[str, int | tuple[int, int]], ...] = (
    ("blocks down the columns (axis 0)", 0),
    ("16 x 16 tiles (axis 0, 1)", (0, 1)),
)
PACKAGES = ["ml_dtypes", "numba", "torch", "torchao", "gfloat", "pychop"]


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
        from pychop.mx_formats import mx_quantize as pychop_mx
    except ImportError:
        return None

    def run(x: np.ndarray) -> np.ndarray:
        return np.asarray(pychop_mx(x, name, block_size=32), np.float32).reshape(x.shape)

    return run


def _torchao() -> dict[str, Any] | None:
    """torchao's quantizers as functions of a float32 numpy matrix: (scale codes, element codes)."""
    try:
        import torch
        from torchao.prototype.mx_formats.config import ScaleCalculationMode
        from torchao.prototype.mx_formats.constants import DTYPE_FP6_E2M3, DTYPE_FP6_E3M2
        from torchao.prototype.mx_formats.kernels import unpack_uint4
        from torchao.prototype.mx_formats.mx_tensor import to_mx
        from torchao.prototype.mx_formats.nvfp4_tensor import nvfp4_quantize, per_tensor_amax_to_scale
    except Exception:  # torchao missing, or a build for another torch
        return None
    dtypes = {
        "mxfp8_e5m2": torch.float8_e5m2,
        "mxfp8_e4m3": torch.float8_e4m3fn,
        "mxfp6_e3m2": DTYPE_FP6_E3M2,
        "mxfp6_e2m3": DTYPE_FP6_E2M3,
        "mxfp4_e2m1": torch.float4_e2m1fn_x2,
    }
    torch.set_num_threads(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 2)

    def codes(data: Any, shape: tuple[int, ...]) -> np.ndarray:
        if data.numel() * 2 == int(np.prod(shape)):
            data = unpack_uint4(data.view(torch.uint8))
        return np.asarray(data.view(torch.uint8).numpy()).reshape(shape)

    def mx(t: Any, name: str, mode: str) -> Any:
        return to_mx(t, dtypes[name], 32, ScaleCalculationMode(mode))

    def nv(t: Any, two_level: bool) -> Any:
        pts = per_tensor_amax_to_scale(torch.max(torch.abs(t))) if two_level else None
        return nvfp4_quantize(t, 16, pts)

    return {"torch": torch, "mx": mx, "nv": nv, "codes": codes}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=2**22, help="values per call (a multiple of 1024)")
    parser.add_argument("--slice", type=int, default=2**14, help="values given to gfloat and pychop")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="print, write nothing")
    args = parser.parse_args(argv)
    n = max(args.n - args.n % 1024, 1024)
    x = (np.random.default_rng(0).standard_normal((n // 1024, 1024)) * 2.0**-10).astype(np.float32)
    part = x.reshape(-1)[: args.slice - args.slice % 1024].reshape(-1, 1024)
    load_before = os.getloadavg()[0]
    rows: list[dict[str, Any]] = []

    def timed(fn: Callable[[], object], size: int) -> float:
        return time_best(fn, repeat=args.repeat, min_seconds=0.5).rate(size)

    def row(section: str, fmt: str, what: str, rate: float, ours: float | None, same: str) -> None:
        rows.append({"section": section, "format": fmt, "implementation": what, "mvalues_per_s": rate,
                     "floatlab_over_this": None if ours is None else ours / rate, "same": same})  # fmt: skip
        print(f"{section:10s} {fmt:11s} {what:46s} {fmt_rate(rate):>8s}  {same}", flush=True)

    copy = timed(x.copy, x.size)
    row("memory", "-", "numpy copy (float32)", copy, None, "-")
    e4m3 = timed(partial(fl.encode_array, x, "e4m3fn", saturate=True), x.size)
    row("memory", "-", "floatlab encode_array -> e4m3fn (no blocks)", e4m3, None, "-")

    # ---- fake quantization --------------------------------------------------------------------
    for name in BLOCK_FORMATS:
        want = mx_round(x, name)
        ours = timed(partial(mx_round, x, name), x.size)
        row("fake", name, "floatlab mx_round", ours, ours, "-")
        if name not in MX_FORMATS:
            continue
        peers: list[tuple[str, Callable[[np.ndarray], np.ndarray] | None, np.ndarray]] = [
            ("NumPy + ml_dtypes recipe", partial(numpy_recipe, name=name), x),
            (f"gfloat quantize_block ({part.size:,} slice)", _gfloat(name), part),
            (f"pychop mx_quantize ({part.size:,} slice)", _pychop(name), part),
        ]
        for label, fn, data in peers:
            if fn is None:
                continue
            same = (
                "yes" if np.array_equal(fn(data), want.reshape(-1)[: data.size].reshape(data.shape)) else "no"
            )
            row("fake", name, label, timed(partial(fn, data), data.size), ours, same)

    # ---- codes and scales ---------------------------------------------------------------------
    tao = _torchao()
    t = tao["torch"].from_numpy(x) if tao else None
    for name in BLOCK_FORMATS:
        cases: list[tuple[str, dict[str, Any], Callable[[], Any] | None]]
        if name in MX_FORMATS:
            cases = [(f"scale {m}", {"scale_mode": m}, partial(tao["mx"], t, name, m) if tao else None)
                     for m in ("floor", "rceil")]  # fmt: skip
        else:
            cases = [
                ("one level", {"tensor_scale": 1.0}, partial(tao["nv"], t, False) if tao else None),
                ("two levels", {}, partial(tao["nv"], t, True) if tao else None),
            ]
        for label, kw, peer in cases:
            q = mx_quantize(x, name, **kw)
            ours = timed(partial(mx_quantize, x, name, **kw), x.size)
            row("codes", name, f"floatlab mx_quantize, {label}", ours, ours, "-")
            if peer is None:
                continue
            assert tao is not None
            scale, data = peer()
            theirs = scale.view(tao["torch"].uint8).numpy().reshape(q.scale_codes.shape)
            codes = tao["codes"](data, x.shape).reshape(*q.scale_codes.shape, -1)
            ours_codes = q.element_codes.reshape(codes.shape)
            differ = int(np.count_nonzero((theirs != q.scale_codes) | (codes != ours_codes).any(axis=-1)))
            same = "yes" if differ == 0 else f"{differ:,} of {q.scale_codes.size:,} blocks differ"
            row("codes", name, f"torchao {'to_mx' if name in MX_FORMATS else 'nvfp4_quantize'}, {label}",
                timed(peer, x.size), ours, same)  # fmt: skip

    # ---- every rounding mode, other layouts ---------------------------------------------------
    for name in ("mxfp8_e4m3", "mxfp4_e2m1", "nvfp4"):
        base = next(r["mvalues_per_s"] for r in rows if r["format"] == name and r["section"] == "fake")
        for mode in MODES[1:]:
            rng = 1 if mode == "stochastic" else None
            rate = timed(partial(mx_round, x, name, rounding=mode, rng=rng), x.size)
            row("modes", name, f"floatlab mx_round, {mode}", rate, base, "-")
        for label, axis in LAYOUTS:
            size = 16 if isinstance(axis, tuple) else None
            rate = timed(partial(mx_round, x, name, axis=axis, block_size=size), x.size)
            row("layout", name, f"floatlab mx_round, {label}", rate, base, "-")

    # ---- NVFP4's codes and counts in every mode and layout ------------------------------------
    name = "nvfp4"
    base = next(r["mvalues_per_s"] for r in rows if r["implementation"] == "floatlab mx_quantize, two levels")
    for mode in MODES[1:]:
        rng = 1 if mode == "stochastic" else None
        rate = timed(partial(mx_quantize, x, name, rounding=mode, rng=rng), x.size)
        row("modes", name, f"floatlab mx_quantize, {mode}", rate, base, "-")
    for label, axis in LAYOUTS:
        size = 16 if isinstance(axis, tuple) else None
        rate = timed(partial(mx_quantize, x, name, axis=axis, block_size=size), x.size)
        row("layout", name, f"floatlab mx_quantize, {label}", rate, base, "-")

    load_after = os.getloadavg()[0]
    table = Table(["section", "format", "implementation", "M values/s", "floatlab / this", "same"])
    for r in rows:
        ratio = "-" if r["floatlab_over_this"] is None else fmt_ratio(r["floatlab_over_this"])
        table.add(
            r["section"], r["format"], r["implementation"], fmt_rate(r["mvalues_per_s"]), ratio, r["same"]
        )
    fake = [r["mvalues_per_s"] for r in rows if r["section"] in ("fake", "codes", "modes", "layout")
            and r["implementation"].startswith("floatlab")]  # fmt: skip
    nv = [r["mvalues_per_s"] for r in rows
          if r["format"] == "nvfp4" and r["implementation"].startswith("floatlab")]  # fmt: skip
    notes = [
        f"{x.size:,} float32 values per call (standard normal times 2^-10), a {x.shape[0]} x 1024 matrix, "
        "blocks along the rows (32 values, NVFP4 16), round to nearest even unless said.",
        "`same`: the peer's output equals floatlab's bit for bit on the data it was timed on "
        "(fake quantization: the float32 values; codes: torchao's scale and element codes).",
        "`floatlab / this`: floatlab's rate over the row's; in the modes and layout sections, over "
        "floatlab's own round-to-nearest-even rate along the rows.",
        f"floatlab's block loop, every format, mode and layout: {min(fake):,.0f} to {max(fake):,.0f} "
        f"M values/s; numpy's copy of the input {copy:,.0f}, floatlab's plain fp8 cast (no blocks) "
        f"{e4m3:,.0f}.",
        f"NVFP4 (E4M3 block scales over a float32 tensor scale), mx_round and mx_quantize, every mode and "
        f"layout: {min(nv):,.0f} to {max(nv):,.0f} M values/s.",
        "torchao's RCEIL in eager mode takes ceil(log2(amax / max)) with a float32 log2, which rounds "
        "to the integer k when amax / max lies within about 2^-21 above 2^k: one binade below the "
        "round-up of NVIDIA's hardware (cvt.rp), which floatlab follows; the blocks that differ are those "
        "(tests/blocks/test_torchao.py pins them down).",
        "The NumPy + ml_dtypes recipe takes the exponent from `floor(log2(amax))` in float32, which rounds "
        "up for a maximum one ulp below a power of two, and ml_dtypes casts without saturating (hence the "
        "clip); on this data it agrees.",
        f"The machine is shared (load average {load_before:.1f} before, {load_after:.1f} after): compare "
        "ratios, not absolute rates.",
    ]
    text = "\n".join(f"- {s}" for s in notes)
    print()
    print(text)
    if args.quick:
        print("\n(--quick: nothing written)")
        return 0
    path = write_results(
        "blocks", "Block quantization throughput (MX, NVFP4)", [text, table.markdown()], PACKAGES
    )
    record = {"machine": machine_header(PACKAGES), "values": x.size, "rows": rows}
    (RESULTS / "blocks.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(f"\nwritten to {path} and blocks.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
