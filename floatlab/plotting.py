"""Figures (matplotlib, imported inside the functions: ``import floatlab`` never loads it).

:func:`plot_histogram` draws a gradient histogram on a log2 axis over the ranges of a format
(flushed to zero, subnormal, normal, overflow), before and after a loss scale: the figure of
Micikevicius et al., "Mixed Precision Training" (2018), for your own data. It is also the
method :meth:`floatlab.gradhist.GradHistogram.plot`; the code lives in
``floatlab.gradhist.plot``.

>>> import numpy as np
>>> from floatlab.gradhist import histogram
>>> fig = plot_histogram(histogram(np.array([2.0**-30, 2.0**-10, 0.0], np.float32)), "fp16")
>>> [ax.get_xlabel() for ax in fig.axes]
['log2 |x|', 'log2 |x · 2^16|']
"""

from __future__ import annotations

from floatlab.gradhist import plot
from floatlab.gradhist.plot import plot_histogram

__all__ = ["REGION_COLORS", "plot_histogram"]

#: Background of each range of a format, and (darker) of the bars whose values land there.
REGION_COLORS: dict[str, tuple[str, str]] = plot.REGION_COLORS
