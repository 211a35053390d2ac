"""Run a floatlab precision policy on a PyTorch model: :func:`simulate`.

::

    with floatlab.torch.simulate(model, "mixed-bf16") as sim:
        for x, y in data:
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step(); opt.zero_grad()
    print(sim)

Inside the ``with`` block every GEMM of the model's forward pass runs as the policy's tensor
core would: ``nn.Linear`` (``F.linear``), ``nn.Conv1d``/``nn.Conv2d`` (``F.conv1d``,
``F.conv2d``) and ``torch.matmul``, ``torch.bmm``, ``torch.mm``, ``torch.addmm``,
``torch.baddbmm``, ``torch.einsum`` (of two operands or more) and ``@`` (in any module,
functional calls in a custom ``forward`` included) get their weights, inputs and bias (the
added term) rounded into the forward format and their output stored in it; ``nn.Embedding``
(``F.embedding``) reads its table rounded into the forward format.
``F.scaled_dot_product_attention`` runs as its two GEMMs, each treated so: ``q @ k^T * scale``,
the mask and the softmax in the model's precision, then ``p @ v`` (torch's own math reference;
a fused kernel keeps the scores in fp32, which this does not). Backward, the gradient reaching
each of those outputs is rounded into the backward format, and so is each gradient they send on
(to the input, the weight, the bias): a gradient is stored wherever an activation is. Every
rounding is :func:`floatlab.round_array` with the policy's mode, ``saturate`` and ``subnormals``
(stochastic rounding draws from a seeded generator). :attr:`Simulation.calls` counts them.

How: one :class:`torch.overrides.TorchFunctionMode` sees those calls, switched on by a
forward pre-hook on the model and off by its forward hook, and each rounding is an autograd
function (:meth:`Simulation.store`). A mode, rather than patched module ``forward`` methods or
a wrapper module, catches the functional GEMMs of custom modules (an attention's
``q @ k.transpose(-1, -2)``) that module hooks cannot, changes no module or parameter (the
parameters stay fp32 in the optimizer, the policy's master weights), and, switched by the
model's own hooks, leaves the GEMMs outside the model's forward (a loss, an evaluation
metric) alone. An exception in the forward pass or in a hook of the user's, a
``KeyboardInterrupt`` included, switches the rounding off with the pass, and leaving the
``with`` block removes the hooks and the mode whatever ended it: the model is left as it was.

It refuses, at ``simulate(...)``, in one line: a compiled model or one holding a compiled
module (``torch.compile``: simulate the original, ``model._orig_mod``), and parameters whose
dtype cannot hold the policy's formats or its fp32 master weights (an fp16 model under
``"mixed-bf16"`` or ``"mxfp8"``; a model stored in the pure policy's own format, fp16 under
``"fp16"``, is that policy and is accepted).

What it does not simulate, said by ``print(sim)`` and :attr:`Simulation.skipped`:

* layers with parameters that are none of the above (LayerNorm, BatchNorm, GroupNorm,
  MultiheadAttention, a custom module holding a parameter, Conv3d, ConvTranspose): they run in
  their own precision, as their parameters are;
* other products of tensors (``torch.tensordot``, ``mv``, ``dot``, ``inner``, ``outer``,
  ``addbmm``, ``addmv``, ``addr``, ``linalg.multi_dot``, ``F.bilinear``, ``F.conv3d``, the
  transposed convolutions, ``F.multi_head_attention_forward``, in-place ``addmm_`` and kin): they
  run in their own precision, and :attr:`Simulation.left` counts their calls;
* the elementwise ops and reductions between GEMMs (softmax, layer norm, GELU, residual adds,
  the loss) run in the model's precision, fp32, which is what a policy's fp32-op list asks for;
  a pure ``"bf16"`` policy, which computes them in bf16 in floatlab's NumPy models, is simulated
  at its GEMMs only. :meth:`Simulation.store` marks such a storage point by hand (a residual
  stream kept in the forward format, as autocast's bf16 outputs keep it);
* loss scaling: dynamic scaling is ``torch.amp.GradScaler``'s (it scales the loss, unscales the
  gradients in fp32, skips a step with an inf and halves the scale); a static scale S
  (``policy.static_scale``) is ``(loss * S).backward()`` and the gradients divided by S before
  ``opt.step()``. The scale enters before the output gradients are rounded, as it must for
  the gradients it saves from underflow;
* weights stored in the forward format without master weights (``master_weights=False``): the
  optimizer still updates the fp32 parameters, so swallowed updates are not simulated;
* a policy's GEMM recipe (an fp8 recipe: per-tensor current or delayed scaling, DeepSeek-V3's
  blocks; a microscaling one: MXFP8, MXFP6, MXFP4, NVFP4) reaches the ``nn.Linear`` layers (a
  linear is ``F.linear`` with one of the model's Linear weights): their three GEMMs run through
  the same :class:`~floatlab.train.recipes.Fp8Scaling` or
  :class:`~floatlab.train.recipes.MicroScaling` as floatlab's own trainer, on the host, with
  the layer's module name as its site; other GEMMs (attention's, convolutions) take the plain
  forward format. A recipe's step ends when the next training forward pass begins (or at
  :meth:`Simulation.end_step`); a forward pass without gradients (``torch.no_grad()``: an
  evaluation) records nothing. ``"first"`` and ``"last"`` in ``keep_bf16`` are the first and
  last Linear modules in the model's definition order. A narrow accumulator needs an fp8 recipe.

>>> import torch
>>> _ = torch.manual_seed(0)
>>> model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
>>> with simulate(model, "bf16") as sim:
...     y = model(torch.randn(2, 4))
>>> sim.skipped
['1 (LayerNorm)']
"""

