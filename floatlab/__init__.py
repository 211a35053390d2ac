"""floatlab: see, bit by bit, what low-precision floating point does to numbers and training.

>>> import floatlab as fl
>>> fl.decode(0x7BFF, "fp16").value
65504.0
"""

from floatlab import simulate
from floatlab.codec import Decoded, Encoded, decode, decode_array, encode, parse_value
from floatlab.formats import (
    BF16,
    FORMATS,
    FP16,
    FP32,
    FP64,
    TF32,
    FloatFormat,
    format_names,
    get_format,
    register_format,
)
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

__version__ = "0.1.0"

__all__ = [
    "BF16",
    "FORMATS",
    "FP16",
    "FP32",
    "FP64",
    "ROUNDING_MODES",
    "TF32",
    "Decoded",
    "Encoded",
    "Flags",
    "FloatFormat",
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
    "format_names",
    "get_format",
    "histogram",
    "parse_value",
    "register_format",
    "round_array",
    "round_array_with_flags",
    "simulate",
]
