"""Reading the bit patterns of arrays and tensors, and counting them (private).

Arrays of any dtype floatlab knows (float64, float32, float16, bfloat16, the ml_dtypes 8-, 6- and
4-bit floats), torch tensors on any device, device arrays that copy to the host, and anything
``numpy.asarray`` takes are read as unsigned integers without converting a value; the counting
loops of :mod:`floatlab.gradhist._kernels` then bin them.

>>> import numpy as np
>>> bits, fmt = _bits_of(np.array([1.0, -2.0], np.float16))
>>> bits.tolist(), fmt.name, _count(bits, fmt).block.sum()
([15360, 49152], 'fp16', np.int64(2))
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import numpy.typing as npt

from floatlab.formats import BF16, FORMATS, FP16, FP32, FP64, FloatFormat
from floatlab.gradhist import _kernels as hk

# below this many elements the vectorised path beats the compiled loop's fixed cost
_SMALL_INPUT = 1 << 14

_DTYPE_FORMATS: dict[str, FloatFormat] = {"float64": FP64, "float32": FP32, "float16": FP16, "bfloat16": BF16}
_DTYPE_NAMES: dict[FloatFormat, str] = {f: name for name, f in _DTYPE_FORMATS.items()}


def _format_of_dtype(name: str) -> FloatFormat | None:
    fmt = _DTYPE_FORMATS.get(name)
    if fmt is None and name in FORMATS and FORMATS[name].bits <= 8:
        fmt = FORMATS[name]  # the ml_dtypes 8-, 6- and 4-bit types share floatlab's names
    return fmt


def _torch_bits(t: Any) -> tuple[npt.NDArray[Any], FloatFormat]:
    torch = sys.modules["torch"]
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.contiguous().reshape(-1)
    name = str(t.dtype).removeprefix("torch.")
    fmt = _format_of_dtype(name)
    if fmt is None:
        raise ValueError(f"tensor of dtype {t.dtype}: expected a floating-point tensor (float64 ... float8)")
    if fmt.bits == 8:
        return t.view(torch.uint8).numpy(), fmt
    if fmt is BF16:  # numpy has no bfloat16: read the bit patterns
        return t.view(torch.int16).numpy().view(np.uint16), fmt
    return t.numpy().view({64: np.uint64, 32: np.uint32, 16: np.uint16}[fmt.bits]), fmt


def _bits_of(x: Any) -> tuple[npt.NDArray[Any], FloatFormat]:
    """The 1-d bit patterns of ``x`` (unsigned integers) and the format of its dtype."""
    if type(x).__module__.split(".")[0] == "torch":
        return _torch_bits(x)
    if not isinstance(x, np.ndarray):
        if hasattr(x, "__cuda_array_interface__") and callable(getattr(x, "get", None)):
            x = x.get()  # a device array: copy it to the host
        elif hasattr(x, "__dlpack__") and not hasattr(x, "__array__"):
            x = np.from_dlpack(x)
    a = np.asarray(x)
    fmt = _format_of_dtype(a.dtype.name)
    if fmt is None:
        raise ValueError(
            f"array of dtype {a.dtype}: expected floating-point values "
            "(float64, float32, float16, bfloat16 or an ml_dtypes float8/6/4 type)"
        )
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))  # a byte swap, not a conversion
    uint = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
    return np.ascontiguousarray(a).reshape(-1).view(uint), fmt


def _count(bits: npt.NDArray[Any], fmt: FloatFormat) -> hk.Counts:
    if fmt.bits <= 16:
        return hk.count_codes(bits, fmt)
    if bits.size < _SMALL_INPUT:
        return hk.count_numpy(bits, fmt)
    return hk.count32(bits) if fmt.bits == 32 else hk.count64(bits)


def _read(x: Any) -> tuple[hk.Counts, str]:
    """The counts of the values of ``x`` and the name of its dtype."""
    bits, fmt = _bits_of(x)
    return _count(bits, fmt), _DTYPE_NAMES.get(fmt, fmt.name)
