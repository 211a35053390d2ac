"""The API reference, generated from the package itself.

Every public module (a module of ``floatlab`` or ``floatlab.train`` whose name does not start with
an underscore, plus the two packages) gets a page listing the names of its ``__all__``. Each object
is described once, at its public address: a name exported by ``floatlab`` is described on the
``floatlab`` page, one exported by ``floatlab.train`` on that page, anything else on the page of
its module. The other pages that export it link there, and :func:`resolve_alias` lets a reference
to any address of an object (``floatlab.codec.decode`` as well as ``floatlab.decode``) find the
one description.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

PACKAGES = (
    "floatlab",
    "floatlab.train",
    "floatlab.train.precision",
    "floatlab.train.models",
    "floatlab.train.data",
    "floatlab.train.analysis",
    "floatlab.train.recipes",
    "floatlab.rounding",
    "floatlab.codec",
    "floatlab.simulate",
    "floatlab.gradhist",
    "floatlab.sweeps",
    "floatlab.text",
    "floatlab.widgets",
    "floatlab.torch",
)
#: floatlab.torch imports torch, an optional extra: without it the API reference leaves it out
_HAS_TORCH = importlib.util.find_spec("torch") is not None
API_DIR = Path("reference") / "api"
_PRIMITIVES = (bool, int, float, complex, str, bytes, type(None))


def public_modules() -> list[str]:
    """The documented modules: the packages first, then every public submodule by name.

    A submodule is public when no part of its name starts with an underscore; the command
    modules under ``floatlab.cli`` are described by the CLI reference instead.
    """
    found: set[str] = set()
    packages = [p for p in PACKAGES if _HAS_TORCH or p != "floatlab.torch"]
    for pkg_name in packages:
        pkg = importlib.import_module(pkg_name)
        for info in pkgutil.iter_modules(pkg.__path__):
            if not info.name.startswith("_"):
                found.add(f"{pkg_name}.{info.name}")
    rest = sorted(m for m in found - set(PACKAGES) if _HAS_TORCH or not m.startswith("floatlab.torch."))
    rest = [m for m in rest if _HAS_TORCH or m != "floatlab.torch"]
    return [*packages, *rest]


def _kind(obj: Any) -> str:
    if inspect.ismodule(obj):
        return "module"
    if inspect.isclass(obj):
        return "class"
    if inspect.isfunction(obj) or inspect.isbuiltin(obj):
        return "function"
    return "data"


def _key(name: str, obj: Any) -> tuple[str, int]:
    # functions and classes are one object wherever they are exported; a constant is matched by
    # its name as well, since unrelated constants may share one small int or string object
    if _kind(obj) in ("class", "function"):
        return ("", id(obj))
    return (name, id(obj))


@dataclass
class Entry:
    """One name of a module's ``__all__`` and where it is described."""

    module: str
    name: str
    kind: str
    canonical: str  # the full name under which it is described

    @property
    def here(self) -> bool:
        """Whether this module's page holds the description."""
        return self.canonical == f"{self.module}.{self.name}"


@dataclass
class ApiIndex:
    """The public modules, their entries, and the canonical name of every described object."""

    modules: list[str] = field(default_factory=list)
    entries: dict[str, list[Entry]] = field(default_factory=dict)
    canonical: dict[tuple[str, int], str] = field(default_factory=dict)
    docstrings: dict[str, str] = field(default_factory=dict)

    def described(self) -> list[Entry]:
        """Every entry whose module page describes it (each object exactly once)."""
        return [e for entries in self.entries.values() for e in entries if e.here]


def build_index(modules: list[str] | None = None) -> ApiIndex:
    """Walk the public modules and decide where each exported object is described."""
    index = ApiIndex(modules=list(public_modules() if modules is None else modules))
    for mod_name in index.modules:
        mod = importlib.import_module(mod_name)
        index.docstrings[mod_name] = inspect.getdoc(mod) or ""
        names = list(getattr(mod, "__all__", []))
        entries = []
        for name in names:
            obj = getattr(mod, name)
            kind = _kind(obj)
            if kind == "module":
                entries.append(Entry(mod_name, name, kind, obj.__name__))
                continue
            key = _key(name, obj)
            canonical = index.canonical.setdefault(key, f"{mod_name}.{name}")
            entries.append(Entry(mod_name, name, kind, canonical))
        index.entries[mod_name] = entries
    return index


