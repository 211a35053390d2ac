"""Run a floatlab precision policy on a PyTorch model: :func:`simulate`.

::

    with floatlab.torch.simulate(model, "mixed-fp16") as sim:
        scaler = sim.scaler()                      # the policy's loss scaling, GradScaler's interface
        for x, y in data:
            scaler.scale(F.cross_entropy(model(x), y)).backward()
            scaler.step(opt); scaler.update(); opt.zero_grad()
    print(sim)                                     # what each layer's GEMMs got
    sim.to_pandas()                                # a row per step, site and operand

Inside the ``with`` block every GEMM of the model's forward pass runs as the policy's tensor
core would: ``nn.Linear`` (``F.linear``), ``nn.Conv1d``/``nn.Conv2d`` (``F.conv1d``,
``F.conv2d``), ``nn.MultiheadAttention`` (its projections and its two attention GEMMs,
:mod:`floatlab.torch.attention`) and ``torch.matmul``, ``torch.bmm``, ``torch.mm``,
``torch.addmm``, ``torch.baddbmm``, ``torch.einsum`` (of two operands or more) and ``@`` (in any
module, functional calls in a custom ``forward`` included) get their weights, inputs and bias
(the added term) rounded into the forward format and their output stored in it;
``nn.Embedding`` (``F.embedding``) reads its table rounded into the forward format.
``F.scaled_dot_product_attention`` runs as its two GEMMs, each treated so: ``q @ k^T * scale``,
the mask and the softmax in the model's precision, then ``p @ v`` (torch's own math reference;
a fused kernel keeps the scores in fp32, which this does not). Backward, the gradient reaching
each of those outputs is rounded into the backward format, and so is each gradient they send on
(to the input, the weight, the bias): a gradient is stored wherever an activation is. Every
rounding is :func:`floatlab.round_array` with the policy's mode, ``saturate`` and ``subnormals``
(stochastic rounding draws from a seeded generator); a CUDA tensor is rounded on its GPU
through DLPack. :attr:`Simulation.calls` counts them, and each adds its operand's statistics to
the step's record (:meth:`Simulation.to_pandas`).

A policy's GEMM recipe (fp8: per-tensor current or delayed scaling, DeepSeek-V3's blocks;
microscaling: MXFP8, MXFP6, MXFP4, NVFP4) runs the three GEMMs of the ``nn.Linear`` layers that
its plan picks (:func:`floatlab.torch.plan.plan_layers`: ``modules=``, or the recipe's
``keep_bf16``) through the same :class:`~floatlab.train.recipes.Fp8Scaling` or
:class:`~floatlab.train.recipes.MicroScaling` as floatlab's own trainer, on the host, with the
layer's name as its site; the other GEMMs take the plain forward format. When the recipe
reaches no layer at all (``"nvfp4"`` keeps the first and the last Linear in bf16: on a model of
two, nothing is left), ``simulate`` warns (:class:`SimulationWarning`). A recipe's step ends
when the next training forward pass begins (or at :meth:`Simulation.end_step`); a forward pass
without gradients (an evaluation) records nothing.

Weights: a policy without master weights (``"bf16"``, ``"fp16"``) stores them in its format
at every ``optimizer.step()`` (:class:`floatlab.torch.weights.StoredWeights`, the NumPy
trainer's update rounding: nearest, stochastic or Kahan-compensated), and counts the swallowed
updates per step. Loss scaling: :meth:`Simulation.scaler` is the policy's rule with
``torch.amp.GradScaler``'s interface (its knobs under torch's names, given to ``simulate``).

How: one :class:`torch.overrides.TorchFunctionMode` sees those calls, switched on by a
forward pre-hook on the model and off by its forward hook, and each rounding is an autograd
function (:meth:`Simulation.store`). A mode, rather than patched module ``forward`` methods or
a wrapper module, catches the functional GEMMs of custom modules that module hooks cannot,
changes no module, and leaves the GEMMs outside the model's forward (a loss, a metric) alone.
An exception in the forward pass or in a hook, a ``KeyboardInterrupt`` included, switches the
rounding off with the pass, and leaving the ``with`` block removes the hooks and the mode
whatever ended it. Torch's fused fast paths of ``nn.MultiheadAttention`` and
``nn.TransformerEncoderLayer`` (evaluation without gradients) are switched off while the
rounding is on, so that their GEMMs are seen.

It refuses, at ``simulate(...)``, in one line (:mod:`floatlab.torch.checks`): a compiled model,
a model on the meta device, a model another simulation holds, and parameters whose dtype cannot
hold the policy's formats or its fp32 master weights; it warns about a model without parameters
and a frozen one. What it does not simulate, said by ``print(sim)`` and
:attr:`Simulation.skipped`: layers with parameters that are no GEMM (norms, a custom module's
own parameter, Conv3d, ConvTranspose), which run in their own precision; other products of
tensors (``torch.tensordot``, ``mv``, ``outer``, ``addbmm``, ``F.bilinear``, ``F.conv3d``, the
transposed convolutions, in-place ``addmm_`` and kin), counted in :attr:`Simulation.left`; the
elementwise ops and reductions between GEMMs (softmax, norms, residual adds, the loss), in the
model's precision (:meth:`Simulation.store` marks a storage point by hand).

>>> import torch
>>> _ = torch.manual_seed(0)
>>> model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
>>> with simulate(model, "bf16") as sim:
...     y = model(torch.randn(2, 4))
>>> sim.skipped
['1 (LayerNorm)']
"""

