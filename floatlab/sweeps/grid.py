"""A sweep's grid: every combination of the values of its axes, each a run's full configuration.

An axis is a :class:`~floatlab.train.TrainConfig` field (``precision``, ``seed``, ``lr``,
``hidden``, ...) or a field of the precision policy (``loss_scaling``, ``static_scale``,
``rounding``, ``amax_history``, ...), which goes into the config's ``overrides``. A
precision names a policy or a framework preset alike. Every configuration is built and its policy
resolved when the grid is made, so that an unknown key or value is one line naming it and the
choices, before any run starts.

>>> g = Grid({"precision": ["fp32", "bf16"], "seed": [0, 1]}, {"data": "underflow", "steps": 2})
>>> len(g), [(t.config.precision, t.config.seed) for t in g.tasks][:3]
(4, [('fp32', 0), ('fp32', 1), ('bf16', 0)])
>>> one = Grid({"precision": ["fp32"], "seed": [0]}, {"data": "underflow", "steps": 2})
>>> g.tasks[0].run_id == one.tasks[0].run_id   # the key is the configuration, not the grid
True
>>> Grid({"sead": [0]})  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: unknown sweep key 'sead': did you mean seed? (choices: model, data, precision, ...
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import itertools
import json
import math
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from floatlab.train.config import RENAMED_SETTINGS, TrainConfig

__all__ = [
    "CONFIG_COLUMNS",
    "CONFIG_KEYS",
    "MAX_FILE_BYTES",
    "MAX_FILE_VALUES",
    "MAX_RUNS",
    "POLICY_KEYS",
    "Grid",
    "Task",
    "load_grid_file",
    "parse_seeds",
    "sweep_keys",
]

#: the most runs a grid may hold: its size is the product of its axes' lengths, checked before any
#: configuration (or any list of seeds) is built
MAX_RUNS = 10_000
#: the largest sweep file read (bytes)
MAX_FILE_BYTES = 1 << 20
#: the most values (scalars, lists and tables, each alias counted as what it stands for) a sweep
#: file may hold: a few hundred bytes of nested YAML aliases stand for billions
MAX_FILE_VALUES = 100_000

#: the TrainConfig fields a sweep may vary or fix (``overrides`` is filled from :data:`POLICY_KEYS`)
CONFIG_KEYS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(TrainConfig) if f.name != "overrides")
#: a renamed setting's first name (what :func:`run_key` hashes, so that a run keeps its name)
OLD_NAMES: dict[str, str] = {new: old for old, new in RENAMED_SETTINGS.items()}
#: where a run's arrays live: the one setting outside TrainConfig
_EXTRA_KEYS = ("backend",)
#: the table's configuration columns (:meth:`Task.columns`): every TrainConfig field, the policy
#: overrides among them, and the backend; what a summary may group by
CONFIG_COLUMNS: tuple[str, ...] = (*(f.name for f in dataclasses.fields(TrainConfig)), *_EXTRA_KEYS)


def _policy_keys() -> tuple[str, ...]:
    from floatlab.train.precision.policy import Policy, get_policy

    fields = [f.name for f in dataclasses.fields(Policy) if f.name not in ("name", "recipe")]
    for name in ("fp8-delayed", "nvfp4"):  # the recipes' fields change the recipe
        recipe = get_policy(name).recipe
        assert recipe is not None
        fields += [f.name for f in dataclasses.fields(recipe) if f.name != "kind" and f.name not in fields]
    return tuple(fields)


#: the policy fields a sweep may vary or fix (they override the named precision's)
POLICY_KEYS: tuple[str, ...] = _policy_keys()


def sweep_keys() -> tuple[str, ...]:
    """Every key a grid or its fixed settings may use.

    >>> "precision" in sweep_keys() and "static_scale" in sweep_keys()
    True
    """
    return (*CONFIG_KEYS, *POLICY_KEYS, *_EXTRA_KEYS)


def _check_key(key: str) -> str:
    keys = sweep_keys()
    k = key.strip().replace("-", "_")
    if k in ("seeds", "policies"):  # the natural plurals
        k = k[:-1] if k == "seeds" else "precision"
    if k not in keys:
        close = difflib.get_close_matches(k, keys, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}? " if close else ""
        raise ValueError(f"unknown sweep key {key!r}: {hint}(choices: {', '.join(keys)})")
    return k


@dataclass(frozen=True)
class Task:
    """One run of a sweep: its configuration, where its arrays live, its place in the grid and its
    key (:attr:`run_id`: a hash of the full configuration and the floatlab version).

    >>> t = Grid({"seed": [3]}, {"data": "underflow"}).tasks[0]
    >>> t.config.seed, t.index, len(t.run_id)
    (3, 0, 16)
    """

    config: TrainConfig
    backend: str
    index: int
    run_id: str

    def columns(self) -> dict[str, Any]:
        """The configuration as the table's columns: every TrainConfig field (tuples as text such as
        ``"8,8"``, the policy overrides as sorted JSON) and the backend.

        >>> Grid({"hidden": [(8, 8)]}).tasks[0].columns()["hidden"]
        '8,8'
        """
        out: dict[str, Any] = {}
        for k, v in self.config.to_dict().items():
            if k == "overrides":
                out[k] = json.dumps(v, sort_keys=True, default=str)
            elif isinstance(v, list):
                out[k] = ",".join(str(x) for x in v)
            else:
                out[k] = v
        out["backend"] = self.backend
        return out


def run_key(config: TrainConfig, backend: str = "numpy") -> str:
    """The hash that names a run: its full configuration and the floatlab version (16 hex digits).

    >>> run_key(TrainConfig(seed=1)) != run_key(TrainConfig(seed=2))
    True
    """
    from floatlab import __version__

    hashed = {OLD_NAMES.get(k, k): v for k, v in config.to_dict().items()}
    settings = {"config": hashed, "backend": backend, "floatlab": __version__}
    blob = json.dumps(settings, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


class Grid:
    """The runs of a sweep: ``axes`` maps each key to its values (every combination is a run, in
    the order the axes are given, the last varying fastest); ``fixed`` holds the settings shared by
    every run. A key may not be both. Each configuration is checked (its policy resolved, its model
    and data matched) here.

    >>> Grid({"lr": [0.1, 0.01]}, {"data": "underflow", "lr": 1.0})
    Traceback (most recent call last):
    ...
    ValueError: sweep key 'lr' is both an axis and a fixed setting: expected one of them
    """

    def __init__(self, axes: Mapping[str, Sequence[Any]], fixed: Mapping[str, Any] | None = None) -> None:
        from floatlab.train.data.text import check_model_and_data

        given: dict[str, Sequence[Any]] = {}
        for key, values in axes.items():
            k = _check_key(key)
            vals = (
                [values] if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) else values
            )
            if not len(vals):
                raise ValueError(f"sweep key {key!r} has no values: expected at least one")
            given[k] = vals
        _check_size({k: len(v) for k, v in given.items()})  # before any axis is listed
        self.axes: dict[str, list[Any]] = {k: list(v) for k, v in given.items()}
        if "precision" in self.axes:
            self.axes["precision"] = _precisions(self.axes["precision"])
        self.fixed: dict[str, Any] = {_check_key(k): v for k, v in (fixed or {}).items()}
        both = sorted(set(self.axes) & set(self.fixed))
        if both:
            raise ValueError(
                f"sweep key {both[0]!r} is both an axis and a fixed setting: expected one of them"
            )
        self.tasks: list[Task] = []
        seen: set[str] = set()
        for combo in itertools.product(*self.axes.values()):
            cfg, backend = self._config({**self.fixed, **dict(zip(self.axes, combo, strict=True))})
            check_model_and_data(cfg.model, cfg.data)
            key = run_key(cfg, backend)
            if key in seen:
                raise ValueError(f"sweep runs {_describe(cfg)} twice: expected distinct values on each axis")
            seen.add(key)
            self.tasks.append(Task(cfg, backend, len(self.tasks), key))

    @staticmethod
    def _config(settings: Mapping[str, Any]) -> tuple[TrainConfig, str]:
        overrides: dict[str, Any] = {}
        config: dict[str, Any] = {}
        backend = "numpy"
        for k, v in settings.items():
            if k == "backend":
                backend = str(v)
            elif k in POLICY_KEYS:
                overrides[k] = v
            elif k == "precision" and isinstance(v, str):
                config[k] = _precision_name(v)
            else:
                config[k] = tuple(v) if isinstance(v, list) else v
        try:
            cfg = TrainConfig(overrides=overrides, **config)
        except TypeError as e:  # a value of the wrong kind for its field
            raise ValueError(f"sweep settings {dict(settings)!r}: {e}") from None
        cfg.make_policy()  # an unknown precision, preset or policy value: one line, before any run
        return cfg, backend

    def __len__(self) -> int:
        return len(self.tasks)

    def __iter__(self) -> Iterator[Task]:
        return iter(self.tasks)


def _describe(cfg: TrainConfig) -> str:
    return f"precision={cfg.precision} seed={cfg.seed}"


def _check_size(lengths: Mapping[str, int]) -> None:
    """Refuse a grid of more than :data:`MAX_RUNS` runs, from its axes' lengths alone.

    >>> _check_size({"seed": 5000, "lr": 3})
    Traceback (most recent call last):
    ...
    ValueError: sweep grid of 15000 runs (seed: 5000 x lr: 3): expected at most 10000 runs
    """
    runs = math.prod(lengths.values())
    if runs > MAX_RUNS:
        shape = " x ".join(f"{k}: {n}" for k, n in lengths.items())
        raise ValueError(f"sweep grid of {runs} runs ({shape}): expected at most {MAX_RUNS} runs")


def _precision_name(name: str) -> str:
    """The policy lookup's own name for ``name`` (``"FP16"``, ``"half"``: ``"fp16"``), so that one
    policy is one configuration, whatever it was called; an unknown name is the lookup's one line.

    >>> _precision_name("AMP"), _precision_name("apex_o2")
    ('mixed-fp16', 'apex-O2')
    """
    from floatlab.train.precision.presets import resolve_policy

    return resolve_policy(name).name


def _precisions(values: list[Any]) -> list[Any]:
    """The precision axis under the lookup's names; a policy named twice is refused, naming both.

    >>> _precisions(["fp32", "FP16"])
    ['fp32', 'fp16']
    >>> _precisions(["fp16", "half"])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: sweep axis precision names the policy fp16 twice ('fp16' and 'half'): expected ...
    """
    out: list[Any] = []
    first: dict[str, Any] = {}
    for v in values:
        name = _precision_name(v) if isinstance(v, str) else v  # (TrainConfig refuses a non-string)
        if isinstance(name, str) and name in first:
            raise ValueError(
                f"sweep axis precision names the policy {name} twice ({first[name]!r} and {v!r}): "
                "expected each policy once"
            )
        if isinstance(name, str):
            first[name] = v
        out.append(name)
    return out


def parse_seeds(text: str) -> list[int]:
    """Seeds written as ``0-4``, ``0,2,5`` or both (``0-2,7``); at most :data:`MAX_RUNS` of them,
    counted from the ranges' ends before any is listed.

    >>> parse_seeds("0-3,7")
    [0, 1, 2, 3, 7]
    >>> parse_seeds("3-1")
    Traceback (most recent call last):
    ...
    ValueError: seeds '3-1': expected seeds such as 0-4 or 0,2,5 (a range low-high with low <= high)
    >>> parse_seeds("0-99999")
    Traceback (most recent call last):
    ...
    ValueError: seeds '0-99999': 100000 seeds, more than a sweep's runs: expected at most 10000
    >>> parse_seeds("0-2,1")
    Traceback (most recent call last):
    ...
    ValueError: seeds '0-2,1': seed 1 given twice: expected each seed once
    """
    spans: list[range] = []
    bad = ValueError(
        f"seeds {text!r}: expected seeds such as 0-4 or 0,2,5 (a range low-high with low <= high)"
    )
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            a = int(lo)
            b = int(hi) if sep else a
        except ValueError:
            raise bad from None
        if a < 0 or b < a:
            raise bad
        spans.append(range(a, b + 1))
    if not spans:
        raise bad
    listed = sum(len(r) for r in spans)  # (a repeated seed counts each time it is listed)
    if listed > MAX_RUNS:
        raise ValueError(
            f"seeds {text!r}: {listed} seeds, more than a sweep's runs: expected at most {MAX_RUNS}"
        )
    seeds: dict[int, None] = {}
    for seed in itertools.chain.from_iterable(spans):
        if seed in seeds:
            raise ValueError(f"seeds {text!r}: seed {seed} given twice: expected each seed once")
        seeds[seed] = None
    return list(seeds)


def load_grid_file(path: str | os.PathLike[str]) -> tuple[dict[str, list[Any]], dict[str, Any]]:
    """The axes and fixed settings of a TOML or YAML sweep file: a table ``grid`` (each key a list of
    values) and a table ``fixed`` (each key one value); ``seeds`` may be written ``"0-4"``. The keys
    come back checked and under their own names (``seeds`` is ``seed``). A file holds at most
    :data:`MAX_FILE_BYTES` bytes and :data:`MAX_FILE_VALUES` values (an alias counts as what it
    stands for), checked before anything is built from it.

    >>> import tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "s.toml")
    >>> text = '[grid]\\nprecision = ["fp32", "bf16"]\\nseeds = "0-2"\\n[fixed]\\nsteps = 3\\n'
    >>> with open(p, "w") as fh:
    ...     _ = fh.write(text)
    >>> load_grid_file(p)
    ({'precision': ['fp32', 'bf16'], 'seed': [0, 1, 2]}, {'steps': 3})
    """
    from floatlab.io import first_bytes

    name = os.fspath(path)
    first_bytes(name, "a sweep file (.toml, .yaml)")
    low = name.lower()
    with open(name, "rb") as fh:
        raw = fh.read(MAX_FILE_BYTES + 1)
    if len(raw) > MAX_FILE_BYTES:
        raise ValueError(
            f"sweep file {name!r} is larger than a sweep file may be: expected at most {MAX_FILE_BYTES} bytes"
        )
    try:
        if low.endswith(".toml"):
            if sys.version_info >= (3, 11):
                import tomllib
            else:  # pragma: no cover - Python 3.10
                import tomli as tomllib
            doc: Any = tomllib.loads(raw.decode("utf-8"))
        elif low.endswith((".yaml", ".yml")):
            import yaml  # type: ignore[import-untyped,unused-ignore]

            doc = yaml.safe_load(raw.decode("utf-8"))
        else:
            raise ValueError(f"sweep file {name!r}: expected a .toml, .yaml or .yml file")
    except ValueError:
        raise
    except Exception as e:  # a syntax error of either parser
        raise ValueError(f"sweep file {name!r}: {e}") from None
    _check_values(doc, name)
    if not isinstance(doc, dict) or not set(doc) <= {"grid", "fixed"}:
        raise ValueError(f"sweep file {name!r}: expected the tables grid and fixed only")
    grid, fixed = doc.get("grid", {}), doc.get("fixed", {})
    if not isinstance(grid, dict) or not isinstance(fixed, dict):
        raise ValueError(f"sweep file {name!r}: expected grid and fixed to be tables of keys")
    axes: dict[str, list[Any]] = {}
    for k, v in grid.items():
        key = _check_key(str(k))
        if key == "seed" and isinstance(v, str):
            v = parse_seeds(v)
        axes[key] = list(v) if isinstance(v, list) else [v]
    return axes, {_check_key(str(k)): v for k, v in fixed.items()}


def _check_values(doc: Any, name: str) -> None:
    """Refuse a document of more than :data:`MAX_FILE_VALUES` values, counting each value every
    time it is reached (a YAML alias is a reference to one object, which a repr, a JSON dump or a
    tuple of its parts would write out whole); the walk stops at the limit, so a document that
    refers to itself ends it too.

    >>> x = [0] * 10
    >>> _check_values({"grid": {"lr": [x] * 10}}, "s.yaml")
    >>> _check_values({"grid": {"lr": [[x] * 1000] * 1000}}, "s.yaml")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: sweep file 's.yaml' holds more than 100000 values (counting what each alias stands ...
    """
    stack, count = [doc], 1
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            parts: Sequence[Any] = [*v.keys(), *v.values()]
        elif isinstance(v, (list, tuple)):
            parts = v
        else:
            continue
        count += len(parts)  # counted as they are reached, so the stack never outgrows the limit
        if count > MAX_FILE_VALUES:
            raise ValueError(
                f"sweep file {name!r} holds more than {MAX_FILE_VALUES} values (counting what each alias "
                "stands for): expected a smaller grid"
            )
        stack.extend(parts)
