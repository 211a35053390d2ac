"""The streaming, mergeable histogram itself: :class:`GradHistogram` and :func:`histogram`.

>>> import numpy as np
>>> h = histogram(np.array([1.0, 2.0**-20, 0.0], np.float32))
>>> h.total, h.zeros, h.min_exponent
(3, 1, -20)
"""

from __future__ import annotations

import operator
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from floatlab.exact import floor_log2, pow2
from floatlab.formats import FloatFormat, get_format
from floatlab.gradhist._classes import (
    CLASSES,
    _as_scale,
    _cell_sup,
    _checked,
    _deterministic,
    _split,
    _thresholds,
)
from floatlab.gradhist._inputs import _read
from floatlab.gradhist._kernels import E_MIN, NCELL, Counts
from floatlab.gradhist._shards import CHUNK, read_shard, read_shards, shard_plan
from floatlab.gradhist._verdict import ScaleAdvice, Verdict, _advice_text
from floatlab.rounding import MODE_DESCRIPTIONS
from floatlab.text import percent, scale_text

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["GradHistogram", "histogram"]


class GradHistogram:
    """A streaming, mergeable histogram of the base-2 exponents of floating-point values.

    ``GradHistogram(x)`` counts ``x`` at once; ``update(chunk)`` adds more; ``h1 + h2`` merges.
    Inputs: numpy arrays, torch tensors (any device), device arrays that copy to the host, or
    anything ``numpy.asarray`` takes, of float64, float32, float16, bfloat16 or an ml_dtypes
    8/6/4-bit float type. All dtypes share one exponent axis (float64's, 2^-1074 to 2^1023).

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> x = rng.standard_normal(10_000).astype(np.float32)
    >>> h = GradHistogram(x[:5_000]).update(x[5_000:])
    >>> h == GradHistogram(x[:3_000]) + GradHistogram(x[3_000:]), h.total
    (True, 10000)
    """

    def __init__(self, x: Any = None) -> None:
        self._e0 = 0
        self._cells: npt.NDArray[np.int64] = np.zeros((2, 0, NCELL), np.int64)
        self._zeros = np.zeros(2, np.int64)
        self._inf = np.zeros(2, np.int64)
        self._nan = 0
        self._subnormal = 0
        self._dtypes: set[str] = set()
        self._cum: npt.NDArray[np.int64] | None = None
        if x is not None:
            self.update(x)

    # ---- building -----------------------------------------------------------------------------
    def update(self, x: Any) -> GradHistogram:
        """Count the values of ``x`` too; returns the histogram itself.

        >>> import numpy as np
        >>> GradHistogram().update(np.zeros(3, np.float16)).zeros
        3
        """
        self._absorb(*_read(x))
        return self

    def _absorb(self, c: Counts, dtype: str) -> None:
        rows = np.flatnonzero(c.block.any(axis=(0, 2)))
        if rows.size:
            self._add_block(c.e0 + int(rows[0]), c.block[:, rows[0] : rows[-1] + 1])
        self._zeros += c.zeros
        self._inf += c.inf
        self._nan += int(c.nan)
        self._subnormal += int(c.subnormal)
        self._dtypes.add(dtype)
        self._cum = None

    def _add_block(self, e0: int, block: npt.NDArray[np.int64]) -> None:
        n_old = self._cells.shape[1]
        n = block.shape[1]
        if n_old == 0:
            self._e0, self._cells = e0, block.astype(np.int64, copy=True)
            return
        lo = min(self._e0, e0)
        hi = max(self._e0 + n_old, e0 + n)
        if lo != self._e0 or hi != self._e0 + n_old:
            grown = np.zeros((2, hi - lo, NCELL), np.int64)
            grown[:, self._e0 - lo : self._e0 - lo + n_old] = self._cells
            self._e0, self._cells = lo, grown
        self._cells[:, e0 - self._e0 : e0 - self._e0 + n] += block

    @classmethod
    def from_files(
        cls, source: Any, *, chunk: int = CHUNK, dask: bool = False, scheduler: Any = None
    ) -> GradHistogram:
        """The histogram of every value in many files: a folder, a glob or a list of ``.npy``/``.npz``
        shards, or a Zarr array, read ``chunk`` values at a time (memory stays about two chunks), or
        with ``dask`` counted one shard a Dask task (``scheduler``: Dask's, "threads" by default, or
        a ``distributed.Client``) and merged in a tree. Bin for bin the histogram of the values in
        memory. A shard that is not a float array, or is truncated, is named before any counting.

        >>> import numpy as np, tempfile, os
        >>> p = os.path.join(tempfile.mkdtemp(), "g.npy")
        >>> np.save(p, np.array([1.0, 2.0**-30, 0.0], np.float32))
        >>> GradHistogram.from_files([p], chunk=2) == GradHistogram(np.load(p))
        True
        """
        if not isinstance(chunk, int) or chunk < 1:
            raise ValueError(f"chunk={chunk!r}: expected a number of values >= 1")
        plan = shard_plan(source)
        if not dask:
            h = cls()
            for values in read_shards(plan, chunk):
                h.update(values)
            return h
        try:
            import dask.bag as db  # type: ignore[import-untyped,unused-ignore]
        except ImportError as e:
            raise ValueError(
                "GradHistogram.from_files(dask=True) needs dask: pip install 'floatlab[scale]'"
            ) from e
        if not plan:
            return cls()
        bag = db.from_sequence(plan, npartitions=len(plan))  # type: ignore[no-untyped-call,unused-ignore]
        counted = bag.map(_count_shard, chunk)
        out: GradHistogram = counted.fold(operator.add).compute(scheduler=scheduler or "threads")
        return out

    def copy(self) -> GradHistogram:
        """An independent copy.

        >>> import numpy as np
        >>> h = histogram(np.ones(3))
        >>> c = h.copy().update(np.ones(2))
        >>> h.total, c.total
        (3, 5)
        """
        h = GradHistogram()
        h._e0, h._cells = self._e0, self._cells.copy()
        h._zeros, h._inf = self._zeros.copy(), self._inf.copy()
        h._nan, h._subnormal, h._dtypes = self._nan, self._subnormal, set(self._dtypes)
        return h

    def __iadd__(self, other: GradHistogram) -> GradHistogram:
        if not isinstance(other, GradHistogram):
            return NotImplemented
        if other._cells.shape[1]:
            self._add_block(other._e0, other._cells)
        self._zeros += other._zeros
        self._inf += other._inf
        self._nan += other._nan
        self._subnormal += other._subnormal
        self._dtypes |= other._dtypes
        self._cum = None
        return self

    def __add__(self, other: GradHistogram) -> GradHistogram:
        if not isinstance(other, GradHistogram):
            return NotImplemented
        h = self.copy()
        h += other
        return h

    def __radd__(self, other: object) -> GradHistogram:
        if isinstance(other, int) and other == 0:  # sum() starts from 0
            return self.copy()
        return NotImplemented

    def _trimmed(self) -> tuple[int, npt.NDArray[np.int64]]:
        rows = np.flatnonzero(self._cells.any(axis=(0, 2)))
        if not rows.size:
            return 0, self._cells[:, :0]
        return self._e0 + int(rows[0]), self._cells[:, rows[0] : rows[-1] + 1]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GradHistogram):
            return NotImplemented
        (a0, a), (b0, b) = self._trimmed(), other._trimmed()
        return (
            a0 == b0
            and a.shape == b.shape
            and bool((a == b).all())
            and bool((self._zeros == other._zeros).all())
            and bool((self._inf == other._inf).all())
            and (self._nan, self._subnormal, self._dtypes) == (other._nan, other._subnormal, other._dtypes)
        )

    __hash__ = None  # type: ignore[assignment]  # mutable

    # ---- what it holds ------------------------------------------------------------------------
    @property
    def total(self) -> int:
        """Every value counted, zeros, infinities and NaNs included.

        >>> import numpy as np
        >>> h = histogram(np.array([1.0, -2.0, 0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40], np.float32))
        >>> h.total, h.finite, h.negative, h.zeros, h.posinf, h.neginf, h.nan, h.subnormal_inputs
        (8, 3, 1, 2, 1, 1, 1, 1)
        """
        return self.finite + self.zeros + self.posinf + self.neginf + self.nan

    @property
    def finite(self) -> int:
        """Finite nonzero values (see :attr:`total` for an example)."""
        return int(self._cells.sum())

    @property
    def zeros(self) -> int:
        """Exact zeros (either sign; see :attr:`total`)."""
        return int(self._zeros.sum())

    @property
    def negative(self) -> int:
        """Finite nonzero values below zero (see :attr:`total`)."""
        return int(self._cells[1].sum())

    @property
    def posinf(self) -> int:
        """Values equal to +inf (see :attr:`total`)."""
        return int(self._inf[0])

    @property
    def neginf(self) -> int:
        """Values equal to -inf (see :attr:`total`)."""
        return int(self._inf[1])

    @property
    def nan(self) -> int:
        """NaNs, quiet or signalling, of either sign (see :attr:`total`)."""
        return self._nan

    @property
    def subnormal_inputs(self) -> int:
        """Values that were subnormal in their own dtype (a float32 below 2^-126, say)."""
        return self._subnormal

    @property
    def dtypes(self) -> tuple[str, ...]:
        """The dtypes counted so far, sorted.

        >>> import numpy as np
        >>> histogram(np.ones(2, np.float16), np.ones(2)).dtypes
        ('float16', 'float64')
        """
        return tuple(sorted(self._dtypes))

    def exponent_counts(self, sign: str = "both") -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """(exponents, counts): finite nonzero values per binade [2^e, 2^(e+1)), from the
        smallest occupied exponent to the largest. ``sign``: "both", "positive" or "negative".

        >>> import numpy as np
        >>> e, n = histogram(np.array([0.75, 1.0, 1.5, -4.0, 0.0])).exponent_counts()
        >>> e.tolist(), n.tolist()
        ([-1, 0, 1, 2], [1, 2, 0, 1])
        """
        sel = {"both": slice(None), "positive": slice(0, 1), "negative": slice(1, 2)}.get(sign)
        if sel is None:
            raise ValueError(f"sign={sign!r}: expected 'both', 'positive' or 'negative'")
        e0, cells = self._trimmed()
        counts = cells[sel].sum(axis=(0, 2))
        return np.arange(e0, e0 + counts.size, dtype=np.int64), counts.astype(np.int64)

    @property
    def min_exponent(self) -> int | None:
        """floor(log2) of the smallest nonzero finite ``|x|``, or None.

        >>> import numpy as np
        >>> h = histogram(np.array([0.3, -12.0, 0.0]))
        >>> h.min_exponent, h.max_exponent, GradHistogram().min_exponent
        (-2, 3, None)
        """
        e0, cells = self._trimmed()
        return e0 if cells.shape[1] else None

    @property
    def max_exponent(self) -> int | None:
        """floor(log2) of the largest finite ``|x|``, or None (see :attr:`min_exponent`)."""
        e0, cells = self._trimmed()
        return e0 + cells.shape[1] - 1 if cells.shape[1] else None

    def _max_bound(self) -> Fraction | None:
        """An exact upper bound of ``max|x|`` over finite values: the top of the highest cell."""
        e0, cells = self._trimmed()
        if not cells.shape[1]:
            return None
        row = cells[:, -1].sum(axis=0)
        return _cell_sup(e0 + cells.shape[1] - 1, int(np.flatnonzero(row)[-1]))

    @property
    def max_abs_bound(self) -> float:
        """An upper bound of the largest finite ``|x|``, within 2^-8 of it (0.0 when there is none).

        >>> import numpy as np
        >>> histogram(np.array([3.0, -0.5])).max_abs_bound
        3.0
        """
        b = self._max_bound()
        return 0.0 if b is None else float(b)

    def count_below(self, t: float) -> int:
        """How many finite nonzero values have ``|x| < t``, for a threshold ``t`` that lies on the
        histogram's grid (a power of two, or any value with at most 9 significant bits).

        >>> import numpy as np
        >>> histogram(np.array([2.0**-30, 2.0**-24, 1.0, 0.0])).count_below(2**-24)
        1
        """
        q = _as_scale(t, "t")
        g, straddles = _split(q, True)
        if straddles:
            raise ValueError(
                f"t={t!r} falls inside a histogram cell: expected a power of two or a value with at "
                "most 9 significant bits"
            )
        return self._count_cells_below(g, 0) + self._count_cells_below(g, 1)

    # ---- verdicts -----------------------------------------------------------------------------
    def _cumulative(self) -> npt.NDArray[np.int64]:
        if self._cum is None:
            flat = self._cells.reshape(2, -1)
            cum = np.zeros((2, flat.shape[1] + 1), np.int64)
            np.cumsum(flat, axis=1, out=cum[:, 1:])
            self._cum = cum
        return self._cum

    def _local(self, g: int) -> int:
        width = int(self._cells.shape[1]) * NCELL
        return min(max(g - (self._e0 - E_MIN) * NCELL, 0), width)

    def _count_cells_below(self, g: int, sign: int) -> int:
        return int(self._cumulative()[sign, self._local(g)])

    def _class_runs(
        self, fmt: FloatFormat, scale: Fraction, mode: str, subnormals: bool
    ) -> list[tuple[int, int, int, int]]:
        """(sign, class, lo, hi): the local cells [lo, hi) whose values round to each class, for both
        signs, empty runs left out (cells that straddle a class boundary are in no run)."""
        width = self._cells.shape[1] * NCELL
        runs: list[tuple[int, int, int, int]] = []
        for sign in (0, 1):
            cuts: list[tuple[int, int]] = []  # (b, a): cells < b below the boundary, cells >= a above
            for t, closed in _thresholds(fmt, mode, sign == 1, subnormals):
                g, straddles = _split(t / scale, closed)
                p = g - (self._e0 - E_MIN) * NCELL
                if p < 0 or p >= width:
                    p = min(max(p, 0), width)
                    cuts.append((p, p))
                else:
                    cuts.append((p, p + 1 if straddles else p))
            (b1, a1), (b2, a2), (b3, a3) = cuts
            ranges = [(0, b1), (a1, b2), (a2, b3), (a3, width)]
            runs += [(sign, k, lo, hi) for k, (lo, hi) in enumerate(ranges) if hi > lo]
        return runs

    def verdict(
        self,
        fmt: FloatFormat | str = "fp16",
        scale: float | Fraction = 1,
        rounding: str = "rne",
        *,
        subnormals: bool = True,
    ) -> Verdict:
        """What rounding ``x * scale`` into ``fmt`` does to the values counted (see :class:`Verdict`).

        ``subnormals=False`` flushes subnormal results to zero (a flush-to-zero unit).
        The directed modes ("rup", "rdown") are sign-aware: the histogram keeps the signs apart.

        >>> import numpy as np
        >>> h = histogram(np.array([2.0**-26, 2.0**-20, 3e4]))
        >>> h.verdict("fp16").flushed, h.verdict("fp16", scale=1024).flushed, h.verdict("fp16", 4).overflow
        (1, 0, 1)
        """
        f, mode, q = _checked(fmt, scale, rounding)
        cum = self._cumulative()
        per_class = [0, 0, 0, 0]
        for s, k, lo, hi in self._class_runs(f, q, mode, subnormals):
            per_class[k] += int(cum[s, hi] - cum[s, lo])
        finite = self.finite
        return Verdict(
            format=f.name,
            scale=float(q),
            rounding=mode,
            total=self.total,
            zeros=self.zeros,
            nonfinite=self.posinf + self.neginf + self.nan,
            flushed=per_class[0],
            subnormal=per_class[1],
            normal=per_class[2],
            overflow=per_class[3],
            uncertain=finite - sum(per_class),
            scale_text=scale_text(q),
        )

    def binade_classes(
        self,
        fmt: FloatFormat | str = "fp16",
        scale: float | Fraction = 1,
        rounding: str = "rne",
        *,
        subnormals: bool = True,
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """(exponents, counts[binade, class]) with classes zero, subnormal, normal, overflow and a
        fifth column for values the cells leave undecided: the verdict, binade by binade.

        >>> import numpy as np
        >>> e, n = histogram(np.array([2.0**-25, 1.5 * 2.0**-25, 1.0])).binade_classes("fp16")
        >>> int(e[0]), n[0].tolist()
        (-25, [1, 1, 0, 0, 0])
        """
        f, mode, q = _checked(fmt, scale, rounding)
        e0, n = self._e0, self._cells.shape[1]
        cls = np.full((2, n * NCELL), 4, np.int64)  # 4: undecided
        for s, k, lo, hi in self._class_runs(f, q, mode, subnormals):
            cls[s, lo:hi] = k
        cells = self._cells.reshape(2, -1)
        out = np.zeros((n, 5), np.int64)
        for k in range(5):
            out[:, k] = np.where(cls == k, cells, 0).reshape(2, n, NCELL).sum(axis=(0, 2))
        keep = np.flatnonzero(out.any(axis=1))
        if not keep.size:
            return np.zeros(0, np.int64), np.zeros((0, 5), np.int64)
        sl = slice(int(keep[0]), int(keep[-1]) + 1)
        return np.arange(e0, e0 + n, dtype=np.int64)[sl], out[sl]

    def recommend_scale(
        self,
        fmt: FloatFormat | str = "fp16",
        *,
        headroom: int = 2,
        rounding: str = "rne",
        subnormals: bool = True,
    ) -> ScaleAdvice:
        """The power-of-two loss scale that keeps ``max|x| * scale <= fmt.max / 2^headroom`` and,
        within that, rescues the most values from underflow (see :class:`ScaleAdvice`).

        >>> import numpy as np
        >>> x = np.concatenate([np.full(95, 2.0**-10), np.full(5, 2.0**-30)]).astype(np.float32)
        >>> a = histogram(x).recommend_scale("fp16")
        >>> a.log2_scale, a.before.flushed, a.after.flushed, a.after.subnormal, a.after.overflow
        (16, 5, 0, 0, 0)
        """
        f = get_format(fmt)
        mode = _deterministic(rounding)
        # headroom beyond the binades the format spans would put the limit below its smallest value
        top = f.dynamic_range_log2
        whole = isinstance(headroom, (int, np.integer)) and not isinstance(headroom, bool)
        if not whole or not 0 <= headroom < top:
            raise ValueError(
                f"headroom={headroom!r}: expected a whole number of bits from 0 to {top - 1} "
                f"(the binades {f.name} spans)"
            )
        headroom = int(headroom)
        limit = f.max_exact / pow2(headroom)
        bound = self._max_bound()

        def at(k: int) -> Verdict:
            return self.verdict(f, pow2(k), mode, subnormals=subnormals)

        def key(v: Verdict) -> tuple[int, int]:
            return v.flushed + v.uncertain, v.subnormal

        before = at(0)
        if bound is None:
            reason = f"No finite nonzero values: any scale leaves them as they are; {f.name} needs none."
            return ScaleAdvice(f.name, mode, headroom, 0, 0, 0.0, before, before, reason)
        # scales are float64 powers of two: 2^-1074 .. 2^1023
        k_max = max(min(floor_log2(limit / bound), 1023), -1074)
        best = key(at(k_max))
        k_lo = min(0, k_max)
        if key(at(k_lo)) == best:
            k = k_lo
        else:
            lo, hi = k_lo, k_max  # key(lo) worse than best == key(hi); key only improves with k
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if key(at(mid)) == best:
                    hi = mid
                else:
                    lo = mid
            k = hi
        after = at(k)
        e_lo, e_hi = self.min_exponent, self.max_exponent
        assert e_lo is not None
        assert e_hi is not None
        reason = _advice_text(e_lo, e_hi, f, mode, headroom, bound, limit, k, k_max, before, after)
        return ScaleAdvice(f.name, mode, headroom, k, k_max, float(bound), before, after, reason)

    # ---- output -------------------------------------------------------------------------------
    def summary(self) -> str:
        """One line: how many values, of which dtypes, and the special ones.

        >>> import numpy as np
        >>> histogram(np.array([1.0, 0.0, np.nan], np.float32)).summary()
        '3 values (float32): 1 finite nonzero, 1 zero, 0 inf, 1 NaN; |x| from 2^0 to 2^0'
        """
        dt = ", ".join(self.dtypes) or "none"
        text = (
            f"{self.total:,} values ({dt}): {self.finite:,} finite nonzero, {self.zeros:,} zero, "
            f"{self.posinf + self.neginf:,} inf, {self.nan:,} NaN"
        )
        if self.subnormal_inputs:
            text += f", {self.subnormal_inputs:,} subnormal in their dtype"
        if self.min_exponent is not None:
            text += f"; |x| from 2^{self.min_exponent} to 2^{self.max_exponent}"
        return text

    def text(
        self,
        fmt: FloatFormat | str = "fp16",
        scale: float | Fraction = 1,
        rounding: str = "rne",
        *,
        width: int = 40,
        subnormals: bool = True,
    ) -> str:
        """The histogram as text for a terminal: one row per binade, what ``fmt`` makes of its
        values unscaled and, when ``scale`` is not 1, at ``scale``, and a bar.

        >>> import numpy as np
        >>> x = np.array([2.0**-26, 2.0**-20, 2.0**-20, 1.0, 0.0])
        >>> print(histogram(x).text("fp16", 2**10, width=8))
        5 values (float64): 4 finite nonzero, 1 zero, 0 inf, 0 NaN; |x| from 2^-26 to 2^0
        in fp16, round to nearest, ties to even
           log2|x|  count  share  unscaled   at 2^10
                 0      1    20%  normal     normal     ████
           -1..-19      0
               -20      2    40%  subnormal  normal     ████████
          -21..-25      0
               -26      1    20%  zero       subnormal  ████
              zero      1    20%  zero       zero       ████
        fp16, scale 1 (rne): 20% flush to zero, 40% subnormal, 0% overflow (of 5 values)
        fp16, scale 2^10 (rne): 0% flush to zero, 20% subnormal, 0% overflow (of 5 values)
        """
        f = get_format(fmt)
        mode = _deterministic(rounding)
        if isinstance(width, bool) or not isinstance(width, int) or not 1 <= width <= _MAX_WIDTH:
            raise ValueError(f"width={width!r}: expected a number of characters from 1 to {_MAX_WIDTH}")
        q = _as_scale(scale)
        scales = [Fraction(1)] if q == 1 else [Fraction(1), q]
        per_scale = [self.binade_classes(f, s, mode, subnormals=subnormals) for s in scales]
        exps = per_scale[0][0]
        total = max(self.total, 1)
        rows: list[list[str]] = []  # label, count, share, class per scale...
        counts_of_rows: list[int] = []
        empty: list[int] = []  # a run of empty binades, shown as one row when it is long

        def add(label: str, count: int, becomes: list[str]) -> None:
            rows.append([label, f"{count:,}", percent(count, total) if count else "", *becomes])
            counts_of_rows.append(count)

        def flush_empty() -> None:
            blank = [""] * len(scales)
            if len(empty) > 2:
                add(f"{empty[0]}..{empty[-1]}", 0, blank)
            else:
                for e in empty:
                    add(str(e), 0, blank)
            empty.clear()

        names = (*CLASSES, "undecided")
        for i in range(exps.size - 1, -1, -1):
            counts = per_scale[0][1][i]
            if not counts.any():
                empty.append(int(exps[i]))
                continue
            flush_empty()
            becomes = [
                "+".join(n for n, c in zip(names, per[i].tolist(), strict=True) if c) for _e, per in per_scale
            ]
            add(str(int(exps[i])), int(counts.sum()), becomes)
        flush_empty()
        if self.zeros:
            add("zero", self.zeros, ["zero"] * len(scales))
        if self.posinf + self.neginf:
            add("inf", self.posinf + self.neginf, ["inf" if f.has_inf else "NaN or max"] * len(scales))
        if self.nan:
            add("NaN", self.nan, ["NaN" if f.has_nan else "zero"] * len(scales))
        head = ["log2|x|", "count", "share", "becomes" if len(scales) == 1 else "unscaled"]
        if len(scales) == 2:
            head.append(f"at {scale_text(q)}")
        widths = [max(len(r[j]) for r in [head, *rows]) for j in range(len(head))]
        peak = max(counts_of_rows, default=1) or 1

        def line(cells: list[str], bar: str) -> str:
            nums = "  ".join(c.rjust(w) for c, w in zip(cells[:3], widths[:3], strict=True))
            words = "  ".join(c.ljust(w) for c, w in zip(cells[3:], widths[3:], strict=True))
            return f"  {nums}  {words}  {bar}".rstrip()

        lines = [self.summary(), f"in {f.name}, {MODE_DESCRIPTIONS[mode]}", line(head, "")]
        lines += [line(r, _bar(c, peak, width)) for r, c in zip(rows, counts_of_rows, strict=True)]
        lines += [str(self.verdict(f, s, mode, subnormals=subnormals)) for s in scales]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """The counts as plain numbers (for JSON): per binade, and the special values.

        >>> import numpy as np
        >>> histogram(np.array([1.0, 3.0], np.float32)).to_dict()["binades"]
        [{'exponent': 0, 'count': 1}, {'exponent': 1, 'count': 1}]
        """
        exps, counts = self.exponent_counts()
        return {
            "total": self.total,
            "finite": self.finite,
            "zeros": self.zeros,
            "posinf": self.posinf,
            "neginf": self.neginf,
            "nan": self.nan,
            "subnormal_inputs": self.subnormal_inputs,
            "negative": self.negative,
            "dtypes": list(self.dtypes),
            "min_exponent": self.min_exponent,
            "max_exponent": self.max_exponent,
            "binades": [
                {"exponent": e, "count": n} for e, n in zip(exps.tolist(), counts.tolist(), strict=True)
            ],
        }

    def plot(self, fmt: FloatFormat | str = "fp16", **kwargs: Any) -> Figure:
        """A matplotlib figure of the histogram and ``fmt``'s ranges; see
        :func:`floatlab.plotting.plot_histogram` for the options.

        >>> import numpy as np
        >>> len(histogram(np.array([2.0**-30, 1.0])).plot("fp16").axes)
        2
        """
        from floatlab.gradhist.plot import plot_histogram

        return plot_histogram(self, fmt, **kwargs)

    def __repr__(self) -> str:
        return f"<GradHistogram: {self.summary()}>"


_EIGHTHS = " ▏▎▍▌▋▊▉█"


_MAX_WIDTH = 1000  # a text bar wider than any terminal is a typo, not a request for gigabytes


def _bar(count: int, peak: int, width: int) -> str:
    if count == 0:
        return ""
    eighths = max(1, round(8 * width * count / peak))  # a nonzero count always shows
    return "█" * (eighths // 8) + (_EIGHTHS[eighths % 8] if eighths % 8 else "")


def _count_shard(shard: Any, chunk: int) -> GradHistogram:
    """One shard's histogram, a chunk at a time (each array is valid until the next is read)."""
    h = GradHistogram()
    for values in read_shard(shard, chunk):
        h.update(values)
    return h


def histogram_files(
    source: Any, *, chunk: int = CHUNK, dask: bool = False, scheduler: Any = None
) -> GradHistogram:
    """:meth:`GradHistogram.from_files`: one histogram of every value in the shards of ``source``.

    >>> histogram_files([], chunk=8).total
    0
    """
    return GradHistogram.from_files(source, chunk=chunk, dask=dask, scheduler=scheduler)


def histogram(*arrays: Any) -> GradHistogram:
    """The :class:`GradHistogram` of one or more arrays (or tensors) taken together.

    >>> import numpy as np
    >>> histogram(np.ones(3), np.zeros(2, np.float32)).total
    5
    """
    h = GradHistogram()
    for a in arrays:
        h.update(a)
    return h
