"""Test tiers, enforced: every test carries exactly one of the markers unit / integration / e2e,
matching the folder it lives in. An unmarked or mis-filed test fails instead of silently running
in the wrong tier (the Great Expectations provider's convention)."""

from __future__ import annotations

from pathlib import Path

import pytest

TIERS = ("unit", "integration", "e2e")

# Longest first: the modules with a test over the default time limit, then e2e, integration and
# unit. With `--dist loadfile --no-loadscope-reorder` (Makefile) xdist hands modules out in this
# order, so the many short unit modules fill the end and neither worker idles while the other
# finishes a 10-minute e2e module (xdist's default order, by test count, ran those last).
_DEFAULT_TIMEOUT_S = 600.0
_TIER_RANK = {"e2e": 1, "integration": 2, "unit": 3}


def _rank(item: pytest.Item) -> int:
    limit = item.get_closest_marker("timeout")
    if limit is not None and limit.args and float(limit.args[0]) > _DEFAULT_TIMEOUT_S:
        return 0
    tier = next((m for m in TIERS if item.get_closest_marker(m) is not None), "unit")
    return _TIER_RANK[tier]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Order modules heaviest first, keeping each module's tests together and in file order (a
    module's tests share its rank, and the sort is stable)."""
    module_rank: dict[str, int] = {}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        module_rank[module] = min(module_rank.get(module, 4), _rank(item))
    items.sort(key=lambda it: module_rank[it.nodeid.split("::", 1)[0]])


def pytest_runtest_setup(item: pytest.Item) -> None:
    marks = [m for m in TIERS if item.get_closest_marker(m) is not None]
    if len(marks) != 1:
        pytest.fail(
            f"{item.nodeid}: a test needs exactly one tier marker of {', '.join(TIERS)} "
            f"(found {marks or 'none'}): add e.g. `pytestmark = pytest.mark.unit`",
            pytrace=False,
        )
    folder = next((p for p in Path(str(item.path)).parts if p in TIERS), None)
    if folder is not None and folder != marks[0]:
        pytest.fail(
            f"{item.nodeid}: marked {marks[0]} but lives in tests/{folder}/: move it or fix the marker",
            pytrace=False,
        )
