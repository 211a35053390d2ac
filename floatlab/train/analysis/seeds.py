"""Claims about training measured over several seeds, never from one lucky run.

:func:`run_seeds` trains the same configuration under several policies, once per seed (the
seed fixes the initial weights, the batch order and the random bits of stochastic rounding;
the data are the same for every run). :func:`paired_gap` compares two policies seed by seed:
the mean of the per-seed differences with a two-sided Student-t confidence interval, so that a
statement such as "pure bf16 ends at least 0.05 bits/char worse than fp32" is checked against
the interval's near end, not against one run.

>>> gap = paired_gap([2.0, 2.1, 2.2], [1.5, 1.7, 1.6])
>>> round(gap.mean, 6), gap.n, gap.low < gap.mean < gap.high
(0.5, 3, True)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from floatlab.train.data.datasets import Dataset, get_data
from floatlab.train.history import History

__all__ = ["Gap", "LatePhase", "final_metric", "late_phase", "paired_gap", "run_seeds", "t_quantile"]


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t distribution with ``df`` degrees of freedom.

    Uses SciPy when it is installed (it comes with scikit-learn); otherwise a Cornish-Fisher
    expansion around the normal quantile, within 0.5 % of the exact value from 3 degrees of freedom.

    >>> round(t_quantile(0.975, 4), 3)   # the textbook 2.776
    2.776
    """
    if not 0.0 < p < 1.0 or df < 1:
        raise ValueError(f"t quantile p={p!r}, df={df!r}: expected 0 < p < 1 and df >= 1")
    try:
        from scipy.stats import t as student_t  # type: ignore[import-untyped,unused-ignore]

        return float(student_t.ppf(p, df))
    except ImportError:  # pragma: no cover - scipy ships with scikit-learn
        z = math.sqrt(2.0) * _erfinv(2.0 * p - 1.0)
        g1 = (z**3 + z) / 4
        g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
        g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
        return z + g1 / df + g2 / df**2 + g3 / df**3


def _erfinv(y: float) -> float:  # pragma: no cover - only without scipy
    # Newton on erf, from a good start
    x = 0.0
    for _ in range(60):
        x -= (math.erf(x) - y) / (2.0 / math.sqrt(math.pi) * math.exp(-x * x))
    return x


@dataclass(frozen=True)
class Gap:
    """The per-seed difference ``a - b``: its mean, its confidence interval and the seeds' count.

    >>> Gap(0.3, 0.1, 0.5, 5, 0.95).describe("bits/char")
    '+0.3 bits/char (95% CI +0.1 to +0.5, 5 seeds)'
    """

    mean: float
    low: float
    high: float
    n: int
    level: float

    def describe(self, unit: str = "") -> str:
        u = f" {unit}" if unit else ""
        return (
            f"{self.mean:+.3g}{u} ({round(100 * self.level)}% CI {self.low:+.3g} to {self.high:+.3g}, "
            f"{self.n} seeds)"
        )


def paired_gap(a: Sequence[float], b: Sequence[float], level: float = 0.95) -> Gap:
    """Mean and ``level`` confidence interval of ``a[i] - b[i]`` over the seeds ``i``.

    >>> g = paired_gap([1.0, 1.0], [0.0, 0.0])   # no spread: the interval is the point
    >>> (g.mean, g.low, g.high)
    (1.0, 1.0, 1.0)
    >>> paired_gap([1.0], [0.0])
    Traceback (most recent call last):
    ...
    ValueError: 1 paired values: expected at least 2 (one per seed)
    """
    if len(a) != len(b):
        raise ValueError(f"{len(a)} and {len(b)} values: expected one of each per seed")
    d = [float(x) - float(y) for x, y in zip(a, b, strict=True)]
    n = len(d)
    if n < 2:
        raise ValueError(f"{n} paired values: expected at least 2 (one per seed)")
    if not all(math.isfinite(v) for v in d):
        return Gap(math.nan, math.nan, math.nan, n, level)
    mean = sum(d) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in d) / (n - 1))
    half = t_quantile(0.5 + level / 2, n - 1) * sd / math.sqrt(n)
    return Gap(mean, mean - half, mean + half, n, level)


