"""The low end of the MXINT8 element: -2.0 (k = -128), which the sign-magnitude grid the kernels
round into (k/64 for ``abs(k) <= 127``: ``floatlab.formats.MXINT8_ELEMENT``) does not hold, and the
two's complement codes. Private to the block door (:func:`floatlab.rounding.encode_blocks`).

The element's values are k/64 for k from -128 to 127 (OCP Microscaling v1.0's INT8, as gfloat's
``format_info_ocp_int8``). A block value y = v / scale that the kernel held at -127/64 becomes
-128/64 where the rounding mode takes it there: nearest (even or away) from y <= -127.5/64 (the
tie goes to -128, which is even), toward -inf from y < -127/64, stochastic rounding with the
probability of its distance from -127/64, drawn from the value's own random word; toward zero,
toward +inf and to odd keep -127.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from floatlab.rounding.options import RoundingOptions
from floatlab.rounding.spec import random_bits_at

__all__ = ["low_end", "mxint8_blocks", "twos_complement"]

_K127 = 127 / 64
_TIE = 127.5 / 64


def twos_complement(codes: np.ndarray) -> np.ndarray:
    """The sign-magnitude codes (sign bit 0x80, magnitude k) as two's complement int8 bytes.

    >>> twos_complement(np.array([0x01, 0x81, 0xFF, 0x00], np.uint8)).view(np.int8).tolist()
    [1, -1, -127, 0]
    """
    mag = (codes & 0x7F).astype(np.int16)
    k = np.where(codes & 0x80, -mag, mag)
    out: np.ndarray = k.astype(np.int8).view(np.uint8)
    return out


def low_end(
    y_num: np.ndarray,
    codes: np.ndarray | None,
    values: np.ndarray | None,
    scales: np.ndarray,
    mode: str,
    key: tuple[int, int],
    random_bits: int,
) -> tuple[np.ndarray | None, np.ndarray | None, int]:
    """Move the values the kernel held at -127/64 x scale to -2 x scale where ``mode`` takes them.

    ``y_num`` are the inputs (flat), ``scales`` each one's block scale (flat; NaN-scale blocks
    are never moved), ``codes`` the kernel's sign-magnitude codes and ``values`` its values (each
    flat, or None). Returns the two's complement codes, the values and how many were moved.

    >>> v = np.array([-1.995, -1.99, 1.999])
    >>> codes = np.array([0xFF, 0xFF, 0x7F], np.uint8)          # the kernel's k = -127, -127, 127
    >>> c, out, n = low_end(v, codes, None, np.ones(3), "rne", (0, 0), 32)
    >>> c.view(np.int8).tolist(), n                              # -1.995 * 64 = -127.68: to -128
    ([-128, -127, 127], 1)
    """
    with np.errstate(invalid="ignore", over="ignore"):
        y = y_num / scales
        if mode in ("rne", "rna"):
            move = y <= -_TIE
        elif mode == "rdown":
            move = y < -_K127
        elif mode == "stochastic":
            move = (y < -_K127) & (y > -2.0)
            for i in np.flatnonzero(move).tolist():
                # the kernel's rule: up (here: down to -128) when floor(r * 2^k) + rand >= 2^k,
                # r the distance beyond -127/64 in units of 1/64
                r = Fraction(float(-y[i])) * 64 - 127
                scaled = int(r * (1 << random_bits))
                move[i] = scaled + random_bits_at(key, i, random_bits) >= 1 << random_bits
        else:
            move = np.zeros(y.shape, dtype=bool)
    move &= np.isfinite(scales) & np.isfinite(y)
    n = int(np.count_nonzero(move))
    if values is not None and n:
        values = values.copy()
        values[move] = (-2.0 * scales[move]).astype(values.dtype)
    out_codes = None
    if codes is not None:
        out_codes = twos_complement(codes)
        out_codes[move] = 0x80
    return out_codes, values, n


def mxint8_blocks(
    rows: np.ndarray,
    out: tuple[Any, ...],
    block: tuple[int, int],
    scale_shape: tuple[int, ...],
    options: RoundingOptions,
) -> tuple[Any, ...]:
    """The block loop's ``out`` (codes, scale codes, values, counts) for the MXINT8 element, from
    the sign-magnitude grid's: :func:`low_end` applied with each value's E8M0 block scale, the
    moved values taken off the count of those saturation held (they were not held).

    >>> rows = np.array([[-1.995, 0.5]])                      # one block, scale code 127 (2^0)
    >>> out = (np.array([0xFF, 0x20], np.uint8), np.array([127], np.uint8), None, (2, 0, 1, 2, 1))
    >>> codes, scales, values, counts = mxint8_blocks(rows, out, (1, 32), (1, 1), RoundingOptions())
    >>> codes.view(np.int8).tolist(), counts
    ([-128, 32], (2, 0, 0, 2, 0))
    """
    codes, scale_codes, values, counts = out
    br, bc = block
    s = scale_codes.reshape(scale_shape)
    per = np.repeat(s, bc, axis=-1)[..., : rows.shape[-1]]
    if br > 1:  # blocks down the rows too: tiles, or columns
        per = np.repeat(per, br, axis=-2)[..., : rows.shape[-2], :]
    c = per.astype(np.int64)
    scales = np.where(c == 255, np.nan, np.ldexp(1.0, np.where(c == 255, 0, c - 127))).reshape(-1)
    flat = None if codes is None else codes.reshape(-1)
    vals = None if values is None else values.reshape(-1)
    new_codes, new_values, n = low_end(
        rows.reshape(-1).astype(np.float64),
        flat,
        vals,
        scales,
        options.mode,
        options.key,
        options.random_bits,
    )
    nonzero, flushed, _subnormal, inexact, overflow = counts
    back_codes = None if new_codes is None else new_codes.reshape(codes.shape)
    back_values = None if new_values is None else new_values.reshape(values.shape)
    # (the grid's "subnormals" are the integers below 64: an integer element has none)
    return back_codes, scale_codes, back_values, (nonzero, flushed, 0, inexact, overflow - n)