def _module_of(mod_name: str) -> ModuleType:
    return importlib.import_module(mod_name)


_SECTIONS = (("class", "Classes"), ("function", "Functions"), ("data", "Constants and registries"))


def attribute_doc(index: ApiIndex, name: str, obj: Any) -> list[str]:
    """The ``#:`` comment that documents the constant ``name`` in any module exporting it."""
    from sphinx.pycode import ModuleAnalyzer

    for mod_name, entries in index.entries.items():
        if not any(e.name == name for e in entries):
            continue
        for source in {mod_name, *_defining_modules(mod_name, name)}:
            try:
                docs = ModuleAnalyzer.for_module(source).find_attr_docs()
            except Exception:  # a module without source: nothing to read
                continue
            if ("", name) in docs and getattr(importlib.import_module(source), name, None) is obj:
                return [line for line in docs[("", name)] if line is not None]
    return []


def _defining_modules(mod_name: str, name: str) -> list[str]:
    # a package re-exports constants of its submodules; look in those too
    mod = importlib.import_module(mod_name)
    if not hasattr(mod, "__path__"):
        return []
    return [f"{mod_name}.{info.name}" for info in pkgutil.iter_modules(mod.__path__)]


def describe_value(obj: Any) -> str:
    """A one-paragraph description of a constant that has no doc comment of its own."""
    from floatlab.formats import FloatFormat

    if isinstance(obj, FloatFormat):
        return f"{obj.description or obj.name}: ``{obj.summary()}``"
    if isinstance(obj, dict):
        return "A ``dict`` with the keys " + ", ".join(f"``{k}``" for k in obj) + "."
    if isinstance(obj, tuple) and all(isinstance(v, _PRIMITIVES) for v in obj):
        return f"``{obj!r}``"
    if isinstance(obj, _PRIMITIVES):
        return f"``{obj!r}``"
    if getattr(obj, "__origin__", None) is not None or type(obj).__module__ == "typing":
        return f"A type alias: ``{obj!r}``".replace("numpy.ndarray", "NDArray")
    return f"``{type(obj).__name__}``"


def _data_directive(index: ApiIndex, entry: Entry) -> list[str]:
    obj = getattr(_module_of(entry.module), entry.name)
    doc = attribute_doc(index, entry.name, obj)
    module, _, name = entry.canonical.rpartition(".")
    lines = [f".. py:data:: {name}", f"   :module: {module}", ""]
    body = doc if doc else [describe_value(obj)]
    if doc and describe_value(obj).startswith("``"):
        body = [*doc, "", describe_value(obj)]
    lines += [f"   {line}" if line else "" for line in body]
    return [*lines, ""]


def shadowed(index: ApiIndex, mod_name: str) -> bool:
    """Whether a described object has the module's own name: ``floatlab.torch`` exports the
    function ``inspect`` of its module ``floatlab.torch.inspect``, and the function, at its public
    address, is the name's one description. The module's page then shows the module's docstring
    without an index entry (Sphinx holds one object per name: a ``:mod:`` reference finds the
    function), and the API index links to the page itself."""
    return mod_name in set(index.canonical.values())


