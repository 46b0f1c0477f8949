"""The ``retention:`` section of a table YAML: how long sealed hours are kept.

Unset (the default), every hour is kept forever, as before. With ``retention.hours: 90d`` the
maintenance DAG drops each hour whose end is more than 90 days before its run's data interval
end: unregistered, recorded in the journal and the audit log, its files deleted once
``output.version_retention`` has passed (``tidemark.seal.retention``)."""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel, ConfigDict

from tidemark.durations import Duration

MIN_HOURS_RETENTION = timedelta(hours=2)  # a typo such as "90m" for "90d" must not empty a table


class RetentionConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # sealed hours ending more than this before the maintenance run's data interval end are
    # dropped whole; None: kept forever
    hours: Duration | None = None


def retention_problems(retention: RetentionConfig) -> list[str]:
    """What is wrong with the section, one line per problem, each naming its key."""
    problems = []
    if retention.hours is not None and retention.hours < MIN_HOURS_RETENTION:
        problems.append(
            f"retention.hours: {retention.hours} is shorter than {MIN_HOURS_RETENTION}: hours would be "
            "dropped as soon as they seal (did you mean days, e.g. '90d'?)"
        )
    return problems
