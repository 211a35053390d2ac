"""The knobs of rounding, checked in one place: :class:`RoundingOptions`, and the one input check.

Every public function that rounds takes the mode ``rounding`` and the same keyword-only knobs,
:class:`RoundingKnobs` (``rng``, ``saturate``, ``subnormals``, ``random_bits``), and hands them to
:meth:`RoundingOptions.make`, so a bad value gets the same one-line error wherever it is given.
Arrays enter through :func:`as_float_array`, which says which formats floatlab rounds from.

>>> o = RoundingOptions.make("floor", saturate=True)
>>> o.mode, o.saturate, o.subnormals, o.key
('rdown', True, True, (0, 0))
>>> RoundingOptions.make("stochastic", rng=7).key != (0, 0)
True
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeAlias, TypedDict, TypeVar

import numpy as np
from numpy.typing import ArrayLike

from floatlab._signature import spelled_out
from floatlab.formats import BF16, FP16, FP32, FP64, FloatFormat
from floatlab.rounding.spec import DEFAULT_RANDOM_BITS, Rounding, check_random_bits, check_rounding

__all__ = [
    "RNG",
    "RoundingKnobs",
    "RoundingOptions",
    "RoundingStats",
    "as_float64",
    "as_float_array",
    "as_generator",
    "check_bool",
    "knob_signature",
    "stochastic_key",
]

#: what ``rng=`` takes everywhere: a numpy Generator, a non-negative int seed, or None (a string:
#: naming np.random here would import it, 15 ms, on the path of ``floatlab decode``)
RNG: TypeAlias = "np.random.Generator | int | None"


def check_bool(name: str, value: object) -> bool:
    """``value`` if it is a real boolean (Python's or numpy's), else ValueError naming ``name``:
    ``saturate="no"`` must not count as true.

    >>> check_bool("saturate", np.True_)
    True
    """
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise ValueError(f"{name}={value!r}: expected True or False")


def as_generator(rng: RNG) -> np.random.Generator | None:
    """``rng`` as a numpy Generator (a non-negative int seed becomes ``default_rng(seed)``), or None:
    for a function that rounds several times and must draw a new key each time.

    >>> as_generator(None) is None, type(as_generator(5)).__name__
    (True, 'Generator')
    """
    if rng is None or isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, (bool, np.bool_)) and rng >= 0:
        return np.random.default_rng(int(rng))
    raise ValueError(f"rng={rng!r}: expected a numpy Generator or a non-negative int seed")


def stochastic_key(rng: RNG, mode: str) -> tuple[int, int]:
    """The key of the counter-based random bits: two uint32 drawn from ``rng`` (a numpy Generator
    or a non-negative int seed). Only stochastic rounding draws (and needs) them.

    >>> stochastic_key(None, "rne"), stochastic_key(3, "rne")
    ((0, 0), (0, 0))
    """
    if rng is None:
        if mode == "stochastic":
            raise ValueError("rounding='stochastic' needs rng: a numpy Generator or an int seed")
        return 0, 0
    rng = as_generator(rng)
    assert rng is not None
    if mode != "stochastic":
        return 0, 0  # only stochastic rounding consumes random numbers
    k = rng.integers(0, 2**32, size=2, dtype=np.uint64)
    return int(k[0]), int(k[1])


@dataclass(frozen=True)
class RoundingOptions:
    """One rounding's settings, validated: the mode, overflow and subnormal handling, and the
    random bits of stochastic rounding (``key`` is drawn from ``rng`` once, at :meth:`make`).

    ``saturate`` clamps overflows to the largest finite value; ``subnormals=False`` treats
    subnormal inputs as zero (denormals-are-zero) and flushes subnormal results to zero
    (flush-to-zero); ``random_bits`` (1 to 32) is how many random bits stochastic rounding reads.

    >>> RoundingOptions.make("nearest", subnormals=False)
    RoundingOptions(mode='rne', saturate=False, subnormals=False, random_bits=32, key=(0, 0))
    >>> RoundingOptions.make("rne", saturate="no")
    Traceback (most recent call last):
    ...
    ValueError: saturate='no': expected True or False
    """

    mode: Rounding = "rne"
    saturate: bool = False
    subnormals: bool = True
    random_bits: int = DEFAULT_RANDOM_BITS
    key: tuple[int, int] = (0, 0)

    @classmethod
    def make(
        cls,
        rounding: str = "rne",
        *,
        rng: RNG = None,
        saturate: bool = False,
        subnormals: bool = True,
        random_bits: int = DEFAULT_RANDOM_BITS,
    ) -> RoundingOptions:
        """Check every knob (one error text per bad value) and draw the stochastic key."""
        try:
            # the checks are cached: a training step rounds many small arrays with the same knobs
            checked = _checked(rounding, saturate, subnormals, random_bits)
        except TypeError:  # an unhashable knob: check it uncached, which names it in the error
            checked = _checked.__wrapped__(rounding, saturate, subnormals, random_bits)
        key = stochastic_key(rng, checked.mode)
        if key == (0, 0):
            return checked
        return cls(checked.mode, checked.saturate, checked.subnormals, checked.random_bits, key)

    def without_key(self) -> RoundingOptions:
        """These options with the key (0, 0): what the derived parameters depend on.

        >>> RoundingOptions.make("stochastic", rng=3).without_key().key
        (0, 0)
        """
        return RoundingOptions(self.mode, self.saturate, self.subnormals, self.random_bits)

    @property
    def stochastic(self) -> bool:
        return self.mode == "stochastic"


class RoundingKnobs(TypedDict, total=False):
    """The keyword-only knobs of every function that rounds, typed once: a function takes them as
    ``**knobs: Unpack[RoundingKnobs]`` and hands them to :meth:`RoundingOptions.make`, whose
    defaults they have (:func:`knob_signature` spells them out for help() and the API reference).
    A name that is not a knob is refused by a TypeError that names the function called and the
    closest knob.

    >>> RoundingOptions.make("rne", **RoundingKnobs(saturate=True)).saturate
    True
    >>> import floatlab as fl
    >>> fl.round_array(np.ones(2), "fp16", sturate=True)
    Traceback (most recent call last):
    ...
    TypeError: round_array() got an unexpected keyword argument 'sturate': did you mean saturate?
    """

    rng: RNG
    saturate: bool
    subnormals: bool
    random_bits: int


# typed: True and 1, np.True_ and True are told apart, so that 1 is refused however often it comes
@functools.lru_cache(maxsize=256, typed=True)
def _checked(rounding: str, saturate: object, subnormals: object, random_bits: object) -> RoundingOptions:
    return RoundingOptions(
        check_rounding(rounding),
        check_bool("saturate", saturate),
        check_bool("subnormals", subnormals),
        check_random_bits(random_bits),
    )


@dataclass(frozen=True)
class RoundingStats:
    """How many elements of one array rounding raised each IEEE 754 flag.

    Counted per element with the semantics of :func:`~floatlab.rounding.round_scalar` (tininess
    detected after rounding; a flushed subnormal is inexact and underflows). ``total`` is the
    number of elements rounded.

    >>> import numpy as np, floatlab as fl
    >>> fl.encode_array_with_flags(np.array([1.0, 0.1, 1e-9, 1e9]), "fp16").stats
    RoundingStats(total=4, inexact=3, underflow=1, overflow=1, invalid=0)
    """

    total: int
    inexact: int
    underflow: int
    overflow: int
    invalid: int


#: the formats of the arrays floatlab rounds from, by dtype name (the one table of them)
FORMAT_OF_DTYPE_NAME: dict[str, FloatFormat] = {
    "float64": FP64,
    "float32": FP32,
    "float16": FP16,
    "bfloat16": BF16,
}
_FORMAT_OF_DTYPE: dict[np.dtype[Any], FloatFormat] = {}  # (filled on first sight of each dtype)
_EXPECTED_DTYPES = (
    "expected float64, float32, float16 or bfloat16 (integers and booleans are converted to float64)"
)


def as_float_array(x: ArrayLike) -> tuple[np.ndarray, FloatFormat]:
    """``x`` as a native-endian, C-contiguous float64/32/16 or bfloat16 array, with its format:
    the one input check of everything that rounds. Integers and booleans become float64 (an
    integer beyond 2^53 is refused rather than rounded twice); complex, strings, objects, dates
    and float128 are refused with a ValueError.

    >>> a, fmt = as_float_array([1, 2])
    >>> a.dtype, fmt.name
    (dtype('float64'), 'fp64')
    """
    try:
        a = np.asarray(x)
    except (ValueError, TypeError) as e:  # ragged nested lists, objects numpy cannot take
        raise ValueError(f"x: expected an array of numbers ({e})") from None
    kind = a.dtype.kind
    if kind in "biu":
        a = _integers_as_float64(a)
    fmt = _FORMAT_OF_DTYPE.get(a.dtype)
    if fmt is None:
        name = a.dtype.name if kind != "V" else str(a.dtype)
        if name not in FORMAT_OF_DTYPE_NAME:
            raise ValueError(f"x has dtype {a.dtype}: {_EXPECTED_DTYPES}")
        fmt = _FORMAT_OF_DTYPE[a.dtype] = FORMAT_OF_DTYPE_NAME[name]
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))  # a byte swap, no float conversion
    return (a if a.flags.c_contiguous else np.ascontiguousarray(a)), fmt  # (keeps a 0-d array 0-d)


def as_float64(x: ArrayLike) -> np.ndarray:
    """``x`` through :func:`as_float_array`'s check, widened exactly to float64 (a signalling NaN
    is quietened, as every IEEE conversion does): for the simulators, which compute in float64.

    >>> as_float64([1, 2.5]).tolist()
    [1.0, 2.5]
    >>> as_float64(["0.1"])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: x has dtype <U3: expected float64, float32, float16 or bfloat16 (...)
    """
    a, _ = as_float_array(x)
    if a.dtype == np.float64:
        return a
    with np.errstate(invalid="ignore"):  # widening quietens a signalling NaN: nothing to warn about
        return a.astype(np.float64)


def _integers_as_float64(a: np.ndarray) -> np.ndarray:
    """Integers and booleans as float64 values, refused where float64 would round them: rounding
    such an integer into a format would round twice (2^60 + 2^36 + 1 -> fp32)."""
    wide = a.astype(np.float64)
    if a.dtype.itemsize >= 8 and a.size:
        top = 2.0**64 if a.dtype.kind == "u" else 2.0**63
        with np.errstate(invalid="ignore"):  # out-of-range values are caught by the first test
            bad = (wide >= top) | (wide.astype(a.dtype) != a)
        if bool(np.any(bad)):
            first = a.reshape(-1)[int(np.argmax(bad.reshape(-1)))]
            raise ValueError(
                f"x holds the integer {int(first)}, which float64 cannot hold exactly: expected "
                "integers of at most 53 significant bits (pass such integers one by one to "
                "floatlab.encode, which rounds them once)"
            )
    return wide


F = TypeVar("F", bound=Callable[..., Any])


def knob_signature(fn: F) -> F:
    """``fn``, which takes the knobs as ``**knobs: Unpack[RoundingKnobs]``, shown with them spelled
    out as keyword-only parameters with :meth:`RoundingOptions.make`'s defaults (before a last
    ``flags``): the signature help() and the API reference show. The function itself is unchanged.

    >>> import inspect
    >>> @knob_signature
    ... def f(x: float, *, flags: bool = False, **knobs: Any) -> None: ...
    >>> list(inspect.signature(f).parameters), inspect.signature(f).parameters["saturate"].default
    (['x', 'rng', 'saturate', 'subnormals', 'random_bits', 'flags'], False)
    """
    return spelled_out(RoundingOptions.make, RoundingKnobs.__annotations__, before="flags")(fn)
