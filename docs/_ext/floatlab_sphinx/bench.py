"""The benchmark tables of ``benchmarks/results``, shown as committed, with how to reproduce them.

``{floatlab-bench-results}`` includes every Markdown table file of ``benchmarks/results`` that
its options select (``:match: gpu-*``, ``:exclude: exhaustive.md fuzz.md``; several patterns are
separated by spaces), each under its own
heading, preceded by the command that writes it: the ``benchmarks/`` script that names the file.
A results file added by a new benchmark appears without any change to the documentation.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from docutils import nodes
from docutils.parsers.rst import directives
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective

ROOT = Path(__file__).resolve().parents[3]
RESULTS = ROOT / "benchmarks" / "results"
_HEADING = re.compile(r"^(#{1,6})\s")


def select(match: tuple[str, ...] = ("*.md",), exclude: tuple[str, ...] = ()) -> list[Path]:
    """The results files that a pattern of ``match`` selects and no pattern of ``exclude``
    removes, by name."""
    if not RESULTS.is_dir():
        return []
    return sorted(
        p
        for p in RESULTS.glob("*.md")
        if any(fnmatch.fnmatch(p.name, m) for m in match)
        and not any(fnmatch.fnmatch(p.name, x) for x in exclude)
    )


def writer_of(result: Path) -> str | None:
    """The script under ``benchmarks/`` that writes ``result``: ``bench_<stem>.py`` when it
    exists, else the one script whose source names the file."""
    bench = ROOT / "benchmarks"
    direct = bench / f"bench_{result.stem}.py"
    if direct.exists():
        return direct.relative_to(ROOT).as_posix()
    naming = [p for p in sorted(bench.glob("*.py")) if result.name in p.read_text(encoding="utf-8")]
    if len(naming) == 1:
        return naming[0].relative_to(ROOT).as_posix()
    # a family of results named after what they ran on: gpu-<device>.md from bench_gpu.py
    family = bench / f"bench_{result.stem.split('-')[0]}.py"
    return family.relative_to(ROOT).as_posix() if family.exists() else None


def demote(markdown: str, level: int) -> list[str]:
    """The lines of ``markdown`` with its headings moved so that its top heading is at ``level``."""
    lines = markdown.splitlines()
    levels = [len(m.group(1)) for line in lines if (m := _HEADING.match(line))]
    shift = level - min(levels) if levels else 0
    out = []
    for line in lines:
        m = _HEADING.match(line)
        out.append("#" * (len(m.group(1)) + shift) + line[len(m.group(1)) :] if m else line)
    return out


class BenchResultsDirective(SphinxDirective):
    """``{floatlab-bench-results}``: the selected results files, each with its reproduce line."""

    option_spec: ClassVar[dict[str, Callable[[str], Any]]] = {
        "match": directives.unchanged,
        "exclude": directives.unchanged,
        "level": directives.positive_int,
        "empty": directives.unchanged,
    }

    def run(self) -> list[nodes.Node]:
        exclude = tuple(self.options.get("exclude", "").split())
        files = select(tuple(self.options.get("match", "*.md").split()), exclude)
        level = self.options.get("level", 3)
        lines: list[str] = []
        for path in files:
            self.env.note_dependency(str(path))
            body = demote(path.read_text(encoding="utf-8"), level)
            if not body or not _HEADING.match(body[0]):
                body = [f"{'#' * level} {path.stem}", "", *body]
            script = writer_of(path)
            where = f"`benchmarks/results/{path.name}`"
            how = f"Reproduce with `python {script}`; it rewrites {where}." if script else f"From {where}."
            lines += [body[0], "", how, "", *body[1:], ""]
        if not files:
            lines = [self.options.get("empty", "No results files match."), ""]
        container = nodes.container(classes=["floatlab-bench"])
        self.state.nested_parse(StringList(lines, source=str(RESULTS)), 0, container, match_titles=True)
        return list(container.children)
