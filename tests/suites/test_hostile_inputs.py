"""Hostile inputs of issue 23: FIFOs, devices and folders where a file is read (refused by name,
never a hang), zip bombs (capped before they inflate), control characters in names (escaped),
long echoes (cut), digit limits (one floatlab line), bad benchmark options, colliding base names,
a closed stdout, stray warnings, the epochs of a resumed run, and figures that are the same bytes
in identical runs. Commands that could hang run in a child with a timeout, so that a hang fails."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import warnings
import zipfile
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from floatlab import cli
from floatlab.cli import main
from floatlab.io import MAX_BYTES, check_archive, read_npz
from floatlab.text import safe

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 60  # seconds: far more than any of these commands takes; a hang fails instead of blocking


def _floatlab(*argv: str, stdin: Any = subprocess.DEVNULL) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NUMBA_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "floatlab", *argv],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env,
        stdin=stdin,
        check=False,
    )


def _one_error(err: str) -> str:
    assert err.count("\n") == 1, err
    assert err.startswith("floatlab: error: "), err
    assert "Traceback" not in err
    return err


# ---- 11: anything but a regular file ----------------------------------------------------------
READERS = [
    ("round", ["-f", "bf16"], "f.npy"),
    ("underflow", [], "f.npy"),
    ("accumulate", [], "f.npy"),
    ("histogram", [], "f.npy"),
    ("histogram", [], "f.npz"),
    ("histogram", [], "f.pt"),
    ("train", ["--epochs", "1", "--quiet", "--resume"], "f.npz"),
]


@pytest.fixture
def specials(tmp_path: Path) -> dict[str, Path]:
    out = {}
    for name in ("f.npy", "f.npz", "f.pt"):
        os.mkfifo(tmp_path / name)
        out[f"fifo:{name}"] = tmp_path / name
        (tmp_path / "dirs" / name).mkdir(parents=True)
        out[f"dir:{name}"] = tmp_path / "dirs" / name
    return out


@pytest.mark.parametrize(("command", "options", "name"), READERS)
@pytest.mark.parametrize("kind", ["fifo", "device", "dir"])
def test_a_fifo_a_device_or_a_folder_is_refused_by_name_never_a_hang(
    specials: dict[str, Path], command: str, options: list[str], name: str, kind: str
) -> None:
    path = "/dev/zero" if kind == "device" else str(specials[f"{kind}:{name}"])
    argv = [command, *options, path]
    if command == "train":
        argv += ["--data", "underflow", "--hidden", "8"]
    r = _floatlab(*argv)
    assert r.returncode == 2
    err = _one_error(r.stderr)
    expected = {
        "fifo": "is not a regular file (a FIFO)",
        "device": "is not a regular file (a character device)",
        "dir": "is a directory",
    }[kind]
    assert expected in err
    assert "no such file" not in err
    assert "cannot parse" not in err


# ---- 12: zip bombs ------------------------------------------------------------------------------
def _bomb(path: Path, mib: int = 64) -> Path:
    """A .npz whose one member is ``mib`` MiB of zeros: about ``mib`` KiB on disk. The zeros are
    written in pieces, so that building it takes little memory."""
    header = np.lib.format.header_data_from_array_1_0(np.zeros(0, np.float64))
    header["shape"] = (mib << 17,)  # float64s in mib MiB
    with (
        zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf,
        zf.open("g.npy", "w", force_zip64=True) as fh,
    ):
        np.lib.format.write_array_header_1_0(fh, header)
        zeros = bytes(1 << 20)
        for _ in range(mib):
            fh.write(zeros)
    return path


def _claim(path: Path, member: str, size: int) -> None:
    """Make the central directory claim ``size`` (uncompressed) for ``member``: a lying header."""
    data = bytearray(path.read_bytes())
    at = data.find(b"PK\x01\x02")
    while at >= 0:
        name_len = struct.unpack_from("<H", data, at + 28)[0]
        name = bytes(data[at + 46 : at + 46 + name_len]).decode()
        if name == member:
            if struct.unpack_from("<I", data, at + 24)[0] == 0xFFFFFFFF:  # zip64: the size is in the extra
                extra = at + 46 + name_len
                struct.pack_into("<Q", data, extra + 4, size)
            else:
                struct.pack_into("<I", data, at + 24, size)
            path.write_bytes(bytes(data))
            return
        at = data.find(b"PK\x01\x02", at + 4)
    raise AssertionError(f"no member {member}")


def test_a_zip_bomb_is_refused_before_it_inflates_on_the_command_line(tmp_path: Path) -> None:
    bomb = _bomb(tmp_path / "bomb.npz")
    assert bomb.stat().st_size < 1 << 20  # 64 MiB of zeros in well under 1 MiB
    r = _floatlab("histogram", str(bomb), "--max-bytes", "16MiB")
    assert r.returncode == 2
    err = _one_error(r.stderr)
    assert "over the cap of 16 MiB" in err
    assert "--max-bytes" in err
    r = _floatlab("histogram", str(bomb), "--max-bytes", "128MiB", "--json")
    assert r.returncode == 0, r.stderr
    r = _floatlab("train", "--resume", str(bomb), "--max-bytes", "1MiB", "--epochs", "1")
    assert r.returncode == 2
    assert "over the cap of 1 MiB" in _one_error(r.stderr)
    r = _floatlab("histogram", str(bomb), "--max-bytes", "lots")
    assert r.returncode == 2
    assert "expected a positive number of bytes" in _one_error(r.stderr)


def test_the_reader_checks_declared_sizes_with_the_real_default(tmp_path: Path) -> None:
    assert MAX_BYTES <= 1 << 30
    bomb = _bomb(tmp_path / "bomb.npz", mib=1)
    assert set(read_npz(str(bomb))) == {"g"}  # small enough: read
    _claim(bomb, "g.npy", 2 << 30)  # the directory now claims 2 GiB
    with pytest.raises(ValueError, match=r"would inflate to 2,147,483,648 bytes .* over the cap of 1 GiB"):
        check_archive(str(bomb))
    with pytest.raises(ValueError, match="over the cap of 1 GiB"):
        read_npz(str(bomb))


def test_a_header_that_understates_the_size_never_inflates_past_it(tmp_path: Path) -> None:
    bomb = _bomb(tmp_path / "liar.npz", mib=4)
    _claim(bomb, "g.npy", 1000)  # claims 1000 bytes, inflates to 4 MiB
    with pytest.raises(ValueError, match=r"Bad CRC|claims shape") as e:
        read_npz(str(bomb), max_bytes=1 << 20)
    assert "cannot read" in str(e.value)
    # an array header that asks for more than the member and the cap allow is refused unread
    small = _bomb(tmp_path / "small.npz", mib=2)
    with pytest.raises(ValueError, match="cap"):
        read_npz(str(small), max_bytes=1 << 20)


# ---- 13: control characters and long echoes -----------------------------------------------------
FORGED = "a\x1b[2J\nfloatlab: error: forged\u202e"


def test_names_from_a_file_are_escaped_in_every_output(tmp_path: Path) -> None:
    path = tmp_path / "g.npz"
    savez: Any = np.savez  # (numpy's stubs take a keyword for an option)
    savez(path, **{FORGED: np.ones(3, np.float32), "b": np.ones(2)})
    for extra in ([], ["--no-color"], ["--color"]):
        r = _floatlab("histogram", str(path), *extra)
        assert r.returncode == 0
        assert "\x1b[2J" not in r.stdout
        assert "\u202e" not in r.stdout
        assert not any(line.startswith("floatlab: error") for line in r.stdout.splitlines())
        assert r"a\x1b[2J\nfloatlab: error: forged\u202e" in r.stdout
    # an error naming such an entry is one escaped line too
    bad = tmp_path / "bad.npz"
    savez(bad, **{FORGED: np.array(["x"])})
    r = _floatlab("histogram", str(bad))
    err = _one_error(r.stderr)
    assert "\x1b" not in err
    assert "\u202e" not in err


def test_a_file_name_with_control_characters_is_escaped(tmp_path: Path) -> None:
    path = tmp_path / "x\x1b[31mred\n.npy"
    np.save(path, np.ones(2))
    for command in (["round", "-f", "bf16"], ["histogram"]):
        r = _floatlab(*command, str(path), "-o", str(tmp_path / "o.npy")) if command[0] == "round" else None
        r = r or _floatlab(*command, str(path))
        assert "\x1b[31m" not in r.stdout + r.stderr


def test_long_input_is_cut_in_messages() -> None:
    r = _floatlab("decode", "0xZ" + "0" * 130_000)
    err = _one_error(r.stderr)
    assert len(err) < 1200
    assert "130,003 characters" in err
    assert safe("x" * 10_000).endswith("(10,000 characters)")


# ---- smaller ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["decode", "0" * 130_000 + "1", "-f", "fp16"], "too wide for any format"),
        (["decode", "0x" + "0" * 130_000 + "1"], "too wide for any format"),
        (["encode", "0x" + "1" * 4_000_000 + "p0"], "hex digits: expected at most 100,000"),
        (["bench", "gemm", "--min-seconds", "nan"], "expected a number of seconds from 0 to 3600"),
        (["bench", "gemm", "--min-seconds", "-1"], "expected a number of seconds from 0 to 3600"),
        (["bench", "train", "--batch-size", "0"], "expected a positive integer"),
        (["bench", "train", "--steps", "0"], "expected a positive integer"),
        # refused before the checkpoint is read (it does not exist)
        (
            ["sample", "missing.npz", "--chars", "99999999999999999999"],
            "argument --chars: '99999999999999999999': expected a number of characters from 0 to 100,000",
        ),
        (["sample", "missing.npz", "--chars", "100001"], "from 0 to 100,000"),
        (["sample", "missing.npz", "--seed", "-1"], "argument --seed: '-1': expected an integer >= 0"),
        (
            [
                *("train", "--data", "underflow", "--hidden", "4", "-q", "--precision", "fp8-delayed"),
                *("--amax-history", "100000000"),
            ],
            "amax_history=100000000: expected an integer from 1 to 4,096",
        ),
    ],
)
def test_limits_give_one_floatlab_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = _one_error(capsys.readouterr().err)
    assert message in err
    assert "set_int_max_str_digits" not in err


def test_digit_limits_in_the_library_are_floatlab_errors() -> None:
    from floatlab.cli._common import parse_code
    from floatlab.gradhist import histogram

    with pytest.raises(ValueError, match="too wide") as e:
        parse_code("0" * 130_000 + "1", "fp16")
    assert "set_int_max_str_digits" not in str(e.value)
    with pytest.raises(ValueError, match=r"scale=2\^-100000: expected a finite positive number"):
        histogram(np.ones(3)).verdict("fp16", scale=Fraction(1, 2**100_000))
    with pytest.raises(ValueError, match="over 4300 digits"):
        histogram(np.ones(3)).verdict("fp16", scale=Fraction(3, 10**5000))


def test_files_with_one_base_name_stay_apart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for sub, n in (("d1", 3), ("d2", 5)):
        (tmp_path / sub).mkdir()
        np.save(tmp_path / sub / "g.npy", np.ones(n))
    os.chdir(tmp_path)
    assert main(["histogram", "d1/g.npy", "d2/g.npy", "--json"]) == 0
    import json

    arrays = json.loads(capsys.readouterr().out)["arrays"]
    assert {k: v["total"] for k, v in arrays.items()} == {"d1/g.npy": 3, "d2/g.npy": 5}


def test_a_closed_stdout_is_one_line_and_status_2() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NUMBA_NUM_THREADS": "1"}
    r = subprocess.run(
        ["bash", "-c", f"{sys.executable} -m floatlab encode 0.1 --json >&-"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env,
        check=False,
    )
    assert r.returncode == 2
    err = _one_error(r.stderr)
    assert "standard output is closed" in err
    assert "internal error" not in err


def test_stray_warnings_never_add_lines_to_an_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def failing(args: Any, ui: Any) -> int:
        np.log(np.zeros(1))  # a numpy RuntimeWarning
        warnings.warn("a torch-like note", UserWarning, stacklevel=1)
        raise ValueError("the one reason")

    def succeeding(args: Any, ui: Any) -> int:
        warnings.warn("worth\nknowing", UserWarning, stacklevel=1)
        return 0

    parser = cli.build_parser()
    for run, status in ((failing, 2), (succeeding, 0)):
        monkeypatch.setattr(cli, "build_parser", lambda *commands: parser)
        parser.set_defaults(run=run)
        with np.errstate(all="warn"), warnings.catch_warnings():
            warnings.simplefilter("default")  # (the test run makes warnings errors)
            assert main([]) == status
        err = capsys.readouterr().err
        if status == 2:
            assert err == "floatlab: error: the one reason\n"
        else:
            assert err == "floatlab: warning: UserWarning: worth knowing\n"


def test_a_resumed_run_records_the_epochs_trained_in_all(tmp_path: Path) -> None:
    import json

    common = ["--data", "underflow", "--hidden", "8", "--quiet", "--no-color"]
    ck = str(tmp_path / "ck.npz")
    hist = tmp_path / "h.json"
    assert main(["train", "--epochs", "1", "--checkpoint", ck, *common]) == 0
    assert main(["train", "--epochs", "2", "--resume", ck, "--history", str(hist), *common]) == 0
    meta = json.loads(hist.read_text())["meta"]
    assert meta["epochs"] == 2
    assert meta["config"]["epochs"] == 2


@pytest.mark.parametrize("suffix", ["pdf", "svg", "png"])
def test_identical_runs_write_identical_figures(tmp_path: Path, suffix: str) -> None:
    from floatlab.train import History, compare

    np.save(tmp_path / "g.npy", np.array([1e-8, 1.0, 2.0], np.float32))
    outs = []
    for i in range(2):
        out = tmp_path / f"h{i}.{suffix}"
        assert main(["histogram", str(tmp_path / "g.npy"), "--plot", str(out)]) == 0
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    h = History("x")
    for step in range(3):
        h.log_step(
            step=step,
            epoch=0,
            loss=1.0 / (step + 1),
            accuracy=0.5,
            scale=1.0,
            skipped=False,
            flushed=0.0,
            swallowed=0.0,
            lr=0.1,
            grad_norm=None,
        )
    figures = []
    for i in range(2):
        out = tmp_path / f"c{i}.{suffix}"
        compare([h], str(out))
        figures.append(out.read_bytes())
    assert figures[0] == figures[1]


def test_the_guarantees_page_states_these_promises() -> None:
    text = (ROOT / "docs" / "guarantees.md").read_text(encoding="utf-8")
    section = text.split("## Hostile inputs", 1)[1].split("\n## ", 1)[0]
    assert MAX_BYTES == 1 << 30
    assert "at most **1 GiB**" in section
    for promise in (
        "--max-bytes",
        "floatlab.text.safe",
        "FLOATLAB_LESSONS_TOKEN",
        "--no-token",
        "1,000 characters",
    ):
        assert promise in section, promise
    for test_file in ("tests/suites/test_hostile_inputs.py", "tests/cli/test_lessons.py"):
        assert test_file in section
        assert (ROOT / test_file).is_file()


# ---- 7: the simulators refuse what the rounding core refuses ------------------------------------
WRONG = [
    (np.array([1 + 2j]), "dtype complex128"),
    (np.array(["0.1"]), "dtype <U3"),
    (np.array([1.0, None], dtype=object), "dtype object"),
    (np.array(["2020-01-01"], dtype="datetime64[D]"), "dtype datetime64"),
    (["0.1"], "dtype <U3"),
]


@pytest.mark.parametrize(("value", "message"), WRONG)
def test_the_simulators_refuse_wrong_dtypes(value: Any, message: str) -> None:
    from floatlab import simulate

    for run in (
        lambda v: simulate.add(v, v, "fp16"),
        lambda v: simulate.underflow(v, "fp16"),
        lambda v: simulate.accumulate(v, "fp16"),
    ):
        with pytest.raises(ValueError, match=message):
            run(value)


@pytest.mark.parametrize("command", ["underflow", "accumulate", "round"])
def test_the_commands_refuse_wrong_dtypes(
    tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for i, (value, _message) in enumerate(WRONG[:4]):
        path = tmp_path / f"x{i}.npy"
        np.save(path, np.asarray(value), allow_pickle=True)
        assert main([command, str(path)]) == 2
        err = _one_error(capsys.readouterr().err)
        assert "dtype" in err or "object" in err


def test_a_checkpoint_whose_array_header_claims_more_than_it_holds_is_refused_unread(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import io

    buf = io.BytesIO()
    header = np.lib.format.header_data_from_array_1_0(np.zeros(0))
    header["shape"] = (10**10,)  # 80 GB claimed, 16 bytes held
    np.lib.format.write_array_header_1_0(buf, header)
    path = tmp_path / "ck.npz"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("w.npy", buf.getvalue() + bytes(16))
    assert main(["train", "--resume", str(path), "--epochs", "1", "--quiet"]) == 2
    err = _one_error(capsys.readouterr().err)
    assert "claims shape (10000000000,)" in err


def test_the_amax_history_is_bounded_in_the_recipe_itself() -> None:
    from floatlab.train.precision.policy import get_policy
    from floatlab.train.recipes.recipe import MAX_AMAX_HISTORY, Fp8Recipe

    assert MAX_AMAX_HISTORY == 4096
    assert Fp8Recipe("delayed", amax_history=MAX_AMAX_HISTORY).amax_history == 4096
    for bad in (MAX_AMAX_HISTORY + 1, 10**8, 10**30):
        with pytest.raises(ValueError, match=r"amax_history=\d+: expected an integer from 1 to 4,096"):
            Fp8Recipe("delayed", amax_history=bad)
        with pytest.raises(ValueError, match="expected an integer from 1 to 4,096"):
            get_policy("fp8-delayed").replace(amax_history=bad)


def test_sampling_refuses_too_many_characters_and_negative_seeds_before_the_first() -> None:
    from floatlab.cli.sample_cmd import register
    from floatlab.train.analysis.sampling import MAX_CHARS, sample
    from floatlab.train.data.text import load_text
    from floatlab.train.models import MLP
    from floatlab.train.trainer import Trainer

    data = load_text(context=4)
    tr = Trainer(MLP(4, (8,), data.n_classes), data, "fp32")  # (not a language model: never run)
    with pytest.raises(ValueError, match=f"n_chars={MAX_CHARS + 1}: expected an integer from 0 to 100,000"):
        sample(tr, "In", MAX_CHARS + 1)
    with pytest.raises(ValueError, match="n_chars=99999999999999999999: expected"):
        sample(tr, "In", 99999999999999999999)
    with pytest.raises(ValueError, match="seed=-1: expected an integer >= 0"):
        sample(tr, "In", 10, seed=-1)
    import argparse

    help_text = register(argparse.ArgumentParser().add_subparsers()).format_help()
    assert f"at most {MAX_CHARS:,}" in " ".join(help_text.split())
