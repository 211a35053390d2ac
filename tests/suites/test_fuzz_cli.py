"""A fuzz run over the command line: generated argument lists (subcommands, options, numbers, codes,
format names, garbage, and damaged files in a scratch folder) through ``floatlab.cli.main``. Every
case must exit 0 quietly or 2 with one error line: no exception, no internal error, no traceback.
The suite runs 2,000 cases; ``make fuzz`` runs 100,000 (benchmarks/fuzz_cli.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from oracles import benchmark_script

fz: Any = benchmark_script("fuzz_cli")


@pytest.mark.slow
def test_two_thousand_generated_command_lines(tmp_path: Path) -> None:
    summary = fz.fuzz(2000, seed=20261123, root=tmp_path, fs=False)
    problems = [f"{o.argv!r}: {o.problem}" for o in summary.problems]
    assert not problems, "\n".join(problems[:10])
    assert summary.cases == 2000
    # the run reached both outcomes and every command family
    assert summary.statuses[0] > 300
    assert summary.statuses[2] > 300
    assert {"decode", "encode", "add", "round", "underflow", "accumulate", "histogram"} <= set(
        summary.commands
    )


def test_the_fuzzer_catches_what_it_is_there_to_catch(monkeypatch: pytest.MonkeyPatch) -> None:
    # the checks are not vacuous: a crash, a traceback, a second line and stray stderr all count
    from floatlab.cli import decode as decode_cmd

    def crash(*args: Any, **kwargs: Any) -> None:
        raise TypeError("planted")

    monkeypatch.setattr(decode_cmd, "decode_view", crash)
    assert "exit status 1" in fz.run_case(["decode", "0x3c00"]).problem
    monkeypatch.undo()

    import floatlab.cli as cli

    def noisy(argv: list[str] | None = None) -> int:
        sys.stderr.write("floatlab: error: one\nand another line\n")
        return 2

    monkeypatch.setattr(cli, "main", noisy)
    assert "exactly one error line" in fz.run_case(["decode", "0x3c00"]).problem

    def chatty(argv: list[str] | None = None) -> int:
        sys.stderr.write("Traceback (most recent call last):\n")
        return 0

    monkeypatch.setattr(cli, "main", chatty)
    assert "traceback" in fz.run_case(["x"]).problem

    def escape(argv: list[str] | None = None) -> int:
        raise RuntimeError("out")

    monkeypatch.setattr(cli, "main", escape)
    assert "exception out of main" in fz.run_case(["x"]).problem

    def raw_escape(argv: list[str] | None = None) -> int:
        sys.stdout.write("a\x1b[2Jname\nfloatlab: error: forged\n")
        return 0

    monkeypatch.setattr(cli, "main", raw_escape)
    assert "raw ESC" in fz.run_case(["x"]).problem

    def forged(argv: list[str] | None = None) -> int:
        sys.stdout.write("name\nfloatlab: error: forged\n")
        return 0

    monkeypatch.setattr(cli, "main", forged)
    assert "forged error line" in fz.run_case(["x"]).problem

    def hang(argv: list[str] | None = None) -> int:
        import time

        time.sleep(5)
        return 0

    monkeypatch.setattr(cli, "main", hang)
    monkeypatch.setattr(fz, "CASE_SECONDS", 1)
    assert "hang" in fz.run_case(["x"]).problem


@pytest.mark.slow
def test_the_file_system_cases_keep_data_and_give_one_line(tmp_path: Path) -> None:
    # a full disk (ulimit -f) under every command that writes, the input as its own output, a FIFO
    cases = fz.fs_cases(tmp_path)
    assert len(cases) >= 8
    problems = [f"{c.name}: {p}" for c in cases if (p := fz.run_fs_case(c)) is not None]
    assert not problems, "\n".join(problems)


def test_generation_is_reproducible(tmp_path: Path) -> None:
    import numpy as np

    files = fz.make_files(tmp_path)
    a = [fz.generate(np.random.default_rng(5), files) for _ in range(3)]
    b = [fz.generate(np.random.default_rng(5), files) for _ in range(3)]
    assert a == b
