"""Weights stored in their format, for a policy without master weights: :class:`StoredWeights`.

A pure policy (``"bf16"``, ``"fp16"``) keeps no fp32 copy of the weights: every optimizer step
writes its result into the low-precision weights, and an update below half an ulp of its weight
leaves the weight as it was (it is *swallowed*). The optimizer of a torch model updates its
fp32 parameters; :class:`StoredWeights` turns each of those steps into the policy's: before
``optimizer.step()`` it notes each parameter ``p`` and ``w``, ``p`` stored in the weight format
(the first step stores the model's initial fp32 values there), after it reads the update the
optimizer wrote, ``d = p' - p``, and stores ``w + d`` as floatlab's NumPy trainer does
(:func:`floatlab.train.precision.update.apply_updates`: the update rounded into the weight
format, then the sum, each with the policy's ``update_rounding``; Kahan-compensated under
``update_compensation``), written back into the parameter. It counts, per step, the non-zero
updates and those that left their weight unchanged.

``d`` is the update as the optimizer wrote it into the fp32 parameter: the optimizer's exact
update rounded to a multiple of fp32's ulp of the weight (2^-16 of bf16's), so it can differ
from the NumPy trainer's ``Q(d)`` only where the exact update lies within that distance of a
rounding boundary of the weight format.

The steps are seen through torch's global optimizer hooks (``torch.optim.Optimizer.step`` of any
optimizer, a GradScaler's ``step`` included); parameters of other models are left alone. A CUDA
parameter is rounded on its GPU (DLPack views, floatlab's GPU kernels) and its counts read back
once per step; a CPU one through a NumPy view of its memory.

>>> import torch
>>> lin = torch.nn.Linear(1, 1, bias=False)
>>> _ = lin.weight.data.fill_(1.0)
>>> sw = StoredWeights(lin, "bf16")
>>> opt = torch.optim.SGD(lin.parameters(), lr=1.0)
>>> with sw:
...     lin.weight.grad = torch.tensor([[-1e-3]])    # an update of 1e-3: below half bf16's ulp of 1
...     opt.step()
>>> lin.weight.item(), sw.steps[0].swallowed, sw.steps[0].updates
(1.0, 1, 1)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import torch

from floatlab.formats import FloatFormat
from floatlab.torch.tensors import array_tensor, tensor_array
from floatlab.train.precision.policy import Policy, get_policy
from floatlab.train.precision.precision import Precision
from floatlab.train.precision.update import apply_updates

__all__ = ["NORM_LAYERS", "StoredWeights", "UpdateCount"]

#: the layers whose parameters a policy's ``batchnorm_fp32`` keeps in the wide format
NORM_LAYERS: tuple[type[torch.nn.Module], ...] = (
    torch.nn.modules.batchnorm._BatchNorm,
    torch.nn.LayerNorm,
    torch.nn.GroupNorm,
)

_WIDTH = {torch.float64: 53, torch.float32: 24, torch.float16: 11, torch.bfloat16: 8}


@dataclass(frozen=True)
class UpdateCount:
    """One optimizer step on the stored weights: its index among the steps :class:`StoredWeights`
    saw (from 0), the non-zero updates, and how many of them left their weight unchanged.

    >>> UpdateCount(0, 4, 1).share
    0.25
    """

    step: int
    updates: int
    swallowed: int

    @property
    def share(self) -> float:
        """The swallowed share of the non-zero updates (0.0 when there are none)."""
        return self.swallowed / self.updates if self.updates else 0.0


class StoredWeights:
    """The weights of ``model`` stored in ``policy``'s weight format at each optimizer step (see
    the module): a context manager that attaches torch's global optimizer hooks; :attr:`steps`
    holds an :class:`UpdateCount` per step, :attr:`params` the names of the parameters it stores
    (those whose dtype is wider than their format; a policy with master weights stores none).
    ``rng`` feeds stochastic update rounding.

    >>> import torch
    >>> lin = torch.nn.Linear(2, 2)
    >>> StoredWeights(lin, "mixed-bf16").params, StoredWeights(lin, "bf16").params
    ([], ['weight', 'bias'])
    """

    def __init__(self, model: torch.nn.Module, policy: Policy | str, rng: Any = None) -> None:
        self.policy = get_policy(policy)
        self.P = Precision(self.policy, rng=rng)
        self.mode = self.policy.update_rounding or self.policy.rounding
        norm = {
            id(p) for m in model.modules() if isinstance(m, NORM_LAYERS) for p in m.parameters(recurse=False)
        }
        self._params: dict[int, tuple[str, torch.nn.Parameter, FloatFormat]] = {}
        for name, p in model.named_parameters():
            fmt = self.policy.param_format(norm=id(p) in norm)
            wider = p.is_floating_point() and _WIDTH.get(p.dtype, 0) > fmt.precision
            if wider and not self.policy.master_weights:
                self._params[id(p)] = (name, p, fmt)
        #: the compensation buffers of compensated updates (arrays in the parameters' memory space)
        self.compensation: dict[str, Any] = {}
        self.steps: list[UpdateCount] = []
        #: called with each step's count (a simulation records it)
        self.on_step: Callable[[UpdateCount], None] | None = None
        self._before: dict[str, tuple[torch.nn.Parameter, Any, Any, FloatFormat]] = {}
        self._handles: list[Any] = []

    @property
    def params(self) -> list[str]:
        """The names of the parameters stored in their format (see the class)."""
        return [name for name, _, _ in self._params.values()]

    def _ours(self, optimizer: Any) -> list[tuple[str, torch.nn.Parameter, FloatFormat]]:
        return [
            self._params[id(p)]
            for group in getattr(optimizer, "param_groups", ())
            for p in group["params"]
            if id(p) in self._params
        ]

    def _pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._before = {}
        for name, p, fmt in self._ours(optimizer):
            # the weight before the step, and as it is stored (the model's initial values are
            # stored at the first step)
            raw = tensor_array(p.detach(), fmt, back=True).copy()
            self._before[name] = (p, raw, self.P.cast(raw, fmt), fmt)

    def _post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        before, self._before = self._before, {}
        if not before:
            return
        params = {name: stored for name, (_, _, stored, _) in before.items()}
        # the update the optimizer wrote into the parameter
        deltas = {
            name: tensor_array(p.detach(), fmt, back=True) - raw for name, (p, raw, _, fmt) in before.items()
        }
        if self.policy.update_compensation:
            for name, arr in params.items():
                if name not in self.compensation:
                    self.compensation[name] = arr * 0
        formats = {name: fmt for name, (_, _, _, fmt) in before.items()}
        comp = {k: v for k, v in self.compensation.items() if k in before} or None
        out = apply_updates(self.P, params, deltas, formats, self.mode, comp)
        self.compensation.update(out.compensation)
        with torch.no_grad():
            for name, (p, _, _, _) in before.items():
                p.copy_(array_tensor(out.params[name], p).reshape(p.shape))
        count = UpdateCount(len(self.steps), out.intended, out.intended - out.changed)
        self.steps.append(count)
        if self.on_step is not None:
            self.on_step(count)

    def __enter__(self) -> StoredWeights:
        if self._params and not self._handles:
            from torch.optim.optimizer import (
                register_optimizer_step_post_hook,
                register_optimizer_step_pre_hook,
            )

            self._handles = [
                register_optimizer_step_pre_hook(self._pre),
                register_optimizer_step_post_hook(self._post),
            ]
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
        self._before = {}
