"""What each layer of a model gets under a policy, said before anything runs: :func:`plan_layers`.

:func:`floatlab.torch.simulate` reads its plan here: per module, what its GEMMs get
(:class:`LayerPlan`): the policy's GEMM recipe (an ``nn.Linear`` the recipe runs on), the plain
forward format (the other GEMM layers, and a Linear layer the recipe leaves out, with the
reason), or nothing (a module with parameters that is no GEMM: it runs in its own precision).
``modules`` picks the Linear layers a recipe runs on, as torchao's ``module_filter_fn`` and
Transformer Engine's per-module choice do: a callable ``fn(module, name) -> bool`` or a list of
module names (shell patterns, ``"blocks.*.mlp.*"``); without it the recipe's ``keep_bf16``
(``"first"``, ``"last"``, names, patterns) says which it leaves out.

>>> import torch
>>> model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
>>> [(p.name, p.gemm, p.reason) for p in plan_layers(model, "nvfp4")]
[('0', 'format', 'keep_bf16 first'), ('2', 'format', 'keep_bf16 last')]
>>> [p.gemm for p in plan_layers(model, "nvfp4", modules=["0"])]
['recipe', 'format']
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias

import torch

from floatlab.train.precision.policy import Policy, get_policy
from floatlab.train.recipes import MicroRecipe, MicroScaling

__all__ = ["GEMM_LAYERS", "LayerPlan", "ModuleFilter", "plan_layers"]

#: the modules whose GEMMs simulate runs in the policy's formats
GEMM_LAYERS: tuple[type[torch.nn.Module], ...] = (
    torch.nn.Linear,
    torch.nn.Conv1d,
    torch.nn.Conv2d,
    torch.nn.Embedding,
    torch.nn.MultiheadAttention,
)

#: the layers a recipe runs on: a callable ``fn(module, name) -> bool`` or module names (patterns)
ModuleFilter: TypeAlias = Callable[[torch.nn.Module, str], bool] | Sequence[str]


@dataclass(frozen=True)
class LayerPlan:
    """What one module's GEMMs get under a policy.

    ``gemm`` is ``"recipe"`` (the policy's GEMM recipe: its three GEMMs quantized as the recipe
    says), ``"format"`` (operands and output stored in the forward format, gradients in the
    backward format, an fp32 GEMM between) or ``"own"`` (not a GEMM simulate knows: the module
    runs in its parameters' own precision); ``reason`` says why a layer does not get the recipe
    (empty when nothing needs saying).

    >>> LayerPlan("fc", "Linear", "recipe", "").name
    'fc'
    """

    name: str
    module: str
    gemm: Literal["recipe", "format", "own"]
    reason: str


def _selected(model: torch.nn.Module, modules: ModuleFilter) -> Callable[[torch.nn.Module, str], bool]:
    if callable(modules):
        return modules
    if isinstance(modules, str) or not all(isinstance(m, str) for m in modules):
        raise ValueError(
            f"modules={modules!r}: expected a callable fn(module, name) -> bool or a list of module names"
        )
    names = [n for n, _ in model.named_modules()]
    for pattern in modules:
        if not any(fnmatch.fnmatchcase(n, pattern) for n in names):
            shown = ", ".join(repr(n) for n in names if n)[:200]
            raise ValueError(f"modules entry {pattern!r} names no module of the model (its modules: {shown})")
    patterns = list(modules)
    return lambda _m, name: any(fnmatch.fnmatchcase(name, p) for p in patterns)


def plan_layers(
    model: torch.nn.Module, policy: Policy | str, modules: ModuleFilter | None = None
) -> list[LayerPlan]:
    """The plan of every module that owns parameters or is a GEMM layer (see the module), in the
    model's order; the modules inside a ``MultiheadAttention`` are its own (its projections run
    in its plan). A ValueError names a ``modules`` entry that matches no module.

    >>> import torch
    >>> model = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.BatchNorm2d(2))
    >>> [(p.gemm, p.reason) for p in plan_layers(model, "mxfp8")]
    [('format', 'the recipe runs on Linear layers only'), ('own', 'not a GEMM')]
    """
    p = get_policy(policy)
    pick = None if modules is None else _selected(model, modules)
    linears = [name or "<model>" for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    keeper = None
    if isinstance(p.recipe, MicroRecipe) and pick is None:
        keeper = MicroScaling(p.recipe, layers=linears)
    plans: list[LayerPlan] = []
    inside: set[str] = set()
    for name, m in model.named_modules():
        label = name or "<model>"
        kind = type(m).__name__
        if name in inside:
            continue
        if isinstance(m, torch.nn.MultiheadAttention):
            inside.update(f"{name}.{c}" if name else c for c, _ in m.named_modules() if c)
        if isinstance(m, torch.nn.Linear) and p.recipe is not None:
            if pick is not None and not pick(m, name):
                plans.append(LayerPlan(label, kind, "format", "left out by modules="))
            elif keeper is not None and keeper.keeps(label) and isinstance(p.recipe, MicroRecipe):
                plans.append(
                    LayerPlan(label, kind, "format", f"keep_bf16 {_keep_rule(p.recipe, linears, label)}")
                )
            else:
                plans.append(LayerPlan(label, kind, "recipe", ""))
        elif isinstance(m, GEMM_LAYERS):
            why = "the recipe runs on Linear layers only" if p.recipe is not None else ""
            plans.append(LayerPlan(label, kind, "format", why))
        elif any(True for _ in m.parameters(recurse=False)):
            plans.append(LayerPlan(label, kind, "own", "not a GEMM"))
    return plans


def _keep_rule(recipe: MicroRecipe, linears: list[str], site: str) -> str:
    """The ``keep_bf16`` entry that keeps ``site``: ``first``, ``last`` or the pattern."""
    for k in recipe.keep_bf16 or ():
        if (k == "first" and linears and linears[0] == site) or (
            k == "last" and linears and linears[-1] == site
        ):
            return k
        if k not in ("first", "last") and fnmatch.fnmatchcase(site, k):
            return repr(k)
    return ""
