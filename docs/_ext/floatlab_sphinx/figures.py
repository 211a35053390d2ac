"""The figures of the concept pages, drawn from floatlab at build time.

Each function below returns a matplotlib :class:`~matplotlib.figure.Figure` computed with
floatlab's own API (formats, the rounding primitive, the simulators, the histogram, the trainer);
``{floatlab-figure} NAME`` in a page draws it as SVG into the build and shows it with its caption.
Nothing here is a stored picture: a change to the library redraws the figures on the next build.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.util.docutils import SphinxDirective

from floatlab_sphinx.commands import note_floatlab_sources

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

FIGURES: dict[str, Callable[[], Figure]] = {}
_DRAWN: dict[tuple[str, str], Path] = {}

# one palette for every figure: colour-blind safe (Okabe and Ito)
BLUE, ORANGE, GREEN, RED, PURPLE, SKY, YELLOW, GREY = (
    "#0072B2",
    "#E69F00",
    "#009E73",
    "#D55E00",
    "#CC79A7",
    "#56B4E9",
    "#F0E442",
    "#7f7f7f",
)


def figure(func: Callable[[], Figure]) -> Callable[[], Figure]:
    """Register ``func`` as the figure named after it (``number_line`` -> ``number-line``)."""
    FIGURES[func.__name__.replace("_", "-")] = func
    return func


def _new(width: float, height: float, **kwargs: Any) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained", **kwargs)


def _log2_ticks(ax: Axes, lo: int, hi: int, step: int, axis: str = "x") -> None:
    ticks = list(range(lo, hi + 1, step))
    labels = [f"$2^{{{t}}}$" for t in ticks]
    if axis == "x":
        ax.set_xticks(ticks, labels)
    else:
        ax.set_yticks(ticks, labels)


# ---- formats ---------------------------------------------------------------------------------------
@figure
def format_ranges() -> Figure:
    """Where each format has values: subnormal and normal ranges on one log2 axis."""
    import floatlab as fl

    names = [
        "fp32",
        "tf32",
        "bf16",
        "fp16",
        "float8_e5m2",
        "float8_e4m3fn",
        "float6_e3m2fn",
        "float6_e2m3fn",
        "float4_e2m1fn",
    ]
    fig = _new(8, 4.2)
    ax = fig.subplots()
    for i, name in enumerate(names):
        f = fl.get_format(name)
        lo = f.emin - f.mantissa_bits
        top = math.log2(f.max)
        y = len(names) - 1 - i
        if f.mantissa_bits:
            ax.barh(y, f.emin - lo, left=lo, color=SKY, height=0.6, label="subnormal" if i == 0 else None)
        ax.barh(y, top - f.emin, left=f.emin, color=BLUE, height=0.6, label="normal" if i == 0 else None)
        ax.text(
            top + 2,
            y,
            f"{f.precision} significant bits, max {f.max:.6g}",
            va="center",
            fontsize=9,
        )
    ax.set_yticks(range(len(names)), list(reversed(names)))
    ax.axvline(0, color=GREY, lw=0.8, ls=":")
    ax.set_xlim(-155, 205)
    _log2_ticks(ax, -128, 128, 32)
    ax.set_xlabel("magnitude |x| (log scale, powers of two)")
    ax.set_title("The magnitudes each format can hold (fp64 reaches from $2^{-1074}$ to $2^{1024}$)")
    ax.legend(loc="lower left", fontsize=9, frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    return fig


# ---- rounding --------------------------------------------------------------------------------------
def _positive_values(fmt: Any) -> np.ndarray[Any, np.dtype[np.float64]]:
    import floatlab as fl

    codes = np.arange(fmt.sign_mask, dtype=np.uint64)
    v = fl.decode_array(codes, fmt)
    return np.asarray(v[np.isfinite(v)], dtype=np.float64)


@figure
def number_line() -> Figure:
    """Every non-negative value of a 6-bit format: the gap doubles at each power of two."""
    import floatlab as fl

    f = fl.get_format("float6_e3m2fn")
    v = _positive_values(f)
    fig = _new(8, 2.6)
    ax = fig.subplots()
    sub = v < f.smallest_normal
    ax.vlines(v[sub], 0, 1, color=SKY, lw=1.6, label="subnormal (and 0)")
    ax.vlines(v[~sub], 0, 1, color=BLUE, lw=1.6, label="normal")
    for k in range(f.emin, f.emax + 1):
        lo = 2.0**k
        ax.axvline(lo, color=GREY, lw=0.6, ls=":")
        if k >= 1:
            ax.annotate(
                f"gap {2.0 ** (k - f.mantissa_bits):g}",
                (lo * 1.5, 1.08),
                ha="center",
                fontsize=9,
                annotation_clip=False,
            )
    ax.set_ylim(0, 1.6)
    ax.set_yticks([])
    ax.set_xlim(-0.3, f.max + 0.7)
    ax.set_xlabel(f"value (each line is one of the {len(v)} non-negative values of {f.name})")
    ax.set_title(f"{f.name}: 4 values per binade, so the spacing doubles at every power of two", fontsize=10)
    ax.legend(loc="upper left", fontsize=9, frameon=False, ncols=2)
    ax.spines[["top", "right", "left"]].set_visible(False)
    return fig


@figure
def rounding_modes() -> Figure:
    """Where each rounding mode sends the values between two pairs of neighbours."""
    import floatlab as fl

    f = fl.get_format("float6_e3m2fn")  # neighbours 1, 1.25, 1.5 around the inputs
    x = np.arange(1.0, 1.5 + 1e-12, 1 / 256)
    ties = np.array([1.125, 1.375])
    modes = ["rne", "rna", "rtz", "rup", "rdown", "rodd"]
    fig = _new(8, 5.2)
    axes = fig.subplots(2, 4, sharex=True, sharey=True)
    flat = axes.ravel()
    for ax, mode in zip(flat, modes, strict=False):
        y = fl.round_array(x, f, mode)
        ax.plot(x, x, color=GREY, lw=0.8, ls="--")
        ax.step(x, y, where="post", color=BLUE, lw=1.6)
        ax.plot(ties, fl.round_array(ties, f, mode), "o", color=RED, ms=4)
        # the mode's description without the words every mode shares
        short = fl.rounding.MODE_DESCRIPTIONS[mode].removeprefix("round ")
        ax.set_title(mode + "\n" + short.replace("nearest, ", "nearest,\n"), fontsize=9)
    ax = flat[6]
    rng = np.random.default_rng(0)
    draws = np.stack([fl.round_array(x, f, "stochastic", rng=rng) for _ in range(1000)])
    ax.plot(x, x, color=GREY, lw=0.8, ls="--")
    ax.plot(x, draws[0], ".", color=ORANGE, ms=2.5, label="one draw", rasterized=True)
    ax.plot(x, draws.mean(axis=0), color=GREEN, lw=1.6, label="mean of 1,000")
    ax.set_title("stochastic\nup with probability = distance", fontsize=9)
    ax.legend(fontsize=7, frameon=False, loc="upper left")
    legend = flat[7]
    legend.axis("off")
    legend.text(
        0.02,
        0.5,
        "dashed: the input x\nblue: the value stored\nred dots: exact ties\n(1.125 and 1.375)\n\n"
        f"format {f.name}:\nneighbours 1, 1.25, 1.5",
        va="center",
        fontsize=9,
        transform=legend.transAxes,
    )
    for ax in axes[1]:
        ax.set_xlabel("input x")
    for ax in axes[:, 0]:
        ax.set_ylabel("stored value")
    for ax in flat[:7]:
        ax.set_yticks([1.0, 1.25, 1.5])
        ax.set_xticks([1.0, 1.25, 1.5])
    fig.suptitle("Seven rounding modes on the same inputs", fontsize=11)
    return fig


# ---- underflow ------------------------------------------------------------------------------------
@figure
def underflow_error() -> Figure:
    """Relative error of storing a value in fp16, from below the subnormals to past the maximum."""
    import floatlab as fl

    f = fl.FP16
    rng = np.random.default_rng(1)
    x = np.sort(np.exp2(rng.uniform(-28, 17, 20_000)))
    fig = _new(8, 3.8)
    ax = fig.subplots()
    for subnormals, colour, label in (
        (False, ORANGE, "flush to zero"),
        (True, BLUE, "gradual underflow (IEEE)"),
    ):
        y = fl.round_array(x, f, subnormals=subnormals)
        with np.errstate(invalid="ignore"):
            rel = np.abs(y - x) / x
        # flush-to-zero differs from gradual underflow only below the smallest normal
        shown = np.isfinite(rel) & (subnormals | (x < f.smallest_normal))
        ax.plot(
            np.log2(x[shown]), rel[shown], ".", ms=1.5, color=colour, label=label, alpha=0.6, rasterized=True
        )
    edges = {
        "flushes to 0": (-28, math.log2(f.smallest_subnormal) - 1),
        "subnormal": (math.log2(f.smallest_subnormal) - 1, math.log2(f.smallest_normal)),
        "normal": (math.log2(f.smallest_normal), math.log2(f.max)),
        "overflows to inf": (math.log2(f.max), 17),
    }
    shades = {
        "flushes to 0": "#eeeeee",
        "subnormal": "#ddeeff",
        "normal": "#ffffff",
        "overflows to inf": "#ffe0d0",
    }
    for name, (a, b) in edges.items():
        ax.axvspan(a, b, color=shades[name], zorder=0)
        ax.text((a + b) / 2, 2.5, name, ha="center", fontsize=9)
    ax.axhline(f.unit_roundoff, color=GREEN, lw=1, ls="--")
    ax.text(-27.5, f.unit_roundoff * 1.4, "unit roundoff $2^{-11}$", color=GREEN, fontsize=9)
    ax.set_yscale("log")
    ax.set_ylim(1e-8, 6)
    ax.set_xlim(-28, 17)
    _log2_ticks(ax, -28, 16, 4)
    ax.set_xlabel("magnitude |x| (log scale)")
    ax.set_ylabel("relative error |fp16(x) - x| / |x|")
    ax.set_title("Storing x in fp16: the error is bounded only in the normal range", fontsize=10)
    ax.legend(loc="lower left", fontsize=9, markerscale=6, frameon=False)
    return fig


# ---- swallowed updates ---------------------------------------------------------------------------
@figure
def swallowed_share() -> Figure:
    """Share of updates lost against the weight-to-update ratio, with the exact rule's bounds."""
    import floatlab as fl
    import floatlab.simulate as sim

    rng = np.random.default_rng(2)
    fig = _new(8, 3.6)
    axes = fig.subplots(1, 2, sharey=True)
    for ax, name in zip(axes, ("fp16", "bf16"), strict=True):
        f = fl.get_format(name)
        m = f.mantissa_bits
        log_ratio = np.linspace(m - 2, m + 5, 141)
        w = np.exp2(rng.uniform(-3, 3, 4000))
        sign = rng.choice([-1.0, 1.0], size=w.shape)
        u = sign * w / np.exp2(log_ratio)[:, None]
        r = sim.swallowed_updates(np.broadcast_to(w, u.shape), u, f)
        share = r.lost.mean(axis=1)
        ax.axvspan(m + 1, m + 2, color="#eeeeee", zorder=0)
        ax.plot(log_ratio, 100 * share, color=BLUE, lw=1.8)
        ax.axvline(m + 1, color=GREEN, ls="--", lw=1)
        ax.axvline(m + 2, color=RED, ls="--", lw=1)
        ax.text(m + 0.9, 50, f"never lost\nbelow {2 ** (m + 1):,}", ha="right", fontsize=9, color=GREEN)
        ax.text(m + 2.1, 50, f"always lost\nabove {2 ** (m + 2):,}", ha="left", fontsize=9, color=RED)
        ax.set_xticks(range(m - 2, m + 6), [f"$2^{{{k}}}$" for k in range(m - 2, m + 6)])
        ax.set_xlabel("|weight| / |update| (log scale)")
        ax.set_title(f"{name} ({m} fraction bits), round to nearest even", fontsize=10)
        ax.set_xlim(m - 2, m + 5)
    axes[0].set_ylabel("updates lost (%)")
    fig.suptitle("w + u == w: the share of 4,000 random weights that do not move", fontsize=11)
    return fig


