"""`import floatlab` stays light: no sympy, matplotlib, numba or cupy until a feature asks for it."""

from __future__ import annotations

import json
import re
import subprocess
import sys

HEAVY = (
    "sympy", "matplotlib", "numba", "llvmlite", "cupy", "torch", "scipy",
    "dask", "distributed", "pandas", "pyarrow", "zarr",
)  # fmt: skip


def _heavy_modules_after(code: str) -> list[str]:
    probe = (
        f"{code}\nimport json, sys\n"
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({list(HEAVY)!r}))))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    result: list[str] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_import_floatlab_pulls_in_nothing_heavy() -> None:
    assert _heavy_modules_after("import floatlab") == []


def test_public_api_is_exported() -> None:
    import floatlab as fl

    for name in fl.__all__:
        assert hasattr(fl, name), name
    assert {"decode", "encode", "decode_array", "encode_array", "round_array", "get_format"} <= set(
        fl.__all__
    )


def _modules_after(code: str) -> tuple[list[str], str]:
    """The names in sys.modules after running ``code`` in a fresh interpreter, and its stdout."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)), file=sys.stderr)"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    modules: list[str] = json.loads(out.stderr.strip().splitlines()[-1])
    return modules, out.stdout


# what `floatlab decode` must never load: the trainer (its import alone costs more than the rest
# of the command), the simulators, the histograms, the bridges and the compiler
NOT_FOR_DECODE = (
    "floatlab.train", "floatlab.simulate", "floatlab.gradhist", "floatlab.sweeps", "floatlab.torch",
    "numba", "llvmlite", "numpy.random",
)  # fmt: skip


def test_decode_loads_its_own_command_and_no_trainer() -> None:
    # `floatlab decode 0x7bff` is the first thing a learner runs: keep its start-up light
    modules, out = _modules_after("from floatlab.cli import main\nmain(['decode', '0x7bff'])")
    assert [m for m in modules if m.startswith(NOT_FOR_DECODE)] == []
    commands = [m for m in modules if m.startswith("floatlab.cli.") and m != "floatlab.cli._common"]
    assert commands == ["floatlab.cli.decode"]
    assert "65504" in out


def test_help_lists_every_command_without_loading_one() -> None:
    from floatlab.cli import COMMANDS

    modules, out = _modules_after("from floatlab.cli import main\nmain(['--help'])")
    assert [m for m in modules if m.startswith("floatlab.cli.") and m != "floatlab.cli._common"] == []
    listed = re.findall(r"^    (\S+)", out, re.MULTILINE)  # the command column of the help
    assert listed == [c.NAME for c in COMMANDS]


def test_no_command_help_loads_the_trainer() -> None:
    # the policy and model names in `train --help` come from a list beside the command, not from
    # the trainer's registries
    from floatlab.cli import COMMANDS

    names = [c.NAME for c in COMMANDS]
    code = (
        "import contextlib, io\nfrom floatlab.cli import main\n"
        f"for name in {names!r}:\n"
        "    with contextlib.redirect_stdout(io.StringIO()):\n"
        "        assert main([name, '--help']) == 0, name\n"
    )
    modules, _ = _modules_after(code)
    assert [m for m in modules if m.startswith(NOT_FOR_DECODE)] == []


def test_the_sweep_command_line_and_floatlab_sweep_load_their_extras_only_when_used() -> None:
    # the command list knows `sweep`, and `floatlab.sweep` resolves, with neither pandas nor dask:
    # they load when a sweep runs
    assert _heavy_modules_after("import floatlab.cli; floatlab.cli.build_parser()") == []
    assert _heavy_modules_after("import floatlab; floatlab.sweep") == []
