"""pytest's collection: the torch package's modules and the torch tests' shared twins import torch,
so their doctests are collected only where torch is installed (``make test TORCH=`` runs the suite
without it)."""

import importlib.util

NEEDS_TORCH = ["floatlab/torch/*", "tests/torch_twins.py"]
collect_ignore_glob = [] if importlib.util.find_spec("torch") else NEEDS_TORCH
