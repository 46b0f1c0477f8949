"""Writer schemas of framed topics: the Schema Registry (Confluent's REST API, through
confluent-kafka's own client), or one schema file for topics without framing.

A schema id the registry does not know is the record's fault (dirty ``unknown_schema_id``):
the registry says so with its own error code (40403; 40401/40402 for a subject or version).
Everything else is nobody's record's fault: a 404 without those codes (a wrong URL, a proxy's
page), a registry that refuses, hangs or fails raises
:class:`~tidemark.errors.SchemaRegistryUnavailableError` and the batch fails before its commit,
so its retry reads the same offsets. Every request has a timeout and is retried with backoff
(``DEFAULT_CLIENT``, each overridable in ``source.schema_registry.properties``): a registry that
accepts connections and never answers fails the task in about 35 s, never hangs it. Schemas are
immutable per id, so each task caches them.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from tidemark.errors import SchemaRegistryUnavailableError
from tidemark.ingest.kafka import resolve_env
from tidemark.masking import mask_text

log = logging.getLogger(__name__)

# The client's own defaults wait forever on a registry that never answers (no timeout).
# 3 tries of 10 s with 1 s, 2 s backoff (jittered): a hung registry costs a task ~33 s at most.
DEFAULT_CLIENT = {"timeout": 10, "max.retries": 2, "retries.wait.ms": 1000, "retries.max.wait.ms": 5000}
# The registry's own "not found" codes: schema id, subject, version (Confluent's REST API)
NOT_FOUND_CODES = {40401, 40402, 40403}


class UnknownSchemaIdError(LookupError):
    """The registry answered that it has no schema of this id."""


@dataclass(frozen=True)
class SchemaReference:
    """A schema's reference to another subject's version: for Protobuf, an imported file
    (``name`` is the import's path, as the serializers register it)."""

    name: str
    subject: str
    version: int


@dataclass(frozen=True)
class RegisteredSchema:
    schema_id: int
    schema_type: str  # AVRO | PROTOBUF | JSON
    text: str
    subject: str = ""
    version: int = 0
    references: tuple[SchemaReference, ...] = ()


class WriterSchemas(Protocol):
    def schema(self, schema_id: int | None) -> RegisteredSchema:
        """The writer schema of ``schema_id`` (None: the topic is not framed)."""
        ...

    def imports(self, schema: RegisteredSchema) -> dict[str, str]:
        """Every schema ``schema`` references, directly or not: import name -> text."""
        ...


class SchemaFile:
    """The one writer schema of a topic without framing (``source.writer_schema``)."""

    def __init__(self, text: str, schema_type: str = "AVRO") -> None:
        self._schema = RegisteredSchema(-1, schema_type, text)

    def schema(self, schema_id: int | None) -> RegisteredSchema:
        return self._schema

    def imports(self, schema: RegisteredSchema) -> dict[str, str]:
        return {}


class SchemaRegistry:
    """A table's registry: ``properties`` are the client's (``url``, ``basic.auth.user.info``,
    ``ssl.ca.location``, ...), ``${VAR}`` resolved from the environment where it is used."""

    def __init__(self, table: str, properties: Mapping[str, str], *, serialized: bool = False) -> None:
        self.table = table
        # Protobuf: ask for the serialized FileDescriptorProto (a registry that stores .proto
        # text converts it), which the runtime loads without a .proto parser
        self.fmt = "serialized" if serialized else None
        self.properties = resolve_env(properties, "source.schema_registry")
        self.url = mask_text(self.properties.get("url", ""))
        self._client: Any = None
        self._cache: dict[int, RegisteredSchema] = {}
        self._versions: dict[tuple[str, int], RegisteredSchema] = {}

    def _registry(self) -> Any:
        if self._client is None:
            from confluent_kafka.schema_registry import SchemaRegistryClient

            conf: dict[str, Any] = {**DEFAULT_CLIENT, **{k: _typed(v) for k, v in self.properties.items()}}
            if "basic.auth.user.info" in conf:
                conf.setdefault("basic.auth.credentials.source", "USER_INFO")
            self._client = SchemaRegistryClient(conf)
        return self._client

    def schema(self, schema_id: int | None) -> RegisteredSchema:
        if schema_id is None:
            raise UnknownSchemaIdError("a framed topic's record carries a schema id")
        cached = self._cache.get(schema_id)
        if cached is None:
            with self._answers(f"schema id {schema_id}"):
                found = self._registry().get_schema(schema_id, fmt=self.fmt)
            cached = self._cache[schema_id] = RegisteredSchema(
                schema_id, found.schema_type or "AVRO", found.schema_str, references=_references(found)
            )
            log.info("%s: writer schema %s (%s) from %s", self.table, schema_id, cached.schema_type, self.url)
        return cached

    def latest(self, subject: str) -> RegisteredSchema:
        """The subject's latest version (``tidemark tables validate`` / ``init``)."""
        return self.version(subject, "latest")

    def version(self, subject: str, version: int | str) -> RegisteredSchema:
        with self._answers(f"subject {subject} version {version}"):
            found = self._registry().get_version(subject, version, fmt=self.fmt)
        return RegisteredSchema(
            found.schema_id,
            found.schema.schema_type or "AVRO",
            found.schema.schema_str,
            subject,
            found.version,
            _references(found.schema),
        )

    def imports(self, schema: RegisteredSchema) -> dict[str, str]:
        """The referenced versions, depth first (versions are immutable: cached per task)."""
        found: dict[str, str] = {}
        pending = list(schema.references)
        while pending:
            reference = pending.pop()
            if reference.name in found:
                continue
            key = (reference.subject, reference.version)
            referenced = self._versions.get(key)
            if referenced is None:
                referenced = self._versions[key] = self.version(reference.subject, reference.version)
            found[reference.name] = referenced.text
            pending.extend(referenced.references)
        return found

    def versions(self, subject: str) -> list[RegisteredSchema]:
        """Every version of the subject, oldest first (``tidemark schema``)."""
        with self._answers(f"subject {subject}"):
            numbers = self._registry().get_versions(subject)
        return [self.version(subject, n) for n in numbers]

    @contextlib.contextmanager
    def _answers(self, what: str) -> Iterator[None]:
        """The registry's own not-found codes are the record's or the user's (unknown id or
        subject); every other failure, a bare 404 included, is the registry's and fails the job."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            yield
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404 and exc.error_code in NOT_FOUND_CODES:
                raise UnknownSchemaIdError(f"{what}: {exc.error_message}") from None
            raise SchemaRegistryUnavailableError(
                self.table, self.url, mask_text(f"{what}: HTTP {exc.http_status_code} {exc.error_message}")
            ) from None
        except (OSError, ValueError, RuntimeError) as exc:  # connection refused, timeouts, TLS
            raise SchemaRegistryUnavailableError(
                self.table, self.url, mask_text(f"{what}: {type(exc).__name__}: {exc}")
            ) from None
        except Exception as exc:  # httpx's transport errors are not OSErrors
            if type(exc).__module__.split(".")[0] in {"httpx", "httpx2", "httpcore", "ssl"}:
                raise SchemaRegistryUnavailableError(
                    self.table, self.url, mask_text(f"{what}: {type(exc).__name__}: {exc}")
                ) from None
            raise


def _references(schema: Any) -> tuple[SchemaReference, ...]:
    return tuple(
        SchemaReference(r.name, r.subject, int(r.version))
        for r in (getattr(schema, "references", None) or [])
    )


def _typed(value: str) -> Any:
    """YAML carries strings; the client wants numbers for its timeouts and retries."""
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def writer_schemas(
    table: str, registry: Mapping[str, str], writer_schema: str, *, serialized: bool = False
) -> WriterSchemas:
    """The source of a framed table's writer schemas: its registry, or its schema file."""
    if registry:
        return SchemaRegistry(table, registry, serialized=serialized)
    return SchemaFile(writer_schema)


MARKER = "SchemaRegistryUnavailableError: "


@contextlib.contextmanager
def registry_failures(table: str) -> Iterator[None]:
    """A registry failure inside a Spark task reaches the driver as Spark's exception around
    the task's text: raise it as the named error again, so the job fails with it."""
    try:
        yield
    except SchemaRegistryUnavailableError:
        raise
    except Exception as exc:
        text = str(exc)
        at = text.find(MARKER)
        if at < 0:
            raise
        line = text[at + len(MARKER) :].splitlines()[0]
        raise SchemaRegistryUnavailableError.relayed(table, line) from exc
