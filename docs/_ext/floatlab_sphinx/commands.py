"""Real command output in the pages: ``{floatlab-command}`` runs ``floatlab`` while the site builds.

The directive's argument is the command line as a reader types it; the command runs in-process
through :func:`floatlab.cli.main` in a scratch folder shared by the page (so a page can write an
input file with one command's setup and read it in the next), and the page shows the line and
what it printed. A command that fails, or exits with another status than ``:status:`` says,
fails the build: the pages cannot drift from the program.

Options: ``:requires: torch`` shows a note instead of the output where a module is missing;
``:setup:`` (flag) runs the directive's content, Python, in the scratch folder first
(and ``:show-setup:`` shows it above the command); ``:lines: 1-8,20-`` keeps those lines of the
output (1-based, inclusive), marking each cut with ``...``; ``:status: N`` expects that exit status.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import re
import shlex
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.environment import BuildEnvironment
from sphinx.util.docutils import SphinxDirective

_FOLDERS: dict[str, Path] = {}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def note_floatlab_sources(env: BuildEnvironment) -> None:
    """Make the current page depend on floatlab's sources: an incremental build re-reads it (and
    reruns what it shows) whenever the library changes."""
    import floatlab

    for path in sorted(Path(floatlab.__file__).parent.rglob("*.py")):
        env.note_dependency(str(path))


def scratch(docname: str) -> Path:
    """The scratch folder of one page (created on first use, removed when the build ends)."""
    if docname not in _FOLDERS:
        _FOLDERS[docname] = Path(tempfile.mkdtemp(prefix="floatlab-docs-"))
    return _FOLDERS[docname]


def cleanup(docname: str | None = None) -> None:
    """Remove the scratch folder of ``docname`` (default: every scratch folder)."""
    for name in [docname] if docname is not None else list(_FOLDERS):
        folder = _FOLDERS.pop(name, None)
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


def select_lines(text: str, spec: str) -> str:
    """Keep the lines of ``text`` that ``spec`` names ("1-3,7,10-"), with "..." at each cut.

    >>> select_lines("a\\nb\\nc\\nd\\ne", "1-2,5")
    'a\\nb\\n...\\ne'
    >>> select_lines("a\\nb\\nc", "2-")
    '...\\nb\\nc'
    """
    lines = text.splitlines()
    keep: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d*))?", part)
        if not m:
            raise ValueError(f"lines {spec!r}: expected ranges like 1-8,20- (part {part!r})")
        lo = int(m.group(1))
        hi = lo if m.group(2) is None else (int(m.group(2)) if m.group(2) else len(lines))
        keep.update(range(lo, hi + 1))
    out: list[str] = []
    previous = 0
    for i, line in enumerate(lines, start=1):
        if i in keep:
            if i != previous + 1:
                out.append("...")
            out.append(line)
            previous = i
    if previous != len(lines) and out and out[-1] != "...":
        out.append("...")
    return "\n".join(out)


def run_floatlab(argv: list[str], cwd: Path) -> tuple[int, str, str]:
    """Run ``floatlab argv`` in-process in ``cwd``; return the exit status, stdout and stderr."""
    from floatlab.cli import main

    out, err = io.StringIO(), io.StringIO()
    here = Path.cwd()
    env_color = os.environ.get("NO_COLOR")
    os.environ["NO_COLOR"] = "1"  # the page shows plain text
    try:
        os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main(argv)
    finally:
        os.chdir(here)
        if env_color is None:
            os.environ.pop("NO_COLOR", None)
        else:
            os.environ["NO_COLOR"] = env_color
    return status, _ANSI.sub("", out.getvalue()), _ANSI.sub("", err.getvalue())


class CommandDirective(SphinxDirective):
    """``{floatlab-command} floatlab decode 0x7bff``: the command and its real output."""

    required_arguments = 1
    final_argument_whitespace = True
    has_content = True
    option_spec: ClassVar[dict[str, Callable[[str], Any]]] = {
        "setup": directives.flag,
        "show-setup": directives.flag,
        "lines": directives.unchanged,
        "status": directives.nonnegative_int,
        "stderr": directives.flag,
        "requires": directives.unchanged,
    }

    def run(self) -> list[nodes.Node]:
        line = self.arguments[0].strip()
        argv = shlex.split(line)
        if not argv or argv[0] != "floatlab":
            raise self.error(f"command {line!r}: expected a line starting with 'floatlab'")
        missing = [m for m in self.options.get("requires", "").split() if importlib.util.find_spec(m) is None]
        if missing:
            # an optional dependency (torch) that this environment lacks: say so on the page
            note = nodes.note()
            note += nodes.paragraph(
                text=f"The output of `{line}` is not shown: it needs {', '.join(missing)}, "
                "which was not installed where this page was built."
            )
            return [nodes.literal_block(line, f"$ {line}", language="console"), note]
        note_floatlab_sources(self.env)
        cwd = scratch(self.env.docname)
        result: list[nodes.Node] = []
        if "setup" in self.options or "show-setup" in self.options:
            code = "\n".join(self.content)
            here = Path.cwd()
            try:
                os.chdir(cwd)
                exec(compile(code, f"<setup of {self.env.docname}>", "exec"), {"__name__": "__setup__"})
            except Exception as e:
                raise self.error(f"the setup of {line!r} failed: {type(e).__name__}: {e}") from e
            finally:
                os.chdir(here)
            if "show-setup" in self.options:
                block = nodes.literal_block(code, code, language="python")
                result.append(block)
        status, out, err = run_floatlab(argv[1:], cwd)
        expected = self.options.get("status", 0)
        if status != expected:
            raise self.error(
                f"{line!r} exited with status {status}, expected {expected}: {err.strip() or out.strip()}"
            )
        shown = (out + err) if "stderr" in self.options else out
        shown = shown.rstrip("\n")
        if "lines" in self.options:
            try:
                shown = select_lines(shown, self.options["lines"])
            except ValueError as e:
                raise self.error(str(e)) from e
        text = f"$ {line}\n{shown}"
        block = nodes.literal_block(text, text, language="console", classes=["floatlab-output"])
        result.append(block)
        return result
