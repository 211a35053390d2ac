"""Shared benchmark helpers: the machine and versions header, best-of-N timing, markdown tables.

A benchmark times floatlab and its peers in ONE run, reports rates (million values per
second) and ratios, and writes a markdown table to ``benchmarks/results/<name>.md``::

    from _common import Table, machine_header, time_best, write_results
    t = time_best(lambda: x.copy(), repeat=9)
    table = Table(["what", "M values/s"])
    table.add("numpy copy", f"{x.size / t.best / 1e6:.0f}")
    write_results("example", "Example", [table.markdown()])
"""

from __future__ import annotations

import datetime as _dt
import gc
import importlib
import importlib.metadata
import os
import platform
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True)
class Timing:
    """Seconds per call over ``runs`` timed calls: the best (the figure to report) and the median."""

    best: float
    median: float
    runs: int

    def rate(self, n: int) -> float:
        """Million items per second at the best time, for ``n`` items per call."""
        return n / self.best / 1e6


def time_best(
    fn: Callable[[], object], *, repeat: int = 7, warmup: int = 1, min_seconds: float = 0.0
) -> Timing:
    """Time ``fn()`` after ``warmup`` untimed calls: best and median of at least ``repeat`` calls.

    Calls go on past ``repeat`` until ``min_seconds`` of timed work has been spent, so short
    calls are timed often enough. The garbage collector is paused while timing.
    """
    for _ in range(warmup):
        fn()
    times: list[float] = []
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        while len(times) < repeat or sum(times) < min_seconds:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    finally:
        if was_enabled:
            gc.enable()
    times.sort()
    return Timing(best=times[0], median=times[len(times) // 2], runs=len(times))


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux), or what the platform module knows."""
    from floatlab.backend import _cpu_name

    return _cpu_name()


def versions(packages: Iterable[str]) -> dict[str, str]:
    """Installed version of each package that imports, "not installed" for the others."""
    out: dict[str, str] = {}
    for name in packages:
        try:
            mod = importlib.import_module(name)
        except Exception:  # a peer that fails to import is reported, not fatal
            out[name] = "not installed"
            continue
        version = getattr(mod, "__version__", None)
        if version is None:
            try:
                version = importlib.metadata.version(name)
            except importlib.metadata.PackageNotFoundError:
                version = "unknown"
        out[name] = str(version)
    return out


def machine_header(packages: Sequence[str] = ()) -> list[str]:
    """Markdown lines: date, CPU, cores, OS, Python, thread settings and package versions."""
    cores = os.cpu_count() or 0
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cores
    lines = [
        f"- date: {_dt.datetime.now(_dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- CPU: {cpu_model()}, {cores} logical cores ({usable} usable by this process)",
        f"- OS: {platform.system()} {platform.release()}, Python {platform.python_version()}",
    ]
    threads = os.environ.get("NUMBA_NUM_THREADS")
    if threads:
        lines.append(f"- NUMBA_NUM_THREADS={threads}")
    vers = versions(["floatlab", "numpy", *packages])
    lines.append("- versions: " + ", ".join(f"{k} {v}" for k, v in vers.items()))
    return lines


class Table:
    """A markdown table built row by row (cells are strings; numbers are formatted by the caller)."""

    def __init__(self, columns: Sequence[str]) -> None:
        self.columns = list(columns)
        self.rows: list[list[str]] = []

    def add(self, *cells: object) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"{len(cells)} cells: expected {len(self.columns)} ({', '.join(self.columns)})")
        self.rows.append([str(c) for c in cells])

    def markdown(self) -> str:
        widths = [max(len(r[i]) for r in [self.columns, *self.rows]) for i in range(len(self.columns))]

        def line(cells: Sequence[str]) -> str:
            return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

        rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
        return "\n".join([line(self.columns), rule, *(line(r) for r in self.rows)])


def fmt_rate(rate: float) -> str:
    """A rate in million values per second, with sensible precision."""
    return f"{rate:,.0f}" if rate >= 100 else f"{rate:.3g}"


def fmt_ratio(ratio: float) -> str:
    return f"{ratio:,.0f}x" if ratio >= 100 else f"{ratio:.3g}x"


def write_results(name: str, title: str, sections: Sequence[str], packages: Sequence[str] = ()) -> Path:
    """Write ``benchmarks/results/<name>.md``: a title, the machine header, then the sections."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.md"
    parts = [f"# {title}", "\n".join(machine_header(packages)), *sections]
    path.write_text("\n\n".join(parts) + "\n", encoding="utf-8")
    return path
