"""Sphinx configuration of the floatlab documentation.

``make docs`` builds the site into ``docs/_build/html``, executing the lessons and the pages with
code cells (myst-nb, cached under ``docs/_build/.jupyter_cache``). ``make docs-check`` builds it
with warnings as errors and every reference checked, executing nothing (the notebook tests run the
lessons and ``tests/suites/test_docs.py`` the pages' code cells): set ``FLOATLAB_DOCS_EXECUTE=pages`` to
execute the pages in the build too.

The pages that describe the library are generated from it at build time by the extension in
``_ext/floatlab_sphinx``: the API reference from ``__all__``, the CLI reference from the argument
parser, the format tables and bit diagrams from the format registry, the figures and the command
output from floatlab itself, the lessons from ``../notebooks`` and the performance tables from
``../benchmarks/results``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(DOCS / "_ext"))
sys.path.insert(0, str(ROOT))

import floatlab  # noqa: E402  (after the path set-up, so that a plain checkout builds)

# ---- project -------------------------------------------------------------------------------------
project = "floatlab"
author = "The floatlab developers"
copyright = "The floatlab developers"
release = floatlab.__version__
version = ".".join(release.split(".")[:2])

# ---- extensions ------------------------------------------------------------------------------------
extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "floatlab_sphinx",
]

exclude_patterns = ["_build", "_ext", "Thumbs.db", ".DS_Store", "**.ipynb_checkpoints"]
source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb", ".rst": "restructuredtext"}
root_doc = "index"

# every cross-reference must resolve; references to other projects are not checked (no network
# at build time, so no intersphinx): only floatlab's own names fail the build when broken
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(?!floatlab\b).*"),
    (r"py:.*", r"floatlab\.(registry\.T|rounding\.options\.F)"),  # type variables
]
suppress_warnings: list[str] = []

# ---- MyST and myst-nb ----------------------------------------------------------------------------
myst_enable_extensions = ["colon_fence", "deflist", "dollarmath", "amsmath", "attrs_inline", "substitution"]
myst_heading_anchors = 3

# "pages": execute the pages' code cells but not the lessons (the notebook tests run those);
# "off": execute nothing; anything else: everything, with a cache
_EXECUTE = os.environ.get("FLOATLAB_DOCS_EXECUTE", "all")
nb_execution_mode = "off" if _EXECUTE == "off" else "cache"
nb_execution_excludepatterns = ["lessons/*"] if _EXECUTE == "pages" else []
# the executed lessons carry the widgets' static views, which read well without a kernel
os.environ.setdefault("FLOATLAB_WIDGETS", "static")
# ... and no progress bars: a bar is no result (floatlab.text.progress)
os.environ.setdefault("FLOATLAB_PROGRESS", "off")
nb_execution_cache_path = str(DOCS / "_build" / ".jupyter_cache")
nb_execution_timeout = 600
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_merge_streams = True
nb_number_source_lines = False

# ---- autodoc ---------------------------------------------------------------------------------------
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_typehints_format = "short"
# (off: the rounding door shows its knobs through __signature__, whose defaults no source line holds)
autodoc_preserve_defaults = False
autoclass_content = "class"
autodoc_default_options: dict[str, bool | str] = {}
napoleon_google_docstring = False
napoleon_numpy_docstring = False
python_use_unqualified_type_names = True
add_module_names = False
python_display_short_literal_types = True

# ---- HTML ------------------------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"floatlab {release}"
html_static_path = ["_static"]
html_css_files = ["floatlab.css"]
html_show_sourcelink = False
html_theme_options = {
    "navbar_align": "left",
    "show_toc_level": 2,
    "navigation_with_keys": False,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version", "theme-version"],
    "header_links_before_dropdown": 7,
    "pygments_light_style": "default",
    "pygments_dark_style": "monokai",
}
html_context = {"default_mode": "light"}
# pages without sub-pages need no section navigation
_SINGLE_PAGES = ("index", "getting-started", "performance", "guarantees")
html_sidebars: dict[str, list[str]] = {page: [] for page in _SINGLE_PAGES}
