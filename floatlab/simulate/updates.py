"""Swallowed updates: when ``w + u`` in a format leaves ``w`` unchanged, for many updates at once
(:func:`swallowed_updates`) or for one addition explained step by step (:func:`explain_add`).

>>> swallowed_updates([1.0, 1.0], [1e-4, 1e-2], "fp16").n_lost, threshold_ratio("fp16")
(1, 2048)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from floatlab.codec import decode, encode, parse_value
from floatlab.exact import exact_decimal, floor_log2, pow2
from floatlab.formats import FloatFormat, get_format
from floatlab.rounding import MODE_DESCRIPTIONS, RNG, as_float64, check_rounding
from floatlab.simulate.arithmetic import FloatArray, _zero_sum_is_negative, add
from floatlab.text import hex_code, render

__all__ = ["AddExplanation", "SwallowResult", "explain_add", "swallowed_updates", "threshold_ratio"]

BoolArray = npt.NDArray[np.bool_]


def threshold_ratio(fmt: FloatFormat | str) -> int:
    """2^(m+1) for a format with m fraction bits: the weight-to-update ratio where updates start to vanish.

    In round to nearest (either tie rule) and for a normal weight ``w``, half the gap from ``w`` to
    its neighbour is at most ``|w| / 2^(m+1)`` and at least ``|w| / 2^(m+2)``, so:

    * an update with ``|u| > |w| / 2^(m+1)`` is never lost (for ``w = 1`` and ``u > 0`` this is the
      exact boundary: 1 + 2^-11 is a tie that goes back to 1 in fp16);
    * an update with ``|u| < |w| / 2^(m+2)`` is always lost;
    * in between it depends on where ``w`` sits in its binade and on the sign of ``u``.

    >>> threshold_ratio("fp16"), threshold_ratio("bf16"), threshold_ratio("fp32") == 2**24
    (2048, 256, True)
    """
    return 1 << (get_format(fmt).mantissa_bits + 1)


@dataclass(frozen=True, eq=False)
class SwallowResult:
    """What happened to the updates ``w + u`` in a format (see :func:`swallowed_updates`).

    >>> r = swallowed_updates([1.0, 1.0], [1e-4, 1e-2], "fp16")
    >>> r.n_lost, r.share_lost, r.sums.tolist()
    (1, 0.5, [1.0, 1.009765625])
    """

    fmt: FloatFormat
    rounding: str
    weights: FloatArray
    """The weights as stored in the format."""
    updates: FloatArray
    """The updates as stored in the format."""
    sums: FloatArray
    """w + u, rounded once into the format."""
    lost: BoolArray
    """A nonzero update left its (finite) weight unchanged."""
    n_updates: int
    """Nonzero updates (before storing)."""
    n_lost: int
    n_underflowed: int
    """Nonzero updates that were already zero once stored in the format (counted in ``n_lost``)."""
    threshold_ratio: int

    @property
    def share_lost(self) -> float:
        """n_lost / n_updates (0 when there is no nonzero update)."""
        return self.n_lost / self.n_updates if self.n_updates else 0.0

    def to_dict(self) -> dict[str, Any]:
        """The counts as plain numbers (no arrays)."""
        return {
            "format": self.fmt.name,
            "rounding": self.rounding,
            "n_updates": self.n_updates,
            "n_lost": self.n_lost,
            "n_underflowed": self.n_underflowed,
            "share_lost": self.share_lost,
            "threshold_ratio": self.threshold_ratio,
        }

    def __str__(self) -> str:
        return render(self)


def swallowed_updates(
    w: npt.ArrayLike,
    u: npt.ArrayLike,
    fmt: FloatFormat | str,
    rounding: str = "rne",
    *,
    rng: RNG = None,
    saturate: bool = False,
    subnormals: bool = True,
) -> SwallowResult:
    """Apply the updates ``u`` to the weights ``w`` in ``fmt`` and count the ones that vanish.

    An update is lost when it is nonzero and ``w + u``, rounded once into ``fmt``, equals the
    stored (finite) ``w``; that includes updates that were already zero once stored.

    >>> r = swallowed_updates([1.0, 1.0, 1.0], [1e-4, 1e-3, 1e-9], "fp16")
    >>> r.lost.tolist(), r.n_underflowed, r.threshold_ratio
    ([True, False, True], 1, 2048)
    """
    f = get_format(fmt)
    mode = check_rounding(rounding)
    w_in, u_in = np.broadcast_arrays(as_float64(w), as_float64(u))
    kw: dict[str, Any] = {"saturate": saturate, "subnormals": subnormals}
    # adding -0 stores a value unchanged in round to nearest, -0 included (-0 + +0 would be +0)
    ws = np.asarray(add(w_in, -0.0, f, **kw))
    us = np.asarray(add(u_in, -0.0, f, **kw))
    sums = add(ws, us, f, mode, rng=rng, **kw)
    nonzero = u_in != 0
    lost = nonzero & np.isfinite(ws) & (sums == ws)
    underflowed = nonzero & (us == 0)
    return SwallowResult(
        fmt=f,
        rounding=mode,
        weights=ws,
        updates=us,
        sums=sums,
        lost=lost,
        n_updates=int(np.count_nonzero(nonzero)),
        n_lost=int(np.count_nonzero(lost)),
        n_underflowed=int(np.count_nonzero(underflowed)),
        threshold_ratio=threshold_ratio(f),
    )


def _operand(x: float | str | Fraction | int) -> tuple[str, Fraction | float]:
    """The text to show and the exact value of an operand (a float for -0, inf and NaN)."""
    if isinstance(x, str):
        return x.strip(), parse_value(x)
    if isinstance(x, bool) or not isinstance(x, (float, int, Fraction)):
        raise ValueError(f"operand {x!r}: expected a number or a string such as '0.0001'")
    if isinstance(x, float):
        text = repr(x)
        text = text[:-2] if text.endswith(".0") else text
        return text, Fraction(x) if math.isfinite(x) and x != 0 else x
    return str(x), Fraction(x)


@dataclass(frozen=True)
class AddExplanation:
    """One addition ``a + b`` in a format, step by step (see :func:`explain_add`).

    >>> e = explain_add("1", "0.0001", "fp16")
    >>> e.swallowed, e.sum_value, hex(e.b_code)
    (True, 1.0, '0x68e')
    """

    fmt: FloatFormat
    rounding: str
    a_text: str
    b_text: str
    a_code: int
    """a as stored in the format (round to nearest even)."""
    b_code: int
    sum_code: int
    """The sum of the stored operands, rounded once with ``rounding``."""
    exact_sum: Fraction | None
    """The sum of the stored operands, exactly (None when one of them is inf or NaN)."""
    swallowed: bool
    """b was nonzero and the sum is the stored a."""
    lines: tuple[str, ...]
    tie: bool = False
    """The exact sum lay exactly halfway between two neighbouring values of the format (or between
    the largest value and the next one beyond the range): round to nearest settles it by its tie
    rule, ties to even or away from zero, and the explanation says which neighbour won."""

    @property
    def a_value(self) -> float:
        """a as stored, as a float."""
        return decode(self.a_code, self.fmt).value

    @property
    def b_value(self) -> float:
        """b as stored, as a float."""
        return decode(self.b_code, self.fmt).value

    @property
    def sum_value(self) -> float:
        """The rounded sum as a float."""
        return decode(self.sum_code, self.fmt).value

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON-ready values."""
        return {
            "format": self.fmt.name,
            "rounding": self.rounding,
            "a": self.a_text,
            "b": self.b_text,
            "a_code": self.a_code,
            "a_hex": hex_code(self.a_code, self.fmt),
            "a_value": self.a_value,
            "b_code": self.b_code,
            "b_hex": hex_code(self.b_code, self.fmt),
            "b_value": self.b_value,
            "exact_sum": None if self.exact_sum is None else exact_decimal(self.exact_sum),
            "sum_code": self.sum_code,
            "sum_hex": hex_code(self.sum_code, self.fmt),
            "sum_value": self.sum_value,
            "swallowed": self.swallowed,
            "tie": self.tie,
            "text": list(self.lines),
        }

    def __str__(self) -> str:
        return render(self)


