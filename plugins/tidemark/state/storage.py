"""Where state records live, and the three record operations the protocol needs.

The commit log, the partition journal and the table lock are small JSON records that must be
*create-only* (the second writer of a record loses cleanly) and never seen half-written. Two
backends give that:

- ``LocalStorage`` (paths and ``file:`` URIs, the default): temp file + ``os.link``, which
  fails if the target exists.
- ``HadoopStorage`` (``hdfs://``, ``viewfs://``, and any path when ``TIDEMARK_STORAGE=hadoop``):
  the Hadoop FileSystem API the data is written with, through the JVM (a Spark session's, or a
  bare Py4J gateway outside Spark jobs). Temp file, then ``FileContext.rename`` with
  ``Rename.NONE``, which HDFS's NameNode refuses atomically when the target exists.

- ``S3Storage`` (``s3://``, and ``s3a://`` for the same bucket): no rename at all (an S3
  rename is a copy and a delete). A record is one conditional PUT, ``If-None-Match: *``,
  which the store refuses when the key exists (boto3; endpoint and credentials from the
  usual ``AWS_*`` environment, never logged). S3 PUTs are atomic: readers see the whole
  record or none.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import posixpath
import uuid
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from tidemark.errors import ConditionalWriteUnsupportedError, StorageError
from tidemark.java_errors import java_class
from tidemark.lazy_session import spark_context

log = logging.getLogger(__name__)

LOCAL_SCHEMES = ("", "file")
S3_SCHEMES = ("s3", "s3a")
# conditional PUT refused: the key exists (412), or a concurrent conditional write won (409)
_LOST_RACE = ("PreconditionFailed", "ConditionalRequestConflict")


class Location:
    """A path or URI of the state store, joined with ``/`` like ``pathlib.Path``.

    ``pathlib`` collapses ``hdfs://nn/x`` to ``hdfs:/nn/x``; this keeps the URI intact.
    """

    __slots__ = ("uri",)
    uri: str

    def __init__(self, uri: str | Path | Location) -> None:
        text = uri.uri if isinstance(uri, Location) else str(uri)
        self.uri = text.rstrip("/") if len(text) > 1 else text

    def __truediv__(self, part: str) -> Location:
        return Location(f"{self.uri}/{part}")

    @property
    def name(self) -> str:
        return posixpath.basename(self.uri)

    @property
    def parent(self) -> Location:
        return Location(posixpath.dirname(self.uri))

    @property
    def scheme(self) -> str:
        return urlparse(self.uri).scheme if "://" in self.uri or self.uri.startswith("file:") else ""

    def local_path(self) -> Path:
        return Path(urlparse(self.uri).path) if self.scheme == "file" else Path(self.uri)

    def __str__(self) -> str:
        return self.uri

    def __repr__(self) -> str:
        return f"Location({self.uri!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Location) and other.uri == self.uri

    def __hash__(self) -> int:
        return hash(self.uri)


class Storage(ABC):
    """Record operations on one kind of filesystem."""

    name: str

    @abstractmethod
    def read(self, location: Location) -> bytes | None:
        """The record's bytes, or None if it does not exist."""

    @abstractmethod
    def create_only(self, location: Location, data: bytes) -> bool:
        """Write the record whole if it does not exist; False if somebody else did first."""

    @abstractmethod
    def replace(self, location: Location, data: bytes) -> None:
        """Write the record whole, replacing any previous version (derived, rebuildable data)."""

    @abstractmethod
    def delete(self, location: Location) -> None:
        """Remove the record if it exists."""


class LocalStorage(Storage):
    name = "local"

    def read(self, location: Location) -> bytes | None:
        try:
            return location.local_path().read_bytes()
        except FileNotFoundError:
            return None

    @staticmethod
    def _staged(location: Location, data: bytes) -> tuple[Path, Path]:
        """(target, a temp file beside it holding ``data``): readers never see a partial file."""
        path = location.local_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        tmp.write_bytes(data)
        return path, tmp

    def create_only(self, location: Location, data: bytes) -> bool:
        path, tmp = self._staged(location, data)
        try:  # link() fails if the target exists: atomic on POSIX
            os.link(tmp, path)
        except FileExistsError:
            return False
        finally:
            tmp.unlink(missing_ok=True)
        return True

    def replace(self, location: Location, data: bytes) -> None:
        path, tmp = self._staged(location, data)
        os.replace(tmp, path)

    def delete(self, location: Location) -> None:
        location.local_path().unlink(missing_ok=True)


