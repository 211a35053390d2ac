"""Block formats whose element is named by rule (P3109, E3M4) against gfloat's block quantization
(``compute_scale_amax`` with the element's emax, ``encode_block``, ``decode_block``)."""

from __future__ import annotations

import numpy as np
import pytest
from gfloat import BlockFormatInfo, RoundMode, compute_scale_amax, decode_block, encode_block
from gfloat.formats import format_info_ocp_e8m0, format_info_p3109
from gfloat.types import Domain, Signedness

import floatlab as fl
from floatlab.blocks import BlockFormat, mx_quantize


@pytest.mark.parametrize(("k", "p", "extended"), [(8, 3, True), (8, 4, False), (6, 3, True), (4, 2, False)])
def test_p3109_elements_as_gfloat(k: int, p: int, extended: bool) -> None:
    fi = format_info_p3109(k, p, Signedness.Signed, Domain.Extended if extended else Domain.Finite)
    block = BlockFormatInfo("b", fi, 32, format_info_ocp_e8m0)
    ours = BlockFormat("b", fl.get_format(fi.name))
    rng = np.random.default_rng(k * 10 + p)
    x = rng.standard_normal((30, 32)) * np.exp2(rng.integers(-40, 40, (30, 1)))
    q = mx_quantize(x, ours)
    for i, row in enumerate(x):
        scale = compute_scale_amax(fi.emax, row)
        enc = list(encode_block(block, scale, row / scale, RoundMode.TiesToEven))
        assert int(q.scale_codes[i, 0]) == enc[0]
        assert q.element_codes[i].tolist() == enc[1:]
        assert q.dequantize()[i].tolist() == list(decode_block(block, enc))
