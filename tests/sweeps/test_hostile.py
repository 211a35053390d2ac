"""Sweeps under hostile input and hostile conditions: a config file's fixed settings against the
command line's defaults, grids and files that would expand past memory, a worker killed mid-run,
tables cut short or of another shape, and options out of range. Each refusal is one line on stderr
with exit status 2, before any run and with nothing written; the oracles are the trainer run by
hand, an uninterrupted sweep, and the policy lookup."""

from __future__ import annotations

import itertools
import os
import signal
import threading
import tracemalloc
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any, ClassVar

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
from floatlab.train import TrainConfig, Trainer
from floatlab.train.precision.policy import get_policy

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


# ---- 1: a config file's fixed settings stand unless the command line gives one ------------------
def _config(tmp_path: Path) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(
        '[grid]\nlr = [0.05]\n[fixed]\nprecision = "bf16"\nseed = 5\ndata = "underflow"\nsteps = 2\n'
        "hidden = [4]\n"
    )
    return path


def test_the_command_line_keeps_a_config_file_s_fixed_precision_and_seed(tmp_path: Path) -> None:
    path, out = _config(tmp_path), tmp_path / "t.parquet"
    assert main(["sweep", "--config", str(path), "--serial", "-q", "--out", str(out)]) == 0
    t = read_table(out)
    assert t[["precision", "seed"]].drop_duplicates().values.tolist() == [["bf16", 5]]
    # the Python sweep of the same file is the oracle
    pd.testing.assert_frame_equal(t, sweep(path, executor="serial"))
    h = Trainer.from_config(TrainConfig(precision="bf16", seed=5, lr=0.05, data="underflow", steps=2,
                                        hidden=(4,))).run()  # fmt: skip
    assert t["test_loss"].tolist() == h.evals["test_loss"]


@pytest.mark.parametrize(
    ("given", "want"),
    [
        (["--seed", "0"], [["bf16", 0]]),  # given, though it is the default: it overrides
        (["--precision", "fp32"], [["fp32", 5]]),
        (["--seeds", "1-2"], [["bf16", 1], ["bf16", 2]]),
    ],
)
def test_an_option_given_on_the_command_line_overrides_the_file(
    tmp_path: Path, given: list[str], want: list[list[Any]]
) -> None:
    path, out = _config(tmp_path), tmp_path / "t.parquet"
    assert main(["sweep", "--config", str(path), "--serial", "-q", "--out", str(out), *given]) == 0
    assert read_table(out)[["precision", "seed"]].drop_duplicates().values.tolist() == want


def test_an_option_given_replaces_the_file_s_axis(tmp_path: Path) -> None:
    path, out = _config(tmp_path), tmp_path / "t.parquet"
    assert main(["sweep", "--config", str(path), "--serial", "-q", "--out", str(out), "--lr", "0.5"]) == 0
    assert read_table(out)[["precision", "seed", "lr"]].values.tolist() == [["bf16", 5, 0.5]]


@pytest.mark.parametrize(
    ("argv", "want"),
    [
        (["--grid", "precision=fp32,bf16"], [["fp32", 0], ["bf16", 0]]),
        (["--grid", "seed=1,2", "--precision", "fp32"], [["fp32", 1], ["fp32", 2]]),
    ],
)
def test_grid_axes_of_the_command_line_take_no_default_values(
    tmp_path: Path, argv: list[str], want: list[list[Any]]
) -> None:
    out = tmp_path / "t.parquet"
    assert main(["sweep", *TINY, "--out", str(out), *argv]) == 0
    assert read_table(out)[["precision", "seed"]].values.tolist() == want


@pytest.mark.parametrize(
    ("argv", "named"),
    [(["--seed", "3", "--seeds", "0-1"], "--seed"), (["--lr", "0.1", "--grid", "lr=0.1,0.2"], "--lr")],
)
def test_an_option_and_an_axis_of_the_same_key_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], named: str
) -> None:
    out = tmp_path / "t.csv"
    _refused(capsys, [*TINY, "--out", str(out), *argv], named, "expected one of them")
    assert not out.exists()


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