class HadoopStorage(Storage):
    """The Hadoop FileSystem API through Py4J: the same client and configuration as the data."""

    name = "hadoop"

    def __init__(self, jvm: Any, hadoop_conf: Any) -> None:
        self.jvm = jvm
        self.conf = hadoop_conf

    @classmethod
    def from_spark_or_gateway(cls) -> HadoopStorage:
        """Use the active Spark session's JVM (a job's lazy session started for it); outside
        Spark jobs, start a bare gateway (~2 s)."""
        context = spark_context()
        if context is not None:
            jsc = context._jsc
            assert jsc is not None
            return cls(context._jvm, jsc.hadoopConfiguration())
        from pyspark.java_gateway import launch_gateway

        gateway = launch_gateway()
        log.info("state store: started a JVM gateway for the Hadoop FileSystem API")
        return cls(gateway.jvm, gateway.jvm.org.apache.hadoop.conf.Configuration())

    def _path(self, location: Location) -> Any:
        uri = location.uri if location.scheme else f"file://{os.path.abspath(location.uri)}"
        return self.jvm.org.apache.hadoop.fs.Path(uri)

    def _fs(self, path: Any) -> Any:
        return path.getFileSystem(self.conf)

    def read(self, location: Location) -> bytes | None:
        from py4j.protocol import Py4JJavaError

        path = self._path(location)
        try:
            stream = self._fs(path).open(path)
        except Py4JJavaError as exc:
            if java_class(exc) == "java.io.FileNotFoundException":
                return None
            raise
        try:
            return bytes(self.jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
        except Py4JJavaError as exc:
            if java_class(exc) != "org.apache.hadoop.fs.ChecksumException":
                raise
            # Hadoop's local checksummed file system renames a record's .crc apart from the
            # record: a lost create-only race can leave another writer's checksum beside the
            # winner's whole record. Read the record itself.
            log.warning("state record %s: its checksum file disagrees; reading the record itself", location)
            return self._read_raw(path)
        finally:
            stream.close()

    def _read_raw(self, path: Any) -> bytes:
        raw = self._fs(path).getRawFileSystem()
        stream = raw.open(path)
        try:
            return bytes(self.jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
        finally:
            stream.close()

    def _staged(self, location: Location, data: bytes) -> tuple[Any, Any]:
        """(target, a temp file beside it holding ``data``), as Hadoop paths."""
        path = self._path(location)
        tmp = self.jvm.org.apache.hadoop.fs.Path(
            path.getParent(), f".{path.getName()}.{uuid.uuid4().hex}.tmp"
        )
        out = self._fs(tmp).create(tmp, True)
        try:
            out.write(bytearray(data))
        finally:
            out.close()
        return path, tmp

    def _rename(self, tmp: Any, path: Any, option: str) -> None:
        """``FileContext.rename`` with one ``Options.Rename`` (NONE refuses an existing target).
        Py4J does not spread Java varargs, so the option goes in a one-element array."""
        rename = getattr(self.jvm.org.apache.hadoop.fs.Options.Rename, option)
        options = self.jvm.java.lang.reflect.Array.newInstance(rename.getClass(), 1)
        options[0] = rename
        context = self.jvm.org.apache.hadoop.fs.FileContext.getFileContext(path.toUri(), self.conf)
        context.rename(tmp, path, options)

    def create_only(self, location: Location, data: bytes) -> bool:
        from py4j.protocol import Py4JJavaError

        if location.scheme in LOCAL_SCHEMES:
            # Hadoop's local file system renames a record, then its checksum, each checked
            # then moved: a writer that loses the race between the two can leave its bytes
            # under the winner's name (a clean-clone CI run caught it). HDFS renames
            # atomically; on local disk the OS's link is the create-only primitive.
            return _LOCAL.create_only(location, data)
        path, tmp = self._staged(location, data)
        try:
            self._rename(tmp, path, "NONE")
        except Py4JJavaError as exc:
            self._fs(tmp).delete(tmp, False)
            if java_class(exc) == "org.apache.hadoop.fs.FileAlreadyExistsException":
                return False
            raise
        return True

    def replace(self, location: Location, data: bytes) -> None:
        path, tmp = self._staged(location, data)
        self._rename(tmp, path, "OVERWRITE")

    def delete(self, location: Location) -> None:
        path = self._path(location)
        self._fs(path).delete(path, False)


class S3Storage(Storage):
    """Records as objects; create-only through a conditional PUT (``If-None-Match: *``).

    A store that ignores the condition would let two writers both "create" one record (two
    commits of one batch), silently. So before the first create in a bucket, each process
    probes it once: a throwaway key (a hidden ``_tidemark_probes`` folder beside the record)
    created twice must be refused the second time, else ``ConditionalWriteUnsupportedError``.
    """

    name = "s3"

    def __init__(self, client: Any) -> None:
        self.client = client
        self._honoured: set[str] = set()  # buckets probed in this process

    @staticmethod
    def _key(location: Location) -> tuple[str, str]:
        parsed = urlparse(location.uri)
        return parsed.netloc, parsed.path.lstrip("/")

    def _code(self, exc: Exception) -> str:
        return str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))

    def read(self, location: Location) -> bytes | None:
        bucket, key = self._key(location)
        try:
            response = self.client.get_object(Bucket=bucket, Key=key)
        except self.client.exceptions.NoSuchKey:
            return None
        return bytes(response["Body"].read())

    def require_conditional(self, owner: str, location: Location) -> None:
        """Refuse a bucket where a second create-only PUT of one key succeeds (see the class)."""
        bucket, key = self._key(location)
        if bucket in self._honoured:
            return
        parent = posixpath.dirname(key.rstrip("/"))
        probe = Location(f"s3://{bucket}/{parent + '/' if parent else ''}_tidemark_probes/{uuid.uuid4().hex}")
        try:
            first = self._put_if_absent(probe, b"1")
            second = self._put_if_absent(probe, b"2")
        finally:
            self.delete(probe)
        if not first or second:
            seen = "the first create was refused" if not first else "the second create succeeded"
            raise ConditionalWriteUnsupportedError(owner, location.uri, seen)
        self._honoured.add(bucket)
        log.info("%s: s3://%s honours conditional writes (probed)", owner, bucket)

    def create_only(self, location: Location, data: bytes) -> bool:
        self.require_conditional(f"state record {location}", location)
        return self._put_if_absent(location, data)

    def _put_if_absent(self, location: Location, data: bytes) -> bool:
        from botocore.exceptions import ClientError

        bucket, key = self._key(location)
        try:
            self.client.put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
        except ClientError as exc:
            if self._code(exc) not in _LOST_RACE:
                raise StorageError(f"state record {location}: {self._code(exc) or exc}") from exc
            retried = int(exc.response.get("ResponseMetadata", {}).get("RetryAttempts", 0))
            if retried and self.read(location) == data:
                # boto3 retried a PUT whose response was lost: the first one wrote it
                log.info("state record %s: written by this call's first attempt (response lost)", location)
                return True
            return False
        return True

    def replace(self, location: Location, data: bytes) -> None:
        bucket, key = self._key(location)
        self.client.put_object(Bucket=bucket, Key=key, Body=data)

    def delete(self, location: Location) -> None:
        bucket, key = self._key(location)
        self.client.delete_object(Bucket=bucket, Key=key)


