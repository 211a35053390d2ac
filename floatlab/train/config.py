"""A training run's settings as plain data: what a checkpoint stores and the CLI fills.

>>> TrainConfig(model="transformer", data="text", steps=200).total_steps(180)
200
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import InitVar, dataclass, field
from typing import Any

from floatlab.train._checks import (
    shown,
    want_bool,
    want_dict,
    want_fields,
    want_int,
    want_ints,
    want_real,
    want_real_or_none,
    want_str,
)
from floatlab.train._moved import RENAMED_SETTINGS, renamed_settings
from floatlab.train.models.base import model_name
from floatlab.train.precision.policy import Policy, get_policy

__all__ = ["DEFAULT_LR", "RENAMED_SETTINGS", "TrainConfig", "renamed_settings"]

DEFAULT_LR = {"sgd": 0.05, "adamw": 2e-3}


@dataclass(frozen=True)
class TrainConfig:
    """Everything a run needs, as plain data (a checkpoint stores it; the CLI fills it).

    ``lr`` is the learning rate for the *unweighted* loss: on a data set whose loss is weighted
    by ``w`` the trainer gives SGD ``lr / w`` and AdamW ``eps * w``, so that the weighted run
    trains at the pace of the unweighted one. ``precision`` names the policy (or a framework
    preset) and ``overrides`` replaces some of its fields (``{"loss_scaling": "none"}``).

    >>> TrainConfig(precision="bf16", epochs=3).make_policy().name
    'bf16'
    """

    model: str = "mlp"
    data: str = "digits"
    precision: str = "mixed-fp16"
    overrides: dict[str, Any] = field(default_factory=dict)
    epochs: int = 20
    batch_size: int = 64
    optimizer: str = "sgd"
    lr: float | None = None
    momentum: float = 0.9
    weight_decay: float = 0.0
    clip: float | None = None
    schedule: str = "constant"
    warmup: int = 0
    seed: int = 0
    data_seed: int = 0
    hidden: tuple[int, ...] = (128, 128)
    activation: str = "relu"
    d_model: int | None = None
    layers: int = 4
    heads: int = 4
    context: int = 64
    channels: tuple[int, ...] = (16, 32)
    steps: int | None = None
    eval_every: int | None = None
    histogram_steps: tuple[int, ...] = ()
    #: every GEMM summed exactly and rounded once, exp, log and tanh correctly rounded: the same bits
    #: on any CPU and BLAS build
    #: (see :mod:`floatlab.train.hostmath`); off, they depend on the BLAS kernel and NumPy's dispatch
    deterministic: bool = False
    #: the old name of :attr:`overrides`, taken by the constructor only (the attribute reads None; see
    #: :data:`~floatlab.train._moved.RENAMED_SETTINGS`)
    policy: InitVar[dict[str, Any] | None] = None

    def __post_init__(self, policy: dict[str, Any] | None) -> None:
        set_ = object.__setattr__
        if policy is not None:  # the old name: read as overrides (given both: one line)
            both = {"overrides": self.overrides} if self.overrides else {}
            set_(self, "overrides", renamed_settings({"policy": policy, **both})["overrides"])
        for name in ("model", "data", "precision", "optimizer", "schedule", "activation"):
            want_str(name, getattr(self, name))
        set_(self, "overrides", dict(want_dict("overrides", self.overrides)))
        for name, lo in (("epochs", 0), ("batch_size", 1), ("warmup", 0), ("seed", 0), ("data_seed", 0)):
            set_(self, name, want_int(name, getattr(self, name), lo))
        for name in ("layers", "heads", "context"):
            set_(self, name, want_int(name, getattr(self, name), 1))
        for name in ("d_model", "steps", "eval_every"):
            v = getattr(self, name)
            set_(self, name, None if v is None else want_int(name, v, 1))
        set_(self, "channels", want_ints("channels", self.channels, 1))
        for name in ("momentum", "weight_decay"):
            set_(self, name, want_real(name, getattr(self, name)))
        set_(self, "lr", want_real_or_none("lr", self.lr))
        if self.lr is not None and not 0 <= self.lr < math.inf:
            raise ValueError(f"lr={shown(self.lr)}: expected a finite number >= 0 or None")
        set_(self, "clip", want_real_or_none("clip", self.clip))
        if self.clip is not None and not self.clip > 0:
            raise ValueError(f"clip={shown(self.clip)}: expected a number > 0 or None")
        set_(self, "hidden", want_ints("hidden", self.hidden, 1))
        set_(self, "histogram_steps", want_ints("histogram_steps", self.histogram_steps, 0))
        set_(self, "deterministic", want_bool("deterministic", self.deterministic))

    def model_options(self) -> dict[str, Any]:
        """The settings of :attr:`model` that :func:`~floatlab.train.models.get_model` takes.

        >>> TrainConfig(model="transformer", layers=2, d_model=64).model_options()
        {'layers': 2, 'heads': 4, 'd_model': 64}
        """
        kind = model_name(self.model)
        width = {} if self.d_model is None else {"d_model": self.d_model}
        if kind == "mlp":
            return {"hidden": self.hidden, "activation": self.activation}
        if kind == "transformer":
            return {"layers": self.layers, "heads": self.heads, **width}
        if kind == "convnet":
            return {"channels": self.channels}
        return width

    def total_steps(self, n_batches: int) -> int:
        """The run's length in steps: :attr:`steps`, or :attr:`epochs` of ``n_batches`` each.

        >>> TrainConfig(epochs=3).total_steps(10), TrainConfig(steps=25).total_steps(10)
        (30, 25)
        """
        return self.steps if self.steps is not None else self.epochs * n_batches

    def make_policy(self) -> Policy:
        """The run's policy: :attr:`precision` names a policy or a framework preset (``"apex-O2"``),
        and :attr:`overrides` replaces some of its fields.

        >>> TrainConfig(precision="apex-O3", overrides={"master_weights": True}).make_policy().name
        'apex-O3*'
        """
        base = get_policy(self.precision)
        return base.replace(**self.overrides) if self.overrides else base

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["hidden"], d["histogram_steps"] = list(self.hidden), list(self.histogram_steps)
        d["channels"] = list(self.channels)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        """The config :meth:`to_dict` wrote (a field it lacks takes its default); a key an earlier
        floatlab wrote under another name (:data:`~floatlab.train._moved.RENAMED_SETTINGS`) is read
        under its new one.

        >>> TrainConfig.from_dict({"precision": "bf16", "hidden": [4]}).hidden
        (4,)
        >>> TrainConfig.from_dict({"precision": "bf16", "policy": {"loss_scaling": "none"}}).overrides
        {'loss_scaling': 'none'}
        """
        return cls(**want_fields("train config", renamed_settings(want_dict("train config", d)), cls))
