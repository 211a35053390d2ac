"""An fp8 recipe as data: which scaling, which formats, which knobs (:class:`Fp8Recipe`).

>>> Fp8Recipe("delayed", margin=1).format_for("input").name
'float8_e4m3fn'
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from floatlab.formats import FloatFormat
from floatlab.train._checks import shown, want_bool, want_fields, want_int
from floatlab.train.recipes.scales import E4M3, E5M2

__all__ = ["AMAX_ALGOS", "FP8_FORMATS", "MAX_AMAX_HISTORY", "RECIPES", "ROLES", "Fp8Recipe"]

#: the recipes: per-tensor current scaling, delayed scaling, block scaling
RECIPES: tuple[str, ...] = ("tensorwise", "delayed", "blockwise")
#: "hybrid": E4M3 inputs and weights, E5M2 gradients; "e4m3": E4M3 everywhere
FP8_FORMATS: tuple[str, ...] = ("hybrid", "e4m3")
#: the GEMM operands of a linear layer
ROLES: tuple[str, ...] = ("input", "weight", "grad")
#: Transformer Engine's ``amax_compute_algo``: the largest amax of the history, or the last one
AMAX_ALGOS: tuple[str, ...] = ("max", "most_recent")
#: the longest amax history of delayed scaling: four times Transformer Engine's default of 1024
#: (its recipes use 16 to 1024); each operand of each layer keeps one float32 per step of it, so
#: 10^8 steps were 400 MB per operand, and a history longer than the run changes no scale
MAX_AMAX_HISTORY = 4096

# the knobs each recipe reads, with their defaults: any other knob must keep its default
_ONLY_FOR = {
    "amax_history": (("delayed",), 1024),
    "amax_compute_algo": (("delayed",), "max"),
    "margin": (("delayed",), 0),
    "pow2_scale": (("tensorwise", "blockwise"), False),
    "block": (("blockwise",), 128),
}
_FORMAT_WORDS = {"hybrid": "E4M3 inputs and weights, E5M2 gradients", "e4m3": "E4M3 for every operand"}


def one_of(name: str, v: Any, choices: tuple[str, ...]) -> str:
    """``v`` if it is one of the strings ``choices`` (a one-line ValueError otherwise).

    >>> one_of("role", "grad", ROLES)
    'grad'
    """
    if not isinstance(v, str) or v not in choices:
        raise ValueError(f"{name}={shown(v)}: expected one of {', '.join(choices)}")
    return v


@dataclass(frozen=True)
class Fp8Recipe:
    """An fp8 recipe: which scaling (``kind``, one of :data:`RECIPES`), which formats, and the
    knobs of that scaling. A knob that the recipe does not read must keep its default.

    * ``amax_history``, ``amax_compute_algo``, ``margin`` (delayed only): Transformer Engine's
      ``DelayedScaling`` fields and defaults (history 1024, at most :data:`MAX_AMAX_HISTORY`,
      ``"max"``, margin 0), with ``scale = fp8_max / 2^margin / amax``;
    * ``pow2_scale`` (tensorwise and blockwise): scales rounded down to a power of two, as
      torchao's ``round_scales_to_power_of_2``;
    * ``block`` (blockwise): the tile size, 128 in DeepSeek-V3.

    >>> r = Fp8Recipe("delayed", amax_history=16)
    >>> r.format_for("grad").name
    'float8_e5m2'
    >>> import textwrap
    >>> print(textwrap.fill(r.describe(), 90))
    delayed scaling (Transformer Engine): one scale per tensor, fp8_max / amax, amax the
    largest of the last 16 steps; E4M3 inputs and weights, E5M2 gradients
    >>> Fp8Recipe("tensorwise", margin=1)
    Traceback (most recent call last):
    ...
    ValueError: margin=1: the delayed recipe reads it, not 'tensorwise' (leave it at 0)
    """

    kind: str
    fp8_format: str = "hybrid"
    amax_history: int = 1024
    amax_compute_algo: str = "max"
    margin: int = 0
    pow2_scale: bool = False
    block: int = 128

    def __post_init__(self) -> None:
        one_of("kind", self.kind, RECIPES)
        one_of("fp8_format", self.fp8_format, FP8_FORMATS)
        history = want_int("amax_history", self.amax_history, 1)
        if history > MAX_AMAX_HISTORY:
            raise ValueError(
                f"amax_history={shown(history)}: expected an integer from 1 to {MAX_AMAX_HISTORY:,} "
                "(Transformer Engine's default is 1,024)"
            )
        object.__setattr__(self, "amax_history", history)
        one_of("amax_compute_algo", self.amax_compute_algo, AMAX_ALGOS)
        object.__setattr__(self, "margin", want_int("margin", self.margin, 0))
        object.__setattr__(self, "pow2_scale", want_bool("pow2_scale", self.pow2_scale))
        object.__setattr__(self, "block", want_int("block", self.block, 1))
        for name, (kinds, default) in _ONLY_FOR.items():
            value = getattr(self, name)
            if self.kind not in kinds and value != default:
                readers = " and ".join(kinds) + (" recipes read" if len(kinds) > 1 else " recipe reads")
                raise ValueError(
                    f"{name}={shown(value)}: the {readers} it, not {self.kind!r} (leave it at {default!r})"
                )

    def format_for(self, role: str) -> FloatFormat:
        """The fp8 format of an operand of ``role``: E5M2 for gradients under ``"hybrid"``, else E4M3.

        >>> [Fp8Recipe("tensorwise", f).format_for("grad").name for f in FP8_FORMATS]
        ['float8_e5m2', 'float8_e4m3fn']
        """
        one_of("role", role, ROLES)
        return E5M2 if role == "grad" and self.fp8_format == "hybrid" else E4M3

    def to_dict(self) -> dict[str, Any]:
        """Every field, by name (:meth:`from_dict` reads it back).

        >>> Fp8Recipe("blockwise", block=64).to_dict()["block"]
        64
        """
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Any) -> Fp8Recipe:
        """The recipe :meth:`to_dict` wrote (missing knobs take their defaults; ``kind`` is needed).

        >>> Fp8Recipe.from_dict({"kind": "delayed", "margin": 2}).margin
        2
        >>> Fp8Recipe.from_dict({"kind": "delayed", "history": 8})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: unknown fp8 recipe key 'history': did you mean amax_history? (fp8 recipe fields: ...)
        """
        d = want_fields("fp8 recipe", d, cls)
        if "kind" not in d:
            raise ValueError(f"fp8 recipe {shown(d)}: expected a 'kind' ({', '.join(RECIPES)})")
        return cls(**d)

    def describe(self) -> str:
        """One line that says what the recipe does.

        >>> import textwrap
        >>> print(textwrap.fill(Fp8Recipe("blockwise", "e4m3").describe(), 90))
        block scaling (DeepSeek-V3): one scale per 1x128 tile of inputs and gradients and per
        128x128 block of weights, each from its own amax; E4M3 for every operand
        """
        pow2 = ", rounded down to a power of two" if self.pow2_scale else ""
        if self.kind == "tensorwise":
            what = (
                "per-tensor current scaling (torchao tensorwise): scale = fp8_max / amax of the "
                f"tensor itself{pow2}"
            )
        elif self.kind == "delayed":
            margin = f" / 2^{self.margin}" if self.margin else ""
            amax = (
                f"the largest of the last {self.amax_history} steps"
                if self.amax_compute_algo == "max"
                else "the previous step's"
            )
            what = (
                f"delayed scaling (Transformer Engine): one scale per tensor, fp8_max{margin} / amax, "
                f"amax {amax}"
            )
        else:
            b = self.block
            what = (
                f"block scaling (DeepSeek-V3): one scale per 1x{b} tile of inputs and gradients and "
                f"per {b}x{b} block of weights, each from its own amax{pow2}"
            )
        return f"{what}; {_FORMAT_WORDS[self.fp8_format]}"
