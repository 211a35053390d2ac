"""The precision policy, from its name to every rounding it causes in a training step.

* ``policy``: which format each tensor is stored in (:class:`Policy`), the policies and the
  frameworks' presets by name, and the one lookup that knows them all (:func:`get_policy`);
* ``presets``: a framework's recipe as a policy and a loss scaler (:class:`Preset`);
* ``scaler``: loss scaling, static or dynamic (:class:`LossScaler`, :func:`make_scaler`);
* ``precision``: the policy at run time, every storage point of a step (:class:`Precision`);
* ``matmul`` and ``accumulate``: GEMMs in a compute format, and with a narrow accumulator;

(a name exported here never hides a module of the package: ``matmul.matmul`` and
``presets.presets`` are reached through their modules)
* ``update``: the optimizer's step added to the weights in the weights' format.

>>> get_policy("apex-O2").name, Precision("mixed-fp16").fwd.name
('apex-O2', 'fp16')
"""

from floatlab.train.precision.accumulate import accumulate_matmul, accumulator_format
from floatlab.train.precision.matmul import gemm, gemm_format
from floatlab.train.precision.policy import (
    FP32_OPS,
    POLICIES,
    LossScaling,
    MemoryLayout,
    Policy,
    get_policy,
    policy_names,
)
from floatlab.train.precision.precision import Array, Params, Precision, Rounder
from floatlab.train.precision.presets import Preset, get_preset, preset_names, preset_overrides
from floatlab.train.precision.scaler import SCALER_PRESETS, LossScaler, make_scaler
from floatlab.train.precision.update import apply_updates

__all__ = [
    "FP32_OPS",
    "POLICIES",
    "SCALER_PRESETS",
    "Array",
    "LossScaler",
    "LossScaling",
    "MemoryLayout",
    "Params",
    "Policy",
    "Precision",
    "Preset",
    "Rounder",
    "accumulate_matmul",
    "accumulator_format",
    "apply_updates",
    "gemm",
    "gemm_format",
    "get_policy",
    "get_preset",
    "make_scaler",
    "policy_names",
    "preset_names",
    "preset_overrides",
]
