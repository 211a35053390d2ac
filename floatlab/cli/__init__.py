"""The ``floatlab`` command line.

Each command lives in its own module with ``NAME``, ``register(subparsers)`` (adds its parser and
sets ``run`` as its default) and ``run(args, ui) -> int``. A new command is one module and one
entry in :data:`COMMANDS`. Command modules import only light things at module level; anything
heavy (numba kernels, matplotlib, sympy) is imported inside the ``run`` that needs it, so that
``floatlab decode`` starts fast.

Bad input never gives a traceback: the message goes to stderr as one line starting
``floatlab: error:`` and the exit status is 2. An unexpected exception (a bug) is reported in
one line too, with exit status 1. A training fault is one line starting ``floatlab: warning:``.

>>> main(["decode", "0x3C00", "--no-color"])  # doctest: +ELLIPSIS
0x3C00 ...
0
>>> main(["decode", "0xZZ"])
2
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import warnings
from collections.abc import Iterator
from types import ModuleType
from typing import NoReturn, TextIO

from floatlab.cli import (
    bench_cmd,
    blockquant_cmd,
    decode,
    demo,
    encode,
    formats,
    histogram_cmd,
    lessons_cmd,
    memory_cmd,
    presets_cmd,
    sample_cmd,
    simulate_cmds,
    sweep_cmd,
    train_cmds,
)
from floatlab.cli._common import UI, add_common_options, want_color
from floatlab.text import safe

__all__ = [
    "COMMANDS",
    "EXIT_BROKEN_PIPE",
    "EXIT_INTERNAL",
    "EXIT_USAGE",
    "UsageError",
    "build_parser",
    "main",
]

# the commands, in the order `floatlab --help` lists them
COMMANDS: tuple[ModuleType, ...] = (
    decode,
    encode,
    formats,
    simulate_cmds,
    histogram_cmd,
    blockquant_cmd,
    train_cmds,
    sweep_cmd,
    sample_cmd,
    presets_cmd,
    memory_cmd,
    bench_cmd,
    demo,
    lessons_cmd,
)

EXIT_USAGE = 2
EXIT_INTERNAL = 1  # an unexpected exception: a bug, reported in one line all the same
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a tool killed by a closed pipe reports


class UsageError(Exception):
    """A command-line mistake caught by argparse; ``prog`` names the (sub)command.

    >>> build_parser().parse_args(["decode", "0x3C00", "--no-such-option"])
    Traceback (most recent call last):
    ...
    floatlab.cli.UsageError: unrecognized arguments: --no-such-option
    """

    def __init__(self, message: str, prog: str) -> None:
        super().__init__(message)
        self.prog = prog


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises instead of printing usage and exiting, so that ``main``
    can report every mistake as one line."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, self.prog)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every command of :data:`COMMANDS`.

    >>> build_parser().parse_args(["formats", "fp16"]).fmt
    'fp16'
    """
    from floatlab import __version__

    parser = _Parser(
        prog="floatlab",
        description="See, bit by bit, what low-precision floating point does to numbers.",
        epilog="Run 'floatlab COMMAND --help' for a command's options; 'floatlab demo' for a tour.",
    )
    parser.add_argument("--version", action="version", version=f"floatlab {__version__}")
    add_common_options(parser)
    sub = parser.add_subparsers(title="commands", dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.register(sub)
    return parser


#: the longest error line (a 130 kB input echoed whole would flood the terminal)
_MESSAGE_LIMIT = 1000


def _one_line(text: str) -> str:
    """``text`` as one safe line: whitespace runs are one space, control characters (from a file
    or array name, say) are escaped, and an absurdly long message is cut."""
    return safe(" ".join(str(text).split()), limit=_MESSAGE_LIMIT)


def _error(message: str) -> int:
    if sys.stderr is not None:  # (closed: the exit status alone tells)
        sys.stderr.write(f"floatlab: error: {_one_line(message)}\n")
        sys.stderr.flush()
    return EXIT_USAGE


def _silence_stdout() -> None:
    """After a broken pipe, point stdout at /dev/null so the interpreter's final flush is quiet."""
    stdout = sys.__stdout__
    if stdout is None or sys.stdout is not stdout:
        return
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stdout.fileno())
    except (OSError, ValueError):
        pass


# the start of a floatlab.train.history.TrainingFaultWarning (matched by message: importing the
# trainer here would slow every command down)
_FAULT_MESSAGE = r"step \d+: "


@contextlib.contextmanager
def _one_line_warnings() -> Iterator[list[str]]:
    """Training faults are warnings in Python; on the command line each is one line on stderr,
    ``floatlab: warning: ...``, and the command goes on. Any other warning (numpy's
    RuntimeWarning, torch's UserWarning) is held back: the yielded list gets its one-line text,
    for ``main`` to print when the command succeeds and to drop when it ends in an error (whose
    one line says what went wrong)."""
    held: list[str] = []
    with warnings.catch_warnings():
        warnings.filterwarnings("always", message=_FAULT_MESSAGE, category=RuntimeWarning)
        original = warnings.showwarning

        def show(
            message: Warning | str,
            category: type[Warning],
            filename: str,
            lineno: int,
            file: TextIO | None = None,
            line: str | None = None,
        ) -> None:
            if category.__name__ == "TrainingFaultWarning":
                sys.stderr.write(f"floatlab: warning: {_one_line(str(message))}\n")
            elif file is not None:
                original(message, category, filename, lineno, file, line)
            else:
                text = f"floatlab: warning: {_one_line(f'{category.__name__}: {message}')}"
                if text not in held:
                    held.append(text)

        warnings.showwarning = show
        yield held


def main(argv: list[str] | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); return the exit status.

    >>> main(["formats", "no-such-format"])
    2
    """
    try:
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as exit_:  # --help and --version print and exit 0
            return exit_.code if isinstance(exit_.code, int) else 0
        if getattr(args, "run", None) is None:
            names = ", ".join(c.NAME for c in COMMANDS)
            return _error(f"missing command: expected one of {names} (see 'floatlab --help')")
        ui = UI(color=want_color(getattr(args, "color", None)), json=getattr(args, "json", False))
        with _one_line_warnings() as held:
            status: int = args.run(args, ui)
        for text in held:  # the command succeeded: its warnings may matter
            sys.stderr.write(text + "\n")
        return status
    except UsageError as e:
        hint = f" (see '{e.prog} --help')"
        return _error(f"{e}{hint}")
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except (ValueError, OSError, ArithmeticError) as e:
        return _error(str(e) or type(e).__name__)
    except MemoryError:
        return _error("not enough memory for this input: expected smaller arrays or counts")
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # a bug: still one line, and a status of its own (1) that tests look for
        _error(f"internal error: {type(e).__name__}: {e} (a bug in floatlab: please report it)")
        return EXIT_INTERNAL
