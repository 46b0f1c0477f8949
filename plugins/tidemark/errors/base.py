"""The root of tidemark's named errors: every one says what stopped, where, and the way out."""

from __future__ import annotations


class TidemarkError(Exception):
    """Base of every error tidemark raises on purpose."""
