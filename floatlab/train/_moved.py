"""Module addresses that moved when floatlab.train was grouped by concept: the old address still
imports, as the module at its new home (one line each, gathered here)."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType

__all__ = ["MOVED", "install"]

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
