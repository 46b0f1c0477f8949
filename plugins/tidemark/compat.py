"""Reading state records written by older versions: records are never rewritten, so when a
field gets a better name the readers accept both."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def renamed(data: Mapping[str, Any], **old_to_new: str) -> dict[str, Any]:
    """``data`` with keys of an older format under their current names."""
    out = dict(data)
    for old, new in old_to_new.items():
        if old in out and new not in out:
            out[new] = out.pop(old)
    return out
