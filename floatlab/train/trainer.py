"""The training loop, in the order of the lesson.

One step (:meth:`Trainer.train_step`)::

    1. cast       the weights as the compute format sees them (fp16 copies of fp32 masters)
    2. forward    activations stored in the forward format, GEMMs on the simulated tensor core
    3. scale      backward starts from d(S * loss) = S instead of 1
    4. backward   gradients stored in the backward format; count those flushed to zero
    5. unscale    multiply by 1/S: in fp32 with master weights, else in the gradient format
    6. check      any inf or NaN? (in the gradients, the batch and the loss)
    7. clip       to a global norm, after unscaling
    8. step       or skip the step when something is not finite; count swallowed updates
    9. update     the loss scale (back off on inf, grow after a run of clean steps)
   10. close      the recipe's per-operand statistics (delayed scaling's next scales), the record

The comments of :meth:`Trainer._step` carry the same numbers; :data:`STEP_PHASES` groups them
for timing.

On the synthetic task whose gradients sit below fp16's range, pure fp16 learns nothing and
mixed-fp16 (loss scaling, fp32 master weights) learns it:

>>> pure = train(model="mlp", data="underflow", precision="fp16", epochs=1, seed=0, hidden=(32,))
>>> mixed = train(model="mlp", data="underflow", precision="mixed-fp16", epochs=1, seed=0, hidden=(32,))
>>> pure.n_steps, pure.summary()["mean_flushed"] > 0.9, pure.final["test_accuracy"] < 0.3
(32, True, True)
>>> mixed.final["test_accuracy"] > 0.9
True
"""

from __future__ import annotations

import dataclasses
import math
import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from floatlab.backend import Backend, get_backend, settle_allocator, to_numpy
from floatlab.train.checkpoint import load_checkpoint, save_checkpoint
from floatlab.train.config import DEFAULT_LR, TrainConfig
from floatlab.train.data.datasets import Dataset, get_data
from floatlab.train.evaluation import Evaluation, evaluate
from floatlab.train.history import FAULTS, History, TrainingFaultWarning
from floatlab.train.hostmath import deterministic
from floatlab.train.models.base import Model, get_model
from floatlab.train.models.layers import cross_entropy_backward, cross_entropy_forward
from floatlab.train.optim import Optimizer, Schedule, clip_grad_norm, make_optimizer
from floatlab.train.precision.policy import Policy, get_policy
from floatlab.train.precision.precision import Array, Params, Precision
from floatlab.train.precision.scaler import LossScaler, make_scaler
from floatlab.train.precision.update import apply_updates
from floatlab.train.state import restore, state_of

__all__ = ["STEP_PHASES", "StepStats", "TrainConfig", "Trainer", "train"]


@dataclass(frozen=True)
class StepStats:
    """What one step did (see :meth:`Trainer.train_step`).

    >>> StepStats(2.3, 0.1, 65536.0, False, 0.0, 0.0, 0.05, None).skipped
    False
    """

    loss: float
    accuracy: float
    scale: float
    skipped: bool
    flushed: float
    swallowed: float
    lr: float
    grad_norm: float | None
    fault: str = ""  # the faults the step met, comma-separated (see floatlab.train.history.FAULTS)


#: the phases of a training step, in order, as :attr:`Trainer.phase_clock` hears of them, each
#: ending after the steps of the module's numbering in brackets: cast (1), forward (2: with the
#: loss), backward (3, 4), unscale (5), check (6), update (7, 8: the clip and the step) and close
#: (9, 10: the loss scale, the recipe's statistics, the step's record)
STEP_PHASES = ("cast", "forward", "backward", "unscale", "check", "update", "close")


def _no_tick(phase: str) -> None:
    """The phase clock of a trainer that is not timed."""


def _input_faults(x: Array, loss: float) -> tuple[tuple[str, bool], ...]:
    """The faults a batch and its loss can carry: an inf or NaN in the batch, a non-finite loss."""
    return (("nonfinite_batch", not bool(np.isfinite(x).all())), ("nonfinite_loss", not math.isfinite(loss)))


