"""floatlab: see, bit by bit, what low-precision floating point does to numbers and training.

>>> import floatlab as fl
>>> fl.decode(0x7BFF, "fp16").value
65504.0
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from floatlab import formats
from floatlab.codec import Decoded, Encoded, decode, decode_array, encode, parse_value
from floatlab.formats import *  # noqa: F403
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

if TYPE_CHECKING:
    from floatlab import simulate
    from floatlab.gradhist import GradHistogram, ScaleAdvice, Verdict, histogram
    from floatlab.sweeps import sweep

__version__ = "0.1.0"

# loaded on first use: `floatlab decode` needs neither the simulators nor the histograms
_LAZY = {
    "simulate": "floatlab.simulate",
    "GradHistogram": "floatlab.gradhist",
    "ScaleAdvice": "floatlab.gradhist",
    "Verdict": "floatlab.gradhist",
    "histogram": "floatlab.gradhist",
    "sweep": "floatlab.sweeps",  # pandas, and dask for a cluster: the scale extra
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'floatlab' has no attribute {name!r}")
    module = importlib.import_module(_LAZY[name])
    value = module if name == "simulate" else getattr(module, name)
    globals()[name] = value
    return value


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