from __future__ import annotations

import math
import sys
from collections import Counter
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from floatlab.formats import BF16, FP16, FP32, FP64, FloatFormat
from floatlab.rounding import round_array
from floatlab.rounding.options import RNG, as_generator
from floatlab.text import render
from floatlab.torch.tensors import FLOAT_DTYPES
from floatlab.train.precision.policy import Policy, get_policy
from floatlab.train.recipes import Fp8Scaling, MicroRecipe, MicroScaling

__all__ = ["SIMULATED_LAYERS", "Simulation", "simulate"]

#: the layers simulate runs as the policy says (everything else with parameters is reported)
SIMULATED_LAYERS: tuple[type[torch.nn.Module], ...] = (
    torch.nn.Linear,
    torch.nn.Conv1d,
    torch.nn.Conv2d,
    torch.nn.Embedding,
)

_FORMAT_OF_DTYPE: dict[torch.dtype, FloatFormat] = {
    torch.float64: FP64,
    torch.float32: FP32,
    torch.float16: FP16,
    torch.bfloat16: BF16,
}


def _gemm_functions() -> dict[Any, str]:
    """The torch functions the mode rounds around, each with its name in the report."""
    ops: dict[Any, str] = {
        F.linear: "linear",
        F.conv1d: "conv1d",
        F.conv2d: "conv2d",
        F.embedding: "embedding",
        F.scaled_dot_product_attention: "scaled_dot_product_attention",
        torch.einsum: "einsum",
        torch.linalg.matmul: "matmul",
    }
    for name in ("matmul", "bmm", "mm", "addmm", "baddbmm"):
        ops[getattr(torch, name)] = name
        ops[getattr(torch.Tensor, name)] = name
    ops[torch.Tensor.__matmul__] = "matmul"
    ops[torch.Tensor.__rmatmul__] = "matmul"
    return ops


def _left_functions() -> dict[Any, str]:
    """The products of tensors the mode sees and leaves in their own precision, each with its name
    in the report (:attr:`Simulation.left` counts their calls)."""
    ops: dict[Any, str] = {
        F.bilinear: "bilinear",
        F.conv3d: "conv3d",
        F.conv_transpose1d: "conv_transpose1d",
        F.conv_transpose2d: "conv_transpose2d",
        F.conv_transpose3d: "conv_transpose3d",
        F.multi_head_attention_forward: "multi_head_attention_forward",
        torch.tensordot: "tensordot",
        torch.linalg.multi_dot: "multi_dot",
        torch.linalg.vecdot: "vecdot",
    }
    for name in ("mv", "dot", "vdot", "inner", "outer", "ger", "addbmm", "addmv", "addr", "chain_matmul"):
        for owner in (torch, torch.Tensor):
            if hasattr(owner, name):
                ops[getattr(owner, name)] = name
    for name in ("addmm_", "baddbmm_", "addbmm_", "addmv_", "addr_"):  # (in place: into fp32 storage)
        ops[getattr(torch.Tensor, name)] = name
    return ops