def _as_params(params: Params, dtype: np.dtype[Any]) -> Params:
    # float32 -> float64 widening is exact; no other change of dtype happens here
    return {k: np.array(v, dtype=dtype, copy=True) for k, v in params.items()}


class Trainer:
    """Trains ``model`` on ``data`` under ``policy`` (a :class:`Policy`, or a name
    :func:`~floatlab.train.precision.policy.get_policy` knows: ``"mixed-fp16"``, a preset's ``"apex-O2"``);
    :meth:`fit` runs epochs, :meth:`train_step` one step. ``seed`` fixes the initial weights, the
    batch order and the random bits of stochastic rounding.

    >>> from floatlab.train.data.datasets import make_underflow_task
    >>> from floatlab.train.models import MLP
    >>> data = make_underflow_task(n_train=128, n_test=64)
    >>> tr = Trainer(MLP(64, (16,), 10), data, "mixed-fp16", seed=0)
    >>> tr.params["W0"].dtype, tr.scaler.scale, tr.n_batches
    (dtype('float32'), 65536.0, 2)
    """

    def __init__(
        self,
        model: Model,
        data: Dataset,
        policy: Policy | str,
        *,
        optimizer: Optimizer | None = None,
        scaler: LossScaler | None = None,
        batch_size: int = 64,
        seed: int = 0,
        clip: float | None = None,
        schedule: Schedule | None = None,
        histogram_steps: Sequence[int] = (),
        config: TrainConfig | None = None,
        label: str | None = None,
        backend: Backend | str | None = None,
        deterministic: bool = False,
    ) -> None:
        self.model = model
        #: every host GEMM summed exactly and rounded once (:mod:`floatlab.train.hostmath`): the
        #: same bits on any CPU and BLAS build, at about twice the GEMMs' cost
        self.deterministic = bool(deterministic)
        self.data = data
        self.policy = get_policy(policy)
        #: called with the name of each phase of a step as it ends (:data:`STEP_PHASES`), where
        #: set: :func:`floatlab.perf.step_phases` times them with it
        self.phase_clock: Callable[[str], None] | None = None
        # the arrays live on the backend's device: batches go there as they are drawn
        self.backend = get_backend(backend)
        if not self.backend.is_gpu:
            settle_allocator()
        self.P = Precision(
            self.policy,
            rng=np.random.default_rng([seed, 1]),
            backend=self.backend,
            layers=getattr(model, "linear_sites", None),
        )
        self.order_rng = np.random.default_rng([seed, 2])
        self.opt = optimizer if optimizer is not None else make_optimizer("sgd", DEFAULT_LR["sgd"])
        self.scaler = scaler if scaler is not None else make_scaler(self.policy)
        self.batch_size = batch_size
        self.seed = seed
        self.clip = clip
        self.schedule = schedule if schedule is not None else Schedule()
        self.histogram_steps = frozenset(int(s) for s in histogram_steps)
        #: the recipe's per-operand statistics of the last step (see :meth:`Precision.end_step`)
        self.operand_stats: dict[str, dict[str, float]] = {}
        self.config = config
        init = model.init(np.random.default_rng([seed, 0]))
        # the weights the optimizer updates: fp32 masters, or the forward format itself
        params = {k: self.backend.asarray(v) for k, v in _as_params(init, self.P.dtype).items()}
        #: where each parameter is stored (BatchNorm's stay in fp32 under ``batchnorm_fp32``)
        self.param_formats = {k: self.policy.param_format(k in model.norm_params) for k in params}
        self.params: Params = {k: self.P.cast(v, self.param_formats[k]) for k, v in params.items()}
        #: the model's running statistics (BatchNorm's), stored as its parameters are
        self.buffers: Params = {
            k: self.P.cast(self.backend.asarray(np.asarray(v, self.P.dtype)), self.policy.param_format(True))
            for k, v in model.init_buffers().items()
        }
        #: the compensation buffers of compensated updates (``policy.update_compensation``), zeros in
        #: each low-precision parameter's format; empty when the switch is off or the weights are wide
        self.compensation: Params = self._zero_compensation()
        self.eval_every = config.eval_every if config is not None else None
        #: why the run stopped early (its loss turned inf or NaN with nothing to catch it), or ""
        self.stopped = ""
        self.step = 0  # iterations, skipped ones included
        self.opt_steps = 0  # optimizer steps taken: what the learning-rate schedule counts
        self.epoch = 0
        self.batch_in_epoch = 0
        self.perm: Array | None = None
        self._warned: set[str] = set()  # the faults already warned about (once per kind and run)
        meta = {
            "policy": self.policy.to_dict(),
            "policy_text": self.policy.describe(),
            "model": model.config(),
            "data": data.info(),
            "optimizer": self.opt.hyper(),
            "seed": seed,
            "batch_size": batch_size,
        }
        if config is not None:
            meta["config"] = config.to_dict()
        self.history = History(label or self.policy.name, meta)

    def _zero_compensation(self) -> Params:
        if not self.policy.update_compensation:
            return {}
        return {
            k: self.backend.asarray(np.zeros(v.shape, self.P.dtype))
            for k, v in self.params.items()
            if not self.P.is_wide(self.param_formats[k])
        }

    def start_from(self, params: Params, buffers: Params | None = None) -> None:
        """Take the weights ``params`` (another run's, trained in any policy), each stored in this
        trainer's format for it, and the running statistics ``buffers`` (BatchNorm's) when given:
        a run in one policy can go on in another from the same point. The optimizer's state, the
        counters and the history stay as they are; the compensation buffers of compensated
        updates start from zero (they belonged to the old weights).

        >>> from floatlab.train.data.datasets import make_underflow_task
        >>> d = make_underflow_task(n_train=64, n_test=64)
        >>> a = Trainer.from_config(TrainConfig(data="underflow", precision="fp32", hidden=(4,)), d)
        >>> b = Trainer.from_config(TrainConfig(data="underflow", precision="bf16", hidden=(4,), seed=1), d)
        >>> b.start_from(a.params)
        >>> bool((b.params["W0"] == a.P.cast(a.params["W0"], b.policy.forward)).all())
        True
        """
        if set(params) != set(self.params):
            raise ValueError(f"weights {sorted(params)}: expected the model's {sorted(self.params)}")
        for k, v in params.items():
            if np.shape(v) != self.params[k].shape:
                raise ValueError(f"weight {k} of shape {np.shape(v)}: expected {self.params[k].shape}")
        if buffers is not None:
            if set(buffers) != set(self.buffers):
                raise ValueError(f"buffers {sorted(buffers)}: expected the model's {sorted(self.buffers)}")
            for k, v in buffers.items():
                if np.shape(v) != self.buffers[k].shape:
                    raise ValueError(f"buffer {k} of shape {np.shape(v)}: expected {self.buffers[k].shape}")
            fmt = self.policy.param_format(True)
            self.buffers = {
                k: self.P.cast(self.backend.asarray(np.array(to_numpy(v), dtype=self.P.dtype)), fmt)
                for k, v in buffers.items()
            }
        self.params = {
            k: self.P.cast(
                self.backend.asarray(np.array(to_numpy(v), dtype=self.P.dtype)), self.param_formats[k]
            )
            for k, v in params.items()
        }
        self.compensation = self._zero_compensation()

    # ---- construction from a config -------------------------------------------------------------
    @classmethod
    def from_config(
        cls, cfg: TrainConfig, data: Dataset | None = None, *, backend: Backend | str | None = None
    ) -> Trainer:
        """Build model, data, optimizer, scaler and schedule from ``cfg`` (on ``backend``).

        >>> from floatlab.train.data.datasets import make_underflow_task
        >>> tr = Trainer.from_config(TrainConfig(data="underflow", precision="fp16"), make_underflow_task())
        >>> tr.opt.lr == 0.05 * 2**20   # SGD's lr for the loss weighted by 2^-20
        True
        """
        from floatlab.train.data.text import check_model_and_data

        if data is None:  # (a data set given as an object is the caller's to match)
            check_model_and_data(cfg.model, cfg.data)
        data = data if data is not None else get_data(cfg.data, seed=cfg.data_seed, context=cfg.context)
        model = get_model(cfg.model, data.n_features, data.n_classes, **cfg.model_options())
        name = cfg.optimizer.strip().lower()
        lr = cfg.lr if cfg.lr is not None else DEFAULT_LR.get(name, 0.05)
        opt: Optimizer
        if name == "sgd":
            # the step is lr * weight * gradient: divide the loss weight back out
            opt = make_optimizer(
                "sgd", lr * data.lr_scale, momentum=cfg.momentum, weight_decay=cfg.weight_decay
            )
        else:
            opt = make_optimizer(name, lr, weight_decay=cfg.weight_decay, eps=1e-8 * data.loss_weight)
        n_batches = math.ceil(len(data.y_train) / cfg.batch_size)
        total = max(cfg.total_steps(n_batches), cfg.warmup + 1)
        schedule = Schedule(cfg.schedule, total=total, warmup=cfg.warmup)  # type: ignore[arg-type]
        policy = cfg.make_policy()
        return cls(
            model,
            data,
            policy,
            optimizer=opt,
            batch_size=cfg.batch_size,
            seed=cfg.seed,
            clip=cfg.clip,
            schedule=schedule,
            histogram_steps=cfg.histogram_steps,
            config=cfg,
            backend=backend,
            deterministic=cfg.deterministic,
        )

    # ---- one step -----------------------------------------------------------------------------------
    def train_step(self, x: Array, y: Array) -> StepStats:
        """One training step on the batch ``(x, y)``, in the order of the lesson.

        >>> from floatlab.train.data.datasets import make_underflow_task
        >>> d = make_underflow_task(n_train=64, n_test=64)
        >>> tr = Trainer.from_config(TrainConfig(data="underflow", precision="fp16", hidden=(16,)), d)
        >>> st = tr.train_step(d.x_train, d.y_train)
        >>> st.flushed, st.skipped, st.scale   # every output gradient underflowed in fp16
        (1.0, False, 1.0)
        """
        x, y = self.backend.asarray(x), self.backend.asarray(y)
        # overflow to inf, and the NaNs that follow, are what the formats do: no warnings
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"), deterministic(self.deterministic):
            return self._step(x, y)

    def _all_finite(self, grads: Params) -> bool:
        """Whether every gradient is finite: on NumPy, stopping at the first that is not; on a GPU,
        in one reduction read back once (each read-back waits for the device's queue to drain)."""
        if self.backend.is_gpu:
            xp = self.backend.xp
            return bool(xp.stack([xp.isfinite(g).all() for g in grads.values()]).all())
        return all(bool(np.isfinite(g).all()) for g in grads.values())

    def _step(self, x: Array, y: Array) -> StepStats:
        P, scaler = self.P, self.scaler
        tick = self.phase_clock or _no_tick
        # 1. cast: the weights as the compute format sees them
        w = P.weights(self.params, self.model.norm_params)
        tick("cast")
        # 2. forward in the forward format
        logits, cache = self.model.forward(w, x, P, train=True, buffers=self.buffers)
        loss, loss_cache = cross_entropy_forward(logits, y, P, weight=self.data.loss_weight)
        tick("forward")
        # 3. scale the loss: backward starts from d(S * loss) = S, so every gradient is S times larger
        scale = scaler.scale
        # 4. backward in the backward format, counting the gradients that underflow to zero
        with P.counting_flushes():
            dlogits = cross_entropy_backward(loss_cache, P, seed=scale)
            grads = self.model.backward(w, cache, dlogits, P)
        tick("backward")
        # 5. unscale: multiply by 1/S (into fp32 with master weights, else in the gradient format)
        grads = self._unscale(grads)
        tick("unscale")
        # 6. check finite: the gradients, and the batch and loss they came from
        found_inf = not self._all_finite(grads)
        faults = [f for f, bad in _input_faults(x, loss) if bad]
        if found_inf:
            faults.append("nonfinite_grad")
        tick("check")
        # 7. clip (only meaningful, and only done, when every gradient is finite)
        norm: float | None = None
        if self.clip is not None and not found_inf:
            norm = clip_grad_norm(grads, self.clip)
        # 8. step, or skip it: when a gradient is not finite and the scaler says so, and whenever
        #    the weights are guarded (a loss scaler, master weights or wide weights) and the batch,
        #    the loss, a gradient or the updated weights are not finite. Only a pure low-precision
        #    run without a scaler lets a non-finite value into its weights (and says so)
        # (a scaler that never skips, as the 2018 TF1 recipe's or MindSpore's Fixed(drop_overflow_update=
        # False), lets a non-finite update through even to fp32 master weights: the frameworks do)
        guarded = (
            scaler.catches_overflow
            if scaler.enabled
            else (self.policy.master_weights or P.is_wide(self.policy.weight_format))
        )
        skipped = guarded and bool(faults)
        lr = self.schedule(self.opt_steps, self.opt.lr)
        swallowed = 0.0
        if not skipped:
            # (_apply replaces the arrays, so these keep the old ones)
            before, before_c = dict(self.params), dict(self.compensation)
            proposal = self.opt.propose(self.params, grads, lr)
            swallowed, finite = self._apply(proposal.deltas)
            if not finite:
                faults.append("nonfinite_update" if guarded else "nonfinite_weights")
                if guarded:  # undo: the weights and the optimizer's state stay as they were
                    self.params.update(before)
                    self.compensation.update(before_c)
                    skipped, swallowed = True, 0.0
            if not skipped:
                self.opt.commit(proposal)
                self.opt_steps += 1
        tick("update")
        # 9. update the loss scale
        scaler.update(found_inf, underflow=P.flushed_share)
        if scaler.collapsed:
            faults.append("scale_collapse")
        if scaler.at_limit:
            faults.append("scale_at_limit")

        # 10. close the step for the fp8 recipe: its operands' statistics, delayed scaling's next scales
        self.operand_stats = P.end_step()
        self.step += 1
        self._warn(faults, skipped)
        if self.step in self.histogram_steps:
            self._record_histogram(grads)
        acc = float(np.mean(np.argmax(logits, axis=-1) == y)) if len(y) else 0.0
        stats = StepStats(loss, acc, scale, skipped, P.flushed_share, swallowed, lr, norm, ",".join(faults))
        tick("close")
        return stats

    def _warn(self, faults: list[str], skipped: bool) -> None:
        """One TrainingFaultWarning per kind of fault and run; an overflowing gradient that a
        dynamic loss scaler handles (skip, back off) is routine and only flagged."""
        for f in faults:
            if f in self._warned or (f == "nonfinite_grad" and self.scaler.is_dynamic):
                continue
            self._warned.add(f)
            taken = "the step was skipped" if skipped else "the step was taken"
            warnings.warn(
                f"step {self.step}: {FAULTS[f]}; {taken} [{f}] (later ones: the history's fault column)",
                TrainingFaultWarning,
                stacklevel=4,
            )

    def _unscale(self, grads: Params) -> Params:
        inv = self.scaler.inv_scale
        if inv == 1.0:
            return grads
        t = self.P.dtype.type
        if self.policy.master_weights:
            # into the masters' precision: 1/S is a power of two for the usual scales, so exact
            return {k: g * t(inv) for k, g in grads.items()}
        # without master weights the gradients stay in their format: unscaling can underflow again
        return {k: self.P.cast(g * t(inv), self.policy.backward) for k, g in grads.items()}

    def _apply(self, deltas: dict[str, Array]) -> tuple[float, bool]:
        """Add the updates to the weights in the weight format (compensated where the policy asks,
        see :mod:`floatlab.train.precision.update`); return the share of the non-zero updates that did not
        change their weight (swallowed: the update underflowed, or it was below half an ulp of the
        weight; with compensation it is carried, not lost) and whether every new weight is finite."""
        done = apply_updates(
            self.P, self.params, deltas, self.param_formats, self.policy.update_rounding, self.compensation
        )
        self.params.update(done.params)
        self.compensation.update(done.compensation)
        return done.swallowed, done.finite

    def _record_histogram(self, grads: Params) -> None:
        """Histogram of the unscaled gradients (the values the optimizer sees), with what the
        backward format would do to them unscaled and the loss scale that would save them."""
        from floatlab.gradhist import histogram

        h = histogram(*grads.values())
        data: dict[str, Any] = {"histogram": h.to_dict(), "format": self.policy.backward.name}
        if not self.P.is_wide(self.policy.backward):
            data["verdict"] = h.verdict(self.policy.backward).to_dict()
            data["advice"] = h.recommend_scale(self.policy.backward).to_dict()
        self.history.add_histogram(self.step, data, h)

    # ---- epochs ---------------------------------------------------------------------------------
    def evaluate(self, x: Array, y: Array, batch_size: int = 1024) -> Evaluation:
        """Loss and accuracy of the current weights on ``(x, y)``: the forward pass in the policy's
        precision, the loss measured in fp32 and, beside it, in the policy's format (see
        :mod:`floatlab.train.evaluation`).

        >>> from floatlab.train.data.datasets import make_underflow_task
        >>> d = make_underflow_task(n_train=64, n_test=64)
        >>> tr = Trainer.from_config(TrainConfig(data="underflow", precision="bf16", hidden=(16,)), d)
        >>> e = tr.evaluate(d.x_test, d.y_test)
        >>> 0.0 <= e.accuracy <= 1.0 and e.loss > 0
        True
        """
        # an evaluation is a measurement: its stochastic roundings draw from a stream of their own
        # (seeded by the step), so that evaluating changes no training step's random bits
        with (
            np.errstate(over="ignore", invalid="ignore", divide="ignore"),
            self.P.inference(stream=(self.seed, 3, self.step)),
            deterministic(self.deterministic),
        ):
            return evaluate(self.model, self.P, self.params, self.buffers, x, y, batch_size)

    @property
    def n_batches(self) -> int:
        return math.ceil(len(self.data.y_train) / self.batch_size)

    def fit(
        self,
        epochs: int,
        *,
        callback: Callable[[Trainer, StepStats], None] | None = None,
        stop_after: int | None = None,
    ) -> History:
        """Train until ``epochs`` epochs are done (counting those already done: a resumed trainer
        continues); ``stop_after`` ends early after that many steps in total. Evaluates on the
        test set after each epoch and every :attr:`eval_every` steps.

        A run whose loss turns inf or NaN on a finite batch with no loss scaler to catch it stops
        there: :attr:`stopped` says at which step and why (the history keeps every step up to it),
        because a diverging low-precision run is a result, not an error.

        >>> from floatlab.train.data.datasets import make_underflow_task
        >>> d = make_underflow_task(n_train=128, n_test=64)
        >>> tr = Trainer.from_config(TrainConfig(data="underflow", precision="mixed-bf16", hidden=(16,)), d)
        >>> h = tr.fit(2, stop_after=3)
        >>> tr.step, tr.epoch, tr.batch_in_epoch, h.evals["step"]
        (3, 1, 1, [2])
        >>> tr.fit(2).n_steps, tr.epoch, h.evals["step"]
        (4, 2, [2, 4])
        """
        x, y = self.data.x_train, self.data.y_train
        while self.epoch < epochs and not self.stopped:
            if self.perm is None:
                self.perm = self.order_rng.permutation(len(y))
            while self.batch_in_epoch < self.n_batches:
                if stop_after is not None and self.step >= stop_after:
                    return self.history
                b = self.batch_in_epoch
                idx = self.perm[b * self.batch_size : (b + 1) * self.batch_size]
                stats = self.train_step(x[idx], y[idx])
                self.batch_in_epoch += 1
                self.history.log_step(step=self.step, epoch=self.epoch, **dataclasses.asdict(stats))
                if self.operand_stats:
                    self.history.log_operands(self.operand_stats)
                if callback is not None:
                    callback(self, stats)
                if self._diverged(stats):
                    self._eval_if_new()
                    return self.history
                if self.eval_every and self.step % self.eval_every == 0:
                    self._log_eval()
            self.epoch += 1
            self.batch_in_epoch = 0
            self.perm = None
            self._eval_if_new()
        return self.history

    def run(self, callback: Callable[[Trainer, StepStats], None] | None = None) -> History:
        """Train for the length the config asks (:attr:`TrainConfig.steps`, or its epochs) and
        evaluate at the end; a resumed trainer goes on to the same end.

        >>> from floatlab.train.data.datasets import make_underflow_task
        >>> cfg = TrainConfig(data="underflow", precision="fp32", hidden=(8,), steps=5, eval_every=2)
        >>> h = Trainer.from_config(cfg, make_underflow_task(n_train=128, n_test=64)).run()
        >>> h.n_steps, h.evals["step"]
        (5, [2, 4, 5])
        """
        cfg = self.config if self.config is not None else TrainConfig()
        total = cfg.total_steps(self.n_batches)
        epochs = math.ceil(total / self.n_batches) if self.n_batches else 0
        self.fit(epochs, callback=callback, stop_after=total)
        if self.step >= total or self.stopped:
            self._eval_if_new()
        return self.history

    def _diverged(self, stats: StepStats) -> bool:
        """Stop when the loss of a finite batch is inf or NaN and no loss scaler skips such a step
        (there is none, or it never checks for overflow, as the 2018 TF1 recipe's static scale)."""
        if math.isfinite(stats.loss) or self.scaler.catches_overflow or "nonfinite_batch" in stats.fault:
            return False
        catcher = (
            "its loss scaler does not check for overflow"
            if self.scaler.enabled
            else "the policy has no loss scaler to catch it"
        )
        self.stopped = (
            f"step {self.step}: the loss became {stats.loss} and {catcher}, so the run stopped here "
            "(its history up to this step is kept)"
        )
        self.history.meta["stopped"] = self.stopped
        return True

    def _eval_if_new(self) -> None:
        """Evaluate unless the last evaluation was at this very step."""
        steps = self.history.evals["step"]
        if not steps or steps[-1] != self.step:
            self._log_eval()

    def _log_eval(self) -> None:
        measured = self.evaluate(self.data.x_test, self.data.y_test)
        # the training loss since the last evaluation (at most an epoch's steps)
        last = self.history.evals["step"][-1] if self.history.evals["step"] else 0
        window = max(min(self.step - last, self.n_batches), 1)
        recent = self.history.steps["loss"][-window:]
        train_loss = float(np.mean(recent)) if recent else math.nan
        self.history.log_eval(
            epoch=self.epoch,
            step=self.step,
            train_loss=train_loss,
            test_loss=measured.loss,
            test_accuracy=measured.accuracy,
            test_loss_in_format=measured.loss_in_format,
        )
        # the epochs trained in all, a resumed run's included (its stored config names the first run's)
        meta = self.history.meta
        meta["epochs"] = self.epoch
        if isinstance(meta.get("config"), dict):
            meta["config"]["epochs"] = max(int(meta["config"].get("epochs") or 0), self.epoch)

    # ---- state ----------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Weights, BatchNorm's running statistics, the compensation buffers of compensated
        updates (empty unless the policy asks for them), optimizer and scaler state, counters,
        random-generator states and history: all that resuming needs to continue bit for bit
        (see :func:`~floatlab.train.state.state_of`).

        >>> from floatlab.train.data.datasets import make_underflow_task
        >>> d = make_underflow_task(n_train=64)
        >>> tr = Trainer.from_config(TrainConfig(data="underflow", hidden=(8,)), d)
        >>> sorted(tr.state_dict())[:5]
        ['buffers', 'compensation', 'config', 'counters', 'format']
        """
        return state_of(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output into this trainer (same model and policy); a bad
        state is one ValueError and leaves the trainer as it was (see
        :func:`~floatlab.train.state.restore`).

        >>> from floatlab.train.data.datasets import make_underflow_task
        >>> d = make_underflow_task(n_train=64, n_test=64)
        >>> cfg = TrainConfig(data="underflow", hidden=(8,))
        >>> a, b = Trainer.from_config(cfg, d), Trainer.from_config(cfg, d)
        >>> _ = a.fit(1); b.load_state_dict(a.state_dict()); b.step
        1
        """
        restore(self, state)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write a checkpoint atomically (see :mod:`floatlab.train.checkpoint`); :meth:`resume`
        and :meth:`load` read it.

        >>> import tempfile, os
        >>> from floatlab.train.data.datasets import make_underflow_task
        >>> d = make_underflow_task(n_train=64, n_test=64)
        >>> tr = Trainer.from_config(TrainConfig(data="underflow", hidden=(8,), epochs=2), d)
        >>> _ = tr.fit(1)
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     back = Trainer.resume(tr.save(os.path.join(tmp, "ck.npz")), d)
        >>> back.epoch, all((back.params[k] == tr.params[k]).all() for k in tr.params)
        (1, True)
        """
        return save_checkpoint(path, self.state_dict())

    @classmethod
    def resume(
        cls,
        path: str | os.PathLike[str],
        data: Dataset | None = None,
        *,
        backend: Backend | str | None = None,
    ) -> Trainer:
        """A trainer rebuilt from the config stored in the checkpoint at ``path``, state restored
        (see :meth:`save` for an example), on ``backend``."""
        state = load_checkpoint(path)
        if state.get("config") is None:
            raise ValueError(
                f"checkpoint {os.fspath(path)!r} has no config: build the Trainer and call load()"
            )
        trainer = cls.from_config(TrainConfig.from_dict(state["config"]), data, backend=backend)
        trainer.load_state_dict(state)
        return trainer

    def load(self, path: str | os.PathLike[str]) -> None:
        """Restore the checkpoint at ``path`` into this trainer (see :meth:`save` and
        :meth:`load_state_dict`)."""
        self.load_state_dict(load_checkpoint(path))


def train(
    model: str = "mlp",
    data: str | Dataset = "digits",
    precision: str = "mixed-fp16",
    epochs: int = 20,
    seed: int = 0,
    *,
    callback: Callable[[Trainer, StepStats], None] | None = None,
    label: str | None = None,
    backend: Backend | str | None = None,
    progress: bool | None = None,
    **kwargs: Any,
) -> History:
    """Train and return the history; ``kwargs`` are :class:`TrainConfig` fields; ``backend``
    is ``"numpy"`` (the default) or ``"cupy"`` (a CUDA GPU); ``progress``: a bar of the steps
    (None: in a notebook or a terminal).

    >>> h = train("mlp", "underflow", "mixed-fp16", epochs=1, hidden=(16,), histogram_steps=(1,))
    >>> h.summary()["steps"], h.histograms[1]["advice"]["log2_scale"] > 16
    (32, True)
    """
    name = data.name if isinstance(data, Dataset) else data
    settings = {"model": model, "data": name, "precision": precision, "epochs": epochs, "seed": seed}
    cfg = TrainConfig.from_dict({**settings, **kwargs})
    trainer = Trainer.from_config(cfg, data if isinstance(data, Dataset) else None, backend=backend)
    if label is not None:
        trainer.history.label = label
    from floatlab.text.progress import progress_bar

    bar = progress_bar(cfg.total_steps(trainer.n_batches), trainer.history.label, progress=progress)

    def step(t: Trainer, stats: StepStats) -> None:
        bar.update(1)
        if callback is not None:
            callback(t, stats)

    try:
        return trainer.run(callback=step)
    finally:
        bar.close()
