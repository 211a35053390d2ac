"""pytest's collection: the torch package's modules import torch, so their doctests are collected
only where torch is installed (``make test TORCH=`` runs the suite without it)."""

import importlib.util

collect_ignore_glob = [] if importlib.util.find_spec("torch") else ["floatlab/torch/*"]
