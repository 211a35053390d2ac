"""The ``floatlab`` command line: values checked against numpy / ml_dtypes views and exact fractions."""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import subprocess
import sys
from fractions import Fraction
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from oracles import ORACLE_TYPES

from floatlab.cli import COMMANDS, EXIT_BROKEN_PIPE, Command, build_parser, main
from floatlab.cli import demo as demo_cmd
from floatlab.cli._common import UI, View, parse_code, sci, want_color
from floatlab.codec import decode
from floatlab.text import render

# format name -> numpy dtype holding it, for the independent oracle (views of the raw bits)
UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def oracle_value(code: int, fmt: str) -> float:
    """The value of ``code`` in ``fmt`` according to numpy / ml_dtypes (a view of the bits)."""
    t = np.dtype(ORACLE_TYPES[fmt])
    return float(np.array([code], dtype=UINT[t.itemsize]).view(t)[0])


def oracle_code(x: float, fmt: str) -> int:
    """The code numpy / ml_dtypes give to the float64 ``x`` cast to ``fmt``."""
    t = np.dtype(ORACLE_TYPES[fmt])
    with np.errstate(over="ignore"):  # overflow to inf is the answer asked for, not a mistake
        return int(np.array([x]).astype(t).view(UINT[t.itemsize])[0])


def _no_constants(name: str) -> Any:
    raise AssertionError(f"{name} is not strict JSON")


def finfo(t: Any) -> Any:
    """numpy's finfo for numpy's own types, ml_dtypes' for the others."""
    if t in (np.float64, np.float32, np.float16):
        return np.finfo(t)
    return ml_dtypes.finfo(t)  # type: ignore[no-untyped-call]


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    """Run a command with --json and parse its output as strict JSON (no NaN/Infinity literals)."""
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out, parse_constant=_no_constants)


def run_text(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    out: str = capsys.readouterr().out
    return out


def same_float(a: Any, b: float) -> bool:
    """JSON value ``a`` (a number, or "nan"/"inf" strings) equals ``b``, NaN equal to NaN."""
    value = float(a)  # "nan", "inf" and "-inf" are how strict JSON carries them
    return math.isnan(value) if math.isnan(b) else value == b


def run_module(*argv: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "floatlab", *argv], capture_output=True, text=True, env=env, timeout=120, **kw
    )


# ---- decode -------------------------------------------------------------------------------------
def test_decode_0x3555_is_numpy_float16(capsys: pytest.CaptureFixture[str]) -> None:
    [d] = run_json(capsys, "decode", "0x3555")
    assert float(d["value"]) == oracle_value(0x3555, "fp16")
    assert Fraction(d["exact"]) == Fraction(oracle_value(0x3555, "fp16"))
    text = run_text(capsys, "decode", "0x3555")
    assert "3555" in text.upper()
    assert "fp16" in text


@pytest.mark.parametrize(
    ("literal", "fmt"), [("0x3c00", "fp16"), ("0x3F800000", "fp32"), ("0x3ff0000000000000", "fp64")]
)
def test_decode_width_of_hex_picks_the_format(
    capsys: pytest.CaptureFixture[str], literal: str, fmt: str
) -> None:
    [d] = run_json(capsys, "decode", literal)
    assert float(d["value"]) == 1.0 == oracle_value(int(literal, 16), fmt)
    assert fmt in json.dumps(d)


def test_decode_binary_and_decimal_literals(capsys: pytest.CaptureFixture[str]) -> None:
    bits = format(0xC170, "016b")  # 16 binary digits: fp16
    [d] = run_json(capsys, "decode", "0b" + bits)
    assert float(d["value"]) == oracle_value(0xC170, "fp16") == -2.71875
    [d] = run_json(capsys, "decode", "0b" + format(0x3F800000, "032b"))
    assert float(d["value"]) == 1.0
    [d] = run_json(capsys, "decode", "16256", "-f", "bf16")  # 16256 == 0x3F80
    assert float(d["value"]) == oracle_value(16256, "bf16") == 1.0


