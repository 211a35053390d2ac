"""``floatlab histogram FILE -f fp16 [--scale S | --recommend] [--plot out.png] [--json]``.

Reads gradients from ``.npy`` (memory-mapped, counted chunk by chunk), ``.npz`` (every array, per
name and in total) or a torch ``.pt`` file (when torch is installed), counts them by base-2
exponent and says what a format does to them: the share that flushes to zero, turns subnormal or
overflows, unscaled and at a loss scale, and which power-of-two scale rescues the most.

The library is imported inside the functions: ``import floatlab.cli`` stays light, and numba
and matplotlib load only for large inputs and ``--plot``.

>>> import numpy as np, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "g.npy")
>>> np.save(path, np.array([2.0**-30, 2.0**-10, 0.0], np.float32))
>>> h = load_histograms([path])["g.npy"]
>>> h.total, h.verdict("fp16").flushed
(3, 1)
"""

from __future__ import annotations

import argparse
import os
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from floatlab.cli import demo
from floatlab.cli._common import (
    UI,
    View,
    add_formats_option,
    add_max_bytes_option,
    command_register,
    parse_formats,
)
from floatlab.io import (
    FIGURE_SUFFIXES,
    MAX_BYTES,
    atomic_output,
    check_outputs,
    figure_name,
    first_bytes,
    read_npy,
    read_npz,
    read_torch,
)
from floatlab.text import bold, dim, parse_scale, percent, safe

if TYPE_CHECKING:
    from floatlab.gradhist import GradHistogram

__all__ = [
    "NAME",
    "histogram_view",
    "load_histograms",
    "load_shards",
    "register",
    "run",
    "synthetic_gradients",
]

NAME = "histogram"

_HELP = "count gradients by exponent: what flushes, turns subnormal or overflows in a format"
_DESCRIPTION = (
    "Count the values of .npy, .npz or torch .pt files by base-2 exponent (exactly, from the bit fields) "
    "and say what a format does to them: the share that flushes to zero, turns subnormal or overflows, "
    "unscaled and at a loss scale; --recommend picks the power-of-two scale that rescues the most values."
)

_CHUNK = 1 << 24  # values per update when streaming a memory-mapped .npy

_EPILOG = """\
examples:
  floatlab histogram grads.npy -f fp16                 what fp16 does to these gradients
  floatlab histogram grads.npy -f fp16 --recommend     ... and the loss scale that saves them
  floatlab histogram grads.npy -f fp16 --scale 2^12    ... at a loss scale of 4096
  floatlab histogram step*.npz -f fp16,bf16,e5m2       every array of several files, three formats
  floatlab histogram model_grads.pt --plot grads.png   a torch state file, and a figure
  floatlab histogram dump/ --shards -f fp16,bf16       every shard of a dump larger than memory
  floatlab histogram 'dump/step-*.npz' --shards --dask the same, counted as Dask tasks
"""


# ---- reading ----------------------------------------------------------------------------------
def _npy(path: str) -> GradHistogram:
    from floatlab.gradhist import GradHistogram

    arr = read_npy(path, mmap=True)
    h = GradHistogram()
    flat = arr.reshape(-1) if arr.flags.c_contiguous else arr.ravel()
    try:
        for start in range(0, max(flat.size, 1), _CHUNK):
            h.update(flat[start : start + _CHUNK])  # a memory-mapped dump larger than memory streams
    except ValueError as e:
        raise ValueError(f"{path!r}: {e}") from None
    return h


def _npz(path: str, max_bytes: int = MAX_BYTES) -> dict[str, GradHistogram]:
    from floatlab.gradhist import GradHistogram

    out: dict[str, GradHistogram] = {}
    for name, arr in read_npz(path, max_bytes=max_bytes).items():
        try:
            out[name] = GradHistogram(arr)
        except ValueError as e:
            raise ValueError(f"{path!r}, entry {name!r}: {e}") from None
    return out


def _pt(path: str, max_bytes: int = MAX_BYTES) -> dict[str, GradHistogram]:
    from floatlab.gradhist import GradHistogram

    return {name: GradHistogram(t) for name, t in read_torch(path, max_bytes=max_bytes).items()}


def _labels(paths: list[str]) -> dict[str, str]:
    """The row label of each file: its base name, or the path as given when two files share a
    base name (d1/g.npy and d2/g.npy stay two rows).

    >>> _labels(["d1/g.npy", "d2/g.npy", "h.npy"])
    {'d1/g.npy': 'd1/g.npy', 'd2/g.npy': 'd2/g.npy', 'h.npy': 'h.npy'}
    """
    bases = [os.path.basename(p) for p in paths]
    return {p: (os.path.normpath(p) if bases.count(b) > 1 else b) for p, b in zip(paths, bases, strict=True)}