def _gaps(w: Fraction, fmt: FloatFormat) -> tuple[Fraction, Fraction]:
    """(ulp, gap toward zero) at the nonzero finite format value ``w``; the gap away from zero is the ulp."""
    mag = abs(w)
    e = max(floor_log2(mag), fmt.emin)
    ulp = pow2(e - fmt.mantissa_bits)
    # just below a power of two the spacing halves (not below the smallest normal: subnormals keep it)
    toward = ulp / 2 if mag == pow2(e) and e > fmt.emin else ulp
    return ulp, toward


def _ratio_text(r: Fraction) -> str:
    return str(r.numerator) if r.denominator == 1 else f"{float(r):.6g}"


def _pow2_text(q: Fraction) -> str:
    return f"2^{floor_log2(q)}"


def _stored_exactly(given: Fraction | float, stored: Fraction | None, value: float) -> bool:
    """Whether storing changed nothing (a NaN stays a NaN, -0 stays -0)."""
    if isinstance(given, Fraction):
        return stored == given
    if math.isnan(given):
        return math.isnan(value)
    return value == given and math.copysign(1.0, value) == math.copysign(1.0, given)


def _threshold_lines(
    w: Fraction, u: Fraction, w_code: int, fmt: FloatFormat, mode: str, w_text: str
) -> list[str]:
    """Why an update of this size and sign survives or vanishes next to this weight."""
    ulp, toward = _gaps(w, fmt)
    outward = (u > 0) == (w > 0)
    gap = ulp if outward else toward
    head = f"ulp({w_text}) = {_pow2_text(ulp)}"
    if gap != ulp:
        head += f", but the gap below {w_text} is {_pow2_text(gap)}"
    if mode in ("rne", "rna"):
        r0 = threshold_ratio(fmt)
        r = _ratio_text(abs(w) / (gap / 2))
        half = "half an ulp" if gap == ulp else "half that gap"
        # at a power of two the gap toward zero is half the ulp: an update of the other sign
        # survives down to half of that (1 - 1/3000 is kept in fp16), so the rule is this sign's
        who = "an update" if toward == ulp else "an update of this sign"
        if abs(u) == gap / 2:
            # the one size of update that round to nearest cannot settle by distance
            lines = [
                f"{head}; the update is exactly {half}, so the tie rule decided.",
                f"Anything less vanishes: {who} more than {r} times smaller than the weight is always lost.",
            ]
        elif gap == ulp:
            lines = [
                f"{head}; anything below half an ulp vanishes, so {who} more than",
                f"{r} times smaller than the weight is always lost.",
            ]
        else:
            lines = [
                f"{head}; anything below half that gap",
                f"vanishes, so an update more than {r} times smaller than the weight is always lost.",
            ]
        if abs(w) >= fmt.smallest_normal_exact:
            lines += [
                f"For any normal weight in {fmt.name}: more than {2 * r0:,} times smaller is always lost,",
                f"less than {r0:,} times smaller never is.",
            ]
        return lines
    full = _ratio_text(abs(w) / gap)
    if mode == "stochastic":
        p = min(abs(u) / gap, Fraction(1))
        return [
            f"{head}; stochastic rounding moves the sum to the next value with probability",
            f"|update| / gap = {float(p):.4g}, so the update survives on average.",
        ]
    if mode == "rodd":
        if w_code % 2 == 0:
            return [
                f"{head}; {w_text} has an even last bit,",
                "which round to odd never gives an inexact sum.",
            ]
        return [
            f"{head}; round to odd keeps {w_text} (an odd last bit) for anything below the gap, so an",
            f"update more than {full} times smaller than the weight is always lost.",
        ]
    up = u > 0
    keeps = (mode == "rtz" and outward) or (mode == "rup" and not up) or (mode == "rdown" and up)
    if keeps:
        return [
            f"{head}; {MODE_DESCRIPTIONS[mode]} keeps {w_text} until the sum reaches the next value,",
            f"so an update more than {full} times smaller than the weight is always lost.",
        ]
    return [f"{head};", f"{MODE_DESCRIPTIONS[mode]} never swallows an update in this direction."]