@pytest.mark.parametrize(
    "fmt", ["fp16", "fp32", "fp64", "bf16", "float8_e4m3fn", "float8_e5m2fnuz", "float4_e2m1fn"]
)
def test_decode_many_codes_in_one_call_match_numpy(capsys: pytest.CaptureFixture[str], fmt: str) -> None:
    t = np.dtype(ORACLE_TYPES[fmt])
    nbits = 4 if fmt == "float4_e2m1fn" else 8 * t.itemsize
    rng = np.random.default_rng(20240611)
    codes = [int(c) for c in rng.integers(0, 2**nbits, size=25, dtype=np.uint64)]
    codes += [0, 2 ** (nbits - 1), 1, 2**nbits - 1]  # +0, -0 (or the fnuz NaN), tiniest, all ones
    rows = run_json(capsys, "decode", *[hex(c) for c in codes], "-f", fmt)
    assert len(rows) == len(codes)
    for c, row in zip(codes, rows, strict=True):
        assert same_float(row["value"], oracle_value(c, fmt)), (hex(c), row)


def test_decode_several_codes_text_is_each_report_in_order(capsys: pytest.CaptureFixture[str]) -> None:
    codes = ["0x7bff", "0x0001", "0x7c00"]
    text = run_text(capsys, "decode", *codes, "--no-color")
    # the terminal view of a code is the codec's report; the command shows them in the order given
    assert text == "\n\n".join(render(decode(int(c, 16), "fp16")) for c in codes) + "\n"
    assert "\x1b[" not in text


def test_decode_an_8_bit_code_with_its_format(capsys: pytest.CaptureFixture[str]) -> None:
    [a] = run_json(capsys, "decode", "0x7e", "-f", "e4m3")
    [b] = run_json(capsys, "decode", "0x7e", "-f", "e5m2")
    assert float(a["value"]) == oracle_value(0x7E, "float8_e4m3fn") == 448.0
    assert same_float(b["value"], oracle_value(0x7E, "float8_e5m2"))  # a NaN in e5m2


# ---- parse_code (the literal rules) -------------------------------------------------------------
@pytest.mark.parametrize(
    ("literal", "fmt", "code", "name"),
    [
        ("0x7BFF", None, 0x7BFF, "fp16"),
        ("0x0000_3c00", None, 0x3C00, "fp32"),
        ("0b0_01111_0000000000", None, 0x3C00, "fp16"),
        ("0x00003c00", "fp16", 0x3C00, "fp16"),
        ("127", "e4m3", 127, "float8_e4m3fn"),
        ("0x3", "fp4", 3, "float4_e2m1fn"),
    ],
)
def test_parse_code(literal: str, fmt: str | None, code: int, name: str) -> None:
    got_code, got_fmt = parse_code(literal, fmt)
    assert (got_code, got_fmt.name) == (code, name)


