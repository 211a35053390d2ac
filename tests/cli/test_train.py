"""``floatlab train``, ``floatlab compare`` and ``floatlab sample`` through the real entry point.

The text runs use the bigram model of toy_models.py in the transformer's place (registered
under its name for the test), so that they exercise the command line in a second.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from toy_models import BigramLM

import floatlab.cli as cli
from floatlab.cli import train_cmds
from floatlab.train import History, StepStats
from floatlab.train.models import MODEL_CLASSES

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
    # off a terminal, the progress is one line per evaluation (here: the end of the one epoch)
    assert err.startswith("mixed-fp16 step 32/32 (epoch 1): test accuracy ")
    assert err.count("\n") == 1


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
        (["train", "--precision", "fp61"], "unknown precision policy or preset 'fp61'"),
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


class FakeTrainer:
    def __init__(self) -> None:
        self.history = History("fp16")


def test_progress_bar_on_a_terminal() -> None:
    buf = io.StringIO()
    tr = FakeTrainer()
    p = train_cmds.Progress(buf, total=10, label="fp16", tty=True, refresh=0.0)
    for _ in range(5):
        p.step(tr, StepStats(1.5, 0.5, 1024.0, True, 0.0, 0.0, 0.1, None))  # type: ignore[arg-type]
    tr.history.log_eval(epoch=1, step=5, train_loss=1.0, test_loss=1.0, test_accuracy=0.5)
    p.step(tr, StepStats(1.25, 0.5, 2048.0, False, 0.0, 0.0, 0.1, None))  # type: ignore[arg-type]
    drawn = buf.getvalue()
    assert "\r" in drawn
    assert "fp16:  50%|" in drawn
    assert "5/10" in drawn
    assert "loss 1.5000 scale 1024 skipped" in drawn
    assert "6/10" in drawn
    assert "loss 1.2500 scale 2048]" in drawn
    assert "fp16 step 5/10 (epoch 1): test accuracy 50.00 %, test loss 1.0000\n" in drawn  # above the bar
    p.close(tr.history)
    assert buf.getvalue().count("test accuracy") == 1  # shown once


def test_no_progress_bar_off_a_terminal_or_when_quiet(main: Main, capsys: pytest.CaptureFixture[str]) -> None:
    buf = io.StringIO()
    p = train_cmds.Progress(buf, total=10, label="fp16")  # (a StringIO is no terminal)
    p.step(FakeTrainer(), StepStats(1.5, 0.5, 1024.0, True, 0.0, 0.0, 0.1, None))  # type: ignore[arg-type]
    assert buf.getvalue() == ""
    assert main(["train", *SMALL, "-q"]) == 0
    assert capsys.readouterr().err == ""


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


# ---- steps, evaluation, the history as CSV --------------------------------------------------------
def test_steps_eval_every_and_a_csv_history(
    main: Main, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "h.csv"
    argv = ["train", "--data", "underflow", "--hidden", "8", "--steps", "10", "--eval-every", "4"]
    assert main([*argv, "--history", str(path), "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["summary"]["steps"] == 10
    assert [ln.split(":")[0] for ln in err.splitlines()] == [
        "mixed-fp16 step 4/10 (epoch 0)",
        "mixed-fp16 step 8/10 (epoch 0)",
        "mixed-fp16 step 10/10 (epoch 0)",
    ]
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["step"]) for r in rows] == list(range(1, 11))
    assert [int(r["step"]) for r in rows if r["test_loss"]] == [4, 8, 10]
    assert all(float(r["scale"]) == 65536.0 for r in rows)
    assert main(["train", "--data", "underflow", "--steps", "3", "--epochs", "2"]) == 2
    assert "argument --epochs: not allowed with argument --steps" in capsys.readouterr().err


def test_a_run_that_diverges_stops_keeps_its_history_and_exits_0(
    main: Main, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # pure fp16 (no loss scaler) at a learning rate far too high: the weights overflow, the loss is NaN
    hist, report = tmp_path / "h.json", tmp_path / "r.json"
    common = ["--data", "digits", "--hidden", "8", "--lr", "1e6", "--steps", "40", "--no-color", "-q"]
    argv = ["train", "--precision", "fp16", *common]
    assert main([*argv, "--history", str(hist), "--json", str(report)]) == 0
    out, err = capsys.readouterr()
    stop = [ln for ln in err.splitlines() if "stopped" in ln]
    assert stop == [
        "floatlab: warning: step 2: the loss became nan and the policy has no loss scaler to catch it, so "
        "the run stopped here (its history up to this step is kept)"
    ]
    assert "  stopped        step 2: the loss became nan" in out
    h = History.load(hist)
    assert h.n_steps == 2
    assert math.isnan(h.steps["loss"][-1])
    assert h.meta["stopped"] == stop[0][19:]
    assert json.loads(report.read_text())["summary"]["stopped"].startswith("step 2: ")
    assert main(["compare", "fp16", "mixed-fp16", *common]) == 0
    out, err = capsys.readouterr()
    assert "floatlab: warning: fp16: step 2: the loss became nan" in err
    assert "mixed-fp16: step" not in err
    assert "  fp16 stopped early, step 2: its loss became inf or NaN" in out


# ---- text -----------------------------------------------------------------------------------------
@pytest.fixture
def bigram_as_transformer() -> Iterator[None]:
    """The bigram model in the transformer's place (the model registry names where a model lives)."""
    transformer = MODEL_CLASSES["transformer"]
    MODEL_CLASSES.add("transformer", BigramLM)
    yield
    MODEL_CLASSES.add("transformer", transformer)


