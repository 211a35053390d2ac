"""The answers a histogram gives: :class:`Verdict` (what one format and scale do to the values)
and :class:`ScaleAdvice` (the loss scale to use, and why).

>>> import numpy as np
>>> from floatlab.gradhist import histogram
>>> print(histogram(np.array([2.0**-30, 1.0])).verdict("fp16"))
fp16, scale 1 (rne): 50% flush to zero, 0% subnormal, 0% overflow (of 2 values)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from floatlab.exact import exact_decimal, scientific
from floatlab.formats import FloatFormat
from floatlab.text import percent

__all__ = ["ScaleAdvice", "Verdict"]


@dataclass(frozen=True)
class Verdict:
    """What one format, rounding mode and loss scale do to the values of a histogram.

    Every value counted falls in one field: ``zeros`` (exact zeros of the input, they stay zero),
    ``nonfinite`` (inf and NaN of the input), and, for the finite nonzero ones, what rounding
    ``x * scale`` (computed exactly) into ``format`` gives: ``flushed`` (to zero), ``subnormal``
    (nonzero but below the normal range: fewer significant bits), ``normal``, or ``overflow``
    (the IEEE overflow flag: inf, NaN or a saturated maximum), or ``uncertain``: values in a
    histogram cell that straddles a class boundary (only for scales that are not powers of two,
    or exotic formats). So the count that element-wise rounding gives for a class lies between
    its field here and that field plus ``uncertain``; for power-of-two scales and the registered
    formats ``uncertain`` is 0 and every field is exact.

    >>> import numpy as np
    >>> from floatlab.gradhist import histogram
    >>> v = histogram(np.array([2.0**-25, 2.0**-24, 1.0, 0.0])).verdict("fp16")
    >>> v.flushed, v.subnormal, v.normal, v.zeros, v.exact
    (1, 1, 1, 1, True)
    >>> print(v)
    fp16, scale 1 (rne): 25% flush to zero, 25% subnormal, 0% overflow (of 4 values)
    """

    format: str
    scale: float
    rounding: str
    total: int
    zeros: int
    nonfinite: int
    flushed: int
    subnormal: int
    normal: int
    overflow: int
    uncertain: int
    scale_text: str = "1"

    @property
    def exact(self) -> bool:
        """True when no value sits in a cell that straddles a class boundary.

        >>> import numpy as np
        >>> from floatlab.gradhist import histogram
        >>> h = histogram(np.array([65510.0, 1.0]))
        >>> h.verdict("fp16").exact, h.verdict("fp16", 1.0001).exact
        (True, False)
        """
        return self.uncertain == 0

    def fraction(self, field: str) -> float:
        """``field`` (flushed, subnormal, normal, overflow, uncertain, zeros, nonfinite) as a
        fraction of all values counted.

        >>> import numpy as np
        >>> from floatlab.gradhist import histogram
        >>> histogram(np.array([1e-9, 1.0])).verdict("fp16").fraction("flushed")
        0.5
        """
        fields = ("flushed", "subnormal", "normal", "overflow", "uncertain", "zeros", "nonfinite")
        if field not in fields:
            raise ValueError(f"field {field!r}: expected one of {', '.join(fields)}")
        count: int = getattr(self, field)
        return count / self.total if self.total else 0.0

    @property
    def lost(self) -> int:
        """Values that become zero or overflow.

        >>> import numpy as np
        >>> from floatlab.gradhist import histogram
        >>> histogram(np.array([1e-9, 1e9, 1.0])).verdict("fp16").lost
        2
        """
        return self.flushed + self.overflow

    def __str__(self) -> str:
        t = self.total
        text = (
            f"{self.format}, scale {self.scale_text} ({self.rounding}): "
            f"{percent(self.flushed, t)} flush to zero, {percent(self.subnormal, t)} subnormal, "
            f"{percent(self.overflow, t)} overflow (of {t:,} values"
        )
        if self.uncertain:
            text += f"; {percent(self.uncertain, t)} undecided by the histogram's cells"
        return text + ")"

    def to_dict(self) -> dict[str, Any]:
        """The verdict as plain numbers (for JSON).

        >>> import numpy as np
        >>> from floatlab.gradhist import histogram
        >>> histogram(np.array([1e-9, 1.0])).verdict("fp16").to_dict()["fractions"]["flushed"]
        0.5
        """
        keys = ("format", "scale", "rounding", "total", "zeros", "nonfinite")
        counts = ("flushed", "subnormal", "normal", "overflow", "uncertain")
        d: dict[str, Any] = {k: getattr(self, k) for k in keys}
        d.update({k: getattr(self, k) for k in counts})
        d["fractions"] = {k: self.fraction(k) for k in counts}
        return d


@dataclass(frozen=True)
class ScaleAdvice:
    """The power-of-two loss scale :meth:`GradHistogram.recommend_scale` chose, and why.

    ``log2_scale`` is chosen so that ``max|x| * scale <= format.max / 2^headroom`` and, among
    those scales, the fewest values flush to zero and then the fewest become subnormal; when
    several scales tie, the one closest to 1 (the most headroom). ``max_log2_scale`` is the
    largest scale the headroom allows.

    >>> import numpy as np
    >>> from floatlab.gradhist import histogram
    >>> a = histogram(np.full(10, 2.0**-30, np.float32)).recommend_scale("fp16")
    >>> a.log2_scale, a.scale, a.before.flushed, a.after.flushed
    (16, 65536.0, 10, 0)
    """

    format: str
    rounding: str
    headroom: int
    log2_scale: int
    max_log2_scale: int
    max_abs_bound: float
    before: Verdict
    after: Verdict
    reason: str

    @property
    def scale(self) -> float:
        """The scale, 2^log2_scale.

        >>> import numpy as np
        >>> from floatlab.gradhist import histogram
        >>> histogram(np.array([2.0**-20, 1.0])).recommend_scale("fp16").scale
        64.0
        """
        return math.ldexp(1.0, self.log2_scale)

    def __str__(self) -> str:
        return self.reason

    def to_dict(self) -> dict[str, Any]:
        """The advice as plain numbers and text (for JSON).

        >>> import numpy as np
        >>> from floatlab.gradhist import histogram
        >>> histogram(np.array([2.0**-20, 1.0])).recommend_scale("fp16").to_dict()["log2_scale"]
        6
        """
        return {
            "format": self.format,
            "rounding": self.rounding,
            "headroom": self.headroom,
            "scale": self.scale,
            "log2_scale": self.log2_scale,
            "max_log2_scale": self.max_log2_scale,
            "max_abs_bound": self.max_abs_bound,
            "before": self.before.to_dict(),
            "after": self.after.to_dict(),
            "reason": self.reason,
        }


def _short(q: Fraction, spec: str = "g") -> str:
    """``format(q, spec)`` as a float64 would print it, and, beyond float64's range (a format may
    reach 2^16383), its exact value cut to 6 significant digits."""
    if q.numerator.bit_length() - q.denominator.bit_length() < 1000:
        return format(float(q), spec)
    text, _ = scientific(exact_decimal(q), keep=6)
    return text.replace("...", "")


def _advice_text(
    lo: int,
    hi: int,
    f: FloatFormat,
    mode: str,
    headroom: int,
    bound: Fraction,
    limit: Fraction,
    k: int,
    k_max: int,
    before: Verdict,
    after: Verdict,
) -> str:
    """The reason of a :class:`ScaleAdvice` for values whose binades run from 2^lo to 2^hi."""
    t = before.total
    scale = f"2^{k} = {math.ldexp(1.0, k):g}" if k else "1"  # (k is within float64's range)
    bits = f"{headroom} bit{'s' if headroom != 1 else ''}"
    parts = [
        f"max|x| <= {_short(bound, '.4g')} (binade 2^{hi}); {f.name} holds up to {_short(f.max_exact)}, "
        f"so with {bits} of headroom (max|x| * scale <= {_short(limit)}) the scale may go up to 2^{k_max}.",
        f"At scale 1, {percent(before.flushed, t)} of the values flush to zero, "
        f"{percent(before.subnormal, t)} are subnormal and {percent(before.overflow, t)} overflow.",
    ]
    if k == 0 and before.lost + before.subnormal == 0:
        parts.append(f"Nothing to rescue: {f.name} holds these values unscaled; use scale 1.")
    elif k == 0:
        parts.append("No larger scale rescues more values: keep scale 1.")
    else:
        parts.append(
            f"At scale {scale}, {percent(after.flushed, t)} flush, "
            f"{percent(after.subnormal, t)} are subnormal and {percent(after.overflow, t)} overflow."
        )
        if k < 0:
            parts.append(f"The values overflow {f.name} unscaled: scale down by 2^{-k}.")
        elif k < k_max:
            parts.append(f"Scales up to 2^{k_max} give the same counts; 2^{k} keeps the most headroom.")
    if after.flushed:
        parts.append(
            f"{percent(after.flushed, t)} still flush: the values span {hi - lo + 1} binades "
            f"(2^{lo} to 2^{hi}), "
            f"more than the {f.dynamic_range_log2 + 1 - headroom} that {f.name} covers from its smallest "
            f"subnormal up to its largest value less the headroom."
        )
    return " ".join(parts)