@pytest.mark.parametrize(
    ("literal", "fmt", "words"),
    [
        ("0x38", None, "-f"),
        ("0b00111000", None, "-f"),
        ("0x123", None, "-f"),
        ("15360", None, "-f"),
        ("0x10000", "fp16", "too wide"),
        ("0x100", "e4m3", "too wide"),
        ("0x1G", None, "not a code"),
        ("0x", None, "not a code"),
        ("-1", "fp16", "not a code"),
        ("", None, "empty"),
        ("1.5", "fp16", "not a code"),
    ],
)
def test_parse_code_rejects(literal: str, fmt: str | None, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        parse_code(literal, fmt)


# ---- encode -------------------------------------------------------------------------------------
def test_encode_0_1_in_fp16_is_numpy_cast(capsys: pytest.CaptureFixture[str]) -> None:
    expected = int(np.float16(0.1).view(np.uint16))
    assert expected == 0x2E66
    data = run_json(capsys, "encode", "0.1", "-f", "fp16", "--rounding", "rne")
    [row] = data["rows"]
    assert row["code"] == expected
    assert row["hex"] == "0x2E66"
    assert row["value"] == float(np.float16(0.1))
    exact_err = Fraction(oracle_value(expected, "fp16")) - Fraction(1, 10)
    assert row["abs_error"] == float(abs(exact_err))
    assert row["relative_error"] == float(abs(exact_err) * 10)
    assert "inexact" in row["flags"]
    text = run_text(capsys, "encode", "0.1", "-f", "fp16")
    assert "0x2E66" in text


def test_encode_default_formats_match_exact_oracles(capsys: pytest.CaptureFixture[str]) -> None:
    # a float32 value: exact in float64, so numpy's float64 casts round it once (no double rounding)
    x = float(np.float32(np.pi))
    data = run_json(capsys, "encode", x.hex())
    rows = {r["format"]: r for r in data["rows"]}
    assert list(rows) == ["fp64", "fp32", "fp16", "bf16", "float8_e4m3fn", "float8_e5m2"]
    for fmt, row in rows.items():
        assert row["code"] == oracle_code(x, fmt), fmt
        assert row["value"] == oracle_value(row["code"], fmt)
        assert Fraction(row["error_exact"]) == Fraction(row["value"]) - Fraction(x)
    # 0.1 itself: Python's float() is a correctly rounded decimal parser, so it is the fp64 oracle
    data = run_json(capsys, "encode", "0.1")
    assert data["rows"][0]["code"] == int(np.float64(0.1).view(np.uint64))
    assert data["input_exact"] == "1/10"


def test_encode_one_format_gives_a_row_per_mode(capsys: pytest.CaptureFixture[str]) -> None:
    x = Fraction(1, 10)
    rows = {r["rounding"]: r for r in run_json(capsys, "encode", "0.1", "-f", "fp16")["rows"]}
    assert list(rows) == ["rne", "rna", "rtz", "rup", "rdown", "rodd"]  # stochastic needs --seed
    down, up = rows["rdown"]["code"], rows["rup"]["code"]
    # the neighbours of 0.1 in fp16, from numpy: down <= 0.1 < up, adjacent codes
    assert Fraction(oracle_value(down, "fp16")) < x < Fraction(oracle_value(up, "fp16"))
    assert up == down + 1
    assert rows["rtz"]["code"] == down
    assert rows["rne"]["code"] == rows["rna"]["code"] == int(np.float16(0.1).view(np.uint16))
    assert rows["rodd"]["code"] % 2 == 1


def test_encode_tie_splits_rne_and_rna(capsys: pytest.CaptureFixture[str]) -> None:
    # 1 + 2^-11 lies halfway between 1 and the next fp16
    tie = 1 + 2.0**-11
    rows = {r["rounding"]: r for r in run_json(capsys, "encode", tie.hex(), "-f", "fp16")["rows"]}
    one = int(np.float16(1).view(np.uint16))
    assert rows["rne"]["code"] == oracle_code(tie, "fp16") == one
    assert rows["rna"]["code"] == int(np.nextafter(np.float16(1), np.float16(2)).view(np.uint16))


def test_encode_negative_values_are_not_options(capsys: pytest.CaptureFixture[str]) -> None:
    rows = run_json(capsys, "encode", "-1e-5", "-f", "fp16", "-r", "rne")["rows"]
    assert rows[0]["code"] == oracle_code(-1e-5, "fp16")
    rows = run_json(capsys, "encode", "-inf", "-f", "fp16,bf16")["rows"]
    assert [r["value"] for r in rows] == ["-inf", "-inf"]
    rows = run_json(capsys, "encode", "-0.75", "-f", "e4m3", "-r", "rtz")["rows"]
    assert rows[0]["code"] == oracle_code(-0.75, "float8_e4m3fn")


def test_encode_fractions_and_hex_floats_are_exact(capsys: pytest.CaptureFixture[str]) -> None:
    third = run_json(capsys, "encode", "1/3", "-f", "fp64", "-r", "rne")
    assert third["rows"][0]["code"] == int(np.float64(1 / 3).view(np.uint64))  # 1/3 is correctly rounded
    assert third["input_exact"] == "1/3"
    half = run_json(capsys, "encode", "0x1p-1", "-f", "fp16", "-r", "rne")
    assert half["rows"][0]["flags"] == []
    assert half["rows"][0]["abs_error"] == 0


def test_encode_overflow_saturate_and_flush(capsys: pytest.CaptureFixture[str]) -> None:
    rows = run_json(capsys, "encode", "500", "-f", "e4m3", "-r", "rne")["rows"]
    assert same_float(rows[0]["value"], float(np.float32(500).astype(ml_dtypes.float8_e4m3fn)))  # NaN
    rows = run_json(capsys, "encode", "500", "-f", "e4m3", "-r", "rne", "--saturate")["rows"]
    assert rows[0]["value"] == float(finfo(ml_dtypes.float8_e4m3fn).max)
    assert "overflow" in rows[0]["flags"]
    rows = run_json(capsys, "encode", "1e5", "-f", "fp16", "-r", "rne")["rows"]
    assert rows[0]["code"] == oracle_code(1e5, "fp16") == 0x7C00
    tiny = float(np.finfo(np.float16).smallest_subnormal) * 3
    rows = run_json(capsys, "encode", tiny.hex(), "-f", "fp16", "-r", "rne", "--no-subnormals")["rows"]
    assert rows[0]["code"] == 0
    assert "underflow" in rows[0]["flags"]


def test_encode_stochastic_needs_a_seed_and_is_reproducible(capsys: pytest.CaptureFixture[str]) -> None:
    a = run_json(capsys, "encode", "0.1", "-f", "bf16", "--seed", "7")["rows"]
    b = run_json(capsys, "encode", "0.1", "-f", "bf16", "--seed", "7")["rows"]
    assert [r["rounding"] for r in a][-1] == "stochastic"
    assert a == b
    by_mode = {r["rounding"]: r["code"] for r in a}
    assert by_mode["stochastic"] in (by_mode["rdown"], by_mode["rup"])
    assert main(["encode", "0.1", "-f", "bf16", "-r", "stochastic"]) == 2
    assert "--seed" in capsys.readouterr().err


def test_encode_text_table(capsys: pytest.CaptureFixture[str]) -> None:
    text = run_text(capsys, "encode", "0.1")
    lines = text.splitlines()
    assert "1/10" in lines[0]
    for name in ("fp64", "fp32", "fp16", "bf16", "float8_e4m3fn", "float8_e5m2"):
        assert any(line.split()[:1] == [name] for line in lines), name
    assert "0x3FB999999999999A" in text  # float64(0.1), by Python's correctly rounded parser


# ---- formats ------------------------------------------------------------------------------------
def test_formats_table_matches_finfo(capsys: pytest.CaptureFixture[str]) -> None:
    rows = {r["name"]: r for r in run_json(capsys, "formats")}
    assert set(ORACLE_TYPES) <= set(rows)
    for name, t in ORACLE_TYPES.items():
        fi = finfo(t)
        r = rows[name]
        assert r["max"] == float(fi.max), name
        assert r["smallest_normal"] == float(fi.smallest_normal), name
        assert r["smallest_subnormal"] == float(fi.smallest_subnormal), name
        assert r["eps"] == float(fi.eps), name
        assert r["bits"] == fi.bits, name
    text = run_text(capsys, "formats")
    for name in rows:
        assert name in text
    assert "65504" in text
    assert "448" in text


@pytest.mark.parametrize("fmt", list(ORACLE_TYPES))
def test_formats_detail_codes_are_the_landmarks(capsys: pytest.CaptureFixture[str], fmt: str) -> None:
    t = ORACLE_TYPES[fmt]
    fi = finfo(t)
    d = run_json(capsys, "formats", fmt)
    codes = d["codes"]
    assert oracle_value(codes["zero"]["code"], fmt) == 0.0
    assert oracle_value(codes["one"]["code"], fmt) == 1.0
    assert oracle_value(codes["max"]["code"], fmt) == float(fi.max)
    assert oracle_value(codes["smallest normal"]["code"], fmt) == float(fi.smallest_normal)
    assert oracle_value(codes["smallest subnormal"]["code"], fmt) == float(fi.smallest_subnormal)
    if codes["+inf"] is None:
        assert not np.isinf(np.array([np.inf]).astype(t)[0])
    else:
        assert oracle_value(codes["+inf"]["code"], fmt) == np.inf
    if codes["NaN"] is None:
        assert not np.isnan(np.array([np.nan]).astype(t)[0])
    else:
        assert np.isnan(oracle_value(codes["NaN"]["code"], fmt))


def test_formats_detail_text(capsys: pytest.CaptureFixture[str]) -> None:
    text = run_text(capsys, "formats", "half")
    assert text.startswith("fp16")
    assert "0x7BFF" in text
    assert "0x3C00" in text
    assert "0x7C00" in text
    assert "2^-24" in text  # the smallest subnormal


def _oracle_nan_codes(fmt: str) -> list[int]:
    """The codes numpy / ml_dtypes read as NaN, by enumerating every code of a format of <= 16 bits."""
    t = np.dtype(ORACLE_TYPES[fmt])
    bits = 16 if t.itemsize == 2 else int(ml_dtypes.finfo(t).bits)  # type: ignore[no-untyped-call]
    codes = np.arange(1 << bits, dtype=UINT[t.itemsize])  # the 6- and 4-bit formats: a byte's low bits
    with np.errstate(invalid="ignore"):  # bf16's signalling NaN codes raise "invalid" when tested
        return [int(c) for c in codes[np.isnan(codes.view(t))]]


@pytest.mark.parametrize("fmt", [f for f in ORACLE_TYPES if f not in ("fp64", "fp32")])
def test_formats_count_the_nan_codes(capsys: pytest.CaptureFixture[str], fmt: str) -> None:
    """fn formats have one NaN code per sign, fnuz formats one in all (the code of -0), IEEE many."""
    nans = _oracle_nan_codes(fmt)
    assert run_json(capsys, "formats", fmt)["nan_codes"] == len(nans)
    row = next(r for r in run_json(capsys, "formats") if r["name"] == fmt)
    assert row["nan_codes"] == len(nans)
    table_row = next(line for line in run_text(capsys, "formats").splitlines() if f" {fmt} " in f" {line} ")
    assert table_row.split()[-1] == {0: "no", 1: "1", 2: "2"}.get(len(nans), "many")
    detail = next(
        line for line in run_text(capsys, "formats", fmt).splitlines() if line.split()[:1] == ["NaN"]
    )
    if len(nans) in (1, 2):
        assert detail.split()[1] == str(len(nans))
        for code in nans:
            assert f"0x{code:02X}" in detail
    if fmt.endswith("fnuz"):
        assert nans == [0x80]  # one NaN in all: the code of -0
        assert "one in all" in run_text(capsys, "formats")
    if fmt == "float8_e4m3fn":
        assert nans == [0x7F, 0xFF]  # one per sign
    assert "per sign)" not in run_text(capsys, "formats")  # the old note said so of every finite format


# ---- demo ---------------------------------------------------------------------------------------
def test_demo_runs_every_section(capsys: pytest.CaptureFixture[str]) -> None:
    text = run_text(capsys, "demo")
    titles = [s.title for s in demo_cmd.SECTIONS]
    positions = [text.index(t) for t in titles]
    assert positions == sorted(positions)
    assert "7BFF" in text.upper()
    assert "0x2E66" in text
    data = run_json(capsys, "demo")
    assert [s["section"] for s in data] == titles
    assert float(data[0]["data"][0]["value"]) == oracle_value(0x7BFF, "fp16")


def test_demo_sections_can_be_added(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(demo_cmd, "SECTIONS", list(demo_cmd.SECTIONS))
    extra = demo_cmd.Section("An extra piece", lambda color: View("extra text", {"n": 1}))
    demo_cmd.add_section(extra, after="Encoding 0.1")
    assert [s.title for s in demo_cmd.SECTIONS].index("An extra piece") == 2
    text = run_text(capsys, "demo")
    assert text.index("Encoding 0.1") < text.index("extra text") < text.index("The formats")
    with pytest.raises(ValueError, match="no demo section"):
        demo_cmd.add_section(extra, before="Nothing like this")


# ---- options, colour, help ----------------------------------------------------------------------
def test_colour_follows_flags_and_terminal(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert "\x1b[" in run_text(capsys, "formats", "--color")
    assert "\x1b[" not in run_text(capsys, "formats", "--no-color")
    assert "\x1b[" not in run_text(capsys, "formats")  # captured output is no terminal

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    assert want_color(None, Tty()) is True
    assert want_color(None, Tty(), {"NO_COLOR": "1"}) is False
    assert want_color(True, io.StringIO(), {"NO_COLOR": "1"}) is True
    assert want_color(False, Tty()) is False


def test_json_option_before_or_after_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--json", "decode", "0x3c00"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first == run_json(capsys, "decode", "0x3c00")


@pytest.mark.parametrize(
    "argv", [["decode", "0x3c00"], ["encode", "1"], ["formats"], ["formats", "bf16"], ["demo"]]
)
def test_every_command_speaks_json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    assert {c.NAME for c in COMMANDS} >= {"decode", "encode", "formats", "demo"}
    assert run_json(capsys, *argv)  # strict JSON (inf and nan written as strings), not empty


def test_help_and_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in ("decode", "encode", "formats", "demo"):
        assert name in out
    assert main(["encode", "--help"]) == 0
    assert "--rounding" in capsys.readouterr().out
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("floatlab ")


def _listing(parser: argparse.ArgumentParser) -> list[tuple[str, str | None]]:
    """The (name, one-line help) pairs of the commands, as ``floatlab --help`` lists them."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return [(a.dest, a.help) for a in sub._choices_actions]


def test_the_command_list_matches_what_the_modules_register() -> None:
    # COMMANDS names each command's module and help without importing it; the modules' register
    # functions give the same names, in the same order, with the same help
    full = build_parser()
    assert _listing(full) == [(c.NAME, c.help) for c in COMMANDS if isinstance(c, Command)]
    assert build_parser(()).format_help() == full.format_help()
    for command in COMMANDS:
        assert isinstance(command, Command)
        assert command.NAME in getattr(command.load(), "NAMES", (command.NAME,))


def test_a_command_module_listed_again_is_registered_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import floatlab.cli as cli

    monkeypatch.setattr(cli, "COMMANDS", (*COMMANDS, demo_cmd))
    for names in (None, ["decode"], ["demo"]):
        assert [n for n, _ in _listing(cli.build_parser(names))] == [c.NAME for c in COMMANDS]


@pytest.mark.parametrize("name", [c.NAME for c in COMMANDS])
def test_every_command_has_its_help(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([name, "--help"]) == 0
    assert capsys.readouterr().out.startswith(f"usage: floatlab {name} ")
    assert main(["--no-color", name, "--help"]) == 0
    assert capsys.readouterr().out.startswith(f"usage: floatlab {name} ")


def test_the_names_in_the_help_are_the_registries() -> None:
    # `floatlab train --help` names the policies and models without importing the trainer
    from floatlab.cli.train_cmds import MODEL_NAMES, POLICY_NAMES
    from floatlab.train.models import MODELS
    from floatlab.train.precision.policy import policy_names

    assert list(POLICY_NAMES) == policy_names()
    assert list(MODEL_NAMES) == list(MODELS)


# ---- errors -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["decode", "0xZZ"], "not a code"),
        (["decode", "0x38"], "-f"),
        (["decode", "0x1ffff", "-f", "fp16"], "too wide"),
        (["decode", "0x3c00", "-f", "halff"], "did you mean fp16"),
        (["decode", ""], "empty"),
        (["decode"], "required"),
        (["encode", "0.1", "-f", "bfloat61"], "did you mean"),
        (["encode", "0.1", "-r", "nearest_odd"], "rounding"),
        (["encode", ""], "empty"),
        (["encode", "zero point one"], "zero point one"),
        (["encode"], "required"),
        (["formats", "fp7"], "unknown format"),
        (["nosuch"], "invalid choice"),
        ([], "missing command"),
        (["decode", "0x3c00", "--bogus"], "--bogus"),
        (["encode", "1", "--seed", "x"], "--seed"),
    ],
)
def test_bad_input_is_one_line_and_status_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], words: str
) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("floatlab: error: ")
    assert words in lines[0]


def test_broken_pipe_is_quiet(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    class ClosedPipe(io.StringIO):
        def write(self, s: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    status = main(["formats"])
    monkeypatch.undo()
    assert status == EXIT_BROKEN_PIPE
    assert capsys.readouterr().err == ""


def test_ui_show_writes_text_or_json() -> None:
    buf = io.StringIO()
    UI(json=True, stream=buf).show(View("t", {"a": float("nan"), "b": [Fraction(1, 3)]}))
    assert json.loads(buf.getvalue()) == {"a": "nan", "b": ["1/3"]}


def test_sci_is_exact_beyond_float_range() -> None:
    assert sci(Fraction(1, 10**400)) == "1.00e-400"
    assert sci(Fraction(-2, 3)) == "-6.67e-01"
    assert sci(Fraction(10**400)) == "1.00e+400"


@pytest.mark.parametrize("digits", [1, 3, 20])
def test_sci_rounds_half_even_like_decimal_division(digits: int) -> None:
    # oracle: the decimal module's correctly rounded division in a context of `digits` digits
    import decimal
    import random

    ctx = decimal.Context(prec=digits, Emin=-(10**9), Emax=10**9, rounding=decimal.ROUND_HALF_EVEN)
    rnd = random.Random(digits)
    cases = [Fraction(95, 10), Fraction(-995, 1000), Fraction(1, 3) * 10**5000, Fraction(2) ** -1074]
    for _ in range(2000):
        c = rnd.randrange(10**digits, 10 ** (digits + 1))  # ties and near-ties of the last digit
        cases.append(Fraction(2 * c + rnd.choice([-1, 0, 1, 5]), 20) * Fraction(10) ** rnd.randrange(-60, 60))
        ratio = Fraction(rnd.randrange(1, 2**64), rnd.randrange(1, 2**64))
        cases.append(ratio * Fraction(2) ** rnd.randrange(-1100, 1100))
    for q in cases:
        want = ctx.divide(decimal.Decimal(q.numerator), decimal.Decimal(q.denominator))
        assert sci(-abs(q), digits) == "-" + sci(abs(q), digits)
        mant, _, exp = sci(q, digits).partition("e")
        assert decimal.Decimal(f"{mant}e{exp}") == want, q


# ---- as a program -------------------------------------------------------------------------------
def test_python_m_floatlab_matches_main(capsys: pytest.CaptureFixture[str]) -> None:
    proc = run_module("decode", "0x7bff", "0x3555")
    assert proc.returncode == 0
    assert proc.stderr == ""
    assert proc.stdout == run_text(capsys, "decode", "0x7bff", "0x3555")


def test_program_errors_are_one_line_without_traceback() -> None:
    for argv in (["decode", "0xnope"], ["encode", "0.1", "-f", "fp61"], ["formats", "x", "y"]):
        proc = run_module(*argv)
        assert proc.returncode == 2
        assert proc.stdout == ""
        assert len(proc.stderr.splitlines()) == 1
        assert proc.stderr.startswith("floatlab: error: ")
        assert "Traceback" not in proc.stderr


def test_program_piped_into_a_closed_reader_exits_quietly() -> None:
    env = {**os.environ, "NO_COLOR": "1"}
    with subprocess.Popen(
        [sys.executable, "-m", "floatlab", "demo"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    ) as proc:
        assert proc.stdout is not None
        assert proc.stderr is not None
        proc.stdout.close()  # the reader goes away before the first line is written, as `| head -0`
        err = proc.stderr.read().decode()
        status = proc.wait(timeout=120)
    assert err == ""
    assert status in (EXIT_BROKEN_PIPE, 0)  # 0 only if the whole tour fitted in the pipe first


def test_decode_imports_nothing_heavy() -> None:
    probe = (
        "import sys\n"
        "from floatlab.cli import main\n"
        "assert main(['decode', '0x7bff']) == 0\n"
        "heavy = ('sympy', 'matplotlib', 'numba', 'llvmlite', 'cupy')\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & set(heavy)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("value", ["-Infinity", "-INF", "-NaN", "-inf", "-1e-5", "-0x1p-3"])
def test_negative_values_are_values_not_options(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["encode", value, "-f", "fp16", "--json"], ["round", value, "--json"]):
        assert main(argv) == 0, (argv, capsys.readouterr().err)
        data = json.loads(capsys.readouterr().out)
        assert data if isinstance(data, dict) else data[0]


@pytest.mark.parametrize(
    ("scale", "factor"),
    [("1024", 1024.0), ("2^10", 1024.0), ("2**10", 1024.0), ("1/8", 0.125), ("-0.5", -0.5)],
)
def test_underflow_scale_grammar(
    scale: str, factor: float, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "g.npy"
    np.save(path, np.array([1e-3, 1e-6], np.float32))
    assert main(["underflow", str(path), "--scale", scale, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["scale"] == factor


def test_static_scale_takes_the_scale_grammar(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["train", "--data", "underflow", "--epochs", "0", "--loss-scaling", "static", "-q", "--json"]
    for text in ("65536", "2^16", "2**16"):
        assert main([*base, "--static-scale", text]) == 0
        assert json.loads(capsys.readouterr().out)["policy"]["static_scale"] == 65536.0
    for text in ("0", "-4", "nan", "x"):
        assert main([*base, "--static-scale", text]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1, err
        assert f"--static-scale {text!r}" in err, err
