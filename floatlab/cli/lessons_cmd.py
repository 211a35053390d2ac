"""``floatlab lessons [DIR]``: copy the Jupyter lessons into a working folder and open JupyterLab there.

The lessons ship inside the package (``floatlab/lessons`` in a wheel; ``notebooks/`` beside the
package in a source checkout). Copying never overwrites a lesson already in the folder, so a
learner's notes survive a second run; ``--force`` restores the originals. A copy never writes
through a symbolic link: a link in the lesson's place is kept, or with ``--force`` replaced by
the file; its target is never touched.

JupyterLab listens on 127.0.0.1 and asks for a token: the one in the environment variable
``FLOATLAB_LESSONS_TOKEN``, else a random one. The token goes to JupyterLab through its
environment (``JUPYTER_TOKEN``), never its command line, which every user can read with ``ps``.
``--no-token`` turns the token off, with a warning; ``--token T`` still works but warns (floatlab's
own command line shows it), and an empty token is refused.

>>> from floatlab.cli import main
>>> main(["lessons", "--list", "--no-color"])  # doctest: +ELLIPSIS
  lesson                                         title
  01-anatomy-of-a-float.ipynb                    Lesson 1: The anatomy of a float
  ...
  09-precision-in-a-language-model.ipynb         Lesson 9: Precision in a language model
  10-framework-recipes-side-by-side.ipynb        Lesson 10: The frameworks' recipes side by side
  11-fp8-training.ipynb                          Lesson 11: fp8 training
  12-4bit-training.ipynb                         Lesson 12: 4-bit training
  13-your-own-model.ipynb                        Lesson 13: Your own PyTorch model
0
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import secrets
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from floatlab.cli._common import UI, View, checked_number, command_register
from floatlab.io import atomic_output
from floatlab.text import bold, table

__all__ = [
    "DEFAULT_DIR",
    "NAME",
    "TOKEN_VARIABLE",
    "CopyReport",
    "copy_lessons",
    "lab_command",
    "lab_environment",
    "lesson_files",
    "lesson_title",
    "lessons_dir",
    "register",
    "run",
]

NAME = "lessons"
DEFAULT_DIR = "floatlab-lessons"
_PATTERN = "[0-9][0-9]-*.ipynb"
#: the environment variable that holds the token JupyterLab asks for
TOKEN_VARIABLE = "FLOATLAB_LESSONS_TOKEN"

_HELP = "copy the Jupyter lessons into a folder and start JupyterLab there"
_DESCRIPTION = """\
Copy floatlab's Jupyter lessons into DIR (lessons already there are kept) and
start JupyterLab on 127.0.0.1 in that folder. JupyterLab comes with the 'lessons' extra:
pip install 'floatlab[lessons]'."""
_EPILOG = """\
examples:
  floatlab lessons                       copy into ./floatlab-lessons and start JupyterLab there
  floatlab lessons ~/fp-course           another folder
  floatlab lessons --list                the lessons and their titles
  floatlab lessons --copy-only           copy, do not start JupyterLab
  floatlab lessons --no-browser --port 8899
  FLOATLAB_LESSONS_TOKEN=... floatlab lessons   a token of your choice (default: a random one)
