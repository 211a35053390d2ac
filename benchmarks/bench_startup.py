"""Start-up time: how long ``floatlab decode 0x7bff`` and friends take, next to a bare interpreter.

Every command runs in a fresh interpreter, in rounds that interleave the commands (so that a busy
moment on the shared machine hits them all), and each row reports the best of ``--repeat`` rounds
(the figure to compare), the median, and the best CPU time (user + system, which waiting for a
busy core does not inflate). The ratio and the difference to ``python -c pass`` say what floatlab
adds to Python's own start; ``import numpy`` and ``import ml_dtypes`` (when installed) are there
for scale, since the commands that round (``encode``, ``round``, the trainer) import NumPy, while
``decode`` and ``--help`` do not. With ``--base DIR`` (a copy of an older floatlab) its floatlab rows
are timed too, in the same rounds, for an A/B.

A second table splits the decode command's time by module, from ``python -X importtime``
(cumulative: a module with what it is first to import), each the best of the same rounds; a module
the command does not import says so.

Writes ``benchmarks/results/startup.md``.

    python benchmarks/bench_startup.py [--repeat 20]
    git worktree add --detach /tmp/base <commit>     # or: git archive <commit> | tar -x -C /tmp/base
    python benchmarks/bench_startup.py --base /tmp/base --base-label "<commit>, before the change"
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from _common import Table, fmt_ratio, write_results

PYTHON = sys.executable
# the command a user types; `python -m floatlab` where the console script is not installed
_SCRIPT = shutil.which("floatlab", path=str(Path(PYTHON).parent))
FLOATLAB = [_SCRIPT] if _SCRIPT else [PYTHON, "-m", "floatlab"]

BASELINE = "python -c pass"

# what the console script runs, for -X importtime
_DECODE_CODE = "import sys; from floatlab.cli import main; sys.exit(main(['decode', '0x7bff']))"

# the modules whose import the breakdown reports, in the order they are first imported; NumPy and
# the rounding package are there to show that decode does without them
BREAKDOWN = {
    "site": "Python's own start (site, with the .pth files of the installed packages)",
    "numpy": "NumPy (loaded on first use of a name that needs it)",
    "floatlab.rounding": "the rounding package (loaded on first use, like NumPy)",
    "floatlab.formats": "the format registry (exact arithmetic, fractions, decimal, dataclasses)",
    "floatlab.codec.decoded": "decode and Decoded, with their text and HTML views",
    "floatlab.codec": "the codec package: decode eagerly, encode and decode_array on first use",
    "floatlab": "import floatlab, everything above but site",
    "floatlab.cli._common": "the command line's shared pieces (argparse, json)",
    "floatlab.cli": "the command line's package, with import floatlab and its shared pieces",
}


@dataclass(frozen=True)
class Run:
    """One row: the command line and the floatlab tree it imports (None: the installed one)."""

    argv: list[str]
    tree: Path | None = None


def runs(base: Path | None) -> dict[str, Run]:
    """The command lines to time, by the name the table shows."""
    out = {
        BASELINE: Run([PYTHON, "-c", "pass"]),
        "python -c 'import numpy'": Run([PYTHON, "-c", "import numpy"]),
    }
    if importlib.util.find_spec("ml_dtypes") is not None:
        out["python -c 'import ml_dtypes'"] = Run([PYTHON, "-c", "import ml_dtypes"])
    floatlab_rows = {
        "python -c 'import floatlab'": [PYTHON, "-c", "import floatlab"],
        "floatlab decode 0x7bff": [*FLOATLAB, "decode", "0x7bff"],
        "floatlab encode 0.1 -f fp16": [*FLOATLAB, "encode", "0.1", "-f", "fp16"],
        "floatlab --help": [*FLOATLAB, "--help"],
    }
    out |= {name: Run(argv) for name, argv in floatlab_rows.items()}
    if base is not None:
        out |= {f"{name} (base)": Run(argv, base) for name, argv in floatlab_rows.items()}
    return out


def _env(tree: Path | None, cwd: Path) -> dict[str, str]:
    # no colour and no terminal: the output is thrown away, only the time counts
    env = {**os.environ, "NO_COLOR": "1"}
    env.pop("PYTHONPATH", None)
    # byte code cached, as in an installed package (pip compiles the .pyc files): whatever
    # PYTHONDONTWRITEBYTECODE says here, the warm-up writes them, into a folder of the benchmark's
    # own rather than the source trees; without them every run would compile floatlab afresh
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(cwd / "pycache")
    if tree is not None:  # ahead of the installed floatlab on sys.path
        env["PYTHONPATH"] = str(tree)
    return env


def time_once(run: Run, cwd: Path) -> tuple[float, float]:
    """Wall and CPU seconds from start to exit of ``run`` in a fresh process; a failure stops the
    benchmark."""
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(
        run.argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=_env(run.tree, cwd),
        cwd=cwd,
        check=True,
    )
    wall = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)


_IMPORTTIME = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")


def import_times(cwd: Path) -> dict[str, float]:
    """Cumulative import time in seconds of each module of :data:`BREAKDOWN` in one decode run."""
    run = subprocess.run(
        [PYTHON, "-X", "importtime", "-c", _DECODE_CODE],
        capture_output=True,
        text=True,
        env=_env(None, cwd),
        cwd=cwd,
        check=True,
    )
    out: dict[str, float] = {}
    for line in run.stderr.splitlines():
        m = _IMPORTTIME.match(line)
        if m and m.group(4) in BREAKDOWN:
            out[m.group(4)] = int(m.group(2)) / 1e6
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=20, help="rounds; each row is the best of them")
    parser.add_argument("--base", type=Path, help="a copy of an older floatlab to time as well")
    parser.add_argument("--base-label", default="", help="what --base is (a commit), for the notes")
    args = parser.parse_args()

    rows = runs(args.base)
    # a neutral working directory: `python -c` puts it first on sys.path, ahead of --base
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        load_before = os.getloadavg()
        for run in rows.values():  # warm-up: the file cache and the .pyc files
            time_once(run, cwd)
        walls: dict[str, list[float]] = {name: [] for name in rows}
        cpus: dict[str, list[float]] = {name: [] for name in rows}
        imports: dict[str, list[float]] = {name: [] for name in BREAKDOWN}
        for _ in range(args.repeat):
            for name, run in rows.items():
                wall, cpu = time_once(run, cwd)
                walls[name].append(wall)
                cpus[name].append(cpu)
            for module, seconds in import_times(cwd).items():
                imports[module].append(seconds)
        load_after = os.getloadavg()

    base_wall, base_cpu = min(walls[BASELINE]), min(cpus[BASELINE])
    table = Table(
        ["command", "best ms", "median ms", "best CPU ms", f"vs `{BASELINE}`",
         f"CPU vs `{BASELINE}`", f"above `{BASELINE}`, ms"]
    )  # fmt: skip
    for name in rows:
        wall, cpu = min(walls[name]), min(cpus[name])
        table.add(
            f"`{name}`",
            f"{wall * 1e3:.1f}",
            f"{statistics.median(walls[name]) * 1e3:.1f}",
            f"{cpu * 1e3:.1f}",
            fmt_ratio(wall / base_wall),
            fmt_ratio(cpu / base_cpu),
            f"{(wall - base_wall) * 1e3:+.1f}",
        )
    breakdown = Table(["module", "what", "best ms (cumulative)"])
    for module, what in BREAKDOWN.items():
        best = f"{min(imports[module]) * 1e3:.1f}" if imports[module] else "not imported"
        breakdown.add(f"`{module}`", what, best)

    command = "python benchmarks/bench_startup.py"
    command += f" --repeat {args.repeat}" if args.repeat != 20 else ""
    command += f" --base {args.base}" if args.base is not None else ""
    command += f" --base-label '{args.base_label}'" if args.base_label else ""
    notes = (
        f"Each command in a fresh interpreter, {args.repeat} rounds interleaving the commands after "
        "one warm-up run that also writes the byte code (`.pyc`) files every later run reads, as "
        "an installed package has them; `floatlab` is the installed console script. Best and median "
        "wall time from start to exit, best CPU time (user + system); the ratios and the difference compare "
        "the best with the bare interpreter's. The cores are shared with other work: read the "
        "ratios, not the absolute times (load average "
        f"{load_before[0]:.1f} before, {load_after[0]:.1f} after)."
    )
    if args.base is not None:
        what = f" ({args.base_label})" if args.base_label else ""
        notes += f" Rows marked (base) import the floatlab in the `--base` folder{what}."
    split = (
        "## Where `floatlab decode 0x7bff` spends its start-up\n\n"
        "`python -X importtime`, best of the same rounds; cumulative, so a row includes the modules "
        "it is first to import (`floatlab` includes `floatlab.formats` and `floatlab.codec`). "
        "importtime's own bookkeeping makes these a little slower than the runs above.\n\n"
        + breakdown.markdown()
    )
    path = write_results(
        "startup",
        "Start-up time of the command line",
        [notes, f"Command: `{command}`", table.markdown(), split],
        packages=["ml_dtypes"],
    )
    print(path.read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
