"""Hostile input on the command line: codes, numbers, formats, modes and options. Each gives one line
on stderr naming the bad value (exit status 2) or a correct answer (exit status 0); never a
traceback. The files the commands read are in test_hostile_files.py."""

from __future__ import annotations

import contextlib
import io
import json
from typing import Any

import numpy as np
import pytest

from floatlab.cli import EXIT_INTERNAL, main


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(argv)
    return status, out.getvalue(), err.getvalue()


BAD = [
    # codes
    (["decode", "0x"], "not a code: '0x'"),
    (["decode", "0b"], "not a code: '0b'"),
    (["decode", "0xZZ"], "not a code"),
    (["decode", "0x3c00_"], "not a code"),
    (["decode", "٣", "-f", "fp16"], "not a code"),
    (["decode", ""], "empty code"),
    (["decode", "0x" + "f" * 40], "40 hex digits"),
    (["decode", "0x38"], "name the format with -f"),
    (["decode", "0x7bff", "-f", "e4m3"], "too wide for float8_e4m3fn"),
    (["decode", "15360"], "needs its format"),
    (["decode", "9" * 5000, "-f", "fp16"], "5,000 digits: too wide"),
    (["decode", "1", "-f", "fp80"], "unknown format 'fp80'"),
    (["decode", "0x3c00", "-f", ""], "empty format name in ''"),
    (["decode", "0x3c00", "-f", "fp16,fp61"], "unknown format 'fp61'"),
    (["decode", "0x3c00", "-f", "e12m60"], "format e12m60: mantissa_bits=60: expected an integer from 0"),
    (["decode", "0x3c00", "-f", "p3109_k9p0se"], "p3109_k9p0se: expected K from 3 to 16"),
    # numbers
    (["encode", "abc"], "cannot parse 'abc'"),
    (["encode", "1_000"], "cannot parse '1_000'"),
    (["encode", "١٢"], "cannot parse"),
    (["encode", "1/0"], "denominator is zero"),
    (["encode", "1e100001"], "exponent 100001"),
    (["encode", "1e" + "9" * 5000], "exponent 9999999999..."),
    (["encode", "7" * 100_001], "100,001 digits"),
    (["encode", "  "], "empty value"),
    (["add", "1", "nope"], "cannot parse 'nope'"),
    (["round", "0.1", "-o", "x.npy"], "needs an array"),
    # formats and modes
    (["encode", "0.1", "-f", "fp16,,bf16"], "empty format name"),
    (["encode", "0.1", "-f", "fp17"], "unknown format 'fp17'"),
    (["encode", "0.1", "-r", "sideways"], "unknown rounding mode 'sideways'"),
    (["add", "1", "2", "-r", "stochastic"], "needs --seed"),
    (["add", "1", "2", "-r", "stochastic", "--seed", "-5"], "--seed -5: expected a non-negative"),
    (["encode", "0.1", "-f", "fp16", "-r", "stochastic", "--seed", "-1"], "rng=-1"),
    (["accumulate", "10", "-f", "fp64"], "fp64 has 53"),
    (["formats", "x" * 300], "unknown format"),
    # options
    (["encode", "0.1", "--seed", "x"], "invalid int value: 'x'"),
    (["accumulate", "0"], "N=0: expected 1 to"),
    (["accumulate", "99999999999"], "expected 1 to 10,000,000"),
    (["accumulate", "x"], "'x': expected a count"),
    (["accumulate", "²"], "expected a count"),
    (["underflow", "x.npy", "--scale", "0"], "--scale '0': expected a finite nonzero number"),
    (["underflow", "missing.npy"], "no such file: 'missing.npy'"),
    (["train", "--epochs", "-1"], "epochs=-1"),
    (["train", "--batch-size", "0"], "batch_size=0"),
    (["train", "--lr", "nan"], "lr=nan"),
    (["train", "--hidden", "0"], "expected positive layer sizes"),
    (["train", "--momentum", "2"], "momentum=2.0"),
    (["train", "--clip", "nan"], "clip=nan"),
    (["compare", "nope"], "unknown precision policy or preset 'nope'"),
    (["nonsense"], "invalid choice: 'nonsense'"),
    ([], "missing command"),
    (["--json"], "missing command"),
    (["decode"], "the following arguments are required: CODE"),
]


@pytest.mark.parametrize(("argv", "message"), BAD, ids=[" ".join(a)[:40] for a, _ in BAD])
def test_bad_input_is_one_line_and_status_2(argv: list[str], message: str) -> None:
    status, out, err = run(argv)
    assert status == 2, (status, err)
    assert err.count("\n") == 1, err
    assert err.startswith("floatlab: error: "), err
    assert message in err
    assert "Traceback" not in err + out
    assert len(err) < 600  # a 5,000-digit input is not echoed back in full


