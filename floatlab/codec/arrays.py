"""Arrays of codes into values: :func:`decode_array`, the vectorised twin of
:func:`~floatlab.codec.decode` for NumPy arrays of codes (any integer dtype, any shape).

>>> decode_array([0x3C00, 0x7BFF, 0xFC00], "fp16").tolist()
[1.0, 65504.0, -inf]
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from floatlab.formats import FP64, FloatFormat, get_format

__all__ = ["decode_array"]

_TABLES: dict[FloatFormat, npt.NDArray[np.float64]] = {}
_TABLE_MAX_BITS = 16
_KERNEL_MIN_SIZE = 1 << 16
_NATIVE: dict[tuple[int, int], tuple[type[np.unsignedinteger[Any]], type[np.floating[Any]]]] = {
    (8, 23): (np.uint32, np.float32),
    (11, 52): (np.uint64, np.float64),
}


def _decode_vectorised(codes: npt.NDArray[np.integer[Any]], f: FloatFormat) -> npt.NDArray[np.float64]:
    """Integer/bit arithmetic on uint64: the vectorised twin of :func:`decode` (float64-contained formats)."""
    c = codes.astype(np.uint64, copy=False)
    m = np.uint64(f.mantissa_bits)
    mag = c & np.uint64(f.sign_mask - 1)
    efield = mag >> m
    frac = mag & np.uint64(f.mantissa_mask)
    normal = (efield != 0) | (not f.has_zero)
    significand = frac | (normal.astype(np.uint64) << m)
    # subnormals share the exponent of the smallest normal (a scale format has none: its zero
    # exponent field is a binade); int32 holds every exponent here
    low = np.uint64(0 if not f.has_zero else 1)
    scale = np.maximum(efield, low).astype(np.int32) - np.int32(f.bias + f.mantissa_bits)
    # exact: the significand has at most 53 bits and the result lies in float64's range (the all-ones
    # exponent of IEEE formats may overflow here: those codes are inf/NaN and are rewritten below)
    with np.errstate(over="ignore"):
        out: npt.NDArray[np.float64] = np.ldexp(significand.astype(np.float64), scale)
    negative = ((c >> np.uint64(f.sign_bit)) & np.uint64(1)).astype(bool)
    np.negative(out, out=out, where=negative)
    _patch_specials(out, c, f)
    return out


def _patch_specials(out: npt.NDArray[np.float64], c: npt.NDArray[np.uint64], f: FloatFormat) -> None:
    """Write infinities and NaNs (with the bits of :func:`_nan_bits64`) into ``out`` in place."""
    sign = (c >> np.uint64(f.sign_bit)) & np.uint64(1)
    mag = c & np.uint64(f.sign_mask - 1)
    if f.extended:  # P3109: +-inf at the largest magnitude code
        inf = mag == np.uint64(f.inf_code)
        out[inf] = np.where(sign[inf] != 0, -np.inf, np.inf)
    if f.encoding == "ieee":
        top = (mag >> np.uint64(f.mantissa_bits)) == np.uint64((1 << f.exponent_bits) - 1)
        frac = mag & np.uint64(f.mantissa_mask)
        inf = top & (frac == 0)
        out[inf] = np.where(sign[inf] != 0, -np.inf, np.inf)
        nan = top & (frac != 0)
        shift = np.uint64(52 - f.mantissa_bits)
        payload = frac[nan] << shift
    elif f.has_nan:
        nan = c == np.uint64(f.nan_code or 0) if f.encoding == "fnuz" else (mag == np.uint64(f.sign_mask - 1))
        payload = np.full(int(np.count_nonzero(nan)), 1 << 51, dtype=np.uint64)
    else:
        return
    if nan.any():
        bits = (sign[nan] << np.uint64(63)) | np.uint64((0x7FF << 52) | (1 << 51)) | payload
        out.view(np.uint64)[nan] = bits


def _table(f: FloatFormat) -> npt.NDArray[np.float64]:
    table = _TABLES.get(f)
    if table is None:
        table = _decode_vectorised(np.arange(1 << f.bits, dtype=np.uint64), f)
        table.flags.writeable = False
        _TABLES[f] = table
    return table


def _check_codes(arr: npt.NDArray[Any], f: FloatFormat) -> None:
    if arr.dtype.kind not in "ui":
        raise ValueError(f"codes of dtype {arr.dtype}: expected an integer array of {f.name} codes")
    if arr.size == 0 or (arr.dtype.kind == "u" and arr.dtype.itemsize * 8 <= f.bits):
        return  # every value of this dtype fits
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi > f.code_mask:
        bad = lo if lo < 0 else hi
        raise ValueError(
            f"code {bad} does not fit {f.name}: expected integers from 0 to {f.code_mask} ({f.bits} bits)"
        )


def decode_array(codes: npt.ArrayLike, fmt: FloatFormat | str) -> npt.NDArray[np.float64]:
    """Decode an array of codes (any integer dtype) into their exact float64 values.

    The vectorised twin of :func:`decode` (its ``.value``, NaN bits included). fp32 and
    fp64 codes go through NumPy's own cast; for other formats a large array (2^16 codes or
    more) goes through the compiled kernel, a smaller one through a lookup table built once
    per format (at most 16 bits) or bit arithmetic. A format with values float64 cannot
    hold is refused.

    >>> decode_array(np.array([[0x00, 0x01], [0x7E, 0x7F]], dtype=np.uint8), "float8_e4m3fn").tolist()
    [[0.0, 0.001953125], [448.0, nan]]
    """
    f = get_format(fmt)
    if not FP64.contains(f):
        raise ValueError(
            f"format {f.name}: decode_array returns float64, which cannot hold all its values; "
            "expected a format within float64's range and precision (use decode() for exact values)"
        )
    given = np.asarray(codes)
    if given.size == 0 and given.dtype.kind not in "ui":
        return np.zeros(given.shape, dtype=np.float64)
    _check_codes(given, f)
    return _decode_flat(given.reshape(-1), f).reshape(given.shape)


def _decode_flat(arr: npt.NDArray[Any], f: FloatFormat) -> npt.NDArray[np.float64]:
    native = _NATIVE.get((f.exponent_bits, f.mantissa_bits)) if f.encoding == "ieee" else None
    if native is not None:
        # fp32 and fp64: NumPy's own arithmetic runs at memory speed, faster than any kernel here.
        # The widening cast (fp32) and the multiplication by 1 (fp64, exact, keeps -0) are IEEE
        # operations: they turn a signalling NaN into the quiet NaN with the same sign and
        # payload, which is what decode gives, and raise "invalid" for it, which is expected
        utype, ftype = native
        c = arr.astype(utype, copy=False)
        with np.errstate(invalid="ignore"):
            if ftype is np.float32:
                out: npt.NDArray[np.float64] = c.view(np.float32).astype(np.float64)
            else:
                out = np.multiply(c.view(np.float64), 1.0)
        return out
    if arr.size >= _KERNEL_MIN_SIZE:
        # the compiled kernel (parallel over cores) when it is there; the NumPy paths below otherwise
        from floatlab.rounding import decode_codes

        result: npt.NDArray[np.float64] = decode_codes(arr, f)
        return result
    if f.bits <= _TABLE_MAX_BITS:
        values: npt.NDArray[np.float64] = _table(f)[arr]
        return values
    return _decode_vectorised(arr, f)
