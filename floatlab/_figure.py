"""A matplotlib figure that shows itself in a notebook without pyplot: what every figure floatlab
returns is (imported inside the functions that draw: ``import floatlab`` never loads matplotlib).

floatlab's figures are built without pyplot, so that nothing in floatlab chooses or changes
matplotlib's backend and no figure is left in pyplot's list. JupyterLab shows such a figure through
its rich representation: :class:`ShownFigure` is a :class:`~matplotlib.figure.Figure` with a
``_repr_png_``. Where pyplot's inline backend is active its own formatter shows the figure once,
as it shows any other.

>>> fig = ShownFigure(figsize=(2, 1)); _ = fig.add_subplot().plot([0, 1])
>>> fig._repr_png_()[:8] == b"\\x89PNG\\r\\n\\x1a\\n"
True
"""

from __future__ import annotations

import io

from matplotlib.figure import Figure

__all__ = ["ShownFigure"]


class ShownFigure(Figure):
    """A figure with a PNG rich representation (what a notebook shows for it).

    >>> fig = ShownFigure(); _ = fig.add_subplot().plot([1, 2])
    >>> isinstance(fig._repr_png_(), bytes)
    True
    """

    def _repr_png_(self) -> bytes:
        buf = io.BytesIO()
        self.savefig(buf, format="png", dpi=90)
        return buf.getvalue()