# ---- 9: a worker killed mid-run is a failed run; the sweep goes on -----------------------------
class _Pid:
    def __reduce__(self) -> tuple[Any, ...]:
        return (os.getpid, ())


class _Killer:
    """Data that kills the process that receives it, as the out-of-memory killer would: unpickling
    it in a pool's worker sends that worker SIGKILL (in this process it is never unpickled)."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.kill, (_Pid(), signal.SIGKILL))


def _killing_sweep(
    monkeypatch: pytest.MonkeyPatch, axes: dict[str, Any], killed: set[int], workers: int
) -> Any:
    """``axes`` swept on a pool of ``workers`` whose children die on the runs of data seeds ``killed``;
    this process's share waits for the first failure, so the children surely get runs."""
    data = runner._shared_data
    failed = threading.Event()

    def shared(tasks: list[Any]) -> dict[Any, Any]:
        return {k: _Killer() if k[1] in killed else d for k, d in data(tasks).items()}

    train = runner._train

    def here(
        task: Any, threads: int, d: Any, send: str = "rows"
    ) -> Any:  # this process's share: a normal run
        failed.wait(60)
        return train(task, threads, None if isinstance(d, _Killer) else d, send)

    def callback(event: SweepEvent) -> None:
        if event.status == "failed":
            failed.set()

    monkeypatch.setattr(runner, "_shared_data", shared)
    monkeypatch.setattr(runner, "_train", here)
    return sweep(axes, FIXED, executor="process", workers=workers, callback=callback)


def _check_killed(df: Any, reference: Any, killed: set[int]) -> None:
    assert failed_runs(df) >= 1
    for (ds, seed), rows in df.groupby(["data_seed", "seed"], sort=False):
        want = reference[(reference["data_seed"] == ds) & (reference["seed"] == seed)]
        if rows["status"].iloc[0] == "failed":
            assert ds in killed  # only a run whose worker died, never one beside it
            assert "worker process died" in rows["reason"].iloc[0]
        else:
            assert rows["test_loss"].tolist() == want["test_loss"].tolist()


def failed_runs(df: Any) -> int:
    return int((df.groupby("run_id")["status"].first() == "failed").sum())


def test_a_killed_worker_is_a_failed_run_and_the_sweep_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    axes = {"data_seed": [0], "seed": [0, 1, 2]}
    reference = sweep(axes, FIXED, executor="serial")
    df = _killing_sweep(monkeypatch, axes, {0}, workers=2)
    assert df["run_id"].tolist() == reference["run_id"].tolist()
    _check_killed(df, reference, {0})


def test_a_killed_worker_fails_its_own_run_only(monkeypatch: pytest.MonkeyPatch) -> None:
    axes = {"data_seed": [0, 1], "seed": [0, 1]}
    reference = sweep(axes, FIXED, executor="serial")
    df = _killing_sweep(monkeypatch, axes, {1}, workers=3)
    assert df["run_id"].tolist() == reference["run_id"].tolist()
    _check_killed(df, reference, {1})


class _FakePool:
    """A process pool without processes: a run of ``killers`` breaks the pool it is in, ending
    every run in it. The first pool holds its runs until it is full, so that a killer and another
    run are in it together; later pools end each run as it is handed in."""

    pools: ClassVar[list[_FakePool]] = []
    killers: ClassVar[set[str]] = set()
    first_done: ClassVar[threading.Event] = threading.Event()

    def __init__(self, workers: int, mp_context: Any = None) -> None:
        self.workers = workers
        self.held: list[tuple[Any, Future[Any]]] = []
        self.pools.append(self)

    def submit(self, fn: Any, task: Any, *args: Any) -> Future[Any]:
        f: Future[Any] = Future()
        self.held.append((task, f))
        if len(self.pools) > 1 or len(self.held) == self.workers:
            broken = any(t.run_id in self.killers for t, _ in self.held)
            for t, g in self.held:
                if broken:
                    g.set_exception(BrokenProcessPool("a child process terminated abruptly"))
                else:
                    g.set_result(([{"run_id": t.run_id, "status": "ok"}], None))
            self.held = []
            self.first_done.set()
        return f

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        pass


