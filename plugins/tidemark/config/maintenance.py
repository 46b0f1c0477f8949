"""The maintenance sections of a table YAML: ``retention:`` (how long sealed hours are kept)
and ``compaction:`` (when an hour's files are merged back).

Retention unset (the default), every hour is kept forever. With ``retention.hours: 90d`` the
maintenance DAG drops each hour whose end is more than 90 days before its run's data interval
end: unregistered, recorded in the journal and the audit log, its files deleted once
``output.version_retention`` has passed (``tidemark.retention``); ``retention.dirty`` and
``retention.late`` do the same for the dirty records and the late side table
(``tidemark.side_retention``). Compaction: an hour that
amendments left in more files than its bytes need, and either more than
``max_files_per_hour`` of them or smaller on average than ``min_file_fraction`` of
``output.target_file_size``, is written again as one new version (``seal.recompact``)."""

from __future__ import annotations

import math
from datetime import timedelta

from pydantic import BaseModel, ConfigDict, Field

from tidemark.durations import Duration

MIN_HOURS_RETENTION = timedelta(hours=2)  # a typo such as "90m" for "90d" must not empty a table


class RetentionConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # sealed hours ending more than this before the maintenance run's data interval end are
    # dropped whole; None: kept forever
    hours: Duration | None = None
    # the dirty records of batches committed more than this before it (tidemark.side_retention)
    dirty: Duration | None = None
    # the late side table's hours ending more than this before it (late_policy side_table)
    late: Duration | None = None


class CompactionConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    max_files_per_hour: int = Field(default=8, ge=1)
    min_file_fraction: float = Field(default=0.5, gt=0, le=1)

    def due(self, sizes: list[int], target: int) -> bool:
        """Whether files of ``sizes`` bytes should be merged back into files of ``target``:
        more of them than their bytes need, and either more than ``max_files_per_hour`` or
        smaller on average than ``min_file_fraction`` of the target (an hour's, or a Delta or
        Iceberg snapshot's current files)."""
        if len(sizes) < 2:
            return False
        needed = max(1, math.ceil(sum(sizes) / target))
        small = sum(sizes) / len(sizes) < self.min_file_fraction * target
        return len(sizes) > needed and (len(sizes) > self.max_files_per_hour or small)


def retention_problems(retention: RetentionConfig, late_policy: str) -> list[str]:
    """What is wrong with the section, one line per problem, each naming its key."""
    problems = [
        f"retention.{key}: {value} is shorter than {MIN_HOURS_RETENTION}: data would be dropped "
        "as soon as it lands (did you mean days, e.g. '90d'?)"
        for key, value in (("hours", retention.hours), ("dirty", retention.dirty), ("late", retention.late))
        if value is not None and value < MIN_HOURS_RETENTION
    ]
    if retention.late is not None and late_policy != "side_table":
        problems.append(
            f"retention.late: the late side table is late_policy side_table's; with {late_policy} "
            "late rows are folded into their hours, which retention.hours drops"
        )
    return problems
