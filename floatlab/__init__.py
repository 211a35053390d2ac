"""floatlab: see, bit by bit, what low-precision floating point does to numbers and training.

>>> import floatlab as fl
>>> fl.decode(0x7BFF, "fp16").value
65504.0
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from floatlab import formats
from floatlab._lazy import lazy_exports
from floatlab.codec import Decoded, decode, parse_value
from floatlab.formats import *  # noqa: F403

if TYPE_CHECKING:
    from floatlab import backend as backend  # submodules outside __all__: the alias re-exports them
    from floatlab import rounding as rounding
    from floatlab import simulate
    from floatlab.codec import Encoded, decode_array, encode
    from floatlab.gradhist import GradHistogram, ScaleAdvice, Verdict, histogram
    from floatlab.rounding import (
        ROUNDING_MODES,
        Flags,
        RoundingOptions,
        RoundingStats,
        encode_array,
        encode_array_with_flags,
        round_array,
        round_array_with_flags,
    )
    from floatlab.sweeps import sweep

__version__ = "0.1.0"

# loaded on first use: `floatlab decode` needs neither NumPy nor the rounding package (together most
# of the import's time), nor the simulators, nor the histograms. A submodule named here is the
# module itself: `import floatlab` then `floatlab.rounding.fma` works without importing it by name.
_LAZY = {
    "ROUNDING_MODES": "floatlab.rounding",
    "Flags": "floatlab.rounding",
    "RoundingOptions": "floatlab.rounding",
    "RoundingStats": "floatlab.rounding",
    "encode_array": "floatlab.rounding",
    "encode_array_with_flags": "floatlab.rounding",
    "round_array": "floatlab.rounding",
    "round_array_with_flags": "floatlab.rounding",
    "Encoded": "floatlab.codec",
    "decode_array": "floatlab.codec",
    "encode": "floatlab.codec",
    "backend": "floatlab.backend",
    "rounding": "floatlab.rounding",
    "simulate": "floatlab.simulate",
    "GradHistogram": "floatlab.gradhist",
    "ScaleAdvice": "floatlab.gradhist",
    "Verdict": "floatlab.gradhist",
    "histogram": "floatlab.gradhist",
    "sweep": "floatlab.sweeps",  # pandas, and dask for a cluster: the scale extra
}


__getattr__, __dir__ = lazy_exports(globals(), __name__, _LAZY)


# the formats' public names, then the rest
__all__ = [
    *formats.__all__,
    "ROUNDING_MODES",
    "Decoded",
    "Encoded",
    "Flags",
    "GradHistogram",
    "RoundingOptions",
    "RoundingStats",
    "ScaleAdvice",
    "Verdict",
    "__version__",
    "decode",
    "decode_array",
    "encode",
    "encode_array",
    "encode_array_with_flags",
    "histogram",
    "parse_value",
    "round_array",
    "round_array_with_flags",
    "simulate",
    "sweep",
]