def test_a_pool_that_breaks_with_several_runs_in_it_runs_each_again_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    k1, innocent, k2 = Grid({"seed": [0, 1, 2]}, FIXED).tasks
    monkeypatch.setattr(_FakePool, "pools", [])
    monkeypatch.setattr(_FakePool, "killers", {k1.run_id, k2.run_id})
    monkeypatch.setattr(_FakePool, "first_done", threading.Event())
    monkeypatch.setattr(runner, "ProcessPoolExecutor", _FakePool)
    here: list[str] = []

    def run(task: Any) -> Any:  # this process's share: never killed
        here.append(task.run_id)
        assert _FakePool.first_done.wait(60)  # the pool holds the other two runs meanwhile
        return [{"run_id": task.run_id, "status": "ok"}], None

    got: dict[str, list[dict[str, Any]]] = {}

    def finished(task: Any, outcome: Any) -> None:
        assert task.run_id not in got  # each run ends once
        got[task.run_id] = outcome[0]

    runner._run_pool([k1, innocent, k2], 3, run, lambda t: (), finished, None)
    assert len(here) == 1
    assert len(_FakePool.pools) >= 3  # the first broke with two runs in it; one alone broke another
    for t in (k1, innocent, k2):
        (row,) = got[t.run_id]
        if t.run_id in _FakePool.killers and t.run_id not in here:
            assert row["status"] == "failed"
            assert "worker process died" in row["reason"]
        else:
            assert row["status"] == "ok"  # the innocent run beside a killer is not blamed


# ---- 12: a table of another shape is refused, nothing written -----------------------------------
def test_an_output_table_with_other_columns_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    csv = tmp_path / "t.csv"
    csv.write_text("run_id,status\nabc,ok\n")
    before = csv.read_bytes()
    _refused(capsys, [*TINY, "--out", str(csv)], str(csv), "missing", "precision")
    assert csv.read_bytes() == before
    parquet = tmp_path / "t.parquet"
    rows = [{**r, "extra": 1} for r in _rows()]
    write_table(rows, parquet)
    before = parquet.read_bytes()
    _refused(capsys, [*TINY, "--out", str(parquet)], str(parquet), "extra")
    assert parquet.read_bytes() == before


# ---- 12, 21: a timeout that is no positive number of seconds is refused -------------------------
@pytest.mark.parametrize("value", ["nan", "-1", "0", "inf"])
def test_a_timeout_that_is_not_a_positive_number_of_seconds_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    out = tmp_path / "t.csv"
    argv = ["--data", "underflow", "--steps", "1", "-q", "--out", str(out)]
    _refused(capsys, [*argv, "--scheduler", "tcp://127.0.0.1:9", "--timeout", value], value,
             "positive number of seconds")  # fmt: skip
    assert not out.exists()
    with pytest.raises(ValueError, match="positive number of seconds"):
        runner.run_grid(Grid({"seed": [0]}, FIXED), scheduler="tcp://127.0.0.1:9", timeout=float(value))


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


# ---- 17: the curves' metric is checked before any run ------------------------------------------
def test_an_unknown_metric_is_refused_before_any_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[Any] = []
    monkeypatch.setattr(Trainer, "run", lambda self, *a, **k: ran.append(self))
    out, plot = tmp_path / "t.csv", tmp_path / "c.png"
    _refused(capsys, [*TINY, "--out", str(out), "--plot", str(plot), "--metric", "tset_loss"], "'tset_loss'",
             "test_loss")  # fmt: skip
    assert ran == []
    assert not out.exists()
    assert not plot.exists()


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


# ---- 21: fewer than one worker is refused ----------------------------------------------------
@pytest.mark.parametrize("value", ["0", "-3"])
def test_fewer_than_one_worker_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    out = tmp_path / "t.csv"
    _refused(capsys, [*TINY[:-2], "-q", "--out", str(out), "--workers", value], value, ">= 1")
    assert not out.exists()
    with pytest.raises(ValueError, match=r"workers=-3: expected .*>= 1"):
        runner.run_grid(Grid({"seed": [0]}, FIXED), workers=-3)
