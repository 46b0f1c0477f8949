"""The two command lines: ``tidemark`` for operators (no local services, no demo) and
``tidemark-dev`` for a development machine's services and demo."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tidemark.cli import main as tidemark
from tidemark_dev.cli import main as tidemark_dev
from tidemark_dev.net import free_port

pytestmark = pytest.mark.unit


def test_services_are_a_development_command_not_an_operators_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TIDEMARK_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TIDEMARK_KAFKA_BOOTSTRAP", f"127.0.0.1:{free_port()}")
    with pytest.raises(SystemExit) as refused:
        tidemark(["services", "status"])
    assert refused.value.code == 2 and "invalid choice: 'services'" in capsys.readouterr().err

    assert tidemark_dev(["services", "status", "broker", "--json"]) == 3  # nothing answers
    (broker,) = json.loads(capsys.readouterr().out)
    assert (broker["name"], broker["answering"], broker["pid"]) == ("broker", False, None)
    assert broker["log_file"] == str(tmp_path / "home" / "logs" / "broker.log")


def test_the_development_command_names_its_services_and_refuses_an_unknown_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        tidemark_dev(["services", "--help"])
    usage = capsys.readouterr().out
    assert all(name in usage for name in ("broker", "tansu", "metastore", "s3", "spark-master"))
    assert tidemark_dev(["services", "start", "zookeeper"]) == 2  # a named error, nothing started
    assert "unknown service(s) zookeeper; expected: broker," in capsys.readouterr().err


def test_the_demo_and_make_up_fetch_only_what_they_run() -> None:
    """`make demo` and `make up` fetch the broker's and Iceberg's jars, never Trino's server
    (784 MB) or the AWS SDK bundle (616 MB), which only the tests and benches use."""
    root = Path(__file__).resolve().parents[2]

    def fetched(*targets: str) -> set[str]:
        planned = subprocess.run(
            ["make", "-n", "-C", str(root), *targets], capture_output=True, text=True, check=True
        ).stdout
        return {p for line in planned.splitlines() if "ensure_jvm.sh" in line for p in line.split()[1:]}

    assert fetched("demo", "up") == {"kafka", "iceberg"}
    assert {"trino", "s3a", "delta"} <= fetched("jvm")  # the full set still has them
