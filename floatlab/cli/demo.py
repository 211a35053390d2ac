"""``floatlab demo``: a short tour, built from a list of sections that others extend.

A section is a title and a function that returns a :class:`~floatlab.cli._common.View`.
A module that wants its piece in the tour adds it when imported::

    from floatlab.cli import demo
    demo.add_section(demo.Section("1 + 0.0001 in fp16", my_view_function), after="Encoding 0.1")

>>> [s.title for s in SECTIONS][:2]
['Decoding a code: 0x7BFF in fp16', 'Encoding 0.1 in every format']
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from floatlab.cli._common import UI, View, command_register
from floatlab.text import style

__all__ = ["NAME", "SECTIONS", "Section", "add_section", "demo_view", "register", "run"]

NAME = "demo"

_HELP = "a short tour of floatlab"
_DESCRIPTION = """\
A short tour of floatlab: what a code means, how a value is stored in each
format, the formats side by side, and more."""


@dataclass(frozen=True)
class Section:
    """One piece of the tour: ``render(color)`` returns the view shown under ``title``.

    >>> Section("hello", lambda color: View("hi", {"greeting": "hi"})).render(False).text
    'hi'
    """

    title: str
    render: Callable[[bool], View]


def _decode_section(color: bool) -> View:
    from floatlab.cli.decode import decode_view

    return decode_view(["0x7BFF"], color=color)


def _encode_section(color: bool) -> View:
    from floatlab.cli.encode import encode_view
    from floatlab.formats import FORMATS

    return encode_view("0.1", list(FORMATS), color=color)


def _formats_section(color: bool) -> View:
    from floatlab.cli.formats import formats_table_view

    return formats_table_view(color=color)


SECTIONS: list[Section] = [
    Section("Decoding a code: 0x7BFF in fp16", _decode_section),
    Section("Encoding 0.1 in every format", _encode_section),
    Section("The formats side by side", _formats_section),
]


def add_section(section: Section, *, after: str | None = None, before: str | None = None) -> None:
    """Add ``section`` to the tour: at the end, or after / before the section whose title starts
    with ``after`` / ``before``. A section with the same title is replaced.

    >>> add_section(Section("Extra", lambda color: View("")), before="The formats")
    >>> titles = [s.title for s in SECTIONS]
    >>> titles[titles.index("Extra") + 1]
    'The formats side by side'
    >>> remove_section("Extra")
    """
    if after is not None and before is not None:
        raise ValueError("add_section: give after= or before=, not both")
    remove_section(section.title)
    anchor = after if after is not None else before
    if anchor is None:
        SECTIONS.append(section)
        return
    for i, s in enumerate(SECTIONS):
        if s.title.startswith(anchor):
            SECTIONS.insert(i + 1 if after is not None else i, section)
            return
    titles = ", ".join(repr(s.title) for s in SECTIONS)
    raise ValueError(f"no demo section titled {anchor!r}...: expected the start of one of {titles}")


def remove_section(title: str) -> None:
    """Remove the section called ``title`` (if there is one).

    >>> remove_section("no such section")
    """
    SECTIONS[:] = [s for s in SECTIONS if s.title != title]


def demo_view(*, color: bool = False) -> View:
    """Every section of the tour in one view.

    >>> v = demo_view()
    >>> v.data[0]["section"], v.data[0]["data"][0]["decimal"]
    ('Decoding a code: 0x7BFF in fp16', '65504')
    """
    parts, data = [], []
    for i, s in enumerate(SECTIONS, 1):
        view = s.render(color)
        parts.append(_section_text(i, s.title, view, color))
        data.append({"section": s.title, "data": view.data})
    return View("\n\n".join(parts), data)


def _section_text(i: int, title: str, view: View, color: bool) -> str:
    return style(f"== {i}. {title}", "bold", "cyan", color=color) + "\n\n" + view.text


def run(args: argparse.Namespace, ui: UI) -> int:
    """Print the tour, one section at a time (a slow section does not hold back the ones before it)."""
    if ui.json:
        ui.show(demo_view(color=False))
        return 0
    for i, s in enumerate(SECTIONS, 1):
        if i > 1:
            ui.write("")
        ui.write(_section_text(i, s.title, s.render(ui.color), ui.color))
        ui.out.flush()
    return 0


register = command_register(NAME, _HELP, _DESCRIPTION, None, run)