_GEMMS = _gemm_functions()
_LEFT = _left_functions()
#: the positional places and keywords of the operands each function's rounding reaches
_OPERANDS = {
    "linear": ((0, 1, 2), ("input", "weight", "bias")),
    "conv1d": ((0, 1, 2), ("input", "weight", "bias")),
    "conv2d": ((0, 1, 2), ("input", "weight", "bias")),
    "embedding": ((1,), ("weight",)),  # (the indices are not values)
    "addmm": ((0, 1, 2), ("input", "mat1", "mat2")),
    "baddbmm": ((0, 1, 2), ("input", "batch1", "batch2")),
}
_TWO = ((0, 1), ("input", "other", "mat2"))
_SDPA_ARGS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal")
#: the code of torch's ``Module.__call__`` body, which runs a module's hooks and its forward
_CALL_IMPL = getattr(getattr(torch.nn.Module, "_call_impl", None), "__code__", None)


def _call_frame() -> FrameType | None:
    """The frame of the ``Module._call_impl`` that runs the calling hook: it stays on the stack
    while the forward pass runs (None where torch runs hooks elsewhere)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code is not _CALL_IMPL:
        frame = frame.f_back
    return frame


def _compiled(model: torch.nn.Module) -> str | None:
    """A one-line reason when ``model`` or a module inside it is compiled (the rounding cannot run
    inside compiled code: dynamo retraces it at every call, and then fails), else None."""
    # (torch.compile's wrapper class lives in dynamo: a program that never imported it has none)
    dynamo = sys.modules.get("torch._dynamo.eval_frame")
    wrapper = getattr(dynamo, "OptimizedModule", None)
    for name, m in model.named_modules():
        where = "model" if not name else f"module {name!r} of the model"
        if wrapper is not None and isinstance(m, wrapper):
            orig = "model._orig_mod" if not name else f"the original module, {name}._orig_mod"
            return (
                f"the {where} is a compiled module (torch.compile): expected the module itself, pass {orig}"
            )
        if getattr(m, "_compiled_call_impl", None) is not None:
            return (
                f"the {where} was compiled in place (Module.compile()): expected a module that is not "
                "compiled (build it again without .compile() and simulate that)"
            )
    return None


def _dtype_refusal(model: torch.nn.Module, p: Policy) -> str | None:
    """A one-line reason when a parameter's dtype cannot hold what the policy stores (it would fail
    or round twice inside the first forward pass), else None."""
    masters = f"expected {p.wide.name} master parameters (model.{'double' if p.wide == FP64 else 'float'}())"
    for name, t in model.named_parameters():
        if not t.is_floating_point():
            continue
        src = _FORMAT_OF_DTYPE.get(t.dtype)
        needs = [("forward format", p.forward), ("backward format", p.backward)]
        if p.master_weights:
            needs.append(("master weights' format", p.wide))
        for what, fmt in needs:
            if src is None or not src.contains(fmt):
                return (
                    f"parameter {name!r} of dtype {t.dtype} cannot hold the {what} {fmt.name} of "
                    f"policy {p.name}: {masters}"
                )
        if p.recipe is not None and t.dtype != torch.float32:
            return (
                f"parameter {name!r} of dtype {t.dtype}: the recipe of policy {p.name} runs its GEMMs "
                f"on float32 copies of the operands: {masters}"
            )
    return None


class _Store(torch.autograd.Function):
    """Store a tensor: its value rounded into the forward format, its gradient into the backward
    format (a straight-through rounding: the derivative of a rounding is taken as 1)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, sim: Simulation) -> torch.Tensor:
        ctx.sim = sim
        out = sim.round(x, sim.policy.forward)
        # (a Function must not hand back its input itself)
        return out if out is not x else x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        sim: Simulation = ctx.sim
        return sim.round(grad, sim.policy.backward), None


def _host(t: torch.Tensor) -> np.ndarray[Any, Any]:
    """A float32 NumPy array of ``t``'s values (a view for a CPU float32 tensor)."""
    out: np.ndarray[Any, Any] = t.detach().to("cpu", torch.float32).numpy()
    return out