from __future__ import annotations

import sys
import warnings
import weakref
from collections import Counter
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from floatlab._signature import passing_on, spelled_out
from floatlab.errors import FloatlabWarning
from floatlab.formats import FloatFormat
from floatlab.rounding import round_array
from floatlab.rounding.options import RNG, as_generator
from floatlab.text import render
from floatlab.torch._functions import GEMMS, LEFT, OPERANDS, SDPA_ARGS, TWO
from floatlab.torch._recipe_linear import RecipeLinear
from floatlab.torch.attention import attend, multi_head_attention
from floatlab.torch.checks import FORMAT_OF_DTYPE, cautions, refusal
from floatlab.torch.plan import GEMM_LAYERS, LayerPlan, ModuleFilter, plan_layers
from floatlab.torch.records import StepRecords
from floatlab.torch.scaler import PolicyScaler, scaler_for
from floatlab.torch.tensors import FLOAT_DTYPES
from floatlab.torch.weights import StoredWeights, UpdateCount
from floatlab.train.precision.policy import Policy, get_policy
from floatlab.train.recipes import Fp8Scaling, MicroRecipe, MicroScaling

if TYPE_CHECKING:
    import pandas as pd
    from typing_extensions import Unpack

__all__ = ["SIMULATED_LAYERS", "Simulation", "SimulationOptions", "SimulationWarning", "simulate"]

#: the layers simulate runs as the policy says (everything else with parameters is reported)
SIMULATED_LAYERS: tuple[type[torch.nn.Module], ...] = GEMM_LAYERS


class SimulationWarning(FloatlabWarning):
    """What simulate warns about: a policy's recipe that reaches no layer, a model without
    parameters or with every parameter frozen. Filter it with
    ``warnings.simplefilter("ignore", SimulationWarning)``.

    >>> issubclass(SimulationWarning, FloatlabWarning)
    True
    """


#: the code of torch's ``Module.__call__`` body, which runs a module's hooks and its forward
_CALL_IMPL = getattr(getattr(torch.nn.Module, "_call_impl", None), "__code__", None)


def _call_frame() -> FrameType | None:
    """The frame of the ``Module._call_impl`` that runs the calling hook: it stays on the stack
    while the forward pass runs (None where torch runs hooks elsewhere)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code is not _CALL_IMPL:
        frame = frame.f_back
    return frame


class _Store(torch.autograd.Function):
    """Store a tensor: its value rounded into the forward format, its gradient into the backward
    format (a straight-through rounding: the derivative of a rounding is taken as 1); with a
    site, each rounding's statistics go to the step's record (the gradient's as role ``grad``,
    or ``<role>.grad`` for a role other than the output)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, sim: Simulation, site: str | None, role: str) -> torch.Tensor:
        ctx.sim, ctx.site, ctx.role = sim, site, role
        out = sim.round(x, sim.policy.forward, site, role)
        # (a Function must not hand back its input itself)
        return out if out is not x else x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        sim: Simulation = ctx.sim
        role = "grad" if ctx.role == "output" else f"{ctx.role}.grad"
        return sim.round(grad, sim.policy.backward, ctx.site, role), None, None, None


