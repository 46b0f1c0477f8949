"""The two command lines: ``tidemark`` for operators (no local services, no demo) and
``tidemark-dev`` for a development machine's services and demo."""

from __future__ import annotations

import json
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
    assert all(name in usage for name in ("broker", "kafka", "metastore", "s3", "spark-master"))
    assert tidemark_dev(["services", "start", "zookeeper"]) == 2  # a named error, nothing started
    assert "unknown service(s) zookeeper; expected: broker," in capsys.readouterr().err