def load_histograms(paths: list[str], *, max_bytes: int = MAX_BYTES) -> dict[str, GradHistogram]:
    """One histogram per array: a .npy file is one array, a .npz or .pt file one per entry
    (named ``file:entry`` when several files are given). Files that share a base name are told
    apart by their paths; names taken from the files (entries of a .npz, say) have their control
    characters escaped, so that a report never carries a file's terminal codes. A .npz archive
    may inflate to at most ``max_bytes``, and a .pt file's tensors hold at most ``max_bytes`` of
    values, each stored value counted once (:func:`floatlab.io.read_torch`)."""
    out: dict[str, GradHistogram] = {}
    labels = _labels(paths)
    for path in paths:
        first_bytes(path, "a .npy, .npz or .pt file")  # missing, a folder, a FIFO: one clear error
        low = path.lower()
        if low.endswith(".npz"):
            parts = _npz(path, max_bytes)
        elif low.endswith((".pt", ".pth")):
            parts = _pt(path, max_bytes)
        elif low.endswith(".npy"):
            parts = {"": _npy(path)}
        else:
            raise ValueError(f"{path!r}: expected a .npy, .npz or .pt/.pth file")
        base = labels[path]
        for name, h in parts.items():
            key = safe(base if not name else (name if len(paths) == 1 else f"{base}:{name}"))
            out[key] = out[key] + h if key in out else h
    return out


def load_shards(sources: list[str], *, chunk: int = 1 << 24, dask: bool = False) -> GradHistogram:
    """One histogram of every value in ``sources`` (folders, glob patterns, .npy/.npz files, Zarr
    arrays), read ``chunk`` values at a time (or counted as Dask tasks): a dump larger than memory.

    >>> import numpy as np, tempfile, os
    >>> folder = tempfile.mkdtemp()
    >>> for i in range(3):
    ...     np.save(os.path.join(folder, f"g{i}.npy"), np.full(4, 2.0**-30, np.float32))
    >>> h = load_shards([os.path.join(folder, "g*.npy")], chunk=3)
    >>> h.total, h.verdict("fp16").flushed
    (12, 12)
    """
    from floatlab.gradhist import histogram_files

    return histogram_files(sources, chunk=chunk, dask=dask)


# ---- the view ---------------------------------------------------------------------------------
def _plot_paths(path: str, names: list[str]) -> list[str]:
    if len(names) == 1:
        return [figure_name(path)]
    stem, ext = os.path.splitext(path)
    return [f"{stem}-{n}{ext or '.png'}" for n in names]


def histogram_view(
    hists: dict[str, GradHistogram],
    fmts: list[str] | None = None,
    *,
    scale: Fraction | None = None,
    recommend: bool = False,
    headroom: int = 2,
    rounding: str = "rne",
    plot: str | None = None,
    width: int = 40,
    color: bool = False,
) -> View:
    """The report for histograms ``hists`` (name -> histogram) in the formats ``fmts``.

    >>> import numpy as np
    >>> from floatlab.gradhist import histogram
    >>> v = histogram_view({"g": histogram(np.array([2.0**-30, 1.0], np.float32))}, ["fp16"], recommend=True)
    >>> v.data["formats"][0]["advice"]["log2_scale"]  # 2^-30 * 2^6 is fp16's smallest subnormal
    6
    """
    from floatlab.gradhist import GradHistogram

    formats = parse_formats(fmts, default=["fp16"])
    total = sum(hists.values(), GradHistogram())
    lines: list[str] = []
    data: dict[str, Any] = {"arrays": {k: h.to_dict() for k, h in hists.items()}, "total": total.to_dict()}
    if len(hists) > 1:
        lines.append(bold(f"{len(hists)} arrays", color))
        wname = max(len(k) for k in hists)
        f0 = formats[0]
        lines.append(f"  {'array':<{wname}}  {'values':>12}  {f0.name + ' flushed':>14}  {'subnormal':>9}")
        for k, h in hists.items():
            v = h.verdict(f0, 1, rounding)
            lines.append(
                f"  {k:<{wname}}  {h.total:>12,}  {percent(v.fraction('flushed')):>14}  "
                f"{percent(v.fraction('subnormal')):>9}"
            )
        lines.append("")
    results = []
    for i, f in enumerate(formats):
        entry: dict[str, Any] = {"format": f.name, "verdict": total.verdict(f, 1, rounding).to_dict()}
        s = scale
        if recommend:
            advice = total.recommend_scale(f, headroom=headroom, rounding=rounding)
            entry["advice"] = advice.to_dict()
            s = Fraction(2) ** advice.log2_scale
        if s is not None:
            entry["scaled"] = total.verdict(f, s, rounding).to_dict()
        if i == 0:
            lines.append(total.text(f, s if s is not None else 1, rounding, width=width))
        else:
            lines.append(str(total.verdict(f, 1, rounding)))
            if s is not None and s != 1:
                lines.append(str(total.verdict(f, s, rounding)))
        if recommend:
            lines.append(bold(f"recommended scale for {f.name}: 2^{entry['advice']['log2_scale']}", color))
            lines.append(entry["advice"]["reason"])
        results.append(entry)
        if plot is not None:
            path = _plot_paths(plot, [g.name for g in formats])[i]
            with atomic_output(path) as tmp:
                total.plot(f, scale=s, recommend=recommend, headroom=headroom, rounding=rounding, path=tmp)
            entry["plot"] = path
            lines.append(dim(f"figure written to {safe(path)}", color))
        lines.append("")
    data["formats"] = results
    return View("\n".join(lines).rstrip(), data)