class _GemmMode(TorchFunctionMode):
    """Rounds around the GEMMs and embeddings called while it is on (inside the model's forward)."""

    def __init__(self, sim: Simulation) -> None:
        super().__init__()
        self.sim = sim

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = dict(kwargs or {})
        op = GEMMS.get(func)
        left = LEFT.get(func) if op is None else None
        if (op is None and left is None) or not self.sim._running():
            return func(*args, **kwargs)  # (not a product, or the forward pass has ended)
        if op is None:
            self.sim.left[str(left)] += 1
            return func(*args, **kwargs)
        # (the mode is off while its handler runs: func below is torch's own)
        return self.sim._gemm(op, func, args, kwargs)


#: the models a simulation holds now (one at a time: two would round twice)
_ATTACHED: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()


class Simulation:
    """A policy run on a model's GEMMs and embeddings: the context manager :func:`simulate` returns.

    :attr:`plan` says what each layer's GEMMs get (:class:`~floatlab.torch.plan.LayerPlan`);
    :attr:`simulated` and :attr:`skipped` name the modules (``"name (Type)"``; the model itself
    is ``"<model>"``) that the policy reaches and those left in their own precision;
    :attr:`calls` counts the rounded calls by function, :attr:`left` the calls of other products of
    tensors that ran in their own precision. :meth:`store` is the rounding point itself, for a
    model's own storage points; :meth:`round` rounds a tensor as the policy does;
    :meth:`to_pandas` is the record; :attr:`weights` stores the weights of a policy without
    master weights; :meth:`scaler` is the policy's loss scaling.

    >>> import torch
    >>> sim = Simulation(torch.nn.Linear(2, 2), "mixed-fp16")
    >>> sim.simulated, sim.skipped
    (['<model> (Linear)'], [])
    """

    def __init__(
        self,
        model: torch.nn.Module,
        policy: Policy | str,
        *,
        rng: RNG = None,
        modules: ModuleFilter | None = None,
        init_scale: float | None = None,
        growth_factor: float | None = None,
        backoff_factor: float | None = None,
        growth_interval: int | None = None,
        record: bool = True,
    ) -> None:
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
        if modules is not None and p.recipe is None:
            raise ValueError(
                f"modules={modules!r}: policy {p.name} has no GEMM recipe (modules= picks the Linear "
                "layers a recipe runs on; expected a policy with one, such as mxfp8 or fp8-tensorwise)"
            )
        refused = refusal(model, p, model in _ATTACHED)
        if refused is not None:
            raise ValueError(refused)
        self._rule = scaler_for(
            p,
            init_scale=init_scale,
            growth_factor=growth_factor,
            backoff_factor=backoff_factor,
            growth_interval=growth_interval,
        )
        gen = as_generator(rng)
        #: the generator of stochastic rounding (seed 0 unless one is given, as the NumPy trainer's)
        self.rng: np.random.Generator = gen if gen is not None else np.random.default_rng(0)
        #: what each layer's GEMMs get
        self.plan: list[LayerPlan] = plan_layers(model, p, modules)
        on_recipe = {lp.name for lp in self.plan if lp.gemm == "recipe"}
        #: the Linear layers the recipe runs on, by their weights: the sites of a recipe's GEMMs
        self._sites: dict[int, str] = {}
        #: every GEMM layer's weight, by its id: the site of its roundings in the record
        self._names: dict[int, str] = {}
        for name, m in model.named_modules():
            label = name or "<model>"
            if isinstance(m, torch.nn.MultiheadAttention):
                w = m.in_proj_weight if m.in_proj_weight is not None else m.q_proj_weight
                self._names[id(w)] = label
            elif isinstance(m, GEMM_LAYERS) and isinstance(getattr(m, "weight", None), torch.Tensor):
                self._names[id(m.weight)] = label
                if label in on_recipe:
                    self._sites[id(m.weight)] = label
        #: the recipe's state (as the NumPy trainer's ``P.scaling``), when the policy has one
        self.scaling: Fp8Scaling | MicroScaling | None = None
        if isinstance(p.recipe, MicroRecipe):
            # (the plan decided which layers the recipe leaves out)
            recipe = p.replace(keep_bf16=()).recipe
            assert isinstance(recipe, MicroRecipe)
            self.scaling = MicroScaling(recipe, self.rng, list(self._sites.values()))
        elif p.recipe is not None:
            self.scaling = Fp8Scaling(p.recipe)
        self._cast = False  # whether the recipe cast anything since its last step ended
        self.calls: Counter[str] = Counter()
        #: the calls of products the mode saw and left in their own precision, by function
        self.left: Counter[str] = Counter()
        self.simulated = [f"{lp.name} ({lp.module})" for lp in self.plan if lp.gemm != "own"]
        self.skipped = [f"{lp.name} ({lp.module})" for lp in self.plan if lp.gemm == "own"]
        #: the weights stored in the policy's format at each optimizer step (none with master weights)
        self.weights = StoredWeights(model, p, self.rng)
        self.weights.on_step = self._on_update_count
        self.records = StepRecords()
        #: whether each rounding adds its operand's statistics to the record (a recipe's operands,
        #: the scaler's steps and the stored weights' counts are recorded either way)
        self.record = bool(record)
        #: the steps closed so far (the index of the open one)
        self.steps = 0
        #: the forward passes of the model that ran to their end
        self.passes = 0
        self._step_calls: Counter[str] = Counter()  # the GEMM calls of no layer, this step
        self._scaler: PolicyScaler | None = None
        self._handles: list[Any] = []
        self._depth = 0
        self._mode: _GemmMode | None = None
        self._fastpath: bool | None = None
        self._pass: FrameType | None = None  # the frame of the forward pass that switched it on
        if p.recipe is not None and not on_recipe:
            linears = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
            why = ", ".join(f"{lp.name} ({lp.reason})" for lp in self.plan if lp.module and lp.reason)
            warnings.warn(
                f"policy {p.name}: its recipe reaches no layer of the model ({linears} Linear layers; "
                f"{why or 'none'}): every GEMM runs in plain {p.forward.name}, so this run is not {p.name}",
                SimulationWarning,
                stacklevel=3,
            )
        for caution in cautions(model):
            warnings.warn(caution, SimulationWarning, stacklevel=3)

    # ---- rounding -------------------------------------------------------------------------------
    def round(
        self, x: torch.Tensor, fmt: FloatFormat, site: str | None = None, role: str = ""
    ) -> torch.Tensor:
        """``x`` rounded into ``fmt`` with the policy's knobs (x itself where nothing can change:
        a format that holds x's dtype, with subnormals kept; a tensor that is no float); with a
        ``site``, its statistics go to the step's record as operand ``role``.

        >>> import torch
        >>> sim = Simulation(torch.nn.Linear(1, 1), "bf16")
        >>> sim.round(torch.tensor([1 / 3]), sim.policy.forward).item()
        0.333984375
        """
        src = FORMAT_OF_DTYPE.get(x.dtype)
        if src is None or x.dtype not in FLOAT_DTYPES or (fmt.contains(src) and self.policy.subnormals):
            return x
        p = self.policy
        rng = self.rng if p.rounding == "stochastic" else None
        out: torch.Tensor = round_array(
            x, fmt, p.rounding, rng=rng, saturate=p.saturate, subnormals=p.subnormals
        )
        if site is not None and self.record:
            self.records.add(site, role, x, out, fmt, saturate=p.saturate)
        return out

    def store(self, x: torch.Tensor, site: str | None = None, role: str = "output") -> torch.Tensor:
        """Store ``x`` as the policy stores an activation: its value rounded into the forward format,
        the gradient flowing back through it into the backward format (autograd sees a rounding as
        the identity). The rounding simulate puts around every GEMM; call it at a storage point of
        your own forward (a residual add) that a GEMM does not reach. With a ``site``, the
        roundings' statistics go to the record (:meth:`to_pandas`).

        >>> import torch
        >>> sim = Simulation(torch.nn.Linear(1, 1), "fp16")
        >>> x = torch.tensor([0.1], requires_grad=True)
        >>> y = sim.store(x)
        >>> (y * 1e-8).sum().backward()
        >>> y.item(), x.grad.item()          # 1e-8 is below fp16's smallest subnormal: flushed
        (0.0999755859375, 0.0)
        """
        src = FORMAT_OF_DTYPE.get(x.dtype)
        p = self.policy
        if src is None or (p.forward.contains(src) and p.backward.contains(src) and p.subnormals):
            return x
        out: torch.Tensor = _Store.apply(x, self, site, role)  # type: ignore[no-untyped-call]
        return out

    def _site(self, op: str, weight: Any) -> str:
        """The record's site of a GEMM call: its layer, or the function and its call this step."""
        name = self._names.get(id(weight)) if weight is not None else None
        if name is not None:
            return name
        self._step_calls[op] += 1
        return f"{op}#{self._step_calls[op]}"

    def _gemm(self, op: str, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """func with its operands stored and its output stored (the mode's handler)."""
        if op == "einsum":
            return self._einsum(func, args, kwargs)
        if op == "scaled_dot_product_attention":
            return self._attention(func, args, kwargs)
        if op == "multi_head_attention_forward":
            return self._mha(func, args, kwargs)
        places, names = OPERANDS.get(op, TWO)
        weight = None
        if op in ("linear", "conv1d", "conv2d", "embedding"):
            weight = args[1] if len(args) > 1 else kwargs.get("weight")
        if op == "linear" and self.scaling is not None and id(weight) in self._sites:
            # one of the Linear layers the recipe runs on: its three GEMMs
            self.calls[op] += 1
            bias = args[2] if len(args) > 2 else kwargs.get("bias")
            self._cast = True
            x = args[0] if args else kwargs["input"]
            y: torch.Tensor = RecipeLinear.apply(  # type: ignore[no-untyped-call]
                x, weight, bias, self, self._sites[id(weight)], torch.is_grad_enabled()
            )
            return y
        self.calls[op] += 1
        site = self._site(op, weight)
        a = list(args)
        for i in places:
            if i < len(a) and isinstance(a[i], torch.Tensor):
                a[i] = self.store(a[i], site, names[i] if i < len(names) else f"operand{i}")
        for k in names:
            if isinstance(kwargs.get(k), torch.Tensor):
                kwargs[k] = self.store(kwargs[k], site, k)
        out = func(*a, **kwargs)
        return self.store(out, site) if isinstance(out, torch.Tensor) else out

    def _einsum(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``torch.einsum(equation, *operands)`` of two operands or more as a GEMM: operands and
        output stored; of one (a transpose, a trace, a sum) as it is, no product being formed."""
        operands = list(args[1:])
        if len(operands) == 1 and isinstance(operands[0], (list, tuple)):  # (the list form)
            operands = list(operands[0])
        if sum(isinstance(t, torch.Tensor) for t in operands) < 2:
            return func(*args, **kwargs)
        self.calls["einsum"] += 1
        site = self._site("einsum", None)
        stored = [
            self.store(t, site, f"operand{i}") if isinstance(t, torch.Tensor) else t
            for i, t in enumerate(operands)
        ]
        out = func(args[0], *stored, **kwargs)
        return self.store(out, site) if isinstance(out, torch.Tensor) else out

    def _attention(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``F.scaled_dot_product_attention`` as its two GEMMs (:func:`~floatlab.torch.attention.attend`),
        each stored as the other GEMMs are: q, k, v, the scores, the softmax's output and ``p @ v``."""
        a = {**dict(zip(SDPA_ARGS, args, strict=False)), **kwargs}
        q, k, v = (a[n] for n in SDPA_ARGS[:3])
        if any(t.is_nested for t in (q, k, v)):  # (a ragged batch: no plain GEMMs to write out)
            self.left["scaled_dot_product_attention"] += 1
            return func(*args, **kwargs)
        self.calls["scaled_dot_product_attention"] += 1
        site = self._site("scaled_dot_product_attention", None)
        out, _ = attend(
            q, k, v,
            mask=a.get("attn_mask"),
            causal=bool(a.get("is_causal", False)),
            scale=a.get("scale"),
            dropout=float(a.get("dropout_p", 0.0)),
            gqa=bool(a.get("enable_gqa", False)),
            on=lambda t, role: self.store(t, site, role),
        )  # fmt: skip
        return out

    def _mha(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``nn.MultiheadAttention``'s function written out (see :mod:`floatlab.torch.attention`):
        its projections are GEMMs of the layer, its attention the two GEMMs of :meth:`_attention`."""
        w = args[5] if len(args) > 5 else kwargs.get("in_proj_weight")
        if w is None:
            w = kwargs.get("q_proj_weight")
        site = self._names.get(id(w)) or self._site("multi_head_attention", None)

        def linear(
            x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, role: str
        ) -> torch.Tensor:
            s = f"{site}.{role}"
            xs, ws = self.store(x, s, "input"), self.store(weight, s, "weight")
            bs = None if bias is None else self.store(bias, s, "bias")
            return self.store(F.linear(xs, ws, bs), s)

        out = multi_head_attention(args, kwargs, linear=linear, on=lambda t, role: self.store(t, site, role))
        if out is None:  # (an option it does not write out: torch's own function, in fp32)
            self.left["multi_head_attention_forward"] += 1
            return func(*args, **kwargs)
        self.calls["multi_head_attention_forward"] += 1
        return out

    # ---- records --------------------------------------------------------------------------------
    def end_step(self) -> dict[str, dict[str, float]]:
        """Close the step (the next training forward pass, and leaving the ``with`` block, do it by
        themselves): the record's rows of
        the step are written (:meth:`to_pandas`); returns the recipe's statistics of each GEMM
        operand, as :meth:`floatlab.train.precision.Precision.end_step` gives them (empty without a
        recipe or when nothing was cast since the last step).

        >>> import torch
        >>> lin = torch.nn.Linear(32, 2)
        >>> with simulate(lin, "mxfp4") as sim:
        ...     _ = lin(torch.randn(4, 32)).sum().backward()
        ...     stats = sim.end_step()
        >>> sorted(stats)
        ['<model>.grad', '<model>.input', '<model>.weight']
        """
        stats: dict[str, dict[str, float]] = {}
        if self.scaling is not None and self._cast:
            self._cast = False
            stats = self.scaling.end_step()
        if stats or self.records.pending:
            self.records.close(self.steps, stats)
            self.steps += 1
        self._step_calls = Counter()
        return stats

    @property
    def operands(self) -> dict[str, dict[str, list[float]]]:
        """The recipe's per-step record of every GEMM operand (``"<layer>.<role>"``: lists of amax,
        scale and the shares saturated, flushed and subnormal), as the NumPy trainer's
        :attr:`floatlab.train.History.operands`; empty without a recipe (:meth:`to_pandas` has
        every GEMM's).

        >>> import torch
        >>> Simulation(torch.nn.Linear(1, 1), "bf16").operands
        {}
        """
        return {} if self.scaling is None else self.scaling.history

    def _on_update_count(self, count: UpdateCount) -> None:
        self.records.updates[self.steps] = (count.updates, count.swallowed)

    def _on_scaler_update(self, scale: float, skipped: bool) -> None:
        self.records.scaling[self.steps] = (scale, skipped)

    def scaler(self) -> PolicyScaler:
        """The policy's loss scaling with ``torch.amp.GradScaler``'s interface
        (:class:`~floatlab.torch.scaler.PolicyScaler`; the same object at every call): its rule is
        floatlab's for the policy, with the knobs given to :func:`simulate`; each ``update()``
        records the step's scale and whether it was skipped (:meth:`to_pandas`).

        >>> import torch
        >>> simulate(torch.nn.Linear(1, 1), "mixed-fp16", init_scale=1024.0).scaler().get_scale()
        1024.0
        """
        if self._scaler is None:
            self._scaler = PolicyScaler(self._rule, self._on_scaler_update)
        return self._scaler

    def to_pandas(self) -> pd.DataFrame:
        """The record as a DataFrame: a row per step, site and operand (columns
        :data:`floatlab.torch.records.COLUMNS`): the operand's values, amax, scale (a recipe's, or
        1), and the shares saturated, flushed to zero and subnormal; the step's loss scale and
        whether it was skipped (from :meth:`scaler`), the non-zero weight updates and those
        swallowed (weights stored in their format). The open step is closed first
        (:meth:`end_step`). Sites are layers (``"fc"``, ``"attn.q_proj"``) or, for a GEMM of no
        layer, the function and its call in the step (``"matmul#2"``); operands ``input``,
        ``weight``, ``bias``, ``output``, the gradient at the output ``grad`` and the gradients
        sent on (``input.grad``, ``weight.grad``).

        >>> import torch
        >>> lin = torch.nn.Linear(2, 1)
        >>> with simulate(lin, "bf16") as sim:
        ...     lin(torch.ones(1, 2)).sum().backward()
        >>> df = sim.to_pandas()
        >>> sorted(set(df["operand"]))
        ['bias', 'bias.grad', 'grad', 'input', 'output', 'weight', 'weight.grad']
        """
        self.end_step()
        return self.records.frame()

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
            # (torch's fused attention paths would run the layers' GEMMs unseen)
            self._fastpath = torch.backends.mha.get_fastpath_enabled()
            torch.backends.mha.set_fastpath_enabled(False)
            self._mode = _GemmMode(self)
            self._mode.__enter__()  # type: ignore[no-untyped-call]
        self._depth += 1

    def _off(self, *_: Any) -> None:
        if self._depth == 0:
            return  # (a hook before _on raised: this pass never switched the rounding on)
        self._depth -= 1
        if self._depth == 0:
            if sys.exc_info()[0] is None:  # (torch calls this hook in its `except` when a pass raised)
                self.passes += 1
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
        if self._fastpath is not None:
            torch.backends.mha.set_fastpath_enabled(self._fastpath)
            self._fastpath = None
        if mode is not None and torch.overrides._get_current_function_mode() is mode:  # type: ignore[no-untyped-call]
            mode.__exit__(None, None, None)  # type: ignore[no-untyped-call]

    def __enter__(self) -> Simulation:
        if self._handles:
            raise ValueError("this simulation is already attached: expected one `with` block at a time")
        if self.model in _ATTACHED:
            refused = refusal(self.model, self.policy, True)
            raise ValueError(refused)
        _ATTACHED.add(self.model)
        self.weights.__enter__()
        self._handles = [
            self.model.register_forward_pre_hook(self._on, prepend=True),
            self.model.register_forward_hook(self._off, always_call=True),
        ]
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            for h in self._handles:
                h.remove()
            self._handles = []
            self._switch_off()
            self.weights.__exit__(kind, value, tb)
        finally:
            _ATTACHED.discard(self.model)
        if kind is None:
            self.end_step()  # (the block's last step is complete: its record too)
        if kind is None and self.passes and not self.calls and not self.left:
            warnings.warn(
                f"simulate {self.policy.name}: {self.passes} forward passes of {type(self.model).__name__} "
                "called no GEMM it knows (Linear, Conv1d/2d, Embedding, MultiheadAttention, matmul, bmm, "
                "einsum, scaled_dot_product_attention, ...): nothing was simulated",
                SimulationWarning,
                stacklevel=2,
            )

    def __str__(self) -> str:
        return render(self)


class SimulationOptions(TypedDict, total=False):
    """The keyword-only options of :class:`Simulation`, typed once: :func:`simulate` takes them as
    ``**options`` and hands them on (help() shows them spelled out, with their defaults).

    >>> sorted(SimulationOptions(record=False, growth_interval=10))
    ['growth_interval', 'record']
    """

    rng: RNG
    modules: ModuleFilter | None
    init_scale: float | None
    growth_factor: float | None
    backoff_factor: float | None
    growth_interval: int | None
    record: bool


@spelled_out(Simulation.__init__)
def simulate(
    model: torch.nn.Module, policy: Policy | str, **options: Unpack[SimulationOptions]
) -> Simulation:
    """A context manager that runs ``model``'s GEMMs and embeddings as ``policy`` says (see the
    module's docstring): ``with simulate(model, "mixed-bf16") as sim: ...``. ``policy`` is a
    :class:`~floatlab.train.precision.policy.Policy` or any name
    :func:`~floatlab.train.precision.policy.get_policy` knows (a framework preset's too:
    ``"apex-O2"``). ``rng`` (a numpy Generator or an int seed; seed 0 by default) feeds stochastic
    rounding. ``modules`` (a callable ``fn(module, name) -> bool`` or a list of module names or
    patterns) picks the Linear layers a recipe runs on (:func:`~floatlab.torch.plan.plan_layers`;
    without it, the recipe's ``keep_bf16``). ``init_scale``, ``growth_factor``,
    ``backoff_factor`` and ``growth_interval`` (torch's names) replace the knobs of the policy's
    dynamic loss scaling in :meth:`Simulation.scaler`. ``record=False`` leaves the statistics of
    the plain roundings out of :meth:`Simulation.to_pandas` (they cost a few passes over each
    operand; see benchmarks/results/torch-simulate.md).

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
    return passing_on(Simulation, model, policy, **options)
