"""The suite's order: the long tests (marked ``slow``: the lessons, the README, the browser, the
fuzzer, the GPU simulator) run first, so that when the suite is spread over the cores (``make
test`` runs pytest-xdist, handing out one test at a time) the workers finish together, instead of
one of them running the lessons alone at the end."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # (stable: slow ones first)
