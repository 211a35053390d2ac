"""The Sphinx extension that builds floatlab's documentation from floatlab itself.

* ``reference/api/*.md`` and ``reference/cli.md`` are generated at the start of each build (see
  :mod:`floatlab_sphinx.api` and :mod:`floatlab_sphinx.cli`), the notebooks copied into
  ``lessons/`` (:mod:`floatlab_sphinx.lessons`);
* directives draw format tables and bit diagrams, figures, command output and benchmark tables;
* a reference to any address of a documented object (``floatlab.codec.decode``) finds its one
  description (``floatlab.decode``);
* MathJax is served from the site itself when the ``sphinx-mathjax-offline`` package (MathJax 3
  as files) is installed, so that the formulas of the lessons render without a network.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.addnodes import pending_xref
from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.environment import BuildEnvironment

from floatlab_sphinx import api, bench, cli, commands, figures, formats, lessons

__all__ = ["setup"]

_STATE: dict[str, api.ApiIndex] = {}
_FOUND_DOCS = "floatlab_found_docs"


def _generate(app: Sphinx) -> None:
    srcdir = Path(app.srcdir)
    lessons.sync_lessons(srcdir)
    index = api.build_index()
    _STATE["api"] = index
    api.write_pages(srcdir, index)
    page = srcdir / cli.CLI_PAGE
    text = cli.reference_page()
    if not page.exists() or page.read_text(encoding="utf-8") != text:
        page.write_text(text, encoding="utf-8")


def _resolve(app: Sphinx, env: BuildEnvironment, node: pending_xref, contnode: nodes.TextElement) -> Any:
    if node.get("refdomain") != "py":
        return None
    target = node.get("reftarget", "")
    if not target.startswith("floatlab"):
        # an unqualified name written inside a floatlab module (":func:`decode`" in codec.py)
        module = node.get("py:module") or ""
        if not module.startswith("floatlab"):
            return None
        target = f"{module}.{target}"
    index = _STATE.get("api")
    if index is None:
        return None
    canonical = api.resolve_alias(index, target)
    if canonical is not None and canonical != node.get("reftarget"):
        domain = env.get_domain("py")
        return domain.resolve_xref(
            env, node["refdoc"], app.builder, node["reftype"], canonical, node, contnode
        )
    if api.names_private_object(target):
        return contnode  # private modules are left out of the reference: shown, not linked
    return None


def _reread_when_pages_come_and_go(
    app: Sphinx, env: BuildEnvironment, added: set[str], changed: set[str], removed: set[str]
) -> list[str]:
    # the optional toctrees, the list of lessons and the lesson links depend on which pages
    # exist: when a page appeared or went since the last build that read them (a new lesson,
    # guarantees.md), read them again
    found = sorted(env.found_docs)
    if getattr(env, _FOUND_DOCS, None) == found:
        return []
    setattr(env, _FOUND_DOCS, found)  # kept with the pickled environment
    return sorted(lessons.pages_listing_pages(Path(app.srcdir), env.found_docs))


def _drop_scratch(app: Sphinx, doctree: nodes.document) -> None:
    commands.cleanup(app.env.docname)


def _cleanup(app: Sphinx, exception: BaseException | None) -> None:
    commands.cleanup()


_MATHJAX_PACKAGE = "sphinx-mathjax-offline"  # MathJax 3, as files: the site renders math offline


def _mathjax_files() -> Path | None:
    spec = importlib.util.find_spec(_MATHJAX_PACKAGE)
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent / "static" / "mathjax"
    return folder if (folder / "tex-chtml.js").exists() else None


def _use_local_mathjax(app: Sphinx, config: Config) -> None:
    if _mathjax_files() is not None:
        config.mathjax_path = "mathjax/tex-chtml.js"


def _copy_mathjax(app: Sphinx, exception: BaseException | None) -> None:
    source = _mathjax_files()
    if exception is None and source is not None and app.builder.format == "html":
        target = Path(app.outdir) / "_static" / "mathjax"
        if not (target / "tex-chtml.js").exists():
            shutil.copytree(source, target, dirs_exist_ok=True)


def setup(app: Sphinx) -> dict[str, Any]:
    """Register the directives, the role, the page generators and the reference resolver."""
    app.add_directive("floatlab-format", formats.FormatDirective)
    app.add_directive("floatlab-formats-table", formats.FormatsTableDirective)
    app.add_directive("floatlab-decode", formats.DecodeDirective)
    app.add_directive("floatlab-figure", figures.FigureDirective)
    app.add_directive("floatlab-command", commands.CommandDirective)
    app.add_directive("floatlab-bench-results", bench.BenchResultsDirective)
    app.add_directive("floatlab-lessons", lessons.LessonsDirective)
    app.add_directive("floatlab-toctree", lessons.OptionalTocTree)
    app.add_role("lesson", lessons.LessonRole())
    app.connect("builder-inited", _generate)
    app.connect("missing-reference", _resolve)
    app.connect("env-get-outdated", _reread_when_pages_come_and_go)
    app.connect("doctree-read", _drop_scratch)
    app.connect("build-finished", _cleanup)
    app.connect("config-inited", _use_local_mathjax)
    app.connect("build-finished", _copy_mathjax)
    # pages are read in separate processes with -j: the API index is built before they fork,
    # figures and scratch folders live per process and are removed by the process that made them
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
