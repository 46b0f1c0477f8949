"""The tier markers are enforced: an unmarked or mis-filed test fails."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _project_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))


def test_unmarked_test_fails(pytester: pytest.Pytester) -> None:
    pytester.makeconftest('pytest_plugins = ["tests.tiers"]')
    pytester.makeini("[pytest]\nmarkers =\n    unit: u\n    integration: i\n    e2e: e\n")
    pytester.makepyfile(
        test_sample="""
import pytest

def test_unmarked():
    pass

@pytest.mark.unit
def test_marked():
    pass
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*test_unmarked: a test needs exactly one tier marker*"])


def test_misfiled_test_fails(pytester: pytest.Pytester) -> None:
    pytester.makeconftest('pytest_plugins = ["tests.tiers"]')
    pytester.makeini("[pytest]\nmarkers =\n    unit: u\n    integration: i\n    e2e: e\n")
    pytester.mkpydir("unit")
    (pytester.path / "unit" / "test_wrong.py").write_text(
        "import pytest\n\n@pytest.mark.integration\ndef test_x():\n    pass\n"
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*marked integration but lives in tests/unit/*"])


def test_modules_are_ordered_heaviest_first_and_kept_whole(pytester: pytest.Pytester) -> None:
    pytester.makeconftest('pytest_plugins = ["tests.tiers"]')
    pytester.makeini("[pytest]\nmarkers =\n    unit: u\n    integration: i\n    e2e: e\n    timeout: t\n")
    for tier in ("unit", "integration", "e2e"):
        pytester.mkpydir(tier)
    (pytester.path / "unit" / "test_a.py").write_text(
        "import pytest\npytestmark = pytest.mark.unit\n\ndef test_u1():\n    pass\n\ndef test_u2():\n    pass\n"
    )
    (pytester.path / "integration" / "test_b.py").write_text(
        "import pytest\npytestmark = pytest.mark.integration\n\ndef test_i():\n    pass\n"
    )
    (pytester.path / "e2e" / "test_c.py").write_text(
        "import pytest\npytestmark = pytest.mark.e2e\n\ndef test_e():\n    pass\n"
    )
    (pytester.path / "e2e" / "test_d.py").write_text(
        "import pytest\npytestmark = pytest.mark.e2e\n\ndef test_light():\n    pass\n\n"
        "@pytest.mark.timeout(1200)\ndef test_heavy():\n    pass\n"
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--collect-only", "-q")
    collected = [line for line in result.stdout.lines if "::" in line]
    assert collected == [
        "e2e/test_d.py::test_light",
        "e2e/test_d.py::test_heavy",
        "e2e/test_c.py::test_e",
        "integration/test_b.py::test_i",
        "unit/test_a.py::test_u1",
        "unit/test_a.py::test_u2",
    ]
