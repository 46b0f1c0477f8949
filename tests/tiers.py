"""Test tiers, enforced: every test carries exactly one of the markers unit / integration / e2e,
matching the folder it lives in. An unmarked or mis-filed test fails instead of silently running
in the wrong tier (the Great Expectations provider's convention)."""

from __future__ import annotations

from pathlib import Path

import pytest

TIERS = ("unit", "integration", "e2e")


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
