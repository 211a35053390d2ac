"""The random Hadamard transform (RHT) of NVIDIA's NVFP4 recipe: a 16x16 orthogonal matrix
applied to both inputs of the weight-gradient GEMM, along the dimension the GEMM sums over.

An outlier in a block of 16 sets that block's scale and pushes its 15 neighbours towards zero;
mixed by a Hadamard matrix, every output of the block is a +-1/4 combination of all 16 inputs,
so one large value is spread over the whole block and the block's values look Gaussian
(NVIDIA, "Pretraining Large Language Models with NVFP4", arXiv 2509.25149, section 4.2;
Tseng et al., "Training LLMs with MXFP4", arXiv 2502.20586). The matrix is

    M = diag(s) H / 4,

``H`` the 16x16 Sylvester Hadamard matrix (entries +-1, ``H H^T = 16 I``) and ``s`` a fixed
vector of random signs: Transformer Engine's ``get_wgrad_sign_vector`` (its
``transformer_engine/pytorch/tensor/nvfp4_tensor.py``), :data:`WGRAD_SIGNS` here. ``M M^T = I``,
so for the weight gradient ``dW = x^T dy`` (summed over the tokens) the transformed operands
``x'^T = x^T M`` and ``dy' = M^T dy``, taken chunk by chunk of 16 tokens, give the same product:
``x'^T dy' = x^T M M^T dy = x^T dy``. Only the rounding of the quantized operands changes.

Entries of M are +-1/4, so each product is exact in float32 and each output is a float32 sum
of 16 terms: the transform is orthogonal up to that rounding.

>>> import numpy as np
>>> M = rht_matrix()
>>> bool((M @ M.T == np.eye(16, dtype=np.float32)).all())     # exact: sums of sixteen 1/16s
True
>>> x = np.zeros((1, 16), np.float32); x[0, 3] = 8.0           # one outlier in a block
>>> np.unique(np.abs(rht(x, axis=1))).tolist()                 # spread over the 16 values
[2.0]
"""

from __future__ import annotations

from functools import cache

import numpy as np
from numpy.typing import NDArray

from floatlab.train.hostmath import host_matmul

__all__ = ["RHT_SIZE", "WGRAD_SIGNS", "hadamard_matrix", "rht", "rht_matrix"]

#: the size of NVFP4's random Hadamard transform
RHT_SIZE = 16
#: Transformer Engine's fixed random signs for the weight-gradient transform
WGRAD_SIGNS: tuple[int, ...] = (1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1)


def hadamard_matrix(n: int) -> NDArray[np.float32]:
    """The n x n Sylvester Hadamard matrix (entries +-1, rows orthogonal), n a power of two:
    ``H_1 = [1]``, ``H_2n = [[H_n, H_n], [H_n, -H_n]]``.

    >>> hadamard_matrix(4).astype(int).tolist()
    [[1, 1, 1, 1], [1, -1, 1, -1], [1, 1, -1, -1], [1, -1, -1, 1]]
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1 or n & (n - 1):
        raise ValueError(f"n={n!r}: expected a power of two >= 1")
    h = np.ones((1, 1), np.float32)
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h


@cache
def _matrix(signs: tuple[int, ...]) -> NDArray[np.float32]:
    n = len(signs)
    s = np.array(signs, np.float32)[:, None]
    m: NDArray[np.float32] = (s * hadamard_matrix(n)) / np.float32(np.sqrt(n))
    m.setflags(write=False)
    return m


def rht_matrix(signs: tuple[int, ...] = WGRAD_SIGNS) -> NDArray[np.float32]:
    """``diag(signs) H / sqrt(n)`` in float32 (read-only), as Transformer Engine's
    ``get_rht_matrix`` builds it; ``signs`` are +-1, their number a power of two.

    >>> rht_matrix((1, -1))
    array([[ 0.70710677,  0.70710677],
           [-0.70710677,  0.70710677]], dtype=float32)
    """
    if not signs or any(s not in (1, -1) for s in signs):
        raise ValueError(f"signs={signs!r}: expected a power-of-two number of +1 and -1")
    return _matrix(tuple(int(s) for s in signs))


def rht(x: NDArray[np.float32], axis: int, *, transpose: bool = False) -> NDArray[np.float32]:
    """``x`` (float32, 2-d) transformed chunk by chunk of 16 along ``axis``: along the last axis
    each chunk row ``c`` becomes ``c @ M``; along axis 0 each chunk column ``c`` becomes
    ``M^T @ c`` (``transpose=True`` uses ``M^T`` in place of ``M``, the inverse). A length that
    is not a multiple of 16 is padded with zeros first and the result keeps the padded length:
    the transform mixes the padding in, and a GEMM over the padded length still gives the
    untransformed product.

    >>> x = np.arange(32, dtype=np.float32).reshape(2, 16)
    >>> back = rht(rht(x, axis=1), axis=1, transpose=True)
    >>> float(np.abs(back - x).max()) <= 2 * 2.0**-24 * 31      # the inverse, to rounding
    True
    >>> rht(np.ones((3, 20), np.float32), axis=1).shape         # 20 padded to 32
    (3, 32)
    """
    if x.ndim != 2 or axis not in (0, 1, -1, -2):
        raise ValueError(f"an array of shape {x.shape} along axis {axis}: expected a matrix")
    axis %= 2
    if not x.flags.c_contiguous and x.T.flags.c_contiguous:
        # a transposed matrix (x.T of a weight-gradient GEMM): transformed as it lies, along the
        # other axis of its C-contiguous base, with no transposed copy: (x M)^T = M^T x^T
        back: NDArray[np.float32] = rht(x.T, 1 - axis, transpose=transpose).T
        return back
    m = rht_matrix()
    if transpose:
        m = m.T
    n = x.shape[axis]
    padded = -(-n // RHT_SIZE) * RHT_SIZE
    if padded != n:
        pad = [(0, 0), (0, 0)]
        pad[axis] = (0, padded - n)
        x = np.pad(x, pad)
    if axis == 1:
        rows = x.shape[0]
        out: NDArray[np.float32] = host_matmul(x.reshape(rows, padded // RHT_SIZE, RHT_SIZE), m)
        return out.reshape(rows, padded)
    cols = x.shape[1]
    out = host_matmul(m.T, x.reshape(padded // RHT_SIZE, RHT_SIZE, cols))
    return out.reshape(padded, cols)