def final_metric(history: History, name: str = "test_loss") -> float:
    """The last evaluation's ``name`` (``test_loss``, ``test_accuracy``, ...); NaN when the run
    has none (it stopped before its first evaluation) or diverged.

    >>> h = History("x"); h.log_eval(epoch=1, step=5, train_loss=1.0, test_loss=0.5, test_accuracy=0.9)
    >>> final_metric(h)
    0.5
    """
    values = history.evals.get(name) or []
    if not values or history.meta.get("stopped"):
        return math.nan
    return float(values[-1])


def run_seeds(
    policies: Sequence[str],
    seeds: Sequence[int],
    *,
    dataset: Dataset | None = None,
    callback: Callable[[str, int, History], None] | None = None,
    executor: str = "serial",
    workers: int | None = None,
    scheduler: str | None = None,
    progress: bool | None = None,
    **config: Any,
) -> dict[str, list[History]]:
    """Train every policy once per seed with the same :class:`~floatlab.train.trainer.TrainConfig`
    settings ``config``; return the histories by policy, in the order of ``seeds``: what
    :func:`~floatlab.train.analysis.plots.compare` draws and
    :func:`~floatlab.train.analysis.runs.final_table` sums up.

    ``executor``: ``"serial"`` (here, one run after another; ``dataset``, or the config's data set
    loaded once, is shared by every run, and ``callback(policy, seed, history)`` is called after
    each), ``"process"`` (a local pool of ``workers`` processes) or ``"dask"`` (a local cluster, or
    the one at ``scheduler``): the grid of policies and seeds on the sweeps' executors
    (:func:`floatlab.sweeps.run_histories`), the same bits on each. ``progress``: a bar of the runs
    (None: in a notebook or a terminal).

    >>> out = run_seeds(["fp32", "bf16"], [0, 1], model="mlp", data="underflow", hidden=(8,), steps=3,
    ...                 progress=False)
    >>> {p: [h.n_steps for h in hs] for p, hs in out.items()}
    {'fp32': [3, 3], 'bf16': [3, 3]}
    >>> run_seeds(["fp32"], [0, 0], data="underflow")
    Traceback (most recent call last):
    ...
    ValueError: seed 0 given twice: expected each seed once
    """
    from floatlab.text.progress import progress_bar
    from floatlab.train.trainer import TrainConfig, Trainer

    policies, seeds = list(policies), [int(s) for s in seeds]
    if not policies or not seeds:
        raise ValueError(f"{len(policies)} policies and {len(seeds)} seeds: expected at least one of each")
    for what, items in (("policy", policies), ("seed", seeds)):
        twice = next((x for i, x in enumerate(items) if x in items[:i]), None)
        if twice is not None:
            raise ValueError(f"{what} {twice!r} given twice: expected each {what} once")
    base = TrainConfig.from_dict(config)
    configs = {(p, s): dataclasses.replace(base, precision=p, seed=s) for p in policies for s in seeds}
    for cfg in configs.values():
        cfg.make_policy()  # (an unknown policy or a bad override: refused before any run)
    if executor != "serial":
        if dataset is not None or callback is not None:
            raise ValueError(
                f"executor={executor!r} with a dataset object or a callback: expected executor='serial' "
                "for those (the pool's workers read the data set by its name)"
            )
        from floatlab.sweeps import Grid, run_histories

        fixed = {k: v for k, v in base.to_dict().items() if k in config and k != "overrides"} | base.overrides
        grid = Grid({"precision": policies, "seed": seeds}, fixed)
        ran = run_histories(grid, executor=executor, workers=workers, scheduler=scheduler, progress=progress)
        done = iter(ran)
        pooled: dict[str, list[History]] = {p: [] for p in policies}
        for policy in policies:  # (the grid's order: policy by policy, seed by seed)
            for _ in seeds:
                history = next(done)
                history.label = policy
                pooled[policy].append(history)
        return pooled
    shared = (
        dataset if dataset is not None else get_data(base.data, seed=base.data_seed, context=base.context)
    )
    out: dict[str, list[History]] = {p: [] for p in policies}
    bar = progress_bar(len(configs), "runs", progress=progress, unit="run")
    try:
        for (policy, seed), cfg in configs.items():
            bar.set_postfix_str(f"{policy} seed {seed}")
            history = Trainer.from_config(cfg, shared).run()
            history.label = policy
            out[policy].append(history)
            bar.update(1)
            if callback is not None:
                callback(policy, seed, history)
    finally:
        bar.close()
    return out