# ---- loss scaling ---------------------------------------------------------------------------------
@figure
def gradient_histogram() -> Figure:
    """The gradients of the first step of a real run on the underflow task, over fp16's ranges."""
    import floatlab.train as ft
    from floatlab.plotting import plot_histogram

    h = ft.train("mlp", "underflow", "fp32", epochs=1, seed=0, histogram_steps=(1,))
    grads = h.grad_histograms[1]
    return plot_histogram(
        grads,
        "fp16",
        title="Gradients of the first step (MLP, underflow task, fp32 run) and what fp16 makes of them",
    )


@figure
def scale_and_flush() -> Figure:
    """Share of gradients flushed to zero per step, and test accuracy, at four loss scales."""
    import floatlab.train as ft

    runs = [
        ("no loss scaling", {"loss_scaling": "none"}, GREY),
        ("static $2^{10}$", {"loss_scaling": "static", "static_scale": 2.0**10}, ORANGE),
        ("dynamic, torch preset ($2^{16}$)", {"scaler": "torch"}, BLUE),
        ("dynamic, MindSpore preset ($2^{24}$)", {"scaler": "mindspore"}, GREEN),
    ]
    fig = _new(8, 4.0)
    left, right = fig.subplots(1, 2, width_ratios=(3, 2))
    finals = []
    for label, policy, colour in runs:
        h = ft.train("mlp", "underflow", "mixed-fp16", epochs=3, seed=0, overrides=policy, hidden=(64,))
        left.plot(h.column("step"), 100 * h.column("flushed"), color=colour, lw=1.6, label=label)
        finals.append(100 * float(h.final["test_accuracy"]))
    left.set_xlabel("training step")
    left.set_ylabel("non-zero gradients flushed to 0 (%)")
    left.set_ylim(-3, 103)
    left.set_title("fp16 gradients lost to underflow, per step", fontsize=10)
    y = np.arange(len(runs))[::-1]
    right.barh(y, finals, color=[c for _, _, c in runs], height=0.6)
    for yi, acc in zip(y, finals, strict=True):
        right.text(min(acc, 80) + 2, yi, f"{acc:.0f} %", va="center", fontsize=9)
    right.set_yticks(y, [label for label, _, _ in runs], fontsize=9)
    right.set_xlim(0, 100)
    right.set_xlabel("test accuracy after 3 epochs (%)")
    right.set_title("what the model learned", fontsize=10)
    fig.legend(
        *left.get_legend_handles_labels(), loc="outside lower center", ncols=4, fontsize=9, frameon=False
    )
    fig.suptitle(
        "mixed-fp16, an MLP with 64 hidden units on the underflow task: four loss scales, same seed",
        fontsize=11,
    )
    return fig


