"""Integers rounded into a format, each once, whatever its width: :func:`round_integers`.

>>> values, stats = round_integers(np.array([2**60 + 1, -3]), "fp16", saturate=True)
>>> values.tolist(), stats.overflow
([65504.0, -3.0], 1)
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from floatlab.formats import FloatFormat, get_format
from floatlab.rounding.arrays import Counted, round_array_with_flags
from floatlab.rounding.cpu import decode_codes
from floatlab.rounding.options import (
    RoundingKnobs,
    RoundingStats,
    as_generator,
    knob_signature,
    stochastic_key,
)
from floatlab.rounding.spec import DEFAULT_RANDOM_BITS, Flags, check_rounding, random_bits_at, round_rational

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["MAX_EXACT_INTEGERS", "round_integers"]

#: the most integers :func:`round_integers` rounds one by one through the exact scalar reference
#: (about 13 microseconds each: 100,000 take about 1.5 s); more are refused before any work
MAX_EXACT_INTEGERS = 100_000


def _odd53(ints: npt.NDArray[Any]) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
    """Integers rounded to odd at 53 bits (float64), and where that was inexact: the value cut to
    its top 53 bits, the last of them set when any bit below was set. Integer operations only."""
    negative = ints < 0 if ints.dtype.kind == "i" else np.zeros(ints.shape, dtype=bool)
    mag = ints.astype(np.uint64)
    # the two's complement negation in uint64 holds |-2^63| too
    mag = np.where(negative, ~mag + np.uint64(1), mag)
    # the bit length: frexp of the float64 conversion, one too many where it rounded up to 2^n
    length = np.frexp(mag.astype(np.float64))[1].astype(np.int64)
    length -= ((mag >> np.maximum(length - 1, 0).astype(np.uint64)) == 0) & (mag != 0)
    shift = np.maximum(length - 53, 0).astype(np.uint64)
    dropped = (mag & ((np.uint64(1) << shift) - np.uint64(1))) != 0
    kept = (mag >> shift) | dropped.astype(np.uint64)
    odd = np.ldexp(kept.astype(np.float64), shift.astype(np.int64))  # kept < 2^53: exact
    return np.where(negative, -odd, odd), dropped


@knob_signature
def round_integers(
    x: npt.ArrayLike,
    fmt: FloatFormat | str,
    rounding: str = "rne",
    **knobs: Unpack[RoundingKnobs],
) -> Counted:
    """Round an array of integers (or booleans) into ``fmt``, every element once, with its IEEE
    flag counts: ``(float64 values, stats)``, the bits :func:`~floatlab.rounding.round_rational`
    gives each integer.

    The rounding door takes integers that float64 holds; a wider one (2^54 + 2^30 + 1, say)
    converted to float64 first would be rounded twice. Here each integer is rounded to odd at 53
    bits (integer operations), which a second rounding into a format of up to 51 bits of
    precision turns into the one rounding of the integer in every mode (Boldo and Melquiond,
    2008); stochastic rounding also needs precision + ``random_bits`` <= 52, for its random bits
    to meet the integer's own. Other integers (into fp64, say) go one by one through the exact
    scalar reference, with the random bits the door would draw for them: at most
    :data:`MAX_EXACT_INTEGERS` of them, more are refused before any rounding.

    >>> values, stats = round_integers(np.array([2**54 + 2**30 + 1, 3]), "fp32")
    >>> values.tolist() == [2**54 + 2**31, 3], stats.inexact
    (True, 1)
    """
    a = np.asarray(x)
    if a.dtype.kind not in "biu":
        raise ValueError(f"x has dtype {a.dtype}: expected an array of integers or booleans")
    f = get_format(fmt)
    mode = check_rounding(rounding)
    random_bits = knobs.get("random_bits", DEFAULT_RANDOM_BITS)
    flat = a.reshape(-1)
    ints = flat.astype(np.uint8) if flat.dtype.kind == "b" else flat
    proxy, inexact53 = _odd53(ints)
    through_odd = f.precision <= 51 and (mode != "stochastic" or f.precision + random_bits <= 52)
    one_by_one = np.zeros(0, dtype=np.int64) if through_odd else np.flatnonzero(inexact53)
    if one_by_one.size > MAX_EXACT_INTEGERS:
        raise ValueError(
            f"{one_by_one.size:,} integers need more than float64's 53 bits to round exactly into "
            f"{f.name} in mode {mode}: expected at most {MAX_EXACT_INTEGERS:,} of them"
        )
    gen = as_generator(knobs.get("rng"))
    # the door draws its key from gen: a copy draws the same one for the integers rounded here
    key = stochastic_key(copy.deepcopy(gen), mode) if gen is not None else (0, 0)
    proxy[one_by_one] = 0.0  # (a zero raises no flag: those elements are rounded below)
    kw: dict[str, Any] = {k: v for k, v in knobs.items() if k != "rng"}
    values, stats = round_array_with_flags(proxy, f, mode, rng=gen, **kw)
    counts = {"inexact": stats.inexact, "underflow": stats.underflow, "overflow": stats.overflow}
    codes = []
    for i in one_by_one.tolist():
        rand = random_bits_at(key, i, random_bits) if mode == "stochastic" else 0
        code, flags = round_rational(int(ints[i]), f, mode, rand=rand, **kw)
        codes.append(code)
        for name in counts:
            counts[name] += Flags[name.upper()] in flags
    if codes:
        values[one_by_one] = decode_codes(np.array(codes, dtype=np.uint64), f)
    result = np.asarray(values, dtype=np.float64).reshape(a.shape)
    return Counted(result, RoundingStats(stats.total, invalid=stats.invalid, **counts))