@dataclass
class LatePhase:
    """What :func:`late_phase` measured: per seed, the fp32 run of phase 1, and per variant the runs of
    phase 2 that started from its weights (in the order of the seeds).

    >>> lp = LatePhase([0], [], {"fp32": []})
    >>> lp.final("fp32")
    []
    """

    seeds: list[int]
    phase1: list[Any]
    runs: dict[str, list[Any]]

    def final(self, variant: str, name: str = "test_loss") -> list[float]:
        """The last evaluation's ``name`` of each seed's phase-2 run of ``variant``."""
        return [final_metric(t.history, name) for t in self.runs[variant]]


def late_phase(
    variants: Mapping[str, tuple[str, dict[str, Any]]] | Sequence[str],
    seeds: Sequence[int],
    *,
    first: Mapping[str, Any],
    late: Mapping[str, Any],
    dataset: Dataset | None = None,
    callback: Callable[[int, LatePhase], None] | None = None,
    **config: Any,
) -> LatePhase:
    """The late phase of training, where a format's resolution shows, measured over seeds: for each
    seed, train in fp32 with the settings ``config`` and ``first`` (phase 1), then go on from those
    same weights with ``config`` and ``late`` (phase 2: typically a tenth of the learning rate) once
    per variant. Every variant starts phase 2 from the same point, so the seed's luck cancels and
    what is left is the format. ``variants`` are policy names, or labels mapped to ``(precision,
    overrides)``; phase 2 of seed ``s`` uses seed ``100 + s`` (a fresh batch order).
    ``callback(seed, so_far)`` is called after each seed.

    >>> lp = late_phase(["fp32", "bf16"], [0, 1], first={"steps": 4}, late={"steps": 2},
    ...                 model="mlp", data="underflow", hidden=(8,))
    >>> [h.history.n_steps for h in lp.phase1], [t.history.n_steps for t in lp.runs["bf16"]]
    ([4, 4], [2, 2])
    """
    from floatlab.train.trainer import TrainConfig, Trainer

    plan = {v: (v, {}) for v in variants} if not isinstance(variants, Mapping) else dict(variants)
    base = TrainConfig.from_dict({**config, **first})
    shared = (
        dataset if dataset is not None else get_data(base.data, seed=base.data_seed, context=base.context)
    )
    out = LatePhase(list(seeds), [], {label: [] for label in plan})
    for seed in seeds:
        start = Trainer.from_config(dataclasses.replace(base, precision="fp32", seed=seed), shared)
        start.run()
        out.phase1.append(start)
        for label, (precision, overrides) in plan.items():
            phase2 = {"precision": precision, "seed": 100 + seed, "overrides": overrides}
            cfg = TrainConfig.from_dict({**config, **late, **phase2})
            trainer = Trainer.from_config(cfg, shared)
            trainer.start_from(start.params, start.buffers)
            trainer.run()
            out.runs[label].append(trainer)
        if callback is not None:
            callback(seed, out)
    return out
