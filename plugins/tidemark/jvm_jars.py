"""The JVM artifacts of jvm/pom.xml, resolved from Maven Central by ``make jvm``
(scripts/ensure_jvm.sh) into a cache outside the repository: one directory of jars per
profile (``kafka``: the Apache Kafka broker; ``s3a``: hadoop-aws and its AWS SDK).

The cache is ``$TIDEMARK_JVM_CACHE``, else ``$XDG_CACHE_HOME/tidemark/jvm``, else
``~/.cache/tidemark/jvm``; ``<cache>/<profile>`` points at the profile's current jars.
"""

from __future__ import annotations

import os
from pathlib import Path

from tidemark.errors import ServiceError


def jvm_cache() -> Path:
    configured = os.environ.get("TIDEMARK_JVM_CACHE")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tidemark" / "jvm"


def profile_jars(profile: str) -> list[str]:
    """The jars of a profile (sorted), or [] when ``make jvm`` has not fetched it."""
    directory = jvm_cache() / profile
    if not (directory / ".complete").is_file():
        return []
    return sorted(str(p) for p in directory.glob("*.jar"))


def require_jars(profile: str) -> list[str]:
    """The jars of a profile, or a ServiceError saying how to fetch them."""
    jars = profile_jars(profile)
    if not jars:
        raise ServiceError(
            f"the '{profile}' JVM artifacts are not in {jvm_cache()}: run `make jvm` "
            "(Maven Central, once; jvm/pom.xml pins them)"
        )
    return jars
