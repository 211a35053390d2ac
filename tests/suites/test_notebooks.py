"""The lessons are tests: each notebook runs top to bottom in a fresh kernel, its assert cells check
the facts it teaches, and the repository keeps it without outputs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from oracles import LESSONS

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("[0-9][0-9]-*.ipynb"))
#: the optional packages a lesson needs beyond the lessons extra: without them its run is skipped
REQUIRES: dict[str, tuple[str, ...]] = {
    "13-your-own-model": ("torch", "pandas"),
}
STRIP_HINT = "strip it with: jupyter nbconvert --clear-output --inplace"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def _load(path: Path) -> dict[str, Any]:
    nb: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return nb


def _source(cell: dict[str, Any]) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def stored_output_problems(nb: dict[str, Any]) -> list[str]:
    """What a notebook in the repository must not carry: outputs, execution counts, widget state."""
    problems = []
    for i, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        if cell.get("outputs"):
            problems.append(f"cell {i} has {len(cell['outputs'])} output(s)")
        if cell.get("execution_count") is not None:
            problems.append(f"cell {i} has execution count {cell['execution_count']}")
    if "widgets" in nb.get("metadata", {}):
        problems.append("the notebook metadata holds widget state")
    return problems


def test_every_lesson_is_there() -> None:
    assert [p.stem for p in NOTEBOOKS] == list(LESSONS)
    assert set(REQUIRES) <= set(LESSONS)


def test_output_check_catches_outputs() -> None:
    """The check below would notice a notebook saved after running it."""
    nb = {
        "cells": [
            {"cell_type": "code", "source": "1", "outputs": [{"output_type": "stream"}], "execution_count": 3}
        ],
        "metadata": {"widgets": {}},
    }
    assert len(stored_output_problems(nb)) == 3
    assert (
        stored_output_problems({"cells": [{"cell_type": "code", "outputs": [], "execution_count": None}]})
        == []
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stored_without_outputs(path: Path) -> None:
    problems = stored_output_problems(_load(path))
    assert not problems, f"{path.name}: {'; '.join(problems)}; {STRIP_HINT} {path.relative_to(ROOT)}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_valid_and_checks_its_facts(path: Path) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbformat.validate(nbformat.read(path, as_version=4))
    nb = _load(path)
    cells = nb["cells"]
    assert cells[0]["cell_type"] == "markdown", path.name
    assert _source(cells[0]).startswith("# Lesson "), path.name
    code = [_source(c) for c in cells if c["cell_type"] == "code"]
    assert "assert " in code[-1], f"{path.name}: the last code cell should check the lesson's facts"
    assert nb["metadata"]["kernelspec"]["name"] == "python3"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_top_to_bottom(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    for module in REQUIRES.get(path.stem, ()):
        pytest.importorskip(module, reason=f"{path.stem} needs {module}")
    # the kernel inherits the environment: few numba threads, and no 'static' override of the widgets
    monkeypatch.setenv("NUMBA_NUM_THREADS", "2")
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")
    monkeypatch.setenv("FLOATLAB_PROGRESS", "off")  # (as the site's build runs them: no bars stored)
    monkeypatch.delenv("FLOATLAB_WIDGETS", raising=False)
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK_DIR)}},
    )
    client.execute()  # raises CellExecutionError, with the cell and its traceback, when a cell fails

    stderr, widgets = [], 0
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream" and out.get("name") == "stderr":
                stderr.append(f"cell {i}: {out.get('text', '')[:300]}")
            data = out.get("data", {})
            if WIDGET_VIEW in data:
                widgets += 1
                # every live widget carries its static drawing for renderers without a kernel
                assert "text/html" in data, f"cell {i}: a widget without a static fallback"
                assert 'class="floatlab-static"' in data["text/html"], f"cell {i}: not floatlab's fallback"
    assert not stderr, f"{path.name} wrote to stderr (warnings?):\n" + "\n".join(stderr)
    has_widget = any("floatlab.widgets import" in _source(c) for c in nb.cells if c.cell_type == "code")
    assert (widgets > 0) == has_widget, f"{path.name}: {widgets} widget outputs"


# lessons whose exercises follow the predict-then-run pattern, at least three each
EXERCISED = ("05-", "06-", "08-", "09-", "10-", "12-", "13-")


def exercise_problems(nb: dict[str, Any], least: int = 3) -> list[str]:
    """What is missing from a lesson's exercises: each a question (a markdown cell naming
    "**Exercise"), then an empty code cell for the learner, then the answer in a ``<details>`` block
    of a markdown cell, then a check cell with an assert; and a "Check your understanding" at the end,
    before the last code cell."""
    cells = nb.get("cells", [])
    problems, found = [], 0
    for i, cell in enumerate(cells):
        if cell.get("cell_type") != "markdown" or "**Exercise" not in _source(cell):
            continue
        found += 1
        kinds = [(c.get("cell_type"), _source(c)) for c in cells[i + 1 : i + 4]]
        if len(kinds) < 3:
            problems.append(f"exercise at cell {i}: not followed by a try, an answer and a check")
            continue
        (k1, s1), (k2, s2), (k3, s3) = kinds
        if k1 != "code" or s1.strip():
            problems.append(f"exercise at cell {i}: the next cell should be an empty code cell")
        if k2 != "markdown" or "<details>" not in s2:
            problems.append(f"exercise at cell {i}: the answer should follow in a <details> block")
        if "<details>" in _source(cell):
            problems.append(f"exercise at cell {i}: the answer sits in the question's cell")
        if k3 != "code" or "assert " not in s3:
            problems.append(f"exercise at cell {i}: no check cell with an assert after the answer")
    if found < least:
        problems.append(f"{found} exercise(s), expected at least {least}")
    headings = [i for i, c in enumerate(cells) if "## Check your understanding" in _source(c)]
    code = [i for i, c in enumerate(cells) if c.get("cell_type") == "code"]
    if not headings or not code or headings[-1] > code[-1]:
        problems.append("no 'Check your understanding' before the last code cell")
    return problems


def test_exercise_check_catches_a_bad_exercise() -> None:
    def cell(kind: str, source: str) -> dict[str, Any]:
        return {"cell_type": kind, "source": source}

    good = [
        cell("markdown", "**Exercise 1.** Predict."),
        cell("code", ""),
        cell("markdown", "<details><summary>Answer</summary>\n2\n</details>"),
        cell("code", "assert 1 + 1 == 2"),
    ]
    end = [cell("markdown", "## Check your understanding"), cell("code", "assert True")]
    assert exercise_problems({"cells": good + end}, least=1) == []
    assert exercise_problems({"cells": good + end}, least=2) == ["1 exercise(s), expected at least 2"]
    no_try = [good[0], good[2], good[3], cell("code", "assert True")]
    assert len(exercise_problems({"cells": no_try + end}, least=1)) == 2
    together = [cell("markdown", "**Exercise 1.** <details>x</details>"), *good[1:]]
    assert exercise_problems({"cells": together + end}, least=1) == [
        "exercise at cell 0: the answer sits in the question's cell"
    ]
    assert exercise_problems({"cells": good}, least=1) == [
        "no 'Check your understanding' before the last code cell"
    ]


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if p.name.startswith(EXERCISED)], ids=lambda p: p.stem)
def test_exercises_follow_predict_then_run(path: Path) -> None:
    problems = exercise_problems(_load(path))
    assert not problems, f"{path.name}: {'; '.join(problems)}"
