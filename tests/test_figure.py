"""Every figure floatlab returns shows itself in a notebook (a PNG rich representation) without
pyplot, whatever the backend."""

from __future__ import annotations

import numpy as np

from floatlab._figure import ShownFigure


def test_the_figures_floatlab_returns_show_themselves() -> None:
    from floatlab.gradhist import histogram
    from floatlab.train import History, compare

    h = History("a")
    h.log_step(step=1, epoch=0, loss=1.0, accuracy=0.5, scale=1.0, skipped=False, flushed=0.0,
               swallowed=0.0, lr=0.1, grad_norm=None)  # fmt: skip
    for fig in (histogram(np.array([1e-8, 1.0], np.float32)).plot("fp16"), compare([h])):
        assert isinstance(fig, ShownFigure)
        assert fig._repr_png_()[:8] == b"\x89PNG\r\n\x1a\n"
