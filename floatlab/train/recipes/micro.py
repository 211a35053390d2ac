"""Microscaling training recipes: MXFP8, MXFP6, MXFP4 and NVFP4 GEMMs, simulated exactly on
the CPU (:class:`MicroRecipe`, :class:`MicroScaling`).

A linear layer ``y = x @ W`` runs three GEMMs a step: forward ``x @ W``, data gradient
``dy @ W^T``, weight gradient ``x^T @ dy``. Under a block format every operand of every GEMM is
quantized in blocks that run along that GEMM's reduction dimension, so that the tensor core
can apply one scale per block and operand to each partial sum. An operand used in two GEMMs
with different reduction dimensions is quantized twice, once along each: the activations along
the features for the forward GEMM and along the tokens for the weight gradient, the output
gradients along the output features and along the tokens, the weights along their input
features and (transposed) along their output features. This is how MXFP8 training runs in
torchao (``torchao/prototype/mx_formats/mx_linear.py``: ``mx_mm``) and Transformer Engine
(``MXFP8BlockScaling``, rowwise and columnwise copies).

The recipes (:data:`MICRO_KINDS`):

* ``"mxfp8"``, ``"mxfp6"``, ``"mxfp4"``, ``"mxint8"``: OCP MX formats, blocks of 32 with an E8M0
  scale (``scale_mode`` ``"floor"``, the specification's, or ``"rceil"``, NVIDIA's hardware).
  ``elements`` picks the element formats: for mxfp8 ``"e4m3"`` everywhere (torchao's and
  Transformer Engine's default) or ``"hybrid"`` (E4M3 forward, E5M2 gradients); for mxfp6
  ``"e2m3"``, ``"e3m2"`` or ``"hybrid"`` (E2M3 forward, E3M2 gradients: the fp8 split, more
  significand forward and more range backward); mxfp4 has ``"e2m1"`` only, and mxint8 ``"int8"``
  only (8-bit two's complement integers k/64, k from -128 to 127).
* ``"nvfp4"``: NVIDIA's NVFP4 pretraining recipe (arXiv 2509.25149, section 4; Transformer
  Engine's ``NVFP4BlockScaling``): E2M1 values in 1x16 blocks for activations and gradients
  and in 16x16 tiles for weights (one quantization serves ``W`` and ``W^T``: the forward and
  backward passes see the same weights), each block with an E4M3 scale over one fp32 scale per
  tensor; a 16x16 random Hadamard transform on both inputs of the weight-gradient GEMM
  (:mod:`~floatlab.train.recipes.hadamard`); stochastic rounding for the gradients, nearest
  for weights and activations; a few linear layers kept in bf16 (``keep_bf16``; the paper keeps
  about 15% of them, mostly at the end of the network).

Every switch of the NVFP4 recipe is a field, so each piece can be turned off and its effect
seen: ``hadamard``, ``weight_tiles`` (2-D weight blocks), ``gradient_rounding`` and
``keep_bf16``. The MX recipes take them too (Tseng et al., arXiv 2502.20586, train MXFP4 with
stochastic rounding and a Hadamard transform on the weight gradient).

The GEMM: each quantized operand is held as element x block scale in float32 (exact: at most
4 + 8 significant bits), multiplied by a float32 BLAS GEMM (exact products, fp32 sums, as the
tensor core's fp32 accumulation up to the order of the sums), and the product times the two
tensor scales (NVFP4; 1 for MX) in one float32 multiply, the epilogue's ``alpha``.

A length that does not divide into blocks ends in a shorter block: the same as the zero padding
torchao and Transformer Engine need (they refuse such lengths instead: dimensions must be
multiples of 32, or of 16 for NVFP4). A block holding an inf or a NaN gets the NaN scale, its
values become NaN and the GEMM's outputs that use it NaN.

>>> import numpy as np
>>> x = np.float32([[1.0, 0.3, 7.0, 2.0]]); w = np.eye(4, dtype=np.float32)
>>> MicroScaling(MicroRecipe("mxfp4")).matmul("fc", x, "input", w, "weight").tolist()
[[1.0, 0.5, 6.0, 2.0]]
>>> rceil = MicroRecipe("mxfp4", scale_mode="rceil")       # scale 2: 7 / 2 -> 4, 0.3 / 2 -> 0
>>> MicroScaling(rceil).matmul("fc", x, "input", w, "weight").tolist()
[[1.0, 0.0, 8.0, 2.0]]

(Under the OCP's "floor" scale, 2^(floor(log2 7) - 2) = 1, the 7 saturates to E2M1's 6.)
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from floatlab.backend import get_xp, to_numpy
from floatlab.blocks import E8M0_BIAS, BlockFormat, get_mx_format
from floatlab.codec import decode_array
from floatlab.rounding import encode_blocks, nvfp4_tensor_scale, round_blocks_split
from floatlab.train._checks import shown, want_bool, want_dict, want_fields, want_int, want_str
from floatlab.train.hostmath import host_matmul
from floatlab.train.recipes.fp8 import STATS, OperandStats
from floatlab.train.recipes.hadamard import rht
from floatlab.train.recipes.recipe import ROLES, one_of
from floatlab.train.recipes.scales import tensor_amax, to_float32

__all__ = ["GEMMS", "MICRO_KINDS", "MicroRecipe", "MicroScaling", "OperandLog", "gemm_of"]

#: the microscaling recipes
MICRO_KINDS: tuple[str, ...] = ("mxfp8", "mxfp6", "mxfp4", "mxint8", "nvfp4")
#: per recipe, its element choices: name -> (forward format, gradient format); the first is the default
_ELEMENTS: dict[str, dict[str, tuple[str, str]]] = {
    "mxfp8": {"e4m3": ("mxfp8_e4m3", "mxfp8_e4m3"), "hybrid": ("mxfp8_e4m3", "mxfp8_e5m2")},
    "mxfp6": {
        "hybrid": ("mxfp6_e2m3", "mxfp6_e3m2"),
        "e2m3": ("mxfp6_e2m3", "mxfp6_e2m3"),
        "e3m2": ("mxfp6_e3m2", "mxfp6_e3m2"),
    },
    "mxfp4": {"e2m1": ("mxfp4_e2m1", "mxfp4_e2m1")},
    "mxint8": {"int8": ("mxint8", "mxint8")},
    "nvfp4": {"e2m1": ("nvfp4", "nvfp4")},
}
#: the three GEMMs of a linear layer, by the roles of their two operands
GEMMS: dict[tuple[str, str], str] = {
    ("input", "weight"): "forward",
    ("grad", "weight"): "dgrad",
    ("input", "grad"): "wgrad",
}
#: the words of ``keep_bf16`` that name a layer by its place
_PLACES = ("first", "last")


def gemm_of(a_role: str, b_role: str) -> str:
    """Which GEMM of a linear layer multiplies operands of these roles (:data:`GEMMS`).

    >>> gemm_of("input", "grad")
    'wgrad'
    """
    key = (one_of("role", a_role, ROLES), one_of("role", b_role, ROLES))
    if key not in GEMMS:
        pairs = ", ".join(f"{a} @ {b}" for a, b in GEMMS)
        raise ValueError(f"a GEMM of {a_role} @ {b_role}: expected one of {pairs}")
    return GEMMS[key]


@dataclass(frozen=True)
class MicroRecipe:
    """A microscaling recipe: ``kind`` (one of :data:`MICRO_KINDS`) and its switches; a switch
    left at None takes the recipe's default (NVFP4's: Hadamard on, 2-D weight tiles, stochastic
    gradients, first and last linear layers in bf16; the MX recipes': all off, nearest).

    * ``elements``: the element formats (see the module notes); ``scale_mode``: the MX scale
      rule, ``"floor"`` or ``"rceil"`` (NVFP4's scales are E4M3: not read);
    * ``hadamard``: the 16x16 random Hadamard transform on the weight-gradient GEMM's inputs;
    * ``weight_tiles``: weights quantized in square blocks (16x16, or 32x32 for MX) once per
      step, instead of along each GEMM's reduction dimension;
    * ``gradient_rounding``: the rounding of the gradients, ``"rne"`` or ``"stochastic"``
      (weights and activations always round to nearest even);
    * ``keep_bf16``: the linear layers left out of the recipe (their GEMMs take the policy's
      bf16 operands): layer names (their weights', ``"h3.W2"``), shell patterns (``"h0.*"``), or
      ``"first"`` and ``"last"``, the model's first and last linear layers.

    >>> r = MicroRecipe("nvfp4")
    >>> r.hadamard, r.weight_tiles, r.gradient_rounding, r.keep_bf16
    (True, True, 'stochastic', ('first', 'last'))
    >>> MicroRecipe("mxfp8", elements="hybrid").format_for("grad").name
    'mxfp8_e5m2'
    >>> MicroRecipe("mxfp4", elements="e4m3")
    Traceback (most recent call last):
    ...
    ValueError: elements='e4m3': mxfp4 takes e2m1
    """

    kind: str
    elements: str | None = None
    scale_mode: str | None = None
    hadamard: bool | None = None
    weight_tiles: bool | None = None
    gradient_rounding: str | None = None
    keep_bf16: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        one_of("kind", self.kind, MICRO_KINDS)
        nv = self.kind == "nvfp4"
        choices = _ELEMENTS[self.kind]
        elements = next(iter(choices)) if self.elements is None else self.elements
        if elements not in choices:
            raise ValueError(f"elements={shown(elements)}: {self.kind} takes {', '.join(choices)}")
        set_(self, "elements", elements)
        if nv and self.scale_mode is not None:
            raise ValueError(
                f"scale_mode={shown(self.scale_mode)}: NVFP4's block scales are E4M3 numbers, "
                "rounded to nearest (the scale modes choose MX's E8M0 scales)"
            )
        if not nv:
            set_(self, "scale_mode", one_of("scale_mode", self.scale_mode or "floor", ("floor", "rceil")))
        for name in ("hadamard", "weight_tiles"):
            v = getattr(self, name)
            set_(self, name, nv if v is None else want_bool(name, v))
        g = self.gradient_rounding or ("stochastic" if nv else "rne")
        set_(self, "gradient_rounding", one_of("gradient_rounding", g, ("rne", "stochastic")))
        keep: Any = _PLACES if nv and self.keep_bf16 is None else (self.keep_bf16 or ())
        if isinstance(keep, str):
            keep = tuple(k.strip() for k in keep.split(",") if k.strip())
        if not isinstance(keep, (tuple, list)):
            raise ValueError(f"keep_bf16={shown(keep)}: expected layer names, patterns, 'first' or 'last'")
        set_(self, "keep_bf16", tuple(want_str("keep_bf16 entry", k) for k in keep))

    def format_for(self, role: str) -> BlockFormat:
        """The block format of an operand of ``role``: the gradient format for ``"grad"``.

        >>> MicroRecipe("mxfp6").format_for("input").name, MicroRecipe("mxfp6").format_for("grad").name
        ('mxfp6_e2m3', 'mxfp6_e3m2')
        """
        assert self.elements is not None
        fwd, grad = _ELEMENTS[self.kind][self.elements]
        return get_mx_format(grad if one_of("role", role, ROLES) == "grad" else fwd)

    def rounding_for(self, role: str) -> str:
        """``gradient_rounding`` for gradients, round to nearest even for the other roles.

        >>> MicroRecipe("nvfp4").rounding_for("grad"), MicroRecipe("nvfp4").rounding_for("weight")
        ('stochastic', 'rne')
        """
        assert self.gradient_rounding is not None
        return self.gradient_rounding if one_of("role", role, ROLES) == "grad" else "rne"

    def to_dict(self) -> dict[str, Any]:
        """Every field, by name (:meth:`from_dict` reads it back).

        >>> MicroRecipe("nvfp4", hadamard=False).to_dict()["hadamard"]
        False
        """
        d = asdict(self)
        d["keep_bf16"] = list(self.keep_bf16 or ())
        return d

    @classmethod
    def from_dict(cls, d: Any) -> MicroRecipe:
        """The recipe :meth:`to_dict` wrote.

        >>> MicroRecipe.from_dict(MicroRecipe("mxfp8", scale_mode="rceil").to_dict()).scale_mode
        'rceil'
        """
        d = want_fields("microscaling recipe", d, cls)
        if "kind" not in d:
            raise ValueError(f"microscaling recipe {shown(d)}: expected a 'kind' ({', '.join(MICRO_KINDS)})")
        return cls(**{**d, "keep_bf16": tuple(d.get("keep_bf16") or ())})

    def describe(self) -> str:
        """One line that says what the recipe does.

        >>> import textwrap
        >>> print(textwrap.fill(MicroRecipe("nvfp4").describe(), 90))
        nvfp4 (NVIDIA's recipe): E2M1 in 1x16 blocks, E4M3 block scales over an fp32 tensor scale;
        weights in 16x16 tiles; random Hadamard transform on the weight-gradient inputs; gradients
        rounded stochastically; first, last in bf16
        """
        fwd, grad = (self.format_for(r) for r in ("input", "grad"))
        k = fwd.block_size
        if fwd.scale == "e4m3":
            what = (
                f"nvfp4 (NVIDIA's recipe): E2M1 in 1x{k} blocks, E4M3 block scales over an fp32 tensor scale"
            )
        else:
            elems = (
                fwd.element.name
                if fwd == grad
                else f"{fwd.element.name} forward, {grad.element.name} gradients"
            )
            what = f"{self.kind}: {elems} in 1x{k} blocks, E8M0 scales ({self.scale_mode})"
        parts = [what]
        if self.weight_tiles:
            parts.append(f"weights in {k}x{k} tiles")
        if self.hadamard:
            parts.append("random Hadamard transform on the weight-gradient inputs")
        if self.gradient_rounding == "stochastic":
            parts.append("gradients rounded stochastically")
        if self.keep_bf16:
            parts.append(f"{', '.join(self.keep_bf16)} in bf16")
        return "; ".join(parts)


class OperandLog:
    """The per-step record of a recipe's operands: for each ``"site.role"``, each of
    :data:`~floatlab.train.recipes.fp8.STATS` as a list with one value per step since the
    operand's first use.

    >>> log = OperandLog()
    >>> _ = log.add({"fc.input": OperandStats(2.0, 0.25, 0.0, 0.1, 0.0)}); log.steps
    1
    >>> log.history["fc.input"]["flushed"], log.first_step
    ([0.1], {'fc.input': 0})
    """

    def __init__(self) -> None:
        self.steps = 0
        self._history: dict[str, dict[str, list[float]]] = {}
        self._first: dict[str, int] = {}

    def add(self, stats: dict[str, OperandStats]) -> dict[str, dict[str, float]]:
        """Record one step's statistics (operands not seen this step record zeros); returns them
        as dicts."""
        out: dict[str, dict[str, float]] = {}
        for key in stats.keys() | self._history.keys():
            if key not in self._history:
                self._history[key] = {name: [] for name in STATS}
                self._first[key] = self.steps
            st = stats.get(key, OperandStats(0.0, 0.0, 0.0, 0.0, 0.0)).to_dict()
            out[key] = st
            for name in STATS:
                self._history[key][name].append(st[name])
        self.steps += 1
        return dict(sorted(out.items()))

    @property
    def history(self) -> dict[str, dict[str, list[float]]]:
        """A copy of the record."""
        return {key: {name: list(v) for name, v in rec.items()} for key, rec in self._history.items()}

    @property
    def first_step(self) -> dict[str, int]:
        """The step at which each operand was first used."""
        return dict(self._first)

    def state_dict(self) -> dict[str, Any]:
        """Steps, first steps and the record as arrays."""
        return {
            "steps": self.steps,
            "first_step": dict(self._first),
            "history": {
                key: {name: np.asarray(v, np.float64) for name, v in rec.items()}
                for key, rec in self._history.items()
            },
        }

    def load_state_dict(self, state: Any) -> None:
        """Restore :meth:`state_dict`'s output (checked first: a bad state changes nothing).

        >>> a = OperandLog(); _ = a.add({"fc.grad": OperandStats(1.0, 1.0, 0.0, 0.5, 0.0)})
        >>> b = OperandLog(); b.load_state_dict(a.state_dict()); b.history == a.history
        True
        """
        state = want_dict("operand log", state)
        for key in ("steps", "first_step", "history"):
            if key not in state:
                raise ValueError(f"operand log lacks {key!r}")
        steps = want_int("steps", state["steps"])
        first = want_dict("first_step", state["first_step"])
        hist = want_dict("history", state["history"])
        if set(first) != set(hist):
            raise ValueError(f"operand log with first steps of {sorted(first)}: expected {sorted(hist)}")
        history: dict[str, dict[str, list[float]]] = {}
        firsts: dict[str, int] = {}
        for key, rec in hist.items():
            firsts[key] = want_int(f"first_step[{key}]", first[key])
            rec = want_dict(f"history[{key}]", rec)
            if set(rec) != set(STATS):
                raise ValueError(f"history[{key}] with {shown(sorted(rec))}: expected {', '.join(STATS)}")
            want = steps - firsts[key]
            lists = {}
            for name in STATS:
                values = np.asarray(rec[name])
                if values.ndim != 1 or values.dtype.kind not in "fiu" or len(values) != want:
                    raise ValueError(f"history[{key}][{name}]={shown(rec[name])}: expected {want} numbers")
                lists[name] = [float(v) for v in values]
            history[key] = lists
        self.steps, self._history, self._first = steps, history, firsts


@dataclass
class _Cast:
    """One operand quantized for a GEMM: element x block scale in float32, and the tensor scale."""

    values: NDArray[np.float32]
    tensor_scale: float


def _decode_scale(fmt: BlockFormat, code: int) -> float:
    """The value of a block-scale code: 2^(code - 127) for E8M0, the E4M3 number for NVFP4."""
    if fmt.scale == "e8m0":
        return float(2.0 ** (code - E8M0_BIAS))
    return float(decode_array(np.array([code], np.uint8), "float8_e4m3fn")[0])


class MicroScaling:
    """The microscaling GEMMs of every linear layer of a model for one training run, with the
    same interface as :class:`~floatlab.train.recipes.Fp8Scaling`: :meth:`matmul` for each of a
    layer's three GEMMs (forward ``matmul(site, x, "input", W, "weight")``, data gradient
    ``matmul(site, dy, "grad", W.T, "weight")``, weight gradient ``matmul(site, x.T, "input",
    dy, "grad")``), :meth:`end_step` for the per-operand statistics, :attr:`history`.

    ``rng`` draws the stochastic rounding of gradients. ``layers``, the model's linear layers
    in forward order, resolves ``"first"`` and ``"last"`` in ``keep_bf16``; :meth:`keeps` says
    whether a layer is left in bf16.

    The statistics of an operand in a step are those of its first quantization (the forward
    GEMM's for inputs and weights, the data gradient's for gradients): its amax, its ``scale``
    (the multiplier of the block holding the amax: 1 / (its block scale x the tensor scale),
    comparable with an fp8 recipe's scale), and the shares of its values that saturated at the
    element's largest value, were not 0 and became 0, and are subnormal in the element format.

    >>> m = MicroScaling(MicroRecipe("mxfp8"))
    >>> x = np.float32([[1e-12, 3e-12]]); w = np.float32([[1.0], [1.0]])
    >>> m.matmul("fc", x, "input", w, "weight").tolist()    # (144 + 416) x 2^-47
    [[3.979039320256561e-12]]
    >>> m.end_step()["fc.input"]["flushed"]
    0.0
    """

    def __init__(
        self,
        recipe: MicroRecipe,
        rng: np.random.Generator | None = None,
        layers: Sequence[str] | None = None,
    ) -> None:
        if not isinstance(recipe, MicroRecipe):
            raise ValueError(f"recipe={shown(recipe)}: expected a MicroRecipe")
        self.recipe = recipe
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self.layers: tuple[str, ...] | None = None if layers is None else tuple(layers)
        self._log = OperandLog()
        self._step: dict[str, OperandStats] = {}
        # per weight, this step's tiles, the array they came from (held, so that its memory is not
        # reused within the step) and where it lies: W^T in the data gradient is W's transpose
        self._tiles: dict[str, tuple[NDArray[np.float32], _Cast]] = {}

    # ---- which layers ---------------------------------------------------------------------------
    def keeps(self, site: str) -> bool:
        """Whether layer ``site`` is left in bf16 by ``keep_bf16``.

        >>> m = MicroScaling(MicroRecipe("nvfp4"), layers=["W0", "W1", "W2"])
        >>> [m.keeps(s) for s in ("W0", "W1", "W2")]
        [True, False, True]
        """
        keep = self.recipe.keep_bf16 or ()
        if not keep:
            return False
        names = set()
        for k in keep:
            if k in _PLACES:
                if self.layers is None:
                    raise ValueError(
                        f"keep_bf16 {k!r}: the model's linear layers in order are needed to find the "
                        "first and last (MicroScaling(..., layers=...))"
                    )
                if self.layers:
                    names.add(self.layers[0] if k == "first" else self.layers[-1])
            elif fnmatch.fnmatchcase(site, k):
                return True
        return site in names

    # ---- the GEMM -------------------------------------------------------------------------------
    def matmul(
        self, site: str, a: ArrayLike, a_role: str, b: ArrayLike, b_role: str, *, record: bool = True
    ) -> NDArray[np.float32]:
        """``a @ b`` with both operands quantized along the reduction dimension (``a`` (..., M, K)
        along its last axis, ``b`` (K, N) along its first), the Hadamard transform first for a
        weight-gradient GEMM when the recipe has it; float32 result (CuPy operands are
        quantized on the host and the result returned to the device). A layer that
        :meth:`keeps` in bf16 gets the plain GEMM of ``a`` and ``b`` as given. ``record=False``
        (an evaluation) changes no statistics.

        >>> m = MicroScaling(MicroRecipe("nvfp4", keep_bf16=()))
        >>> x = np.float32([[6.0, 1.0, 0.2, 0.0]]); w = np.eye(4, dtype=np.float32)
        >>> m.matmul("fc", x, "input", w, "weight").tolist()   # 0.2 -> 0; 6 x 448 x fl(6 / 2688)
        [[6.000000476837158, 1.0, 0.0, 0.0]]
        """
        gemm = gemm_of(a_role, b_role)
        xp = get_xp(a, b)
        if xp is not np:  # CuPy arrays: the block kernel runs on the host, the result goes back
            host = self.matmul(site, to_numpy(a), a_role, to_numpy(b), b_role, record=record)
            on_device: NDArray[np.float32] = xp.asarray(host)
            return on_device
        a32, b32 = to_float32(a), to_float32(b)
        if a32.ndim < 2 or b32.ndim != 2 or a32.shape[-1] != b32.shape[0]:
            raise ValueError(f"matmul of shapes {a32.shape} and {b32.shape}: expected (..., M, K) and (K, N)")
        if self.keeps(site):  # a layer left out of the recipe: its operands as given
            kept: NDArray[np.float32] = host_matmul(a32, b32)
            return kept
        lead = a32.shape[:-1]
        a2 = a32.reshape(-1, a32.shape[-1]) if a32.ndim > 2 else a32
        if gemm == "wgrad" and self.recipe.hadamard:
            a2, b32 = rht(a2, axis=1), rht(b32, axis=0)
        with np.errstate(over="ignore", invalid="ignore"):
            qa = self._quantize(site, a2, a_role, 1, record)
            qb = self._quantize(site, b32, b_role, 0, record)
            out: NDArray[np.float32] = host_matmul(qa.values, qb.values)
            alpha = np.float32(qa.tensor_scale) * np.float32(qb.tensor_scale)
            if alpha != 1:
                out *= alpha  # the epilogue's alpha: one float32 multiply
        return out.reshape(*lead, b32.shape[1])

    def _quantize(self, site: str, x: NDArray[np.float32], role: str, axis: int, record: bool) -> _Cast:
        """``x`` (2-d) quantized in blocks along ``axis`` (its reduction axis), or in square
        tiles for a weight under ``weight_tiles`` (once a step: ``W`` and ``W^T`` share it)."""
        r = self.recipe
        fmt = r.format_for(role)
        key = f"{site}.{role}"
        tiles = role == "weight" and bool(r.weight_tiles)
        if tiles and key in self._tiles:
            source, held = self._tiles[key]
            ptr, shape, strides = _where(x)
            first = _where(source)
            if ptr == first[0] and (shape, strides) == first[1:]:
                return held
            if ptr == first[0] and (shape[::-1], strides[::-1]) == first[1:]:
                return _Cast(held.values.T, held.tensor_scale)
        # the blocks over a C-contiguous base: a transposed view is blocked through its base
        flip = not x.flags.c_contiguous and x.flags.f_contiguous
        base = x.T if flip else np.ascontiguousarray(x)
        along = (1 - axis) if flip else axis
        k = fmt.block_size
        block: int | tuple[int, int] = (k, k) if tiles else (k if along == 1 else (k, 1))
        mode = r.rounding_for(role)
        how: dict[str, Any] = {
            "rng": self.rng if mode == "stochastic" else None,
            "scale": fmt.scale if fmt.scale == "e4m3" else (r.scale_mode or "floor"),
        }
        if record and key not in self._step:  # the step's first cast: with its counts
            amax = tensor_amax(x, "propagate")
            if fmt.scale == "e4m3" and math.isfinite(amax):
                # (the finite amax the loop would find in a pass of its own)
                how["tensor_scale"] = nvfp4_tensor_scale(amax, fmt.element)
            enc = encode_blocks(
                base, fmt.element, block, mode, values=True, split_tensor_scale=True,
                element_codes=False, **how,
            )  # fmt: skip
            assert enc.values is not None
            found, t = enc.values, float(enc.tensor_scale)
            self._step[key] = self._stats(x.size, amax, fmt, enc)
        else:  # (the values alone, in the faster pass that forms no codes)
            found, t = round_blocks_split(base, fmt.element, block, mode, **how)
        values: NDArray[np.float32] = found.T if flip else found
        cast = _Cast(values, t)
        if tiles and record:
            self._tiles[key] = (x, cast)
        return cast

    @staticmethod
    def _stats(n: int, amax: float, fmt: BlockFormat, enc: Any) -> OperandStats:
        codes = enc.scale_codes.reshape(-1)
        nan_code = 255 if fmt.scale == "e8m0" else 0x7F
        finite = codes[codes != nan_code]
        top = int(finite.max()) if finite.size else 0
        scale = 1.0 / (_decode_scale(fmt, top) * float(enc.tensor_scale)) if finite.size else 0.0
        if n == 0:
            return OperandStats(amax, scale, 0.0, 0.0, 0.0)
        return OperandStats(amax, scale, enc.overflow / n, enc.flushed / n, enc.subnormal / n)

    # ---- steps ------------------------------------------------------------------------------------
    def end_step(self) -> dict[str, dict[str, float]]:
        """Close the step: each operand's statistics by ``"site.role"`` (an operand not used in the
        step reports zeros).

        >>> m = MicroScaling(MicroRecipe("mxfp4"))
        >>> _ = m.matmul("fc", np.float32([[4.0, 0.1]]), "input", np.float32([[1.0], [1.0]]), "weight")
        >>> m.end_step()["fc.input"]                 # 0.1 / 2^0 is below E2M1's 0.5 / 2: flushed
        {'amax': 4.0, 'scale': 1.0, 'saturated': 0.0, 'flushed': 0.5, 'subnormal': 0.0}
        """
        out = self._log.add(self._step)
        self._step = {}
        self._tiles = {}
        return out

    @property
    def steps(self) -> int:
        """The steps closed so far."""
        return self._log.steps

    @property
    def history(self) -> dict[str, dict[str, list[float]]]:
        """Per operand ``"site.role"``, each statistic as a list with one value per step since the
        operand's first use (:attr:`first_step`)."""
        return self._log.history

    @property
    def first_step(self) -> dict[str, int]:
        """The step at which each operand was first used."""
        return self._log.first_step

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint needs between steps: the recipe and the record (the scales are
        current: nothing else carries over; the generator of stochastic rounding is the
        caller's, checkpointed with it).

        >>> sorted(MicroScaling(MicroRecipe("nvfp4")).state_dict())
        ['first_step', 'history', 'recipe', 'steps']
        """
        return {"recipe": self.recipe.to_dict(), **self._log.state_dict()}

    def load_state_dict(self, state: Any) -> None:
        """Restore :meth:`state_dict`'s output; a state of another recipe is refused."""
        state = want_dict("microscaling state", state)
        if "recipe" not in state:
            raise ValueError("microscaling state lacks 'recipe'")
        recipe = MicroRecipe.from_dict(state["recipe"])
        if recipe != self.recipe:
            raise ValueError(
                f"a microscaling state of {shown(recipe.to_dict())}: "
                f"expected one of {shown(self.recipe.to_dict())}"
            )
        self._log.load_state_dict({k: v for k, v in state.items() if k != "recipe"})
        self._step, self._tiles = {}, {}

    def __repr__(self) -> str:
        return (
            f"MicroScaling({self.recipe.describe()!r}, {len(self.first_step)} operands, {self.steps} steps)"
        )


def _where(x: NDArray[Any]) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    return int(x.__array_interface__["data"][0]), x.shape, x.strides
