"""``floatlab sample CHECKPOINT``: text written by a character model trained with ``floatlab train``.

The checkpoint is loaded as ``floatlab train --resume`` loads it (its config rebuilds the model
and the data set), and :func:`floatlab.train.analysis.sampling.sample` runs the model in the precision policy
it was trained in. A checkpoint of a model that was not trained on text is refused in one line.

>>> from floatlab.cli import main
>>> main(["sample", "/nonexistent/lm.npz"])
2
"""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING

from floatlab.cli._common import (
    UI,
    View,
    add_command,
    add_common_options,
    add_max_bytes_option,
    checked_number,
)
from floatlab.io import check_archive
from floatlab.text import dim

if TYPE_CHECKING:
    from floatlab.cli._common import Subparsers
    from floatlab.train import Trainer

__all__ = ["NAME", "register", "run", "sample_view"]

NAME = "sample"

_EPILOG = """\
examples:
  floatlab train --model transformer --data text --steps 2000 --optimizer adamw --checkpoint lm.npz
  floatlab sample lm.npz
  floatlab sample lm.npz --prompt "And God said" --chars 400 --temperature 0.8
  floatlab sample lm.npz --temperature 0          the likeliest character every time
"""


def _chars(text: str) -> int:
    """``--chars``: a count from 0 to :data:`~floatlab.train.analysis.sampling.MAX_CHARS`, checked before
    the checkpoint is read.

    >>> _chars("400")
    400
    """
    from floatlab.train.analysis.sampling import MAX_CHARS

    error = f"{text[:40]!r}: expected a number of characters from 0 to {MAX_CHARS:,}"
    return checked_number(text, _whole, lambda n: 0 <= n <= MAX_CHARS, error)


def _seed(text: str) -> int:
    """``--seed``: an integer >= 0 (numpy's generators take no negative seed).

    >>> _seed("7")
    7
    """
    return checked_number(text, _whole, lambda n: n >= 0, f"{text[:40]!r}: expected an integer >= 0")


def _whole(text: str) -> int:
    """The decimal integer ``text`` (at most 1,000 digits); a ValueError otherwise."""
    body = text.strip()
    if len(body) > 1000:
        raise ValueError(f"{len(body):,} characters: too long for a whole number")
    return int(body)


def _temperature(text: str) -> float:
    error = f"{text!r}: expected a finite number >= 0"
    return checked_number(text, float, lambda t: 0.0 <= t < math.inf, error)


def register(subparsers: Subparsers) -> argparse.ArgumentParser:
    """Add the ``sample`` command to ``subparsers``.

    >>> p = argparse.ArgumentParser()
    >>> args = register(p.add_subparsers()).parse_args(["lm.npz", "--chars", "50"])
    >>> args.checkpoint, args.chars, args.temperature, args.prompt
    ('lm.npz', 50, 1.0, '')
    """
    p = add_command(
        subparsers,
        NAME,
        help="write text with a character model trained by 'floatlab train --data text'",
        description="Load a checkpoint of a character-level language model (floatlab train --model "
        "transformer --data text --checkpoint FILE.npz) and let it write: it reads the prompt, then "
        "draws one character at a time from its predicted probabilities (divided by the temperature "
        "in log space), running in the precision policy it was trained in. Prints the prompt and what "
        "follows it.",
        epilog=_EPILOG,
        run=run,
    )
    p.add_argument("checkpoint", metavar="CHECKPOINT.npz", help="a checkpoint written by floatlab train")
    p.add_argument(
        "--prompt", default="", metavar="TEXT", help="the text to continue (default: none, a new line)"
    )
    p.add_argument(
        "--chars",
        type=_chars,
        default=200,
        metavar="N",
        help="characters to write, at most 100,000 (default: 200)",
    )
    p.add_argument(
        "--temperature",
        type=_temperature,
        default=1.0,
        metavar="T",
        help="1 draws from the model's probabilities, below 1 sharpens them, 0 always takes the "
        "likeliest character (default: 1)",
    )
    p.add_argument("--seed", type=_seed, default=0, help="seed of the draws, >= 0 (default: 0)")
    add_max_bytes_option(p)
    add_common_options(p)
    return p


def sample_view(trainer: Trainer, prompt: str, text: str, *, color: bool = False) -> View:
    """The prompt (dimmed) and the text the model wrote after it.

    >>> from floatlab.train import TrainConfig, Trainer
    >>> tr = Trainer.from_config(TrainConfig(data="underflow", hidden=(4,), epochs=0))
    >>> sample_view(tr, "In the", " beginning").text
    'In the beginning'
    """
    return View(
        dim(prompt, color) + text,
        {"prompt": prompt, "text": text, "model": trainer.model.config(), "policy": trainer.policy.name},
    )


def run(args: argparse.Namespace, ui: UI) -> int:
    """Load the checkpoint, write the text, print it (see the module docstring)."""
    from floatlab.train import Trainer
    from floatlab.train.analysis.sampling import sample

    # a FIFO, a device or a folder is refused by name, and a zip bomb before it inflates
    check_archive(args.checkpoint, args.max_bytes)
    trainer = Trainer.resume(args.checkpoint)
    if trainer.data.kind != "text":
        raise ValueError(
            f"checkpoint {args.checkpoint!r} holds a model trained on {trainer.data.name!r}, not on text: "
            "sample needs one trained with --data text"
        )
    text = sample(trainer, args.prompt, args.chars, args.temperature, args.seed)
    view = sample_view(trainer, args.prompt, text, color=ui.color)
    settings = {"checkpoint": args.checkpoint, "temperature": args.temperature, "seed": args.seed}
    ui.show(View(view.text, {**view.data, **settings}))
    return 0
