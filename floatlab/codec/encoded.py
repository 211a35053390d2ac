"""Values into codes: :func:`encode` rounds a float, an int, a Fraction or a string (parsed
exactly) into a format with the rounding reference of :mod:`floatlab.rounding`, and returns an
:class:`Encoded`: the code as an int that remembers its input, its rounding and its flags.

>>> e = encode("0.1", "fp16")
>>> hex(e), e.decoded.decimal, e.relative_error
('0x2e66', '0.0999755859375', Fraction(-1, 4096))
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import cached_property
from typing import Any

import numpy as np

from floatlab.codec.decoded import Decoded, decode
from floatlab.exact import parse_value
from floatlab.formats import FP64, FloatFormat, get_format
from floatlab.rounding import (
    DEFAULT_RANDOM_BITS,
    Flags,
    Rounding,
    check_rounding,
    random_bits_at,
    round_rational,
    round_scalar,
)

__all__ = ["Encoded", "encode"]


class Encoded(int):
    """The code :func:`encode` returns: an ``int`` (compare it, format it, index with it) that
    also remembers how it came about.

    >>> e = encode("0.1", "fp16")
    >>> e, f"{e:#06x}", e.error, e.flags
    (11878, '0x2e66', Fraction(-1, 40960), <Flags.INEXACT: 1>)
    """

    fmt: FloatFormat
    rounding: Rounding
    input_exact: Fraction | None
    flags: Flags

    def __new__(
        cls, code: int, fmt: FloatFormat, rounding: Rounding, input_exact: Fraction | None, flags: Flags
    ) -> Encoded:
        self = super().__new__(cls, code)
        object.__setattr__(self, "fmt", fmt)
        object.__setattr__(self, "rounding", rounding)
        object.__setattr__(self, "input_exact", input_exact)
        object.__setattr__(self, "flags", flags)
        return self

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Encoded is immutable: cannot set {name!r}")

    def __getnewargs__(self) -> tuple[int, FloatFormat, Rounding, Fraction | None, Flags]:  # type: ignore[override]
        return int(self), self.fmt, self.rounding, self.input_exact, self.flags

    @cached_property
    def decoded(self) -> Decoded:
        """The stored code taken apart (:func:`decode`)."""
        return decode(int(self), self.fmt)

    @property
    def error(self) -> Fraction | None:
        """Stored value minus input, exactly; None when either is not finite."""
        stored = self.decoded.exact
        if stored is None or self.input_exact is None:
            return None
        return stored - self.input_exact

    @property
    def relative_error(self) -> Fraction | None:
        """``error`` divided by the input; None when it is not finite or is zero."""
        err = self.error
        if err is None or self.input_exact is None or self.input_exact == 0:
            return None
        return err / abs(self.input_exact)


def _random_word(rng: np.random.Generator | int | None, random_bits: int) -> int:
    """The random bits of one stochastic rounding, drawn as :func:`encode_array` draws them for
    element 0 (a two-word key from ``rng``, then the counter-based bits), so that a scalar and a
    one-element array rounded with the same seed agree."""
    if rng is None:
        raise ValueError("rounding='stochastic' needs rng: a numpy.random.Generator or an integer seed")
    if (
        isinstance(rng, bool)
        or not isinstance(rng, (np.random.Generator, int, np.integer))
        or (not isinstance(rng, np.random.Generator) and rng < 0)
    ):
        raise ValueError(f"rng={rng!r}: expected a numpy.random.Generator or a non-negative integer seed")
    gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(int(rng))
    key = gen.integers(0, 2**32, size=2, dtype=np.uint64)
    return random_bits_at((int(key[0]), int(key[1])), 0, random_bits)


def encode(
    value: float | int | Fraction | str,
    fmt: FloatFormat | str,
    rounding: str = "rne",
    *,
    saturate: bool = False,
    subnormals: bool = True,
    rng: np.random.Generator | int | None = None,
) -> Encoded:
    """Round ``value`` into ``fmt`` and return its code (an :class:`Encoded`, which is an int).

    Strings are parsed exactly (:func:`parse_value`), so "0.1" is one tenth in every format,
    fp64 included. Floats keep their signed zero, infinity and NaN; with ``subnormals=False``
    a float input that is subnormal in its own type counts as zero and subnormal results
    flush to zero. ``saturate=True`` clamps overflow to the largest finite value.
    ``"stochastic"`` rounding draws its random bits from ``rng`` (a Generator or a seed).

    >>> hex(encode("0.1", "fp16")), hex(encode(70000, "fp16")), hex(encode(70000, "fp16", saturate=True))
    ('0x2e66', '0x7c00', '0x7bff')
    >>> encode("0.1", "fp64") == encode(0.1, "fp64")
    True
    >>> encode(1 + 2**-11, "fp16", "rup").decoded.decimal
    '1.0009765625'
    """
    f = get_format(fmt)
    mode = check_rounding(rounding)
    rand = _random_word(rng, DEFAULT_RANDOM_BITS) if mode == "stochastic" else 0
    x: object = parse_value(value) if isinstance(value, str) else value
    common: dict[str, Any] = {"saturate": saturate, "subnormals": subnormals, "rand": rand}
    if isinstance(x, (bool, np.bool_)):
        raise ValueError(f"value {value!r}: expected a number, not a bool")
    if isinstance(x, (int, np.integer, Fraction)):
        exact = Fraction(int(x)) if not isinstance(x, Fraction) else x
        code, flags = round_rational(exact, f, mode, **common)
        return Encoded(code, f, mode, exact, flags)
    if isinstance(x, np.longdouble) and np.finfo(np.longdouble).nmant > 52 and np.isfinite(x) and x != 0:
        # wider than float64: its exact ratio, not float(x), which would round first
        exact = Fraction(*x.as_integer_ratio())
        code, flags = round_rational(exact, f, mode, **common)
        return Encoded(code, f, mode, exact, flags)
    if isinstance(x, float) or (isinstance(x, np.generic) and x.dtype.kind in "fV"):
        try:
            xf = float(x)  # exact: every float16/32/64 and ml_dtypes value is a float64 value
        except (TypeError, ValueError):
            raise ValueError(f"value {value!r}: expected a real number") from None
        input_format = FP64
        if isinstance(x, np.generic):
            try:  # denormals-are-zero looks at the input's own type
                input_format = get_format(x.dtype.name)
            except ValueError:
                input_format = FP64
        code, flags = round_scalar(xf, f, mode, input_format=input_format, **common)
        exact_in = Fraction(xf) if math.isfinite(xf) else None
        return Encoded(code, f, mode, exact_in, flags)
    raise ValueError(f"value {value!r}: expected a float, an int, a Fraction or a numeric string")
