"""What the command line writes: nothing lost, nothing overwritten that was read, nothing found
wrong only after the work (issue 23, points 1 to 3, and docs/guarantees.md "Output files").

Every output goes through :func:`floatlab.io.atomic_output`: a temporary file beside the target,
flushed, synced and renamed over it. A full disk is emulated with a file-size limit (``ulimit -f``)
in a child process that ignores SIGXFSZ, so that a write past the limit fails with EFBIG.
"""

from __future__ import annotations

import io
import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import floatlab.cli as cli
from floatlab.cli import train_cmds
from floatlab.io import atomic_output, check_outputs, save_npy, write_atomic

SMALL = ["--data", "underflow", "--epochs", "1", "--hidden", "8", "--no-color", "-q"]
OLD = b"the old output, which a failed write must leave as it was\n"


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    sys_out, sys_err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        status = cli.main(argv)
    finally:
        sys.stdout, sys.stderr = sys_out, sys_err
    return status, out.getvalue(), err.getvalue()


def error_line(argv: list[str]) -> str:
    status, out, err = run(argv)
    assert status == 2, (argv, out, err)
    assert err.count("\n") == 1, err
    assert err.startswith("floatlab: error: "), err
    assert "written" not in out
    return err


def run_limited(argv: list[str], limit: int, cwd: Path, warm: list[str]) -> subprocess.CompletedProcess[str]:
    """``floatlab ARGV`` in a child whose files may not grow past ``limit`` bytes (a full disk).

    ``warm`` runs first without the limit, so that the kernels' compile cache is written before
    (a cache write past the limit would fail the command before its output is reached)."""

    def limit_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(Path(__file__).parents[2])}
    command = [sys.executable, "-m", "floatlab"]
    kw: dict[str, Any] = {"cwd": cwd, "env": env, "capture_output": True, "text": True, "timeout": 300}
    assert subprocess.run([*command, *warm], **kw).returncode == 0
    return subprocess.run([*command, *argv], **kw, preexec_fn=limit_files)