"""


def lessons_dir(package_dir: Path | None = None) -> Path:
    """The folder holding the shipped lessons: ``lessons/`` inside the package (an installed
    wheel), else ``notebooks/`` beside it (a source checkout, an editable install).

    >>> lessons_dir().is_dir()
    True
    """
    pkg = Path(__file__).resolve().parent.parent if package_dir is None else Path(package_dir)
    candidates = (pkg / "lessons", pkg.parent / "notebooks")
    for folder in candidates:
        if folder.is_dir() and any(folder.glob(_PATTERN)):
            return folder
    looked = " and ".join(str(c) for c in candidates)
    raise ValueError(
        f"no lessons found in {looked}: expected NN-title.ipynb files (is floatlab fully installed?)"
    )


def lesson_files(folder: Path | None = None) -> list[Path]:
    """The lessons, in order (``01-...ipynb``, ``02-...ipynb``, ...).

    >>> [p.name for p in lesson_files()][0]
    '01-anatomy-of-a-float.ipynb'
    """
    return sorted((lessons_dir() if folder is None else folder).glob(_PATTERN))


def lesson_title(path: Path) -> str:
    """The first heading of a notebook's first Markdown cell (the file name when it has none).

    >>> lesson_title(lesson_files()[0]).startswith("Lesson 1")
    True
    """
    try:
        nb = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ValueError(f"cannot read notebook {str(path)!r}: {e}") from None
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "markdown":
            source = cell.get("source", "")
            text = "".join(source) if isinstance(source, list) else str(source)
            for line in text.splitlines():
                if line.startswith("#"):
                    return line.lstrip("#").strip()
            break
    return Path(path).stem


@dataclass(frozen=True)
class CopyReport:
    """What :func:`copy_lessons` did: the folder, and the lessons it copied or left as they were."""

    folder: Path
    copied: tuple[str, ...]
    kept: tuple[str, ...]


def copy_lessons(dest: str | Path, *, force: bool = False, source: Path | None = None) -> CopyReport:
    """Copy the lessons into ``dest`` (created if needed); a lesson already there is kept unless
    ``force``.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     first, again = copy_lessons(tmp), copy_lessons(tmp)
    >>> len(first.copied) >= 8, again.copied, len(again.kept) == len(first.copied)
    (True, (), True)
    """
    folder = Path(dest).expanduser()
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{str(folder)!r} is a file: expected a folder to copy the lessons into")
    files = lesson_files(source)
    folder.mkdir(parents=True, exist_ok=True)
    copied, kept = [], []
    for src in files:
        target = folder / src.name
        # (lexists: a dangling link is there too; the copy replaces a link, never writes through it)
        if os.path.lexists(target) and not force:
            kept.append(src.name)
            continue
        with atomic_output(target) as tmp:
            shutil.copyfile(src, tmp)
        copied.append(src.name)
    return CopyReport(folder.resolve(), tuple(copied), tuple(kept))


def lab_command(
    folder: Path,
    *,
    port: int | None = None,
    open_browser: bool = True,
    no_token: bool = False,
    first: str | None = None,
) -> list[str]:
    """The command that starts JupyterLab on loopback in ``folder`` (opening ``first`` if given).
    The token is not on it (see :func:`lab_environment`); ``no_token`` turns it off.

    >>> lab_command(Path("/tmp/l"), port=8899, open_browser=False)[1:4]
    ['-m', 'jupyterlab', '--ServerApp.root_dir=/tmp/l']
    """
    cmd = [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={folder}", "--ServerApp.ip=127.0.0.1"]
    if port is not None:
        # a port asked for is that port or an error, not the next free one
        cmd += [f"--ServerApp.port={port}", "--ServerApp.port_retries=0"]
    if not open_browser:
        cmd.append("--no-browser")
    if no_token:
        cmd.append("--IdentityProvider.token=")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        # root is the usual user in a container; the server listens on loopback only
        cmd.append("--allow-root")
    if first is not None:
        cmd.append(str(folder / first))
    return cmd


def lab_environment(
    environ: dict[str, str] | None = None, *, token: str | None = None, no_token: bool = False
) -> dict[str, str]:
    """The environment JupyterLab runs in: ``environ`` (default ``os.environ``) with its token in
    ``JUPYTER_TOKEN``: ``token`` if given, else the one in ``FLOATLAB_LESSONS_TOKEN``, else one
    drawn at random (a process's environment, unlike its command line, is private to its user).
    An empty token is refused: it would turn authentication off without a word.

    >>> lab_environment({"FLOATLAB_LESSONS_TOKEN": "s3cret"})["JUPYTER_TOKEN"]
    's3cret'
    >>> len(lab_environment({})["JUPYTER_TOKEN"]) >= 32
    True
    >>> lab_environment({"FLOATLAB_LESSONS_TOKEN": ""})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: FLOATLAB_LESSONS_TOKEN is empty: expected a token ...
    """
    env = dict(os.environ if environ is None else environ)
    env.pop("JUPYTER_TOKEN", None)
    if no_token:
        return env
    if token is not None and not token.strip():
        raise ValueError(
            f"--token {token!r} is empty: expected a token (better: set {TOKEN_VARIABLE}, which ps does "
            "not show; --no-token turns the token off)"
        )
    token = env.get(TOKEN_VARIABLE) if token is None else token
    if token is not None and not token.strip():
        raise ValueError(
            f"{TOKEN_VARIABLE} is empty: expected a token (or unset it for a random one; "
            "--no-token turns the token off)"
        )
    env["JUPYTER_TOKEN"] = token if token is not None else secrets.token_urlsafe(32)
    return env


def _port(text: str) -> int:
    error = f"invalid port {text!r}: expected an integer from 1 to 65535"
    return checked_number(text, int, lambda port: 1 <= port <= 65535, error)


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "dir", nargs="?", default=DEFAULT_DIR, metavar="DIR", help=f"working folder (default {DEFAULT_DIR})"
    )
    p.add_argument("--list", action="store_true", help="list the lessons and exit")
    p.add_argument("--copy-only", action="store_true", help="copy the lessons, do not start JupyterLab")
    p.add_argument("--force", action="store_true", help="overwrite lessons already in DIR with the originals")
    p.add_argument("--port", type=_port, help="serve JupyterLab on this port (default: Jupyter's choice)")
    p.add_argument("--no-browser", action="store_true", help="do not open a web browser")
    p.add_argument(
        "--no-token",
        action="store_true",
        help=f"serve without a token (any local user may then run code as you); default: the token in "
        f"{TOKEN_VARIABLE}, else a random one",
    )
    p.add_argument(
        "--token",
        help=f"the token JupyterLab asks for; it shows in ps: prefer the variable {TOKEN_VARIABLE}",
    )


def list_view(*, color: bool = False) -> View:
    """The lessons and their titles.

    >>> list_view().data[0]["file"]
    '01-anatomy-of-a-float.ipynb'
    """
    files = lesson_files()
    data: list[dict[str, Any]] = [{"file": f.name, "title": lesson_title(f)} for f in files]
    return View(table(["lesson", "title"], [[d["file"], d["title"]] for d in data], color=color), data)


def _copy_view(report: CopyReport, color: bool) -> View:
    lines = [bold(f"Lessons in {report.folder}", color)]
    if report.copied:
        lines.append(f"  copied  {', '.join(report.copied)}")
    if report.kept:
        lines.append(f"  kept    {', '.join(report.kept)} (already there; --force restores the originals)")
    data = {"folder": str(report.folder), "copied": list(report.copied), "kept": list(report.kept)}
    return View("\n".join(lines), data)


def run(args: argparse.Namespace, ui: UI) -> int:
    """List, copy, and start JupyterLab (unless ``--list`` or ``--copy-only``)."""
    if args.list:
        ui.show(list_view(color=ui.color))
        return 0
    if args.token is not None and args.no_token:
        raise ValueError("--token and --no-token: give one of them")
    # an empty token is refused before anything is copied
    env = lab_environment(token=args.token, no_token=args.no_token) if not args.copy_only else None
    report = copy_lessons(args.dir, force=args.force)
    ui.show(_copy_view(report, ui.color))
    if args.copy_only:
        return 0
    if importlib.util.find_spec("jupyterlab") is None:
        raise ValueError(
            "JupyterLab is not installed: expected it from pip install 'floatlab[lessons]' "
            "(or run with --copy-only and open the lessons in another Jupyter)"
        )
    files = lesson_files(report.folder)
    cmd = lab_command(
        report.folder,
        port=args.port,
        open_browser=not args.no_browser,
        no_token=args.no_token,
        first=files[0].name if files else None,
    )
    if args.no_token:
        sys.stderr.write(
            "floatlab: warning: --no-token: JupyterLab asks for no token; "
            "other local users may run code as you\n"
        )
    elif args.token is not None:
        sys.stderr.write(
            f"floatlab: warning: --token shows in every user's ps while floatlab runs; set {TOKEN_VARIABLE} "
            "instead\n"
        )
    return subprocess.call(cmd, env=env)


register = command_register(NAME, _HELP, _DESCRIPTION, _EPILOG, run, _arguments)