def module_page(index: ApiIndex, mod_name: str) -> str:
    """The MyST source of one module's reference page."""
    entries = index.entries[mod_name]
    out = [
        f"# `{mod_name}`",
        "",
        "```{eval-rst}",
        f".. automodule:: {mod_name}",
        *(["   :no-index:"] if shadowed(index, mod_name) else []),
        "",
    ]
    for kind, title in _SECTIONS:
        mine = [e for e in entries if e.kind == kind and e.here]
        if not mine:
            continue
        out += [f".. rubric:: {title}", ""]
        for e in mine:
            if kind == "class":
                cls = getattr(_module_of(e.module), e.name)
                # the bases are worth a line when they say something (an Enum, a ValueError)
                bases = [] if cls.__bases__ == (object,) else ["   :show-inheritance:"]
                out += [f".. autoclass:: {e.canonical}", "   :members:", *bases, ""]
            elif kind == "function":
                out += [f".. autofunction:: {e.canonical}", ""]
            else:
                out += _data_directive(index, e)
    elsewhere = [e for e in entries if not e.here]
    if elsewhere:
        out += [".. rubric:: Also exported here", ""]
        role = {"class": "class", "function": "func", "data": "data", "module": "mod"}
        for e in elsewhere:
            out.append(f"* ``{e.name}``: :py:{role[e.kind]}:`{e.canonical}`")
        out.append("")
    out += ["```", ""]
    return "\n".join(out)


def index_page(index: ApiIndex) -> str:
    """The MyST source of the API reference's front page: a table of modules and a toctree."""
    out = [
        "# API reference",
        "",
        "Generated from the code: every module below lists the names of its `__all__`, each with its",
        "docstring and a runnable example (the examples are doctests: they run in the test suite).",
        "Names exported by `floatlab` and `floatlab.train` are described there; their home modules",
        "link to them.",
        "",
        "| module | what it holds |",
        "|---|---|",
    ]
    for mod_name in index.modules:
        first = index.docstrings[mod_name].strip().split("\n\n")[0].replace("\n", " ")
        first = first.replace("|", "\\|")
        link = f"[`{mod_name}`]({mod_name}.md)" if shadowed(index, mod_name) else f"{{py:mod}}`{mod_name}`"
        out.append(f"| {link} | {first} |")
    out += ["", "```{toctree}", ":hidden:", ""]
    out += [mod_name for mod_name in index.modules]
    out += ["```", ""]
    return "\n".join(out)


def write_pages(srcdir: Path, index: ApiIndex) -> list[Path]:
    """Write the reference pages under ``srcdir/reference/api``, rewriting only changed files (so
    that an incremental build re-reads only what changed) and removing pages of modules that are
    gone. Returns the pages written."""
    folder = srcdir / API_DIR
    folder.mkdir(parents=True, exist_ok=True)
    pages = {folder / "index.md": index_page(index)}
    pages.update({folder / f"{m}.md": module_page(index, m) for m in index.modules})
    written = []
    for path, text in pages.items():
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            written.append(path)
    for stale in folder.glob("*.md"):
        if stale not in pages:
            stale.unlink()
    return written


def resolve_alias(index: ApiIndex, target: str) -> str | None:
    """The described name of whatever ``target`` (a dotted name under ``floatlab``) refers to.

    ``floatlab.codec.decode`` gives ``floatlab.decode``; a method or attribute keeps its tail
    (``floatlab.gradhist.GradHistogram.verdict`` gives ``floatlab.GradHistogram.verdict``).
    None when no prefix of ``target`` names a described object.
    """
    parts = target.split(".")
    for cut in range(len(parts), 0, -1):
        obj = _lookup(".".join(parts[:cut]))
        if obj is _MISSING:
            continue
        if _kind(obj) == "module":
            return None
        name = parts[cut - 1]
        canonical = index.canonical.get(_key(name, obj))
        if canonical is not None:
            return ".".join([canonical, *parts[cut:]])
    return None


_MISSING = object()


def _lookup(dotted: str) -> Any:
    """The object that ``dotted`` names (a module or an attribute path below one), or _MISSING."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr, _MISSING)
            if obj is _MISSING:
                return _MISSING
        return obj
    return _MISSING


def names_private_object(target: str) -> bool:
    """Whether ``target`` names an existing object on a private path (``floatlab.gradhist._kernels``):
    the reference leaves private modules out, so such a reference is shown without a link."""
    if not any(p.startswith("_") for p in target.split(".")):
        return False
    return _lookup(target) is not _MISSING
