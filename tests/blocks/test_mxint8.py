"""MXINT8 (OCP MX v1.0: int8 k / 64, blocks of 32, an E8M0 scale) against gfloat 0.5.2's
``format_info_mxint8``: its scale (``compute_scale_amax``), its codes (``encode_block``) and its
values (``decode_block``), for every deterministic mode gfloat has; stochastic rounding against
the counter-based rule of floatlab.rounding.spec in exact integers."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from gfloat import RoundMode, compute_scale_amax, decode_block, encode_block
from gfloat.formats import format_info_mxint8

from floatlab.blocks import get_mx_format, mx_quantize, mx_round
from floatlab.rounding import RoundingOptions, random_bits_at

MODES = {"rne": RoundMode.TiesToEven, "rtz": RoundMode.TowardZero, "rup": RoundMode.TowardPositive,
         "rdown": RoundMode.TowardNegative}  # fmt: skip


def _blocks(seed: int) -> np.ndarray:
    """Blocks of 32: normal values, blocks whose largest magnitude is a negative value near -2 x
    2^E (where -128 is reached), exact ties of the k / 64 grid, zeros, a block of zeros."""
    rng = np.random.default_rng(seed)
    rows = [rng.standard_normal(32) * 2.0 ** rng.integers(-20, 20) for _ in range(40)]
    for _ in range(40):
        e = int(rng.integers(-30, 30))
        b = rng.uniform(-1.9, 1.9, 32)
        b[int(rng.integers(32))] = -rng.uniform(127 / 64, 2.0 - 2.0**-20)  # the low end
        b[int(rng.integers(32))] = -127.5 / 64  # its tie
        rows.append(b * 2.0**e)
    ties = (rng.integers(-255, 255, 32) / 128.0) * 2.0**-3  # k + 1/2 over 64, under a scale of 1
    ties[0] = 1.5
    rows += [ties, np.zeros(32), np.r_[np.zeros(31), 2.0**-140]]
    return np.array(rows)


@pytest.mark.parametrize("mode", sorted(MODES))
def test_mxint8_codes_scales_and_values_as_gfloat(mode: str) -> None:
    x = _blocks(38)
    q = mx_quantize(x, "mxint8", rounding=mode)
    got = mx_round(x, "mxint8", rounding=mode)
    fi = format_info_mxint8
    for i, row in enumerate(x):
        scale = compute_scale_amax(fi.etype.emax, row)
        enc = list(encode_block(fi, scale, row / scale, MODES[mode]))
        assert int(q.scale_codes[i, 0]) == enc[0], (i, mode)
        assert q.element_codes[i].tolist() == enc[1:], (i, mode)
        want = list(decode_block(fi, enc))
        assert q.dequantize()[i].tolist() == want
        assert got[i].tolist() == want


def test_mxint8_reaches_minus_two_only_from_its_low_end() -> None:
    x = _blocks(7)
    q = mx_quantize(x, "mxint8")
    k = q.element_codes.view(np.int8).astype(int)
    y = x / q.scales()[:, :1]
    assert np.array_equal(k == -128, y <= -127.5 / 64)  # nearest, the tie to the even -128
    assert int(np.count_nonzero(k == -128)) >= 40
    assert q.clamped == int(np.count_nonzero(y > 127.5 / 64))
    assert get_mx_format("MXINT8").bits_per_value == 8.25


def test_mxint8_stochastic_follows_the_random_words() -> None:
    x = _blocks(3)
    got = mx_round(x, "mxint8", rounding="stochastic", rng=11)
    key = RoundingOptions.make("stochastic", rng=11).key
    scales = mx_quantize(x, "mxint8").scales()[:, :1]
    for i, (v, s) in enumerate(zip(x.reshape(-1).tolist(), np.repeat(scales, 32).tolist(), strict=True)):
        y = Fraction(v) / Fraction(s) * 64  # k units
        low = abs(y).__floor__()
        r = abs(y) - low
        up = r != 0 and int(r * 2**32) + random_bits_at(key, i, 32) >= 2**32
        k = min(low + up, 128 if y < 0 else 127) * (-1 if y < 0 else 1)
        assert got.reshape(-1)[i] == k / 64 * s, (i, v)


def test_mxint8_takes_no_e4m3_scale() -> None:
    from floatlab.formats import MXINT8_ELEMENT
    from floatlab.rounding import encode_blocks

    with pytest.raises(ValueError, match="E8M0"):
        encode_blocks(np.ones((1, 4)), MXINT8_ELEMENT, 32, scale="e4m3")
