"""`import floatlab` stays light: no sympy, matplotlib, numba or cupy until a feature asks for it."""

from __future__ import annotations

import json
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


def test_the_decode_path_loads_neither_the_simulators_nor_numpy_random() -> None:
    # `floatlab decode 0x7bff` is the first thing a learner runs: keep its start-up light
    probe = (
        "import sys\nfrom floatlab.cli import main\n"
        "try:\n    main(['decode', '0x7bff'])\nexcept SystemExit:\n    pass\n"
        "print([m for m in sys.modules if m.startswith(('numpy.random', 'floatlab.simulate', "
        "'floatlab.gradhist'))], file=sys.stderr)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stderr.strip().splitlines()[-1] == "[]"
    assert "65504" in out.stdout


def test_the_sweep_command_line_and_floatlab_sweep_load_their_extras_only_when_used() -> None:
    # the command list knows `sweep`, and `floatlab.sweep` resolves, with neither pandas nor dask:
    # they load when a sweep runs
    assert _heavy_modules_after("import floatlab.cli; floatlab.cli.build_parser()") == []
    assert _heavy_modules_after("import floatlab; floatlab.sweep") == []
