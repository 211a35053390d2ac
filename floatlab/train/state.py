"""A trainer's saved state, checked part by part before anything is loaded.

:func:`check_state` reads every part of a :meth:`~floatlab.train.trainer.Trainer.state_dict`
and checks it against the trainer it is to be loaded into: the format, the policy, the shapes
and values of the weights, BatchNorm's running statistics, the compensation buffers of
compensated updates, the optimizer's and the loss scaler's state, the counters, the data order,
the random generators and a recipe's scaling state. A bad state is one ValueError saying what
is wrong, and the trainer is left as it was:
:meth:`~floatlab.train.trainer.Trainer.load_state_dict` assigns only what this returns.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from floatlab.backend import to_numpy, tree_map_arrays
from floatlab.train._checks import shown, want_dict, want_int
from floatlab.train.history import History
from floatlab.train.precision.policy import Policy
from floatlab.train.recipes import Fp8Scaling, MicroRecipe, MicroScaling

__all__ = ["STATE_FORMAT", "CheckedState", "check_state", "restore", "state_of"]

#: the format tag of a trainer state (and of a checkpoint file's contents)
STATE_FORMAT = "floatlab-trainer-1"


@dataclass(frozen=True)
class CheckedState:
    """The parts of a trainer state that passed :func:`check_state`, ready to assign.

    >>> from floatlab.train import Trainer, TrainConfig, make_underflow_task
    >>> tr = Trainer.from_config(TrainConfig(data="underflow", hidden=(8,)), make_underflow_task(n_train=64))
    >>> sorted(check_state(tr, tr.state_dict()).counters.items())
    [('batch_in_epoch', 0), ('epoch', 0), ('opt_steps', 0), ('step', 0)]
    """

    params: dict[str, np.ndarray]
    buffers: dict[str, np.ndarray]
    counters: dict[str, int]
    perm: np.ndarray | None
    generator_states: tuple[dict[str, Any], dict[str, Any]]
    history: History
    compensation: dict[str, np.ndarray] = field(default_factory=dict)
    #: the recipe's state (fp8: amax histories, scales; both: the per-step record), in a twin
    scaling: Fp8Scaling | MicroScaling | None = None


def check_state(trainer: Any, state: dict[str, Any]) -> CheckedState:
    """Check ``state`` against ``trainer`` (a :class:`~floatlab.train.trainer.Trainer`) part by
    part, assigning nothing. (The loss scaler's state is checked by the scaler itself, which
    assigns it only when all is well: the trainer loads it last.) Non-finite weights are kept:
    a pure low-precision run can reach them, and its resumed twin must follow it bit for bit.

    >>> from floatlab.train import Trainer, TrainConfig, make_underflow_task
    >>> tr = Trainer.from_config(TrainConfig(data="underflow", hidden=(8,)), make_underflow_task(n_train=64))
    >>> state = tr.state_dict()
    >>> state["counters"]["batch_in_epoch"] = 99
    >>> check_state(tr, state)
    Traceback (most recent call last):
    ...
    ValueError: counter batch_in_epoch=99: expected at most 1
    """
    want_dict("trainer state", state)
    if state.get("format") != STATE_FORMAT:
        raise ValueError(f"trainer state format {shown(state.get('format'))}: expected {STATE_FORMAT!r}")
    missing = sorted(
        {"policy", "params", "optimizer", "scaler", "counters", "perm", "rng", "history"} - set(state)
    )
    if missing:
        raise ValueError(f"trainer state lacks {missing}")
    policy = Policy.from_dict(state["policy"])
    if policy != trainer.policy:
        mine, theirs = trainer.policy.to_dict(), policy.to_dict()
        diff = ", ".join(f"{k} {theirs[k]!r} (here {mine[k]!r})" for k in mine if mine[k] != theirs[k])
        raise ValueError(f"checkpoint policy {policy.name!r} differs from {trainer.policy.name!r}: {diff}")
    params = want_dict("params", state["params"])
    if set(params) != set(trainer.params):
        raise ValueError(
            f"checkpoint parameters {sorted(params)} differ from the model's {sorted(trainer.params)}"
        )
    for k, v in params.items():
        if not isinstance(v, np.ndarray) or v.dtype.kind != "f" or v.shape != trainer.params[k].shape:
            raise ValueError(
                f"checkpoint parameter {k}={shown(v)}: expected {trainer.params[k].shape} floats"
            )
    # the running statistics (a state written before models had them has none: only then allowed)
    buffers = want_dict("buffers", state.get("buffers", {}))
    if set(buffers) != set(trainer.buffers):
        raise ValueError(
            f"checkpoint buffers {sorted(buffers)} differ from the model's {sorted(trainer.buffers)}"
        )
    for k, v in buffers.items():
        if not isinstance(v, np.ndarray) or v.dtype.kind != "f" or v.shape != trainer.buffers[k].shape:
            raise ValueError(f"checkpoint buffer {k}={shown(v)}: expected {trainer.buffers[k].shape} floats")
    # the compensation buffers of compensated updates: one per low-precision parameter when the
    # policy (checked equal above) asks for them, none otherwise (a state written before they
    # existed has none, and its policy has them off)
    compensation = want_dict("compensation", state.get("compensation", {}))
    if set(compensation) != set(trainer.compensation):
        raise ValueError(
            f"checkpoint compensation buffers {sorted(compensation)} differ from the trainer's "
            f"{sorted(trainer.compensation)}"
        )
    for k, v in compensation.items():
        want = trainer.compensation[k].shape
        if not isinstance(v, np.ndarray) or v.dtype.kind != "f" or v.shape != want:
            raise ValueError(f"checkpoint compensation buffer {k}={shown(v)}: expected {want} floats")
    opt = copy.copy(trainer.opt)  # loaded into a twin (it replaces, never mutates, the state)
    opt.load_state_dict(want_dict("optimizer", state["optimizer"]))
    for k, st in opt.state.items():
        for n, arr in st.items():
            if k not in trainer.params or arr.shape != trainer.params[k].shape:
                raise ValueError(f"optimizer state {k}/{n} has shape {arr.shape}: expected a parameter's")
    c = want_dict("counters", state["counters"])
    counters = {
        k: want_int(f"counter {k}", c.get(k)) for k in ("step", "opt_steps", "epoch", "batch_in_epoch")
    }
    if counters["batch_in_epoch"] > trainer.n_batches:
        raise ValueError(
            f"counter batch_in_epoch={counters['batch_in_epoch']}: expected at most {trainer.n_batches}"
        )
    perm = state["perm"]
    n_examples = len(trainer.data.y_train)
    if perm is not None and not (
        isinstance(perm, np.ndarray)
        and perm.shape == (n_examples,)
        and perm.dtype.kind in "iu"
        and np.array_equal(np.sort(perm), np.arange(n_examples))
    ):
        raise ValueError(
            f"checkpoint perm={shown(perm)}: expected None or a permutation of the {n_examples} examples"
        )
    rng = want_dict("rng", state["rng"])
    gens = []
    for name, gen in (("order", trainer.order_rng), ("round", trainer.P.rng)):
        twin = np.random.Generator(type(gen.bit_generator)())
        saved = want_dict(f"checkpoint rng {name}", rng.get(name))
        try:
            twin.bit_generator.state = saved
        except (TypeError, ValueError, KeyError) as e:
            raise ValueError(
                f"checkpoint rng {name}: not a {type(gen.bit_generator).__name__} state ({e})"
            ) from None
        gens.append(twin.bit_generator.state)
    history = History.from_dict(state["history"])
    perm_copy = None if perm is None else np.array(perm)
    # the recipe's state: an amax history is what delayed scaling's next scale comes from
    scaling: Fp8Scaling | MicroScaling | None = None
    recipe = policy.recipe
    if recipe is not None:
        saved_scaling = state.get("scaling", state.get("fp8"))  # ("fp8": written before microscaling)
        if saved_scaling is None:
            raise ValueError(f"checkpoint of policy {policy.name!r} lacks its recipe's scaling state")
        if isinstance(recipe, MicroRecipe):
            scaling = MicroScaling(recipe, trainer.P.rng, getattr(trainer.model, "linear_sites", None))
        else:
            scaling = Fp8Scaling(recipe)
        scaling.load_state_dict(saved_scaling)
    gen_states = (gens[0], gens[1])
    return CheckedState(params, buffers, counters, perm_copy, gen_states, history, compensation, scaling)


def state_of(trainer: Any) -> dict[str, Any]:
    """All that resuming ``trainer`` (a :class:`~floatlab.train.trainer.Trainer`) needs to
    continue bit for bit, as plain data: what
    :meth:`~floatlab.train.trainer.Trainer.state_dict` returns and a checkpoint stores.

    >>> from floatlab.train import Trainer, TrainConfig, make_underflow_task
    >>> tr = Trainer.from_config(TrainConfig(data="underflow", hidden=(8,)), make_underflow_task(n_train=64))
    >>> state = state_of(tr)
    >>> state["format"] == STATE_FORMAT, state["counters"]["step"], sorted(state["params"])
    (True, 0, ['W0', 'W1', 'b0', 'b1'])
    """
    return {
        "format": STATE_FORMAT,
        "config": trainer.config.to_dict() if trainer.config is not None else None,
        "policy": trainer.policy.to_dict(),
        "params": {k: np.array(to_numpy(v)) for k, v in trainer.params.items()},
        "buffers": {k: np.array(to_numpy(v)) for k, v in trainer.buffers.items()},
        "compensation": {k: np.array(to_numpy(v)) for k, v in trainer.compensation.items()},
        "optimizer": tree_map_arrays(trainer.opt.state_dict(), to_numpy)
        if trainer.backend.is_gpu
        else trainer.opt.state_dict(),
        "scaler": trainer.scaler.state_dict(),
        "counters": {
            "step": trainer.step,
            "opt_steps": trainer.opt_steps,
            "epoch": trainer.epoch,
            "batch_in_epoch": trainer.batch_in_epoch,
        },
        "perm": None if trainer.perm is None else np.array(trainer.perm),
        "rng": {"order": trainer.order_rng.bit_generator.state, "round": trainer.P.rng.bit_generator.state},
        "history": trainer.history.to_dict(),
        "scaling": None if trainer.P.scaling is None else trainer.P.scaling.state_dict(),
    }


def restore(trainer: Any, state: dict[str, Any]) -> None:
    """Load ``state`` (from :func:`state_of`) into ``trainer``: everything is checked by
    :func:`check_state` first, so a bad state is one ValueError and the trainer is left as it was.

    >>> from floatlab.train import Trainer, TrainConfig, make_underflow_task
    >>> d = make_underflow_task(n_train=64, n_test=64)
    >>> a = Trainer.from_config(TrainConfig(data="underflow", hidden=(8,)), d)
    >>> b = Trainer.from_config(TrainConfig(data="underflow", hidden=(8,)), d)
    >>> _ = a.fit(1); restore(b, state_of(a)); b.step == a.step
    True
    """
    checked = check_state(trainer, state)
    trainer.scaler.load_state_dict(state["scaler"])  # the last check (it assigns only when all is well)

    def on_device(arrays: dict[str, Any]) -> dict[str, Any]:
        return {k: trainer.backend.asarray(np.array(v, dtype=trainer.P.dtype)) for k, v in arrays.items()}

    trainer.params.update(on_device(checked.params))
    trainer.buffers.update(on_device(checked.buffers))
    trainer.compensation.update(on_device(checked.compensation))
    trainer.opt.load_state_dict(state["optimizer"])  # (as checked on the twin)
    if trainer.backend.is_gpu:  # the optimizer's buffers (momentum, moments) go to the device too
        trainer.opt.state = tree_map_arrays(trainer.opt.state, trainer.backend.asarray)
    counters = checked.counters
    trainer.step, trainer.opt_steps = counters["step"], counters["opt_steps"]
    trainer.epoch, trainer.batch_in_epoch = counters["epoch"], counters["batch_in_epoch"]
    trainer.perm = checked.perm
    trainer.order_rng.bit_generator.state, trainer.P.rng.bit_generator.state = checked.generator_states
    trainer.history = checked.history
    trainer.P.scaling = checked.scaling