_LOCAL = LocalStorage()


def require_conditional_create(owner: str, uri: str) -> None:
    """Refuse (``ConditionalWriteUnsupportedError``) an S3 store where a second create-only
    PUT of one key succeeds (probed once per process and bucket, see ``S3Storage``); other
    schemes have their own atomic create."""
    if Location(uri).scheme in S3_SCHEMES:
        _s3_storage().require_conditional(owner, Location(uri.rstrip("/")))


def storage_for(location: Location) -> Storage:
    """The backend of ``location``: local paths use the OS unless ``TIDEMARK_STORAGE=hadoop``."""
    scheme = location.scheme
    if scheme in S3_SCHEMES:
        return _s3_storage()
    if scheme in LOCAL_SCHEMES and os.environ.get("TIDEMARK_STORAGE", "local") != "hadoop":
        return _LOCAL
    return _hadoop_storage()


@functools.cache
def _s3_storage() -> S3Storage:
    import boto3

    # AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION: boto3 reads them
    return S3Storage(boto3.client("s3"))


@functools.cache
def _hadoop_storage() -> HadoopStorage:
    return HadoopStorage.from_spark_or_gateway()


def _dumps(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, indent=1, sort_keys=True, default=str).encode()


def create_only(location: Location | Path, payload: dict[str, Any]) -> bool:
    """Write the JSON record only if it does not exist; False if somebody else did first."""
    loc = Location(location)
    return storage_for(loc).create_only(loc, _dumps(payload))


def replace_atomically(location: Location | Path, payload: dict[str, Any]) -> None:
    """Write the JSON record whole or not at all; for derived, rebuildable data."""
    loc = Location(location)
    storage_for(loc).replace(loc, _dumps(payload))


def read_json(location: Location | Path) -> dict[str, Any] | None:
    """A JSON record, or None if it does not exist."""
    loc = Location(location)
    data = storage_for(loc).read(loc)
    return None if data is None else dict(json.loads(data))


def delete(location: Location | Path) -> None:
    loc = Location(location)
    storage_for(loc).delete(loc)