class _RecipeLinear(torch.autograd.Function):
    """``F.linear`` under a recipe: the forward GEMM ``x @ W^T``, and backward the data gradient
    ``dy @ W`` and the weight gradient ``dy^T x``, each through the simulation's scaling, exactly
    as :func:`floatlab.train.models.linear_forward` and ``linear_backward`` call
    :meth:`~floatlab.train.precision.Precision.linear`: operands stored in the policy's formats
    (inputs and weights forward, gradients backward), the bias added in the epilogue, the output
    stored in the forward format and the gradients sent on in the backward format."""

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        sim: Simulation,
        site: str,
        record: bool,
    ) -> torch.Tensor:
        assert sim.scaling is not None
        fwd = sim.policy.forward
        xs = _host(sim.round(x, fwd)).reshape(-1, x.shape[-1])
        w = _host(sim.round(weight, fwd))  # (out, in): W = w.T, as floatlab's (in, out) weight
        y = sim.scaling.matmul(site, xs, "input", w.T, "weight", record=record)
        if bias is not None:
            y = y + _host(sim.round(bias, fwd))
        ctx.sim, ctx.site, ctx.record = sim, site, record
        ctx.shape, ctx.has_bias = x.shape, bias is not None
        ctx.xs, ctx.w = xs, w
        out = torch.from_numpy(np.ascontiguousarray(y)).reshape(*x.shape[:-1], w.shape[0])
        return sim.round(out.to(x.dtype), fwd)

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        sim: Simulation = ctx.sim
        assert sim.scaling is not None
        bwd = sim.policy.backward
        g = _host(sim.round(dy, bwd)).reshape(-1, ctx.w.shape[0])
        dx = sim.scaling.matmul(ctx.site, g, "grad", ctx.w, "weight", record=ctx.record)
        dw = sim.scaling.matmul(ctx.site, ctx.xs.T, "input", g, "grad", record=ctx.record)
        db = torch.from_numpy(g.sum(axis=0)) if ctx.has_bias else None  # (an fp32 reduction)

        def sent(a: np.ndarray[Any, Any] | torch.Tensor, shape: Any) -> torch.Tensor:
            t = a if isinstance(a, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(a))
            return sim.round(t.reshape(shape).to(dy.dtype), bwd)

        return (
            sent(dx, ctx.shape),
            sent(dw.T, ctx.w.shape),
            None if db is None else sent(db, (ctx.w.shape[0],)),
            None,
            None,
            None,
        )


class _GemmMode(TorchFunctionMode):
    """Rounds around the GEMMs and embeddings called while it is on (inside the model's forward)."""

    def __init__(self, sim: Simulation) -> None:
        super().__init__()
        self.sim = sim

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = dict(kwargs or {})
        op = _GEMMS.get(func)
        left = _LEFT.get(func) if op is None else None
        if (op is None and left is None) or not self.sim._running():
            return func(*args, **kwargs)  # (not a product, or the forward pass has ended)
        if op is None:
            self.sim.left[str(left)] += 1
            return func(*args, **kwargs)
        # (the mode is off while its handler runs: func below is torch's own)
        return self.sim._gemm(op, func, args, kwargs)


