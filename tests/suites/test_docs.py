"""The documentation: every public object documented with an example, the generated references
complete, the pieces of the docs extension correct.

The site itself is built by ``make docs-check`` (part of ``make test``) with warnings as errors and
every reference checked; these tests cover what that build cannot see: that nothing public is left
out of the reference, that the code on the pages runs (the check build executes none of it), and
that the generators and helpers give the right answers, checked against
sources independent of them (argparse's own parser walk, NumPy's and ml_dtypes' format limits,
exact rational arithmetic).
"""

from __future__ import annotations

import argparse
import ast
import doctest
import importlib
import inspect
import json
import pkgutil
import re
from fractions import Fraction
from pathlib import Path
from types import ModuleType
from typing import Any

import ml_dtypes
import numpy as np
import pytest

pytest.importorskip("sphinx")
pytest.importorskip("myst_nb")

from floatlab_sphinx import api, bench, cli, commands, formats, lessons

import floatlab
import floatlab.train
from floatlab.cli import build_parser

DOCS = Path(__file__).resolve().parents[2] / "docs"


# ---- the public API: discovered independently of the docs extension --------------------------------
def _public_modules() -> list[ModuleType]:
    packages = [importlib.import_module(name) for name in api.PACKAGES]
    mods: list[ModuleType] = list(packages)
    for pkg in packages:
        for info in pkgutil.iter_modules(pkg.__path__):
            if not info.name.startswith("_"):
                mods.append(importlib.import_module(f"{pkg.__name__}.{info.name}"))
    return mods


def _public_callables() -> list[tuple[str, Any]]:
    """(address, object) for every function and class named in a public module's ``__all__``,
    each object once, at its first address (``floatlab.decode`` before ``floatlab.codec.decode``)."""
    out, seen = [], set()
    for mod in _public_modules():
        for name in getattr(mod, "__all__", []):
            obj = getattr(mod, name)
            if (inspect.isfunction(obj) or inspect.isclass(obj)) and id(obj) not in seen:
                seen.add(id(obj))
                out.append((f"{mod.__name__}.{name}", obj))
    return out


def test_the_api_walk_finds_the_known_public_names() -> None:
    names = {address for address, _ in _public_callables()}
    assert {
        "floatlab.decode",
        "floatlab.round_array",
        "floatlab.train.train",
        "floatlab.GradHistogram",
    } <= names


