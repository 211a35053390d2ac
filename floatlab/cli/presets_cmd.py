"""``floatlab presets [NAME]``: the frameworks' mixed-precision recipes side by side, or one in detail.

>>> from floatlab.cli import main
>>> main(["presets", "apex-O2", "--json"]) == 0  # doctest: +ELLIPSIS
{
  "name": "apex-O2",
...
True
"""

from __future__ import annotations

import argparse
from fractions import Fraction
from typing import TYPE_CHECKING

from floatlab.cli._common import UI, View, aligned, command_register
from floatlab.text import bold, dim, scale_text, table

if TYPE_CHECKING:
    from floatlab.train.precision.presets import Preset, PresetScaler

__all__ = ["NAME", "preset_detail_view", "presets_table_view", "register", "run", "scaler_words"]

NAME = "presets"

_HELP = "list the frameworks' mixed-precision recipes (presets), or show one"
_DESCRIPTION = """\
Without NAME: a table of every preset (PyTorch AMP, Keras, the 2018 TF1 recipe,
Apex O0-O3, fastai, MindSpore O0-O3 and its fixed loss scales): formats, master weights,
BatchNorm, ops kept in fp32 and the loss scaler, with the source each follows.
With NAME: that preset's policy, scaler and notes on what floatlab simulates."""
_EPILOG = """\
examples:
  floatlab presets
  floatlab presets apex-O2
  floatlab presets --json
"""


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", nargs="?", metavar="NAME", help="a preset name (apex-O2, fastai, keras, ...)")


def _g(x: float) -> str:
    return scale_text(Fraction(x)) if x > 0 else "0"


def scaler_words(s: PresetScaler) -> str:
    """A preset's loss scaler in a few words.

    >>> from floatlab.train.precision.presets import get_preset
    >>> scaler_words(get_preset("fastai").scaler)
    'dynamic 2^16, x2 after 1000 clean steps, x0.5 on overflow while above 1, max 2^24'
    >>> scaler_words(get_preset("mindspore-fixed-128-nodrop").scaler)
    'static 128, overflowing steps taken'
    """
    if s.kind == "none":
        return "none"
    if s.kind == "static":
        return f"static {s.init_scale:g}, " + (
            "skip on overflow" if s.skips_overflow else "overflowing steps taken"
        )
    words = [
        f"dynamic {_g(s.init_scale)}",
        f"x{s.growth_factor:g} after {s.growth_interval} clean steps",
        f"x{s.backoff_factor:g} on overflow",
    ]
    if s.min_scale is not None:
        words[-1] += (
            f" while above {_g(s.min_scale)}" if s.limit_rule == "guard" else f", min {_g(s.min_scale)}"
        )
    if s.max_scale is not None:
        words.append(f"max {_g(s.max_scale)}")
    return ", ".join(words)


def _formats(p: Preset) -> str:
    f, b = p.policy.forward.name, p.policy.backward.name
    return f if f == b else f"{f}/{b}"


def _ops(p: Preset) -> str:
    from floatlab.train.precision.policy import FP32_OPS

    ops = p.policy.fp32_ops
    if p.policy.is_wide:
        return "(all fp32)"
    return "all" if ops == FP32_OPS else (", ".join(sorted(ops)) or "none")


def presets_table_view(*, color: bool = False) -> View:
    """The side-by-side table of every preset, and the source each follows.

    >>> v = presets_table_view()
    >>> v.data[0]["name"], v.data[0]["scaler"]["init_scale"]
    ('torch-amp', 65536.0)
    """
    from floatlab.train.precision.presets import presets

    header = ["preset", "formats", "master weights", "BatchNorm", "fp32 ops", "loss scaler"]
    rows = [
        [
            p.name,
            _formats(p),
            "yes" if p.policy.master_weights else "no",
            "fp32" if p.policy.batchnorm_fp32 or p.policy.is_wide else p.policy.forward.name,
            _ops(p),
            scaler_words(p.scaler),
        ]
        for p in presets()
    ]
    sources = aligned([(p.name, p.source) for p in presets()])
    text = "\n".join(
        [
            table(header, rows, color=color),
            "",
            bold("sources", color),
            *sources,
            "",
            dim(
                "  'floatlab presets NAME' shows one in detail, with notes on what floatlab simulates",
                color,
            ),
        ]
    )
    return View(text, [p.to_dict() for p in presets()])


def preset_detail_view(name: str, *, color: bool = False) -> View:
    """One preset: its title, source, policy, loss scaler and notes.

    >>> preset_detail_view("apex-O3").data["scaler"]["kind"]
    'none'
    """
    from floatlab.train.precision.presets import BATCHNORM_KINDS, get_preset

    p = get_preset(name)
    props = [
        ("source", p.source),
        ("policy", p.policy.describe().split(": ", 1)[1]),
        ("loss scaler", scaler_words(p.scaler)),
        ("notes", p.notes),
        ("memory", f"{p.policy.memory_layout} layout; {BATCHNORM_KINDS[p.batchnorm]}"),
        ("memory source", p.memory_source or "floatlab's own"),
    ]
    lines = [bold(f"{p.name}: {p.title}", color), "", *aligned(props)]
    return View("\n".join(lines), p.to_dict())


def run(args: argparse.Namespace, ui: UI) -> int:
    """Print the presets table, or the detail of ``args.name``."""
    if args.name is None:
        ui.show(presets_table_view(color=ui.color))
    else:
        ui.show(preset_detail_view(args.name, color=ui.color))
    return 0


register = command_register(NAME, _HELP, _DESCRIPTION, _EPILOG, run, _arguments)
