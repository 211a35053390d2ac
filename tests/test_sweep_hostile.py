"""Sweeps under hostile input and hostile conditions: a config file's fixed settings against the
command line's defaults, grids and files that would expand past memory, a worker killed mid-run,
tables cut short or of another shape, and options out of range. Each refusal is one line on stderr
with exit status 2, before any run and with nothing written; the oracles are the trainer run by
hand, an uninterrupted sweep, and the policy lookup."""

from __future__ import annotations

import itertools
import tracemalloc
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import floatlab.sweeps.run as runner
from floatlab.cli import main
from floatlab.sweeps import (
    Grid,
    SweepEvent,
    load_grid_file,
    parse_seeds,
    read_table,
    summarize,
    sweep,
    write_table,
)
from floatlab.sweeps.table import run_rows, to_frame
from floatlab.train.policy import get_policy

FIXED: dict[str, Any] = {"data": "underflow", "hidden": (4,), "steps": 2}
TINY = ["--data", "underflow", "--hidden", "4", "--steps", "2", "--serial", "-q"]


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str], *named: str) -> str:
    """``floatlab sweep argv`` is one line on stderr naming ``named``, with exit status 2."""
    assert main(["sweep", *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("floatlab: error:"), err
    assert "internal error" not in err
    for text in named:
        assert text in err, (text, err)
    return err


# ---- 4: CSV and Parquet round-trip the same ------------------------------------------------------
def _rows() -> list[dict[str, Any]]:
    g = Grid({"seed": [0, 1]}, {**FIXED, "eval_every": 1, "precision": "fp16"})
    rows = runner.execute(g.tasks[0])
    return [*rows, *run_rows(g.tasks[1], error="FloatingPointError: the scale, 0, underflowed")]


def test_csv_and_parquet_read_back_what_was_written(tmp_path: Path) -> None:
    rows = _rows()
    written = to_frame(rows)
    for suffix in (".csv", ".parquet"):
        write_table(rows, tmp_path / f"t{suffix}")
        pd.testing.assert_frame_equal(read_table(tmp_path / f"t{suffix}"), written)


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_extending_a_sweep_keeps_one_summary_row_per_configuration(tmp_path: Path, suffix: str) -> None:
    out = tmp_path / f"t{suffix}"
    sweep({"seed": [0, 1, 2]}, FIXED, executor="serial", out=out)
    extended = sweep({"seed": [0, 1, 2, 3]}, FIXED, executor="serial", out=out)
    assert summarize(extended)["runs"].tolist() == [4]
    assert summarize(read_table(out))["runs"].tolist() == [4]
    pd.testing.assert_frame_equal(extended, sweep({"seed": [0, 1, 2, 3]}, FIXED, executor="serial"))


# ---- 8: a grid's size is known, and limited, before anything is built -------------------------
def _peak_bytes(fn: Any) -> int:
    tracemalloc.start()
    try:
        fn()
    except ValueError:
        pass
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


def test_a_huge_seed_range_is_refused_before_it_is_listed() -> None:
    with pytest.raises(ValueError, match=r"seeds '0-100000000': 100000001 seeds.*at most 10000"):
        parse_seeds("0-100000000")
    assert _peak_bytes(lambda: parse_seeds("0-100000000")) < 1 << 20
    assert len(parse_seeds("0-9999")) == 10000  # the limit itself is allowed


def test_a_huge_grid_is_refused_from_its_axes_lengths() -> None:
    axes = {"seed": range(10**6), "lr": range(-1, 10**6 - 1)}  # never listed: 10^12 runs
    with pytest.raises(ValueError, match=r"1000000000000 runs.*at most 10000"):
        Grid(axes, FIXED)
    assert _peak_bytes(lambda: Grid(axes, FIXED)) < 1 << 20


def test_the_command_line_refuses_a_huge_grid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "t.csv"
    _refused(capsys, [*TINY, "--out", str(out), "--seeds", "0-100000000"], "0-100000000", "10000")
    lrs = ",".join(str(0.001 * (i + 1)) for i in range(200))
    _refused(capsys, [*TINY, "--out", str(out), "--seeds", "0-99", "--grid", f"lr={lrs}"], "20000", "10000")
    assert not out.exists()


def _laughs(tmp_path: Path) -> Path:
    """A YAML file of a few hundred bytes whose nested aliases stand for 9^9 values."""
    names = "abcdefghi"
    items = ["&a [x, x, x, x, x, x, x, x, x]"]
    items += [f"&{c} [{', '.join([f'*{p}'] * 9)}]" for p, c in itertools.pairwise(names)]
    path = tmp_path / "laughs.yaml"
    path.write_text(f"grid:\n  data:\n    - [{', '.join(items)}]\nfixed:\n  steps: 1\n")
    assert path.stat().st_size < 500
    return path


def test_a_yaml_file_of_nested_aliases_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _laughs(tmp_path)
    with pytest.raises(ValueError, match=r"more than 100000 values"):
        load_grid_file(path)
    assert _peak_bytes(lambda: load_grid_file(path)) < 16 << 20
    _refused(capsys, ["--config", str(path), "--serial", "-q"], str(path), "100000")


def test_a_huge_sweep_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "big.toml"
    path.write_text("[grid]\nlr = [" + "0.1, " * 300_000 + "]\n")
    with pytest.raises(ValueError, match=r"big.toml.*at most 1048576 bytes"):
        load_grid_file(path)


# ---- 16: a row cut short is no finished run -----------------------------------------------------
@pytest.mark.parametrize("cut", ["last field", "mid row", "in the key", "whole row"])
@pytest.mark.parametrize("retry", [False, True])
def test_a_run_whose_rows_were_cut_short_runs_again(tmp_path: Path, cut: str, retry: bool) -> None:
    fixed, axes = {**FIXED, "eval_every": 1}, {"seed": [0, 1]}
    out = tmp_path / "t.csv"
    sweep(axes, fixed, executor="serial", out=out)
    text = out.read_text()
    head, last = text[: text.rstrip("\n").rfind("\n") + 1], text.rstrip("\n").rsplit("\n", 1)[1]
    keep = {"last field": len(last) - 2, "mid row": len(last) // 2, "in the key": 5, "whole row": 0}[cut]
    out.write_text(head + last[:keep])
    seen: list[SweepEvent] = []
    resumed = runner.run_grid(Grid(axes, fixed), str(out), executor="serial", retry_failed=retry,
                              callback=seen.append)  # fmt: skip
    assert (seen[0].total, seen[0].skipped) == (1, 1)  # the last run, and only it, runs again
    fresh = sweep(axes, fixed, executor="serial")
    pd.testing.assert_frame_equal(to_frame(resumed), fresh)
    pd.testing.assert_frame_equal(read_table(out), fresh)


# ---- 21: one policy under two names ----------------------------------------------------------
@pytest.mark.parametrize(
    "argv", [["--grid", "precision=fp16,FP16"], ["--precision", "fp16", "--precision", "half"]]
)
def test_one_policy_under_two_names_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    out = tmp_path / "t.csv"
    _refused(capsys, [*TINY, "--out", str(out), *argv], repr(argv[-1].split(",")[-1]), "fp16")
    assert not out.exists()


def test_a_precision_is_kept_under_the_lookup_s_name() -> None:
    g = Grid({"precision": ["FP16", "amp", "APEX_O2"]}, FIXED)
    want = [get_policy("FP16").name, get_policy("amp").name, "apex-O2"]
    assert [t.config.precision for t in g] == want
    assert g.tasks[0].run_id == Grid({"precision": ["fp16"]}, FIXED).tasks[0].run_id
