"""Formats named on the command line by rule (eXmY, P3109) and decode's list of formats, against
numpy, ml_dtypes, gfloat and exact rational arithmetic."""

from __future__ import annotations

import json
from fractions import Fraction
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from gfloat import decode_float
from gfloat.formats import format_info_p3109
from gfloat.types import Domain, Signedness

from floatlab.cli import main


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _nearest_even(x: Fraction, m: int) -> Fraction:
    """x (in the normal range) rounded to m fraction bits, ties to even, in exact arithmetic."""
    e = 0
    while x >= 2 ** (e + 1):
        e += 1
    while x < 2**e:
        e -= 1
    step = Fraction(2) ** (e - m)
    q, r = divmod(x, step)
    if 2 * r > step or (2 * r == step and q % 2 == 1):
        q += 1
    return q * step


def test_encode_names_a_custom_format(capsys: pytest.CaptureFixture[str]) -> None:
    data = run_json(capsys, "encode", "0.1", "-f", "e6m9")
    rows = data if isinstance(data, list) else [data]
    text = json.dumps(rows)
    assert "e6m9" in text
    want = float(_nearest_even(Fraction(1, 10), 9))
    assert str(want) in text or repr(want) in text


def test_decode_an_exmy_layout_and_a_list(capsys: pytest.CaptureFixture[str]) -> None:
    (one,) = run_json(capsys, "decode", "0x7bff", "-f", "e5m10")
    assert float(one["value"]) == float(np.uint16(0x7BFF).view(np.float16)) == 65504.0
    both = run_json(capsys, "decode", "0x7bff", "-f", "fp16,bf16")
    assert [float(d["value"]) for d in both] == [65504.0, float(np.uint16(0x7BFF).view(ml_dtypes.bfloat16))]
    e3m4 = run_json(capsys, "decode", "0x70", "0x6f", "-f", "e3m4", "-f", "e8m0")
    want = [
        np.uint8(c).view(t) for c in (0x70, 0x6F) for t in (ml_dtypes.float8_e3m4, ml_dtypes.float8_e8m0fnu)
    ]
    assert [float(d["value"]) for d in e3m4] == [float(w) for w in want]


def test_decode_a_p3109_code(capsys: pytest.CaptureFixture[str]) -> None:
    fi = format_info_p3109(8, 3, Signedness.Unsigned, Domain.Finite)
    got = run_json(capsys, "decode", "0x7f", "0xfe", "-f", "p3109_k8p3uf")
    assert [float(d["value"]) for d in got] == [decode_float(fi, 0x7F).fval, decode_float(fi, 0xFE).fval]


def test_formats_explains_a_custom_one_and_lists_the_rule(capsys: pytest.CaptureFixture[str]) -> None:
    d = run_json(capsys, "formats", "e6m9")
    assert (d["bias"], d["bits"], d["max"]) == (31, 16, float((2 - Fraction(1, 512)) * 2**31))
    assert main(["formats"]) == 0
    text = capsys.readouterr().out
    assert "eXmY" in text
    assert "p3109_k" in text


@pytest.mark.parametrize(
    ("argv", "name"),
    [
        (["encode", "0.1", "-f", "e0m3"], "e0m3"),
        (["decode", "0x1", "-f", "e12m60"], "e12m60"),
        (["decode", "0x1", "-f", "p3109_k9p0se"], "p3109_k9p0se"),
        (["encode", "1", "-f", "float9_e4m3"], "float9_e4m3"),
        (["formats", "e1m1"], "e1m1"),
    ],
)
def test_bad_names_are_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], name: str
) -> None:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1
    assert name in err
    assert "Traceback" not in err
