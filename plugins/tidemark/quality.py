"""The quality gate run on an hour before it is registered.

The Great Expectations suite per table is the next milestone (issue "Data-quality gate"); until
it lands the gate records that no expectations ran, and sealing proceeds. The seal job already
calls it at the right step (after reconciliation, before registration) with the hour's data,
so the gate can block registration without any change to the sealing protocol.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from tidemark.config import TableConfig
from tidemark.hours import Hour

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


@dataclass(frozen=True)
class QualityOutcome:
    status: str  # passed | not_evaluated
    policy: str
    failures: tuple[str, ...] = field(default_factory=tuple)

    @property
    def blocks(self) -> bool:
        return bool(self.failures) and self.policy == "block"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def gate(config: TableConfig, hour: Hour, frame: DataFrame | None) -> QualityOutcome:
    """Validate an hour's rows; no suite is evaluated yet (see the module docstring)."""
    return QualityOutcome(status="not_evaluated", policy=config.quality.policy)
