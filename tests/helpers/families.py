"""A topic family's YAML for tests: the events table as a family's template."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

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
