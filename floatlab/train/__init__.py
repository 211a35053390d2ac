"""A reference mixed-precision trainer in NumPy: every technique visible, switchable and measured.

The same model trained in fp32, in pure fp16 or bf16, and in mixed precision, with each
technique (master weights, loss scaling, fp32 reductions, ops kept in fp32) switched on and off
on its own. Every conversion to a low-precision format goes through
:func:`floatlab.round_array`; the GEMMs run as on a tensor core (inputs in the compute format,
products and sums in fp32).

>>> import floatlab.train as ft
>>> h = ft.train("mlp", "underflow", "mixed-bf16", epochs=1, seed=0, hidden=(32,))
>>> h.summary()["skipped_steps"], h.meta["policy"]["forward"], h.final["test_accuracy"] > 0.9
(0, 'bf16', True)
"""

from floatlab.train import _moved
from floatlab.train.analysis.memory import Ledger, ledger, ledger_for
from floatlab.train.analysis.plots import compare
from floatlab.train.analysis.runs import final_table
from floatlab.train.analysis.sampling import sample
from floatlab.train.analysis.seeds import late_phase, paired_gap, run_seeds
from floatlab.train.checkpoint import load_checkpoint, save_checkpoint
from floatlab.train.data.datasets import DATASETS, Dataset, get_data, load_digits, make_underflow_task
from floatlab.train.data.text import load_text
from floatlab.train.history import History
from floatlab.train.hostmath import deterministic, host_matmul
from floatlab.train.models import MLP, MODELS, AttentionNet, Model, get_model
from floatlab.train.optim import SGD, AdamW, Optimizer, Proposal, Schedule, clip_grad_norm, global_norm
from floatlab.train.precision.matmul import gemm
from floatlab.train.precision.policy import FP32_OPS, POLICIES, Policy, get_policy, policy_names
from floatlab.train.precision.precision import Precision
from floatlab.train.precision.presets import Preset, get_preset, preset_overrides
from floatlab.train.precision.scaler import SCALER_PRESETS, LossScaler, make_scaler
from floatlab.train.trainer import StepStats, TrainConfig, Trainer, train

__all__ = [
    "DATASETS",
    "FP32_OPS",
    "MLP",
    "MODELS",
    "POLICIES",
    "SCALER_PRESETS",
    "SGD",
    "AdamW",
    "AttentionNet",
    "Dataset",
    "History",
    "Ledger",
    "LossScaler",
    "Model",
    "Optimizer",
    "Policy",
    "Precision",
    "Preset",
    "Proposal",
    "Schedule",
    "StepStats",
    "TrainConfig",
    "Trainer",
    "clip_grad_norm",
    "compare",
    "deterministic",
    "final_table",
    "gemm",
    "get_data",
    "get_model",
    "get_policy",
    "get_preset",
    "global_norm",
    "host_matmul",
    "late_phase",
    "ledger",
    "ledger_for",
    "load_checkpoint",
    "load_digits",
    "load_text",
    "make_scaler",
    "make_underflow_task",
    "paired_gap",
    "policy_names",
    "preset_overrides",
    "run_seeds",
    "sample",
    "save_checkpoint",
    "train",
]

_moved.install()