class Simulation:
    """A policy run on a model's GEMMs and embeddings: the context manager :func:`simulate` returns.

    :attr:`simulated` and :attr:`skipped` name the modules (``"name (Type)"``; the model itself
    is ``"<model>"``) that the policy reaches and those left in their own precision;
    :attr:`calls` counts the rounded calls by function, :attr:`left` the calls of other products of
    tensors (``torch.tensordot``, ``torch.mv``, ``F.conv3d``, ...) that ran in their own precision.
    :meth:`store` is the rounding point
    itself, for a model's own storage points; :meth:`round` rounds a tensor as the policy does.

    >>> import torch
    >>> sim = Simulation(torch.nn.Linear(2, 2), "mixed-fp16")
    >>> sim.simulated, sim.skipped
    (['<model> (Linear)'], [])
    """

    def __init__(self, model: torch.nn.Module, policy: Policy | str, *, rng: RNG = None) -> None:
        if not isinstance(model, torch.nn.Module):
            raise ValueError(f"model of type {type(model).__name__}: expected a torch.nn.Module")
        self.model = model
        self.policy = get_policy(policy)
        p = self.policy
        if p.accumulate and p.fp8 is None:
            raise ValueError(
                f"policy {p.name}: the accumulator {p.accumulate} is simulated in the fp8 recipes' "
                "GEMMs only (expected a policy with an fp8 recipe, or none)"
            )
        refused = _compiled(model) or _dtype_refusal(model, p)
        if refused is not None:
            raise ValueError(refused)
        gen = as_generator(rng)
        #: the generator of stochastic rounding (seed 0 unless one is given, as the NumPy trainer's)
        self.rng: np.random.Generator = gen if gen is not None else np.random.default_rng(0)
        #: the Linear layers by their weights: the sites of a recipe's GEMMs
        self._sites = {
            id(m.weight): name or "<model>"
            for name, m in model.named_modules()
            if isinstance(m, torch.nn.Linear)
        }
        #: the recipe's state (as the NumPy trainer's ``P.scaling``), when the policy has one
        self.scaling: Fp8Scaling | MicroScaling | None = None
        if isinstance(p.recipe, MicroRecipe):
            self.scaling = MicroScaling(p.recipe, self.rng, list(self._sites.values()))
        elif p.recipe is not None:
            self.scaling = Fp8Scaling(p.recipe)
        self._cast = False  # whether the recipe cast anything since its last step ended
        self.calls: Counter[str] = Counter()
        #: the calls of products the mode saw and left in their own precision, by function
        self.left: Counter[str] = Counter()
        self.simulated: list[str] = []
        self.skipped: list[str] = []
        self._survey()
        self._handles: list[Any] = []
        self._depth = 0
        self._mode: _GemmMode | None = None
        self._pass: FrameType | None = None  # the frame of the forward pass that switched it on

    # ---- the layers -----------------------------------------------------------------------------
    def _survey(self) -> None:
        inside_attention: set[str] = set()
        for name, m in self.model.named_modules():
            label = f"{name or '<model>'} ({type(m).__name__})"
            if isinstance(m, torch.nn.MultiheadAttention):
                # (its forward is one fused function: its out_proj Linear never calls F.linear)
                inside_attention.update(f"{name}.{c}" if name else c for c, _ in m.named_modules() if c)
            if name in inside_attention:
                self.skipped.append(label)
            elif isinstance(m, SIMULATED_LAYERS):
                self.simulated.append(label)
            elif any(True for _ in m.parameters(recurse=False)):
                self.skipped.append(label)

    # ---- rounding -------------------------------------------------------------------------------
    def round(self, x: torch.Tensor, fmt: FloatFormat) -> torch.Tensor:
        """``x`` rounded into ``fmt`` with the policy's knobs (x itself where nothing can change:
        a format that holds x's dtype, with subnormals kept; a tensor that is no float).

        >>> import torch
        >>> sim = Simulation(torch.nn.Linear(1, 1), "bf16")
        >>> sim.round(torch.tensor([1 / 3]), sim.policy.forward).item()
        0.333984375
        """
        src = _FORMAT_OF_DTYPE.get(x.dtype)
        if src is None or x.dtype not in FLOAT_DTYPES or (fmt.contains(src) and self.policy.subnormals):
            return x
        p = self.policy
        rng = self.rng if p.rounding == "stochastic" else None
        out: torch.Tensor = round_array(
            x, fmt, p.rounding, rng=rng, saturate=p.saturate, subnormals=p.subnormals
        )
        return out

    def store(self, x: torch.Tensor) -> torch.Tensor:
        """Store ``x`` as the policy stores an activation: its value rounded into the forward format,
        the gradient flowing back through it into the backward format (autograd sees a rounding as
        the identity). The rounding simulate puts around every GEMM; call it at a storage point of
        your own forward (a residual add) that a GEMM does not reach.

        >>> import torch
        >>> sim = Simulation(torch.nn.Linear(1, 1), "fp16")
        >>> x = torch.tensor([0.1], requires_grad=True)
        >>> y = sim.store(x)
        >>> (y * 1e-8).sum().backward()
        >>> y.item(), x.grad.item()          # 1e-8 is below fp16's smallest subnormal: flushed
        (0.0999755859375, 0.0)
        """
        src = _FORMAT_OF_DTYPE.get(x.dtype)
        p = self.policy
        if src is None or (p.forward.contains(src) and p.backward.contains(src) and p.subnormals):
            return x
        out: torch.Tensor = _Store.apply(x, self)  # type: ignore[no-untyped-call]
        return out

    def _gemm(self, op: str, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """func with its operands stored and its output stored (the mode's handler)."""
        if op == "einsum":
            return self._einsum(func, args, kwargs)
        if op == "scaled_dot_product_attention":
            return self._attention(func, args, kwargs)
        self.calls[op] += 1
        if op == "linear" and self.scaling is not None:
            weight = args[1] if len(args) > 1 else kwargs.get("weight")
            site = self._sites.get(id(weight))
            if site is not None:  # one of the model's Linear layers: the recipe's three GEMMs
                bias = args[2] if len(args) > 2 else kwargs.get("bias")
                self._cast = True
                x = args[0] if args else kwargs["input"]
                y: torch.Tensor = _RecipeLinear.apply(  # type: ignore[no-untyped-call]
                    x, weight, bias, self, site, torch.is_grad_enabled()
                )
                return y
        places, names = _OPERANDS.get(op, _TWO)
        a = list(args)
        for i in places:
            if i < len(a) and isinstance(a[i], torch.Tensor):
                a[i] = self.store(a[i])
        for k in names:
            if isinstance(kwargs.get(k), torch.Tensor):
                kwargs[k] = self.store(kwargs[k])
        out = func(*a, **kwargs)
        return self.store(out) if isinstance(out, torch.Tensor) else out

    def _einsum(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``torch.einsum(equation, *operands)`` of two operands or more as a GEMM: operands and
        output stored; of one (a transpose, a trace, a sum) as it is, no product being formed."""
        operands = list(args[1:])
        if len(operands) == 1 and isinstance(operands[0], (list, tuple)):  # (the list form)
            operands = list(operands[0])
        if sum(isinstance(t, torch.Tensor) for t in operands) < 2:
            return func(*args, **kwargs)
        self.calls["einsum"] += 1
        stored = [self.store(t) if isinstance(t, torch.Tensor) else t for t in operands]
        out = func(args[0], *stored, **kwargs)
        return self.store(out) if isinstance(out, torch.Tensor) else out

    def _attention(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``F.scaled_dot_product_attention`` as its two GEMMs, each treated as the other GEMMs are:
        ``s = q @ k^T * scale`` (q and k stored, s stored: the scale is the GEMM's epilogue), the
        mask and the softmax in the model's precision, then ``p @ v`` (p and v stored, the output
        stored). This is torch's own math reference (the function's documentation), with
        ``aten._safe_softmax``, as torch's math backend has it: a query that sees no key gets
        zeros, not NaN. Dropout draws from torch's generator, as the math backend does, but not
        the same mask as a fused kernel."""
        a = {**dict(zip(_SDPA_ARGS, args, strict=False)), **kwargs}
        q, k, v = (a[n] for n in _SDPA_ARGS[:3])
        if any(t.is_nested for t in (q, k, v)):  # (a ragged batch: no plain GEMMs to write out)
            self.left["scaled_dot_product_attention"] += 1
            return func(*args, **kwargs)
        mask, causal = a.get("attn_mask"), bool(a.get("is_causal", False))
        if mask is not None and causal:
            raise ValueError(
                "scaled_dot_product_attention with attn_mask and is_causal=True: expected one of them"
            )
        self.calls["scaled_dot_product_attention"] += 1
        q, k, v = self.store(q), self.store(k), self.store(v)
        scale = a.get("scale")
        factor = 1 / math.sqrt(q.size(-1)) if scale is None else scale
        if a.get("enable_gqa", False):  # key and value heads shared by groups of query heads
            k = k.repeat_interleave(q.size(-3) // k.size(-3), -3)
            v = v.repeat_interleave(q.size(-3) // v.size(-3), -3)
        s = self.store(torch.matmul(q, k.transpose(-2, -1)) * factor)
        if causal:
            seen = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=s.device).tril()
            s = s.masked_fill(~seen, float("-inf"))
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask
        p = torch.ops.aten._safe_softmax(s, -1)
        dropout = float(a.get("dropout_p", 0.0))
        if dropout > 0:
            p = torch.dropout(p, dropout, train=True)
        return self.store(torch.matmul(self.store(p), v))

    def end_step(self) -> dict[str, dict[str, float]]:
        """Close the recipe's step (the next training forward pass does it by itself): each GEMM
        operand's statistics, as :meth:`floatlab.train.precision.Precision.end_step` gives them;
        empty without a recipe or when nothing was cast since the last step.

        >>> import torch
        >>> lin = torch.nn.Linear(32, 2)
        >>> with simulate(lin, "mxfp4") as sim:
        ...     _ = lin(torch.randn(4, 32)).sum().backward()
        >>> sorted(sim.end_step())
        ['<model>.grad', '<model>.input', '<model>.weight']
        """
        if self.scaling is None or not self._cast:
            return {}
        self._cast = False
        return self.scaling.end_step()

    @property
    def operands(self) -> dict[str, dict[str, list[float]]]:
        """The recipe's per-step record of every GEMM operand (``"<layer>.<role>"``: lists of amax,
        scale and the shares saturated, flushed and subnormal), as the NumPy trainer's
        :attr:`floatlab.train.History.operands`; empty without a recipe."""
        return {} if self.scaling is None else self.scaling.history

    # ---- switching ------------------------------------------------------------------------------
    # The pre-hook runs before the model's other pre-hooks and the forward hook is always called
    # (torch calls it when the forward pass or any hook raises an Exception), so each _on has its
    # _off. Two cases remain: a global pre-hook that raises before _on (an _off at depth 0, ignored)
    # and a BaseException (KeyboardInterrupt), after which torch calls no hook at all. For that one
    # the pass that switched the mode on is known by its frame: once the frame has left the stack,
    # the mode rounds nothing, the next _on starts afresh, and leaving the block switches it off.
    def _on(self, *_: Any) -> None:
        if self._depth > 0 and not self._running():
            self._switch_off()
        if self._depth == 0:
            if torch.is_grad_enabled():
                self.end_step()  # a training forward pass begins a step
            self._pass = _call_frame()
            self._mode = _GemmMode(self)
            self._mode.__enter__()  # type: ignore[no-untyped-call]
        self._depth += 1

    def _off(self, *_: Any) -> None:
        if self._depth == 0:
            return  # (a hook before _on raised: this pass never switched the rounding on)
        self._depth -= 1
        if self._depth == 0:
            self._switch_off()

    def _running(self) -> bool:
        """Whether the forward pass that switched the rounding on still runs (on this thread's
        stack: a call of the model inside it nests), rather than one a BaseException ended."""
        if self._pass is None:  # pragma: no cover - a torch whose hooks run outside _call_impl
            return True
        frame: FrameType | None = sys._getframe(1)
        while frame is not None:
            if frame is self._pass:
                return True
            frame = frame.f_back
        return False

    def _switch_off(self) -> None:
        """Take the mode off torch's stack (where it is on top: a mode pushed above it and never
        popped is someone else's) and reset the count."""
        mode, self._mode, self._depth, self._pass = self._mode, None, 0, None
        if mode is not None and torch.overrides._get_current_function_mode() is mode:  # type: ignore[no-untyped-call]
            mode.__exit__(None, None, None)  # type: ignore[no-untyped-call]

    def __enter__(self) -> Simulation:
        if self._handles:
            raise ValueError("this simulation is already attached: expected one `with` block at a time")
        self._handles = [
            self.model.register_forward_pre_hook(self._on, prepend=True),
            self.model.register_forward_hook(self._off, always_call=True),
        ]
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
        self._switch_off()

    def __str__(self) -> str:
        return render(self)


def simulate(model: torch.nn.Module, policy: Policy | str, *, rng: RNG = None) -> Simulation:
    """A context manager that runs ``model``'s GEMMs and embeddings as ``policy`` says (see the
    module's docstring): ``with simulate(model, "mixed-bf16") as sim: ...``. ``policy`` is a
    :class:`~floatlab.train.precision.policy.Policy` or any name
    :func:`~floatlab.train.precision.policy.get_policy` knows (a framework preset's too:
    ``"apex-O2"``). ``rng`` (a numpy Generator or an int seed; seed 0 by default) feeds stochastic
    rounding.

    >>> import torch
    >>> _ = torch.manual_seed(0)
    >>> lin = torch.nn.Linear(8, 1, bias=False)
    >>> x = torch.full((1, 8), 1 / 3)
    >>> with simulate(lin, "bf16") as sim:
    ...     y = lin(x)
    >>> y.item() == (lin.weight.bfloat16().float() @ x.bfloat16().float().T).bfloat16().item()
    True
    >>> sim.calls["linear"]
    1
    """
    return Simulation(model, policy, rng=rng)