def run(args: argparse.Namespace, ui: UI) -> int:
    """Read the files, count, and print the report (text or JSON)."""
    if args.scale is not None and args.recommend:
        raise ValueError("--scale and --recommend: give one of them (--recommend picks the scale)")
    scale = parse_scale(args.scale) if args.scale is not None else None
    if args.headroom < 0:
        raise ValueError(f"--headroom {args.headroom}: expected a number of bits >= 0")
    if args.plot is not None:
        plots = _plot_paths(args.plot, [f.name for f in parse_formats(args.fmt, default=["fp16"])])
        inputs = [("FILE", f) for f in args.files]
        check_outputs([("--plot", p) for p in plots], inputs, suffixes={"--plot": FIGURE_SUFFIXES})
    if args.chunk < 1:
        raise ValueError(f"--chunk {args.chunk}: expected a number of values >= 1")
    if args.shards or args.dask:
        hists = {"shards": load_shards(args.files, chunk=args.chunk, dask=args.dask)}
    else:
        hists = load_histograms(args.files, max_bytes=args.max_bytes)
    options = {k: getattr(args, k) for k in ("recommend", "headroom", "rounding", "plot", "width")}
    ui.show(histogram_view(hists, args.fmt, scale=scale, **options, color=ui.color))
    return 0


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        help=".npy, .npz or .pt/.pth (torch) files; with --shards also folders, glob patterns and "
        "Zarr arrays",
    )
    big = p.add_argument_group("dumps larger than memory")
    big.add_argument(
        "--shards",
        action="store_true",
        help="count every FILE (a folder, a glob such as 'dump/*.npy', a Zarr array) as one dump, "
        "chunk by chunk, in memory bounded by the chunk",
    )
    big.add_argument(
        "--chunk", type=int, default=1 << 24, metavar="N", help="values read at a time (default: 16777216)"
    )
    big.add_argument("--dask", action="store_true", help="with --shards: count the shards as Dask tasks")
    add_formats_option(
        p, "target format(s): fp16, bf16, e4m3, ... (repeat or comma-separate; default fp16)", dest="fmt"
    )
    group = p.add_mutually_exclusive_group()
    group.add_argument("--scale", metavar="S", help="a loss scale: 1024, 2^10, 0.5 (exact for powers of two)")
    group.add_argument("--recommend", action="store_true", help="pick the power-of-two scale that saves most")
    p.add_argument(
        "--headroom", type=int, default=2, metavar="BITS", help="keep max|x|*scale <= max/2^BITS (default 2)"
    )
    p.add_argument("-r", "--rounding", metavar="MODE", default="rne", help="rne, rna, rtz, rup, rdown, rodd")
    p.add_argument("--plot", metavar="OUT.png", help="write a figure (PNG, SVG or PDF by suffix)")
    p.add_argument("--width", type=int, default=40, metavar="N", help="width of the text bars (default 40)")
    add_max_bytes_option(p)


# ---- the tour -----------------------------------------------------------------------------------
def synthetic_gradients(n: int = 16_000, seed: int = 0) -> Any:
    """Gradient-like float32 values: a log-normal bulk around 2^-14 and a 5% tail far below 2^-24.

    >>> x = synthetic_gradients()
    >>> x.dtype.name, x.size, int((abs(x) < 2.0**-24).sum())
    ('float32', 16000, 800)
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    k = n // 20
    bulk = np.exp2(np.clip(rng.normal(-14, 3, n - k), -23, -1))
    tail = np.exp2(rng.uniform(-40, -25.5, k))
    sign = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    return (np.concatenate([bulk, tail]) * sign).astype(np.float32)


def _demo_histogram(color: bool) -> View:
    from floatlab.gradhist import GradHistogram

    view = histogram_view(
        {"synthetic": GradHistogram(synthetic_gradients())}, ["fp16"], recommend=True, width=30, color=color
    )
    intro = dim("16,000 synthetic gradients, 5% of them below 2^-24 (the smallest fp16 subnormal)", color)
    return View(intro + "\n" + view.text, view.data)


demo.add_section(
    demo.Section("Gradient underflow in fp16, and the loss scale that rescues it", _demo_histogram)
)


register = command_register(NAME, _HELP, _DESCRIPTION, _EPILOG, run, _arguments)
