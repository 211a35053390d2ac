"""Sweeps and sharded histograms: the speed-up of two workers, and the cost of reading from disk.

1. A sweep of 8 short runs (4 policies x 2 seeds, an MLP on the digits) run serially, in a local
   pool of two processes (twice: the session's first pool sweep, which starts the pool's fork
   server, and a later one, which finds it running) and on a two-worker Dask ``LocalCluster``
   (one thread per run everywhere, as the sweep runs them); the tables must be identical, and the
   figure is the serial time over the parallel one (the pool's start-up included). The target:
   at least 1.7x. Twice, each in a fresh process (so that each first pool sweep starts its fork
   server): runs of 1500 steps (about a second each) and of 3000 steps, to show what the pool's
   one-time start costs a sweep of very short runs.
2. A gradient histogram of 2x10^8 float32 values (800 MB) held in 20 ``.npy`` shards on disk,
   counted chunk by chunk (:func:`floatlab.gradhist.histogram_files`, also through Dask) against
   the in-memory histogram of the same values: the speed ratio (target at least 0.5x; the files
   are in the page cache, read once before timing) and the peak memory of the sharded count
   (tracemalloc: every NumPy buffer; and the growth of the resident set, sampled every
   millisecond, which also counts the pages of the memory-mapped windows that tracemalloc does
   not see; target under a quarter of the data size). The histograms must be equal bin for bin.

The machine may be shared: the load average before and after each part is in the table.
Writes ``benchmarks/results/sweep.md`` and ``sweep.json``. Run: ``python benchmarks/bench_sweep.py``.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import RESULTS, Table, fmt_ratio, machine_header, write_results

AXES: dict[str, Any] = {"precision": ["fp32", "bf16", "mixed-fp16", "mixed-bf16"], "seed": [0, 1]}
FIXED: dict[str, Any] = {"data": "digits", "hidden": (64, 64), "steps": 1500, "eval_every": 500}
#: the run lengths: about one second a run, and two
RUN_STEPS = (1500, 3000)
N_VALUES = 200_000_000
N_SHARDS = 20


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.1f} / {five:.1f} / {fifteen:.1f}"


def _resident() -> int | None:
    """This process's resident set in bytes (Linux), None elsewhere."""
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return None


def _peak_resident_growth(fn: Any) -> int | None:
    """How far the resident set grew above its level before ``fn()``, at most (sampled every ms)."""
    base = _resident()
    if base is None:
        return None
    peak = [base]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.001):
            peak[0] = max(peak[0], _resident() or 0)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    try:
        fn()
    finally:
        done.set()
        t.join()
    return max(peak[0], _resident() or 0) - base