def _tie_lines(q: Fraction, s_code: int, fmt: FloatFormat, mode: str, store: dict[str, Any]) -> list[str]:
    """When the exact value ``q`` lies exactly halfway between two neighbouring values of ``fmt``:
    the tie, and which neighbour round to nearest gave it to and by which rule (``s_code`` is
    the result); an empty list otherwise. Beyond the largest value the upper neighbour is the
    next value the exponent would allow, as IEEE 754 rounds (65520 is a tie in fp16)."""
    if q == 0 or (not store["subnormals"] and abs(q) < fmt.smallest_normal_exact):
        return []
    away = "rup" if q > 0 else "rdown"
    near = decode(int(encode(q, fmt, "rtz", **store)), fmt)
    far = decode(int(encode(q, fmt, away, **store)), fmt)
    near_q, far_q, ulp = near.exact, far.exact, near.ulp
    if near_q is None or ulp is None:
        return []
    beyond = far_q is None or far_q == near_q
    if beyond:
        if abs(near_q) != fmt.max_exact:
            return []
        # the value after the largest one, had the format one more binade
        far_q = near_q + ulp if q > 0 else near_q - ulp
    if far_q is None or q != (near_q + far_q) / 2:
        return []
    far_text = (
        f"{exact_decimal(far_q)} (beyond the range of {fmt.name})" if beyond else f"{far.decimal} ({far.hex})"
    )
    texts = {near_q: f"{near.decimal} ({near.hex})", far_q: far_text}
    lo, hi = sorted(texts)
    # neighbouring codes: one has a last bit of 0, the other of 1 (the sign bit is the top bit)
    to_near = mode == "rne" and near.code % 2 == 0
    won = decode(s_code, fmt)
    if to_near or not beyond:
        winner = texts[near_q] if to_near else texts[far_q]
    else:
        winner = f"{exact_decimal(far_q)}, out of range: the sum becomes {won.decimal} ({won.hex})"
    rule = (
        "Ties go to the neighbour whose last bit is 0 (ties to even)"
        if mode == "rne"
        else "Ties go to the neighbour farther from zero (ties away from zero)"
    )
    return [
        f"{exact_decimal(q)} is exactly halfway between {texts[lo]} and {texts[hi]}: a tie.",
        f"{rule}: {winner}.",
    ]


