"""``floatlab train`` and ``floatlab compare`` through the real entry point."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

import pytest

import floatlab.cli as cli
from floatlab.cli import train_cmds
from floatlab.train import StepStats

Main = Callable[[list[str]], int]


@pytest.fixture
def main(monkeypatch: pytest.MonkeyPatch) -> Main:
    """floatlab's main(), with the training commands in its command list."""
    if train_cmds not in cli.COMMANDS:
        monkeypatch.setattr(cli, "COMMANDS", (*cli.COMMANDS, train_cmds))
    return cli.main


SMALL = ["--data", "underflow", "--epochs", "1", "--hidden", "16", "--no-color"]


def test_train_prints_a_summary(main: Main, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", *SMALL, "--precision", "mixed-fp16"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(
        "mixed-fp16: forward fp16, backward fp16, fp32 master weights, dynamic loss scaling"
    )
    for words in (
        "test accuracy",
        "loss scale     65536 (start 65536)",
        "flushed",
        "swallowed",
        "(0 skipped)",
    ):
        assert words in out
    assert "mixed-fp16 epoch 1/1: test accuracy" in err  # progress, one line per epoch off a terminal


def test_train_json(main: Main, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["train", *SMALL, "--precision", "fp16", "-q", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["policy"]["name"] == "fp16"
    assert data["summary"]["steps"] == 32
    assert data["summary"]["mean_flushed"] > 0.9
    out = tmp_path / "run.json"
    assert main(["train", *SMALL, "--precision", "fp16", "-q", "--json", str(out)]) == 0
    assert "test accuracy" in capsys.readouterr().out
    saved = json.loads(out.read_text())
    assert saved["summary"] == data["summary"]
    assert len(saved["history"]["steps"]["loss"]) == 32


def test_switches_change_the_policy(main: Main, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "train",
        *SMALL,
        "--precision",
        "fp16",
        "-q",
        "--json",
        "--master-weights",
        "on",
        "--loss-scaling",
        "static",
        "--static-scale",
        "65536",
        "--fp32-ops",
        "softmax,norm",
        "--forward",
        "bf16",
        "--rounding",
        "rne",
        "--update-rounding",
        "stochastic",
    ]
    assert main(argv) == 0
    p = json.loads(capsys.readouterr().out)["policy"]
    assert (p["name"], p["forward"], p["backward"], p["master_weights"]) == ("fp16*", "bf16", "fp16", True)
    assert (p["loss_scaling"], p["static_scale"], p["fp32_ops"]) == ("static", 65536.0, ["norm", "softmax"])
    assert p["update_rounding"] == "stochastic"


def test_compare_table_and_plot(main: Main, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    png = tmp_path / "curves.png"
    assert main(["compare", "fp32", "fp16", "mixed-fp16", *SMALL, "-q", "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["policy", "test", "acc"]
    assert [ln.split()[0] for ln in lines[1:4]] == ["fp32", "fp16", "mixed-fp16"]
    assert f"curves written to {png}" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["compare", "fp32", "bf16", *SMALL, "-q", "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert [r["label"] for r in runs] == ["fp32", "bf16"]


def test_checkpoint_and_resume(main: Main, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    ck = tmp_path / "ck.npz"
    base = ["train", "--data", "underflow", "--hidden", "16", "-q", "--json"]
    assert main([*base, "--epochs", "2"]) == 0
    straight = json.loads(capsys.readouterr().out)["summary"]
    assert main([*base, "--epochs", "1", "--checkpoint", str(ck)]) == 0
    capsys.readouterr()
    assert main([*base, "--epochs", "2", "--resume", str(ck)]) == 0
    assert json.loads(capsys.readouterr().out)["summary"] == straight


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["train", "--precision", "fp61"], "unknown precision policy 'fp61'"),
        (["train", "--forward", "fp64"], "fp64 for both"),
        (["train", "--master-weights", "maybe"], "expected on or off"),
        (["train", "--fp32-ops", "gemm"], "fp32 ops ['gemm']"),
        (["train", "--data", "mnist", "--epochs", "1"], "unknown data set 'mnist'"),
        (["compare"], "needs at least one policy"),
        (["train", "--hidden", "0"], "positive layer sizes"),
    ],
)
def test_errors_are_one_line(
    main: Main, capsys: pytest.CaptureFixture[str], argv: list[str], words: str
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("floatlab: error:")
    assert words in err
    assert err.count("\n") == 1


def test_progress_bar_on_a_terminal() -> None:
    buf = io.StringIO()
    p = train_cmds.Progress(buf, total=10, label="fp16", tty=True, width=10)
    p.step(5, 0, 2, StepStats(1.5, 0.5, 1024.0, True, 0.0, 0.0, 0.1, None))
    p.epoch_done(1, 2, {"test_accuracy": 0.5, "test_loss": 1.0})
    assert buf.getvalue() == "\rfp16 [#####.....] 5/10 epoch 1/2 loss 1.5000 scale 1024 skipped   "
    p.epoch_done(2, 2, {"test_accuracy": 0.75, "test_loss": 0.5})
    assert buf.getvalue().endswith("fp16 epoch 2/2: test accuracy 75.00 %, test loss 0.5000\n")


def test_help_lists_the_switches(main: Main, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--help"]) == 0
    out = capsys.readouterr().out
    for opt in (
        "--precision",
        "--master-weights",
        "--loss-scaling",
        "--fp32-reductions",
        "--fp32-ops",
        "--resume",
    ):
        assert opt in out
    assert main(["compare", "--help"]) == 0
    assert "--plot" in capsys.readouterr().out