TEXT = ["--model", "transformer", "--data", "text", "--context", "16", "--optimizer", "adamw", "--lr", "0.05"]


def test_train_on_text_and_sample(
    main: Main, capsys: pytest.CaptureFixture[str], tmp_path: Path, bigram_as_transformer: None
) -> None:
    ck = tmp_path / "lm.npz"
    argv = ["train", *TEXT, "--steps", "40", "--eval-every", "20", "--checkpoint", str(ck), "--no-color"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert "bigram 72 x 72 on text (" in out
    assert "training windows, 256 validation, 72 characters" in out
    assert "40 steps, seed 0" in out
    bpc = float(out.split("  validation     ")[1].split()[0])
    assert 3.0 < bpc < 5.5
    assert [ln.split(" bits/char")[0].split(": ")[0] for ln in err.splitlines()] == [
        "mixed-fp16 step 20/40",
        "mixed-fp16 step 40/40",
    ]
    assert f"validation {bpc:.3f} bits/char" in err.splitlines()[-1]
    assert main(["sample", str(ck), "--chars", "50", "--temperature", "0", "--prompt", "And", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["prompt"] == "And"
    assert len(data["text"]) == 50
    assert data["temperature"] == 0.0
    assert main(["sample", str(ck), "--chars", "50", "--temperature", "0", "--prompt", "And"]) == 0
    assert capsys.readouterr().out == "And" + data["text"] + "\n"
    assert main(["sample", str(ck), "--chars", "5", "--prompt", "Ǣ"]) == 2
    assert "characters 'Ǣ' are not in the vocabulary" in capsys.readouterr().err


def test_compare_on_text_shows_bits_per_char(
    main: Main, capsys: pytest.CaptureFixture[str], bigram_as_transformer: None
) -> None:
    assert main(["compare", "fp32", "bf16", *TEXT, "--steps", "10", "-q", "--no-color"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:4] == ["policy", "bits/char", "val", "loss"]
    assert all(3.0 < float(ln.split()[1]) < 6.5 for ln in lines[1:3])


def test_sample_refuses_a_model_not_trained_on_text(
    main: Main, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    ck = tmp_path / "mlp.npz"
    assert main(["train", *SMALL, "-q", "--checkpoint", str(ck)]) == 0
    capsys.readouterr()
    assert main(["sample", str(ck)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"floatlab: error: checkpoint '{ck}' holds a model trained on 'underflow', not on text: sample "
        "needs one trained with --data text\n"
    )


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (
            ["train", "--model", "resnet"],
            "unknown model 'resnet': expected one of mlp, attention, transformer, convnet",
        ),
        (["compare", "fp32", "--model", "resnet"], "unknown model 'resnet'"),
        (
            ["train", "--data", "imagenet"],
            "unknown data set 'imagenet': expected one of digits, underflow, text",
        ),
        (
            ["train", "--model", "mlp", "--data", "text"],
            "data 'text' needs a language model (transformer): mlp",
        ),
        (
            ["train", "--model", "lm", "--data", "digits"],
            "model 'transformer' is a language model: it reads data 'text', not 'digits'",
        ),
        (["train", "--steps", "0"], "steps=0"),
        (["train", "--eval-every", "0"], "eval_every=0"),
        (["train", "--channels", "16,0"], "positive layer sizes"),
        (["train", "--history", "h.txt"], "--history"),
        (["train", "--no-such-option"], "unrecognized arguments: --no-such-option"),
        (["sample"], "the following arguments are required: CHECKPOINT.npz"),
        (["sample", "x.npz", "--chars", "-1"], "expected a number of characters from 0 to 100,000"),
        (["sample", "x.npz", "--temperature", "inf"], "expected a finite number >= 0"),
        (["sample", "/nonexistent/x.npz"], "no such file"),
    ],
)
def test_bad_input_is_one_line(
    main: Main, capsys: pytest.CaptureFixture[str], argv: list[str], words: str
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("floatlab: error:")
    assert err.count("\n") == 1
    assert words in err


def test_help_lists_the_new_options_and_the_sample_command(
    main: Main, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["train", "--help"]) == 0
    out = capsys.readouterr().out
    for opt in ("--steps", "--eval-every", "--layers", "--heads", "--context", "--channels", "--d-model"):
        assert opt in out
    assert "mlp, attention, transformer, convnet" in out
    assert ".csv" in out
    assert main(["sample", "--help"]) == 0
    out = capsys.readouterr().out
    for opt in ("--prompt", "--chars", "--temperature", "--seed"):
        assert opt in out


def test_a_preset_trains_and_an_override_is_reported(main: Main, capsys: pytest.CaptureFixture[str]) -> None:
    from floatlab.train.precision.presets import get_preset

    assert main(["train", *SMALL, "--preset", "apex-O3", "-q"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(get_preset("apex-O3").make_policy().describe())
    assert "overrides" not in out
    assert main(["train", *SMALL, "--preset", "apex-O3", "--master-weights", "on", "-q"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("apex-O3*: ")
    assert "overrides of apex-O3: master weights on (apex-O3: off)" in out


def test_compare_takes_presets_beside_policies(main: Main, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "fp32", "--preset", "apex-O2", "--preset", "mindspore-O3", *SMALL, "-q"]) == 0
    rows = [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]]
    assert rows == ["fp32", "apex-O2", "mindspore-O3"]
    assert main(["compare", "--preset", "apex-O9", *SMALL, "-q"]) == 2
    err = capsys.readouterr().err
    assert "unknown precision policy or preset 'apex-O9': did you mean apex-O3?" in err
    assert err.count("\n") == 1


def test_update_compensation_switch(main: Main, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", *SMALL, "--precision", "bf16", "--update-compensation", "on", "-q"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("bf16*: ")
    assert "compensated updates (Kahan, buffer in bf16)" in first
    assert main(["train", *SMALL, "--preset", "mindspore-O3", "--update-compensation", "on", "-q"]) == 0
    assert "update compensation on (mindspore-O3: off)" in capsys.readouterr().out
