"""``floatlab blockquant`` and the block formats in ``floatlab formats``: shares and errors checked
against numpy recomputations from the library's codes, one-line errors with exit status 2."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from floatlab.blocks import BLOCK_FORMATS, mx_quantize
from floatlab.cli import COMMANDS, main
from floatlab.formats import MXINT8_ELEMENT


def _no_constants(name: str) -> Any:
    raise AssertionError(f"{name} is not strict JSON")


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out, parse_constant=_no_constants)


def run_text(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    out: str = capsys.readouterr().out
    return out


@pytest.fixture
def grads(tmp_path: Path) -> tuple[str, np.ndarray]:
    rng = np.random.default_rng(0)
    g = (rng.standard_normal((64, 80)) * np.exp2(rng.uniform(-30, -10, (64, 1)))).astype(np.float32)
    g[3, 7] = np.inf
    path = str(tmp_path / "grads.npy")
    np.save(path, g)
    return path, g


def test_every_block_format_by_default(
    capsys: pytest.CaptureFixture[str], grads: tuple[str, np.ndarray]
) -> None:
    path, g = grads
    data = run_json(capsys, "blockquant", path)
    assert [r["format"] for r in data["results"]] == list(BLOCK_FORMATS)
    for r in data["results"]:
        q = mx_quantize(g, r["format"])
        nz = q.nonzero
        # shares recomputed from the codes (numpy), not from the counts
        mag = q.element_codes & ((1 << (q.format.element.bits - 1)) - 1)
        finite = np.isfinite(q.dequantize())
        if q.format.element is MXINT8_ELEMENT:  # two's complement integers: no subnormals
            mag = np.abs(q.element_codes.view(np.int8).astype(np.int16))
            flushed = np.count_nonzero(finite & (g != 0) & (mag == 0))
            subnormal = 0
        else:
            flushed = np.count_nonzero(finite & (g != 0) & (mag == 0))
            subnormal = int(
                np.count_nonzero(finite & (mag != 0) & (mag >> q.format.element.mantissa_bits == 0))
            )
        assert r["flushed"] == pytest.approx(flushed / nz)
        assert r["subnormal"] == pytest.approx(subnormal / nz)
        assert r["nan_blocks"] == 1  # the block of the infinity
        d = q.dequantize()[finite].astype(np.float64) - g[finite]
        rel = math.sqrt(np.sum(d**2) / np.sum(g[finite].astype(np.float64) ** 2))
        assert r["rel_rms_error"] == pytest.approx(rel, rel=1e-9)
        assert r["snr_db"] == pytest.approx(-20 * math.log10(rel), rel=1e-9)
        assert r["max_abs_error"] == float(np.max(np.abs(d)))
    text = run_text(capsys, "blockquant", path)
    for name in BLOCK_FORMATS:
        assert name in text
    assert "SNR dB" in text
    assert "amax / (6 x 448)" in text


def test_nvfp4_one_level_tiles_and_the_two_scale_modes(
    capsys: pytest.CaptureFixture[str], grads: tuple[str, np.ndarray]
) -> None:
    path, _g = grads
    r = run_json(capsys, "blockquant", path, "-f", "nvfp4", "--tensor-scale", "1")["results"]
    assert len(r) == 1
    assert r[0]["tensor_scale"] == 1.0
    assert r[0]["blocks"] == 64 * 5
    tiles = run_json(capsys, "blockquant", path, "-f", "nvfp4,mxfp8_e4m3", "--axis", "0,1")
    assert [x["blocks"] for x in tiles["results"]] == [4 * 5, 2 * 3]
    assert tiles["axis"] == [0, 1]
    modes = run_json(capsys, "blockquant", path, "-f", "mxfp4_e2m1", "--scale-mode", "floor,rceil")
    floor, rceil = modes["results"]
    assert (floor["scale_mode"], rceil["scale_mode"]) == ("floor", "rceil")
    assert rceil["saturated"] == 0 < floor["saturated"]  # rceil rounds the scale up: nothing saturates
    text = run_text(capsys, "blockquant", path, "-f", "nvfp4", "--axis", "0,1")
    assert "16x16" in text


def test_float16_input_and_stochastic_rounding(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = str(tmp_path / "b.npy")
    x = np.random.default_rng(1).standard_normal(512).astype(np.float32)
    np.save(path, x.astype(np.float16))
    r = run_json(capsys, "blockquant", path, "-f", "nvfp4", "--rounding", "stochastic", "--seed", "3")
    q = mx_quantize(x.astype(np.float16), "nvfp4", rounding="stochastic", rng=3)
    assert r["dtype"] == "fp16"
    assert r["results"][0]["subnormal"] == q.subnormal / q.nonzero


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["blockquant", "missing.npy"], "no such file"),
        (["blockquant", "{g}", "-f", "mxfp9"], "unknown MX format 'mxfp9'"),
        (["blockquant", "{g}", "--axis", "0,x"], "expected an axis such as -1"),
        (["blockquant", "{g}", "--axis", "3"], "axis=3: expected an axis"),
        (["blockquant", "{g}", "-f", "mxfp8_e4m3", "--tensor-scale", "2"], "only NVFP4 has a tensor scale"),
        (["blockquant", "{g}", "-f", "nvfp4", "--scale-mode", "rceil"], "only the MX formats have E8M0"),
        (["blockquant", "{g}", "--scale-mode", "round"], "--scale-mode 'round': expected one of"),
        (["blockquant", "{g}", "-f", "nvfp4", "--tensor-scale", "-1"], "--tensor-scale '-1'"),
        (["blockquant", "{g}", "--rounding", "up"], "'up'"),
        (["blockquant", "{g}", "--block-size", "0"], "--block-size 0: expected a number of values from 1"),
        (["blockquant", "{g}", "--block-size", str(10**30)], f"--block-size {10**30}: expected"),
        (["blockquant", "{g}", "--block-size", str(2**31 + 1)], "from 1 to 2,147,483,648"),
        (
            ["blockquant", "{g}", "--rounding", "stochastic", "--seed", "-1"],
            "--seed -1: expected an integer >= 0",
        ),
        (["blockquant", "{txt}"], "expected a .npy file"),
    ],
)
def test_errors_are_one_line_with_status_2(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    grads: tuple[str, np.ndarray],
    argv: list[str],
    message: str,
) -> None:
    txt = tmp_path / "g.txt"
    txt.write_text("1 2 3")
    args = [a.format(g=grads[0], txt=txt) for a in argv]
    if args[1] == "missing.npy":
        args[1] = str(tmp_path / "missing.npy")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith("floatlab: error:"), err
    assert message in err, err


def test_formats_lists_the_block_formats(capsys: pytest.CaptureFixture[str]) -> None:
    assert "blockquant" in {c.NAME for c in COMMANDS}
    rows = {r["name"]: r for r in run_json(capsys, "formats")}
    nv = rows["nvfp4"]
    assert (nv["kind"], nv["element"], nv["block_size"], nv["scale"], nv["bits_per_value"]) == (
        "block",
        "float4_e2m1fn",
        16,
        "e4m3",
        4.5,
    )
    assert rows["fp16"]["kind"] == "float"
    assert rows["mxfp8_e4m3"]["range_log2"] == [-136, 135]
    text = run_text(capsys, "formats")
    assert "nvfp4" in text
    assert "E4M3 + fp32 per tensor" in text
    detail = run_text(capsys, "formats", "NVFP4")
    assert "16 x float4_e2m1fn" in detail
    assert "amax / (6 x 448)" in detail
    assert run_json(capsys, "formats", "mxfp6-e2m3")["element_max"] == 7.5


def test_blocks_whose_scale_overflows_report_infinite_errors(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # 1e300 needs the E8M0 scale 2^(floor(log2 1e300) - 8) = 2^988, far beyond E8M0's 2^127
    assert (10**300).bit_length() - 1 - 8 == 988
    path = tmp_path / "big.npy"
    np.save(path, np.array([1e300, 1.0, -3.0]))
    data = run_json(capsys, "blockquant", str(path), "-f", "mxfp8_e4m3,nvfp4", "--scale-mode", "floor,rceil")
    rows = {(r["format"], r["scale_mode"]): r for r in data["results"]}
    for key in (("mxfp8_e4m3", "floor"), ("nvfp4", "e4m3")):  # NVFP4 rounds 1e300 to float32: inf
        r = rows[key]
        assert (r["nan_blocks"], r["overflowed_blocks"]) == (1, 1)
        assert (r["rel_rms_error"], r["snr_db"], r["max_abs_error"]) == ("inf", "-inf", "inf")
    # RCEIL saturates its scale at 2^127: a finite scale, 1e300 held at 448 x 2^127, 1 and -3 flushed
    r = rows[("mxfp8_e4m3", "rceil")]
    assert (r["nan_blocks"], r["overflowed_blocks"]) == (0, 0)
    assert (r["saturated"], r["flushed"]) == (pytest.approx(1 / 3), pytest.approx(2 / 3))
    got, big = Fraction(448 * 2**127), Fraction(1e300)
    exact = math.sqrt(((got - big) ** 2 + 1 + 9) / (big**2 + 1 + 9))  # (in float64, 1e300^2 overflows)
    assert r["rel_rms_error"] == pytest.approx(exact, rel=1e-12)
    text = run_text(capsys, "blockquant", str(path), "-f", "mxfp8_e4m3")
    assert "whose scale overflowed (1 in mxfp8_e4m3 E8M0 floor)" in text
    assert "inf    -inf" in text
