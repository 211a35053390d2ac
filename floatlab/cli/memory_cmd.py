"""``floatlab memory``: the bytes of one training step, line by line, in the formats a real system
stores, against the same step in fp32 (see :mod:`floatlab.train.analysis.memory`).

>>> from floatlab.cli import main
>>> main(["memory", "--data", "underflow", "--hidden", "8", "--precision", "bf16"])  # doctest: +ELLIPSIS
bf16: mlp 64-8-10, sgd momentum 0.9, batch 64
...
  total                          ... 100%
<BLANKLINE>
  ... MiB, 0.508 of the same step in fp32 (... MiB)
0
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from floatlab.cli._common import UI, View, command_register
from floatlab.cli.train_cmds import _MODEL_SETTINGS, MODEL_NAMES, _shape_options, _switch_options
from floatlab.text import bold, dim, percent, table

if TYPE_CHECKING:
    from floatlab.train.analysis.memory import Ledger
    from floatlab.train.config import TrainConfig

__all__ = ["NAME", "config_from_memory_args", "memory_view", "register", "run"]

NAME = "memory"

_HELP = (
    "the bytes of a training step (weights, master weights, gradients, optimizer state, "
    "activations) in a policy's formats"
)
_DESCRIPTION = """\
Count the memory of one training step as a real system stores it: the weights the
model computes with, fp32 master weights, gradients (and master gradients), the optimizer's
state, and the activations the forward pass keeps for a batch, each at the width of its format
(floatlab itself holds every value in float32). The total is set against the same step in fp32.
Where master weights and gradients live follows the framework: Apex O2's layout for the named
policies, Apex O2 and fastai; autocast's (fp32 weights and gradients, fp16 casts) for
torch-amp, Apex O1, Keras, the TF1 recipe and MindSpore. The optimizer's state takes the format
of the weights it updates (fp16 under Apex O3), and BatchNorm keeps what its framework's keeps:
its 16-bit input under PyTorch's recipes, fp32 values under Keras and MindSpore."""
_EPILOG = """\
examples:
  floatlab memory --model transformer --precision mixed-fp16
  floatlab memory --model transformer --preset torch-amp --optimizer adamw --batch-size 32
  floatlab memory --model convnet --preset apex-O2 --json
"""


def _arguments(p: argparse.ArgumentParser) -> None:
    step = p.add_argument_group("the step")
    step.add_argument(
        "--model", default="mlp", metavar="MODEL", help=f"{', '.join(MODEL_NAMES)} (default: mlp)"
    )
    step.add_argument(
        "--data",
        metavar="DATA",
        help="digits, underflow or text: the shapes the model is built for "
        "(default: text for the transformer, digits otherwise)",
    )
    which = step.add_mutually_exclusive_group()
    which.add_argument(
        "--precision", default="mixed-fp16", metavar="POLICY", help="policy or preset (default: mixed-fp16)"
    )
    which.add_argument("--preset", metavar="NAME", help="a framework's recipe (floatlab presets lists them)")
    step.add_argument("--batch-size", type=int, default=64, help="batch size (default: 64)")
    step.add_argument("--optimizer", default="sgd", help="sgd or adamw (default: sgd)")
    step.add_argument(
        "--momentum", type=float, default=0.9, help="sgd momentum; 0 keeps no state (default: 0.9)"
    )
    model = p.add_argument_group("model shape")
    _shape_options(model)
    _switch_options(p)


def config_from_memory_args(args: argparse.Namespace) -> TrainConfig:
    """The run the options describe, as a :class:`~floatlab.train.TrainConfig` (the data set
    defaults to the one the model reads).

    >>> p = argparse.ArgumentParser()
    >>> _ = register(p.add_subparsers())
    >>> cfg = config_from_memory_args(p.parse_args(["memory", "--model", "lm", "--preset", "apex-O2"]))
    >>> cfg.model, cfg.data, cfg.precision, cfg.batch_size
    ('lm', 'text', 'apex-O2', 64)
    """
    from floatlab.cli.train_cmds import _overrides
    from floatlab.train.config import TrainConfig
    from floatlab.train.data.text import LANGUAGE_MODELS
    from floatlab.train.models import model_name

    data = args.data
    if data is None:
        data = "text" if model_name(args.model) in LANGUAGE_MODELS else "digits"
    shape = {k: v for k in _MODEL_SETTINGS if (v := getattr(args, k)) is not None}
    return TrainConfig(
        model=args.model,
        data=data,
        precision=args.preset or args.precision,
        overrides=_overrides(args),
        batch_size=args.batch_size,
        optimizer=args.optimizer,
        momentum=args.momentum,
        hidden=args.hidden,
        d_model=args.d_model,
        **shape,
    )


def memory_view(led: Ledger, *, color: bool = False) -> View:
    """The ledger as a table (what, format, elements, bytes, share) and its total against fp32.

    >>> from floatlab.train.analysis.memory import ledger
    >>> from floatlab.train.models import MLP
    >>> print(memory_view(ledger(MLP(4, (3,), 2), "mixed-fp16", batch_size=5, optimizer="adamw")).text)
    mixed-fp16: mlp 4-3-2, adamw, batch 5
    layout: Apex O2: low-precision model weights and gradients, fp32 master copies of both
    <BLANKLINE>
      what              format  elements  bytes  share
      weights           fp16          23     46  6.97%
      master weights    fp32          23     92  13.9%
      gradients         fp16          23     46  6.97%
      master gradients  fp32          23     92  13.9%
      optimizer state   fp32          46    184  27.9%
      activations       fp16          60    120  18.2%
      loss              fp32          10     40  6.06%
      indices           int64          5     40  6.06%
      total                                 660   100%
    <BLANKLINE>
      0.000629 MiB, 0.959 of the same step in fp32 (0.000656 MiB)
    """
    from floatlab.train.analysis.memory import LAYOUTS, mib_text

    total = led.total
    rows = [
        [e.what, e.format, f"{e.elements:,}", f"{e.bytes:,}", percent(e.bytes, total)] for e in led.entries
    ]
    rows.append(["total", "", "", f"{total:,}", "100%"])
    lines = [
        bold(f"{led.policy}: {led.model}, {led.optimizer}, batch {led.batch_size}", color),
        dim(f"layout: {LAYOUTS[led.layout]}", color),
        "",
        table(["what", "format", "elements", "bytes", "share"], rows, align="<<>>>", color=color),
        "",
        f"  {mib_text(total)}, {led.ratio:.3g} of the same step in fp32 ({mib_text(led.fp32_bytes)})",
    ]
    return View("\n".join(lines), led.to_dict())


def run(args: argparse.Namespace, ui: UI) -> int:
    """Print the ledger of the step the options describe."""
    from floatlab.train.analysis.memory import ledger_for

    ui.show(memory_view(ledger_for(config_from_memory_args(args)), color=ui.color))
    return 0


register = command_register(NAME, _HELP, _DESCRIPTION, _EPILOG, run, _arguments)
