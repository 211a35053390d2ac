"""``floatlab lessons``: finding the shipped lessons, copying them, and the JupyterLab command line.
(The browser test starts the real JupyterLab through this command.)"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from floatlab.cli import main
from floatlab.cli.lessons_cmd import copy_lessons, lab_command, lesson_files, lesson_title, lessons_dir

ROOT = Path(__file__).resolve().parent.parent


def test_the_lessons_are_found_in_a_source_checkout() -> None:
    assert lessons_dir() == ROOT / "notebooks"
    assert [p.name for p in lesson_files()] == sorted(p.name for p in (ROOT / "notebooks").glob("0*.ipynb"))
    assert len(lesson_files()) == 8


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
    assert len(first.copied) == 8
    assert first.kept == ()
    mine = tmp_path / first.copied[0]
    mine.write_text("my notes", encoding="utf-8")
    again = copy_lessons(tmp_path)
    assert again.copied == ()
    assert mine.read_text(encoding="utf-8") == "my notes"
    forced = copy_lessons(tmp_path, force=True)
    assert len(forced.copied) == 8
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
    cmd = lab_command(tmp_path, port=8899, open_browser=False, token="abc", first="01-x.ipynb")
    assert cmd[:3] == [sys.executable, "-m", "jupyterlab"]
    assert "--ServerApp.ip=127.0.0.1" in cmd
    assert "--ServerApp.port=8899" in cmd
    assert "--ServerApp.port_retries=0" in cmd
    assert "--no-browser" in cmd
    assert "--IdentityProvider.token=abc" in cmd
    assert cmd[-1] == str(tmp_path / "01-x.ipynb")
    assert ("--allow-root" in cmd) == (os.geteuid() == 0)
    default = lab_command(tmp_path)
    assert not any(a.startswith(("--ServerApp.port", "--no-browser", "--IdentityProvider")) for a in default)
