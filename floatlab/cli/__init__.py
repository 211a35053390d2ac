"""The ``floatlab`` command line.

Each command lives in a module with ``NAME``, ``register(subparsers)`` (adds its parser and sets
``run`` as its default) and ``run(args, ui) -> int``; a module may hold several commands. A new
command is one module and one :class:`Command` in :data:`COMMANDS`: its name, its module and its
one-line help. A command that prints one answer builds its ``register`` with
:func:`~floatlab.cli._common.command_register` from its texts and a function that adds its own
arguments. The list names modules without importing them: ``floatlab --help`` shows every
command from the list alone, and :func:`main` imports only the module of the command it runs (or
whose ``--help`` it prints), so that ``floatlab decode`` never loads the trainer. Command modules
import only light things at module level; anything heavy (numba kernels, matplotlib, sympy) is
imported inside the ``run`` that needs it.

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
import importlib
import os
import sys
import warnings
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import NoReturn, TextIO

from floatlab.cli._common import UI, add_common_options, want_color
from floatlab.text import safe

__all__ = [
    "COMMANDS",
    "EXIT_BROKEN_PIPE",
    "EXIT_INTERNAL",
    "EXIT_USAGE",
    "Command",
    "UsageError",
    "build_parser",
    "main",
]


@dataclass(frozen=True)
class Command:
    """One command of :data:`COMMANDS`, known without importing its module: its ``NAME``, the
    ``module`` whose ``register`` adds it (with its options) and its one-line ``help`` for
    ``floatlab --help`` (the same text ``register`` gives; a test holds them equal).

    >>> cmd = Command("decode", "floatlab.cli.decode", "show what one or more codes (bit patterns) mean")
    >>> cmd.load().NAME
    'decode'
    """

    NAME: str
    module: str
    help: str

    def load(self) -> ModuleType:
        """The command's module, imported on first use."""
        return importlib.import_module(self.module)


# the commands, in the order `floatlab --help` lists them (a module's commands in its own order)
COMMANDS: tuple[Command | ModuleType, ...] = (
    Command("decode", "floatlab.cli.decode", "show what one or more codes (bit patterns) mean"),
    Command("encode", "floatlab.cli.encode", "show how a value is stored in one or more formats"),
    Command("formats", "floatlab.cli.formats", "list the formats side by side, or show one in detail"),
    Command(
        "add",
        "floatlab.cli.simulate_cmds",
        "explain a + b in a format: stored operands, exact sum, what rounding kept",
    ),
    Command("round", "floatlab.cli.simulate_cmds", "round a value, or a .npy array, into a format"),
    Command(
        "underflow",
        "floatlab.cli.simulate_cmds",
        "count the values of a .npy array that flush, turn subnormal or overflow in a format",
    ),
    Command(
        "accumulate",
        "floatlab.cli.simulate_cmds",
        "sum N copies of a value (or a .npy array) in a format: stagnation and overflow",
    ),
    Command(
        "histogram",
        "floatlab.cli.histogram_cmd",
        "count gradients by exponent: what flushes, turns subnormal or overflows in a format",
    ),
    Command(
        "blockquant",
        "floatlab.cli.blockquant_cmd",
        "quantize a .npy array into block formats (MX, NVFP4): what flushes, saturates, the error",
    ),
    Command(
        "train",
        "floatlab.cli.train_cmds",
        "train a model in a precision policy and report what the format did",
    ),
    Command(
        "compare",
        "floatlab.cli.compare_cmd",
        "train several precision policies with the same seed and compare them",
    ),
    Command(
        "sweep",
        "floatlab.cli.sweep_cmd",
        "train a grid of runs (policies x seeds x options) and give 95%% confidence intervals",
    ),
    Command(
        "sample",
        "floatlab.cli.sample_cmd",
        "write text with a character model trained by 'floatlab train --data text'",
    ),
    Command(
        "presets",
        "floatlab.cli.presets_cmd",
        "list the frameworks' mixed-precision recipes (presets), or show one",
    ),
    Command(
        "memory",
        "floatlab.cli.memory_cmd",
        "the bytes of a training step (weights, master weights, gradients, optimizer state, "
        "activations) in a policy's formats",
    ),
    Command(
        "bench",
        "floatlab.cli.bench_cmd",
        "measure GEMM TFLOP/s per format and trainer step times, on numpy or a CUDA GPU",
    ),
    Command("demo", "floatlab.cli.demo", "a short tour of floatlab"),
    Command(
        "lessons",
        "floatlab.cli.lessons_cmd",
        "copy the Jupyter lessons into a folder and start JupyterLab there",
    ),
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


def build_parser(commands: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The argument parser with every command of :data:`COMMANDS`.

    With ``commands`` (names), only the modules of those commands are imported and their
    commands given their options; every other command is listed by name and one-line help, enough
    for ``floatlab --help``, and takes no arguments. Without, every command is complete (what the
    CLI reference walks).

    >>> build_parser().parse_args(["formats", "fp16"]).fmt
    'fp16'
    >>> build_parser(["decode"]).parse_args(["decode", "0x3C00"]).codes
    ['0x3C00']
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
    complete = {
        _module_name(c)
        for c in COMMANDS
        if commands is None or not isinstance(c, Command) or c.NAME in commands
    }
    # a module registers all its commands at once, so a module comes in whole or by names alone;
    # one listed twice (a test may append a command module itself) comes in once
    added: set[str] = set()
    for command in COMMANDS:
        module = _module_name(command)
        if isinstance(command, Command) and module not in complete:
            sub.add_parser(command.NAME, help=command.help)
        elif module not in added:
            (command.load() if isinstance(command, Command) else command).register(sub)
        added.add(module)
    return parser


def _module_name(command: Command | ModuleType) -> str:
    return command.module if isinstance(command, Command) else command.__name__


def _command_asked(argv: Sequence[str]) -> str | None:
    """The command ``argv`` runs: its first word that is not an option, since floatlab's own
    options (``--json``, ``--color``, ``--version``, ``--help``) take no values. A word that is no
    command is still refused by the parser, with the list of commands.

    >>> _command_asked(["--json", "decode", "0x7bff"]), _command_asked(["--help"])
    ('decode', None)
    """
    return next((word for word in argv if not word.startswith("-")), None)


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
        words = sys.argv[1:] if argv is None else argv
        asked = _command_asked(words)
        parser = build_parser(() if asked is None else (asked,))
        try:
            args = parser.parse_args(words)
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
