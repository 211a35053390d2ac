"""Optimizers (SGD with momentum, AdamW), gradient clipping and learning-rate schedules.

The optimizers follow ``torch.optim.SGD`` and ``torch.optim.AdamW``; their state is held in the
wide precision (fp32). :meth:`Optimizer.deltas` returns each parameter's update instead of
applying it, so that the trainer can store the new weight in the policy's weight format and
see which updates were swallowed.

>>> import numpy as np
>>> opt = SGD(lr=0.5, momentum=0.0)
>>> opt.deltas({"w": np.ones(2, np.float32)}, {"w": np.array([1.0, -2.0], np.float32)})["w"].tolist()
[-0.5, 1.0]
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np

from floatlab.backend import get_xp
from floatlab.train._checks import shown, want_dict, want_int
from floatlab.train.precision.precision import Array

__all__ = [
    "SGD",
    "AdamW",
    "Optimizer",
    "Proposal",
    "Schedule",
    "clip_grad_norm",
    "global_norm",
    "make_optimizer",
]


@dataclass(frozen=True)
class Proposal:
    """One optimizer step, computed but not yet taken: the update of each parameter and the
    state the optimizer will hold once :meth:`Optimizer.commit` takes it. A step whose new
    weights turn out non-finite is dropped instead, and the optimizer is as it was.

    >>> opt = SGD(lr=0.5, momentum=0.9)
    >>> prop = opt.propose({"w": np.zeros(1, np.float32)}, {"w": np.ones(1, np.float32)})
    >>> prop.deltas["w"].tolist(), opt.t, opt.state   # nothing taken yet
    ([-0.5], 0, {})
    >>> opt.commit(prop); opt.t, opt.state["w"]["momentum"].tolist()
    (1, [1.0])
    """

    deltas: dict[str, Array]
    t: int
    state: dict[str, dict[str, Array]]


class Optimizer:
    """Base class: ``deltas(params, grads, lr)`` -> the update of each parameter, state in fp32.

    :meth:`propose` and :meth:`commit` split a step in two, so that a step can be dropped
    without a trace (the trainer does so when the new weights would not be finite).

    >>> issubclass(SGD, Optimizer) and issubclass(AdamW, Optimizer)
    True
    """

    name = "optimizer"

    def __init__(self, lr: float) -> None:
        if not (isinstance(lr, (int, float)) and 0 <= lr < math.inf):
            raise ValueError(f"lr={shown(lr)}: expected a finite number >= 0")
        self.lr = float(lr)
        self.t = 0
        self.state: dict[str, dict[str, Array]] = {}
        self._spare: dict[str, dict[str, Array]] = {}  # retired state arrays, reused by propose

    def propose(
        self, params: Mapping[str, Array], grads: Mapping[str, Array], lr: float | None = None
    ) -> Proposal:
        """The next step (``new_param - param`` for every parameter, and the state after it),
        leaving the optimizer unchanged; ``lr`` overrides the optimizer's own, as a schedule does."""
        t = self.t + 1
        step_lr = self.lr if lr is None else lr
        deltas: dict[str, Array] = {}
        state: dict[str, dict[str, Array]] = {}
        for k in params:
            deltas[k], st = self._delta(k, self.state.get(k), params[k], grads[k], step_lr, t)
            if st:
                state[k] = st
        return Proposal(deltas, t, state)

    def commit(self, proposal: Proposal) -> None:
        """Take the step :meth:`propose` computed (its arrays become the optimizer's state, and
        the arrays they replace are written over by the next :meth:`propose`)."""
        for k, st in proposal.state.items():
            old = self.state.get(k)
            if old is not None and all(old[n] is not st[n] for n in st):
                self._spare[k] = old
        self.t = proposal.t
        self.state.update(proposal.state)

    def _buffer(self, key: str, name: str, like: Array) -> Array:
        """An array for the new state ``name`` of parameter ``key``: the one the last commit
        retired when it fits (two buffers per state array, no allocation per step), else new."""
        buf = self._spare.get(key, {}).get(name)
        if buf is None or buf.shape != like.shape or buf.dtype != like.dtype or type(buf) is not type(like):
            return get_xp(like).empty_like(like)  # type: ignore[no-any-return]
        return buf

    def deltas(
        self, params: Mapping[str, Array], grads: Mapping[str, Array], lr: float | None = None
    ) -> dict[str, Array]:
        """Advance the state by one step and return ``new_param - param`` for every parameter
        (:meth:`propose` and :meth:`commit` in one).

        >>> SGD(lr=1.0, momentum=0.0).deltas({"w": np.ones(1)}, {"w": np.ones(1)}, lr=0.25)["w"].tolist()
        [-0.25]
        """
        proposal = self.propose(params, grads, lr)
        self.commit(proposal)
        return proposal.deltas

    def _delta(
        self, key: str, st: dict[str, Array] | None, p: Array, g: Array, lr: float, t: int
    ) -> tuple[Array, dict[str, Array]]:
        """The update of parameter ``key`` at step ``t`` and its new state (in :meth:`_buffer`
        arrays: ``st``, the state before the step, is read, never written)."""
        raise NotImplementedError

    def hyper(self) -> dict[str, Any]:
        """The hyper-parameters, for checkpoints and histories."""
        return {"name": self.name, "lr": self.lr}

    def state_dict(self) -> dict[str, Any]:
        """Step count and per-parameter state arrays: a snapshot (the arrays are copies), so that
        a checkpoint taken now keeps its values however many steps follow.

        >>> opt = SGD(lr=0.1)
        >>> snap = opt.deltas({"w": np.zeros(1)}, {"w": np.ones(1)}) and opt.state_dict()
        >>> for _ in range(3): _ = opt.deltas({"w": np.zeros(1)}, {"w": np.ones(1)})
        >>> snap["t"], snap["state"]["w"]["momentum"].tolist(), opt.t
        (1, [1.0], 4)
        """
        state = {k: {n: a.copy() for n, a in v.items()} for k, v in self.state.items()}
        return {"t": self.t, "hyper": self.hyper(), "state": state}

    @property
    def state_names(self) -> tuple[str, ...]:
        """The names of the arrays this optimizer keeps per parameter."""
        return ()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (arrays are copied); a state of another optimizer or
        of the wrong shape is one ValueError, and the optimizer is left as it was.

        >>> a, b = AdamW(), SGD()
        >>> b.load_state_dict(a.deltas({"w": np.ones(2)}, {"w": np.ones(2)}) and a.state_dict())
        Traceback (most recent call last):
        ...
        ValueError: optimizer state of 'w' holds ['m', 'v']: expected ['momentum'] (sgd)
        """
        want_dict("optimizer state", state)
        t = want_int("optimizer step count t", state.get("t"))
        new: dict[str, dict[str, Array]] = {}
        for k, v in want_dict("optimizer state arrays", state.get("state", {})).items():
            if set(want_dict(f"optimizer state of {k!r}", v)) != set(self.state_names):
                want = list(self.state_names)
                raise ValueError(f"optimizer state of {k!r} holds {sorted(v)}: expected {want} ({self.name})")
            for n, a in v.items():
                if getattr(getattr(a, "dtype", None), "kind", "") != "f":
                    raise ValueError(f"optimizer state {k}/{n}={shown(a)}: expected an array of floats")
            new[k] = {n: a.copy() for n, a in v.items()}
        self.t, self.state, self._spare = t, new, {}


class SGD(Optimizer):
    """SGD with momentum and (coupled) weight decay, as ``torch.optim.SGD`` (dampening 0).

    >>> opt = SGD(lr=1.0, momentum=0.5)
    >>> p, g = {"w": np.zeros(1, np.float32)}, {"w": np.ones(1, np.float32)}
    >>> [float(opt.deltas(p, g)["w"][0]) for _ in range(3)]
    [-1.0, -1.5, -1.75]
    """

    name = "sgd"

    def __init__(
        self, lr: float = 0.1, momentum: float = 0.9, weight_decay: float = 0.0, nesterov: bool = False
    ):
        super().__init__(lr)
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum={shown(momentum)}: expected a number in [0, 1)")
        if weight_decay < 0:
            raise ValueError(f"weight_decay={shown(weight_decay)}: expected a number >= 0")
        if nesterov and momentum == 0:
            raise ValueError("nesterov=True needs momentum > 0")
        self.momentum = float(momentum)
        self.weight_decay = float(weight_decay)
        self.nesterov = nesterov

    @property
    def state_names(self) -> tuple[str, ...]:
        return ("momentum",) if self.momentum else ()

    def hyper(self) -> dict[str, Any]:
        return {
            **super().hyper(),
            "momentum": self.momentum,
            "weight_decay": self.weight_decay,
            "nesterov": self.nesterov,
        }

    def _delta(
        self, key: str, st: dict[str, Array] | None, p: Array, g: Array, lr: float, t: int
    ) -> tuple[Array, dict[str, Array]]:
        d = g + p.dtype.type(self.weight_decay) * p if self.weight_decay else g
        new: dict[str, Array] = {}
        if self.momentum:
            if st is None:
                buf = d.copy()
            else:
                buf = self._buffer(key, "momentum", p)
                get_xp(p).multiply(st["momentum"], p.dtype.type(self.momentum), out=buf)
                buf += d
            new["momentum"] = buf
            d = d + p.dtype.type(self.momentum) * buf if self.nesterov else buf
        out: Array = -p.dtype.type(lr) * d
        return out, new


class AdamW(Optimizer):
    """Adam with decoupled weight decay, as ``torch.optim.AdamW``.

    >>> opt = AdamW(lr=0.1, weight_decay=0.0)
    >>> p, g = {"w": np.zeros(1, np.float32)}, {"w": np.full(1, 3.0, np.float32)}
    >>> round(float(opt.deltas(p, g)["w"][0]), 6)   # the first step moves by lr (|g| >> eps)
    -0.1
    """

    name = "adamw"

    def __init__(
        self,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.01,
    ) -> None:
        super().__init__(lr)
        b1, b2 = betas
        if not (0.0 <= b1 < 1.0 and 0.0 <= b2 < 1.0):
            raise ValueError(f"betas={shown(betas)}: expected two numbers in [0, 1)")
        if not eps >= 0:
            raise ValueError(f"eps={shown(eps)}: expected a number >= 0")
        if weight_decay < 0:
            raise ValueError(f"weight_decay={shown(weight_decay)}: expected a number >= 0")
        self.betas = (float(b1), float(b2))
        self.eps = float(eps)
        self.weight_decay = float(weight_decay)

    @property
    def state_names(self) -> tuple[str, ...]:
        return ("m", "v")

    def hyper(self) -> dict[str, Any]:
        return {
            **super().hyper(),
            "betas": list(self.betas),
            "eps": self.eps,
            "weight_decay": self.weight_decay,
        }

    def _delta(
        self, key: str, st: dict[str, Array] | None, p: Array, g: Array, lr: float, t: int
    ) -> tuple[Array, dict[str, Array]]:
        ft = p.dtype.type
        b1, b2 = self.betas
        xp = get_xp(p)
        m0 = xp.zeros_like(p) if st is None else st["m"]
        v0 = xp.zeros_like(p) if st is None else st["v"]
        m, v = self._buffer(key, "m", p), self._buffer(key, "v", p)
        xp.multiply(m0, ft(b1), out=m)
        m += ft(1 - b1) * g
        xp.multiply(v0, ft(b2), out=v)
        v += ft(1 - b2) * (g * g)
        bc1 = 1.0 - b1**t
        bc2 = 1.0 - b2**t
        denom = np.sqrt(v) / ft(math.sqrt(bc2)) + ft(self.eps)
        out: Array = -ft(lr / bc1) * m / denom
        if self.weight_decay:
            out -= ft(lr * self.weight_decay) * p
        return out, {"m": m, "v": v}


def make_optimizer(name: str, lr: float, **kwargs: Any) -> Optimizer:
    """``"sgd"`` or ``"adamw"`` with ``lr`` and the optimizer's own keyword arguments.

    >>> make_optimizer("adamw", 1e-3).name
    'adamw'
    """
    key = name.strip().lower()
    if key == "sgd":
        return SGD(lr, **kwargs)
    if key in ("adamw", "adam"):
        return AdamW(lr, **kwargs)
    raise ValueError(f"unknown optimizer {shown(name)}: expected sgd or adamw")


def global_norm(grads: Mapping[str, Array]) -> float:
    """The 2-norm of all gradients together, accumulated in float64 (the squares of float32
    values are exact there, and NumPy's pairwise sum adds them in one order on every CPU, unlike
    BLAS's dot product, whose order is its kernel's).

    >>> global_norm({"a": np.array([3.0], np.float32), "b": np.array([4.0], np.float32)})
    5.0
    """
    total = 0.0
    for g in grads.values():
        flat = g.reshape(-1).astype(np.float64, copy=False)
        total += float(get_xp(flat).square(flat).sum())
    return math.sqrt(total)


def clip_grad_norm(grads: dict[str, Array], max_norm: float) -> float:
    """Scale ``grads`` in place so that their global norm is at most ``max_norm`` (as
    ``torch.nn.utils.clip_grad_norm_``); return the norm before clipping.

    >>> g = {"w": np.array([3.0, 4.0], np.float32)}
    >>> clip_grad_norm(g, 1.0), [round(float(v), 4) for v in g["w"]]
    (5.0, [0.6, 0.8])
    """
    if not max_norm > 0:
        raise ValueError(f"max_norm={shown(max_norm)}: expected a number > 0")
    norm = global_norm(grads)
    coef = max_norm / (norm + 1e-6)
    if coef < 1.0:
        for g in grads.values():
            g *= g.dtype.type(coef)
    return norm


@dataclass(frozen=True)
class Schedule:
    """Learning-rate schedule over *optimizer* steps: a skipped step does not advance it.

    ``kind`` is ``"constant"``, ``"cosine"`` (to ``min_ratio * lr`` at ``total`` steps) or
    ``"linear"`` (to ``min_ratio * lr``); ``warmup`` steps ramp up linearly first.

    >>> s = Schedule("cosine", total=100, warmup=10)
    >>> [round(s(k, 1.0), 3) for k in (0, 9, 10, 55, 100)]
    [0.1, 1.0, 1.0, 0.5, 0.0]
    """

    kind: Literal["constant", "cosine", "linear"] = "constant"
    total: int = 0
    warmup: int = 0
    min_ratio: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in ("constant", "cosine", "linear"):
            raise ValueError(f"schedule kind {shown(self.kind)}: expected constant, cosine or linear")
        if self.kind != "constant" and self.total <= self.warmup:
            raise ValueError(f"schedule total={self.total} must exceed warmup={self.warmup}")
        if self.warmup < 0 or not 0.0 <= self.min_ratio <= 1.0:
            raise ValueError(f"warmup={self.warmup}, min_ratio={self.min_ratio}: expected >= 0 and in [0, 1]")

    def __call__(self, step: int, lr: float) -> float:
        """The learning rate of optimizer step ``step`` (counted from 0)."""
        if step < self.warmup:
            return lr * (step + 1) / self.warmup
        if self.kind == "constant":
            return lr
        frac = min(1.0, (step - self.warmup) / (self.total - self.warmup))
        shape = 0.5 * (1.0 + math.cos(math.pi * frac)) if self.kind == "cosine" else 1.0 - frac
        return lr * (self.min_ratio + (1.0 - self.min_ratio) * shape)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
