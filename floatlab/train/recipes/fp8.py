"""The fp8 training recipes, simulated exactly on the CPU: how each one picks its scales, casts the
GEMM operands and multiplies them.

A linear layer ``y = x @ W`` runs three GEMMs per step, each with two fp8 operands: the forward
``x @ W``, the data gradient ``dy @ W.T`` and the weight gradient ``x.T @ dy``. The operands have
three roles, ``"input"``, ``"weight"`` and ``"grad"``, and a recipe says, for each, the fp8
format and the scale ``s`` of the cast ``q = fp8(x * s)``:

* ``"tensorwise"``, per-tensor current scaling (torchao.float8's tensorwise recipe,
  Transformer Engine's ``Float8CurrentScaling``): ``s = fp8_max / max(amax, 1e-12)`` from the
  tensor itself (:func:`~floatlab.train.recipes.scales.current_scale`), optionally rounded down
  to a power of two;
* ``"delayed"``, Transformer Engine's ``DelayedScaling``: each operand keeps a history of its
  last ``amax_history`` amaxes; the scale of step t comes from steps before t
  (:func:`~floatlab.train.recipes.scales.delayed_update`), initial scale 1;
* ``"blockwise"``, DeepSeek-V3's fine-grained scaling: one scale per 1x128 tile of inputs and
  gradients and per 128x128 block of weights, from each tile's own amax
  (:func:`~floatlab.train.recipes.blockwise.blockwise_matmul`).

Formats (TE's ``Format`` in ``transformer_engine/common/recipe/__init__.py``): ``"hybrid"`` casts
inputs and weights to E4M3 and gradients to E5M2, ``"e4m3"`` every operand to E4M3 (DeepSeek-V3's
choice, section 3.3.2, "Mantissa over Exponents"). Every cast saturates.

>>> import numpy as np
>>> scaling = Fp8Scaling(Fp8Recipe("tensorwise"))
>>> x = np.float32([[1.0, 2.0], [3.0, 3.5]]); w = np.float32([[0.5, 0.0], [0.0, 0.875]])
>>> scaling.matmul("fc", x, "input", w, "weight").tolist()
[[0.5, 1.75], [1.5, 3.0625]]
>>> scaling.end_step()["fc.input"]["scale"]                 # 448 / 3.5
128.0
>>> x = np.float32([[1.0, 3.0]])                            # 448 / 3: 1 * 149.33 becomes 144
>>> scaling.matmul("fc", x, "input", w, "weight").tolist()
[[0.4821428656578064, 2.625]]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from floatlab.formats import FloatFormat
from floatlab.train._checks import shown, want_dict, want_int, want_real, want_str
from floatlab.train.hostmath import host_matmul
from floatlab.train.precision.accumulate import accumulate_matmul
from floatlab.train.recipes._fp8_cast import scaled_cast, shares_of
from floatlab.train.recipes._fp8_kernels import transposed_copy
from floatlab.train.recipes.blockwise import Finish, block_cast, blockwise_matmul, expand_scales, tile_cast
from floatlab.train.recipes.recipe import ROLES, Fp8Recipe, one_of
from floatlab.train.recipes.scales import (
    CastShares,
    cast_shares,
    cast_threshold,
    current_scale,
    delayed_update,
    saturating_cast,
    tensor_amax,
    to_float32,
)

__all__ = [
    "STATS",
    "Fp8Scaling",
    "OperandScaler",
    "OperandStats",
    "Quantized",
    "scaled_matmul",
]

#: what :class:`OperandStats` records per operand and step
STATS: tuple[str, ...] = ("amax", "scale", "saturated", "flushed", "subnormal")


@dataclass
class Quantized:
    """An operand cast for the GEMM: the fp8 values ``q = fp8(x * scale)`` held in float32 (``x``'s
    shape), the float32 scales, the format, the GEMM's reduction axis of ``x``, and the layout of
    the scales: ``"tensor"`` (one, shape ()), ``"tile"`` (one per ``block`` values along
    ``reduce_axis``: ``x``'s shape with that axis cut to the number of tiles) or ``"block"`` (one
    per ``block`` x ``block`` block of a matrix).

    >>> q = OperandScaler(Fp8Recipe("tensorwise"), "input").quantize(np.float32([[2.0, -1.0]]), 1)
    >>> q.values.tolist(), float(q.scale), float(q.inv_scale)
    ([[448.0, -224.0]], 224.0, 0.004464285913854837)
    """

    values: NDArray[np.float32]
    scale: NDArray[np.float32]
    fmt: FloatFormat
    reduce_axis: int
    layout: str = "tensor"
    block: int = 0

    @property
    def inv_scale(self) -> NDArray[np.float32]:
        """1 / scale in float32 (``Float8TrainingTensor._scale.reciprocal()``): what the GEMM takes
        (a scale of 0, from an infinite amax, has the inverse inf).

        >>> e4m3 = Fp8Recipe("tensorwise").format_for("input")
        >>> float(Quantized(np.zeros(1, np.float32), np.float32(4.0), e4m3, 0).inv_scale)
        0.25
        """
        with np.errstate(divide="ignore"):
            inv: NDArray[np.float32] = np.divide(np.float32(1.0), np.asarray(self.scale, np.float32))
        return inv


@dataclass(frozen=True)
class OperandStats:
    """What one operand's cast did in one step: the amax of the high-precision tensor, the scale
    used (blockwise: the smallest tile scale, the one of the tile with the largest amax, which is
    the scale per-tensor current scaling would use), and the shares (0..1) of its values that
    saturated at fp8_max (a plain cast would have overflowed), that were not 0 and became 0, and
    that are subnormal in fp8. An operand not cast in a step reports amax 0 and shares 0, with
    the scale it holds (delayed) or 0 (current scaling: no scale was used).

    >>> OperandStats(4.0, 112.0, 0.0, 0.0, 0.5).to_dict()["subnormal"]
    0.5
    """

    amax: float
    scale: float
    saturated: float
    flushed: float
    subnormal: float

    def to_dict(self) -> dict[str, float]:
        """The five numbers by name (:data:`STATS`).

        >>> list(OperandStats(1.0, 448.0, 0.0, 0.0, 0.0).to_dict())
        ['amax', 'scale', 'saturated', 'flushed', 'subnormal']
        """
        return {name: float(getattr(self, name)) for name in STATS}


@dataclass
class _Step:
    """What the first cast of a step found: the amax, the scale (blockwise: the smallest tile
    scale), a bound on ``|x * scale|`` (per tensor) and the shares of the cast."""

    amax: float
    scale: np.float32
    bound: float
    shares: CastShares
    #: per tensor: the cast values and the tensor itself, so that a later cast of the same
    #: memory in the step (``W.T`` for the data gradient, ``x.T`` for the weight gradient) reuses
    #: the values, as TE and torchao keep the fp8 copy for the backward pass. (Holding the tensor
    #: keeps its memory from being reused by another array within the step; a tensor written in
    #: place between two casts of one step would not be noticed, and nothing in a step does that.)
    values: NDArray[np.float32] | None = None
    source: NDArray[np.float32] | None = None


def _where(x: NDArray[Any]) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    return int(x.__array_interface__["data"][0]), x.shape, x.strides


class OperandScaler:
    """The scaling state of one operand (one layer's input, weight or gradient) under a recipe.

    :meth:`quantize` casts the operand for a GEMM. The first call of a step takes the step's scale
    (current scaling: from this tensor; delayed: the held scale), records the amax (delayed: into
    slot 0 of the history, as TE's cast kernels do) and the cast's statistics; later calls in the
    same step (the weight in the data-gradient GEMM, the input in the weight-gradient GEMM) cast
    with the same scale and record nothing, so that their values are the first cast's values
    (transposed): the fp8 copy TE and torchao keep for the backward pass. Blockwise recasts tile
    by tile along the new reduction axis, as DeepSeek-V3 does. :meth:`end_step` closes the step.

    >>> s = OperandScaler(Fp8Recipe("delayed", amax_history=4), "input")
    >>> s.quantize(np.float32([[2.0, 1.0]]), 1).values.tolist()      # the initial scale is 1
    [[2.0, 1.0]]
    >>> s.end_step().scale, s.scale, s.amax_history.tolist()         # the next step's: 448 / 2
    (1.0, 224.0, [0.0, 0.0, 0.0, 2.0])
    """

    def __init__(self, recipe: Fp8Recipe, role: str) -> None:
        if not isinstance(recipe, Fp8Recipe):
            raise ValueError(f"recipe={shown(recipe)}: expected an Fp8Recipe")
        self.recipe = recipe
        self.role = one_of("role", role, ROLES)
        self.fmt = recipe.format_for(role)
        self.steps = 0
        delayed = recipe.kind == "delayed"
        # Transformer Engine starts every scale at 1 and every history at zeros
        self._scale = np.float32(1.0)
        self._history: NDArray[np.float32] = np.zeros(recipe.amax_history if delayed else 0, np.float32)
        self._step: _Step | None = None
        self._last_scale = 0.0

    @property
    def scale(self) -> float:
        """Delayed: the scale the next cast uses. Current scaling: the last step's (0 before any).

        >>> OperandScaler(Fp8Recipe("delayed"), "grad").scale
        1.0
        """
        if self.recipe.kind == "delayed":
            return float(self._scale)
        return self._last_scale

    @property
    def amax_history(self) -> NDArray[np.float32]:
        """A copy of the delayed-scaling amax history (slot 0: this step's amax; empty otherwise).

        >>> OperandScaler(Fp8Recipe("delayed", amax_history=3), "input").amax_history.tolist()
        [0.0, 0.0, 0.0]
        """
        out: NDArray[np.float32] = self._history.copy()
        return out

    def quantize(self, x: ArrayLike, reduce_axis: int, *, record: bool = True) -> Quantized:
        """``x`` cast into this operand's fp8 format for a GEMM that sums over ``reduce_axis``.

        ``record=False`` casts as the next recorded cast would (delayed: with the held scale;
        current scaling: from ``x`` itself) and leaves the state alone: an evaluation's forward
        pass between two training steps, which must not enter the amax history.

        >>> s = OperandScaler(Fp8Recipe("blockwise", block=2), "input")
        >>> q = s.quantize(np.float32([[1.0, 4.0, 0.5]]), 1)
        >>> q.layout, q.scale.tolist(), q.values.tolist()            # tiles [1, 4] and [0.5]
        ('tile', [[112.0, 896.0]], [[112.0, 448.0, 448.0]])
        """
        x32 = to_float32(x)
        if x32.ndim == 0:
            raise ValueError(f"an operand of shape {x32.shape}: expected an array of 1 or more dimensions")
        axis = want_int("reduce_axis", reduce_axis, -x32.ndim)
        if axis >= x32.ndim:
            raise ValueError(f"reduce_axis={axis}: expected an axis of an array of {x32.ndim} dimensions")
        axis %= x32.ndim
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            if self.recipe.kind == "blockwise":
                return self._quantize_blockwise(x32, axis, record)
            return self._quantize_tensor(x32, axis, record)

    def _tensor_scale(self, x32: NDArray[np.float32]) -> tuple[float, np.float32, float]:
        """The amax of ``x32``, the scale of this step's per-tensor cast, and a bound on |x * scale|."""
        if self.recipe.kind == "delayed":
            amax = tensor_amax(x32, "ignore")  # TE's fmaxf(fabsf(v), amax): a NaN never counts
            # rounding is monotonic: max |fl(x * s)| is fl(amax * s), inf when x holds one
            return amax, self._scale, float(np.float32(amax) * self._scale)
        amax = tensor_amax(x32, "propagate")  # torch.max(torch.abs(x)): a NaN makes it NaN
        # the scale maps a finite amax to fp8_max within a rounding: nothing overflows; an inf
        # or NaN amax gets the scale 1 (TE's rule), and an infinity then meets the clamp
        bound = self.fmt.max if math.isfinite(amax) else math.inf
        return amax, np.float32(current_scale(amax, self.fmt, self.recipe.pow2_scale)), bound

    def _quantize_tensor(self, x32: NDArray[np.float32], axis: int, record: bool = True) -> Quantized:
        step = self._step
        if step is not None:  # a later cast in the step: the step's scale
            scale = step.scale
            q = self._reuse(step, x32)
            if q is None:
                q = self._cast(x32, scale, step.bound)[0]
        else:
            amax, scale, bound = self._tensor_scale(x32)
            q, shares = self._cast(x32, scale, bound, counted=record)
            if record:
                if self._history.size:
                    self._history[0] = np.fmax(self._history[0], np.float32(amax))  # (TE's atomicMax)
                assert shares is not None
                self._step = _Step(amax, scale, bound, shares, q, x32)
        return Quantized(q, np.asarray(scale, np.float32), self.fmt, axis, "tensor", 0)

    def _cast(
        self, x32: NDArray[np.float32], scale: np.float32, bound: float, counted: bool = False
    ) -> tuple[NDArray[np.float32], CastShares | None]:
        """``saturating_cast(x32 * scale)`` and, when ``counted``, its shares: one compiled pass
        for a C-contiguous tensor, the NumPy passes otherwise (the same values and counts)."""
        fast = scaled_cast(x32, scale, self.fmt, bound)
        if fast is not None:
            q, counts = fast
            threshold = cast_threshold(self.fmt)
            return q, shares_of(counts, x32.size, bound >= threshold) if counted else None
        xs = x32 * scale
        q = saturating_cast(xs, self.fmt, bound)
        return q, cast_shares(x32, q, self.fmt, xs=xs, bound=bound) if counted else None

    @staticmethod
    def _reuse(step: _Step, x32: NDArray[np.float32]) -> NDArray[np.float32] | None:
        """The step's cast values for ``x32`` when it is the first cast's tensor itself or its
        transpose (the same memory, shape and strides, or both reversed), or, for a C-contiguous
        first tensor, a C-contiguous reshape of it or the transpose of one (the same memory read
        in the same order: ``x.reshape(-1, d).T`` of the weight gradient, whose values are then
        copied C-contiguous); else None. The cast is elementwise with one scale, so the values of
        a view are the view of the values."""
        if step.values is None or step.source is None:
            return None
        ptr, shape, strides = _where(x32)
        first = _where(step.source)
        if ptr != first[0]:
            return None
        if (shape, strides) == first[1:]:
            return step.values
        if (shape[::-1], strides[::-1]) == first[1:]:
            out: NDArray[np.float32] = step.values.T
            return out
        src, values = step.source, step.values
        if x32.size == src.size and src.flags.c_contiguous and values.flags.c_contiguous:
            if x32.flags.c_contiguous:
                return values.reshape(shape)
            if x32.ndim == 2 and x32.T.flags.c_contiguous:
                # C-contiguous, as a cast of x32 comes out: BLAS may sum a matrix held transposed
                # in another order, so a transposed view would not give the GEMM's bits
                return transposed_copy(values.reshape(shape[::-1]))
        return None

    def _quantize_blockwise(self, x32: NDArray[np.float32], axis: int, record: bool = True) -> Quantized:
        b, pow2 = self.recipe.block, self.recipe.pow2_scale
        if self.role == "weight":
            cast, counted = block_cast(x32, self.fmt, b, pow2)
            layout = "block"
        else:
            cast, counted = tile_cast(x32, self.fmt, b, axis, pow2)
            layout = "tile"
        if self._step is None and record:
            smallest = float(cast.scale.min()) if cast.scale.size else 0.0
            # no tile can saturate (each scale maps its own amax to fp8_max): bound fp8_max
            if counted is not None:
                shares = shares_of(counted, x32.size, False)
            else:
                shares = cast_shares(x32, cast.values, self.fmt, bound=self.fmt.max)
            self._step = _Step(cast.amax, np.float32(smallest), self.fmt.max, shares)
        return Quantized(cast.values, cast.scale, self.fmt, axis, layout, b)

    def end_step(self) -> OperandStats:
        """Close the step: its statistics; under delayed scaling, TE's history and scale update.

        >>> s = OperandScaler(Fp8Recipe("tensorwise"), "grad")
        >>> _ = s.quantize(np.float32([1e-10, 1.0]), 0)
        >>> st = s.end_step(); st.amax, st.scale, st.flushed      # 1e-10 * 57344 is below 2^-17
        (1.0, 57344.0, 0.5)
        """
        step = self._step
        if step is None:
            held = float(self._scale) if self.recipe.kind == "delayed" else 0.0
            stats = OperandStats(0.0, held, 0.0, 0.0, 0.0)
        else:
            stats = OperandStats(step.amax, float(step.scale), *step.shares)
            self._last_scale = float(step.scale)
        if self.recipe.kind == "delayed":
            r = self.recipe
            self._history, self._scale = delayed_update(
                self._history, float(self._scale), self.fmt.max, r.margin, r.amax_compute_algo
            )
        self._step = None
        self.steps += 1
        return stats

    def state_dict(self) -> dict[str, Any]:
        """The state to checkpoint between steps: recipe, role, steps; delayed: scale and history.

        >>> sorted(OperandScaler(Fp8Recipe("delayed"), "input").state_dict())
        ['amax_history', 'recipe', 'role', 'scale', 'steps']
        """
        state: dict[str, Any] = {"recipe": self.recipe.to_dict(), "role": self.role, "steps": self.steps}
        if self.recipe.kind == "delayed":
            state["scale"] = float(self._scale)
            state["amax_history"] = self._history.copy()
        return state

    def load_state_dict(self, state: Any) -> None:
        """Restore :meth:`state_dict`'s output; a state of another recipe or role is refused.

        >>> a = OperandScaler(Fp8Recipe("delayed", amax_history=2), "input")
        >>> _ = a.quantize(np.float32([4.0]), 0); _ = a.end_step()
        >>> b = OperandScaler(Fp8Recipe("delayed", amax_history=2), "input")
        >>> b.load_state_dict(a.state_dict()); b.scale
        112.0
        """
        state = want_dict("fp8 scaler state", state)
        for key in ("recipe", "role", "steps"):
            if key not in state:
                raise ValueError(f"fp8 scaler state lacks {key!r}")
        recipe = Fp8Recipe.from_dict(state["recipe"])
        if recipe != self.recipe or state["role"] != self.role:
            raise ValueError(
                f"an fp8 scaler state of {shown(state['role'])} under {shown(recipe.to_dict())}: "
                f"expected one of {self.role!r} under {shown(self.recipe.to_dict())}"
            )
        steps = want_int("steps", state["steps"])
        scale, history = self._scale, self._history
        if recipe.kind == "delayed":
            for key in ("scale", "amax_history"):
                if key not in state:
                    raise ValueError(f"fp8 scaler state lacks {key!r}")
            s = to_float32(want_real("scale", state["scale"]))
            if not 0.0 < s < np.inf:
                raise ValueError(f"scale={shown(state['scale'])}: expected a finite fp32 scale above 0")
            h = np.asarray(state["amax_history"])
            if h.shape != (recipe.amax_history,) or h.dtype.kind not in "fiu" or np.any(h < 0):
                raise ValueError(
                    f"amax_history={shown(state['amax_history'])}: expected {recipe.amax_history} "
                    "amaxes (numbers >= 0, inf or NaN)"
                )
            scale, history = np.float32(s), to_float32(h).copy()
        self.steps, self._scale, self._history, self._step = steps, scale, history, None


def scaled_matmul(
    a: Quantized,
    b: Quantized,
    *,
    accumulate: FloatFormat | str | None = None,
    promote_every: int | None = None,
    finish: Finish | None = None,
) -> NDArray[np.float32]:
    """The fp8 GEMM of two cast operands, ``a`` (..., M, K) summed over its last axis and ``b``
    (K, N) over its first, in float32.

    Per tensor: ``(qa @ qb)`` in float32 (exact fp8 products, fp32 sums through BLAS), times
    ``float32(1/sa * 1/sb)``: ``torch._scaled_mm``'s epilogue, whose ``scale_a`` and ``scale_b``
    are the inverse scales, ``out = (qa * scale_a) @ (qb * scale_b)``. Blockwise (``a`` in tiles
    of 1 x ``block`` or in blocks, ``b`` in tiles of ``block`` x 1 or in blocks): the K loop of
    :func:`~floatlab.train.recipes.blockwise.blockwise_matmul`.

    ``accumulate`` is the tensor core's accumulator (default: exact fp32): per tensor, the
    products are summed in it (promoted into fp32 every ``promote_every``, as
    :func:`~floatlab.train.precision.accumulate.accumulate_matmul`); blockwise, each tile's partial sum is,
    and the tile is the promotion (``promote_every`` must then be None or the block size).
    ``finish``: a blockwise GEMM's epilogue, as in
    :func:`~floatlab.train.recipes.blockwise.blockwise_matmul`.

    >>> r = Fp8Recipe("tensorwise")
    >>> qa = OperandScaler(r, "input").quantize(np.float32([[3.5, 1.0]]), 1)    # scale 128
    >>> qb = OperandScaler(r, "weight").quantize(np.float32([[1.0], [1.75]]), 0)  # scale 256
    >>> scaled_matmul(qa, qb).tolist()
    [[5.25]]
    """
    if not isinstance(a, Quantized) or not isinstance(b, Quantized):
        raise ValueError(f"scaled_matmul of {type(a).__name__}, {type(b).__name__}: expected two Quantized")
    av, bv = a.values, b.values
    if av.ndim < 2 or a.reduce_axis != av.ndim - 1:
        raise ValueError(
            f"a of shape {av.shape} reduced over axis {a.reduce_axis}: expected (..., M, K) over its last"
        )
    if bv.ndim != 2 or b.reduce_axis != 0:
        raise ValueError(
            f"b of shape {bv.shape} reduced over axis {b.reduce_axis}: expected (K, N) over its first"
        )
    if av.shape[-1] != bv.shape[0]:
        raise ValueError(f"scaled_matmul of shapes {av.shape} and {bv.shape}: inner dimensions differ")
    with np.errstate(over="ignore", invalid="ignore"):
        if a.layout == "tensor" and b.layout == "tensor":
            inv = a.inv_scale * b.inv_scale  # one fp32 factor for the epilogue
            if accumulate is None:
                out: NDArray[np.float32] = host_matmul(av, bv)
            else:
                out = accumulate_matmul(av, bv, accumulate=accumulate, promote_every=promote_every)
            out *= inv  # (in place: the epilogue, one float32 multiply)
            return out
        if a.layout == "tensor" or b.layout == "tensor" or a.block != b.block:
            raise ValueError(
                f"scaled_matmul of a {a.layout} operand (block {a.block}) and a {b.layout} one "
                f"(block {b.block}): expected both per tensor, or both blockwise with one block size"
            )
        k, n = bv.shape
        a2 = av.reshape(math.prod(av.shape[:-1]), k)  # (spelled out: a reshape of 0 values to -1 is refused)
        if a.layout == "block":
            a_inv = expand_scales(a.inv_scale, a.block, 0, a2.shape[0])
        else:
            a_inv = a.inv_scale.reshape(a2.shape[0], -(-k // a.block))
        b_inv = expand_scales(b.inv_scale, b.block, 1, n) if b.layout == "block" else b.inv_scale
        if promote_every not in (None, a.block):
            raise ValueError(
                f"promote_every={shown(promote_every)}: block scaling promotes once a tile, "
                f"every {a.block} products (expected None or {a.block})"
            )
        out = blockwise_matmul(a2, a_inv, bv, b_inv, a.block, accumulate, finish)
        return out.reshape(*av.shape[:-1], n)


def _operand_key(site: Any, role: str) -> str:
    site = want_str("site", site)
    if not site or "/" in site or site.startswith("__"):
        raise ValueError(f"site={shown(site)}: expected a non-empty name without '/' or a leading '__'")
    return f"{site}.{one_of('role', role, ROLES)}"


class Fp8Scaling:
    """The fp8 scaling of every GEMM operand of a model for one training run.

    Each ``(site, role)`` (a layer and an operand of it) has its own :class:`OperandScaler`,
    made on first use. :meth:`matmul` casts both operands and multiplies them; :meth:`end_step`
    closes a step and keeps a per-step record, :attr:`history`. For a linear layer ``y = x @ W``
    at ``site``: forward ``matmul(site, x, "input", W, "weight")``, data gradient
    ``matmul(site, dy, "grad", W.T, "weight")``, weight gradient ``matmul(site, x.T, "input", dy,
    "grad")``.

    >>> f = Fp8Scaling(Fp8Recipe("delayed", amax_history=8))
    >>> x, w = np.float32([[1.0, 3.5]]), np.float32([[1.0], [1.0]])
    >>> for step in range(2):
    ...     y = f.matmul("fc", x, "input", w, "weight")
    ...     _ = f.end_step()
    >>> f.history["fc.input"]["scale"], y.tolist()           # 1, then 448 / 3.5
    ([1.0, 128.0], [[4.5]])
    """

    def __init__(self, recipe: Fp8Recipe) -> None:
        if not isinstance(recipe, Fp8Recipe):
            raise ValueError(f"recipe={shown(recipe)}: expected an Fp8Recipe")
        self.recipe = recipe
        self.steps = 0
        self._scalers: dict[str, OperandScaler] = {}
        self._history: dict[str, dict[str, list[float]]] = {}
        self._first: dict[str, int] = {}

    def scaler(self, site: str, role: str) -> OperandScaler:
        """The scaler of operand ``role`` of ``site`` (made on first use).

        >>> Fp8Scaling(Fp8Recipe("tensorwise")).scaler("fc", "grad").fmt.name
        'float8_e5m2'
        """
        key = _operand_key(site, role)
        if key not in self._scalers:
            self._scalers[key] = OperandScaler(self.recipe, role)
            self._history[key] = {name: [] for name in STATS}
            self._first[key] = self.steps
        return self._scalers[key]

    def matmul(
        self,
        site: str,
        a: ArrayLike,
        a_role: str,
        b: ArrayLike,
        b_role: str,
        *,
        record: bool = True,
        accumulate: FloatFormat | str | None = None,
        promote_every: int | None = None,
        finish: Finish | None = None,
    ) -> NDArray[np.float32]:
        """``a @ b`` in fp8: ``a`` (..., M, K) cast by the scaler of ``(site, a_role)`` over its last
        axis, ``b`` (K, N) by that of ``(site, b_role)`` over its first; float32 result, which the
        caller rounds or stores as its policy says. ``record=False`` (an evaluation between
        steps) casts with the scales the next step would use and changes no state: an operand
        not seen yet gets a fresh scaler that is not kept. ``accumulate`` and ``promote_every``:
        the accumulator, and ``finish``, a blockwise GEMM's epilogue, as in :func:`scaled_matmul`.

        >>> f = Fp8Scaling(Fp8Recipe("tensorwise"))
        >>> w = np.float32([[0.875, 0.0], [0.0, 0.4375]])
        >>> f.matmul("fc", np.float32([[1.0, 3.5]]), "input", w, "weight").tolist()
        [[0.875, 1.53125]]
        """
        a_arr, b_arr = np.asarray(a), np.asarray(b)
        if a_arr.ndim < 2 or b_arr.ndim != 2 or a_arr.shape[-1] != b_arr.shape[0]:
            raise ValueError(
                f"matmul of shapes {a_arr.shape} and {b_arr.shape}: expected (..., M, K) and (K, N)"
            )
        sa, sb = (self._scaler_for(site, role, record) for role in (a_role, b_role))
        qa = sa.quantize(a_arr, a_arr.ndim - 1, record=record)
        qb = sb.quantize(b_arr, 0, record=record)
        return scaled_matmul(qa, qb, accumulate=accumulate, promote_every=promote_every, finish=finish)

    def _scaler_for(self, site: str, role: str, record: bool) -> OperandScaler:
        if record:
            return self.scaler(site, role)
        found = self._scalers.get(_operand_key(site, role))
        return found if found is not None else OperandScaler(self.recipe, role)

    def end_step(self) -> dict[str, dict[str, float]]:
        """Close the step of every operand: its :class:`OperandStats` as a dict, by ``"site.role"``.

        >>> f = Fp8Scaling(Fp8Recipe("tensorwise"))
        >>> _ = f.matmul("fc", np.float32([[2.0]]), "input", np.float32([[1.0]]), "weight")
        >>> f.end_step()["fc.weight"]
        {'amax': 1.0, 'scale': 448.0, 'saturated': 0.0, 'flushed': 0.0, 'subnormal': 0.0}
        """
        out = {}
        for key, scaler in self._scalers.items():
            stats = scaler.end_step().to_dict()
            out[key] = stats
            record = self._history[key]
            for name in STATS:
                record[name].append(stats[name])
        self.steps += 1
        return out

    @property
    def history(self) -> dict[str, dict[str, list[float]]]:
        """Per operand ``"site.role"``, each :data:`STATS` entry as a list with one value per step
        since the operand's first use (:attr:`first_step`).

        >>> Fp8Scaling(Fp8Recipe("tensorwise")).history
        {}
        """
        return {key: {name: list(v) for name, v in rec.items()} for key, rec in self._history.items()}

    @property
    def first_step(self) -> dict[str, int]:
        """The step at which each operand was first used: its history's first entry.

        >>> f = Fp8Scaling(Fp8Recipe("tensorwise")); _ = f.end_step(); _ = f.scaler("fc", "input")
        >>> f.first_step
        {'fc.input': 1}
        """
        return dict(self._first)

    def state_dict(self) -> dict[str, Any]:
        """Everything a checkpoint needs between steps (numbers, strings and arrays).

        >>> sorted(Fp8Scaling(Fp8Recipe("delayed")).state_dict())
        ['first_step', 'history', 'operands', 'recipe', 'steps']
        """
        return {
            "recipe": self.recipe.to_dict(),
            "steps": self.steps,
            "operands": {key: s.state_dict() for key, s in self._scalers.items()},
            "first_step": dict(self._first),
            "history": {
                key: {name: np.asarray(v, np.float64) for name, v in rec.items()}
                for key, rec in self._history.items()
            },
        }

    def load_state_dict(self, state: Any) -> None:
        """Restore :meth:`state_dict`'s output (all checked first: a bad state changes nothing).

        >>> a = Fp8Scaling(Fp8Recipe("delayed", amax_history=4))
        >>> _ = a.matmul("fc", np.float32([[8.0]]), "input", np.float32([[1.0]]), "weight"); _ = a.end_step()
        >>> b = Fp8Scaling(Fp8Recipe("delayed", amax_history=4)); b.load_state_dict(a.state_dict())
        >>> b.scaler("fc", "input").scale, b.history["fc.input"]["amax"]
        (56.0, [8.0])
        """
        state = want_dict("fp8 scaling state", state)
        for key in ("recipe", "steps", "operands", "first_step", "history"):
            if key not in state:
                raise ValueError(f"fp8 scaling state lacks {key!r}")
        recipe = Fp8Recipe.from_dict(state["recipe"])
        if recipe != self.recipe:
            raise ValueError(
                f"an fp8 scaling state of {shown(recipe.to_dict())}: "
                f"expected one of {shown(self.recipe.to_dict())}"
            )
        steps = want_int("steps", state["steps"])
        operands = want_dict("operands", state["operands"])
        first = want_dict("first_step", state["first_step"])
        hist = want_dict("history", state["history"])
        if set(first) != set(operands) or set(hist) != set(operands):
            raise ValueError(
                f"fp8 scaling state with operands {shown(sorted(operands))}: expected the same in "
                "first_step and history"
            )
        scalers, history, firsts = {}, {}, {}
        for key, sub in operands.items():
            site, _, role = key.rpartition(".")
            _operand_key(site, role)
            scaler = OperandScaler(recipe, role)
            scaler.load_state_dict(sub)
            firsts[key] = want_int(f"first_step[{key}]", first[key])
            record = want_dict(f"history[{key}]", hist[key])
            if set(record) != set(STATS):
                raise ValueError(f"history[{key}] with {shown(sorted(record))}: expected {', '.join(STATS)}")
            lists = {}
            for name in STATS:
                values = np.asarray(record[name])
                want = steps - firsts[key]
                if values.ndim != 1 or values.dtype.kind not in "fiu" or len(values) != want:
                    raise ValueError(f"history[{key}][{name}]={shown(record[name])}: expected {want} numbers")
                lists[name] = [float(v) for v in values]
            scalers[key], history[key] = scaler, lists
        self.steps, self._scalers, self._history, self._first = steps, scalers, history, firsts

    def __repr__(self) -> str:
        return f"Fp8Scaling({self.recipe.describe()!r}, {len(self._scalers)} operands, {self.steps} steps)"