def assert_one_line_error(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("floatlab: error: "), proc.stderr
    assert "cannot write" in proc.stderr
    assert "File too large" in proc.stderr
    assert "written" not in proc.stdout


def no_temporaries(folder: Path) -> None:
    assert not [p.name for p in folder.iterdir() if ".tmp" in p.name]


@pytest.fixture(autouse=True)
def with_training(monkeypatch: pytest.MonkeyPatch) -> None:
    if train_cmds not in cli.COMMANDS:
        monkeypatch.setattr(cli, "COMMANDS", (*cli.COMMANDS, train_cmds))


# ---- 1. a full disk loses nothing ---------------------------------------------------------------
def test_round_output_on_a_full_disk_keeps_the_old_file(tmp_path: Path) -> None:
    src, out = tmp_path / "good.npy", tmp_path / "out.npy"
    save_npy(src, np.linspace(0.1, 7.0, 1000))  # 8,128 bytes; the rounded copy as many
    out.write_bytes(OLD)
    argv = ["round", str(src), "-f", "bf16", "-o"]
    proc = run_limited([*argv, str(out)], 4096, tmp_path, warm=[*argv, str(tmp_path / "warm.npy")])
    assert_one_line_error(proc)
    assert out.read_bytes() == OLD
    no_temporaries(tmp_path)


def test_round_over_its_input_on_a_full_disk_keeps_the_input(tmp_path: Path) -> None:
    victim = tmp_path / "victim.npy"
    save_npy(victim, np.linspace(0.1, 7.0, 2500))  # 20,128 bytes
    before = victim.read_bytes()
    argv = ["round", str(victim), "-f", "bf16", "-o"]
    proc = run_limited([*argv, str(victim), "--force"], 2048, tmp_path, warm=[*argv, str(tmp_path / "w.npy")])
    assert_one_line_error(proc)
    assert victim.read_bytes() == before
    no_temporaries(tmp_path)


@pytest.mark.parametrize("option", ["--history", "--json", "--checkpoint"])
def test_train_outputs_on_a_full_disk_keep_the_old_file(tmp_path: Path, option: str) -> None:
    out = tmp_path / ("out.npz" if option == "--checkpoint" else "out.json")
    out.write_bytes(OLD)
    argv = ["train", *SMALL, "--precision", "fp16"]
    proc = run_limited([*argv, option, str(out)], 4096, tmp_path, warm=argv)
    assert_one_line_error(proc)
    assert out.read_bytes() == OLD
    no_temporaries(tmp_path)


def test_round_output_is_complete(tmp_path: Path) -> None:
    src, out = tmp_path / "good.npy", tmp_path / "out"
    save_npy(src, np.linspace(0.1, 7.0, 1000))
    status, text, _ = run(["round", str(src), "-f", "bf16", "-o", str(out)])
    assert status == 0
    assert "written to" in text
    assert np.load(out).shape == (1000,)  # the name as given: no ".npy" added
    no_temporaries(tmp_path)


def test_atomic_writer_keeps_the_old_file_on_any_error(tmp_path: Path) -> None:
    target = tmp_path / "t.bin"
    target.write_bytes(OLD)
    os.chmod(target, 0o640)

    def fail(fh: Any) -> None:
        fh.write(b"partial")
        raise OSError(28, "No space left on device")

    with pytest.raises(ValueError, match=r"cannot write .*t\.bin': No space left on device"):
        write_atomic(target, fail)

    def interrupted() -> None:
        with atomic_output(target) as tmp:
            Path(tmp).write_bytes(b"partial")
            raise KeyError("not an OSError: passes through")

    with pytest.raises(KeyError):
        interrupted()
    assert target.read_bytes() == OLD
    no_temporaries(tmp_path)
    write_atomic(target, b"new")
    assert target.read_bytes() == b"new"
    assert target.stat().st_mode & 0o777 == 0o640  # the old file's permissions are kept


def test_atomic_writer_refuses_what_is_not_a_regular_file(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="not a regular file"):
        write_atomic(fifo, b"x")
    with pytest.raises(ValueError, match="not a regular file"):
        write_atomic(tmp_path, b"x")
    assert error_line(["round", "1.5", "-o", "x"])  # (a value, not an array: unchanged)


# ---- 2. no output is an input or another output -------------------------------------------------
@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    ck = tmp_path / "ck.npz"
    assert run(["train", *SMALL, "--precision", "fp16", "--checkpoint", str(ck)])[0] == 0
    return ck


def never_train(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("training started")

    monkeypatch.setattr(train_cmds, "_fit", fail)


@pytest.mark.parametrize(
    "extra",
    [
        ["--history", "{ck}"],
        ["--json", "{ck}"],
        ["--checkpoint", "{ck}"],
        ["--checkpoint", "{dir}/x.npz", "--history", "{dir}/x.npz"],
        ["--history", "{dir}/h.json", "--json", "{dir}/sub/../h.json"],
    ],
)
def test_train_refuses_an_output_that_is_an_input_or_another_output(
    checkpoint: Path, monkeypatch: pytest.MonkeyPatch, extra: list[str]
) -> None:
    before = checkpoint.read_bytes()
    (checkpoint.parent / "sub").mkdir()
    never_train(monkeypatch)
    args = [a.format(ck=checkpoint, dir=checkpoint.parent) for a in extra]
    err = error_line(["train", *SMALL, "--resume", str(checkpoint), *args])
    assert "expected another name" in err
    assert checkpoint.read_bytes() == before


def test_train_refuses_the_checkpoint_through_a_link(
    checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    link = checkpoint.parent / "link.npz"
    link.symlink_to(checkpoint)
    never_train(monkeypatch)
    assert "--resume" in error_line(["train", *SMALL, "--resume", str(checkpoint), "--history", str(link)])


def test_histogram_plot_may_not_replace_its_input(tmp_path: Path) -> None:
    src = tmp_path / "g.npy"
    save_npy(src, np.ones(4, np.float32))
    before = src.read_bytes()
    assert "expected a name ending in" in error_line(["histogram", str(src), "--plot", str(src)])
    assert src.read_bytes() == before


# ---- 3. outputs are checked before the work -----------------------------------------------------
@pytest.mark.parametrize(
    ("option", "name", "reason"),
    [
        ("--checkpoint", "/nonexistent/c.npz", "does not exist"),
        ("--history", "/nonexistent/h.json", "does not exist"),
        ("--json", "/nonexistent/run.json", "does not exist"),
        ("--checkpoint", "{dir}/c.json", "expected a name ending in .npz"),
        ("--history", "{dir}/h.txt", "expected a name ending in .json, .npz"),
        ("--history", "{dir}", "is a directory"),
        ("--history", "{dir}/file.txt/h.json", "is not a folder"),
    ],
)
def test_train_checks_outputs_before_the_first_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, option: str, name: str, reason: str
) -> None:
    (tmp_path / "file.txt").write_text("x")
    never_train(monkeypatch)
    err = error_line(["train", *SMALL, option, name.format(dir=tmp_path)])
    assert option in err
    assert reason in err


def test_train_checks_that_the_folder_is_writable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    if os.geteuid() == 0:  # root may write in any folder: let the permission check see what a user would
        real_access = os.access
        monkeypatch.setattr(
            os, "access", lambda p, mode: False if Path(p) == locked else real_access(p, mode)
        )
    never_train(monkeypatch)
    assert "not writable" in error_line(["train", *SMALL, "--history", str(locked / "h.json")])


def test_compare_checks_the_plot_before_training(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    never_train(monkeypatch)
    for plot in ("/nonexistent/x.png", str(tmp_path / "x.txt")):
        err = error_line(["compare", "fp32", *SMALL, "--plot", plot, "--json", str(tmp_path / "r.json")])
        assert "--plot" in err
    assert "--json" in error_line(["compare", "fp32", *SMALL, "--json", "/nonexistent/r.json"])
    same = str(tmp_path / "same.png")
    assert "expected another name" in error_line(["compare", "fp32", *SMALL, "--plot", same, "--json", same])


def test_compare_keeps_its_json_when_the_plot_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import floatlab.train

    def no_space(*args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(floatlab.train, "compare", no_space)
    results, plot = tmp_path / "r.json", tmp_path / "x.png"
    err = error_line(["compare", "fp32", *SMALL, "--plot", str(plot), "--json", str(results)])
    assert "No space left on device" in err
    assert "x.png" in err
    assert json.loads(results.read_text())["runs"][0]["steps"] > 0
    assert not plot.exists()
    no_temporaries(tmp_path)


def test_compare_plot_without_a_suffix_is_png(tmp_path: Path) -> None:
    status, out, _ = run(["compare", "fp32", *SMALL, "--plot", str(tmp_path / "curves")])
    assert status == 0
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"written to {tmp_path / 'curves.png'}" in out


def test_histogram_checks_the_plot_before_reading(tmp_path: Path) -> None:
    # the input does not exist either: the output is checked first, before any reading
    err = error_line(["histogram", str(tmp_path / "missing.npy"), "--plot", "/nonexistent/x.png"])
    assert "--plot" in err
    assert "does not exist" in err


def test_check_outputs_accepts_what_can_be_written(tmp_path: Path) -> None:
    old = tmp_path / "old.json"
    old.write_text("{}")
    outputs = [("--history", str(old)), ("--json", str(tmp_path / "new.json")), ("--plot", None)]
    check_outputs(outputs)  # an existing file and a new one may both be written: no ValueError
    # checking writes nothing: the old file is as it was and the new one is not there yet
    assert old.read_text() == "{}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.json"]
    with pytest.raises(ValueError, match="--json"):
        check_outputs([*outputs[:1], ("--json", str(old))])


# ---- lessons: a copy replaces a link, never writes through it -----------------------------------
def test_lessons_copy_never_writes_through_a_link(tmp_path: Path) -> None:
    from floatlab.cli.lessons_cmd import copy_lessons, lesson_files

    name = lesson_files()[0].name
    folder = tmp_path / "lessons"
    folder.mkdir()
    outside = tmp_path / "outside.txt"
    (folder / name).symlink_to(outside)  # dangling
    report = copy_lessons(folder)
    assert name in report.kept
    assert not outside.exists()
    outside.write_text("precious")
    copy_lessons(folder, force=True)
    assert outside.read_text() == "precious"
    assert not (folder / name).is_symlink()
    assert (folder / name).stat().st_size > 100


# ---- files that are not regular files: refused at once, never read or replaced ------------------
def test_fifos_and_devices_are_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "f.npy"
    os.mkfifo(fifo)
    for argv in (
        ["round", str(fifo)],
        ["underflow", str(fifo)],
        ["accumulate", str(fifo)],
        ["histogram", str(fifo)],
        ["round", "/dev/zero"],
    ):
        err = error_line(argv)
        assert "is not a regular file" in err, (argv, err)
    src = tmp_path / "g.npy"
    save_npy(src, np.ones(3))
    for out in (str(fifo), "/dev/null"):
        assert "not a regular file" in error_line(["round", str(src), "-o", out])
    assert fifo.exists()
    assert Path("/dev/null").is_char_device()