@figure
def dynamic_scale() -> Figure:
    """The dynamic loss scale of torch's rules on a stream of gradients whose largest value drifts."""
    import floatlab as fl
    from floatlab.train import LossScaler

    rng = np.random.default_rng(3)
    steps = 1200
    # the largest |gradient| of each step: drifting slowly, with rare spikes
    drift = -6 + 2.5 * np.sin(np.linspace(0, 3 * np.pi, steps))
    spikes = np.where(rng.random(steps) < 0.004, rng.uniform(3, 6, steps), 0.0)
    g_max = np.exp2(drift + spikes + rng.normal(0, 0.3, steps))
    scaler = LossScaler(init_scale=2.0**16, growth_interval=100)
    scales, skipped = [], []
    for g in g_max:
        scaled = fl.round_array(np.array([g * scaler.scale]), fl.FP16)[0]
        found_inf = not np.isfinite(scaled)
        scales.append(scaler.scale)
        skipped.append(found_inf)
        scaler.update(found_inf)
    s = np.log2(np.array(scales))
    k = np.flatnonzero(skipped)
    fig = _new(8, 3.4)
    ax = fig.subplots()
    ax.step(np.arange(steps), s, where="post", color=BLUE, lw=1.5, label="log2 of the loss scale")
    ax.plot(
        np.arange(steps),
        np.log2(fl.FP16.max / g_max),
        color=GREY,
        lw=0.8,
        label="largest scale that keeps the step finite",
    )
    ax.plot(k, s[k], "x", color=RED, ms=6, label=f"skipped step ({len(k)}): inf in the gradients")
    ax.set_xlabel("step")
    ax.set_ylabel("log2(scale)")
    ax.set_title(
        "Dynamic loss scaling (torch's rules, growth interval 100): back off on overflow, grow when calm",
        fontsize=10,
    )
    fig.legend(loc="outside lower center", fontsize=9, frameon=False, ncols=3)
    return fig


