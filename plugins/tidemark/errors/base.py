"""The root of tidemark's named errors: every one says what stopped, where, and the way out."""

from __future__ import annotations


class TidemarkError(Exception):
    """Base of every error tidemark raises on purpose. ``retryable``: whether a retry of the
    same task can end otherwise (a broker or metastore back, a lock freed); False for what only
    a person changes (a config, a decision, a schema): the task then fails without retries."""

    retryable: bool = True
