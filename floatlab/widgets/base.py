"""The base of the lesson controls: a static HTML view of the state, and a live ipywidgets
control built on demand (:class:`Interactive`), with the two helpers every control uses:
:func:`is_live` (which view to offer) and :func:`figure_html` (a Matplotlib figure as a
self-contained ``<img>``).
"""

from __future__ import annotations

import base64
import html
import io
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["Interactive", "figure_html", "is_live"]

_STATIC_NOTE = (
    '<div style="font-size:0.8em;color:#777;margin-top:0.3em">'
    "Static view: run the notebook to change it interactively.</div>"
)


def is_live() -> bool:
    """True when displaying a control should show the ipywidgets version: inside a running
    Jupyter kernel, with ipywidgets installed and ``FLOATLAB_WIDGETS`` not set to ``static``.

    >>> is_live()   # a plain interpreter (or a doctest) has no kernel
    False
    """
    if os.environ.get("FLOATLAB_WIDGETS", "").strip().lower() == "static":
        return False
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    shell = ipython.get_ipython()
    if shell is None or getattr(shell, "kernel", None) is None:
        return False
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return True


def figure_html(fig: Figure, *, dpi: int = 100, alt: str = "") -> str:
    """``fig`` as an ``<img>`` tag holding a base64 PNG: a drawing that needs no kernel to show.

    >>> from matplotlib.figure import Figure
    >>> fig = Figure(figsize=(1, 1)); _ = fig.subplots().plot([0, 1])
    >>> figure_html(fig, alt="a line").startswith('<img alt="a line" src="data:image/png;base64,')
    True
    """
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}" style="max-width:100%">'


class Interactive:
    """Base of the lesson controls: a static HTML view of the current state, and an ipywidgets
    control built on demand that redraws that view whenever the state changes.

    A subclass implements :meth:`html` (the drawing), :meth:`_controls` (the ipywidgets inputs
    that change the state) and :meth:`__repr__` (the plain-text view).

    >>> from floatlab.widgets import BitToggler
    >>> t = BitToggler("fp16", 0x3C00)   # a subclass: the bits of 1.0 in fp16
    >>> isinstance(t, Interactive), t.html().startswith("<div"), t.toggle(14).description
    (True, True, 'infinity (positive)')
    """

    def __init__(self) -> None:
        self._widget: Any = None
        self._view: Any = None

    # ---- the views -----------------------------------------------------------------------------
    def html(self) -> str:
        """The current state drawn as HTML (no kernel needed to show it)."""
        raise NotImplementedError

    def _repr_html_(self) -> str:
        return self._static(self.html())

    def _static(self, drawn: str) -> str:
        return f'<div class="floatlab-static">{drawn}{_STATIC_NOTE}</div>'

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        """Static HTML and text always; the ipywidgets view as well when :func:`is_live`.

        A front end that can show widgets (JupyterLab, Notebook 7, VS Code) picks the widget;
        one that cannot (a docs page, GitHub's viewer) picks the HTML.
        """
        drawn = self.html()  # drawn once, for both views (a figure takes a while to render)
        bundle: dict[str, Any] = {"text/plain": repr(self), "text/html": self._static(drawn)}
        if is_live():
            widget_bundle = self._build(drawn)._repr_mimebundle_()
            bundle.update({k: v for k, v in widget_bundle.items() if k != "text/plain"})
        return bundle

    # ---- the live control ----------------------------------------------------------------------
    def widget(self) -> Any:
        """The ipywidgets control (built once): the inputs, then the drawing of the state."""
        return self._build(None)

    def _build(self, drawn: str | None) -> Any:
        if self._widget is None:
            import ipywidgets as w

            self._view = w.HTML(self.html() if drawn is None else drawn)
            self._view.add_class("floatlab-view")
            self._widget = w.VBox([*self._controls(), self._view])
            self._widget.add_class(f"floatlab-{type(self).__name__.lower()}")
        return self._widget

    def _controls(self) -> list[Any]:
        raise NotImplementedError

    def _refresh(self) -> None:
        """Redraw the live view after a change of state (nothing to do when there is none)."""
        if self._view is not None:
            self._view.value = self.html()
