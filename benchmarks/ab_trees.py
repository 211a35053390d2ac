"""Two source trees of floatlab side by side, on this machine, in one run: a regression check.

The peer tables in benchmarks/results compare floatlab with other libraries in one run; between two
runs on a shared machine their baselines (a numpy copy that allocates, BLAS) move by 30% or more.
This script instead runs the same probes against two checkouts (``--base`` and ``--new``,
interleaved, several rounds, best of each) and writes the ratios new / base:

* start-up of ``floatlab decode 0x7bff`` (a fresh interpreter each time);
* per-call cost of round_array on 1,000 float32 values (the prologue a training step pays);
* throughput of encode_array on 10^7 float32 values (the kernels), stochastic included;
* one training step of the 784-256-256-10 MLP (fp32 and mixed-fp16) and simulate.add in fp16.

    git worktree add /tmp/base <commit>
    python benchmarks/ab_trees.py --base /tmp/base --new . --out benchmarks/results/ab-trees.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

PROBE = r"""
import json, sys, time
import numpy as np
import floatlab as fl
import floatlab.simulate as sim
import floatlab.train as ft

def best_of(fn, repeat, number=1):
    fn()
    best = 1e9
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - t) / number)
    return best

out = {}
rng = np.random.default_rng(0)
small = rng.standard_normal(1000).astype(np.float32)
for f, mode in (("bf16", "rne"), ("fp16", "rne"), ("e4m3fn", "rne"), ("fp16", "stochastic")):
    kw = {"rng": np.random.default_rng(0)} if mode == "stochastic" else {}
    t = best_of(lambda: fl.round_array(small, f, mode, **kw), 5, 2000)
    out[f"round_array 1e3 -> {f} {mode} (us per call)"] = t * 1e6
n = 10_000_000
big = (rng.standard_normal(n) * 2.0 ** rng.integers(-30, 20, n)).astype(np.float32)
for f, mode in (("fp16", "rne"), ("fp16", "rtz"), ("bf16", "rtz"), ("e4m3fn", "rne"), ("fp16", "stochastic")):
    kw = {"rng": 1} if mode == "stochastic" else {}
    t = best_of(lambda: fl.encode_array(big, f, mode, **kw), 5)
    out[f"encode_array 1e7 -> {f} {mode} (ms)"] = t * 1e3
x = rng.standard_normal((128, 784)).astype(np.float32); y = rng.integers(0, 10, 128)
for policy in ("fp32", "mixed-fp16"):
    tr = ft.Trainer(ft.MLP(784, (256, 256), 10), ft.Dataset("random", x, y, x, y, 10), policy,
                    optimizer=ft.SGD(lr=0.01, momentum=0.9), seed=0)
    for _ in range(20):
        tr.train_step(x, y)
    out[f"train_step {policy} (ms)"] = best_of(lambda: tr.train_step(x, y), 7, 20) * 1e3
a = rng.standard_normal(1_000_000); b = rng.standard_normal(1_000_000) * 1e-3
out["simulate.add 1e6 fp16 (ms)"] = best_of(lambda: sim.add(a, b, "fp16"), 7) * 1e3
print(json.dumps(out))
"""


def run(tree: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` with floatlab imported from ``tree``."""
    env = dict(os.environ, PYTHONPATH=str(tree), NUMBA_CACHE_DIR=str(tree / ".numba_cache"))
    return subprocess.run(
        [sys.executable, *args], env=env, cwd=tree, capture_output=True, text=True, check=True
    )


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--base", type=Path, required=True)
    p.add_argument("--new", type=Path, default=Path("."))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "ab-trees.md")
    p.add_argument("--title", default="the core redesign against the commit before it")
    a = p.parse_args()
    trees = {"base": a.base.resolve(), "new": a.new.resolve()}
    best: dict[str, dict[str, float]] = {"base": {}, "new": {}}
    for _ in range(a.rounds):
        for name, tree in trees.items():
            for _ in range(5):  # start-up, a fresh interpreter each time
                t = time.perf_counter()
                run(tree, ["-m", "floatlab", "decode", "0x7bff"])
                dt = (time.perf_counter() - t) * 1e3
                k = "floatlab decode 0x7bff start-up (ms)"
                best[name][k] = min(best[name].get(k, 1e9), dt)
            for k, v in json.loads(run(tree, ["-c", PROBE]).stdout).items():
                best[name][k] = min(best[name].get(k, 1e9), v)

    def rev(name: str) -> str:
        git = ["git", "-C", str(trees[name]), "rev-parse", "--short", "HEAD"]
        return subprocess.run(git, capture_output=True, text=True).stdout.strip()

    lines = [
        f"# Two trees side by side: {a.title}",
        "",
        f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- machine: {platform.machine()}, {os.cpu_count()} logical cores, "
        f"Python {platform.python_version()}",
        f"- base: {rev('base')}, new: {rev('new')}; {a.rounds} interleaved rounds, best of each "
        "(times: lower is better)",
        "- command: `python benchmarks/ab_trees.py --base BASE_TREE --new . "
        f"--rounds {a.rounds} --title '{a.title}'`",
        "",
        "| probe | base | new | new / base |",
        "|---|---|---|---|",
    ]
    for k in best["base"]:
        b, n = best["base"][k], best["new"][k]
        lines.append(f"| {k} | {b:.3g} | {n:.3g} | {n / b:.2f} |")
    a.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