def bench_sweep(steps: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The sweep of runs of ``steps`` steps, in this process (run it in a fresh one: see main)."""
    import pandas as pd

    from floatlab.sweeps import Grid, execute, sweep

    fixed = {**FIXED, "steps": steps}
    execute(Grid({"precision": ["fp32"]}, {**FIXED, "steps": 2}).tasks[0])  # compile outside the clock
    rows: list[dict[str, Any]] = []
    tables = {}
    for label, kwargs in (
        ("serial (this process)", {"executor": "serial"}),
        ("process pool, 2 workers (this process and a child)", {"executor": "process", "workers": 2}),
        # a later sweep of the same session: the fork server (its start, about 0.8 s, is the
        # first pool sweep's) is running, as in a notebook that sweeps again
        (
            "the same pool sweep again in this session (its fork server running)",
            {"executor": "process", "workers": 2},
        ),
        ("Dask LocalCluster, 2 workers", {"executor": "dask", "workers": 2}),
    ):
        before = _load()
        t0 = time.perf_counter()
        tables[label] = sweep(AXES, fixed, **kwargs)
        seconds = time.perf_counter() - t0
        rows.append({"how": label, "seconds": seconds, "load_before": before, "load_after": _load()})
        print(f"{label}: {seconds:.1f} s", flush=True)
    first = next(iter(tables.values()))
    for t in tables.values():
        pd.testing.assert_frame_equal(first, t)
    serial = rows[0]["seconds"]
    for r in rows:
        r["speedup"] = serial / r["seconds"]
    return rows, {"runs": len(first["run_id"].unique()), "identical_tables": True, "steps": steps}


def _sweep_in_fresh_process(steps: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """:func:`bench_sweep` in a new Python process (no fork server running yet), read back as JSON."""
    import subprocess

    out = subprocess.run(
        [sys.executable, __file__, "--sweep", str(steps)], check=True, capture_output=True, text=True
    ).stdout
    rows, facts = json.loads(out.strip().splitlines()[-1])
    for r in rows:
        print(f"{steps} steps, {r['how']}: {r['seconds']:.1f} s", flush=True)
    return rows, facts


def bench_histogram() -> list[dict[str, Any]]:
    import numpy as np

    from floatlab.gradhist import GradHistogram, histogram_files

    folder = Path(tempfile.mkdtemp(prefix="floatlab-shards-"))
    try:
        rng = np.random.default_rng(0)
        per = N_VALUES // N_SHARDS
        for i in range(N_SHARDS):  # gradient-like: a normal bulk scaled over many binades
            part = rng.standard_normal(per, np.float32) * np.exp2(rng.integers(-30, 0, per)).astype(
                np.float32
            )
            np.save(folder / f"grad-{i:02d}.npy", part)
        del part
        histogram_files(folder)  # the files in the page cache, the loops compiled
        x = np.concatenate([np.load(folder / f"grad-{i:02d}.npy") for i in range(N_SHARDS)])
        GradHistogram(x[:1_000_000])
        out: list[dict[str, Any]] = []

        def best(fn: Any, repeat: int = 3) -> tuple[Any, float]:
            times, value = [], None
            for _ in range(repeat):
                gc.collect()
                t0 = time.perf_counter()
                value = fn()
                times.append(time.perf_counter() - t0)
            return value, min(times)

        before = _load()
        held = {"x": x}
        del x
        h_mem, t_mem = best(lambda: GradHistogram(held["x"]))
        out.append(
            {"how": "in memory (one array)", "seconds": t_mem, "load_before": before, "load_after": _load()}
        )
        nbytes = held["x"].nbytes
        held.clear()  # the sharded count runs without the data in memory
        gc.collect()
        for label, kwargs in (
            ("20 shards on disk, chunk by chunk", {}),
            ("20 shards, Dask threads", {"dask": True}),
        ):
            before = _load()
            h, t = best(lambda kw=kwargs: histogram_files(folder, **kw))
            assert h == h_mem, label
            tracemalloc.start()
            histogram_files(folder, **kwargs)
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            gc.collect()
            resident = _peak_resident_growth(lambda kw=kwargs: histogram_files(folder, **kw))
            out.append(
                {"how": label, "seconds": t, "load_before": before, "load_after": _load(), "peak_bytes": peak,
                 "resident_growth": resident}
            )  # fmt: skip
        for r in out:
            r["speed_vs_memory"] = t_mem / r["seconds"]
            r["data_bytes"] = nbytes
        return out
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    if sys.argv[1:2] == ["--sweep"]:  # (one run length, in this fresh process: see below)
        print(json.dumps(bench_sweep(int(sys.argv[2]))))
        return
    by_steps = {steps: _sweep_in_fresh_process(steps) for steps in RUN_STEPS}
    sweep_rows = [{**r, "steps": steps} for steps, (rows, _) in by_steps.items() for r in rows]
    facts = by_steps[RUN_STEPS[0]][1]
    hist_rows = bench_histogram()
    t1 = Table(["runs of", "how", "seconds", "speed-up vs serial", "load avg before (1/5/15 min)", "after"])
    for r in sweep_rows:
        t1.add(
            f"{r['steps']} steps", r["how"], f"{r['seconds']:.1f}", fmt_ratio(r["speedup"]), r["load_before"],
            r["load_after"],
        )  # fmt: skip
    t2 = Table(
        ["how", "seconds", "speed vs in memory", "peak memory (tracemalloc)", "peak resident growth",
         "load avg before", "after"]
    )  # fmt: skip

    def share(peak: int | None, data: int) -> str:
        return "-" if peak is None else f"{peak / 2**20:.0f} MiB ({100 * peak / data:.0f}% of the data)"

    for r in hist_rows:
        t2.add(
            r["how"],
            f"{r['seconds']:.2f}",
            fmt_ratio(r["speed_vs_memory"]),
            share(r.get("peak_bytes"), r["data_bytes"]),
            share(r.get("resident_growth"), r["data_bytes"]),
            r["load_before"],
            r["load_after"],
        )
    cores = os.cpu_count()
    sections = [
        f"## A sweep of {facts['runs']} short runs on two workers\n\n"
        f"{AXES['precision']} x seeds {AXES['seed']}, MLP {FIXED['hidden']} on the digits, "
        f"{' or '.join(str(n) for n in RUN_STEPS)} steps each (each length in a fresh process, so "
        "that its first pool sweep starts the fork server), one thread per run. The tables of one "
        "length are identical. "
        "The pool's two workers are this process and one child (started by a fork server that "
        "sets numba up once, while this process already runs tasks); each data set is read once "
        "per sweep and sent with the tasks. "
        f"Target: two workers at least 1.7x faster than serial ({cores} logical cores here, shared: "
        "see the load).\n\n" + t1.markdown(),
        f"## A histogram of {N_VALUES:.0e} float32 values in {N_SHARDS} shards\n\n"
        f"{N_VALUES * 4 / 1e6:.0f} MB of .npy files (in the page cache), default chunk of 2^24 values, "
        "each memory-mapped (no copy) with the next mapped while this one is counted; equal bin for "
        "bin to the in-memory histogram. Targets: at least 0.5x the in-memory speed, peak memory "
        "under a quarter of the data (the mapped windows are page-cache pages: tracemalloc does not "
        "see them, the resident set does).\n\n" + t2.markdown(),
    ]
    path = write_results("sweep", "Sweeps on two workers, and histograms of sharded dumps", sections,
                         packages=["dask", "distributed", "pandas", "pyarrow"])  # fmt: skip
    data = {"machine": machine_header(["dask", "distributed", "pandas", "pyarrow"]), "sweep": sweep_rows,
            "sweep_facts": facts, "histogram": hist_rows}  # fmt: skip
    (RESULTS / "sweep.json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(f"\nwritten to {path} and sweep.json")


if __name__ == "__main__":
    main()
