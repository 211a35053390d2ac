"""``floatlab lessons``: finding the shipped lessons, copying them, and the JupyterLab command line.
(The browser test starts the real JupyterLab through this command.)"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from oracles import LESSONS

from floatlab.cli import main
from floatlab.cli.lessons_cmd import (
    copy_lessons,
    lab_command,
    lab_environment,
    lesson_files,
    lesson_title,
    lessons_dir,
)

ROOT = Path(__file__).resolve().parents[2]


def test_the_lessons_are_found_in_a_source_checkout() -> None:
    assert lessons_dir() == ROOT / "notebooks"
    assert [p.name for p in lesson_files()] == sorted(
        p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]-*.ipynb")
    )
    assert len(lesson_files()) == len(LESSONS)


def test_the_lessons_are_found_in_a_wheel_layout(tmp_path: Path) -> None:
    # an installed wheel: site-packages/floatlab/lessons/NN-*.ipynb, no notebooks/ beside it
    pkg = tmp_path / "site-packages" / "floatlab"
    (pkg / "lessons").mkdir(parents=True)
    shutil.copy(lesson_files()[0], pkg / "lessons")
    assert lessons_dir(pkg) == pkg / "lessons"
    empty = tmp_path / "elsewhere" / "floatlab"
    empty.mkdir(parents=True)
    with pytest.raises(ValueError, match="no lessons found"):
        lessons_dir(empty)


def test_the_wheel_ships_the_notebooks_where_the_command_looks() -> None:
    tomllib = pytest.importorskip("tomllib")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    include = config["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]
    assert include["notebooks"] == "floatlab/lessons"


def test_titles_come_from_the_first_heading() -> None:
    titles = [lesson_title(p) for p in lesson_files()]
    assert titles[0] == "Lesson 1: The anatomy of a float"
    assert all(t.startswith(f"Lesson {i}: ") for i, t in enumerate(titles, 1))


def test_copy_only_copies_every_lesson(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dest = tmp_path / "course"
    assert main(["lessons", str(dest), "--copy-only", "--no-color"]) == 0
    out = capsys.readouterr().out
    assert f"Lessons in {dest.resolve()}" in out
    for src in lesson_files():
        assert (dest / src.name).read_bytes() == src.read_bytes()


def test_a_second_copy_keeps_the_learners_work_unless_forced(tmp_path: Path) -> None:
    first = copy_lessons(tmp_path)
    assert len(first.copied) == len(LESSONS)
    assert first.kept == ()
    mine = tmp_path / first.copied[0]
    mine.write_text("my notes", encoding="utf-8")
    again = copy_lessons(tmp_path)
    assert again.copied == ()
    assert mine.read_text(encoding="utf-8") == "my notes"
    forced = copy_lessons(tmp_path, force=True)
    assert len(forced.copied) == len(LESSONS)
    assert mine.read_bytes() == lesson_files()[0].read_bytes()


def test_list_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lessons", "--list", "--no-color"]) == 0
    text = capsys.readouterr().out
    assert "01-anatomy-of-a-float.ipynb" in text
    assert "Lesson 8: Checking the claims" in text
    assert main(["lessons", "--list", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["file"] for d in data] == [p.name for p in lesson_files()]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--port", "70000"], "invalid port '70000'"),
        (["--port", "http"], "invalid port 'http'"),
        (["--frobnicate"], "unrecognized arguments: --frobnicate"),
    ],
)
def test_bad_options_give_one_line_and_status_2(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["lessons", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("floatlab: error: ")
    assert message in err


def test_a_file_in_place_of_the_folder_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "notes.txt"
    target.write_text("x", encoding="utf-8")
    assert main(["lessons", str(target), "--copy-only"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "is a file: expected a folder" in err
    assert "Traceback" not in err


def test_lab_command_serves_on_loopback(tmp_path: Path) -> None:
    cmd = lab_command(tmp_path, port=8899, open_browser=False, first="01-x.ipynb")
    assert cmd[:3] == [sys.executable, "-m", "jupyterlab"]
    assert "--ServerApp.ip=127.0.0.1" in cmd
    assert "--ServerApp.port=8899" in cmd
    assert "--ServerApp.port_retries=0" in cmd
    assert "--no-browser" in cmd
    assert not any("token" in a.lower() for a in cmd)  # never on the command line: ps shows it
    assert cmd[-1] == str(tmp_path / "01-x.ipynb")
    assert ("--allow-root" in cmd) == (os.geteuid() == 0)
    default = lab_command(tmp_path)
    assert not any(a.startswith(("--ServerApp.port", "--no-browser", "--IdentityProvider")) for a in default)


def test_the_token_comes_from_the_environment_never_the_command_line() -> None:
    env = lab_environment({"FLOATLAB_LESSONS_TOKEN": "abc", "JUPYTER_TOKEN": "old"})
    assert env["JUPYTER_TOKEN"] == "abc"
    drawn = {lab_environment({})["JUPYTER_TOKEN"] for _ in range(3)}
    assert len(drawn) == 3
    assert all(len(t) >= 32 for t in drawn)
    assert "JUPYTER_TOKEN" not in lab_environment({"JUPYTER_TOKEN": "x"}, no_token=True)
    assert "--IdentityProvider.token=" in lab_command(Path("/tmp/l"), no_token=True)


def test_an_empty_token_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[Any] = []

    def call(*args: Any, **kwargs: Any) -> int:
        started.append((args, kwargs))
        return 0

    monkeypatch.setattr(subprocess, "call", call)
    for argv in (["--token", ""], ["--token", " "], ["--token", "x", "--no-token"]):
        assert main(["lessons", str(tmp_path / "a"), *argv]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1
        assert "token" in err
    monkeypatch.setenv("FLOATLAB_LESSONS_TOKEN", "")
    assert main(["lessons", str(tmp_path / "b")]) == 2
    assert "FLOATLAB_LESSONS_TOKEN is empty" in capsys.readouterr().err
    assert started == []
    assert not (tmp_path / "b").exists()


def test_no_token_is_explicit_and_warns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[Any] = []

    def call(cmd: list[str], env: dict[str, str] | None = None) -> int:
        started.append((cmd, env))
        return 0

    monkeypatch.setattr(subprocess, "call", call)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())
    monkeypatch.setenv("FLOATLAB_LESSONS_TOKEN", "s3cret")
    assert main(["lessons", str(tmp_path / "a"), "--no-browser", "--no-color"]) == 0
    cmd, env = started[-1]
    assert env["JUPYTER_TOKEN"] == "s3cret"
    assert not any("s3cret" in a for a in cmd)
    assert main(["lessons", str(tmp_path / "a"), "--no-token", "--no-color"]) == 0
    assert "floatlab: warning: --no-token" in capsys.readouterr().err
    cmd, env = started[-1]
    assert "--IdentityProvider.token=" in cmd
    assert "JUPYTER_TOKEN" not in env
    # --token still works (the browser test uses it), through the environment, with a warning
    assert main(["lessons", str(tmp_path / "a"), "--token", "abc", "--no-color"]) == 0
    assert "floatlab: warning: --token shows in every user's ps" in capsys.readouterr().err
    cmd, env = started[-1]
    assert env["JUPYTER_TOKEN"] == "abc"
    assert not any("abc" in a for a in cmd)


def test_copying_never_writes_through_a_symlink(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "lessons"
    dest.mkdir()
    name = lesson_files()[0].name
    victim = outside / "victim.txt"
    victim.write_text("precious")
    (dest / name).symlink_to(victim)
    dangling = lesson_files()[1].name
    (dest / dangling).symlink_to(outside / "created-through-the-link")
    report = copy_lessons(dest)
    assert name in report.kept
    assert dangling in report.kept
    assert not (outside / "created-through-the-link").exists()
    copy_lessons(dest, force=True)
    assert victim.read_text() == "precious"  # the link was replaced, its target untouched
    assert not (dest / name).is_symlink()
    assert (dest / name).read_bytes() == lesson_files()[0].read_bytes()
    assert not (outside / "created-through-the-link").exists()
    assert not (dest / dangling).is_symlink()