@pytest.mark.parametrize(
    ("address", "obj"), _public_callables(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_every_public_function_and_class_has_a_docstring_with_an_example(address: str, obj: Any) -> None:
    doc = inspect.getdoc(obj) or ""
    assert doc.strip(), f"{address} has no docstring"
    assert ">>>" in doc, f"{address}: its docstring has no example (a >>> doctest line)"


def test_the_api_reference_describes_every_public_function_and_class_once() -> None:
    index = api.build_index()
    described = index.described()
    by_object: dict[int, list[str]] = {}
    for e in described:
        if e.kind in ("function", "class"):
            obj = getattr(importlib.import_module(e.module), e.name)
            by_object.setdefault(id(obj), []).append(e.canonical)
    for address, obj in _public_callables():
        assert id(obj) in by_object, f"{address} is missing from the API reference"
        assert len(by_object[id(obj)]) == 1, f"{address} is described {len(by_object[id(obj)])} times"
    # and every public module has its page, with a directive for what it describes
    assert set(index.modules) == {m.__name__ for m in _public_modules()}
    for mod_name in index.modules:
        page = api.module_page(index, mod_name)
        assert f".. automodule:: {mod_name}" in page
        for e in index.entries[mod_name]:
            if e.here and e.kind == "function":
                assert f".. autofunction:: {e.canonical}\n" in page
            elif e.here and e.kind == "class":
                assert f".. autoclass:: {e.canonical}\n" in page
            elif not e.here:
                assert e.canonical in page


def test_an_object_prefers_its_most_public_address() -> None:
    index = api.build_index()
    assert index.canonical[("", id(floatlab.decode))] == "floatlab.decode"
    assert index.canonical[("", id(floatlab.train.LossScaler))] == "floatlab.train.LossScaler"
    assert api.resolve_alias(index, "floatlab.codec.decode") == "floatlab.decode"
    assert (
        api.resolve_alias(index, "floatlab.gradhist.GradHistogram.verdict")
        == "floatlab.GradHistogram.verdict"
    )
    assert (
        api.resolve_alias(index, "floatlab.train.precision.scaler.LossScaler") == "floatlab.train.LossScaler"
    )
    assert api.resolve_alias(index, "floatlab.codec.no_such_name") is None
    assert api.names_private_object("floatlab.gradhist._kernels")
    assert not api.names_private_object("floatlab._no_such_module")
    assert not api.names_private_object("floatlab.decode")


def test_constants_are_described_by_their_doc_comment_or_their_value() -> None:
    index = api.build_index()
    assert api.attribute_doc(index, "MAX_PRECISION", floatlab.simulate.MAX_PRECISION)[0].startswith(
        "The most significand bits"
    )
    assert "65504" in api.describe_value(floatlab.FP16)
    assert api.describe_value(floatlab.ROUNDING_MODES) == f"``{floatlab.ROUNDING_MODES!r}``"


# ---- the CLI reference: against a walk of argparse's own parser ------------------------------------
def _walk(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    out = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                out += _walk(sub)
    return out


def test_the_cli_reference_has_every_command_and_option() -> None:
    page = cli.reference_page()
    parsers = _walk(build_parser())
    assert len(parsers) > 10
    for p in parsers:
        label = "-".join(["cli", *p.prog.split()[1:]])
        assert f"({label})=\n" in page, f"{p.prog}: no section"
        assert f"```{{program}} {p.prog}\n" in page
        section = page.split(f"```{{program}} {p.prog}\n", 1)[1].split("\n(cli", 1)[0]
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction) or action.help == argparse.SUPPRESS:
                continue
            names = action.option_strings or [str(action.metavar or action.dest)]
            for name in names:
                assert re.search(rf"```{{option}} (.*[ ,])?{re.escape(str(name))}\b", section), (
                    f"{p.prog}: option {name} missing from its section"
                )


def test_markdown_in_help_text_is_escaped() -> None:
    assert cli.md_escape("a*b_c <d> |e| $f") == r"a\*b\_c \<d\> \|e\| \$f"


# ---- format tables and diagrams: against NumPy and ml_dtypes -----------------------------------------
@pytest.mark.parametrize(
    ("name", "dtype"),
    [
        ("fp16", np.float16),
        ("fp32", np.float32),
        ("bf16", ml_dtypes.bfloat16),
        ("float8_e4m3fn", ml_dtypes.float8_e4m3fn),
        ("float8_e5m2", ml_dtypes.float8_e5m2),
        ("float6_e2m3fn", ml_dtypes.float6_e2m3fn),
        ("float4_e2m1fn", ml_dtypes.float4_e2m1fn),
    ],
)
def test_format_tables_agree_with_finfo(name: str, dtype: Any) -> None:
    info = _finfo(dtype)
    rows = dict(formats.properties(floatlab.get_format(name)))
    assert rows["largest finite"].startswith(_shown(float(info.max)))
    assert rows["smallest normal"].startswith(_shown(float(info.smallest_normal)))
    assert rows["smallest subnormal"].startswith(_shown(float(info.smallest_subnormal)))
    assert rows["machine epsilon"].startswith(_shown(float(info.eps)))
    assert rows["exponent bias"] == str(-int(info.minexp) + 1)


def _finfo(dtype: Any) -> Any:
    """NumPy's finfo for NumPy's own types, ml_dtypes' for the others."""
    if dtype in (np.float16, np.float32):
        return np.finfo(dtype)
    return ml_dtypes.finfo(dtype)  # type: ignore[no-untyped-call]


def _shown(x: float) -> str:
    q = Fraction(x)
    dec = f"{q.numerator * 5 ** (q.denominator.bit_length() - 1)}"  # x * 10^k for x = n / 2^k
    k = q.denominator.bit_length() - 1
    text = dec if k == 0 else f"{dec[:-k] or '0'}.{dec[-k:].rjust(k, '0')}".rstrip("0").rstrip(".")
    return text if len(text) <= 22 else "≈"


def test_exact_decimals_against_fractions() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        q = Fraction(int(rng.integers(0, 10**6)), 2 ** int(rng.integers(0, 60)))
        assert Fraction(formats.exact_decimal(q)) == q
    with pytest.raises(ValueError, match="power-of-two denominator"):
        formats.exact_decimal(Fraction(1, 3))


@pytest.mark.parametrize("name", ["fp16", "bf16", "float8_e4m3fn", "float4_e2m1fn"])
def test_bit_diagram_shows_the_bits_of_the_largest_value(name: str) -> None:
    f = floatlab.get_format(name)
    svg = formats.bit_diagram_svg(f, f.max_code, "caption")
    bits = "".join(re.findall(r'class="bit">([01])<', svg))
    # the code of the largest value, from ml_dtypes / numpy: the bit pattern of finfo.max
    dtype = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16}.get(name) or getattr(ml_dtypes, name)
    code = int(np.array(_finfo(dtype).max, dtype=dtype).view(f"uint{max(8, f.bits)}"))
    assert bits == f"{code:0{f.bits}b}"
    assert svg.count("<rect") == f.bits


# ---- commands, benchmarks, lessons -----------------------------------------------------------------
def test_commands_run_in_process_and_report_their_status(tmp_path: Path) -> None:
    status, out, err = commands.run_floatlab(["decode", "0x3c00"], tmp_path)
    assert status == 0
    assert "value" in out
    assert err == ""
    status, out, err = commands.run_floatlab(["decode", "0xZZ"], tmp_path)
    assert status == 2
    assert err.startswith("floatlab: error:")
    assert err.count("\n") == 1


def test_benchmark_results_are_found_with_the_script_that_writes_them() -> None:
    results = bench.select(("*.md",), ("gpu*",))
    assert results, "benchmarks/results holds no tables"
    for path in results:
        script = bench.writer_of(path)
        if script is not None:
            source = (bench.ROOT / script).read_text(encoding="utf-8")
            assert path.stem in source
    assert bench.demote("# A\ntext\n## B", 3) == ["### A", "text", "#### B"]


def test_lesson_titles_come_from_the_first_heading(tmp_path: Path) -> None:
    nb = {
        "cells": [
            {"cell_type": "code", "source": "x = 1", "metadata": {}, "outputs": [], "execution_count": None},
            {
                "cell_type": "markdown",
                "source": ["# Why is 0.1 not 0.1?\n", "\n", "**The question.** Look.\n"],
            },
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path = tmp_path / "01-x.ipynb"
    path.write_text(json.dumps(nb), encoding="utf-8")
    assert lessons.lesson_info(path) == ("Why is 0.1 not 0.1?", "Look.")


def test_every_lesson_notebook_is_named_for_the_site() -> None:
    for nb in sorted((DOCS.parent / "notebooks").glob("*.ipynb")):
        assert lessons._LESSON_NAME.match(nb.name), f"{nb.name}: expected NN-kebab-title.ipynb"


@pytest.mark.parametrize("module", [api, bench, cli, commands, formats, lessons], ids=lambda m: m.__name__)
def test_extension_doctests(module: ModuleType) -> None:
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0


# ---- the code cells of the pages ------------------------------------------------------------------
_CELL = re.compile(r"```\{code-cell\}[^\n]*\n(.*?)```", re.DOTALL)
_ALIASES = {
    "fl": "floatlab",
    "ft": "floatlab.train",
    "sim": "floatlab.simulate",
    "backend": "floatlab.backend",
}


def _pages_with_code() -> list[Path]:
    return sorted(
        p for p in DOCS.rglob("*.md") if "_build" not in p.parts and _CELL.search(p.read_text("utf-8"))
    )


@pytest.mark.parametrize("page", _pages_with_code(), ids=lambda p: str(p.relative_to(DOCS)))
def test_page_code_compiles_and_names_existing_api(page: Path) -> None:
    """Every ``fl.X`` / ``ft.X`` / ``sim.X`` / ``backend.X`` the pages' code cells use exists (a
    sharper message than the failure of :func:`test_page_code_runs` for a renamed function)."""
    for code in _CELL.findall(page.read_text(encoding="utf-8")):
        # IPython's magics (%matplotlib inline) are not Python
        tree = ast.parse("\n".join(line for line in code.splitlines() if not line.startswith("%")))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in _ALIASES
            ):
                mod = importlib.import_module(_ALIASES[node.value.id])
                assert hasattr(mod, node.attr), f"{page.name}: {node.value.id}.{node.attr} does not exist"
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("floatlab"):
                mod = importlib.import_module(node.module)
                for alias in node.names:
                    assert hasattr(mod, alias.name), f"{page.name}: {node.module}.{alias.name} does not exist"


@pytest.mark.parametrize("page", _pages_with_code(), ids=lambda p: str(p.relative_to(DOCS)))
def test_page_code_runs(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every code cell of the page runs, in order, in one namespace, as ``make docs`` runs them
    (in a scratch directory, so that files a page writes land there): a page whose code no
    longer works with the library fails the suite, not only the site build."""
    import matplotlib

    matplotlib.use("Agg")
    cells = _CELL.findall(page.read_text(encoding="utf-8"))
    if any(re.search(r"^\s*(import|from) torch\b", c, re.MULTILINE) for c in cells):
        pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"__name__": "__main__"}
    for i, code in enumerate(cells, 1):
        source = "\n".join(line for line in code.splitlines() if not line.startswith("%"))
        exec(compile(source, f"{page.relative_to(DOCS)} (cell {i})", "exec"), namespace)
    import matplotlib.pyplot as plt

    plt.close("all")


# ---- the README: every command and code block runs as shown ----------------------------------------
README = DOCS.parent / "README.md"
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def readme_blocks() -> list[tuple[str, str]]:
    """The README's fenced blocks, in order: (language, body)."""
    return [(m.group(1), m.group(2)) for m in _FENCE.finditer(README.read_text(encoding="utf-8"))]


def shell_commands(body: str) -> list[tuple[list[str], list[str]]]:
    """A terminal block split into its commands: (``$`` line as argv, the output lines shown after
    it). A line ending in a backslash goes on on the next one, as in a shell."""
    import shlex

    out: list[tuple[list[str], list[str]]] = []
    lines = body.splitlines()
    i = 0
    while i < len(lines):
        assert lines[i].startswith("$ "), f"README: expected a command, got {lines[i]!r}"
        command = lines[i][2:]
        while command.endswith("\\"):
            i += 1
            command = command[:-1] + lines[i]
        i += 1
        shown = []
        while i < len(lines) and not lines[i].startswith("$ "):
            shown.append(lines[i])
            i += 1
        out.append((shlex.split(command), shown))
    return out


def shown_matches(shown: list[str], printed: str) -> bool:
    """The printed text is what the README shows, line for line (trailing blanks aside), where a
    line ``...`` alone stands for any number of lines cut from the listing."""
    pattern = "".join(
        r"(?:[^\n]*\n)*?" if line.strip() == "..." else re.escape(line.rstrip()) + r"[ \t]*\n"
        for line in shown
    )
    return (
        re.fullmatch(pattern, printed if printed.endswith("\n") or not printed else printed + "\n")
        is not None
    )


def test_the_readme_matcher() -> None:
    assert shown_matches(["a", "...", "d"], "a\nb\nc\nd\n")
    assert shown_matches(["a", "...", "b"], "a\nb\n")
    assert shown_matches(["a  "], "a\n")
    assert not shown_matches(["a", "d"], "a\nb\nd\n")
    assert not shown_matches(["a", "...", "d"], "a\nb\nc\n")
    assert not shown_matches(["a.c"], "abc\n")
    assert shell_commands("$ floatlab a \\\n      --b c\nout\n$ floatlab d 'e f'\n") == [
        (["floatlab", "a", "--b", "c"], ["out"]),
        (["floatlab", "d", "e f"], []),
    ]


@pytest.mark.slow
def test_the_readme_runs_as_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every command of the README prints, on stdout and nothing on stderr, what the README shows
    after it, and every Python block runs pasted as it is, in order, in a fresh directory: a code
    block followed by an untitled block without commands prints that block."""
    import contextlib
    import io

    monkeypatch.chdir(tmp_path)
    blocks = readme_blocks()
    # the first block is the set-up: `make demo` and `make test` create .venv, install and run the
    # suite (this test among it); they are targets of the Makefile
    assert blocks[0] == ("", "make demo\nmake test\n")
    makefile = (DOCS.parent / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^demo:", makefile, re.MULTILINE)
    assert re.search(r"^test:", makefile, re.MULTILINE)
    namespace: dict[str, Any] = {"__name__": "__main__"}
    printed: str | None = None
    n_commands = n_python = 0
    for lang, body in blocks[1:]:
        if lang == "python":
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                exec(compile(body, f"README.md (Python block {n_python + 1})", "exec"), namespace)
            printed, n_python = out.getvalue(), n_python + 1
            continue
        assert lang == "", f"README: a block in {lang!r}"
        if body.startswith("$ "):
            for argv, shown in shell_commands(body):
                assert argv[0] == "floatlab", argv
                status, out_text, err = commands.run_floatlab(argv[1:], tmp_path)
                assert (status, err) == (0, ""), (argv, status, err)
                assert shown_matches(shown, out_text), f"{' '.join(argv)} printed:\n{out_text}"
                n_commands += 1
        else:  # the output of the Python block above it
            assert printed is not None, "README: an output block with no code before it"
            assert shown_matches(body.splitlines(), printed), f"the Python block printed:\n{printed}"
        printed = None
    assert n_commands >= 8
    assert n_python >= 2


# ---- facts the concept pages state, against independent oracles ------------------------------------
def _page(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def test_fp16_flushes_at_or_below_2_to_the_minus_25_as_the_pages_say() -> None:
    """Values between 2^-25 and 2^-24 round up to 2^-24; only those at or below 2^-25 flush (NumPy's
    float16 cast, round to nearest even, is the oracle)."""
    between = np.array([np.nextafter(2.0**-25, 1), 1.5 * 2.0**-25, np.nextafter(2.0**-24, 0)])
    assert (between.astype(np.float16) == np.float16(2.0**-24)).all()
    assert np.array([2.0**-25, 2.0**-26]).astype(np.float16).tolist() == [0.0, 0.0]  # a tie goes to 0
    assert floatlab.FP16.smallest_subnormal == 2.0**-24
    for name in ("concepts/formats.md", "concepts/loss-scaling.md", "concepts/underflow.md"):
        text = " ".join(_page(name).split())
        assert not re.search(r"below (fp16's smallest subnormal, )?2\^-24[^.]*flush", text), name
        assert "2^-25" in text, name


def test_the_fnuz_ranges_as_the_formats_page_says() -> None:
    """The larger bias halves the bottom of the range; the top stays (e5m2) or falls to 240 (e4m3)."""
    fi = {
        n: _finfo(getattr(ml_dtypes, n))
        for n in ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")
    }
    for ieee, fnuz in (("float8_e4m3fn", "float8_e4m3fnuz"), ("float8_e5m2", "float8_e5m2fnuz")):
        assert float(fi[fnuz].smallest_normal) == float(fi[ieee].smallest_normal) / 2
        assert float(fi[fnuz].smallest_subnormal) == float(fi[ieee].smallest_subnormal) / 2
    assert float(fi["float8_e5m2fnuz"].max) == float(fi["float8_e5m2"].max) == 57344
    assert (float(fi["float8_e4m3fnuz"].max), float(fi["float8_e4m3fn"].max)) == (240, 448)
    section = " ".join(_page("concepts/formats.md").split("## fp8 FNUZ")[1].split("\n## ")[0].split())
    for fact in ("one NaN code in all", "both reach 57344", "reaches 240 where float8_e4m3fn reaches 448"):
        assert fact in section
    assert "shifts the range down by one binade" not in section


def test_the_tensor_core_row_states_the_cost_of_the_fp16_inputs() -> None:
    """The concepts index does not call an fp16 GEMM nearly as accurate as fp32: its inputs err by
    up to fp16's unit roundoff, 2^-11 (the tensor-cores page measures it in a code cell)."""
    row = next(line for line in _page("concepts/index.md").splitlines() if "{doc}`tensor-cores`" in line)
    assert "nearly as accurate" not in row
    assert "2^-11" in row
    assert "2^-24" in row
    assert floatlab.FP16.unit_roundoff == 2.0**-11 == float(np.finfo(np.float16).eps) / 2
    assert "assert abs(np.log2(errors[" in _page("concepts/tensor-cores.md")


def test_the_docs_index_leads_to_every_howto() -> None:
    toctree = _page("howto/index.md").split("```{toctree}")[1].split("```")[0]
    pages = [line.strip() for line in toctree.splitlines()[1:] if line.strip() and not line.startswith(":")]
    assert "mx-block-scaling" in pages
    start = _page("index.md").split("## Where to start")[1].split("\n## ")[0]
    for page in pages:
        assert f"(howto/{page}.md)" in start, page


def test_the_dynamic_scalers_of_the_scale_and_flush_figure_never_move() -> None:
    """The loss-scaling page says so of its figure's runs: 96 steps, no overflow, and growth only
    after 2000 clean steps."""
    import floatlab.train as ft

    # the figure's runs (64 hidden units), and the README's and getting-started's `floatlab compare
    # ... --data underflow --epochs 3` (the default MLP)
    default = ft.TrainConfig().hidden
    for scaler, init, hidden in (
        ("torch", 2.0**16, (64,)),
        ("mindspore", 2.0**24, (64,)),
        ("torch", 2.0**16, default),
    ):
        h = ft.train(
            "mlp", "underflow", "mixed-fp16", epochs=3, seed=0, overrides={"scaler": scaler}, hidden=hidden
        )
        assert ft.LossScaler.preset(scaler).growth_interval == 2000
        assert h.summary()["steps"] == 96
        assert h.summary()["skipped_steps"] == 0
        assert set(h.column("scale").tolist()) == {init}
    caption = " ".join(_page("concepts/loss-scaling.md").split("scale-and-flush")[1].split("```")[0].split())
    assert "never move in these 96 steps" in caption
    assert "more than these 96" in " ".join(README.read_text(encoding="utf-8").split())
    assert "never moves in these 96 steps" in " ".join(_page("getting-started.md").split())
    assert "2000 clean steps" in caption
