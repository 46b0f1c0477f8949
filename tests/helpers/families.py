"""A topic family's YAML for tests: the events table as a family's template."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from tidemark.catalog.family_members import Member, Members, record_members
from tidemark.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 11, 22, 10, tzinfo=UTC)


def family_file(tmp_path: Path, **changes: Any) -> Path:
    data = yaml.safe_load((ROOT / "conf" / "tables" / "events.yaml").read_text())
    data.pop("table")
    data["source"].pop("topic")
    data.update({"family": "clicks", "table": "clicks_{topic}"})
    data["source"]["topic_pattern"] = r"clicks\.[a-z0-9.]+"
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    path = tmp_path / "families" / "clicks.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump(data))
    return path


def two_families_claiming_one_table(tmp_path: Path) -> Settings:
    """Families ``clicks`` (topic ``clicks.eu``) and ``more`` (topic ``clicks_eu``), whose
    members both read as table ``t_clicks_eu``; the settings of their conf dir."""
    settings = replace(Settings.from_env({"TIDEMARK_HOME": str(tmp_path / "home")}), conf_dir=tmp_path)
    family_file(tmp_path, family="clicks", table="t_{topic}")
    other = yaml.safe_load((tmp_path / "families" / "clicks.yaml").read_text())
    other.update({"family": "more"})
    other["source"]["topic_pattern"] = r"clicks.*"
    (tmp_path / "families" / "more.yaml").write_text(yaml.safe_dump(other))
    record_members(
        settings, Members("clicks", {"clicks.eu": Member("clicks.eu", "t_clicks_eu", T0.isoformat())})
    )
    record_members(
        settings, Members("more", {"clicks_eu": Member("clicks_eu", "t_clicks_eu", T0.isoformat())})
    )
    return settings
