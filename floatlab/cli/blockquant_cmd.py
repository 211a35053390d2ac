"""``floatlab blockquant FILE.npy [-f nvfp4,mxfp8_e4m3,...] [--axis A | --axis A,B] [--json]``.

Quantizes the array of a ``.npy`` file into block formats (the OCP MX formats and NVFP4, see
:mod:`floatlab.blocks`) and reports, per format, the share of its nonzero values that flush to
zero, turn subnormal or saturate, the blocks that hold a NaN or an infinity or whose scale
overflowed (float64 values beyond the largest scale), and the error of the dequantized values
(relative RMS error and signal-to-noise ratio, largest absolute error; infinite when a block of
finite values overflowed).

The library is imported inside the functions: ``import floatlab.cli`` stays light.

>>> import numpy as np, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "g.npy")
>>> np.save(path, np.float32([1.0, 0.3, 7.0, 0.0]))
>>> v = blockquant_view(path, load_array(path), ["mxfp4_e2m1"])
>>> v.data["results"][0]["saturated"], v.data["results"][0]["flushed"]
(0.3333333333333333, 0.0)
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from floatlab.cli._common import UI, View, add_formats_option, comma_names, command_register
from floatlab.io import first_bytes, read_npy
from floatlab.text import bold, dim, parse_scale, percent, safe, table

if TYPE_CHECKING:
    import numpy as np


__all__ = ["NAME", "blockquant_view", "load_array", "parse_axis", "register", "run"]

NAME = "blockquant"

_HELP = "quantize a .npy array into block formats (MX, NVFP4): what flushes, saturates, the error"
_DESCRIPTION = """\
Quantize the array of a .npy file into block-scaled formats (the OCP MX formats
and NVIDIA's NVFP4) and report, for each, the share of nonzero values that flush to zero,
turn subnormal or saturate, the blocks that hold a NaN or an infinity or whose scale
overflowed (their scale is NaN), and the error of the dequantized values (infinite when
a block of finite values overflowed). A dimension that does not divide into blocks
ends in a shorter block (the same as padding with zeros)."""

_EPILOG = """\
examples:
  floatlab blockquant grads.npy                          every block format side by side
  floatlab blockquant grads.npy -f nvfp4                 NVFP4, its tensor scale from the amax
  floatlab blockquant grads.npy -f nvfp4 --tensor-scale 1     ... one level of scaling only
  floatlab blockquant w.npy -f nvfp4 --axis 0,1          16 x 16 tiles (NVIDIA's weight blocks)
  floatlab blockquant w.npy -f mxfp8_e4m3 --axis 0       blocks down the columns (x @ W's reduction)
  floatlab blockquant g.npy -f mxfp4_e2m1 --scale-mode floor,rceil    the two E8M0 scale rules
  floatlab blockquant g.npy -f mxfp4_e2m1 --rounding stochastic --seed 1
"""


def parse_axis(text: str) -> int | tuple[int, int]:
    """``--axis``: one axis (``-1``, ``0``) or two for square tiles (``0,1``).

    >>> parse_axis("-1"), parse_axis("0,1")
    (-1, (0, 1))
    """
    parts = [p.strip() for p in text.split(",")]
    try:
        axes = [int(p) for p in parts]
    except ValueError:
        axes = []
    if len(axes) not in (1, 2) or len(parts) != len(axes):
        raise argparse.ArgumentTypeError(f"{text!r}: expected an axis such as -1, or two such as 0,1")
    return axes[0] if len(axes) == 1 else (axes[0], axes[1])


def _arguments(p: argparse.ArgumentParser) -> None:
    """The ``blockquant`` command's arguments.

    >>> p = argparse.ArgumentParser()
    >>> args = register(p.add_subparsers()).parse_args(["g.npy", "-f", "nvfp4", "--axis", "0,1"])
    >>> args.file, args.format, args.axis, args.rounding
    ('g.npy', ['nvfp4'], (0, 1), 'rne')
    """
    p.add_argument("file", metavar="FILE.npy", help="the array (float64, float32, float16 or bfloat16)")
    add_formats_option(
        p,
        "block formats, comma-separated or repeated (default: every one: mxfp8_e5m2, "
        "mxfp8_e4m3, mxfp6_e3m2, mxfp6_e2m3, mxfp4_e2m1, nvfp4)",
        dest="format",
    )
    p.add_argument(
        "--axis",
        type=parse_axis,
        default=-1,
        metavar="A[,B]",
        help="the axis the blocks run along, or two axes for square tiles (default: -1)",
    )
    p.add_argument("--block-size", type=int, metavar="K", help="values per block (default: the format's)")
    p.add_argument(
        "--scale-mode",
        action="append",
        metavar="MODE",
        help="the MX formats' E8M0 scale rule: floor (OCP, default), rceil (NVIDIA), or both: floor,rceil",
    )
    p.add_argument(
        "--tensor-scale",
        metavar="S",
        help="NVFP4's float32 tensor scale (default: amax / (6 x 448); 1 for one level of scaling)",
    )
    p.add_argument(
        "--rounding",
        default="rne",
        metavar="MODE",
        help="element rounding: rne (default), rna, rtz, rup, rdown, rodd, stochastic",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of stochastic rounding (default: 0)")


def load_array(path: str) -> np.ndarray:
    """The array of the .npy file at ``path`` (one ValueError naming the file otherwise)."""
    first_bytes(path, "a .npy file")  # missing, a folder, a FIFO: one clear error
    if not path.lower().endswith(".npy"):
        raise ValueError(f"{path!r}: expected a .npy file")
    arr: np.ndarray = read_npy(path)
    return arr


def _scale_words(q: Any) -> str:
    if q.format.scale == "e4m3":
        return "E4M3 + fp32" if q.tensor_scale != 1 else "E4M3"
    return f"E8M0 {q.scale_mode}"


def blockquant_view(
    path: str,
    x: Any,
    fmts: list[str] | None = None,
    *,
    axis: int | tuple[int, int] = -1,
    block_size: int | None = None,
    scale_modes: list[str] | None = None,
    tensor_scale: float | None = None,
    rounding: str = "rne",
    seed: int = 0,
    color: bool = False,
) -> View:
    """What each block format of ``fmts`` (default: all) does to the array ``x`` read from
    ``path``: a table of shares and errors, one row per format (and MX scale mode)."""
    from floatlab.blocks import BLOCK_FORMATS, get_mx_format, mx_quantize
    from floatlab.rounding import as_float_array

    a, src = as_float_array(x)
    formats = [get_mx_format(n) for n in (fmts or list(BLOCK_FORMATS))]
    modes = scale_modes or ["floor"]
    if tensor_scale is not None and not any(f.tensor_scale for f in formats):
        raise ValueError("--tensor-scale: only NVFP4 has a tensor scale (add -f nvfp4)")
    if scale_modes and not any(f.scale == "e8m0" for f in formats):
        raise ValueError("--scale-mode: only the MX formats have E8M0 scales to choose (NVFP4's are E4M3)")
    rows: list[list[str]] = []
    results: list[dict[str, Any]] = []
    for f in formats:
        for mode in modes if f.scale == "e8m0" else [None]:
            q = mx_quantize(
                a,
                f,
                axis=axis,
                rounding=rounding,
                rng=seed if rounding == "stochastic" else None,
                block_size=block_size,
                scale_mode=mode,
                tensor_scale=tensor_scale if f.tensor_scale else None,
            )
            err = q.error(a)
            nz = q.nonzero or 1
            scale = _scale_words(q)
            size = q.format.block_size
            res = {
                "format": f.name,
                "block_size": size,
                "scale": scale,
                "scale_mode": q.scale_mode,
                "tensor_scale": q.tensor_scale,
                "bits_per_value": q.format.bits_per_value,
                "blocks": int(q.scale_codes.size),
                "nonzero": q.nonzero,
                "flushed": q.flushed / nz,
                "subnormal": q.subnormal / nz,
                "saturated": q.clamped / nz,
                "nan_blocks": q.nan_blocks,
                "overflowed_blocks": q.overflowed_blocks,
                "rel_rms_error": err.rel_rms,
                "snr_db": err.snr_db,
                "max_abs_error": err.max_abs,
            }
            results.append(res)
            rows.append(
                [
                    f.name,
                    f"{size}x{size}" if isinstance(axis, tuple) else str(size),
                    scale,
                    f"{q.format.bits_per_value:g}",
                    percent(q.flushed / nz),
                    percent(q.subnormal / nz),
                    percent(q.clamped / nz),
                    f"{q.nan_blocks:,}",
                    f"{err.rel_rms:.3g}",
                    f"{err.snr_db:.1f}",
                ]
            )
    header = ["format", "block", "scale", "bits", "flushed", "subnormal", "saturated", "NaN blocks"]
    header += ["rel. RMS error", "SNR dB"]
    shape = "x".join(str(n) for n in a.shape) or "scalar"
    along = f"tiles over axes {axis[0]},{axis[1]}" if isinstance(axis, tuple) else f"blocks along axis {axis}"
    title = f"{safe(path)}: {a.size:,} {src.name} values (shape {shape}), {along}, rounding {rounding}"
    lines = [bold(title, color), "", table(header, rows, align="<><>>>>>>>", color=color), ""]
    note = "  shares of the nonzero values in blocks with a finite scale; errors of the dequantized values"
    lines.append(dim(note, color))
    overflowed = [r for r in results if r["overflowed_blocks"]]
    if overflowed:
        which = ", ".join(f"{r['overflowed_blocks']:,} in {r['format']} {r['scale']}" for r in overflowed)
        lines.append(
            dim(
                f"  NaN blocks of finite values whose scale overflowed ({which}): their values are "
                "lost, so the errors are infinite",
                color,
            )
        )
    scaled = [r["tensor_scale"] for r in results if r["scale_mode"] == "e4m3"]
    if scaled:
        how = "given" if tensor_scale is not None else "amax / (6 x 448)"
        lines.append(dim(f"  NVFP4 tensor scale {scaled[0]:.6g} ({how}, float32)", color))
    data = {
        "file": path,
        "shape": list(a.shape),
        "dtype": src.name,
        "axis": list(axis) if isinstance(axis, tuple) else axis,
        "rounding": rounding,
        "results": results,
    }
    return View("\n".join(lines), data)


def run(args: argparse.Namespace, ui: UI) -> int:
    """Read the array, quantize it into each format, print the table."""
    from floatlab.blocks import MAX_BLOCK_SIZE, SCALE_MODES

    if args.block_size is not None and not 1 <= args.block_size <= MAX_BLOCK_SIZE:
        raise ValueError(
            f"--block-size {str(args.block_size)[:40]}: expected a number of values from 1 to "
            f"{MAX_BLOCK_SIZE:,} (2^31)"
        )
    if args.seed < 0:
        raise ValueError(f"--seed {args.seed}: expected an integer >= 0")
    fmts = comma_names(args.format, "format name") or None
    modes = comma_names(args.scale_mode, "scale mode") or None
    for m in modes or []:
        if m not in SCALE_MODES:
            raise ValueError(f"--scale-mode {m!r}: expected one of {', '.join(SCALE_MODES)}")
    ts = None if args.tensor_scale is None else float(parse_scale(args.tensor_scale, "--tensor-scale"))
    x = load_array(args.file)
    view = blockquant_view(
        args.file,
        x,
        fmts,
        axis=args.axis,
        block_size=args.block_size,
        scale_modes=modes,
        tensor_scale=ts,
        rounding=args.rounding,
        seed=args.seed,
        color=ui.color,
    )
    ui.show(view)
    return 0


register = command_register(NAME, _HELP, _DESCRIPTION, _EPILOG, run, _arguments)
