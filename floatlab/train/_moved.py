"""Names that moved, one line each, gathered here: module addresses that moved when floatlab.train
was grouped by concept (the old address still imports, as the module at its new home), and the
settings of a run that were renamed (a checkpoint, a sweep table or a call that uses the old key
is read under the new one).

>>> renamed_settings({"precision": "bf16", "policy": {"loss_scaling": "none"}})
{'precision': 'bf16', 'overrides': {'loss_scaling': 'none'}}
>>> renamed_settings({"policy": {}, "overrides": {}})
Traceback (most recent call last):
...
ValueError: settings give both 'policy' and 'overrides': expected 'overrides' only ('policy' is its old name)
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Mapping
from types import ModuleType
from typing import Any

__all__ = ["MOVED", "RENAMED_SETTINGS", "install", "renamed_settings"]

#: old address -> new home
MOVED: dict[str, str] = {
    "floatlab.train.accumulate": "floatlab.train.precision.accumulate",
    "floatlab.train.convnet": "floatlab.train.models.convnet",
    "floatlab.train.fused": "floatlab.train.models.fused",
    "floatlab.train.matmul": "floatlab.train.precision.matmul",
    "floatlab.train.memory": "floatlab.train.analysis.memory",
    "floatlab.train.model": "floatlab.train.models",
    "floatlab.train.operands": "floatlab.train.analysis.operands",
    "floatlab.train.policy": "floatlab.train.precision.policy",
    "floatlab.train.presets": "floatlab.train.precision.presets",
    "floatlab.train.sampling": "floatlab.train.analysis.sampling",
    "floatlab.train.scaler": "floatlab.train.precision.scaler",
    "floatlab.train.seeds": "floatlab.train.analysis.seeds",
    "floatlab.train.seq_layers": "floatlab.train.models.seq_layers",
    "floatlab.train.text": "floatlab.train.data.text",
    "floatlab.train.transformer": "floatlab.train.models.transformer",
    "floatlab.train.update": "floatlab.train.precision.update",
}

#: a run's settings (TrainConfig fields, sweep table columns): old key -> new key
RENAMED_SETTINGS: dict[str, str] = {
    "policy": "overrides",
}


def renamed_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` with each old key of :data:`RENAMED_SETTINGS` under its new name, in place.

    >>> renamed_settings({"seed": 1, "policy": {"rounding": "rtz"}})
    {'seed': 1, 'overrides': {'rounding': 'rtz'}}
    """
    out: dict[str, Any] = {}
    for k, v in settings.items():
        new = RENAMED_SETTINGS.get(k, k)
        if new != k and new in settings:
            raise ValueError(
                f"settings give both {k!r} and {new!r}: expected {new!r} only ({k!r} is its old name)"
            )
        out[new] = v
    return out


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old address in :data:`MOVED` and hands back the module at its new home."""

    def __init__(self) -> None:
        self.own_specs: dict[str, importlib.machinery.ModuleSpec | None] = {}

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(MOVED[spec.name])
        self.own_specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # the import system stamped the old address's spec on the module: give it its own back
        old = module.__spec__.name if module.__spec__ is not None else ""
        module.__spec__ = self.own_specs.pop(old, module.__spec__)


def install() -> None:
    """Let the old addresses import (once per process)."""
    if not any(isinstance(f, _Alias) for f in sys.meta_path):
        sys.meta_path.append(_Alias())
