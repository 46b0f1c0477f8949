"""Named exceptions. Each carries the context a data engineer needs to act: the table, the
file or key, the partition and offsets involved. Messages never include secrets."""

from __future__ import annotations


class TidemarkError(Exception):
    """Base of every error tidemark raises on purpose."""


class ConfigError(TidemarkError):
    """A table YAML or an environment setting is invalid.

    ``problems`` lists one ``"key: what was expected"`` line per problem, so a user fixes every
    mistake in one round instead of one per run.
    """

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"{source}: invalid configuration:\n{lines}")


class ServiceError(TidemarkError):
    """A local service (broker, Airflow) failed to start, answer or stop."""