@pytest.mark.parametrize(
    ("argv", "key", "expected"),
    [
        (["encode", "1e100000", "-f", "fp16", "-r", "rne", "--json"], "hex", "0x7C00"),
        (["encode", "1e100000", "-f", "fp16", "-r", "rtz", "--json"], "hex", "0x7BFF"),
        (["encode", "-1e-100000", "-f", "bf16", "-r", "rne", "--json"], "hex", "0x8000"),
        (["encode", "-1e-100000", "-f", "bf16", "-r", "rdown", "--json"], "hex", "0x8001"),
        (["encode", "0." + "0" * 5000 + "1", "-f", "fp32", "-r", "rup", "--json"], "hex", "0x00000001"),
        (["encode", "-0", "-f", "fp16", "-r", "rne", "--json"], "hex", "0x8000"),
        (["encode", "-0", "-f", "float8_e4m3fnuz", "-r", "rne", "--json"], "hex", "0x00"),
        (["encode", "-nan", "-f", "fp16", "-r", "rne", "--json"], "hex", "0xFE00"),
        (["encode", "-inf", "-f", "e4m3", "-r", "rne", "--json"], "hex", "0xFF"),
        (["encode", "-inf", "-f", "e4m3", "-r", "rne", "--saturate", "--json"], "hex", "0xFE"),
        (["encode", "0x1.ffcp15", "-f", "fp16", "-r", "rne", "--json"], "hex", "0x7BFF"),
        (["encode", "-f", "fp16", "-r", "rne", "--json", "--", "-65520"], "hex", "0xFC00"),
        (["encode", "-65519.99", "-f", "fp16", "-r", "rne", "--json"], "hex", "0xFBFF"),
    ],
)
def test_hostile_but_valid_numbers_give_correct_answers(argv: list[str], key: str, expected: str) -> None:
    status, out, err = run(argv)
    assert status == 0
    assert not err
    data: Any = json.loads(out)
    assert data["rows"][0][key] == expected


def test_an_exact_answer_with_100000_digits() -> None:
    status, out, err = run(["encode", "1e-100000", "-f", "fp64", "-r", "rne", "--json"])
    assert status == 0
    assert not err
    row = json.loads(out)["rows"][0]
    assert row["hex"] == "0x0000000000000000"
    assert row["error_exact"] == "-1/1" + "0" * 100_000  # the error is exact: no digit limit


def test_signalling_nans_in_a_file_are_quietened_without_noise(tmp_path: Any) -> None:
    x = np.array([0x7F800001, 0xFFC12345, 0x3F800000], np.uint32).view(np.float32)
    path = str(tmp_path / "s.npy")
    with open(path, "wb") as fh:
        np.save(fh, x)
    for argv in (["round", path, "--json"], ["underflow", path], ["accumulate", path]):
        status, out, err = run(argv)
        assert status == 0, (argv, err)
        assert not err, (argv, err)
    status, out, _ = run(["round", path, "--json"])
    assert json.loads(out)["invalid"] == 1  # the signalling one, counted as IEEE 754 says


def test_an_internal_error_is_one_line_with_status_1(monkeypatch: pytest.MonkeyPatch) -> None:
    from floatlab.cli import decode as decode_cmd

    def broken(*args: Any, **kwargs: Any) -> None:
        raise KeyError("boom")

    monkeypatch.setattr(decode_cmd, "decode_view", broken)
    status, _out, err = run(["decode", "0x3c00"])
    assert status == EXIT_INTERNAL == 1
    assert err.count("\n") == 1
    assert "internal error: KeyError" in err
    assert "Traceback" not in err


def test_histogram_width_and_scale_limits(tmp_path: Any) -> None:
    path = str(tmp_path / "g.npy")
    with open(path, "wb") as fh:
        np.save(fh, np.array([1.0, 2.0**-30], np.float32))
    for opt, value, message in [
        ("--width", "2147483648", "from 1 to 1000"),
        ("--width", "0", "from 1 to 1000"),
        ("--scale", "1e400", "below 2^1024"),
        ("--scale", "2^99999", "below 2^1024"),
        ("--scale", "1e999999999", "expected a positive number"),
        ("--scale", "-2", "expected a positive number"),
    ]:
        status, _, err = run(["histogram", path, opt, value])
        assert status == 2, (opt, value, err)
        assert message in err, (opt, value, err)
        assert err.count("\n") == 1, (opt, value, err)
    for value in ("2^10", "2**-3", "1/8", "0x1p4", "1e300"):
        assert run(["histogram", path, "--scale", value])[0] == 0


def test_training_faults_are_one_warning_line_each() -> None:
    # a learning rate beyond fp32 in a pure bf16 run: the weights go non-finite, and the command
    # says so in one line per kind of fault, then reports the run as usual
    argv = ["train", "--data", "underflow", "--hidden", "4", "-q", "--epochs", "1", "--precision", "bf16"]
    status, out, err = run([*argv, "--lr", "1e39"])
    assert status == 0
    lines = err.splitlines()
    assert lines
    assert all(ln.startswith("floatlab: warning: step ") for ln in lines), err
    assert any("[nonfinite_weights]" in ln for ln in lines)
    assert "test accuracy" in out
    assert run([*argv, "--lr", "0.05"])[2] == ""  # a healthy run is quiet
