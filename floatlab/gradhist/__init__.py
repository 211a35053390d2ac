"""Gradient exponent histograms: would a format lose these values, and which loss scale saves them?

The loss scalers of the big frameworks watch for overflow only; underflow is silent. A
:class:`GradHistogram` makes it visible, as Figure 2 of Micikevicius et al., "Mixed Precision
Training" (ICLR 2018) does for one model: it counts the values of any float array by their
base-2 exponent, read exactly from the bit fields, with separate counts for zeros, infinities,
NaNs and inputs that were subnormal in their own format. It is

* streaming: :meth:`GradHistogram.update` folds in one chunk at a time, so a dump larger than
  memory, or the gradients of many steps, make one histogram;
* mergeable: ``h1 + h2`` is the histogram of both inputs (say, of two workers);
* sharded: :func:`histogram_files` (or :meth:`GradHistogram.from_files`) counts a dump of many
  ``.npy``/``.npz`` shards or a Zarr array chunk by chunk, through Dask when asked, in memory
  bounded by the chunk;
* exact: inside each binade it keeps 599 cells of the significand (see
  :mod:`floatlab.gradhist._kernels`), fine enough that for power-of-two scales every class
  boundary of a rounding falls between cells. :meth:`GradHistogram.verdict` then says exactly
  how many values a format would flush to zero, make subnormal, keep normal or overflow, the
  same counts that :func:`floatlab.round_array` produces element by element.

The package: ``_histogram`` holds the class, ``_verdict`` its answers (:class:`Verdict`,
:class:`ScaleAdvice`), ``_classes`` where each outcome of a rounding begins on the cells,
``_inputs`` the reading of arrays and tensors, ``_shards`` the reading of dumps on disk,
``_kernels`` the counting loops (numba, compiled on first use) and ``plot`` the figure (matplotlib,
loaded when drawing; :mod:`floatlab.plotting` is its public address).

>>> import numpy as np
>>> from floatlab.gradhist import histogram
>>> x = np.array([1.0, 2.0**-20, 2.0**-26, 0.0, 1e6], np.float32)
>>> h = histogram(x)
>>> h.total, h.zeros, h.exponent_counts()[0].tolist()[:3]
(5, 1, [-26, -25, -24])
>>> v = h.verdict("fp16")
>>> v.flushed, v.subnormal, v.normal, v.overflow
(1, 1, 1, 1)
>>> h.recommend_scale("fp16", headroom=1).log2_scale
-5
"""

from floatlab.gradhist._classes import CLASSES
from floatlab.gradhist._histogram import GradHistogram, histogram, histogram_files
from floatlab.gradhist._shards import Shard, read_shard, read_shards, shard_plan
from floatlab.gradhist._verdict import ScaleAdvice, Verdict

__all__ = [
    "CLASSES",
    "GradHistogram",
    "ScaleAdvice",
    "Shard",
    "Verdict",
    "histogram",
    "histogram_files",
    "read_shard",
    "read_shards",
    "shard_plan",
]