# ---- tensor cores ---------------------------------------------------------------------------------
@figure
def accumulation_error() -> Figure:
    """Error of an fp16 dot product: accumulated in fp16, and in fp32 as a tensor core does."""
    import floatlab.simulate as sim

    rng = np.random.default_rng(4)
    lengths = [2**k for k in range(4, 15)]
    err16, err32, errpair = [], [], []
    for n in lengths:
        a = rng.uniform(0, 1, n)
        b = rng.uniform(0, 1, n)
        products = np.asarray(sim.mul(a, b, "fp16"), dtype=np.float64)  # fp16 inputs, one rounding
        a16 = np.asarray(sim.add(a, 0.0, "fp16"), dtype=np.float64)
        b16 = np.asarray(sim.add(b, 0.0, "fp16"), dtype=np.float64)
        exact = float(np.dot(a16, b16))
        terms = a16 * b16  # exact: two 11-bit significands make at most 22 bits
        err16.append(abs(sim.accumulate(products, "fp16").sum - exact) / exact)
        errpair.append(abs(sim.accumulate(products, "fp16", method="pairwise").sum - exact) / exact)
        err32.append(abs(sim.accumulate(terms, "fp32", accumulator="fp32").sum - exact) / exact)
    fig = _new(8, 3.6)
    ax = fig.subplots()
    ax.loglog(lengths, err16, "o-", color=RED, label="fp16 products, summed in fp16 (running sum)")
    ax.loglog(lengths, errpair, "s-", color=ORANGE, label="fp16 products, summed in fp16 (pairwise)")
    ax.loglog(lengths, err32, "^-", color=BLUE, label="exact products, summed in fp32 (a tensor core)")
    ax.axhline(2.0**-11, color=GREY, ls="--", lw=1)
    ax.text(lengths[0], 2.0**-11 * 1.3, "fp16 unit roundoff", fontsize=9, color=GREY)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("dot-product length n (fp16 inputs uniform in [0, 1))")
    ax.set_ylabel("relative error of the sum")
    ax.set_title(
        "Why tensor cores accumulate in fp32: the error of an fp16 running sum grows with n", fontsize=10
    )
    ax.legend(fontsize=9, frameon=False)
    return fig


