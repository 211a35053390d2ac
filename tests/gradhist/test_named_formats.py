"""The histogram's verdicts in the formats named by rule (P3109, E8M0, eXmY), against what the
rounding door does to the same values element by element (codes classified by exact arithmetic
on the format's own fields), and the unsigned formats' negative values counted as lost."""

from __future__ import annotations

import numpy as np
import pytest

import floatlab as fl
from floatlab import gradhist as H


def _values(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    e = np.r_[rng.integers(-40, 40, 4000), rng.integers(-149, -120, 1000)]
    out: np.ndarray = ((1 + rng.random(5000)) * np.exp2(e) * rng.choice([-1.0, 1.0], 5000)).astype(np.float32)
    return out


@pytest.mark.parametrize("name", ["p3109_k8p3se", "p3109_k8p4uf", "p3109_k6p2ue", "e8m0", "e6m9", "e3m4"])
def test_verdict_matches_the_door(name: str) -> None:
    f = fl.get_format(name)
    x = _values(38)
    v = H.histogram(x).verdict(f)
    codes = fl.encode_array(x, f).astype(np.int64)
    mag = codes & (f.sign_mask - 1)
    lost = np.isnan(fl.round_array(x, f)) | np.isinf(fl.round_array(x, f))  # NaN (unsigned) or inf
    flushed = (mag == 0) & ~lost & f.has_zero
    sub = (mag > 0) & (mag < 1 << f.mantissa_bits) & ~lost & f.has_zero
    assert v.overflow == int(np.count_nonzero(lost))
    assert (v.flushed, v.subnormal) == (int(np.count_nonzero(flushed)), int(np.count_nonzero(sub)))
    if not f.signed:
        assert v.overflow >= int(np.count_nonzero(x < 0))