def explain_add(
    a: float | str | Fraction | int,
    b: float | str | Fraction | int,
    fmt: FloatFormat | str = "fp16",
    rounding: str = "rne",
    *,
    rng: RNG = None,
    saturate: bool = False,
    subnormals: bool = True,
) -> AddExplanation:
    """Explain ``a + b`` in ``fmt``: how each operand is stored, the exact sum, what rounding kept.

    Strings are parsed exactly ("0.1" is one tenth, not the float nearest to it). The operands are
    stored with round to nearest even, as :func:`add` does; their sum is rounded once with
    ``rounding`` by the scalar reference (stochastic rounding draws its bits from ``rng``).

    >>> print(explain_add("1", "0.0001", "fp16"))
      1 + 0.0001 in fp16, round to nearest, ties to even
      0.0001 is stored as 0x068E = 0.00010001659393310546875 (exact)
      exact sum 1.00010001659393310546875 -> 1 (0x3C00): the update was swallowed
      ulp(1) = 2^-10; anything below half an ulp vanishes, so an update of this sign more than
      2048 times smaller than the weight is always lost.
      For any normal weight in fp16: more than 4,096 times smaller is always lost,
      less than 2,048 times smaller never is.

    An update of exactly half the gap makes the exact sum a tie, and the tie rule picks the result:

    >>> e = explain_add("1.05078125", "0.00048828125", "fp16")   # w + 2^-11, half of ulp(w)
    >>> e.tie, e.swallowed
    (True, True)
    >>> for line in e.lines[2:4]:
    ...     print(line)
    1.05126953125 is exactly halfway between 1.05078125 (0x3C34) and 1.0517578125 (0x3C35): a tie.
    Ties go to the neighbour whose last bit is 0 (ties to even): 1.05078125 (0x3C34).
    >>> explain_add("1.05078125", "0.00048828125", "fp16", "rna").sum_value   # away from zero
    1.0517578125
    """
    f = get_format(fmt)
    mode = check_rounding(rounding)
    a_text, a_in = _operand(a)
    b_text, b_in = _operand(b)
    store: dict[str, Any] = {"saturate": saturate, "subnormals": subnormals}
    a_code, b_code = int(encode(a_in, f, "rne", **store)), int(encode(b_in, f, "rne", **store))
    a_dec, b_dec = decode(a_code, f), decode(b_code, f)
    a_q: Fraction | None = a_dec.exact
    b_q: Fraction | None = b_dec.exact
    exact: Fraction | None = None
    total: Fraction | float
    if a_q is not None and b_q is not None:
        exact = a_q + b_q
        if exact != 0:
            total = exact
        else:
            total = -0.0 if _zero_sum_is_negative(mode, bool(a_dec.sign), bool(b_dec.sign)) else 0.0
    else:
        with np.errstate(all="ignore"):
            total = float(np.float64(a_dec.value) + np.float64(b_dec.value))  # inf - inf is NaN
    s_code = int(encode(total, f, mode, rng=rng, **store))
    s_dec = decode(s_code, f)
    s_q: Fraction | None = s_dec.exact
    b_nonzero = not (isinstance(b_in, float) and (b_in == 0 or math.isnan(b_in)))
    swallowed = bool(b_nonzero and a_q is not None and s_code == a_code)

    lines = [f"{a_text} + {b_text} in {f.name}, {MODE_DESCRIPTIONS[mode]}"]
    for text, given, code, q, dec in ((a_text, a_in, a_code, a_q, a_dec), (b_text, b_in, b_code, b_q, b_dec)):
        if not _stored_exactly(given, q, dec.value):
            lines.append(f"{text} is stored as {hex_code(code, f)} = {dec.decimal} (exact)")
    result = f"{s_dec.decimal} ({hex_code(s_code, f)})"
    if exact is None:
        lines.append(f"{a_dec.decimal} + {b_dec.decimal} -> {result}")
    elif swallowed and b_q == 0:
        lines.append(f"exact sum {exact_decimal(exact)} -> {result}: the update was lost when it was stored")
    elif swallowed:
        lines.append(f"exact sum {exact_decimal(exact)} -> {result}: the update was swallowed")
    elif s_q == exact:
        lines.append(f"exact sum {exact_decimal(exact)} = {result}: no rounding needed")
    else:
        lines.append(f"exact sum {exact_decimal(exact)} -> {result}")
    tie_lines = [] if exact is None else _tie_lines(exact, s_code, f, mode, store)
    if mode in ("rne", "rna"):
        lines += tie_lines
    if a_q is not None and b_q is not None and a_q != 0 and b_q != 0 and abs(b_q) < abs(a_q):
        w_text = a_text if isinstance(a_in, Fraction) and a_q == a_in else a_dec.decimal
        lines += _threshold_lines(a_q, b_q, a_code, f, mode, w_text)
    return AddExplanation(
        fmt=f,
        rounding=mode,
        a_text=a_text,
        b_text=b_text,
        a_code=a_code,
        b_code=b_code,
        sum_code=s_code,
        exact_sum=exact,
        swallowed=swallowed,
        lines=tuple(lines),
        tie=bool(tie_lines),
    )
