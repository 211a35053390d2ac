"""The lessons in the site, and tables of contents that follow what the checkout holds.

At the start of each build the notebooks of ``../notebooks`` are copied into ``docs/lessons`` (a
copy is rewritten only when its notebook changed, and a copy whose notebook is gone is removed),
so that the site renders whatever lessons the checkout has. ``{floatlab-lessons}`` lists them
with the question each one opens with; the role ``{lesson}`01``` links to lesson 01 by its number
(and fails the build when there is no such lesson); ``{floatlab-toctree}`` is a toctree that
leaves out entries whose page does not exist (yet).
"""

from __future__ import annotations

import json
import posixpath
import re
import shutil
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from sphinx import addnodes
from sphinx.directives.other import TocTree
from sphinx.util.docutils import SphinxDirective, SphinxRole
from sphinx.util.matching import patfilter
from sphinx.util.nodes import explicit_title_re

ROOT = Path(__file__).resolve().parents[3]
NOTEBOOKS = ROOT / "notebooks"
LESSONS_DIR = "lessons"
_LESSON_NAME = re.compile(r"^(\d\d)-[a-z0-9-]+\.ipynb$")


def notebooks() -> list[Path]:
    """The lesson notebooks of the checkout (``notebooks/NN-title.ipynb``), in order."""
    if not NOTEBOOKS.is_dir():
        return []
    return sorted(p for p in NOTEBOOKS.glob("*.ipynb") if _LESSON_NAME.match(p.name))


def sync_lessons(srcdir: Path) -> list[Path]:
    """Copy the notebooks into ``srcdir/lessons``; remove copies whose notebook is gone. Returns
    the copies written."""
    folder = srcdir / LESSONS_DIR
    folder.mkdir(exist_ok=True)
    wanted = {nb.name: nb for nb in notebooks()}
    written = []
    for name, nb in wanted.items():
        copy = folder / name
        if not copy.exists() or copy.read_bytes() != nb.read_bytes():
            shutil.copyfile(nb, copy)
            written.append(copy)
    for copy in folder.glob("*.ipynb"):
        if copy.name not in wanted:
            copy.unlink()
    return written


def lesson_info(path: Path) -> tuple[str, str]:
    """The title of a lesson (its first heading) and its opening paragraph."""
    nb: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "markdown":
            continue
        source = cell.get("source", "")
        text = "".join(source) if isinstance(source, list) else str(source)
        title, intro = "", ""
        for block in re.split(r"\n\s*\n", text.strip()):
            block = block.strip()
            if not title and block.startswith("#"):
                title = block.splitlines()[0].lstrip("#").strip()
                rest = "\n".join(block.splitlines()[1:]).strip()
                if rest and not intro:
                    intro = rest
            elif not intro and block and not block.startswith(("#", "```", "<", "|", "!", "- ", "* ")):
                # a bold label ("**The question.**") says what the paragraph is; the table says it
                intro = re.sub(r"^\*\*[^*]{1,40}[.:]\*\*\s*", "", block)
            if title and intro:
                break
        if title:
            return title, " ".join(intro.split())
    return path.stem, ""


def _lesson_docs(found_docs: set[str]) -> list[str]:
    return sorted(
        d for d in found_docs if d.startswith(f"{LESSONS_DIR}/") and _LESSON_NAME.match(d[8:] + ".ipynb")
    )


_LISTING = re.compile(r"\{(floatlab-toctree|floatlab-lessons|lesson)\}")


def pages_listing_pages(srcdir: Path, docnames: set[str]) -> set[str]:
    """The pages whose content depends on which pages exist: they use ``{floatlab-toctree}``,
    ``{floatlab-lessons}`` or ``{lesson}``."""
    out = set()
    for doc in docnames:
        path = srcdir / f"{doc}.md"
        if path.exists() and _LISTING.search(path.read_text(encoding="utf-8")):
            out.add(doc)
    return out


class LessonsDirective(SphinxDirective):
    """``{floatlab-lessons}``: a table of the lessons with their opening question, and their toctree."""

    def run(self) -> list[nodes.Node]:
        docs = _lesson_docs(set(self.env.found_docs))
        if not docs:
            return [nodes.paragraph(text="This checkout holds no lessons: notebooks/ has no NN-title.ipynb.")]
        lines = ["| lesson | what it asks |", "|---|---|"]
        for doc in docs:
            title, intro = lesson_info(self.env.doc2path(doc))
            intro = intro.replace("|", "\\|")
            title = re.sub(r"[`<>]", "", title)
            lines.append(f"| {{doc}}`{title} </{doc}>` | {intro} |")
        lines += ["", "```{toctree}", ":hidden:", ":maxdepth: 1", ""]
        here = posixpath.dirname(self.env.docname)
        lines += [posixpath.relpath(doc, here or ".") for doc in docs]
        lines += ["```", ""]
        holder = nodes.container()
        self.state.nested_parse(StringList(lines, source=self.env.docname), self.content_offset, holder)
        return list(holder.children)


class LessonRole(SphinxRole):
    """``{lesson}`04``` links to lesson 04 with its title; ``{lesson}`a talk <04>``` with a title."""

    def run(self) -> tuple[list[nodes.Node], list[nodes.system_message]]:
        m = explicit_title_re.match(self.text)
        title, number = (m.group(1), m.group(2)) if m else (None, self.text.strip())
        docs = [d for d in _lesson_docs(set(self.env.found_docs)) if d[8:10] == number.zfill(2)]
        if len(docs) != 1:
            msg = self.inliner.reporter.warning(
                f"lesson {number!r}: expected one notebook notebooks/{number.zfill(2)}-*.ipynb, "
                f"found {len(docs)}",
                line=self.lineno,
            )
            return [nodes.literal(self.rawtext, f"lesson {number}")], [msg]
        doc = docs[0]
        if title is None:
            name, _ = lesson_info(self.env.doc2path(doc))
            title = name if name.lower().startswith("lesson") else f"Lesson {int(number)}: {name}"
        ref = addnodes.pending_xref(
            self.rawtext,
            nodes.inline(self.rawtext, title, classes=["xref", "std", "std-doc"]),
            refdomain="std",
            reftype="doc",
            reftarget=f"/{doc}",
            refexplicit=True,
            refwarn=True,
            refdoc=self.env.docname,
        )
        return [ref], []


class OptionalTocTree(TocTree):
    """A toctree that drops entries (and glob patterns) matching no page of the checkout."""

    def run(self) -> list[nodes.Node]:
        found = set(self.env.found_docs)
        glob = "glob" in self.options
        kept: list[str] = []
        for entry in self.content:
            text = entry.strip()
            if not text:
                continue
            m = explicit_title_re.match(text)
            target = m.group(2) if m else text
            name = (
                target[1:]
                if target.startswith("/")
                else posixpath.normpath(posixpath.join(posixpath.dirname(self.env.docname), target))
            )
            if glob and any(c in target for c in "*?["):
                if list(patfilter(found, name)):
                    kept.append(text)
            elif name in found:
                kept.append(text)
        if not kept:
            return []
        self.content = StringList(kept, source=self.env.docname)
        return super().run()
