"""Interactive controls for the lessons, each with a static view that reads well without a kernel.

Every control here is a plain Python object that holds its state (a format, a code, a value, a
loss scale), changes it through ordinary methods, and shows it in two ways:

* **static**: ``_repr_html_`` (and ``text/plain``) draws the current state: bit boxes and the
  decoded value, a number line, a histogram. That is what a rendered page (the docs, a
  notebook viewer) shows, and what a notebook without ipywidgets shows.
* **live**: in a running Jupyter kernel with ipywidgets installed, displaying the object shows
  an ipywidgets control (buttons, sliders) next to the same drawing, redrawn on every change.
  :meth:`Interactive.widget` builds it (ipywidgets is imported there, never at module level).

Set the environment variable ``FLOATLAB_WIDGETS=static`` to get the static view even in a live
kernel (for a docs build that executes the notebooks but keeps no widget state).

``base`` holds what every control shares, ``bits`` the bit toggler of lesson 01 and
``explorers`` the figure-and-slider explorers of lessons 02, 04 and 05.

>>> t = BitToggler("fp16", 0x3C00)
>>> t.decoded.value, t.toggle(14).value, t.hex
(1.0, inf, '0x7C00')
>>> t.set_format("bf16").hex       # inf is inf in every format that has it
'0x7F80'
"""

from __future__ import annotations

from floatlab.widgets.base import Interactive, figure_html, is_live
from floatlab.widgets.bits import LESSON_FORMATS, BitToggler
from floatlab.widgets.explorers import RoundingExplorer, ScaleExplorer, UpdateExplorer

__all__ = [
    "LESSON_FORMATS",
    "BitToggler",
    "Interactive",
    "RoundingExplorer",
    "ScaleExplorer",
    "UpdateExplorer",
    "figure_html",
    "is_live",
]
