"""The policy in action: every point of a training step where a value is stored in a format.

:class:`Precision` is built from a :class:`~floatlab.train.precision.policy.Policy` and is what the model
code calls: ``P.act(x)`` stores an activation in the forward format, ``P.grad(g)`` a gradient in
the backward format, ``P.matmul`` is the simulated tensor-core GEMM, and ``P.rounder(fmt, op)``
marks the rounding points inside one operation (none when the op is kept in fp32).

Every conversion goes through :func:`floatlab.rounding.round_array`. Values are held in
float32 arrays: fp16, bf16, tf32 and the fp8/fp6/fp4 formats are subsets of fp32, so holding
their values in float32 loses nothing.

>>> import numpy as np
>>> from floatlab.train.precision.policy import get_policy
>>> P = Precision(get_policy("fp16"))
>>> P.act(np.array([0.1, 1e-8, 70000.0], dtype=np.float32)).tolist()
[0.0999755859375, 0.0, inf]
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
from numpy.typing import NDArray

from floatlab.backend import Backend, get_backend, get_xp, host_ints, is_cupy
from floatlab.formats import FP32, FloatFormat
from floatlab.rounding import fma_sum, fma_sum_flushed, pairwise_sums, round_array, round_flushed, round_owned
from floatlab.train.hostmath import host_matmul
from floatlab.train.precision.accumulate import accumulate_matmul
from floatlab.train.precision.matmul import gemm, gemm_format, matmul
from floatlab.train.precision.policy import Policy, get_policy
from floatlab.train.recipes import Fp8Scaling, MicroRecipe, MicroScaling

__all__ = ["Array", "Params", "Precision", "Rounder", "gemm"]

Array = NDArray[Any]
#: a model's parameters (or their gradients), arrays by name
Params = dict[str, Array]


class Precision:
    """The runtime side of a policy: casts, the tensor-core GEMM, reductions and underflow counts.

    ``rng`` feeds stochastic rounding (a seeded generator makes it reproducible). ``backend``
    (``"numpy"``, the default, or ``"cupy"``) holds the arrays and runs the GEMMs: on CuPy they
    are cuBLAS GEMMs whose inputs enter in :attr:`gemm_compute`, the narrowest hardware format
    holding the forward and backward formats (fp16 for fp16 and fp8, bf16 for bf16), so the
    tensor cores multiply exactly the stored values and accumulate in fp32. Inside
    ``with P.counting_flushes():`` every stored gradient is counted: :attr:`grad_values` non-zero values
    were stored and :attr:`grad_flushed` of them became zero (underflow to zero).

    >>> from floatlab.train.precision.policy import get_policy
    >>> P = Precision(get_policy("fp16"))
    >>> with P.counting_flushes():
    ...     g = P.grad(np.array([1e-3, 1e-8, 3e-8, 0.0], dtype=np.float32))
    >>> P.grad_values, P.grad_flushed
    (3, 1)
    """

    def __init__(
        self,
        policy: Policy | str,
        rng: np.random.Generator | None = None,
        backend: Backend | str | None = None,
        layers: Sequence[str] | None = None,
    ) -> None:
        self.policy = get_policy(policy)
        self.fwd: FloatFormat = self.policy.forward
        self.bwd: FloatFormat = self.policy.backward
        self.wide: FloatFormat = self.policy.wide
        self.dtype: np.dtype[Any] = self.policy.dtype
        self.fp32_ops = self.policy.fp32_ops
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self.backend = get_backend(backend)
        gf = gemm_format(self.fwd, self.bwd)
        #: the input format of the GEMMs on a GPU backend (fp32 ones use TF32 only when asked)
        self.gemm_compute: str = self.backend.fp32_gemm if gf == FP32 else gf.name
        self._counting = False
        self.grad_values = 0
        self.grad_flushed = 0
        self._pending: list[Any] = []  # a GPU's counts, kept on the device until the pass ends
        #: the recipe's state (an fp8 recipe's operand scalers, a microscaling recipe's record),
        #: when the policy has one; ``layers``, the model's linear layers in forward order, tells
        #: a microscaling recipe which are the first and the last
        self.scaling: Fp8Scaling | MicroScaling | None = None
        recipe = self.policy.recipe
        if isinstance(recipe, MicroRecipe):
            self.scaling = MicroScaling(recipe, self.rng, layers)
        elif recipe is not None:
            self.scaling = Fp8Scaling(recipe)
        self._training = True

    @property
    def fp8(self) -> Fp8Scaling | None:
        """The recipe's state when it is an fp8 recipe's (read-only: assign :attr:`scaling`).

        >>> Precision("fp8-delayed").fp8 is not None, Precision("nvfp4").fp8
        (True, None)
        """
        return self.scaling if isinstance(self.scaling, Fp8Scaling) else None

    # ---- casts --------------------------------------------------------------------------------
    def is_wide(self, fmt: FloatFormat) -> bool:
        """True when storing in ``fmt`` changes nothing (the holding arrays' own format)."""
        return fmt is self.wide or fmt == self.wide

    def cast(self, x: Array, fmt: FloatFormat, rounding: str | None = None) -> Array:
        """``x`` rounded to ``fmt`` (held in the policy's dtype); unchanged when ``fmt`` is fp32.

        >>> from floatlab.formats import BF16
        >>> Precision("fp32").cast(np.array([1 / 3], np.float32), BF16).tolist()
        [0.333984375]
        """
        if self.is_wide(fmt):
            return x
        r: Array = round_array(x, fmt, **self._knobs(rounding))
        return r.reshape(np.shape(x)) if r.ndim != np.ndim(x) else r

    def _knobs(self, rounding: str | None = None) -> dict[str, Any]:
        """The policy's rounding knobs for the door (the mode: ``rounding`` or the policy's)."""
        mode = rounding or self.policy.rounding
        return {
            "rounding": mode,
            "rng": self.rng if mode == "stochastic" else None,
            "saturate": self.policy.saturate,
            "subnormals": self.policy.subnormals,
        }

    def store(self, x: Array, fmt: FloatFormat, *, owned: bool = False) -> Array:
        """Store ``x`` in ``fmt``; inside :meth:`backward`, count the values flushed to zero.
        ``owned``: ``x`` is the caller's own temporary (a GEMM's fresh output), which it gives up:
        a plain bf16 or fp16 store then rounds it in its own memory (no new array).

        >>> P = Precision("bf16")
        >>> with P.counting_flushes():
        ...     _ = P.store(np.array([1e-40, 1e-45, 2.0], np.float32), P.bwd)
        >>> P.grad_flushed, P.grad_values   # bf16 keeps fp32's subnormals down to 2^-133
        (1, 3)
        """
        if self.is_wide(fmt):
            return x
        if not self._counting:
            if not owned:
                return self.cast(x, fmt)
            r: Array = round_owned(x, fmt, **self._knobs())
        else:
            # rounding keeps zeros at zero, so every lost non-zero is a value flushed by
            # underflow (counted in the rounding's own pass where it is a plain bf16 or fp16 store)
            if is_cupy(x):  # on a GPU the counts stay there until the pass ends: one read-back
                xp = get_xp(x)
                r = round_array(x, fmt, **self._knobs())
                self._pending += [xp.count_nonzero(x), xp.count_nonzero(r)]
            else:
                got = round_flushed(x, fmt, overwrite=owned, **self._knobs())
                self.grad_values += got.nonzero
                self.grad_flushed += got.flushed
                r = got.values
        return r.reshape(np.shape(x)) if r.ndim != np.ndim(x) else r

    def act(self, x: Array) -> Array:
        """Store an activation in the forward format."""
        return self.store(x, self.fwd)

    def grad(self, g: Array) -> Array:
        """Store a gradient in the backward format."""
        return self.store(g, self.bwd)

    def weights(self, params: Mapping[str, Array], norm: frozenset[str] = frozenset()) -> dict[str, Array]:
        """The weights as the forward GEMMs see them: each cast once per step to the forward format.
        The parameters named in ``norm`` (BatchNorm's) stay as they are under ``batchnorm_fp32``.

        >>> Precision("mixed-bf16").weights({"W": np.array([1 / 3], np.float32)})["W"].tolist()
        [0.333984375]
        """
        keep = norm if self.policy.batchnorm_fp32 else frozenset()
        if self.policy.weight_format == self.fwd and not keep:
            return dict(params)
        return {k: v if k in keep else self.cast(v, self.fwd) for k, v in params.items()}

    @contextmanager
    def counting_flushes(self) -> Iterator[None]:
        """Count the gradients stored inside the block (see :attr:`grad_flushed`)."""
        self.grad_values = self.grad_flushed = 0
        self._pending = []
        self._counting = True
        try:
            yield
        finally:
            self._counting = False
            self._settle()

    def _settle(self) -> None:
        """Add the counts a GPU kept on the device to :attr:`grad_values` and :attr:`grad_flushed`."""
        if self._pending:
            c = host_ints(self._pending)
            self._pending = []
            self.grad_values += sum(c[0::2])
            self.grad_flushed += sum(c[0::2]) - sum(c[1::2])

    @contextmanager
    def inference(self, stream: Sequence[int] | None = None) -> Iterator[None]:
        """A forward pass that is not a training step (an evaluation, sampling): the fp8 recipe
        casts with the scales the next step would use and records nothing, so that evaluating
        between steps changes no amax history. With ``stream`` (the words of a seed), stochastic
        roundings inside draw from a generator of their own, and the training stream is left
        where it was: a measurement changes no training step's random bits.

        >>> P = Precision("fp16", rng=np.random.default_rng(0))
        >>> before = P.rng.bit_generator.state
        >>> with P.inference(stream=[0, 3, 1]):
        ...     _ = P.rng.random()
        >>> P.rng.bit_generator.state == before
        True
        """
        bits = self.rng.bit_generator
        training_state = bits.state
        if stream is not None:
            bits.state = np.random.default_rng(list(stream)).bit_generator.state
        self._training = False
        try:
            yield
        finally:
            self._training = True
            bits.state = training_state

    @property
    def flushed_share(self) -> float:
        """Share of the non-zero gradients of the last backward pass that were flushed to zero."""
        self._settle()
        return self.grad_flushed / self.grad_values if self.grad_values else 0.0

    # ---- compute ------------------------------------------------------------------------------
    def matmul(
        self, a: Array, b: Array, out: FloatFormat, *, bias: Array | None = None, alpha: float | None = None
    ) -> Array:
        """The tensor-core GEMM on values already stored in their formats (see :func:`gemm`):
        products and accumulation in the holding precision (fp32) via BLAS, bias added in the
        epilogue, one rounding to ``out``.

        >>> P = Precision("fp16")
        >>> P.matmul(np.full((1, 2), 300.0, np.float32), np.full((2, 1), 200.0, np.float32), P.fwd).tolist()
        [[inf]]
        """
        # NumPy multiplies the stored values in float32 (exact products); a GPU or a TF32 run
        # enters them in the GEMM format (exact conversion) and accumulates in fp32
        gpu = self.backend.is_gpu or self.gemm_compute == "tf32"
        acc = matmul(a, b, self.gemm_compute, self.backend) if gpu else host_matmul(a, b)
        if alpha is not None:
            acc *= acc.dtype.type(alpha)
        if bias is not None:
            acc += bias
        return self.store(acc, out, owned=True)  # (acc: this GEMM's fresh output)

    def linear(
        self,
        site: str | None,
        a: Array,
        a_role: str,
        b: Array,
        b_role: str,
        out: FloatFormat,
        *,
        bias: Array | None = None,
    ) -> Array:
        """A GEMM of the linear layer ``site``: ``a @ b`` whose operands play ``a_role`` and
        ``b_role`` (``"input"``, ``"weight"`` or ``"grad"``), bias added, stored in ``out``.

        Under an fp8 recipe both operands are scaled into fp8 and the product scaled back
        (:class:`~floatlab.train.recipes.Fp8Scaling`); under a microscaling recipe both are
        quantized in blocks along the reduction (:class:`~floatlab.train.recipes.MicroScaling`;
        a layer it keeps in bf16 is :meth:`matmul`); with a narrow accumulator the products
        are summed in it (:func:`~floatlab.train.precision.accumulate.accumulate_matmul`); otherwise, and
        for a GEMM with no ``site``, it is :meth:`matmul`.

        >>> P = Precision("fp8-tensorwise")      # x is scaled by 448 / 3e-4 before its cast to E4M3
        >>> x, W = np.array([[1e-4, 3e-4]], np.float32), np.ones((2, 1), np.float32)
        >>> P.linear("W0", x, "input", W, "weight", P.fwd).tolist()
        [[0.000396728515625]]
        >>> Q = Precision("mixed-fp8")           # unscaled: both values are below E4M3's 2^-9
        >>> Q.matmul(Q.cast(x, Q.fwd), Q.cast(W, Q.fwd), Q.fwd).tolist()
        [[0.0]]
        """
        scaling = self.scaling
        if site is None or (scaling is None and not self.policy.accumulate):
            return self.matmul(a, b, out, bias=bias)
        if isinstance(scaling, MicroScaling) and scaling.keeps(site):  # a layer kept in bf16
            return self.matmul(a, b, out, bias=bias)
        narrow, every = self.policy.accumulate or None, self.policy.promote_every or None
        if isinstance(scaling, MicroScaling):
            acc = scaling.matmul(site, a, a_role, b, b_role, record=self._training)
        elif scaling is not None:
            stored: list[bool] = []

            def finish(terms: Array, a_scale: Array, b_scale: Array, fresh: bool) -> Array:
                # a block GEMM's epilogue, its bias and its store in one pass where the store is
                # a plain bf16 or fp16 cast (the same bits and counts as the three steps below)
                got = None
                if not self.is_wide(out):
                    p = self.policy
                    got = fma_sum_flushed(
                        terms, a_scale, b_scale, out, p.rounding, bias=bias, saturate=p.saturate,
                        subnormals=p.subnormals, overwrite=fresh,
                    )  # fmt: skip
                if got is None:
                    return fma_sum(terms, a_scale, b_scale, overwrite=fresh)
                stored.append(True)
                if self._counting:
                    self.grad_values += got.nonzero
                    self.grad_flushed += got.flushed
                return got.values  # type: ignore[no-any-return]

            acc = scaling.matmul(
                site, a, a_role, b, b_role, record=self._training, accumulate=narrow, promote_every=every,
                finish=finish,
            )  # fmt: skip
            if stored:
                return acc
        else:
            acc = accumulate_matmul(a, b, accumulate=narrow or "fp32", promote_every=every)
        if bias is not None:
            acc += bias
        return self.store(acc, out, owned=True)  # (acc: the recipe's fresh GEMM output)

    def end_step(self) -> dict[str, dict[str, float]]:
        """Close a training step: the recipe's per-operand statistics of the step (amax,
        scale, saturated, flushed and subnormal shares), keyed ``"<layer>.<role>"``; delayed
        scaling computes the next step's scales here. Empty without a recipe."""
        return self.scaling.end_step() if self.scaling is not None else {}

    def rounder(self, fmt: FloatFormat, op: str) -> Rounder:
        """The rounding points of operation ``op`` working in ``fmt``."""
        return Rounder(self, fmt, op)

    def low_sum(self, x: Array, axis: int, fmt: FloatFormat, keepdims: bool = False) -> Array:
        """Sum the values of ``fmt`` along ``axis`` with a ``fmt`` accumulator: a tree of pairwise
        sums, each rounded to ``fmt``, as a GPU reduction adds partial sums (``s[i] += s[i + h]``).

        >>> from floatlab.formats import FP16
        >>> float(Precision("fp16").low_sum(np.array([2048.0, 1.0, 1.0, 1.0], np.float32), 0, FP16))
        2050.0
        """
        # the same tree in one compiled pass, where the policy's casts are the door's plain ones
        p = self.policy
        fast = pairwise_sums(x, axis, fmt, p.rounding, saturate=p.saturate, subnormals=p.subnormals)
        if fast is not None:
            return np.expand_dims(fast, axis) if keepdims else fast
        xm = np.moveaxis(x, axis, 0)
        while xm.shape[0] > 1:
            n = xm.shape[0]
            h = n // 2
            # the float32 sum of two values of a format with p <= 11 significant bits, rounded
            # again to that format, is the correctly rounded sum (24 >= 2p + 2: no double rounding)
            s = self.cast(xm[:h] + xm[h : 2 * h], fmt)
            xm = np.concatenate([s, xm[2 * h :]]) if n % 2 else s
        out = xm[0] if xm.shape[0] else get_xp(x).zeros(xm.shape[1:], dtype=x.dtype)
        return np.expand_dims(out, axis) if keepdims else out


class Rounder:
    """The rounding points inside one operation working in ``fmt``.

    ``r(x, tag)`` rounds an intermediate result unless the whole op is in the policy's fp32
    list, or its elementary step ``tag`` (``"exp"``, ``"log"``) is. ``r.sum`` reduces with an
    fp32 accumulator (``fp32_reductions`` or ``"sum"`` in the fp32 list) or a low-precision one.
    ``r.out`` stores the op's result in ``fmt`` whatever happened inside.

    >>> from floatlab.train.precision.policy import get_policy
    >>> r = Precision(get_policy("fp16")).rounder(FP32, "softmax")
    >>> r.fp32
    True
    """

    def __init__(self, P: Precision, fmt: FloatFormat, op: str) -> None:
        self.P = P
        self.fmt = fmt
        self.fp32 = op in P.fp32_ops or P.is_wide(fmt)
        self.fp32_acc = self.fp32 or P.policy.fp32_reductions or "sum" in P.fp32_ops

    def __call__(self, x: Array, tag: str | None = None) -> Array:
        if self.fp32 or (tag is not None and tag in self.P.fp32_ops):
            return x
        return self.P.cast(x, self.fmt)

    def sum(self, x: Array, axis: int, keepdims: bool = False) -> Array:
        if self.fp32:
            total: Array = x.sum(axis=axis, keepdims=keepdims)
            return total
        if self.fp32_acc:
            return self.P.cast(x.sum(axis=axis, keepdims=keepdims), self.fmt)
        return self.P.low_sum(x, axis, self.fmt, keepdims)

    def out(self, x: Array) -> Array:
        return self.P.store(x, self.fmt)
