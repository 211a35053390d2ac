"""Low-precision GEMM recipes, simulated exactly on the CPU: the fp8 recipes, per-tensor current
scaling (torchao), delayed scaling (Transformer Engine) and block scaling (DeepSeek-V3); and the
microscaling recipes, MXFP8, MXFP6, MXFP4 (OCP MX) and NVFP4 (NVIDIA).

* ``recipe``: the recipe as data (:class:`Fp8Recipe`);
* ``fp8``: the per-operand scalers, the scaled GEMM and the scaling of a whole model
  (:class:`Fp8Scaling`);
* ``scales``: the scale arithmetic of each source, rule by rule (:func:`current_scale`,
  :func:`delayed_update`, :func:`round_down_pow2`, :func:`saturating_cast`);
* ``blockwise``: DeepSeek-V3's tiles and its tile-by-tile GEMM (:func:`tile_quantize`,
  :func:`block_quantize`, :func:`blockwise_matmul`);
* ``micro``: the microscaling recipes (:class:`MicroRecipe`) and their GEMMs
  (:class:`MicroScaling`);
* ``hadamard``: NVFP4's 16x16 random Hadamard transform (:func:`rht`).

See the concept page ``docs/concepts/fp8-recipes.md`` for the formulas and their sources.

>>> import numpy as np
>>> f = Fp8Scaling(Fp8Recipe("blockwise", "e4m3"))
>>> f.matmul("fc", np.float32([[1.75, 3.5]]), "input", np.float32([[0.875], [0.4375]]), "weight").tolist()
[[3.0625]]
"""

from floatlab.train.recipes.blockwise import TileCast, block_quantize, blockwise_matmul, tile_quantize
from floatlab.train.recipes.fp8 import (
    STATS,
    Fp8Scaling,
    OperandScaler,
    OperandStats,
    Quantized,
    scaled_matmul,
)
from floatlab.train.recipes.hadamard import RHT_SIZE, WGRAD_SIGNS, hadamard_matrix, rht, rht_matrix
from floatlab.train.recipes.micro import GEMMS, MICRO_KINDS, MicroRecipe, MicroScaling, OperandLog, gemm_of
from floatlab.train.recipes.recipe import AMAX_ALGOS, FP8_FORMATS, RECIPES, ROLES, Fp8Recipe
from floatlab.train.recipes.scales import (
    AMAX_EPS,
    E4M3,
    E5M2,
    current_scale,
    delayed_update,
    round_down_pow2,
    saturating_cast,
)

__all__ = [
    "AMAX_ALGOS",
    "AMAX_EPS",
    "E4M3",
    "E5M2",
    "FP8_FORMATS",
    "GEMMS",
    "MICRO_KINDS",
    "RECIPES",
    "RHT_SIZE",
    "ROLES",
    "STATS",
    "WGRAD_SIGNS",
    "Fp8Recipe",
    "Fp8Scaling",
    "MicroRecipe",
    "MicroScaling",
    "OperandLog",
    "OperandScaler",
    "OperandStats",
    "Quantized",
    "TileCast",
    "block_quantize",
    "blockwise_matmul",
    "current_scale",
    "delayed_update",
    "gemm_of",
    "hadamard_matrix",
    "rht",
    "rht_matrix",
    "round_down_pow2",
    "saturating_cast",
    "scaled_matmul",
    "tile_quantize",
]
