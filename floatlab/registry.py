"""Names for things: one :class:`Registry` type behind every lookup by name in floatlab.

Formats, block formats, rounding modes, precision policies and presets, loss-scaler presets,
models and data sets are each a :class:`Registry`: canonical names with their values, other
names (aliases), one rule for how a name may be spelt (surrounding spaces and case never matter;
a registry may also read some characters as one, ``_`` as ``-`` say), values that live in
modules of their own and are imported on first use ("module:attr" homes), and one "did you
mean" for a name it does not know.

A registry is a read-only mapping from canonical names to values; :meth:`Registry.lookup` takes
any spelling of a name or alias. This module imports nothing outside the standard library, so
that the lightest command can hold a registry.

>>> colours = Registry("colour", {"red": "#f00", "green": "#0f0"}, aliases={"scarlet": "red"})
>>> colours.lookup(" Scarlet "), colours.name("GREEN"), list(colours)
('#f00', 'green', ['red', 'green'])
>>> colours.lookup("gren")
Traceback (most recent call last):
...
ValueError: unknown colour 'gren': did you mean green? expected one of red, green
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

__all__ = ["CUTOFF", "Registry", "shown"]

T = TypeVar("T")

#: how alike a misspelt name and a known one must be for "did you mean" to offer it
#: (``difflib.SequenceMatcher``'s ratio, from 0 to 1)
CUTOFF = 0.6


def shown(v: Any, width: int = 60) -> str:
    """``repr(v)`` on one line, cut to ``width`` characters (a file may hold a megabyte where a
    name belongs).

    >>> shown("x" * 100, 10)
    "'xxxxxx..."
    """
    text = " ".join(repr(v).split())  # one line: an array's repr has several
    return text if len(text) <= width else text[: width - 3] + "..."


class Registry(Mapping[str, T]):
    """Values by name: canonical names, aliases, one spelling rule, lazy homes, "did you mean".

    ``what`` names the kind of thing in messages (``"format"``, ``"model"``). ``entries`` are the
    canonical names and their values, ``homes`` the canonical names whose values are imported on
    first use (``"package.module:attr"``), ``aliases`` other names (alias -> canonical name).

    A name is looked up by its :meth:`key`: stripped and lower-cased, and every character of
    ``alike`` read as ``sep`` (``alike="_", sep="-"``: ``"apex_o2"`` is ``"apex-O2"``).

    An unknown name is one ValueError, ``unknown {what} {name}: did you mean {closest}?
    {listing}``, the hint when a name or alias is close enough (:data:`CUTOFF`) and naming the
    canonical name it stands for; ``listing`` renders what was expected from the canonical
    names (default: ``expected one of a, b, c``). A value that is not a string is refused with
    ``{what} {value}: expected {kind}`` (default: ``a name, one of a, b, c``).

    ``rule`` builds the value of a name the registry does not hold from the name itself (see
    :meth:`lookup`): such names are read, never added.

    As a mapping, a registry is read by canonical name only (``registry["fp16"]``, ``in``,
    iteration in the order the names were added), as a dict of them would be.

    >>> r = Registry("model", homes={"frac": "fractions:Fraction"}, aliases={"ratio": "frac"})
    >>> r.lookup("Ratio")(1, 3), "frac" in r, "ratio" in r, r.find("RATIO")
    (Fraction(1, 3), True, False, 'frac')
    >>> r.lookup(3)
    Traceback (most recent call last):
    ...
    ValueError: model 3: expected a name, one of frac
    """

    def __init__(
        self,
        what: str,
        entries: Mapping[str, T] | None = None,
        *,
        homes: Mapping[str, str] | None = None,
        aliases: Mapping[str, str] | None = None,
        alike: str = "",
        sep: str = "",
        listing: Callable[[tuple[str, ...]], str] | None = None,
        kind: str = "",
        rule: Callable[[str], T | None] | None = None,
    ) -> None:
        if len(sep) > 1 or (alike and not sep):
            raise ValueError(f"sep={sep!r}: expected the one character that {alike!r} read as")
        self.what = what
        self._table = str.maketrans(dict.fromkeys(alike, sep))
        self._listing = listing
        self._kind = kind
        self._rule = rule
        self._keys: dict[str, str] = {}  # the key of every name and alias -> its canonical name
        self._names: dict[str, str] = {}  # canonical name -> its key, in the order added
        self._values: dict[str, T] = {}
        self._homes: dict[str, str] = {}  # canonical name -> "module:attr", until first used
        for name, value in (entries or {}).items():
            self.add(name, value)
        for name, home in (homes or {}).items():
            self.add_home(name, home)
        for alias, name in (aliases or {}).items():
            self.alias(alias, name)

    # ---- the mapping, by canonical name ------------------------------------------------------------
    def __getitem__(self, name: str) -> T:
        if name in self._values:
            return self._values[name]
        if name not in self._homes:
            raise KeyError(name)
        module, attr = self._homes[name].split(":")
        value: T = getattr(importlib.import_module(module), attr)
        self._values[name] = value
        del self._homes[name]
        return value

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __repr__(self) -> str:
        return f"Registry({self.what!r}: {', '.join(self._names)})"

    # ---- names -----------------------------------------------------------------------------------
    @property
    def names(self) -> tuple[str, ...]:
        """The canonical names, in the order they were added.

        >>> Registry("colour", {"red": 1, "blue": 2}).names
        ('red', 'blue')
        """
        return tuple(self._names)

    def aliases(self) -> dict[str, str]:
        """Every alias (by its key) and the canonical name it stands for.

        >>> Registry("colour", {"red": 1}, aliases={"Scarlet": "red"}).aliases()
        {'scarlet': 'red'}
        """
        return {k: name for k, name in self._keys.items() if self._names[name] != k}

    def key(self, text: str) -> str:
        """The form a name is looked up in: stripped, lower-cased, ``alike`` read as ``sep``.

        >>> Registry("format", alike="- ", sep="_").key(" Float8-E4M3 fn")
        'float8_e4m3_fn'
        """
        return text.strip().lower().translate(self._table)

    def find(self, text: object) -> str | None:
        """The canonical name that ``text`` spells (a name or an alias), or None.

        >>> r = Registry("policy", {"apex-O2": 2}, alike="_", sep="-")
        >>> r.find("APEX_o2"), r.find("apex-O9"), r.find(2)
        ('apex-O2', None, None)
        """
        return self._keys.get(self.key(text)) if isinstance(text, str) else None

    def name(self, text: object) -> str:
        """The canonical name that ``text`` spells, checked (see :meth:`unknown`).

        >>> Registry("colour", {"red": 1}, aliases={"scarlet": "red"}).name("SCARLET")
        'red'
        """
        found = self.find(text)
        if found is None:
            raise self.unknown(text)
        return found

    def lookup(self, text: object) -> T:
        """The value of the name or alias ``text``, in any spelling the registry reads, checked.

        A registry with a ``rule`` (a function of a name's :meth:`key` that builds its value, or
        gives None when the name is not of its kind) reads the names it does not hold by that
        rule; the rule raises ValueError for a name of its kind that it cannot build.

        >>> Registry("colour", {"red": "#f00"}).lookup(" RED ")
        '#f00'
        >>> grey = Registry("colour", rule=lambda k: f"#{k[4:] * 3}" if k.startswith("grey") else None)
        >>> grey.lookup("Grey8")
        '#888'
        """
        found = self.find(text)
        if found is None and self._rule is not None and isinstance(text, str):
            built = self._rule(self.key(text))
            if built is not None:
                return built
        return self[self.name(text)]

    # ---- what is not known -------------------------------------------------------------------------
    def closest(self, text: str) -> str | None:
        """The canonical name of the known name or alias most like ``text`` (when alike enough:
        :data:`CUTOFF`), or None.

        >>> r = Registry("format", {"fp16": 16}, aliases={"half": "fp16"})
        >>> r.closest("halff"), r.closest("FP61"), r.closest("zzz")
        ('fp16', 'fp16', None)
        """
        import difflib  # only a misspelt name needs it: kept off the start-up of every command

        close = difflib.get_close_matches(self.key(text), list(self._keys), n=1, cutoff=CUTOFF)
        return self._keys[close[0]] if close else None

    def listing(self) -> str:
        """What a name was expected to be, as messages end.

        >>> Registry("colour", {"red": 1, "blue": 2}).listing()
        'expected one of red, blue'
        """
        if self._listing is not None:
            return self._listing(self.names)
        return f"expected one of {', '.join(self._names)}"

    def unknown(self, text: object) -> ValueError:
        """The error for ``text``, which names nothing here: the value, the closest name, what
        was expected.

        >>> print(Registry("colour", {"red": 1}, listing=lambda names: f"(known: {names[0]})").unknown("rde"))
        unknown colour 'rde': did you mean red? (known: red)
        """
        if not isinstance(text, str):
            kind = self._kind or f"a name, one of {', '.join(self._names)}"
            return ValueError(f"{self.what} {shown(text)}: expected {kind}")
        close = self.closest(text)
        hint = f"did you mean {close}? " if close is not None else ""
        return ValueError(f"unknown {self.what} {shown(text)}: {hint}{self.listing()}")

    # ---- adding and removing -----------------------------------------------------------------------
    def add(self, name: str, value: T, *, aliases: Iterable[str] = ()) -> None:
        """Add (or replace) ``name`` with its ``value`` and ``aliases``. A name or alias that
        another entry goes by is taken over, and that entry removed: a caller that must not do
        that asks :meth:`find` first.

        >>> r = Registry("colour", {"red": 1})
        >>> r.add("Blue", 2, aliases=["navy"]); r.lookup("NAVY"), r.names
        (2, ('red', 'Blue'))
        """
        self._enter(name)
        self._values[name] = value
        self._homes.pop(name, None)
        for a in aliases:
            self.alias(a, name)

    def add_home(self, name: str, home: str, *, aliases: Iterable[str] = ()) -> None:
        """Add (or replace) ``name``, whose value is ``home``'s ``"package.module:attr"``,
        imported when the value is first asked for, and its ``aliases``.

        >>> r = Registry("number"); r.add_home("fraction", "fractions:Fraction"); r.lookup("Fraction")(2, 4)
        Fraction(1, 2)
        """
        if not isinstance(home, str) or home.count(":") != 1:
            raise ValueError(f"{self.what} {name!r} home {shown(home)}: expected 'package.module:attr'")
        self._enter(name)
        self._homes[name] = home
        self._values.pop(name, None)
        for a in aliases:
            self.alias(a, name)

    def alias(self, alias: str, name: str) -> None:
        """Make ``alias`` another name of the canonical ``name`` (taking it over, as :meth:`add`
        does).

        >>> r = Registry("colour", {"red": 1}); r.alias("crimson", "red"); r.lookup("Crimson")
        1
        """
        if name not in self._names:
            raise ValueError(f"alias {shown(alias)} of {self.what} {name!r}: expected a canonical name")
        key = self._take(alias, name)
        self._keys[key] = name

    def remove(self, name: str) -> None:
        """Remove the entry that ``name`` spells, with its aliases.

        >>> r = Registry("colour", {"red": 1, "blue": 2}, aliases={"navy": "blue"})
        >>> r.remove("NAVY"); r.names, r.find("navy")
        (('red',), None)
        """
        canonical = self.name(name)
        del self._names[canonical]
        self._values.pop(canonical, None)
        self._homes.pop(canonical, None)
        for k in [k for k, v in self._keys.items() if v == canonical]:
            del self._keys[k]

    def _take(self, text: str, name: str) -> str:
        """The key of ``text``, checked, once no entry other than ``name`` goes by it."""
        if not isinstance(text, str) or not self.key(text):
            raise ValueError(f"{self.what} name {shown(text)}: expected a non-empty string")
        key = self.key(text)
        holder = self._keys.get(key)
        if holder is not None and holder != name and self._names[holder] == key:
            self.remove(holder)
        return key

    def _enter(self, name: str) -> None:
        """Enter the canonical ``name`` (its value is the caller's to set)."""
        key = self._take(name, name)
        self._names[name] = key
        self._keys[key] = name
