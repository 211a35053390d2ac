"""The Python API's progress bars: one tqdm.auto bar for a call that trains for a while.

``tqdm.auto`` draws a widget in JupyterLab (with ipywidgets) and a text bar in a terminal. The
default (``progress=None``) shows the bar where somebody is watching: in a notebook, or when
standard error is a terminal, unless the environment variable ``FLOATLAB_PROGRESS`` is ``off`` (as
when a notebook is executed to be stored or published: a bar is no result); ``progress=False``
never draws one, ``progress=True`` always does.
The command line has its own lines and bars (``floatlab.cli.progress``).

>>> bar = progress_bar(3, "runs", progress=False)
>>> bar.update(1); bar.set_postfix_str("fp16 seed 0"); bar.close()
>>> type(bar).__name__
'NoBar'
"""

from __future__ import annotations

import os
import sys
from typing import Any

__all__ = ["NoBar", "progress_bar", "progress_wanted"]


class NoBar:
    """A bar that draws nothing: what :func:`progress_bar` gives when no bar is wanted.

    >>> bar = NoBar(); bar.update(3); bar.close()
    """

    def update(self, n: float = 1) -> None:
        """Nothing to draw."""

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        """Nothing to draw."""

    def close(self) -> None:
        """Nothing to take down."""


def _in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (IPython with a kernel attached)."""
    shell = sys.modules.get("IPython")
    if shell is None:
        return False
    try:
        ip = shell.get_ipython()
    except Exception:  # (an IPython too old or half imported)
        return False
    return ip is not None and getattr(ip, "kernel", None) is not None


def progress_wanted(progress: bool | None) -> bool:
    """Whether to draw a bar: ``progress`` when given, else whether this runs in a notebook or
    with a terminal on standard error (and ``FLOATLAB_PROGRESS`` is not ``off``).

    >>> progress_wanted(True), progress_wanted(False)
    (True, False)
    >>> progress_wanted("yes")
    Traceback (most recent call last):
    ...
    ValueError: progress='yes': expected True, False or None (a bar in a notebook or a terminal)
    """
    if progress is None:
        if os.environ.get("FLOATLAB_PROGRESS", "").strip().lower() in ("off", "0", "false", "no"):
            return False
        err = sys.stderr
        tty = err is not None and not getattr(err, "closed", False) and bool(getattr(err, "isatty", bool)())
        return tty or _in_notebook()
    if not isinstance(progress, bool):
        raise ValueError(
            f"progress={progress!r}: expected True, False or None (a bar in a notebook or a terminal)"
        )
    return progress


def progress_bar(total: int | None, desc: str, *, progress: bool | None = None, unit: str = "step") -> Any:
    """A ``tqdm.auto`` bar of ``total`` ``unit``\\ s labelled ``desc`` when one is wanted
    (:func:`progress_wanted`), else a :class:`NoBar`. Either has ``update``, ``set_postfix_str``
    and ``close``.

    >>> import io, contextlib
    >>> with contextlib.redirect_stderr(io.StringIO()):
    ...     bar = progress_bar(2, "runs", progress=True, unit="run"); bar.update(2); bar.close()
    >>> bar.n, bar.total
    (2, 2)
    """
    if not progress_wanted(progress):
        return NoBar()
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, leave=False, dynamic_ncols=True, mininterval=0.2)
