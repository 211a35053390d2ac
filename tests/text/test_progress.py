"""When the Python API draws a progress bar: in a notebook's kernel or on a terminal, never when the
environment says off, always or never when the caller says so."""

from __future__ import annotations

import io
import sys
import types

import pytest

from floatlab.text.progress import NoBar, progress_bar, progress_wanted


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _fake_ipython(monkeypatch: pytest.MonkeyPatch, *, kernel: bool) -> None:
    shell = types.SimpleNamespace(kernel=object() if kernel else None)
    module = types.ModuleType("IPython")
    module.get_ipython = lambda: shell  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "IPython", module)


def test_a_bar_on_a_terminal_and_none_in_a_pipe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLOATLAB_PROGRESS", raising=False)
    monkeypatch.delitem(sys.modules, "IPython", raising=False)
    monkeypatch.setattr(sys, "stderr", _Tty())
    assert progress_wanted(None)
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert not progress_wanted(None)
    assert isinstance(progress_bar(3, "x"), NoBar)


def test_a_bar_in_a_notebooks_kernel_not_in_a_plain_ipython(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLOATLAB_PROGRESS", raising=False)
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    _fake_ipython(monkeypatch, kernel=True)
    assert progress_wanted(None)
    _fake_ipython(monkeypatch, kernel=False)
    assert not progress_wanted(None)


@pytest.mark.parametrize("value", ["off", "0", "false", "No"])
def test_the_environment_turns_the_default_off(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("FLOATLAB_PROGRESS", value)
    monkeypatch.setattr(sys, "stderr", _Tty())
    assert not progress_wanted(None)
    assert progress_wanted(True)  # (the caller's word wins)


def test_a_drawn_bar_counts() -> None:
    bar = progress_bar(4, "runs", progress=True, unit="run")
    bar.update(3)
    assert bar.n == 3
    bar.close()
