"""Secrets never reach a log line, an error message or a record: the one place that knows
what a secret looks like, in client properties and in free text."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from tidemark.java_errors import java_text

MASK = "***"
# Property names whose values are secrets (Kafka client properties, JDBC options).
SECRET_KEYS = (
    "password",
    "secret",
    "jaas",
    "token",
    "key.pem",
    "private",
    "oauthbearer.config",
    "credential",
    "user.info",  # the Schema Registry client's basic.auth.user.info
)
_PATTERNS = (
    re.compile(r"(://[^/:@\s]+:)[^@\s]+(@)"),  # user:password@host in a URL
    re.compile(r"((?:password|passwd|pwd|secret|token|clientSecret)\s*[=:]\s*\"?)[^&;,\s\"]+", re.IGNORECASE),
)


def masked(properties: Mapping[str, Any]) -> dict[str, Any]:
    """Properties safe to log: values of secret-looking keys replaced, secrets inside the
    other values (a URL with credentials) masked."""
    return {
        k: MASK if any(s in k.lower() for s in SECRET_KEYS) else (mask_text(v) if isinstance(v, str) else v)
        for k, v in properties.items()
    }


def mask_text(text: str) -> str:
    """Free text (an error message, a URL) with credentials masked."""
    for pattern in _PATTERNS:
        text = pattern.sub(rf"\g<1>{MASK}" + (r"\g<2>" if pattern.groups == 2 else ""), text)
    return text


def exception_line(exc: BaseException) -> str:
    """The cause in one line: the Java exception for Py4J errors (their own first line only
    says "An error occurred while calling o70.load"); passwords in URLs masked."""
    text = mask_text(java_text(exc))
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__