# ---- the directive -------------------------------------------------------------------------------
def draw(name: str, folder: Path) -> Path:
    """Draw the figure ``name`` into ``folder`` as SVG (once per build and folder)."""
    key = (name, str(folder))
    if key in _DRAWN and _DRAWN[key].exists():
        return _DRAWN[key]
    import matplotlib

    matplotlib.rcParams["svg.hashsalt"] = "floatlab"  # stable ids: the same figure, the same file
    folder.mkdir(parents=True, exist_ok=True)
    fig = FIGURES[name]()
    path = folder / f"{name}.svg"
    fig.savefig(path, format="svg", metadata={"Date": None}, dpi=150)  # dpi: of the rasterized point clouds
    _DRAWN[key] = path
    return path


class FigureDirective(SphinxDirective):
    """``{floatlab-figure} NAME``: draw a figure of this module; the content is its caption."""

    required_arguments = 1
    has_content = True
    option_spec: ClassVar[dict[str, Callable[[str], Any]]] = {"alt": directives.unchanged}

    def run(self) -> list[nodes.Node]:
        name = self.arguments[0]
        if name not in FIGURES:
            raise self.error(f"unknown figure {name!r}: expected one of {', '.join(sorted(FIGURES))}")
        folder = Path(self.env.doctreedir).parent / "figures"
        path = draw(name, folder)
        here = (Path(self.env.srcdir) / self.env.docname).parent
        uri = Path(os.path.relpath(path, here)).as_posix()
        doc = FIGURES[name].__doc__ or name
        fig = nodes.figure(classes=["floatlab-figure"])
        fig += nodes.image(uri=uri, alt=self.options.get("alt", doc.strip()))
        if self.content:
            holder = nodes.Element()
            self.state.nested_parse(self.content, self.content_offset, holder)
            first = holder.children[0] if holder.children else None
            if isinstance(first, nodes.paragraph):
                fig += nodes.caption(first.rawsource, "", *first.children)
                fig += nodes.legend("", *holder.children[1:]) if len(holder.children) > 1 else []
            else:
                fig += nodes.legend("", *holder.children)
        self.env.note_dependency(__file__)
        note_floatlab_sources(self.env)
        return [fig]
