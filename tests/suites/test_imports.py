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


# ---- NumPy and the rounding package load on first use --------------------------------------------
def _stdout_of(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return out.stdout


_DECODE = "from floatlab.cli import main\nassert main(['decode', '0x7bff']) == 0\n"
_DECODE_JSON = "from floatlab.cli import main\nassert main(['--json', 'decode', '0x7bff', '0x0001']) == 0\n"
# the modules behind the lazy names, imported up front
_EAGER = "import numpy, floatlab.rounding, floatlab.codec.encoded, floatlab.codec.arrays\n"


def test_decode_runs_without_numpy_and_prints_what_it_did_with_numpy_loaded() -> None:
    modules, out = _modules_after(_DECODE)
    assert [m for m in modules if m == "numpy" or m.startswith(("numpy.", "floatlab.rounding"))] == []
    assert "floatlab.codec.encoded" not in modules
    # the same text, byte for byte, as in an interpreter that has NumPy and the rounding package
    assert out == _stdout_of(_EAGER + _DECODE)
    assert "65504 (exact)" in out
    assert "down 65472 (0x7BFE)" in out
    modules, out = _modules_after(_DECODE_JSON)
    assert "numpy" not in modules
    assert json.loads(out) == json.loads(_stdout_of(_EAGER + _DECODE_JSON))


def test_import_floatlab_and_the_decoded_module_need_no_numpy() -> None:
    for code in (
        "import floatlab",
        "from floatlab.codec.decoded import Decoded, decode",
        "import floatlab.codec",
    ):
        modules, _ = _modules_after(code)
        assert "numpy" not in modules, code
        assert not any(m.startswith("floatlab.rounding") for m in modules), code


def test_the_lazy_names_work_on_first_use() -> None:
    # each in a fresh interpreter, so that the first use is what loads the name
    code = (
        "import sys\nimport floatlab as fl\nassert 'numpy' not in sys.modules\n"
        "import numpy as np\n"
        "print(fl.round_array(np.array([0.1, 1e-9], np.float32), 'fp16').tolist())\n"
    )
    assert _stdout_of(code).split() == ["[0.0999755859375,", "0.0]"]
    code = (
        "from floatlab import encode, round_array\n"
        "from floatlab.codec import decode_array\n"
        "print(encode('0.1', 'fp16'), round_array([65519.0], 'fp16').tolist(), "
        "decode_array([0x7BFF], 'fp16').tolist())\n"
    )
    assert _stdout_of(code).split() == ["11878", "[65504.0]", "[65504.0]"]
    # the submodules behind them are attributes of their package without an import by name, as
    # scripts that write `fl.rounding.fma` expect
    code = "import floatlab as fl, floatlab.codec as c\n"
    code += "print(fl.rounding.__name__, fl.backend.__name__, c.arrays.__name__)"
    assert _stdout_of(code).split() == ["floatlab.rounding", "floatlab.backend", "floatlab.codec.arrays"]


def test_every_public_name_resolves_to_the_object_of_its_defining_module() -> None:
    # in a fresh interpreter: every name of __all__ is listed by dir() before its first use, and
    # each is then the object its defining module holds (a function or class at its __module__ and
    # __qualname__, a submodule in sys.modules, a constant in the package that defines it)
    code = """
import importlib, inspect, json, sys
import floatlab as fl
import floatlab.codec as codec

problems = []
for pkg in (fl, codec):
    missing = sorted(set(pkg.__all__) - set(dir(pkg)))
    if missing:
        problems.append(f"{pkg.__name__}: dir() lacks {missing}")
    for name in pkg.__all__:
        obj = getattr(pkg, name)
        if inspect.ismodule(obj):
            home = sys.modules[f"floatlab.{name}"]
        elif inspect.isclass(obj) or inspect.isfunction(obj):
            home = importlib.import_module(obj.__module__)
            for part in obj.__qualname__.split("."):
                home = getattr(home, part)
        elif name == "__version__":
            home = obj
        else:
            defining = ("floatlab.formats", "floatlab.rounding", "floatlab.codec.decoded")
            homes = [importlib.import_module(m) for m in defining]
            home = next((getattr(m, name) for m in homes if name in m.__all__), None)
        if home is not obj:
            problems.append(f"{pkg.__name__}.{name}")
namespace = {}
exec("from floatlab import *", namespace)
if sorted(set(namespace) - {"__builtins__"}) != sorted(fl.__all__):
    problems.append("from floatlab import *")
print(json.dumps(problems))
"""
    assert json.loads(_stdout_of(code)) == []


def test_the_old_module_addresses_of_floatlab_train_import_the_module_at_its_new_home() -> None:
    import importlib

    import floatlab.train
    from floatlab.train._moved import MOVED

    for old, new in MOVED.items():
        module = importlib.import_module(old)
        assert module is importlib.import_module(new)
        assert module.__name__ == new
        assert module.__spec__ is not None
        assert module.__spec__.name == new
    assert floatlab.train.get_policy is importlib.import_module("floatlab.train.policy").get_policy


def test_no_package_exports_a_name_that_hides_one_of_its_modules() -> None:
    # `import floatlab.train.precision.matmul as m` binds the package's attribute: a function
    # exported under a module's name would stand in for the module
    import importlib
    import pkgutil

    import floatlab

    for info in pkgutil.walk_packages(floatlab.__path__, "floatlab."):
        if not info.ispkg or info.name.startswith("floatlab.torch"):
            continue
        package = importlib.import_module(info.name)
        for sub in pkgutil.iter_modules(package.__path__):
            shadow = vars(package).get(sub.name)
            assert shadow is None or type(shadow).__name__ == "module", f"{info.name}.{sub.name}"
