"""``floatlab compare --seeds`` and the scaler knobs on the command line, through the real entry point:
the printed means and intervals against an independent Student-t interval over the runs' own JSON."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import floatlab.cli as cli

pytest.importorskip("pandas")
SMALL = ["--data", "digits", "--steps", "30", "--hidden", "16", "--no-color"]


Main = Callable[[list[str]], int]


@pytest.fixture
def main() -> Main:
    """floatlab's main() (compare and train are in its command list)."""
    return cli.main


def test_compare_over_seeds_prints_means_intervals_and_gaps(
    main: Main, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from scipy.stats import t as student_t  # type: ignore[import-untyped,unused-ignore]

    plot = tmp_path / "seeds.png"
    args = ["compare", "fp32", "bf16", *SMALL, "--seeds", "0-2", "--serial", "--plot", str(plot)]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "final test accuracy (95% CI)" in text
    assert "gap to fp32 (95% CI)" in text
    assert plot.read_bytes()[:4] == b"\x89PNG"
    assert main([*args, "-q", "--json", str(tmp_path / "runs.json")]) == 0
    data = json.loads((tmp_path / "runs.json").read_text())
    by: dict[str, list[float]] = {}
    for h in data["histories"]:
        by.setdefault(h["label"], []).append(h["evals"]["test_accuracy"][-1])
    assert {k: len(v) for k, v in by.items()} == {"fp32": 3, "bf16": 3}
    for row in data["final"]:
        v = np.array(by[row["label"]])
        half = student_t.ppf(0.975, 2) * v.std(ddof=1) / math.sqrt(3)
        assert row["mean"] == pytest.approx(v.mean())
        if half > 0:
            assert (row["low"], row["high"]) == pytest.approx((v.mean() - half, v.mean() + half))
        line = next(ln for ln in text.splitlines() if ln.split()[:1] == [row["label"]])
        assert f"{100 * v.mean():.2f} %" in line


def test_the_pool_prints_what_the_serial_run_prints(main: Main, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["compare", "fp32", "mixed-bf16", *SMALL, "--seeds", "0,1", "-q"]
    assert main([*args, "--serial"]) == 0
    serial = capsys.readouterr().out
    assert main([*args, "--workers", "2"]) == 0
    assert capsys.readouterr().out == serial


def test_the_growth_interval_shows_the_scale_growing_within_100_steps(main: Main, tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    args = ["train", "--precision", "mixed-fp16", "--growth-interval", "10", "--data", "digits",
            "--steps", "100", "--hidden", "16", "-q", "--json", str(out)]  # fmt: skip
    assert main(args) == 0
    scales = json.loads(out.read_text())["history"]["steps"]["scale"]
    assert max(scales) > scales[0] == 65536.0


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--growth-interval", "0"], "growth_interval=0: expected an integer >= 1"),
        (["--growth-factor", "0.5"], "growth_factor=0.5: expected a finite number >= 1"),
        (["--backoff-factor", "1.5"], "backoff_factor=1.5: expected a number in (0, 1]"),
        (["--seeds", "3-1"], "seeds '3-1'"),
        (["--seeds", "0,1,0"], "seeds '0,1,0': seed 0 given twice: expected each seed once"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(
    main: Main, capsys: pytest.CaptureFixture[str], tmp_path: Path, extra: list[str], message: str
) -> None:
    plot = tmp_path / "p.png"
    assert main(["compare", "fp32", "mixed-fp16", *SMALL, "--seeds", "0-1", *extra, "--plot", str(plot)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert message in err
    assert not plot.exists()
