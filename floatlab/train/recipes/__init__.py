"""fp8 training recipes, simulated exactly on the CPU: per-tensor current scaling (torchao),
delayed scaling (Transformer Engine) and block scaling (DeepSeek-V3).

* ``recipe``: the recipe as data (:class:`Fp8Recipe`);
* ``fp8``: the per-operand scalers, the scaled GEMM and the scaling of a whole model
  (:class:`Fp8Scaling`);
* ``scales``: the scale arithmetic of each source, rule by rule (:func:`current_scale`,
  :func:`delayed_update`, :func:`round_down_pow2`, :func:`saturating_cast`);
* ``blockwise``: DeepSeek-V3's tiles and its tile-by-tile GEMM (:func:`tile_quantize`,
  :func:`block_quantize`, :func:`blockwise_matmul`).

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
    "RECIPES",
    "ROLES",
    "STATS",
    "Fp8Recipe",
    "Fp8Scaling",
    "OperandScaler",
    "OperandStats",
    "Quantized",
    "TileCast",
    "block_quantize",
    "blockwise_matmul",
    "current_scale",
    "delayed_update",
    "round_down_pow2",
    "saturating_cast",
    "scaled_matmul",
    "tile_quantize",
]
