"""Histogram figures: what the bars and ranges show, checked against frexp binning and the
verdicts (themselves checked against the rounding primitive in test_histogram.py)."""

from __future__ import annotations

import argparse
import io
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from floatlab.cli import histogram_cmd
from floatlab.cli._common import UI
from floatlab.gradhist import GradHistogram, histogram
from floatlab.plotting import REGION_COLORS, plot_histogram

pytest.importorskip("matplotlib")


def gradients(seed: int = 7) -> npt.NDArray[np.float32]:
    rng = np.random.default_rng(seed)
    bulk = np.exp2(rng.normal(-13, 3, 9_000))
    tail = np.exp2(rng.uniform(-40, -26, 500))
    x = np.concatenate([bulk, tail, np.zeros(500)]) * np.where(rng.random(10_000) < 0.5, -1, 1)
    return x.astype(np.float32)


def bars(ax: Any) -> list[Any]:
    """The bar rectangles of a panel (the ranges are drawn below them, at zorder 0)."""
    return [p for p in ax.patches if p.get_zorder() == 2]


def test_panels_bars_and_titles_match_the_data() -> None:
    x = gradients()
    h = histogram(x)
    advice = h.recommend_scale("fp16")
    assert advice.log2_scale > 0
    fig = plot_histogram(h, "fp16")
    top, bottom = fig.axes
    assert top.get_xlabel() == "log2 |x|"
    assert bottom.get_xlabel() == f"log2 |x · 2^{advice.log2_scale}|"
    for ax, k in ((top, 0), (bottom, advice.log2_scale)):
        v = h.verdict("fp16", 2.0**k)
        rects = bars(ax)
        zero_bar = min(rects, key=lambda r: r.get_x())
        assert zero_bar.get_height() == pytest.approx(100 * 500 / x.size)
        heights: dict[float, float] = {}
        for r in rects:
            if r is not zero_bar and r.get_height() > 0:
                heights[r.get_x()] = heights.get(r.get_x(), 0.0) + r.get_height()
        # frexp: floor(log2|x|) = exponent - 1; the bar of binade e starts at e + log2(scale)
        fin = x[x != 0]
        exps, counts = np.unique(np.frexp(fin)[1].astype(int) - 1, return_counts=True)
        expected = {float(e + k): 100 * c / x.size for e, c in zip(exps, counts, strict=True)}
        assert heights.keys() == expected.keys()
        for key, share in expected.items():
            assert heights[key] == pytest.approx(share)
        red = sum(r.get_height() for r in rects if _hex(r.get_facecolor()) == REGION_COLORS["zero"][1])
        assert red == pytest.approx(100 * v.flushed / x.size)
        assert ax.get_title().startswith(f"fp16 at scale {'1' if k == 0 else f'2^{k}'}:")
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert [lab.split(" ")[0] for lab in labels] == ["flushed", "subnormal,", "normal", "overflow", "exact"]
    assert "65504" in labels[2]


def _hex(rgba: tuple[float, ...]) -> str:
    return "#" + "".join(f"{round(c * 255):02x}" for c in rgba[:3])


def test_ranges_follow_the_format() -> None:
    fig = plot_histogram(histogram(gradients()), "e4m3fn", scale=2**10, log=False)
    ax = fig.axes[0]
    spans: list[Any] = [p for p in ax.patches if p.get_zorder() == 0]
    edges = sorted({round(p.get_x() + p.get_width(), 6) for p in spans})
    # e4m3fn, nearest even: flush up to 2^-10 (half the smallest subnormal 2^-9); normal from the
    # midpoint between the largest subnormal 7/8 * 2^-6 and 2^-6; overflow above 464 (448 + half a step)
    assert edges[:3] == pytest.approx([-10.0, math.log2(15 / 16 * 2.0**-6), math.log2(464)], abs=1e-6)
    assert ax.get_yscale() == "linear"
    assert fig.axes[1].get_xlabel() == "log2 |x · 2^10|"


def test_odd_inputs_still_draw() -> None:
    assert len(plot_histogram(GradHistogram(), "fp16").axes) == 1
    assert len(plot_histogram(histogram(np.array([np.nan, np.inf])), "bf16").axes) == 1
    fig = plot_histogram(histogram(gradients()), "fp16", scale=1000)
    assert fig.axes[1].get_xlabel() == "log2 |x · 1000|"


def test_png_is_written(tmp_path: Path) -> None:
    import matplotlib.image

    out = tmp_path / "g.png"
    plot_histogram(histogram(gradients()), "fp16", path=out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    img = matplotlib.image.imread(out)
    assert img.shape[0] > 400
    assert img.shape[1] > 800


def test_cli_plot_writes_one_png_per_format(tmp_path: Path) -> None:
    grads = tmp_path / "g.npy"
    np.save(grads, gradients())
    parser = argparse.ArgumentParser()
    histogram_cmd.register(parser.add_subparsers())
    out = tmp_path / "fig.png"
    args = parser.parse_args(["histogram", str(grads), "-f", "fp16,bf16", "--recommend", "--plot", str(out)])
    buf = io.StringIO()
    assert args.run(args, UI(stream=buf)) == 0
    for name in ("fp16", "bf16"):
        png = tmp_path / f"fig-{name}.png"
        assert png.read_bytes()[:4] == b"\x89PNG"
        assert f"figure written to {png}" in buf.getvalue()


def test_matplotlib_loads_only_when_drawing() -> None:
    probe = "import sys, floatlab.plotting, floatlab.cli.histogram_cmd; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
